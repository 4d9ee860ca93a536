/* LoRA adapters on the model's products (lora.h). */
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"
#include "../core/rng.h"

struct colo_lora_s {
  colo_lora_config_t cfg;
  float scale; /* alpha / r, or alpha / sqrt(r) (rslora) */
  const colo_backend_t *be;
  colo_pool_t *pool;
  int L, N;            /* layers; the most rows a batch has */
  int lo, hi;          /* the layers with adapters here: [lo, hi) (a pipeline stage's) */
  int tp, tpr;         /* the tensor-parallel group's size and this rank in it */
  int Q;               /* c_attn's query columns: n_head·hs */
  size_t t0, p0;       /* the first table entry's index, and its offset, in the whole model's */
  size_t full_params;  /* the whole model's adapters' floats */
  int in[4], out[4];   /* each target's product: inp[N][in] · W[in][out], this rank's part */
  int *first;          /* [L][4]: the table index of the layer's target's A (B follows), -1 */
  size_t *w_offset;    /* [L][4]: the adapted matrix's offset in the model's parameters */
  colo_param_t *table; /* A, B per adapted product */
  size_t n_tensors, n_params;
  float *params, *grads;
  float *bs;       /* fp32 [out][r]: scale · B, the matrix the update's second product reads */
  float *bgrad;    /* fp32 [out][r]: the gradient of scale · B, before it is scaled into B's */
  void *a_act;     /* A in act_dtype (16-bit activations only) */
  void *bs_act;    /* scale · B in act_dtype (16-bit activations only) */
  void *u, *du;    /* [N][r]: x·Aᵀ and its gradient */
  void *delta;     /* [N][max out]: the update, before it is added */
  void *dx;        /* [N][max in]: the update's input gradient, before it is added */
  void *gelu_grad; /* GPT-2 with mlp.c_proj adapted: [N][H] */
  int mergeable;   /* w_offset is known (colo_lora_create's) */
  /* dropout: on for training passes (colo_lora_set_dropout); xd [N][max in] holds x dropped */
  int drop;
  uint64_t drop_key, drop_row0;
  /* context parallelism (colo_lora_set_rows): rows [0, N) are runs of piece tokens of sequences
   * of seq, this rank's starting at off; piece 0: the rows are the batch's, in order */
  int rows_piece, rows_seq, rows_off;
  uint32_t thresh;
  float drop_scale;
  void *xd;
  /* DoRA: each site's entries are A, B, magnitude (per_site 3; else 2). slots: the layers whose
   * kept outputs and norms are held (1 when the model recomputes), z [slot][target] [N][out] at
   * z_off, sq [slot][target] [out] at sq_off; dt [max out][max in]: s·B·A; pending [L][4]: a
   * magnitude to set from the first norms (a fresh run's) */
  int per_site, slots;
  size_t z_off[4], sq_off[4], z_per, sq_per;
  void *z, *dt;
  void *dd; /* DoRA under dropout: [N][max out], the gradient (g − 1)·dout of W·dropout(x) */
  float *sq;
  unsigned char *pending;
  colo_pool_t *own_pool; /* colo_lora_create_table's */
};

static int bit_index(unsigned target) {
  for (int k = 0; k < COLO_LORA_TARGETS; k++)
    if (target == (1u << k))
      return k;
  return -1;
}

void colo_lora_destroy(colo_lora_t *l) {
  if (!l)
    return;
  void *bufs[] = {l->params, l->grads, l->bs, l->bgrad, l->a_act, l->bs_act, l->u,  l->du,
                  l->delta,  l->dx,    l->xd, l->z,     l->dt,    l->sq,     l->dd, l->gelu_grad};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    colo_pool_free(l->pool, bufs[i]);
  free(l->first);
  free(l->pending);
  free(l->w_offset);
  free(l->table);
  colo_pool_destroy(l->own_pool);
  free(l);
}

/* whether target k's product is column-parallel (c_attn, c_fc: its outputs split) rather than
 * row-parallel (the c_proj: its inputs split) */
static int column_parallel(int k) {
  return k == 0 || k == 2;
}

