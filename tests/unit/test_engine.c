/* The CPU engine against independent references: every operation's backward and the whole
 * model's gradients against central finite differences; AdamW, the norm and the schedule
 * against scalar double-precision formulas; recomputation and thread counts against plain runs.
 *
 * Finite differences: for an op f and a fixed random R, L(x) = Σ R ⊙ f(x) (accumulated in double);
 * the analytic gradient is the op's backward with dout = R, the numeric one
 * (L(x+h) - L(x-h)) / 2h with h = 1e-3. A coordinate passes when
 * |num - ana| ≤ 1e-3 + 1e-2·|ana|; the test prints the worst relative error it saw. */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/error.h"
#include "backend/backend.h"
#include "core/nf4.h"
#include "core/pool.h"
#include "core/rng.h"
#include <omp.h>
#include "model/gpt.h"
#include "model/lora.h"
#include "optim/adamw.h"
#include "optim/loss_scale.h"
#include "optim/spike.h"
#include "parallel/chunks.h"
#include "parallel/zero.h"
#include "test.h"
#include "train/checkpoint.h"
#include "train/choices.h"
#include "train/data.h"
#include "train/nfc.h"
#include "train/safetensors.h"

static const colo_backend_t *be;
static colo_rng_t rng;

/* every allocation of a test is released at exit, so LeakSanitizer sees only library leaks */
static void *owned[256];
static int n_owned;
static colo_gpt_t *models[64];
static colo_pool_t *pools[8];
static int n_models, n_pools;

static void release_all(void) {
  for (int i = 0; i < n_models; i++)
    colo_gpt_destroy(models[i]);
  for (int i = 0; i < n_pools; i++)
    colo_pool_destroy(pools[i]);
  for (int i = 0; i < n_owned; i++)
    free(owned[i]);
}

static void *own(void *p) {
  ASSERT(p != NULL && n_owned < 256);
  owned[n_owned++] = p;
  return p;
}

static float *zeros(size_t n) {
  return own(calloc(n, sizeof(float)));
}

static colo_pool_t *new_pool(size_t cap) {
  colo_pool_t *p = colo_pool_create("cpu", cap);
  pools[n_pools++] = p;
  return p;
}

static float *randv(size_t n, float scale) {
  float *x = own(malloc(n * sizeof *x));
  for (size_t i = 0; i < n; i++)
    x[i] = scale * colo_rng_normal(&rng);
  return x;
}

static double dotd(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * (double)b[i];
  return s;
}

typedef double (*loss_fn)(void *ctx);

static double worst_rel, worst_abs;

/* Checks ana[i] = dL/dx[i] for every i by central differences of fn, which reads x. */
static void fd_check(const char *what, float *x, const float *ana, size_t n, loss_fn fn,
                     void *ctx) {
  const float h = 1e-3f;
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = keep + h;
    double lp = fn(ctx);
    x[i] = keep - h;
    double lm = fn(ctx);
    x[i] = keep;
    double num = (lp - lm) / (2.0 * (double)h);
    double diff = fabs(num - (double)ana[i]);
    if (diff > 1e-3 + 1e-2 * fabs((double)ana[i]))
      FAIL_AT("%s: d/dx[%zu]: analytic %.6g, numeric %.6g", what, i, (double)ana[i], num);
    double mag = fmax(fabs(num), fabs((double)ana[i]));
    if (mag > 1e-2 && diff / mag > worst_rel)
      worst_rel = diff / mag;
    if (diff > worst_abs)
      worst_abs = diff;
  }
}

static void setup(void) {
  be = colo_backend_cpu();
  colo_rng_seed(&rng, 1234);
  worst_rel = worst_abs = 0;
  atexit(release_all); /* runs before LeakSanitizer's check, which was registered first */
}

/* ---- matmul ---- */

typedef struct {
  int N, C, OC;
  float *inp, *w, *b, *out, *R;
} mm_t;

static double mm_loss(void *p) {
  mm_t *m = p;
  be->matmul_fwd(m->out, m->inp, m->w, m->b, m->N, m->C, m->OC);
  return dotd(m->out, m->R, (size_t)m->N * m->OC);
}

TEST(matmul_grad) {
  setup();
  mm_t m = {7, 5, 6};
  m.inp = randv(35, 1), m.w = randv(30, 1), m.b = randv(6, 1), m.out = randv(42, 1);
  m.R = randv(42, 1);
  float *di = zeros(35), *dw = zeros(30), *db = zeros(6);
  mm_loss(&m);
  be->matmul_bwd(di, dw, db, m.R, m.inp, m.w, m.N, m.C, m.OC);
  fd_check("matmul dinp", m.inp, di, 35, mm_loss, &m);
  fd_check("matmul dw", m.w, dw, 30, mm_loss, &m);
  fd_check("matmul db", m.b, db, 6, mm_loss, &m);
  mm_loss(&m); /* the checks leave the last output perturbed */
  /* against a plain triple loop */
  for (int n = 0; n < m.N; n++)
    for (int o = 0; o < m.OC; o++) {
      double s = m.b[o];
      for (int c = 0; c < m.C; c++)
        s += (double)m.inp[n * m.C + c] * m.w[c * m.OC + o];
      ASSERT(fabs(s - m.out[n * m.OC + o]) < 1e-5);
    }
  printf("  worst error: %.2e relative (where |grad| > 1e-2), %.2e absolute\n", worst_rel,
         worst_abs);
}

TEST(matmul_large_matches_loops) {
  /* big enough that every GEMM block is used, odd sizes to hit the edges */
  setup();
  int N = 67, C = 45, OC = 131;
  float *inp = randv((size_t)N * C, 1), *w = randv((size_t)C * OC, 1),
        *out = randv((size_t)N * OC, 1);
  be->matmul_fwd(out, inp, w, NULL, N, C, OC);
  float *dout = randv((size_t)N * OC, 1), *di = zeros((size_t)N * C), *dw = zeros((size_t)C * OC);
  be->matmul_bwd(di, dw, NULL, dout, inp, w, N, C, OC);
  double worst = 0;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = 0;
      for (int c = 0; c < C; c++)
        s += (double)inp[n * C + c] * w[c * OC + o];
      worst = fmax(worst, fabs(s - out[n * OC + o]));
    }
  for (int c = 0; c < C; c++)
    for (int o = 0; o < OC; o++) {
      double s = 0;
      for (int n = 0; n < N; n++)
        s += (double)inp[n * C + c] * dout[n * OC + o];
      worst = fmax(worst, fabs(s - dw[c * OC + o]));
    }
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int o = 0; o < OC; o++)
        s += (double)dout[n * OC + o] * w[c * OC + o];
      worst = fmax(worst, fabs(s - di[n * C + c]));
    }
  if (worst > 1e-4)
    FAIL_AT("max abs difference from the loops %.3g", worst);
}

/* ---- LM head ---- */

typedef struct {
  int N, C, V;
  float *inp, *wte, *out, *R;
} lm_t;

static double lm_loss(void *p) {
  lm_t *m = p;
  be->lmhead_fwd(m->out, m->inp, m->wte, m->N, m->C, m->V);
  return dotd(m->out, m->R, (size_t)m->N * m->V);
}

TEST(lmhead_grad) {
  setup();
  lm_t m = {6, 4, 9};
  m.inp = randv(24, 1), m.wte = randv(36, 1), m.out = randv(54, 1), m.R = randv(54, 1);
  float *di = zeros(24), *dw = zeros(36);
  lm_loss(&m);
  be->lmhead_bwd(di, dw, m.R, m.inp, m.wte, m.N, m.C, m.V);
  fd_check("lmhead dinp", m.inp, di, 24, lm_loss, &m);
  fd_check("lmhead dwte", m.wte, dw, 36, lm_loss, &m);
}

/* ---- encoder ---- */

typedef struct {
  int B, T, C;
  int *tok;
  float *wte, *wpe, *out, *R;
  const int *pos; /* documents' positions, or NULL */
} enc_t;

static double enc_loss(void *p) {
  enc_t *m = p;
  be->encoder_fwd(m->out, m->tok, m->wte, m->wpe, m->B, m->T, m->C, 0, 4, m->pos);
  return dotd(m->out, m->R, (size_t)m->B * m->T * m->C);
}

TEST(encoder_grad) {
  setup();
  int tok[6] = {2, 0, 2, 1, 3, 2}; /* repeated tokens accumulate */
  enc_t m = {2, 3, 4, tok};
  m.wte = randv(16, 1), m.wpe = randv(12, 1), m.out = randv(24, 1), m.R = randv(24, 1);
  float *dwte = zeros(16), *dwpe = zeros(12);
  be->encoder_bwd(dwte, dwpe, m.R, tok, 2, 3, 4, 0, 4, NULL);
  fd_check("encoder dwte", m.wte, dwte, 16, enc_loss, &m);
  fd_check("encoder dwpe", m.wpe, dwpe, 12, enc_loss, &m);
  /* documents: row 1's second token begins one, so positions 0, 1, 2 | 0, 0, 1; the position
   * embedding's row 2 is then used once and row 0 three times */
  int pos[6] = {0, 1, 2, 0, 0, 1};
  m.pos = pos;
  enc_loss(&m);
  for (int i = 0; i < 4; i++)
    ASSERT(m.out[4 * 4 + i] == m.wte[3 * 4 + i] + m.wpe[i]);
  memset(dwte, 0, 16 * 4), memset(dwpe, 0, 12 * 4);
  be->encoder_bwd(dwte, dwpe, m.R, tok, 2, 3, 4, 0, 4, pos);
  for (int i = 0; i < 4; i++)
    ASSERT(dwpe[8 + i] == m.R[8 + i]);
  fd_check("encoder dwte, documents", m.wte, dwte, 16, enc_loss, &m);
  fd_check("encoder dwpe, documents", m.wpe, dwpe, 12, enc_loss, &m);
}

/* ---- LayerNorm ---- */

typedef struct {
  int N, C;
  float *inp, *w, *b, *out, *mean, *rstd, *R;
} ln_t;

static double ln_loss(void *p) {
  ln_t *m = p;
  be->layernorm_fwd(m->out, m->mean, m->rstd, m->inp, m->w, m->b, m->N, m->C);
  return dotd(m->out, m->R, (size_t)m->N * m->C);
}

TEST(layernorm_grad_and_values) {
  setup();
  ln_t m = {5, 8};
  m.inp = randv(40, 2), m.w = randv(8, 1), m.b = randv(8, 1), m.out = randv(40, 1);
  m.mean = zeros(5), m.rstd = zeros(5), m.R = randv(40, 1);
  ln_loss(&m);
  /* against the definition, in double, with eps 1e-5 */
  for (int n = 0; n < 5; n++) {
    double mu = 0, var = 0;
    for (int i = 0; i < 8; i++)
      mu += m.inp[n * 8 + i] / 8.0;
    for (int i = 0; i < 8; i++)
      var += (m.inp[n * 8 + i] - mu) * (m.inp[n * 8 + i] - mu) / 8.0;
    for (int i = 0; i < 8; i++) {
      double y = (m.inp[n * 8 + i] - mu) / sqrt(var + 1e-5) * m.w[i] + m.b[i];
      ASSERT(fabs(y - m.out[n * 8 + i]) < 1e-5);
    }
  }
  float *di = zeros(40), *dw = zeros(8), *db = zeros(8);
  be->layernorm_bwd(di, dw, db, m.R, m.inp, m.w, m.mean, m.rstd, 5, 8);
  fd_check("layernorm dinp", m.inp, di, 40, ln_loss, &m);
  fd_check("layernorm dw", m.w, dw, 8, ln_loss, &m);
  fd_check("layernorm db", m.b, db, 8, ln_loss, &m);
}

/* ---- RMSNorm ---- */

typedef struct {
  int N, C;
  float *inp, *w, *out, *rstd, *R;
  float eps;
} rms_t;

static double rms_loss(void *p) {
  rms_t *m = p;
  be->rmsnorm_fwd(m->out, m->rstd, m->inp, m->w, m->N, m->C, m->eps);
  return dotd(m->out, m->R, (size_t)m->N * m->C);
}

/* Llama's eps (1e-5), and a large one on small inputs, where it weighs (Qwen2's is 1e-6) */
TEST(rmsnorm_grad_and_values) {
  setup();
  for (int k = 0; k < 2; k++) {
    rms_t m = {5, 8};
    m.eps = k ? 1e-2f : 1e-5f;
    m.inp = randv(40, k ? 0.1f : 2), m.w = randv(8, 1), m.out = randv(40, 1);
    m.rstd = zeros(5), m.R = randv(40, 1);
    rms_loss(&m);
    /* against the definition, in double */
    for (int n = 0; n < 5; n++) {
      double ms = 0;
      for (int i = 0; i < 8; i++)
        ms += (double)m.inp[n * 8 + i] * m.inp[n * 8 + i] / 8.0;
      for (int i = 0; i < 8; i++) {
        double y = m.inp[n * 8 + i] / sqrt(ms + m.eps) * m.w[i];
        if (fabs(y - m.out[n * 8 + i]) > 1e-5)
          FAIL_AT("rmsnorm eps %g row %d [%d] = %.9g, expected %.9g", (double)m.eps, n, i,
                  (double)m.out[n * 8 + i], y);
      }
    }
    float *di = randv(40, 1), *dw = zeros(8), *before = own(malloc(40 * 4));
    memcpy(before, di, 40 * 4); /* the backward adds into dinp */
    be->rmsnorm_bwd(di, dw, m.R, m.inp, m.w, m.rstd, 5, 8);
    for (int i = 0; i < 40; i++)
      di[i] -= before[i];
    fd_check("rmsnorm dinp", m.inp, di, 40, rms_loss, &m);
    fd_check("rmsnorm dw", m.w, dw, 8, rms_loss, &m);
  }
}

/* ---- rotary positions ---- */

typedef struct {
  int B, T, C, NH, pos0;
  float *qkv, *out, *R, *freq;
  const int *pos; /* documents' positions, or NULL */
  float mag;      /* LongRoPE's attention factor; 0 here: 1 */
} rope_t;

static double rope_loss(void *p) {
  rope_t *m = p;
  size_t n = (size_t)m->B * m->T * 3 * m->C;
  memcpy(m->out, m->qkv, n * sizeof(float));
  be->rope(m->out, m->B, m->T, m->C, m->NH, m->pos0, m->freq, m->mag > 0 ? m->mag : 1.0f, 1,
           m->pos);
  return dotd(m->out, m->R, n);
}

TEST(rope_values_and_transpose) {
  setup();
  /* 2 sequences of 5 positions from position 3, 3 heads of 8 */
  rope_t m = {2, 5, 24, 3, 3};
  size_t n = 2 * 5 * 3 * 24;
  m.qkv = randv(n, 1), m.out = zeros(n), m.R = randv(n, 1), m.freq = zeros(4);
  colo_rope_freqs(8, 10000.0f, 0.0f, 1.0f, 4.0f, 8192, m.freq);
  rope_loss(&m);
  /* against the definition in double: q and k rotated pair by pair, v untouched */
  double worst = 0;
  for (int bt = 0; bt < 10; bt++)
    for (int part = 0; part < 9; part++)
      for (int i = 0; i < 8; i++) {
        size_t at = (size_t)bt * 72 + (size_t)part * 8;
        double x = m.qkv[at + i], y;
        if (part >= 6) {
          y = x;
        } else {
          int j = i % 4;
          double ang = (3 + bt % 5) * pow(10000.0, -2.0 * j / 8.0);
          double other = m.qkv[at + (i < 4 ? i + 4 : i - 4)];
          y = i < 4 ? x * cos(ang) - other * sin(ang) : x * cos(ang) + other * sin(ang);
        }
        worst = fmax(worst, fabs(y - m.out[at + i]));
      }
  if (worst > 1e-5)
    FAIL_AT("rope differs from the definition by %.3g", worst);
  /* the rotation back is its inverse, and the gradient of <rope(x), R> is rope⁻¹(R) */
  float *back = own(malloc(n * 4));
  memcpy(back, m.out, n * 4);
  be->rope(back, 2, 5, 24, 3, 3, m.freq, 1.0f, -1, NULL);
  for (size_t i = 0; i < n; i++)
    if (fabsf(back[i] - m.qkv[i]) > 1e-5f)
      FAIL_AT("rotated back, [%zu] = %g, not %g", i, (double)back[i], (double)m.qkv[i]);
  float *g = own(malloc(n * 4));
  memcpy(g, m.R, n * 4);
  be->rope(g, 2, 5, 24, 3, 3, m.freq, 1.0f, -1, NULL);
  fd_check("rope", m.qkv, g, n, rope_loss, &m);
  /* documents: each row's positions restart where one begins; rotated as a sequence of its own
   * from pos0 would be */
  int pos[10] = {0, 1, 0, 1, 2, 0, 0, 1, 2, 3};
  m.pos = pos;
  rope_loss(&m);
  float *alone = own(malloc(72 * 4));
  for (int bt = 0; bt < 10; bt++) {
    memcpy(alone, m.qkv + (size_t)bt * 72, 72 * 4);
    be->rope(alone, 1, 1, 24, 3, 3 + pos[bt], m.freq, 1.0f, 1, NULL);
    ASSERT(memcmp(alone, m.out + (size_t)bt * 72, 72 * 4) == 0);
  }
  memcpy(g, m.R, n * 4);
  be->rope(g, 2, 5, 24, 3, 3, m.freq, 1.0f, -1, pos);
  fd_check("rope, documents", m.qkv, g, n, rope_loss, &m);
  /* scaled by a magnitude (LongRoPE's attention factor): mag times the rotation, and its
   * backward mag times the rotation back */
  m.pos = NULL, m.mag = 1.19f;
  float *once = own(malloc(n * 4));
  rope_loss(&m);
  memcpy(once, m.out, n * 4);
  m.mag = 0;
  rope_loss(&m);
  for (size_t i = 0; i < n; i++) { /* q and k scaled (the first 48 of a row's 72), v left */
    double want = i % 72 < 48 ? 1.19 * m.out[i] : m.out[i];
    if (fabs(once[i] - want) > 1e-5)
      FAIL_AT("scaled by 1.19, [%zu] = %g, not %g", i, (double)once[i], want);
  }
  m.mag = 1.19f;
  memcpy(g, m.R, n * 4);
  be->rope(g, 2, 5, 24, 3, 3, m.freq, 1.19f, -1, NULL);
  fd_check("rope, scaled", m.qkv, g, n, rope_loss, &m);
}

/* ---- grouped-query attention by repetition ---- */

/* kv_expand copies each key and value head to its group's query heads; kv_reduce is its
 * transpose: <expand(x), R> = <x, reduce(R)> */
TEST(kv_expand_and_reduce) {
  setup();
  int N = 3, C = 24, NH = 6, NKV = 2, hs = 4, KV = NKV * hs, W = C + 2 * KV;
  float *x = randv((size_t)N * W, 1), *y = zeros((size_t)N * 3 * C);
  float *R = randv((size_t)N * 3 * C, 1), *g = randv((size_t)N * W, 1);
  be->kv_expand(y, x, N, C, NH, NKV);
  for (int n = 0; n < N; n++)
    for (int part = 0; part < 3; part++)
      for (int h = 0; h < NH; h++)
        for (int i = 0; i < hs; i++) {
          float want =
              part == 0 ? x[n * W + h * hs + i] : x[n * W + C + (part - 1) * KV + (h / 3) * hs + i];
          ASSERT(y[n * 3 * C + part * C + h * hs + i] == want);
        }
  be->kv_reduce(g, R, N, C, NH, NKV); /* written: g's random start must not show */
  double a = dotd(y, R, (size_t)N * 3 * C), b = dotd(x, g, (size_t)N * W);
  if (fabs(a - b) > 1e-5 * fabs(a))
    FAIL_AT("<expand(x), R> = %.9g but <x, reduce(R)> = %.9g", a, b);
}

/* ---- SwiGLU ---- */

typedef struct {
  int N, H;
  float *pre, *out, *R;
} glu_t;

static double glu_loss(void *p) {
  glu_t *m = p;
  be->swiglu_fwd(m->out, m->pre, m->N, m->H);
  return dotd(m->out, m->R, (size_t)m->N * m->H);
}

TEST(swiglu_grad_and_values) {
  setup();
  glu_t m = {6, 7};
  m.pre = randv(84, 3), m.out = zeros(42), m.R = randv(42, 1);
  m.pre[0] = 20; /* the sigmoid's saturated ends */
  m.pre[1] = -20;
  glu_loss(&m);
  for (int n = 0; n < 6; n++)
    for (int i = 0; i < 7; i++) {
      double gt = m.pre[n * 14 + i], u = m.pre[n * 14 + 7 + i];
      double y = gt / (1 + exp(-gt)) * u;
      if (fabs(y - m.out[n * 7 + i]) > 1e-6 + 1e-6 * fabs(y))
        FAIL_AT("swiglu row %d [%d] = %.9g, expected %.9g", n, i, (double)m.out[n * 7 + i], y);
    }
  float *dp = randv(84, 1); /* written, not added to */
  be->swiglu_bwd(dp, m.pre, m.R, 6, 7);
  fd_check("swiglu", m.pre, dp, 84, glu_loss, &m);
}

/* ---- GELU ---- */

typedef struct {
  size_t n;
  float *inp, *out, *R;
} gelu_t;

static double gelu_loss(void *p) {
  gelu_t *m = p;
  be->gelu_fwd(m->out, m->inp, m->n);
  return dotd(m->out, m->R, m->n);
}

TEST(gelu_grad_and_values) {
  setup();
  gelu_t m = {64};
  m.inp = randv(64, 3), m.out = zeros(64), m.R = randv(64, 1);
  m.inp[0] = 0;
  m.inp[1] = 20;
  m.inp[2] = -20;
  gelu_loss(&m);
  for (int i = 0; i < 64; i++) {
    double x = m.inp[i];
    double y = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    if (fabs(y - m.out[i]) > 1e-6 + 1e-6 * fabs(y))
      FAIL_AT("gelu(%g) = %.9g, expected %.9g", x, (double)m.out[i], y);
  }
  float *di = zeros(64);
  be->gelu_bwd(di, m.inp, m.R, 64);
  fd_check("gelu", m.inp, di, 64, gelu_loss, &m);
}

/* ---- attention ---- */

typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *lse, *R;
  const int *pos; /* documents' positions, or NULL */
} att_t;

static double att_loss(void *p) {
  att_t *m = p;
  be->attention_fwd(m->out, m->lse, m->qkv, m->B, m->T, m->C, m->NH, m->pos);
  return dotd(m->out, m->R, (size_t)m->B * m->T * m->C);
}

/* matmul_bwd, lmhead_bwd, gelu_bwd, attention_bwd and matmul_gelu_bwd write their input
 * gradient: whatever its buffer held (NaNs here) is gone, on the fp32 table and on a 16-bit one
 * (backend.h) */
static void *as_act(const colo_backend_t *t, const float *f, size_t n) {
  void *a = own(malloc(n * t->act_size));
  colo_dtype_from_float(a, f, n, t->act_dtype);
  return a;
}

TEST(input_gradients_are_written_not_added) {
  setup();
  const colo_backend_t *tables[] = {colo_backend_cpu(), colo_backend_cpu_dtype(COLO_DTYPE_BF16)};
  enum { N = 6, C = 8, OC = 5, V = 7, B = 2, T = 3, NH = 2 };
  for (int k = 0; k < 2; k++) {
    const colo_backend_t *t = tables[k];
    size_t A = t->act_size;
    void *inp = as_act(t, randv(N * C, 1), N * C), *w = as_act(t, randv(C * OC, 1), C * OC);
    void *dmm = as_act(t, randv(N * OC, 1), N * OC), *dlm = as_act(t, randv(N * V, 1), N * V);
    void *wte = as_act(t, randv(V * C, 1), V * C), *dc = as_act(t, randv(N * C, 1), N * C);
    void *qkv = as_act(t, randv(B * T * 3 * C, 1), B * T * 3 * C), *out = own(malloc(N * C * A));
    float *lse = zeros(B * NH * T);
    t->attention_fwd(out, lse, qkv, B, T, C, NH, NULL);
    for (int op = 0; op < 5; op++) {
      size_t n = op == 3 ? (size_t)B * T * 3 * C : (size_t)N * C;
      void *g[2] = {own(calloc(n, A)), own(malloc(n * A))};
      memset(g[1], 0xff, n * A); /* NaN in fp32, bf16 and fp16 alike */
      for (int i = 0; i < 2; i++)
        switch (op) {
        case 0:
          t->matmul_bwd(g[i], NULL, NULL, dmm, inp, w, N, C, OC);
          break;
        case 1:
          t->lmhead_bwd(g[i], NULL, dlm, inp, wte, N, C, V);
          break;
        case 2:
          t->gelu_bwd(g[i], inp, dc, n);
          break;
        case 3:
          t->attention_bwd(g[i], dc, qkv, out, lse, B, T, C, NH, NULL);
          break;
        default: /* dc stands for GELU's input */
          t->matmul_gelu_bwd(g[i], NULL, NULL, dmm, inp, w, dc, N, C, OC);
        }
      float *f = own(malloc(n * sizeof *f));
      colo_dtype_to_float(f, g[0], n, t->act_dtype);
      double mag = 0;
      for (size_t i = 0; i < n; i++)
        mag += fabs((double)f[i]);
      printf("  %s %s: the same from zeros and from NaNs (sum |g| %.3f)\n", t->name,
             (const char *[]){"matmul_bwd", "lmhead_bwd", "gelu_bwd", "attention_bwd",
                              "matmul_gelu_bwd"}[op],
             mag);
      ASSERT(mag > 0 && isfinite(mag));
      ASSERT(memcmp(g[0], g[1], n * A) == 0);
    }
  }
}

/* The MLP's fused entries are the pair they stand for on every CPU table, bit for bit: the
 * product into pre, then GELU; the product's input gradient, then GELU's in place. The CUDA
 * table's epilogues are held to them by test_cuda. */
TEST(matmul_gelu_is_the_pair) {
  setup();
  enum { N = 24, C = 16, OC = 40 };
  const colo_backend_t *tables[] = {colo_backend_cpu(), colo_backend_cpu_dtype(COLO_DTYPE_BF16),
                                    colo_backend_cpu_dtype(COLO_DTYPE_F16)};
  for (int k = 0; k < 3; k++) {
    const colo_backend_t *t = tables[k];
    size_t A = t->act_size, no = (size_t)N * OC, ni = (size_t)N * C;
    void *inp = as_act(t, randv(ni, 1), ni), *w = as_act(t, randv(C * OC, 0.3f), C * OC);
    float *b = randv(OC, 0.3f);
    void *pre[2] = {own(malloc(no * A)), own(malloc(no * A))};
    void *out[2] = {own(malloc(no * A)), own(malloc(no * A))};
    t->matmul_fwd(pre[0], inp, w, b, N, C, OC);
    t->gelu_fwd(out[0], pre[0], no);
    t->matmul_gelu_fwd(out[1], pre[1], inp, w, b, N, C, OC);
    ASSERT(memcmp(pre[0], pre[1], no * A) == 0);
    ASSERT(memcmp(out[0], out[1], no * A) == 0);
    /* backward: here inp is GELU's output of a [N][C] pre-activation gpre */
    void *gpre = as_act(t, randv(ni, 1.5f), ni), *dout = as_act(t, randv(no, 1), no);
    void *dprod = own(malloc(ni * A)), *d[2] = {own(malloc(ni * A)), own(malloc(ni * A))};
    float *dw[2] = {zeros(C * OC), zeros(C * OC)}, *db[2] = {zeros(OC), zeros(OC)};
    t->matmul_bwd(dprod, dw[0], db[0], dout, inp, w, N, C, OC);
    t->gelu_bwd(d[0], gpre, dprod, ni);
    t->matmul_gelu_bwd(d[1], dw[1], db[1], dout, inp, w, gpre, N, C, OC);
    ASSERT(memcmp(d[0], d[1], ni * A) == 0);
    ASSERT(memcmp(dw[0], dw[1], C * OC * sizeof(float)) == 0);
    ASSERT(memcmp(db[0], db[1], OC * sizeof(float)) == 0);
    float *f = own(malloc(ni * sizeof *f));
    colo_dtype_to_float(f, d[1], ni, t->act_dtype);
    double mag = 0;
    for (size_t i = 0; i < ni; i++)
      mag += fabs((double)f[i]);
    printf("  %s: forward and backward the pair's bits (sum |dinp| %.3f)\n", t->name, mag);
    ASSERT(mag > 0 && isfinite(mag));
  }
}

TEST(attention_grad_and_causality) {
  setup();
  att_t m = {2, 5, 6, 2};
  size_t nq = 2 * 5 * 18, no = 2 * 5 * 6;
  m.qkv = randv(nq, 1), m.out = zeros(no), m.lse = zeros(2 * 2 * 5), m.R = randv(no, 1);
  att_loss(&m);
  /* the log-sum-exp of each query's scaled scores over keys 0..t, in double */
  for (int b = 0; b < 2; b++)
    for (int h = 0; h < 2; h++)
      for (int t = 0; t < 5; t++) {
        double s = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          double d = 0;
          for (int i = 0; i < 3; i++)
            d += (double)m.qkv[(b * 5 + t) * 18 + h * 3 + i] *
                 m.qkv[(b * 5 + t2) * 18 + 6 + h * 3 + i];
          s += exp(d / sqrt(3.0));
        }
        ASSERT(fabs(m.lse[(b * 2 + h) * 5 + t] - log(s)) < 1e-5);
      }
  /* the first position attends only to itself: its output is its own value */
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 3; i++)
      ASSERT(fabs(m.out[h * 3 + i] - m.qkv[12 + h * 3 + i]) < 1e-6);
  /* causal: changing position 3's q, k and v changes no output before it */
  float *before = own(malloc(no * sizeof(float)));
  memcpy(before, m.out, no * sizeof(float));
  for (int i = 0; i < 18; i++)
    m.qkv[3 * 18 + i] += 1.0f;
  att_loss(&m);
  ASSERT(memcmp(before, m.out, 3 * 6 * sizeof(float)) == 0);
  ASSERT(memcmp(before + 3 * 6, m.out + 3 * 6, 6 * sizeof(float)) != 0);
  for (int i = 0; i < 18; i++)
    m.qkv[3 * 18 + i] -= 1.0f;
  att_loss(&m);
  float *dqkv = zeros(nq);
  be->attention_bwd(dqkv, m.R, m.qkv, m.out, m.lse, 2, 5, 6, 2, NULL);
  fd_check("attention dqkv", m.qkv, dqkv, nq, att_loss, &m);
  printf("  worst error: %.2e relative (where |grad| > 1e-2), %.2e absolute\n", worst_rel,
         worst_abs);
  /* documents: row 0 holds documents from positions 0 and 2, row 1 from 0, 1 and 4 */
  int pos[10] = {0, 1, 0, 1, 2, 0, 0, 1, 2, 0};
  m.pos = pos;
  att_loss(&m);
  /* a document's first token attends to itself alone: its output is its value */
  for (int bt = 0; bt < 10; bt++)
    for (int h = 0; h < 2 && pos[bt] == 0; h++)
      for (int i = 0; i < 3; i++)
        ASSERT(fabsf(m.out[bt * 6 + h * 3 + i] - m.qkv[bt * 18 + 12 + h * 3 + i]) < 1e-6f);
  /* and nothing before its document reaches a token: row 0's tokens 0 and 1 change nothing
   * from token 2 on */
  memcpy(before, m.out, no * sizeof(float));
  for (int i = 0; i < 2 * 18; i++)
    m.qkv[i] += 1.0f;
  att_loss(&m);
  ASSERT(memcmp(before + 2 * 6, m.out + 2 * 6, 3 * 6 * sizeof(float)) == 0);
  ASSERT(memcmp(before, m.out, 2 * 6 * sizeof(float)) != 0);
  for (int i = 0; i < 2 * 18; i++)
    m.qkv[i] -= 1.0f;
  att_loss(&m);
  be->attention_bwd(dqkv, m.R, m.qkv, m.out, m.lse, 2, 5, 6, 2, pos);
  worst_rel = worst_abs = 0;
  fd_check("attention dqkv, documents", m.qkv, dqkv, nq, att_loss, &m);
  printf("  documents: worst error %.2e relative (where |grad| > 1e-2), %.2e absolute\n", worst_rel,
         worst_abs);
}

/* Documents across the backend's blocks of 64 rows: at T = 150, with documents that begin on a
 * block's first row, in a block's middle, one token long and one that spans two blocks, every
 * output, log-sum-exp and gradient is the one the document's tokens give as a sequence alone. */
TEST(attention_documents_are_sequences_alone) {
  setup();
  enum { B = 2, T = 150, C = 16, NH = 2, C3 = 3 * C };
  static const int starts[B][6] = {{0, 37, 64, 65, 140, -1}, {0, 100, 149, -1}};
  int pos[B * T];
  for (int b = 0; b < B; b++)
    for (int t = 0, s = 0; t < T; t++) {
      for (int k = 0; starts[b][k] >= 0; k++)
        if (starts[b][k] == t)
          s = t;
      pos[b * T + t] = t - s;
    }
  float *qkv = randv((size_t)B * T * C3, 1), *dout = randv((size_t)B * T * C, 1);
  float *out = zeros((size_t)B * T * C), *lse = zeros((size_t)B * NH * T);
  float *dqkv = zeros((size_t)B * T * C3);
  be->attention_fwd(out, lse, qkv, B, T, C, NH, pos);
  be->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, NH, pos);
  float *q1 = zeros((size_t)T * C3), *d1 = zeros((size_t)T * C), *o1 = zeros((size_t)T * C);
  float *l1 = zeros((size_t)NH * T), *g1 = zeros((size_t)T * C3);
  double worst = 0;
  int docs = 0;
  for (int b = 0; b < B; b++)
    for (int k = 0; starts[b][k] >= 0; k++, docs++) {
      int s = starts[b][k], e = starts[b][k + 1] >= 0 ? starts[b][k + 1] : T, n = e - s;
      memcpy(q1, qkv + ((size_t)b * T + s) * C3, (size_t)n * C3 * 4);
      memcpy(d1, dout + ((size_t)b * T + s) * C, (size_t)n * C * 4);
      be->attention_fwd(o1, l1, q1, 1, n, C, NH, NULL);
      be->attention_bwd(g1, d1, q1, o1, l1, 1, n, C, NH, NULL);
      for (size_t i = 0; i < (size_t)n * C; i++) {
        double want = o1[i], got = out[((size_t)b * T + s) * C + i];
        worst = fmax(worst, fabs(got - want) / (1e-3 + fabs(want)));
      }
      for (size_t i = 0; i < (size_t)n * C3; i++) {
        double want = g1[i], got = dqkv[((size_t)b * T + s) * C3 + i];
        worst = fmax(worst, fabs(got - want) / (1e-3 + fabs(want)));
      }
      for (int h = 0; h < NH; h++)
        for (int t = 0; t < n; t++) {
          double want = l1[(size_t)h * n + t], got = lse[((size_t)b * NH + h) * T + s + t];
          worst = fmax(worst, fabs(got - want) / (1e-3 + fabs(want)));
        }
    }
  printf("  %d documents in 2 rows of 150: worst difference from each alone %.2e (relative, "
         "floor 1e-3; fp32 sums in another order)\n",
         docs, worst);
  ASSERT(worst < 1e-4);
  /* and the same rows without documents differ: the check can tell */
  float *plain = zeros((size_t)B * T * C);
  be->attention_fwd(plain, lse, qkv, B, T, C, NH, NULL);
  ASSERT(memcmp(plain + 40 * C, out + 40 * C, C * 4) != 0);
}

/* The backend works in blocks of 64 query rows (and key columns): at T = 150 (two whole blocks and
 * a part), outputs, log-sum-exps and all three gradients against the textbook formulas in double:
 * P = softmax(QKᵀ/√d) below the diagonal, O = PV; dV = PᵀdO, dP = dO Vᵀ,
 * dS = P ∘ (dP − rowsum(P ∘ dP)) / √d, dQ = dS K, dK = dSᵀ Q. W > 0: in a sliding window of W
 * (positions t capped at W − 1, as the model passes them): query t's keys from t − W + 1 on. */
static void attention_direct(int W) {
  setup();
  enum { B = 2, T = 150, C = 16, NH = 2, HS = C / NH, C3 = 3 * C };
  float *qkv = randv((size_t)B * T * C3, 1), *dout = randv((size_t)B * T * C, 1);
  float *out = zeros((size_t)B * T * C), *lse = zeros((size_t)B * NH * T);
  float *dqkv = zeros((size_t)B * T * C3);
  int pos[B * T];
  for (int i = 0; i < B * T; i++)
    pos[i] = W && i % T > W - 1 ? W - 1 : i % T;
  be->attention_fwd(out, lse, qkv, B, T, C, NH, W ? pos : NULL);
  be->attention_bwd(dqkv, dout, qkv, out, lse, B, T, C, NH, W ? pos : NULL);
  double *P = own(calloc((size_t)T * T, sizeof(double))),
         *dS = own(calloc((size_t)T * T, sizeof(double)));
  double worst = 0, sc = 1.0 / sqrt((double)HS);
#define X(t, part, i) ((double)qkv[((size_t)b * T + (t)) * C3 + (part)*C + h * HS + (i)])
#define DO(t, i)      ((double)dout[((size_t)b * T + (t)) * C + h * HS + (i)])
#define CHECK(got, want)                                                                           \
  do {                                                                                             \
    double e_ = fabs((double)(got) - (want)) / (1e-3 + fabs(want));                                \
    worst = e_ > worst ? e_ : worst;                                                               \
  } while (0)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        double m = -INFINITY, sum = 0, dot = 0;
        int j0 = W && t >= W ? t - W + 1 : 0; /* P and dS are 0 before it */
        for (int j = 0; j < j0; j++)
          P[t * T + j] = dS[t * T + j] = 0;
        for (int j = j0; j <= t; j++) {
          double s = 0;
          for (int i = 0; i < HS; i++)
            s += X(t, 0, i) * X(j, 1, i);
          P[t * T + j] = s * sc;
          m = fmax(m, s * sc);
        }
        for (int j = j0; j <= t; j++)
          sum += P[t * T + j] = exp(P[t * T + j] - m);
        CHECK(lse[((size_t)b * NH + h) * T + t], m + log(sum));
        for (int j = j0; j <= t; j++) {
          P[t * T + j] /= sum;
          double dp = 0;
          for (int i = 0; i < HS; i++)
            dp += DO(t, i) * X(j, 2, i);
          dS[t * T + j] = dp;
          dot += P[t * T + j] * dp;
        }
        for (int j = j0; j <= t; j++)
          dS[t * T + j] = P[t * T + j] * (dS[t * T + j] - dot) * sc;
        for (int i = 0; i < HS; i++) {
          double o = 0, dq = 0;
          for (int j = 0; j <= t; j++) {
            o += P[t * T + j] * X(j, 2, i);
            dq += dS[t * T + j] * X(j, 1, i);
          }
          CHECK(out[((size_t)b * T + t) * C + h * HS + i], o);
          CHECK(dqkv[((size_t)b * T + t) * C3 + h * HS + i], dq);
        }
      }
      for (int j = 0; j < T; j++)
        for (int i = 0; i < HS; i++) {
          double dk = 0, dv = 0;
          for (int t = j; t < T; t++) {
            dk += dS[t * T + j] * X(t, 0, i);
            dv += P[t * T + j] * DO(t, i);
          }
          CHECK(dqkv[((size_t)b * T + j) * C3 + C + h * HS + i], dk);
          CHECK(dqkv[((size_t)b * T + j) * C3 + 2 * C + h * HS + i], dv);
        }
    }
#undef X
#undef DO
#undef CHECK
  printf("  T=%d%s: worst error %.2e (relative, floor 1e-3)\n", T,
         W ? ", a sliding window of 40" : "", worst);
  ASSERT(worst < 1e-4);
  if (W) { /* and without the window they differ: the check can tell */
    float *whole = zeros((size_t)B * T * C);
    be->attention_fwd(whole, lse, qkv, B, T, C, NH, NULL);
    ASSERT(memcmp(whole + 100 * C, out + 100 * C, C * 4) != 0);
  }
}

TEST(attention_blocks_match_direct_sums) {
  attention_direct(0);
}

/* a window of 40 across the blocks: the rows of the third block see none of the first's keys */
TEST(attention_window_matches_direct_sums) {
  attention_direct(40);
}

/* ---- cross-entropy ---- */

typedef struct {
  int N, V;
  float *logits, *probs, *losses;
  int *tg;
} ce_t;

static double ce_loss(void *p) {
  ce_t *m = p;
  be->crossentropy_fwd(m->losses, m->probs, m->logits, m->tg, m->N, m->V);
  double s = 0;
  for (int n = 0; n < m->N; n++)
    s += m->losses[n];
  return s;
}

TEST(crossentropy_grad_and_values) {
  setup();
  int tg[4] = {0, 3, 6, 3};
  ce_t m = {4, 7};
  m.logits = randv(28, 2), m.probs = zeros(28), m.losses = zeros(4), m.tg = tg;
  ce_loss(&m);
  for (int n = 0; n < 4; n++) {
    double mx = -1e30, s = 0;
    for (int v = 0; v < 7; v++)
      mx = fmax(mx, m.logits[n * 7 + v]);
    for (int v = 0; v < 7; v++)
      s += exp(m.logits[n * 7 + v] - mx);
    double want = -(m.logits[n * 7 + tg[n]] - mx - log(s));
    ASSERT(fabs(want - m.losses[n]) < 1e-5);
  }
  float *d = zeros(28);
  be->crossentropy_bwd(d, m.probs, tg, 1.0f, 4, 7);
  fd_check("crossentropy", m.logits, d, 28, ce_loss, &m);
}

TEST(vocab_parallel_crossentropy_matches_full) {
  /* two shards of a 10-token vocabulary, combined as tensor-parallel ranks combine them */
  setup();
  int N = 6, V = 10, h = 5, tg[6] = {0, 4, 5, 9, 2, 7};
  float *logits = randv((size_t)N * V, 3), *probs = zeros((size_t)N * V), *loss = zeros(N);
  be->crossentropy_fwd(loss, probs, logits, tg, N, V);
  float *shard[2], *mx[2], *sm[2], *tl[2], gmax[6], gsum[6];
  for (int k = 0; k < 2; k++) {
    shard[k] = zeros((size_t)N * h);
    for (int n = 0; n < N; n++)
      memcpy(shard[k] + n * h, logits + n * V + k * h, h * sizeof(float));
    mx[k] = zeros(N), sm[k] = zeros(N), tl[k] = zeros(N);
    be->vocab_max(mx[k], shard[k], N, h);
  }
  for (int n = 0; n < N; n++)
    gmax[n] = fmaxf(mx[0][n], mx[1][n]);
  for (int k = 0; k < 2; k++) {
    be->vocab_sumexp(sm[k], shard[k], gmax, N, h);
    be->vocab_target(tl[k], shard[k], tg, k * h, N, h);
  }
  for (int n = 0; n < N; n++) {
    gsum[n] = sm[0][n] + sm[1][n];
    float l = logf(gsum[n]) + gmax[n] - (tl[0][n] + tl[1][n]);
    if (fabsf(l - loss[n]) > 1e-5f)
      FAIL_AT("row %d: vocab-parallel loss %.7f, full %.7f", n, (double)l, (double)loss[n]);
  }
  float *dfull = zeros((size_t)N * V);
  be->crossentropy_bwd(dfull, probs, tg, 0.5f, N, V);
  for (int k = 0; k < 2; k++) {
    float *d = zeros((size_t)N * h);
    be->vocab_ce_bwd(d, shard[k], gmax, gsum, tg, k * h, 0.5f, N, h);
    for (int n = 0; n < N; n++)
      for (int v = 0; v < h; v++)
        ASSERT(fabsf(d[n * h + v] - dfull[n * V + k * h + v]) < 1e-6f);
  }
}

