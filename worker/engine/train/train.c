/* The training loop: sample, forward, backward (with gradient accumulation), all-reduce (a
 * world of one here), clip, AdamW, evaluate, checkpoint, report. */
#include "train.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <float.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "../../../common/fs.h"
#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../core/nf4.h"
#include "../core/pool.h"
#include "../core/rng.h"
#include "../optim/loss_scale.h"
#include "../optim/muon.h"
#include "../parallel/zero.h"
#include "bpe.h"
#include "chat.h"
#include "checkpoint.h"
#include "gguf.h"
#include "hf.h"
#include "choices.h"
#include "data.h"

#ifndef COLO_HAVE_NCCL
#define COLO_HAVE_NCCL 0
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the reference dump: what the PyTorch test compares against ---- */

typedef struct {
  colo_st_tensor_t *t;
  char **names;
  float **bufs;
  size_t n, cap;
} dump_t;

static void dump_add(dump_t *d, const char *name, const float *data, int d0, int d1) {
  if (d->n == d->cap) {
    d->cap = d->cap ? d->cap * 2 : 64;
    d->t = realloc(d->t, d->cap * sizeof *d->t);
    d->names = realloc(d->names, d->cap * sizeof *d->names);
    d->bufs = realloc(d->bufs, d->cap * sizeof *d->bufs);
  }
  size_t numel = (size_t)d0 * (d1 ? (size_t)d1 : 1);
  d->names[d->n] = strdup(name);
  d->bufs[d->n] = malloc(numel * sizeof(float));
  memcpy(d->bufs[d->n], data, numel * sizeof(float));
  d->t[d->n] = (colo_st_tensor_t){d->names[d->n], d->bufs[d->n], d1 ? 2 : 1, {d0, d1}, numel};
  d->n++;
}

/* host: the model's buffers when they are in device memory (NULL on the CPU backend) */
static void dump_model(dump_t *d, const char *prefix, colo_gpt_t *m, const float *base,
                       const colo_backend_t *be, float *host) {
  size_t nt;
  const colo_param_t *tab = colo_gpt_params_table(m, &nt);
  if (be->device) {
    be->to_host(host, base, colo_gpt_num_params(m) * sizeof(float));
    base = host;
  }
  for (size_t i = 0; i < nt; i++) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", prefix, tab[i].name);
    dump_add(d, name, base + tab[i].offset, tab[i].shape[0], tab[i].shape[1]);
  }
}

/* the adapters' tensors (LoRA runs), from the backend's memory */
static void dump_lora(dump_t *d, const char *prefix, colo_lora_t *l, const float *base,
                      const colo_backend_t *be) {
  size_t nt, n = colo_lora_numel(l);
  const colo_param_t *tab = colo_lora_table(l, &nt);
  float *h = malloc(n * sizeof *h);
  if (!h)
    return;
  be->to_host(h, base, n * sizeof *h);
  for (size_t i = 0; i < nt; i++) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", prefix, tab[i].name);
    dump_add(d, name, h + tab[i].offset, tab[i].shape[0], tab[i].shape[1]);
  }
  free(h);
}

static void dump_free(dump_t *d) {
  for (size_t i = 0; i < d->n; i++) {
    free(d->names[i]);
    free(d->bufs[i]);
  }
  free(d->t);
  free(d->names);
  free(d->bufs);
}

/* ---- evaluation ---- */

/* ---- DPO (train.dpo_beta) ---- */

/* A DPO run's scratch and sums: per token weights, per row log-probabilities */
typedef struct {
  float beta;
  int loss;             /* COLO_DPO_SIGMOID, _HINGE, _IPO, _SIMPO, _ORPO */
  double smooth, gamma; /* the sigmoid and SimPO losses' label smoothing ε; SimPO's margin */
  double rpo;           /* RPO's alpha: its weight on the chosen answer's NLL per token */
  colo_lora_t *ref;     /* the reference's adapters (the run's first); NULL: none */
  float *w;             /* [B·T]: the losses read back, then the backward's weights */
  double *ref_lp, *pol; /* [B]: each row's summed log-probability, the reference's, the model's */
  size_t *idx;          /* [B/2]: the batch's pairs' numbers in their set */
  int *cnt;             /* [B]: each row's targets that count (IPO's means) */
  /* a precomputed reference (train.dpo_precompute; a whole model's run always): each set's
   * table of its pairs' log-probabilities, (chosen, rejected) floats, tab[0] the training set's
   * and tab[1 + k] validation set k's, tab_n their pairs; n_tab 0: the reference's forward at
   * every step instead */
  int n_tab;
  float **tab;
  size_t *tab_n;
  char (*tab_name)[16]; /* "train", "val.K": their names in a checkpoint */
  const char **names;   /* [n_tab]: pointers to them */
} dpo_t;

/* sums over pairs: the loss, the pairs whose chosen answer gains more (z > 0), the margins z, the
 * chosen and the rejected answers' rewards β(π − ρ), and the pairs */
typedef struct {
  double loss, correct, margin, chosen, rejected, pairs;
} dpo_sums_t;

/* each row's log-probability of its targets that count, −Σ of the last forward's losses, summed
 * in order (w: B·T floats of scratch) */
static void row_logps(colo_gpt_t *m, float *w, int B, int T, double *out) {
  colo_gpt_read_losses(m, w);
  for (int r = 0; r < B; r++) {
    double s = 0.0;
    for (int t = 0; t < T; t++)
      s += w[(size_t)r * T + t];
    out[r] = -s;
  }
}

/* SimPO and ORPO have no reference */
static int ref_free(const dpo_t *d) {
  return d->loss == COLO_DPO_SIMPO || d->loss == COLO_DPO_ORPO;
}

int colo_dpo_loss_parse(const char *name) {
  static const char *const names[] = {"sigmoid", "hinge", "ipo", "simpo", "orpo"};
  for (int i = 0; name && i < (int)(sizeof names / sizeof names[0]); i++)
    if (!strcmp(name, names[i]))
      return i;
  return COLO_DPO_SIGMOID;
}

/* each row's targets that count */
static void row_counts(dpo_t *d, const int *tg, int B, int T) {
  for (int r = 0; r < B; r++) {
    int n = 0;
    for (int t = 0; t < T; t++)
      n += tg[(size_t)r * T + t] >= 0;
    d->cnt[r] = n;
  }
}

