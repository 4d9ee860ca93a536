/* The CUDA backend: the operation table on one GPU, in three storage types.
 *
 * Activations (and the matrices' compute copies) are stored as fp32, bf16 or fp16 (the run's
 * precision); every kernel loads them into fp32, computes in fp32 and rounds once when it stores,
 * as the CPU backend's reduced-precision tables do (cpu_lowp.c), which test_cuda checks them
 * against. Parameters, gradients, optimizer state, LayerNorm statistics and losses are fp32.
 *
 * Matrix products go through cuBLAS with fp32 accumulation: in fp32 (or TF32 tensor cores, on
 * request) for fp32 storage, on bf16 / fp16 tensor cores for those. A product's bias, and its bias
 * gradient, are cuBLASLt epilogues where cuBLASLt has them for the shape
 * (COLO_CUDA_EPILOGUES=0: never). Attention in 16-bit storage is
 * fused (cuda_flash.cu); in fp32, or with COLO_CUDA_ATTENTION=gemm, its products per head go
 * through cuBLAS too. A weight gradient is accumulated in fp32 straight from the 16-bit
 * operands. The rest are kernels of our own, each the CPU entry's arithmetic in the same order
 * where that order is cheap to keep: reductions over rows (bias and LayerNorm weight gradients,
 * the squared norm, the embedding's gradient) sum in a fixed order, so every result is the same
 * from run to run, and the fp32 embedding gradient is the CPU's bit for bit. Everything runs on
 * one stream; to_host waits for it.
 *
 * It is a shared library of its own, libcolo_cuda.so, that colo-train loads only for a GPU run
 * (cuda_loader.c). A CUDA or cuBLAS error ends the process with a message naming the call: the
 * table's entries return nothing, and a rank whose GPU failed cannot go on (its worker reports the
 * exit).
 *
 * Layouts are the CPU backend's (backend.h): row-major, weights w[in][out]. gemm below maps a
 * row-major product onto column-major cuBLAS by swapping the operands: C = op(A)·op(B) row-major
 * is Cᵀ = op(B)ᵀ·op(A)ᵀ column-major, and a row-major matrix read column-major is its transpose.
 */
#include <cub/device/device_radix_sort.cuh>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../core/nf4.h"
#include "cuda_common.cuh"

/* ---- the one GPU this process uses ---- */

/* scratch buffers, each grown on demand; an operation uses each slot at most once at a time */
enum { S_F32, S_ACT, S_PART, S_INT, S_PTR, S_BIAS, S_SLOTS };

static struct {
  int ready, ordinal;
  cudaStream_t stream;
  cublasHandle_t blas;
  cublasComputeType_t compute; /* fp32 storage's products: fp32, or TF32 tensor cores */
  void *scratch[S_SLOTS];
  size_t scratch_bytes[S_SLOTS];
  double *part;        /* sumsq: one double per block; Muon's norm after them */
  int fp32;            /* the run is fp32 (COLO_MATH_FP32): Muon's products too */
  cublasLtHandle_t lt; /* products with a bias, or a bias gradient, in their epilogue */
  void *lt_work;       /* its workspace, LT_WORK bytes */
  int lt_off;          /* COLO_CUDA_EPILOGUES=0: without them */
  size_t att_budget;   /* attention's scratch for one group of heads (head_group) */
  int flash;           /* the fused attention where it applies: 2 with async loads (the default,
                          COLO_CUDA_ATTENTION=flash-async), 1 loading each tile before it works on it
                          (flash); 0: the batched products (gemm) */
  int gelu_fused; /* the MLP's GELU in cuBLASLt's epilogues; COLO_CUDA_GELU_FUSION=0: without */
  int cudnn;      /* cuDNN's fused attention where it applies (cuda_cudnn.cu; not with documents or
                     windows), the fused kernels above elsewhere: CUDNN_BOTH_DET (the default
                     where cuDNN loads, and COLO_CUDA_ATTENTION=cudnn-det) its forward and its
                     deterministic backward, dQ a product of its own over dS kept in cuDNN's
                     workspace, so that every run's result is the same; CUDNN_BOTH (cudnn) its
                     backward that adds dQ up with atomics, so that two runs may differ in their
                     last bits */
  int cudnn_auto; /* cuDNN by default, not by name: where it has no plan, or its backward's
                     workspace is too large, colo's kernels run the attention (said once) */
} g;

static void *scratch(int slot, size_t bytes) {
  if (bytes > g.scratch_bytes[slot]) {
    CK(cudaStreamSynchronize(g.stream)); /* queued kernels may still use the old one */
    if (g.scratch[slot])
      CK(cudaFree(g.scratch[slot]));
    CK(cudaMalloc(&g.scratch[slot], bytes));
    g.scratch_bytes[slot] = bytes;
  }
  return g.scratch[slot];
}

template <class T> static void to_act(void *dst, const float *src, size_t n);
static void accumulate(float *dst, const float *src, size_t n);

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

static int owns(const void *p) {
  cudaPointerAttributes a;
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static void zero(void *p, size_t bytes) {
  CK(cudaMemsetAsync(p, 0, bytes, g.stream));
}

static void copy(void *dst, const void *src, size_t bytes) {
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream));
}

static void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                   size_t rows) {
  if (rows && width)
    CK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice,
                         g.stream));
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

/* row-major C[M][N] (ldc) = alpha·op(A)·op(B) + beta·C, op(A) M×K, op(B) K×N, with fp32
 * accumulation, computed as ct says */
static void gemm_ct(cublasComputeType_t ct, int ta, int tb, int M, int N, int K, float alpha,
                    const void *A, int lda, const void *B, int ldb, cudaDataType_t ab, float beta,
                    void *C, int ldc, cudaDataType_t c) {
  CKB(cublasGemmEx(g.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                   &alpha, B, ab, ldb, A, ab, lda, &beta, C, c, ldc, ct, CUBLAS_GEMM_DEFAULT));
}

/* the same, fp32 operands multiplying as g.compute says, 16-bit ones on tensor cores */
static void gemm(int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                 const void *B, int ldb, cudaDataType_t ab, float beta, void *C, int ldc,
                 cudaDataType_t c) {
  gemm_ct(ab == CUDA_R_32F ? g.compute : CUBLAS_COMPUTE_32F, ta, tb, M, N, K, alpha, A, lda, B, ldb,
          ab, beta, C, ldc, c);
}

/* ---- cuBLASLt: products that add a bias, or take a bias gradient, in their epilogue ----
 * A product with a bias otherwise writes the bias rows first and adds the product onto them, and
 * a bias gradient is a column sum of its own: a pass over the output each. Unless
 * COLO_CUDA_GELU_FUSION=0, the MLP's GELU is an epilogue too: forward, the product (plus bias)
 * goes to an auxiliary matrix (GELU's input, kept for the backward) and its GELU to the output;
 * backward, the input gradient's product is multiplied by GELU's derivative at the auxiliary
 * matrix before it is stored. Each spares a pass over a [N][4C] matrix. A plan per shape holds
 * cuBLASLt's descriptors and the algorithm its heuristic chose; when the heuristic has none (an
 * epilogue this cuBLASLt does not support for the shape), lt_gemm returns 0 and the caller does
 * without. The operands map as in gemm: row-major op(A)·op(B) is column-major op(B)ᵀ·op(A)ᵀ, so
 * in cuBLASLt's terms its matrix A is our B; a bias is added along our columns (its D's rows) and
 * BGRADA sums our B over the product's inner dimension. The auxiliary matrix has C's shape and
 * leading dimension, in C's type. */
enum { LT_BIAS = 1, LT_BGRAD, LT_GELU, LT_GELU_BIAS, LT_DGELU, LT_PLANS = 64 };
static const cublasLtEpilogue_t LT_EPILOGUE[] = {
    CUBLASLT_EPILOGUE_DEFAULT,  CUBLASLT_EPILOGUE_BIAS,          CUBLASLT_EPILOGUE_BGRADA,
    CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU};
static int lt_has_bias(int kind) {
  return kind == LT_BIAS || kind == LT_BGRAD || kind == LT_GELU_BIAS;
}
static int lt_has_aux(int kind) {
  return kind == LT_GELU || kind == LT_GELU_BIAS || kind == LT_DGELU;
}
static const size_t LT_WORK = 32u << 20;

struct lt_plan {
  int kind, ta, tb, M, N, K, lda, ldb, ldc, align, ok;
  cudaDataType_t ab, c;
  cublasComputeType_t ct;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
};
static lt_plan lt_plans[LT_PLANS];
static int lt_nplans;

/* the largest power of two up to 256 that divides the address */
static int align_of(const void *p) {
  int a = 256;
  while (a > 1 && (uintptr_t)p % (uintptr_t)a)
    a /= 2;
  return a;
}

template <class V>
static void lt_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V &v) {
  CKB(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}

static lt_plan *lt_plan_for(int kind, int ta, int tb, int M, int N, int K, int lda, int ldb,
                            int ldc, cudaDataType_t ab, cudaDataType_t c, int align,
                            const void *bias, const void *aux) {
  cublasComputeType_t ct = ab == CUDA_R_32F ? g.compute : CUBLAS_COMPUTE_32F;
  for (int i = 0; i < lt_nplans; i++) {
    lt_plan *p = &lt_plans[i];
    if (p->kind == kind && p->ta == ta && p->tb == tb && p->M == M && p->N == N && p->K == K &&
        p->lda == lda && p->ldb == ldb && p->ldc == ldc && p->ab == ab && p->c == c &&
        p->ct == ct && p->align == align)
      return p;
  }
  if (lt_nplans == LT_PLANS)
    return NULL; /* more shapes than a model has: the rest go without */
  lt_plan *p = &lt_plans[lt_nplans++];
  memset(p, 0, sizeof *p);
  p->kind = kind, p->ta = ta, p->tb = tb, p->M = M, p->N = N, p->K = K;
  p->lda = lda, p->ldb = ldb, p->ldc = ldc, p->align = align, p->ab = ab, p->c = c, p->ct = ct;
  CKB(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
  lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, tb ? CUBLAS_OP_T : CUBLAS_OP_N);
  lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, ta ? CUBLAS_OP_T : CUBLAS_OP_N);
  lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, LT_EPILOGUE[kind]);
  /* the heuristic reads the pointers' alignment */
  if (lt_has_bias(kind))
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (lt_has_aux(kind)) {
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)ldc);
  }
  CKB(cublasLtMatrixLayoutCreate(&p->la, ab, tb ? K : N, tb ? N : K, ldb));
  CKB(cublasLtMatrixLayoutCreate(&p->lb, ab, ta ? M : K, ta ? K : M, lda));
  CKB(cublasLtMatrixLayoutCreate(&p->lc, c, N, M, ldc));
  cublasLtMatmulPreference_t pref;
  CKB(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t work = LT_WORK;
  uint32_t al = (uint32_t)align;
  CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &work,
                                           sizeof work));
  cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; i++)
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g.lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                                     pref, 1, &res, &found);
  CKB(cublasLtMatmulPreferenceDestroy(pref));
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    p->algo = res.algo;
    p->ok = 1;
  }
  return p;
}

/* gemm's product with an epilogue: LT_BIAS adds bias[N] (of C's type) to every row of C; LT_BGRAD
 * also writes Σ_k op(B)[k][n] into bias[N] (fp32; C must be fp32); LT_GELU (LT_GELU_BIAS: after
 * adding bias) writes the result to aux and its GELU to C; LT_DGELU multiplies the result by
 * GELU's derivative at aux (beta 0). 0: not done, do without. */
static int lt_gemm(int kind, const void *bias, const void *aux, int ta, int tb, int M, int N, int K,
                   const void *A, int lda, const void *B, int ldb, cudaDataType_t ab, float beta,
                   void *C, int ldc, cudaDataType_t c) {
  if (g.lt_off || (lt_has_aux(kind) && ldc % 8)) /* cuBLASLt's rule for the auxiliary matrix */
    return 0;
  int align = align_of(A);
  const void *ptrs[] = {B, C, bias, aux};
  for (int i = 0; i < 4; i++)
    if (ptrs[i])
      align = align_of(ptrs[i]) < align ? align_of(ptrs[i]) : align;
  lt_plan *p = lt_plan_for(kind, ta, tb, M, N, K, lda, ldb, ldc, ab, c, align, bias, aux);
  if (!p || !p->ok)
    return 0;
  if (lt_has_bias(kind))
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (lt_has_aux(kind))
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  float alpha = 1.0f;
  cublasStatus_t st = cublasLtMatmul(g.lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C,
                                     p->lc, &p->algo, g.lt_work, LT_WORK, g.stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) { /* the heuristic offered what the call refuses */
    p->ok = 0;
    return 0;
  }
  CKB(st);
  return 1;
}

/* the same for `batch` products whose operands are listed in device arrays of pointers */
static void gemm_batched(int ta, int tb, int M, int N, int K, float alpha, void *const *A, int lda,
                         void *const *B, int ldb, cudaDataType_t ab, float beta, void *const *C,
                         int ldc, cudaDataType_t c, int batch) {
  cublasComputeType_t ct = ab == CUDA_R_32F ? g.compute : CUBLAS_COMPUTE_32F;
  CKB(cublasGemmBatchedEx(g.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                          M, K, &alpha, (const void *const *)B, ab, ldb, (const void *const *)A, ab,
                          lda, &beta, C, c, ldc, batch, ct, CUBLAS_GEMM_DEFAULT));
}

