/* LoRA adapters (Hu et al. 2021, as HuggingFace PEFT computes them): a product out = x·W (+ b)
 * of a frozen model gains a low-rank update, out += (alpha/r) · (x·Aᵀ)·Bᵀ, with A [r][in] and
 * B [out][r] the only trained tensors. A starts uniform in ±1/sqrt(in) (PEFT's kaiming-uniform
 * with a = √5), B at zero, so the adapted model starts as the base.
 *
 * The adapters own their parameters and gradients (one flat buffer each, in the backend's memory)
 * and their scratch; the model calls colo_lora_fwd and colo_lora_bwd around the products they
 * adapt (colo_gpt_set_lora), computes no gradient of its own tensors, and the training loop's
 * optimizer holds moments for the adapters alone. The update runs as two products the backend
 * already has (lmhead_fwd: x·Aᵀ, then u·(scale·B)ᵀ), never as a merged matrix; merging is for
 * a model that leaves training (colo_lora_merge). One set per model; a pipeline stage's model has
 * the adapters of its own layers alone (colo_lora_span), and a tensor-parallel rank's its part of
 * them (colo_lora_full_index), named and initialised as the whole model's. With DoRA each adapted
 * product also has a magnitude per output, and the model rescales the product's columns with the
 * colo_lora_dora_* calls. Not thread-safe. */
#ifndef COLO_LORA_H
#define COLO_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "../../../common/loratarget.h"
#include "../core/pool.h"
#include "gpt.h"

typedef struct {
  int rank;         /* r ≥ 1 */
  float alpha;      /* the update is scaled by alpha / r */
  unsigned targets; /* COLO_LORA_* bits, at least one */
  /* COLO_LORA_QUANT_NF4: the frozen model's block matrices are kept in NF4 (QLoRA,
   * colo_gpt_quantize_nf4), and the adapters learn against their dequantized values; 0: as
   * loaded */
  int quant;
  /* LoRA dropout (PEFT's lora_dropout) in [0, 1): in training, each adapter's input x is
   * dropped element-wise with this probability and the rest scaled by 1/(1 − dropout) before
   * x·Aᵀ (the model's own product sees x whole); 0: none */
  float dropout;
  /* rank-stabilized LoRA (Kalajdzievski 2023; PEFT's use_rslora): the update is scaled by
   * alpha/sqrt(rank), not alpha/rank */
  int rslora;
  /* LoRA+ (Hayou et al. 2024): the B matrices learn at the optimizer's rate times this ratio, the
   * A matrices at the rate (the training loop's AdamW reads it); 0 or 1: one rate */
  float plus_ratio;
  /* DoRA (Liu et al. 2024; PEFT's use_dora): each adapted product's output columns are rescaled
   * to a learned magnitude, out = m / ‖W + s·(BA)ᵀ‖ · (x·W + s·(x·Aᵀ)·Bᵀ) + b, the norm over each
   * column's weights taken as a constant in the backward (as PEFT does); m starts at W's column
   * norms (set at the first forward: B is zero then). Under dropout, PEFT's form:
   * x·W + b + (g − 1)·(xd·W) + g·s·(xd·Aᵀ)·Bᵀ, xd = dropout(x), g = m / ‖W + s·(BA)ᵀ‖. */
  int dora;
  /* with NF4: double quantization (QLoRA's; bitsandbytes' bnb_4bit_use_double_quant), each
   * matrix's absmax values themselves quantized to bytes (core/nf4.h) */
  int double_quant;
} colo_lora_config_t;
#define COLO_LORA_QUANT_NF4 1

typedef struct colo_lora_s colo_lora_t;

/* Adapters for every layer of model m (a pipeline stage's: its layers; a tensor-parallel rank's:
 * its part) and each target of cfg, with scratch for the model's largest batch, from pool (NULL
 * host memory: model's backend). COLO_EINVAL (reason in err) for a bad config; COLO_ENOMEM when
 * the pool is full. The adapters are zero until colo_lora_init or a load. */
int colo_lora_create(colo_gpt_t *m, const colo_lora_config_t *cfg, colo_pool_t *pool,
                     colo_lora_t **out, char *err, size_t errlen);
