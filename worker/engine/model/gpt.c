/* GPT-2 (and Llama's block on its skeleton) forward and backward on the operation table. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"
#include "../core/nf4.h"
#include "../core/rng.h"
#include "lora.h"

/* per-layer tensor indices, in buffer order */
enum {
  P_LN1W,
  P_LN1B,
  P_QKVW,
  P_QKVB,
  P_QNORMW, /* LLAMA with qk_norm only */
  P_KNORMW,
  P_ATTPROJW,
  P_ATTPROJB,
  P_LN2W,
  P_LN2B,
  P_FCW,
  P_FCB,
  P_FCPROJW,
  P_FCPROJB,
  P_PER_LAYER
};
_Static_assert(P_PER_LAYER == COLO_GPT_TENSORS_PER_LAYER + 2,
               "GPT-2's 12 tensors a layer, and QK-norm's two");

/* one block's activations (void *: stored as the backend's act_dtype; float *: fp32). The
 * row buffers hold R rows: all N = B·T, or under sequence parallelism this rank's N/tp (the
 * products' inputs are gathered from them when needed, forward and backward) */
typedef struct {
  void *ln1;                  /* [R][C] */
  float *ln1_mean, *ln1_rstd; /* [R], [R] */
  void *qkv;                  /* [N][3C/tp] */
  void *qkraw;    /* qk_norm: the query and key heads before their norm, [N][(NH + NKV)/tp][hs] */
  float *qkrstd;  /* qk_norm: their 1/rms, [N][(NH + NKV)/tp] */
  float *att_lse; /* [B][NH/tp][T]: attention's log-sum-exp per query */
  void *atty;     /* [N][C/tp] */
  void *attc;     /* context parallelism: attention's output as it computed it, [B][T][C/tp/cp] */
  void *res2;     /* [R][C]: input + attention */
  void *ln2;      /* [R][C] */
  float *ln2_mean, *ln2_rstd; /* [R], [R] */
  void *fch;                  /* [N][H/tp] (LLAMA [N][2H/tp]): GELU's (SwiGLU's) input */
  void *act; /* [N][H/tp]: GELU's (SwiGLU's) output, kept for the backward's product (NULL under
                recomputation: the block's forward makes it again in the shared gelu buffer) */
  /* the block's matrices in act_dtype, made from the fp32 parameters by the forward and read by
   * the backward too (NULL when activations are fp32: the products read the parameters) */
  void *w;
} layer_acts_t;

struct colo_gpt_s {
  colo_gpt_config_t cfg;
  const colo_backend_t *be;
  colo_pool_t *pool;
  int max_B, recompute;
  colo_param_t *table, *full_table;
  size_t n_tensors, n_params, full_params;
  /* tensor parallelism: the group, its size and this rank's place; local widths */
  colo_comm_t *tp_comm;
  int tp, tpr;
  int Cq, NHl, Cf, Vl, v0; /* C/tp (attention), NH/tp, H/tp, V/tp, first token of the shard */
  int NKVl, Cqkv;          /* key (value) heads /tp; the local qkv product's width Cq + 2·KV/tp */
  int gqa;                 /* NKV < NH: the product's keys and values repeated for attention */
  int llama;               /* cfg.arch == COLO_ARCH_LLAMA */
  float *inv_freq;         /* LLAMA: RoPE's frequencies [hs/2], the backend's memory */
  float rope_mag;          /* LLAMA: the rotation's scale (LongRoPE's attention factor; 1) */
  int per_layer;           /* tensors per block: 12, or 6 (LLAMA) */
  int slot[P_PER_LAYER];   /* a P_* tensor's place in its block's run of tensors (-1: none) */
  int n_top, n_tail;       /* tensors before the blocks (wte, wpe) and after (ln_f, lm_head) */
  int n_lnf;               /* the final norm's tensors: 2 (weight, bias) or 1 (LLAMA) */
  int untied;              /* an LM head of its own */
  int i_head;              /* the head's matrix: lm_head, or (tied) the token embedding */
  float *gmax, *gsum, *tlogit, *gather; /* vocab-parallel loss: [N] each, gather [tp][N] */
  int sp;                               /* sequence parallelism */
  /* context parallelism (Ulysses): the group that splits each sequence, its size and this rank's
   * place; this rank holds tokens [cpr·Tb, (cpr + 1)·Tb) of every row, Tb = block_size/cp, and
   * attention exchanges them for a cp-th of the heads over all of the row's tokens */
  colo_comm_t *cp_comm;
  int cp, cpr, Tb;
  /* cp with grouped-query attention whose key heads divide by cp: q, k and v move before the
   * keys and values are repeated for their query heads (and rotated), KVw = NKVl·hs wide each */
  int cp_kv, KVw;
  int *pos, *pos_host; /* cp: its tokens' positions [max_B][Tb], backend memory and host */
  int *io_host;        /* cp: host scratch for its slice of the inputs and targets [2][max_B·Tb] */
  float *cp_loss;      /* cp: the group's losses gathered, [cp][max_B·Tb], backend memory */
  float *cp_host;      /* cp: host scratch of the whole rows' losses or weights [max_B][T] */
  void *cp_send, *cp_recv; /* cp: the all-to-all's blocks, cp of cp_blk floats each */
  size_t cp_blk;
  int l_lo, l_hi, first, last;   /* pipeline stage: blocks [l_lo, l_hi) */
  int i_wte, i_wpe, i_l0, i_lnf; /* table indices (-1: not on this stage) */
  size_t n_full;                 /* tensors of the whole model */
  void *dfull;                   /* sp: the residual gradient gathered, [N][C] */
  void *lnfull;                  /* sp: a LayerNorm's output gathered, [N][C] */
  float *lnscratch;              /* sp: [2C] LayerNorm gradients before their sum */
  float *params, *grads;
  float **gt; /* per tensor: where its gradients go */
  float **pt; /* per tensor: its values (NULL while released, under ZeRO-3) */
  const colo_gpt_hooks_t *hooks;
  void *hook_ctx;
  int hook_error;
  size_t act_bytes;
  size_t asz; /* bytes per activation element (the backend's act_size) */
  /* activations, stored as the backend's act_dtype */
  void *encoded;        /* [N][C]: the embedding, before its sum over the group */
  void **resid;         /* L+1 row buffers: resid[l] is block l's input, resid[L] the output */
  layer_acts_t *layers; /* L entries, or 1 when recomputing */
  void *lnf;
  float *lnf_mean, *lnf_rstd;
  void *logits;  /* [N][V]; holds probs after a forward with targets, then dlogits */
  float *losses; /* [N] */
  /* the matrices' compute copies in act_dtype, when it is not fp32 (else the parameters
   * themselves): the head's matrix, the token embedding or lm_head (each block's are in its
   * layer_acts_t) */
  void *wte_act;
  float *xfer; /* fp32 [N][C]: 16-bit activations on their way through a communicator */
  size_t wq_off, wap_off, wfc_off, wfp_off; /* elements into a block's compute copies (w) */
  int *targets; /* copy of the last forward's targets, in the backend's memory */
  int *inputs;  /* and of its inputs */
  /* documents (colo_gpt_set_documents): the token that begins each (-1: none), and the last
   * forward's positions within them, [N] in the backend's memory (doc_pos) and the host's */
  int doc_token;
  int *doc_pos, *doc_pos_host;
  /* a sliding window shorter than the block (cfg.sliding_window): attention's positions, each
   * token's in its document (or row) capped at W − 1, so that it attends W keys at most; [max_B]
   * [block_size] (whole rows under cp) in the backend's memory and the host's. NULL: doc_pos */
  int *att_pos, *att_pos_host;
  float *host; /* host scratch for the loss: [N] losses, then gmax, gsum, tlogit, gather [tp][N] */
  int B, T, have_targets;
  /* colo_gpt_forward_train: the loss's gradient for loss scale fuse_scale is computed with the
   * loss (fuse_next), and the logits then hold it (logits_grad) */
  int fuse_next, logits_grad;
  float fuse_scale;
  int weighted; /* the next backward's loss is Σ w[n]·CE_n, w in `losses` */
  /* gradient scratch for one block, in act_dtype */
  void *dres, *dln, *dqkv, *datty, *dfch, *dtmp;
  void *gelu;   /* [N][H/tp]: the GELU (SwiGLU) output of the block at hand, forward and backward,
                 * under recomputation; [1][H/tp] for decoding otherwise */
  void *dglu;   /* LLAMA: [N][H/tp], SwiGLU's output gradient */
  void *qsmall; /* gqa: [N][Cqkv], the qkv product before its keys and values are repeated, and
                 * in the backward its gradient */
  /* colo_gpt_decode: keys and values [L][NH][T][C/NH] of the positions decoded so far, a row of
   * attention scores [T], a loss and a target for the softmax (made on its first call) */
  void *kcache, *vcache, *scores;
  float *dec_loss;
  int *dec_target;
  void *proj;        /* [N][C]: a row-parallel product's output before its sum (forward scratch) */
  colo_lora_t *lora; /* adapters on the products (colo_gpt_set_lora), or NULL */
  int frozen;        /* no gradients of the model's own tensors */
  /* colo_gpt_freeze_matrices: the blocks' matrices only as their compute copies (made once: each
   * block's own w, or under recomputation wkeep[l − l_lo]), the other tensors in fparams */
  int wfrozen;
  void **wkeep;
  float *fparams;
  /* colo_gpt_quantize_nf4 (QLoRA): the blocks' matrices in NF4 alone, each packed (core/nf4.h:
   * its codes, then its absmax values; as ZeRO-3's pieces hold it) at qpack + qoff[i]; a block's
   * products read them dequantized into qw, one block's at a time (by its
   * forward, and again by its backward); the other tensors in fparams */
  int wquant;
  /* NF4 in ZeRO-3's pieces (colo_gpt_quantize_nf4's `pieces`): nothing of the model is kept
   * here; stable is the table of its storage, each NF4 matrix packed into colo_nf4_packed_floats
   * words (the other tensors fp32, as before), which ZeRO plans its chunks over and fetches
   * (pt[i] then points at a matrix's packed words) */
  int qpieces;
  colo_param_t *stable;
  /* either way, with 16-bit activations: an untied head kept only as its compute copy wte_act;
   * a Llama's token embedding (no positions to add) only as a 16-bit table, emb (a tied one's is
   * wte_act, and then the head too is that copy alone): the encoder's values exactly */
  int head16, emb16;
  void *emb;
  float *qpack;
  size_t *qoff;
  void *qw;
  /* with double quantization (colo_gpt_quantize_nf4's dq): the scales are bytes, and a matrix's
   * absmax values are made again into qabs (fp32, the largest matrix's blocks) before each
   * dequantization */
  int wdq;
  float *qabs;
  /* NEFTune (colo_gpt_set_noise): noise of this magnitude on the embeddings, keyed and numbered */
  float noise_mag;
  uint64_t noise_key, noise_row0;
};

/* element i of an activation buffer */
static inline void *at(const colo_gpt_t *m, const void *p, size_t i) {
  return (char *)p + i * m->asz;
}

/* a block's tensor (NULL: the architecture has none, as LLAMA's biases) */
static float *P(colo_gpt_t *m, int layer, int which) {
  int k = m->slot[which];
  return k < 0 ? NULL : m->pt[(size_t)m->i_l0 + (size_t)(layer - m->l_lo) * m->per_layer + k];
}
static float *G(colo_gpt_t *m, int layer, int which) {
  int k = m->slot[which];
  return k < 0 ? NULL : m->gt[(size_t)m->i_l0 + (size_t)(layer - m->l_lo) * m->per_layer + k];
}
#define WTE(m)   ((m)->pt[(m)->i_wte])
#define WPE(m)   ((m)->i_wpe < 0 ? NULL : (m)->pt[(m)->i_wpe])
#define LNFW(m)  ((m)->pt[(m)->i_lnf])
#define LNFB(m)  ((m)->n_lnf < 2 ? NULL : (m)->pt[(m)->i_lnf + 1])
#define HEAD(m)  ((m)->pt[(m)->i_head])
#define DHEAD(m) ((m)->gt[(m)->i_head])
#define DWTE(m)  ((m)->gt[(m)->i_wte])
#define DWPE(m)  ((m)->i_wpe < 0 ? NULL : (m)->gt[(m)->i_wpe])
#define DLNFW(m) ((m)->gt[(m)->i_lnf])
#define DLNFB(m) ((m)->n_lnf < 2 ? NULL : (m)->gt[(m)->i_lnf + 1])

/* common/jobspec.c checks a job's tensor parallelism against the same width */
int colo_gpt_mlp_hidden(const colo_gpt_config_t *cfg) {
  if (cfg->mlp_hidden > 0)
    return cfg->mlp_hidden;
  if (cfg->arch == COLO_ARCH_LLAMA)
    return (8 * cfg->n_embd / 3 + 63) / 64 * 64;
  return 4 * cfg->n_embd;
}

const float *colo_gpt_rope_ext(const colo_gpt_config_t *cfg) {
  if (!cfg->rope_ext)
    return NULL;
  return cfg->block_size > (cfg->rope_orig > 0 ? cfg->rope_orig : 8192) ? cfg->rope_long
                                                                        : cfg->rope_short;
}

int colo_gpt_kv_heads(const colo_gpt_config_t *cfg) {
  return cfg->n_kv_head > 0 ? cfg->n_kv_head : cfg->n_head;
}

int colo_gpt_head_size(const colo_gpt_config_t *cfg) {
  return cfg->head_dim > 0 ? cfg->head_dim : cfg->n_embd / cfg->n_head;
}

int colo_gpt_q_width(const colo_gpt_config_t *cfg) {
  return cfg->n_head * colo_gpt_head_size(cfg);
}

int colo_gpt_tensors_per_layer(const colo_gpt_config_t *cfg) {
  return cfg->arch == COLO_ARCH_LLAMA ? 6 + (cfg->qkv_bias != 0) + 2 * (cfg->qk_norm != 0)
                                      : COLO_GPT_TENSORS_PER_LAYER;
}

const char *colo_gpt_arch_name(int arch) {
  return arch == COLO_ARCH_LLAMA ? "llama" : arch == COLO_ARCH_GPT2 ? "gpt2" : "?";
}

int colo_gpt_arch_parse(const char *name) {
  return !strcmp(name, "gpt2") ? COLO_ARCH_GPT2 : !strcmp(name, "llama") ? COLO_ARCH_LLAMA : -1;
}

void colo_param_shard(const colo_param_t *f, int tp, colo_param_t *p) {
  int d0 = f->full_shape[0], d1 = f->full_shape[1], split = f->split;
  *p = *f;
  /* the split dimension: rows for vocab and row-parallel, else the last */
  int rows = split == COLO_SPLIT_VOCAB || split == COLO_SPLIT_ROWS;
  p->shape[0] = rows ? d0 / tp : (d1 || split == COLO_SPLIT_NONE ? d0 : d0 / tp);
  p->shape[1] = d1 && !rows && split != COLO_SPLIT_NONE ? d1 / tp : d1;
  p->numel = (size_t)p->shape[0] * (d1 ? (size_t)p->shape[1] : 1);
  p->full_offset = f->full_offset;
}

/* Adds whole-model tensor f to this stage's table, with this rank's shard shape. */
static void add_tensor(colo_gpt_t *m, size_t *k, const colo_param_t *f) {
  colo_param_t *p = &m->table[(*k)++];
  colo_param_shard(f, m->tp, p);
  p->offset = m->n_params;
  m->n_params += p->numel;
}