template <class T> __global__ static void rows_set_kernel(T *out, const float *b, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * OC;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = st<T>(b[i % OC]);
}

/* Column sums in a fixed order: partial[y][c] sums rows [y·per, (y+1)·per) of column c, and,
 * when inp is given, partial[COL_PARTS + y][c] the same rows weighted by xhat = (inp − mean)·rstd
 * (LayerNorm's weight gradient, beside its bias gradient: one pass over src for both; mean NULL:
 * RMSNorm's, xhat = inp·rstd) */
#define COL_PARTS 32
template <class T>
__global__ static void colsum_part_kernel(float *partial, const T *src, const T *inp,
                                          const float *mean, const float *rstd, int N, int C) {
  __shared__ float s[2][8][33];
  int c = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y;
  int per = (N + COL_PARTS - 1) / COL_PARTS, lo = y * per, hi = min(lo + per, N);
  float acc = 0.0f, accw = 0.0f;
  if (c < C)
    for (int n = lo + threadIdx.y; n < hi; n += 8) {
      float d = ld(src[(size_t)n * C + c]);
      acc += d;
      if (inp)
        accw += d * (ld(inp[(size_t)n * C + c]) - (mean ? mean[n] : 0.0f)) * rstd[n];
    }
  s[0][threadIdx.y][threadIdx.x] = acc;
  s[1][threadIdx.y][threadIdx.x] = accw;
  __syncthreads();
  if (threadIdx.y < 2 && c < C && (threadIdx.y == 0 || inp)) {
    float t = 0.0f;
    for (int k = 0; k < 8; k++)
      t += s[threadIdx.y][k][threadIdx.x];
    partial[((size_t)threadIdx.y * COL_PARTS + y) * C + c] = t;
  }
}

__global__ static void colsum_finish_kernel(float *dst, const float *partial, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C || !dst)
    return;
  float t = 0.0f;
  for (int y = 0; y < COL_PARTS; y++)
    t += partial[(size_t)y * C + c];
  dst[c] += t;
}

/* dst[C] += Σ_n src[n][C], and, when inp is given, wdst[C] += the same weighted by LayerNorm's
 * xhat (either destination may be NULL) */
template <class T>
static void colsum_into(float *dst, float *wdst, const T *src, const T *inp, const float *mean,
                        const float *rstd, int N, int C) {
  float *partial = (float *)scratch(S_PART, (size_t)2 * COL_PARTS * C * sizeof(float));
  dim3 grid((C + 31) / 32, COL_PARTS), block(32, 8);
  colsum_part_kernel<T><<<grid, block, 0, g.stream>>>(partial, src, inp, mean, rstd, N, C);
  LAUNCHED();
  colsum_finish_kernel<<<(C + 255) / 256, 256, 0, g.stream>>>(dst, partial, C);
  LAUNCHED();
  if (inp && wdst) {
    colsum_finish_kernel<<<(C + 255) / 256, 256, 0, g.stream>>>(wdst,
                                                                partial + (size_t)COL_PARTS * C, C);
    LAUNCHED();
  }
}

/* an epilogue's bias is of the output's type: b rounded, as rows_set_kernel's rows are */
template <class T> static const void *bias_act(const float *b, int OC) {
  if (sizeof(T) == sizeof(float))
    return b;
  void *bt = scratch(S_BIAS, (size_t)OC * sizeof(T));
  to_act<T>(bt, b, (size_t)OC);
  return bt;
}

template <class T>
static void matmul_fwd(void *out, const void *inp, const void *w, const float *b, int N, int C,
                       int OC) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  if (b) {
    if (lt_gemm(LT_BIAS, bias_act<T>(b, OC), NULL, 0, 0, N, OC, C, inp, C, w, OC, t, 0.0f, out, OC,
                t))
      return;
    rows_set_kernel<T><<<blocks_for((size_t)N * OC, 256), 256, 0, g.stream>>>((T *)out, b, N, OC);
    LAUNCHED();
  }
  gemm(0, 0, N, OC, C, 1.0f, inp, C, w, OC, t, b ? 1.0f : 0.0f, out, OC, t);
}

template <class T>
static void matmul_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                       const void *w, int N, int C, int OC) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  if (dinp) /* dinp[N][C] = dout[N][OC] · w[C][OC]ᵀ */
    gemm(0, 1, N, C, OC, 1.0f, dout, OC, w, OC, t, 0.0f, dinp, C, t);
  if (dw && db) { /* and db[OC] += Σ_rows dout, in the product's epilogue */
    float *part = (float *)scratch(S_BIAS, (size_t)OC * sizeof(float));
    if (lt_gemm(LT_BGRAD, part, NULL, 1, 0, C, OC, N, inp, C, dout, OC, t, 1.0f, dw, OC,
                CUDA_R_32F)) {
      accumulate(db, part, (size_t)OC);
      return;
    }
  }
  if (dw) /* dw[C][OC] += inp[N][C]ᵀ · dout[N][OC], accumulated in fp32 */
    gemm(1, 0, C, OC, N, 1.0f, inp, C, dout, OC, t, 1.0f, dw, OC, CUDA_R_32F);
  if (db)
    colsum_into<T>(db, NULL, (const T *)dout, NULL, NULL, NULL, N, OC);
}

template <class T>
static void lmhead_fwd(void *out, const void *inp, const void *wte, int N, int C, int V) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  gemm(0, 1, N, V, C, 1.0f, inp, C, wte, C, t, 0.0f, out, V, t);
}

template <class T>
static void lmhead_bwd(void *dinp, float *dwte, const void *dout, const void *inp, const void *wte,
                       int N, int C, int V) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  if (dinp) /* dinp[N][C] = dout[N][V] · wte[V][C] */
    gemm(0, 0, N, C, V, 1.0f, dout, V, wte, C, t, 0.0f, dinp, C, t);
  if (dwte) /* dwte[V][C] += dout[N][V]ᵀ · inp[N][C] */
    gemm(1, 0, V, C, N, 1.0f, dout, V, inp, C, t, 1.0f, dwte, C, CUDA_R_32F);
}

template <class T> __global__ static void to_act_kernel(T *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = st<T>(src[i]);
}

template <class T> static void to_act(void *dst, const float *src, size_t n) {
  to_act_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)dst, src, n);
  LAUNCHED();
}

template <class T> __global__ static void to_f32_kernel(float *dst, const T *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = ld(src[i]);
}

template <class T> static void to_f32(float *dst, const void *src, size_t n) {
  to_f32_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>(dst, (const T *)src, n);
  LAUNCHED();
}

/* NF4's levels, core/nf4.c's */
__constant__ static float nf4_levels[16] = COLO_NF4_LEVELS;

/* A 32×32 tile of w[rows][cols] from codes in [cols][rows] order: read along the codes (threadIdx.x
 * over rows) into shared memory, written along w's rows (threadIdx.x over cols), both coalesced.
 * Blocks of 32×8 threads. */
template <class T>
__global__ static void dequant_nf4_kernel(T *w, const uint8_t *codes, const float *absmax, int rows,
                                          int cols) {
  __shared__ float tile[32][33];
  int r0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
  for (int j = threadIdx.y; j < 32; j += 8) {
    int r = r0 + threadIdx.x, c = c0 + j;
    if (r < rows && c < cols) {
      size_t i = (size_t)c * rows + r;
      int b = codes[i / 2];
      tile[j][threadIdx.x] = nf4_levels[i % 2 ? b & 15 : b >> 4] * absmax[i / 64];
    }
  }
  __syncthreads();
  for (int j = threadIdx.y; j < 32; j += 8) {
    int r = r0 + j, c = c0 + threadIdx.x;
    if (r < rows && c < cols)
      w[(size_t)r * cols + c] = st<T>(tile[threadIdx.x][j]);
  }
}

template <class T>
static void dequant_nf4(void *w, const uint8_t *codes, const float *absmax, int rows, int cols) {
  dim3 grid((unsigned)(rows + 31) / 32, (unsigned)(cols + 31) / 32), block(32, 8);
  dequant_nf4_kernel<T><<<grid, block, 0, g.stream>>>((T *)w, codes, absmax, rows, cols);
  LAUNCHED();
}

/* a double-quantized NF4 matrix's scales: one thread each, the product and the sum rounded
 * apart (no contraction into one fused multiply-add), as core/nf4.c computes them */
__constant__ static float dq_map[256] = COLO_NF4_DQ_MAP;

__global__ static void dequant_scales_kernel(float *absmax, const uint8_t *q, const float *stats,
                                             int blocks) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < blocks)
    absmax[b] = __fadd_rn(__fmul_rn(dq_map[q[b]], stats[b / COLO_NF4_DQ_BLOCK]),
                          stats[(blocks + COLO_NF4_DQ_BLOCK - 1) / COLO_NF4_DQ_BLOCK]);
}

static void dequant_scales(float *absmax, const uint8_t *q, const float *stats, int blocks) {
  if (blocks <= 0)
    return;
  dequant_scales_kernel<<<(unsigned)(blocks + 255) / 256, 256, 0, g.stream>>>(absmax, q, stats,
                                                                              blocks);
  LAUNCHED();
}

/* ---- embeddings ---- */

template <class T>
__global__ static void encoder_fwd_kernel(T *out, const int *tokens, const float *wte,
                                          const float *wpe, int N, int T_, int C, int v0, int v1,
                                          const int *pos) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int row = (int)(i / C), c = (int)(i % C), tok = tokens[row];
    float e = tok >= v0 && tok < v1 ? wte[(size_t)(tok - v0) * C + c] : 0.0f;
    int at = pos ? pos[row] : row % T_;
    out[i] = st<T>(e + (wpe ? wpe[(size_t)at * C + c] : 0.0f));
  }
}

template <class T>
static void encoder_fwd(void *out, const int *tokens, const float *wte, const float *wpe, int B,
                        int T_, int C, int v0, int v1, const int *pos) {
  size_t n = (size_t)B * T_ * C;
  encoder_fwd_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)out, tokens, wte, wpe,
                                                                  B * T_, T_, C, v0, v1, pos);
  LAUNCHED();
}

template <class T>
__global__ static void embed_fwd_kernel(T *out, const int *tokens, const T *table, int N, int C,
                                        int V) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int tok = tokens[i / C];
    out[i] = tok >= 0 && tok < V ? table[(size_t)tok * C + i % C] : st<T>(0.0f);
  }
}

template <class T>
static void embed_fwd(void *out, const int *tokens, const void *table, int N, int C, int V) {
  size_t n = (size_t)N * C;
  embed_fwd_kernel<T>
      <<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)out, tokens, (const T *)table, N, C, V);
  LAUNCHED();
}

template <class T>
__global__ static void dropout_kernel(T *out, const T *inp, int N, int C, uint64_t key,
                                      uint64_t row0, int col0, uint32_t thresh, float scale) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int keep = colo_dropout_keep(key, row0 + i / C, (uint64_t)col0 + i % C, thresh);
    out[i] = st<T>(ld(inp[i]) * (keep ? scale : 0.0f));
  }
}

template <class T>
static void dropout(void *out, const void *inp, int N, int C, uint64_t key, uint64_t row0, int col0,
                    uint32_t thresh, float scale) {
  size_t n = (size_t)N * C;
  dropout_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)out, (const T *)inp, N, C, key,
                                                              row0, col0, thresh, scale);
  LAUNCHED();
}

/* NEFTune's noise: the product rounded, then the sum (no fused multiply-add), as the host does */
template <class T>
__global__ static void noise_kernel(T *x, int N, int C, uint64_t key, uint64_t row0, float mag) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = st<T>(__fadd_rn(ld(x[i]), __fmul_rn(mag, colo_noise_unit(key, row0 + i / C, i % C))));
}

template <class T>
static void noise(void *x, int N, int C, uint64_t key, uint64_t row0, float mag) {
  size_t n = (size_t)N * C;
  noise_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)x, N, C, key, row0, mag);
  LAUNCHED();
}

/* a loss's gradient weighted by rows: the product in fp32, rounded once */
template <class T> __global__ static void scale_rows_kernel(T *x, const float *w, int N, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = st<T>(__fmul_rn(ld(x[i]), w[i / C]));
}

template <class T> static void scale_rows(void *x, const float *w, int N, int C) {
  size_t n = (size_t)N * C;
  scale_rows_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)x, w, N, C);
  LAUNCHED();
}

/* DoRA (backend.h). dora_norm: a block per 32 columns j, its 32 × 8 threads walking the rows i
 * in tiles of 32; each tile of dt[j][i] goes through shared memory, so that both w's rows and
 * dt's are read along their length. Each column's sum runs over i in the same order in every
 * run (thread ty takes rows ty, ty + 8, ..., then the 8 partial sums are added in order). */