/* the adapters of cfg on layers [lo, hi) of a model of shape mc, as rank tpr of a
 * tensor-parallel group of tp holds them, on backend be with scratch for N rows (0: none, a table
 * and its buffers only) and DoRA's kept outputs for `slots` layers, from pool; mt: the model's
 * table, for merging (NULL: none) */
static int lora_new(const colo_gpt_config_t *mc, const colo_lora_config_t *cfg, int lo, int hi,
                    int tp, int tpr, const colo_backend_t *be, colo_pool_t *pool, int N, int slots,
                    const colo_param_t *mt, size_t n_model, colo_lora_t **out, char *err,
                    size_t errlen) {
  *out = NULL;
  if (cfg->rank < 1 || !(cfg->alpha > 0.0f) || !isfinite(cfg->alpha) || !cfg->targets ||
      (cfg->targets & ~(unsigned)COLO_LORA_ALL))
    return colo_fail(err, errlen, COLO_EINVAL,
                     "lora: rank %d and alpha %g must be positive, with at least one target",
                     cfg->rank, (double)cfg->alpha);
  int C = mc->n_embd, H = colo_gpt_mlp_hidden(mc), llama = mc->arch == COLO_ARCH_LLAMA;
  int KV = colo_gpt_kv_heads(mc) * colo_gpt_head_size(mc), Q = colo_gpt_q_width(mc);
  int r = cfg->rank;
  if (r > C)
    return colo_fail(err, errlen, COLO_EINVAL, "lora.rank=%d is above model.n_embd=%d", r, C);
  if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
    return colo_fail(err, errlen, COLO_EINVAL, "lora.dropout=%g must be in [0, 1)",
                     (double)cfg->dropout);
  colo_lora_t *l = calloc(1, sizeof *l);
  if (!l)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  l->cfg = *cfg;
  l->scale = cfg->rslora ? cfg->alpha / sqrtf((float)r) : cfg->alpha / (float)r;
  l->thresh = (uint32_t)((double)cfg->dropout * 16777216.0);
  l->drop_scale = 1.0f / (1.0f - cfg->dropout);
  l->be = be;
  l->pool = pool;
  l->L = mc->n_layer;
  l->lo = lo;
  l->hi = hi;
  l->N = N;
  l->tp = tp;
  l->tpr = tpr;
  l->Q = Q;
  l->per_site = cfg->dora ? 3 : 2;
  l->slots = cfg->dora && N > 0 ? slots : 0;
  l->mergeable = mt != NULL && lo == 0 && hi == l->L && tp == 1;
  int inf[4] = {C, Q, C, H}, outf[4] = {Q + 2 * KV, C, llama ? 2 * H : H, C};
  int ws[4] = {COLO_SPLIT_QKV, COLO_SPLIT_ROWS, llama ? COLO_SPLIT_GLU : COLO_SPLIT_COLS,
               COLO_SPLIT_ROWS};
  int in[4], outw[4];
  for (int k = 0; k < 4; k++) { /* this rank's part: the outputs or the inputs split */
    in[k] = column_parallel(k) ? inf[k] : inf[k] / tp;
    outw[k] = column_parallel(k) ? outf[k] / tp : outf[k];
  }
  memcpy(l->in, in, sizeof in);
  memcpy(l->out, outw, sizeof outw);
  int per = 0, max_in = 0, max_out = 0;
  size_t layer_floats = 0;
  for (int k = 0; k < COLO_LORA_TARGETS; k++)
    if (cfg->targets & (1u << k)) {
      per++;
      layer_floats += (size_t)r * (size_t)(inf[k] + outf[k]) + (cfg->dora ? (size_t)outf[k] : 0);
      max_in = in[k] > max_in ? in[k] : max_in;
      max_out = outw[k] > max_out ? outw[k] : max_out;
      l->z_off[k] = l->z_per;
      l->sq_off[k] = l->sq_per;
      l->z_per += (size_t)N * outw[k];
      l->sq_per += (size_t)outw[k];
    }
  int ps = l->per_site;
  l->first = malloc((size_t)l->L * 4 * sizeof *l->first);
  l->w_offset = calloc((size_t)l->L * 4, sizeof *l->w_offset);
  l->pending = calloc((size_t)l->L * 4, 1);
  l->table = calloc((size_t)(hi - lo) * per * ps + 1, sizeof *l->table);
  l->t0 = (size_t)lo * per * ps;
  l->p0 = (size_t)lo * layer_floats;
  l->full_params = (size_t)l->L * layer_floats;
  if (!l->first || !l->w_offset || !l->table || !l->pending) {
    colo_lora_destroy(l);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  size_t off = 0, n = 0, full = l->p0;
  for (int layer = 0; layer < l->L; layer++)
    for (int k = 0; k < 4; k++) {
      l->first[layer * 4 + k] = -1;
      if (!(cfg->targets & (1u << k)) || layer < lo || layer >= hi)
        continue;
      l->first[layer * 4 + k] = (int)n;
      char wname[96];
      snprintf(wname, sizeof wname, "transformer.h.%d.%s.weight", layer, colo_lora_module(k));
      for (size_t t = 0; mt && t < n_model; t++)
        if (!strcmp(mt[t].name, wname))
          l->w_offset[layer * 4 + k] = mt[t].offset;
      for (int ab = 0; ab < ps; ab++) {
        colo_param_t *p = &l->table[n++];
        if (ab == COLO_LORA_MAG) /* a column per output, as B's rows */
          snprintf(p->name, sizeof p->name, "transformer.h.%d.%s.lora_magnitude_vector", layer,
                   colo_lora_module(k));
        else
          snprintf(p->name, sizeof p->name, "transformer.h.%d.%s.lora_%c.weight", layer,
                   colo_lora_module(k), ab ? 'B' : 'A');
        int cols = ab == COLO_LORA_MAG ? 1 : r;
        p->ndim = 2;
        p->shape[0] = ab ? outw[k] : r;
        p->shape[1] = ab ? cols : in[k];
        p->numel = (size_t)p->shape[0] * (size_t)p->shape[1];
        p->offset = off;
        p->full_offset = full;
        p->full_shape[0] = ab ? outf[k] : r;
        p->full_shape[1] = ab ? cols : inf[k];
        p->full_numel = (size_t)p->full_shape[0] * (size_t)p->full_shape[1];
        /* split over the group: a column-parallel product's B (and magnitude) by rows as W's
         * columns are, a row-parallel one's A by columns as W's rows are; the others replicated */
        int by_out = ab != COLO_LORA_A;
        p->split = tp > 1 && by_out == column_parallel(k) ? (by_out ? ws[k] : COLO_SPLIT_COLS)
                                                          : COLO_SPLIT_NONE;
        p->q_cols = Q;
        p->decay = 1; /* as a Trainer's AdamW decays every matrix */
        off += p->numel;
        full += p->full_numel;
      }
    }
  l->n_tensors = n;
  l->n_params = off;
  size_t A = be->act_size, F = sizeof(float), Nr = (size_t)N;
  int lowp = be->act_dtype != COLO_DTYPE_F32, run = N > 0;
  struct {
    void **p;
    size_t bytes;
    const char *what;
  } bufs[] = {
      {(void **)&l->params, off * F, "lora parameters"},
      {(void **)&l->grads, run ? off * F : 0, "lora gradients"},
      {(void **)&l->bs, run ? (size_t)max_out * r * F : 0, "lora scratch"},
      {(void **)&l->bgrad, run ? (size_t)max_out * r * F : 0, "lora scratch"},
      {&l->a_act, run && lowp ? (size_t)r * max_in * A : 0, "lora scratch"},
      {&l->bs_act, run && lowp ? (size_t)max_out * r * A : 0, "lora scratch"},
      {&l->u, Nr * r * A, "activations"},
      {&l->du, Nr * r * A, "activations"},
      {&l->delta, Nr * max_out * A, "activations"},
      {&l->dx, Nr * max_in * A, "activations"},
      {&l->xd, cfg->dropout > 0.0f ? Nr * max_in * A : 0, "activations"},
      {&l->gelu_grad, !llama && (cfg->targets & COLO_LORA_FCPROJ) ? Nr * H * A : 0, "activations"},
      {&l->z, (size_t)l->slots * l->z_per * A, "activations"},
      {(void **)&l->sq, (size_t)l->slots * l->sq_per * F, "activations"},
      {&l->dt, l->slots ? (size_t)max_out * max_in * A : 0, "lora scratch"},
      {&l->dd, l->slots && cfg->dropout > 0.0f ? Nr * max_out * A : 0, "activations"},
  };
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i].bytes && !(*bufs[i].p = colo_pool_alloc(pool, bufs[i].bytes, bufs[i].what))) {
      snprintf(err, errlen, "%s", colo_pool_error(pool));
      colo_lora_destroy(l);
      return COLO_ENOMEM;
    }
  be->zero(l->params, off * F);
  if (l->grads)
    be->zero(l->grads, off * F);
  *out = l;
  return 0;
}