TEST(vocab_parallel_embedding_matches_full) {
  setup();
  int B = 2, T = 3, C = 4, V = 6, tok[6] = {5, 0, 2, 3, 3, 1};
  float *wte = randv((size_t)V * C, 1), *wpe = randv((size_t)T * C, 1);
  float *full = zeros((size_t)B * T * C), *a = zeros((size_t)B * T * C),
        *b = zeros((size_t)B * T * C);
  be->encoder_fwd(full, tok, wte, wpe, B, T, C, 0, V, NULL);
  be->encoder_fwd(a, tok, wte, wpe, B, T, C, 0, 3, NULL);          /* shard 0 adds the positions */
  be->encoder_fwd(b, tok, wte + 3 * C, NULL, B, T, C, 3, 6, NULL); /* shard 1 does not */
  for (int i = 0; i < B * T * C; i++)
    ASSERT(a[i] + b[i] == full[i]);
}

/* ---- AdamW, norm ---- */

TEST(adamw_matches_scalar_reference) {
  setup();
  size_t n = 100;
  float *p = randv(n, 1), *g = randv(n, 1), *m = zeros(n), *v = zeros(n);
  double *P = own(malloc(n * 8)), *M = own(calloc(n, 8)), *Vv = own(calloc(n, 8));
  for (size_t i = 0; i < n; i++)
    P[i] = p[i];
  float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  for (int t = 1; t <= 5; t++) {
    be->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, gs, t);
    for (size_t i = 0; i < n; i++) {
      double gi = (double)g[i] * gs;
      P[i] *= 1 - (double)lr * wd;
      M[i] = b1 * M[i] + (1 - b1) * gi;
      Vv[i] = b2 * Vv[i] + (1 - b2) * gi * gi;
      double mh = M[i] / (1 - pow(b1, t)), vh = Vv[i] / (1 - pow(b2, t));
      P[i] -= lr * mh / (sqrt(vh) + eps);
    }
  }
  for (size_t i = 0; i < n; i++)
    if (fabs(P[i] - p[i]) > 1e-6)
      FAIL_AT("p[%zu]: %.9g vs reference %.9g", i, (double)p[i], P[i]);
}

/* colo_adamw_step: one call a run of adjacent tensors that share their decay, giving what one
 * call a tensor gives, bit for bit. GPT-2's 148 tensors (the two embeddings, 12 blocks of 12,
 * the final LayerNorm's two) are 98 runs: the embeddings one; a block's decays are 0 0 1 0 1 0
 * 0 0 1 0 1 0 (LayerNorms and biases 0, matrices 1), 9 runs, of which every block after the
 * first joins its first to the one before's last (1 + 9 + 11·8); the final LayerNorm joins the
 * last block's. */
static int adamw_calls;
static void (*real_adamw)(float *, const float *, float *, float *, size_t, float, float, float,
                          float, float, float, int);
static void counting_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                           float b1, float b2, float eps, float wd, float gs, int t) {
  adamw_calls++;
  real_adamw(p, g, m, v, n, lr, b1, b2, eps, wd, gs, t);
}

TEST(adamw_runs_of_tensors_match_tensors) {
  setup();
  colo_backend_t counted = *be;
  real_adamw = be->adamw;
  counted.adamw = counting_adamw;
  colo_gpt_config_t cfg = {
      .vocab_size = 11, .block_size = 5, .n_layer = 12, .n_head = 2, .n_embd = 8};
  colo_pool_t *pool = new_pool(0);
  colo_gpt_t *m;
  char err[256];
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 2, 0, be, pool, &m, err, sizeof err), 0);
  models[n_models++] = m;
  colo_gpt_init(m, 3);
  colo_gpt_zero_grad(m); /* makes the gradients' buffer */
  size_t n = colo_gpt_num_params(m), nt;
  const colo_param_t *table = colo_gpt_params_table(m, &nt);
  float *p = colo_gpt_params(m), *g = colo_gpt_grads(m), *p0 = own(malloc(n * 4));
  for (size_t i = 0; i < n; i++)
    g[i] = colo_rng_normal(&rng);
  memcpy(p0, p, n * 4);
  colo_adamw_config_t c = {
      .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  colo_adamw_t opt;
  ASSERT_EQ_INT(colo_adamw_init(&opt, &c, n, pool, err, sizeof err), 0);
  colo_adamw_step(&opt, &counted, m, 1e-2f, 0.5f);
  /* the same update a tensor at a time */
  float *q = own(malloc(n * 4)), *mm = zeros(n), *vv = zeros(n);
  memcpy(q, p0, n * 4);
  for (size_t i = 0; i < nt; i++) {
    size_t o = table[i].offset;
    be->adamw(q + o, g + o, mm + o, vv + o, table[i].numel, 1e-2f, c.beta1, c.beta2, c.eps,
              table[i].decay ? c.weight_decay : 0.0f, 0.5f, 1);
  }
  printf("  %zu tensors, %d calls\n", nt, adamw_calls);
  ASSERT_EQ_INT((int)nt, 148);
  ASSERT_EQ_INT(adamw_calls, 98);
  ASSERT(memcmp(p, q, n * 4) == 0 && memcmp(opt.m, mm, n * 4) == 0 &&
         memcmp(opt.v, vv, n * 4) == 0);
  colo_adamw_free(&opt);
}

/* colo_adamw_drop_v: the second moments of the holes (Muon's matrices) are gone from v, whose
 * other moments keep their order; a range read gives zeros at the holes, a write leaves them out;
 * colo_adamw_set_v lays them out anew */
TEST(adamw_dropped_second_moments) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_adamw_config_t c = {.lr = 1e-2f};
  colo_adamw_t opt;
  char err[256];
  ASSERT_EQ_INT(colo_adamw_init(&opt, &c, 20, pool, err, sizeof err), 0);
  const size_t holes[] = {2, 5, 9, 12, 19, 20};
  ASSERT_EQ_INT(colo_adamw_drop_v(&opt, holes, 3, err, sizeof err), 0);
  ASSERT_EQ_INT((int)colo_pool_used(pool), (int)((20 + 13) * sizeof(float)));
  static const struct {
    size_t i, at;
  } off[] = {{0, 0}, {1, 1}, {5, 2}, {8, 5}, {12, 6}, {18, 12}, {20, 13}};
  for (size_t k = 0; k < sizeof off / sizeof off[0]; k++)
    ASSERT_EQ_INT((int)colo_adamw_v_off(&opt, off[k].i), (int)off[k].at);
  float in[20], out[20];
  for (int i = 0; i < 20; i++)
    in[i] = (float)(i + 1);
  colo_adamw_v_put(&opt, be, 0, 20, in);
  for (int i = 0; i < 13; i++) /* 1 2 6 7 8 9 13 ... 19: the kept, in order */
    ASSERT(opt.v[i] == (float)(i < 2 ? i + 1 : i < 6 ? i + 4 : i + 7));
  colo_adamw_v_get(&opt, be, 1, 17, out); /* [1, 18): from inside a run to inside a run */
  for (int i = 1; i < 18; i++)
    ASSERT(out[i - 1] == ((i >= 2 && i < 5) || (i >= 9 && i < 12) ? 0.0f : (float)(i + 1)));
  colo_adamw_v_get(&opt, be, 3, 8, out); /* [3, 11): from inside a hole to inside a hole */
  for (int i = 3; i < 11; i++)
    ASSERT(out[i - 3] == (i < 5 || i >= 9 ? 0.0f : (float)(i + 1)));
  /* laid out anew (placement's moves): 12 offsets with one hole, [4, 10); the old v freed */
  const size_t moved[] = {4, 10};
  ASSERT_EQ_INT((int)colo_adamw_v_floats(12, moved, 1), 6);
  float *v = colo_pool_alloc(pool, 6 * sizeof(float), "optimizer state");
  ASSERT(v);
  ASSERT_EQ_INT(colo_adamw_set_v(&opt, v, 12, moved, 1, err, sizeof err), 0);
  ASSERT_EQ_INT((int)colo_pool_used(pool), (int)((20 + 6) * sizeof(float)));
  ASSERT(opt.v == v && opt.n == 12 && colo_adamw_v_off(&opt, 11) == 5);
  colo_adamw_v_put(&opt, be, 0, 12, in);
  colo_adamw_v_get(&opt, be, 0, 12, out);
  for (int i = 0; i < 12; i++)
    ASSERT(out[i] == (i >= 4 && i < 10 ? 0.0f : (float)(i + 1)));
  colo_adamw_free(&opt);
}

TEST(loss_scaler_rule) {
  colo_loss_scaler_t s;
  colo_loss_scaler_init(&s, 0.0f, 5);
  ASSERT(!s.enabled && colo_loss_scaler_factor(&s) == 1.0f);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, 2.0f), 1);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, INFINITY), -1); /* unscaled: an overflow is fatal */
  colo_loss_scaler_init(&s, 1000.0f, 2);                    /* rounded down to a power of two */
  ASSERT(s.enabled && colo_loss_scaler_factor(&s) == 512.0f);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, NAN), 0); /* skipped, halved */
  ASSERT(s.scale == 256.0f && s.skipped == 1);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, 3.0f), 1);
  ASSERT(s.scale == 256.0f && s.good_steps == 1);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, 3.0f), 1); /* the window of 2: doubled */
  ASSERT(s.scale == 512.0f && s.good_steps == 0);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, 3.0f), 1);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, -INFINITY), 0); /* an overflow restarts the window */
  ASSERT(s.scale == 256.0f && s.good_steps == 0);
  colo_loss_scaler_init(&s, 3e7f, 1); /* capped at 2^24, and stays there */
  ASSERT(s.scale == COLO_LOSS_SCALE_MAX);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, 1.0f), 1);
  ASSERT(s.scale == COLO_LOSS_SCALE_MAX);
  colo_loss_scaler_init(&s, 2.0f, 10); /* overflow at 2 halves to 1; at 1 the run cannot go on */
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, INFINITY), 0);
  ASSERT(s.scale == 1.0f);
  ASSERT_EQ_INT(colo_loss_scaler_update(&s, INFINITY), -1);
}

TEST(sumsq_and_schedule) {
  setup();
  size_t n = 100003;
  float *x = randv(n, 1);
  double ref = 0;
  for (size_t i = 0; i < n; i++)
    ref += (double)x[i] * x[i];
  ASSERT(fabs(be->sumsq(x, n) - ref) < 1e-9 * ref);
  colo_adamw_config_t c = {
      .lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 110, .schedule = 1};
  ASSERT(fabsf(colo_lr_at(&c, 0) - 1e-3f / 11) < 1e-9f);
  ASSERT(fabsf(colo_lr_at(&c, 9) - 1e-3f * 10 / 11) < 1e-9f);
  ASSERT(fabsf(colo_lr_at(&c, 10) - 1e-3f) < 1e-9f);
  ASSERT(fabsf(colo_lr_at(&c, 60) - 5.5e-4f) < 1e-8f); /* half way: the mean of lr and min_lr */
  ASSERT(fabsf(colo_lr_at(&c, 110) - 1e-4f) < 1e-9f);
  c.schedule = 2;
  ASSERT(fabsf(colo_lr_at(&c, 35) - (1e-3f - 0.25f * 9e-4f)) < 1e-8f);
  c.schedule = 3;
  ASSERT(colo_lr_at(&c, 100) == 1e-3f);
  /* wsd: warm-up, lr held until the last 20 of 110 steps, then linear to min_lr */
  c.schedule = 4;
  c.decay_steps = 20;
  ASSERT(fabsf(colo_lr_at(&c, 5) - 1e-3f * 6 / 11) < 1e-9f);
  ASSERT(colo_lr_at(&c, 60) == 1e-3f && colo_lr_at(&c, 89) == 1e-3f);
  ASSERT(colo_lr_at(&c, 90) == 1e-3f); /* the decay's first step */
  ASSERT(fabsf(colo_lr_at(&c, 100) - (1e-3f - 0.5f * 9e-4f)) < 1e-8f);
  ASSERT(fabsf(colo_lr_at(&c, 109) - (1e-3f - 0.95f * 9e-4f)) < 1e-8f);
  ASSERT(fabsf(colo_lr_at(&c, 110) - 1e-4f) < 1e-9f);
  float scale;
  float g[2] = {3, 4};
  ASSERT(fabsf(colo_grad_norm(be, g, 2, 1.0f, &scale) - 5) < 1e-6f);
  ASSERT(fabsf(scale - 1.0f / (5 + 1e-6f)) < 1e-7f);
  colo_grad_norm(be, g, 2, 10.0f, &scale);
  ASSERT(scale == 1.0f);
}

/* ---- the whole model ---- */

/* x[i] += scale · a standard normal of (seed, i), for i < n */
static void add_noise(float *x, size_t n, uint64_t seed, float scale) {
  colo_rng_t r;
  colo_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++)
    x[i] += scale * colo_rng_normal(&r);
}

/* arch: COLO_ARCH_*, or -1 for LLAMA with grouped-query attention (4 query heads, 2 key heads),
 * -2 for that with an untied head, -3 for that with Qwen2's q, k and v biases and RMSNorm eps,
 * -4 for that with Qwen3's QK-norm instead of the biases, 16 wide with heads of 6 (head_dim:
 * queries 24 wide, as Qwen3 0.6B's heads are wider than n_embd/n_head), -5 for -1 with Mistral
 * v0.1's sliding window, of 2 on T = 5: each query attends itself and the key before it */
static colo_gpt_t *tiny_model_arch(colo_pool_t *pool, int recompute, int arch) {
  int gqa = arch < 0;
  colo_gpt_config_t cfg = {.vocab_size = 11,
                           .block_size = 5,
                           .n_layer = 2,
                           .n_head = gqa ? 4 : 2,
                           .n_embd = arch == -4 ? 16 : 8,
                           .arch = gqa ? COLO_ARCH_LLAMA : arch,
                           .mlp_hidden = arch != COLO_ARCH_GPT2 ? 12 : 0,
                           .n_kv_head = gqa ? 2 : 0,
                           .untied_head = arch == -2,
                           .qkv_bias = arch == -3,
                           .qk_norm = arch == -4,
                           .head_dim = arch == -4 ? 6 : 0,
                           .sliding_window = arch == -5 ? 2 : 0,
                           .norm_eps = arch == -3 || arch == -4 ? 1e-6f : 0.0f};
  colo_gpt_t *m;
  char err[256];
  if (colo_gpt_create(&cfg, 2, recompute, be, pool, &m, err, sizeof err) < 0)
    FAIL_AT("%s", err);
  models[n_models++] = m;
  colo_gpt_init(m, 7);
  /* larger weights than GPT-2's init, so every path carries a sizeable gradient */
  add_noise(colo_gpt_params(m), colo_gpt_num_params(m), 99, 0.3f);
  return m;
}

static colo_gpt_t *tiny_model(colo_pool_t *pool, int recompute) {
  return tiny_model_arch(pool, recompute, COLO_ARCH_GPT2);
}

/* colo_gpt_decode, position by position against the cache, gives the logits a whole forward of
 * the prefix gives in its last row: T = 80 (attention's blocks of 64 and a part), with and
 * without recomputation; a second sequence from position 0 replaces the first; refusals */
TEST(decoding_matches_the_whole_forward) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_config_t cfg = {
      .vocab_size = 50, .block_size = 80, .n_layer = 3, .n_head = 4, .n_embd = 32};
  char err[256];
  int tok[80];
  float want[50], got[50];
  double worst = 0;
  /* GPT-2 without and with recomputation, then LLAMA (its keys cached rotated), also with
   * grouped-query attention, and that with Qwen3's QK-norm and wider heads, and with a sliding
   * window of 24 (across attention's blocks of 64: the cache read from its last 24 keys) */
  for (int k = 0; k < 6; k++) {
    int recompute = k == 1;
    cfg.arch = k >= 2 ? COLO_ARCH_LLAMA : COLO_ARCH_GPT2;
    cfg.n_kv_head = k >= 3 ? 2 : 0;
    cfg.qk_norm = k == 4;
    cfg.head_dim = k == 4 ? 12 : 0; /* and heads wider than n_embd/n_head: queries 48 wide */
    cfg.sliding_window = k == 5 ? 24 : 0;
    for (int t = 0; t < 80; t++)
      tok[t] = (t * 7 + 3) % 50;
    colo_gpt_t *m;
    if (colo_gpt_create(&cfg, 1, recompute, be, pool, &m, err, sizeof err) < 0)
      FAIL_AT("%s", err);
    models[n_models++] = m;
    colo_gpt_init(m, 3);
    for (int round = 0; round < 2; round++) { /* the second from another token: a new sequence */
      if (round)
        tok[0] = 49;
      for (int pos = 0; pos < 80; pos++) {
        ASSERT_EQ_INT(colo_gpt_decode(m, tok[pos], pos, got, err, sizeof err), 0);
        if (pos % 7 != 0 && pos != 79)
          continue;
        colo_gpt_forward(m, tok, NULL, 1, pos + 1);
        colo_gpt_read_logits(m, (size_t)pos, want);
        for (int v = 0; v < 50; v++) {
          double d = fabs((double)got[v] - want[v]) / (fabs(want[v]) + 1e-3);
          if (!(d < 1e-4))
            FAIL_AT("%s, recompute %d, position %d, logit %d: decoded %g, forward %g",
                    colo_gpt_arch_name(cfg.arch), recompute, pos, v, (double)got[v],
                    (double)want[v]);
          worst = d > worst ? d : worst;
        }
      }
    }
  }
  printf("  decoded logits against the whole forward's (gpt2, llama, qwen3, mistral's window): "
         "worst relative "
         "difference "
         "%.2e\n",
         worst);
  colo_gpt_t *m = models[n_models - 1];
  ASSERT_EQ_INT(colo_gpt_decode(m, 3, 80, got, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "position 80 or token 3 outside the model's 80, 50");
  colo_gpt_t *half;
  if (colo_gpt_create(&cfg, 1, 0, colo_backend_cpu_dtype(COLO_DTYPE_BF16), pool, &half, err,
                      sizeof err) < 0)
    FAIL_AT("%s", err);
  models[n_models++] = half;
  ASSERT_EQ_INT(colo_gpt_decode(half, 3, 0, got, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "decoding needs the whole model on one rank in fp32, without hooks");
}

/* ZeRO's chunks, searched (capacity 0) or of a given capacity (memory.chunk_mib): in order,
 * covering every parameter once, no tensor across two, capacities multiples of dp that hold
 * what they cover; a given capacity is kept, except by a tensor larger than it */
TEST(chunks_cover_the_parameters_at_any_capacity) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_t *m = tiny_model(pool, 0);
  size_t nt;
  const colo_param_t *t = colo_gpt_params_table(m, &nt);
  size_t total = t[nt - 1].offset + t[nt - 1].numel, biggest = 0;
  for (size_t i = 0; i < nt; i++)
    biggest = t[i].numel > biggest ? t[i].numel : biggest;
  const size_t caps[] = {0, 7, 40, 100, 1000};
  size_t searched = 0;
  for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    colo_chunks_t ch;
    ASSERT_EQ_INT(colo_chunks_plan(t, nt, 3, caps[c], &ch), 0);
    size_t at = 0, waste = 0;
    for (size_t k = 0; k < ch.n; k++) {
      const colo_chunk_t *x = &ch.chunks[k];
      ASSERT(x->lo == at && x->hi > x->lo && x->capacity % 3 == 0);
      ASSERT(x->hi - x->lo <= x->capacity);
      if (caps[c])
        ASSERT(x->capacity == (caps[c] + 2) / 3 * 3 || x->hi - x->lo > caps[c]);
      for (size_t i = 0; i < nt; i++) /* a tensor starting here ends here */
        if (t[i].offset >= x->lo && t[i].offset < x->hi)
          ASSERT(t[i].offset + t[i].numel <= x->hi);
      waste += x->capacity - (x->hi - x->lo);
      at = x->hi;
    }
    ASSERT(at == total && waste == ch.waste);
    if (caps[c] == 7) /* smaller than every weight matrix: a chunk per tensor */
      ASSERT_EQ_INT((int)ch.n, (int)nt);
    if (caps[c] >= total) /* one chunk holds everything */
      ASSERT_EQ_INT((int)ch.n, 1);
    if (!caps[c])
      searched = ch.n;
    colo_chunks_free(&ch);
  }
  ASSERT(searched > 1 && biggest < 1000);
}

static const int IN[10] = {1, 4, 2, 9, 0, 3, 3, 7, 10, 5};
static const int TG[10] = {4, 2, 9, 0, 6, 3, 7, 10, 5, 1};

static double model_loss(void *p) {
  return colo_gpt_forward(p, IN, TG, 2, 5);
}

static void model_fd(int arch) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_t *m = tiny_model_arch(pool, 0, arch);
  colo_gpt_zero_grad(m);
  colo_gpt_forward(m, IN, TG, 2, 5);
  colo_gpt_backward(m, 1.0f);
  size_t nt, np = colo_gpt_num_params(m);
  const colo_param_t *tab = colo_gpt_params_table(m, &nt);
  float *g = own(malloc(np * 4));
  memcpy(g, colo_gpt_grads(m), np * 4);
  if (arch != COLO_ARCH_GPT2) /* wte, 6 a block (7 with biases, 8 with QK-norm), ln_f (and head) */
    ASSERT_EQ_INT(nt, 1 + 2 * (6 + (arch == -3) + 2 * (arch == -4)) + 1 + (arch == -2));
  else
    ASSERT_EQ_INT(nt, 2 + 2 * COLO_GPT_TENSORS_PER_LAYER + 2);
  /* every coordinate of every tensor */
  size_t checked = 0;
  for (size_t i = 0; i < nt; i++) {
    char what[96];
    snprintf(what, sizeof what, "model %s", tab[i].name);
    fd_check(what, colo_gpt_params(m) + tab[i].offset, g + tab[i].offset, tab[i].numel, model_loss,
             m);
    checked += tab[i].numel;
  }
  ASSERT_EQ_INT(checked, np);
  printf("  %s: %zu parameters in %zu tensors checked; worst error %.2e relative (where |grad| > "
         "1e-2), %.2e absolute\n",
         arch == -5 ? "llama with 2 key heads for 4, attention in a sliding window of 2"
         : arch == -4
             ? "llama with 2 key heads for 4, QK-norm (Qwen3's), heads of 6 on 16, RMSNorm "
               "eps 1e-6"
         : arch == -3 ? "llama with 2 key heads for 4, q, k and v biases, RMSNorm eps 1e-6"
         : arch == -2 ? "llama, 2 key heads for 4, untied head"
         : arch == -1 ? "llama with 2 key heads for 4"
                      : colo_gpt_arch_name(arch),
         np, nt, worst_rel, worst_abs);
}

