/* The CUDA backend: the operation table on one GPU, fp32 storage and fp32 accumulation.
 *
 * Matrix products, and attention's four products per head, go through cuBLAS: fp32, or on
 * tensor cores with inputs rounded to TF32, bf16 or fp16 and fp32 accumulation (the run's
 * precision; storage stays fp32, and so do the master weights). The rest are kernels of our own,
 * each the CPU entry's arithmetic in the same order where that order is cheap to keep: reductions
 * over rows (bias and LayerNorm weight gradients, the squared norm, the embedding's gradient) sum
 * fixed blocks in a fixed order, so every result is the same from run to run. Everything runs on
 * one stream; to_host waits for it.
 *
 * It is a shared library of its own, libcolo_cuda.so, that colo-train loads only for a GPU run
 * (cuda_loader.c). A CUDA or cuBLAS error ends the process with a message naming the call: the
 * table's entries return nothing, and a rank whose GPU failed cannot go on (its worker reports the
 * exit).
 *
 * Layouts are the CPU backend's (backend.h): row-major, weights w[in][out]. gemm_rm below maps a
 * row-major product onto column-major cuBLAS by swapping the operands: C = op(A)·op(B) row-major
 * is Cᵀ = op(B)ᵀ·op(A)ᵀ column-major, and a row-major matrix read column-major is its transpose.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
}

/* ---- errors ---- */

static void die_cuda(cudaError_t e, const char *what, const char *file, int line) {
  fprintf(stderr, "colo-train: CUDA error in %s: %s (%s:%d)\n", what, cudaGetErrorString(e), file,
          line);
  exit(1);
}
#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess)                                                                         \
      die_cuda(e_, #x, __FILE__, __LINE__);                                                        \
  } while (0)
#define CKB(x)                                                                                     \
  do {                                                                                             \
    cublasStatus_t s_ = (x);                                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      fprintf(stderr, "colo-train: cuBLAS error in %s: %s (%s:%d)\n", #x,                          \
              cublasGetStatusString(s_), __FILE__, __LINE__);                                      \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define LAUNCHED() CK(cudaGetLastError())

/* ---- the one GPU this process uses ---- */

static struct {
  int ready;
  cudaStream_t stream;
  cublasHandle_t blas;
  cublasComputeType_t compute; /* how products multiply: fp32, or tensor cores (COLO_MATH_*) */
  float *scratch;              /* attention's per-sequence [NH][T][T], and column-sum partials */
  size_t scratch_bytes;
  double *part; /* sumsq: one double per block */
} g;

static float *scratch(size_t bytes) {
  if (bytes > g.scratch_bytes) {
    CK(cudaStreamSynchronize(g.stream)); /* queued kernels may still use the old one */
    if (g.scratch)
      CK(cudaFree(g.scratch));
    CK(cudaMalloc(&g.scratch, bytes));
    g.scratch_bytes = bytes;
  }
  return g.scratch;
}

static int blocks_for(size_t n, int threads) {
  size_t b = (n + (size_t)threads - 1) / (size_t)threads;
  return b > 65535u * 16u ? 65535 * 16 : (int)(b ? b : 1);
}

/* ---- memory ---- */

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError(); /* out of memory is the pool's to report, not sticky */
    return NULL;
  }
  /* on the backend's stream (non-blocking: it does not wait for the legacy default stream) */
  CK(cudaMemsetAsync(p, 0, bytes, g.stream));
  return p;
}

static void dev_free(void *p) {
  CK(cudaStreamSynchronize(g.stream)); /* queued work may still use it */
  CK(cudaFree(p));
}

static const colo_allocator_t DEVICE_ALLOCATOR = {dev_alloc, dev_free};

static void zero(void *p, size_t bytes) {
  CK(cudaMemsetAsync(p, 0, bytes, g.stream));
}

static void copy(void *dst, const void *src, size_t bytes) {
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream));
}