static double softplus(double x) {
  return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

/* A pair, its chosen row's log-probabilities under the model and the reference and counted
 * targets at pol[0], ref[0], cnt[0], its rejected row's at [1]: the answers' rewards r = β(π − ρ)
 * (IPO's of the mean log-probabilities per counted token), z = r_c − r_r, and the pair's loss of z
 * counted into s (d->loss: −log σ(z), smoothed by ε: (1 − ε)·softplus(−z) + ε·softplus(z); hinge
 * max(0, 1 − z); IPO (z/β − 1/(2β))²). *gc and *gr get the loss's derivatives by each of the chosen
 * row's and the rejected row's token losses (π = −Σ of them): for the sigmoid loss ±β((1 − ε)σ(−z)
 * − εσ(z)), for hinge ±β when z < 1, for IPO ∓2(h − 1/(2β))/n of each row's n counted tokens. */
static void dpo_pair(const dpo_t *d, const double *pol, const double *ref, const int *cnt,
                     dpo_sums_t *s, double *gc, double *gr) {
  /* a precomputed reference is kept in floats: the model's log-probabilities are taken at that
   * precision too, so that the model as it starts is its reference exactly (z = 0) */
  double pc = d->n_tab ? (float)pol[0] : pol[0];
  double pr = d->n_tab ? (float)pol[1] : pol[1];
  double nc = 1.0, nr = 1.0, beta = d->beta;
  if (d->loss == COLO_DPO_IPO || ref_free(d)) {
    nc = cnt[0] > 0 ? cnt[0] : 1;
    nr = cnt[1] > 0 ? cnt[1] : 1;
  }
  double rc = beta * (pc - ref[0]) / nc;
  double rr = beta * (pr - ref[1]) / nr, z = rc - rr, g;
  if (d->loss == COLO_DPO_HINGE) {
    s->loss += z < 1.0 ? 1.0 - z : 0.0;
    g = z < 1.0 ? beta : 0.0;
  } else if (d->loss == COLO_DPO_IPO) {
    double e = z / beta - 1.0 / (2.0 * beta);
    s->loss += e * e;
    g = -2.0 * e; /* by h; h's by a chosen token loss is −1/n_c, by a rejected one +1/n_r */
  } else if (d->loss == COLO_DPO_ORPO) {
    /* ℓ = π/n, the odds e^ℓ/(1 − e^ℓ) (e^ℓ kept below 1: an answer with nothing counted has
     * ℓ = 0); r = log odds_c − log odds_r, d log odds/dℓ = 1/(1 − e^ℓ) */
    double lc = pc / nc, lr = pr / nr, qc = fmin(exp(lc), 1.0 - 1e-12);
    double qr = fmin(exp(lr), 1.0 - 1e-12);
    double r = (lc - log1p(-qc)) - (lr - log1p(-qr)), sg = 1.0 / (1.0 + exp(r));
    s->loss += -lc + beta * softplus(-r);
    g = 0.0; /* the rows' derivatives are not ±g/n: set here */
    *gc = (1.0 + beta * sg / (1.0 - qc)) / nc;
    *gr = -beta * sg / ((1.0 - qr) * nr);
  } else {
    double zs = d->loss == COLO_DPO_SIMPO ? z - d->gamma : z; /* SimPO's margin */
    s->loss += (1.0 - d->smooth) * softplus(-zs) + d->smooth * softplus(zs);
    g = beta * ((1.0 - d->smooth) / (1.0 + exp(zs)) - d->smooth / (1.0 + exp(-zs)));
  }
  if (d->loss != COLO_DPO_ORPO) {
    *gc = g / nc;
    *gr = -g / nr;
  }
  if (d->rpo > 0.0) { /* + α·(−π_c/n_c): each chosen token loss's derivative α/n_c */
    double n = cnt[0] > 0 ? cnt[0] : 1;
    s->loss += d->rpo * (-pc / n);
    *gc += d->rpo / n;
  }
  s->correct += z > 0;
  s->margin += z;
  s->chosen += rc;
  s->rejected += rr;
  s->pairs += 1.0;
}

/* The backward of the last forward's B rows (B/2 pairs, targets tg): their log-probabilities,
 * each pair's loss and derivatives against the reference's log-probabilities ref (counted into
 * s), and the rows' token losses weighted by those derivatives times `scale` */
static void dpo_backward(colo_gpt_t *m, dpo_t *d, const double *ref, const int *tg, int B, int T,
                         double scale, dpo_sums_t *s) {
  row_logps(m, d->w, B, T, d->pol);
  row_counts(d, tg, B, T);
  for (int i = 0; i < B / 2; i++) {
    double gc, gr;
    dpo_pair(d, d->pol + 2 * i, ref + 2 * i, d->cnt + 2 * i, s, &gc, &gr);
    for (int t = 0; t < T; t++) {
      d->w[(size_t)(2 * i) * T + t] = (float)(gc * scale);
      d->w[(size_t)(2 * i + 1) * T + t] = (float)(gr * scale);
    }
  }
  colo_gpt_backward_weighted(m, d->w);
}

/* ---- the pipeline: 1F1B over micro-batches ---- */

typedef struct {
  colo_gpt_t *model;
  colo_comm_t *pp; /* the stages of this data/tensor position; group rank = stage */
  int stage, stages;
  int M, Bm, T;
  size_t nc;      /* floats of a micro-batch boundary tensor, [Bm·T][C] (sp: this rank's rows) */
  float *x_store; /* M boundary inputs kept for the recomputation before each backward */
  float *dy;      /* the gradient received from the next stage */
  /* LoRA: the adapters of this stage's layers; with drop on (a training step), dropout's masks
   * keyed by drop_key and numbered from drop_row0, micro-batch j's rows from j·Bm·T on */
  colo_lora_t *lora;
  int drop;
  uint64_t drop_key, drop_row0;
  /* NEFTune: noise of this magnitude on the first stage's embeddings while drop is on, keyed by
   * noise_key and numbered as the masks are */
  float noise_mag;
  uint64_t noise_key;
  /* DPO (train.dpo_beta) and multiple-choice evaluation, at the last stage: with rows set, each
   * micro-batch's rows' log-probabilities go to rows[j·Bm ...] after its forward; with sums set (a
   * training step), each micro-batch's backward is its rows' token losses weighted by its pairs'
   * loss derivatives (the reference's log-probabilities of the batch's rows in dpo->ref_lp), each
   * pair's loss weighing pair_scale, counted into sums */
  dpo_t *dpo;
  double *rows;
  float *rows_w; /* with rows: scratch of Bm·T floats */
  dpo_sums_t *sums;
  double pair_scale;
} pipe_t;

/* NEFTune's noise is keyed by (seed, step, this) */
#define NEFTUNE_KEY 0x6e656674

/* Moves this stage's rows of `send` to stage `peer` and of `recv` from it, at once (NULL:
 * nothing that way; a peer outside the pipeline: nothing at all). Two neighbours always call it
 * together, one's send matching the other's receive, so tensors larger than the transport's
 * buffers cannot leave both waiting to send. */
static int pipe_xchg(pipe_t *p, int peer, const float *send, float *recv) {
  if (peer < 0 || peer >= p->stages || (!send && !recv))
    return 0;
  size_t cnt = colo_gpt_stage_rows(p->model, p->Bm, p->T);
  int rc = p->pp->ops->sendrecv(p->pp, send, send ? cnt : 0, send ? peer : -1, recv, recv ? cnt : 0,
                                recv ? peer : -1);
  return rc < 0 ? COLO_EIO : 0;
}

/* the boundary input of micro-batch j, kept for its recomputation */
static float *pipe_x(pipe_t *p, int j) {
  return p->x_store + (size_t)j * p->nc;
}

/* LoRA dropout's masks and NEFTune's noise for micro-batch j (none outside training) */
static void pipe_masks(pipe_t *p, int j) {
  uint64_t row0 = p->drop_row0 + (uint64_t)j * (uint64_t)p->Bm * (uint64_t)p->T;
  if (p->lora)
    colo_lora_set_dropout(p->lora, p->drop, p->drop_key, row0);
  colo_gpt_set_noise(p->model, p->drop ? p->noise_mag : 0.0f, p->noise_key, row0);
}

/* micro-batch j's forward on this stage, its input already received */
static int pipe_fwd(pipe_t *p, int j, const int *in, const int *tg, double *loss) {
  const int *ij = in + (size_t)j * p->Bm * p->T, *tj = tg + (size_t)j * p->Bm * p->T;
  pipe_masks(p, j);
  float l = colo_gpt_forward_stage(p->model, ij, pipe_x(p, j), tj, p->Bm, p->T);
  if (colo_gpt_hook_error(p->model) < 0)
    return COLO_EIO;
  if (p->stage == p->stages - 1 && p->rows)
    row_logps(p->model, p->rows_w, p->Bm, p->T, p->rows + (size_t)j * p->Bm);
  else if (p->stage == p->stages - 1 && !p->dpo)
    *loss += l;
  return 0;
}

/* DPO's backward of micro-batch j at the last stage: its forward again (unfused), its pairs'
 * losses and derivatives, the backward of the rows' token losses so weighted */
static int pipe_bwd_dpo(pipe_t *p, int j, const int *ij, const int *tj) {
  colo_gpt_t *m = p->model;
  dpo_t *d = p->dpo;
  int Bm = p->Bm, T = p->T;
  colo_gpt_forward_stage(m, ij, pipe_x(p, j), tj, Bm, T);
  dpo_backward(m, d, d->ref_lp + (size_t)j * Bm, tj, Bm, T, p->pair_scale, p->sums);
  return colo_gpt_hook_error(m) < 0 ? COLO_EIO : 0;
}

/* micro-batch j's backward, the next stage's gradient already in dy: its activations again
 * (bit-identical), then the backward */
static int pipe_bwd(pipe_t *p, int j, const int *in, const int *tg, float scale) {
  colo_gpt_t *m = p->model;
  int last = p->stage == p->stages - 1;
  const int *ij = in + (size_t)j * p->Bm * p->T, *tj = tg + (size_t)j * p->Bm * p->T;
  pipe_masks(p, j); /* the forward's again */
  if (last && p->dpo && p->sums)
    return pipe_bwd_dpo(p, j, ij, tj);
  colo_gpt_forward_stage_train(m, ij, pipe_x(p, j), tj, p->Bm, p->T, scale);
  colo_gpt_backward_stage(m, scale, last ? NULL : p->dy);
  return colo_gpt_hook_error(m) < 0 ? COLO_EIO : 0;
}

/* One batch of M micro-batches through the stages, 1F1B: stage s runs stages − s − 1 forwards
 * to fill the pipeline, then alternates one forward and one backward, then drains. In the
 * steady state a forward's output goes to the next stage as that stage's gradient comes back,
 * and a backward's gradient goes to the previous stage as its next input comes in (Megatron's
 * pairing). The loss (the sum of the micro-batch means, on the last stage) is added to *loss. */
static int pipe_step(pipe_t *p, const int *in, const int *tg, float scale, double *loss) {
  colo_gpt_t *m = p->model;
  int prev = p->stage - 1, next = p->stage + 1;
  int warm = p->stages - p->stage - 1;
  if (warm > p->M)
    warm = p->M;
  int f = 0, b = 0, rc = 0;
  for (; rc == 0 && f < warm; f++) {
    rc = pipe_xchg(p, prev, NULL, pipe_x(p, f));
    rc = rc ? rc : pipe_fwd(p, f, in, tg, loss);
    rc = rc ? rc : pipe_xchg(p, next, colo_gpt_stage_output(m), NULL);
  }
  if (rc == 0 && f < p->M)
    rc = pipe_xchg(p, prev, NULL, pipe_x(p, f));
  while (rc == 0 && f < p->M) {
    rc = pipe_fwd(p, f++, in, tg, loss);
    rc = rc ? rc : pipe_xchg(p, next, colo_gpt_stage_output(m), p->dy);
    rc = rc ? rc : pipe_bwd(p, b++, in, tg, scale);
    rc = rc ? rc : pipe_xchg(p, prev, colo_gpt_stage_input_grad(m), f < p->M ? pipe_x(p, f) : NULL);
  }
  for (; rc == 0 && b < p->M; b++) {
    rc = pipe_xchg(p, next, NULL, p->dy);
    rc = rc ? rc : pipe_bwd(p, b, in, tg, scale);
    rc = rc ? rc : pipe_xchg(p, prev, colo_gpt_stage_input_grad(m), NULL);
  }
  return rc;
}

/* Forward only, for evaluation: the loss sum of the micro-batches (last stage). */
static int pipe_eval(pipe_t *p, const int *in, const int *tg, double *loss) {
  for (int j = 0; j < p->M; j++) {
    int rc = pipe_xchg(p, p->stage - 1, NULL, pipe_x(p, j));
    rc = rc ? rc : pipe_fwd(p, j, in, tg, loss);
    rc = rc ? rc : pipe_xchg(p, p->stage + 1, colo_gpt_stage_output(p->model), NULL);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* all / counted: what turns a mean over all `all` targets of a batch (those that do not count
 * adding 0) into the mean over the `counted` that count; exactly 1 without a loss mask, and 0
 * where none counts (no loss, no gradient) */
static float counted_factor(uint64_t counted, double all) {
  return counted ? (float)(all / (double)counted) : 0.0f;
}

/* The mean loss over every window of the set at multiples of T, once each (batches 0): batch i
 * of the data-parallel group holds windows [i·world·B, (i+1)·world·B), rank r its B from
 * (i·world + r)·B, the last batch what is left. Each rank sums its sequences' means; the group
 * adds them up. No pipeline: a stage's micro-batches need whole batches (validated). */
static float evaluate_whole(colo_gpt_t *m, colo_comm_t *comm, const colo_shard_t *val, int B, int T,
                            int *in, int *tg) {
  size_t W = val->blocks[val->n_files];
  int rank = comm ? colo_comm_rank(comm) : 0, world = comm ? colo_comm_size(comm) : 1;
  double s = 0.0;
  for (size_t first = (size_t)rank * B; first < W; first += (size_t)world * B) {
    int Bk = W - first < (size_t)B ? (int)(W - first) : B;
    for (int b = 0; b < Bk; b++)
      colo_shard_block(val, first + (size_t)b, T, in + (size_t)b * T, tg + (size_t)b * T);
    s += (double)colo_gpt_forward(m, in, tg, Bk, T) * Bk;
  }
  /* comm is the data-parallel group (a tensor-parallel group's ranks ran the same windows) */
  float sum = (float)s;
  if (world > 1 && comm->ops->allreduce_sum(comm, &sum, 1) < 0)
    return NAN;
  return sum / (float)W * counted_factor(colo_eval_counted(val, 0, 0, world, B, T), (double)W * T);
}

/* The mean loss over `batches` fixed batches; with a data-parallel group each rank takes its
 * share of every batch and the means are averaged over the group. NaN when the group fails.
 * batches 0: the whole set (evaluate_whole). */
static float evaluate(colo_gpt_t *m, colo_comm_t *comm, pipe_t *pipe, const colo_shard_t *val,
                      uint64_t seed, int batches, int B, int T, int *in, int *tg) {
  if (batches == 0)
    return evaluate_whole(m, comm, val, B, T, in, tg);
  double s = 0.0;
  int rank = comm ? colo_comm_rank(comm) : 0, world = comm ? colo_comm_size(comm) : 1;
  for (int i = 0; i < batches; i++) {
    colo_sample_eval_batch(val, seed, i, rank, world, B, T, in, tg);
    if (!pipe) {
      s += colo_gpt_forward(m, in, tg, B, T);
      continue;
    }
    double l = 0.0;
    if (pipe_eval(pipe, in, tg, &l) < 0)
      return NAN;
    s += l / pipe->M;
  }
  float mean = (float)(s / batches);
  if (pipe) { /* the last stage has it: sum over the stages */
    if (pipe->pp->ops->allreduce_sum(pipe->pp, &mean, 1) < 0)
      return NAN;
  }
  if (world > 1) {
    if (comm->ops->allreduce_sum(comm, &mean, 1) < 0)
      return NAN;
    mean /= (float)world;
  }
  return mean * counted_factor(colo_eval_counted(val, seed, batches, world, B, T),
                               (double)batches * world * B * T);
}

/* The batch's rows' log-probabilities under the model as it is (its adapters, no dropout or
 * noise) into out: its forward, or through the pipeline's stages with pipe (the last stage's);
 * < 0 when a collective or a parameter gather failed */
static int rows_forward(colo_gpt_t *m, pipe_t *pipe, float *w, const int *in, const int *tg, int B,
                        int T, double *out) {
  if (pipe) {
    double unused = 0.0;
    pipe->rows = out;
    pipe->rows_w = w;
    int rc = pipe_eval(pipe, in, tg, &unused);
    pipe->rows = NULL;
    return rc;
  }
  colo_gpt_forward(m, in, tg, B, T);
  row_logps(m, w, B, T, out);
  return colo_gpt_hook_error(m) < 0 ? COLO_EIO : 0;
}

/* The reference's log-probabilities of the batch's rows (its pairs d->idx): none (SimPO, ORPO),
 * from the table when precomputed, else its forward (through the pipeline's stages with pipe,
 * the last stage's): the model as the run began, the frozen model with the adapters it started
 * with (none: fresh adapters add nothing), with neither dropout nor noise (the caller sets those
 * for the model's forward after this). A failed pipeline's error. */
static int dpo_reference(colo_gpt_t *m, pipe_t *pipe, dpo_t *d, const float *table, const int *in,
                         const int *tg, int B, int T) {
  if (ref_free(d)) { /* SimPO, ORPO: none */
    memset(d->ref_lp, 0, (size_t)B * sizeof *d->ref_lp);
    return 0;
  }
  if (table) {
    for (int b = 0; b < B / 2; b++) {
      d->ref_lp[2 * b] = table[2 * d->idx[b]];
      d->ref_lp[2 * b + 1] = table[2 * d->idx[b] + 1];
    }
    return 0;
  }
  colo_lora_t *mine = colo_gpt_swap_lora(m, d->ref);
  int rc = rows_forward(m, pipe, d->w, in, tg, B, T, d->ref_lp);
  colo_gpt_swap_lora(m, mine);
  return rc;
}

/* One training micro-batch of B/2 pairs (d->idx): the reference's log-probabilities, the model's
 * forward, and its backward with each row's token losses weighted by the loss's derivative (the
 * chosen row's +g·scale, the rejected's −g·scale). The model's forward has the caller's dropout
 * and noise. Returns the micro-batch's mean loss. */
static double dpo_train_micro(colo_gpt_t *m, dpo_t *d, const int *in, const int *tg, int B, int T,
                              float scale, colo_lora_t *lora, uint64_t drop_key, uint64_t row0,
                              float noise_mag, uint64_t noise_key, dpo_sums_t *s) {
  dpo_reference(m, NULL, d, d->n_tab ? d->tab[0] : NULL, in, tg, B, T);
  if (lora)
    colo_lora_set_dropout(lora, 1, drop_key, row0);
  colo_gpt_set_noise(m, noise_mag, noise_key, row0);
  colo_gpt_forward(m, in, tg, B, T);
  double before = s->loss;
  dpo_backward(m, d, d->ref_lp, tg, B, T, scale, s);
  colo_gpt_set_noise(m, 0.0f, 0, 0);
  if (lora)
    colo_lora_set_dropout(lora, 0, 0, 0);
  return (s->loss - before) / (B / 2);
}

/* sums added up over a group (as floats: the means the reports print) */
static int dpo_sums_reduce(colo_comm_t *c, dpo_sums_t *s) {
  float v[6] = {(float)s->loss,   (float)s->correct,  (float)s->margin,
                (float)s->chosen, (float)s->rejected, (float)s->pairs};
  if (c && colo_comm_size(c) > 1 && c->ops->allreduce_sum(c, v, 6) < 0)
    return -1;
  *s = (dpo_sums_t){v[0], v[1], v[2], v[3], v[4], v[5]};
  return 0;
}

/* The mean DPO loss over `batches` evaluation batches of B/2 pairs (colo_pairs_eval_batch; 0:
 * each pair of the set once, the last batch's pairs past the end left out), the group's ranks
 * each taking their share, through the pipeline's stages with pipe (the last stage's sums, added
 * up over the stages), the reference's log-probabilities from `table` (NULL: its forward); the
 * sums in *out. NaN when the group fails. */
static float evaluate_dpo(colo_gpt_t *m, colo_comm_t *comm, pipe_t *pipe, const colo_shard_t *val,
                          dpo_t *d, const float *table, int batches, int B, int T, int *in, int *tg,
                          dpo_sums_t *out) {
  int rank = comm ? colo_comm_rank(comm) : 0, world = comm ? colo_comm_size(comm) : 1, P = B / 2;
  int last = !pipe || pipe->stage == pipe->stages - 1;
  size_t n = val->n_pairs, per = (size_t)world * P;
  int nb = batches > 0 ? batches : (int)((n + per - 1) / per);
  dpo_sums_t s = {0};
  for (int i = 0; i < nb; i++) {
    colo_pairs_eval_batch(val, i, rank, world, P, T, in, tg, d->idx);
    if (dpo_reference(m, pipe, d, table, in, tg, B, T) < 0 ||
        rows_forward(m, pipe, d->w, in, tg, B, T, d->pol) < 0)
      return NAN;
    row_counts(d, tg, B, T);
    for (int b = 0; last && b < P; b++) {
      double gc, gr;
      if (batches > 0 || ((size_t)i * world + rank) * P + b < n)
        dpo_pair(d, d->pol + 2 * b, d->ref_lp + 2 * b, d->cnt + 2 * b, &s, &gc, &gr);
    }
  }
  if ((pipe && dpo_sums_reduce(pipe->pp, &s) < 0) || dpo_sums_reduce(comm, &s) < 0)
    return NAN;
  *out = s;
  return (float)(s.loss / s.pairs);
}

/* DPO's precomputed reference: the log-probabilities of every pair of set s under the model as it
 * is now (neither dropout nor noise) into table (2 floats a pair, chosen then rejected). The
 * group's ranks take batches of B/2 pairs in turn (colo_pairs_eval_batch), each entry written by
 * the rank that computed it, zeros elsewhere, and the tables summed over the group: exact, so any
 * split gives the same floats. With `say`, a line every 30 s. */
static int dpo_precompute(colo_gpt_t *m, colo_comm_t *comm, pipe_t *pipe, dpo_t *d,
                          const colo_shard_t *s, int B, int T, int *in, int *tg, float *table,
                          const char *what, int say, char *err, size_t errlen) {
  int rank = comm ? colo_comm_rank(comm) : 0, world = comm ? colo_comm_size(comm) : 1, P = B / 2;
  int last = !pipe || pipe->stage == pipe->stages - 1;
  size_t n = s->n_pairs, per = (size_t)world * P, nb = (n + per - 1) / per;
  double t0 = now_s(), said = t0;
  memset(table, 0, 2 * n * sizeof *table);
  for (size_t i = 0; i < nb; i++) {
    colo_pairs_eval_batch(s, (int)i, rank, world, P, T, in, tg, d->idx);
    if (rows_forward(m, pipe, d->w, in, tg, B, T, d->ref_lp) < 0)
      return colo_fail(err, errlen, COLO_EIO, "DPO's reference of %s: %s", what,
                       pipe && colo_comm_error(pipe->pp)[0] ? colo_comm_error(pipe->pp)
                       : comm && colo_comm_error(comm)[0]   ? colo_comm_error(comm)
                                                            : "a collective failed");
    for (int b = 0; last && b < P; b++) {
      size_t g = (i * world + (size_t)rank) * P + (size_t)b;
      if (g < n) {
        table[2 * g] = (float)d->ref_lp[2 * b];
        table[2 * g + 1] = (float)d->ref_lp[2 * b + 1];
      }
    }
    if (say && now_s() - said >= 30.0) {
      said = now_s();
      printf("dpo: the reference's log-probabilities of %s: %zu of %zu pairs, %.0f s\n", what,
             (i + 1) * per < n ? (i + 1) * per : n, n, said - t0);
      fflush(stdout);
    }
  }
  if (pipe && pipe->pp->ops->allreduce_sum(pipe->pp, table, 2 * n) < 0) /* the last stage's */
    return colo_fail(err, errlen, COLO_EIO, "DPO's reference of %s: %s", what,
                     colo_comm_error(pipe->pp));
  if (comm && world > 1 && comm->ops->allreduce_sum(comm, table, 2 * n) < 0)
    return colo_fail(err, errlen, COLO_EIO, "DPO's reference of %s: %s", what,
                     colo_comm_error(comm));
  return 0;
}

/* whether the tests planted an overflow at this step (1-based) */
static int planted(const colo_train_config_t *cfg, int step) {
  for (int i = 0; i < cfg->n_plant; i++)
    if (cfg->plant_steps[i] == step)
      return 1;
  return 0;
}

/* The global gradient norm under tensor parallelism (ZeRO 0 and 1): split tensors count on
 * every rank, replicated ones once (a tp-th on each), summed over the group. */
static int tp_grad_norm(const colo_backend_t *be, colo_gpt_t *m, colo_comm_t *tpc, float *norm) {
  size_t nt;
  const colo_param_t *tab = colo_gpt_params_table(m, &nt);
  const float *g = colo_gpt_grads(m);
  double sq = 0.0;
  for (size_t i = 0; i < nt; i++) {
    double s = be->sumsq(g + tab[i].offset, tab[i].numel);
    sq += tab[i].split == COLO_SPLIT_NONE ? s / colo_comm_size(tpc) : s;
  }
  float f = (float)sq;
  int rc = tpc->ops->allreduce_sum(tpc, &f, 1);
  if (rc < 0)
    return rc;
  *norm = sqrtf(f);
  return 0;
}

/* The global gradient norm of a pipeline (ZeRO 0 and 1): each stage sums its tensors (the last
 * stage leaves out its tied copy of the embedding; replicated tensors count a tp-th on each
 * tensor-parallel rank), then the stages and the tensor-parallel group add up. */
static int pp_grad_norm(const colo_backend_t *be, colo_gpt_t *m, colo_comm_t *tpc, colo_comm_t *ppc,
                        float *norm) {
  size_t nt;
  const colo_param_t *tab = colo_gpt_params_table(m, &nt);
  const float *g = colo_gpt_grads(m);
  int tied, iw = colo_gpt_wte_index(m, &tied), tp = tpc ? colo_comm_size(tpc) : 1;
  double sq = 0.0;
  for (size_t i = 0; i < nt; i++) {
    if (tied && (int)i == iw)
      continue;
    double s = be->sumsq(g + tab[i].offset, tab[i].numel);
    sq += tab[i].split == COLO_SPLIT_NONE ? s / tp : s;
  }
  float f = (float)sq;
  if ((tpc && tpc->ops->allreduce_sum(tpc, &f, 1) < 0) || ppc->ops->allreduce_sum(ppc, &f, 1) < 0)
    return COLO_EIO;
  *norm = sqrtf(f);
  return 0;
}

/* Under tensor parallelism the adapters every rank of the group holds whole (a column-parallel
 * product's A, a row-parallel one's B) have a partial gradient on each: the group adds them, all
 * in one all-reduce through rep (backend memory for colo_lora_tp_whole floats), which then holds
 * them summed. */
static int lora_tp_sum(const colo_backend_t *be, colo_lora_t *l, colo_comm_t *tpc, float *rep) {
  size_t nt, k = 0;
  const colo_param_t *tab = colo_lora_table(l, &nt);
  float *g = colo_lora_grads(l);
  for (size_t i = 0; i < nt; k += tab[i].split == COLO_SPLIT_NONE ? tab[i].numel : 0, i++)
    if (tab[i].split == COLO_SPLIT_NONE)
      be->copy(rep + k, g + tab[i].offset, tab[i].numel * sizeof *rep);
  if (tpc->ops->allreduce_sum(tpc, rep, k) < 0)
    return COLO_EIO;
  k = 0;
  for (size_t i = 0; i < nt; k += tab[i].split == COLO_SPLIT_NONE ? tab[i].numel : 0, i++)
    if (tab[i].split == COLO_SPLIT_NONE)
      be->copy(g + tab[i].offset, rep + k, tab[i].numel * sizeof *rep);
  return 0;
}

/* the floats of the adapters every rank of a tensor-parallel group holds whole */
static size_t lora_tp_whole(colo_lora_t *l) {
  size_t nt, n = 0;
  const colo_param_t *tab = colo_lora_table(l, &nt);
  for (size_t i = 0; i < nt; i++)
    n += tab[i].split == COLO_SPLIT_NONE ? tab[i].numel : 0;
  return n;
}

/* The adapters' squared gradient norm on this rank, for the groups to add: all of it, or under
 * tensor parallelism (after lora_tp_sum) the tensors all hold whole counted on the group's first
 * rank alone (rep: them). */
static float lora_sumsq(const colo_backend_t *be, colo_lora_t *l, colo_comm_t *tpc,
                        const float *rep) {
  double sq = be->sumsq(colo_lora_grads(l), colo_lora_numel(l));
  if (tpc && colo_comm_rank(tpc) > 0)
    sq -= be->sumsq(rep, lora_tp_whole(l));
  return sq > 0.0 ? (float)sq : 0.0f;
}

/* s as the inside of a JSON string (quotes, backslashes and control characters escaped; cut to
 * fit out) */
static const char *json_str(char *out, size_t len, const char *s) {
  size_t k = 0;
  for (; *s && k + 7 < len; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      k += (size_t)snprintf(out + k, len - k, "\\%c", ch);
    else if (ch < 0x20)
      k += (size_t)snprintf(out + k, len - k, "\\u%04x", ch);
    else
      out[k++] = (char)ch;
  }
  out[k] = '\0';
  return out;
}

/* A complete checkpoint in the progress stream: its directory, the manifest's sha256 and the
 * bytes of all its files, so that the worker can report it to colod as it is; with the number
 * of the CheckpointJob request it answers (0: none). */
static void report_checkpoint(FILE *progress, int step, const char *dir, long request,
                              float val_loss, float score) {
  if (!progress)
    return;
  char path[1200], js[2500], hex[65] = "";
  uint64_t bytes = 0, total = 0;
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  if (colo_sha256_file(path, hex, &bytes) < 0)
    hex[0] = '\0';
  DIR *dd = opendir(dir);
  struct dirent *e;
  struct stat sb;
  while (dd && (e = readdir(dd))) {
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (e->d_name[0] != '.' && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
      total += (uint64_t)sb.st_size;
  }
  if (dd)
    closedir(dd);
  fprintf(progress,
          "{\"event\":\"checkpoint\",\"step\":%d,\"path\":\"%s\",\"manifest_sha256\":\"%s\","
          "\"bytes\":%llu,\"time_ms\":%lld,\"request\":%ld",
          step, json_str(js, sizeof js, dir), hex, (unsigned long long)total, (long long)wall_ms(),
          request > 0 ? request : 0L);
  if (isfinite(val_loss))
    fprintf(progress, ",\"val_loss\":%.9g", (double)val_loss); /* the float exactly */
  if (isfinite(score))
    fprintf(progress, ",\"score\":%.9g", (double)score);
  fputs("}\n", progress);
  fflush(progress);
}

/* Evaluates at `step` and reports it on stdout and in the progress stream. */
/* The validation sets: val_path alone, or data.val_sources with their weights and names. */
typedef struct {
  colo_shard_t *s;
  int n;
  const double *w; /* NULL: val_path alone */
  const char *const *names;
  /* the multiple-choice sets (data.choice_sets), scored at each evaluation: n_ch of them, and
   * their scratch: tab (a set's sequences' log-probabilities, then their counted tokens), ch_w
   * (B·T token losses), rows (B rows' log-probabilities) */
  colo_choices_t *ch;
  int n_ch;
  float *tab, *ch_w;
  double *rows;
} val_sets_t;

static int val_sets_open(val_sets_t *v, const colo_train_config_t *cfg, int T, char *err,
                         size_t errlen) {
  /* none where only multiple-choice sets are scored (train.steps=0) */
  int n = cfg->n_val > 0 ? cfg->n_val : cfg->val_path && cfg->val_path[0] ? 1 : 0;
  if (!(v->s = calloc((size_t)(n ? n : 1), sizeof *v->s)))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  v->w = cfg->n_val > 0 ? cfg->val_weights : NULL;
  v->names = cfg->n_val > 0 ? cfg->val_names : NULL;
  for (; v->n < n; v->n++) {
    int rc = colo_shard_load(cfg->n_val > 0 ? cfg->val_paths[v->n] : cfg->val_path, &v->s[v->n],
                             err, errlen);
    if (rc == 0 && (rc = colo_shard_windows(&v->s[v->n], T, err, errlen)) < 0)
      colo_shard_free(&v->s[v->n]);
    if (rc < 0)
      return rc;
  }
  if (cfg->n_choice > 0 && !(v->ch = calloc((size_t)cfg->n_choice, sizeof *v->ch)))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  size_t most = 0;
  for (; v->n_ch < cfg->n_choice; v->n_ch++) {
    int rc = colo_choices_open(cfg->choice_paths[v->n_ch], &v->ch[v->n_ch], err, errlen);
    if (rc < 0)
      return rc;
    colo_choices_limit(&v->ch[v->n_ch], cfg->choice_questions);
    most = v->ch[v->n_ch].n_seq > most ? v->ch[v->n_ch].n_seq : most;
  }
  size_t BT = (size_t)cfg->batch_size * (size_t)T;
  if (v->n_ch &&
      (!(v->tab = malloc(2 * most * sizeof *v->tab)) || !(v->ch_w = malloc(BT * sizeof *v->ch_w)) ||
       !(v->rows = malloc((size_t)cfg->batch_size * sizeof *v->rows))))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the multiple-choice sets");
  return 0;
}

static void val_sets_close(val_sets_t *v) {
  for (int k = 0; k < v->n; k++)
    colo_shard_free(&v->s[k]);
  for (int k = 0; k < v->n_ch; k++)
    colo_choices_close(&v->ch[k]);
  free(v->s);
  free(v->ch);
  free(v->tab);
  free(v->ch_w);
  free(v->rows);
  memset(v, 0, sizeof *v);
}

/* Multiple-choice set c's sequences' log-probabilities of their endings under the model as it is
 * (tab[0 .. S)) and the tokens each counted (tab[S .. 2S)), S its sequences: the group's ranks
 * take batches of B sequences in turn (batch i's rank r the B from (i·world + r)·B), through the
 * pipeline's stages with pipe (the last stage's), each entry written by the rank that computed it,
 * zeros elsewhere, then summed over the stages and the group: any split gives the same floats.
 * Each batch is as wide as its longest window (colo_choices_width) rounded up to a multiple of
 * CHOICE_WIDTH (fewer shapes for a GPU's attention plans), at most T, and T itself under sequence
 * parallelism (whose rows must split evenly) or with COLO_CHOICE_FULL_WIDTH=1 (the block, for
 * comparison: bench/engine_cpu/choices.sh): attention is causal and padding follows a
 * sequence, so the log-probabilities are a batch of T's, to BLAS's rounding. w and rows: scratch
 * of B·T floats and B doubles. say (NULL: quiet): a line there every 30 s. < 0 when a collective
 * failed. */
#define CHOICE_WIDTH 32

static int choice_table(colo_gpt_t *m, colo_comm_t *comm, pipe_t *pipe, const colo_choices_t *c,
                        int B, int T, int *in, int *tg, float *w, double *rows, float *tab,
                        FILE *say) {
  int rank = comm ? colo_comm_rank(comm) : 0, world = comm ? colo_comm_size(comm) : 1;
  int last = !pipe || pipe->stage == pipe->stages - 1;
  size_t S = c->n_seq, per = (size_t)world * B, nb = (S + per - 1) / per;
  double t0 = now_s(), said = t0;
  const char *full = getenv("COLO_CHOICE_FULL_WIDTH"); /* for comparison (bench/): the block */
  int narrow = !colo_gpt_sequence_parallel(m) && !(full && full[0] == '1');
  memset(tab, 0, 2 * S * sizeof *tab);
  for (size_t i = 0; i < nb; i++) {
    if (say && now_s() - said >= 30.0) {
      said = now_s();
      fprintf(say, "scoring: %zu of %zu endings, %.0f s\n", i * per, S, said - t0);
      fflush(say);
    }
    size_t first = (i * world + (size_t)rank) * B;
    int Ti = T;
    if (narrow) { /* a batch no wider than its longest window needs */
      /* (a multiple of the context-parallel ranks too, each a piece of it: so is T) */
      int q = CHOICE_WIDTH * colo_gpt_cp_size(m);
      Ti = (colo_choices_width(c, first, B, T) + q - 1) / q * q;
      Ti = Ti < T ? Ti : T;
    }
    colo_choices_batch(c, first, B, Ti, in, tg);
    if (pipe) /* every stage makes the same batch, so agrees on its width */
      pipe->T = Ti;
    int rc = rows_forward(m, pipe, w, in, tg, B, Ti, rows);
    if (pipe)
      pipe->T = T;
    if (rc < 0)
      return COLO_EIO;
    for (int b = 0; last && b < B && first + (size_t)b < S; b++) {
      int n = 0;
      for (int t = 0; t < Ti; t++)
        n += tg[(size_t)b * Ti + t] >= 0;
      tab[first + (size_t)b] = (float)rows[b];
      tab[S + first + (size_t)b] = (float)n;
    }
  }
  if (pipe && pipe->pp->ops->allreduce_sum(pipe->pp, tab, 2 * S) < 0)
    return COLO_EIO;
  if (comm && world > 1 && comm->ops->allreduce_sum(comm, tab, 2 * S) < 0)
    return COLO_EIO;
  return 0;
}

/* The precomputed reference's tables: computed now (a fresh run's start), or read from the
 * checkpoint the run resumes from (resumed: its directory), each validation set's after the
 * training set's. */
static int dpo_tables(colo_gpt_t *m, colo_comm_t *comm, pipe_t *pipe, dpo_t *d,
                      const colo_shard_t *train, const val_sets_t *val, const char *resumed, int B,
                      int T, int *in, int *tg, int say, char *err, size_t errlen) {
  int n = 1 + val->n;
  d->tab = calloc((size_t)n, sizeof *d->tab);
  d->tab_n = calloc((size_t)n, sizeof *d->tab_n);
  d->tab_name = calloc((size_t)n, sizeof *d->tab_name);
  d->names = calloc((size_t)n, sizeof *d->names);
  if (!d->tab || !d->tab_n || !d->tab_name || !d->names)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  d->n_tab = n;
  double t0 = now_s();
  size_t all = 0;
  for (int k = 0; k < n; k++) {
    const colo_shard_t *s = k ? &val->s[k - 1] : train;
    d->tab_n[k] = s->n_pairs;
    all += s->n_pairs;
    if (k)
      snprintf(d->tab_name[k], sizeof d->tab_name[k], "val.%d", k - 1);
    else
      snprintf(d->tab_name[k], sizeof d->tab_name[k], "train");
    d->names[k] = d->tab_name[k];
    if (!(d->tab[k] = malloc(2 * s->n_pairs * sizeof(float))))
      return colo_fail(err, errlen, COLO_ENOMEM, "no memory for DPO's reference of %s", s->path);
    int rc = resumed
                 ? colo_ckpt_read_dpo(resumed, d->tab_name[k], d->tab[k], s->n_pairs, err, errlen)
                 : dpo_precompute(m, comm, pipe, d, s, B, T, in, tg, d->tab[k], s->path, say, err,
                                  errlen);
    if (rc < 0)
      return rc;
  }
  if (say && resumed)
    printf("dpo: the reference's log-probabilities of %zu pairs read from %s\n", all, resumed);
  else if (say)
    printf("dpo: the reference's log-probabilities of %zu pairs (%zu training, %zu validation) "
           "computed in %.1f s, once, before the first step\n",
           all, d->tab_n[0], all - d->tab_n[0], now_s() - t0);
  return 0;
}

/* Early stopping's count (train.early_stop_patience), kept in the checkpoints' manifests */
typedef struct {
  float best; /* the best of train.best_metric so far: the lowest loss or highest score; not
               * finite: none */
  int best_step, since;
} early_t;

/* The name of what ranks the evaluations (train.best_metric), for messages */
static const char *metric_name(const colo_train_config_t *cfg, char *buf, size_t len) {
  if (!cfg->best_set)
    return "the validation loss";
  static const char *kinds[] = {"acc", "acc_norm", "acc_token"};
  snprintf(buf, len, "%s.%s", cfg->choice_names[cfg->best_set - 1], kinds[cfg->best_kind % 3]);
  return buf;
}

/* Counts the evaluation of `step` (metric v): a new best when it falls more than `delta` below
 * the lowest loss so far (or rises that much above the highest score), else one more
 * evaluation without one. */
static void early_count(early_t *es, const colo_train_config_t *cfg, float v, int step) {
  float d = cfg->early_stop_delta;
  if (cfg->best_set ? v > es->best + d : v < es->best - d) { /* NaN never is */
    es->best = v;
    es->best_step = step;
    es->since = 0;
  } else {
    es->since++;
  }
}

/* Whether the run ends here: when `patience` evaluations in a row have not made a new lowest.
 * Every rank agrees (any rank's yes is the world's), so that all stop at the same step. -1: the
 * world failed. */
static int early_stop_here(const early_t *es, const colo_train_config_t *cfg,
                           colo_comm_t *world_comm, int world) {
  float stop = es->since >= cfg->early_stop ? 1.0f : 0.0f;
  if (world > 1 && world_comm->ops->allreduce_sum(world_comm, &stop, 1) < 0)
    return -1;
  return stop > 0.0f;
}

/* Evaluates every validation set: the loss is their weighted mean, and with several sets each
 * one's is reported by name too, on stdout and in the progress record (val_sets). es: early
 * stopping's count, which counts this evaluation and goes into the record too; NULL: none.
 * *score: train.best_metric's score when it names one, else NaN. */
/* Each validation set's loss into each[] (a DPO run's, with its pairs' sums in ds[]), and their
 * mean weighted by the sets' weights; NaN without a validation set (choices alone). */
static float val_losses(colo_gpt_t *model, colo_comm_t *comm, pipe_t *pipe, const val_sets_t *val,
                        const colo_train_config_t *cfg, int *in, int *tg, dpo_t *dpo, float *each,
                        dpo_sums_t *ds) {
  double sum = 0, wsum = 0;
  for (int k = 0; k < val->n && k < COLO_MAX_SOURCES; k++) {
    each[k] = dpo ? evaluate_dpo(model, comm, pipe, &val->s[k], dpo,
                                 dpo->n_tab > k + 1 ? dpo->tab[k + 1] : NULL, cfg->eval_batches,
                                 cfg->batch_size, cfg->model.block_size, in, tg, &ds[k])
                  : evaluate(model, comm, pipe, &val->s[k], cfg->seed, cfg->eval_batches,
                             cfg->batch_size, cfg->model.block_size, in, tg);
    double w = val->w ? val->w[k] : 1.0;
    sum += w * each[k];
    wsum += w;
  }
  return val->n ? (float)(sum / wsum) : NAN;
}

static float eval_and_report(colo_gpt_t *model, colo_comm_t *comm, pipe_t *pipe,
                             const val_sets_t *val, const colo_train_config_t *cfg, int step,
                             early_t *es, int quiet, FILE *progress, int *in, int *tg, dpo_t *dpo,
                             float ema_val, float *score) {
  *score = NAN;
  float each[COLO_MAX_SOURCES];
  dpo_sums_t ds[COLO_MAX_SOURCES] = {{0}};
  float v = val_losses(model, comm, pipe, val, cfg, in, tg, dpo, each, ds);
  colo_choices_score_t sc[COLO_MAX_SOURCES];
  for (int k = 0; k < val->n_ch && k < COLO_MAX_SOURCES; k++) {
    const colo_choices_t *c = &val->ch[k];
    if (choice_table(model, comm, pipe, c, cfg->batch_size, cfg->model.block_size, in, tg,
                     val->ch_w, val->rows, val->tab, NULL) < 0)
      return NAN;
    colo_choices_score(c, val->tab, val->tab + c->n_seq, &sc[k], NULL);
  }
  if (colo_gpt_hook_error(model) < 0) /* a ZeRO-3 fetch failed: the caller stops the run */
    return NAN;
  if (cfg->best_set > 0 && cfg->best_set <= val->n_ch) {
    const colo_choices_score_t *b = &sc[cfg->best_set - 1];
    *score = (float)(cfg->best_kind == 1   ? b->acc_norm
                     : cfg->best_kind == 2 ? b->acc_token
                                           : b->acc);
  }
  if (es)
    early_count(es, cfg, cfg->best_set ? *score : v, step);
  if (!quiet) {
    printf("step %6d", step);
    if (val->n)
      printf(" | val loss %.4f", (double)v);
    for (int k = 0; val->names && k < val->n; k++)
      printf("%s%s %.4f%s", k ? ", " : " (", val->names[k], (double)each[k],
             k == val->n - 1 ? ")" : "");
    if (isfinite(ema_val))
      printf(" | moving average's val loss %.4f", (double)ema_val);
    for (int k = 0; dpo && k < val->n; k++)
      printf(" | %s%sreward accuracy %.4f, margin %.4f over %.0f pairs",
             val->names ? val->names[k] : "", val->names ? ": " : "", ds[k].correct / ds[k].pairs,
             ds[k].margin / ds[k].pairs, ds[k].pairs);
    for (int k = 0; k < val->n_ch; k++)
      printf(" | %s acc %.4f, acc_norm %.4f over %zu questions", cfg->choice_names[k], sc[k].acc,
             sc[k].acc_norm, sc[k].questions);
    printf("\n");
  }
  if (progress) {
    fprintf(progress, "{\"event\":\"eval\",\"step\":%d,\"val_loss\":", step);
    fprintf(progress, isfinite(v) ? "%.6f" : "null", (double)v); /* JSON has no NaN */
    if (isfinite(ema_val))
      fprintf(progress, ",\"ema_val_loss\":%.6f", (double)ema_val);
    fprintf(progress, ",\"time_ms\":%lld", (long long)wall_ms());
    for (int k = 0; val->names && k < val->n; k++) {
      fputs(k ? ",\"" : ",\"val_sets\":{\"", progress);
      for (const char *c = val->names[k]; *c; c++) /* a name, or a path: JSON-escaped */
        fprintf(progress,
                *c == '"' || *c == '\\'    ? "\\%c"
                : (unsigned char)*c < 0x20 ? "\\u%04x"
                                           : "%c",
                *c);
      fprintf(progress, "\":%.6f", (double)each[k]);
    }
    fputs(val->names ? "}" : "", progress);
    if (dpo) /* the first set's (the only one, or the first named) */
      fprintf(progress,
              ",\"dpo\":{\"accuracy\":%.6f,\"margin\":%.6f,\"chosen\":%.6f,\"rejected\":%.6f,"
              "\"pairs\":%.0f}",
              ds[0].correct / ds[0].pairs, ds[0].margin / ds[0].pairs, ds[0].chosen / ds[0].pairs,
              ds[0].rejected / ds[0].pairs, ds[0].pairs);
    for (int k = 0; k < val->n_ch; k++) {
      char name[1024];
      fprintf(progress,
              "%s\"%s\":{\"acc\":%.6f,\"acc_norm\":%.6f,\"acc_token\":%.6f,"
              "\"questions\":%zu}",
              k ? "," : ",\"choices\":{", json_str(name, sizeof name, cfg->choice_names[k]),
              sc[k].acc, sc[k].acc_norm, sc[k].acc_token, sc[k].questions);
      fputs(k == val->n_ch - 1 ? "}" : "", progress);
    }
    if (es && isfinite(es->best)) /* early stopping's count, as of this evaluation */
      fprintf(progress, ",\"%s\":%.6f,\"best_step\":%d,\"evals_since_best\":%d",
              cfg->best_set ? "best_score" : "best_val_loss", (double)es->best, es->best_step,
              es->since);
    fputs("}\n", progress);
  }
  return v;
}

/* Whether an evaluation stopped on a failed ZeRO-3 fetch (the pool full, a collective): why */
static int eval_failed(colo_gpt_t *model, colo_pool_t *pool, colo_comm_t *comm, int me, char *err,
                       size_t errlen) {
  if (colo_gpt_hook_error(model) >= 0)
    return 0;
  return colo_fail(err, errlen, COLO_EIO, "rank %d: evaluating: %s", me,
                   colo_comm_error(comm)[0] ? colo_comm_error(comm) : colo_pool_error(pool));
}

/* What the training data is, and how many epochs of each source the run goes through */
static void print_data(const colo_blend_t *d, uint64_t per_step, int steps) {
  for (size_t k = 0; k < d->n_src; k++) {
    const colo_shard_t *s = &d->src[k];
    char share[48] = "";
    if (d->n_src > 1)
      snprintf(share, sizeof share, "%.1f%% of the sequences, ",
               100.0 * (d->cum[k + 1] - d->cum[k]) / COLO_BLEND_SLOTS);
    printf("data: %s: %zu tokens in %zu file%s, %s%s order, %.2f epochs in %d steps\n", s->path,
           s->n, s->n_files, s->n_files == 1 ? "" : "s", share,
           d->order == COLO_ORDER_SHUFFLE ? "shuffled" : "random",
           colo_blend_epochs(d, k, per_step * (uint64_t)steps), steps);
  }
}

/* Where this rank's pieces are. */
static void print_placement(const colo_zero_t *z, const char *how, const char *nvme_dir) {
  colo_placed_t p;
  colo_zero_placed(z, &p);
  if (z->frozen) {
    printf("placement (%s): of %zu chunks of the frozen model, parameters of %zu on the GPU and "
           "%zu in host memory (%.1f MiB)\n",
           how, p.chunks, p.param_device, p.chunks - p.param_device,
           (double)p.host_bytes / (1 << 20));
    return;
  }
  printf("placement (%s): of %zu chunks, parameters of %zu on the GPU and %zu in host memory; "
         "optimizer state of %zu on the GPU, %zu in host memory, %zu on NVMe; off the GPU: %.1f "
         "MiB in host memory, %.1f MiB in %s\n",
         how, p.chunks, p.param_device, p.chunks - p.param_device, p.optim_device,
         p.chunks - p.optim_device - p.optim_nvme, p.optim_nvme, (double)p.host_bytes / (1 << 20),
         (double)p.nvme_bytes / (1 << 20), p.optim_nvme ? nvme_dir : "no NVMe file");
}

/* After an automatic placement's warm-up step: the room its peak left on the device (all of it
 * when neither a --memory-limit nor the device says how much there is), less a twentieth of the
 * capacity kept back for what the pool does not see, then the pieces moved into it. */
static int place_after_warmup(colo_zero_t *z, colo_adamw_t *opt, colo_pool_t *pool,
                              const colo_backend_t *be, int cache, int step, int lead, int quiet,
                              FILE *progress, char *err, size_t errlen) {
  size_t cap = colo_pool_capacity(pool), peak = colo_pool_peak(pool), fb = 0, tb = 0;
  if (!cap && be->mem_info && be->mem_info(&fb, &tb) == 0)
    cap = colo_pool_used(pool) + fb;
  if (z->dp > 1) { /* the group's least, in MiB, so that every rank places and caches alike */
    float *all = calloc((size_t)z->dp, sizeof(float));
    if (!all)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    all[z->rank] = cap ? (float)(cap >> 20) : FLT_MAX;
    if (z->comm->ops->all_gather(z->comm, all, 1) < 0) {
      free(all);
      return colo_fail(err, errlen, COLO_EIO, "agreeing on the room after the warm-up step: %s",
                       colo_comm_error(z->comm));
    }
    float least = FLT_MAX;
    for (int r = 0; r < z->dp; r++)
      least = all[r] < least ? all[r] : least;
    free(all);
    cap = least == FLT_MAX ? 0 : (size_t)least << 20;
  }
  size_t reserve = cap / 20;
  size_t room = !cap ? SIZE_MAX : peak + reserve < cap ? cap - peak - reserve : 0;
  int rc = colo_zero_place_auto(z, opt, room, err, errlen);
  if (rc < 0)
    return rc;
  /* the cache may fill what the pool does not use at each moment, up to the same reserve */
  size_t watermark = cache && z->stage == 3 && cap ? cap - reserve : 0;
  colo_zero_cache(z, watermark);
  if (!quiet && lead) {
    char how[240];
    if (cap)
      snprintf(how, sizeof how, "auto, after the warm-up step's peak of %.1f MiB of %.1f MiB%s",
               (double)peak / (1 << 20), (double)cap / (1 << 20),
               watermark ? "; gathered chunks kept between uses below the 95% mark" : "");
    else
      snprintf(how, sizeof how, "auto, with no limit on the GPU's memory");
    print_placement(z, how, NULL);
  }
  if (progress) {
    colo_placed_t p;
    colo_zero_placed(z, &p);
    fprintf(progress,
            "{\"event\":\"placement\",\"step\":%d,\"warmup_peak_bytes\":%zu,"
            "\"capacity_bytes\":%zu,\"chunks\":%zu,\"param_chunks_on_device\":%zu,"
            "\"optim_chunks_on_device\":%zu,\"host_bytes\":%zu,\"cache_watermark_bytes\":%zu,"
            "\"time_ms\":%lld}\n",
            step, peak, cap, p.chunks, p.param_device, p.optim_device, p.host_bytes, watermark,
            (long long)wall_ms());
    fflush(progress);
  }
  return 0;
}

/* Whether every rank got through a phase of a checkpoint: rc is this rank's result; afterwards
 * every rank has the same answer (0, or an error, with the reason in err when it was another
 * rank's or the communicator's). */
static int agree(colo_comm_t *world, int rc, const char *what, char *err, size_t errlen) {
  float failed = rc < 0 ? 1.0f : 0.0f;
  if (world->ops->allreduce_sum(world, &failed, 1) < 0) {
    if (rc == 0)
      snprintf(err, errlen, "%s: %s", what, colo_comm_error(world));
    return rc < 0 ? rc : COLO_EIO;
  }
  if (rc == 0 && failed > 0.0f) {
    snprintf(err, errlen, "%s: %g other rank(s) failed", what, (double)failed);
    return COLO_EIO;
  }
  return rc;
}

/* The checkpoint directory must be one file system for every rank: shard writers on every host
 * write into the checkpoint rank 0 commits, and a resume reads them back. Checked as a run
 * starts, not found out at its first checkpoint, hours on: rank 0 leaves a file of a random name
 * there, every rank looks for it, and all agree. A rank that does not see it says so, with its
 * host; the others that the directory is not shared. */
static int check_shared_dir(const char *dir, colo_comm_t *comm, int me, char *err, size_t errlen) {
  float nonce[4] = {0}; /* 64 random bits, 16 a float: exact */
  char path[1200];
  int rc = 0;
  if (me == 0) {
    uint64_t r = 0;
    FILE *u = fopen("/dev/urandom", "rb");
    if (!u || fread(&r, sizeof r, 1, u) != 1)
      r = (uint64_t)wall_ms() * 6364136223846793005ull ^ (uint64_t)getpid();
    if (u)
      fclose(u);
    for (int k = 0; k < 4; k++)
      nonce[k] = (float)((r >> (16 * k)) & 0xffff);
    snprintf(path, sizeof path, "%s/.colo-shared-%016llx", dir, (unsigned long long)r);
    FILE *f = colo_mkdirs(dir, 0755) == 0 ? fopen(path, "w") : NULL;
    if (!f || fclose(f) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "%s: cannot write into the checkpoint directory: %s",
                     path, strerror(errno));
  }
  if (comm->ops->broadcast(comm, nonce, 4, 0) < 0)
    return colo_fail(err, errlen, COLO_EIO, "checking the checkpoint directory: %s",
                     colo_comm_error(comm));
  if (me != 0) {
    uint64_t r = 0;
    for (int k = 0; k < 4; k++)
      r |= (uint64_t)nonce[k] << (16 * k);
    snprintf(path, sizeof path, "%s/.colo-shared-%016llx", dir, (unsigned long long)r);
    if (access(path, F_OK) != 0) {
      char host[256] = "";
      gethostname(host, sizeof host - 1);
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "the checkpoint directory %s is not the one rank 0 writes into: rank %d on "
                     "%s does not find %s, which rank 0 has just written into its own. Every "
                     "host must reach the checkpoint root as one shared file system (the "
                     "workers' --checkpoint-root)",
                     dir, me, host, path);
    }
  }
  float failed = rc < 0 ? 1.0f : 0.0f;
  if (comm->ops->allreduce_sum(comm, &failed, 1) < 0 && rc == 0)
    rc = colo_fail(err, errlen, COLO_EIO, "checking the checkpoint directory: %s",
                   colo_comm_error(comm));
  if (me == 0)
    unlink(path);
  if (rc == 0 && failed > 0.0f)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "the checkpoint directory %s is not shared: %g of the other ranks do not see "
                   "it (each names its host). Every host must reach the checkpoint root as one "
                   "shared file system (the workers' --checkpoint-root)",
                   dir, (double)failed);
  return rc;
}

/* The weights' exponential moving average (train.ema_decay), kept in host memory, as DeepSeek-V3
 * keeps its own: this rank's share of what the checkpoints hold of the parameters' moments (at
 * stage 0 the first data-parallel rank's parameters whole, the others none; under ZeRO this
 * rank's pieces, laid out as colo_zero_keep's), updated after each step that changes the
 * weights: w = p at the first, then w += (1 − decay)·(p − w), torch.optim.swa_utils'
 * AveragedModel with get_ema_multi_avg_fn(decay). */
typedef struct {
  float *w; /* NULL: this rank keeps none */
  size_t n;
  float decay; /* 0: off */
  uint64_t updates;
  float *host;  /* stage 0 on a device: the parameters' host copy */
  float *saved; /* the weights while the average stands in for them (ema_swap) */
} ema_t;

static int ema_init(ema_t *e, float decay, const colo_zero_t *z, colo_gpt_t *model,
                    const colo_backend_t *be, int dp_idx, char *err, size_t errlen) {
  memset(e, 0, sizeof *e);
  e->decay = decay;
  if (decay <= 0.0f || (z->stage == 0 && dp_idx > 0))
    return 0;
  e->n = z->stage == 0 ? colo_gpt_num_params(model) : z->shard_n;
  e->w = calloc(e->n ? e->n : 1, sizeof(float));
  if (z->stage == 0 && be->device)
    e->host = malloc((e->n ? e->n : 1) * sizeof(float));
  if (!e->w || (z->stage == 0 && be->device && !e->host))
    return colo_fail(err, errlen, COLO_ENOMEM,
                     "no host memory for the weights' moving average (%zu floats)", e->n);
  return 0;
}

static void ema_free(ema_t *e) {
  free(e->w);
  free(e->host);
  free(e->saved);
  e->w = e->host = e->saved = NULL;
}

/* The average in the weights' place, for an evaluation (in), and the weights back (!in), on
 * every rank of ZeRO's group together: at stage 0 the first rank's average
 * broadcast into each rank's parameters, under ZeRO each rank's pieces put where its parameters
 * are (colo_zero_put_params). The weights wait in host memory meanwhile. */
static int ema_swap(ema_t *e, colo_zero_t *z, const colo_adamw_t *opt, colo_gpt_t *model,
                    const colo_backend_t *be, int in, char *err, size_t errlen) {
  size_t n = z->stage == 3 ? z->shard_n : colo_gpt_num_params(model);
  float *p = colo_gpt_params(model);
  if (!e->saved && !(e->saved = malloc((n ? n : 1) * sizeof(float))))
    return colo_fail(err, errlen, COLO_ENOMEM, "no host memory to evaluate the moving average");
  int rc = 0;
  if (z->stage == 3) {
    for (size_t k = 0; in && k < z->chunks.n; k++) {
      size_t lo, hi;
      const float *w = colo_zero_piece_host(z, opt, k, COLO_CKPT_PARAMS, &lo, &hi);
      if (!w)
        return colo_fail(err, errlen, COLO_EIO, "the moving average: %s", colo_zero_error(z));
      memcpy(e->saved + z->shard_off[k], w, (hi - lo) * sizeof(float));
    }
    rc = colo_zero_put_params(z, in ? e->w : e->saved);
  } else if (!in) {
    be->from_host(p, e->saved, n * sizeof(float));
  } else {
    be->to_host(e->saved, p, n * sizeof(float));
    if (z->stage > 0)
      rc = colo_zero_put_params(z, e->w);
    else {
      if (e->w) /* the first rank's, for every rank */
        be->from_host(p, e->w, n * sizeof(float));
      if (z->dp > 1)
        rc = z->comm->ops->broadcast(z->comm, p, n, 0);
    }
  }
  return rc < 0 ? colo_fail(err, errlen, COLO_EIO, "evaluating the moving average: %s",
                            colo_zero_error(z))
                : 0;
}

static void ema_mix(const ema_t *e, float *w, const float *p, size_t n) {
  if (!e->updates) {
    memcpy(w, p, n * sizeof(float));
    return;
  }
  float a = 1.0f - e->decay;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    w[i] += a * (p[i] - w[i]);
}

/* After a step that changed the weights: this rank's share mixed in, read where it lives. */
static int ema_update(ema_t *e, colo_zero_t *z, const colo_adamw_t *opt, colo_gpt_t *model,
                      const colo_backend_t *be, char *err, size_t errlen) {
  if (e->decay <= 0.0f)
    return 0;
  if (e->w && z->stage == 0) {
    const float *p = colo_gpt_params(model);
    if (e->host) {
      be->to_host(e->host, p, e->n * sizeof(float));
      p = e->host;
    }
    ema_mix(e, e->w, p, e->n);
  }
  for (size_t k = 0; e->w && z->stage > 0 && k < z->chunks.n; k++) {
    size_t lo, hi;
    const float *p = colo_zero_piece_host(z, opt, k, COLO_CKPT_PARAMS, &lo, &hi);
    if (!p)
      return colo_fail(err, errlen, COLO_EIO, "the moving average: %s", colo_zero_error(z));
    ema_mix(e, e->w + z->shard_off[k], p, hi - lo);
  }
  e->updates++;
  return 0;
}

/* The validation loss of the moving average in the weights' place (val_losses', as
 * eval_and_report's) into *out; NaN where there is none to evaluate yet (or a DPO run's, whose
 * evaluation is of pairs). */
static int ema_eval(ema_t *e, colo_zero_t *z, const colo_adamw_t *opt, colo_gpt_t *model,
                    const colo_backend_t *be, colo_comm_t *dp, pipe_t *pipe, const val_sets_t *val,
                    const colo_train_config_t *cfg, int *in, int *tg, float *out, char *err,
                    size_t errlen) {
  *out = NAN;
  if (e->decay <= 0.0f || !e->updates || !val->n || cfg->dpo_beta > 0.0f)
    return 0;
  int rc = ema_swap(e, z, opt, model, be, 1, err, errlen);
  float each[COLO_MAX_SOURCES];
  float v = rc == 0 ? val_losses(model, dp, pipe, val, cfg, in, tg, NULL, each, NULL) : NAN;
  if (rc == 0 && colo_gpt_hook_error(model) < 0)
    rc = colo_fail(err, errlen, COLO_EIO, "evaluating the moving average: %s", colo_zero_error(z));
  int back = ema_swap(e, z, opt, model, be, 0, err, errlen);
  if (rc == 0 && back == 0)
    *out = v;
  return rc < 0 ? rc : back;
}

/* What a shard writer's file holds (colo_ckpt_pieces_t) and where it reads it from: without
 * ZeRO, the first data-parallel rank writes every chunk whole; under ZeRO each rank its pieces
 * of the moments (at stage 3 of the parameters too), and the first one the parameters' chunks
 * whole below stage 3. Memory of the device passes through a chunk's worth of host memory. */
typedef struct {
  colo_zero_t *zero;
  const colo_adamw_t *opt;
  colo_gpt_t *model;
  const colo_backend_t *be;
  size_t n, *lo, *hi, *chunk;
  unsigned char *kinds, *piece; /* per range: its kinds; whether it is this rank's piece */
  float *scratch;               /* host, a chunk's capacity; NULL on the CPU */
  float *vbuf;                  /* Muon's second moments of a range, with its matrices' zeros */
  size_t vn;                    /* vbuf's floats */
  const ema_t *ema;             /* the moving average, where this rank keeps one */
} save_src_t;

static const float *save_read(void *ctx, size_t r, int what, char *err, size_t errlen) {
  save_src_t *s = ctx;
  if (what == COLO_CKPT_EMA) /* host memory: a piece's at its place among them, or the chunk */
    return s->ema->w + (s->piece[r] ? s->zero->shard_off[s->chunk[r]] : s->lo[r]);
  if (s->piece[r]) {
    size_t lo, hi;
    const float *p = colo_zero_piece_host(s->zero, s->opt, s->chunk[r], what, &lo, &hi);
    if (!p)
      colo_fail(err, errlen, COLO_EIO, "reading a piece for the checkpoint: %s",
                colo_zero_error(s->zero));
    return p;
  }
  if (what == 2 && s->opt->n_hole) { /* Muon's: zeros for its matrices */
    size_t n = s->hi[r] - s->lo[r];
    if (n > s->vn) {
      free(s->vbuf);
      if (!(s->vbuf = malloc(n * sizeof(float)))) {
        s->vn = 0;
        colo_fail(err, errlen, COLO_ENOMEM, "no host memory for a chunk's second moments");
        return NULL;
      }
      s->vn = n;
    }
    colo_adamw_v_get(s->opt, s->be, s->lo[r], n, s->vbuf);
    return s->vbuf;
  }
  const float *base = what == 0 ? colo_gpt_params(s->model) : what == 1 ? s->opt->m : s->opt->v;
  if (!s->scratch)
    return base + s->lo[r];
  s->be->to_host(s->scratch, base + s->lo[r], (s->hi[r] - s->lo[r]) * sizeof(float));
  return s->scratch;
}

static void save_src_free(save_src_t *s) {
  free(s->lo);
  free(s->hi);
  free(s->chunk);
  free(s->kinds);
  free(s->piece);
  free(s->scratch);
  free(s->vbuf);
}

/* The ranges data-parallel rank d writes; 0 when it writes none. */
static int save_src_init(save_src_t *s, int d, char *err, size_t errlen) {
  colo_zero_t *z = s->zero;
  size_t nc = z->chunks.n, cap = 0;
  if (z->stage == 0 && d > 0)
    return 0;
  s->lo = calloc(2 * nc + 1, sizeof *s->lo);
  s->hi = calloc(2 * nc + 1, sizeof *s->hi);
  s->chunk = calloc(2 * nc + 1, sizeof *s->chunk);
  s->kinds = calloc(2 * nc + 1, 1);
  s->piece = calloc(2 * nc + 1, 1);
  for (size_t k = 0; k < nc; k++)
    cap = z->chunks.chunks[k].capacity > cap ? z->chunks.chunks[k].capacity : cap;
  if (s->be->device)
    s->scratch = malloc((cap ? cap : 1) * sizeof(float));
  if (!s->lo || !s->hi || !s->chunk || !s->kinds || !s->piece || (s->be->device && !s->scratch))
    return colo_fail(err, errlen, COLO_ENOMEM, "no host memory to write a checkpoint");
  for (size_t k = 0; d == 0 && z->stage < 3 && k < nc; k++) { /* whole chunks */
    s->lo[s->n] = z->chunks.chunks[k].lo;
    s->hi[s->n] = z->chunks.chunks[k].hi;
    s->kinds[s->n++] = z->stage == 0 ? (s->ema->w ? 15 : 7) : 1;
  }
  for (size_t k = 0; z->stage > 0 && k < nc; k++) { /* this rank's pieces */
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    if (hi <= lo)
      continue; /* all padding */
    s->lo[s->n] = lo;
    s->hi[s->n] = hi;
    s->chunk[s->n] = k;
    s->piece[s->n] = 1;
    s->kinds[s->n++] = (z->stage == 3 ? 7 : 6) | (s->ema->w ? 8 : 0);
  }
  return 1;
}

/* Where a resume puts what it loads (colo_ckpt_sink_t): the model's parameters and the
 * optimizer's moments where they live, or under ZeRO this rank's pieces of the moments into host
 * memory (pm, pv), for colo_zero_take_moments, and under ZeRO-3 its pieces of the parameters
 * too (pp), for colo_zero_attach_from: a rank reads its own part alone. */
typedef struct {
  const colo_backend_t *be;
  colo_gpt_t *model;
  colo_adamw_t *opt;
  colo_zero_t *zero; /* NULL: stage 0 */
  float *pm, *pv, *pp;
  /* a model without a parameter buffer of its own (QLoRA's) takes its values through
   * colo_gpt_put, whose first failure is kept here */
  int rc;
  char err[256];
  float *ema; /* the moving average's (ema_t's w: the model's layout, or this rank's pieces) */
} load_dst_t;

static void load_want(void *ctx, int what, size_t off, size_t n, size_t *lo, size_t *hi) {
  load_dst_t *d = ctx;
  if (what == COLO_CKPT_EMA && !d->ema) {
    *lo = *hi = 0;
    return;
  }
  if (d->zero && (what > 0 || d->pp)) {
    size_t t;
    int packed = 0;
    if (what == 0) /* NF4 in the pieces: their storage's offsets, and a matrix read whole */
      off = colo_gpt_storage_at(d->model, off, &t, &packed);
    if (packed)
      *lo = 0, *hi = n;
    else
      colo_zero_owned(d->zero, off, n, lo, hi);
  }
}

static void load_put(void *ctx, int what, size_t off, const float *v, size_t n) {
  load_dst_t *d = ctx;
  if (d->zero && (what > 0 || d->pp)) {
    size_t t, nt;
    int packed = 0;
    if (what == 0)
      off = colo_gpt_storage_at(d->model, off, &t, &packed);
    if (packed) { /* quantized here, whole, and this rank's part of it kept */
      size_t pn = colo_gpt_storage_table(d->model, &nt)[t].numel;
      float *pk = malloc(pn * sizeof *pk);
      int q = pk ? colo_gpt_pack_nf4(d->model, t, v, pk) : -2;
      if (q < 0) {
        if (d->rc == 0) {
          d->rc = q == -1 ? COLO_EINVAL : COLO_ENOMEM;
          snprintf(d->err, sizeof d->err, "%s",
                   q == -1 ? "a matrix holds a value that is not finite" : "out of memory");
        }
      } else {
        colo_zero_keep(d->zero, off, pk, pn, d->pp);
      }
      free(pk);
      return;
    }
    colo_zero_keep(d->zero, off, v, n,
                   what == 0   ? d->pp
                   : what == 1 ? d->pm
                   : what == 2 ? d->pv
                               : d->ema);
    return;
  }
  if (what == COLO_CKPT_EMA) { /* host memory, the model's layout */
    memcpy(d->ema + off, v, n * sizeof(float));
    return;
  }
  if (what == 0 && !colo_gpt_params(d->model)) {
    if (d->rc == 0)
      d->rc = colo_gpt_put(d->model, off, v, n, d->err, sizeof d->err);
    return;
  }
  if (what == 2 && d->opt->n_hole) { /* Muon's: its matrices' left out */
    colo_adamw_v_put(d->opt, d->be, off, n, v);
    return;
  }
  float *dst = (what == 0 ? colo_gpt_params(d->model) : what == 1 ? d->opt->m : d->opt->v) + off;
  if (d->be->device)
    d->be->from_host(dst, v, n * sizeof(float));
  else
    memcpy(dst, v, n * sizeof(float));
}

/* a fresh run's values (colo_gpt_init_each), as a resume's parameters are put */
static void init_put(void *ctx, size_t off, const float *v, size_t n) {
  load_put(ctx, 0, off, v, n);
}

/* A LoRA run's resume: the adapters and their moments from checkpoint dir, through host memory.
 * A model to adapt other than the checkpoint's is allowed (a moved file), but said. Without opt,
 * a LoRA run started from another's checkpoint: its adapters alone, whatever way that run kept
 * its frozen model (NF4 or not). */
static int load_lora(const char *dir, colo_ckpt_meta_t *meta, colo_lora_t *lora, colo_adamw_t *opt,
                     const colo_backend_t *be, const char *init_from, int lead, char *err,
                     size_t errlen) {
  size_t n = colo_lora_numel(lora);
  float *h = malloc(3 * n * sizeof *h + 1);
  if (!h)
    return colo_fail(err, errlen, COLO_ENOMEM, "no host memory to load %s", dir);
  int rc = colo_ckpt_load_lora(dir, meta, lora, h, opt ? h + n : NULL, opt ? h + 2 * n : NULL,
                               opt != NULL, err, errlen);
  if (rc == 0) {
    be->from_host(colo_lora_params(lora), h, n * sizeof *h);
    if (opt) {
      be->from_host(opt->m, h + n, n * sizeof *h);
      be->from_host(opt->v, h + 2 * n, n * sizeof *h);
    }
    char *abs = init_from ? realpath(init_from, NULL) : NULL; /* as the manifest has it */
    const char *was = meta->lora_base[0] ? meta->lora_base : "the seed's initialisation";
    const char *is = abs ? abs : init_from ? init_from : "the seed's initialisation";
    if (strcmp(was, is) && lead)
      fprintf(stderr, "colo-train: warning: checkpoint %s adapted %s; this run's model is %s\n",
              dir, was, is);
    free(abs);
  }
  free(h);
  return rc;
}

/* A run that is not LoRA from LoRA checkpoint dir (meta its manifest's): its adapters merged into
 * the model, which holds their base whole (as eval and export merge them: into the NF4 values
 * where they learnt against those) */
static int merge_adapters(colo_gpt_t *model, const char *dir, const colo_ckpt_meta_t *meta,
                          colo_pool_t *pool, char *err, size_t errlen) {
  const colo_backend_t *be = colo_gpt_backend(model);
  size_t n = colo_gpt_num_params(model);
  float *h = malloc(n * sizeof *h + 1), *a = NULL;
  colo_lora_t *l = NULL;
  colo_ckpt_meta_t am;
  if (!h)
    return colo_fail(err, errlen, COLO_ENOMEM, "no host memory to merge %s", dir);
  be->to_host(h, colo_gpt_params(model), n * sizeof *h);
  int rc = meta->lora.quant == COLO_LORA_QUANT_NF4
               ? colo_gpt_nf4_round(model, h, meta->lora.double_quant, err, errlen)
               : 0;
  if (rc == 0)
    rc = colo_lora_create(model, &meta->lora, pool, &l, err, errlen);
  if (rc == 0 && !(a = malloc(colo_lora_numel(l) * sizeof *a + 1)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "no host memory for the adapters of %s", dir);
  if (rc == 0)
    rc = colo_ckpt_load_lora(dir, &am, l, a, NULL, NULL, 0, err, errlen);
  if (rc == 0) {
    colo_lora_merge(l, a, h);
    be->from_host(colo_gpt_params(model), h, n * sizeof *h);
  }
  colo_lora_destroy(l);
  free(a);
  free(h);
  return rc;
}

/* The adapters and their moments (LoRA), the whole model's, in host memory on a pipeline's first
 * stage (*h: params, then m, then v, each in the whole table's layout; the caller frees it), and
 * nothing (*h NULL) elsewhere. A tensor-parallel group first all-gathers its ranks' parts (tpc;
 * NULL: none), which its first rank puts each where it sits in the whole tensor; a later stage's
 * first tensor-parallel rank then sends its layers' to the first stage's. Every rank of the group
 * and every stage calls it; device memory for the collectives comes from pool. */
static int lora_gather(colo_lora_t *lora, const colo_adamw_t *opt, const pipe_t *pipe,
                       colo_comm_t *tpc, colo_pool_t *pool, const colo_backend_t *be, float **h,
                       char *err, size_t errlen) {
  size_t n = colo_lora_numel(lora), nt, off, all, mine = 0;
  const colo_param_t *tab = colo_lora_table(lora, &nt);
  colo_lora_span(lora, &off, &all);
  for (size_t i = 0; i < nt; i++) /* this stage's adapters, whole */
    mine += tab[i].full_numel;
  const float *src[3] = {colo_lora_params(lora), opt->m, opt->v};
  int tp = tpc ? colo_comm_size(tpc) : 1, tr = tpc ? colo_comm_rank(tpc) : 0;
  int first = !pipe || pipe->stage == 0, keep = tr == 0; /* the others join the all-gather alone */
  int stages = pipe ? pipe->stages : 1, L = pipe ? colo_gpt_config(pipe->model)->n_layer : 1;
  size_t per = all / (size_t)L, most = 0;
  for (int st = 1; first && st < stages; st++) {
    size_t cnt = (size_t)((st + 1) * L / stages - st * L / stages) * per;
    most = cnt > most ? cnt : most;
  }
  *h = NULL;
  /* this stage's adapters whole in s, [3][stride] (the first stage's: in the whole model's
   * layout, where they begin it); dev: device scratch for the collectives */
  size_t stride = first ? all : mine;
  size_t dn = tp > 1 ? (size_t)tp * 3 * n : 0;
  dn = keep && !first && 3 * mine > dn ? 3 * mine : dn;
  dn = keep && 3 * most > dn ? 3 * most : dn;
  float *s = keep ? malloc(3 * stride * sizeof *s + 1) : NULL;
  float *parts = keep && tp > 1 ? malloc((size_t)tp * 3 * n * sizeof *parts) : NULL;
  float *dev = dn ? colo_pool_alloc(pool, dn * sizeof *dev, "lora checkpoint") : NULL;
  int rc = (keep && !s) || (keep && tp > 1 && !parts) || (dn && !dev)
               ? colo_fail(err, errlen, COLO_ENOMEM, "no memory to gather the adapters' checkpoint")
               : 0;
  if (tpc) /* none starts a collective that another rank of the group cannot join */
    rc = agree(tpc, rc, "gathering the adapters", err, errlen);
  if (rc == 0 && tp == 1) {
    for (int j = 0; j < 3; j++)
      be->to_host(s + (size_t)j * stride, src[j], n * sizeof *s);
  } else if (rc == 0) { /* [tp][3][n]: each rank's parts, then each into its whole tensor */
    for (int j = 0; j < 3; j++)
      be->copy(dev + ((size_t)tr * 3 + (size_t)j) * n, src[j], n * sizeof *dev);
    if (tpc->ops->all_gather(tpc, dev, 3 * n) < 0)
      rc = colo_fail(err, errlen, COLO_EIO, "gathering the adapters' parts: %s",
                     colo_comm_error(tpc));
    else if (keep)
      be->to_host(parts, dev, (size_t)tp * 3 * n * sizeof *parts);
    for (int t = 0; rc == 0 && keep && t < tp; t++)
      for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < nt; i++) {
          const float *from = parts + ((size_t)t * 3 + (size_t)j) * n + tab[i].offset;
          float *to = s + (size_t)j * stride + (tab[i].full_offset - off);
          size_t w = (size_t)tab[i].shape[1]; /* a part's row is a run of the whole */
          for (size_t k = 0; k < tab[i].numel; k += w)
            memcpy(to + colo_lora_full_index(lora, i, t, k), from + k, w * sizeof *to);
        }
  }
  if (pipe && keep) /* a stage sends only to a first stage that can take it */
    rc = agree(pipe->pp, rc, "gathering the adapters", err, errlen);
  if (rc == 0 && keep && !first) {
    be->from_host(dev, s, 3 * mine * sizeof *s);
    if (pipe->pp->ops->sendrecv(pipe->pp, dev, 3 * mine, 0, NULL, 0, -1) < 0)
      rc = colo_fail(err, errlen, COLO_EIO, "sending the adapters to the first stage: %s",
                     colo_comm_error(pipe->pp));
  }
  for (int st = 1; rc == 0 && keep && first && st < stages; st++) { /* [3][cnt] from each */
    size_t lo = (size_t)(st * L / stages) * per, cnt = (size_t)((st + 1) * L / stages) * per - lo;
    if (pipe->pp->ops->sendrecv(pipe->pp, NULL, 0, -1, dev, 3 * cnt, st) < 0) {
      rc = colo_fail(err, errlen, COLO_EIO, "receiving the adapters of stage %d: %s", st,
                     colo_comm_error(pipe->pp));
      break;
    }
    for (int j = 0; j < 3; j++)
      be->to_host(s + (size_t)j * all + lo, dev + (size_t)j * cnt, cnt * sizeof *s);
  }
  if (dev)
    colo_pool_free(pool, dev);
  free(parts);
  if (rc == 0 && keep && first)
    *h = s;
  else
    free(s);
  return rc;
}

/* A LoRA run's checkpoint files: the adapters and their moments, the same on every
 * data-parallel rank, written by rank 0 alone from host memory (they are small): h, from
 * lora_gather, laid out as table's (the whole model's adapters). */
static int write_lora(const colo_train_config_t *cfg, uint64_t step, const colo_lora_t *table,
                      const float *h, char *err, size_t errlen) {
  size_t n = colo_lora_numel(table);
  int rc = colo_ckpt_begin(cfg->ckpt_dir, step, err, errlen);
  if (rc == 0)
    rc = colo_ckpt_write_lora(cfg->ckpt_dir, step, table, h, h + n, h + 2 * n, err, errlen);
  return rc;
}

/* A checkpoint, written by the ranks together: its shard writers (colo_ckpt_begin's comment)
 * write their files, with nothing gathered, then rank 0 commits it (a LoRA run's: rank 0 writes
 * and commits). No rank holds more than a
 * chunk of it in memory beyond what it trains with. val, score: the validation loss and
 * train.best_metric's score at `step` (NaN: not evaluated there; no score named). */
static int save(const colo_train_config_t *cfg, colo_ckpt_meta_t *meta, int step, int asked,
                float val, float score, const colo_loss_scaler_t *scaler, colo_gpt_t *model,
                colo_adamw_t *opt, colo_zero_t *zero, const pipe_t *pipe, colo_comm_t *tpc,
                colo_pool_t *pool, colo_comm_t *world, int dp_idx, int me, const colo_backend_t *be,
                int lead, FILE *progress, const dpo_t *dpo, const ema_t *ema, char *path,
                size_t path_len, char *err, size_t errlen) {
  colo_lora_t *lora = colo_gpt_lora(model);
  meta->step = (uint64_t)step;
  meta->asked = asked;
  meta->val_loss = val;
  meta->has_score = isfinite(score);
  meta->score = score;
  meta->loss_scale = scaler->scale;
  meta->loss_scale_good = scaler->good_steps;
  meta->adam_t = opt->t;
  meta->zero = lora ? 0 : zero->stage;
  meta->ema_decay = ema->decay;
  meta->ema_updates = ema->updates;
  int rc = 0;
  if (lora) { /* the stages' and tensor-parallel ranks' adapters onto rank 0, written there */
    float *h = NULL;
    colo_lora_t *whole = NULL;
    /* the data-parallel ranks hold the same adapters: the first position's alone gather */
    rc = dp_idx == 0 ? lora_gather(lora, opt, pipe, tpc, pool, be, &h, err, errlen) : 0;
    if (rc == 0 && lead && (pipe || tpc))
      rc = colo_lora_create_table(&cfg->model, &cfg->lora, &whole, err, errlen);
    if (rc == 0 && lead)
      rc = write_lora(cfg, meta->step, whole ? whole : lora, h, err, errlen);
    colo_lora_destroy(whole);
    free(h);
  } else {
    save_src_t src = {zero, opt, model, be, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, ema};
    int writer = save_src_init(&src, dp_idx, err, errlen);
    rc = writer < 0 ? writer : 0;
    if (rc == 0 && lead)
      rc = colo_ckpt_begin(cfg->ckpt_dir, meta->step, err, errlen);
    rc = agree(world, rc, "beginning the checkpoint", err, errlen);
    if (rc == 0 && writer > 0) {
      colo_ckpt_pieces_t pc = {src.n, src.lo, src.hi, src.kinds, save_read, &src, cfg->optim.muon};
      rc = colo_ckpt_write_shard(cfg->ckpt_dir, meta->step, model, NULL, NULL, NULL, &pc, me, err,
                                 errlen);
    }
    save_src_free(&src);
  }
  /* a precomputed DPO reference: its tables, the same on every rank */
  if (rc == 0 && lead && dpo && dpo->n_tab)
    rc = colo_ckpt_write_dpo(cfg->ckpt_dir, meta->step, dpo->names, (const float *const *)dpo->tab,
                             dpo->tab_n, dpo->n_tab, err, errlen);
  rc = agree(world, rc, "writing the checkpoint's shards", err, errlen);
  if (rc == 0 && lead)
    rc = colo_ckpt_commit(cfg->ckpt_dir, meta, path, path_len, err, errlen);
  else if (rc < 0 && lead)
    colo_ckpt_abandon(cfg->ckpt_dir, meta->step);
  int removed = 0;
  if (lead && rc == 0 && cfg->ckpt_keep > 0)
    colo_ckpt_prune(cfg->ckpt_dir, cfg->ckpt_keep, cfg->ckpt_keep_best, &removed);
  /* nobody goes on (or stops) before the checkpoint is on disk */
  rc = agree(world, rc, "committing the checkpoint", err, errlen);
  /* asked: the newest request so far, read now that it is written, answers it and those before */
  if (rc == 0)
    report_checkpoint(progress, step, path,
                      asked && cfg->save_requested ? (long)*cfg->save_requested : 0, val, score);
  return rc;
}

/* The world communicator. CPU ranks: tcp (single for one rank). GPU ranks: NCCL over it, when
 * cfg->comm allows, this build has NCCL, the GPU is real and every rank has one of its own (one
 * rank takes NCCL only when asked: there is nothing to move); host buffers are then staged onto
 * the GPU. Otherwise the host communicator, device buffers staged through host memory. */
static int make_world(const colo_train_config_t *cfg, const colo_backend_t *be, int me, int world,
                      colo_comm_t **out, char *err, size_t errlen) {
  colo_comm_t *host = NULL;
  if (world > 1) {
    int rc = colo_comm_tcp_create(cfg->store_addr, me, world, cfg->bind_host, cfg->comm_timeout_ms,
                                  &host, err, errlen);
    if (rc < 0)
      return rc;
  } else if (!(host = colo_comm_single())) {
    snprintf(err, errlen, "a communicator: out of memory");
    return COLO_ENOMEM;
  }
  colo_stage_t where = COLO_STAGE_HOST;
  if (be->device && (cfg->comm == COLO_COMM_NCCL || (cfg->comm == COLO_COMM_AUTO && world > 1))) {
    const char *none = colo_backend_cuda_emulated() ? "the emulated GPU has no NCCL"
                       : !COLO_HAVE_NCCL ? "this colo-train was built without NCCL (the CUDA "
                                           "toolkit's nccl.h or libnccl was not found)"
                                         : NULL;
    colo_comm_t *nc = NULL;
    char why[384] = "";
    int rc = COLO_ENOSYS;
    if (none)
      snprintf(why, sizeof why, "%s", none);
#if COLO_HAVE_NCCL
    else
      rc = colo_comm_nccl_create(host, cfg->gpu, be->stream, cfg->comm_timeout_ms, &nc, why,
                                 sizeof why);
#endif
    if (rc == 0) {
      host = nc; /* it owns the host communicator now */
      where = COLO_STAGE_DEVICE;
    } else if (cfg->comm == COLO_COMM_NCCL || (rc != COLO_ENOSYS && rc != COLO_EBUSY)) {
      snprintf(err, errlen, "%s%s (resources.comm=host moves collectives through host memory)",
               cfg->comm == COLO_COMM_NCCL ? "resources.comm=nccl: " : "NCCL: ", why);
      host->ops->destroy(host);
      return rc == COLO_ENOSYS || rc == COLO_EBUSY ? COLO_EINVAL : rc;
    } else if (me == 0) { /* auto, and every rank alike: through the host */
      printf("colo-train: collectives through host memory: %s\n", why);
    }
  }
  if (be->device && (world > 1 || where == COLO_STAGE_DEVICE)) {
    colo_comm_t *staged = colo_comm_staged(host, be, where);
    if (!staged) {
      host->ops->destroy(host);
      snprintf(err, errlen, "a staged communicator: out of memory");
      return COLO_ENOMEM;
    }
    host = staged;
  }
  *out = host;
  return 0;
}

/* What the ranks were asked, agreed at this same step on every rank: bit 1 a stop
 * (cfg->stop_requested), bit 2 a checkpoint (cfg->save_requested, a count newer than *seen_save);
 * set when any rank was asked. -1 when the collective failed. One rank reads its own flags; more
 * add theirs in an all-reduce of two floats over the world, a step. */
enum { ASKED_STOP = 1, ASKED_SAVE = 2 };
static int asked_agreed(const colo_train_config_t *cfg, colo_comm_t *world_comm, int world,
                        sig_atomic_t seen_save) {
  if (!cfg->stop_requested && !cfg->save_requested)
    return 0;
  float asked[2] = {cfg->stop_requested && *cfg->stop_requested ? 1.0f : 0.0f,
                    cfg->save_requested && *cfg->save_requested != seen_save ? 1.0f : 0.0f};
  if (world > 1 && world_comm->ops->allreduce_sum(world_comm, asked, 2) < 0)
    return -1;
  return (asked[0] > 0.0f ? ASKED_STOP : 0) | (asked[1] > 0.0f ? ASKED_SAVE : 0);
}

int colo_train_run(const colo_train_config_t *cfg, float *final_loss, float *final_val, char *err,
                   size_t errlen) {
  const colo_backend_t *be = colo_backend_cpu();
  float *dump_host = NULL; /* GPU: host copy of the parameters for --dump */
  float *pieces = NULL;    /* ZeRO-3: this rank's parameter pieces, in host memory at set-up */
  int B = cfg->batch_size, T = cfg->model.block_size, rc = 0;
  colo_blend_t train = {0};
  val_sets_t val = {0};
  colo_pool_t *pool = NULL;
  colo_gpt_t *model = NULL;
  colo_lora_t *lora = NULL; /* LoRA: the adapters, the only tensors that train */
  float *lora_rep = NULL;   /* under tensor parallelism: their whole tensors' gradients, summed */
  colo_adamw_t opt = {0};
  colo_comm_t *comm = NULL;    /* the world */
  colo_comm_t *dp_comm = NULL; /* this rank's data-parallel group (the world when tp = 1) */
  /* the group its gradients are summed over and ZeRO shards over: the data-parallel ranks and
   * under context parallelism every piece of their sequences (dp_comm when cp = 1) */
  colo_comm_t *grad_comm = NULL;
  colo_comm_t *cpc = NULL; /* its context-parallel group, NULL when cp = 1 */
  ema_t ema = {0};
  colo_comm_t *tpc = NULL; /* its tensor-parallel group, NULL when tp = 1 */
  colo_zero_t zero = {0};
  dump_t dump = {0};
  int *in = NULL, *tg = NULL;
  dpo_t dpo_s = {0}, *dpo = NULL; /* train.dpo_beta */
  float last_loss = NAN, last_val = NAN, last_score = NAN;
  colo_spike_t *resumed_spike = NULL; /* optimizer.skip_spike_sigma's history, as resumed */
  int val_step = -1;                  /* the step last_val was measured at */
  int auto_pending = 0;               /* memory.placement=auto, in its warm-up step */
  int world = cfg->world > 1 ? cfg->world : 1, me = world > 1 ? cfg->rank : 0;
  int lead = me == 0; /* rank 0 prints, reports and writes checkpoints */
  /* the mesh: rank = ((pp_idx × dp + dp_idx) × cp + cp_idx) × tp + tp_idx, tensor-parallel
   * ranks adjacent (one host, one NVLink domain), then a sequence's pieces */
  int tp = cfg->tp > 1 ? cfg->tp : 1, pp = cfg->pp > 1 ? cfg->pp : 1,
      cp = cfg->cp > 1 ? cfg->cp : 1;
  int dp = world / (tp * pp * cp);
  int tp_idx = me % tp, cp_idx = (me / tp) % cp, dp_idx = (me / (tp * cp)) % (dp > 0 ? dp : 1),
      pp_idx = me / (tp * cp * (dp > 0 ? dp : 1));
  /* this rank's place in grad_comm: ZeRO's rank, which pieces it writes */
  int zdp_idx = dp_idx * cp + cp_idx;
  colo_comm_t *ppc = NULL;  /* this rank's pipeline: the stages at its data/tensor position */
  colo_comm_t *embc = NULL; /* first and last stage: the tied embedding */
  pipe_t pipe_s = {0}, *pipe = NULL;
  int M = pp > 1 && cfg->micro_batches > 1 ? cfg->micro_batches : 1;

  if (cfg->device) { /* a GPU per rank, any layout: collectives through the host (staged.c) */
    char why[256];
    if (!(be = colo_backend_cuda(cfg->gpu, cfg->math, why, sizeof why))) {
      snprintf(err, errlen, "resources.device=gpu: %s", why);
      be = colo_backend_cpu();
      rc = COLO_EUNAVAIL; /* this node's GPU, not the job: another node may do */
      goto out;
    }
  } else if (cfg->math == COLO_MATH_TF32) {
    snprintf(err, errlen,
             "train.tf32 needs resources.device=gpu: TF32 is a GPU's tensor-core mode");
    rc = COLO_EINVAL;
    goto out;
  } else { /* bf16 and fp16 storage, emulated: rounded as the GPU rounds */
    be = colo_backend_cpu_dtype(colo_math_dtype(cfg->math));
  }
  if (cfg->seed >= (1ull << 53)) {
    snprintf(err, errlen,
             "train.seed=%llu must be below 2^53 (checkpoints store it as a JSON "
             "number)",
             (unsigned long long)cfg->seed);
    rc = COLO_EINVAL;
    goto out;
  }
  int blend = cfg->n_sources > 0;
  /* train.steps=0 evaluates the model it starts from: training data, named or not, goes unread */
  int eval_only = cfg->steps == 0;
  if (!eval_only)
    CHECK_GOTO(
        colo_blend_open(&train, blend ? cfg->source_paths : &cfg->train_path,
                        blend ? cfg->source_weights : NULL, blend ? (size_t)cfg->n_sources : 1,
                        cfg->data_order ? cfg->data_order : COLO_ORDER_RANDOM, T, err, errlen),
        rc, out);
  for (size_t k = 0; k < train.n_src; k++) {
    const char *bad_file;
    size_t bad_at;
    unsigned bad_token;
    if (colo_shard_find_above(&train.src[k], (unsigned)cfg->model.vocab_size, &bad_file, &bad_at,
                              &bad_token)) {
      snprintf(err, errlen, "%s: token %u at %zu is outside model.vocab_size=%d", bad_file,
               bad_token, bad_at, cfg->model.vocab_size);
      rc = COLO_EINVAL;
      goto out;
    }
    /* a document token that begins no document is a mistake, not windows attended whole */
    if (cfg->document_token >= 0 && !colo_shard_has(&train.src[k], (unsigned)cfg->document_token)) {
      snprintf(err, errlen,
               "data.document_token=%d: %s holds no such token, so no document begins with it "
               "(colo-train prepare prints the token it puts before each document)",
               cfg->document_token, train.src[k].path);
      rc = COLO_EINVAL;
      goto out;
    }
  }
  /* multiple-choice questions are scored, not trained on; preference pairs are DPO's alone */
  for (size_t k = 0; k < train.n_src; k++)
    if (train.src[k].choices || (train.src[k].pairs && !(cfg->dpo_beta > 0.0f))) {
      snprintf(err, errlen,
               train.src[k].choices
                   ? "%s holds multiple-choice questions: a run scores its model on them at each "
                     "evaluation when data.choice_sets names them, and does not train on them"
                   : "%s holds preference pairs (two answers to each prompt): train.dpo_beta "
                     "trains on them",
               train.src[k].path);
      rc = COLO_EINVAL;
      goto out;
    }
  /* DPO trains on preference pairs, and nothing else does */
  if (cfg->dpo_beta > 0.0f) {
    const char *why = NULL;
    if (train.n_src != 1 || !train.src[0].pairs)
      why = "it trains on preference pairs (colo-train prepare --prompt-field --chosen-field "
            "--rejected-field writes them), and data.train_path is not a preference shard";
    else if (pp > 1 && (B / M) % 2)
      why = "each of the pipeline's micro-batches must hold whole pairs (an even number of "
            "rows: train.batch_size / parallel.micro_batches)";
    else if (B % 2)
      why = "train.batch_size must be even: a pair is two rows, its chosen and its rejected "
            "answer";
    if (why) {
      snprintf(err, errlen, "train.dpo_beta=%g: %s", (double)cfg->dpo_beta, why);
      rc = COLO_EINVAL;
      goto out;
    }
    dpo_s.beta = cfg->dpo_beta;
    dpo_s.w = malloc((size_t)B * T * sizeof *dpo_s.w);
    dpo_s.ref_lp = malloc((size_t)B * sizeof *dpo_s.ref_lp);
    dpo_s.pol = malloc((size_t)B * sizeof *dpo_s.pol);
    dpo_s.idx = malloc((size_t)(B / 2 + 1) * sizeof *dpo_s.idx);
    dpo_s.cnt = malloc((size_t)B * sizeof *dpo_s.cnt);
    dpo_s.loss = cfg->dpo_loss;
    dpo_s.smooth = cfg->dpo_label_smoothing;
    dpo_s.gamma = cfg->dpo_simpo_gamma;
    dpo_s.rpo = cfg->dpo_rpo_alpha;
    if (!dpo_s.w || !dpo_s.ref_lp || !dpo_s.pol || !dpo_s.idx || !dpo_s.cnt) {
      snprintf(err, errlen, "out of memory");
      rc = COLO_ENOMEM;
      goto out;
    }
    dpo = &dpo_s;
  }
  /* keep_best evaluates at each checkpoint written on schedule, with or without an interval */
  int keep_best = cfg->ckpt_dir && cfg->ckpt_keep_best;
  if (cfg->eval_interval > 0 || keep_best || eval_only) {
    CHECK_GOTO(val_sets_open(&val, cfg, T, err, errlen), rc, out);
    for (int k = 0; k < val.n; k++)
      if (val.s[k].choices) {
        snprintf(err, errlen,
                 "%s holds multiple-choice questions: name it in data.choice_sets, which are "
                 "scored at each evaluation",
                 val.s[k].path);
        rc = COLO_EINVAL;
        goto out;
      } else if (!val.s[k].pairs != !dpo) {
        snprintf(err, errlen,
                 dpo ? "%s: not a preference shard: a DPO run (train.dpo_beta) evaluates its "
                       "loss on pairs"
                     : "%s holds preference pairs: only a DPO run (train.dpo_beta) evaluates on "
                       "them",
                 val.s[k].path);
        rc = COLO_EINVAL;
        goto out;
      }
  }
  CHECK_GOTO(make_world(cfg, be, me, world, &comm, err, errlen), rc, out);
  if (dp < 1 || world % (tp * pp * cp)) {
    snprintf(err, errlen, "a world of %d ranks does not split into pp=%d × cp=%d × tp=%d", world,
             pp, cp, tp);
    rc = COLO_EINVAL;
    goto out;
  }
  if (world > 1 && cfg->ckpt_dir)
    CHECK_GOTO(check_shared_dir(cfg->ckpt_dir, comm, me, err, errlen), rc, out);
  if (B % M || cfg->model.n_layer < pp) {
    snprintf(err, errlen,
             "%d micro-batches must divide the batch of %d, and %d stages need as "
             "many layers",
             M, B, pp);
    rc = COLO_EINVAL;
    goto out;
  }
  /* the mesh: rank = ((pp_idx × dp + dp_idx) × cp + cp_idx) × tp + tp_idx: tensor-parallel
   * ranks adjacent (one host), then context-parallel ones, pipeline stages outermost */
#define MESH(st, d, c, t) ((((st)*dp + (d)) * cp + (c)) * tp + (t))
  if (tp > 1 || pp > 1 || cp > 1) {
    int n = tp > dp * cp ? tp : dp * cp;
    n = n > pp ? n : pp;
    int *members = malloc((size_t)n * sizeof *members);
    for (int t = 0; rc == 0 && t < tp && tp > 1; t++)
      members[t] = MESH(pp_idx, dp_idx, cp_idx, t);
    if (tp > 1)
      rc = colo_comm_group(comm, members, tp, &tpc, err, errlen);
    for (int c = 0; rc == 0 && c < cp && cp > 1; c++)
      members[c] = MESH(pp_idx, dp_idx, c, tp_idx);
    if (rc == 0 && cp > 1)
      rc = colo_comm_group(comm, members, cp, &cpc, err, errlen);
    for (int d = 0; rc == 0 && d < dp; d++)
      members[d] = MESH(pp_idx, d, cp_idx, tp_idx);
    if (rc == 0)
      rc = colo_comm_group(comm, members, dp, &dp_comm, err, errlen);
    for (int d = 0; rc == 0 && cp > 1 && d < dp * cp; d++)
      members[d] = MESH(pp_idx, d / cp, d % cp, tp_idx);
    if (rc == 0 && cp > 1)
      rc = colo_comm_group(comm, members, dp * cp, &grad_comm, err, errlen);
    for (int st = 0; rc == 0 && pp > 1 && st < pp; st++)
      members[st] = MESH(st, dp_idx, cp_idx, tp_idx);
    if (rc == 0 && pp > 1)
      rc = colo_comm_group(comm, members, pp, &ppc, err, errlen);
    /* the first and last stage share the tied token embedding: its gradients add up */
    if (rc == 0 && pp > 1 && !cfg->model.untied_head && (pp_idx == 0 || pp_idx == pp - 1)) {
      members[0] = MESH(0, dp_idx, cp_idx, tp_idx);
      members[1] = MESH(pp - 1, dp_idx, cp_idx, tp_idx);
      rc = colo_comm_group(comm, members, 2, &embc, err, errlen);
    }
#undef MESH
    free(members);
    if (rc < 0)
      goto out;
  } else {
    dp_comm = comm;
  }
  if (!grad_comm)
    grad_comm = dp_comm;
  pool = colo_pool_create_with(be->device ? "gpu" : "cpu", cfg->memory_limit, be->allocator);
  /* under ZeRO-3 the model has no parameter buffer: its values go from the host straight into
   * this rank's pieces (colo_zero_attach_from), never whole in the backend's memory */
  int z3 = cfg->zero_stage == 3;
  /* QLoRA's NF4 matrices are made from the host a tensor at a time (colo_gpt_put): never whole
   * in fp32 in the backend's memory either */
  int nf4 = cfg->lora.rank > 0 && cfg->lora.quant == COLO_LORA_QUANT_NF4;
  colo_gpt_stage_t stage = {pp_idx * cfg->model.n_layer / pp,
                            (pp_idx + 1) * cfg->model.n_layer / pp,
                            pp_idx == 0,
                            pp_idx == pp - 1,
                            z3 || nf4,
                            cpc};
  CHECK_GOTO(colo_gpt_create_stage(&cfg->model, B / M, cfg->recompute, be, tpc,
                                   pp > 1 || z3 || nf4 || cpc ? &stage : NULL, pool, &model, err,
                                   errlen),
             rc, out);
  if (cfg->sequence_parallel) {
    if (!tpc || ((B / M) * (T / cp)) % tp) {
      snprintf(err, errlen, "sequence parallelism needs tp > 1 dividing batch_size × block_size");
      rc = COLO_EINVAL;
      goto out;
    }
    CHECK_GOTO(colo_gpt_set_sequence_parallel(model, 1, err, errlen), rc, out);
  }
  if (cfg->document_token >= 0)
    CHECK_GOTO(colo_gpt_set_documents(model, cfg->document_token, err, errlen), rc, out);
  if (cfg->lora.rank > 0) {
    /* NF4 under tensor parallelism: a rank's part of each matrix holds whole blocks of 64 */
    int unaligned = tp > 1 && nf4 &&
                    ((cfg->model.n_embd / tp) % 64 || (colo_gpt_q_width(&cfg->model) / tp) % 64 ||
                     (colo_gpt_mlp_hidden(&cfg->model) / tp) % 64);
    if (cfg->zero_stage == 1 || cfg->zero_stage == 2 || (pp > 1 && cfg->zero_stage == 3) ||
        unaligned) {
      snprintf(err, errlen,
               "train.lora: the frozen model is whole on each rank or split by its stages and "
               "tensor-parallel ranks (zero_stage=0), or sharded over the data-parallel ranks "
               "without stages (3); NF4 (lora_quant) under tensor parallelism needs n_embd/tp, "
               "n_head·head_dim/tp and the MLP's width/tp to be multiples of 64; this run has "
               "parallel.tp=%d, pp=%d, "
               "zero_stage=%d%s",
               tp, pp, cfg->zero_stage, nf4 ? ", lora_quant=nf4" : "");
      rc = COLO_EINVAL;
      goto out;
    }
    CHECK_GOTO(colo_lora_create(model, &cfg->lora, pool, &lora, err, errlen), rc, out);
    CHECK_GOTO(colo_gpt_set_lora(model, lora, err, errlen), rc, out);
    if (tpc && !(lora_rep = colo_pool_alloc(pool, lora_tp_whole(lora) * sizeof(float) + 1,
                                            "lora gradients"))) {
      rc = colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(pool));
      goto out;
    }
    if (nf4)
      CHECK_GOTO(colo_gpt_quantize_nf4(model, z3, cfg->lora.double_quant, err, errlen), rc, out);
  }
  /* train.init_from a LoRA run's checkpoint. In a LoRA run its adapters start this one's (with a
   * fresh optimizer, at step 0), and the model they adapted (its manifest's base, or its seed's
   * initialisation) is the frozen one, now and on a resume; in a run that is not LoRA the model
   * starts as that one with the adapters merged in (merge_from) */
  colo_ckpt_meta_t from;
  int lora_from = 0, merge_from = 0;
  const char *base = cfg->init_from;
  uint64_t base_seed = cfg->seed;
  if (cfg->init_from) {
    char why[256];
    if (colo_ckpt_read_meta(cfg->init_from, &from, why, sizeof why) == 0 && from.lora.rank > 0) {
      const colo_gpt_config_t *a = &from.model, *b = &cfg->model;
      lora_from = lora != NULL;
      merge_from = lora == NULL;
      base = from.lora_base[0] ? from.lora_base : NULL;
      base_seed = from.seed;
      if (merge_from && (tp > 1 || pp > 1 || z3)) {
        snprintf(err, errlen,
                 "checkpoint %s holds LoRA adapters: a run that is not LoRA starts from the model "
                 "they make, merged, with the model whole on each rank (parallel.tp=1, pp=1, "
                 "zero_stage below 3; this run has tp=%d, pp=%d, zero_stage=%d); `colo-train "
                 "export --checkpoint %s --out model.safetensors` writes it for any layout",
                 cfg->init_from, tp, pp, cfg->zero_stage, cfg->init_from);
        rc = COLO_EINVAL;
        goto out;
      }
      if (a->arch != b->arch || a->n_layer != b->n_layer || a->n_head != b->n_head ||
          a->n_embd != b->n_embd || a->block_size != b->block_size ||
          a->vocab_size != b->vocab_size) {
        snprintf(err, errlen,
                 "checkpoint %s adapted a %s model of %d layers, %d heads, %d wide, block %d, "
                 "vocabulary %d; this run's is %s, %d, %d, %d, %d, %d",
                 cfg->init_from, colo_gpt_arch_name(a->arch), a->n_layer, a->n_head, a->n_embd,
                 a->block_size, a->vocab_size, colo_gpt_arch_name(b->arch), b->n_layer, b->n_head,
                 b->n_embd, b->block_size, b->vocab_size);
        rc = COLO_EINVAL;
        goto out;
      }
      if (lora_from && !base && from.seed != cfg->seed) { /* its checkpoints could not say */
        snprintf(err, errlen,
                 "checkpoint %s adapted the model of its seed's initialisation (seed %llu): "
                 "train.seed must be the same (this run's is %llu)",
                 cfg->init_from, (unsigned long long)from.seed, (unsigned long long)cfg->seed);
        rc = COLO_EINVAL;
        goto out;
      }
    }
  }
  if (pp > 1) { /* boundary tensors: this rank's rows */
    pipe_s = (pipe_t){model, ppc,  pp_idx, pp, M, B / M, T,    colo_gpt_stage_rows(model, B / M, T),
                      NULL,  NULL, lora,   0,  0, 0,     0.0f, 0};
    /* on a GPU they are its memory: the communicator stages them, the model copies from them */
    if (be->device) {
      pipe_s.x_store = colo_pool_alloc(pool, (size_t)M * pipe_s.nc * sizeof(float), "boundaries");
      pipe_s.dy = colo_pool_alloc(pool, pipe_s.nc * sizeof(float), "boundary gradient");
    } else {
      pipe_s.x_store = calloc((size_t)M * pipe_s.nc, sizeof(float));
      pipe_s.dy = calloc(pipe_s.nc, sizeof(float));
    }
    if (!pipe_s.x_store || !pipe_s.dy) {
      snprintf(err, errlen, "%s", be->device ? colo_pool_error(pool) : "out of memory");
      rc = COLO_ENOMEM;
      goto out;
    }
    pipe_s.dpo = dpo;
    pipe = &pipe_s;
  }
  CHECK_GOTO(colo_zero_init(&zero, grad_comm, cfg->zero_stage, cfg->chunk_floats, model, pool, err,
                            errlen),
             rc, out);
  if (cfg->placement_static) {
    colo_placement_t pl = {cfg->param_device_fraction, cfg->optim_device_fraction,
                           cfg->optim_nvme_fraction, cfg->nvme_dir};
    CHECK_GOTO(colo_zero_place(&zero, &pl, err, errlen), rc, out);
  } else if (cfg->placement_auto) { /* the warm-up step with everything that may move off */
    colo_placement_t pl = {cfg->zero_stage == 3 ? 0.0f : 1.0f, lora ? 1.0f : 0.0f, 0.0f, NULL};
    CHECK_GOTO(colo_zero_place(&zero, &pl, err, errlen), rc, out);
  }
  if (tpc && cfg->zero_stage >= 2)
    colo_zero_set_tp(&zero, tpc);
  if (z3 && !(pieces = calloc(zero.shard_n ? zero.shard_n : 1, sizeof *pieces))) {
    rc = colo_fail(err, errlen, COLO_ENOMEM, "no host memory for %zu parameters' pieces",
                   zero.shard_n);
    goto out;
  }
  CHECK_GOTO(colo_adamw_init(&opt, &cfg->optim,
                             lora ? colo_lora_numel(lora) : colo_zero_optim_numel(&zero, model),
                             pool, err, errlen),
             rc, out);
  if (cfg->optim.muon && !lora) {
    CHECK_GOTO(colo_adamw_muon_init(&opt, model, cfg->zero_stage == 0, tpc, err, errlen), rc, out);
    CHECK_GOTO(colo_zero_muon(&zero, &opt, err, errlen), rc, out);
  }
  if (cfg->ema_decay > 0.0f && !lora)
    CHECK_GOTO(ema_init(&ema, cfg->ema_decay, &zero, model, be, zdp_idx, err, errlen), rc, out);
  /* the batch's tokens, page-locked where the backend has such memory: the device copies them
   * at the bus's speed every micro-step, without a staging copy of the driver's */
  if (!(in = colo_host_alloc(be, (size_t)B * T * sizeof *in)) ||
      !(tg = colo_host_alloc(be, (size_t)B * T * sizeof *tg))) {
    snprintf(err, errlen, "no host memory for a batch of %d × %d tokens", B, T);
    rc = COLO_ENOMEM;
    goto out;
  }
  if (be->device && cfg->dump_path && lead &&
      !(dump_host = malloc(colo_gpt_num_params(model) * sizeof(float)))) {
    snprintf(err, errlen, "no host memory for --dump of %zu parameters",
             colo_gpt_num_params(model));
    rc = COLO_ENOMEM;
    goto out;
  }

  int start = 0;
  early_t es = {cfg->best_set ? -INFINITY : INFINITY, -1, 0}; /* none yet */
  char ckpt_path[1200] = "";
  colo_loss_scaler_t scaler;
  colo_loss_scaler_init(&scaler, cfg->loss_scale_init, cfg->loss_scale_window);
  if (cfg->resume) {
    char dir[1200], skipped[2048] = "";
    if (!strcmp(cfg->resume, "auto")) {
      /* rank 0 verifies every file of the newest checkpoints until one holds and tells the
       * others its step (a step in two floats: exact to 2^48); each rank then hashes only the
       * shards it reads */
      float pick[2] = {-1.0f, 0.0f};
      if (lead && cfg->ckpt_dir &&
          colo_ckpt_find_latest(cfg->ckpt_dir, dir, sizeof dir, skipped, sizeof skipped) == 0) {
        colo_ckpt_meta_t m;
        if (colo_ckpt_read_meta(dir, &m, err, errlen) == 0)
          pick[0] = (float)(m.step >> 24), pick[1] = (float)(m.step & 0xffffff);
      }
      if (lead && skipped[0])
        fprintf(stderr, "colo-train: skipped unusable checkpoints: %s\n", skipped);
      if (comm->ops->broadcast(comm, pick, 2, 0) < 0) {
        snprintf(err, errlen, "choosing the checkpoint to resume from: %s", colo_comm_error(comm));
        rc = COLO_EIO;
        goto out;
      }
      dir[0] = '\0'; /* nothing to resume from: start fresh */
      if (pick[0] >= 0.0f)
        snprintf(dir, sizeof dir, "%s/step_%08llu", cfg->ckpt_dir,
                 ((unsigned long long)pick[0] << 24) | (unsigned long long)pick[1]);
    } else {
      snprintf(dir, sizeof dir, "%s", cfg->resume);
    }
    if (dir[0]) {
      colo_ckpt_meta_t meta;
      /* tensor by tensor into where this rank keeps them: the parameters into the model (on a
       * GPU through host memory), the moments into the optimizer's, or under ZeRO into host
       * copies of this rank's pieces, then put where the placement keeps them */
      load_dst_t ld = {be, model, &opt, cfg->zero_stage >= 1 ? &zero : NULL, NULL, NULL, pieces,
                       0,  "",    ema.w};
      if (lora) /* the adapters and their moments; the frozen model comes below */
        rc = load_lora(dir, &meta, lora, &opt, be, base, lead, err, errlen);
      else if (ld.zero) {
        ld.pm = malloc((zero.shard_n ? zero.shard_n : 1) * sizeof(float));
        ld.pv = malloc((zero.shard_n ? zero.shard_n : 1) * sizeof(float));
        if (!ld.pm || !ld.pv)
          rc = colo_fail(err, errlen, COLO_ENOMEM, "no host memory to load %s", dir);
      }
      colo_ckpt_sink_t sink = {ema.w ? 15 : 7, load_put, load_want, &ld};
      if (rc == 0 && !lora)
        rc = colo_ckpt_load_to(dir, &meta, model, &sink, err, errlen);
      if (rc == 0 && ld.zero && colo_zero_take_moments(&zero, &opt, ld.pm, ld.pv) < 0)
        rc = colo_fail(err, errlen, COLO_EIO, "%s", colo_zero_error(&zero));
      free(ld.pm);
      free(ld.pv);
      if (rc < 0)
        goto out;
      opt.t = meta.adam_t;
      ema.updates = cfg->ema_decay > 0.0f ? meta.ema_updates : 0; /* 0: from the next step's */
      if (scaler.enabled && meta.loss_scale > 1.0f) { /* the scale and window carry on */
        scaler.scale = meta.loss_scale;
        scaler.good_steps = meta.loss_scale_good;
      }
      if (meta.muon != cfg->optim.muon) {
        snprintf(err, errlen,
                 "checkpoint %s was trained with optimizer %s, this run has %s: its moments "
                 "do not carry over (train.init_from takes its weights alone)",
                 dir, meta.muon ? "muon" : "adamw", cfg->optim.muon ? "muon" : "adamw");
        rc = COLO_EINVAL;
        goto out;
      }
      if (meta.seed != cfg->seed) {
        snprintf(err, errlen, "checkpoint %s was trained with seed %llu, this run has %llu", dir,
                 (unsigned long long)meta.seed, (unsigned long long)cfg->seed);
        rc = COLO_EINVAL;
        goto out;
      }
      start = (int)meta.step;
      if (meta.es_kept)
        es = (early_t){meta.es_best, meta.es_best_step, meta.es_since};
      if (cfg->spike_sigma > 0 && meta.spike_kept) { /* into the run's meta, once it is made */
        if (!(resumed_spike = malloc(sizeof *resumed_spike))) {
          rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
          goto out;
        }
        *resumed_spike = meta.spike;
      }
      snprintf(ckpt_path, sizeof ckpt_path, "%s", dir);
      if (!cfg->quiet && lead)
        printf("resumed from %s at step %d\n", dir, start);
      /* newer checkpoints are of a line of training that ends here (or did not verify): left
       * there, keep-pruning would count them and remove the ones this line writes */
      char dropped[1024];
      if (lead && cfg->ckpt_dir &&
          colo_ckpt_drop_after(cfg->ckpt_dir, (uint64_t)start, dropped, sizeof dropped) > 0)
        printf("removed checkpoints newer than step %d: %s\n", start, dropped);
      if (lead && cfg->progress) {
        char js[2500];
        fprintf(cfg->progress, "{\"event\":\"resumed\",\"step\":%d,\"path\":\"%s\"}\n", start,
                json_str(js, sizeof js, dir));
        fflush(cfg->progress);
      }
    }
  }
  /* given weights, as a resume takes a checkpoint's; a LoRA run's frozen model, always: a tensor
   * at a time, as the resume's are put, into the model (on a GPU through host memory) or under
   * ZeRO-3 into this rank's pieces, reading only the part it keeps */
  load_dst_t pd = {be, model, &opt, z3 ? &zero : NULL, NULL, NULL, pieces, 0, "", NULL};
  colo_ckpt_sink_t to_model = {1, load_put, load_want, &pd};
  if ((!ckpt_path[0] || lora) && base) {
    CHECK_GOTO(colo_ckpt_load_weights_to(base, model, &to_model, err, errlen), rc, out);
    if ((rc = pd.rc) < 0) {
      snprintf(err, errlen, "%s: %s", base, pd.err);
      goto out;
    }
    if (!cfg->quiet && lead)
      printf("initial weights from %s%s%s%s\n", base,
             lora_from    ? ", which checkpoint "
             : merge_from ? ", with the adapters of "
                          : "",
             lora_from || merge_from ? cfg->init_from : "",
             lora_from    ? " adapted"
             : merge_from ? " merged in"
                          : "");
    if (lead && cfg->progress) {
      char js[2500];
      colo_ckpt_meta_t im; /* a colo checkpoint's: its step too */
      char why[256];
      int known = colo_ckpt_read_meta(cfg->init_from, &im, why, sizeof why) == 0;
      fprintf(cfg->progress, "{\"event\":\"init_from\",\"path\":\"%s\"",
              json_str(js, sizeof js, cfg->init_from));
      if (known)
        fprintf(cfg->progress, ",\"step\":%llu", (unsigned long long)im.step);
      fputs("}\n", cfg->progress);
      fflush(cfg->progress);
    }
  } else if (!ckpt_path[0] || lora) {
    colo_gpt_init_each(model, base_seed, init_put, &pd);
    if ((rc = pd.rc) < 0) {
      snprintf(err, errlen, "initialising the model: %s", pd.err);
      goto out;
    }
  }
  if (merge_from && !ckpt_path[0])
    CHECK_GOTO(merge_adapters(model, cfg->init_from, &from, pool, err, errlen), rc, out);
  if (lora && !ckpt_path[0] && lora_from) { /* its adapters, to train on */
    colo_ckpt_meta_t am;
    CHECK_GOTO(load_lora(cfg->init_from, &am, lora, NULL, be, base, lead, err, errlen), rc, out);
    if (!cfg->quiet && lead)
      printf("adapters from %s (step %llu of its run)\n", cfg->init_from,
             (unsigned long long)am.step);
  } else if (lora && !ckpt_path[0]) {
    colo_lora_init(lora, cfg->seed);
  }
  /* DPO's reference: the model as the run starts, those adapters too (precomputed: the model as
   * it is now, below) */
  int dpo_pre = dpo && !ref_free(dpo) && (cfg->lora.rank <= 0 || cfg->dpo_precompute);
  if (dpo && lora_from && !dpo_pre && !ref_free(dpo)) {
    colo_ckpt_meta_t am;
    CHECK_GOTO(colo_lora_create(model, &cfg->lora, pool, &dpo_s.ref, err, errlen), rc, out);
    CHECK_GOTO(load_lora(cfg->init_from, &am, dpo_s.ref, NULL, be, base, 0, err, errlen), rc, out);
  }
  /* 16-bit activations: the frozen matrices as their compute copies alone (not with --dump, which
   * writes the model's fp32 tensors) */
  int w16 = lora && !nf4 && be->act_dtype != COLO_DTYPE_F32 && cfg->zero_stage == 0 &&
            !(lead && cfg->dump_path); /* under ZeRO-3 they are fetched pieces */
  if (w16)
    CHECK_GOTO(colo_gpt_freeze_matrices(model, err, errlen), rc, out);
  CHECK_GOTO(colo_zero_attach_from(&zero, pieces, err, errlen), rc, out);
  free(pieces);
  pieces = NULL;
  /* the model's own gradients (none under ZeRO-2/3's hooks or LoRA), made now: a run that cannot
   * hold them fails here rather than in its first step */
  colo_gpt_zero_grad(model);
  if (colo_gpt_hook_error(model) < 0) {
    rc = colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(pool));
    goto out;
  }
  /* the reported peak is that of training, not set-up's */
  colo_pool_reset_peak(pool);

  size_t n_params = colo_gpt_num_params(model);
  char cp_note[24] = ""; /* context parallelism, where there is any */
  if (cp > 1)
    snprintf(cp_note, sizeof cp_note, "cp=%d x ", cp);
  if (!cfg->quiet && lead && world > 1)
    printf("mesh: pp=%d (%d micro-batches) x dp=%d x %stp=%d%s; ZeRO stage %d over %zu chunks of "
           "%zu floats (%zu padding)\n",
           pp, M, dp, cp_note, tp,
           colo_gpt_sequence_parallel(model) ? " with sequence parallelism" : "", cfg->zero_stage,
           zero.chunks.n, zero.chunks.capacity, zero.chunks.waste);
  if (!cfg->quiet && lead && pp > 1)
    printf("pipeline: %d stages; stage 0 holds blocks [0, %d) and %zu of the model's %zu "
           "parameters\n",
           pp, cfg->model.n_layer / pp, n_params, colo_gpt_full_numel(model));
  char threads_or_gpu[96];
  if (be->device)
    snprintf(threads_or_gpu, sizeof threads_or_gpu, "GPU %d%s (%s activations, %s products)",
             cfg->gpu, colo_backend_cuda_emulated() ? " emulated on the CPU" : "",
             colo_dtype_name(be->act_dtype),
             (const char *[]){"fp32", "TF32", "bf16", "fp16"}[cfg->math & 3]);
  else
    snprintf(threads_or_gpu, sizeof threads_or_gpu, "%d threads%s", colo_backend_cpu_threads(),
             be->act_dtype == COLO_DTYPE_BF16  ? ", bf16 activations (emulated)"
             : be->act_dtype == COLO_DTYPE_F16 ? ", fp16 activations (emulated)"
                                               : "");
  char heads[32] = ""; /* a head's width, where model.head_dim sets it */
  if (cfg->model.head_dim)
    snprintf(heads, sizeof heads, " of %d", cfg->model.head_dim);
  char window[96] = ""; /* and attention's window, where model.sliding_window sets one, and */
  int wn = 0;           /* LongRoPE's divisors for this block, where the model has them */
  if (cfg->model.sliding_window)
    wn = snprintf(window, sizeof window, " (attention window %d)", cfg->model.sliding_window);
  if (cfg->model.rope_ext)
    snprintf(window + wn, sizeof window - (size_t)wn, " (LongRoPE's %s divisors, attention x%.4g)",
             colo_gpt_rope_ext(&cfg->model) == cfg->model.rope_long ? "long" : "short",
             (double)(cfg->model.rope_attn > 0 ? cfg->model.rope_attn : 1.0f));
  if (!cfg->quiet && lead)
    printf("model: %s, %d layers, %d heads%s, %d wide, block %d%s, vocab %d: %zu parameters; "
           "batch %d x accum %d x %d tokens; %s; %s memory %.1f MiB\n",
           colo_gpt_arch_name(cfg->model.arch), cfg->model.n_layer, cfg->model.n_head, heads,
           cfg->model.n_embd, T, window, cfg->model.vocab_size, n_params, B, cfg->grad_accum, T,
           threads_or_gpu, be->device ? "GPU" : "host", (double)colo_pool_used(pool) / (1 << 20));
  if (!cfg->quiet && lead && cfg->optim.muon && !lora) {
    size_t nt, nm = 0, nmat = 0;
    const colo_param_t *table = colo_gpt_params_table(model, &nt);
    for (size_t i = 0; i < nt; i++)
      if (colo_muon_takes(&table[i])) {
        colo_muon_block_t b[3];
        nmat += (size_t)colo_muon_blocks(&table[i], b);
        nm += table[i].numel;
      }
    char how[96];
    float ratio = colo_muon_lr_ratio(&cfg->optim);
    int n = snprintf(how, sizeof how, "%s",
                     cfg->optim.muon_original ? "scaled by sqrt(max(1, out/in))"
                                              : "the update's RMS matched to AdamW's");
    if (cfg->optim.muon_original || ratio != 1.0f)
      snprintf(how + n, sizeof how - (size_t)n, ", lr %g", (double)(cfg->optim.lr * ratio));
    printf("optimizer: muon (momentum %g, Nesterov, %d Newton-Schulz steps, %s) for %zu matrices, "
           "%zu parameters%s; adamw for the other %zu\n",
           (double)cfg->optim.muon_momentum, COLO_MUON_NS_STEPS, how, nmat, nm,
           tp > 1   ? " (this rank's shares: each gathered whole over the tensor-parallel group)"
           : pp > 1 ? " on this stage"
                    : "",
           n_params - nm);
  }
  if (!cfg->quiet && lead && ema.w)
    printf("ema: the weights' moving average, decay %g, in host memory (%.1f MiB on this "
           "rank%s), %s\n",
           (double)ema.decay, (double)ema.n * sizeof(float) / (1 << 20),
           cfg->zero_stage > 0 ? ": its pieces" : "", ema.updates ? "resumed" : "from step 1");
  if (!cfg->quiet && lead && lora) {
    char tg[96], nf4_said[224], drop_said[128] = "";
    snprintf(drop_said, sizeof drop_said, "%s",
             cfg->lora.rslora ? " (rsLoRA: scale alpha/sqrt(r))" : "");
    if (cfg->lora.dora)
      snprintf(drop_said + strlen(drop_said), sizeof drop_said - strlen(drop_said),
               ", DoRA (a magnitude per output)");
    if (cfg->lora.dropout > 0.0f)
      snprintf(drop_said + strlen(drop_said), sizeof drop_said - strlen(drop_said), ", dropout %g",
               colo_lora_dropout_decimal(&cfg->lora));
    if (cfg->lora.plus_ratio > 0.0f && cfg->lora.plus_ratio != 1.0f)
      snprintf(drop_said + strlen(drop_said), sizeof drop_said - strlen(drop_said),
               ", LoRA+ (B at %g x lr)", (double)cfg->lora.plus_ratio);
    size_t nm = colo_gpt_block_matrix_numel(model),
           nb = colo_gpt_nf4_bytes(model, cfg->lora.double_quant);
    snprintf(nf4_said, sizeof nf4_said,
             ", its blocks' matrices in NF4 (QLoRA%s): %.1f MiB for %zu values, %.4f bytes each "
             "(%.1f MiB in 16 bits)%s",
             cfg->lora.double_quant ? ", double quantization" : "", (double)nb / (1 << 20), nm,
             nm ? (double)nb / (double)nm : 0.0, (double)(2 * nm) / (1 << 20),
             cfg->zero_stage == 3 ? ", sharded over the data-parallel ranks (ZeRO-3)" : "");
    size_t l_off, l_all;
    colo_lora_span(lora, &l_off, &l_all);
    char staged[96] = "";
    if (pp > 1 || tp > 1)
      snprintf(staged, sizeof staged, " (%zu on this rank, of pp=%d x tp=%d)",
               colo_lora_numel(lora), pp, tp);
    printf("lora: rank %d, alpha %g%s on %s: %zu parameters train%s, the %s %zu are frozen "
           "(%s)%s\n",
           cfg->lora.rank, (double)cfg->lora.alpha, drop_said,
           colo_lora_targets_name(cfg->lora.targets, tg, sizeof tg), l_all, staged,
           pp > 1 || tp > 1 ? "rank's" : "model's", n_params,
           cfg->init_from ? cfg->init_from : "initialised from the seed",
           nf4   ? nf4_said
           : w16 ? ", its blocks' matrices in 16 bits only"
           : cfg->zero_stage == 3 && zero.esz == 2
               ? ", sharded over the data-parallel ranks (ZeRO-3), "
                 "its values exact in 16 bits and kept so"
           : cfg->zero_stage == 3 ? ", sharded over the data-parallel ranks (ZeRO-3)"
                                  : "");
  }
  /* NEFTune's magnitude: alpha / sqrt(L·d), as Transformers' hook takes it (the padded length) */
  float noise_mag = cfg->neftune_alpha > 0.0f
                        ? (float)(cfg->neftune_alpha / sqrt((double)T * cfg->model.n_embd))
                        : 0.0f;
  if (!cfg->quiet && lead && noise_mag > 0.0f)
    printf("neftune: uniform noise in +-%.4g (alpha %g / sqrt(%d x %d)) on the embeddings in "
           "training\n",
           (double)noise_mag, (double)cfg->neftune_alpha, T, cfg->model.n_embd);
  if (!cfg->quiet && lead && dpo) {
    size_t cut, lost;
    const colo_shard_t *s = &train.src[0];
    colo_pairs_cut(s, T, &cut, &lost);
    double per = (double)B / 2 * cfg->grad_accum * dp;
    char loss_said[160] = "", ref_said[1300];
    if (ref_free(dpo))
      snprintf(ref_said, sizeof ref_said, "no reference (this loss has none)");
    else
      snprintf(ref_said, sizeof ref_said, "reference the model as the run starts (%s%s)",
               dpo_pre    ? "precomputed: a forward over every pair before the first step"
               : dpo->ref ? "with the adapters of "
                          : "without adapters",
               dpo->ref ? cfg->init_from : "");
    /* the loss unless plain sigmoid: its name, SimPO's margin, the label smoothing */
    static const char *const loss_name[] = {
        " (sigmoid loss", " (hinge loss: max(0, 1 - z)",
        " (IPO loss: (h - 1/(2 beta))^2 of mean log-probabilities per token",
        " (SimPO loss: mean log-probabilities per token, margin gamma",
        " (ORPO loss: the chosen answer's NLL + beta x its odds ratio's"};
    if (cfg->dpo_loss != COLO_DPO_SIGMOID || cfg->dpo_label_smoothing > 0.0f) {
      snprintf(loss_said, sizeof loss_said, "%s", loss_name[cfg->dpo_loss]);
      if (cfg->dpo_loss == COLO_DPO_SIMPO)
        snprintf(loss_said + strlen(loss_said), sizeof loss_said - strlen(loss_said), " %g",
                 (double)cfg->dpo_simpo_gamma);
      if (cfg->dpo_label_smoothing > 0.0f)
        snprintf(loss_said + strlen(loss_said), sizeof loss_said - strlen(loss_said),
                 ", label smoothing %g", (double)cfg->dpo_label_smoothing);
      snprintf(loss_said + strlen(loss_said), sizeof loss_said - strlen(loss_said), ")");
    }
    if (cfg->dpo_rpo_alpha > 0.0f)
      snprintf(loss_said + strlen(loss_said), sizeof loss_said - strlen(loss_said),
               " + RPO: %g x the chosen answer's NLL per token", (double)cfg->dpo_rpo_alpha);
    printf("dpo: beta %g%s, %s; %s: %zu pairs, %d a step, %.2f epochs in %d steps\n",
           (double)cfg->dpo_beta, loss_said, ref_said, s->path, s->n_pairs, (int)per,
           per * cfg->steps / (double)s->n_pairs, cfg->steps);
    if (cut)
      printf("dpo: %zu of %zu sequences are longer than block_size + 1 = %d tokens: their "
             "prompts lose their earliest tokens after the first (%zu, whose answer alone is %d "
             "tokens or more, keep its start and lose its end)\n",
             cut, 2 * s->n_pairs, T + 1, lost, T);
  } else if (!cfg->quiet && lead && eval_only) {
    printf("train.steps=0: the model is evaluated, not trained, and no checkpoint is written\n");
  } else if (!cfg->quiet && lead) {
    print_data(&train, (uint64_t)B * (uint64_t)cfg->grad_accum * (uint64_t)dp, cfg->steps);
  }
  if (!cfg->quiet && lead && cfg->document_token >= 0)
    printf("documents: each begins at token %d; attention stays within it and positions restart "
           "at its first token\n",
           cfg->document_token);
  if (!cfg->quiet && lead && cfg->placement_static)
    print_placement(&zero, "static", cfg->nvme_dir);
  else if (!cfg->quiet && lead && cfg->placement_auto)
    print_placement(&zero, "auto, for the warm-up step", NULL);
  auto_pending = cfg->placement_auto;
  const char *dump_path = lead ? cfg->dump_path : NULL;
  if (dump_path && colo_gpt_params(model)) /* ZeRO-3's are pieces: a LoRA run's adapters alone */
    dump_model(&dump, "init.", model, colo_gpt_params(model), be, dump_host);
  if (dump_path && lora)
    dump_lora(&dump, "init.", lora, colo_lora_params(lora), be);
  float *dump_losses = dump_path ? calloc((size_t)cfg->steps + 1, sizeof(float)) : NULL;
  float *dump_norms = dump_path ? calloc((size_t)cfg->steps + 1, sizeof(float)) : NULL;
  float *dump_scales = dump_path ? calloc((size_t)cfg->steps + 1, sizeof(float)) : NULL;
  FILE *progress = lead ? cfg->progress : NULL;
  int quiet = cfg->quiet || !lead;

  if (dpo_pre) /* every rank holds the tables: a checkpoint carries them on */
    CHECK_GOTO(dpo_tables(model, dp_comm, pipe, dpo, &train.src[0], &val,
                          ckpt_path[0] ? ckpt_path : NULL, B, T, in, tg, !quiet, err, errlen),
               rc, out);
  colo_ckpt_meta_t meta = {.seed = cfg->seed,
                           .loss_scale = 1.0f,
                           .model = cfg->model,
                           /* the ranks that hold ZeRO's pieces: with context parallelism
                            * its ranks too, at their places in the mesh (MESH above) */
                           .dp = dp * cp,
                           .tp = tp,
                           .pp = pp,
                           .world = world,
                           .es_kept = cfg->early_stop > 0 && isfinite(es.best),
                           .es_best = es.best,
                           .es_best_step = es.best_step,
                           .es_since = es.since,
                           .documents = cfg->document_token >= 0,
                           .document_token = cfg->document_token,
                           .lora = lora ? cfg->lora : (colo_lora_config_t){0},
                           .dpo_reference = dpo_pre,
                           .muon = cfg->optim.muon,
                           .muon_momentum = cfg->optim.muon_momentum};
  if (cfg->best_set)
    metric_name(cfg, meta.score_name, sizeof meta.score_name);
  /* skipping spikes: the history lives in the meta that every checkpoint writes */
  colo_spike_t *spike = cfg->spike_sigma > 0 ? &meta.spike : NULL;
  meta.spike_kept = spike != NULL;
  if (spike && resumed_spike)
    *spike = *resumed_spike;
  if (lora && base) { /* absolute, for an eval or export run from anywhere */
    char *abs = realpath(base, NULL);
    snprintf(meta.lora_base, sizeof meta.lora_base, "%s", abs ? abs : base);
    free(abs);
  }
  int step = start, saved_at = -1, stopped = 0, early = 0;
  sig_atomic_t seen_save = cfg->save_requested ? *cfg->save_requested : 0;
  for (; step < cfg->steps; step++) {
    /* a rank started by colo-workerd ends with it: a new worker ends leftovers too, but a rank
     * that notices first does not train on alone */
    if (cfg->parent_pid > 0 && getppid() != cfg->parent_pid) {
      snprintf(err, errlen,
               "the worker that started this rank (pid %d) is gone; stopping at step %d",
               cfg->parent_pid, step);
      rc = COLO_ECANCELED;
      goto out;
    }
    int save_due =
        cfg->ckpt_dir && cfg->ckpt_interval > 0 && step > start && step % cfg->ckpt_interval == 0;
    if ((cfg->eval_interval > 0 && step % cfg->eval_interval == 0) || (save_due && keep_best)) {
      /* a resumed run's evaluation at its first step was counted before its checkpoint */
      int count = cfg->early_stop > 0 && !(step == start && start > 0);
      float ema_val = NAN;
      CHECK_GOTO(ema_eval(&ema, &zero, &opt, model, be, dp_comm, pipe, &val, cfg, in, tg, &ema_val,
                          err, errlen),
                 rc, out);
      last_val = eval_and_report(model, dp_comm, pipe, &val, cfg, step, count ? &es : NULL, quiet,
                                 progress, in, tg, dpo, ema_val, &last_score);
      val_step = step;
      CHECK_GOTO(eval_failed(model, pool, dp_comm, me, err, errlen), rc, out);
      if (count) {
        early = early_stop_here(&es, cfg, comm, world);
        if (early < 0) {
          snprintf(err, errlen, "rank %d: agreeing on an early stop: %s", me,
                   colo_comm_error(comm));
          rc = COLO_EIO;
          goto out;
        }
      }
      meta.es_kept = cfg->early_stop > 0 && isfinite(es.best);
      meta.es_best = es.best;
      meta.es_best_step = es.best_step;
      meta.es_since = es.since;
    }
    if (save_due) {
      CHECK_GOTO(save(cfg, &meta, step, 0, val_step == step ? last_val : NAN,
                      val_step == step ? last_score : NAN, &scaler, model, &opt, &zero, pipe, tpc,
                      pool, comm, zdp_idx, me, be, lead, progress, dpo, &ema, ckpt_path,
                      sizeof ckpt_path, err, errlen),
                 rc, out);
      saved_at = step;
    }
    if (early || (cfg->stop_at > 0 && step == cfg->stop_at))
      break;
    int asked = asked_agreed(cfg, comm, world, seen_save);
    if (asked < 0) {
      snprintf(err, errlen, "rank %d: agreeing on a stop: %s", me, colo_comm_error(comm));
      rc = COLO_EIO;
      goto out;
    }
    if (asked & ASKED_STOP) {
      stopped = 1;
      break;
    }
    if (asked & ASKED_SAVE) {
      if (cfg->ckpt_dir && step > start && saved_at != step) {
        CHECK_GOTO(save(cfg, &meta, step, 1, val_step == step ? last_val : NAN,
                        val_step == step ? last_score : NAN, &scaler, model, &opt, &zero, pipe, tpc,
                        pool, comm, zdp_idx, me, be, lead, progress, dpo, &ema, ckpt_path,
                        sizeof ckpt_path, err, errlen),
                   rc, out);
        saved_at = step;
        if (!quiet && lead)
          printf("checkpoint at step %d, as asked: %s\n", step, ckpt_path);
        /* what was asked until now is answered, on this rank too */
        seen_save = cfg->save_requested ? *cfg->save_requested : 0;
      } else if (!cfg->ckpt_dir) {
        if (!quiet && lead)
          printf("checkpoint asked at step %d: there is no checkpoint directory\n", step);
        seen_save = cfg->save_requested ? *cfg->save_requested : 0;
      } /* else before a first step, or where the interval's was just written: at the next */
    }
    double t0 = now_s();
    /* fp16: the loss is scaled up so small gradients survive; a planted overflow (tests) makes
     * the last rank's gradients inf */
    float S = colo_loss_scaler_factor(&scaler);
    float bscale = planted(cfg, step + 1) && me == world - 1 ? INFINITY : S;
    colo_gpt_zero_grad(model);
    colo_zero_zero_grads(&zero);
    if (lora)
      colo_lora_zero_grad(lora);
    double loss = 0.0;
    dpo_sums_t dsum = {0};
    /* the loss is the mean over the targets of the whole batch that count (all of them without a
     * loss mask): each rank's gradients are scaled for that mean (DPO's, over the pairs) */
    float cf = dpo ? 1.0f
                   : counted_factor(colo_blend_counted(&train, cfg->seed, (uint64_t)step,
                                                       cfg->grad_accum, dp, B),
                                    (double)B * T * cfg->grad_accum * dp);
    for (int micro = 0; micro < cfg->grad_accum; micro++) {
      /* the ranks of a tensor-parallel group, and the stages of a pipeline, see the same batch */
      if (dpo)
        colo_pairs_batch(&train.src[0], cfg->seed, (uint64_t)step, cfg->grad_accum, micro, dp_idx,
                         dp, B / 2, T, in, tg, dpo->idx);
      else
        colo_blend_batch(&train, cfg->seed, (uint64_t)step, cfg->grad_accum, micro, dp_idx, dp, B,
                         in, tg);
      if (dump_path) {
        float *fb = malloc((size_t)B * T * 2 * sizeof(float));
        for (int i = 0; i < B * T; i++) {
          fb[i] = (float)in[i];
          fb[B * T + i] = (float)tg[i];
        }
        char name[64];
        snprintf(name, sizeof name, "batch.%d.%d", step, micro);
        dump_add(&dump, name, fb, 2 * B, T);
        free(fb);
      }
      if (pipe) {
        double l = 0.0, dpo_before = dsum.loss;
        int prc = 0;
        if (dpo) { /* the reference's log-probabilities first (a pass of its own when live) */
          prc = dpo_reference(model, pipe, dpo, dpo->n_tab ? dpo->tab[0] : NULL, in, tg, B, T);
          pipe->sums = &dsum;
          pipe->pair_scale = bscale / ((double)cfg->grad_accum * dp * (B / 2));
        }
        /* dropout's masks as the loop below has them: rows numbered over the step's batch */
        pipe->drop = 1;
        pipe->drop_key = colo_hash4(cfg->seed, (uint64_t)step, 0x6c6f7261, 0);
        pipe->drop_row0 = ((uint64_t)micro * (uint64_t)dp + (uint64_t)dp_idx) * B * T;
        pipe->noise_mag = noise_mag;
        pipe->noise_key = colo_hash4(cfg->seed, (uint64_t)step, NEFTUNE_KEY, 0);
        /* each micro-batch's mean is 1/M of the batch's */
        if (prc == 0)
          prc = pipe_step(pipe, in, tg, bscale / (float)(M * cfg->grad_accum * dp) * cf, &l);
        pipe->drop = 0;
        pipe->sums = NULL;
        colo_gpt_set_noise(model, 0.0f, 0, 0);
        if (lora)
          colo_lora_set_dropout(lora, 0, 0, 0);
        if (prc < 0) {
          snprintf(err, errlen, "rank %d: pipeline: %s", me,
                   colo_comm_error(ppc)[0] ? colo_comm_error(ppc)
                                           : (tpc ? colo_comm_error(tpc) : "a collective failed"));
          rc = COLO_EIO;
          goto out;
        }
        /* DPO's: the mean over the batch's pairs, which the last stage counted */
        loss += dpo ? (dsum.loss - dpo_before) / (B / 2) : l / M;
        continue;
      }
      /* the mean over every rank's tokens: gradients are summed over the group below */
      float ls = bscale / (float)(cfg->grad_accum * dp) * cf;
      uint64_t row0 = ((uint64_t)micro * (uint64_t)dp + (uint64_t)dp_idx) * B * T;
      if (dpo) { /* the mean over every rank's pairs */
        loss +=
            dpo_train_micro(model, dpo, in, tg, B, T, ls / (float)(B / 2), lora,
                            colo_hash4(cfg->seed, (uint64_t)step, 0x6c6f7261, 0), row0, noise_mag,
                            colo_hash4(cfg->seed, (uint64_t)step, NEFTUNE_KEY, 0), &dsum);
        if (colo_gpt_hook_error(model) < 0) {
          snprintf(err, errlen, "rank %d: gathering parameters: %s", me,
                   colo_comm_error(comm)[0] ? colo_comm_error(comm) : colo_pool_error(pool));
          rc = COLO_EIO;
          goto out;
        }
        continue;
      }
      if (lora) /* dropout's masks: the step's, each row's its own on whichever rank */
        colo_lora_set_dropout(lora, 1, colo_hash4(cfg->seed, (uint64_t)step, 0x6c6f7261, 0), row0);
      colo_gpt_set_noise(model, noise_mag, colo_hash4(cfg->seed, (uint64_t)step, NEFTUNE_KEY, 0),
                         row0); /* NEFTune's, numbered alike */
      loss += colo_gpt_forward_train(model, in, tg, B, T, ls);
      colo_gpt_backward(model, ls);
      colo_gpt_set_noise(model, 0.0f, 0, 0);
      if (lora)
        colo_lora_set_dropout(lora, 0, 0, 0);
      if (colo_gpt_hook_error(model) < 0) {
        snprintf(err, errlen, "rank %d: gathering parameters or reducing gradients: %s", me,
                 colo_comm_error(comm)[0] ? colo_comm_error(comm) : colo_pool_error(pool));
        rc = COLO_EIO;
        goto out;
      }
    }
    if (pipe) {
      /* the tied embedding's gradient is the sum of the first stage's (embedding) and the last
       * stage's (head); the loss, which only the last stage computed, goes to every stage */
      float l = (float)loss;
      int tied, iw = colo_gpt_wte_index(model, &tied);
      size_t nt_;
      const colo_param_t *tab = colo_gpt_params_table(model, &nt_);
      if ((embc && !lora &&
           embc->ops->allreduce_sum(embc, colo_gpt_grads(model) + tab[iw].offset, tab[iw].numel) <
               0) ||
          ppc->ops->allreduce_sum(ppc, &l, 1) < 0) {
        snprintf(err, errlen, "rank %d: pipeline: %s", me, colo_comm_error(ppc));
        rc = COLO_EIO;
        goto out;
      }
      loss = l;
    }
    if (lora && tpc && lora_tp_sum(be, lora, tpc, lora_rep) < 0) {
      snprintf(err, errlen, "rank %d: %s", me, colo_comm_error(tpc));
      rc = COLO_EIO;
      goto out;
    }
    loss /= cfg->grad_accum;
    if (dp * cp > 1) { /* (a context-parallel group's ranks have the same loss) */
      float l = (float)loss;
      if ((dp > 1 && dp_comm->ops->allreduce_sum(dp_comm, &l, 1) < 0) ||
          (lora ? grad_comm->ops->allreduce_sum(grad_comm, colo_lora_grads(lora),
                                                colo_lora_numel(lora))
                : colo_zero_reduce_grads(&zero, model)) < 0) {
        snprintf(err, errlen, "rank %d: %s", me, colo_comm_error(grad_comm));
        rc = COLO_EIO;
        goto out;
      }
      loss = (double)l / dp;
    }
    loss *= cf;
    if (dpo && ((pipe && dpo_sums_reduce(ppc, &dsum) < 0) || dpo_sums_reduce(dp_comm, &dsum) < 0)) {
      snprintf(err, errlen, "rank %d: %s", me, colo_comm_error(dp_comm));
      rc = COLO_EIO;
      goto out;
    }
    if (dump_path && step == start && colo_gpt_grads(model))
      dump_model(&dump, "grad.", model, colo_gpt_grads(model), be, dump_host);
    if (dump_path && step == start && lora)
      dump_lora(&dump, "grad.", lora, colo_lora_grads(lora), be);
    float norm = 0.0f;
    if (lora) { /* stages hold their layers' adapters, tensor-parallel ranks parts: sums add up */
      float sq = lora_sumsq(be, lora, tpc, lora_rep);
      if ((tpc && tpc->ops->allreduce_sum(tpc, &sq, 1) < 0) ||
          (ppc && ppc->ops->allreduce_sum(ppc, &sq, 1) < 0)) {
        snprintf(err, errlen, "rank %d: %s", me, colo_comm_error(ppc ? ppc : tpc));
        rc = COLO_EIO;
        goto out;
      }
      norm = sqrtf(sq);
    } else if (ppc                          ? pp_grad_norm(be, model, tpc, ppc, &norm) < 0
               : tpc && cfg->zero_stage < 2 ? tp_grad_norm(be, model, tpc, &norm) < 0
                                            : colo_zero_grad_norm(&zero, be, &norm) < 0) {
      snprintf(err, errlen, "rank %d: %s", me, colo_comm_error(comm));
      rc = COLO_EIO;
      goto out;
    }
    /* the norm of the scaled gradients: an overflow shows as inf or NaN on every rank alike.
     * Unscaling by a power of two is exact: the step is the one an unscaled run takes. */
    float used_scale = S;
    norm /= S;
    float gscale = colo_clip_factor(cfg->optim.grad_clip, norm) / S;
    int take = colo_loss_scaler_update(&scaler, norm);
    if (take < 0) {
      if (scaler.enabled)
        snprintf(err, errlen,
                 "the gradients overflowed at step %d at the smallest loss scale (1): they are "
                 "not finite at any scale",
                 step + 1);
      else
        snprintf(err, errlen, "the gradient norm became %f at step %d", (double)norm, step + 1);
      rc = COLO_EINTERNAL;
      goto out;
    }
    /* a spike's update is not applied (optimizer.skip_spike_sigma): every rank agrees */
    colo_spike_verdict_t sv = {0, NAN, NAN, 0};
    if (spike && take) {
      sv = colo_spike_judge(spike, cfg->spike_sigma, cfg->spike_window, (float)loss, norm);
      float any = (float)sv.skip;
      if (world > 1 && comm->ops->allreduce_sum(comm, &any, 1) < 0) {
        snprintf(err, errlen, "rank %d: agreeing on a spike: %s", me, colo_comm_error(comm));
        rc = COLO_EIO;
        goto out;
      }
      sv.skip = any > 0;
      take = !sv.skip;
      spike->skipped += (uint64_t)sv.skip;
    }
    if (spike)
      colo_spike_push(spike, cfg->spike_window, (float)loss, norm);
    float lr = colo_lr_at(&cfg->optim, step);
    if (take && lora) {
      const colo_adamw_config_t *oc = &opt.cfg;
      float plus = cfg->lora.plus_ratio;
      opt.t++;
      if (plus > 0.0f && plus != 1.0f) { /* LoRA+: each B (and DoRA magnitude) at lr × ratio */
        size_t nt;
        const colo_param_t *tab = colo_lora_table(lora, &nt);
        for (size_t i = 0; i < nt; i++) {
          size_t o = tab[i].offset;
          be->adamw(colo_lora_params(lora) + o, colo_lora_grads(lora) + o, opt.m + o, opt.v + o,
                    tab[i].numel, colo_lora_kind(lora, i) != COLO_LORA_A ? lr * plus : lr,
                    oc->beta1, oc->beta2, oc->eps, oc->weight_decay, gscale, opt.t);
        }
      } else {
        be->adamw(colo_lora_params(lora), colo_lora_grads(lora), opt.m, opt.v,
                  colo_lora_numel(lora), lr, oc->beta1, oc->beta2, oc->eps, oc->weight_decay,
                  gscale, opt.t);
      }
      colo_zero_end_step(&zero);
    } else if (take && colo_zero_step(&zero, &opt, be, model, lr, gscale) < 0) {
      snprintf(err, errlen, "rank %d: %s", me, zero.error[0] ? zero.error : colo_comm_error(comm));
      rc = COLO_EIO;
      goto out;
    }
    if (take && !lora)
      CHECK_GOTO(ema_update(&ema, &zero, &opt, model, be, err, errlen), rc, out);
    if (auto_pending) {
      auto_pending = 0;
      CHECK_GOTO(place_after_warmup(&zero, &opt, pool, be, cfg->chunk_cache, step + 1, lead, quiet,
                                    progress, err, errlen),
                 rc, out);
    }
    double dt = now_s() - t0;
    last_loss = (float)loss;
    if (!isfinite(last_loss)) {
      snprintf(err, errlen, "the loss became %f at step %d", (double)last_loss, step);
      rc = COLO_EINTERNAL;
      goto out;
    }
    if (dump_losses) {
      dump_losses[step] = last_loss;
      dump_norms[step] = take ? norm : NAN;
      dump_scales[step] = used_scale;
    }
    double tok_s = (double)B * T * cfg->grad_accum * dp / dt; /* the run's, all its groups' */
    char dpo_said[96] = "";
    if (dpo)
      snprintf(dpo_said, sizeof dpo_said, " | accuracy %.3f | margin %.4f",
               dsum.correct / dsum.pairs, dsum.margin / dsum.pairs);
    if (!quiet && take)
      printf("step %6d/%d | loss %.6f%s | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s\n", step + 1,
             cfg->steps, loss, dpo_said, (double)lr, (double)norm, dt * 1e3, tok_s);
    else if (!quiet && sv.skip)
      printf("step %6d/%d | loss %.6f | norm %.4f | a spike, above the last %d steps' mean + "
             "%g sd (loss %.4f, norm %.4f): update skipped\n",
             step + 1, cfg->steps, loss, (double)norm, sv.history, (double)cfg->spike_sigma,
             (double)sv.loss_limit, (double)sv.norm_limit);
    else if (!quiet)
      printf("step %6d/%d | loss %.6f | gradients overflowed at loss scale %g: step skipped, "
             "scale now %g\n",
             step + 1, cfg->steps, loss, (double)used_scale, (double)scaler.scale);
    if (progress) {
      fprintf(progress,
              "{\"event\":\"step\",\"step\":%d,\"total_steps\":%d,\"loss\":%.6f,\"lr\":%.6e,"
              "\"grad_norm\":%.6f,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"memory_bytes\":%zu,"
              "\"activation_bytes\":%zu,\"time_ms\":%lld,\"epochs\":%.6f",
              step + 1, cfg->steps, loss, (double)lr, take ? (double)norm : 0.0, dt * 1e3, tok_s,
              colo_pool_peak(pool), colo_gpt_activation_bytes(model), (long long)wall_ms(),
              dpo ? (double)(step + 1) * (B / 2) * cfg->grad_accum * dp /
                        (double)train.src[0].n_pairs
                  : colo_blend_epochs_most(&train, (uint64_t)(step + 1) * (uint64_t)B *
                                                       (uint64_t)cfg->grad_accum * (uint64_t)dp));
      if (dpo)
        fprintf(progress,
                ",\"dpo\":{\"accuracy\":%.6f,\"margin\":%.6f,\"chosen\":%.6f,"
                "\"rejected\":%.6f}",
                dsum.correct / dsum.pairs, dsum.margin / dsum.pairs, dsum.chosen / dsum.pairs,
                dsum.rejected / dsum.pairs);
      if (spike) { /* the values it judged, exactly, its limits (null: not judged), the verdict */
        const float x[4] = {(float)loss, norm, sv.loss_limit, sv.norm_limit};
        static const char *const k[4] = {"loss", "norm", "loss_limit", "norm_limit"};
        for (int i = 0; i < 4; i++)
          fprintf(progress, isfinite(x[i]) ? "%s\"%s\":%.9g" : "%s\"%s\":null",
                  i ? "," : ",\"spike\":{", k[i], (double)x[i]);
        fprintf(progress, ",\"skipped\":%s,\"skipped_total\":%llu}", sv.skip ? "true" : "false",
                (unsigned long long)spike->skipped);
      }
      if (cfg->placement_static || cfg->placement_auto) {
        colo_placed_t p;
        colo_zero_placed(&zero, &p);
        fprintf(progress, ",\"host_bytes\":%zu,\"nvme_bytes\":%zu", p.host_bytes, p.nvme_bytes);
      }
      if (zero.stage == 3) { /* what the fetches did since the last record */
        colo_fetch_stats_t f;
        colo_zero_take_stats(&zero, &f);
        fprintf(progress,
                ",\"param_fills\":%zu,\"param_up_bytes\":%zu,\"cache_hits\":%zu,"
                "\"cache_evictions\":%zu,\"cache_peak_bytes\":%zu",
                f.fills, f.up_bytes, f.hits, f.evictions, f.cache_bytes);
      }
      if (scaler.enabled)
        fprintf(progress, ",\"loss_scale\":%g,\"skipped\":%s", (double)used_scale,
                take ? "false" : "true");
      fputs("}\n", progress);
      fflush(progress);
    }
  }
  if (step == cfg->steps && (cfg->eval_interval > 0 || keep_best || eval_only)) {
    /* counted, so that its record (and the last checkpoint) carries early stopping's count as
     * of it; the run ends here either way */
    float ema_val = NAN;
    CHECK_GOTO(ema_eval(&ema, &zero, &opt, model, be, dp_comm, pipe, &val, cfg, in, tg, &ema_val,
                        err, errlen),
               rc, out);
    last_val = eval_and_report(model, dp_comm, pipe, &val, cfg, step,
                               cfg->early_stop > 0 && step > start ? &es : NULL, quiet, progress,
                               in, tg, dpo, ema_val, &last_score);
    val_step = step;
    meta.es_kept = cfg->early_stop > 0 && isfinite(es.best);
    meta.es_best = es.best;
    meta.es_best_step = es.best_step;
    meta.es_since = es.since;
    CHECK_GOTO(eval_failed(model, pool, dp_comm, me, err, errlen), rc, out);
  }
  /* the last checkpoint: at the end, or where the run was told to stop (unless the interval's
   * was just saved there) */
  if (cfg->ckpt_dir && step > start && step != saved_at) {
    CHECK_GOTO(save(cfg, &meta, step, 0, val_step == step ? last_val : NAN,
                    val_step == step ? last_score : NAN, &scaler, model, &opt, &zero, pipe, tpc,
                    pool, comm, zdp_idx, me, be, lead, progress, dpo, &ema, ckpt_path,
                    sizeof ckpt_path, err, errlen),
               rc, out);
    if (!quiet)
      printf("checkpoint %s\n", ckpt_path);
  }
  if (early) {
    char why[512], name[200], js[1100];
    snprintf(why, sizeof why,
             "stopped early at step %d of %d: %s has not %s %.4f (step %d) in %d evaluations", step,
             cfg->steps, metric_name(cfg, name, sizeof name),
             cfg->best_set ? "risen above" : "fallen below", (double)es.best, es.best_step,
             es.since);
    if (!quiet && lead)
      printf("%s\n", why);
    if (progress) {
      fprintf(progress,
              "{\"event\":\"early_stop\",\"step\":%d,\"%s\":%.9g,\"best_step\":%d,"
              "\"message\":\"%s\",\"time_ms\":%lld}\n",
              step, cfg->best_set ? "best_score" : "best_val_loss", (double)es.best, es.best_step,
              json_str(js, sizeof js, why), (long long)wall_ms());
      fflush(progress);
    }
  }
  if (stopped) {
    if (progress) {
      fprintf(progress, "{\"event\":\"stopped\",\"step\":%d,\"time_ms\":%lld}\n", step,
              (long long)wall_ms());
      fflush(progress);
    }
    if (!cfg->ckpt_dir)
      snprintf(err, errlen, "stopped as asked at step %d, without a checkpoint directory", step);
    else if (step > start) { /* every rank names it: only the lead rank commits it */
      char dir[1200];
      colo_ckpt_step_dir(cfg->ckpt_dir, (uint64_t)step, dir, sizeof dir);
      snprintf(err, errlen, "stopped as asked at step %d, with its checkpoint %s", step, dir);
    } else
      snprintf(err, errlen, "stopped as asked at step %d, before any step: no new checkpoint",
               step);
    rc = COLO_ESTOPPED;
  }
  if (dump_path && (colo_gpt_params(model) || lora)) {
    if (colo_gpt_params(model))
      dump_model(&dump, "final.", model, colo_gpt_params(model), be, dump_host);
    if (ema.w && cfg->zero_stage == 0) /* host memory, the model's layout */
      dump_model(&dump, "ema.", model, ema.w, colo_backend_cpu(), NULL);
    if (lora)
      dump_lora(&dump, "final.", lora, colo_lora_params(lora), be);
    dump_add(&dump, "losses", dump_losses, cfg->steps, 0);
    dump_add(&dump, "grad_norms", dump_norms, cfg->steps, 0);
    dump_add(&dump, "loss_scales", dump_scales, cfg->steps, 0);
    CHECK_GOTO(colo_safetensors_write(dump_path, dump.t, dump.n, err, errlen), rc, out);
  }
  free(dump_losses);
  free(dump_norms);
  free(dump_scales);
  if (progress)
    fflush(progress);
  if (final_loss)
    *final_loss = last_loss;
  if (final_val)
    *final_val = last_val;
out:
  if (rc < 0 && auto_pending && strstr(err, "memory pool")) {
    size_t l = strlen(err);
    snprintf(err + l, errlen - l,
             "; this was automatic placement's warm-up step, which already keeps all that may "
             "leave the GPU in host memory: a smaller batch, recomputation or more GPUs would fit");
  }
  if (rc < 0 && comm && world > 1)
    comm->ops->abort(comm); /* the peers fail at once rather than at their deadlines */
  free(dump_host);
  free(resumed_spike);
  free(pieces);
  ema_free(&ema);
  if (tpc)
    tpc->ops->destroy(tpc);
  if (ppc)
    ppc->ops->destroy(ppc);
  if (embc)
    embc->ops->destroy(embc);
  if (be->device) {
    colo_pool_free(pool, pipe_s.x_store);
    colo_pool_free(pool, pipe_s.dy);
  } else {
    free(pipe_s.x_store);
    free(pipe_s.dy);
  }
  if (grad_comm && grad_comm != dp_comm)
    grad_comm->ops->destroy(grad_comm);
  if (dp_comm && dp_comm != comm)
    dp_comm->ops->destroy(dp_comm);
  if (cpc)
    cpc->ops->destroy(cpc);
  colo_zero_free(&zero);
  dump_free(&dump);
  colo_host_free(be, in);
  colo_host_free(be, tg);
  free(dpo_s.w);
  free(dpo_s.ref_lp);
  free(dpo_s.pol);
  free(dpo_s.idx);
  free(dpo_s.cnt);
  for (int k = 0; k < dpo_s.n_tab; k++)
    free(dpo_s.tab[k]);
  free(dpo_s.tab);
  free(dpo_s.tab_n);
  free(dpo_s.tab_name);
  free(dpo_s.names);
  colo_lora_destroy(dpo_s.ref);
  if (opt.m)
    colo_adamw_free(&opt);
  colo_gpt_destroy(model);
  colo_lora_destroy(lora);
  if (pool)
    colo_pool_free(pool, lora_rep);
  colo_pool_destroy(pool);
  colo_blend_close(&train);
  val_sets_close(&val);
  if (comm)
    comm->ops->destroy(comm);
  return rc;
}

