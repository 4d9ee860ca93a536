/* The operation table: every computation the model and optimizer do, behind function pointers,
 * so a CUDA table can stand beside the CPU one. Model code never calls BLAS or CUDA directly.
 *
 * Shapes: N = B·T rows. Weights use HuggingFace GPT-2's Conv1D layout, w[C_in][C_out], so
 * checkpoints load into HF unchanged. A *_bwd ACCUMULATES into the parameter gradients (dw, db,
 * dwte, dwpe) and layernorm_bwd into dinp (the residual stream's gradient, summed over the
 * branches); matmul_bwd, matmul_gelu_bwd, lmhead_bwd, gelu_bwd and attention_bwd WRITE their
 * input gradient (dinp, dqkv), which spares a zeroing pass over each. Any output pointer of a
 * *_bwd may be NULL to skip it.
 * Token, target and position arrays (int) live in the backend's memory like the rest.
 *
 * Types: a `void *` argument is an activation, or an activation's gradient, stored in the table's
 * act_dtype (fp32, bf16 or fp16; core/dtype.h); so are the matrix weights the products read (the
 * model's compute copies, made with to_act). A `float *` is fp32 whatever act_dtype is:
 * parameters, their gradients, optimizer state, LayerNorm statistics, losses. Arithmetic is fp32
 * throughout; a lower-precision value is rounded once, when it is stored.
 */
#ifndef COLO_BACKEND_H
#define COLO_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../core/dtype.h"
#include "../core/rng.h"
#include "../core/pool.h"