template <class T>
__global__ static void dora_norm_kernel(float *sq, const T *w, const T *dt, int in, int out) {
  __shared__ float tile[32][33];
  __shared__ float part[8][32];
  int tx = threadIdx.x, ty = threadIdx.y, j0 = blockIdx.x * 32, j = j0 + tx;
  float acc = 0.0f;
  for (int i0 = 0; i0 < in; i0 += 32) {
    for (int r = ty; r < 32; r += 8) { /* dt[j0 + r][i0 + tx] */
      int jj = j0 + r, ii = i0 + tx;
      tile[r][tx] = jj < out && ii < in ? ld(dt[(size_t)jj * in + ii]) : 0.0f;
    }
    __syncthreads();
    if (j < out)
      for (int ii = ty; ii < 32 && i0 + ii < in; ii += 8) {
        float d = ld(w[(size_t)(i0 + ii) * out + j]) + tile[tx][ii];
        acc += d * d;
      }
    __syncthreads();
  }
  part[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && j < out) {
    float s = 0.0f;
    for (int k = 0; k < 8; k++)
      s += part[k][tx];
    sq[j] = s;
  }
}

template <class T>
static void dora_norm(float *sq, const void *w, const void *dt, int in, int out) {
  dora_norm_kernel<T>
      <<<(out + 31) / 32, dim3(32, 8), 0, g.stream>>>(sq, (const T *)w, (const T *)dt, in, out);
  LAUNCHED();
}

/* dora_scale's out = inp · g + b, or (add) dora_add's out += inp · (g − 1) + b: the CPU's
 * expressions */
template <class T>
__global__ static void dora_rescale_kernel(T *out, const T *inp, const float *mag, const float *sq,
                                           const float *b, int N, int C, int add) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)N * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    int c = (int)(i % C);
    float g = mag[c] / sqrtf(sq[c]), bias = b ? b[c] : 0.0f;
    out[i] = st<T>(add ? ld(out[i]) + ld(inp[i]) * (g - 1.0f) + bias : ld(inp[i]) * g + bias);
  }
}

template <class T>
static void dora_rescale(void *out, const void *inp, const float *mag, const float *sq,
                         const float *b, int N, int C, int add) {
  size_t n = (size_t)N * C;
  dora_rescale_kernel<T>
      <<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)out, (const T *)inp, mag, sq, b, N, C, add);
  LAUNCHED();
}

template <class T>
static void dora_scale(void *out, const void *inp, const float *mag, const float *sq,
                       const float *b, int N, int C) {
  dora_rescale<T>(out, inp, mag, sq, b, N, C, 0);
}

template <class T>
static void dora_add(void *out, const void *inp, const float *mag, const float *sq, const float *b,
                     int N, int C) {
  dora_rescale<T>(out, inp, mag, sq, b, N, C, 1);
}

/* a block per 32 columns, its 32 × 8 threads over the rows as dora_norm's */
template <class T>
__global__ static void dora_dmag_kernel(float *dmag, const T *dout, const T *z, const float *sq,
                                        int N, int C) {
  __shared__ float part[8][32];
  int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
  float acc = 0.0f;
  if (c < C)
    for (int n = ty; n < N; n += 8)
      acc += ld(dout[(size_t)n * C + c]) * ld(z[(size_t)n * C + c]);
  part[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && c < C) {
    float s = 0.0f;
    for (int k = 0; k < 8; k++)
      s += part[k][tx];
    dmag[c] += s / sqrtf(sq[c]);
  }
}

template <class T>
static void dora_dmag(float *dmag, const void *dout, const void *z, const float *sq, int N, int C) {
  dora_dmag_kernel<T>
      <<<(C + 31) / 32, dim3(32, 8), 0, g.stream>>>(dmag, (const T *)dout, (const T *)z, sq, N, C);
  LAUNCHED();
}

/* table[key]: a block per row of the rows sorted by key; the block of a key's first row adds
 * that key's rows, its threads over channels, in increasing order (the sort is stable and the
 * rows came in order), which is the CPU's order: the fp32 result is the CPU's bit for bit. Keys
 * outside the table (V, after the sort) are left alone. */
template <class T>
__global__ static void add_sorted_rows_kernel(float *table, const T *dout, const int *skey,
                                              const int *rows, int N, int V, int C) {
  int i = blockIdx.x, key = skey[i];
  if (key == V || (i > 0 && skey[i - 1] == key))
    return;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = table[(size_t)key * C + c];
    for (int r = i; r < N && skey[r] == key; r++)
      acc += ld(dout[(size_t)rows[r] * C + c]);
    table[(size_t)key * C + c] = acc;
  }
}

/* each row's key within [lo, hi) less lo, else hi − lo; and the rows 0 … N−1 */
__global__ static void keys_to_sort_kernel(int *key, int *row, const int *keys, int N, int lo,
                                           int hi) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < N) {
    int k = keys[n];
    key[n] = k >= lo && k < hi ? k - lo : hi - lo;
    row[n] = n;
  }
}

/* dwpe[t][c]: the B rows of position t in order of b, as the CPU adds them */
template <class T>
__global__ static void encoder_bwd_wpe_kernel(float *dwpe, const T *dout, int B, int T_, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)T_ * C;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++)
      acc += ld(dout[(size_t)b * T_ * C + i]);
    dwpe[i] = acc;
  }
}

/* table[key − lo] += each row n of dout[N][C] whose key (keys[n], in backend memory) is in
 * [lo, hi): the rows grouped by key on the GPU by CUB's stable radix sort, then the kernel above.
 * (It sorted them on the host until the H200's engine_ops showed the copy of the keys down and
 * the grouping up taking the embedding's backward to 0.30 ms at 124M, B=8: 41.7 GB/s.) */
template <class T>
static void add_rows_by_key(float *table, const void *dout, const int *keys, int N, int lo, int hi,
                            int C) {
  int V = hi - lo, bits = 1;
  while (bits < 31 && (1 << bits) <= V) /* V itself, the mark of a key outside, must fit */
    bits++;
  size_t tmp = 0, ints = ((size_t)4 * N + 63) & ~(size_t)63; /* 256-byte aligned after them */
  CK(cub::DeviceRadixSort::SortPairs(NULL, tmp, (const int *)NULL, (int *)NULL, (const int *)NULL,
                                     (int *)NULL, N, 0, bits, g.stream));
  int *key = (int *)scratch(S_INT, ints * sizeof(int) + tmp), *row = key + N, *skey = row + N,
      *srow = skey + N;
  keys_to_sort_kernel<<<(N + 255) / 256, 256, 0, g.stream>>>(key, row, keys, N, lo, hi);
  LAUNCHED();
  CK(cub::DeviceRadixSort::SortPairs(key + ints, tmp, key, skey, row, srow, N, 0, bits, g.stream));
  add_sorted_rows_kernel<T><<<N, 256, 0, g.stream>>>(table, (const T *)dout, skey, srow, N, V, C);
  LAUNCHED();
}

template <class T>
static void encoder_bwd(float *dwte, float *dwpe, const void *dout, const int *tokens, int B,
                        int T_, int C, int v0, int v1, const int *pos) {
  int N = B * T_;
  if (dwpe && pos) { /* documents: the rows of each position, wherever they are */
    add_rows_by_key<T>(dwpe, dout, pos, N, 0, T_, C);
  } else if (dwpe) {
    encoder_bwd_wpe_kernel<T>
        <<<blocks_for((size_t)T_ * C, 256), 256, 0, g.stream>>>(dwpe, (const T *)dout, B, T_, C);
    LAUNCHED();
  }
  if (dwte && v1 > v0)
    add_rows_by_key<T>(dwte, dout, tokens, N, v0, v1, C);
}

/* ---- LayerNorm: a warp per row ---- */

/* f(i, x[i], y[i]) for each value of a row that thread `lane` of `nt` owns (y may be NULL: 0 is
 * passed): 16-byte packs when vec, else one at a time */
template <class T, class F>
__device__ __forceinline__ static void lane_each(const T *x, const T *y, int C, int lane, int nt,
                                                 int vec, F f) {
  constexpr int P = pack<T>::n;
  if (vec) {
    for (int i = lane * P; i < C; i += nt * P) {
      pack<T> a = ldp(x + i), b;
      if (y)
        b = ldp(y + i);
#pragma unroll
      for (int k = 0; k < P; k++)
        f(i + k, ld(a.v[k]), y ? ld(b.v[k]) : 0.0f);
    }
  } else {
    for (int i = lane; i < C; i += nt)
      f(i, ld(x[i]), y ? ld(y[i]) : 0.0f);
  }
}

/* dst[i] = f(i, x[i], y[i], dst[i]) over this lane's values of a row (y may be NULL; dst's old
 * values are read only when old is set; dst may be x) */
template <class T, class F>
__device__ __forceinline__ static void lane_map(T *dst, const T *x, const T *y, int old, int C,
                                                int lane, int nt, int vec, F f) {
  constexpr int P = pack<T>::n;
  if (vec) {
    for (int i = lane * P; i < C; i += nt * P) {
      pack<T> a = ldp(x + i), b, o;
      if (y)
        b = ldp(y + i);
      if (old)
        o = ldp(dst + i);
#pragma unroll
      for (int k = 0; k < P; k++)
        o.v[k] = st<T>(f(i + k, ld(a.v[k]), y ? ld(b.v[k]) : 0.0f, old ? ld(o.v[k]) : 0.0f));
      stp(dst + i, o);
    }
  } else {
    for (int i = lane; i < C; i += nt)
      dst[i] = st<T>(f(i, ld(x[i]), y ? ld(y[i]) : 0.0f, old ? ld(dst[i]) : 0.0f));
  }
}

template <class T>
__global__ static void layernorm_fwd_kernel(T *out, float *mean, float *rstd, const T *inp,
                                            const float *w, const float *b, int N, int C, int vec) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const T *x = inp + (size_t)row * C;
  float s = 0.0f;
  const T *none = NULL;
  lane_each(x, none, C, lane, 32, vec, [&](int, float xi, float) { s += xi; });
  float m = warp_sum(s) / (float)C, v = 0.0f;
  lane_each(x, none, C, lane, 32, vec, [&](int, float xi, float) { v += (xi - m) * (xi - m); });
  v = warp_sum(v) / (float)C;
  float r = 1.0f / sqrtf(v + 1e-5f);
  lane_map(out + (size_t)row * C, x, none, 0, C, lane, 32, vec,
           [&](int i, float xi, float, float) { return (xi - m) * r * w[i] + b[i]; });
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

/* A row of up to K·32 packs read once into registers, and the fp32 weights read 16 bytes at a
 * time: the kernels above read it three times (twice from cache) and the weights one value at
 * a time, and reached 1.3 TB/s forward and 1.0 backward on an H200 at GPT-2 124M's shapes (these:
 * 0.009 and 0.030 ms against 0.019 and 0.037). Each lane owns the values lane_each gives it, in
 * the same order, so the sums, and every output, should be the same bits: test_cuda compares the
 * two on weights one value off a 16-byte boundary, where the kernels above run (not yet on a
 * GPU). For 16-byte rows (vec) with 16-byte-aligned weights. */
template <class T> __device__ __forceinline__ static void ld_f32(float *dst, const float *src) {
  constexpr int P = pack<T>::n;
#pragma unroll
  for (int q = 0; q < P; q += 4) {
    float4 a = *(const float4 *)(src + q);
    dst[q] = a.x, dst[q + 1] = a.y, dst[q + 2] = a.z, dst[q + 3] = a.w;
  }
}