int colo_lora_create(colo_gpt_t *m, const colo_lora_config_t *cfg, colo_pool_t *pool,
                     colo_lora_t **out, char *err, size_t errlen) {
  *out = NULL;
  size_t nm;
  int lo, hi;
  const colo_param_t *mt = colo_gpt_params_table(m, &nm);
  colo_gpt_stage_layers(m, &lo, &hi);
  return lora_new(colo_gpt_config(m), cfg, lo, hi, colo_gpt_tp_size(m), colo_gpt_tp_rank(m),
                  colo_gpt_backend(m), pool, colo_gpt_max_rows(m),
                  colo_gpt_recomputes(m) ? 1 : hi - lo, mt, nm, out, err, errlen);
}

int colo_lora_create_table(const colo_gpt_config_t *mc, const colo_lora_config_t *cfg,
                           colo_lora_t **out, char *err, size_t errlen) {
  colo_pool_t *pool = colo_pool_create("cpu", 0);
  if (!pool)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int rc = lora_new(mc, cfg, 0, mc->n_layer, 1, 0, colo_backend_cpu(), pool, 0, 0, NULL, 0, out,
                    err, errlen);
  if (rc < 0)
    colo_pool_destroy(pool);
  else
    (*out)->own_pool = pool;
  return rc;
}