typedef struct colo_backend_s {
  const char *name;

  /* Where the pointers below live. device 0: host memory, the process's own pointers (the CPU
   * backend). device 1: the backend's memory (a GPU); the model and the loop reach it only
   * through these four and allocate it from a pool made with `allocator`. */
  int device;
  const colo_allocator_t *allocator; /* NULL: the host pool's */
  void (*zero)(void *p, size_t bytes);
  void (*copy)(void *dst, const void *src, size_t bytes); /* within the backend's memory */
  /* `rows` copies of `width` bytes within the backend's memory, row r from src + r·spitch to
   * dst + r·dpitch (cudaMemcpy2D's order of arguments); the regions must not overlap. Context
   * parallelism's all-to-all packs and unpacks heads and sequence pieces with it. */
  void (*copy2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                 size_t rows);
  void (*to_host)(void *dst, const void *src, size_t bytes);   /* backend memory → host */
  void (*from_host)(void *dst, const void *src, size_t bytes); /* host → backend memory */
  /* whether p is the backend's memory (device 1; the CPU backend's is NULL) */
  int (*owns)(const void *p);
  /* host memory the device copies fastest from and to (page-locked), or NULL: malloc's */
  void *(*host_alloc)(size_t bytes);
  void (*host_free)(void *p);
  /* the device's free and total memory (NULL, or nonzero: unknown) */
  int (*mem_info)(size_t *free_bytes, size_t *total_bytes);
  /* the stream every entry is queued on in order (a cudaStream_t), or NULL: entries finish
   * before they return. A device communicator queues its collectives on it too (comm/nccl.c),
   * so they follow the kernels that wrote their buffers without a wait on the host */
  void *stream;

  colo_dtype_t act_dtype; /* how activations are stored */
  size_t act_size;        /* and their bytes per element */
  /* dst[n] (act_dtype) = src[n] (fp32), rounded: a weight's compute copy, and activations back
   * from a communicator. Within backend memory. */
  void (*to_act)(void *dst, const float *src, size_t n);
  /* dst[n] (fp32) = src[n] (act_dtype), exactly: activations on their way to a communicator */
  void (*to_f32)(float *dst, const void *src, size_t n);
  /* w[rows][cols] (act_dtype) = the NF4 matrix in codes and absmax (core/nf4.h: quantized in
   * [cols][rows] order), each value level · absmax in fp32, rounded once: a QLoRA model's compute
   * copy of a frozen matrix. All three within backend memory. */
  void (*dequant_nf4)(void *w, const uint8_t *codes, const float *absmax, int rows, int cols);
  /* absmax[blocks] (fp32) = a double-quantized NF4 matrix's scales again from their bytes q and
   * stats (absmax2 per 256, then the offset; core/nf4.h): map[q]·absmax2 + offset, the product
   * and the sum each rounded to fp32. All three within backend memory. */
  void (*dequant_scales)(float *absmax, const uint8_t *q, const float *stats, int blocks);
  /* NEFTune: x[n][c] (act_dtype) += mag · colo_noise_unit(key, row0 + n, c) (core/rng.h), the
   * sum in fp32, rounded once. In place, in backend memory. */
  void (*noise)(void *x, int N, int C, uint64_t key, uint64_t row0, float mag);
  /* x[n][c] (act_dtype) *= w[n] (fp32), the product in fp32, rounded once: a loss's gradient
   * weighted by rows (DPO's). In place, in backend memory. */
  void (*scale_rows)(void *x, const float *w, int N, int C);

  /* out[N][OC] = inp[N][C] · w[C][OC] + b[OC]   (b may be NULL) */
  void (*matmul_fwd)(void *out, const void *inp, const void *w, const float *b, int N, int C,
                     int OC);
  /* dinp = dout · wᵀ;  dw += inpᵀ · dout;  db += Σ_rows dout */
  void (*matmul_bwd)(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                     const void *w, int N, int C, int OC);
  /* The MLP's first product and its GELU: pre[N][OC] = inp · w + b (b may be NULL), out =
   * gelu(pre). The same as matmul_fwd into pre, then gelu_fwd; a backend may take GELU of the sum
   * before it rounds it to store pre (cuBLASLt's epilogue, COLO_CUDA_GELU_FUSION=1), one rounding
   * fewer. */
  void (*matmul_gelu_fwd)(void *out, void *pre, const void *inp, const void *w, const float *b,
                          int N, int C, int OC);
  /* The MLP's second product backward, with GELU's: inp = gelu(pre), and dinp = gelu'(pre) ·
   * (dout · wᵀ), written; dw and db as matmul_bwd. The same as matmul_bwd into dinp, then
   * gelu_bwd in place; a backend may skip the rounding of the product between them. */
  void (*matmul_gelu_bwd)(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                          const void *w, const void *pre, int N, int C, int OC);
  /* the tied LM head: out[N][V] = inp[N][C] · wte[V][C]ᵀ */
  void (*lmhead_fwd)(void *out, const void *inp, const void *wte, int N, int C, int V);
  /* dinp = dout · wte;  dwte += doutᵀ · inp */
  void (*lmhead_bwd)(void *dinp, float *dwte, const void *dout, const void *inp, const void *wte,
                     int N, int C, int V);

  /* out[b][t] = wte[tokens[b][t] − v0] (0 when the token is outside [v0, v1): a vocab-parallel
   * shard) + wpe[p] (when wpe is not NULL), p = pos[b][t] or, pos NULL, t */
  void (*encoder_fwd)(void *out, const int *tokens, const float *wte, const float *wpe, int B,
                      int T, int C, int v0, int v1, const int *pos);
  void (*encoder_bwd)(float *dwte, float *dwpe, const void *dout, const int *tokens, int B, int T,
                      int C, int v0, int v1, const int *pos);
  /* out[n] = table[tokens[n]] (rows of C, act_dtype; a zero row for a token outside [0, V)): a
   * frozen model's token embedding kept in act_dtype, without positions (Llama's) */
  void (*embed_fwd)(void *out, const int *tokens, const void *table, int N, int C, int V);

  /* LayerNorm with eps 1e-5; mean and rstd [N] are saved for the backward */
  void (*layernorm_fwd)(void *out, float *mean, float *rstd, const void *inp, const float *w,
                        const float *b, int N, int C);
  void (*layernorm_bwd)(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                        const float *w, const float *mean, const float *rstd, int N, int C);

  /* RMSNorm (Llama's): out = inp · rstd · w, rstd [N] = 1/sqrt(mean(inp²) + eps) (Llama's eps
   * 1e-5, Qwen2's 1e-6), saved for the backward, which ADDS into dinp like layernorm_bwd */
  void (*rmsnorm_fwd)(void *out, float *rstd, const void *inp, const float *w, int N, int C,
                      float eps);
  void (*rmsnorm_bwd)(void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                      const float *rstd, int N, int C);
  /* Rotary position embedding (RoPE, HuggingFace Llama's rotate-half form) in place on the
   * queries and keys of qkv[B][T][3C] (NH heads of C/NH in each of q, k, v; v untouched): in each
   * head, elements i and i + hs/2 of position pos0 + t are rotated by the angle
   * (pos0 + t) · inv_freq[i] (fp32 [hs/2], the backend's memory: theta^(−2i/hs), or Llama 3's
   * or LongRoPE's rescaling of it, colo_rope_freqs); with pos (not NULL) by (pos0 + pos[b][t])
   * instead; and scaled by mag (1: a rotation alone; LongRoPE's attention factor, HF's cos and
   * sin times it), in fp32. dir −1 applies the transpose (the backward of the same map on
   * dqkv). */
  void (*rope)(void *qkv, int B, int T, int C, int NH, int pos0, const float *inv_freq, float mag,
               int dir, const int *pos);
  /* Qwen3's QK-norm: RMSNorm over each query and key head, in place. Each row of x[N][W] starts
   * with NQ query heads then NK key heads of hs values (the rest, the values, untouched). raw
   * [N][(NQ + NK)·hs] receives those heads as they were and rstd [N][NQ + NK] (fp32) their
   * 1/sqrt(mean(x²) + eps), both for the backward; a query head is then scaled by wq [hs], a
   * key head by wk [hs]. qk_norm_bwd is its backward, in place on dx (the same layout): the
   * normalized heads' gradient in, the raw heads' out; dwq and dwk [hs] are ADDED to (NULL: a
   * frozen model's, not wanted). */
  void (*qk_norm_fwd)(void *x, void *raw, float *rstd, const float *wq, const float *wk, int N,
                      int W, int NQ, int NK, int hs, float eps);
  void (*qk_norm_bwd)(void *dx, float *dwq, float *dwk, const void *raw, const float *rstd,
                      const float *wq, const float *wk, int N, int W, int NQ, int NK, int hs);
  /* Grouped-query attention by repetition (HF's repeat_kv): src[N][C + 2·KV] holds NH query
   * heads of hs = C/NH, then NKV key heads and NKV value heads of hs (KV = NKV·hs); dst[N][3C]
   * the attention entries' layout, q copied and each of the NH key (value) heads a copy of key
   * (value) head h / (NH/NKV). kv_reduce is its backward: dst[N][C + 2·KV] WRITTEN, q copied,
   * each key (value) head the sum of its group's NH/NKV heads of src[N][3C]. */
  void (*kv_expand)(void *dst, const void *src, int N, int C, int NH, int NKV);
  void (*kv_reduce)(void *dst, const void *src, int N, int C, int NH, int NKV);
  /* SwiGLU: pre[N][2H] holds the gate then the up projection of each row; out[N][H] =
   * silu(gate) · up. The backward WRITES dpre[N][2H]. */
  void (*swiglu_fwd)(void *out, const void *pre, int N, int H);
  void (*swiglu_bwd)(void *dpre, const void *pre, const void *dout, int N, int H);

  /* GELU, tanh approximation (HF "gelu_new") */
  void (*gelu_fwd)(void *out, const void *inp, size_t n);
  void (*gelu_bwd)(void *dinp, const void *inp, const void *dout, size_t n);

  /* causal self-attention over qkv[B][T][3C] (q, k, v, heads inside each) into out[B][T][C].
   * No T×T matrix is kept: lse[B][NH][T] (fp32) saves each query's log-sum-exp of its scaled
   * scores, and the backward recomputes the probabilities from q, k (and lse, or the row's own
   * max and sum, as a backend prefers). The backward also gets the forward's out, from which a
   * fused kernel takes each row's Σ dout·out (the CPU does not need it).
   * Documents and windows: with pos (not NULL), query t attends keys t − pos[b][t] … t only.
   * pos[b][t] is token t's position in its document (its document's tokens up to itself, as
   * though each document were a sequence of its own), or under a sliding window of W that
   * position capped at W − 1 (the W most recent of them). 0 ≤ pos[b][t] ≤ t, and a query's first
   * key t − pos[b][t] never moves back down the rows: kernels skip whole blocks of keys by it. */
  void (*attention_fwd)(void *out, float *lse, const void *qkv, int B, int T, int C, int NH,
                        const int *pos);
  void (*attention_bwd)(void *dqkv, const void *dout, const void *qkv, const void *out,
                        const float *lse, int B, int T, int C, int NH, const int *pos);

  /* Dropout: out[n][c] = inp[n][c] · (kept ? scale : 0), kept = colo_dropout_keep(key, row0 + n,
   * col0 + c, thresh) (core/rng.h), in fp32, rounded once; out may be inp. LoRA's dropout of an
   * adapter's input, and (the same mask and scale) of its input gradient; col0: the first
   * column's number, where the input is a tensor-parallel rank's columns of a wider one. */
  void (*dropout)(void *out, const void *inp, int N, int C, uint64_t key, uint64_t row0, int col0,
                  uint32_t thresh, float scale);

  /* DoRA (Liu et al. 2024, as PEFT computes it) on a product out = inp·w: each output column's
   * weights are w + the adapters' update, rescaled to a learned magnitude.
   *   dora_norm: sq[j] = Σ_i (w[i][j] + dt[j][i])² (WRITTEN, fp32, summed over i in order),
   *     w[in][out] the product's weights and dt[out][in] the update s·B·A, both act_dtype.
   *   dora_scale: out[n][j] = inp[n][j] · mag[j] / sqrt(sq[j]) + b[j] (b may be NULL; out may
   *     be inp): the forward's rescaling, and the backward's gradient through it (b NULL).
   *   dora_add: out[n][j] += inp[n][j] · (mag[j] / sqrt(sq[j]) − 1) + b[j] (b may be NULL): the
   *     rescaling where the update's input was dropped (PEFT's (g − 1)·W·dropout(x) term), and
   *     its gradient (out zero, b NULL).
   *   dora_dmag: dmag[j] += Σ_n dout[n][j] · z[n][j] / sqrt(sq[j]) (fp32, summed over n in
   *     order): the magnitude's gradient, z the output before the rescaling. */
  void (*dora_norm)(float *sq, const void *w, const void *dt, int in, int out);
  void (*dora_scale)(void *out, const void *inp, const float *mag, const float *sq, const float *b,
                     int N, int C);
  void (*dora_add)(void *out, const void *inp, const float *mag, const float *sq, const float *b,
                   int N, int C);
  void (*dora_dmag)(float *dmag, const void *dout, const void *z, const float *sq, int N, int C);

  /* out = a + b (activations) */
  void (*add)(void *out, const void *a, const void *b, size_t n);

  /* softmax cross-entropy: probs[N][V] = softmax(logits) (probs may alias logits); losses[N] =
   * −log probs[target], from the fp32 probability, before it is stored as act_dtype */
  void (*crossentropy_fwd)(float *losses, void *probs, const void *logits, const int *targets,
                           int N, int V);
  /* dlogits[N][V] = (probs - onehot(target)) · dloss (dlogits may alias probs) */
  void (*crossentropy_bwd)(void *dlogits, const void *probs, const int *targets, float dloss, int N,
                           int V);
  /* The two at once, for a training step whose loss scale is known before its forward: losses as
   * crossentropy_fwd, and the logits overwritten by (softmax − onehot(target))·dloss, from the fp32
   * probabilities, rounded once. One pass over the logits where the pair makes two and stores the
   * probabilities between them. */
  void (*crossentropy_fused)(float *losses, void *logits, const int *targets, float dloss, int N,
                             int V);

  /* Vocab-parallel cross-entropy over a shard logits[N][Vl] of the vocabulary starting at v0:
   * the row maxima, the sums of exp(logit − gmax), the target's logit (0 when another shard has
   * it), and the gradient (softmax − onehot) · dloss from the global max and sum. */
  void (*vocab_max)(float *rowmax, const void *logits, int N, int Vl);
  void (*vocab_sumexp)(float *sum, const void *logits, const float *gmax, int N, int Vl);
  void (*vocab_target)(float *tlogit, const void *logits, const int *targets, int v0, int N,
                       int Vl);
  void (*vocab_ce_bwd)(void *dlogits, const void *logits, const float *gmax, const float *gsum,
                       const int *targets, int v0, float dloss, int N, int Vl);

  /* PyTorch AdamW, step t ≥ 1: p *= 1 - lr·wd; m, v moments of g·grad_scale; bias-corrected
   * update */
  void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float wd, float grad_scale, int t);
  /* Muon (optim/muon.h), torch.optim.Muon's three parts. muon_momentum: m = β·m + (1−β)·g·gs,
   * then u = (1−β)·g·gs + β·m (Nesterov's), elementwise (u may be g). muon_orth: the rows × cols
   * block of x at row stride ld (≥ cols) replaced by scale times its Newton–Schulz
   * orthogonalization: X = the block (its transpose when rows > cols) over max(‖X‖_F, eps), then
   * `steps` times A = X·Xᵀ, X = a·X + (b·A + c·A·A)·X with (a, b, c) = (3.4445, −4.7750, 2.0315).
   * work: backend memory of 2·rows·cols + 2·min(rows, cols)² floats. muon_apply: p = p·(1 − lr·wd)
   * − lr·u. */
  void (*muon_momentum)(float *u, const float *g, float *m, size_t n, float beta, float grad_scale);
  void (*muon_orth)(float *x, float *work, int rows, int cols, int ld, int steps, float eps,
                    float scale);
  void (*muon_apply)(float *p, const float *u, size_t n, float lr, float wd);
  /* dst (cols × rows at row stride dld) = the transpose of src (rows × cols at row stride sld):
   * a tensor-parallel rank's column block of a matrix as rows, for Muon's gather, and back */
  void (*muon_transpose)(float *dst, int dld, const float *src, int sld, int rows, int cols);
  /* Σ x², accumulated in double in a fixed order, so the result does not depend on threads */
  double (*sumsq)(const float *x, size_t n);
  void (*scale)(float *x, float s, size_t n);
  /* dst += src, fp32 (gradients) */
  void (*accumulate)(float *dst, const float *src, size_t n);
} colo_backend_t;