size_t colo_param_full_index(const colo_param_t *p, int t, int tp, size_t li) {
  int d1 = p->full_shape[1];
  size_t w = d1 ? (size_t)p->shape[1] : p->numel; /* local row width (or length) */
  size_t r = d1 ? li / w : 0, j = d1 ? li % w : li;
  switch (p->split) {
  case COLO_SPLIT_VOCAB:
  case COLO_SPLIT_ROWS: /* whole rows: shard t holds rows [t·R, (t+1)·R) */
    return (size_t)t * p->numel + li;
  case COLO_SPLIT_COLS: /* columns [t·w, (t+1)·w) of each row (or of the vector) */
    return d1 ? r * (size_t)d1 + (size_t)t * w + j : (size_t)t * w + j;
  case COLO_SPLIT_QKV: { /* q, k and v each split: local [q_t | k_t | v_t] */
    size_t fw = d1 ? (size_t)d1 : p->full_numel; /* the full row (or vector) */
    size_t fq = p->q_cols ? (size_t)p->q_cols : fw / 3, fk = (fw - fq) / 2;
    size_t lq = fq / (size_t)tp, lk = fk / (size_t)tp, col;
    if (j < lq)
      col = (size_t)t * lq + j;
    else if (j < lq + lk)
      col = fq + (size_t)t * lk + (j - lq);
    else
      col = fq + fk + (size_t)t * lk + (j - lq - lk);
    return d1 ? r * (size_t)d1 + col : col;
  }
  case COLO_SPLIT_GLU: { /* gate and up each split: local [gate_t | up_t] */
    size_t half = w / 2, s = j / half, jj = j % half, full_half = half * (size_t)tp;
    size_t col = s * full_half + (size_t)t * half + jj;
    return d1 ? r * (size_t)d1 + col : col;
  }
  default:
    (void)tp;
    return li;
  }
}

static void add_full(colo_gpt_t *m, size_t *k, size_t *g, const char *name, int d0, int d1,
                     int decay, int split) {
  colo_param_t *f = &m->full_table[(*k)++];
  memset(f, 0, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  f->ndim = d1 ? 2 : 1;
  f->shape[0] = f->full_shape[0] = d0;
  f->shape[1] = f->full_shape[1] = d1;
  f->numel = f->full_numel = (size_t)d0 * (d1 ? (size_t)d1 : 1);
  f->offset = f->full_offset = *g;
  f->split = split;
  f->decay = decay;
  *g += f->numel;
}

/* The whole model's tensors in execution order (full_table: checkpoints and initialisation),
 * then this stage's, with this rank's shard shapes (table). */
static void build_table(colo_gpt_t *m) {
  int C = m->cfg.n_embd, L = m->cfg.n_layer, H = colo_gpt_mlp_hidden(&m->cfg);
  int hs = colo_gpt_head_size(&m->cfg), Q = colo_gpt_q_width(&m->cfg);
  int KV = colo_gpt_kv_heads(&m->cfg) * hs; /* key (value) columns */
  size_t k = 0, g = 0;
  char name[64];
  add_full(m, &k, &g, "transformer.wte.weight", m->cfg.vocab_size, C, 1, COLO_SPLIT_VOCAB);
  if (!m->llama)
    add_full(m, &k, &g, "transformer.wpe.weight", m->cfg.block_size, C, 1, COLO_SPLIT_NONE);
  /* shapes in units: C, 3C (Q + 2·KV), the MLP's H, LLAMA's 2H (gate and up), a head, the
   * queries' Q (C unless model.head_dim says otherwise) */
  enum { U_C = 1, U_3C, U_H, U_2H, U_HS, U_Q };
  static const struct {
    const char *suffix;
    int rows, cols; /* units; 0 cols: a vector */
    int decay, split, llama;
  } layer[P_PER_LAYER] = {
      {"ln_1.weight", U_C, 0, 0, COLO_SPLIT_NONE, 1},
      {"ln_1.bias", U_C, 0, 0, COLO_SPLIT_NONE, 0},
      {"attn.c_attn.weight", U_C, U_3C, 1, COLO_SPLIT_QKV, 1},
      {"attn.c_attn.bias", U_3C, 0, 0, COLO_SPLIT_QKV, 0},
      {"attn.q_norm.weight", U_HS, 0, 0, COLO_SPLIT_NONE, 1},
      {"attn.k_norm.weight", U_HS, 0, 0, COLO_SPLIT_NONE, 1},
      {"attn.c_proj.weight", U_Q, U_C, 1, COLO_SPLIT_ROWS, 1},
      {"attn.c_proj.bias", U_C, 0, 0, COLO_SPLIT_NONE, 0},
      {"ln_2.weight", U_C, 0, 0, COLO_SPLIT_NONE, 1},
      {"ln_2.bias", U_C, 0, 0, COLO_SPLIT_NONE, 0},
      {"mlp.c_fc.weight", U_C, U_H, 1, COLO_SPLIT_COLS, 1},
      {"mlp.c_fc.bias", U_H, 0, 0, COLO_SPLIT_COLS, 0},
      {"mlp.c_proj.weight", U_H, U_C, 1, COLO_SPLIT_ROWS, 1},
      {"mlp.c_proj.bias", U_C, 0, 0, COLO_SPLIT_NONE, 0},
  };
  int unit[] = {0, C, Q + 2 * KV, H, 2 * H, hs, Q};
  for (int i = 0, n = 0; i < P_PER_LAYER; i++) { /* LLAMA: no biases, but q, k and v's if asked */
    int qk = i == P_QNORMW || i == P_KNORMW;     /* LLAMA with qk_norm only */
    m->slot[i] = qk ? (m->llama && m->cfg.qk_norm ? n++ : -1)
                 : !m->llama || layer[i].llama || (i == P_QKVB && m->cfg.qkv_bias) ? n++
                                                                                   : -1;
  }
  for (int l = 0; l < L; l++)
    for (int i = 0; i < P_PER_LAYER; i++) {
      if (m->slot[i] < 0)
        continue;
      int fc = m->llama && i == P_FCW; /* gate and up side by side */
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, layer[i].suffix);
      add_full(m, &k, &g, name, unit[layer[i].rows], unit[fc ? U_2H : layer[i].cols],
               layer[i].decay, fc ? COLO_SPLIT_GLU : layer[i].split);
      if (layer[i].split == COLO_SPLIT_QKV)
        m->full_table[k - 1].q_cols = Q;
    }
  add_full(m, &k, &g, "transformer.ln_f.weight", C, 0, 0, COLO_SPLIT_NONE);
  if (!m->llama)
    add_full(m, &k, &g, "transformer.ln_f.bias", C, 0, 0, COLO_SPLIT_NONE);
  if (m->untied)
    add_full(m, &k, &g, "lm_head.weight", m->cfg.vocab_size, C, 1, COLO_SPLIT_VOCAB);
  m->n_full = k;
  m->full_params = g;
  /* this stage's tensors */
  size_t top = (size_t)m->n_top, tail = (size_t)m->n_tail, per = (size_t)m->per_layer;
  size_t n = 0, l0 = top + (size_t)m->l_lo * per, l1 = top + (size_t)m->l_hi * per;
  m->i_wte = m->i_wpe = m->i_lnf = -1;
  for (size_t gi = 0; gi < k; gi++) {
    int own = gi < top ? m->first : gi >= k - tail ? m->last : gi >= l0 && gi < l1;
    if (!own)
      continue;
    if (gi == 0)
      m->i_wte = (int)n;
    if (gi == 1 && top == 2)
      m->i_wpe = (int)n;
    if (gi == l0)
      m->i_l0 = (int)n;
    if (gi == k - tail)
      m->i_lnf = (int)n;
    if (m->untied && gi == k - 1)
      m->i_head = (int)n;
    add_tensor(m, &n, &m->full_table[gi]);
  }
  if (m->last && !m->first && !m->untied) { /* the head's tied copy of the token embedding */
    m->i_wte = (int)n;
    add_tensor(m, &n, &m->full_table[0]);
  }
  if (!m->untied)
    m->i_head = m->i_wte;
  m->n_tensors = n;
}

/* the rows a row buffer holds (at the largest batch) */
static size_t row_count(const colo_gpt_t *m) {
  size_t N = (size_t)m->max_B * m->Tb;
  return m->sp ? N / (size_t)m->tp : N;
}

/* cp: the floats of one block of the all-to-all at a batch of B rows of `width` values a token
 * (a cp-th of them, of B·Tb tokens, in act_dtype; the largest: q, k and v, 3·Cq), rounded up to
 * whole floats */
static size_t cp_block(const colo_gpt_t *m, int B, size_t width) {
  size_t bytes = (size_t)B * (size_t)m->Tb * (width / (size_t)m->cp) * m->asz;
  return (bytes + sizeof(float) - 1) / sizeof(float);
}

/* Allocates a block's row buffers (rows), or its other activations. */
static int alloc_acts(colo_gpt_t *m, layer_acts_t *a, int rows, char *err, size_t errlen) {
  size_t N = (size_t)m->max_B * m->Tb, C = (size_t)m->cfg.n_embd;
  size_t T = (size_t)m->Tb, R = row_count(m);
  size_t A = m->asz, F = sizeof(float);
  struct {
    void **p;
    size_t bytes;
    int row;
  } want[] = {
      {&a->ln1, R * C * A, 1},
      {(void **)&a->ln1_mean, R * F, 1},
      {(void **)&a->ln1_rstd, R * F, 1},
      {&a->qkv, N * 3 * (size_t)m->Cq * A, 0},
      {&a->qkraw, m->cfg.qk_norm ? N * (size_t)(m->Cq + m->KVw) * A : 0, 0},
      {(void **)&a->qkrstd, m->cfg.qk_norm ? N * (size_t)(m->NHl + m->NKVl) * F : 0, 0},
      {(void **)&a->att_lse, (size_t)m->max_B * (size_t)m->NHl * T * F, 0},
      {&a->atty, N * (size_t)m->Cq * A, 0},
      {&a->attc, m->cp > 1 ? N * (size_t)m->Cq * A : 0, 0},
      {&a->res2, R * C * A, 1},
      {&a->ln2, R * C * A, 1},
      {(void **)&a->ln2_mean, R * F, 1},
      {(void **)&a->ln2_rstd, R * F, 1},
      {&a->fch, N * (size_t)(m->llama ? 2 : 1) * m->Cf * A, 0},
      {&a->act, m->recompute ? 0 : N * (size_t)m->Cf * A, 0},
      {&a->w, m->be->act_dtype == COLO_DTYPE_F32 ? 0 : (m->wfp_off + (size_t)m->Cf * C) * A, 0},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    if (want[i].row != rows || !want[i].bytes)
      continue;
    *want[i].p = colo_pool_alloc(m->pool, want[i].bytes, "activations");
    if (!*want[i].p) {
      snprintf(err, errlen, "%s", colo_pool_error(m->pool));
      return COLO_ENOMEM;
    }
  }
  return 0;
}

/* Frees a block's row buffers (rows), or its other activations. */
static void free_acts(colo_gpt_t *m, layer_acts_t *a, int rows) {
  void *row[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->res2, a->ln2, a->ln2_mean, a->ln2_rstd};
  void *rest[] = {a->qkv, a->qkraw, a->qkrstd, a->att_lse, a->atty, a->attc, a->fch, a->act, a->w};
  for (size_t i = 0; rows && i < sizeof row / sizeof row[0]; i++)
    colo_pool_free(m->pool, row[i]);
  for (size_t i = 0; !rows && i < sizeof rest / sizeof rest[0]; i++)
    colo_pool_free(m->pool, rest[i]);
}

/* The row buffers: every block's, and this stage's residual stream (block inputs and output). On
 * the first stage with sequence parallelism the embedding is summed in the full-size proj
 * scratch and its rows copied into resid[0]; otherwise it is summed in resid[0] itself. */
static int alloc_rows(colo_gpt_t *m, char *err, size_t errlen) {
  size_t R = row_count(m), C = (size_t)m->cfg.n_embd;
  int nl = m->recompute ? 1 : m->l_hi - m->l_lo;
  for (int l = m->l_lo; l <= m->l_hi; l++)
    if (!(m->resid[l] = colo_pool_alloc(m->pool, R * C * m->asz, "activations"))) {
      snprintf(err, errlen, "%s", colo_pool_error(m->pool));
      return COLO_ENOMEM;
    }
  m->encoded = m->sp ? m->proj : m->resid[0];
  for (int l = 0; l < nl; l++) {
    int rc = alloc_acts(m, &m->layers[l], 1, err, errlen);
    if (rc < 0)
      return rc;
  }
  return 0;
}

static void free_rows(colo_gpt_t *m) {
  if (m->resid)
    for (int l = 0; l <= m->cfg.n_layer; l++) {
      colo_pool_free(m->pool, m->resid[l]);
      m->resid[l] = NULL;
    }
  int nl = m->recompute ? 1 : m->l_hi - m->l_lo;
  for (int l = 0; m->layers && l < nl; l++) {
    layer_acts_t *a = &m->layers[l];
    free_acts(m, a, 1);
    a->ln1 = a->res2 = a->ln2 = NULL;
    a->ln1_mean = a->ln1_rstd = a->ln2_mean = a->ln2_rstd = NULL;
  }
}

int colo_gpt_create(const colo_gpt_config_t *cfg, int max_B, int recompute,
                    const colo_backend_t *be, colo_pool_t *pool, colo_gpt_t **out, char *err,
                    size_t errlen) {
  return colo_gpt_create_tp(cfg, max_B, recompute, be, NULL, pool, out, err, errlen);
}

size_t colo_gpt_full_numel(const colo_gpt_t *m) {
  return m->full_params;
}

const colo_param_t *colo_gpt_full_table(const colo_gpt_t *m, size_t *n) {
  *n = m->n_full;
  return m->full_table;
}

int colo_gpt_tp_rank(const colo_gpt_t *m) {
  return m->tpr;
}

int colo_gpt_tp_size(const colo_gpt_t *m) {
  return m->tp;
}

int colo_gpt_cp_size(const colo_gpt_t *m) {
  return m->cp;
}

int colo_gpt_create_tp(const colo_gpt_config_t *cfg, int max_B, int recompute,
                       const colo_backend_t *be, colo_comm_t *tp_comm, colo_pool_t *pool,
                       colo_gpt_t **out, char *err, size_t errlen) {
  return colo_gpt_create_stage(cfg, max_B, recompute, be, tp_comm, NULL, pool, out, err, errlen);
}

int colo_gpt_wte_index(const colo_gpt_t *m, int *tied_copy) {
  *tied_copy = m->last && !m->first && !m->untied;
  return m->i_wte;
}