template <class T, int K>
__global__ static void layernorm_fwd_reg_kernel(T *out, float *mean, float *rstd, const T *inp,
                                                const float *w, const float *b, int N, int C) {
  constexpr int P = pack<T>::n;
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const T *x = inp + (size_t)row * C;
  float v[K][P], s = 0.0f;
#pragma unroll
  for (int k = 0; k < K; k++) {
    int i = (k * 32 + lane) * P;
    if (i < C) {
      pack<T> a = ldp(x + i);
#pragma unroll
      for (int p = 0; p < P; p++) {
        v[k][p] = ld(a.v[p]);
        s += v[k][p];
      }
    }
  }
  float m = warp_sum(s) / (float)C, q = 0.0f;
#pragma unroll
  for (int k = 0; k < K; k++)
    if ((k * 32 + lane) * P < C)
#pragma unroll
      for (int p = 0; p < P; p++)
        q += (v[k][p] - m) * (v[k][p] - m);
  float r = 1.0f / sqrtf(warp_sum(q) / (float)C + 1e-5f);
#pragma unroll
  for (int k = 0; k < K; k++) {
    int i = (k * 32 + lane) * P;
    if (i < C) {
      float wv[P], bv[P];
      ld_f32<T>(wv, w + i);
      ld_f32<T>(bv, b + i);
      pack<T> o;
#pragma unroll
      for (int p = 0; p < P; p++)
        o.v[p] = st<T>((v[k][p] - m) * r * wv[p] + bv[p]);
      stp(out + (size_t)row * C + i, o);
    }
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <class T, int K>
__global__ static void layernorm_bwd_reg_kernel(T *dinp, const T *dout, const T *inp,
                                                const float *w, const float *mean,
                                                const float *rstd, int N, int C) {
  constexpr int P = pack<T>::n;
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const T *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
  float m = mean[row], r = rstd[row], dm = 0.0f, dnm = 0.0f;
  float xh[K][P], dn[K][P];
#pragma unroll
  for (int k = 0; k < K; k++) {
    int i = (k * 32 + lane) * P;
    if (i < C) {
      pack<T> a = ldp(x + i), e = ldp(d + i);
      float wv[P];
      ld_f32<T>(wv, w + i);
#pragma unroll
      for (int p = 0; p < P; p++) {
        xh[k][p] = (ld(a.v[p]) - m) * r;
        dn[k][p] = wv[p] * ld(e.v[p]);
        dm += dn[k][p];
        dnm += dn[k][p] * xh[k][p];
      }
    }
  }
  dm = warp_sum(dm) / (float)C;
  dnm = warp_sum(dnm) / (float)C;
#pragma unroll
  for (int k = 0; k < K; k++) {
    int i = (k * 32 + lane) * P;
    if (i < C) {
      T *o = dinp + (size_t)row * C + i;
      pack<T> old = ldp(o), res;
#pragma unroll
      for (int p = 0; p < P; p++)
        res.v[p] = st<T>(ld(old.v[p]) + (dn[k][p] - dm - xh[k][p] * dnm) * r);
      stp(o, res);
    }
  }
}

/* the register kernels' K for a row of C (0: the row does not fit, or is not in packs) */
template <class T> static int ln_reg_k(int C, int vec, const float *w, const float *b) {
  if (!vec || ((uintptr_t)w | (uintptr_t)b) % 16)
    return 0;
  int packs = (C / pack<T>::n + 31) / 32; /* a lane's */
  return packs <= 4 ? 4 : packs <= 8 ? 8 : 0;
}

template <class T>
static void layernorm_fwd(void *out, float *mean, float *rstd, const void *inp, const float *w,
                          const float *b, int N, int C) {
  int vec = vec_ok<T>((size_t)C, out, inp), k = ln_reg_k<T>(C, vec, w, b);
  if (k == 4)
    layernorm_fwd_reg_kernel<T, 4>
        <<<(N + 7) / 8, 256, 0, g.stream>>>((T *)out, mean, rstd, (const T *)inp, w, b, N, C);
  else if (k == 8)
    layernorm_fwd_reg_kernel<T, 8>
        <<<(N + 7) / 8, 256, 0, g.stream>>>((T *)out, mean, rstd, (const T *)inp, w, b, N, C);
  else
    layernorm_fwd_kernel<T>
        <<<(N + 7) / 8, 256, 0, g.stream>>>((T *)out, mean, rstd, (const T *)inp, w, b, N, C, vec);
  LAUNCHED();
}

template <class T>
__global__ static void layernorm_bwd_kernel(T *dinp, const T *dout, const T *inp, const float *w,
                                            const float *mean, const float *rstd, int N, int C,
                                            int vec) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const T *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
  float m = mean[row], r = rstd[row], dm = 0.0f, dnm = 0.0f;
  lane_each(x, d, C, lane, 32, vec, [&](int i, float xi, float di) {
    float xh = (xi - m) * r, dn = w[i] * di;
    dm += dn;
    dnm += dn * xh;
  });
  dm = warp_sum(dm) / (float)C;
  dnm = warp_sum(dnm) / (float)C;
  lane_map(dinp + (size_t)row * C, x, d, 1, C, lane, 32, vec,
           [&](int i, float xi, float di, float old) {
             float xh = (xi - m) * r, dn = w[i] * di;
             return old + (dn - dm - xh * dnm) * r;
           });
}

template <class T>
static void layernorm_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C) {
  if (dinp) {
    int vec = vec_ok<T>((size_t)C, dinp, dout, inp), k = ln_reg_k<T>(C, vec, w, w);
    if (k == 4)
      layernorm_bwd_reg_kernel<T, 4><<<(N + 7) / 8, 256, 0, g.stream>>>(
          (T *)dinp, (const T *)dout, (const T *)inp, w, mean, rstd, N, C);
    else if (k == 8)
      layernorm_bwd_reg_kernel<T, 8><<<(N + 7) / 8, 256, 0, g.stream>>>(
          (T *)dinp, (const T *)dout, (const T *)inp, w, mean, rstd, N, C);
    else
      layernorm_bwd_kernel<T><<<(N + 7) / 8, 256, 0, g.stream>>>(
          (T *)dinp, (const T *)dout, (const T *)inp, w, mean, rstd, N, C, vec);
    LAUNCHED();
  }
  if (dw || db)
    colsum_into<T>(db, dw, (const T *)dout, dw ? (const T *)inp : NULL, mean, rstd, N, C);
}

/* ---- RMSNorm: a warp per row, as LayerNorm ---- */

template <class T>
__global__ static void rmsnorm_fwd_kernel(T *out, float *rstd, const T *inp, const float *w, int N,
                                          int C, int vec, float eps) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const T *x = inp + (size_t)row * C;
  const T *none = NULL;
  float ss = 0.0f;
  lane_each(x, none, C, lane, 32, vec, [&](int, float xi, float) { ss += xi * xi; });
  float r = 1.0f / sqrtf(warp_sum(ss) / (float)C + eps);
  lane_map(out + (size_t)row * C, x, none, 0, C, lane, 32, vec,
           [&](int i, float xi, float, float) { return xi * r * w[i]; });
  if (lane == 0)
    rstd[row] = r;
}

template <class T>
static void rmsnorm_fwd(void *out, float *rstd, const void *inp, const float *w, int N, int C,
                        float eps) {
  rmsnorm_fwd_kernel<T><<<(N + 7) / 8, 256, 0, g.stream>>>((T *)out, rstd, (const T *)inp, w, N, C,
                                                           vec_ok<T>((size_t)C, out, inp), eps);
  LAUNCHED();
}

template <class T>
__global__ static void rmsnorm_bwd_kernel(T *dinp, const T *dout, const T *inp, const float *w,
                                          const float *rstd, int N, int C, int vec) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N)
    return;
  const T *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
  float r = rstd[row], dot = 0.0f;
  lane_each(x, d, C, lane, 32, vec, [&](int i, float xi, float di) { dot += w[i] * di * xi; });
  float k = r * r * r * warp_sum(dot) / (float)C;
  lane_map(dinp + (size_t)row * C, x, d, 1, C, lane, 32, vec,
           [&](int i, float xi, float di, float old) { return old + r * w[i] * di - k * xi; });
}

template <class T>
static void rmsnorm_bwd(void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                        const float *rstd, int N, int C) {
  if (dinp) {
    rmsnorm_bwd_kernel<T><<<(N + 7) / 8, 256, 0, g.stream>>>((T *)dinp, (const T *)dout,
                                                             (const T *)inp, w, rstd, N, C,
                                                             vec_ok<T>((size_t)C, dinp, dout, inp));
    LAUNCHED();
  }
  if (dw)
    colsum_into<T>(NULL, dw, (const T *)dout, (const T *)inp, NULL, rstd, N, C);
}

/* ---- QK-norm: a warp per head of a row, as RMSNorm's; the weights' sums as colsum's ---- */

/* a warp's head: its index among the N·NHk, its row n and place h in the row; 0 past the end */
__device__ static int qk_head(int N, int NHk, size_t *head, size_t *n, int *h) {
  *head = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (*head >= (size_t)N * NHk)
    return 0;
  *n = *head / NHk;
  *h = (int)(*head % NHk);
  return 1;
}

template <class T>
__global__ static void qk_norm_fwd_kernel(T *x, T *raw, float *rstd, const float *wq,
                                          const float *wk, int N, int W, int NQ, int NK, int hs,
                                          float eps) {
  size_t head, n;
  int h, lane = threadIdx.x % 32;
  if (!qk_head(N, NQ + NK, &head, &n, &h))
    return;
  T *v = x + n * W + (size_t)h * hs, *r = raw + head * hs;
  const float *w = h < NQ ? wq : wk;
  float ss = 0.0f;
  for (int i = lane; i < hs; i += 32) {
    float xi = ld(v[i]);
    r[i] = v[i];
    ss += xi * xi;
  }
  float s = 1.0f / sqrtf(warp_sum(ss) / (float)hs + eps);
  for (int i = lane; i < hs; i += 32)
    v[i] = st<T>(ld(r[i]) * s * w[i]);
  if (lane == 0)
    rstd[head] = s;
}

template <class T>
static void qk_norm_fwd(void *x, void *raw, float *rstd, const float *wq, const float *wk, int N,
                        int W, int NQ, int NK, int hs, float eps) {
  size_t heads = (size_t)N * (NQ + NK);
  qk_norm_fwd_kernel<T><<<(unsigned)((heads + 7) / 8), 256, 0, g.stream>>>(
      (T *)x, (T *)raw, rstd, wq, wk, N, W, NQ, NK, hs, eps);
  LAUNCHED();
}

/* partial[kind][y][i]: the sum over part y of the query (kind 0) or key (kind 1) heads of
 * dout·raw·rstd at i */
template <class T>
__global__ static void qk_norm_dw_kernel(float *partial, const T *dx, const T *raw,
                                         const float *rstd, int N, int W, int NQ, int NK, int hs) {
  __shared__ float s[8][33];
  int i = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y, kind = blockIdx.z;
  int NHk = NQ + NK, nh = kind ? NK : NQ, h0 = kind ? NQ : 0;
  size_t rows = (size_t)N * nh, per = (rows + COL_PARTS - 1) / COL_PARTS, lo = y * per;
  size_t hi = lo + per < rows ? lo + per : rows;
  float acc = 0.0f;
  if (i < hs)
    for (size_t r = lo + threadIdx.y; r < hi; r += 8) {
      size_t n = r / nh, h = h0 + r % nh, at = n * NHk + h;
      acc += ld(dx[n * W + h * hs + i]) * ld(raw[at * hs + i]) * rstd[at];
    }
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && i < hs) {
    float t = 0.0f;
    for (int k = 0; k < 8; k++)
      t += s[k][threadIdx.x];
    partial[((size_t)kind * COL_PARTS + y) * hs + i] = t;
  }
}

template <class T>
__global__ static void qk_norm_dx_kernel(T *dx, const T *raw, const float *rstd, const float *wq,
                                         const float *wk, int N, int W, int NQ, int NK, int hs) {
  size_t head, n;
  int h, lane = threadIdx.x % 32;
  if (!qk_head(N, NQ + NK, &head, &n, &h))
    return;
  T *d = dx + n * W + (size_t)h * hs;
  const T *x = raw + head * hs;
  const float *w = h < NQ ? wq : wk;
  float s = rstd[head], dot = 0.0f;
  for (int i = lane; i < hs; i += 32)
    dot += w[i] * ld(d[i]) * ld(x[i]);
  float k = s * s * s * warp_sum(dot) / (float)hs;
  for (int i = lane; i < hs; i += 32) /* each lane rewrites only the values it read */
    d[i] = st<T>(s * w[i] * ld(d[i]) - k * ld(x[i]));
}

template <class T>
static void qk_norm_bwd(void *dx, float *dwq, float *dwk, const void *raw, const float *rstd,
                        const float *wq, const float *wk, int N, int W, int NQ, int NK, int hs) {
  if (dwq || dwk) { /* first: it reads dx before the in-place pass rewrites it */
    float *partial = (float *)scratch(S_PART, (size_t)2 * COL_PARTS * hs * sizeof(float));
    dim3 grid((hs + 31) / 32, COL_PARTS, 2), block(32, 8);
    qk_norm_dw_kernel<T><<<grid, block, 0, g.stream>>>(partial, (const T *)dx, (const T *)raw, rstd,
                                                       N, W, NQ, NK, hs);
    LAUNCHED();
    float *dst[2] = {dwq, dwk};
    for (int kind = 0; kind < 2; kind++)
      if (dst[kind]) {
        colsum_finish_kernel<<<(hs + 255) / 256, 256, 0, g.stream>>>(
            dst[kind], partial + (size_t)kind * COL_PARTS * hs, hs);
        LAUNCHED();
      }
  }
  size_t heads = (size_t)N * (NQ + NK);
  qk_norm_dx_kernel<T><<<(unsigned)((heads + 7) / 8), 256, 0, g.stream>>>(
      (T *)dx, (const T *)raw, rstd, wq, wk, N, W, NQ, NK, hs);
  LAUNCHED();
}

/* ---- rotary position embedding: a thread per rotated pair ---- */

template <class T>
__global__ static void rope_kernel(T *qkv, int BT, int T_, int C, int NH, int pos0,
                                   const float *inv_freq, float mag, int dir, const int *at) {
  int hs = C / NH, h2 = hs / 2;
  size_t n = (size_t)BT * 2 * NH * h2, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    int i = (int)(idx % h2);
    size_t rest = idx / h2;
    int part = (int)(rest % (2 * NH)); /* the heads of q, then of k */
    int bt = (int)(rest / (2 * NH));
    float pos = (float)(pos0 + (at ? at[bt] : bt % T_));
    float ang = pos * inv_freq[i];
    float c = mag * cosf(ang), sn = mag * (dir < 0 ? -sinf(ang) : sinf(ang));
    T *x = qkv + (size_t)bt * 3 * C + (size_t)part * hs;
    float x1 = ld(x[i]), x2 = ld(x[i + h2]);
    x[i] = st<T>(x1 * c - x2 * sn);
    x[i + h2] = st<T>(x2 * c + x1 * sn);
  }
}