const colo_lora_config_t *colo_lora_config(const colo_lora_t *l) {
  return &l->cfg;
}

float colo_lora_scale(const colo_lora_t *l) {
  return l->scale;
}

void colo_lora_init(colo_lora_t *l, uint64_t seed) {
  float *h = calloc(l->n_params ? l->n_params : 1, sizeof *h);
  if (!h)
    abort(); /* a few MB at most: the adapters are small */
  /* DoRA's magnitudes: the first norms, W's columns' (B is zero then) */
  for (int q = 0; q < l->L * 4; q++)
    l->pending[q] = l->cfg.dora && l->first[q] >= 0;
  for (size_t i = 0; i < l->n_tensors; i += (size_t)l->per_site) { /* A, then B (zero) */
    const colo_param_t *a = &l->table[i];
    float bound = 1.0f / sqrtf((float)a->full_shape[1]);
    float *whole = malloc(a->full_numel * sizeof *whole);
    if (!whole)
      abort();
    colo_rng_t rng;
    colo_rng_seed(&rng, colo_hash4(seed, 0x6c6f7261 /* "lora" */, l->t0 + i, 0));
    for (size_t k = 0; k < a->full_numel; k++) /* the whole tensor's, then this rank's part */
      whole[k] = (2.0f * colo_rng_uniform(&rng) - 1.0f) * bound;
    colo_lora_take_part(l, i, whole, h + a->offset);
    free(whole);
  }
  l->be->from_host(l->params, h, l->n_params * sizeof *h);
  free(h);
}

const colo_param_t *colo_lora_table(const colo_lora_t *l, size_t *n) {
  *n = l->n_tensors;
  return l->table;
}
void colo_lora_site(const colo_lora_t *l, size_t i, int *layer, int *target) {
  for (int q = 0; q < l->L * 4; q++)
    if (l->first[q] >= 0 && (size_t)l->first[q] / l->per_site == i / l->per_site) {
      *layer = q / 4;
      *target = q % 4;
      return;
    }
  *layer = *target = -1;
}