int colo_gpt_create_stage(const colo_gpt_config_t *cfg, int max_B, int recompute,
                          const colo_backend_t *be, colo_comm_t *tp_comm,
                          const colo_gpt_stage_t *stage, colo_pool_t *pool, colo_gpt_t **out,
                          char *err, size_t errlen) {
  if (stage && (stage->lo < 0 || stage->hi > cfg->n_layer || stage->lo >= stage->hi)) {
    snprintf(err, errlen, "bad pipeline stage: blocks [%d, %d) of %d", stage ? stage->lo : 0,
             stage ? stage->hi : 0, cfg->n_layer);
    return COLO_EINVAL;
  }
  if (cfg->n_layer < 1 || cfg->n_head < 1 || cfg->head_dim < 0 || cfg->head_dim > 65536 ||
      (!cfg->head_dim && cfg->n_embd % cfg->n_head) || cfg->vocab_size < 1 || cfg->block_size < 1 ||
      max_B < 1 || (cfg->head_dim && cfg->arch != COLO_ARCH_LLAMA)) {
    snprintf(err, errlen,
             "bad model shape: n_layer=%d n_head=%d n_embd=%d head_dim=%d (llama's) vocab=%d "
             "block=%d B=%d",
             cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->head_dim, cfg->vocab_size,
             cfg->block_size, max_B);
    return COLO_EINVAL;
  }
  int H = colo_gpt_mlp_hidden(cfg);
  if (cfg->arch != COLO_ARCH_GPT2 && cfg->arch != COLO_ARCH_LLAMA) {
    snprintf(err, errlen, "unknown model architecture %d", cfg->arch);
    return COLO_EINVAL;
  }
  if (cfg->arch == COLO_ARCH_LLAMA && colo_gpt_head_size(cfg) % 2) {
    snprintf(err, errlen, "rotary positions need an even head size, not %d",
             colo_gpt_head_size(cfg));
    return COLO_EINVAL;
  }
  if (cfg->mlp_hidden < 0 || !(cfg->rope_theta >= 0.0f) || !(cfg->rope_factor >= 0.0f) ||
      !(cfg->rope_low >= 0.0f) || !(cfg->rope_high >= 0.0f) || cfg->rope_orig < 0 ||
      (cfg->rope_factor > 0.0f && (cfg->rope_high > 0.0f ? cfg->rope_high : 4.0f) <=
                                      (cfg->rope_low > 0.0f ? cfg->rope_low : 1.0f))) {
    snprintf(err, errlen,
             "bad model shape: mlp_hidden=%d rope_theta=%g, rope scaling factor %g, low %g, high "
             "%g (above low), original context %d",
             cfg->mlp_hidden, (double)cfg->rope_theta, (double)cfg->rope_factor,
             (double)cfg->rope_low, (double)cfg->rope_high, cfg->rope_orig);
    return COLO_EINVAL;
  }
  if (cfg->rope_ext &&
      (cfg->arch != COLO_ARCH_LLAMA || cfg->rope_ext != colo_gpt_head_size(cfg) / 2 ||
       cfg->rope_factor > 0.0f || !(cfg->rope_attn >= 0.0f && cfg->rope_attn <= 100.0f))) {
    snprintf(err, errlen,
             "LongRoPE's %d frequency divisors need a llama of heads of %d (not %d), without "
             "Llama 3's rescaling, and an attention factor in [0, 100] (not %g)",
             cfg->rope_ext, 2 * cfg->rope_ext, colo_gpt_head_size(cfg), (double)cfg->rope_attn);
    return COLO_EINVAL;
  }
  for (int i = 0; i < cfg->rope_ext; i++)
    if (!(cfg->rope_short[i] > 0.0f && cfg->rope_short[i] < 1e9f && cfg->rope_long[i] > 0.0f &&
          cfg->rope_long[i] < 1e9f)) {
      snprintf(err, errlen, "LongRoPE's divisors must be above 0: frequency %d has %g and %g", i,
               (double)cfg->rope_short[i], (double)cfg->rope_long[i]);
      return COLO_EINVAL;
    }
  if (cfg->arch != COLO_ARCH_LLAMA && (cfg->qkv_bias || cfg->qk_norm || cfg->sliding_window ||
                                       (cfg->norm_eps != 0.0f && cfg->norm_eps != 1e-5f))) {
    snprintf(err, errlen,
             "qkv_bias, qk_norm, sliding_window and an RMSNorm eps are llama's; gpt2 has biases "
             "everywhere, LayerNorm's eps 1e-5 and attends every earlier token");
    return COLO_EINVAL;
  }
  if (cfg->sliding_window < 0) {
    snprintf(err, errlen, "bad model shape: sliding_window=%d (0: none)", cfg->sliding_window);
    return COLO_EINVAL;
  }
  if (!(cfg->norm_eps >= 0.0f && cfg->norm_eps <= 1e-2f)) {
    snprintf(err, errlen, "bad model shape: RMSNorm eps %g (0 to 0.01)", (double)cfg->norm_eps);
    return COLO_EINVAL;
  }
  int tp = tp_comm ? colo_comm_size(tp_comm) : 1;
  if (H % tp) {
    snprintf(err, errlen,
             "tensor parallelism over %d ranks needs the MLP's width %d (model.mlp_hidden) to "
             "divide by it",
             tp, H);
    return COLO_EINVAL;
  }
  if (cfg->n_head % tp || cfg->vocab_size % tp) {
    snprintf(err, errlen,
             "tensor parallelism over %d ranks needs n_head=%d and vocab_size=%d to "
             "divide by it",
             tp, cfg->n_head, cfg->vocab_size);
    return COLO_EINVAL;
  }
  int NKV = colo_gpt_kv_heads(cfg);
  if (cfg->n_kv_head < 0 || cfg->n_head % NKV ||
      (NKV != cfg->n_head && cfg->arch != COLO_ARCH_LLAMA)) {
    snprintf(err, errlen, "n_kv_head=%d must divide n_head=%d (and needs arch llama)",
             cfg->n_kv_head, cfg->n_head);
    return COLO_EINVAL;
  }
  if (cfg->untied_head && cfg->arch != COLO_ARCH_LLAMA) {
    snprintf(err, errlen, "an untied LM head needs arch llama");
    return COLO_EINVAL;
  }
  if (NKV % tp) {
    snprintf(err, errlen,
             "tensor parallelism over %d ranks needs n_kv_head=%d to divide by it: each rank "
             "keeps whole key and value heads",
             tp, NKV);
    return COLO_EINVAL;
  }
  int cp = stage && stage->cp ? colo_comm_size(stage->cp) : 1;
  if (cfg->block_size % cp || (cfg->n_head / tp) % cp) {
    snprintf(err, errlen,
             "context parallelism over %d ranks needs block_size=%d and the heads of each "
             "tensor-parallel rank (n_head/tp = %d) to divide by it",
             cp, cfg->block_size, cfg->n_head / tp);
    return COLO_EINVAL;
  }
  colo_gpt_t *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  m->doc_token = -1;
  m->cp = cp;
  m->cp_comm = cp > 1 ? stage->cp : NULL;
  m->cpr = cp > 1 ? colo_comm_rank(stage->cp) : 0;
  m->Tb = cfg->block_size / cp;
  m->cp_kv = cp > 1 && NKV != cfg->n_head && (NKV / tp) % cp == 0;
  int hs = colo_gpt_head_size(cfg);
  m->KVw = NKV / tp * hs;
  m->tp = tp;
  m->tp_comm = tp > 1 ? tp_comm : NULL;
  m->tpr = tp > 1 ? colo_comm_rank(tp_comm) : 0;
  m->Cq = colo_gpt_q_width(cfg) / tp;
  m->NKVl = NKV / tp;
  m->Cqkv = m->Cq + 2 * m->NKVl * hs;
  m->gqa = NKV != cfg->n_head;
  m->NHl = cfg->n_head / tp;
  m->Cf = H / tp;
  m->llama = cfg->arch == COLO_ARCH_LLAMA;
  m->per_layer = colo_gpt_tensors_per_layer(cfg);
  m->n_top = m->llama ? 1 : 2;
  m->n_lnf = m->llama ? 1 : 2;
  m->untied = cfg->untied_head != 0;
  m->n_tail = m->n_lnf + m->untied;
  m->Vl = cfg->vocab_size / tp;
  m->v0 = m->tpr * m->Vl;
  m->cfg = *cfg;
  m->l_lo = stage ? stage->lo : 0;
  m->l_hi = stage ? stage->hi : cfg->n_layer;
  m->first = stage ? stage->first : 1;
  m->last = stage ? stage->last : 1;
  m->be = be;
  m->asz = be->act_size;
  m->pool = pool;
  m->max_B = max_B;
  m->recompute = recompute;
  int L = cfg->n_layer;
  size_t N = (size_t)max_B * m->Tb, C = (size_t)cfg->n_embd;
  m->table = calloc(2 + (size_t)L * P_PER_LAYER + 3, sizeof *m->table);
  m->full_table = calloc(2 + (size_t)L * P_PER_LAYER + 3, sizeof *m->full_table);
  m->resid = calloc((size_t)L + 1, sizeof *m->resid);
  int nl = recompute ? 1 : m->l_hi - m->l_lo;
  m->layers = calloc((size_t)nl, sizeof *m->layers);
  m->host = calloc(N * ((size_t)tp + 4), sizeof *m->host);
  if (!m->table || !m->full_table || !m->resid || !m->layers || !m->host) {
    snprintf(err, errlen, "out of memory");
    colo_gpt_destroy(m);
    return COLO_ENOMEM;
  }
  build_table(m);
  m->gt = calloc(m->n_tensors, sizeof *m->gt);
  m->pt = calloc(m->n_tensors, sizeof *m->pt);
  if (!m->gt || !m->pt) {
    snprintf(err, errlen, "out of memory");
    colo_gpt_destroy(m);
    return COLO_ENOMEM;
  }
  int rc = 0;
  /* the gradients' buffer comes with the first backward (ensure_grads): a frozen model (LoRA)
   * and one under ZeRO-2/3's hooks never have one, and set-up never holds it */
  if (!(stage && stage->no_params) &&
      !(m->params = colo_pool_alloc(pool, m->n_params * sizeof(float), "parameters")))
    rc = COLO_ENOMEM;
  size_t A = m->asz, F = sizeof(float);
  /* the compute copies: one block's matrices, laid out q, attention projection, fc, fc projection
   */
  size_t Cq = (size_t)m->Cq, Cf = (size_t)m->Cf;
  m->wq_off = 0;
  m->wap_off = C * (size_t)m->Cqkv;
  m->wfc_off = m->wap_off + Cq * C;
  m->wfp_off = m->wfc_off + C * Cf * (m->llama ? 2 : 1);
  int lowp = be->act_dtype != COLO_DTYPE_F32;
  struct {
    void **p;
    size_t bytes;
  } rest[] = {{&m->lnf, N * C * A},
              {(void **)&m->lnf_mean, N * F},
              {(void **)&m->lnf_rstd, N * F},
              {&m->logits, N * (size_t)m->Vl * A},
              {(void **)&m->losses, N * F},
              {&m->dres, N * C * A},
              {&m->dln, N * C * A},
              {&m->dqkv, N * 3 * Cq * A},
              {&m->qsmall, m->gqa ? N * (size_t)m->Cqkv * A : 0},
              {&m->datty, N * Cq * A},
              {&m->dfch, N * Cf * (m->llama ? 2 : 1) * A},
              /* a block's GELU output under recomputation; else each block keeps its own
               * (layer_acts_t.act) and decoding's one row is all this holds */
              {&m->gelu, (recompute ? N : 1) * Cf * A},
              {&m->dglu, m->llama ? N * Cf * A : 0},
              {&m->dtmp, N * C * A},
              {&m->proj, N * C * A},
              {(void **)&m->gmax, N * F},
              {(void **)&m->gsum, N * F},
              {(void **)&m->tlogit, N * F},
              {(void **)&m->gather, N * (size_t)m->tp * F},
              {&m->dfull, N * C * A},
              {(void **)&m->lnscratch, 2 * (C > (size_t)hs ? C : (size_t)hs) * F},
              /* fp32 scratch for collectives and pipeline boundaries on 16-bit activations */
              {(void **)&m->xfer, lowp && (tp > 1 || !(m->first && m->last)) ? N * C * F : 0},
              {&m->wte_act, lowp && m->last ? (size_t)m->Vl * C * A : 0},
              {(void **)&m->pos, cp > 1 ? N * sizeof(int) : 0},
              {&m->cp_send, cp > 1 ? (size_t)cp * cp_block(m, max_B, 3 * Cq) * F : 0},
              {&m->cp_recv, cp > 1 ? (size_t)cp * cp_block(m, max_B, 3 * Cq) * F : 0},
              {(void **)&m->cp_loss, cp > 1 ? (size_t)cp * N * F : 0}};
  for (size_t i = 0; i < sizeof rest / sizeof rest[0] && rc == 0; i++)
    if (rest[i].bytes && !(*rest[i].p = colo_pool_alloc(pool, rest[i].bytes, "activations")))
      rc = COLO_ENOMEM;
  if (rc == 0 && m->llama) { /* RoPE's frequencies, made once on the host */
    float *f = malloc((size_t)hs / 2 * sizeof *f);
    if (!f || !(m->inv_freq = colo_pool_alloc(pool, (size_t)hs / 2 * sizeof(float), "rope"))) {
      rc = COLO_ENOMEM;
    } else {
      float theta = cfg->rope_theta > 0.0f ? cfg->rope_theta : 10000.0f;
      if (cfg->rope_ext)
        colo_rope_freqs_ext(hs, theta, colo_gpt_rope_ext(cfg), f);
      else
        colo_rope_freqs(hs, theta, cfg->rope_factor, cfg->rope_low > 0.0f ? cfg->rope_low : 1.0f,
                        cfg->rope_high > 0.0f ? cfg->rope_high : 4.0f,
                        cfg->rope_orig > 0 ? cfg->rope_orig : 8192, f);
      m->rope_mag = cfg->rope_attn > 0.0f ? cfg->rope_attn : 1.0f;
      be->from_host(m->inv_freq, f, (size_t)hs / 2 * sizeof *f);
    }
    free(f);
  }
  if (rc == 0 && cp > 1 &&
      (!(m->pos_host = malloc(N * sizeof(int))) || !(m->io_host = malloc(2 * N * sizeof(int))) ||
       !(m->cp_host = malloc((size_t)cp * N * sizeof(float))))) {
    snprintf(err, errlen, "out of memory");
    colo_gpt_destroy(m);
    return COLO_ENOMEM;
  }
  if (rc == 0 && (!(m->inputs = colo_pool_alloc(pool, N * sizeof(int), "tokens")) ||
                  !(m->targets = colo_pool_alloc(pool, N * sizeof(int), "tokens"))))
    rc = COLO_ENOMEM;
  if (rc == 0 && cfg->sliding_window && cfg->sliding_window < cfg->block_size) {
    size_t rows = (size_t)max_B * cfg->block_size; /* whole rows: attention's under cp */
    if (!(m->att_pos_host = malloc(rows * sizeof(int)))) {
      snprintf(err, errlen, "out of memory");
      colo_gpt_destroy(m);
      return COLO_ENOMEM;
    }
    if (!(m->att_pos = colo_pool_alloc(pool, rows * sizeof(int), "tokens")))
      rc = COLO_ENOMEM;
  }
  if (rc < 0) {
    snprintf(err, errlen, "%s", colo_pool_error(pool));
    colo_gpt_destroy(m);
    return rc;
  }
  for (int l = 0; l < nl && rc == 0; l++)
    rc = alloc_acts(m, &m->layers[l], 0, err, errlen);
  if (rc == 0)
    rc = alloc_rows(m, err, errlen);
  if (rc < 0) {
    colo_gpt_destroy(m);
    return rc;
  }
  for (size_t i = 0; i < m->n_tensors && m->params; i++)
    m->pt[i] = m->params + m->table[i].offset;
  m->act_bytes = colo_pool_used(pool) - (m->params ? m->n_params * sizeof(float) : 0);
  *out = m;
  return 0;
}