TEST(model_grad_finite_differences) {
  model_fd(COLO_ARCH_GPT2);
}

TEST(llama_model_grad_finite_differences) {
  model_fd(COLO_ARCH_LLAMA);
}

TEST(llama_gqa_model_grad_finite_differences) {
  model_fd(-1);
}

TEST(llama_untied_model_grad_finite_differences) {
  model_fd(-2);
}

TEST(qwen2_model_grad_finite_differences) {
  model_fd(-3);
}

TEST(qwen3_model_grad_finite_differences) {
  model_fd(-4);
}

TEST(mistral_model_grad_finite_differences) {
  model_fd(-5);
}

/* ---- LoRA adapters ---- */

/* adapters of rank 3 (alpha 6) on every product of a tiny model, with B random too (init leaves
 * it 0, where A's gradient is 0 as well) */
static colo_lora_t *tiny_lora(colo_gpt_t *m, colo_pool_t *pool, unsigned targets) {
  colo_lora_config_t lc = {3, 6.0f, targets};
  colo_lora_t *l;
  char err[256];
  if (colo_lora_create(m, &lc, pool, &l, err, sizeof err) < 0 ||
      colo_gpt_set_lora(m, l, err, sizeof err) < 0)
    FAIL_AT("%s", err);
  colo_lora_init(l, 5);
  add_noise(colo_lora_params(l), colo_lora_numel(l), 77, 0.3f);
  return l;
}

/* Every adapter coordinate's gradient against central differences, on GPT-2, Llama, Llama with
 * grouped-query attention, Qwen2's biases and Qwen3's QK-norm, with and without recomputation; the
 * frozen model keeps no gradients of its own */
TEST(lora_grad_finite_differences) {
  setup();
  colo_pool_t *pool = new_pool(0);
  int archs[] = {COLO_ARCH_GPT2, COLO_ARCH_LLAMA, -1, -3, -4};
  size_t checked = 0;
  for (int ai = 0; ai < 5; ai++)
    for (int rc = 0; rc < 2; rc++) {
      colo_gpt_t *m = tiny_model_arch(pool, rc, archs[ai]);
      colo_lora_t *l = tiny_lora(m, pool, COLO_LORA_ALL);
      ASSERT(colo_gpt_grads(m) == NULL);
      colo_gpt_zero_grad(m);
      colo_lora_zero_grad(l);
      colo_gpt_forward(m, IN, TG, 2, 5);
      colo_gpt_backward(m, 1.0f);
      size_t nt, np = colo_lora_numel(l);
      const colo_param_t *tab = colo_lora_table(l, &nt);
      ASSERT_EQ_INT(nt, 2 * 4 * 2); /* 2 layers × 4 products × A, B */
      float *g = own(malloc(np * 4));
      memcpy(g, colo_lora_grads(l), np * 4);
      for (size_t i = 0; i < nt; i++) {
        char what[128];
        snprintf(what, sizeof what, "arch %d recompute %d %s", archs[ai], rc, tab[i].name);
        fd_check(what, colo_lora_params(l) + tab[i].offset, g + tab[i].offset, tab[i].numel,
                 model_loss, m);
        checked += tab[i].numel;
      }
      colo_gpt_set_lora(m, NULL, NULL, 0);
      colo_lora_destroy(l);
    }
  printf("  %zu adapter parameters checked over 4 architectures; worst error %.2e relative, "
         "%.2e absolute\n",
         checked, worst_rel, worst_abs);
}

/* LoRA dropout: masks of their coordinates alone (a fraction p dropped, the rest scaled by
 * 1/(1 − p), a row's mask its own wherever the rows start, the input gradient through the same
 * mask); the adapters' gradients under dropout against central differences (GPT-2 and Llama,
 * with and without recomputation, the masks the same in the recomputed forward); dropout off
 * (evaluation) is the model without it, bit for bit */
TEST(lora_dropout_masks_and_gradients) {
  setup();
  enum { R = 2000, K = 50 };
  float *x = own(malloc(R * K * sizeof *x)), *y = own(malloc(R * K * sizeof *y));
  for (size_t i = 0; i < R * K; i++)
    x[i] = 1.0f;
  uint32_t th = (uint32_t)(0.25 * 16777216.0);
  be->dropout(y, x, R, K, 42, 0, 0, th, 1.0f / 0.75f);
  size_t zeros = 0, other = 0;
  for (size_t i = 0; i < R * K; i++)
    zeros += y[i] == 0.0f, other += y[i] != 0.0f && y[i] != 1.0f / 0.75f;
  printf("  p 0.25: %.4f of %d dropped\n", (double)zeros / (R * K), R * K);
  ASSERT(fabs((double)zeros / (R * K) - 0.25) < 0.01 && other == 0);
  be->dropout(x, x, R - 10, K, 42, 10, 0, th, 1.0f / 0.75f); /* rows 10.. on their own, in place */
  ASSERT(memcmp(x, y + 10 * K, (R - 10) * K * sizeof *x) == 0);
  /* columns 20.. on their own (a tensor-parallel rank's): each row's part of the whole mask */
  float *z = own(malloc(R * (K - 20) * sizeof *z));
  for (size_t i = 0; i < R * (K - 20); i++)
    z[i] = 1.0f;
  be->dropout(z, z, R, K - 20, 42, 0, 20, th, 1.0f / 0.75f);
  for (int n = 0; n < R; n++)
    ASSERT(memcmp(z + (size_t)n * (K - 20), y + (size_t)n * K + 20, (K - 20) * sizeof *z) == 0);
  for (size_t i = 0; i < R * K; i++)
    x[i] = 1.0f;
  be->dropout(x, x, R, K, 43, 0, 0, th, 1.0f); /* another key, another mask: 3/8 differ */
  size_t differ = 0;
  for (size_t i = 0; i < R * K; i++)
    differ += (x[i] == 0.0f) != (y[i] == 0.0f);
  ASSERT(fabs((double)differ / (R * K) - 0.375) < 0.01);

  colo_pool_t *pool = new_pool(0);
  int archs[] = {COLO_ARCH_GPT2, -1};
  for (int ai = 0; ai < 2; ai++)
    for (int rc = 0; rc < 2; rc++) {
      colo_gpt_t *m = tiny_model_arch(pool, rc, archs[ai]);
      float loss[3];
      colo_lora_t *l[2];
      for (int k = 0; k < 2; k++) { /* without dropout, and with 0.3 */
        colo_lora_config_t lc = {3, 6.0f, COLO_LORA_ALL, 0, k ? 0.3f : 0.0f};
        char err[256];
        if (colo_lora_create(m, &lc, pool, &l[k], err, sizeof err) < 0)
          FAIL_AT("%s", err);
        colo_lora_init(l[k], 5);
        add_noise(colo_lora_params(l[k]), colo_lora_numel(l[k]), 77, 0.3f);
      }
      ASSERT_EQ_INT(colo_gpt_set_lora(m, l[0], NULL, 0), 0);
      loss[0] = colo_gpt_forward(m, IN, TG, 2, 5);
      ASSERT_EQ_INT(colo_gpt_set_lora(m, l[1], NULL, 0), 0);
      loss[1] = colo_gpt_forward(m, IN, TG, 2, 5); /* dropout off */
      colo_lora_set_dropout(l[1], 1, 1234, 3);
      colo_lora_zero_grad(l[1]);
      loss[2] = colo_gpt_forward(m, IN, TG, 2, 5);
      colo_gpt_backward(m, 1.0f);
      ASSERT(loss[1] == loss[0] && fabsf(loss[2] - loss[0]) > 1e-4f);
      size_t nt, np = colo_lora_numel(l[1]);
      const colo_param_t *tab = colo_lora_table(l[1], &nt);
      float *g = own(malloc(np * 4));
      memcpy(g, colo_lora_grads(l[1]), np * 4);
      for (size_t i = 0; i < nt; i++) {
        char what[128];
        snprintf(what, sizeof what, "dropout, arch %d recompute %d %s", archs[ai], rc, tab[i].name);
        fd_check(what, colo_lora_params(l[1]) + tab[i].offset, g + tab[i].offset, tab[i].numel,
                 model_loss, m);
      }
      printf("  arch %d, recompute %d: loss %.6f without dropout, %.6f with 0.3\n", archs[ai], rc,
             (double)loss[0], (double)loss[2]);
      colo_gpt_set_lora(m, NULL, NULL, 0);
      colo_lora_destroy(l[0]);
      colo_lora_destroy(l[1]);
    }
}

/* The adapters merged into a copy of the weights (colo_lora_merge) give a plain model the
 * adapted model's loss; at initialisation (B = 0) the adapted model is the base */
TEST(lora_merged_is_the_same_model) {
  setup();
  colo_pool_t *pool = new_pool(0);
  int archs[] = {COLO_ARCH_GPT2, -1};
  unsigned targets[] = {COLO_LORA_ALL, COLO_LORA_QKV | COLO_LORA_FCPROJ};
  for (int ai = 0; ai < 2; ai++) {
    colo_gpt_t *base = tiny_model_arch(pool, 0, archs[ai]);
    colo_gpt_t *m = tiny_model_arch(pool, 0, archs[ai]); /* the same weights */
    float base_loss = colo_gpt_forward(base, IN, TG, 2, 5);
    colo_lora_config_t lc = {4, 8.0f, targets[ai]};
    colo_lora_t *l;
    char err[256];
    ASSERT_EQ_INT(colo_lora_create(m, &lc, pool, &l, err, sizeof err), 0);
    ASSERT_EQ_INT(colo_gpt_set_lora(m, l, err, sizeof err), 0);
    colo_lora_init(l, 9);
    float init_loss = colo_gpt_forward(m, IN, TG, 2, 5);
    ASSERT(fabsf(init_loss - base_loss) <= 1e-6f * fabsf(base_loss));
    add_noise(colo_lora_params(l), colo_lora_numel(l), 3, 0.2f);
    float adapted = colo_gpt_forward(m, IN, TG, 2, 5);
    ASSERT(fabsf(adapted - base_loss) > 1e-3f); /* the adapters change the model */
    colo_lora_merge(l, colo_lora_params(l), colo_gpt_params(base));
    float merged = colo_gpt_forward(base, IN, TG, 2, 5);
    printf("  %s: base %.6f, adapted %.6f, merged %.6f\n", archs[ai] ? "llama gqa" : "gpt2",
           (double)base_loss, (double)adapted, (double)merged);
    ASSERT(fabsf(merged - adapted) <= 2e-6f * fabsf(adapted));
    colo_gpt_set_lora(m, NULL, NULL, 0);
    colo_lora_destroy(l);
  }
}

/* DoRA: a fresh model's magnitudes are W's column norms, so it starts as the base; the
 * magnitudes' gradients against central differences (the norm is a constant in the backward, as
 * PEFT takes it, so A's and B's are not the loss's own derivatives: engine_lora checks those
 * against PyTorch), with and without recomputation, and under dropout (its masks fixed by their
 * key); the merged weights give the adapted loss (dropout off, as in evaluation) */
TEST(dora_magnitudes_start_gradients_merge) {
  setup();
  colo_pool_t *pool = new_pool(0);
  int archs[] = {COLO_ARCH_GPT2, -1, -3, -4};
  size_t checked = 0;
  for (int ai = 0; ai < 4; ai++)
    for (int rc = 0; rc < 4; rc++) { /* rc & 1: recompute; rc & 2: dropout */
      colo_gpt_t *base = tiny_model_arch(pool, 0, archs[ai]);
      colo_gpt_t *m = tiny_model_arch(pool, rc & 1, archs[ai]);
      float base_loss = colo_gpt_forward(base, IN, TG, 2, 5);
      colo_lora_config_t lc = {3, 6.0f, COLO_LORA_ALL, .dora = 1, .dropout = rc & 2 ? 0.2f : 0};
      colo_lora_t *l;
      char err[256];
      ASSERT_EQ_INT(colo_lora_create(m, &lc, pool, &l, err, sizeof err), 0);
      ASSERT_EQ_INT(colo_gpt_set_lora(m, l, err, sizeof err), 0);
      colo_lora_init(l, 5);
      float init_loss = colo_gpt_forward(m, IN, TG, 2, 5); /* sets the magnitudes */
      ASSERT(fabsf(init_loss - base_loss) <= 1e-6f * fabsf(base_loss));
      size_t nt, np = colo_lora_numel(l);
      const colo_param_t *tab = colo_lora_table(l, &nt);
      ASSERT_EQ_INT(nt, 3 * 4 * 2);                 /* 2 layers × 4 products × A, B, magnitude */
      add_noise(colo_lora_params(l), np, 77, 0.3f); /* B too, and the magnitudes off the norms */
      colo_lora_set_dropout(l, 1, 99, 0);
      colo_lora_zero_grad(l);
      colo_gpt_forward(m, IN, TG, 2, 5);
      colo_gpt_backward(m, 1.0f);
      float *g = own(malloc(np * 4));
      memcpy(g, colo_lora_grads(l), np * 4);
      for (size_t i = 0; i < nt; i++) {
        if (colo_lora_kind(l, i) != COLO_LORA_MAG)
          continue;
        char what[128];
        snprintf(what, sizeof what, "arch %d recompute %d %s", archs[ai], rc, tab[i].name);
        fd_check(what, colo_lora_params(l) + tab[i].offset, g + tab[i].offset, tab[i].numel,
                 model_loss, m);
        checked += tab[i].numel;
      }
      colo_lora_set_dropout(l, 0, 0, 0);
      float adapted = colo_gpt_forward(m, IN, TG, 2, 5);
      ASSERT(fabsf(adapted - base_loss) > 1e-3f);
      colo_lora_merge(l, colo_lora_params(l), colo_gpt_params(base));
      float merged = colo_gpt_forward(base, IN, TG, 2, 5);
      ASSERT(fabsf(merged - adapted) <= 2e-6f * fabsf(adapted));
      if (rc == 2)
        printf("  arch %d: base %.6f, at the start %.6f, adapted %.6f, merged %.6f\n", archs[ai],
               (double)base_loss, (double)init_loss, (double)adapted, (double)merged);
      colo_gpt_set_lora(m, NULL, NULL, 0);
      colo_lora_destroy(l);
    }
  printf("  %zu magnitudes checked; worst error %.2e relative, %.2e absolute\n", checked, worst_rel,
         worst_abs);
}

/* 16-bit activations (bf16, emulated) read rounded copies of A and scale·B: the adapters'
 * gradients stay within bf16's error of fp32's */
TEST(lora_bf16_gradients_near_fp32) {
  setup();
  const colo_backend_t *tabs[2] = {colo_backend_cpu(), colo_backend_cpu_dtype(COLO_DTYPE_BF16)};
  float *g[2];
  size_t np = 0;
  for (int k = 0; k < 2; k++) {
    be = tabs[k];
    colo_pool_t *pool = new_pool(0);
    colo_gpt_t *m = tiny_model_arch(pool, 0, COLO_ARCH_GPT2);
    colo_lora_t *l = tiny_lora(m, pool, COLO_LORA_ALL);
    colo_lora_zero_grad(l);
    colo_gpt_forward(m, IN, TG, 2, 5);
    colo_gpt_backward(m, 1.0f);
    np = colo_lora_numel(l);
    g[k] = own(malloc(np * 4));
    memcpy(g[k], colo_lora_grads(l), np * 4);
    colo_gpt_set_lora(m, NULL, NULL, 0);
    colo_lora_destroy(l);
  }
  be = colo_backend_cpu();
  double d = 0, n = 0;
  for (size_t i = 0; i < np; i++) {
    ASSERT(isfinite(g[1][i]));
    d += ((double)g[1][i] - g[0][i]) * ((double)g[1][i] - g[0][i]);
    n += (double)g[0][i] * g[0][i];
  }
  printf("  bf16 against fp32: relative error of the adapters' gradients %.2e\n", sqrt(d / n));
  ASSERT(n > 0 && sqrt(d / n) < 3e-2);
}

/* Two forward and backward passes of a LoRA model on the test batch: their losses into loss[2],
 * and the adapters' gradients after both, into a buffer of their own (freed with the test) */
static float *lora_twice(colo_gpt_t *m, colo_lora_t *l, float loss[2]) {
  size_t np = colo_lora_numel(l);
  float *g = own(malloc(np * 4));
  for (int rep = 0; rep < 2; rep++) {
    colo_lora_zero_grad(l);
    loss[rep] = colo_gpt_forward(m, IN, TG, 2, 5);
    colo_gpt_backward(m, 1.0f);
  }
  memcpy(g, colo_lora_grads(l), np * 4);
  return g;
}

/* bf16 activations: a frozen model whose matrices are kept only as their compute copies
 * (colo_gpt_freeze_matrices) computes what it did with them, bit for bit (the loss, the
 * adapters' gradients, twice over, with and without recomputation, GPT-2 and Llama with
 * grouped-query attention, its head tied and untied: Llama's embedding and head then 16-bit
 * copies alone), in less memory */
TEST(lora_frozen_matrices_are_the_same) {
  setup();
  be = colo_backend_cpu_dtype(COLO_DTYPE_BF16);
  int archs[] = {COLO_ARCH_GPT2, -1, -2};
  for (int ai = 0; ai < 3; ai++)
    for (int rc = 0; rc < 2; rc++) {
      float loss[2][2];
      float *g[2];
      size_t used[2], np = 0;
      colo_pool_t *pool = new_pool(0);
      for (int k = 0; k < 2; k++) {
        size_t before = colo_pool_used(pool);
        colo_gpt_t *m = tiny_model_arch(pool, rc, archs[ai]);
        colo_lora_t *l = tiny_lora(m, pool, COLO_LORA_ALL);
        char err[256];
        if (k)
          ASSERT_EQ_INT(colo_gpt_freeze_matrices(m, err, sizeof err), 0);
        ASSERT((colo_gpt_params(m) == NULL) == (k == 1));
        used[k] = colo_pool_used(pool) - before;
        np = colo_lora_numel(l);
        g[k] = lora_twice(m, l, loss[k]);
        colo_gpt_set_lora(m, NULL, NULL, 0);
        colo_lora_destroy(l);
        colo_gpt_destroy(m);
        models[--n_models] = NULL;
      }
      ASSERT(loss[0][0] == loss[1][0] && loss[0][1] == loss[1][1] && isfinite(loss[0][0]));
      ASSERT(memcmp(g[0], g[1], np * 4) == 0);
      printf("  arch %d, recompute %d: the same loss %.6f and gradients; memory %zu -> %zu bytes\n",
             archs[ai], rc, (double)loss[1][1], used[0], used[1]);
      ASSERT(used[1] < used[0]);
    }
  be = colo_backend_cpu();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_t *m = tiny_model(pool, 0);
  char err[256];
  ASSERT_EQ_INT(colo_gpt_freeze_matrices(m, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "only a frozen model (LoRA) with 16-bit activations keeps its matrices as "
                     "their compute copies alone");
}

/* NF4 as bitsandbytes stores it: a matrix w[rows][cols] is quantized in [cols][rows] order, two
 * codes a byte (the first high), absmax per block of 64; values that are levels times the block's
 * absmax come back exactly; the nearest level wins on each side of a midpoint; refusals */
TEST(nf4_codes_and_values) {
  enum { R = 3, C = 5 }; /* 15 values, one block, an odd count */
  float w[R][C], back[R][C], amax[2];
  uint8_t codes[36];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) /* value k of [cols][rows] order is level k, times 0.5 */
      w[r][c] = 0.5f * colo_nf4_levels[c * R + r];
  ASSERT_EQ_INT(colo_nf4_quantize(&w[0][0], R, C, codes, amax), 0);
  ASSERT(amax[0] == 0.5f);
  const uint8_t want[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xe0};
  ASSERT(memcmp(codes, want, sizeof want) == 0);
  colo_nf4_dequantize(codes, amax, R, C, &back[0][0]);
  ASSERT(memcmp(back, w, sizeof w) == 0);
  /* either side of the midpoint between levels 8 and 9, and the largest magnitude negative */
  float mid = (colo_nf4_levels[8] + colo_nf4_levels[9]) / 2,
        v[3] = {mid - 1e-4f, mid + 1e-4f, -1.0f};
  ASSERT_EQ_INT(colo_nf4_quantize(v, 3, 1, codes, amax), 0);
  ASSERT(amax[0] == 1.0f && codes[0] == 0x89 && codes[1] >> 4 == 0);
  float z[70] = {0}; /* a block of zeros, and a second block of 6 */
  z[69] = -3.0f;
  ASSERT_EQ_INT(colo_nf4_quantize(z, 70, 1, codes + 0, amax), 0);
  ASSERT(amax[0] == 0.0f && amax[1] == 3.0f && codes[0] == 0x77 && codes[34] == 0x70);
  z[3] = NAN;
  ASSERT_EQ_INT(colo_nf4_quantize(z, 70, 1, codes, amax), -1);
}

/* Double quantization: bitsandbytes' dynamic map's shape; each scale takes the map's nearest value
 * (by a search of all 256) to its offset-less value over its block's absmax2; the offset is the
 * mean; a block of equal scales comes back exactly; packed, the scales take a byte, and the
 * matrix unpacks as NF4 with the scales made again */