static void to_host(void *dst, const void *src, size_t bytes) {
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.stream));
  CK(cudaStreamSynchronize(g.stream));
}

static void from_host(void *dst, const void *src, size_t bytes) {
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.stream));
  CK(cudaStreamSynchronize(g.stream)); /* the caller may reuse its buffer at once */
}

/* ---- reductions within a block ---- */

struct op_sum {
  __device__ static float id() {
    return 0.0f;
  }
  __device__ static float f(float a, float b) {
    return a + b;
  }
};
struct op_max {
  __device__ static float id() {
    return -INFINITY;
  }
  __device__ static float f(float a, float b) {
    return fmaxf(a, b);
  }
};

template <class Op> __device__ static float warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = Op::f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* blockDim.x a multiple of 32, at most 1024; every thread gets the result */
template <class Op> __device__ static float block_reduce(float v) {
  __shared__ float s[32];
  __shared__ float total;
  int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_reduce<Op>(v);
  __syncthreads(); /* s may still be read by a previous call */
  if (lane == 0)
    s[w] = v;
  __syncthreads();
  if (w == 0) {
    float x = warp_reduce<Op>(lane < nw ? s[lane] : Op::id());
    if (lane == 0)
      total = x;
  }
  __syncthreads();
  return total;
}

#define warp_sum  warp_reduce<op_sum>
#define warp_max  warp_reduce<op_max>
#define block_sum block_reduce<op_sum>
#define block_max block_reduce<op_max>

/* ---- matrix products ---- */

/* row-major C[M][N] (ldc) = alpha·op(A)·op(B) + beta·C, op(A) M×K, op(B) K×N; fp32 in and out,
 * multiplied as g.compute allows (fp32, or TF32/bf16/fp16 tensor cores with fp32 accumulation) */
static void gemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
  CKB(cublasGemmEx(g.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                   &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc,
                   g.compute, CUBLAS_GEMM_DEFAULT));
}

/* the same for `batch` products whose operands start sa, sb, sc elements apart */
static void gemm_rm_batched(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                            int lda, long long sa, const float *B, int ldb, long long sb,
                            float beta, float *C, int ldc, long long sc, int batch) {
  CKB(cublasGemmStridedBatchedEx(g.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, CUDA_R_32F,
                                 ldb, sb, A, CUDA_R_32F, lda, sa, &beta, C, CUDA_R_32F, ldc, sc,
                                 batch, g.compute, CUBLAS_GEMM_DEFAULT));
}

__global__ static void rows_set_kernel(float *out, const float *b, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * OC;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = b[i % OC];
}

/* Column sums in a fixed order: partial[y][c] sums rows [y·per, (y+1)·per) of column c, with
 * optional weights xhat = (inp - mean)·rstd (LayerNorm's weight gradient) */
#define COL_PARTS 32
__global__ static void colsum_part_kernel(float *partial, const float *src, const float *inp,
                                          const float *mean, const float *rstd, int N, int C) {
  __shared__ float s[8][33];
  int c = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y;
  int per = (N + COL_PARTS - 1) / COL_PARTS, lo = y * per, hi = min(lo + per, N);
  float acc = 0.0f;
  if (c < C)
    for (int n = lo + threadIdx.y; n < hi; n += 8) {
      float d = src[(size_t)n * C + c];
      acc += inp ? d * (inp[(size_t)n * C + c] - mean[n]) * rstd[n] : d;
    }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float t = 0.0f;
    for (int k = 0; k < 8; k++)
      t += s[k][threadIdx.x];
    partial[(size_t)y * C + c] = t;
  }
}

__global__ static void colsum_finish_kernel(float *dst, const float *partial, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  float t = 0.0f;
  for (int y = 0; y < COL_PARTS; y++)
    t += partial[(size_t)y * C + c];
  dst[c] += t;
}