void colo_gpt_destroy(colo_gpt_t *m) {
  if (!m)
    return;
  colo_pool_t *p = m->pool;
  colo_pool_free(p, m->params);
  colo_pool_free(p, m->grads);
  colo_pool_free(p, m->fparams);
  colo_pool_free(p, m->qpack);
  free(m->qoff);
  colo_pool_free(p, m->qw);
  colo_pool_free(p, m->qabs);
  if (m->emb != m->wte_act)
    colo_pool_free(p, m->emb);
  free(m->stable);
  for (int l = 0; m->wkeep && l < m->l_hi - m->l_lo; l++)
    colo_pool_free(p, m->wkeep[l]);
  free(m->wkeep);
  free_rows(m);
  void *rest[] = {m->lnf,     m->lnf_mean, m->lnf_rstd,   m->logits, m->losses, m->dres,
                  m->dln,     m->dqkv,     m->datty,      m->dfch,   m->dtmp,   m->gelu,
                  m->gmax,    m->gsum,     m->tlogit,     m->gather, m->dfull,  m->lnscratch,
                  m->wte_act, m->xfer,     m->proj,       m->lnfull, m->kcache, m->vcache,
                  m->scores,  m->dec_loss, m->dec_target, m->dglu,   m->qsmall, m->inv_freq,
                  m->pos,     m->cp_send,  m->cp_recv,    m->cp_loss};
  for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++)
    colo_pool_free(p, rest[i]);
  if (m->layers) {
    int nl = m->recompute ? 1 : m->l_hi - m->l_lo;
    for (int l = 0; l < nl; l++)
      free_acts(m, &m->layers[l], 0);
  }
  free(m->layers);
  free(m->resid);
  free(m->table);
  free(m->full_table);
  free(m->gt);
  free(m->pt);
  colo_pool_free(p, m->targets);
  colo_pool_free(p, m->inputs);
  colo_pool_free(p, m->doc_pos);
  colo_pool_free(p, m->att_pos);
  free(m->att_pos_host);
  free(m->pos_host);
  free(m->io_host);
  free(m->cp_host);
  free(m->doc_pos_host);
  free(m->host);
  free(m);
}

int colo_gpt_set_documents(colo_gpt_t *m, int token, char *err, size_t errlen) {
  if (token >= m->cfg.vocab_size)
    return colo_fail(err, errlen, COLO_EINVAL, "document token %d is outside the vocabulary of %d",
                     token, m->cfg.vocab_size);
  m->doc_token = token < 0 ? -1 : token;
  if (token < 0) {
    colo_pool_free(m->pool, m->doc_pos);
    free(m->doc_pos_host);
    m->doc_pos = NULL, m->doc_pos_host = NULL;
    return 0;
  }
  if (m->doc_pos)
    return 0;
  size_t N = (size_t)m->max_B * m->cfg.block_size;
  if (!(m->doc_pos_host = malloc(N * sizeof(int))))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of host memory for %zu positions", N);
  if (!(m->doc_pos = colo_pool_alloc(m->pool, N * sizeof(int), "tokens"))) {
    free(m->doc_pos_host), m->doc_pos_host = NULL;
    return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
  }
  return 0;
}

int colo_gpt_document_token(const colo_gpt_t *m) {
  return m->doc_token;
}

const colo_gpt_config_t *colo_gpt_config(const colo_gpt_t *m) {
  return &m->cfg;
}
const colo_backend_t *colo_gpt_backend(const colo_gpt_t *m) {
  return m->be;
}
const colo_param_t *colo_gpt_params_table(const colo_gpt_t *m, size_t *n) {
  *n = m->n_tensors;
  return m->table;
}
float *colo_gpt_params(colo_gpt_t *m) {
  return m->params;
}
float *colo_gpt_grads(colo_gpt_t *m) {
  return m->grads;
}
size_t colo_gpt_num_params(const colo_gpt_t *m) {
  return m->n_params;
}

/* colo_gpt_init's put: into the model's buffer (device memory from the host) */
static void put_params(void *ctx, size_t off, const float *v, size_t n) {
  colo_gpt_t *m = ctx;
  if (m->be->device)
    m->be->from_host(m->params + off, v, n * sizeof(float));
  else
    memcpy(m->params + off, v, n * sizeof(float));
}

void colo_gpt_init(colo_gpt_t *m, uint64_t seed) {
  if (m->params)
    colo_gpt_init_each(m, seed, put_params, m);
}

void colo_gpt_init_each(colo_gpt_t *m, uint64_t seed, colo_gpt_put_fn put, void *ctx) {
  /* a whole tensor's values are those of (seed, its index in the whole model's table), drawn in
   * parallel (colo_rng_normals); a rank draws the tensors it holds a part of and keeps its
   * shards, so any layout starts from the weights one process would */
  float proj_std = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
  size_t biggest = 0;
  for (size_t i = 0; i < m->n_full; i++)
    if (m->full_table[i].numel > biggest)
      biggest = m->full_table[i].numel;
  float *full = malloc(biggest * sizeof *full);
  /* this rank's shard of it, a tensor at a time */
  float *stage = malloc(biggest * sizeof *stage);
  for (size_t gi = 0; gi < m->n_full; gi++) {
    const colo_param_t *f = &m->full_table[gi];
    const char *n = f->name;
    size_t len = strlen(n);
    int is_ln_weight = (strstr(n, ".ln_") || strstr(n, "_norm.")) && len > 7 &&
                       !strcmp(n + len - 7, ".weight"); /* the norms' scales start at 1 */
    int is_bias = len > 5 && !strcmp(n + len - 5, ".bias");
    float std = strstr(n, "c_proj.weight") ? proj_std : 0.02f;
    int held = 0;
    for (size_t i = 0; i < m->n_tensors && !held; i++)
      held = m->table[i].full_offset == f->offset;
    if (!held) /* another pipeline stage's */
      continue;
    if (is_ln_weight || is_bias)
      for (size_t k = 0; k < f->numel; k++)
        full[k] = is_ln_weight ? 1.0f : 0.0f;
    else
      colo_rng_normals(seed, gi, full, f->numel, std);
    for (size_t i = 0; i < m->n_tensors; i++) {
      const colo_param_t *p = &m->table[i];
      if (p->full_offset != f->offset)
        continue;
      for (size_t k = 0; k < p->numel; k++)
        stage[k] = full[colo_param_full_index(p, m->tpr, m->tp, k)];
      put(ctx, p->offset, stage, p->numel);
    }
  }
  free(full);
  free(stage);
}

int colo_gpt_set_sequence_parallel(colo_gpt_t *m, int on, char *err, size_t errlen) {
  on = on && m->tp_comm != NULL;
  if (on == m->sp)
    return 0;
  size_t N = (size_t)m->max_B * m->Tb;
  if (on && N % (size_t)m->tp) {
    snprintf(err, errlen, "sequence parallelism over %d ranks needs B·T=%zu to divide by it", m->tp,
             N);
    return COLO_EINVAL;
  }
  /* the row buffers again, at their new size (before any training: nothing to keep) */
  size_t before = colo_pool_used(m->pool);
  free_rows(m);
  m->sp = on;
  int rc = alloc_rows(m, err, errlen);
  if (rc == 0 && on && !m->lnfull &&
      !(m->lnfull = colo_pool_alloc(m->pool, N * m->cfg.n_embd * m->asz, "activations"))) {
    snprintf(err, errlen, "%s", colo_pool_error(m->pool));
    rc = COLO_ENOMEM;
  }
  m->act_bytes = m->act_bytes + colo_pool_used(m->pool) - before;
  return rc;
}

int colo_gpt_sequence_parallel(const colo_gpt_t *m) {
  return m->sp;
}

/* Collectives over the tensor-parallel group on an activation buffer. Communicators move fp32:
 * a 16-bit buffer is widened into the fp32 scratch xfer, reduced or gathered there, and rounded
 * back once. A failure stops the pass (kept in hook_error). */
enum { ACT_SUM, ACT_GATHER, ACT_SCATTER };
static int act_collective(colo_gpt_t *m, void *buf, size_t n, int op) {
  if (m->hook_error)
    return m->hook_error;
  colo_comm_t *c = m->tp_comm;
  size_t total = op == ACT_SUM ? n : n * (size_t)m->tp; /* the whole buffer */
  float *f = m->xfer ? m->xfer : buf;
  if (m->xfer)
    m->be->to_f32(f, buf, total);
  int rc = op == ACT_SUM      ? c->ops->allreduce_sum(c, f, n)
           : op == ACT_GATHER ? c->ops->all_gather(c, f, n)
                              : c->ops->reduce_scatter_sum(c, f, n);
  if (rc < 0)
    return m->hook_error = rc;
  if (m->xfer)
    m->be->to_act(buf, f, total);
  return 0;
}

/* Context parallelism's exchange (DeepSpeed-Ulysses): a buffer of this rank's tokens, laid out
 * [B][Tb][parts], each part (q, k and v, or attention's output) `width[p]` values of whole heads,
 * and the same values laid out [B][T][parts / cp]: every token of the rows, a cp-th of each
 * part's heads (this rank's). to_heads moves the first into the second, else the second into the
 * first; dst may be src. Block d of the all-to-all holds what member d gets, packed and unpacked
 * by strided copies in the backend's memory; activations move as they are stored (a copy, not
 * arithmetic: no widening). */
static int cp_exchange(colo_gpt_t *m, void *dst, const void *src, const int *width, int parts,
                       int to_heads) {
  if (m->hook_error)
    return m->hook_error;
  const colo_backend_t *be = m->be;
  size_t A = m->asz, cp = (size_t)m->cp, B = (size_t)m->B, Tb = (size_t)m->T, W = 0;
  for (int p = 0; p < parts; p++)
    W += (size_t)width[p];
  size_t Wt = W * A, Wh = Wt / cp; /* a token's bytes: all heads, this rank's */
  size_t piece = Tb * Wh;          /* one row's tokens of one member, a cp-th of the heads */
  size_t n = cp_block(m, m->B, W);
  char *S = m->cp_send, *R = m->cp_recv;
  const char *in = src;
  char *out = dst;
  for (size_t d = 0; d < cp; d++) { /* block d: what member d gets */
    char *blk = S + d * n * sizeof(float);
    for (size_t p = 0, at = 0; to_heads && p < (size_t)parts; at += (size_t)width[p++] * A) {
      size_t wc = (size_t)width[p] * A / cp; /* its heads of part p of every token here */
      be->copy2d(blk + at / cp, Wh, in + at + d * wc, Wt, wc, B * Tb);
    }
    if (!to_heads) /* every head of its tokens */
      be->copy2d(blk, piece, in + d * piece, cp * piece, piece, B);
  }
  int rc = colo_comm_all_to_all(m->cp_comm, (const float *)(void *)S, (float *)(void *)R, n);
  if (rc < 0)
    return m->hook_error = rc;
  for (size_t s = 0; s < cp; s++) { /* from member s: its own block comes from S */
    const char *blk = (s == (size_t)m->cpr ? S : R) + s * n * sizeof(float);
    if (to_heads) /* the tokens of member s */
      be->copy2d(out + s * piece, cp * piece, blk, piece, piece, B);
    for (size_t p = 0, at = 0; !to_heads && p < (size_t)parts; at += (size_t)width[p++] * A) {
      size_t wc = (size_t)width[p] * A / cp; /* heads s of part p of this rank's tokens */
      be->copy2d(out + at + s * wc, Wt, blk + at / cp, Wh, wc, B * Tb);
    }
  }
  return 0;
}

/* sp: rows [r0, r0 + N/tp) of an [N][C] buffer are this rank's; these move whole rows */
static int rows_gather(colo_gpt_t *m, void *buf, size_t row_elems) {
  return act_collective(m, buf, row_elems, ACT_GATHER);
}

static int rows_reduce_scatter(colo_gpt_t *m, void *buf, size_t row_elems) {
  return act_collective(m, buf, row_elems, ACT_SCATTER);
}

/* A LayerNorm's output `rows` (this rank's) as the column-parallel products read it: itself, or
 * under sequence parallelism all the group's rows, gathered into lnfull (off, rowf: this rank's
 * place and size in it). */
static const void *ln_full(colo_gpt_t *m, const void *rows, size_t off, size_t rowf) {
  if (!m->sp)
    return rows;
  m->be->copy(at(m, m->lnfull, off), rows, rowf * m->asz);
  rows_gather(m, m->lnfull, rowf);
  return m->lnfull;
}

/* A row-parallel product's partial output in proj, summed over the group: whole (tp), or only
 * this rank's rows, at off (sp). Returns this rank's rows of the sum. */
static const void *proj_sum(colo_gpt_t *m, size_t off, size_t rowf, size_t NC);

/* an activation summed over the group (nothing without tensor parallelism) */
static int act_sum(colo_gpt_t *m, void *buf, size_t n) {
  return m->tp_comm ? act_collective(m, buf, n, ACT_SUM) : m->hook_error;
}

static const void *proj_sum(colo_gpt_t *m, size_t off, size_t rowf, size_t NC) {
  if (m->sp)
    rows_reduce_scatter(m, m->proj, rowf);
  else
    act_sum(m, m->proj, NC);
  return at(m, m->proj, off);
}

/* an fp32 buffer summed over the tensor-parallel group; a failure stops the pass */
static int tp_sum(colo_gpt_t *m, float *buf, size_t n) {
  if (!m->tp_comm || m->hook_error)
    return m->hook_error;
  int rc = m->tp_comm->ops->allreduce_sum(m->tp_comm, buf, n);
  if (rc < 0)
    m->hook_error = rc;
  return rc;
}

/* One block forward: out = block(in), activations into a. */
static int fetch(colo_gpt_t *m, size_t first, size_t n);
static void release(colo_gpt_t *m, size_t first, size_t n);

/* The matrices a block's products read: the parameters themselves when activations are fp32,
 * else their compute copies in a->w, made here from the (fetched) fp32 parameters when `make`.
 * The forward makes them; the backward reads the forward's, as the parameters have not changed
 * since (a recomputing model's one set is made again by the recomputed forward). */
typedef struct {
  const void *qkv, *attproj, *fc, *fcproj;
} block_w_t;