TEST(nf4_double_quant_scales) {
  const float *map = colo_nf4_dq_map;
  for (int i = 0; i < 255; i++)
    ASSERT(map[i] < map[i + 1]);
  ASSERT(map[127] == 0.0f && map[255] == 1.0f && map[0] == -map[254] && map[128] == -map[126]);
  enum { NB = 700 }; /* three blocks of 256, the last of 188 */
  static float a[NB], back[NB], st[4];
  static uint8_t q[NB];
  uint64_t s = 7;
  double sum = 0.0;
  for (int b = 0; b < NB; b++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    a[b] = b == 5 ? 0.0f : 0.01f + 0.2f * (float)(s >> 40) / (float)(1 << 24);
    sum += a[b];
  }
  colo_nf4_dq_quantize(a, NB, q, st);
  ASSERT(st[3] == (float)(sum / NB));
  colo_nf4_dq_dequantize(q, st, NB, back);
  float worst = 0.0f;
  for (int b = 0; b < NB; b++) {
    float x = (a[b] - st[3]) * (1.0f / st[b / 256]), best = INFINITY;
    for (int j = 0; j < 256; j++)
      best = fabsf(map[j] - x) < best ? fabsf(map[j] - x) : best;
    ASSERT(fabsf(map[q[b]] - x) == best);
    volatile float p = map[q[b]] * st[b / 256]; /* rounded before the sum */
    ASSERT(back[b] == p + st[3]);
    worst = fabsf(back[b] - a[b]) > worst ? fabsf(back[b] - a[b]) : worst;
  }
  /* near ±1 the map's steps are 1/71; each block's absmax2 is about 0.1 */
  ASSERT(worst > 0.0f && worst < 0.1f / 71.0f);
  const float same[3] = {0.5f, 0.5f, 0.5f};
  colo_nf4_dq_quantize(same, 3, q, st);
  colo_nf4_dq_dequantize(q, st, 3, back);
  ASSERT(st[0] == 0.0f && st[1] == 0.5f && q[0] == 127 && back[2] == 0.5f);
  /* packed: a 300-block matrix, 128 x 150 */
  enum { R = 128, C = 150, N = R * C };
  static float w[N], u0[N], u1[N], sc[N / 64];
  for (int i = 0; i < N; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    w[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * (1.0f + (float)(i % 7));
  }
  size_t f0 = colo_nf4_packed_floats(N, 0), f1 = colo_nf4_packed_floats(N, 1);
  ASSERT_EQ_INT((int)f0, N / 8 + N / 64);
  ASSERT_EQ_INT((int)f1, N / 8 + N / 256 + 2 + 1);
  ASSERT(colo_nf4_bytes(N, 1) == (size_t)N / 2 + N / 64 + 8 + 4);
  float *p0 = own(malloc(f0 * 4)), *p1 = own(malloc(f1 * 4));
  ASSERT_EQ_INT(colo_nf4_pack(w, R, C, 0, p0), 0);
  ASSERT_EQ_INT(colo_nf4_pack(w, R, C, 1, p1), 0);
  ASSERT(memcmp(p0, p1, N / 2) == 0); /* the same codes */
  ASSERT_EQ_INT(colo_nf4_unpack(p0, R, C, 0, u0), 0);
  ASSERT_EQ_INT(colo_nf4_unpack(p1, R, C, 1, u1), 0);
  const uint8_t *b1 = (const uint8_t *)p1;
  colo_nf4_dq_dequantize(b1 + N / 2, (const float *)(const void *)(b1 + colo_nf4_stats_at(N)),
                         N / 64, sc);
  static float want[N];
  colo_nf4_dequantize(b1, sc, R, C, want);
  ASSERT(memcmp(u1, want, sizeof want) == 0);
  double d0 = 0.0, d1 = 0.0;
  for (int i = 0; i < N; i++)
    d0 += fabs(u0[i] - w[i]), d1 += fabs(u1[i] - w[i]);
  printf("  scales' worst error %.3g; a matrix's mean error %.4g (NF4) and %.4g (double-quantized)"
         "; %zu words packed, not %zu\n",
         (double)worst, d0 / N, d1 / N, f1, f0);
  ASSERT(d1 > d0 && d1 < 1.05 * d0);
  w[77] = NAN;
  ASSERT_EQ_INT(colo_nf4_pack(w, R, C, 1, p1), -1);
}

/* the table names of a block's four matrices, which NF4 keeps */
static int nf4_matrix(const char *name) {
  static const char *const m[4] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                   "mlp.c_proj.weight"};
  size_t n = strlen(name);
  for (int k = 0; k < 4; k++)
    if (n >= strlen(m[k]) && !strcmp(name + n - strlen(m[k]), m[k]))
      return 1;
  return 0;
}

/* QLoRA: a frozen model kept in NF4 (colo_gpt_quantize_nf4) trains as the frozen model made from
 * its dequantized values, bit for bit (the loss, the adapters' gradients, twice over), whether
 * its values were in it (quantized then) or come after through colo_gpt_put into a model made
 * without parameters; fp32 and bf16 activations, GPT-2 and Llama with grouped-query attention
 * (its head tied and untied), with and without recomputation, with and without double
 * quantization; in less memory; refusals */
TEST(qlora_nf4_is_lora_on_the_dequantized_model) {
  setup();
  const colo_backend_t *tabs[2] = {colo_backend_cpu(), colo_backend_cpu_dtype(COLO_DTYPE_BF16)};
  int archs[] = {COLO_ARCH_GPT2, -1, -2};
  char err[256];
  colo_pool_t *pool = new_pool(0);
  for (int dq = 0; dq < 2; dq++)
    for (int t = 0; t < 2; t++)
      for (int ai = 0; ai < 3; ai++)
        for (int rc = 0; rc < 2; rc++) {
          be = tabs[t];
          colo_gpt_t *src = tiny_model_arch(pool, rc, archs[ai]);
          size_t np = colo_gpt_num_params(src), nt;
          float *v = own(malloc(np * sizeof *v)), *deq = own(malloc(np * sizeof *v));
          memcpy(v, colo_gpt_params(src), np * sizeof *v);
          memcpy(deq, v, np * sizeof *v);
          const colo_param_t *tab = colo_gpt_params_table(src, &nt);
          int quantized = 0;
          for (size_t i = 0; i < nt; i++) {
            if (!nf4_matrix(tab[i].name))
              continue;
            int r0 = -2, r1 = -2, rw = tab[i].shape[0], cl = tab[i].shape[1];
            float *pk = malloc(colo_nf4_packed_floats(tab[i].numel, dq) * sizeof *pk);
            if (pk && (r0 = colo_nf4_pack(v + tab[i].offset, rw, cl, dq, pk)) == 0)
              r1 = colo_nf4_unpack(pk, rw, cl, dq, deq + tab[i].offset);
            free(pk);
            ASSERT(r0 == 0 && r1 == 0);
            quantized++;
          }
          ASSERT_EQ_INT(quantized, 8);
          float loss[3][2], *g[3];
          size_t used[3], nl = 0;
          for (int k = 0; k < 3; k++) {
            size_t before = colo_pool_used(pool);
            colo_gpt_t *m;
            if (k < 2) { /* the dequantized model; the model quantized in place */
              m = tiny_model_arch(pool, rc, archs[ai]);
              memcpy(colo_gpt_params(m), k ? v : deq, np * sizeof *v);
            } else { /* made without parameters, its values put */
              colo_gpt_stage_t st = {0, 2, 1, 1, 1};
              ASSERT_EQ_INT(colo_gpt_create_stage(colo_gpt_config(src), 2, rc, be, NULL, &st, pool,
                                                  &m, err, sizeof err),
                            0);
              models[n_models++] = m;
            }
            colo_lora_t *l = tiny_lora(m, pool, COLO_LORA_ALL);
            if (k)
              ASSERT_EQ_INT(colo_gpt_quantize_nf4(m, 0, dq, err, sizeof err), 0);
            for (size_t i = 0; k == 2 && i < nt; i++)
              ASSERT_EQ_INT(
                  colo_gpt_put(m, tab[i].offset, v + tab[i].offset, tab[i].numel, err, sizeof err),
                  0);
            ASSERT(colo_gpt_nf4(m) == (k > 0) && (colo_gpt_params(m) == NULL) == (k > 0));
            used[k] = colo_pool_used(pool) - before;
            nl = colo_lora_numel(l);
            g[k] = lora_twice(m, l, loss[k]);
            if (k == 1) { /* refusals: a matrix in parts; a value not finite */
              size_t i = 0;
              while (!nf4_matrix(tab[i].name))
                i++;
              ASSERT_EQ_INT(colo_gpt_put(m, tab[i].offset, v + tab[i].offset, 3, err, sizeof err),
                            COLO_EINVAL);
              ASSERT_EQ_STR(err, "transformer.h.0.attn.c_attn.weight comes in parts: NF4 takes it "
                                 "whole");
              float keep = v[tab[i].offset];
              v[tab[i].offset] = INFINITY;
              ASSERT_EQ_INT(
                  colo_gpt_put(m, tab[i].offset, v + tab[i].offset, tab[i].numel, err, sizeof err),
                  COLO_EINVAL);
              ASSERT_EQ_STR(err, "transformer.h.0.attn.c_attn.weight holds a value that is not "
                                 "finite");
              v[tab[i].offset] = keep;
            }
            colo_gpt_set_lora(m, NULL, NULL, 0);
            colo_lora_destroy(l);
          }
          ASSERT(used[1] < used[0] && used[2] == used[1]);
          for (int k = 1; k < 3; k++) {
            ASSERT(loss[k][0] == loss[0][0] && loss[k][1] == loss[0][1] && isfinite(loss[0][0]));
            ASSERT(memcmp(g[k], g[0], nl * 4) == 0);
          }
          while (n_models > 0) { /* this round's four */
            colo_gpt_destroy(models[--n_models]);
            models[n_models] = NULL;
          }
          printf("  %s, arch %d, recompute %d, double quantization %d: loss %.6f and gradients "
                 "the same as the dequantized model's; memory %zu -> %zu, %zu bytes\n",
                 colo_dtype_name(be->act_dtype), archs[ai], rc, dq, (double)loss[0][1], used[0],
                 used[1], used[2]);
        }
  be = colo_backend_cpu();
  colo_gpt_t *m = tiny_model(pool, 0);
  ASSERT_EQ_INT(colo_gpt_quantize_nf4(m, 0, 0, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "only a frozen model (LoRA) whole on its rank keeps its matrices in NF4");
}

/* values rounded to bf16 in place: exact in it */
static void round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = colo_bf16_to_float(colo_bf16_from_float(x[i]));
}

static void put_into(void *ctx, size_t off, const float *v, size_t n) {
  memcpy((float *)ctx + off, v, n * sizeof *v);
}

/* ZeRO-3 with a model made without parameters (colo_gpt_stage_t.no_params): the values made in
 * host memory (colo_gpt_init_each), kept as pieces (colo_zero_keep) and attached from there give
 * the same loss and gradient pieces, bit for bit, as the model made whole and attached from its
 * own buffer; set-up never held that buffer. Also for a frozen model (LoRA) under ZeRO-3: the
 * hooks fetch alone, and the adapters' gradients are the unsharded model's. */
TEST(zero3_pieces_made_on_the_host_are_the_model) {
  setup();
  colo_gpt_config_t cfg = {
      .vocab_size = 11, .block_size = 5, .n_layer = 2, .n_head = 2, .n_embd = 8};
  /* trained; frozen; frozen in bf16 with every value exact in bf16 (its pieces then bf16) */
  for (int v = 0; v < 3; v++) {
    int frozen = v > 0, half = v == 2;
    const colo_backend_t *b = half ? colo_backend_cpu_dtype(COLO_DTYPE_BF16) : be;
    float loss[2];
    size_t used[2], np = 0, shard = 0, esz[2];
    float *g[2];
    for (int k = 0; k < 2; k++) {
      colo_pool_t *pool = new_pool(0);
      colo_gpt_t *m;
      char err[256];
      colo_gpt_stage_t whole = {0, cfg.n_layer, 1, 1, 1};
      ASSERT_EQ_INT(
          colo_gpt_create_stage(&cfg, 2, 0, b, NULL, k ? &whole : NULL, pool, &m, err, sizeof err),
          0);
      models[n_models++] = m;
      used[k] = colo_pool_used(pool);
      np = colo_gpt_num_params(m);
      ASSERT((colo_gpt_params(m) == NULL) == (k == 1));
      colo_lora_t *l = NULL;
      if (frozen) /* its B away from zero */
        l = tiny_lora(m, pool, COLO_LORA_ALL);
      colo_zero_t z;
      colo_comm_t *one = colo_comm_single();
      ASSERT_EQ_INT(colo_zero_init(&z, one, 3, 64, m, pool, err, sizeof err), 0);
      ASSERT_EQ_INT(z.frozen, frozen);
      float *h = own(malloc(np * sizeof *h)), *pieces = NULL;
      if (k) {
        colo_gpt_init_each(m, 7, put_into, h);
        if (half)
          round_bf16(h, np);
        pieces = own(calloc(z.shard_n, sizeof *pieces));
        colo_zero_keep(&z, 0, h, np, pieces);
      } else {
        colo_gpt_init(m, 7);
        if (half)
          round_bf16(colo_gpt_params(m), np);
      }
      ASSERT_EQ_INT(colo_zero_attach_from(&z, pieces, err, sizeof err), 0);
      esz[k] = z.esz;
      colo_gpt_zero_grad(m);
      colo_zero_zero_grads(&z);
      if (l)
        colo_lora_zero_grad(l);
      loss[k] = colo_gpt_forward(m, IN, TG, 2, 5);
      colo_gpt_backward(m, 1.0f);
      ASSERT_EQ_INT(colo_gpt_hook_error(m), 0);
      ASSERT(colo_gpt_grads(m) == NULL);
      shard = frozen ? colo_lora_numel(l) : z.shard_n;
      g[k] = own(malloc(shard * sizeof(float)));
      memcpy(g[k], frozen ? colo_lora_grads(l) : z.grad_piece, shard * sizeof(float));
      ASSERT((z.grad_piece == NULL) == frozen);
      colo_zero_free(&z);
      one->ops->destroy(one);
      colo_gpt_set_lora(m, NULL, NULL, 0);
      colo_lora_destroy(l);
    }
    printf("  %s: loss %.7f and %.7f; set-up held %zu bytes with the model's buffer, %zu without; "
           "pieces of %zu and %zu bytes a value\n",
           (const char *[]){"trained", "frozen (LoRA)", "frozen, bf16-exact, bf16"}[v],
           (double)loss[0], (double)loss[1], used[0], used[1], esz[0], esz[1]);
    ASSERT(loss[0] == loss[1] && isfinite(loss[0]));
    ASSERT_EQ_INT(esz[0], 4);
    ASSERT_EQ_INT(esz[1], half ? 2 : 4);
    ASSERT(memcmp(g[0], g[1], shard * sizeof(float)) == 0);
    ASSERT_EQ_INT(used[0] - used[1], np * sizeof(float));
  }
}

