/* The CPU backend: fp32, OpenBLAS for matrix products, OpenMP for everything else.
 *
 * Determinism: for a given thread count every result is the same from run to run. Parallel
 * loops write disjoint outputs; reductions over rows (bias and LayerNorm weight gradients, the
 * squared norm) sum fixed-size blocks independently and then add the blocks in order, so they do
 * not even depend on the thread count.
 */
#include "backend.h"
#include "../core/nf4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

#define REDUCE_BLOCKS 32 /* fixed: results must not depend on the number of threads */

void colo_embed_rows(void *out, const int *tokens, const void *table, int N, size_t row, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    char *o = (char *)out + (size_t)n * row;
    if (tokens[n] >= 0 && tokens[n] < V)
      memcpy(o, (const char *)table + (size_t)tokens[n] * row, row);
    else
      memset(o, 0, row);
  }
}

void colo_backend_cpu_set_threads(int n) {
  openblas_set_num_threads(1); /* the GEMM wrappers below parallelise with OpenMP */
  if (n > 0)
    omp_set_num_threads(n);
}

int colo_backend_cpu_threads(void) {
  return omp_get_max_threads();
}

/* ---- matrix products ----
 * OpenBLAS runs single-threaded; each product is split into column or row blocks that OpenMP
 * threads compute with one sgemm each. One thread pool, no spinning pools fighting over the cores,
 * and every output element is computed by exactly one sgemm call whatever the thread count. */

#define GEMM_BLOCKS 8 /* fixed split: results must not depend on the number of threads */

static void block_range(int total, int blk, int nblk, int align, int *lo, int *hi) {
  int per = (total + nblk - 1) / nblk;
  per = (per + align - 1) / align * align;
  *lo = blk * per < total ? blk * per : total;
  *hi = *lo + per < total ? *lo + per : total;
}

/* C[M][Nc] (ldc) = alpha·op(A)·op(B) + beta·C, split over the columns of C */
static void gemm_cols(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int Nc, int K, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc) {
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < GEMM_BLOCKS; blk++) {
    int lo, hi;
    block_range(Nc, blk, GEMM_BLOCKS, 16, &lo, &hi);
    if (hi <= lo)
      continue;
    const float *Bb = tb == CblasNoTrans ? B + lo : B + (size_t)lo * ldb;
    cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, 1.0f, A, lda, Bb, ldb, beta, C + lo, ldc);
  }
}

/* the same, split over the rows of C (A is not transposed) */
static void gemm_rows(CBLAS_TRANSPOSE tb, int M, int Nc, int K, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < GEMM_BLOCKS; blk++) {
    int lo, hi;
    block_range(M, blk, GEMM_BLOCKS, 4, &lo, &hi);
    if (hi <= lo)
      continue;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, hi - lo, Nc, K, 1.0f, A + (size_t)lo * lda, lda, B,
                ldb, beta, C + (size_t)lo * ldc, ldc);
  }
}

static void matmul_fwd(void *out_, const void *inp_, const void *w_, const float *b, int N, int C,
                       int OC) {
  float *out = out_;
  const float *inp = inp_, *w = w_;
  if (b) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
      memcpy(out + (size_t)n * OC, b, (size_t)OC * sizeof(float));
  }
  gemm_rows(CblasNoTrans, N, OC, C, inp, C, w, OC, b ? 1.0f : 0.0f, out, OC);
}

/* dst[OC] += Σ_n src[n][OC], in REDUCE_BLOCKS row blocks summed in order */
static void sum_rows_into(float *dst, const float *src, int N, int OC) {
  float *part = calloc((size_t)REDUCE_BLOCKS * OC, sizeof(float));
  int per = (N + REDUCE_BLOCKS - 1) / REDUCE_BLOCKS;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
    float *p = part + (size_t)blk * OC;
    int lo = blk * per, hi = lo + per < N ? lo + per : N;
    for (int n = lo; n < hi; n++) {
      const float *row = src + (size_t)n * OC;
#pragma omp simd
      for (int o = 0; o < OC; o++)
        p[o] += row[o];
    }
  }
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
    const float *p = part + (size_t)blk * OC;
    for (int o = 0; o < OC; o++)
      dst[o] += p[o];
  }
  free(part);
}

static void matmul_bwd(void *dinp_, float *dw, float *db, const void *dout_, const void *inp_,
                       const void *w_, int N, int C, int OC) {
  float *dinp = dinp_;
  const float *dout = dout_, *inp = inp_, *w = w_;
  if (dinp) /* dinp[N][C] = dout[N][OC] · w[C][OC]ᵀ */
    gemm_rows(CblasTrans, N, C, OC, dout, OC, w, OC, 0.0f, dinp, C);
  if (dw) /* dw[C][OC] += inp[N][C]ᵀ · dout[N][OC] */
    gemm_cols(CblasTrans, CblasNoTrans, C, OC, N, inp, C, dout, OC, 1.0f, dw, OC);
  if (db)
    sum_rows_into(db, dout, N, OC);
}