template <class T>
static void rope(void *qkv, int B, int T_, int C, int NH, int pos0, const float *inv_freq,
                 float mag, int dir, const int *pos) {
  size_t n = (size_t)B * T_ * C; /* pairs: B·T·2·NH·hs/2 */
  rope_kernel<T><<<blocks_for(n, 256), 256, 0, g.stream>>>((T *)qkv, B * T_, T_, C, NH, pos0,
                                                           inv_freq, mag, dir, pos);
  LAUNCHED();
}

/* ---- grouped-query attention by repetition: a thread per value of dst ---- */

template <class T>
__global__ static void kv_expand_kernel(T *dst, const T *src, int N, int C, int hs, int g, int KV) {
  size_t n = (size_t)N * 3 * C, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    size_t r = idx / (3 * (size_t)C);
    int j = (int)(idx % (3 * (size_t)C)), part = j / C, c = j % C;
    const T *s = src + r * (C + 2 * (size_t)KV);
    dst[idx] = part == 0 ? s[c] : s[C + (size_t)(part - 1) * KV + (c / hs / g) * hs + c % hs];
  }
}

template <class T>
__global__ static void kv_reduce_kernel(T *dst, const T *src, int N, int C, int hs, int g, int KV) {
  size_t w = C + 2 * (size_t)KV, n = (size_t)N * w, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    size_t r = idx / w;
    int j = (int)(idx % w);
    const T *s = src + r * 3 * (size_t)C;
    if (j < C) {
      dst[idx] = s[j];
      continue;
    }
    int part = 1 + (j - C) / KV, c = (j - C) % KV, head = c / hs, i = c % hs;
    float acc = 0.0f;
    for (int k = 0; k < g; k++) /* the group's heads, in order, as the CPU */
      acc += ld(s[(size_t)part * C + (size_t)(head * g + k) * hs + i]);
    dst[idx] = st<T>(acc);
  }
}

template <class T>
static void kv_expand(void *dst, const void *src, int N, int C, int NH, int NKV) {
  int hs = C / NH;
  kv_expand_kernel<T><<<blocks_for((size_t)N * 3 * C, 256), 256, 0, g.stream>>>(
      (T *)dst, (const T *)src, N, C, hs, NH / NKV, NKV * hs);
  LAUNCHED();
}

template <class T>
static void kv_reduce(void *dst, const void *src, int N, int C, int NH, int NKV) {
  int hs = C / NH;
  kv_reduce_kernel<T>
      <<<blocks_for((size_t)N * (C + 2 * (size_t)NKV * hs), 256), 256, 0, g.stream>>>(
          (T *)dst, (const T *)src, N, C, hs, NH / NKV, NKV * hs);
  LAUNCHED();
}

/* ---- SwiGLU: a thread per output value ---- */

__device__ __forceinline__ static float sigmoid_dev(float x) {
  return 1.0f / (1.0f + expf(-x));
}

template <class T> __global__ static void swiglu_fwd_kernel(T *out, const T *pre, int N, int H) {
  size_t n = (size_t)N * H, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    size_t r = idx / H, i = idx % H;
    float gt = ld(pre[r * 2 * H + i]), u = ld(pre[r * 2 * H + H + i]);
    out[idx] = st<T>(gt * sigmoid_dev(gt) * u);
  }
}

template <class T>
__global__ static void swiglu_bwd_kernel(T *dpre, const T *pre, const T *dout, int N, int H) {
  size_t n = (size_t)N * H, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    size_t r = idx / H, i = idx % H;
    float gt = ld(pre[r * 2 * H + i]), u = ld(pre[r * 2 * H + H + i]), d = ld(dout[idx]);
    float sg = sigmoid_dev(gt);
    dpre[r * 2 * H + i] = st<T>(d * u * sg * (1.0f + gt * (1.0f - sg)));
    dpre[r * 2 * H + H + i] = st<T>(d * gt * sg);
  }
}

template <class T> static void swiglu_fwd(void *out, const void *pre, int N, int H) {
  swiglu_fwd_kernel<T>
      <<<blocks_for((size_t)N * H, 256), 256, 0, g.stream>>>((T *)out, (const T *)pre, N, H);
  LAUNCHED();
}

template <class T>
static void swiglu_bwd(void *dpre, const void *pre, const void *dout, int N, int H) {
  swiglu_bwd_kernel<T><<<blocks_for((size_t)N * H, 256), 256, 0, g.stream>>>(
      (T *)dpre, (const T *)pre, (const T *)dout, N, H);
  LAUNCHED();
}

/* ---- GELU (tanh) ---- */

#define GELU_K 0.7978845608028654f

/* out[i] = Op::f(a[i], b[i], out[i]) over n values, in 16-byte packs when every pointer allows
 * (vec), the values past the last whole pack one at a time; out may be a or b */
template <class T, class Op>
__global__ static void map_kernel(T *out, const T *a, const T *b, size_t n, int vec) {
  constexpr int P = pack<T>::n;
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
         stride = (size_t)gridDim.x * blockDim.x;
  size_t packs = vec ? n / P : 0;
  for (size_t i = tid; i < packs; i += stride) {
    pack<T> x = ldp(a + i * P), y, o;
    if (Op::uses_b)
      y = ldp(b + i * P);
    if (Op::uses_out)
      o = ldp(out + i * P);
#pragma unroll
    for (int k = 0; k < P; k++)
      o.v[k] = st<T>(
          Op::f(ld(x.v[k]), Op::uses_b ? ld(y.v[k]) : 0.0f, Op::uses_out ? ld(o.v[k]) : 0.0f));
    stp(out + i * P, o);
  }
  for (size_t i = packs * P + tid; i < n; i += stride)
    out[i] = st<T>(Op::f(ld(a[i]), Op::uses_b ? ld(b[i]) : 0.0f, Op::uses_out ? ld(out[i]) : 0.0f));
}

template <class T, class Op> static void map(void *out, const void *a, const void *b, size_t n) {
  int vec = vec_ok<T>(0, out, a, b);
  map_kernel<T, Op><<<blocks_for(vec ? n / pack<T>::n + 1 : n, 256), 256, 0, g.stream>>>(
      (T *)out, (const T *)a, (const T *)b, n, vec);
  LAUNCHED();
}

#define GELU_K 0.7978845608028654f

/* GELU, tanh approximation: out = gelu(x) */
struct gelu_op {
  static const bool uses_b = false, uses_out = false;
  __device__ static float f(float x, float, float) {
    return 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
  }
};

/* its backward: dinp = gelu'(x)·dout, written, not added to */
struct gelu_bwd_op {
  static const bool uses_b = true, uses_out = false;
  __device__ static float f(float x, float d, float) {
    float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    float gr = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    return gr * d;
  }
};

struct add_op {
  static const bool uses_b = true, uses_out = false;
  __device__ static float f(float a, float b, float) {
    return a + b;
  }
};

template <class T> static void gelu_fwd(void *out, const void *inp, size_t n) {
  map<T, gelu_op>(out, inp, NULL, n);
}

template <class T> static void gelu_bwd(void *dinp, const void *inp, const void *dout, size_t n) {
  map<T, gelu_bwd_op>(dinp, inp, dout, n);
}

/* The MLP's product and GELU (backend.h): cuBLASLt's GELU epilogues unless COLO_CUDA_GELU_FUSION=0
 * (GELU of the fp32 sum; cuBLASLt's GELU is the same tanh approximation), else, or where cuBLASLt
 * has no algorithm for the shape, the product and a pass of GELU over its output. */
template <class T>
static void matmul_gelu_fwd(void *out, void *pre, const void *inp, const void *w, const float *b,
                            int N, int C, int OC) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  if (g.gelu_fused && lt_gemm(b ? LT_GELU_BIAS : LT_GELU, b ? bias_act<T>(b, OC) : NULL, pre, 0, 0,
                              N, OC, C, inp, C, w, OC, t, 0.0f, out, OC, t))
    return;
  matmul_fwd<T>(pre, inp, w, b, N, C, OC);
  gelu_fwd<T>(out, pre, (size_t)N * OC);
}

template <class T>
static void matmul_gelu_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                            const void *w, const void *pre, int N, int C, int OC) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  /* dinp[N][C] = gelu'(pre) · (dout[N][OC] · w[C][OC]ᵀ) */
  if (dinp && !(g.gelu_fused && lt_gemm(LT_DGELU, NULL, pre, 0, 1, N, C, OC, dout, OC, w, OC, t,
                                        0.0f, dinp, C, t))) {
    matmul_bwd<T>(dinp, NULL, NULL, dout, inp, w, N, C, OC);
    gelu_bwd<T>(dinp, pre, dinp, (size_t)N * C); /* in place: map reads a value, then writes it */
  }
  matmul_bwd<T>(NULL, dw, db, dout, inp, w, N, C, OC);
}

/* ---- attention: the (sequence, head) pairs in groups, their products batched through cuBLAS ----
 * Pair p = b·NH + h is head h of sequence b: its q, k and v start at row b·T, columns h·hs,
 * C + h·hs, 2C + h·hs of qkv (stride 3C), its output at row b·T, column h·hs of out, and its
 * log-sum-exp rows at lse + p·T. A group of consecutive pairs (it may span sequences) runs as a
 * handful of batched products over arrays of pointers, around the softmax kernels. The group's
 * scores (and then their gradient) are fp32 scratch [pairs][T][T], its probabilities a scratch of
 * the storage type; how many pairs a group holds is set by a scratch budget (pair_group), so
 * that it stays in L2 or, with a large budget, so that a layer's attention is a few calls. Nothing
 * T×T outlives the call: the forward saves each query's log-sum-exp, from which the backward
 * recomputes the probabilities after a fresh q·kᵀ. */

/* Causal softmax of fp32 scores into probabilities p[rows][T], row r being query t = r % T, a
 * warp per row: p = exp(score − lse). The forward computes each row's log-sum-exp and saves it
 * (saved 0); the backward reads it back (saved 1) after recomputing the scores. */
template <class T>
__global__ static void causal_probs_kernel(T *p, float *lse, const float *score, int rows, int T_,
                                           int saved, const int *pos, int p0, int NH) {
  int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows)
    return;
  int t = r % T_;
  /* the first key: 0, or the query's document's first token (pair p0 + r/T_ of the group) */
  int j0 = pos ? t - pos[(size_t)((p0 + r / T_) / NH) * T_ + t] : 0;
  const float *s_ = score + (size_t)r * T_;
  float l;
  if (saved) {
    l = lse[r];
  } else {
    float mx = -INFINITY, s = 0.0f;
    for (int j = j0 + lane; j <= t; j += 32)
      mx = fmaxf(mx, s_[j]);
    mx = warp_max(mx);
    for (int j = j0 + lane; j <= t; j += 32)
      s += expf(s_[j] - mx);
    l = mx + logf(warp_sum(s));
    if (lane == 0)
      lse[r] = l;
  }
  T *a = p + (size_t)r * T_;
  for (int j = lane; j < T_; j += 32)
    a[j] = st<T>(j >= j0 && j <= t ? expf(s_[j] - l) : 0.0f);
}

/* the gradient of the scaled scores from that of the probabilities (fp32), in place of the
 * probabilities: p·(datt − Σ p·datt)·scale (each lane reads its elements before it writes; a key
 * before the query's document has p = 0, and so a gradient of 0) */
template <class T>
__global__ static void softmax_bwd_kernel(T *p, const float *datt, int rows, int T_, float scale) {
  int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows)
    return;
  int t = r % T_;
  T *a = p + (size_t)r * T_;
  const float *d = datt + (size_t)r * T_;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32)
    dot += ld(a[j]) * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T_; j += 32)
    a[j] = st<T>(j <= t ? ld(a[j]) * (d[j] - dot) * scale : 0.0f);
}

/* Pairs per group: as many as keep a group's scores and probabilities, T·T·(4 + sizeof(T)) bytes
 * a pair, within g.att_budget (24 MiB by default, so that they stay in the GPU's L2 cache between
 * the product that writes them and the kernel that reads them; COLO_CUDA_ATTENTION_MIB sets it). */
static int pair_group(int pairs, int T_, size_t elem) {
  size_t per = (size_t)T_ * T_ * (4 + elem), n = g.att_budget / per;
  return n < 1 ? 1 : n > (size_t)pairs ? pairs : (int)n;
}

/* Where each pair starts in one tensor: base + b·sb + h·sh bytes for pair i = b·NH + h, or, in a
 * group's scratch (si > 0), base + (i mod the group size)·si bytes. */
struct pair_at {
  char *base;
  size_t sb, sh, si;
};
enum { PA_MAX = 9 }; /* the backward's nine tensors */
struct pair_ats {
  pair_at a[PA_MAX];
};