TEST(lora_refusals) {
  setup();
  char err[256];
  unsigned t = 0;
  ASSERT_EQ_INT(colo_lora_targets_parse("attn.c_attn,mlp.c_proj", &t, err, sizeof err), 0);
  ASSERT_EQ_INT(t, COLO_LORA_QKV | COLO_LORA_FCPROJ);
  char buf[96];
  ASSERT_EQ_STR(colo_lora_targets_name(t, buf, sizeof buf), "attn.c_attn,mlp.c_proj");
  ASSERT_EQ_INT(colo_lora_targets_parse("all", &t, err, sizeof err), 0);
  ASSERT_EQ_INT(t, COLO_LORA_ALL);
  ASSERT_EQ_INT(colo_lora_targets_parse("attn.c_attn,q_proj", &t, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "lora target 'q_proj' is not one of attn.c_attn, attn.c_proj, mlp.c_fc, "
                     "mlp.c_proj, all");
  ASSERT_EQ_INT(colo_lora_targets_parse("", &t, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "lora targets: none named");
  colo_pool_t *pool = new_pool(0);
  colo_gpt_t *m = tiny_model(pool, 0);
  colo_lora_t *l;
  colo_lora_config_t bad = {0, 8.0f, COLO_LORA_ALL}, wide = {9, 9.0f, COLO_LORA_QKV};
  ASSERT_EQ_INT(colo_lora_create(m, &bad, pool, &l, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "lora: rank 0 and alpha 8 must be positive, with at least one target");
  ASSERT_EQ_INT(colo_lora_create(m, &wide, pool, &l, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "lora.rank=9 is above model.n_embd=8");
  /* decoding wants the adapters merged */
  colo_lora_config_t ok = {2, 2.0f, COLO_LORA_QKV};
  ASSERT_EQ_INT(colo_lora_create(m, &ok, pool, &l, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_gpt_set_lora(m, l, err, sizeof err), 0);
  float logits[11];
  ASSERT_EQ_INT(colo_gpt_decode(m, 1, 0, logits, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "decoding with LoRA adapters: merge them into the weights first "
                     "(colo_lora_merge: the same model, without the adapters' products)");
  colo_gpt_set_lora(m, NULL, NULL, 0);
  colo_lora_destroy(l);
}

/* A pipeline stage's adapters (blocks [1, 3) of 3): its layers' tensors alone, named by their
 * layers in the whole model, a contiguous run of the whole model's layout (colo_lora_span), and
 * initialised to the whole model's values there; set on a stage model (a later stage: no
 * embedding) */
TEST(lora_stage_holds_its_layers) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_config_t cfg = {
      .vocab_size = 11, .block_size = 5, .n_layer = 3, .n_head = 2, .n_embd = 8};
  colo_gpt_stage_t st = {1, 3, 0, 1, 0};
  colo_gpt_t *whole, *stage;
  char err[256];
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 2, 0, be, pool, &whole, err, sizeof err), 0);
  models[n_models++] = whole;
  ASSERT_EQ_INT(colo_gpt_create_stage(&cfg, 2, 0, be, NULL, &st, pool, &stage, err, sizeof err), 0);
  models[n_models++] = stage;
  colo_lora_config_t lc = {2, 4.0f, COLO_LORA_QKV | COLO_LORA_FCPROJ};
  colo_lora_t *lw, *ls;
  ASSERT_EQ_INT(colo_lora_create(whole, &lc, pool, &lw, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_lora_create(stage, &lc, pool, &ls, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_gpt_set_lora(stage, ls, err, sizeof err), 0);
  colo_lora_init(lw, 5);
  colo_lora_init(ls, 5);
  size_t nw, ns, off, all, off_w, all_w;
  const colo_param_t *tw = colo_lora_table(lw, &nw), *ts = colo_lora_table(ls, &ns);
  colo_lora_span(ls, &off, &all);
  colo_lora_span(lw, &off_w, &all_w);
  /* per layer: c_attn's A [2][8] and B [24][2], mlp.c_proj's A [2][32] and B [8][2] */
  size_t per = 2 * 8 + 24 * 2 + 2 * 32 + 8 * 2;
  ASSERT_EQ_INT((int)nw, 12);
  ASSERT_EQ_INT((int)ns, 8);
  ASSERT_EQ_INT((int)off_w, 0);
  ASSERT_EQ_INT((int)all_w, (int)(3 * per));
  ASSERT_EQ_INT((int)colo_lora_numel(lw), (int)(3 * per));
  ASSERT_EQ_INT((int)off, (int)per);
  ASSERT_EQ_INT((int)all, (int)(3 * per));
  ASSERT_EQ_INT((int)colo_lora_numel(ls), (int)(2 * per));
  for (size_t i = 0; i < ns; i++) {
    ASSERT_EQ_STR(ts[i].name, tw[i + 4].name);
    ASSERT_EQ_INT((int)(ts[i].offset + off), (int)tw[i + 4].offset);
    int layer, target;
    colo_lora_site(ls, i, &layer, &target);
    ASSERT_EQ_INT(layer, 1 + (int)i / 4);
    ASSERT_EQ_INT(target, i % 4 < 2 ? 0 : 3);
  }
  ASSERT_EQ_STR(ts[0].name, "transformer.h.1.attn.c_attn.lora_A.weight");
  float *hw = malloc(all * sizeof *hw), *hs = malloc(colo_lora_numel(ls) * sizeof *hs);
  be->to_host(hw, colo_lora_params(lw), all * sizeof *hw);
  be->to_host(hs, colo_lora_params(ls), colo_lora_numel(ls) * sizeof *hs);
  ASSERT(memcmp(hs, hw + off, colo_lora_numel(ls) * sizeof *hs) == 0);
  float amax = 0.0f;
  for (size_t k = 0; k < colo_lora_numel(ls); k++)
    amax = fabsf(hs[k]) > amax ? fabsf(hs[k]) : amax;
  ASSERT(amax > 0.1f); /* A is not zero */
  free(hw);
  free(hs);
  colo_gpt_set_lora(stage, NULL, NULL, 0);
  colo_lora_destroy(lw);
  colo_lora_destroy(ls);
}

/* Documents (colo_gpt_set_documents): in two windows of 12 tokens, each document (from a
 * document token, 0 here, or a row's start, to the next) gets the logits, and the batch's loss
 * the gradient, that each document gives run alone as a sequence of its own: GPT-2 (its learned
 * positions restarting), Llama (its rotary angles restarting), Llama with grouped-query
 * attention, each with and without recomputation. Without documents the same windows give other
 * logits, so the check can tell. */
TEST(documents_compute_what_each_would_alone) {
  setup();
  colo_pool_t *pool = new_pool(0);
  enum { B = 2, T = 12, V = 11 };
  static const int in[B * T] = {3, 5, 0, 4, 4, 9, 0,  2, 0, 7, 1, 6,
                                0, 8, 8, 3, 2, 0, 10, 5, 1, 0, 4, 2};
  int tg[B * T];
  for (int n = 0; n < B * T; n++)
    tg[n] = (in[n] * 3 + n) % V;
  float got[V];
  double worst_logit = 0, worst_grad = 0;
  char err[256];
  for (int k = 0; k < 6; k++) {
    int arch = k % 3 == 0 ? COLO_ARCH_GPT2 : COLO_ARCH_LLAMA, recompute = k >= 3;
    colo_gpt_config_t cfg = {.vocab_size = V,
                             .block_size = T,
                             .n_layer = 2,
                             .n_head = 4,
                             .n_embd = 16,
                             .arch = arch,
                             .mlp_hidden = arch == COLO_ARCH_LLAMA ? 24 : 0,
                             .n_kv_head = k % 3 == 2 ? 2 : 0};
    colo_gpt_t *m;
    if (colo_gpt_create(&cfg, B, recompute, be, pool, &m, err, sizeof err) < 0)
      FAIL_AT("%s", err);
    models[n_models++] = m;
    colo_gpt_init(m, 5);
    float *p = colo_gpt_params(m);
    colo_rng_t r;
    colo_rng_seed(&r, 17);
    for (size_t i = 0; i < colo_gpt_num_params(m); i++)
      p[i] += 0.3f * colo_rng_normal(&r);
    size_t np = colo_gpt_num_params(m);
    /* the documents alone, without documents turned on: logits, and the gradient of their
     * losses weighted by their tokens' share of the batch */
    float *logits = own(malloc((size_t)B * T * V * sizeof(float)));
    float *galone = own(malloc(np * sizeof(float)));
    colo_gpt_zero_grad(m);
    for (int b = 0; b < B; b++)
      for (int s = 0; s < T;) {
        int e = s + 1;
        while (e < T && in[b * T + e] != 0)
          e++;
        colo_gpt_forward(m, in + b * T + s, NULL, 1, e - s);
        for (int t = s; t < e; t++)
          colo_gpt_read_logits(m, (size_t)(t - s), logits + ((size_t)b * T + t) * V);
        colo_gpt_forward(m, in + b * T + s, tg + b * T + s, 1, e - s);
        colo_gpt_backward(m, (float)(e - s) / (B * T));
        s = e;
      }
    memcpy(galone, colo_gpt_grads(m), np * sizeof(float));
    /* packed, with documents */
    ASSERT_EQ_INT(colo_gpt_set_documents(m, 0, err, sizeof err), 0);
    ASSERT_EQ_INT(colo_gpt_document_token(m), 0);
    colo_gpt_forward(m, in, NULL, B, T);
    for (int n = 0; n < B * T; n++) {
      colo_gpt_read_logits(m, (size_t)n, got);
      for (int v = 0; v < V; v++) {
        double w = logits[(size_t)n * V + v];
        worst_logit = fmax(worst_logit, fabs(got[v] - w) / (1e-3 + fabs(w)));
      }
    }
    colo_gpt_zero_grad(m);
    colo_gpt_forward(m, in, tg, B, T);
    colo_gpt_backward(m, 1.0f);
    const float *g = colo_gpt_grads(m);
    double gmax = 0, dmax = 0;
    for (size_t i = 0; i < np; i++) {
      gmax = fmax(gmax, fabs(galone[i]));
      dmax = fmax(dmax, fabs(g[i] - galone[i]));
    }
    ASSERT(gmax > 1e-3);
    worst_grad = fmax(worst_grad, dmax / gmax);
    /* without documents: token 3 of row 0 (after a document token) sees tokens 0 and 1 too */
    ASSERT_EQ_INT(colo_gpt_set_documents(m, -1, err, sizeof err), 0);
    ASSERT_EQ_INT(colo_gpt_document_token(m), -1);
    colo_gpt_forward(m, in, NULL, B, T);
    colo_gpt_read_logits(m, 3, got);
    double apart = 0;
    for (int v = 0; v < V; v++)
      apart = fmax(apart, fabs(got[v] - logits[3 * V + v]));
    ASSERT(apart > 1e-3);
  }
  printf("  gpt2, llama, llama with 2 key heads for 4, with and without recomputation: logits "
         "within %.2e of each document's alone (relative, floor 1e-3), gradients within %.2e of "
         "the largest\n",
         worst_logit, worst_grad);
  ASSERT(worst_logit < 1e-4 && worst_grad < 1e-5);
  colo_gpt_t *m = models[n_models - 1];
  ASSERT_EQ_INT(colo_gpt_set_documents(m, 11, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "document token 11 is outside the vocabulary of 11");
}

TEST(recompute_is_bit_identical) {
  setup();
  colo_pool_t *pool = new_pool(0);
  for (int arch = -3; arch < 2; arch++) {
    colo_gpt_t *a = tiny_model_arch(pool, 0, arch), *b = tiny_model_arch(pool, 1, arch);
    size_t np = colo_gpt_num_params(a);
    for (int k = 0; k < 2; k++) {
      colo_gpt_t *m = k ? b : a;
      colo_gpt_zero_grad(m);
      colo_gpt_forward(m, IN, TG, 2, 5);
      colo_gpt_backward(m, 1.0f);
    }
    ASSERT(memcmp(colo_gpt_grads(a), colo_gpt_grads(b), np * 4) == 0);
    ASSERT(colo_gpt_forward(a, IN, TG, 2, 5) == colo_gpt_forward(b, IN, TG, 2, 5));
  }
}

/* colo_gpt_forward_train computes the loss's gradient with the loss (crossentropy_fused): in fp32
 * the same loss and gradients, bit for bit, as a forward and a backward */
TEST(fused_loss_gradient_is_bit_identical) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_t *a = tiny_model(pool, 0), *b = tiny_model(pool, 0);
  size_t np = colo_gpt_num_params(a);
  colo_gpt_zero_grad(a);
  colo_gpt_zero_grad(b);
  float la = colo_gpt_forward(a, IN, TG, 2, 5);
  colo_gpt_backward(a, 0.37f);
  float lb = colo_gpt_forward_train(b, IN, TG, 2, 5, 0.37f);
  colo_gpt_backward(b, 0.37f);
  ASSERT(la == lb && isfinite(la));
  ASSERT(memcmp(colo_gpt_grads(a), colo_gpt_grads(b), np * 4) == 0);
  /* and a later plain forward and backward are plain again */
  colo_gpt_zero_grad(a);
  colo_gpt_zero_grad(b);
  colo_gpt_forward(a, IN, TG, 2, 5);
  colo_gpt_backward(a, 1.0f);
  colo_gpt_forward(b, IN, TG, 2, 5);
  colo_gpt_backward(b, 1.0f);
  ASSERT(memcmp(colo_gpt_grads(a), colo_gpt_grads(b), np * 4) == 0);
}

TEST(recompute_uses_less_memory) {
  setup();
  colo_gpt_config_t cfg = {256, 64, 6, 4, 128};
  size_t used[2];
  for (int r = 0; r < 2; r++) {
    colo_pool_t *pool = colo_pool_create("cpu", 0);
    colo_gpt_t *m;
    char err[256];
    ASSERT_EQ_INT(colo_gpt_create(&cfg, 8, r, be, pool, &m, err, sizeof err), 0);
    used[r] = colo_pool_used(pool);
    colo_gpt_destroy(m);
    ASSERT_EQ_INT(colo_pool_used(pool), 0);
    colo_pool_destroy(pool);
  }
  printf("  6 layers: %.1f MiB without recomputation, %.1f MiB with\n", used[0] / 1048576.0,
         used[1] / 1048576.0);
  ASSERT(used[1] * 3 < used[0] * 2); /* a block's activations once instead of six times */
}

/* a stand-in for device memory: counts what is live */
static int fake_live;
static void *fake_alloc(size_t bytes) {
  fake_live++;
  return calloc(1, bytes);
}
static void fake_free(void *p) {
  fake_live--;
  free(p);
}

/* whether fn(arg), run in a child, dies (a signal, or a sanitizer's non-zero exit) */
static int dies(void (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0)
      dup2(devnull, 2); /* the report is expected */
    fn(arg);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
}

static void host_reads(void *p) {
  volatile float x = ((float *)p)[1];
  (void)x;
}

static void entry_gets_host_memory(void *p) {
  float h[4] = {1, 2, 3, 4};
  ((const colo_backend_t *)p)->scale(h, 2.0f, 4);
}

/* the CPU dressed as a GPU (COLO_CUDA_EMULATE=1): its memory is reachable through the table only,
 * and its entries take its memory only */
TEST(emulated_gpu_memory_is_the_tables_only) {
  const colo_backend_t *e = colo_backend_cpu_device(COLO_DTYPE_F32);
  ASSERT(e->device == 1 && e->allocator);
  float *d = e->allocator->alloc(4 * sizeof(float)), h[4] = {1, 2, 3, 4}, back[4];
  ASSERT(d);
  e->from_host(d, h, sizeof h);
  e->scale(d, 2.0f, 4);
  e->to_host(back, d, sizeof back);
  ASSERT(back[0] == 2.0f && back[3] == 8.0f);
  ASSERT(dies(host_reads, d));
  ASSERT(dies(entry_gets_host_memory, (void *)e));
  ASSERT(!dies(host_reads, h)); /* the check itself: host memory reads fine */
  e->allocator->free(d);
}

TEST(pool_over_another_allocator) {
  static const colo_allocator_t fake = {fake_alloc, fake_free};
  colo_pool_t *pool = colo_pool_create_with("gpu0", 1000, &fake);
  float *a = colo_pool_alloc(pool, 400, "a"), *b = colo_pool_alloc(pool, 500, "b");
  ASSERT(a && b && fake_live == 2);
  ASSERT(a[99] == 0.0f); /* zeroed */
  ASSERT_EQ_INT(colo_pool_used(pool), 900);
  ASSERT(colo_pool_alloc(pool, 101, "c") == NULL);
  ASSERT_EQ_STR(colo_pool_error(pool),
                "gpu0 memory pool: c needs 101 bytes but only 100 of 1000 are free");
  colo_pool_free(pool, a);
  ASSERT_EQ_INT(colo_pool_used(pool), 500);
  ASSERT_EQ_INT(colo_pool_peak(pool), 900);
  ASSERT(fake_live == 1);
  int x;
  colo_pool_free(pool, &x); /* not the pool's: ignored, not freed */
  ASSERT_EQ_INT(colo_pool_used(pool), 500);
  colo_pool_destroy(pool); /* frees what is left */
  ASSERT(fake_live == 0);
}

/* a cache in a pool: blocks it gives back oldest first when the pool asks */
typedef struct {
  colo_pool_t *pool;
  void *blocks[8];
  size_t bytes[8], n, asked, want;
  int device_full;
} fake_cache_t;

static size_t fake_reclaim(void *ctx, size_t want, int device_full) {
  fake_cache_t *c = ctx;
  c->asked++, c->want = want, c->device_full = device_full;
  size_t freed = 0, i = 0;
  for (; i < c->n && freed < want; i++) {
    colo_pool_free(c->pool, c->blocks[i]);
    freed += c->bytes[i];
  }
  memmove(c->blocks, c->blocks + i, (c->n - i) * sizeof *c->blocks);
  memmove(c->bytes, c->bytes + i, (c->n - i) * sizeof *c->bytes);
  c->n -= i;
  return freed;
}

static int device_refusals; /* fake_alloc's next refusals */
static void *refusing_alloc(size_t bytes) {
  if (device_refusals > 0) {
    device_refusals--;
    return NULL;
  }
  return fake_alloc(bytes);
}

TEST(pool_reclaim_gives_way_to_allocations) {
  static const colo_allocator_t dev = {refusing_alloc, fake_free};
  colo_pool_t *pool = colo_pool_create_with("gpu0", 1000, &dev);
  fake_cache_t c = {.pool = pool};
  for (int i = 0; i < 3; i++) {
    c.blocks[c.n] = colo_pool_alloc(pool, 200, "kept");
    c.bytes[c.n++] = 200;
  }
  colo_pool_set_reclaim(pool, fake_reclaim, &c, 800);
  /* past the watermark: the cache is asked for the excess (100) and gives one block */
  void *a = colo_pool_alloc(pool, 300, "a");
  ASSERT(a != NULL);
  ASSERT(c.asked == 1 && c.want == 100 && c.device_full == 0 && c.n == 2);
  ASSERT_EQ_INT(colo_pool_used(pool), 700);
  /* the device refuses once: the cache gives way (device_full) and the retry succeeds */
  device_refusals = 1;
  void *b = colo_pool_alloc(pool, 50, "b");
  ASSERT(b != NULL && device_refusals == 0);
  ASSERT(c.asked == 2 && c.want == 50 && c.device_full == 1 && c.n == 1);
  ASSERT_EQ_INT(colo_pool_used(pool), 550);
  /* the last kept block goes; then, with nothing kept, the watermark refuses nothing: only the
   * capacity does */
  void *d = colo_pool_alloc(pool, 600, "d");
  ASSERT(d != NULL);
  ASSERT(c.asked == 3 && c.want == 350 && c.n == 0);
  ASSERT_EQ_INT(colo_pool_used(pool), 950);
  ASSERT(colo_pool_alloc(pool, 100, "e") == NULL);
  ASSERT_EQ_STR(colo_pool_error(pool),
                "gpu0 memory pool: e needs 100 bytes but only 50 of 1000 are free");
  /* off: never asked again */
  size_t asked = c.asked;
  colo_pool_set_reclaim(pool, NULL, NULL, 0);
  colo_pool_free(pool, d);
  ASSERT(colo_pool_alloc(pool, 600, "f") != NULL);
  ASSERT(c.asked == asked);
  colo_pool_destroy(pool);
  ASSERT(fake_live == 0);
}

TEST(pool_capacity_is_enforced) {
  setup();
  colo_pool_t *pool = new_pool(100000);
  colo_gpt_config_t cfg = {256, 64, 4, 4, 128};
  colo_gpt_t *m = NULL;
  char err[256];
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 12, 0, be, pool, &m, err, sizeof err), -2);
  ASSERT(m == NULL);
  ASSERT(strstr(err, "cpu memory pool: parameters needs") != NULL);
  ASSERT_EQ_INT(colo_pool_used(pool), 0); /* nothing leaked into the pool */
}

TEST(gpt2_init_statistics) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_config_t cfg = {256, 64, 8, 4, 128};
  colo_gpt_t *m;
  char err[256];
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 1, 0, be, pool, &m, err, sizeof err), 0);
  models[n_models++] = m;
  colo_gpt_init(m, 1);
  size_t nt;
  const colo_param_t *tab = colo_gpt_params_table(m, &nt);
  for (size_t i = 0; i < nt; i++) {
    const float *x = colo_gpt_params(m) + tab[i].offset;
    double s = 0, s2 = 0;
    for (size_t k = 0; k < tab[i].numel; k++) {
      s += x[k];
      s2 += (double)x[k] * x[k];
    }
    double mean = s / tab[i].numel, sd = sqrt(s2 / tab[i].numel - mean * mean);
    const char *n = tab[i].name;
    if (strstr(n, "ln_") && strstr(n, ".weight"))
      ASSERT(mean == 1.0 && sd == 0.0);
    else if (strstr(n, ".bias"))
      ASSERT(mean == 0.0 && sd == 0.0);
    else {
      double want = strstr(n, "c_proj.weight") ? 0.02 / sqrt(16.0) : 0.02;
      if (fabs(sd - want) > 0.1 * want)
        FAIL_AT("%s: std %.5f, expected %.5f", n, sd, want);
    }
    ASSERT_EQ_INT(tab[i].decay, tab[i].ndim == 2);
  }
  ASSERT_EQ_STR(tab[2].name, "transformer.h.0.ln_1.weight");
  ASSERT_EQ_STR(tab[4].name, "transformer.h.0.attn.c_attn.weight");
  ASSERT_EQ_INT(tab[4].shape[0], 128);
  ASSERT_EQ_INT(tab[4].shape[1], 384);
}

/* colo_rng_normals: the same values on 1 and 3 threads, a prefix the same as the whole's first
 * values, other streams other values, and a standard normal's moments over ~200k values */
TEST(rng_normals_blocks_and_threads) {
  size_t n = 3 * COLO_RNG_BLOCK + 5;
  float *a = own(malloc(n * sizeof *a)), *b = own(malloc(n * sizeof *b)), p[11], o[11];
  omp_set_num_threads(1);
  colo_rng_normals(42, 7, a, n, 1.0f);
  omp_set_num_threads(3);
  colo_rng_normals(42, 7, b, n, 1.0f);
  ASSERT(memcmp(a, b, n * sizeof *a) == 0);
  colo_rng_normals(42, 7, p, 11, 1.0f);
  ASSERT(memcmp(a, p, sizeof p) == 0);
  colo_rng_normals(42, 8, o, 11, 1.0f);
  ASSERT(memcmp(o, p, sizeof p) != 0);
  colo_rng_normals(42, 7, b, n, 0.02f);
  double s = 0, s2 = 0;
  for (size_t k = 0; k < n; k++) {
    ASSERT(isfinite(a[k]) && b[k] == 0.02f * a[k]);
    s += a[k], s2 += (double)a[k] * a[k];
  }
  double mean = s / n, sd = sqrt(s2 / n - mean * mean);
  if (fabs(mean) > 0.01 || fabs(sd - 1.0) > 0.01)
    FAIL_AT("mean %.4f, std %.4f over %zu values", mean, sd, n);
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ASSERT(f != NULL);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  rewind(f);
  char *b = own(malloc(*len ? *len : 1));
  ASSERT(fread(b, 1, *len, f) == *len);
  fclose(f);
  return b;
}

/* A file written in arbitrary puts is the one-shot writer's, byte for byte; too few floats or
 * too many fail and leave no file. */