/* ---- eval and sample ---- */

/* A LoRA checkpoint's model: the model it adapted (its manifest's base, or the seed's
 * initialisation) with its adapters merged in, into host (NULL: the model's own buffer, the
 * CPU's). Evaluating, sampling and exporting then run on a plain model. */
static int open_lora(const char *ckpt, colo_ckpt_meta_t *meta, colo_gpt_t *model, colo_pool_t *pool,
                     float *host, char *err, size_t errlen) {
  float *w = host ? host : colo_gpt_params(model);
  colo_lora_t *l = NULL;
  float *a = NULL;
  int rc = meta->lora_base[0] ? colo_ckpt_load_weights(meta->lora_base, model, w, err, errlen) : 0;
  if (rc < 0) {
    size_t len = strlen(err);
    snprintf(err + len, errlen - len, " (the model checkpoint %s adapted)", ckpt);
  } else if (!meta->lora_base[0]) {
    colo_gpt_init(model, meta->seed);
    if (host)
      colo_gpt_backend(model)->to_host(host, colo_gpt_params(model),
                                       colo_gpt_num_params(model) * sizeof(float));
  }
  /* the adapters' table (their buffers, for as long as the merge takes) */
  /* QLoRA's adapters learnt against the dequantized matrices: they are merged into those */
  if (rc == 0 && meta->lora.quant == COLO_LORA_QUANT_NF4)
    rc = colo_gpt_nf4_round(model, w, meta->lora.double_quant, err, errlen);
  if (rc == 0)
    rc = colo_lora_create(model, &meta->lora, pool, &l, err, errlen);
  if (rc == 0 && !(a = malloc(colo_lora_numel(l) * sizeof *a + 1)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the adapters");
  colo_ckpt_meta_t lm;
  if (rc == 0)
    rc = colo_ckpt_load_lora(ckpt, &lm, l, a, NULL, NULL, 1, err, errlen);
  if (rc == 0)
    colo_lora_merge(l, a, w);
  free(a);
  colo_lora_destroy(l);
  return rc;
}

/* A checkpoint's model for batches of B, on the CPU (gpu < 0) or on GPU `gpu` in fp32 storage
 * (the CUDA backend; decoding needs fp32): the weights are read into host memory, then copied
 * up. */
/* A HuggingFace model's directory (config.json and model.safetensors, or a Llama's index of
 * shards, no colo manifest): its weights' file into weights, its shape into meta; 0 when dir is
 * not one */
static int hf_model(const char *dir, colo_ckpt_meta_t *meta, char *weights, size_t len, char *err,
                    size_t errlen) {
  char p[2200];
  snprintf(p, sizeof p, "%s/manifest.json", dir);
  if (access(p, F_OK) == 0)
    return 0;
  snprintf(p, sizeof p, "%s/config.json", dir);
  if (access(p, F_OK) != 0)
    return 0;
  snprintf(weights, len, "%s/model.safetensors", dir);
  if (access(weights, F_OK) != 0)
    snprintf(weights, len, "%s/model.safetensors.index.json", dir);
  memset(meta, 0, sizeof *meta);
  meta->val_loss = NAN;
  int rc = colo_hf_read_config(p, &meta->model, err, errlen);
  return rc < 0 ? rc : 1;
}

/* colo_checkpoint_weights_ema's: the checkpoints' moving averages in place of their weights */
static int weights_ema;

void colo_checkpoint_weights_ema(int on) {
  weights_ema = on;
}

static int open_checkpoint(const char *ckpt, int B, int gpu, colo_pool_t **pool, colo_gpt_t **model,
                           colo_ckpt_meta_t *meta, char *err, size_t errlen) {
  *model = NULL;
  char weights[2200];
  int hf = hf_model(ckpt, meta, weights, sizeof weights, err, errlen);
  int rc = hf ? (hf < 0 ? hf : 0) : colo_ckpt_read_meta(ckpt, meta, err, errlen);
  if (rc < 0)
    return rc;
  if (weights_ema && (hf || !meta->ema_updates))
    return colo_fail(err, errlen, COLO_EINVAL,
                     "--ema: %s holds no moving average of its weights (%s)", ckpt,
                     hf                    ? "a HuggingFace model's directory"
                     : meta->lora.rank > 0 ? "a LoRA run's adapters"
                                           : "its run had no train.ema_decay");
  const colo_backend_t *be = colo_backend_cpu();
  if (gpu >= 0) {
    char why[256];
    if (!(be = colo_backend_cuda(gpu, COLO_MATH_FP32, why, sizeof why)))
      return colo_fail(err, errlen, COLO_EUNAVAIL, "--device gpu: %s", why);
  }
  *pool = colo_pool_create_with(be->device ? "gpu" : "cpu", 0, be->allocator);
  rc = colo_gpt_create(&meta->model, B, 0, be, *pool, model, err, errlen);
  float *host = NULL;
  size_t bytes = rc == 0 ? colo_gpt_num_params(*model) * sizeof(float) : 0;
  if (rc == 0 && be->device && !(host = malloc(bytes)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the weights");
  if (rc == 0 && hf)
    rc = colo_ckpt_load_weights(weights, *model, host, err, errlen);
  else if (rc == 0 && meta->lora.rank > 0)
    rc = open_lora(ckpt, meta, *model, *pool, host, err, errlen);
  else if (rc == 0 && weights_ema)
    rc = colo_ckpt_load_ema(ckpt, meta, *model, host, err, errlen);
  else if (rc == 0)
    rc = colo_ckpt_load(ckpt, meta, *model, host, NULL, err, errlen);
  if (rc == 0 && host)
    be->from_host(colo_gpt_params(*model), host, bytes);
  if (rc == 0 && meta->documents) /* evaluated as it was trained */
    rc = colo_gpt_set_documents(*model, meta->document_token, err, errlen);
  free(host);
  if (rc < 0) {
    colo_gpt_destroy(*model);
    *model = NULL;
    colo_pool_destroy(*pool);
  }
  return rc;
}

/* The checkpoint's model for evaluating `data` (a loaded shard, named path) in batches of B, with
 * attention within documents as trained (document_token COLO_EVAL_AS_TRAINED), or within those
 * another token begins (one the shard must hold), or whole windows (-1) */
static int open_for_eval(const char *ckpt, const colo_shard_t *data, const char *path, int B,
                         int gpu, int document_token, colo_pool_t **pool, colo_gpt_t **model,
                         colo_ckpt_meta_t *meta, char *err, size_t errlen) {
  if (document_token >= 0 && !colo_shard_has(data, (unsigned)document_token))
    return colo_fail(err, errlen, COLO_EINVAL,
                     "--document-token %d: %s holds no such token, so no document begins with it",
                     document_token, path);
  int rc = open_checkpoint(ckpt, B, gpu, pool, model, meta, err, errlen);
  if (rc == 0 && document_token != COLO_EVAL_AS_TRAINED &&
      (rc = colo_gpt_set_documents(*model, document_token, err, errlen)) < 0) {
    colo_gpt_destroy(*model);
    colo_pool_destroy(*pool);
  }
  return rc;
}

int colo_eval_checkpoint(const char *ckpt, const char *data, int batches, int batch_size,
                         uint64_t seed, int gpu, int document_token, float *loss, char *err,
                         size_t errlen) {
  colo_pool_t *pool;
  colo_gpt_t *model = NULL;
  colo_ckpt_meta_t meta;
  colo_shard_t val;
  int rc = colo_shard_load(data, &val, err, errlen);
  if (rc < 0)
    return rc;
  if (val.pairs)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s holds preference pairs: colo-train eval measures the cross-entropy of "
                   "text; a DPO run reports its loss on pairs at its evaluations "
                   "(train.eval_interval)",
                   data);
  else if (val.choices)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s holds multiple-choice questions: colo-train eval --choices scores them",
                   data);
  if (rc == 0)
    rc = open_for_eval(ckpt, &val, data, batch_size, gpu, document_token, &pool, &model, &meta, err,
                       errlen);
  if (rc == 0) {
    int T = meta.model.block_size;
    rc = colo_shard_windows(&val, T, err, errlen);
    if (rc == 0) {
      int *in = malloc((size_t)batch_size * T * sizeof *in),
          *tg = malloc((size_t)batch_size * T * sizeof *tg);
      *loss = evaluate(model, NULL, NULL, &val, seed, batches, batch_size, T, in, tg);
      free(in);
      free(tg);
    }
    colo_gpt_destroy(model);
    colo_pool_destroy(pool);
  }
  colo_shard_free(&val);
  return rc;
}

int colo_eval_choices(const char *ckpt, const char *path, int batch_size, int gpu,
                      int document_token, size_t limit, colo_choices_score_t *score, FILE *samples,
                      char *err, size_t errlen) {
  colo_pool_t *pool;
  colo_gpt_t *model = NULL;
  colo_ckpt_meta_t meta;
  colo_choices_t c;
  int rc = colo_choices_open(path, &c, err, errlen);
  if (rc < 0)
    return rc;
  colo_choices_limit(&c, limit);
  rc = open_for_eval(ckpt, &c.s, path, batch_size, gpu, document_token, &pool, &model, &meta, err,
                     errlen);
  if (rc < 0) {
    colo_choices_close(&c);
    return rc;
  }
  int T = meta.model.block_size, B = batch_size;
  int *in = malloc((size_t)B * T * sizeof *in), *tg = malloc((size_t)B * T * sizeof *tg);
  float *w = malloc((size_t)B * T * sizeof *w), *tab = malloc(2 * c.n_seq * sizeof *tab);
  double *rows = malloc((size_t)B * sizeof *rows);
  int(*pick)[3] = malloc(c.n_quest * sizeof *pick);
  if (!in || !tg || !w || !tab || !rows || !pick)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (rc == 0 && choice_table(model, NULL, NULL, &c, B, T, in, tg, w, rows, tab, stderr) < 0)
    rc = colo_fail(err, errlen, COLO_EIO, "scoring %s: %s", path, colo_pool_error(pool));
  if (rc == 0)
    colo_choices_score(&c, tab, tab + c.n_seq, score, pick);
  for (size_t q = 0; rc == 0 && samples && q < c.n_quest; q++) {
    size_t s0 = c.first[q], K = c.first[q + 1] - s0;
    fprintf(samples,
            "{\"question\":%zu,\"label\":%u,\"pred\":%d,\"pred_norm\":%d,"
            "\"pred_token\":%d,\"logprobs\":[",
            q, c.f->quest[2 * q + 1], pick[q][0], pick[q][1], pick[q][2]);
    for (size_t k = 0; k < K; k++)
      fprintf(samples, "%s%.9g", k ? "," : "", (double)tab[s0 + k]);
    fputs("],\"tokens\":[", samples);
    for (size_t k = 0; k < K; k++)
      fprintf(samples, "%s%.0f", k ? "," : "", (double)tab[c.n_seq + s0 + k]);
    fputs("],\"chars\":[", samples);
    for (size_t k = 0; k < K; k++)
      fprintf(samples, "%s%u", k ? "," : "", c.f->chars[s0 + k]);
    fputs("]}\n", samples);
  }
  if (rc == 0 && samples && (fflush(samples) != 0 || ferror(samples)))
    rc = colo_fail(err, errlen, COLO_EIO, "writing the samples: %s", strerror(errno));
  free(in);
  free(tg);
  free(w);
  free(tab);
  free(rows);
  free(pick);
  colo_gpt_destroy(model);
  colo_pool_destroy(pool);
  colo_choices_close(&c);
  return rc;
}

int colo_export_checkpoint(const char *ckpt, const char *out, const char *config, char *err,
                           size_t errlen) {
  colo_pool_t *pool;
  colo_gpt_t *model = NULL;
  colo_ckpt_meta_t meta;
  int rc = open_checkpoint(ckpt, 1, -1, &pool, &model, &meta, err, errlen);
  if (rc < 0)
    return rc;
  rc = colo_hf_write(model, colo_gpt_params(model), out, err, errlen);
  if (rc == 0 && config &&
      (rc = colo_hf_write_config(colo_gpt_config(model), config, err, errlen)) < 0)
    unlink(out); /* the pair whole or not at all */
  colo_gpt_destroy(model);
  colo_pool_destroy(pool);
  return rc;
}

/* a model's shape in words, for a refusal */
static void describe_model(const colo_gpt_config_t *m, char *out, size_t len) {
  snprintf(out, len, "%s of %d layers, %d heads, width %d, vocab %d, block %d",
           colo_gpt_arch_name(m->arch), m->n_layer, m->n_head, m->n_embd, m->vocab_size,
           m->block_size);
}

int colo_average_checkpoints(const char *const *ckpts, const double *w, int n, const char *out,
                             const char *config, char *err, size_t errlen) {
  colo_pool_t *pool = NULL, *first_pool = NULL;
  colo_gpt_t *model = NULL, *first = NULL;
  colo_ckpt_meta_t meta;
  double *sum = NULL, wsum = 0;
  size_t numel = 0;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    fprintf(stderr, "colo-train average: [%d/%d] %s\n", i + 1, n, ckpts[i]);
    if ((rc = open_checkpoint(ckpts[i], 1, -1, &pool, &model, &meta, err, errlen)) < 0)
      break;
    if (!first) { /* the first is kept: its table writes the mean */
      first = model;
      first_pool = pool;
      numel = colo_gpt_num_params(first);
      if (!(sum = calloc(numel, sizeof *sum)))
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the sum of %zu parameters",
                       numel);
    } else if (memcmp(colo_gpt_config(model), colo_gpt_config(first), sizeof meta.model) != 0) {
      char a[160], b[160];
      describe_model(colo_gpt_config(model), a, sizeof a);
      describe_model(colo_gpt_config(first), b, sizeof b);
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s is a %s (or otherwise configured), %s a %s: checkpoints average only "
                     "with those of the same model",
                     ckpts[i], a, ckpts[0], b);
    }
    const float *p = colo_gpt_params(model); /* host memory: the CPU backend's */
    double wi = w ? w[i] : 1.0;
    for (size_t k = 0; rc == 0 && k < numel; k++)
      sum[k] += wi * (double)p[k];
    wsum += wi;
    if (model != first) {
      colo_gpt_destroy(model);
      colo_pool_destroy(pool);
    }
  }
  if (rc == 0) {
    float *mean = colo_gpt_params(first); /* the first's own, overwritten: it is done with */
    for (size_t k = 0; k < numel; k++)
      mean[k] = (float)(sum[k] / wsum);
    rc = colo_hf_write(first, mean, out, err, errlen);
    if (rc == 0 && config &&
        (rc = colo_hf_write_config(colo_gpt_config(first), config, err, errlen)) < 0)
      unlink(out); /* the pair whole or not at all */
  }
  free(sum);
  if (first) {
    colo_gpt_destroy(first);
    colo_pool_destroy(first_pool);
  }
  return rc;
}