/* dst[C] += Σ_n src[n][C] (weighted by LayerNorm's xhat when inp is given) */
static void colsum_into(float *dst, const float *src, const float *inp, const float *mean,
                        const float *rstd, int N, int C) {
  float *partial = scratch((size_t)COL_PARTS * C * sizeof(float));
  dim3 grid((C + 31) / 32, COL_PARTS), block(32, 8);
  colsum_part_kernel<<<grid, block, 0, g.stream>>>(partial, src, inp, mean, rstd, N, C);
  LAUNCHED();
  colsum_finish_kernel<<<(C + 255) / 256, 256, 0, g.stream>>>(dst, partial, C);
  LAUNCHED();
}

static void matmul_fwd(float *out, const float *inp, const float *w, const float *b, int N, int C,
                       int OC) {
  if (b) {
    rows_set_kernel<<<blocks_for((size_t)N * OC, 256), 256, 0, g.stream>>>(out, b, N, OC);
    LAUNCHED();
  }
  gemm_rm(0, 0, N, OC, C, 1.0f, inp, C, w, OC, b ? 1.0f : 0.0f, out, OC);
}

static void matmul_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                       const float *w, int N, int C, int OC) {
  if (dinp) /* dinp[N][C] += dout[N][OC] · w[C][OC]ᵀ */
    gemm_rm(0, 1, N, C, OC, 1.0f, dout, OC, w, OC, 1.0f, dinp, C);
  if (dw) /* dw[C][OC] += inp[N][C]ᵀ · dout[N][OC] */
    gemm_rm(1, 0, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dw, OC);
  if (db)
    colsum_into(db, dout, NULL, NULL, NULL, N, OC);
}

static void lmhead_fwd(float *out, const float *inp, const float *wte, int N, int C, int V) {
  gemm_rm(0, 1, N, V, C, 1.0f, inp, C, wte, C, 0.0f, out, V);
}

static void lmhead_bwd(float *dinp, float *dwte, const float *dout, const float *inp,
                       const float *wte, int N, int C, int V) {
  if (dinp) /* dinp[N][C] += dout[N][V] · wte[V][C] */
    gemm_rm(0, 0, N, C, V, 1.0f, dout, V, wte, C, 1.0f, dinp, C);
  if (dwte) /* dwte[V][C] += dout[N][V]ᵀ · inp[N][C] */
    gemm_rm(1, 0, V, C, N, 1.0f, dout, V, inp, C, 1.0f, dwte, C);
}

/* ---- embeddings ---- */

__global__ static void encoder_fwd_kernel(float *out, const int *tokens, const float *wte,
                                          const float *wpe, int N, int T, int C, int v0, int v1) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int row = (int)(i / C), c = (int)(i % C), tok = tokens[row];
    float e = tok >= v0 && tok < v1 ? wte[(size_t)(tok - v0) * C + c] : 0.0f;
    out[i] = e + (wpe ? wpe[(size_t)(row % T) * C + c] : 0.0f);
  }
}

static void encoder_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int v1) {
  size_t n = (size_t)B * T * C;
  encoder_fwd_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(out, tokens, wte, wpe, B * T, T, C,
                                                               v0, v1);
  LAUNCHED();
}

/* One thread per channel, rows in order: rows that share a token are added in the CPU's order,
 * so the result is the CPU's bit for bit. Slow for long batches (B·T serial steps); a sorted,
 * parallel version is the next step when it shows in a profile. */
__global__ static void encoder_bwd_kernel(float *dwte, float *dwpe, const float *dout,
                                          const int *tokens, int N, int T, int C, int v0, int v1) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  for (int row = 0; row < N; row++) {
    float d = dout[(size_t)row * C + c];
    int tok = tokens[row];
    if (dwte && tok >= v0 && tok < v1)
      dwte[(size_t)(tok - v0) * C + c] += d;
    if (dwpe)
      dwpe[(size_t)(row % T) * C + c] += d;
  }
}

static void encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C, int v0, int v1) {
  encoder_bwd_kernel<<<(C + 63) / 64, 64, 0, g.stream>>>(dwte, dwpe, dout, tokens, B * T, T, C, v0,
                                                         v1);
  LAUNCHED();
}

