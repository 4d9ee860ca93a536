/* The operation table: every computation the model and optimizer do, behind function pointers,
 * so a CUDA table can stand beside the CPU one. Model code never calls BLAS or CUDA directly.
 *
 * Shapes: N = B·T rows. Weights use HuggingFace GPT-2's Conv1D layout, w[C_in][C_out], so
 * checkpoints load into HF unchanged. Every *_bwd ACCUMULATES into its outputs (dinp, dw, db);
 * callers zero what must start from zero. Any output pointer of a *_bwd may be NULL to skip it.
 * Token and target arrays (int) live in the backend's memory like the rest.
 */
#ifndef COLO_BACKEND_H
#define COLO_BACKEND_H

#include <stddef.h>

#include "../core/pool.h"

typedef struct colo_backend_s {
  const char *name;

  /* Where the pointers below live. device 0: host memory, the process's own pointers (the CPU
   * backend). device 1: the backend's memory (a GPU); the model and the loop reach it only
   * through these four and allocate it from a pool made with `allocator`. */
  int device;
  const colo_allocator_t *allocator; /* NULL: the host pool's */
  void (*zero)(void *p, size_t bytes);
  void (*copy)(void *dst, const void *src, size_t bytes);      /* within the backend's memory */
  void (*to_host)(void *dst, const void *src, size_t bytes);   /* backend memory → host */
  void (*from_host)(void *dst, const void *src, size_t bytes); /* host → backend memory */

  /* out[N][OC] = inp[N][C] · w[C][OC] + b[OC]   (b may be NULL) */
  void (*matmul_fwd)(float *out, const float *inp, const float *w, const float *b, int N, int C,
                     int OC);
  /* dinp += dout · wᵀ;  dw += inpᵀ · dout;  db += Σ_rows dout */
  void (*matmul_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                     const float *w, int N, int C, int OC);
  /* the tied LM head: out[N][V] = inp[N][C] · wte[V][C]ᵀ */
  void (*lmhead_fwd)(float *out, const float *inp, const float *wte, int N, int C, int V);
  /* dinp += dout · wte;  dwte += doutᵀ · inp */
  void (*lmhead_bwd)(float *dinp, float *dwte, const float *dout, const float *inp,
                     const float *wte, int N, int C, int V);

  /* out[b][t] = wte[tokens[b][t] − v0] (0 when the token is outside [v0, v1): a vocab-parallel
   * shard) + wpe[t] (when wpe is not NULL) */
  void (*encoder_fwd)(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                      int T, int C, int v0, int v1);
  void (*encoder_bwd)(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T,
                      int C, int v0, int v1);

  /* LayerNorm with eps 1e-5; mean and rstd [N] are saved for the backward */
  void (*layernorm_fwd)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                        const float *b, int N, int C);
  void (*layernorm_bwd)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int N, int C);

  /* GELU, tanh approximation (HF "gelu_new") */
  void (*gelu_fwd)(float *out, const float *inp, size_t n);
  void (*gelu_bwd)(float *dinp, const float *inp, const float *dout, size_t n);

  /* causal self-attention over qkv[B][T][3C] (q, k, v, heads inside each); att[B][NH][T][T]
   * keeps the softmax probabilities for the backward; out[B][T][C] */
  void (*attention_fwd)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
  void (*attention_bwd)(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                        int T, int C, int NH);

  /* out = a + b */
  void (*add)(float *out, const float *a, const float *b, size_t n);

  /* softmax cross-entropy: probs[N][V] = softmax(logits), losses[N] = -log probs[target] */
  void (*crossentropy_fwd)(float *losses, float *probs, const float *logits, const int *targets,
                           int N, int V);
  /* dlogits[N][V] = (probs - onehot(target)) · dloss (dlogits may alias probs) */
  void (*crossentropy_bwd)(float *dlogits, const float *probs, const int *targets, float dloss,
                           int N, int V);

  /* Vocab-parallel cross-entropy over a shard logits[N][Vl] of the vocabulary starting at v0:
   * the row maxima, the sums of exp(logit − gmax), the target's logit (0 when another shard has
   * it), and the gradient (softmax − onehot) · dloss from the global max and sum. */
  void (*vocab_max)(float *rowmax, const float *logits, int N, int Vl);
  void (*vocab_sumexp)(float *sum, const float *logits, const float *gmax, int N, int Vl);
  void (*vocab_target)(float *tlogit, const float *logits, const int *targets, int v0, int N,
                       int Vl);
  void (*vocab_ce_bwd)(float *dlogits, const float *logits, const float *gmax, const float *gsum,
                       const int *targets, int v0, float dloss, int N, int Vl);

  /* PyTorch AdamW, step t ≥ 1: p *= 1 - lr·wd; m, v moments of g·grad_scale; bias-corrected
   * update */
  void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float wd, float grad_scale, int t);
  /* Σ x², accumulated in double in a fixed order, so the result does not depend on threads */
  double (*sumsq)(const float *x, size_t n);
  void (*scale)(float *x, float s, size_t n);
} colo_backend_t;

/* fp32 on the host: OpenBLAS for matrix products, OpenMP for the rest. */
const colo_backend_t *colo_backend_cpu(void);

/* How the CUDA backend's matrix products multiply: fp32, or tensor cores with the inputs rounded
 * to TF32, bf16 or fp16 (accumulation, storage and master weights stay fp32). */
enum { COLO_MATH_FP32 = 0, COLO_MATH_TF32, COLO_MATH_BF16, COLO_MATH_FP16 };

/* The CUDA backend on GPU `ordinal`: fp32 storage and accumulation, cuBLAS for the products
 * (multiplying as `math` says), kernels of our own for the rest. It is a library of its own
 * (libcolo_cuda.so), loaded on the first call. NULL when this build has no CUDA or the GPU
 * cannot be used; err says why. One GPU per process: later calls return the first one's table
 * (and set its math). */
const colo_backend_t *colo_backend_cuda(int ordinal, int math, char *err, size_t errlen);
/* Whether this build has the CUDA backend (1) or not (0). */
int colo_backend_cuda_built(void);

/* Sets the threads OpenMP and OpenBLAS use (0: leave as the environment says). */
void colo_backend_cpu_set_threads(int n);
int colo_backend_cpu_threads(void);

#endif