static block_w_t block_weights(colo_gpt_t *m, int l, const layer_acts_t *a, int make) {
  if (m->wquant) { /* NF4: dequantized into the one copy */
    block_w_t w = {at(m, m->qw, m->wq_off), at(m, m->qw, m->wap_off), at(m, m->qw, m->wfc_off),
                   at(m, m->qw, m->wfp_off)};
    const void *dst[4] = {w.qkv, w.attproj, w.fc, w.fcproj};
    const int which[4] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};
    size_t first = (size_t)m->i_l0 + (size_t)(l - m->l_lo) * m->per_layer;
    for (int j = 0; make && j < 4; j++) {
      size_t i = first + (size_t)m->slot[which[j]];
      const uint8_t *c = (const uint8_t *)(m->qpieces ? m->pt[i] : m->qpack + m->qoff[i]);
      size_t n = m->table[i].numel;
      const float *a = (const float *)(const void *)(c + colo_nf4_codes_padded(n));
      if (m->wdq) {
        m->be->dequant_scales(m->qabs, c + colo_nf4_codes_padded(n),
                              (const float *)(const void *)(c + colo_nf4_stats_at(n)),
                              (int)colo_nf4_blocks(n));
        a = m->qabs;
      }
      m->be->dequant_nf4((void *)dst[j], c, a, m->table[i].shape[0], m->table[i].shape[1]);
    }
    return w;
  }
  void *wb = m->wkeep ? m->wkeep[l - m->l_lo] : a->w;
  if (!wb)
    return (block_w_t){P(m, l, P_QKVW), P(m, l, P_ATTPROJW), P(m, l, P_FCW), P(m, l, P_FCPROJW)};
  const colo_backend_t *be = m->be;
  size_t C = (size_t)m->cfg.n_embd, Cq = (size_t)m->Cq, Cf = (size_t)m->Cf;
  block_w_t w = {at(m, wb, m->wq_off), at(m, wb, m->wap_off), at(m, wb, m->wfc_off),
                 at(m, wb, m->wfp_off)};
  if (make && !m->wfrozen) { /* frozen: made once, by colo_gpt_freeze_matrices */
    be->to_act((void *)w.qkv, P(m, l, P_QKVW), C * (size_t)m->Cqkv);
    be->to_act((void *)w.attproj, P(m, l, P_ATTPROJW), Cq * C);
    be->to_act((void *)w.fc, P(m, l, P_FCW), C * Cf * (m->llama ? 2 : 1));
    be->to_act((void *)w.fcproj, P(m, l, P_FCPROJW), Cf * C);
  }
  return w;
}

/* the same for the head's matrix: the tied token embedding, or lm_head (the backward reads the
 * forward's) */
static const void *head_weights(colo_gpt_t *m, int make) {
  if (!m->wte_act)
    return HEAD(m);
  /* frozen: made once, by colo_gpt_freeze_matrices or (QLoRA's untied head) colo_gpt_put */
  if (make && !m->wfrozen && !m->head16)
    m->be->to_act(m->wte_act, HEAD(m), (size_t)m->Vl * m->cfg.n_embd);
  return m->wte_act;
}

/* the block's normalisation: LayerNorm, or LLAMA's RMSNorm (no mean, no bias) */
static void norm_fwd(colo_gpt_t *m, void *out, float *mean, float *rstd, const void *inp,
                     const float *w, const float *b, int N, int C) {
  if (m->llama)
    m->be->rmsnorm_fwd(out, rstd, inp, w, N, C, m->cfg.norm_eps > 0 ? m->cfg.norm_eps : 1e-5f);
  else
    m->be->layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
}

static void norm_bwd(colo_gpt_t *m, void *dinp, float *dw, float *db, const void *dout,
                     const void *inp, const float *w, const float *mean, const float *rstd, int N,
                     int C) {
  if (m->llama)
    m->be->rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, N, C);
  else
    m->be->layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* An adapted product: out[N][OC] = inp·w + b, with the adapter's update added, and under DoRA
 * its columns rescaled (lora.h; the norms of a row-parallel product's columns summed over the
 * tensor-parallel group first, as its inputs, and so its weights' rows, are split) */
static void product_fwd(colo_gpt_t *m, int l, unsigned target, void *out, const void *inp,
                        const void *w, const float *b, int N, int C, int OC) {
  int dora = colo_lora_dora(m->lora, target);
  m->be->matmul_fwd(out, inp, w, dora ? NULL : b, N, C, OC);
  if (!colo_lora_has(m->lora, target))
    return;
  colo_lora_fwd(m->lora, l, target, out, inp, N);
  if (!dora)
    return;
  int n;
  float *sq = colo_lora_dora_norm(m->lora, l, target, w, &n);
  if (m->tp > 1 && (target == COLO_LORA_ATTPROJ || target == COLO_LORA_FCPROJ) &&
      m->tp_comm->ops->allreduce_sum(m->tp_comm, sq, (size_t)n) < 0)
    m->hook_error = COLO_EIO;
  colo_lora_dora_fwd(m->lora, l, target, out, b, w, N);
}

/* The MLP's first product and its activation: out = gelu(pre = inp·W + b), or LLAMA's
 * out = silu(gate)·up of pre = inp·[W_gate | W_up] */
static void mlp_up(colo_gpt_t *m, int l, void *out, void *pre, const void *inp, const void *w,
                   const float *b, int N, int C, int Cf) {
  if (m->llama ||
      colo_lora_has(m->lora, COLO_LORA_FC)) { /* an adapter adds before the activation */
    product_fwd(m, l, COLO_LORA_FC, pre, inp, w, b, N, C, m->llama ? 2 * Cf : Cf);
    if (m->llama)
      m->be->swiglu_fwd(out, pre, N, Cf);
    else
      m->be->gelu_fwd(out, pre, (size_t)N * Cf);
  } else {
    m->be->matmul_gelu_fwd(out, pre, inp, w, b, N, C, Cf);
  }
}

/* the positions of this rank's tokens, for the embedding and the rotation: within their
 * documents (NULL: t), or under context parallelism where they sit in the whole row */
static const int *token_pos(const colo_gpt_t *m) {
  return m->cp > 1 ? m->pos : m->doc_pos;
}

/* attention's positions (backend.h), over whole rows: a query attends keys back to its position
 * (NULL: the row's start) */
static const int *att_pos(const colo_gpt_t *m) {
  return m->att_pos ? m->att_pos : m->doc_pos;
}

/* Qwen3's QK-norm on the qkv product's rows of this rank's tokens (qkv[N][Cqkv], before the keys
 * are repeated and anything moves or rotates): each query and key head normalized in place, its
 * raw values and 1/rms kept in a for the backward */
static void qk_norm_fwd(colo_gpt_t *m, int l, layer_acts_t *a, void *qkv, int N) {
  if (m->cfg.qk_norm)
    m->be->qk_norm_fwd(qkv, a->qkraw, a->qkrstd, P(m, l, P_QNORMW), P(m, l, P_KNORMW), N, m->Cqkv,
                       m->NHl, m->NKVl, colo_gpt_head_size(&m->cfg),
                       m->cfg.norm_eps > 0 ? m->cfg.norm_eps : 1e-5f);
}

/* its backward, in place on the product's output gradient dqkv[N][Cqkv]. The two scales are
 * shared by every head: under tensor parallelism each rank's heads give a part of their
 * gradient, which the group adds (as sequence parallelism's norms, ln_bwd_rows) */
static void qk_norm_bwd(colo_gpt_t *m, int l, layer_acts_t *a, void *dqkv, int N) {
  if (!m->cfg.qk_norm)
    return;
  const colo_backend_t *be = m->be;
  int hs = colo_gpt_head_size(&m->cfg);
  float *dq = G(m, l, P_QNORMW), *dk = G(m, l, P_KNORMW), *wq = P(m, l, P_QNORMW);
  float *wk = P(m, l, P_KNORMW);
  if (!m->tp_comm || !dq) {
    be->qk_norm_bwd(dqkv, dq, dk, a->qkraw, a->qkrstd, wq, wk, N, m->Cqkv, m->NHl, m->NKVl, hs);
    return;
  }
  be->zero(m->lnscratch, 2 * (size_t)hs * sizeof(float));
  be->qk_norm_bwd(dqkv, m->lnscratch, m->lnscratch + hs, a->qkraw, a->qkrstd, wq, wk, N, m->Cqkv,
                  m->NHl, m->NKVl, hs);
  if (tp_sum(m, m->lnscratch, 2 * (size_t)hs) < 0)
    return;
  be->accumulate(dq, m->lnscratch, (size_t)hs);
  be->accumulate(dk, m->lnscratch + hs, (size_t)hs);
}

/* returns the matrices it used */
static block_w_t block_forward(colo_gpt_t *m, int l, layer_acts_t *a, const void *in, void *out) {
  const colo_backend_t *be = m->be;
  block_w_t w = block_weights(m, l, a, 1);
  int B = m->B, T = m->T, C = m->cfg.n_embd, N = B * T, Cq = m->Cq, Cf = m->Cf;
  /* under tensor parallelism the row-parallel products give partial sums: the group adds them,
   * and only its first rank adds the (replicated) bias */
  const float *apb = m->tpr == 0 ? P(m, l, P_ATTPROJB) : NULL;
  const float *fpb = m->tpr == 0 ? P(m, l, P_FCPROJB) : NULL;
  /* sequence parallel: LayerNorms and residual adds on this rank's rows only (in, out and the
   * row buffers hold just those) */
  int Nl = m->sp ? N / m->tp : N;
  size_t off = (m->sp ? (size_t)m->tpr * Nl : 0) * C, rowf = (size_t)Nl * C, NC = (size_t)N * C;
  norm_fwd(m, a->ln1, a->ln1_mean, a->ln1_rstd, in, P(m, l, P_LN1W), P(m, l, P_LN1B), Nl, C);
  const void *x1 = ln_full(m, a->ln1, off, rowf); /* all rows (gathered under sp) */
  product_fwd(m, l, COLO_LORA_QKV, m->gqa ? m->qsmall : a->qkv, x1, w.qkv, P(m, l, P_QKVB), N, C,
              m->Cqkv);
  qk_norm_fwd(m, l, a, m->gqa ? m->qsmall : a->qkv, N);
  int Tf = T * m->cp, Cc = Cq / m->cp, NHc = m->NHl / m->cp; /* under cp: attention's */
  if (m->cp_kv) { /* the keys and values move unrepeated, repeated and rotated where they land */
    const int wd[3] = {Cq, m->KVw, m->KVw};
    cp_exchange(m, m->qsmall, m->qsmall, wd, 3, 1);
    be->kv_expand(a->qkv, m->qsmall, B * Tf, Cc, NHc, m->NKVl / m->cp);
    if (m->llama) /* at their places in the whole rows */
      be->rope(a->qkv, B, Tf, Cc, NHc, 0, m->inv_freq, m->rope_mag, 1, m->doc_pos);
  } else {
    if (m->gqa) /* each key and value head repeated for its group of query heads */
      be->kv_expand(a->qkv, m->qsmall, N, Cq, m->NHl, m->NKVl);
    if (m->llama) /* the queries and keys rotated in place: attention and its backward read them */
      be->rope(a->qkv, B, T, Cq, m->NHl, 0, m->inv_freq, m->rope_mag, 1, token_pos(m));
    const int wd[3] = {Cq, Cq, Cq};
    if (m->cp > 1)
      cp_exchange(m, a->qkv, a->qkv, wd, 3, 1);
  }
  if (m->cp > 1) { /* over the whole rows, a cp-th of the heads; back to this rank's tokens */
    be->attention_fwd(a->attc, a->att_lse, a->qkv, B, Tf, Cc, NHc, att_pos(m));
    cp_exchange(m, a->atty, a->attc, &Cq, 1, 0);
  } else {
    be->attention_fwd(a->atty, a->att_lse, a->qkv, B, T, Cq, m->NHl, att_pos(m));
  }
  product_fwd(m, l, COLO_LORA_ATTPROJ, m->proj, a->atty, w.attproj, apb, N, Cq, C);
  be->add(a->res2, in, proj_sum(m, off, rowf, NC), rowf);
  norm_fwd(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P(m, l, P_LN2W), P(m, l, P_LN2B), Nl, C);
  void *act = a->act ? a->act : m->gelu; /* kept for the backward, or made again there */
  mlp_up(m, l, act, a->fch, ln_full(m, a->ln2, off, rowf), w.fc, P(m, l, P_FCB), N, C, Cf);
  product_fwd(m, l, COLO_LORA_FCPROJ, m->proj, act, w.fcproj, fpb, N, Cf, C);
  be->add(out, a->res2, proj_sum(m, off, rowf, NC), rowf);
  return w;
}

/* The loss over a vocab-parallel shard of logits: the global row max (all-gathered maxima), the
 * sum of exponentials and the target logit (summed over the group). */
/* targets on the device, host_targets the same in host memory (-1: does not count) */
static void vocab_parallel_loss(colo_gpt_t *m, const int *targets, const int *host_targets, int N) {
  const colo_backend_t *be = m->be;
  int tp = m->tp, Vl = m->Vl;
  float *losses = m->host, *gmax = losses + N, *gsum = gmax + N, *tlogit = gsum + N,
        *gather = tlogit + N;
  be->vocab_max(m->gather + (size_t)m->tpr * N, m->logits, N, Vl);
  if (m->tp_comm->ops->all_gather(m->tp_comm, m->gather, (size_t)N) < 0) {
    m->hook_error = COLO_EIO;
    return;
  }
  be->to_host(gather, m->gather, (size_t)tp * N * sizeof(float));
  for (int n = 0; n < N; n++) {
    float g = gather[n];
    for (int t = 1; t < tp; t++)
      g = fmaxf(g, gather[(size_t)t * N + n]);
    gmax[n] = g;
  }
  be->from_host(m->gmax, gmax, (size_t)N * sizeof(float));
  be->vocab_sumexp(m->gsum, m->logits, m->gmax, N, Vl);
  be->vocab_target(m->tlogit, m->logits, targets, m->v0, N, Vl);
  if (tp_sum(m, m->gsum, (size_t)N) < 0 || tp_sum(m, m->tlogit, (size_t)N) < 0)
    return;
  be->to_host(gsum, m->gsum, (size_t)N * sizeof(float));
  be->to_host(tlogit, m->tlogit, (size_t)N * sizeof(float));
  for (int n = 0; n < N; n++) /* into host scratch: the caller takes the mean there */
    losses[n] = host_targets[n] < 0 ? 0.0f : logf(gsum[n]) + gmax[n] - tlogit[n];
}

size_t colo_gpt_stage_rows(const colo_gpt_t *m, int B, int T) {
  int N = B * (T / m->cp), Nl = m->sp ? N / m->tp : N;
  return (size_t)Nl * m->cfg.n_embd;
}

/* this rank's rows of a boundary tensor in fp32, as the pipeline moves them */
static const float *boundary_f32(colo_gpt_t *m, const void *act) {
  if (!m->xfer)
    return act;
  m->be->to_f32(m->xfer, act, colo_gpt_stage_rows(m, m->B, m->T));
  return m->xfer;
}

const float *colo_gpt_stage_output(colo_gpt_t *m) {
  return boundary_f32(m, m->resid[m->l_hi]);
}

const float *colo_gpt_stage_input_grad(colo_gpt_t *m) {
  size_t rowf = colo_gpt_stage_rows(m, m->B, m->T);
  return boundary_f32(m, at(m, m->dres, m->sp ? (size_t)m->tpr * rowf : 0));
}

/* rowf floats of a boundary tensor (this rank's rows) into an activation buffer */
static void boundary_in(colo_gpt_t *m, void *act, const float *f, size_t rowf) {
  if (m->xfer)
    m->be->to_act(act, f, rowf);
  else
    m->be->copy(act, f, rowf * sizeof(float));
}

float colo_gpt_forward(colo_gpt_t *m, const int *inputs, const int *targets, int B, int T) {
  return colo_gpt_forward_stage(m, inputs, NULL, targets, B, T);
}

float colo_gpt_forward_train(colo_gpt_t *m, const int *inputs, const int *targets, int B, int T,
                             float loss_scale) {
  return colo_gpt_forward_stage_train(m, inputs, NULL, targets, B, T, loss_scale);
}

float colo_gpt_forward_stage_train(colo_gpt_t *m, const int *inputs, const float *x_in,
                                   const int *targets, int B, int T, float loss_scale) {
  m->fuse_next = 1;
  m->fuse_scale = loss_scale;
  float loss = colo_gpt_forward_stage(m, inputs, x_in, targets, B, T);
  m->fuse_next = 0;
  return loss;
}

float colo_gpt_forward_stage(colo_gpt_t *m, const int *inputs, const float *x_in,
                             const int *targets, int B, int T) {
  const colo_backend_t *be = m->be;
  int C = m->cfg.n_embd, L = m->cfg.n_layer, N = B * T, Vl = m->Vl;
  if (T % m->cp) { /* the caller's error */
    fprintf(stderr, "colo_gpt_forward: T=%d does not split over %d context-parallel ranks\n", T,
            m->cp);
    abort();
  }
  if (inputs && m->doc_pos) { /* each token's position in its document (all of each row's) */
    int *p = m->doc_pos_host;
    for (int n = 0; n < N; n++)
      p[n] = n % T == 0 || inputs[n] == m->doc_token ? 0 : p[n - 1] + 1;
    be->from_host(m->doc_pos, p, (size_t)N * sizeof(int));
  }
  if (m->att_pos && (inputs || !m->doc_pos)) { /* the window: at most W − 1 keys back */
    int *p = m->att_pos_host, w = m->cfg.sliding_window - 1;
    for (int n = 0; n < N; n++) {
      int d = m->doc_pos ? m->doc_pos_host[n] : n % T;
      p[n] = d < w ? d : w;
    }
    be->from_host(m->att_pos, p, (size_t)N * sizeof(int));
  }
  if (m->cp > 1) { /* this rank's piece of each row: its tokens, targets and their positions */
    T /= m->cp, N = B * T;
    size_t t0 = (size_t)m->cpr * T;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        size_t at = (size_t)b * T * m->cp + t0 + t;
        m->pos_host[b * T + t] = m->doc_pos ? m->doc_pos_host[at] : (int)(t0 + t);
        if (inputs)
          m->io_host[b * T + t] = inputs[at];
        if (targets)
          m->io_host[(size_t)m->max_B * m->Tb + b * T + t] = targets[at];
      }
    be->from_host(m->pos, m->pos_host, (size_t)N * sizeof(int));
    inputs = inputs ? m->io_host : NULL;
    targets = targets ? m->io_host + (size_t)m->max_B * m->Tb : NULL;
  }
  m->B = B;
  m->T = T;
  m->logits_grad = 0;
  if (m->lora && m->cp > 1) /* its dropout's rows numbered as the whole rows' */
    colo_lora_set_rows(m->lora, T, T * m->cp, m->cpr * T);
  if (inputs)
    be->from_host(m->inputs, inputs, (size_t)N * sizeof(int));
  int Nl = m->sp ? N / m->tp : N;
  size_t r0 = m->sp ? (size_t)m->tpr * Nl : 0, off = r0 * C, rowf = (size_t)Nl * C;
  if (m->first) {
    if (fetch(m, (size_t)m->i_wte, (size_t)m->n_top) < 0) /* wte and wpe, adjacent */
      return NAN;
    /* vocab-parallel embedding: each shard adds its rows, the first also the positions */
    if (m->emb16)
      be->embed_fwd(m->encoded, m->inputs, m->emb, N, C, m->cfg.vocab_size);
    else
      be->encoder_fwd(m->encoded, m->inputs, WTE(m), m->tpr == 0 ? WPE(m) : NULL, B, T, C, m->v0,
                      m->v0 + Vl, token_pos(m));
    release(m, (size_t)m->i_wte, (size_t)m->n_top);
    if (m->sp) { /* summed by rows, this rank's into its residual stream */
      if (rows_reduce_scatter(m, m->encoded, rowf) < 0)
        return NAN;
      be->copy(m->resid[0], at(m, m->encoded, off), rowf * m->asz);
    } else if (act_sum(m, m->encoded, (size_t)N * C) < 0) {
      return NAN;
    }
    /* NEFTune: this rank's rows, numbered as the whole batch's (under context parallelism a run
     * of them at a time: its tokens of a row) */
    size_t piece = m->cp > 1 ? (size_t)T : 0, end = r0 + (size_t)Nl;
    for (size_t n = r0, run; m->noise_mag > 0.0f && n < end; n += run) {
      uint64_t row;
      run = colo_piece_run(n, end - n, piece, piece * m->cp, (size_t)m->cpr * piece, &row);
      be->noise(at(m, m->resid[0], (n - r0) * C), (int)run, C, m->noise_key, m->noise_row0 + row,
                m->noise_mag);
    }
  } else { /* the previous stage's output */
    boundary_in(m, m->resid[m->l_lo], x_in, rowf);
  }
  for (int l = m->l_lo; l < m->l_hi; l++) {
    size_t first = (size_t)m->i_l0 + (size_t)(l - m->l_lo) * m->per_layer;
    if (fetch(m, first, (size_t)m->per_layer) < 0)
      return NAN;
    block_forward(m, l, &m->layers[m->recompute ? 0 : l - m->l_lo], m->resid[l], m->resid[l + 1]);
    release(m, first, (size_t)m->per_layer);
    if (m->hook_error)
      return NAN;
  }
  if (!m->last)
    return 0.0f;
  if (fetch(m, (size_t)m->i_lnf, (size_t)m->n_lnf) < 0 || fetch(m, (size_t)m->i_head, 1) < 0)
    return NAN;
  norm_fwd(m, at(m, m->lnf, off), m->lnf_mean + r0, m->lnf_rstd + r0, m->resid[L], LNFW(m), LNFB(m),
           Nl, C);
  if (m->sp && rows_gather(m, m->lnf, rowf) < 0)
    return NAN;
  be->lmhead_fwd(m->logits, m->lnf, head_weights(m, 1), N, C, Vl);
  release(m, (size_t)m->i_lnf, (size_t)m->n_lnf);
  release(m, (size_t)m->i_head, 1);
  m->have_targets = targets != NULL;
  if (!targets)
    return 0.0f;
  be->from_host(m->targets, targets, (size_t)N * sizeof(int));
  if (m->tp_comm) {
    vocab_parallel_loss(m, m->targets, targets, N); /* the losses into m->host */
    if (m->hook_error)
      return NAN;
  } else {
    if (m->fuse_next) {
      be->crossentropy_fused(m->losses, m->logits, m->targets,
                             m->fuse_scale / (float)((size_t)N * m->cp), N, Vl);
      m->logits_grad = 1;
    } else {
      be->crossentropy_fwd(m->losses, m->logits, m->logits, m->targets, N, Vl);
    }
    be->to_host(m->host, m->losses, (size_t)N * sizeof(float));
  }
  /* mean in double, in order: the loss a test compares must not depend on threads */
  double s = 0.0;
  for (int n = 0; n < N; n++)
    s += m->host[n];
  if (m->cp > 1) { /* the whole rows' mean: every piece's sum */
    float sum = (float)s;
    int rc = m->cp_comm->ops->allreduce_sum(m->cp_comm, &sum, 1);
    if (rc < 0) {
      m->hook_error = rc;
      return NAN;
    }
    return sum / (float)((size_t)N * m->cp);
  }
  return (float)(s / N);
}

