/* Storage types of activations: fp32, or bf16 / fp16 holding values that are computed in fp32 and
 * rounded to nearest, ties to even, when stored. Parameters, their gradients, optimizer state,
 * LayerNorm statistics and losses are fp32 whatever the activations are. */
#ifndef COLO_DTYPE_H
#define COLO_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { COLO_DTYPE_F32 = 0, COLO_DTYPE_BF16, COLO_DTYPE_F16 } colo_dtype_t;

/* bytes per element: 4, 2, 2 */
size_t colo_dtype_size(colo_dtype_t t);
/* "fp32", "bf16", "fp16" */
const char *colo_dtype_name(colo_dtype_t t);

/* Host conversions; dst and src may not overlap unless they are the same pointer with t fp32. */
void colo_dtype_from_float(void *dst, const float *src, size_t n, colo_dtype_t t);
void colo_dtype_to_float(float *dst, const void *src, size_t n, colo_dtype_t t);

/* One value: fp32 → bf16 bits (nearest, ties to even; NaN stays NaN) and back. */
static inline uint16_t colo_bf16_from_float(float f) {
  union {
    float f;
    uint32_t u;
  } x = {f};
  if ((x.u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
    return (uint16_t)((x.u >> 16) | 0x40u);
  return (uint16_t)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);
}

static inline float colo_bf16_to_float(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } x = {(uint32_t)h << 16};
  return x.f;
}

#endif