/* A LoRA run's checkpoint's adapters, in host memory with their table (for writing them out) */
static int read_adapters(const char *ckpt, colo_ckpt_meta_t *meta, colo_lora_t **l, float **a,
                         const char *format, char *err, size_t errlen) {
  *l = NULL;
  *a = NULL;
  int rc = colo_ckpt_read_meta(ckpt, meta, err, errlen);
  if (rc < 0)
    return rc;
  if (meta->lora.rank == 0)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "checkpoint %s holds a whole model: --format %s writes a LoRA run's "
                     "adapters (train.lora_rank)",
                     ckpt, format);
  rc = colo_lora_create_table(&meta->model, &meta->lora, l, err, errlen);
  if (rc == 0 && !(*a = malloc(colo_lora_numel(*l) * sizeof **a + 1)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the adapters");
  if (rc == 0)
    rc = colo_ckpt_load_lora(ckpt, meta, *l, *a, NULL, NULL, 1, err, errlen);
  return rc;
}

int colo_export_adapters(const char *ckpt, const char *out, int format, char *err, size_t errlen) {
  colo_ckpt_meta_t meta;
  colo_lora_t *l;
  float *a;
  int peft = format == COLO_ADAPTERS_PEFT;
  int rc = read_adapters(ckpt, &meta, &l, &a, peft ? "peft" : "gguf-lora", err, errlen);
  if (rc == 0)
    rc = peft ? colo_hf_write_peft(l, &meta.model, a, meta.lora_base, out, err, errlen)
              : colo_gguf_write_lora(l, &meta.model, a, out, err, errlen);
  free(a);
  colo_lora_destroy(l);
  return rc;
}

int colo_export_gguf(const char *ckpt, const char *out, const char *tokenizer, int type, char *err,
                     size_t errlen) {
  colo_pool_t *pool;
  colo_gpt_t *model = NULL;
  colo_ckpt_meta_t meta;
  colo_bpe_t *tok = NULL;
  int rc = open_checkpoint(ckpt, 1, -1, &pool, &model, &meta, err, errlen);
  if (rc < 0)
    return rc;
  int V = colo_gpt_config(model)->vocab_size;
  if (tokenizer)
    rc = colo_bpe_load(tokenizer, &tok, err, errlen);
  if (rc == 0)
    rc = colo_gguf_check(tok, V, "--tokenizer", err, errlen);
  if (rc == 0)
    rc = colo_gguf_write(model, colo_gpt_params(model), tok, type, NULL, out, err, errlen);
  const colo_gpt_config_t *c = colo_gpt_config(model);
  if (rc == 0 && c->sliding_window && c->sliding_window < c->block_size)
    fprintf(stderr,
            "colo-train: %s: llama.cpp's %s architecture attends every earlier token: the file "
            "is this model on contexts of up to %d tokens (model.sliding_window), as Mistral "
            "7B v0.1's GGUF files are\n",
            out, colo_gguf_arch(c), c->sliding_window);
  colo_bpe_free(tok);
  colo_gpt_destroy(model);
  colo_pool_destroy(pool);
  return rc;
}

typedef struct {
  float logit;
  int id;
} token_prob_t;

static int by_logit_desc(const void *a, const void *b) {
  const token_prob_t *x = a, *y = b;
  return x->logit > y->logit ? -1 : x->logit < y->logit ? 1 : x->id - y->id;
}

/* The next token from logits p[V] (scaled in place): the most likely at temperature 0; else
 * softmax(p / temperature) over the top_k most likely (0: all), cut to the fewest of those,
 * most likely first, whose probabilities add up to top_p (1: all), drawn in proportion. */
static int choose_token(float *p, int *idx, token_prob_t *pairs, int V, const colo_sample_opts_t *o,
                        colo_rng_t *rng) {
  float t = o->temperature;
  if (t <= 0) {
    int next = 0;
    for (int v = 1; v < V; v++)
      if (p[v] > p[next])
        next = v;
    return next;
  }
  float maxv = -INFINITY;
  for (int v = 0; v < V; v++) {
    p[v] /= t;
    idx[v] = v;
    if (p[v] > maxv)
      maxv = p[v];
  }
  int kk = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  if (kk < V) { /* keep the k largest: partial selection sort, k is small */
    for (int i = 0; i < kk; i++)
      for (int j = i + 1; j < V; j++)
        if (p[idx[j]] > p[idx[i]]) {
          int tmp = idx[i];
          idx[i] = idx[j];
          idx[j] = tmp;
        }
  }
  double sum = 0.0;
  for (int i = 0; i < kk; i++)
    sum += exp((double)(p[idx[i]] - maxv));
  if (o->top_p < 1.0f) { /* most likely first, then the prefix that holds top_p */
    for (int i = 0; i < kk; i++)
      pairs[i] = (token_prob_t){p[idx[i]], idx[i]};
    qsort(pairs, (size_t)kk, sizeof *pairs, by_logit_desc);
    double acc = 0.0, cut = 0.0;
    int keep = 0;
    while (keep < kk && (keep == 0 || acc < o->top_p * sum)) {
      idx[keep] = pairs[keep].id;
      acc += exp((double)(pairs[keep].logit - maxv));
      keep++;
    }
    for (int i = 0; i < keep; i++)
      cut += exp((double)(p[idx[i]] - maxv));
    kk = keep;
    sum = cut;
  }
  double r = (double)colo_rng_uniform(rng) * sum, acc = 0.0;
  for (int i = 0; i < kk; i++) {
    acc += exp((double)(p[idx[i]] - maxv));
    if (r < acc)
      return idx[i];
  }
  return idx[kk - 1];
}

/* A conversation's opening as prepare --messages-field wrote the conversations the model learned
 * from: the tokenizer's document token where it has one (a beginning of text or a delimiter
 * alike: prepare put it before every conversation), the messages (a list of {role, content}) and
 * the assistant's turn begun; *end: the template's end of a message, where the answer stops. */
static int conversation_prompt(const colo_bpe_t *bpe, const colo_chat_t *c, const cJSON *msgs,
                               int **ids, size_t *n, size_t *cap, int *end, char *err,
                               size_t errlen) {
  int bos, rc = 0;
  colo_chat_piece_t start = {.pre = colo_bpe_doc_token(bpe, &bos), .post = -1};
  if (start.pre >= 0) /* the piece of no text: the token alone */
    rc = colo_chat_encode(bpe, &start, ids, n, cap, err, errlen);
  *end = c->end;
  if (rc == 0 && c->kind == COLO_CHAT_JINJA) { /* rendered as prepare renders a conversation */
    char *text = NULL;
    size_t len = 0, dl = 0;
    rc = colo_chat_render(c, NULL, msgs, 1, &text, &len, NULL, NULL, err, errlen);
    const char *dt = start.pre >= 0 ? colo_bpe_token(bpe, start.pre, &dl) : NULL;
    size_t skip = dt && dl <= len && !memcmp(text, dt, dl) ? dl : 0;
    if (rc == 0)
      rc = colo_chat_encode_text(bpe, text + skip, len - skip, skip == 0, ids, n, cap, err, errlen);
    free(text);
    return rc;
  }
  colo_chat_piece_t pc[2];
  const cJSON *m;
  cJSON_ArrayForEach(m, msgs) {
    const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "role"));
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
    int k = rc == 0 && role && content
                ? colo_chat_message(c, role, strlen(role), content, strlen(content), pc)
                : 0;
    for (int i = 0; rc == 0 && i < k; i++)
      rc = colo_chat_encode(bpe, &pc[i], ids, n, cap, err, errlen);
  }
  int k = colo_chat_generation(c, pc);
  for (int i = 0; rc == 0 && i < k; i++)
    rc = colo_chat_encode(bpe, &pc[i], ids, n, cap, err, errlen);
  return rc;
}