int colo_gpt_decode(colo_gpt_t *m, int token, int pos, float *logits, char *err, size_t errlen) {
  const colo_backend_t *be = m->be;
  int C = m->cfg.n_embd, L = m->cfg.n_layer, T = m->cfg.block_size, V = m->cfg.vocab_size;
  int NH = m->cfg.n_head, hs = colo_gpt_head_size(&m->cfg), Q = m->Cq; /* tp = 1: Q = NH·hs */
  if (m->lora)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "decoding with LoRA adapters: merge them into the weights first "
                     "(colo_lora_merge: the same model, without the adapters' products)");
  if (m->tp_comm || m->cp_comm || !m->first || !m->last || m->hooks ||
      be->act_dtype != COLO_DTYPE_F32)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "decoding needs the whole model on one rank in fp32, without hooks");
  if (pos < 0 || pos >= T || token < 0 || token >= V)
    return colo_fail(err, errlen, COLO_EINVAL, "position %d or token %d outside the model's %d, %d",
                     pos, token, T, V);
  if (!m->kcache) {
    size_t kv = (size_t)L * T * Q * sizeof(float);
    m->kcache = colo_pool_alloc(m->pool, kv, "decoding cache");
    m->vcache = colo_pool_alloc(m->pool, kv, "decoding cache");
    m->scores = colo_pool_alloc(m->pool, (size_t)T * sizeof(float), "decoding cache");
    m->dec_loss = colo_pool_alloc(m->pool, sizeof(float), "decoding cache");
    m->dec_target = colo_pool_alloc(m->pool, sizeof(int), "decoding cache");
    if (!m->kcache || !m->vcache || !m->scores || !m->dec_loss || !m->dec_target)
      return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
    int zero = 0;
    be->from_host(m->dec_target, &zero, sizeof zero);
  }
  be->from_host(m->inputs, &token, sizeof token);
  be->encoder_fwd(m->resid[0], m->inputs, WTE(m), WPE(m) ? WPE(m) + (size_t)pos * C : NULL, 1, 1, C,
                  0, V, NULL);
  int H = m->Cf;
  float scale = 1.0f / sqrtf((float)hs);
  /* the keys it attends: k0 … pos, the last W of them under a sliding window */
  int W = m->cfg.sliding_window, k0 = W && pos >= W ? pos - W + 1 : 0, n = pos + 1 - k0;
  for (int l = 0; l < L; l++) {
    layer_acts_t *a = &m->layers[m->recompute ? 0 : l];
    const float *x = m->resid[l];
    float *qkv = a->qkv, *att = a->atty;
    norm_fwd(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, P(m, l, P_LN1W), P(m, l, P_LN1B), 1, C);
    be->matmul_fwd(m->gqa ? m->qsmall : qkv, a->ln1, P(m, l, P_QKVW), P(m, l, P_QKVB), 1, C,
                   m->Cqkv);
    qk_norm_fwd(m, l, a, m->gqa ? m->qsmall : qkv, 1);
    if (m->gqa)
      be->kv_expand(qkv, m->qsmall, 1, Q, NH, m->NKVl);
    if (m->llama) /* this position's query and key: the cache keeps keys rotated */
      be->rope(qkv, 1, 1, Q, NH, pos, m->inv_freq, m->rope_mag, 1, NULL);
    for (int h = 0; h < NH; h++) {
      size_t head = ((size_t)l * NH + h) * T * hs; /* this head's cache of this layer */
      float *K = (float *)m->kcache + head, *Vh = (float *)m->vcache + head;
      be->copy(K + (size_t)pos * hs, qkv + Q + h * hs, (size_t)hs * sizeof(float));
      be->copy(Vh + (size_t)pos * hs, qkv + 2 * Q + h * hs, (size_t)hs * sizeof(float));
      /* the query's scores against the n keys, scaled, their softmax, and its sum of values */
      be->lmhead_fwd(m->scores, qkv + h * hs, K + (size_t)k0 * hs, 1, hs, n);
      be->scale(m->scores, scale, (size_t)n);
      be->crossentropy_fwd(m->dec_loss, m->scores, m->scores, m->dec_target, 1, n);
      be->matmul_fwd(att + h * hs, m->scores, Vh + (size_t)k0 * hs, NULL, 1, n, hs);
    }
    be->matmul_fwd(m->proj, att, P(m, l, P_ATTPROJW), P(m, l, P_ATTPROJB), 1, Q, C);
    be->add(a->res2, x, m->proj, (size_t)C);
    norm_fwd(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, P(m, l, P_LN2W), P(m, l, P_LN2B), 1, C);
    mlp_up(m, l, m->gelu, a->fch, a->ln2, P(m, l, P_FCW), P(m, l, P_FCB), 1, C, H);
    be->matmul_fwd(m->proj, m->gelu, P(m, l, P_FCPROJW), P(m, l, P_FCPROJB), 1, H, C);
    be->add(m->resid[l + 1], a->res2, m->proj, (size_t)C);
  }
  norm_fwd(m, m->lnf, m->lnf_mean, m->lnf_rstd, m->resid[L], LNFW(m), LNFB(m), 1, C);
  be->lmhead_fwd(m->logits, m->lnf, HEAD(m), 1, C, V);
  be->to_host(logits, m->logits, (size_t)V * sizeof(float));
  m->have_targets = 0;
  return 0;
}

void colo_gpt_read_logits(const colo_gpt_t *m, size_t row, float *dst) {
  size_t V = (size_t)m->Vl;
  if (m->be->act_dtype == COLO_DTYPE_F32) {
    m->be->to_host(dst, at(m, m->logits, row * V), V * sizeof(float));
    return;
  }
  uint16_t *h = malloc(V * m->asz);
  if (!h) { /* a row of the vocabulary: at most 128 KiB */
    for (size_t v = 0; v < V; v++)
      dst[v] = NAN;
    return;
  }
  m->be->to_host(h, at(m, m->logits, row * V), V * m->asz);
  colo_dtype_to_float(dst, h, V, m->be->act_dtype);
  free(h);
}

void colo_gpt_stage_layers(const colo_gpt_t *m, int *lo, int *hi) {
  *lo = m->l_lo;
  *hi = m->l_hi;
}

int colo_gpt_max_rows(const colo_gpt_t *m) {
  return m->max_B * m->Tb;
}

int colo_gpt_recomputes(const colo_gpt_t *m) {
  return m->recompute;
}

int colo_gpt_set_lora(colo_gpt_t *m, struct colo_lora_s *lora, char *err, size_t errlen) {
  if (m->hooks)
    return colo_fail(err, errlen, COLO_EINVAL, "lora adapters need ZeRO-3's hooks set after them");
  m->lora = lora;
  if (lora && !m->frozen) {
    m->frozen = 1;
    colo_pool_free(m->pool, m->grads);
    m->grads = NULL;
    for (size_t i = 0; i < m->n_tensors; i++)
      m->gt[i] = NULL;
  }
  return 0;
}

/* whether table index i is one of a block's four matrices */
static int block_matrix(const colo_gpt_t *m, size_t i) {
  size_t n = (size_t)(m->l_hi - m->l_lo) * m->per_layer;
  if (i < (size_t)m->i_l0 || i >= (size_t)m->i_l0 + n)
    return 0;
  int k = (int)((i - (size_t)m->i_l0) % (size_t)m->per_layer);
  return k == m->slot[P_QKVW] || k == m->slot[P_ATTPROJW] || k == m->slot[P_FCW] ||
         k == m->slot[P_FCPROJW];
}

/* whether a frozen model keeps table index i in its fp32 buffer (fparams): not a block's matrix,
 * nor a head or an embedding kept as a 16-bit copy alone */
static int kept_fp32(const colo_gpt_t *m, size_t i) {
  return !block_matrix(m, i) && !(m->head16 && i == (size_t)m->i_head) &&
         !(m->emb16 && i == (size_t)m->i_wte);
}

/* head16 and emb16 for a frozen model about to drop its fp32 tensors (emb's buffer made) */
static int frozen_copies(colo_gpt_t *m, char *err, size_t errlen) {
  m->emb16 = m->llama && m->asz == 2 && m->tp == 1 && m->first && m->last && m->i_wpe < 0 &&
             m->wte_act != NULL;
  m->head16 = m->wte_act != NULL && (m->untied || m->emb16);
  if (m->emb16 && !m->untied)
    m->emb = m->wte_act;
  else if (m->emb16 &&
           !(m->emb = colo_pool_alloc(m->pool, (size_t)m->cfg.vocab_size * m->cfg.n_embd * m->asz,
                                      "parameters")))
    return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
  return 0;
}