static void lmhead_fwd(void *out, const void *inp, const void *wte, int N, int C, int V) {
  gemm_rows(CblasTrans, N, V, C, inp, C, wte, C, 0.0f, out, V);
}

static void lmhead_bwd(void *dinp, float *dwte, const void *dout, const void *inp, const void *wte,
                       int N, int C, int V) {
  if (dinp) /* dinp[N][C] = dout[N][V] · wte[V][C] */
    gemm_rows(CblasNoTrans, N, C, V, dout, V, wte, C, 0.0f, dinp, C);
  if (dwte) /* dwte[V][C] += dout[N][V]ᵀ · inp[N][C] */
    gemm_cols(CblasTrans, CblasNoTrans, V, C, N, dout, V, inp, C, 1.0f, dwte, C);
}

/* ---- embeddings ---- */

static void encoder_fwd(void *out_, const int *tokens, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int v1, const int *pos) {
  float *out = out_;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      int tok = tokens[b * T + t];
      const float *e = tok >= v0 && tok < v1 ? wte + (size_t)(tok - v0) * C : NULL;
      const float *p = wpe ? wpe + (size_t)(pos ? pos[b * T + t] : t) * C : NULL;
#pragma omp simd
      for (int i = 0; i < C; i++)
        o[i] = (e ? e[i] : 0.0f) + (p ? p[i] : 0.0f);
    }
}

static void dropout(void *out_, const void *inp_, int N, int C, uint64_t key, uint64_t row0,
                    int col0, uint32_t thresh, float scale) {
  float *out = out_;
  const float *inp = inp_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      out[i] =
          inp[i] *
          (colo_dropout_keep(key, row0 + (uint64_t)n, (uint64_t)(col0 + c), thresh) ? scale : 0.0f);
    }
}

static void noise(void *x, int N, int C, uint64_t key, uint64_t row0, float mag) {
  colo_noise_add(x, N, C, key, row0, mag);
}

static void scale_rows(void *x_, const float *w, int N, int C) {
  float *x = x_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      x[(size_t)n * C + c] *= w[n];
}

/* DoRA's entries (backend.h): each column's sum in a fixed order (rows ascending), whatever the
 * threads, in blocks of DORA_COLS columns */
#define DORA_COLS 64
static void dora_norm(float *sq, const void *w_, const void *dt_, int in, int out) {
  const float *w = w_, *dt = dt_;
#pragma omp parallel for schedule(static)
  for (int j0 = 0; j0 < out; j0 += DORA_COLS) {
    int nj = out - j0 < DORA_COLS ? out - j0 : DORA_COLS;
    float acc[DORA_COLS] = {0};
    for (int i = 0; i < in; i++)
      for (int j = 0; j < nj; j++) {
        float d = w[(size_t)i * out + j0 + j] + dt[(size_t)(j0 + j) * in + i];
        acc[j] += d * d;
      }
    memcpy(sq + j0, acc, (size_t)nj * sizeof *sq);
  }
}

/* dora_scale's out = inp · g + b, or (add) dora_add's out += inp · (g − 1) + b */
static void dora_rescale(float *out, const float *inp, const float *mag, const float *sq,
                         const float *b, int N, int C, int add) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      size_t i = (size_t)n * C + c;
      float g = mag[c] / sqrtf(sq[c]), bias = b ? b[c] : 0.0f;
      out[i] = add ? out[i] + inp[i] * (g - 1.0f) + bias : inp[i] * g + bias;
    }
}

static void dora_scale(void *out, const void *inp, const float *mag, const float *sq,
                       const float *b, int N, int C) {
  dora_rescale(out, inp, mag, sq, b, N, C, 0);
}

static void dora_add(void *out, const void *inp, const float *mag, const float *sq, const float *b,
                     int N, int C) {
  dora_rescale(out, inp, mag, sq, b, N, C, 1);
}

static void dora_dmag(float *dmag, const void *dout_, const void *z_, const float *sq, int N,
                      int C) {
  const float *dout = dout_, *z = z_;
#pragma omp parallel for schedule(static)
  for (int c0 = 0; c0 < C; c0 += DORA_COLS) {
    int nc = C - c0 < DORA_COLS ? C - c0 : DORA_COLS;
    float acc[DORA_COLS] = {0};
    for (int n = 0; n < N; n++)
      for (int c = 0; c < nc; c++)
        acc[c] += dout[(size_t)n * C + c0 + c] * z[(size_t)n * C + c0 + c];
    for (int c = 0; c < nc; c++)
      dmag[c0 + c] += acc[c] / sqrtf(sq[c0 + c]);
  }
}

static void embed_fwd(void *out, const int *tokens, const void *table, int N, int C, int V) {
  colo_embed_rows(out, tokens, table, N, (size_t)C * sizeof(float), V);
}