/* The table's entries by kind, for the tables that fill or wrap them all alike (cpu_lowp.c,
 * cpu_device.c, the CUDA profile): X(entry, arg) for each. COLO_ACT_OPS: the entries whose
 * activations are stored in act_dtype; COLO_F32_OPS: the optimizer's and the norms', fp32 only. */
/* clang-format off */
#define COLO_ACT_OPS(X, a)                                                                         \
  X(to_act, a) X(to_f32, a) X(dequant_nf4, a) X(matmul_fwd, a) X(matmul_bwd, a)                                      \
  X(matmul_gelu_fwd, a) X(matmul_gelu_bwd, a)                                                      \
  X(lmhead_fwd, a) X(lmhead_bwd, a) X(encoder_fwd, a) X(encoder_bwd, a) X(embed_fwd, a)                            \
  X(layernorm_fwd, a) X(layernorm_bwd, a) X(gelu_fwd, a) X(gelu_bwd, a)                            \
  X(rmsnorm_fwd, a) X(rmsnorm_bwd, a) X(qk_norm_fwd, a) X(qk_norm_bwd, a) X(rope, a) X(swiglu_fwd, a) X(swiglu_bwd, a)                 \
  X(kv_expand, a) X(kv_reduce, a)                                                                  \
  X(attention_fwd, a) X(attention_bwd, a) X(dropout, a) X(noise, a) X(scale_rows, a) X(dora_norm, a) X(dora_scale, a) X(dora_add, a) X(dora_dmag, a) X(add, a) X(crossentropy_fwd, a)                         \
  X(crossentropy_bwd, a) X(crossentropy_fused, a) X(vocab_max, a) X(vocab_sumexp, a)               \
  X(vocab_target, a) X(vocab_ce_bwd, a)