int colo_gpt_freeze_matrices(colo_gpt_t *m, char *err, size_t errlen) {
  if (m->wfrozen)
    return 0;
  if (!m->frozen || m->hooks || !m->params || m->be->act_dtype == COLO_DTYPE_F32)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "only a frozen model (LoRA) with 16-bit activations keeps its matrices as "
                     "their compute copies alone");
  int nl = m->l_hi - m->l_lo;
  size_t wbytes = (m->wfp_off + (size_t)m->Cf * m->cfg.n_embd) * m->asz, keep = 0;
  if (m->recompute) { /* one shared copy: each block gets its own */
    if (!(m->wkeep = calloc((size_t)nl, sizeof *m->wkeep)))
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    for (int l = 0; l < nl; l++)
      if (!(m->wkeep[l] = colo_pool_alloc(m->pool, wbytes, "frozen matrices")))
        return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
  }
  for (int l = m->l_lo; l < m->l_hi; l++) /* the copies, from the fp32 matrices a last time */
    block_weights(m, l, &m->layers[m->recompute ? 0 : l - m->l_lo], 1);
  if (m->wte_act)
    head_weights(m, 1);
  if (frozen_copies(m, err, errlen) < 0)
    return COLO_ENOMEM;
  if (m->emb16 && m->emb != m->wte_act)
    m->be->to_act(m->emb, WTE(m), (size_t)m->cfg.vocab_size * m->cfg.n_embd);
  for (size_t i = 0; i < m->n_tensors; i++)
    keep += kept_fp32(m, i) ? m->table[i].numel : 0;
  float *fp = colo_pool_alloc(m->pool, (keep ? keep : 1) * sizeof(float), "parameters");
  if (!fp)
    return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
  size_t off = 0;
  for (size_t i = 0; i < m->n_tensors; i++) {
    if (!kept_fp32(m, i)) {
      m->pt[i] = NULL;
      continue;
    }
    m->be->copy(fp + off, m->pt[i], m->table[i].numel * sizeof(float));
    m->pt[i] = fp + off;
    off += m->table[i].numel;
  }
  colo_pool_free(m->pool, m->params);
  m->params = NULL;
  m->fparams = fp;
  m->wfrozen = 1;
  return 0;
}

/* a block's compute copy for the dequantized matrices, in place of each block's own */
static int alloc_qw(colo_gpt_t *m, char *err, size_t errlen) {
  size_t wbytes = (m->wfp_off + (size_t)m->Cf * m->cfg.n_embd) * m->asz;
  if (!(m->qw = colo_pool_alloc(m->pool, wbytes, "activations")))
    return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
  if (m->wdq) {
    size_t big = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
      big = block_matrix(m, i) && m->table[i].numel > big ? m->table[i].numel : big;
    if (!(m->qabs =
              colo_pool_alloc(m->pool, (colo_nf4_blocks(big) + 1) * sizeof(float), "activations")))
      return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(m->pool));
  }
  for (int l = 0; l < (m->recompute ? 1 : m->l_hi - m->l_lo); l++) {
    colo_pool_free(m->pool, m->layers[l].w);
    m->layers[l].w = NULL;
  }
  return 0;
}

int colo_gpt_quantize_nf4(colo_gpt_t *m, int pieces, int dq, char *err, size_t errlen) {
  if (m->wquant)
    return m->wdq == !!dq ? 0
                          : colo_fail(err, errlen, COLO_EINVAL,
                                      "the model is in NF4 %s double quantization already",
                                      m->wdq ? "with" : "without");
  if (!m->frozen || m->hooks || m->wfrozen || (pieces && m->params))
    return colo_fail(err, errlen, COLO_EINVAL,
                     pieces ? "only a frozen model (LoRA) made without parameters keeps its "
                              "matrices in NF4 in ZeRO-3's pieces"
                            : "only a frozen model (LoRA) whole on its rank keeps its matrices "
                              "in NF4");
  m->wdq = !!dq;
  if (pieces) { /* the storage's table: ZeRO keeps the values */
    if (!(m->stable = malloc(m->n_tensors * sizeof *m->stable)))
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    for (size_t i = 0, off = 0; i < m->n_tensors; i++) {
      m->stable[i] = m->table[i];
      if (block_matrix(m, i))
        m->stable[i].numel = colo_nf4_packed_floats(m->table[i].numel, m->wdq);
      m->stable[i].offset = off;
      off += m->stable[i].numel;
    }
    m->qpieces = m->wquant = 1;
    return alloc_qw(m, err, errlen);
  }
  colo_pool_t *pool = m->pool;
  size_t words = 0, keep = 0;
  if (!(m->qoff = calloc(m->n_tensors, sizeof *m->qoff)))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (frozen_copies(m, err, errlen) < 0)
    return COLO_ENOMEM;
  for (size_t i = 0; i < m->n_tensors; i++) {
    size_t n = m->table[i].numel;
    if (kept_fp32(m, i))
      keep += n;
    if (!block_matrix(m, i))
      continue;
    m->qoff[i] = words;
    words += colo_nf4_packed_floats(n, m->wdq);
  }
  if (!(m->qpack = colo_pool_alloc(pool, words * sizeof(float), "frozen matrices (NF4)")) ||
      !(m->fparams = colo_pool_alloc(pool, (keep ? keep : 1) * sizeof(float), "parameters")))
    return colo_fail(err, errlen, COLO_ENOMEM, "%s", colo_pool_error(pool));
  if (alloc_qw(m, err, errlen) < 0)
    return COLO_ENOMEM;
  float *old = m->params;
  float **was = NULL;
  if (old && !(was = malloc(m->n_tensors * sizeof *was)))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  for (size_t i = 0, off = 0; i < m->n_tensors; i++) {
    int fp = kept_fp32(m, i);
    if (was)
      was[i] = m->pt[i];
    m->pt[i] = fp ? m->fparams + off : NULL;
    off += fp ? m->table[i].numel : 0;
  }
  m->params = NULL;
  m->wquant = 1;
  int rc = 0;
  if (old) { /* values already there: through the host, a tensor at a time */
    size_t big = 0;
    for (size_t i = 0; i < m->n_tensors; i++)
      big = m->table[i].numel > big ? m->table[i].numel : big;
    float *h = malloc((big ? big : 1) * sizeof *h);
    if (!h)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < m->n_tensors; i++) {
      m->be->to_host(h, was[i], m->table[i].numel * sizeof *h);
      rc = colo_gpt_put(m, m->table[i].offset, h, m->table[i].numel, err, errlen);
    }
    free(h);
    colo_pool_free(pool, old);
  }
  free(was);
  return rc;
}