/* ---- LayerNorm: a warp per row ---- */

__global__ static void layernorm_fwd_kernel(float *out, float *mean, float *rstd, const float *inp,
                                            const float *w, const float *b, int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const float *x = inp + (size_t)row * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += 32)
    s += x[i];
  float m = warp_sum(s) / (float)C;
  float v = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float d = x[i] - m;
    v += d * d;
  }
  v = warp_sum(v) / (float)C;
  float r = 1.0f / sqrtf(v + 1e-5f);
  float *o = out + (size_t)row * C;
  for (int i = lane; i < C; i += 32)
    o[i] = (x[i] - m) * r * w[i] + b[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

static void layernorm_fwd(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C) {
  layernorm_fwd_kernel<<<(N + 7) / 8, 256, 0, g.stream>>>(out, mean, rstd, inp, w, b, N, C);
  LAUNCHED();
}

__global__ static void layernorm_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                            const float *w, const float *mean, const float *rstd,
                                            int N, int C) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
  float m = mean[row], r = rstd[row], dm = 0.0f, dnm = 0.0f;
  for (int i = lane; i < C; i += 32) {
    float xh = (x[i] - m) * r, dn = w[i] * d[i];
    dm += dn;
    dnm += dn * xh;
  }
  dm = warp_sum(dm) / (float)C;
  dnm = warp_sum(dnm) / (float)C;
  float *di = dinp + (size_t)row * C;
  for (int i = lane; i < C; i += 32) {
    float xh = (x[i] - m) * r, dn = w[i] * d[i];
    di[i] += (dn - dm - xh * dnm) * r;
  }
}

static void layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C) {
  if (dinp) {
    layernorm_bwd_kernel<<<(N + 7) / 8, 256, 0, g.stream>>>(dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCHED();
  }
  if (dw)
    colsum_into(dw, dout, inp, mean, rstd, N, C);
  if (db)
    colsum_into(db, dout, NULL, NULL, NULL, N, C);
}

/* ---- GELU (tanh) ---- */

#define GELU_K 0.7978845608028654f

__global__ static void gelu_fwd_kernel(float *out, const float *inp, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  }
}

__global__ static void gelu_bwd_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = inp[i];
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float gr = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += gr * dout[i];
  }
}

static void gelu_fwd(float *out, const float *inp, size_t n) {
  gelu_fwd_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(out, inp, n);
  LAUNCHED();
}

static void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
  gelu_bwd_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(dinp, inp, dout, n);
  LAUNCHED();
}

/* ---- attention: per sequence, the heads' products batched through cuBLAS ----
 * q, k, v of head h start at columns h·hs, C + h·hs, 2C + h·hs of qkv's rows (stride 3C), so the
 * heads of one sequence are `NH` matrices hs elements apart: one strided-batched call each. */

/* causal softmax over rows of att[rows][T] in place, row r is query t = r % T; a warp per row */
__global__ static void causal_softmax_kernel(float *att, int rows, int T) {
  int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows)
    return;
  int t = r % T;
  float *a = att + (size_t)r * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32)
    mx = fmaxf(mx, a[j]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    float e = expf(a[j] - mx);
    a[j] = e;
    s += e;
  }
  float inv = 1.0f / warp_sum(s);
  for (int j = lane; j < T; j += 32)
    a[j] = j <= t ? a[j] * inv : 0.0f;
}

/* datt → the gradient of the scaled scores, in place: att·(datt − Σ att·datt)·scale */
__global__ static void softmax_bwd_kernel(float *datt, const float *att, int rows, int T,
                                          float scale) {
  int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows)
    return;
  int t = r % T;
  const float *a = att + (size_t)r * T;
  float *d = datt + (size_t)r * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32)
    dot += a[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32)
    d[j] = j <= t ? a[j] * (d[j] - dot) * scale : 0.0f;
}