static void encoder_bwd(float *dwte, float *dwpe, const void *dout_, const int *tokens, int B,
                        int T, int C, int v0, int v1, const int *pos) {
  const float *dout = dout_;
  /* rows that share a token must be added in a fixed order: serial over (b, t), parallel over
   * channels */
#pragma omp parallel for schedule(static)
  for (int i0 = 0; i0 < C; i0 += 16) {
    int i1 = i0 + 16 < C ? i0 + 16 : C;
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const float *d = dout + ((size_t)b * T + t) * C;
        int tok = tokens[b * T + t];
        float *e = dwte && tok >= v0 && tok < v1 ? dwte + (size_t)(tok - v0) * C : NULL;
        float *p = dwpe ? dwpe + (size_t)(pos ? pos[b * T + t] : t) * C : NULL;
        for (int i = i0; i < i1; i++) {
          if (e)
            e[i] += d[i];
          if (p)
            p[i] += d[i];
        }
      }
  }
}

/* ---- LayerNorm ---- */

static void layernorm_fwd(void *out_, float *mean, float *rstd, const void *inp_, const float *w,
                          const float *b, int N, int C) {
  float *out = out_;
  const float *inp = inp_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int i = 0; i < C; i++)
      m += x[i];
    m /= (float)C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; i++) {
      float d = x[i] - m;
      v += d * d;
    }
    v /= (float)C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    float *o = out + (size_t)n * C;
#pragma omp simd
    for (int i = 0; i < C; i++)
      o[i] = (x[i] - m) * s * w[i] + b[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

static void layernorm_bwd(void *dinp_, float *dw, float *db, const void *dout_, const void *inp_,
                          const float *w, const float *mean, const float *rstd, int N, int C) {
  float *dinp = dinp_;
  const float *dout = dout_, *inp = inp_;
  float *part = (dw || db) ? calloc((size_t)REDUCE_BLOCKS * 2 * C, sizeof(float)) : NULL;
  int per = (N + REDUCE_BLOCKS - 1) / REDUCE_BLOCKS;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
    float *pw = part ? part + (size_t)blk * 2 * C : NULL, *pb = pw ? pw + C : NULL;
    int lo = blk * per, hi = lo + per < N ? lo + per : N;
    for (int n = lo; n < hi; n++) {
      const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
      float m = mean[n], s = rstd[n];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int i = 0; i < C; i++) {
        float xh = (x[i] - m) * s;
        float dn = w[i] * d[i];
        dnorm_mean += dn;
        dnorm_norm_mean += dn * xh;
      }
      dnorm_mean /= (float)C;
      dnorm_norm_mean /= (float)C;
      if (pw) {
#pragma omp simd
        for (int i = 0; i < C; i++) {
          float xh = (x[i] - m) * s;
          pb[i] += d[i];
          pw[i] += xh * d[i];
        }
      }
      if (dinp) {
        float *di = dinp + (size_t)n * C;
#pragma omp simd
        for (int i = 0; i < C; i++) {
          float xh = (x[i] - m) * s;
          float dn = w[i] * d[i];
          di[i] += (dn - dnorm_mean - xh * dnorm_norm_mean) * s;
        }
      }
    }
  }
  if (part) {
    for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
      const float *pw = part + (size_t)blk * 2 * C, *pb = pw + C;
      for (int i = 0; i < C; i++) {
        if (dw)
          dw[i] += pw[i];
        if (db)
          db[i] += pb[i];
      }
    }
    free(part);
  }
}

/* ---- RMSNorm ---- */

static void rmsnorm_fwd(void *out_, float *rstd, const void *inp_, const float *w, int N, int C,
                        float eps) {
  float *out = out_;
  const float *inp = inp_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < C; i++)
      ss += x[i] * x[i];
    float s = 1.0f / sqrtf(ss / (float)C + eps);
    float *o = out + (size_t)n * C;
#pragma omp simd
    for (int i = 0; i < C; i++)
      o[i] = x[i] * s * w[i];
    rstd[n] = s;
  }
}

/* y = w·x·r with r = (Σx²/C + eps)^-½: dx = r·w·d − r³·x·Σ(w·d·x)/C;  dw += d·x·r */
static void rmsnorm_bwd(void *dinp_, float *dw, const void *dout_, const void *inp_, const float *w,
                        const float *rstd, int N, int C) {
  float *dinp = dinp_;
  const float *dout = dout_, *inp = inp_;
  float *part = dw ? calloc((size_t)REDUCE_BLOCKS * C, sizeof(float)) : NULL;
  int per = (N + REDUCE_BLOCKS - 1) / REDUCE_BLOCKS;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
    float *pw = part ? part + (size_t)blk * C : NULL;
    int lo = blk * per, hi = lo + per < N ? lo + per : N;
    for (int n = lo; n < hi; n++) {
      const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
      float s = rstd[n], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < C; i++)
        dot += w[i] * d[i] * x[i];
      if (pw) {
#pragma omp simd
        for (int i = 0; i < C; i++)
          pw[i] += d[i] * x[i] * s;
      }
      if (dinp) {
        float *di = dinp + (size_t)n * C, k = s * s * s * dot / (float)C;
#pragma omp simd
        for (int i = 0; i < C; i++)
          di[i] += s * w[i] * d[i] - k * x[i];
      }
    }
  }
  if (part) {
    for (int blk = 0; blk < REDUCE_BLOCKS; blk++)
      for (int i = 0; i < C; i++)
        dw[i] += part[(size_t)blk * C + i];
    free(part);
  }
}