#define COLO_F32_OPS(X, a) X(adamw, a) X(muon_momentum, a) X(muon_orth, a) X(muon_apply, a) X(muon_transpose, a) X(sumsq, a) X(scale, a) X(accumulate, a) X(dequant_scales, a)
/* clang-format on */

/* embed_fwd's rows on the host, for the CPU tables: rows of `row` bytes */
void colo_embed_rows(void *out, const int *tokens, const void *table, int N, size_t row, int V);

/* fp32 on the host: OpenBLAS for matrix products, OpenMP for the rest. */
const colo_backend_t *colo_backend_cpu(void);
/* The CPU backend with activations stored as `t` (bf16 or fp16; fp32 gives colo_backend_cpu): each
 * operation widens its inputs, runs the fp32 operation and rounds what it stores. Slower than
 * fp32; the reference the GPU's reduced-precision operations are tested against. */
const colo_backend_t *colo_backend_cpu_dtype(colo_dtype_t t);

/* A run's precision. FP32: fp32 storage, fp32 products. TF32: fp32 storage, products on tensor
 * cores with inputs rounded to TF32 (GPU only). BF16, FP16: activations and the weights' compute
 * copies stored as bf16 / fp16, products on tensor cores; accumulation, master weights, gradients
 * and optimizer state stay fp32. */