/* a message {role, content} appended to msgs; 0 or COLO_ENOMEM */
static int add_message(cJSON *msgs, const char *role, const char *content) {
  cJSON *m = cJSON_CreateObject();
  if (!m || !cJSON_AddItemToArray(msgs, m)) {
    cJSON_Delete(m);
    return COLO_ENOMEM;
  }
  return cJSON_AddStringToObject(m, "role", role) && cJSON_AddStringToObject(m, "content", content)
             ? 0
             : COLO_ENOMEM;
}

/* A checkpoint's model opened for sampling, and what each generation reuses: the decoding
 * cache's tokens (a next prompt that begins with them is not run again), the buffers, the rng. */
typedef struct {
  colo_pool_t *pool;
  colo_gpt_t *model;
  colo_ckpt_meta_t meta;
  colo_sample_opts_t o;
  int T, V;
  float *p;
  int *idx;
  token_prob_t *pairs;
  colo_rng_t rng;
  int *cache; /* the tokens whose keys and values the decoding cache holds */
  int cached;
  int stop[4]; /* where a text ends: the document token, <|endoftext|>, <|end_of_text|>, eos */
} sampler_t;

static void sampler_close(sampler_t *s) {
  free(s->p);
  free(s->idx);
  free(s->pairs);
  free(s->cache);
  colo_gpt_destroy(s->model);
  if (s->pool)
    colo_pool_destroy(s->pool);
  memset(s, 0, sizeof *s);
}