static void attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  long long TT = (long long)T * T;
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * C3, *k = q + C;
    float *a = att + (size_t)b * NH * TT;
    /* scores[t][t2] = scale · q[t]·k[t2] */
    gemm_rm_batched(0, 1, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, a, T, TT, NH);
  }
  int rows = B * NH * T;
  causal_softmax_kernel<<<(rows + 7) / 8, 256, 0, g.stream>>>(att, rows, T);
  LAUNCHED();
  for (int b = 0; b < B; b++) {
    const float *v = qkv + (size_t)b * T * C3 + 2 * C;
    /* out[t][h·hs + i] = Σ_t2 att[t][t2] · v[t2][i] */
    gemm_rm_batched(0, 0, T, hs, T, 1.0f, att + (size_t)b * NH * TT, T, TT, v, C3, hs, 0.0f,
                    out + (size_t)b * T * C, C, hs, NH);
  }
}

static void attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                          int T, int C, int NH) {
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  long long TT = (long long)T * T;
  float *datt = scratch((size_t)NH * TT * sizeof(float));
  for (int b = 0; b < B; b++) {
    const float *q = qkv + (size_t)b * T * C3, *k = q + C, *v = q + 2 * C;
    const float *a = att + (size_t)b * NH * TT, *d = dout + (size_t)b * T * C;
    float *dq = dqkv + (size_t)b * T * C3, *dk = dq + C, *dv = dq + 2 * C;
    /* datt[t][t2] = dout[t]·v[t2] */
    gemm_rm_batched(0, 1, T, T, hs, 1.0f, d, C, hs, v, C3, hs, 0.0f, datt, T, TT, NH);
    /* dv[t2] += Σ_t att[t][t2] · dout[t] */
    gemm_rm_batched(1, 0, T, hs, T, 1.0f, a, T, TT, d, C, hs, 1.0f, dv, C3, hs, NH);
    int rows = NH * T;
    softmax_bwd_kernel<<<(rows + 7) / 8, 256, 0, g.stream>>>(datt, a, rows, T, scale);
    LAUNCHED();
    /* dq[t] += Σ_t2 dpre[t][t2] · k[t2];  dk[t2] += Σ_t dpre[t][t2] · q[t] */
    gemm_rm_batched(0, 0, T, hs, T, 1.0f, datt, T, TT, k, C3, hs, 1.0f, dq, C3, hs, NH);
    gemm_rm_batched(1, 0, T, hs, T, 1.0f, datt, T, TT, q, C3, hs, 1.0f, dk, C3, hs, NH);
  }
}

/* ---- elementwise ---- */

__global__ static void add_kernel(float *out, const float *a, const float *b, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}

static void add(float *out, const float *a, const float *b, size_t n) {
  add_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(out, a, b, n);
  LAUNCHED();
}

__global__ static void scale_kernel(float *x, float s, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

static void scale(float *x, float s, size_t n) {
  scale_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(x, s, n);
  LAUNCHED();
}

/* ---- losses: a block per row ---- */

__global__ static void crossentropy_fwd_kernel(float *losses, float *probs, const float *logits,
                                               const int *targets, int V) {
  int n = blockIdx.x;
  const float *l = logits + (size_t)n * V;
  float *p = probs + (size_t)n * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    mx = fmaxf(mx, l[v]);
  mx = block_max(mx);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    s += expf(l[v] - mx);
  s = block_sum(s);
  float inv = 1.0f / s;
  for (int v = threadIdx.x; v < V; v += blockDim.x) /* in place when probs is logits */
    p[v] = expf(l[v] - mx) * inv;
  __syncthreads();
  if (threadIdx.x == 0 && losses)
    losses[n] = -logf(p[targets[n]]);
}

static void crossentropy_fwd(float *losses, float *probs, const float *logits, const int *targets,
                             int N, int V) {
  crossentropy_fwd_kernel<<<N, 512, 0, g.stream>>>(losses, probs, logits, targets, V);
  LAUNCHED();
}

__global__ static void crossentropy_bwd_kernel(float *dlogits, const float *probs,
                                               const int *targets, float dloss, int N, int V) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)N * V;
  for (; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int n = (int)(i / V), v = (int)(i % V);
    dlogits[i] = (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dloss;
  }
}

