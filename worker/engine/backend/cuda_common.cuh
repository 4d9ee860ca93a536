/* What the CUDA backend's files share: error checks, the storage types' loads and stores, and the
 * fused attention's entry points (cuda_flash.cu). Internal to libcolo_cuda.so. */
#ifndef COLO_CUDA_COMMON_CUH
#define COLO_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "backend.h"
}

/* ---- errors ---- */

static inline void die_cuda(cudaError_t e, const char *what, const char *file, int line) {
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

/* ---- storage types: load into fp32, store rounded to nearest even ---- */

typedef __nv_bfloat16 bf16;
typedef __half fp16;

__device__ __forceinline__ static float ld(float x) {
  return x;
}
__device__ __forceinline__ static float ld(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ static float ld(fp16 x) {
  return __half2float(x);
}

template <class T> __device__ __forceinline__ static T st(float x);
template <> __device__ __forceinline__ float st<float>(float x) {
  return x;
}
template <> __device__ __forceinline__ bf16 st<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ fp16 st<fp16>(float x) {
  return __float2half_rn(x);
}

/* 16 bytes of the storage type (8 bf16 or fp16 values, 4 floats), loaded and stored as one
 * 128-bit access: memory-bound kernels reach the GPU's bandwidth with them, not with 2-byte
 * accesses. p must be 16-byte aligned (vec_ok). */
template <class T> struct alignas(16) pack {
  static constexpr int n = 16 / (int)sizeof(T);
  T v[16 / sizeof(T)];
};
template <class T> __device__ __forceinline__ static pack<T> ldp(const T *p) {
  pack<T> r;
  *reinterpret_cast<uint4 *>(&r) = *reinterpret_cast<const uint4 *>(p);
  return r;
}
template <class T> __device__ __forceinline__ static void stp(T *p, const pack<T> &r) {
  *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(&r);
}
/* whether rows of `len` values of T starting at each pointer can be read in packs */
template <class T>
static inline int vec_ok(size_t len, const void *a, const void *b = NULL, const void *c = NULL) {
  return len % pack<T>::n == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16) == 0;
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> {
  static const cudaDataType_t cuda = CUDA_R_32F;
  static const colo_dtype_t colo = COLO_DTYPE_F32;
};
template <> struct dtype_of<bf16> {
  static const cudaDataType_t cuda = CUDA_R_16BF;
  static const colo_dtype_t colo = COLO_DTYPE_BF16;
};
template <> struct dtype_of<fp16> {
  static const cudaDataType_t cuda = CUDA_R_16F;
  static const colo_dtype_t colo = COLO_DTYPE_F16;
};

/* ---- fused attention (cuda_flash.cu) ----
 * FlashAttention-2's schedule on the tensor cores (mma.sync) for 16-bit storage: no T×T matrix,
 * not even per group. Each returns 0, having done nothing, when it does not handle the case (fp32
 * storage, a head size other than 32, 64 or 128, rows not 16-byte aligned); the caller then
 * runs the batched-product attention. async: the streamed tiles in two stages, the next loaded
 * (cp.async) while the block works on this one (COLO_CUDA_ATTENTION=flash-async). */
int flash_attention_fwd(colo_dtype_t t, int async, void *out, float *lse, const void *qkv, int B,
                        int T, int C, int NH, const int *pos, cudaStream_t stream);
/* dsum: fp32 scratch of B·NH·T (each query's Σ dout·out); pos: documents, as backend.h's
 * attention entries take them (NULL: none) */
int flash_attention_bwd(colo_dtype_t t, int async, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, float *dsum, int B, int T, int C, int NH,
                        const int *pos, cudaStream_t stream);

/* ---- cuDNN's fused attention (cuda_cudnn.cu), COLO_CUDA_ATTENTION=cudnn ----
 * cudnn_attention_open loads cuDNN (dlopen: COLO_CUDNN_LIBRARY, else libcudnn.so.9) and makes its
 * handle; 0 with err said when it cannot. The two others return 1 when done, 0 when the case is
 * not cuDNN's (fp32 storage, a head size not a multiple of 8 or above 128, cuDNN not opened), −1
 * when cuDNN has no plan for it (cudnn_attention_error says why). */
int cudnn_attention_open(char *err, size_t errlen);
const char *cudnn_attention_error(void);
int cudnn_attention_fwd(colo_dtype_t t, void *out, float *lse, const void *qkv, int B, int T, int C,
                        int NH, cudaStream_t stream);
/* deterministic: dQ as a product of its own over dS kept in the workspace (the same bits every
 * run); else added up with atomics */
int cudnn_attention_bwd(colo_dtype_t t, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, int B, int T, int C, int NH,
                        int deterministic, cudaStream_t stream);
/* the device memory the backward's plan uses beside its tensors (cuDNN's workspace, Σ dO·O and
 * the atomic backward's fp32 dQ); −1 where cuDNN has no plan or the case is not its own */
int64_t cudnn_attention_bwd_bytes(colo_dtype_t t, int B, int T, int C, int NH, int deterministic);
/* What a cuDNN attention graph computes, kept beside cuDNN's descriptors as it is built, for
 * test_cudnn_plan to evaluate on the CPU against colo's CPU attention: its tensors (shape and
 * strides in elements; uid as below for the caller's, from CUDNN_SHADOW_VIRTUAL for
 * intermediates) and its operations in order (kind: 'p'ointwise, 'r'eduction, 'm'atmul,
 * re's'hape; mode: cuDNN's pointwise mode or reduction operator; in[]: tensor indices, −1 none:
 * pointwise x, b, t; reduction x; matmul a, b; reshape x). */
enum {
  CUDNN_U_Q = 1,
  CUDNN_U_K,
  CUDNN_U_V,
  CUDNN_U_O,
  CUDNN_U_LSE,
  CUDNN_U_SCALE,
  CUDNN_U_NEG,
  CUDNN_U_ONE,
  CUDNN_U_DO,
  CUDNN_U_DQ,
  CUDNN_U_DK,
  CUDNN_U_DV,
  CUDNN_U_D,
  CUDNN_U_DQF,
  CUDNN_SHADOW_VIRTUAL = 100
};
typedef struct {
  int64_t uid, dim[4], stride[4];
} cudnn_shadow_tensor_t;
typedef struct {
  char kind;
  int mode, in[3], out;
  int64_t axis;
} cudnn_shadow_op_t;
typedef struct {
  cudnn_shadow_tensor_t t[64];
  cudnn_shadow_op_t op[32];
  int nt, nop;
} cudnn_shadow_t;
/* the shadow of a shape's graph (kind: CUDNN_GRAPH_*; NULL: cuDNN not loaded, or not cuDNN's
 * case) */
enum { CUDNN_GRAPH_FWD, CUDNN_GRAPH_BWD, CUDNN_GRAPH_BWD_DETERMINISTIC };
const cudnn_shadow_t *cudnn_attention_shadow(int kind, colo_dtype_t t, int B, int T, int C, int NH);

/* without a GPU: both plans for a shape built for a GPU described in cuDNN's JSON (1, why naming
 * the engines; else 0, why said); and that JSON for this process's GPU (needs one) */
int cudnn_attention_plan_offline(const char *devprop_json, colo_dtype_t t, int B, int T, int C,
                                 int NH, char *why, size_t len);
int cudnn_devprop_json(char *buf, size_t len, char *err, size_t errlen);

#endif