int colo_lora_parts(const colo_gpt_config_t *c, int target, colo_lora_part_t p[3]) {
  int C = c->n_embd, KV = colo_gpt_kv_heads(c) * colo_gpt_head_size(c), H = colo_gpt_mlp_hidden(c);
  int Q = colo_gpt_q_width(c);
  static const char *const gpt2[4] = {"attn_qkv", "attn_output", "ffn_up", "ffn_down"};
  if (c->arch != COLO_ARCH_LLAMA) {
    int out[4] = {Q + 2 * KV, C, H, C};
    p[0] = (colo_lora_part_t){colo_lora_module(target), gpt2[target], 0, out[target], 0};
    return 1;
  }
  switch (target) {
  case 0:
    p[0] = (colo_lora_part_t){"self_attn.q_proj", "attn_q", 0, Q, 1};
    p[1] = (colo_lora_part_t){"self_attn.k_proj", "attn_k", Q, KV, 1};
    p[2] = (colo_lora_part_t){"self_attn.v_proj", "attn_v", Q + KV, KV, 0};
    return 3;
  case 1:
    p[0] = (colo_lora_part_t){"self_attn.o_proj", "attn_output", 0, C, 0};
    return 1;
  case 2:
    p[0] = (colo_lora_part_t){"mlp.gate_proj", "ffn_gate", 0, H, 0};
    p[1] = (colo_lora_part_t){"mlp.up_proj", "ffn_up", H, H, 0};
    return 2;
  default:
    p[0] = (colo_lora_part_t){"mlp.down_proj", "ffn_down", 0, C, 0};
    return 1;
  }
}

size_t colo_lora_numel(const colo_lora_t *l) {
  return l->n_params;
}
void colo_lora_span(const colo_lora_t *l, size_t *offset, size_t *whole) {
  *offset = l->p0;
  *whole = l->full_params;
}

size_t colo_lora_full_index(const colo_lora_t *l, size_t i, int t, size_t li) {
  const colo_param_t *p = &l->table[i];
  if (p->split == COLO_SPLIT_NONE)
    return li;
  if (colo_lora_kind(l, i) == COLO_LORA_A) /* a row-parallel product's A: its columns */
    return colo_param_full_index(p, t, l->tp, li);
  /* a column-parallel product's B (or magnitude): its rows, as W's columns (the outputs) are */
  size_t r = (size_t)p->shape[1], row = li / r;
  colo_param_t v = {.ndim = 1,
                    .shape = {p->shape[0], 0},
                    .numel = (size_t)p->shape[0],
                    .full_shape = {p->full_shape[0], 0},
                    .full_numel = (size_t)p->full_shape[0],
                    .split = p->split,
                    .q_cols = l->Q};
  return colo_param_full_index(&v, t, l->tp, row) * r + li % r;
}

void colo_lora_take_part(const colo_lora_t *l, size_t i, const float *whole, float *part) {
  size_t w = (size_t)l->table[i].shape[1]; /* a row of the part is a run of the whole */
  for (size_t k = 0; k < l->table[i].numel; k += w)
    memcpy(part + k, whole + colo_lora_full_index(l, i, l->tpr, k), w * sizeof *part);
}
float *colo_lora_params(colo_lora_t *l) {
  return l->params;
}
float *colo_lora_grads(colo_lora_t *l) {
  return l->grads;
}
void colo_lora_zero_grad(colo_lora_t *l) {
  l->be->zero(l->grads, l->n_params * sizeof(float));
}
void *colo_lora_gelu_scratch(colo_lora_t *l) {
  return l->gelu_grad;
}

int colo_lora_has(const colo_lora_t *l, unsigned target) {
  return l && (l->cfg.targets & target) != 0;
}

int colo_lora_kind(const colo_lora_t *l, size_t i) {
  return (int)(i % (size_t)l->per_site);
}

int colo_lora_dora(const colo_lora_t *l, unsigned target) {
  return l && l->cfg.dora && (l->cfg.targets & target) != 0;
}