static void crossentropy_bwd(float *dlogits, const float *probs, const int *targets, float dloss,
                             int N, int V) {
  crossentropy_bwd_kernel<<<blocks_for((size_t)N * V, 256), 256, 0, g.stream>>>(
      dlogits, probs, targets, dloss, N, V);
  LAUNCHED();
}

__global__ static void vocab_max_kernel(float *rowmax, const float *logits, int Vl) {
  const float *l = logits + (size_t)blockIdx.x * Vl;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < Vl; v += blockDim.x)
    m = fmaxf(m, l[v]);
  m = block_max(m);
  if (threadIdx.x == 0)
    rowmax[blockIdx.x] = m;
}

static void vocab_max(float *rowmax, const float *logits, int N, int Vl) {
  vocab_max_kernel<<<N, 256, 0, g.stream>>>(rowmax, logits, Vl);
  LAUNCHED();
}

__global__ static void vocab_sumexp_kernel(float *sum, const float *logits, const float *gmax,
                                           int Vl) {
  const float *l = logits + (size_t)blockIdx.x * Vl;
  float mx = gmax[blockIdx.x], s = 0.0f;
  for (int v = threadIdx.x; v < Vl; v += blockDim.x)
    s += expf(l[v] - mx);
  s = block_sum(s);
  if (threadIdx.x == 0)
    sum[blockIdx.x] = s;
}

static void vocab_sumexp(float *sum, const float *logits, const float *gmax, int N, int Vl) {
  vocab_sumexp_kernel<<<N, 256, 0, g.stream>>>(sum, logits, gmax, Vl);
  LAUNCHED();
}

__global__ static void vocab_target_kernel(float *tlogit, const float *logits, const int *targets,
                                           int v0, int N, int Vl) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N)
    return;
  int t = targets[n] - v0;
  tlogit[n] = t >= 0 && t < Vl ? logits[(size_t)n * Vl + t] : 0.0f;
}

static void vocab_target(float *tlogit, const float *logits, const int *targets, int v0, int N,
                         int Vl) {
  vocab_target_kernel<<<(N + 255) / 256, 256, 0, g.stream>>>(tlogit, logits, targets, v0, N, Vl);
  LAUNCHED();
}

__global__ static void vocab_ce_bwd_kernel(float *dlogits, const float *logits, const float *gmax,
                                           const float *gsum, const int *targets, int v0,
                                           float dloss, int N, int Vl) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)N * Vl;
  for (; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int n = (int)(i / Vl), v = (int)(i % Vl);
    float p = expf(logits[i] - gmax[n]) / gsum[n];
    dlogits[i] = (p - (v == targets[n] - v0 ? 1.0f : 0.0f)) * dloss;
  }
}

static void vocab_ce_bwd(float *dlogits, const float *logits, const float *gmax, const float *gsum,
                         const int *targets, int v0, float dloss, int N, int Vl) {
  vocab_ce_bwd_kernel<<<blocks_for((size_t)N * Vl, 256), 256, 0, g.stream>>>(
      dlogits, logits, gmax, gsum, targets, v0, dloss, N, Vl);
  LAUNCHED();
}

/* ---- optimizer and norms ---- */

__global__ static void adamw_kernel(float *p, const float *g_, float *m, float *v, size_t n,
                                    float beta1, float beta2, float eps, float grad_scale,
                                    float step_size, float bc2_sqrt, float decay) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = g_[i] * grad_scale;
    float mi = m[i] + (gi - m[i]) * (1.0f - beta1);
    float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

static void adamw(float *p, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float grad_scale, int t) {
  float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  adamw_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(
      p, grad, m, v, n, beta1, beta2, eps, grad_scale, lr / bc1, sqrtf(bc2), 1.0f - lr * wd);
  LAUNCHED();
}