static int sampler_open(sampler_t *s, const char *ckpt, const colo_sample_opts_t *o, char *err,
                        size_t errlen) {
  memset(s, 0, sizeof *s);
  s->o = *o;
  int rc = open_checkpoint(ckpt, 1, o->gpu, &s->pool, &s->model, &s->meta, err, errlen);
  if (rc < 0)
    return rc;
  s->T = s->meta.model.block_size, s->V = s->meta.model.vocab_size;
  const colo_bpe_t *bpe = o->bpe;
  if (bpe && colo_bpe_vocab_size(bpe) > s->V)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "the tokenizer's %d tokens do not fit this model's vocabulary of %d",
                   colo_bpe_vocab_size(bpe), s->V);
  s->p = malloc((size_t)s->V * sizeof *s->p);
  s->idx = malloc((size_t)s->V * sizeof *s->idx);
  s->pairs = o->top_p < 1.0f ? malloc((size_t)s->V * sizeof *s->pairs) : NULL;
  s->cache = malloc((size_t)s->T * sizeof *s->cache);
  if (rc == 0 && (!s->p || !s->idx || !s->cache || (o->top_p < 1.0f && !s->pairs)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  colo_rng_seed(&s->rng, o->seed);
  static const char *const ENDS[2] = {"<|endoftext|>", "<|end_of_text|>"};
  int bos;
  s->stop[0] = bpe ? colo_bpe_doc_token(bpe, &bos) : -1;
  for (int i = 0; i < 2; i++)
    s->stop[i + 1] = bpe ? colo_bpe_lookup(bpe, ENDS[i], strlen(ENDS[i])) : -1;
  s->stop[3] = bpe ? colo_bpe_eos(bpe) : -1;
  if (rc < 0)
    sampler_close(s);
  return rc;
}

/* Up to o.tokens tokens after ctx[0..len) (ctx has room for them), each printed to out as it
 * comes (when out is not NULL) and appended to ctx, stopping after a text's end or `also`;
 * *len grows. */
static int sampler_generate(sampler_t *s, int *ctx, int *len, int also, FILE *out, char *err,
                            size_t errlen) {
  int rc = 0, T = s->T;
  const colo_bpe_t *bpe = s->o.bpe;
  int same = 0; /* the decoding cache's tokens that this text begins with */
  while (same < s->cached && same < *len && s->cache[same] == ctx[same])
    same++;
  s->cached = same < *len ? same : *len - 1; /* the last prompt token runs for its logits */
  for (int k = 0; k < s->o.tokens; k++) {
    if (!s->o.full_forward && *len <= T) {
      while (s->cached < *len && rc == 0) {
        rc = colo_gpt_decode(s->model, ctx[s->cached], s->cached, s->p, err, errlen);
        s->cache[s->cached] = ctx[s->cached];
        s->cached++;
      }
      if (rc < 0)
        break;
    } else {
      int from = *len > T ? *len - T : 0, t = *len - from;
      colo_gpt_forward(s->model, ctx + from, NULL, 1, t);
      colo_gpt_read_logits(s->model, (size_t)(t - 1), s->p);
      s->cached = 0; /* the window ran whole: the cache holds nothing of this text */
    }
    int next = choose_token(s->p, s->idx, s->pairs, s->V, &s->o, &s->rng);
    ctx[(*len)++] = next;
    if (next >= 0 && (next == s->stop[0] || next == s->stop[1] || next == s->stop[2] ||
                      next == s->stop[3] || next == also))
      break; /* a document's end (or the next one's beginning): the text is complete */
    size_t tl;
    const char *tb = bpe ? colo_bpe_token(bpe, next, &tl) : NULL;
    if (out && !bpe)
      fputc(next & 0xff, out);
    else if (out && tb) /* an id past the tokenizer's (the vocabulary's padding) prints nothing */
      fwrite(tb, 1, tl, out);
    if (out)
      fflush(out);
  }
  return rc;
}

int colo_sample_checkpoint(const char *ckpt, const char *prompt, const colo_sample_opts_t *o,
                           FILE *out, char *err, size_t errlen) {
  const colo_bpe_t *bpe = o->bpe;
  sampler_t s;
  int rc = sampler_open(&s, ckpt, o, err, errlen);
  if (rc < 0)
    return rc;
  int *ctx = NULL, len = 0, chat_end = -1, V = s.V;
  size_t plen = strlen(prompt), np = 0, cap = 0;
  colo_chat_t c = {0};
  cJSON *msgs = NULL;
  if (bpe && o->chat) {
    if ((rc = colo_chat_open(&c, o->chat, bpe, err, errlen)) == 0 &&
        (!(msgs = cJSON_CreateArray()) || (o->system && add_message(msgs, "system", o->system)) ||
         add_message(msgs, "user", prompt)))
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    if (rc == 0)
      rc = conversation_prompt(bpe, &c, msgs, &ctx, &np, &cap, &chat_end, err, errlen);
    cJSON_Delete(msgs);
    colo_chat_close(&c);
  } else if (bpe) {
    rc = colo_bpe_encode(bpe, prompt, plen, 0, &ctx, &np, &cap, err, errlen);
  } else if (o->chat) {
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "a chat template needs a --tokenizer with its special tokens");
  }
  int total = (int)(bpe ? np : plen) + o->tokens + 1;
  int *grown = rc == 0 ? realloc(ctx, (size_t)total * sizeof *ctx) : NULL;
  if (rc == 0 && !grown)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (rc < 0) {
    free(ctx);
    sampler_close(&s);
    return rc;
  }
  ctx = grown;
  if (bpe)
    len = (int)np;
  else
    for (size_t i = 0; i < plen; i++)
      ctx[len++] = (unsigned char)prompt[i] % V;
  int bos = 0, doc = bpe ? colo_bpe_doc_token(bpe, &bos) : -1;
  if (len == 0 && bos && doc < V) { /* start from the beginning of a text */
    ctx[len++] = doc;
  } else if (len == 0) { /* start from a newline */
    int nl[1] = {'\n' % V};
    size_t k = 0, c1 = 0;
    int *one = NULL;
    if (bpe && colo_bpe_encode(bpe, "\n", 1, 0, &one, &k, &c1, err, errlen) == 0 && k == 1)
      nl[0] = one[0];
    free(one);
    ctx[len++] = nl[0];
  }
  rc = sampler_generate(&s, ctx, &len, chat_end, out, err, errlen);
  fflush(out);
  free(ctx);
  sampler_close(&s);
  return rc;
}