/* ---- QK-norm (Qwen3's): RMSNorm over each query and key head ---- */

/* QK-norm: a head's values normalized in place, their raw copy and 1/rms saved */
static void qk_norm_fwd(void *x_, void *raw_, float *rstd, const float *wq, const float *wk, int N,
                        int W, int NQ, int NK, int hs, float eps) {
  float *x = x_, *raw = raw_;
  int NHk = NQ + NK;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    for (int h = 0; h < NHk; h++) {
      float *v = x + (size_t)n * W + (size_t)h * hs, *r = raw + ((size_t)n * NHk + h) * hs;
      const float *w = h < NQ ? wq : wk;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int i = 0; i < hs; i++)
        ss += v[i] * v[i];
      float s = 1.0f / sqrtf(ss / (float)hs + eps);
      for (int i = 0; i < hs; i++) {
        r[i] = v[i];
        v[i] = r[i] * s * w[i];
      }
      rstd[(size_t)n * NHk + h] = s;
    }
}

/* its backward: rmsnorm_bwd's per head, the weights' sums in REDUCE_BLOCKS row blocks added in
 * order (deterministic whatever the threads) */
static void qk_norm_bwd(void *dx_, float *dwq, float *dwk, const void *raw_, const float *rstd,
                        const float *wq, const float *wk, int N, int W, int NQ, int NK, int hs) {
  float *dx = dx_;
  const float *raw = raw_;
  int NHk = NQ + NK, want = dwq || dwk;
  float *part = want ? calloc((size_t)REDUCE_BLOCKS * 2 * hs, sizeof(float)) : NULL;
  int per = (N + REDUCE_BLOCKS - 1) / REDUCE_BLOCKS;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
    float *pw = part ? part + (size_t)blk * 2 * hs : NULL;
    int lo = blk * per, hi = lo + per < N ? lo + per : N;
    for (int n = lo; n < hi; n++)
      for (int h = 0; h < NHk; h++) {
        float *d = dx + (size_t)n * W + (size_t)h * hs;
        const float *x = raw + ((size_t)n * NHk + h) * hs, *w = h < NQ ? wq : wk;
        float s = rstd[(size_t)n * NHk + h], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int i = 0; i < hs; i++)
          dot += w[i] * d[i] * x[i];
        if (pw) {
          float *p = pw + (h < NQ ? 0 : hs);
#pragma omp simd
          for (int i = 0; i < hs; i++)
            p[i] += d[i] * x[i] * s;
        }
        float k = s * s * s * dot / (float)hs;
#pragma omp simd
        for (int i = 0; i < hs; i++)
          d[i] = s * w[i] * d[i] - k * x[i];
      }
  }
  if (part) {
    for (int blk = 0; blk < REDUCE_BLOCKS; blk++)
      for (int i = 0; i < hs; i++) {
        if (dwq)
          dwq[i] += part[(size_t)blk * 2 * hs + i];
        if (dwk)
          dwk[i] += part[(size_t)blk * 2 * hs + hs + i];
      }
    free(part);
  }
}

/* ---- rotary position embedding ---- */

static void rope(void *qkv_, int B, int T, int C, int NH, int pos0, const float *inv_freq,
                 float mag, int dir, const int *pos) {
  float *qkv = qkv_;
  int hs = C / NH, h2 = hs / 2;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    float at = (float)(pos0 + (pos ? pos[bt] : bt % T));
    float *row = qkv + (size_t)bt * 3 * C;
    for (int i = 0; i < h2; i++) {
      float ang = at * inv_freq[i]; /* in fp32, as HF computes it */
      float c = mag * cosf(ang), sn = mag * (dir < 0 ? -sinf(ang) : sinf(ang));
      for (int part = 0; part < 2 * NH; part++) { /* the heads of q, then of k */
        float *x = row + (size_t)part * hs;
        float x1 = x[i], x2 = x[i + h2];
        x[i] = x1 * c - x2 * sn;
        x[i + h2] = x2 * c + x1 * sn;
      }
    }
  }
}

/* ---- grouped-query attention by repetition ---- */

static void kv_expand(void *dst_, const void *src_, int N, int C, int NH, int NKV) {
  float *dst = dst_;
  const float *src = src_;
  int hs = C / NH, g = NH / NKV, KV = NKV * hs;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *s = src + (size_t)n * (C + 2 * KV);
    float *d = dst + (size_t)n * 3 * C;
    memcpy(d, s, (size_t)C * sizeof(float));
    for (int part = 1; part < 3; part++)
      for (int h = 0; h < NH; h++)
        memcpy(d + (size_t)part * C + (size_t)h * hs,
               s + C + (size_t)(part - 1) * KV + (h / g) * hs, (size_t)hs * sizeof(float));
  }
}

