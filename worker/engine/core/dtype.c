/* Storage types: sizes, names and host conversions. fp16 uses the compiler's _Float16, whose
 * conversions round to nearest, ties to even, as CUDA's __float2half_rn does. */
#include "dtype.h"

#include <string.h>

size_t colo_dtype_size(colo_dtype_t t) {
  return t == COLO_DTYPE_F32 ? 4 : 2;
}

const char *colo_dtype_name(colo_dtype_t t) {
  return t == COLO_DTYPE_BF16 ? "bf16" : t == COLO_DTYPE_F16 ? "fp16" : "fp32";
}

void colo_dtype_from_float(void *dst, const float *src, size_t n, colo_dtype_t t) {
  if (t == COLO_DTYPE_F32) {
    if (dst != src)
      memcpy(dst, src, n * sizeof(float));
  } else if (t == COLO_DTYPE_BF16) {
    uint16_t *d = dst;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
      d[i] = colo_bf16_from_float(src[i]);
  } else {
    _Float16 *d = dst;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
      d[i] = (_Float16)src[i];
  }
}

void colo_dtype_to_float(float *dst, const void *src, size_t n, colo_dtype_t t) {
  if (t == COLO_DTYPE_F32) {
    if (dst != src)
      memcpy(dst, src, n * sizeof(float));
  } else if (t == COLO_DTYPE_BF16) {
    const uint16_t *s = src;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
      dst[i] = colo_bf16_to_float(s[i]);
  } else {
    const _Float16 *s = src;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
      dst[i] = (float)s[i];
  }
}