/* The layer's target's tensors, with the matrices the products read: A, and scale · B, in
 * act_dtype (fp32: A itself, and the scaled copy) */
typedef struct {
  const colo_param_t *a, *b;
  const void *A, *Bs;
  int in, out;
} adapter_t;

static adapter_t adapter(colo_lora_t *l, int layer, unsigned target) {
  int k = bit_index(target), i = l->first[layer * 4 + k];
  const colo_backend_t *be = l->be;
  adapter_t d = {&l->table[i], &l->table[i + 1], NULL, NULL, l->in[k], l->out[k]};
  float *A = l->params + d.a->offset, *B = l->params + d.b->offset;
  be->copy(l->bs, B, d.b->numel * sizeof(float));
  be->scale(l->bs, l->scale, d.b->numel);
  if (l->a_act) {
    be->to_act(l->a_act, A, d.a->numel);
    be->to_act(l->bs_act, l->bs, d.b->numel);
    d.A = l->a_act, d.Bs = l->bs_act;
  } else {
    d.A = A, d.Bs = l->bs;
  }
  return d;
}

double colo_lora_dropout_decimal(const colo_lora_config_t *cfg) {
  char s[32];
  snprintf(s, sizeof s, "%.6g", (double)cfg->dropout);
  return strtod(s, NULL);
}

void colo_lora_set_dropout(colo_lora_t *l, int on, uint64_t key, uint64_t row0) {
  l->drop = on && l->xd != NULL;
  l->drop_key = key;
  l->drop_row0 = row0;
}

void colo_lora_set_rows(colo_lora_t *l, int piece, int seq, int off) {
  l->rows_piece = piece;
  l->rows_seq = seq;
  l->rows_off = off;
}

/* Dropout of N rows of `cols` values (the adapter's input, or its gradient; out may be inp), a
 * row's mask that of its number in the step's batch: drop_row0 + n, or under context parallelism
 * where its token sits in its whole sequence, a run of a sequence's tokens at a time */
static void drop_rows(colo_lora_t *l, void *out, const void *inp, int N, int cols, uint64_t key,
                      int col0) {
  for (size_t n = 0, run; n < (size_t)N; n += run) {
    uint64_t row;
    run = colo_piece_run(n, (size_t)N - n, (size_t)l->rows_piece, (size_t)l->rows_seq,
                         (size_t)l->rows_off, &row);
    size_t at = n * (size_t)cols * l->be->act_size;
    l->be->dropout((char *)out + at, (const char *)inp + at, (int)run, cols, key,
                   l->drop_row0 + row, col0, l->thresh, l->drop_scale);
  }
}

/* this rank's first column of a product's input: a row-parallel product's inputs are split */
static int input_col0(const colo_lora_t *l, unsigned target) {
  int k = bit_index(target);
  return column_parallel(k) ? 0 : l->tpr * l->in[k];
}

/* the adapter's input: x, or under dropout x dropped (in xd), and its mask's key */
static const void *adapter_input(colo_lora_t *l, int layer, unsigned target, const void *inp, int N,
                                 int in, uint64_t *key) {
  if (!l->drop)
    return inp;
  *key = colo_hash4(l->drop_key, (uint64_t)layer, target, 0x64726f70); /* "drop" */
  drop_rows(l, l->xd, inp, N, in, *key, input_col0(l, target));
  return l->xd;
}

void colo_lora_fwd(colo_lora_t *l, int layer, unsigned target, void *out, const void *inp, int N) {
  const colo_backend_t *be = l->be;
  adapter_t d = adapter(l, layer, target);
  int r = l->cfg.rank;
  uint64_t key = 0;
  inp = adapter_input(l, layer, target, inp, N, d.in, &key);
  be->lmhead_fwd(l->u, inp, d.A, N, d.in, r);        /* u = x·Aᵀ */
  be->lmhead_fwd(l->delta, l->u, d.Bs, N, r, d.out); /* u·(scale·B)ᵀ */
  be->add(out, out, l->delta, (size_t)N * d.out);
}