static void kv_reduce(void *dst_, const void *src_, int N, int C, int NH, int NKV) {
  float *dst = dst_;
  const float *src = src_;
  int hs = C / NH, g = NH / NKV, KV = NKV * hs;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *s = src + (size_t)n * 3 * C;
    float *d = dst + (size_t)n * (C + 2 * KV);
    memcpy(d, s, (size_t)C * sizeof(float));
    for (int part = 1; part < 3; part++)
      for (int j = 0; j < NKV; j++)
        for (int i = 0; i < hs; i++) {
          float acc = 0.0f;
          for (int k = 0; k < g; k++) /* the group's heads, in order */
            acc += s[(size_t)part * C + (size_t)(j * g + k) * hs + i];
          d[C + (size_t)(part - 1) * KV + (size_t)j * hs + i] = acc;
        }
  }
}

void colo_rope_freqs(int hs, float theta, float factor, float low, float high, int orig,
                     float *inv_freq) {
  for (int i = 0; i < hs / 2; i++) {
    float f = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
    if (factor > 0.0f) {
      float wavelen = 6.2831853071795865f / f; /* 2π */
      float lo_wl = (float)orig / low, hi_wl = (float)orig / high;
      if (wavelen > lo_wl) { /* low frequencies: slowed by the factor */
        f /= factor;
      } else if (wavelen >= hi_wl) { /* the band between: a blend of the two */
        float s = ((float)orig / wavelen - low) / (high - low);
        f = (1.0f - s) * f / factor + s * f;
      }
    }
    inv_freq[i] = f;
  }
}

void colo_rope_freqs_ext(int hs, float theta, const float *ext, float *inv_freq) {
  for (int i = 0; i < hs / 2; i++)
    inv_freq[i] = 1.0f / (ext[i] * powf(theta, (float)(2 * i) / (float)hs));
}

/* ---- SwiGLU ---- */

static inline float sigmoidf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

static void swiglu_fwd(void *out_, const void *pre_, int N, int H) {
  float *out = out_;
  const float *pre = pre_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *g = pre + (size_t)n * 2 * H, *u = g + H;
    float *o = out + (size_t)n * H;
    for (int i = 0; i < H; i++)
      o[i] = g[i] * sigmoidf(g[i]) * u[i];
  }
}

static void swiglu_bwd(void *dpre_, const void *pre_, const void *dout_, int N, int H) {
  float *dpre = dpre_;
  const float *pre = pre_, *dout = dout_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *g = pre + (size_t)n * 2 * H, *u = g + H, *d = dout + (size_t)n * H;
    float *dg = dpre + (size_t)n * 2 * H, *du = dg + H;
    for (int i = 0; i < H; i++) {
      float sg = sigmoidf(g[i]);
      dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
      du[i] = d[i] * g[i] * sg;
    }
  }
}

/* ---- GELU (tanh) ---- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

/* tanh(u) = 1 - 2/(e^{2u} + 1): expf vectorises (glibc's libmvec), tanhf does not. GELU only
 * uses 1 + tanh and 1 - tanh², where this form's absolute error (~1e-7) is what matters. The
 * argument is clamped where tanh is ±1 in float anyway, so e^{2u} never overflows. */
static inline float fast_tanh(float u) {
  u = u > 15.0f ? 15.0f : (u < -15.0f ? -15.0f : u);
  return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

static void gelu_fwd(void *out_, const void *inp_, size_t n) {
  float *out = out_;
  const float *inp = inp_;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + fast_tanh(GELU_K * (x + 0.044715f * x * x * x)));
  }
}

static void gelu_bwd(void *dinp_, const void *inp_, const void *dout_, size_t n) {
  float *dinp = dinp_;
  const float *inp = inp_, *dout = dout_;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_K * (x + 0.044715f * x * x * x);
    float th = fast_tanh(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = g * dout[i];
  }
}

/* the MLP's product and GELU, one after the other (backend.h) */
static void matmul_gelu_fwd(void *out, void *pre, const void *inp, const void *w, const float *b,
                            int N, int C, int OC) {
  matmul_fwd(pre, inp, w, b, N, C, OC);
  gelu_fwd(out, pre, (size_t)N * OC);
}

static void matmul_gelu_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                            const void *w, const void *pre, int N, int C, int OC) {
  matmul_bwd(dinp, dw, db, dout, inp, w, N, C, OC);
  if (dinp) /* in place: each value is read before it is written */
    gelu_bwd(dinp, pre, dinp, (size_t)N * C);
}

/* ---- attention ----
 *
 * Per (sequence, head), in blocks of ATT_BLOCK query rows, through BLAS: the scores of a block
 * against the keys up to its last row are one product, and so are the block's outputs; the
 * keys' and values' gradients are products over column blocks. A block computes the scores
 * below its rows' diagonals only where they can be nonzero, so causal attention costs about half
 * of the full square. */

#define ATT_BLOCK 64

/* The first key row i of a sequence attends: 0, or with documents or a window (pos, the
 * sequence's positions) its document's first token or its window's. It only grows down the
 * rows. */
static inline int attention_from(const int *pos, int i) {
  return pos ? i - pos[i] : 0;
}

/* The scaled scores of query rows [r0, r1) against keys [c0, r1) into p (row stride T), c0 the
 * block's first key (attention_from(pos, r0)), then each row's softmax in place: p[i][from..i]
 * its probabilities, p[i][0..from) and p[i][i+1..r1) zero. lse[i] (when not NULL) gets the row's
 * log-sum-exp of the scaled scores. The forward and the backward both call it, so the backward's
 * probabilities are the forward's bit for bit. */