__global__ static void pair_ptrs_kernel(void **out, pair_ats d, int na, int n, int NH, int group) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  int b = i / NH, h = i % NH;
  for (int j = 0; j < na; j++) {
    const pair_at &x = d.a[j];
    out[(size_t)j * n + i] =
        x.si ? x.base + (size_t)(i % group) * x.si : x.base + b * x.sb + h * x.sh;
  }
}

/* na arrays of a pointer per pair, for all n pairs, in the pointer scratch, built once a call:
 * array j of the group that starts at pair p0 is at out + j·n + p0 */
static void **pair_ptrs(const pair_ats &d, int na, int n, int NH, int group) {
  void **out = (void **)scratch(S_PTR, (size_t)na * n * sizeof(void *));
  pair_ptrs_kernel<<<(n + 127) / 128, 128, 0, g.stream>>>(out, d, na, n, NH, group);
  LAUNCHED();
  return out;
}

template <class T>
static void attention_gemm_fwd(void *out, float *lse, const void *qkv, int B, int T_, int C, int NH,
                               const int *pos) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  int hs = C / NH, C3 = 3 * C, pairs = B * NH, pg = pair_group(pairs, T_, sizeof(T));
  float scale = 1.0f / sqrtf((float)hs);
  size_t TT = (size_t)T_ * T_, z = sizeof(T), row3 = (size_t)T_ * C3 * z, row = (size_t)T_ * C * z;
  float *score = (float *)scratch(S_F32, (size_t)pg * TT * sizeof(float));
  T *p = (T *)scratch(S_ACT, (size_t)pg * TT * z);
  char *q = (char *)qkv;
  /* the pointer arrays: q, k, v, out, score, probabilities */
  pair_ats d = {{{q, row3, hs * z, 0},
                 {q + C * z, row3, hs * z, 0},
                 {q + 2 * C * z, row3, hs * z, 0},
                 {(char *)out, row, hs * z, 0},
                 {(char *)score, 0, 0, TT * sizeof(float)},
                 {(char *)p, 0, 0, TT * z}}};
  void **a = pair_ptrs(d, 6, pairs, NH, pg);
  for (int p0 = 0; p0 < pairs; p0 += pg) {
    int n = pairs - p0 < pg ? pairs - p0 : pg, rows = n * T_;
    void **Q = a + p0, **K = Q + pairs, **V = K + pairs, **O = V + pairs, **S = O + pairs,
         **P = S + pairs;
    /* score[t][t2] = scale · q[t]·k[t2] */
    gemm_batched(0, 1, T_, T_, hs, scale, Q, C3, K, C3, t, 0.0f, S, T_, CUDA_R_32F, n);
    causal_probs_kernel<T><<<(rows + 7) / 8, 256, 0, g.stream>>>(p, lse + (size_t)p0 * T_, score,
                                                                 rows, T_, 0, pos, p0, NH);
    LAUNCHED();
    /* out[t][i] = Σ_t2 p[t][t2] · v[t2][i] */
    gemm_batched(0, 0, T_, hs, T_, 1.0f, P, T_, V, C3, t, 0.0f, O, C, t, n);
  }
}

template <class T>
static void attention_gemm_bwd(void *dqkv, const void *dout, const void *qkv, const float *lse,
                               int B, int T_, int C, int NH, const int *pos) {
  const cudaDataType_t t = dtype_of<T>::cuda;
  int hs = C / NH, C3 = 3 * C, pairs = B * NH, pg = pair_group(pairs, T_, sizeof(T));
  float scale = 1.0f / sqrtf((float)hs);
  size_t TT = (size_t)T_ * T_, z = sizeof(T), row3 = (size_t)T_ * C3 * z, row = (size_t)T_ * C * z;
  float *s = (float *)scratch(S_F32, (size_t)pg * TT * sizeof(float));
  T *p = (T *)scratch(S_ACT, (size_t)pg * TT * z);
  char *q = (char *)qkv, *dq = (char *)dqkv;
  /* q, k, v, dout, dq, dk, dv, scores, probabilities */
  pair_ats d = {{{q, row3, hs * z, 0},
                 {q + C * z, row3, hs * z, 0},
                 {q + 2 * C * z, row3, hs * z, 0},
                 {(char *)dout, row, hs * z, 0},
                 {dq, row3, hs * z, 0},
                 {dq + C * z, row3, hs * z, 0},
                 {dq + 2 * C * z, row3, hs * z, 0},
                 {(char *)s, 0, 0, TT * sizeof(float)},
                 {(char *)p, 0, 0, TT * z}}};
  void **a = pair_ptrs(d, 9, pairs, NH, pg);
  for (int p0 = 0; p0 < pairs; p0 += pg) {
    int n = pairs - p0 < pg ? pairs - p0 : pg, rows = n * T_;
    void **Q = a + p0, **K = Q + pairs, **V = K + pairs, **D = V + pairs, **DQ = D + pairs,
         **DK = DQ + pairs, **DV = DK + pairs, **S = DV + pairs, **P = S + pairs;
    /* the probabilities again: scores, then exp(score − lse) */
    gemm_batched(0, 1, T_, T_, hs, scale, Q, C3, K, C3, t, 0.0f, S, T_, CUDA_R_32F, n);
    causal_probs_kernel<T><<<(rows + 7) / 8, 256, 0, g.stream>>>(
        p, (float *)lse + (size_t)p0 * T_, s, rows, T_, 1, pos, p0, NH); /* lse read only */
    LAUNCHED();
    /* dv[t2] = Σ_t p[t][t2] · dout[t] (written: dqkv is the backward's output, not a sum) */
    gemm_batched(1, 0, T_, hs, T_, 1.0f, P, T_, D, C, t, 0.0f, DV, C3, t, n);
    /* datt[t][t2] = dout[t]·v[t2], over the scores (no longer needed) */
    gemm_batched(0, 1, T_, T_, hs, 1.0f, D, C, V, C3, t, 0.0f, S, T_, CUDA_R_32F, n);
    softmax_bwd_kernel<T><<<(rows + 7) / 8, 256, 0, g.stream>>>(p, s, rows, T_, scale);
    LAUNCHED();
    /* dq[t] = Σ_t2 dpre[t][t2] · k[t2];  dk[t2] = Σ_t dpre[t][t2] · q[t] */
    gemm_batched(0, 0, T_, hs, T_, 1.0f, P, T_, K, C3, t, 0.0f, DQ, C3, t, n);
    gemm_batched(1, 0, T_, hs, T_, 1.0f, P, T_, Q, C3, t, 0.0f, DK, C3, t, n);
  }
}

/* The fused kernels (cuda_flash.cu) where they apply and are not turned off, else the batched
 * products above; before them cuDNN's (g.cudnn). */
enum { CUDNN_OFF, CUDNN_BOTH, CUDNN_BOTH_DET };

static const char *cudnn_mode(void) {
  return g.cudnn_auto ? "auto" : g.cudnn == CUDNN_BOTH ? "cudnn" : "cudnn-det";
}

/* cuDNN's attention: 1 when it ran, 0 when the case is not cuDNN's. Asked for by name
 * (COLO_CUDA_ATTENTION=cudnn or cudnn-det) and without a plan for a case that is its own, the run
 * stops with cuDNN's reason: colo does not fall back in silence from what was asked. By default
 * colo's kernels take over, and say so once. */
static int cudnn_ran(int rc) {
  static int told;
  if (rc < 0 && !g.cudnn_auto) {
    fprintf(stderr,
            "colo-train: COLO_CUDA_ATTENTION=%s: cuDNN has no plan for the attention (%s)\n",
            cudnn_mode(), cudnn_attention_error());
    exit(1);
  }
  if (rc < 0 && !told) {
    fprintf(stderr, "colo-train: cuDNN has no plan for the attention (%s): colo's kernels run it\n",
            cudnn_attention_error());
    told = 1;
  }
  return rc > 0;
}

template <class T>
static void attention_fwd(void *out, float *lse, const void *qkv, int B, int T_, int C, int NH,
                          const int *pos) {
  static int told;
  if (g.cudnn && !g.cudnn_auto && pos && !told) {
    fprintf(stderr,
            "colo-train: COLO_CUDA_ATTENTION=%s: attention within documents or a "
            "sliding window runs on colo's own kernels: cuDNN's is not given them\n",
            cudnn_mode());
    told = 1;
  }
  if (g.cudnn && !pos &&
      cudnn_ran(cudnn_attention_fwd(dtype_of<T>::colo, out, lse, qkv, B, T_, C, NH, g.stream)))
    return;
  if (!g.flash || !flash_attention_fwd(dtype_of<T>::colo, g.flash == 2, out, lse, qkv, B, T_, C, NH,
                                       pos, g.stream))
    attention_gemm_fwd<T>(out, lse, qkv, B, T_, C, NH, pos);
}

/* By default cuDNN's deterministic backward runs where its workspace (B·NH·T·T values of 16 bits
 * for dS, outside the pool) takes at most a sixteenth of the GPU's memory: 1.5 GiB for GPT-2
 * 124M at B = 64, 8 GiB at T = 8192 with 32 heads at B = 2. Past that colo's backward runs it,
 * which needs no such matrix, and says so once. Asked for by name, cuDNN's runs whatever it
 * takes. */
static int cudnn_backward_fits(colo_dtype_t t, int B, int T_, int C, int NH, int det) {
  static int told;
  if (!g.cudnn_auto)
    return 1;
  int64_t need = cudnn_attention_bwd_bytes(t, B, T_, C, NH, det);
  if (need < 0) /* no plan: cudnn_ran says so */
    return 1;
  static size_t total; /* the GPU's memory, bytes */
  size_t freeb = 0;
  if (!total)
    CK(cudaMemGetInfo(&freeb, &total));
  if ((size_t)need <= total / 16)
    return 1;
  if (!told) {
    fprintf(stderr,
            "colo-train: cuDNN's attention backward would need %.2f GiB beside the model (B %d, T "
            "%d, %d heads), over a sixteenth of the GPU's %.1f GiB: colo's kernels run it\n",
            (double)need / 1073741824.0, B, T_, NH, (double)total / 1073741824.0);
    told = 1;
  }
  return 0;
}

template <class T>
static void attention_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                          const float *lse, int B, int T_, int C, int NH, const int *pos) {
  int det = g.cudnn == CUDNN_BOTH_DET;
  if (g.cudnn && !pos && cudnn_backward_fits(dtype_of<T>::colo, B, T_, C, NH, det) &&
      cudnn_ran(cudnn_attention_bwd(dtype_of<T>::colo, dqkv, dout, qkv, out, lse, B, T_, C, NH, det,
                                    g.stream)))
    return;
  if (g.flash) {
    float *dsum = (float *)scratch(S_F32, (size_t)B * NH * T_ * sizeof(float));
    if (flash_attention_bwd(dtype_of<T>::colo, g.flash == 2, dqkv, dout, qkv, out, lse, dsum, B, T_,
                            C, NH, pos, g.stream))
      return;
  }
  attention_gemm_bwd<T>(dqkv, dout, qkv, lse, B, T_, C, NH, pos);
}

/* ---- elementwise ---- */

template <class T> static void add(void *out, const void *a, const void *b, size_t n) {
  map<T, add_op>(out, a, b, n);
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

__global__ static void accumulate_kernel(float *dst, const float *src, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] += src[i];
}

static void accumulate(float *dst, const float *src, size_t n) {
  accumulate_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(dst, src, n);
  LAUNCHED();
}

/* ---- losses: a block per row ---- */

template <class T>
__global__ static void crossentropy_fwd_kernel(float *losses, T *probs, const T *logits,
                                               const int *targets, int V) {
  int n = blockIdx.x;
  const T *l = logits + (size_t)n * V;
  T *p = probs + (size_t)n * V;
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    mx = fmaxf(mx, ld(l[v]));
  mx = block_max(mx);
  float s = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    s += expf(ld(l[v]) - mx);
  s = block_sum(s);
  float inv = 1.0f / s;
  /* the loss from the fp32 probability, read before the row is overwritten (in place) */
  if (threadIdx.x == 0 && losses) /* a target of -1 does not count */
    losses[n] = targets[n] < 0 ? 0.0f : -logf(expf(ld(l[targets[n]]) - mx) * inv);
  __syncthreads();
  for (int v = threadIdx.x; v < V; v += blockDim.x)
    p[v] = st<T>(expf(ld(l[v]) - mx) * inv);
}

template <class T>
static void crossentropy_fwd(float *losses, void *probs, const void *logits, const int *targets,
                             int N, int V) {
  crossentropy_fwd_kernel<T>
      <<<N, 512, 0, g.stream>>>(losses, (T *)probs, (const T *)logits, targets, V);
  LAUNCHED();
}

template <class T>
__global__ static void crossentropy_bwd_kernel(T *dlogits, const T *probs, const int *targets,
                                               float dloss, int N, int V) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)N * V;
  for (; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int n = (int)(i / V), v = (int)(i % V);
    float s = targets[n] < 0 ? 0.0f : dloss;
    dlogits[i] = st<T>((ld(probs[i]) - (v == targets[n] ? 1.0f : 0.0f)) * s);
  }
}

