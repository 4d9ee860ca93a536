/* NF4 quantization on the host (nf4.h). */
#include "nf4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Built without floating-point contraction (CMakeLists.txt): map[q]·absmax2 + offset rounds
 * twice, here as in the CUDA kernel and in bitsandbytes. */

const float colo_nf4_levels[16] = COLO_NF4_LEVELS;

const float colo_nf4_dq_map[256] = COLO_NF4_DQ_MAP;

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

/* A tile of 64 × 64 at a time: read along the codes (down a column of w) into the tile, then
 * written along w's rows, so that neither the reads nor the writes stride the whole matrix */
void colo_nf4_dequantize(const uint8_t *codes, const float *absmax, int rows, int cols, float *w) {
  enum { TILE = 64 };
  size_t R = (size_t)rows, C = (size_t)cols, tr = (R + TILE - 1) / TILE, tc = (C + TILE - 1) / TILE;
#pragma omp parallel for schedule(static) if (R * C > 65536)
  for (size_t t = 0; t < tr * tc; t++) {
    size_t r0 = t / tc * TILE, c0 = t % tc * TILE;
    size_t rn = R - r0 < TILE ? R - r0 : TILE, cn = C - c0 < TILE ? C - c0 : TILE;
    float tile[TILE][TILE + 1]; /* [column][row] */
    for (size_t c = 0; c < cn; c++)
      for (size_t r = 0, i = (c0 + c) * R + r0; r < rn; r++, i++) {
        int q = i % 2 ? codes[i / 2] & 15 : codes[i / 2] >> 4;
        tile[c][r] = colo_nf4_levels[q] * absmax[i / COLO_NF4_BLOCK];
      }
    for (size_t r = 0; r < rn; r++)
      for (size_t c = 0; c < cn; c++)
        w[(r0 + r) * C + c0 + c] = tile[c][r];
  }
}

/* the dynamic map's value nearest x: how many midpoints between neighbours lie below x (the
 * lower at a midpoint) */
static int dq_nearest(const float *mid, float x) {
  int lo = 0, hi = 255; /* the first midpoint ≥ x is in [lo, hi] (255: none) */
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if (mid[m] < x)
      lo = m + 1;
    else
      hi = m;
  }
  return lo;
}

void colo_nf4_dq_quantize(const float *absmax, size_t nb, uint8_t *q, float *stats) {
  float mid[255];
  for (int i = 0; i < 255; i++)
    mid[i] = (colo_nf4_dq_map[i] + colo_nf4_dq_map[i + 1]) * 0.5f;
  double sum = 0.0; /* in order, in double: the offset is their mean rounded once */
  for (size_t b = 0; b < nb; b++)
    sum += (double)absmax[b];
  float offset = nb ? (float)(sum / (double)nb) : 0.0f;
  size_t nd = (nb + COLO_NF4_DQ_BLOCK - 1) / COLO_NF4_DQ_BLOCK;
  for (size_t d = 0; d < nd; d++) {
    size_t lo = d * COLO_NF4_DQ_BLOCK,
           hi = lo + COLO_NF4_DQ_BLOCK < nb ? lo + COLO_NF4_DQ_BLOCK : nb;
    float amax = 0.0f;
    for (size_t b = lo; b < hi; b++) {
      float a = fabsf(absmax[b] - offset);
      amax = a > amax ? a : amax;
    }
    stats[d] = amax;
    float inv = amax > 0.0f ? 1.0f / amax : 0.0f;
    for (size_t b = lo; b < hi; b++)
      q[b] = (uint8_t)(amax > 0.0f ? dq_nearest(mid, (absmax[b] - offset) * inv) : 127);
  }
  stats[nd] = offset;
}

void colo_nf4_dq_dequantize(const uint8_t *q, const float *stats, size_t nb, float *absmax) {
  float offset = stats[(nb + COLO_NF4_DQ_BLOCK - 1) / COLO_NF4_DQ_BLOCK];
#pragma omp parallel for schedule(static) if (nb > 65536)
  for (size_t b = 0; b < nb; b++) {
    float v = colo_nf4_dq_map[q[b]] * stats[b / COLO_NF4_DQ_BLOCK];
    absmax[b] = v + offset;
  }
}

int colo_nf4_pack(const float *w, int rows, int cols, int dq, float *packed) {
  size_t n = (size_t)rows * (size_t)cols, nb = colo_nf4_blocks(n);
  uint8_t *p = (uint8_t *)packed;
  memset(p, 0, colo_nf4_packed_floats(n, dq) * sizeof(float));
  float *absmax =
      dq ? malloc((nb ? nb : 1) * sizeof *absmax) : (float *)(void *)(p + colo_nf4_codes_padded(n));
  if (!absmax)
    return -2;
  int rc = colo_nf4_quantize(w, rows, cols, p, absmax);
  if (dq) {
    if (rc == 0)
      colo_nf4_dq_quantize(absmax, nb, p + colo_nf4_codes_padded(n),
                           (float *)(void *)(p + colo_nf4_stats_at(n)));
    free(absmax);
  }
  return rc;
}

int colo_nf4_unpack(const float *packed, int rows, int cols, int dq, float *w) {
  size_t n = (size_t)rows * (size_t)cols, nb = colo_nf4_blocks(n);
  const uint8_t *p = (const uint8_t *)packed;
  const float *absmax = (const float *)(const void *)(p + colo_nf4_codes_padded(n));
  float *made = NULL;
  if (dq) {
    if (!(made = malloc((nb ? nb : 1) * sizeof *made)))
      return -2;
    colo_nf4_dq_dequantize(p + colo_nf4_codes_padded(n),
                           (const float *)(const void *)(p + colo_nf4_stats_at(n)), nb, made);
    absmax = made;
  }
  colo_nf4_dequantize(p, absmax, rows, cols, w);
  free(made);
  return 0;
}