TEST(safetensors_written_in_pieces) {
  char dir[] = "/tmp/colo-st-XXXXXX", a[64], b[64], err[256];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(a, sizeof a, "%s/a.safetensors", dir);
  snprintf(b, sizeof b, "%s/b.safetensors", dir);
  float x[11];
  for (int i = 0; i < 11; i++)
    x[i] = (float)i * 0.5f - 1.0f;
  colo_st_tensor_t t[2] = {{"w", x, 2, {2, 3}, 6}, {"b@3", x + 6, 1, {5, 0}, 5}};
  ASSERT_EQ_INT(colo_safetensors_write(a, t, 2, err, sizeof err), 0);
  colo_st_writer_t w;
  ASSERT_EQ_INT(colo_st_begin(&w, b, t, 2, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_st_put(&w, x, 4, err, sizeof err), 0); /* across the tensors' border */
  ASSERT_EQ_INT(colo_st_put(&w, x + 4, 7, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_st_finish(&w, err, sizeof err), 0);
  size_t la, lb;
  const char *ba = read_all(a, &la), *bb = read_all(b, &lb);
  ASSERT(la == lb && memcmp(ba, bb, la) == 0);
  colo_st_file_t f;
  ASSERT_EQ_INT(colo_st_open(b, &f, err, sizeof err), 0);
  float back[5];
  int shape[2] = {5, 0};
  ASSERT_EQ_INT(colo_st_get(&f, "b@3", 1, shape, back, 0, err, sizeof err), 0);
  ASSERT(memcmp(back, x + 6, sizeof back) == 0);
  colo_st_close(&f);
  unlink(b);
  ASSERT_EQ_INT(colo_st_begin(&w, b, t, 2, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_st_put(&w, x, 10, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_st_finish(&w, err, sizeof err), COLO_EINVAL);
  ASSERT(strstr(err, "1 floats of its header never written") != NULL);
  ASSERT(access(b, F_OK) != 0);
  ASSERT_EQ_INT(colo_st_begin(&w, b, t, 2, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_st_put(&w, x, 12, err, sizeof err), COLO_EINVAL);
  ASSERT(access(b, F_OK) != 0);
  unlink(a);
  rmdir(dir);
}

/* pieces for the checkpoint test: the ranges read from whole host buffers */
typedef struct {
  const float *src[3];
  const size_t *lo;
  int fail_at; /* a range whose read fails; -1: none */
} test_pieces_t;

static const float *test_read(void *ctx, size_t r, int what, char *err, size_t errlen) {
  test_pieces_t *t = ctx;
  if ((int)r == t->fail_at) {
    snprintf(err, errlen, "planted read failure");
    return NULL;
  }
  return t->src[what] + t->lo[r];
}

/* a load sink that takes the moments' elements [1, n - 2) of each tensor of n >= 4 */
typedef struct {
  float *dst[3];
  int puts;
} part_sink_t;

static void part_want(void *ctx, int what, size_t off, size_t n, size_t *lo, size_t *hi) {
  (void)ctx, (void)off;
  if (what > 0 && n >= 4)
    *lo = 1, *hi = n - 2;
}

static void part_put(void *ctx, int what, size_t off, const float *v, size_t n) {
  part_sink_t *p = ctx;
  memcpy(p->dst[what] + off, v, n * sizeof(float));
  p->puts++;
}

/* Two data-parallel ranks' files of pieces, cut anywhere (tensors split across the files, some
 * whole in one), load back to the same parameters and moments; a failed read fails the file. */
/* a large job's manifest (a file per rank under ZeRO) is read whole: 1000 files take some
 * 150 KiB, past the 64 KiB it was once read into */
TEST(checkpoint_manifest_of_many_files) {
  char dir[] = "/tmp/colo-man-XXXXXX", path[1200], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  FILE *f = fopen(path, "w");
  ASSERT(f != NULL);
  fprintf(f, "{\"format\":\"colo-checkpoint\",\"version\":3,\"step\":40,\"model\":{\"n_layer\":2,"
             "\"n_head\":4,\"n_embd\":128,\"block_size\":64,\"vocab_size\":256},\"mesh\":{\"dp\":"
             "1000,\"tp\":1,\"pp\":1,\"world\":1000,\"zero_stage\":3},\"data\":{\"seed\":7},"
             "\"optimizer\":{\"t\":40},\"loss_scale\":1,\"files\":[");
  for (int r = 0; r < 1000; r++)
    fprintf(f,
            "%s{\"name\":\"rank_%05d.safetensors\",\"bytes\":123456789,\"sha256\":\"%064d\","
            "\"pp\":0,\"tp\":0,\"dp\":%d}",
            r ? "," : "", r, r, r);
  fprintf(f, "]}");
  long size = ftell(f);
  fclose(f);
  ASSERT(size > 128 * 1024);
  colo_ckpt_meta_t meta;
  ASSERT_EQ_INT(colo_ckpt_read_meta(dir, &meta, err, sizeof err), 0);
  ASSERT(meta.step == 40 && meta.world == 1000 && meta.dp == 1000 && meta.zero == 3);
  /* a NUL inside is not a manifest */
  f = fopen(path, "r+");
  ASSERT(f != NULL && fseek(f, 5000, SEEK_SET) == 0 && fputc(0, f) == 0);
  fclose(f);
  ASSERT_EQ_INT(colo_ckpt_read_meta(dir, &meta, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "not a colo checkpoint manifest") != NULL);
  unlink(path);
  rmdir(dir);
}

TEST(checkpoint_pieces_round_trip) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_config_t cfg = {64, 16, 2, 2, 16};
  colo_gpt_t *m, *m2;
  char err[512], root[] = "/tmp/colo-ck-XXXXXX", path[1200];
  ASSERT(mkdtemp(root) != NULL);
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 1, 0, be, pool, &m, err, sizeof err), 0);
  models[n_models++] = m;
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 1, 0, be, pool, &m2, err, sizeof err), 0);
  models[n_models++] = m2;
  colo_gpt_init(m, 7);
  size_t np = colo_gpt_num_params(m);
  float *mo = randv(np, 1.0f), *vo = randv(np, 1.0f);
  for (size_t i = 0; i < np; i++)
    vo[i] = fabsf(vo[i]);
  /* rank 0: the parameters whole and [0, c) of the moments; rank 1: [c, np), c mid-tensor */
  size_t c = np / 2 + 3, lo0[2] = {0, 0}, hi0[2] = {np, c}, lo1[1] = {c}, hi1[1] = {np};
  unsigned char k0[2] = {1, 6}, k1[1] = {6};
  test_pieces_t t0 = {{colo_gpt_params(m), mo, vo}, lo0, -1},
                t1 = {{colo_gpt_params(m), mo, vo}, lo1, -1};
  colo_ckpt_pieces_t p0 = {2, lo0, hi0, k0, test_read, &t0}, p1 = {1, lo1, hi1, k1, test_read, &t1};
  colo_ckpt_meta_t meta = {.step = 5,
                           .seed = 1,
                           .adam_t = 5,
                           .loss_scale = 1.0f,
                           .model = cfg,
                           .dp = 2,
                           .tp = 1,
                           .pp = 1,
                           .world = 2,
                           .zero = 1,
                           .val_loss = NAN};
  ASSERT_EQ_INT(colo_ckpt_begin(root, 5, err, sizeof err), 0);
  t1.fail_at = 0; /* a failed read: the file is not left half-written */
  ASSERT_EQ_INT(colo_ckpt_write_shard(root, 5, m, NULL, NULL, NULL, &p1, 1, err, sizeof err),
                COLO_EIO);
  ASSERT(strstr(err, "planted read failure") != NULL);
  snprintf(path, sizeof path, "%s/.step_00000005.tmp/rank_00001.safetensors", root);
  ASSERT(access(path, F_OK) != 0);
  t1.fail_at = -1;
  ASSERT_EQ_INT(colo_ckpt_write_shard(root, 5, m, NULL, NULL, NULL, &p0, 0, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_ckpt_write_shard(root, 5, m, NULL, NULL, NULL, &p1, 1, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_ckpt_commit(root, &meta, path, sizeof path, err, sizeof err), 0);
  /* a tensor split at c is in slices; one wholly on one side under its own name */
  char file[1300];
  snprintf(file, sizeof file, "%s/rank_00001.safetensors", path);
  colo_st_file_t f;
  ASSERT_EQ_INT(colo_st_open(file, &f, err, sizeof err), 0);
  int slices = 0, wholes = 0;
  for (cJSON *it = f.hdr->child; it; it = it->next)
    if (!strncmp(it->string, "optimizer.exp_avg.", 18))
      strchr(it->string, '@') ? slices++ : wholes++;
  colo_st_close(&f);
  ASSERT_EQ_INT(slices, 1);
  ASSERT(wholes >= 1);
  colo_adamw_t opt = {0};
  opt.m = zeros(np);
  opt.v = zeros(np);
  colo_ckpt_meta_t got;
  ASSERT_EQ_INT(colo_ckpt_load(path, &got, m2, NULL, &opt, err, sizeof err), 0);
  ASSERT(memcmp(colo_gpt_params(m2), colo_gpt_params(m), np * sizeof(float)) == 0);
  ASSERT(memcmp(opt.m, mo, np * sizeof(float)) == 0);
  ASSERT(memcmp(opt.v, vo, np * sizeof(float)) == 0);
  ASSERT_EQ_INT(opt.t, 5);
  ASSERT_EQ_INT(got.zero, 1);
  /* a sink that takes part of each moment tensor gets exactly that part, read from the slices */
  part_sink_t ps = {{zeros(np), zeros(np), zeros(np)}, 0};
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; i < np; i++)
      ps.dst[k][i] = NAN;
  colo_ckpt_sink_t sink = {7, part_put, part_want, &ps};
  ASSERT_EQ_INT(colo_ckpt_load_to(path, &got, m2, &sink, err, sizeof err), 0);
  size_t nt;
  const colo_param_t *tab = colo_gpt_params_table(m2, &nt);
  for (size_t i = 0; i < nt; i++)
    for (size_t e = 0; e < tab[i].numel; e++) {
      size_t at = tab[i].offset + e;
      int in = tab[i].numel < 4 || (e >= 1 && e < tab[i].numel - 2);
      ASSERT(ps.dst[0][at] == colo_gpt_params(m)[at]);
      if (in && (ps.dst[1][at] != mo[at] || ps.dst[2][at] != vo[at]))
        FAIL_AT("%s[%zu]: not loaded", tab[i].name, e);
      if (!in && (!isnan(ps.dst[1][at]) || !isnan(ps.dst[2][at])))
        FAIL_AT("%s[%zu]: loaded though not asked for", tab[i].name, e);
    }
  ASSERT(ps.puts > 0);
  char rm[1400];
  snprintf(rm, sizeof rm, "rm -rf %s", root);
  ASSERT_EQ_INT(system(rm), 0);
}

/* Pruning keeps the `keep` newest, those asked for, and with keep_best the checkpoint whose
 * manifest records the lowest validation loss, the newest of equals; one without a loss is never
 * the best. The loss goes through the manifest and back. */
/* score: train.best_metric's, recorded besides the loss; NaN: none */
static void write_ck_scored(const char *root, colo_gpt_t *m, uint64_t step, float val, int asked,
                            float score) {
  char err[512], path[1200];
  colo_ckpt_meta_t meta = {.step = step,
                           .seed = 1,
                           .adam_t = (int)step,
                           .loss_scale = 1.0f,
                           .model = *colo_gpt_config(m),
                           .dp = 1,
                           .tp = 1,
                           .pp = 1,
                           .world = 1,
                           .asked = asked,
                           .val_loss = val,
                           .has_score = isfinite(score),
                           .score = score,
                           .score_name = "hs.acc_norm"};
  ASSERT_EQ_INT(colo_ckpt_begin(root, step, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_ckpt_write_shard(root, step, m, NULL, NULL, NULL, NULL, 0, err, sizeof err),
                0);
  ASSERT_EQ_INT(colo_ckpt_commit(root, &meta, path, sizeof path, err, sizeof err), 0);
}

static void write_ck(const char *root, colo_gpt_t *m, uint64_t step, float val, int asked) {
  write_ck_scored(root, m, step, val, asked, NAN);
}

static int ck_present(const char *root, uint64_t step) {
  char dir[1200];
  colo_ckpt_step_dir(root, step, dir, sizeof dir);
  return access(dir, F_OK) == 0;
}

TEST(checkpoint_prune_keeps_the_best) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_config_t cfg = {64, 16, 2, 2, 16};
  colo_gpt_t *m;
  char err[512], root[] = "/tmp/colo-ck-XXXXXX";
  ASSERT(mkdtemp(root) != NULL);
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 1, 0, be, pool, &m, err, sizeof err), 0);
  models[n_models++] = m;
  colo_gpt_init(m, 7);
  /* steps 10..60: the loss falls to 2.25 at 30 (and again at 40), then rises; 50 was asked for
   * and carries the lowest loss of all, which does not make it the best */
  const float val[6] = {3.0f, 2.5f, 2.25f, 2.25f, 1.0f, 2.75f};
  for (int i = 0; i < 6; i++)
    write_ck(root, m, 10 * (uint64_t)(i + 1), val[i], i == 4);
  write_ck(root, m, 70, NAN, 0); /* a stop's checkpoint, not evaluated */
  colo_ckpt_meta_t meta;
  char dir[1200];
  colo_ckpt_step_dir(root, 40, dir, sizeof dir);
  ASSERT_EQ_INT(colo_ckpt_read_meta(dir, &meta, err, sizeof err), 0);
  ASSERT(meta.val_loss == 2.25f);
  colo_ckpt_step_dir(root, 70, dir, sizeof dir);
  ASSERT_EQ_INT(colo_ckpt_read_meta(dir, &meta, err, sizeof err), 0);
  ASSERT(isnan(meta.val_loss));
  /* keep 5: 70, 60, 40, 30, 20 and the asked 50, not counted */
  int removed = -1;
  ASSERT_EQ_INT(colo_ckpt_prune(root, 5, 1, &removed), 0);
  ASSERT_EQ_INT(removed, 1);
  ASSERT(!ck_present(root, 10) && ck_present(root, 20));
  ASSERT_EQ_INT(colo_ckpt_prune(root, 2, 1, &removed), 0);
  ASSERT_EQ_INT(removed, 2); /* 20 and 30: 40 is the newest of the two at 2.25 */
  ASSERT(!ck_present(root, 20) && !ck_present(root, 30));
  ASSERT(ck_present(root, 40) && ck_present(root, 50) && ck_present(root, 60) &&
         ck_present(root, 70));
  ASSERT_EQ_INT(colo_ckpt_prune(root, 2, 0, &removed), 0);
  ASSERT_EQ_INT(removed, 1); /* without keep_best 40 goes */
  ASSERT(!ck_present(root, 40) && ck_present(root, 50) && ck_present(root, 60) &&
         ck_present(root, 70));
  char rm[1400];
  snprintf(rm, sizeof rm, "rm -rf %s", root);
  ASSERT_EQ_INT(system(rm), 0);
}

/* Skipping spikes: nothing is judged before half a window; the limit is mean + sigma·(sample
 * sd) of the finite values in the window; either value above its limit (or not finite) skips;
 * the window keeps the newest `window` steps, skipped or not. */
TEST(spike_judge_and_window) {
  colo_spike_t s = {0};
  const int W = 8;
  for (int i = 0; i < 3; i++)
    colo_spike_push(&s, W, 2.0f + 0.1f * (float)i, 1.0f);
  colo_spike_verdict_t v = colo_spike_judge(&s, 1.0f, W, 100.0f, 100.0f);
  ASSERT(!v.skip && isnan(v.loss_limit) && v.history == 3); /* 3 < 4: not judged */
  colo_spike_push(&s, W, 2.3f, NAN); /* a norm that was not finite: left out of its statistics */
  v = colo_spike_judge(&s, 2.0f, W, 2.0f, 1.0f);
  /* losses 2.0 2.1 2.2 2.3: mean 2.15, sd sqrt(0.05/3); norms 1 1 1: sd 0 */
  double sd = sqrt((0.15 * 0.15 + 0.05 * 0.05) * 2 / 3);
  ASSERT(fabsf(v.loss_limit - (float)(2.15 + 2 * sd)) < 1e-6f && v.norm_limit == 1.0f);
  ASSERT(!v.skip && v.history == 4);
  ASSERT(colo_spike_judge(&s, 2.0f, W, v.loss_limit + 1e-3f, 1.0f).skip); /* the loss */
  ASSERT(colo_spike_judge(&s, 2.0f, W, 2.0f, 1.001f).skip);               /* the norm */
  ASSERT(colo_spike_judge(&s, 2.0f, W, NAN, 1.0f).skip);                  /* not finite */
  ASSERT(!colo_spike_judge(&s, 0.0f, W, 1e9f, 1e9f).skip);                /* sigma 0: never */
  for (int i = 0; i < 20; i++)
    colo_spike_push(&s, W, (float)i, (float)i);
  ASSERT(s.n == W && s.loss[0] == 12.0f && s.loss[W - 1] == 19.0f && s.norm[W - 1] == 19.0f);
}

/* Checkpoints that record a score (train.best_metric) are ranked by it, higher better, the newest
 * of equals: by the prune's keep_best and colo_ckpt_find_best alike, whatever their losses say.
 * The score and its metric's name go through the manifest and back. */
TEST(checkpoint_best_by_score) {
  setup();
  colo_pool_t *pool = new_pool(0);
  colo_gpt_config_t cfg = {64, 16, 2, 2, 16};
  colo_gpt_t *m;
  char err[512], root[] = "/tmp/colo-ck-XXXXXX", out[1200], want[1200];
  ASSERT(mkdtemp(root) != NULL);
  ASSERT_EQ_INT(colo_gpt_create(&cfg, 1, 0, be, pool, &m, err, sizeof err), 0);
  models[n_models++] = m;
  colo_gpt_init(m, 7);
  const float val[5] = {3.0f, 2.0f, 2.5f, 2.6f, 2.7f};    /* the lowest loss at 20 */
  const float score[5] = {0.2f, 0.3f, 0.5f, 0.5f, 0.25f}; /* the highest at 30 and 40 */
  for (int i = 0; i < 5; i++)
    write_ck_scored(root, m, 10 * (uint64_t)(i + 1), val[i], 0, score[i]);
  colo_ckpt_meta_t meta;
  colo_ckpt_step_dir(root, 30, want, sizeof want);
  ASSERT_EQ_INT(colo_ckpt_read_meta(want, &meta, err, sizeof err), 0);
  ASSERT(meta.has_score && meta.score == 0.5f && meta.val_loss == 2.5f);
  ASSERT_EQ_STR(meta.score_name, "hs.acc_norm");
  ASSERT(colo_ckpt_rank(&meta) == -0.5f);
  ASSERT_EQ_INT(colo_ckpt_find_best(root, out, sizeof out, NULL, 0), 0);
  colo_ckpt_step_dir(root, 40, want, sizeof want);
  ASSERT_EQ_STR(out, want);
  int removed = -1;
  ASSERT_EQ_INT(colo_ckpt_prune(root, 1, 1, &removed), 0);
  ASSERT_EQ_INT(removed, 3); /* 10, 20 (the lowest loss) and 30: 50 the newest, 40 the best */
  ASSERT(!ck_present(root, 10) && !ck_present(root, 20) && !ck_present(root, 30) &&
         ck_present(root, 40) && ck_present(root, 50));
  char rm[1400];
  snprintf(rm, sizeof rm, "rm -rf %s", root);
  ASSERT_EQ_INT(system(rm), 0);
}

/* A data set of several shards (a pattern): windows come from every file with room for one, in
 * proportion to its windows, and never straddle two files; one file through a pattern samples
 * exactly as its plain path. */
/* llm.c's Llama 3 shards: magic 20240801, version 7, uint32 tokens past 65,535 */
TEST(uint32_shards) {
  char dir[] = "/tmp/colo-u32-XXXXXX", path[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/train.bin", dir);
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC_U32, COLO_SHARD_VERSION_U32, 100};
  uint32_t tok[100];
  for (int i = 0; i < 100; i++)
    tok[i] = 100000u + (uint32_t)i; /* position i holds 100000 + i */
  FILE *f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1);
  fclose(f);
  colo_shard_t s;
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  ASSERT(s.files[0].wide && s.n == 100);
  ASSERT_EQ_INT(colo_shard_windows(&s, 8, err, sizeof err), 0);
  int in[4 * 8], tg[4 * 8];
  colo_sample_batch(&s, 1, 3, 0, 0, 1, 4, 8, in, tg);
  for (int b = 0; b < 4; b++)
    for (int t = 0; t < 8; t++) /* consecutive positions: targets one on */
      ASSERT(in[b * 8 + t] >= 100000 && in[b * 8 + t] < 100099 &&
             tg[b * 8 + t] == in[b * 8 + t] + 1 && in[b * 8 + t] == in[b * 8] + t);
  const char *file;
  size_t at;
  unsigned bad;
  ASSERT_EQ_INT(colo_shard_find_above(&s, 100050, &file, &at, &bad), 1);
  ASSERT(at == 50 && bad == 100050);
  colo_shard_free(&s);
  /* the header's count past the file's uint32 tokens */
  hdr[2] = 101;
  f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1);
  fclose(f);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "truncated: the header says 101 tokens") != NULL);
  hdr[1] = 1; /* GPT-2's version with Llama 3's magic */
  f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1);
  fclose(f);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "shard version 1 is not supported (expected 7: uint32 tokens)") != NULL);
  unlink(path);
  rmdir(dir);
}

/* A preference shard's windows at T = 8: a pair that fits is its sequences from their starts;
 * a long prompt keeps its first token and its end before the whole answer; an answer of T tokens
 * or more keeps its start and the prompt's last token; an answer with no prompt before it keeps
 * the sequence's start. Tokens are 100·sequence + position, answers' positions from 50. */
TEST(preference_pair_windows) {
  char dir[] = "/tmp/colo-pairs-XXXXXX", path[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/pairs.bin", dir);
  enum { T = 8, S = 6 };
  /* (prompt, answer) lengths, the prompt's first token included */
  const int pl[S] = {3, 2, 12, 3, 10, 1}, al[S] = {3, 4, 4, 3, 10, 12};
  uint16_t tok[200];
  uint8_t bits[25] = {0};
  uint64_t starts[S];
  int n = 0;
  for (int q = 0; q < S; q++) {
    starts[q] = (uint64_t)n;
    for (int i = 0; i < pl[q] + al[q]; i++, n++) {
      tok[n] = (uint16_t)(100 * q + (i < pl[q] ? i : 50 + i - pl[q]));
      if (i >= pl[q])
        bits[n / 8] |= (uint8_t)(1u << (n % 8));
    }
  }
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC_PAIRS, COLO_SHARD_VERSION_PAIRS, n, 2, S};
  size_t mb = ((size_t)n + 7) / 8, at = sizeof hdr + 2 * (size_t)n + mb, pad = (8 - at % 8) % 8;
  uint8_t zeros[8] = {0};
  FILE *f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, 2, (size_t)n, f) == (size_t)n &&
         fwrite(bits, 1, mb, f) == mb && fwrite(zeros, 1, pad, f) == pad &&
         fwrite(starts, sizeof starts, 1, f) == 1);
  fclose(f);
  colo_shard_t s;
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  ASSERT(s.pairs && s.n_pairs == 3);
  size_t cut, lost, idx[3];
  colo_pairs_cut(&s, T, &cut, &lost);
  ASSERT_EQ_INT(cut, 3);  /* sequences 2, 4 and 5 */
  ASSERT_EQ_INT(lost, 2); /* 4 and 5: answers of 10 and 12 tokens */
  int in[6 * T], tg[6 * T];
  colo_pairs_eval_batch(&s, 0, 0, 1, 3, T, in, tg, idx);
  ASSERT(idx[0] == 0 && idx[1] == 1 && idx[2] == 2);
  /* the window's tokens (input t, and the last target), by sequence: -1 a pad */
  const int want[S][T + 1] = {
      {0, 1, 2, 50, 51, 52, -1, -1, -1},             /* fits */
      {100, 101, 150, 151, 152, 153, -1, -1, -1},    /* fits */
      {200, 208, 209, 210, 211, 250, 251, 252, 253}, /* the prompt's 1..7 dropped */
      {300, 301, 302, 350, 351, 352, -1, -1, -1},    /* fits */
      {400, 409, 450, 451, 452, 453, 454, 455, 456}, /* the answer's start, its end lost */
      {500, 550, 551, 552, 553, 554, 555, 556, 557}, /* no prompt: the start */
  };
  for (int r = 0; r < S; r++)
    for (int t = 0; t < T; t++) {
      int w = want[r][t], nx = want[r][t + 1];
      ASSERT_EQ_INT(in[r * T + t], w < 0 ? 0 : w);
      ASSERT_EQ_INT(tg[r * T + t], nx >= 0 && nx % 100 >= 50 ? nx : -1); /* answers count */
    }
  colo_shard_free(&s);
  unlink(path);
  rmdir(dir);
}

/* A multiple-choice set made from JSON lines (bytes as tokens): its questions, the endings'
 * characters, each row's window (a sequence over T + 1 tokens keeps its last T + 1), the widths
 * a batch needs, the three scores with ties to the first ending and NaN never picked, and a file
 * whose questions do not add up to its sequences refused */