static void attention_probs(float *p, float *lse, const float *q, const float *k, int r0, int r1,
                            int T, int ld, int hs, float scale, const int *pos) {
  int c0 = attention_from(pos, r0);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1 - c0, hs, scale,
              q + (size_t)r0 * ld, ld, k + (size_t)c0 * ld, ld, 0.0f, p + (size_t)r0 * T + c0, T);
  for (int i = r0; i < r1; i++) {
    float *a = p + (size_t)i * T, maxv = -INFINITY, sum = 0.0f;
    int j0 = attention_from(pos, i);
    for (int j = 0; j < j0; j++)
      a[j] = 0.0f;
    for (int j = j0; j <= i; j++)
      maxv = a[j] > maxv ? a[j] : maxv;
    for (int j = j0; j <= i; j++) {
      a[j] = expf(a[j] - maxv);
      sum += a[j];
    }
    float inv = 1.0f / sum;
    for (int j = j0; j <= i; j++)
      a[j] *= inv;
    for (int j = i + 1; j < r1; j++)
      a[j] = 0.0f;
    if (lse)
      lse[i] = maxv + logf(sum);
  }
}

static void attention_fwd(void *out_, float *lse, const void *qkv_, int B, int T, int C, int NH,
                          const int *pos) {
  float *out = out_;
  const float *qkv = qkv_;
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
  {
    float *p = malloc((size_t)T * T * sizeof *p); /* a head's probabilities, per thread */
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const int *ps = pos ? pos + (size_t)b * T : NULL;
        float *o = out + (size_t)b * T * C + h * hs;
        float *l = lse + ((size_t)b * NH + h) * T;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
          int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, c0 = attention_from(ps, r0);
          attention_probs(p, l, q, k, r0, r1, T, C3, hs, scale, ps);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1 - c0, 1.0f,
                      p + (size_t)r0 * T + c0, T, v + (size_t)c0 * C3, C3, 0.0f, o + (size_t)r0 * C,
                      C);
        }
      }
    free(p);
  }
}

/* The probabilities are recomputed (attention_probs; out and lse are not needed here). */
static void attention_bwd(void *dqkv_, const void *dout_, const void *qkv_, const void *out,
                          const float *lse, int B, int T, int C, int NH, const int *pos) {
  float *dqkv = dqkv_;
  const float *dout = dout_, *qkv = qkv_;
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  (void)out, (void)lse;
#pragma omp parallel
  {
    /* per thread: a head's probabilities and their gradient (then the scores') */
    float *p = malloc((size_t)T * T * sizeof *p), *ds = malloc((size_t)T * T * sizeof *ds);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        const float *d = dout + (size_t)b * T * C + h * hs;
        const int *ps = pos ? pos + (size_t)b * T : NULL;
        float *dq = dqkv + (size_t)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
          int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T, c0 = attention_from(ps, r0);
          attention_probs(p, NULL, q, k, r0, r1, T, C3, hs, scale, ps);
          /* through the weighted sum of values: dP = dO · Vᵀ */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1 - c0, hs, 1.0f,
                      d + (size_t)r0 * C, C, v + (size_t)c0 * C3, C3, 0.0f,
                      ds + (size_t)r0 * T + c0, T);
          /* through the softmax, then the scaling: dS = P ∘ (dP − rowsum(P ∘ dP)) · scale */
          for (int i = r0; i < r1; i++) {
            const float *a = p + (size_t)i * T;
            float *g = ds + (size_t)i * T, dot = 0.0f;
            int j0 = attention_from(ps, i);
            for (int j = 0; j < j0; j++)
              g[j] = 0.0f;
            for (int j = j0; j <= i; j++)
              dot += a[j] * g[j];
            for (int j = j0; j <= i; j++)
              g[j] = a[j] * (g[j] - dot) * scale;
            for (int j = i + 1; j < r1; j++)
              g[j] = 0.0f;
          }
          /* dQ = dS · K, the block's rows */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1 - c0, 1.0f,
                      ds + (size_t)r0 * T + c0, T, k + (size_t)c0 * C3, C3, 0.0f,
                      dq + (size_t)r0 * C3, C3);
        }
        /* dK = dSᵀ · Q and dV = Pᵀ · dO by column blocks: key c has nonzero entries in rows
         * c … e − 1 only, e the first row whose first key is past the block (T without documents
         * or a window), all of which the row blocks above wrote (zeros before each row's first
         * key); e only moves on with the blocks */
        for (int c0 = 0, e = 0; c0 < T; c0 += ATT_BLOCK) {
          int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
          for (e = e > c1 ? e : c1; e < T && attention_from(ps, e) < c1;)
            e++;
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, e - c0, 1.0f,
                      ds + (size_t)c0 * T + c0, T, q + (size_t)c0 * C3, C3, 0.0f,
                      dk + (size_t)c0 * C3, C3);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, e - c0, 1.0f,
                      p + (size_t)c0 * T + c0, T, d + (size_t)c0 * C, C, 0.0f, dv + (size_t)c0 * C3,
                      C3);
        }
      }
    free(p);
    free(ds);
  }
}