template <class T>
static void crossentropy_bwd(void *dlogits, const void *probs, const int *targets, float dloss,
                             int N, int V) {
  crossentropy_bwd_kernel<T><<<blocks_for((size_t)N * V, 256), 256, 0, g.stream>>>(
      (T *)dlogits, (const T *)probs, targets, dloss, N, V);
  LAUNCHED();
}

/* a block per row: max, sum, then the loss and the gradient from the fp32 probabilities, over a
 * row the block reads three times and writes once; for rows longer than a block's shared memory
 * (the kernel below keeps the row there and reads it once) */
template <class T>
__global__ static void crossentropy_fused_kernel(float *losses, T *logits, const int *targets,
                                                 float dloss, int V, int vec) {
  int n = blockIdx.x, tg = targets[n], t = threadIdx.x, nt = blockDim.x;
  T *l = logits + (size_t)n * V;
  const T *none = NULL;
  float mx = -INFINITY;
  lane_each(l, none, V, t, nt, vec, [&](int, float x, float) { mx = fmaxf(mx, x); });
  mx = block_max(mx);
  float s = 0.0f;
  lane_each(l, none, V, t, nt, vec, [&](int, float x, float) { s += expf(x - mx); });
  s = block_sum(s);
  float inv = 1.0f / s;
  if (t == 0) /* a target of -1 does not count: no loss, no gradient */
    losses[n] = tg < 0 ? 0.0f : -logf(expf(ld(l[tg]) - mx) * inv);
  __syncthreads(); /* the target's logit is read before it is overwritten */
  float d = tg < 0 ? 0.0f : dloss;
  lane_map(l, l, none, 0, V, t, nt, vec, [&](int v, float x, float, float) {
    return (expf(x - mx) * inv - (v == tg ? 1.0f : 0.0f)) * d;
  });
}

/* The same, the row read from memory once: kept in shared memory as the max is taken, the sum
 * and the gradient computed from there (each thread the values it kept, in the order above: the
 * same bits). GPT-2's row of 50,304 bf16 values is 98 KiB, so two blocks share an SM. On an H200
 * at GPT-2 124M's B = 8 it took 0.70 ms against the kernel above's 0.78; a row kept in fp32
 * (197 KiB, one block of 1,024 threads an SM) with one exp a value took 0.84. */
template <class T>
__global__ static void crossentropy_fused_smem_kernel(float *losses, T *logits, const int *targets,
                                                      float dloss, int V, int vec) {
  extern __shared__ __align__(16) unsigned char ce_row[];
  T *r = (T *)ce_row;
  int n = blockIdx.x, tg = targets[n], t = threadIdx.x, nt = blockDim.x;
  T *l = logits + (size_t)n * V;
  const T *none = NULL;
  float mx = -INFINITY;
  lane_map(r, l, none, 0, V, t, nt, vec, [&](int, float x, float, float) {
    mx = fmaxf(mx, x);
    return x;
  });
  mx = block_max(mx);
  float s = 0.0f;
  lane_each(r, none, V, t, nt, vec, [&](int, float x, float) { s += expf(x - mx); });
  s = block_sum(s);
  float inv = 1.0f / s;
  if (t == 0)
    losses[n] = tg < 0 ? 0.0f : -logf(expf(ld(l[tg]) - mx) * inv);
  __syncthreads();
  float d = tg < 0 ? 0.0f : dloss;
  lane_map(l, r, none, 0, V, t, nt, vec, [&](int v, float x, float, float) {
    return (expf(x - mx) * inv - (v == tg ? 1.0f : 0.0f)) * d;
  });
}

template <class T>
static void crossentropy_fused(float *losses, void *logits, const int *targets, float dloss, int N,
                               int V) {
  static int optin = -1; /* the shared memory a block may opt into, bytes */
  if (optin < 0)
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, g.ordinal));
  size_t row = (size_t)V * sizeof(T);
  int vec = vec_ok<T>(V, logits);
  if (row + 1024 <= (size_t)optin) { /* beside block_reduce's own */
    static size_t set;               /* the size the kernel was allowed so far */
    if (row > set) {
      CK(cudaFuncSetAttribute(crossentropy_fused_smem_kernel<T>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)row));
      set = row;
    }
    crossentropy_fused_smem_kernel<T>
        <<<N, 512, row, g.stream>>>(losses, (T *)logits, targets, dloss, V, vec);
  } else {
    crossentropy_fused_kernel<T>
        <<<N, 512, 0, g.stream>>>(losses, (T *)logits, targets, dloss, V, vec);
  }
  LAUNCHED();
}

template <class T> __global__ static void vocab_max_kernel(float *rowmax, const T *logits, int Vl) {
  const T *l = logits + (size_t)blockIdx.x * Vl;
  float m = -INFINITY;
  for (int v = threadIdx.x; v < Vl; v += blockDim.x)
    m = fmaxf(m, ld(l[v]));
  m = block_max(m);
  if (threadIdx.x == 0)
    rowmax[blockIdx.x] = m;
}

template <class T> static void vocab_max(float *rowmax, const void *logits, int N, int Vl) {
  vocab_max_kernel<T><<<N, 256, 0, g.stream>>>(rowmax, (const T *)logits, Vl);
  LAUNCHED();
}

template <class T>
__global__ static void vocab_sumexp_kernel(float *sum, const T *logits, const float *gmax, int Vl) {
  const T *l = logits + (size_t)blockIdx.x * Vl;
  float mx = gmax[blockIdx.x], s = 0.0f;
  for (int v = threadIdx.x; v < Vl; v += blockDim.x)
    s += expf(ld(l[v]) - mx);
  s = block_sum(s);
  if (threadIdx.x == 0)
    sum[blockIdx.x] = s;
}

template <class T>
static void vocab_sumexp(float *sum, const void *logits, const float *gmax, int N, int Vl) {
  vocab_sumexp_kernel<T><<<N, 256, 0, g.stream>>>(sum, (const T *)logits, gmax, Vl);
  LAUNCHED();
}

template <class T>
__global__ static void vocab_target_kernel(float *tlogit, const T *logits, const int *targets,
                                           int v0, int N, int Vl) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N)
    return;
  int t = targets[n] - v0;
  tlogit[n] = t >= 0 && t < Vl ? ld(logits[(size_t)n * Vl + t]) : 0.0f;
}

template <class T>
static void vocab_target(float *tlogit, const void *logits, const int *targets, int v0, int N,
                         int Vl) {
  vocab_target_kernel<T>
      <<<(N + 255) / 256, 256, 0, g.stream>>>(tlogit, (const T *)logits, targets, v0, N, Vl);
  LAUNCHED();
}

template <class T>
__global__ static void vocab_ce_bwd_kernel(T *dlogits, const T *logits, const float *gmax,
                                           const float *gsum, const int *targets, int v0,
                                           float dloss, int N, int Vl) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, total = (size_t)N * Vl;
  for (; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int n = (int)(i / Vl), v = (int)(i % Vl);
    float p = expf(ld(logits[i]) - gmax[n]) / gsum[n], s = targets[n] < 0 ? 0.0f : dloss;
    dlogits[i] = st<T>((p - (v == targets[n] - v0 ? 1.0f : 0.0f)) * s);
  }
}

template <class T>
static void vocab_ce_bwd(void *dlogits, const void *logits, const float *gmax, const float *gsum,
                         const int *targets, int v0, float dloss, int N, int Vl) {
  vocab_ce_bwd_kernel<T><<<blocks_for((size_t)N * Vl, 256), 256, 0, g.stream>>>(
      (T *)dlogits, (const T *)logits, gmax, gsum, targets, v0, dloss, N, Vl);
  LAUNCHED();
}

/* ---- optimizer and norms ---- */

/* one value's update: the single-value kernel and the 16-byte one below compute the same bits */
__device__ __forceinline__ static void adamw_one(float &p, float gi, float &m, float &v,
                                                 float beta1, float beta2, float eps,
                                                 float step_size, float bc2_sqrt, float decay) {
  float mi = m + (gi - m) * (1.0f - beta1);
  float vi = v * beta2 + (1.0f - beta2) * gi * gi;
  m = mi;
  v = vi;
  p = p * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

__global__ static void adamw_kernel(float *p, const float *g_, float *m, float *v, size_t n,
                                    float beta1, float beta2, float eps, float grad_scale,
                                    float step_size, float bc2_sqrt, float decay) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    adamw_one(p[i], g_[i] * grad_scale, m[i], v[i], beta1, beta2, eps, step_size, bc2_sqrt, decay);
  }
}

/* the same over 16-byte loads and stores: four values a thread */
__global__ static void adamw4_kernel(float4 *p, const float4 *g_, float4 *m, float4 *v, size_t n4,
                                     float beta1, float beta2, float eps, float grad_scale,
                                     float step_size, float bc2_sqrt, float decay) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 pi = p[i], gi = g_[i], mi = m[i], vi = v[i];
    adamw_one(pi.x, gi.x * grad_scale, mi.x, vi.x, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    adamw_one(pi.y, gi.y * grad_scale, mi.y, vi.y, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    adamw_one(pi.z, gi.z * grad_scale, mi.z, vi.z, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    adamw_one(pi.w, gi.w * grad_scale, mi.w, vi.w, beta1, beta2, eps, step_size, bc2_sqrt, decay);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

/* 16-byte accesses where all four arrays allow them (GPT-2 124M's step: 1.39 ms of single-value
 * accesses on an H200, against PyTorch's fused 1.04), each thread's values computed as the
 * single-value kernel computes them; the tail past a multiple of four, and arrays whose starts
 * differ in their alignment, take the single-value kernel */
static void adamw(float *p, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float grad_scale, int t) {
  float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * wd;
  size_t done = 0;
  if (((uintptr_t)p | (uintptr_t)grad | (uintptr_t)m | (uintptr_t)v) % 16 == 0 && n >= 4) {
    size_t n4 = n / 4;
    adamw4_kernel<<<blocks_for(n4, 256), 256, 0, g.stream>>>(
        (float4 *)p, (const float4 *)grad, (float4 *)m, (float4 *)v, n4, beta1, beta2, eps,
        grad_scale, step_size, bc2_sqrt, decay);
    LAUNCHED();
    done = n4 * 4;
  }
  if (done < n) {
    adamw_kernel<<<blocks_for(n - done, 256), 256, 0, g.stream>>>(
        p + done, grad + done, m + done, v + done, n - done, beta1, beta2, eps, grad_scale,
        step_size, bc2_sqrt, decay);
    LAUNCHED();
  }
}

/* Σ x² in fp64: 16-byte loads (a scalar head up to the first 16-byte boundary, and a tail), over
 * enough blocks to keep the memory busy; 256 blocks of scalar loads reached a quarter of the
 * bandwidth on an H100 (0.77 ms for GPT-2 124M's gradients) */
#define SUMSQ_BLOCKS 1024
__global__ static void sumsq_kernel(double *part, const float *x, size_t n) {
  __shared__ double s[256];
  double acc = 0.0;
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
         stride = (size_t)gridDim.x * blockDim.x;
  size_t head = (16 - (uintptr_t)x % 16) % 16 / sizeof(float);
  head = head < n ? head : n;
  if (tid < head)
    acc += (double)x[tid] * (double)x[tid];
  const float4 *v = reinterpret_cast<const float4 *>(x + head);
  size_t nv = (n - head) / 4, done = head + nv * 4;
  for (size_t i = tid; i < nv; i += stride) {
    float4 a = v[i];
    acc += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
  }
  if (tid < n - done)
    acc += (double)x[done + tid] * (double)x[done + tid];
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

/* ---- Muon (backend.h): the momentum and the update are elementwise; the orthogonalization is
 * five rounds of three products on cuBLAS, in fp32 storage, on TF32 tensor cores unless the run
 * is fp32 (the reference runs them in bf16). The norm stays on the device: no synchronisation. */
__global__ static void muon_momentum_kernel(float *u, const float *g_, float *m, size_t n,
                                            float beta, float grad_scale) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float gi = g_[i] * grad_scale;
    float mi = m[i] + (gi - m[i]) * (1.0f - beta);
    m[i] = mi;
    u[i] = gi + (mi - gi) * beta;
  }
}

static void muon_momentum(float *u, const float *grad, float *m, size_t n, float beta,
                          float grad_scale) {
  muon_momentum_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(u, grad, m, n, beta, grad_scale);
  LAUNCHED();
}

/* X[a][b] (a ≤ b) from the rows × cols block at stride ld, transposed when rows > cols, or back
 * (back: times scale) */
__global__ static void muon_block_kernel(float *X, float *x, int rows, int cols, int ld, int back,
                                         float scale) {
  int tr = rows > cols, b = tr ? rows : cols;
  size_t n = (size_t)rows * cols;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / (size_t)cols, c = i % (size_t)cols;
    size_t xi = tr ? c * b + r : r * b + c;
    if (back)
      x[r * ld + c] = scale * X[xi];
    else
      X[xi] = x[r * ld + c];
  }
}

/* part[0..SUMSQ_BLOCKS) summed in order (as sumsq's host loop) into part[SUMSQ_BLOCKS]: the
 * factor 1/max(√Σ, eps) */
__global__ static void muon_inv_norm_kernel(double *part, float eps) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double s = 0.0;
    for (int i = 0; i < SUMSQ_BLOCKS; i++)
      s += part[i];
    float norm = (float)sqrt(s);
    part[SUMSQ_BLOCKS] = 1.0 / (double)(norm > eps ? norm : eps);
  }
}