void colo_lora_bwd(colo_lora_t *l, int layer, unsigned target, void *dinp, const void *dout,
                   const void *inp, const void *w, int N) {
  const colo_backend_t *be = l->be;
  adapter_t d = adapter(l, layer, target);
  int r = l->cfg.rank;
  uint64_t key = 0;
  inp = adapter_input(l, layer, target, inp, N, d.in, &key); /* the forward's mask again */
  if (colo_lora_dora(l, target)) { /* the rescaled gradient (colo_lora_dora_bwd's) */
    dout = l->delta;
    if (l->drop) { /* and W·xd's input gradient, through the mask */
      be->matmul_bwd(l->dx, NULL, NULL, l->dd, NULL, w, N, d.in, d.out);
      drop_rows(l, l->dx, l->dx, N, d.in, key, input_col0(l, target));
      be->add(dinp, dinp, l->dx, (size_t)N * d.in);
    }
  }
  be->lmhead_fwd(l->u, inp, d.A, N, d.in, r); /* u again: r floats a row, cheaper to redo */
  /* du = dout·(scale·B); d(scale·B) = doutᵀ·u, so dB += scale · doutᵀ·u */
  be->zero(l->bgrad, d.b->numel * sizeof(float));
  be->lmhead_bwd(l->du, l->bgrad, dout, l->u, d.Bs, N, r, d.out);
  be->scale(l->bgrad, l->scale, d.b->numel);
  be->accumulate(l->grads + d.b->offset, l->bgrad, d.b->numel);
  /* dx = du·A (written), dA += duᵀ·x */
  be->lmhead_bwd(l->dx, l->grads + d.a->offset, l->du, inp, d.A, N, d.in, r);
  if (l->drop) /* through the dropout: the same mask and scale */
    drop_rows(l, l->dx, l->dx, N, d.in, key, input_col0(l, target));
  be->add(dinp, dinp, l->dx, (size_t)N * d.in);
}

/* DoRA's merge: each column j of W[in][out] (the sum) scaled by mag[j] / its norm, as PEFT's */
static void dora_merge(float *W, const float *mag, int in, int out) {
  double *sq = calloc((size_t)out, sizeof *sq);
  if (!sq)
    abort();
  for (int c = 0; c < in; c++)
    for (int o = 0; o < out; o++)
      sq[o] += (double)W[(size_t)c * out + o] * W[(size_t)c * out + o];
  for (int o = 0; o < out; o++)
    sq[o] = mag[o] / sqrt(sq[o]);
#pragma omp parallel for schedule(static)
  for (int c = 0; c < in; c++)
    for (int o = 0; o < out; o++)
      W[(size_t)c * out + o] = (float)(W[(size_t)c * out + o] * sq[o]);
  free(sq);
}

/* DoRA's buffers for a layer's product: its slot's kept output and norms */
static int dora_slot(const colo_lora_t *l, int layer) {
  return l->slots == 1 ? 0 : layer - l->lo;
}

float *colo_lora_dora_norm(colo_lora_t *l, int layer, unsigned target, const void *w, int *n) {
  const colo_backend_t *be = l->be;
  int k = bit_index(target);
  adapter_t d = adapter(l, layer, target);
  float *sq = l->sq + (size_t)dora_slot(l, layer) * l->sq_per + l->sq_off[k];
  /* dt[out][in] = (s·B)·A, then each column of w + dtᵀ */
  be->matmul_fwd(l->dt, d.Bs, d.A, NULL, d.out, l->cfg.rank, d.in);
  be->dora_norm(sq, w, l->dt, d.in, d.out);
  *n = d.out;
  return sq;
}