/* The table of cfg's adapters for a model of shape mc, and a host buffer of that layout
 * (colo_lora_params) but nothing to train or merge with: for reading and writing them. */
int colo_lora_create_table(const colo_gpt_config_t *mc, const colo_lora_config_t *cfg,
                           colo_lora_t **out, char *err, size_t errlen);
void colo_lora_destroy(colo_lora_t *l);
const colo_lora_config_t *colo_lora_config(const colo_lora_t *l);
/* the update's scale: alpha/rank, or alpha/sqrt(rank) (rslora) */
float colo_lora_scale(const colo_lora_t *l);

/* A uniform in ±1/sqrt(in) (from (seed, the tensor's index in the whole model's table)), B
 * zero. */
void colo_lora_init(colo_lora_t *l, uint64_t seed);

/* The table (names "transformer.h.<l>.<module>.lora_A.weight" and "…lora_B.weight", A before B,
 * and with DoRA "…lora_magnitude_vector" [out][1] after them, layer by layer), and the flat
 * parameters and gradients it indexes, in the backend's memory. */
const colo_param_t *colo_lora_table(const colo_lora_t *l, size_t *n);
size_t colo_lora_numel(const colo_lora_t *l);
/* Where these adapters sit in the whole model's (a pipeline stage's are a contiguous run of the
 * whole table's layout, layer by layer): the offset of their first float there, and how many
 * floats the whole model's adapters have (colo_lora_numel for the whole model). */
void colo_lora_span(const colo_lora_t *l, size_t *offset, size_t *whole);
/* Under tensor parallelism each rank holds its part of a product's adapters: a column-parallel
 * product's (c_attn, c_fc) B by rows as the model splits W's columns (q, k and v, or gate and up,
 * each split), a row-parallel product's (the c_proj) A by columns as W's rows; the other matrix
 * whole on every rank, its gradient a partial sum that the group adds (table entries whose split
 * is COLO_SPLIT_NONE while colo_lora_tp_size > 1). The table's full_shape, full_numel and
 * full_offset are the whole tensor's, full_offset in the whole model's layout (colo_lora_span).
 * colo_lora_full_index: where element li of rank t's part of table entry i sits in the whole
 * tensor (each row of a part, shape[1] floats, is a run of the whole); colo_lora_take_part: this
 * rank's part of entry i from the whole tensor's values. */
size_t colo_lora_full_index(const colo_lora_t *l, size_t i, int t, size_t li);
void colo_lora_take_part(const colo_lora_t *l, size_t i, const float *whole, float *part);
int colo_lora_tp_size(const colo_lora_t *l);
/* The layer and product (its COLO_LORA_* bit's index) of table entry i. */
void colo_lora_site(const colo_lora_t *l, size_t i, int *layer, int *target);
/* What table entry i is: COLO_LORA_A, COLO_LORA_B or COLO_LORA_MAG (DoRA's magnitude); each
 * adapted product's entries are consecutive, in that order. */
enum { COLO_LORA_A = 0, COLO_LORA_B = 1, COLO_LORA_MAG = 2 };
int colo_lora_kind(const colo_lora_t *l, size_t i);
float *colo_lora_params(colo_lora_t *l);
float *colo_lora_grads(colo_lora_t *l);
void colo_lora_zero_grad(colo_lora_t *l);

/* cfg's dropout as the decimal it was written as (0.05, not 0.05000000074505806), for JSON */
double colo_lora_dropout_decimal(const colo_lora_config_t *cfg);

/* Dropout (cfg.dropout > 0) for the training forwards and backwards that follow, on: its masks
 * keyed by key (a training step's) and numbered by row from row0 (this micro-batch's first row
 * in the step's batch over every rank: a row has its mask whichever rank runs it), and by layer,
 * product and column (core/rng.h's colo_dropout_keep); off: none (evaluation, sampling). A
 * backward, or a recomputed forward, has the forward's masks. */
void colo_lora_set_dropout(colo_lora_t *l, int on, uint64_t key, uint64_t row0);
/* Context parallelism (the model sets it at each forward): the products' rows are runs of
 * `piece` tokens of sequences of `seq`, this rank's from token `off` of each, and dropout numbers
 * each row as its token's place in the whole batch. piece 0: rows in order (the default). */