enum { COLO_MATH_FP32 = 0, COLO_MATH_TF32, COLO_MATH_BF16, COLO_MATH_FP16 };
/* The activation storage type of a precision. */
colo_dtype_t colo_math_dtype(int math);

/* RoPE's inverse frequencies for head size hs into inv_freq[hs/2] (host memory), as HF computes
 * them in fp32: theta^(−2i/hs), and with factor > 0 Llama 3's rescaling ("rope_type": "llama3":
 * wavelengths past orig/low divided by factor, those under orig/high kept, the band between
 * blended). */
void colo_rope_freqs(int hs, float theta, float factor, float low, float high, int orig,
                     float *inv_freq);
/* LongRoPE's ("rope_type": "longrope", Phi-3.5's): 1 / (ext[i] · theta^(2i/hs)), as HF computes
 * them in fp32, ext[hs/2] each frequency's divisor. */
void colo_rope_freqs_ext(int hs, float theta, const float *ext, float *inv_freq);

/* The CUDA backend on GPU `ordinal` at precision `math`: cuBLAS for the products, kernels of our
 * own for the rest. It is a library of its own (libcolo_cuda.so), loaded on the first call. NULL
 * when this build has no CUDA or the GPU cannot be used; err says why. One GPU per process: later
 * calls must name the same GPU, and may ask another precision (test_cuda does). */