int colo_chat_checkpoint(const char *ckpt, const colo_sample_opts_t *o, FILE *in, FILE *out,
                         FILE *prompts, char *err, size_t errlen) {
  const colo_bpe_t *bpe = o->bpe;
  if (!bpe || !o->chat)
    return colo_fail(err, errlen, COLO_EINVAL, "a chat needs a --tokenizer and a --chat-template");
  sampler_t s;
  colo_chat_t c;
  int rc = colo_chat_open(&c, o->chat, bpe, err, errlen);
  if (rc < 0)
    return rc;
  if ((rc = sampler_open(&s, ckpt, o, err, errlen)) < 0) {
    colo_chat_close(&c);
    return rc;
  }
  cJSON *msgs = cJSON_CreateArray();
  if (!msgs || (o->system && add_message(msgs, "system", o->system)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  char *line = NULL;
  size_t lcap = 0;
  ssize_t got;
  while (rc == 0) {
    if (prompts)
      fputs("> ", prompts), fflush(prompts);
    if ((got = getline(&line, &lcap, in)) < 0)
      break;
    while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r'))
      line[--got] = 0;
    if (!got)
      continue;
    if (!strcmp(line, "/reset")) { /* a new conversation, the system message kept */
      cJSON_Delete(msgs);
      if (!(msgs = cJSON_CreateArray()) || (o->system && add_message(msgs, "system", o->system)))
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      continue;
    }
    int *ctx = NULL, end = -1, len;
    size_t n = 0, cap = 0;
    if (add_message(msgs, "user", line) < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    if (rc == 0)
      rc = conversation_prompt(bpe, &c, msgs, &ctx, &n, &cap, &end, err, errlen);
    if (rc == 0) {
      int *grown = realloc(ctx, (n + (size_t)o->tokens + 1) * sizeof *ctx);
      if (!grown)
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      else
        ctx = grown;
    }
    if (rc == 0) {
      len = (int)n;
      if (len > s.T && !o->full_forward) /* the conversation has outgrown the model's block */
        fprintf(stderr,
                "colo-train: the conversation (%d tokens) is past the model's block of %d: "
                "the answer sees its last %d\n",
                len, s.T, s.T);
      rc = sampler_generate(&s, ctx, &len, end, out, err, errlen);
    }
    if (rc == 0) { /* the answer (without the token that ended it) joins the conversation */
      int last = len > (int)n ? ctx[len - 1] : -1;
      int upto = len - (last >= 0 && (last == end || last == s.stop[0] || last == s.stop[1] ||
                                      last == s.stop[2] || last == s.stop[3]));
      size_t an = 0, tl;
      for (int k = (int)n; k < upto; k++)
        an += colo_bpe_token(bpe, ctx[k], &tl) ? tl : 0;
      /* its text, a byte that begins no UTF-8 character as U+FFFD (as a decode with
       * errors="replace" gives): the next turn's prompt is text again */
      char *bytes = malloc(an + 1), *answer = malloc(3 * an + 1);
      size_t bn = 0;
      for (int k = (int)n; bytes && k < upto; k++) {
        const char *tb = colo_bpe_token(bpe, ctx[k], &tl);
        if (tb)
          memcpy(bytes + bn, tb, tl), bn += tl;
      }
      an = 0;
      for (size_t i = 0; bytes && answer && i < bn;) {
        size_t ok = colo_utf8_invalid(bytes + i, bn - i);
        memcpy(answer + an, bytes + i, ok), an += ok, i += ok;
        if (i < bn)
          memcpy(answer + an, "\xef\xbf\xbd", 3), an += 3, i++;
      }
      int oom = !bytes || !answer;
      free(bytes);
      if (answer)
        answer[an] = 0;
      if (oom || add_message(msgs, "assistant", answer) < 0)
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      free(answer);
      fputc('\n', out);
      fflush(out);
    }
    free(ctx);
  }
  free(line);
  cJSON_Delete(msgs);
  colo_chat_close(&c);
  sampler_close(&s);
  return rc;
}