void colo_lora_set_rows(colo_lora_t *l, int piece, int seq, int off);

/* Whether layer's product `target` (a COLO_LORA_* bit) has an adapter. */
int colo_lora_has(const colo_lora_t *l, unsigned target);
/* For the model: out[N][out] += scale · (inp[N][in]·Aᵀ)·Bᵀ, activations in act_dtype. */
void colo_lora_fwd(colo_lora_t *l, int layer, unsigned target, void *out, const void *inp, int N);
/* Its backward for the gradient dout of out: the adapters' gradients accumulate, and
 * dinp[N][in] += the update's input gradient. inp is the forward's; w the product's weights (read
 * by DoRA under dropout alone). Under DoRA, colo_lora_dora_bwd of the same dout comes first. */
void colo_lora_bwd(colo_lora_t *l, int layer, unsigned target, void *dinp, const void *dout,
                   const void *inp, const void *w, int N);
/* DoRA, around a product and its adapter's update (colo_lora_fwd), for the model:
 * colo_lora_dora_norm: the squared norms of the columns of w + s·(BA)ᵀ, w[in][out] the
 * product's weights as it reads them (act_dtype), into a buffer of *n floats in the backend's
 * memory that it returns. A row-parallel product's (its inputs split over a tensor-parallel
 * group) are this rank's rows' part: the model sums them over the group before
 * colo_lora_dora_fwd: out[N][out], the product and its update without the bias, becomes
 * g · out + b (b may be NULL; g = m / norm), and the output before it is kept for the backward;
 * under dropout (colo_lora_set_dropout) PEFT's form (above): w, the product's weights, makes
 * xd·W. colo_lora_dora_bwd: for out's gradient dout, the magnitude's gradient accumulates, and
 * the gradient for the product's own backward is returned (g · dout, scratch valid until the
 * next colo_lora_* call; dout itself under dropout, or for a product without DoRA);
 * colo_lora_bwd of the same dout then does the update's (and under dropout xd·W's). The
 * backward must follow the layer's forward (or its recomputation) as the model runs them: the
 * kept output is one per layer, or one in all when the model recomputes. */
int colo_lora_dora(const colo_lora_t *l, unsigned target);
float *colo_lora_dora_norm(colo_lora_t *l, int layer, unsigned target, const void *w, int *n);
void colo_lora_dora_fwd(colo_lora_t *l, int layer, unsigned target, void *out, const float *b,
                        const void *w, int N);
const void *colo_lora_dora_bwd(colo_lora_t *l, int layer, unsigned target, const void *dout, int N);

/* Scratch [N][H] in act_dtype for the model's GPT-2 MLP backward, where the fused GELU backward
 * must be split to add the adapter's part between its two halves (NULL unless mlp.c_proj is a
 * target of a GPT-2 model). */
void *colo_lora_gelu_scratch(colo_lora_t *l);

/* The matrices an adapted product is in the model's exports: HuggingFace's (hf: the module's
 * name, as PEFT names it) and llama.cpp's (gguf: the tensor's name without "blk.N." and
 * ".weight"), each with its first row of the product's output (B's rows) and how many; rotated:
 * queries or keys, whose rows llama.cpp's "llama" reorders. GPT-2's product is one matrix; a
 * llama model's c_attn is q, k and v, its c_fc gate and up. Returns how many (1 to 3). */
typedef struct {
  const char *hf, *gguf;
  int row0, rows, rotated;
} colo_lora_part_t;
int colo_lora_parts(const colo_gpt_config_t *c, int target, colo_lora_part_t p[3]);

/* Folds the adapters into a host copy of the base model's parameters laid out as the table of the
 * model they were created for (colo_lora_create's, not colo_lora_create_table's):
 * W[in][out] += scale · Σ_k A[k][in] · B[out][k], for each adapted matrix, and with DoRA each
 * column of the sum then scaled by m / its norm. adapters: host floats in the table's layout. */
void colo_lora_merge(const colo_lora_t *l, const float *adapters, float *params);

#endif