const colo_backend_t *colo_backend_cuda(int ordinal, int math, char *err, size_t errlen);
/* Whether this build has the CUDA backend (1) or not (0). */
int colo_backend_cuda_built(void);
/* Whether COLO_CUDA_EMULATE=1 is set: colo_backend_cuda then returns colo_backend_cpu_device,
 * in any build, with or without a GPU. */
int colo_backend_cuda_emulated(void);
/* The CPU table of storage type t dressed as a device backend (device 1), for tests: its memory
 * is reachable only through the table (host access faults), and every pointer an entry gets must
 * be its memory. Computes what colo_backend_cpu_dtype(t) computes, bit for bit; TF32 runs as
 * fp32 (cpu_device.c). */
const colo_backend_t *colo_backend_cpu_device(colo_dtype_t t);

/* Sets the threads OpenMP and OpenBLAS use (0: leave as the environment says). */
void colo_backend_cpu_set_threads(int n);
int colo_backend_cpu_threads(void);

/* Host memory the backend copies fastest from and to: its host_alloc's where it has one
 * (page-locked on a GPU), else malloc's; freed by colo_host_free with the same backend. */
static inline void *colo_host_alloc(const colo_backend_t *be, size_t bytes) {
  return be->host_alloc ? be->host_alloc(bytes) : malloc(bytes);
}

static inline void colo_host_free(const colo_backend_t *be, void *p) {
  if (p && be->host_free)
    be->host_free(p);
  else
    free(p);
}

#endif