__global__ static void muon_scale_kernel(float *X, size_t n, const double *inv) {
  float f = (float)*inv;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    X[i] *= f;
}

/* Muon's products, fp32 storage: on TF32 tensor cores unless the run is fp32 */
static void muon_gemm(int tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
  gemm_ct(g.fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32, 0, tb, M, N, K, alpha, A, lda,
          B, ldb, CUDA_R_32F, beta, C, ldc, CUDA_R_32F);
}

static void muon_orth(float *x, float *work, int rows, int cols, int ld, int steps, float eps,
                      float scale) {
  const float ca = 3.4445f, cb = -4.7750f, cc = 2.0315f;
  int tr = rows > cols, a = tr ? cols : rows, b = tr ? rows : cols;
  size_t n = (size_t)a * b;
  float *X = work, *Y = work + n, *A = Y + n, *B = A + (size_t)a * a;
  muon_block_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(X, x, rows, cols, ld, 0, 1.0f);
  LAUNCHED();
  sumsq_kernel<<<SUMSQ_BLOCKS, 256, 0, g.stream>>>(g.part, X, n);
  LAUNCHED();
  muon_inv_norm_kernel<<<1, 32, 0, g.stream>>>(g.part, eps);
  LAUNCHED();
  muon_scale_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(X, n, g.part + SUMSQ_BLOCKS);
  LAUNCHED();
  for (int k = 0; k < steps; k++) {
    muon_gemm(1, a, a, b, 1.0f, X, b, X, b, 0.0f, A, a);
    CK(cudaMemcpyAsync(B, A, (size_t)a * a * sizeof(float), cudaMemcpyDeviceToDevice, g.stream));
    muon_gemm(0, a, a, a, cc, A, a, A, a, cb, B, a);
    CK(cudaMemcpyAsync(Y, X, n * sizeof(float), cudaMemcpyDeviceToDevice, g.stream));
    muon_gemm(0, a, b, a, 1.0f, B, a, X, b, ca, Y, b);
    float *t = X;
    X = Y;
    Y = t;
  }
  muon_block_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(X, x, rows, cols, ld, 1, scale);
  LAUNCHED();
}

__global__ static void muon_transpose_kernel(float *dst, int dld, const float *src, int sld,
                                             int rows, int cols) {
  size_t n = (size_t)rows * cols;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / (size_t)cols, c = i % (size_t)cols;
    dst[c * dld + r] = src[r * sld + c];
  }
}

static void muon_transpose(float *dst, int dld, const float *src, int sld, int rows, int cols) {
  muon_transpose_kernel<<<blocks_for((size_t)rows * cols, 256), 256, 0, g.stream>>>(
      dst, dld, src, sld, rows, cols);
  LAUNCHED();
}

__global__ static void muon_apply_kernel(float *p, const float *u, size_t n, float lr,
                                         float decay) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = p[i] * decay - lr * u[i];
}

static void muon_apply(float *p, const float *u, size_t n, float lr, float wd) {
  muon_apply_kernel<<<blocks_for(n, 256), 256, 0, g.stream>>>(p, u, n, lr, 1.0f - lr * wd);
  LAUNCHED();
}

/* ---- the profile: with COLO_CUDA_PROFILE=1 every table entry is timed on the GPU (a pair of
 * events around it on the stream), and the totals go to stderr when the process exits: where a
 * step's time goes, and how much of the span from the first operation to the last the GPU spent
 * in operations at all (the rest is the host: launches, synchronisation, data). ---- */
/* the entries templated over the storage type, and the others */
#define TEMPLATE_OPS(X) COLO_ACT_OPS(X, _)
#define PLAIN_OPS(X)                                                                               \
  X(zero, _) X(copy, _) X(copy2d, _) X(to_host, _) X(from_host, _) COLO_F32_OPS(X, _)
enum {
#define X(n, _) P_##n,
  TEMPLATE_OPS(X) PLAIN_OPS(X)
#undef X
      P_COUNT
};
static const char *const prof_names[P_COUNT] = {
#define X(n, _) #n,
    TEMPLATE_OPS(X) PLAIN_OPS(X)
#undef X
};
enum { PROF_RING = 2048 };
static struct {
  int on, n, started;
  cudaEvent_t t0, a[PROF_RING], b[PROF_RING];
  int op[PROF_RING];
  double ms[P_COUNT], span;
  long calls[P_COUNT];
} prof;

static void prof_drain(void) {
  for (int i = 0; i < prof.n; i++) {
    float ms = 0.0f;
    CK(cudaEventSynchronize(prof.b[i]));
    CK(cudaEventElapsedTime(&ms, prof.a[i], prof.b[i]));
    prof.ms[prof.op[i]] += ms;
    prof.calls[prof.op[i]]++;
  }
  if (prof.n) {
    float span = 0.0f;
    CK(cudaEventElapsedTime(&span, prof.t0, prof.b[prof.n - 1]));
    prof.span = span;
  }
  prof.n = 0;
}

struct prof_scope {
  int i;
  explicit prof_scope(int op) {
    if (prof.n == PROF_RING)
      prof_drain();
    i = prof.n++;
    prof.op[i] = op;
    CK(cudaEventRecord(prof.a[i], g.stream));
    if (!prof.started) {
      CK(cudaEventRecord(prof.t0, g.stream));
      prof.started = 1;
    }
  }
  ~prof_scope() {
    CK(cudaEventRecord(prof.b[i], g.stream));
  }
};

/* an entry's function, timed: PROFILED(op, fn) has fn's signature */
template <int OP, class R, class... A> struct profiled {
  template <R (*fn)(A...)> static R call(A... a) {
    prof_scope s(OP);
    return fn(a...);
  }
};
template <int OP, class R, class... A> static profiled<OP, R, A...> profiled_for(R (*)(A...)) {
  return profiled<OP, R, A...>();
}
#define PROFILED(op, f) (decltype(profiled_for<op>(f))::template call<f>)

static void prof_report(void) {
  prof_drain();
  double total = 0.0;
  int order[P_COUNT];
  for (int i = 0; i < P_COUNT; i++)
    total += prof.ms[i], order[i] = i;
  for (int i = 1; i < P_COUNT; i++) /* by time, largest first */
    for (int j = i; j > 0 && prof.ms[order[j]] > prof.ms[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  fprintf(stderr,
          "colo cuda profile: %.1f ms in operations, over a span of %.1f ms from the first to the "
          "last (%.0f%% busy)\n  %-20s %8s %11s %10s %6s\n",
          total, prof.span, prof.span > 0 ? 100.0 * total / prof.span : 0.0, "operation", "calls",
          "total ms", "ms/call", "share");
  for (int k = 0; k < P_COUNT; k++) {
    int i = order[k];
    if (prof.calls[i])
      fprintf(stderr, "  %-20s %8ld %11.2f %10.4f %5.1f%%\n", prof_names[i], prof.calls[i],
              prof.ms[i], prof.ms[i] / (double)prof.calls[i], 100.0 * prof.ms[i] / total);
  }
}

/* ---- the tables: one per storage type ---- */

static void *host_alloc(size_t bytes) {
  void *p = NULL;
  return cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void host_free(void *p) {
  cudaFreeHost(p);
}

static int mem_info(size_t *free_bytes, size_t *total_bytes) {
  return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? 0 : -1;
}

template <class T> static colo_backend_t make_table(const char *name) {
  colo_backend_t b;
  memset(&b, 0, sizeof b);
  b.name = name;
  b.device = 1;
  b.allocator = &DEVICE_ALLOCATOR;
  b.owns = owns;
  b.mem_info = mem_info;
  b.host_alloc = host_alloc;
  b.host_free = host_free;
  b.stream = g.stream;
  b.act_dtype = dtype_of<T>::colo;
  b.act_size = sizeof(T);
#define SET_T(n, _) b.n = prof.on ? PROFILED(P_##n, n<T>) : n<T>;
#define SET_P(n, _) b.n = prof.on ? PROFILED(P_##n, n) : n;
  TEMPLATE_OPS(SET_T)
  PLAIN_OPS(SET_P)
#undef SET_T
#undef SET_P
  return b;
}

static colo_backend_t TABLE_F32, TABLE_BF16, TABLE_F16;

/* fp32 storage's products: TF32 tensor cores on request (16-bit storage multiplies on tensor
 * cores whatever this says) */
static cublasComputeType_t compute_type(int math) {
  return math == COLO_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* The library's one entry point; colo_backend_cuda (cuda_loader.c) finds it with dlsym. */
extern "C" __attribute__((visibility("default"))) const colo_backend_t *
colo_backend_cuda_open(int ordinal, int math, char *err, size_t errlen) {
  g.compute = compute_type(math);
  g.fp32 = math == COLO_MATH_FP32;
  const colo_backend_t *table = math == COLO_MATH_BF16   ? &TABLE_BF16
                                : math == COLO_MATH_FP16 ? &TABLE_F16
                                                         : &TABLE_F32;
  if (g.ready) {
    if (ordinal != g.ordinal) {
      snprintf(err, errlen, "this process already uses CUDA device %d, not %d", g.ordinal, ordinal);
      return NULL;
    }
    return table;
  }
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
      (e = cudaMalloc(&g.part, (SUMSQ_BLOCKS + 1) * sizeof(double))) != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", ordinal, cudaGetErrorString(e));
    return NULL;
  }
  cublasStatus_t s = cublasCreate(&g.blas);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtCreate(&g.lt);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(err, errlen, "cuBLAS on device %d: %s", ordinal, cublasGetStatusString(s));
    return NULL;
  }
  if ((e = cudaMalloc(&g.lt_work, LT_WORK)) != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", ordinal, cudaGetErrorString(e));
    return NULL;
  }
  const char *pr = getenv("COLO_CUDA_PROFILE");
  prof.on = pr && !strcmp(pr, "1");
  if (prof.on) {
    CK(cudaEventCreate(&prof.t0));
    for (int i = 0; i < PROF_RING; i++) {
      CK(cudaEventCreate(&prof.a[i]));
      CK(cudaEventCreate(&prof.b[i]));
    }
    atexit(prof_report); /* after the CUDA runtime's own, so before its teardown */
  }
  const char *epi = getenv("COLO_CUDA_EPILOGUES");
  g.lt_off = epi && !strcmp(epi, "0");
  CKB(cublasSetStream(g.blas, g.stream));
  const char *att = getenv("COLO_CUDA_ATTENTION");
  if (att && *att && strcmp(att, "auto") && strcmp(att, "flash") && strcmp(att, "flash-async") &&
      strcmp(att, "gemm") && strcmp(att, "cudnn") && strcmp(att, "cudnn-det")) {
    snprintf(err, errlen,
             "COLO_CUDA_ATTENTION must be auto, flash, flash-async, gemm, cudnn or cudnn-det, not "
             "'%s'",
             att);
    return NULL;
  }
  int automatic = !att || !*att || !strcmp(att, "auto");
  g.cudnn = att && !strcmp(att, "cudnn")             ? CUDNN_BOTH
            : automatic || !strcmp(att, "cudnn-det") ? CUDNN_BOTH_DET
                                                     : CUDNN_OFF;
  g.cudnn_auto = automatic;
  if (g.cudnn) {
    char why[256];
    if (!cudnn_attention_open(why, sizeof why)) {
      if (!automatic) {
        snprintf(err, errlen, "COLO_CUDA_ATTENTION=%s: %s", att, why);
        return NULL;
      }
      g.cudnn = CUDNN_OFF; /* by default: colo's own kernels, where cuDNN is not installed */
    }
  }
  /* flash-async and the GELU epilogues became the defaults when they were faster on an H100
   * (bench/results/engine_gpu_quick.md); cuDNN's forward when it was on an H200 (0.052 ms
   * against 0.094 at GPT-2 124M's shapes, engine_gpu.md), and its deterministic backward when
   * it was too (0.182 ms against colo's 0.343, the same bits on every run) */
  g.flash = att && !strcmp(att, "gemm") ? 0 : att && !strcmp(att, "flash") ? 1 : 2;
  const char *gf = getenv("COLO_CUDA_GELU_FUSION");
  if (gf && *gf && strcmp(gf, "0") && strcmp(gf, "1")) {
    snprintf(err, errlen, "COLO_CUDA_GELU_FUSION must be 0 or 1, not '%s'", gf);
    return NULL;
  }
  g.gelu_fused = !(gf && !strcmp(gf, "0"));
  const char *mib = getenv("COLO_CUDA_ATTENTION_MIB");
  g.att_budget = (size_t)((mib && atof(mib) > 0 ? atof(mib) : 24.0) * 1048576.0);
  TABLE_F32 = make_table<float>("cuda");
  TABLE_BF16 = make_table<bf16>("cuda-bf16");
  TABLE_F16 = make_table<fp16>("cuda-fp16");
  g.ordinal = ordinal;
  g.ready = 1;
  return table;
}