TEST(choice_windows_and_scores) {
  char dir[] = "/tmp/colo-choices-XXXXXX", in[128], out[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(in, sizeof in, "%s/q.jsonl", dir);
  snprintf(out, sizeof out, "%s/choices.bin", dir);
  FILE *f = fopen(in, "w");
  ASSERT(f != NULL);
  fputs("{\"ctx\": \"ab\", \"endings\": [\"cd\", \"e\"], \"label\": 0}\n"
        "{\"ctx\": \"0123456789\", \"endings\": [\"xy\", \"z\u00e9\"], \"label\": \"B\"}\n",
        f);
  fclose(f);
  colo_choices_fields_t fl = {"ctx", "endings", "label", " ", NULL, NULL};
  colo_choices_stats_t st;
  ASSERT_EQ_INT(colo_choices_prepare(in, out, NULL, &fl, &st, err, sizeof err), 0);
  ASSERT(st.questions == 2 && st.sequences == 4 && st.tokens == 5 + 4 + 13 + 14);
  colo_choices_t c;
  ASSERT_EQ_INT(colo_choices_open(out, &c, err, sizeof err), 0);
  ASSERT(c.n_quest == 2 && c.n_seq == 4 && c.first[1] == 2 && c.first[2] == 4);
  ASSERT(c.f->chars[0] == 3 && c.f->chars[1] == 2 && c.f->chars[2] == 3 && c.f->chars[3] == 3);
  enum { T = 8 };
  int inp[4 * T], tg[4 * T];
  colo_choices_batch(&c, 0, 4, T, inp, tg);
  /* row 0: "ab cd", the ending " cd" counting; row 2: "0123456789 xy" keeps "456789 xy" */
  const char *w0 = "ab cd", *w2 = "456789 xy";
  for (int t = 0; t < T; t++) {
    ASSERT_EQ_INT(inp[t], t + 1 < 5 ? (unsigned char)w0[t] : 0);
    ASSERT_EQ_INT(tg[t], t >= 1 && t + 1 < 5 ? (unsigned char)w0[t + 1] : -1);
    ASSERT_EQ_INT(inp[2 * T + t], (unsigned char)w2[t]);
    ASSERT_EQ_INT(tg[2 * T + t], t >= 5 ? (unsigned char)w2[t + 1] : -1);
  }
  colo_choices_batch(&c, 3, 2, T, inp, tg); /* past the last sequence: padding */
  for (int t = 0; t < T; t++)
    ASSERT(inp[T + t] == 0 && tg[T + t] == -1);
  ASSERT_EQ_INT(colo_choices_width(&c, 0, 2, T), 4);
  ASSERT_EQ_INT(colo_choices_width(&c, 2, 2, T), T);
  /* question 1's endings tie by sum and per character; per token the second (right) one wins */
  float lp[4] = {-1.0f, -2.0f, -5.0f, -5.0f}, cnt[4] = {3, 2, 3, 4};
  colo_choices_score_t sc;
  int pick[2][3];
  colo_choices_score(&c, lp, cnt, &sc, pick);
  ASSERT(sc.questions == 2 && sc.acc == 0.5 && sc.acc_norm == 0.5 && sc.acc_token == 1.0);
  ASSERT(pick[1][0] == 0 && pick[1][1] == 0 && pick[1][2] == 1);
  lp[0] = NAN;
  colo_choices_score(&c, lp, cnt, &sc, pick);
  ASSERT(pick[0][0] == 1 && sc.acc == 0.0);
  colo_choices_close(&c);
  /* question 0 claiming 3 endings: 5 in all of 4 sequences */
  int fd = open(out, O_RDWR);
  size_t n = st.tokens, at = (1024 + 2 * n + (n + 7) / 8 + 7) / 8 * 8 + 8 * 4;
  uint32_t three = 3;
  ASSERT(fd >= 0 && pwrite(fd, &three, 4, (off_t)at) == 4);
  close(fd);
  ASSERT_EQ_INT(colo_choices_open(out, &c, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "question 1 has 2 choices, the right one number 1, after 3 sequences of 4") !=
         NULL);
  unlink(in);
  unlink(out);
  rmdir(dir);
}

/* colo's shards with a loss mask: a target is -1 where its token's bit is clear, and the count of
 * a step's targets that count (every micro-step's, every rank's) is what the batches hold, in
 * either order and in a blend with a shard without a mask */
TEST(masked_shards) {
  char dir[] = "/tmp/colo-mask-XXXXXX", path[128], plain[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/qa.bin", dir);
  snprintf(plain, sizeof plain, "%s/plain.bin", dir);
  enum { NT = 1000 };
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC_MASKED, COLO_SHARD_VERSION_MASKED, NT, 2};
  uint16_t tok[NT];
  uint8_t bits[(NT + 7) / 8] = {0};
  for (int i = 0; i < NT; i++) {
    tok[i] = (uint16_t)(i % 300);
    if (i % 10 >= 6) /* tokens 6..9 of each ten count: their value mod 10 says so */
      bits[i / 8] |= (uint8_t)(1u << (i % 8));
  }
  FILE *f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1 &&
         fwrite(bits, sizeof bits, 1, f) == 1);
  fclose(f);
  ASSERT_EQ_INT(colo_shard_write(plain, tok, NT, err, sizeof err), 0);
  colo_shard_t s;
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  ASSERT(s.masked && s.files[0].mask && !s.files[0].wide && s.n == NT);
  colo_shard_free(&s);
  const char *paths[2] = {path, plain};
  double weights[2] = {3, 1};
  for (int order = COLO_ORDER_RANDOM; order <= COLO_ORDER_SHUFFLE; order++)
    for (int n = 1; n <= 2; n++) {
      colo_blend_t d;
      ASSERT_EQ_INT(colo_blend_open(&d, paths, n == 2 ? weights : NULL, (size_t)n, order, 16, err,
                                    sizeof err),
                    0);
      ASSERT(colo_blend_masked(&d));
      int B = 3, accum = 2, world = 2, in[3 * 16], tg[3 * 16], left = 0;
      for (uint64_t step = 0; step < 5; step++) {
        uint64_t counted = 0;
        for (int micro = 0; micro < accum; micro++)
          for (int r = 0; r < world; r++) {
            colo_blend_batch(&d, 7, step, accum, micro, r, world, B, in, tg);
            for (int i = 0; i < B * 16; i++) {
              int next = in[i] + 1 == 300 ? 0 : in[i] + 1; /* the token after in[i] */
              if (tg[i] >= 0) {
                ASSERT(tg[i] == next);
                counted++;
              } else {
                left++;
              }
            }
          }
        ASSERT_EQ_INT(colo_blend_counted(&d, 7, step, accum, world, B), counted);
      }
      ASSERT(left > 0);
      colo_blend_close(&d);
    }
  /* evaluation's counts: fixed batches and the whole set */
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_shard_windows(&s, 16, err, sizeof err), 0);
  int in[2 * 16], tg[2 * 16];
  uint64_t counted = 0;
  for (int i = 0; i < 3; i++)
    for (int r = 0; r < 2; r++) {
      colo_sample_eval_batch(&s, 5, i, r, 2, 2, 16, in, tg);
      for (int k = 0; k < 2 * 16; k++)
        counted += tg[k] >= 0 && tg[k] % 10 >= 6;
    }
  ASSERT_EQ_INT(colo_eval_counted(&s, 5, 3, 2, 2, 16), counted);
  counted = 0;
  for (size_t w = 0; w < s.blocks[s.n_files]; w++) {
    colo_shard_block(&s, w, 16, in, tg);
    for (int k = 0; k < 16; k++)
      counted += tg[k] >= 0;
  }
  ASSERT_EQ_INT(colo_eval_counted(&s, 5, 0, 2, 2, 16), counted);
  ASSERT(counted > 0 && counted < (uint64_t)s.blocks[s.n_files] * 16);
  colo_shard_free(&s);
  /* cut short: the mask's last byte missing */
  f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(tok, sizeof tok, 1, f) == 1 &&
         fwrite(bits, sizeof bits - 1, 1, f) == 1);
  fclose(f);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "truncated: the header says 1000 tokens and their loss mask") != NULL);
  hdr[3] = 3; /* no such width */
  f = fopen(path, "wb");
  ASSERT(f && fwrite(hdr, sizeof hdr, 1, f) == 1);
  fclose(f);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "a token width of 3 bytes (2 or 4)") != NULL);
  unlink(path);
  unlink(plain);
  rmdir(dir);
}

TEST(shards_by_pattern) {
  char dir[] = "/tmp/colo-sh-XXXXXX", path[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  const size_t len[4] = {3000, 1000, 9, 6000}; /* the third is too short for T = 8 */
  uint16_t *tok = own(malloc(6000 * sizeof *tok));
  for (int f = 0; f < 4; f++) {
    for (size_t i = 0; i < len[f]; i++)
      tok[i] = (uint16_t)(f + 1);
    snprintf(path, sizeof path, "%s/train_%06d.bin", dir, f + 1);
    ASSERT_EQ_INT(colo_shard_write(path, tok, len[f], err, sizeof err), 0);
  }
  colo_shard_t s, one, plain;
  snprintf(path, sizeof path, "%s/train_*.bin", dir);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  ASSERT_EQ_INT(s.n_files, 4);
  ASSERT_EQ_INT(s.n, 10009);
  const int T = 8, B = 16;
  ASSERT_EQ_INT(colo_shard_windows(&s, T, err, sizeof err), 0);
  /* a window is T + 1 tokens: the file of 9 holds one */
  ASSERT_EQ_INT(s.windows[4], (3000 - 8) + (1000 - 8) + 1 + (6000 - 8));
  int in[16 * 8], tg[16 * 8];
  long seen[5] = {0};
  for (int step = 0; step < 500; step++) {
    colo_sample_batch(&s, 1, (uint64_t)step, 0, 0, 1, B, T, in, tg);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) /* one file's tokens: it did not straddle */
        if (in[b * T + t] != in[b * T] || tg[b * T + t] != in[b * T])
          FAIL_AT("window %d of step %d mixes files", b, step);
      seen[in[b * T]]++;
    }
  }
  ASSERT(seen[3] <= 8); /* 1 window in 9977: 0.8 expected of 8000 */
  double total = 8000.0, w[5] = {0, 2992, 992, 1, 5992};
  for (int f = 1; f <= 4; f++)
    if (fabs(seen[f] / total - w[f] / 9977.0) > 0.02)
      FAIL_AT("file %d: %ld of %g windows, expected a share of %g", f, seen[f], total,
              w[f] / 9977.0);
  printf("  windows by file: %ld %ld %ld %ld of 8000 (expected 2399, 795, 1, 4805)\n", seen[1],
         seen[2], seen[3], seen[4]);
  /* one file by pattern and by its path: the same windows */
  snprintf(path, sizeof path, "%s/train_00000[4].bin", dir);
  ASSERT_EQ_INT(colo_shard_load(path, &one, err, sizeof err), 0);
  snprintf(path, sizeof path, "%s/train_000004.bin", dir);
  ASSERT_EQ_INT(colo_shard_load(path, &plain, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_shard_windows(&one, T, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_shard_windows(&plain, T, err, sizeof err), 0);
  int in2[16 * 8], tg2[16 * 8];
  colo_sample_batch(&one, 3, 7, 1, 0, 2, B, T, in, tg);
  colo_sample_batch(&plain, 3, 7, 1, 0, 2, B, T, in2, tg2);
  ASSERT(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
  colo_shard_free(&one);
  colo_shard_free(&plain);
  colo_shard_free(&s);
  /* refusals */
  snprintf(path, sizeof path, "%s/val_*.bin", dir);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), COLO_ENOENT);
  ASSERT(strstr(err, "val_*.bin: no file matches") != NULL);
  snprintf(path, sizeof path, "%s/train_000003.bin", dir);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  /* a window is T + 1 tokens: 9 hold one of 8 (its only one), and none of 9 */
  ASSERT_EQ_INT(colo_shard_windows(&s, T, err, sizeof err), 0);
  ASSERT_EQ_INT((int)s.windows[s.n_files], 1);
  colo_shard_free(&s);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_shard_windows(&s, T + 1, err, sizeof err), COLO_EINVAL);
  ASSERT(strstr(err, "9 tokens are too few for block_size 9") != NULL);
  colo_shard_free(&s);
  snprintf(path, sizeof path, "%s/train_000009.bin", dir);
  FILE *f = fopen(path, "wb");
  ASSERT(f && fwrite("not a shard", 1, 11, f) == 11 && fclose(f) == 0);
  snprintf(path, sizeof path, "%s/train_*.bin", dir);
  ASSERT_EQ_INT(colo_shard_load(path, &s, err, sizeof err), COLO_EPARSE);
  ASSERT(strstr(err, "train_000009.bin: shorter than the 1024-byte shard header") != NULL);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  ASSERT_EQ_INT(system(rm), 0);
}

/* colo_permute is a bijection of [0, n) for any n, and another key gives another order. */
TEST(permutation_is_a_bijection) {
  const uint64_t sizes[] = {1, 2, 3, 5, 100, 4096, 10007};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint64_t n = sizes[i];
    unsigned char *hit = own(calloc(n, 1));
    size_t fixed = 0, same = 0;
    for (uint64_t x = 0; x < n; x++) {
      uint64_t y = colo_permute(x, n, 42, 7);
      if (y >= n || hit[y]++)
        FAIL_AT("n=%llu: %llu goes to %llu, out of range or taken twice", (unsigned long long)n,
                (unsigned long long)x, (unsigned long long)y);
      fixed += y == x;
      same += y == colo_permute(x, n, 42, 8);
    }
    if (n >= 100 && (fixed > n / 10 || same > n / 10))
      FAIL_AT("n=%llu: %zu fixed points, %zu the same under another key", (unsigned long long)n,
              fixed, same);
  }
}

/* a shard whose token i is first + i, so that a window's first token says where it starts */
static void write_counting_shard(const char *path, uint16_t first, size_t n) {
  char err[512];
  uint16_t *tok = own(malloc(n * sizeof *tok));
  for (size_t i = 0; i < n; i++)
    tok[i] = (uint16_t)(first + i);
  ASSERT_EQ_INT(colo_shard_write(path, tok, n, err, sizeof err), 0);
}

/* data.order shuffle: an epoch draws every window at multiples of T once, whatever the layout,
 * and the next epoch draws them all again in another order. */
TEST(shuffle_covers_each_window_once_an_epoch) {
  char dir[] = "/tmp/colo-shuf-XXXXXX", path[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  const int T = 10, B = 5;
  snprintf(path, sizeof path, "%s/train_1.bin", dir);
  write_counting_shard(path, 0, 1001); /* 100 windows: starts 0, 10, ..., 990 */
  snprintf(path, sizeof path, "%s/train_2.bin", dir);
  write_counting_shard(path, 2000, 505); /* 50 windows; the last 4 tokens are left out */
  snprintf(path, sizeof path, "%s/train_*.bin", dir);
  const char *paths[1] = {path};
  colo_blend_t d;
  ASSERT_EQ_INT(colo_blend_open(&d, paths, NULL, 1, COLO_ORDER_SHUFFLE, T, err, sizeof err), 0);
  ASSERT_EQ_INT(d.src[0].blocks[2], 150);
  /* 30 sequences a step (accum 3 × world 2 × B 5): an epoch is 5 steps */
  int in[5 * 10], tg[5 * 10], in2[5 * 10], tg2[5 * 10];
  int order[2][150];
  for (int epoch = 0; epoch < 2; epoch++) {
    int count[3000] = {0}, n = 0;
    for (int step = epoch * 5; step < epoch * 5 + 5; step++)
      for (int micro = 0; micro < 3; micro++)
        for (int rank = 0; rank < 2; rank++) {
          colo_blend_batch(&d, 9, (uint64_t)step, 3, micro, rank, 2, B, in, tg);
          /* the same sequences one rank accumulating 6 micro-steps draws */
          colo_blend_batch(&d, 9, (uint64_t)step, 6, micro * 2 + rank, 0, 1, B, in2, tg2);
          ASSERT(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
          for (int b = 0; b < B; b++) {
            int s0 = in[b * T];
            for (int t = 0; t < T; t++)
              if (in[b * T + t] != s0 + t || tg[b * T + t] != s0 + t + 1)
                FAIL_AT("step %d: the window from %d is not %d consecutive tokens", step, s0, T);
            if (!(s0 < 1000 && s0 % 10 == 0) && !(s0 >= 2000 && s0 < 2500 && s0 % 10 == 0))
              FAIL_AT("step %d: a window starts at token %d, not at a multiple of T", step, s0);
            count[s0]++;
            order[epoch][n++] = s0;
          }
        }
    for (int s0 = 0; s0 < 3000; s0++)
      if (count[s0] > 1)
        FAIL_AT("epoch %d drew the window at %d %d times", epoch, s0, count[s0]);
    ASSERT_EQ_INT(n, 150);
  }
  ASSERT(memcmp(order[0], order[1], sizeof order[0]) != 0);
  printf("  epoch 0 begins with windows at %d %d %d, epoch 1 at %d %d %d\n", order[0][0],
         order[0][1], order[0][2], order[1][0], order[1][1], order[1][2]);
  ASSERT(fabs(colo_blend_epochs(&d, 0, 300) - 2.0) < 1e-12);
  colo_blend_close(&d);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  ASSERT_EQ_INT(system(rm), 0);
}

/* data.sources: each period of COLO_BLEND_SLOTS sequences holds each source's share exactly,
 * a source in shuffled order goes through its own epochs, and one source in random order draws
 * what colo_sample_batch does. */
TEST(blend_draws_in_proportion_of_weights) {
  char dir[] = "/tmp/colo-blend-XXXXXX", a[128], b[128], err[512];
  ASSERT(mkdtemp(dir) != NULL);
  const int T = 8, B = 64;
  snprintf(a, sizeof a, "%s/a.bin", dir);
  write_counting_shard(a, 0, 20001); /* 2,500 windows */
  snprintf(b, sizeof b, "%s/b.bin", dir);
  write_counting_shard(b, 30000, 801); /* 100 windows */
  const char *paths[2] = {a, b};
  const double weights[2] = {3.0, 1.0};
  for (int order = COLO_ORDER_RANDOM; order <= COLO_ORDER_SHUFFLE; order++) {
    colo_blend_t d;
    ASSERT_EQ_INT(colo_blend_open(&d, paths, weights, 2, order, T, err, sizeof err), 0);
    ASSERT_EQ_INT(d.cum[1], 3072);
    ASSERT_EQ_INT(d.cum[2], 4096);
    int in[64 * 8], tg[64 * 8];
    int from_b = 0, count_b[100] = {0};
    for (int step = 0; step < 2 * 4096 / B; step++) { /* two periods, one rank */
      colo_blend_batch(&d, 5, (uint64_t)step, 1, 0, 0, 1, B, in, tg);
      for (int i = 0; i < B; i++)
        if (in[i * T] >= 30000) {
          from_b++;
          count_b[(in[i * T] - 30000) / T] += order == COLO_ORDER_SHUFFLE;
        }
    }
    ASSERT_EQ_INT(from_b, 2 * 1024);
    /* 2,048 of b's sequences are 20 epochs of its 100 windows and 48 of the 21st */
    if (order == COLO_ORDER_SHUFFLE)
      for (int w = 0; w < 100; w++)
        if (count_b[w] != 20 && count_b[w] != 21)
          FAIL_AT("b's window %d drawn %d times in 20.48 epochs", w, count_b[w]);
    colo_blend_close(&d);
  }
  /* one source, random order: colo_sample_batch's windows, as runs before blends drew them */
  colo_blend_t one;
  colo_shard_t s;
  ASSERT_EQ_INT(colo_blend_open(&one, paths, NULL, 1, COLO_ORDER_RANDOM, T, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_shard_load(a, &s, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_shard_windows(&s, T, err, sizeof err), 0);
  int in[64 * 8], tg[64 * 8], in2[64 * 8], tg2[64 * 8];
  colo_blend_batch(&one, 3, 7, 2, 1, 1, 2, B, in, tg);
  colo_sample_batch(&s, 3, 7, 1, 1, 2, B, T, in2, tg2);
  ASSERT(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
  colo_shard_free(&s);
  colo_blend_close(&one);
  /* a weight below one slot of the period */
  const double tiny[2] = {5000.0, 1.0};
  colo_blend_t d;
  ASSERT_EQ_INT(colo_blend_open(&d, paths, tiny, 2, COLO_ORDER_RANDOM, T, err, sizeof err),
                COLO_EINVAL);
  ASSERT(strstr(err, "b.bin: its weight is less than 1/4096 of the weights' sum") != NULL);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  ASSERT_EQ_INT(system(rm), 0);
}
/* ---- NFC (train/nfc.c) ---- */

/* NFC of s, whole: a string tests free */
static char *nfc_whole(const char *s, size_t n, size_t *out_n) {
  char *o;
  size_t used;
  ASSERT_EQ_INT(colo_nfc(s, n, 0, &o, out_n, &used), 0);
  ASSERT_EQ_INT(used, n);
  if (!o) {
    o = malloc(n + 1);
    memcpy(o, s, n);
    *out_n = n;
  }
  return own(o);
}

/* Unicode's own cases (decomposed to composed, singletons, an exclusion that expands, Hangul
 * jamo), text left as it stands (ASCII, NFC already, not UTF-8), and the streaming rule: a text
 * normalized in pieces of any size, each up to where more text cannot change it, is the text
 * normalized whole. */
TEST(nfc_whole_and_in_pieces) {
  static const struct {
    const char *in, *out;
  } cases[] = {{"cafe\xcc\x81", "caf\xc3\xa9"},
               {"\xe2\x84\xab", "\xc3\x85"},                   /* U+212B ANGSTROM SIGN */
               {"\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"},   /* U+0958: excluded, longer */
               {"\xe1\x84\x80\xe1\x85\xa1", "\xea\xb0\x80"},   /* jamo to the syllable */
               {"a\xcc\xa3\xcc\x81", "\xe1\xba\xa1\xcc\x81"}}; /* a, dot below, acute */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n;
    char *o = nfc_whole(cases[i].in, strlen(cases[i].in), &n);
    ASSERT_EQ_INT(n, strlen(cases[i].out));
    ASSERT(memcmp(o, cases[i].out, n) == 0);
  }
  char *o;
  size_t on, used;
  ASSERT_EQ_INT(colo_nfc("plain text", 10, 0, &o, &on, &used), 0);
  ASSERT(o == NULL && used == 10);
  ASSERT_EQ_INT(colo_nfc("caf\xc3\xa9 ok", 9, 0, &o, &on, &used), 0); /* NFC already */
  ASSERT(o == NULL && used == 9);
  ASSERT_EQ_INT(colo_nfc("bad \xff e\xcc\x81", 8, 0, &o, &on, &used), 0); /* not UTF-8 */
  ASSERT(o == NULL && used == 8);
  /* with more to come: "e" may take a mark, a cut character waits */
  ASSERT_EQ_INT(colo_nfc("cafe", 4, 1, &o, &on, &used), 0);
  ASSERT(o == NULL && used == 3);
  ASSERT_EQ_INT(colo_nfc("caf\xc3", 4, 1, &o, &on, &used), 0); /* the f waits with it */
  ASSERT(o == NULL && used == 2);
  ASSERT_EQ_INT(colo_nfc("caf\xc3\xa9", 5, 1, &o, &on, &used), 0); /* a whole é waits alone */
  ASSERT(o == NULL && used == 3);
  /* a long text of decomposed letters in pieces of random sizes */
  colo_rng_t r;
  colo_rng_seed(&r, 5);
  static const char *const parts[] = {"e\xcc\x81", "a\xcc\x88",    "o",
                                      " ",         "\xe1\x84\x80", "\xe1\x85\xa1",
                                      "\xcc\xa3",  "\xe6\x9d\xb1", "\n"};
  size_t n = 0, cap = 1 << 16;
  char *text = own(malloc(cap));
  while (n + 8 < cap) {
    const char *p = parts[colo_rng_u64(&r) % (sizeof parts / sizeof parts[0])];
    memcpy(text + n, p, strlen(p));
    n += strlen(p);
  }
  size_t wn;
  char *whole = nfc_whole(text, n, &wn), *got = own(malloc(3 * n));
  for (int round = 0; round < 20; round++) {
    size_t at = 0, gn = 0, pending = 0; /* text[at, at + pending) read, not yet normalized */
    while (at < n) {
      size_t step = 1 + colo_rng_u64(&r) % (round < 10 ? 16 : 4000);
      pending = at + pending + step > n ? n - at : pending + step;
      int more = at + pending < n;
      ASSERT_EQ_INT(colo_nfc(text + at, pending, more, &o, &on, &used), 0);
      memcpy(got + gn, o ? o : text + at, o ? on : used);
      gn += o ? on : used;
      free(o);
      at += used;
      pending -= used;
    }
    ASSERT_EQ_INT(gn, wn);
    ASSERT(memcmp(got, whole, wn) == 0);
  }
  printf("  %zu bytes of decomposed text in pieces of 1 to 16 and 1 to 4000 bytes, 20 ways: the "
         "whole text's NFC (%zu bytes) each time\n",
         n, wn);
  ASSERT(wn < n);
}

TEST_MAIN()