void colo_lora_dora_fwd(colo_lora_t *l, int layer, unsigned target, void *out, const float *b,
                        const void *w, int N) {
  const colo_backend_t *be = l->be;
  int k = bit_index(target), q = layer * 4 + k, o = l->out[k], slot = dora_slot(l, layer);
  const colo_param_t *mp = &l->table[l->first[q] + COLO_LORA_MAG];
  float *mag = l->params + mp->offset;
  float *sq = l->sq + (size_t)slot * l->sq_per + l->sq_off[k];
  if (l->pending[q]) { /* a fresh run's first forward: m = the norms (B is zero) */
    float *h = malloc((size_t)o * sizeof *h);
    if (!h)
      abort(); /* a row of floats */
    be->to_host(h, sq, (size_t)o * sizeof *h);
    for (int j = 0; j < o; j++)
      h[j] = sqrtf(h[j]);
    be->from_host(mag, h, (size_t)o * sizeof *h);
    free(h);
    l->pending[q] = 0;
  }
  void *z = (char *)l->z + ((size_t)slot * l->z_per + l->z_off[k]) * be->act_size;
  if (!l->drop) { /* out = x·W + s·update(x): all of it rescaled */
    be->copy(z, out, (size_t)N * o * be->act_size);
    be->dora_scale(out, z, mag, sq, b, N, o);
    return;
  }
  /* under dropout, PEFT's x·W + (g − 1)·W·xd + g·s·update(xd) (xd = dropout(x), as the update
   * just read it, in xd; the update itself still in delta): z = W·xd + s·update(xd), and out,
   * which holds x·W + s·update(xd), gains (g − 1)·z */
  be->matmul_fwd(z, l->xd, w, NULL, N, l->in[k], o);
  be->add(z, z, l->delta, (size_t)N * o);
  be->dora_add(out, z, mag, sq, b, N, o);
}

const void *colo_lora_dora_bwd(colo_lora_t *l, int layer, unsigned target, const void *dout,
                               int N) {
  if (!colo_lora_dora(l, target))
    return dout;
  const colo_backend_t *be = l->be;
  int k = bit_index(target), q = layer * 4 + k, o = l->out[k], slot = dora_slot(l, layer);
  const colo_param_t *mp = &l->table[l->first[q] + COLO_LORA_MAG];
  const float *sq = l->sq + (size_t)slot * l->sq_per + l->sq_off[k];
  const void *z = (char *)l->z + ((size_t)slot * l->z_per + l->z_off[k]) * be->act_size;
  const float *mag = l->params + mp->offset;
  be->dora_dmag(l->grads + mp->offset, dout, z, sq, N, o);
  be->dora_scale(l->delta, dout, mag, sq, NULL, N, o); /* the update's: g·dout */
  if (!l->drop)
    return l->delta;                             /* and the product's */
  be->zero(l->dd, (size_t)N * o * be->act_size); /* W·xd's: (g − 1)·dout */
  be->dora_add(l->dd, dout, mag, sq, NULL, N, o);
  return dout; /* the product's, of x·W */
}

void colo_lora_merge(const colo_lora_t *l, const float *adapters, float *params) {
  if (!l->mergeable)
    abort(); /* a table's adapters know no model's layout */
  int r = l->cfg.rank;
  for (int layer = 0; layer < l->L; layer++)
    for (int k = 0; k < 4; k++) {
      int i = l->first[layer * 4 + k];
      if (i < 0)
        continue;
      const float *A = adapters + l->table[i].offset, *B = adapters + l->table[i + 1].offset;
      float *W = params + l->w_offset[layer * 4 + k];
      int in = l->in[k], out = l->out[k];
      /* scale·Bᵀ [r][out], so that each row of W is a sum of r contiguous rows */
      float *bt = malloc((size_t)r * out * sizeof *bt);
      if (!bt)
        abort();
      for (int o = 0; o < out; o++)
        for (int q = 0; q < r; q++)
          bt[(size_t)q * out + o] = l->scale * B[(size_t)o * r + q];
#pragma omp parallel for schedule(static)
      for (int c = 0; c < in; c++) {
        float *w = W + (size_t)c * out;
        for (int q = 0; q < r; q++) {
          float a = A[(size_t)q * in + c];
          const float *b = bt + (size_t)q * out;
          for (int o = 0; o < out; o++)
            w[o] += a * b[o];
        }
      }
      free(bt);
      if (l->cfg.dora)
        dora_merge(W, adapters + l->table[i + COLO_LORA_MAG].offset, in, out);
    }
}

int colo_lora_tp_size(const colo_lora_t *l) {
  return l->tp;
}