/* ---- elementwise, loss, optimizer ---- */

static void add(void *out_, const void *a_, const void *b_, size_t n) {
  float *out = out_;
  const float *a = a_, *b = b_;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    out[i] = a[i] + b[i];
}

static void crossentropy_fwd(float *losses, void *probs_, const void *logits_, const int *targets,
                             int N, int V) {
  float *probs = probs_;
  const float *logits = logits_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V;
    float maxv = -INFINITY;
    for (int v = 0; v < V; v++)
      if (l[v] > maxv)
        maxv = l[v];
    float sum = 0.0f;
    for (int v = 0; v < V; v++) {
      p[v] = expf(l[v] - maxv);
      sum += p[v];
    }
    float inv = 1.0f / sum;
    for (int v = 0; v < V; v++)
      p[v] *= inv;
    if (losses) /* a target of -1 does not count */
      losses[n] = targets[n] < 0 ? 0.0f : -logf(p[targets[n]]);
  }
}

static void crossentropy_bwd(void *dlogits_, const void *probs_, const int *targets, float dloss,
                             int N, int V) {
  float *dlogits = dlogits_;
  const float *probs = probs_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * V;
    float *d = dlogits + (size_t)n * V, s = targets[n] < 0 ? 0.0f : dloss;
    for (int v = 0; v < V; v++)
      d[v] = (p[v] - (v == targets[n] ? 1.0f : 0.0f)) * s;
  }
}

/* the pair above, so that fp32 results are theirs bit for bit */
static void crossentropy_fused(float *losses, void *logits, const int *targets, float dloss, int N,
                               int V) {
  crossentropy_fwd(losses, logits, logits, targets, N, V);
  crossentropy_bwd(logits, logits, targets, dloss, N, V);
}

static void vocab_max(float *rowmax, const void *logits_, int N, int Vl) {
  const float *logits = logits_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * Vl;
    float m = -INFINITY;
    for (int v = 0; v < Vl; v++)
      m = l[v] > m ? l[v] : m;
    rowmax[n] = m;
  }
}

static void vocab_sumexp(float *sum, const void *logits_, const float *gmax, int N, int Vl) {
  const float *logits = logits_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * Vl;
    float s = 0.0f;
    for (int v = 0; v < Vl; v++)
      s += expf(l[v] - gmax[n]);
    sum[n] = s;
  }
}

static void vocab_target(float *tlogit, const void *logits_, const int *targets, int v0, int N,
                         int Vl) {
  const float *logits = logits_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    int t = targets[n] - v0;
    tlogit[n] = t >= 0 && t < Vl ? logits[(size_t)n * Vl + t] : 0.0f;
  }
}

static void vocab_ce_bwd(void *dlogits_, const void *logits_, const float *gmax, const float *gsum,
                         const int *targets, int v0, float dloss, int N, int Vl) {
  float *dlogits = dlogits_;
  const float *logits = logits_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * Vl;
    float *d = dlogits + (size_t)n * Vl, inv = 1.0f / gsum[n];
    float s = targets[n] < 0 ? 0.0f : dloss;
    int t = targets[n] - v0;
    for (int v = 0; v < Vl; v++)
      d[v] = (expf(l[v] - gmax[n]) * inv - (v == t ? 1.0f : 0.0f)) * s;
  }
}

static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float grad_scale, int t) {
  float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
  float step_size = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * wd;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mi = m[i] + (gi - m[i]) * (1.0f - beta1); /* torch's lerp */
    float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i] * decay;
    p[i] = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

static void muon_momentum(float *u, const float *g, float *m, size_t n, float beta,
                          float grad_scale) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * grad_scale;
    float mi = m[i] + (gi - m[i]) * (1.0f - beta); /* torch's lerp, as torch.optim.Muon */
    m[i] = mi;
    u[i] = gi + (mi - gi) * beta;
  }
}

static void muon_orth(float *x, float *work, int rows, int cols, int ld, int steps, float eps,
                      float scale) {
  const float ca = 3.4445f, cb = -4.7750f, cc = 2.0315f;
  int tr = rows > cols, a = tr ? cols : rows, b = tr ? rows : cols; /* X is a × b, a ≤ b */
  size_t n = (size_t)a * b;
  float *X = work, *Y = work + n, *A = Y + n, *B = A + (size_t)a * a;
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      X[tr ? (size_t)c * b + r : (size_t)r * b + c] = x[(size_t)r * ld + c];
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)X[i] * (double)X[i];
  float norm = (float)sqrt(s), inv = 1.0f / (norm > eps ? norm : eps);
  for (size_t i = 0; i < n; i++)
    X[i] *= inv;
  for (int k = 0; k < steps; k++) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, a, a, b, 1.0f, X, b, X, b, 0.0f, A, a);
    memcpy(B, A, (size_t)a * a * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a, a, a, cc, A, a, A, a, cb, B, a);
    memcpy(Y, X, n * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, a, b, a, 1.0f, B, a, X, b, ca, Y, b);
    float *t = X;
    X = Y;
    Y = t;
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      x[(size_t)r * ld + c] = scale * X[tr ? (size_t)c * b + r : (size_t)r * b + c];
}