#define SUMSQ_BLOCKS 256
__global__ static void sumsq_kernel(double *part, const float *x, size_t n) {
  __shared__ double s[256];
  double acc = 0.0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    acc += (double)x[i] * (double)x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if ((int)threadIdx.x < k)
      s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    part[blockIdx.x] = s[0];
}

/* fixed blocks and a fixed tree, then the blocks in order on the host: the same every run */
static double sumsq(const float *x, size_t n) {
  double host[SUMSQ_BLOCKS];
  sumsq_kernel<<<SUMSQ_BLOCKS, 256, 0, g.stream>>>(g.part, x, n);
  LAUNCHED();
  to_host(host, g.part, sizeof host);
  double s = 0.0;
  for (int i = 0; i < SUMSQ_BLOCKS; i++)
    s += host[i];
  return s;
}

static const colo_backend_t CUDA = {
    .name = "cuda",
    .device = 1,
    .allocator = &DEVICE_ALLOCATOR,
    .zero = zero,
    .copy = copy,
    .to_host = to_host,
    .from_host = from_host,
    .matmul_fwd = matmul_fwd,
    .matmul_bwd = matmul_bwd,
    .lmhead_fwd = lmhead_fwd,
    .lmhead_bwd = lmhead_bwd,
    .encoder_fwd = encoder_fwd,
    .encoder_bwd = encoder_bwd,
    .layernorm_fwd = layernorm_fwd,
    .layernorm_bwd = layernorm_bwd,
    .gelu_fwd = gelu_fwd,
    .gelu_bwd = gelu_bwd,
    .attention_fwd = attention_fwd,
    .attention_bwd = attention_bwd,
    .add = add,
    .crossentropy_fwd = crossentropy_fwd,
    .crossentropy_bwd = crossentropy_bwd,
    .vocab_max = vocab_max,
    .vocab_sumexp = vocab_sumexp,
    .vocab_target = vocab_target,
    .vocab_ce_bwd = vocab_ce_bwd,
    .adamw = adamw,
    .sumsq = sumsq,
    .scale = scale,
};

static cublasComputeType_t compute_type(int math) {
  switch (math) {
  case COLO_MATH_TF32:
    return CUBLAS_COMPUTE_32F_FAST_TF32;
  case COLO_MATH_BF16:
    return CUBLAS_COMPUTE_32F_FAST_16BF;
  case COLO_MATH_FP16:
    return CUBLAS_COMPUTE_32F_FAST_16F;
  default:
    return CUBLAS_COMPUTE_32F;
  }
}

/* The library's one entry point; colo_backend_cuda (cuda_loader.c) finds it with dlsym. */
extern "C" __attribute__((visibility("default"))) const colo_backend_t *
colo_backend_cuda_open(int ordinal, int math, char *err, size_t errlen) {
  g.compute = compute_type(math);
  if (g.ready)
    return &CUDA;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (e == cudaErrorInsufficientDriver)
      snprintf(err, errlen, "no usable GPU: no NVIDIA driver, or one older than CUDA %d.%d needs",
               CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    else
      snprintf(err, errlen, "no usable GPU: %s",
               e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees none");
    cudaGetLastError();
    return NULL;
  }
  if (ordinal < 0 || ordinal >= n) {
    snprintf(err, errlen, "CUDA device %d does not exist: this machine has %d", ordinal, n);
    return NULL;
  }
  if ((e = cudaSetDevice(ordinal)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking)) != cudaSuccess ||
      (e = cudaMalloc(&g.part, SUMSQ_BLOCKS * sizeof(double))) != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", ordinal, cudaGetErrorString(e));
    return NULL;
  }
  cublasStatus_t s = cublasCreate(&g.blas);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errlen, "cuBLAS on device %d: %s", ordinal, cublasGetStatusString(s));
    return NULL;
  }
  CKB(cublasSetStream(g.blas, g.stream));
  g.ready = 1;
  return &CUDA;
}
