/* NF4 quantization on the host (nf4.h). */
#include "nf4.h"

#include <math.h>

const float colo_nf4_levels[16] = COLO_NF4_LEVELS;

/* the level nearest x in [−1, 1]: how many midpoints between neighbours lie below x */
static int nearest(float x) {
  int q = 0;
  for (int i = 0; i < 15; i++)
    q += x > (float)(((double)colo_nf4_levels[i] + (double)colo_nf4_levels[i + 1]) / 2.0);
  return q;
}

int colo_nf4_quantize(const float *w, int rows, int cols, uint8_t *codes, float *absmax) {
  size_t n = (size_t)rows * (size_t)cols;
  for (size_t i = 0; i < n; i++)
    if (!isfinite(w[i]))
      return -1;
  for (size_t i = 0; i < colo_nf4_code_bytes(n); i++)
    codes[i] = 0;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t b = 0; b < colo_nf4_blocks(n); b++) {
    size_t lo = b * COLO_NF4_BLOCK, hi = lo + COLO_NF4_BLOCK < n ? lo + COLO_NF4_BLOCK : n;
    float amax = 0.0f;
    for (size_t i = lo; i < hi; i++) { /* i in [cols][rows] order: w[i % rows][i / rows] */
      float a = fabsf(w[(i % (size_t)rows) * (size_t)cols + i / (size_t)rows]);
      amax = a > amax ? a : amax;
    }
    absmax[b] = amax;
    float inv = amax > 0.0f ? 1.0f / amax : 0.0f;
    for (size_t i = lo; i < hi; i++) {
      float v = w[(i % (size_t)rows) * (size_t)cols + i / (size_t)rows];
      int q = amax > 0.0f ? nearest(v * inv) : 7;
      /* a block is 32 whole bytes: no two blocks (threads) share one */
      codes[i / 2] |= (uint8_t)(i % 2 ? q : q << 4);
    }
  }
  return 0;
}

void colo_nf4_dequantize(const uint8_t *codes, const float *absmax, int rows, int cols, float *w) {
  size_t n = (size_t)rows * (size_t)cols;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    int q = i % 2 ? codes[i / 2] & 15 : codes[i / 2] >> 4;
    w[(i % (size_t)rows) * (size_t)cols + i / (size_t)rows] =
        colo_nf4_levels[q] * absmax[i / COLO_NF4_BLOCK];
  }
}