int colo_gpt_nf4_round(const colo_gpt_t *m, float *params, int dq, char *err, size_t errlen) {
  size_t big = 0;
  for (size_t i = 0; i < m->n_tensors; i++)
    big = block_matrix(m, i) && m->table[i].numel > big ? m->table[i].numel : big;
  float *pk = malloc(colo_nf4_packed_floats(big, dq) * sizeof *pk);
  if (!pk)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int rc = 0;
  for (size_t i = 0; i < m->n_tensors && rc == 0; i++) {
    const colo_param_t *p = &m->table[i];
    if (!block_matrix(m, i))
      continue;
    int q = colo_nf4_pack(params + p->offset, p->shape[0], p->shape[1], dq, pk);
    if (q == 0)
      q = colo_nf4_unpack(pk, p->shape[0], p->shape[1], dq, params + p->offset);
    if (q == -1)
      rc = colo_fail(err, errlen, COLO_EINVAL, "%s holds a value that is not finite", p->name);
    else if (q < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  free(pk);
  return rc;
}

size_t colo_gpt_block_matrix_numel(const colo_gpt_t *m) {
  size_t n = 0;
  for (size_t i = 0; i < m->n_tensors; i++)
    n += block_matrix(m, i) ? m->table[i].numel : 0;
  return n;
}

size_t colo_gpt_nf4_bytes(const colo_gpt_t *m, int dq) {
  size_t n = 0;
  for (size_t i = 0; i < m->n_tensors; i++)
    n += block_matrix(m, i) ? colo_nf4_bytes(m->table[i].numel, dq) : 0;
  return n;
}

int colo_gpt_nf4(const colo_gpt_t *m) {
  return m->wquant;
}

const colo_param_t *colo_gpt_storage_table(const colo_gpt_t *m, size_t *n) {
  *n = m->n_tensors;
  return m->stable ? m->stable : m->table;
}

/* the tensor holding parameter offset off: the last starting at or below it */
static size_t tensor_at(const colo_gpt_t *m, size_t off) {
  size_t lo = 0, hi = m->n_tensors;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (m->table[mid].offset <= off)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

size_t colo_gpt_storage_at(const colo_gpt_t *m, size_t off, size_t *tensor, int *packed) {
  size_t i = tensor_at(m, off);
  *tensor = i;
  *packed = m->stable && block_matrix(m, i);
  return m->stable ? m->stable[i].offset + (off - m->table[i].offset) : off;
}

int colo_gpt_pack_nf4(const colo_gpt_t *m, size_t i, const float *v, float *packed) {
  const colo_param_t *p = &m->table[i];
  return colo_nf4_pack(v, p->shape[0], p->shape[1], m->wdq, packed);
}

int colo_gpt_put(colo_gpt_t *m, size_t off, const float *v, size_t n, char *err, size_t errlen) {
  while (n > 0) {
    size_t lo = tensor_at(m, off);
    const colo_param_t *p = &m->table[lo];
    size_t rel = off - p->offset, take = p->numel - rel < n ? p->numel - rel : n;
    if (off < p->offset || rel >= p->numel)
      return colo_fail(err, errlen, COLO_EINVAL, "parameter %zu is outside the model", off);
    if (m->wquant && block_matrix(m, lo)) {
      if (rel || take != p->numel)
        return colo_fail(err, errlen, COLO_EINVAL, "%s comes in parts: NF4 takes it whole",
                         p->name);
      size_t words = colo_nf4_packed_floats(p->numel, m->wdq);
      float *pk = malloc(words * sizeof *pk);
      int q = pk ? colo_gpt_pack_nf4(m, lo, v, pk) : -2;
      if (q < 0) {
        free(pk);
        return q == -1 ? colo_fail(err, errlen, COLO_EINVAL, "%s holds a value that is not finite",
                                   p->name)
                       : colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      }
      m->be->from_host(m->qpack + m->qoff[lo], pk, words * sizeof *pk);
      free(pk);
    } else if (!kept_fp32(m, lo)) { /* a 16-bit copy alone: rounded on the host, once */
      void *dst = m->head16 && lo == (size_t)m->i_head ? m->wte_act : m->emb;
      if (rel || take != p->numel)
        return colo_fail(err, errlen, COLO_EINVAL, "%s comes in parts: its copy takes it whole",
                         p->name);
      void *h = malloc(p->numel * m->asz);
      if (!h)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      colo_dtype_from_float(h, v, p->numel, m->be->act_dtype);
      m->be->from_host(dst, h, p->numel * m->asz);
      free(h);
    } else if (m->pt[lo]) {
      m->be->from_host(m->pt[lo] + rel, v, take * sizeof(float));
    } else {
      return colo_fail(err, errlen, COLO_EINVAL, "%s has no place in this model's memory", p->name);
    }
    off += take, v += take, n -= take;
  }
  return 0;
}

struct colo_lora_s *colo_gpt_lora(const colo_gpt_t *m) {
  return m->lora;
}

/* The model's own gradient buffer, made (zeroed) on first need: none for a frozen model or
 * under hooks. A pool that cannot hold it stops the pass (COLO_ENOMEM in hook_error). */
static int ensure_grads(colo_gpt_t *m) {
  if (m->grads || m->frozen || m->hooks)
    return 0;
  if (!(m->grads = colo_pool_alloc(m->pool, m->n_params * sizeof(float), "gradients")))
    return m->hook_error = COLO_ENOMEM;
  m->be->zero(m->grads, m->n_params * sizeof(float));
  for (size_t i = 0; i < m->n_tensors; i++)
    m->gt[i] = m->grads + m->table[i].offset;
  return 0;
}

void colo_gpt_zero_grad(colo_gpt_t *m) {
  m->hook_error = 0;
  if (m->grads)
    m->be->zero(m->grads, m->n_params * sizeof(float));
  else
    ensure_grads(m);
}

void colo_gpt_set_hooks(colo_gpt_t *m, const colo_gpt_hooks_t *hooks, void *ctx) {
  m->hooks = hooks;
  m->hook_ctx = ctx;
  colo_pool_free(m->pool, m->grads);
  m->grads = NULL;
  for (size_t i = 0; i < m->n_tensors; i++)
    m->gt[i] = NULL;
  if (hooks->params_fetch) {
    colo_pool_free(m->pool, m->params);
    m->params = NULL;
    for (size_t i = 0; i < m->n_tensors; i++)
      m->pt[i] = NULL;
  }
}

/* ZeRO-3: values of the tensors [first, first + n) are there between fetch and release */
static int fetch(colo_gpt_t *m, size_t first, size_t n) {
  if (!m->hooks || !m->hooks->params_fetch || m->hook_error)
    return m->hook_error;
  for (size_t i = first; i < first + n; i++)
    if (!(m->pt[i] = (float *)m->hooks->params_fetch(m->hook_ctx, i)))
      return m->hook_error = COLO_EIO;
  return 0;
}

static void release(colo_gpt_t *m, size_t first, size_t n) {
  if (!m->hooks || !m->hooks->params_release)
    return;
  for (size_t i = first; i < first + n; i++)
    if (m->pt[i]) {
      m->hooks->params_release(m->hook_ctx, i);
      m->pt[i] = NULL;
    }
}

int colo_gpt_hook_error(const colo_gpt_t *m) {
  return m->hook_error;
}

size_t colo_gpt_activation_bytes(const colo_gpt_t *m) {
  return m->act_bytes;
}

/* the hooks around the tensors [first, first + n) */
static int grads_begin(colo_gpt_t *m, size_t first, size_t n) {
  if (!m->hooks || !m->hooks->grads_begin || m->hook_error)
    return m->hook_error;
  for (size_t i = first; i < first + n; i++)
    if (!(m->gt[i] = m->hooks->grads_begin(m->hook_ctx, i)))
      return m->hook_error = COLO_EIO;
  return 0;
}

static int grads_ready(colo_gpt_t *m, size_t first, size_t n) {
  if (!m->hooks || !m->hooks->grads_ready || m->hook_error)
    return m->hook_error;
  for (size_t i = first; i < first + n; i++) {
    int rc = m->hooks->grads_ready(m->hook_ctx, i);
    m->gt[i] = NULL;
    if (rc < 0)
      return m->hook_error = rc;
  }
  return 0;
}

/* A LayerNorm backward on this rank's rows. With sequence parallelism its weight and bias
 * gradients come from those rows only: they are summed over the group in a scratch buffer first,
 * so that gradients accumulated from earlier micro-batches are not summed again. */
static void ln_bwd_rows(colo_gpt_t *m, void *dinp, float *dw, float *db, const void *dout,
                        const void *inp, const float *w, const float *mean, const float *rstd,
                        int rows, int C) {
  if (!m->sp || !dw) { /* (a frozen model's: no weight gradients to sum) */
    norm_bwd(m, dinp, dw, db, dout, inp, w, mean, rstd, rows, C);
    return;
  }
  size_t n = db ? 2 * (size_t)C : (size_t)C; /* RMSNorm has no bias */
  m->be->zero(m->lnscratch, n * sizeof(float));
  norm_bwd(m, dinp, m->lnscratch, db ? m->lnscratch + C : NULL, dout, inp, w, mean, rstd, rows, C);
  if (tp_sum(m, m->lnscratch, n) < 0)
    return;
  m->be->accumulate(dw, m->lnscratch, (size_t)C);
  if (db)
    m->be->accumulate(db, m->lnscratch + C, (size_t)C);
}

/* The residual gradient as the products' backward needs it: all rows (gathered under sequence
 * parallelism, where dres holds only this rank's). */
static const void *full_rows(colo_gpt_t *m, size_t off, size_t rowf) {
  if (!m->sp)
    return m->dres;
  m->be->copy(at(m, m->dfull, off), at(m, m->dres, off), rowf * m->asz);
  rows_gather(m, m->dfull, rowf);
  return m->dfull;
}

/* the sum of a column-parallel product's input gradient: whole (tp) or by rows (sp) */
static int reduce_dln(colo_gpt_t *m, size_t rowf, size_t NC) {
  return m->sp ? rows_reduce_scatter(m, m->dln, rowf) : act_sum(m, m->dln, NC);
}

void colo_gpt_backward(colo_gpt_t *m, float loss_scale) {
  colo_gpt_backward_stage(m, loss_scale, NULL);
}

void colo_gpt_backward_weighted(colo_gpt_t *m, const float *w) {
  if (m->logits_grad) { /* the caller's error: a fused forward's gradient is the mean's */
    fprintf(stderr, "colo_gpt_backward_weighted: after colo_gpt_forward_train\n");
    abort();
  }
  size_t N = (size_t)m->B * m->T, T = (size_t)m->T;
  if (m->cp > 1) { /* this rank's tokens' weights, of the whole rows' */
    for (size_t b = 0; b < (size_t)m->B; b++)
      memcpy(m->cp_host + b * T, w + (b * (size_t)m->cp + (size_t)m->cpr) * T, T * sizeof(float));
    w = m->cp_host;
  }
  m->be->from_host(m->losses, w, N * sizeof(float));
  m->weighted = 1;
  colo_gpt_backward_stage(m, 1.0f, NULL);
}

void colo_gpt_read_losses(colo_gpt_t *m, float *dst) {
  size_t N = (size_t)m->B * m->T, T = (size_t)m->T, cp = (size_t)m->cp;
  if (cp == 1) {
    memcpy(dst, m->host, N * sizeof(float));
    return;
  }
  /* every piece's [B][T/cp], gathered [cp][B][T/cp], laid out again as the rows [B][T] */
  m->be->from_host(m->cp_loss + (size_t)m->cpr * N, m->host, N * sizeof(float));
  if (!m->hook_error) {
    int rc = m->cp_comm->ops->all_gather(m->cp_comm, m->cp_loss, N);
    if (rc < 0)
      m->hook_error = rc;
  }
  if (m->hook_error) {
    memset(dst, 0, cp * N * sizeof(float));
    return;
  }
  m->be->to_host(m->cp_host, m->cp_loss, cp * N * sizeof(float));
  for (size_t c = 0; c < cp; c++)
    for (size_t b = 0; b < (size_t)m->B; b++)
      memcpy(dst + (b * cp + c) * T, m->cp_host + c * N + b * T, T * sizeof(float));
}

struct colo_lora_s *colo_gpt_swap_lora(colo_gpt_t *m, struct colo_lora_s *l) {
  struct colo_lora_s *was = m->lora;
  m->lora = l;
  return was;
}

void colo_gpt_backward_stage(colo_gpt_t *m, float loss_scale, const float *d_out) {
  const colo_backend_t *be = m->be;
  int B = m->B, T = m->T, C = m->cfg.n_embd, L = m->cfg.n_layer, N = B * T;
  int Cq = m->Cq, Cf = m->Cf, Vl = m->Vl;
  size_t NC = (size_t)N * C;
  int Nl = m->sp ? N / m->tp : N;
  size_t r0 = m->sp ? (size_t)m->tpr * Nl : 0, off = r0 * C, rowf = (size_t)Nl * C;
  if (ensure_grads(m) < 0)
    return;
  if (!m->last) { /* the gradient of this stage's output, from the next stage */
    be->zero(m->dres, NC * m->asz);
    boundary_in(m, at(m, m->dres, off), d_out, rowf);
    goto blocks;
  }
  /* loss -> logits (in place) -> final LayerNorm; weighted: each row's gradient times its weight
   * (colo_gpt_backward_weighted put them where the losses were) */
  /* the mean is over the whole rows: under context parallelism cp times this rank's tokens */
  float dl = m->weighted ? loss_scale : loss_scale / (float)((size_t)N * m->cp);
  if (m->tp_comm)
    be->vocab_ce_bwd(m->logits, m->logits, m->gmax, m->gsum, m->targets, m->v0, dl, N, Vl);
  else if (!m->logits_grad)
    be->crossentropy_bwd(m->logits, m->logits, m->targets, dl, N, Vl);
  else if (loss_scale != m->fuse_scale) { /* the caller's error: the gradient is for another */
    fprintf(stderr,
            "colo_gpt_backward: loss scale %g, but the forward computed the loss's "
            "gradient for %g\n",
            loss_scale, m->fuse_scale);
    abort();
  }
  m->logits_grad = 0;
  if (m->weighted)
    be->scale_rows(m->logits, m->losses, N, Vl);
  m->weighted = 0;
  /* a tied embedding's gradients stay open until the encoder's backward, at the very end (an
   * untied head's close with the final norm's) */
  size_t ih = (size_t)m->i_head, il = (size_t)m->i_lnf;
  size_t nt = (size_t)m->n_lnf;
  if (grads_begin(m, ih, 1) < 0 ||
      (m->first && !m->untied && m->i_wpe >= 0 && grads_begin(m, (size_t)m->i_wpe, 1) < 0) ||
      grads_begin(m, il, nt) < 0 || fetch(m, ih, 1) < 0 || fetch(m, il, nt) < 0)
    return;
  /* a column-parallel product's input gradient is a partial sum: the group adds them */
  be->lmhead_bwd(m->dln, DHEAD(m), m->logits, m->lnf, head_weights(m, 0), N, C, Vl);
  if (reduce_dln(m, rowf, NC) < 0)
    return;
  be->zero(m->dres, NC * m->asz);
  ln_bwd_rows(m, at(m, m->dres, off), DLNFW(m), DLNFB(m), at(m, m->dln, off), m->resid[L], LNFW(m),
              m->lnf_mean + r0, m->lnf_rstd + r0, Nl, C);
  release(m, il, nt);
  release(m, ih, 1);
  if (grads_ready(m, il, nt) < 0 || (m->untied && grads_ready(m, ih, 1) < 0))
    return;
  /* dres is the gradient of the residual stream, carried down through the blocks; it is the
   * same on every rank of a tensor-parallel group (its own rows of it under sequence
   * parallelism), and so are the replicated parameters' gradients */
blocks:
  for (int l = m->l_hi - 1; l >= m->l_lo; l--) {
    layer_acts_t *a = &m->layers[m->recompute ? 0 : l - m->l_lo];
    size_t first = (size_t)m->i_l0 + (size_t)(l - m->l_lo) * m->per_layer;
    size_t per = (size_t)m->per_layer;
    if (fetch(m, first, per) < 0)
      return;
    /* recomputing: the same forward again (bit-identical activations, and the compute copies) */
    block_w_t w = m->recompute ? block_forward(m, l, a, m->resid[l], m->dtmp)
                               : block_weights(m, l, a, m->wquant); /* NF4: dequantized again */
    if (grads_begin(m, first, per) < 0)
      return;
    /* MLP: out = res2 + fcproj(gelu(fc(ln2(res2)))) */
    const void *dout = full_rows(m, off, rowf);
    /* GELU's (SwiGLU's) output: kept by the forward, or made again by the recomputed one */
    void *act = a->act ? a->act : m->gelu;
    /* the products', GELU's and attention's input gradients are written, not added to
     * (backend.h): no buffer needs zeroing first */
    colo_lora_t *lo = m->lora;
    /* under DoRA each adapted product's gradient goes through its rescaling first (lora.h) */
    const void *dz = colo_lora_dora_bwd(lo, l, COLO_LORA_FCPROJ, dout, N);
    if (m->llama) {
      be->matmul_bwd(m->dglu, G(m, l, P_FCPROJW), NULL, dz, act, w.fcproj, N, Cf, C);
      if (colo_lora_has(lo, COLO_LORA_FCPROJ))
        colo_lora_bwd(lo, l, COLO_LORA_FCPROJ, m->dglu, dout, act, w.fcproj, N);
      be->swiglu_bwd(m->dfch, a->fch, m->dglu, N, Cf);
    } else if (colo_lora_has(lo, COLO_LORA_FCPROJ)) { /* the adapter's part before GELU's */
      void *dg = colo_lora_gelu_scratch(lo);
      be->matmul_bwd(dg, G(m, l, P_FCPROJW), G(m, l, P_FCPROJB), dz, act, w.fcproj, N, Cf, C);
      colo_lora_bwd(lo, l, COLO_LORA_FCPROJ, dg, dout, act, w.fcproj, N);
      be->gelu_bwd(m->dfch, a->fch, dg, (size_t)N * Cf);
    } else {
      be->matmul_gelu_bwd(m->dfch, G(m, l, P_FCPROJW), G(m, l, P_FCPROJB), dout, act, w.fcproj,
                          a->fch, N, Cf, C);
    }
    const void *x2 = ln_full(m, a->ln2, off, rowf);
    dz = colo_lora_dora_bwd(lo, l, COLO_LORA_FC, m->dfch, N);
    be->matmul_bwd(m->dln, G(m, l, P_FCW), G(m, l, P_FCB), dz, x2, w.fc, N, C,
                   m->llama ? 2 * Cf : Cf);
    if (colo_lora_has(lo, COLO_LORA_FC))
      colo_lora_bwd(lo, l, COLO_LORA_FC, m->dln, m->dfch, x2, w.fc, N);
    if (reduce_dln(m, rowf, NC) < 0)
      return;
    ln_bwd_rows(m, at(m, m->dres, off), G(m, l, P_LN2W), G(m, l, P_LN2B), at(m, m->dln, off),
                a->res2, P(m, l, P_LN2W), a->ln2_mean, a->ln2_rstd, Nl, C);
    /* attention: res2 = in + attproj(attn(qkv(ln1(in)))) */
    dout = full_rows(m, off, rowf);
    dz = colo_lora_dora_bwd(lo, l, COLO_LORA_ATTPROJ, dout, N);
    be->matmul_bwd(m->datty, G(m, l, P_ATTPROJW), G(m, l, P_ATTPROJB), dz, a->atty, w.attproj, N,
                   Cq, C);
    if (colo_lora_has(lo, COLO_LORA_ATTPROJ))
      colo_lora_bwd(lo, l, COLO_LORA_ATTPROJ, m->datty, dout, a->atty, w.attproj, N);
    int Tf = T * m->cp, Cc = Cq / m->cp, NHc = m->NHl / m->cp; /* as the forward's */
    if (m->cp > 1) { /* over the whole rows, a cp-th of the heads */
      cp_exchange(m, m->datty, m->datty, &Cq, 1, 1);
      be->attention_bwd(m->dqkv, m->datty, a->qkv, a->attc, a->att_lse, B, Tf, Cc, NHc, att_pos(m));
    } else {
      be->attention_bwd(m->dqkv, m->datty, a->qkv, a->atty, a->att_lse, B, T, Cq, m->NHl,
                        att_pos(m));
    }
    if (m->cp_kv) { /* rotated back and summed where attention ran, then moved back */
      const int wd[3] = {Cq, m->KVw, m->KVw};
      if (m->llama)
        be->rope(m->dqkv, B, Tf, Cc, NHc, 0, m->inv_freq, m->rope_mag, -1, m->doc_pos);
      be->kv_reduce(m->qsmall, m->dqkv, B * Tf, Cc, NHc, m->NKVl / m->cp);
      cp_exchange(m, m->qsmall, m->qsmall, wd, 3, 0);
    } else {
      const int wd[3] = {Cq, Cq, Cq};
      if (m->cp > 1)
        cp_exchange(m, m->dqkv, m->dqkv, wd, 3, 0);
      if (m->llama) /* through the rotation: its transpose */
        be->rope(m->dqkv, B, T, Cq, m->NHl, 0, m->inv_freq, m->rope_mag, -1, token_pos(m));
      if (m->gqa) /* the repeated heads' gradients summed into their key and value heads */
        be->kv_reduce(m->qsmall, m->dqkv, N, Cq, m->NHl, m->NKVl);
    }
    qk_norm_bwd(m, l, a, m->gqa ? m->qsmall : m->dqkv, N);
    const void *x1 = ln_full(m, a->ln1, off, rowf);
    dz = colo_lora_dora_bwd(lo, l, COLO_LORA_QKV, m->gqa ? m->qsmall : m->dqkv, N);
    be->matmul_bwd(m->dln, G(m, l, P_QKVW), G(m, l, P_QKVB), dz, x1, w.qkv, N, C, m->Cqkv);
    if (colo_lora_has(lo, COLO_LORA_QKV))
      colo_lora_bwd(lo, l, COLO_LORA_QKV, m->dln, m->gqa ? m->qsmall : m->dqkv, x1, w.qkv, N);
    if (reduce_dln(m, rowf, NC) < 0)
      return;
    ln_bwd_rows(m, at(m, m->dres, off), G(m, l, P_LN1W), G(m, l, P_LN1B), at(m, m->dln, off),
                m->resid[l], P(m, l, P_LN1W), a->ln1_mean, a->ln1_rstd, Nl, C);
    release(m, first, per);
    if (m->hook_error || grads_ready(m, first, per) < 0)
      return;
  }
  if (m->frozen) /* nothing below the blocks learns */
    return;
  if (!m->first) { /* dres is the gradient for the previous stage */
    if (m->last && !m->untied)
      grads_ready(m, (size_t)m->i_wte, 1); /* the head's tied copy */
    return;
  }
  if ((!m->last || m->untied) && (grads_begin(m, (size_t)m->i_wte, 1) < 0 ||
                                  (m->i_wpe >= 0 && grads_begin(m, (size_t)m->i_wpe, 1) < 0)))
    return;
  const void *dout = full_rows(m, off, rowf);
  be->encoder_bwd(DWTE(m), DWPE(m), dout, m->inputs, B, T, C, m->v0, m->v0 + Vl, token_pos(m));
  grads_ready(m, (size_t)m->i_wte, 1);
  if (m->i_wpe >= 0)
    grads_ready(m, (size_t)m->i_wpe, 1);
  (void)L;
}

void colo_gpt_set_noise(colo_gpt_t *m, float mag, uint64_t key, uint64_t row0) {
  m->noise_mag = mag;
  m->noise_key = key;
  m->noise_row0 = row0;
}