static void muon_transpose(float *dst, int dld, const float *src, int sld, int rows, int cols) {
#pragma omp parallel for schedule(static)
  for (int c = 0; c < cols; c++)
    for (int r = 0; r < rows; r++)
      dst[(size_t)c * dld + r] = src[(size_t)r * sld + c];
}

static void muon_apply(float *p, const float *u, size_t n, float lr, float wd) {
  float decay = 1.0f - lr * wd;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    p[i] = p[i] * decay - lr * u[i];
}

static double sumsq(const float *x, size_t n) {
  double part[REDUCE_BLOCKS] = {0};
  size_t per = (n + REDUCE_BLOCKS - 1) / REDUCE_BLOCKS;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++) {
    size_t lo = (size_t)blk * per, hi = lo + per < n ? lo + per : n;
    double s = 0.0;
    for (size_t i = lo; i < hi; i++)
      s += (double)x[i] * (double)x[i];
    part[blk] = s;
  }
  double s = 0.0;
  for (int blk = 0; blk < REDUCE_BLOCKS; blk++)
    s += part[blk];
  return s;
}

static void scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    x[i] *= s;
}

/* ---- memory: the host's ---- */

static void zero(void *p, size_t bytes) {
  memset(p, 0, bytes);
}

static void copy(void *dst, const void *src, size_t bytes) {
  memmove(dst, src, bytes);
}

static void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                   size_t rows) {
#pragma omp parallel for schedule(static) if (rows * width > (1u << 16))
  for (size_t r = 0; r < rows; r++)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void to_act(void *dst, const float *src, size_t n) {
  memmove(dst, src, n * sizeof(float));
}

static void to_f32(float *dst, const void *src, size_t n) {
  memmove(dst, src, n * sizeof(float));
}

static void dequant_nf4(void *w, const uint8_t *codes, const float *absmax, int rows, int cols) {
  colo_nf4_dequantize(codes, absmax, rows, cols, w);
}

static void dequant_scales(float *absmax, const uint8_t *q, const float *stats, int blocks) {
  colo_nf4_dq_dequantize(q, stats, (size_t)blocks, absmax);
}

static void accumulate(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++)
    dst[i] += src[i];
}

static const colo_backend_t CPU = {
    .name = "cpu",
    .device = 0,
    .allocator = NULL,
    .zero = zero,
    .copy = copy,
    .copy2d = copy2d,
    .to_host = copy,
    .from_host = copy,
    .act_dtype = COLO_DTYPE_F32,
    .act_size = sizeof(float),
    .to_act = to_act,
    .to_f32 = to_f32,
    .dequant_nf4 = dequant_nf4,
    .matmul_fwd = matmul_fwd,
    .matmul_bwd = matmul_bwd,
    .matmul_gelu_fwd = matmul_gelu_fwd,
    .matmul_gelu_bwd = matmul_gelu_bwd,
    .lmhead_fwd = lmhead_fwd,
    .lmhead_bwd = lmhead_bwd,
    .encoder_fwd = encoder_fwd,
    .embed_fwd = embed_fwd,
    .dropout = dropout,
    .noise = noise,
    .scale_rows = scale_rows,
    .dora_norm = dora_norm,
    .dora_scale = dora_scale,
    .dora_add = dora_add,
    .dora_dmag = dora_dmag,
    .encoder_bwd = encoder_bwd,
    .layernorm_fwd = layernorm_fwd,
    .layernorm_bwd = layernorm_bwd,
    .rmsnorm_fwd = rmsnorm_fwd,
    .rmsnorm_bwd = rmsnorm_bwd,
    .qk_norm_fwd = qk_norm_fwd,
    .qk_norm_bwd = qk_norm_bwd,
    .rope = rope,
    .swiglu_fwd = swiglu_fwd,
    .swiglu_bwd = swiglu_bwd,
    .kv_expand = kv_expand,
    .kv_reduce = kv_reduce,
    .gelu_fwd = gelu_fwd,
    .gelu_bwd = gelu_bwd,
    .attention_fwd = attention_fwd,
    .attention_bwd = attention_bwd,
    .add = add,
    .crossentropy_fwd = crossentropy_fwd,
    .crossentropy_bwd = crossentropy_bwd,
    .crossentropy_fused = crossentropy_fused,
    .vocab_max = vocab_max,
    .vocab_sumexp = vocab_sumexp,
    .vocab_target = vocab_target,
    .vocab_ce_bwd = vocab_ce_bwd,
    .adamw = adamw,
    .muon_momentum = muon_momentum,
    .muon_orth = muon_orth,
    .muon_apply = muon_apply,
    .muon_transpose = muon_transpose,
    .sumsq = sumsq,
    .scale = scale,
    .accumulate = accumulate,
    .dequant_scales = dequant_scales,
};

const colo_backend_t *colo_backend_cpu(void) {
  return &CPU;
}
