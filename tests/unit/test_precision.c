/* Reduced-precision storage: the conversions against exact cases and every 16-bit value; the CPU
 * engine with bf16 and fp16 activations against fp32 (the loss and every gradient within a stated
 * tolerance, and not equal to it: the rounding happens); half the activation memory; fp16's range
 * overflowing where fp32's does not; pipeline boundaries that pass bf16 activations exactly. */
#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "common/error.h"
#include "core/dtype.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/gpt.h"
#include "test.h"

static uint16_t to16(float f, colo_dtype_t t) {
  uint16_t h;
  colo_dtype_from_float(&h, &f, 1, t);
  return h;
}

static float from16(uint16_t h, colo_dtype_t t) {
  float f;
  colo_dtype_to_float(&f, &h, 1, t);
  return f;
}

TEST(bf16_rounds_to_nearest_even) {
  /* 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd): down; 1 + 3·2^-8 halfway between
   * 1 + 2^-7 (odd) and 1 + 2^-6 (even): up */
  static const struct {
    float f;
    uint16_t want;
  } cases[] = {
      {1.0f, 0x3f80},
      {1.0f + 0x1p-8f, 0x3f80},
      {1.0f + 3 * 0x1p-8f, 0x3f82},
      {1.0f + 0x1p-8f + 0x1p-20f, 0x3f81},
      {-2.0f, 0xc000},
      {-0.0f, 0x8000},
      {INFINITY, 0x7f80},
      {-INFINITY, 0xff80},
      {3.4028235e38f, 0x7f80}, /* FLT_MAX rounds up to inf */
      {0x1p-130f, 0x0008},     /* a subnormal (2^-126 · 2^-4), kept */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = to16(cases[i].f, COLO_DTYPE_BF16);
    if (got != cases[i].want)
      FAIL_AT("bf16(%a) = 0x%04x, expected 0x%04x", (double)cases[i].f, got, cases[i].want);
    ASSERT_EQ_INT(got, colo_bf16_from_float(cases[i].f));
  }
  ASSERT(isnan(from16(to16(NAN, COLO_DTYPE_BF16), COLO_DTYPE_BF16)));
  /* a NaN whose payload sits in the low bits only must not round to inf */
  union {
    uint32_t u;
    float f;
  } snan = {0x7f800001u};
  ASSERT(isnan(from16(to16(snan.f, COLO_DTYPE_BF16), COLO_DTYPE_BF16)));
  /* every bf16 value widens and narrows back to itself */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = from16((uint16_t)h, COLO_DTYPE_BF16);
    if (isnan(f))
      continue;
    if (to16(f, COLO_DTYPE_BF16) != h)
      FAIL_AT("bf16 0x%04x → %a → 0x%04x", h, (double)f, to16(f, COLO_DTYPE_BF16));
  }
}

TEST(fp16_range_and_rounding) {
  static const struct {
    float f;
    uint16_t want;
  } cases[] = {
      {1.0f, 0x3c00},     {1.0f + 0x1p-11f, 0x3c00}, /* halfway: to even */
      {65504.0f, 0x7bff}, {65519.0f, 0x7bff},        /* below the halfway point to 65536 */
      {65520.0f, 0x7c00},                            /* halfway: to even, which is inf */
      {1e6f, 0x7c00},     {0x1p-24f, 0x0001},        /* the smallest subnormal */
      {0x1p-26f, 0x0000},                            /* below half of it: zero */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = to16(cases[i].f, COLO_DTYPE_F16);
    if (got != cases[i].want)
      FAIL_AT("fp16(%a) = 0x%04x, expected 0x%04x", (double)cases[i].f, got, cases[i].want);
  }
  for (uint32_t h = 0; h < 65536; h++) {
    float f = from16((uint16_t)h, COLO_DTYPE_F16);
    if (!isnan(f) && to16(f, COLO_DTYPE_F16) != h)
      FAIL_AT("fp16 0x%04x → %a → 0x%04x", h, (double)f, to16(f, COLO_DTYPE_F16));
  }
  ASSERT_EQ_INT(colo_dtype_size(COLO_DTYPE_F16), 2);
  ASSERT_EQ_STR(colo_dtype_name(COLO_DTYPE_BF16), "bf16");
}

/* ---- the model ---- */

enum { V = 64, T = 16, L = 2, NH = 2, C = 32, B = 4, N = B * T };

static int in_[N], tg_[N];

static colo_gpt_t *model(const colo_backend_t *be, colo_pool_t *pool, int recompute) {
  colo_gpt_config_t cfg = {V, T, L, NH, C};
  colo_gpt_t *m;
  char err[256];
  if (colo_gpt_create(&cfg, B, recompute, be, pool, &m, err, sizeof err) < 0)
    FAIL_AT("%s", err);
  colo_gpt_init(m, 5);
  colo_rng_t r;
  colo_rng_seed(&r, 17);
  for (int i = 0; i < N; i++) {
    in_[i] = (int)(colo_rng_u64(&r) % V);
    tg_[i] = (int)(colo_rng_u64(&r) % V);
  }
  return m;
}

static double rel_norm(const float *a, const float *ref, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
    r += (double)ref[i] * ref[i];
  }
  return sqrt(d / r);
}

/* bf16 and fp16 activations against fp32, from the same weights: the loss and the gradients
 * close (the tolerances: a few units in the last place of a 16-bit store), but not equal */
TEST(lowp_model_tracks_fp32) {
  static const struct {
    colo_dtype_t t;
    double loss_tol, grad_tol, logit_tol;
  } modes[] = {{COLO_DTYPE_BF16, 1e-3, 2e-2, 1e-2}, {COLO_DTYPE_F16, 2e-4, 5e-3, 2e-3}};
  colo_pool_t *pool = colo_pool_create("cpu", 0);
  colo_gpt_t *ref = model(colo_backend_cpu(), pool, 0);
  colo_gpt_zero_grad(ref);
  float l32 = colo_gpt_forward(ref, in_, tg_, B, T);
  colo_gpt_backward(ref, 1.0f);
  size_t np = colo_gpt_num_params(ref);
  float row32[V], row16[V];
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    for (int rc = 0; rc < 2; rc++) {
      const colo_backend_t *be = colo_backend_cpu_dtype(modes[k].t);
      ASSERT_EQ_INT(be->act_dtype, modes[k].t);
      ASSERT_EQ_INT(be->act_size, 2);
      colo_gpt_t *m = model(be, pool, rc);
      colo_gpt_zero_grad(m);
      float l = colo_gpt_forward(m, in_, tg_, B, T);
      colo_gpt_backward(m, 1.0f);
      double lrel = fabs((double)l - l32) / l32;
      double grel = rel_norm(colo_gpt_grads(m), colo_gpt_grads(ref), np);
      printf("  %s%s: loss %.7f (fp32 %.7f, rel %.2e), gradients rel %.2e\n",
             colo_dtype_name(modes[k].t), rc ? " with recomputation" : "", (double)l, (double)l32,
             lrel, grel);
      ASSERT(isfinite(l) && lrel <= modes[k].loss_tol && grel <= modes[k].grad_tol);
      ASSERT(l != l32 && grel > 0); /* the activations really were rounded */
      /* the logits, read back to fp32 */
      colo_gpt_forward(m, in_, NULL, B, T);
      colo_gpt_forward(ref, in_, NULL, B, T);
      colo_gpt_read_logits(m, 37, row16);
      colo_gpt_read_logits(ref, 37, row32);
      double lg = rel_norm(row16, row32, V);
      printf("    logits of row 37 read back: rel %.2e\n", lg);
      ASSERT(lg > 0 && lg <= modes[k].logit_tol);
      colo_gpt_destroy(m);
    }
  }
  colo_gpt_destroy(ref);
  colo_pool_destroy(pool);
}

/* recomputation with 16-bit activations gives the same gradients, bit for bit */
TEST(lowp_recompute_is_bit_identical) {
  colo_pool_t *pool = colo_pool_create("cpu", 0);
  const colo_backend_t *be = colo_backend_cpu_dtype(COLO_DTYPE_BF16);
  colo_gpt_t *a = model(be, pool, 0), *b = model(be, pool, 1);
  for (int k = 0; k < 2; k++) {
    colo_gpt_t *m = k ? b : a;
    colo_gpt_zero_grad(m);
    colo_gpt_forward(m, in_, tg_, B, T);
    colo_gpt_backward(m, 1.0f);
  }
  ASSERT(memcmp(colo_gpt_grads(a), colo_gpt_grads(b), colo_gpt_num_params(a) * 4) == 0);
  colo_gpt_destroy(a);
  colo_gpt_destroy(b);
  colo_pool_destroy(pool);
}

/* The matrices' compute copies are made by the forward and read by the backward: a step makes
 * each once (a recomputing model twice, its recomputed forward making its one set again) */
static int to_act_calls;
static void (*real_to_act)(void *dst, const float *src, size_t n);
static void counting_to_act(void *dst, const float *src, size_t n) {
  to_act_calls++;
  real_to_act(dst, src, n);
}

TEST(compute_copies_are_made_by_the_forward_only) {
  colo_backend_t be = *colo_backend_cpu_dtype(COLO_DTYPE_BF16);
  real_to_act = be.to_act;
  be.to_act = counting_to_act;
  colo_pool_t *pool = colo_pool_create("cpu", 0);
  for (int rc = 0; rc < 2; rc++) {
    colo_gpt_t *m = model(&be, pool, rc);
    colo_gpt_zero_grad(m);
    to_act_calls = 0;
    colo_gpt_forward(m, in_, tg_, B, T);
    int fwd = to_act_calls;
    colo_gpt_backward(m, 1.0f);
    int bwd = to_act_calls - fwd;
    printf("  %s: %d compute copies in the forward, %d in the backward\n",
           rc ? "recomputing" : "keeping activations", fwd, bwd);
    ASSERT_EQ_INT(fwd, 4 * L + 1); /* each block's four matrices, and the head's embedding */
    ASSERT_EQ_INT(bwd, rc ? 4 * L : 0);
    colo_gpt_destroy(m);
  }
  colo_pool_destroy(pool);
}

TEST(lowp_halves_activation_memory) {
  colo_gpt_config_t cfg = {256, 64, 4, 4, 128};
  size_t act[2];
  for (int k = 0; k < 2; k++) {
    colo_pool_t *pool = colo_pool_create("cpu", 0);
    colo_gpt_t *m;
    char err[256];
    const colo_backend_t *be = k ? colo_backend_cpu_dtype(COLO_DTYPE_BF16) : colo_backend_cpu();
    ASSERT_EQ_INT(colo_gpt_create(&cfg, 8, 0, be, pool, &m, err, sizeof err), 0);
    act[k] = colo_gpt_activation_bytes(m);
    colo_gpt_destroy(m);
    colo_pool_destroy(pool);
  }
  /* bf16 also holds the matrices' compute copies: every block's four (12C² elements) and the
   * head's token embedding (VC), 2 bytes each */
  size_t copies =
      ((size_t)cfg.n_layer * 12 * cfg.n_embd * cfg.n_embd + (size_t)cfg.vocab_size * cfg.n_embd) *
      2;
  printf("  activations: fp32 %.2f MiB, bf16 %.2f MiB of which %.2f MiB compute copies (ratio "
         "without them %.3f; LayerNorm statistics and losses stay fp32)\n",
         act[0] / 1048576.0, act[1] / 1048576.0, copies / 1048576.0,
         (double)(act[1] - copies) / act[0]);
  ASSERT(act[1] > copies && (act[1] - copies) * 100 < act[0] * 55);
}

/* Embeddings of 1e5 give residual sums beyond fp16's 65504: the loss or the gradients stop being
 * finite, which is what dynamic loss scaling's overflow check sees; fp32 and bf16 stay finite. */
TEST(fp16_overflows_where_fp32_does_not) {
  colo_pool_t *pool = colo_pool_create("cpu", 0);
  float loss[3];
  double norm[3];
  colo_dtype_t types[3] = {COLO_DTYPE_F32, COLO_DTYPE_BF16, COLO_DTYPE_F16};
  for (int k = 0; k < 3; k++) {
    const colo_backend_t *be = colo_backend_cpu_dtype(types[k]);
    colo_gpt_t *m = model(be, pool, 0);
    size_t nt;
    const colo_param_t *tab = colo_gpt_params_table(m, &nt);
    float *wpe = colo_gpt_params(m) + tab[1].offset;
    for (size_t i = 0; i < tab[1].numel; i++)
      wpe[i] *= 5e6f; /* N(0, 0.02) · 5e6: about 1e5 */
    colo_gpt_zero_grad(m);
    loss[k] = colo_gpt_forward(m, in_, tg_, B, T);
    colo_gpt_backward(m, 1.0f);
    norm[k] = be->sumsq(colo_gpt_grads(m), colo_gpt_num_params(m));
    printf("  %s: loss %g, squared gradient norm %g\n", colo_dtype_name(types[k]), (double)loss[k],
           norm[k]);
    colo_gpt_destroy(m);
  }
  ASSERT(isfinite(loss[0]) && isfinite(norm[0]));
  ASSERT(isfinite(loss[1]) && isfinite(norm[1]));
  ASSERT(!isfinite(loss[2]) || !isfinite(norm[2]));
  colo_pool_destroy(pool);
}

/* Two pipeline stages in bf16, chained by hand (stage 0's fp32 output is stage 1's input, as the
 * pipeline's send and recv pass it), against the whole model: the same loss and gradients, bit
 * for bit, since a bf16 value widens to fp32 and back exactly. */
TEST(lowp_pipeline_boundary_is_exact) {
  colo_gpt_config_t cfg = {V, T, L, NH, C};
  const colo_backend_t *be = colo_backend_cpu_dtype(COLO_DTYPE_BF16);
  colo_gpt_stage_t st[2] = {{0, 1, 1, 0}, {1, 2, 0, 1}};
  colo_pool_t *pool = colo_pool_create("cpu", 0);
  colo_gpt_t *whole = model(be, pool, 0), *s[2];
  char err[256];
  for (int k = 0; k < 2; k++) {
    if (colo_gpt_create_stage(&cfg, B, 0, be, NULL, &st[k], pool, &s[k], err, sizeof err) < 0)
      FAIL_AT("%s", err);
    colo_gpt_init(s[k], 5);
    colo_gpt_zero_grad(s[k]);
  }
  colo_gpt_zero_grad(whole);
  float lw = colo_gpt_forward(whole, in_, tg_, B, T);
  colo_gpt_backward(whole, 1.0f);
  colo_gpt_forward_stage(s[0], in_, NULL, NULL, B, T);
  const float *x = colo_gpt_stage_output(s[0]);
  for (size_t i = 0; i < (size_t)N * C; i++) /* bf16 values, widened */
    ASSERT(colo_bf16_to_float(colo_bf16_from_float(x[i])) == x[i]);
  float ls = colo_gpt_forward_stage(s[1], in_, x, tg_, B, T);
  printf("  whole model %.7f, two stages %.7f\n", (double)lw, (double)ls);
  ASSERT(ls == lw);
  colo_gpt_backward_stage(s[1], 1.0f, NULL);
  colo_gpt_backward_stage(s[0], 1.0f, colo_gpt_stage_input_grad(s[1]));
  /* block 1's gradients sit on stage 1, block 0's on stage 0, as in the whole model's table */
  size_t nw, n0, n1;
  const colo_param_t *tw = colo_gpt_params_table(whole, &nw);
  const colo_param_t *t0 = colo_gpt_params_table(s[0], &n0), *t1 = colo_gpt_params_table(s[1], &n1);
  size_t compared = 0;
  for (size_t i = 0; i < nw; i++)
    for (int k = 0; k < 2; k++) {
      const colo_param_t *tk = k ? t1 : t0;
      size_t nk = k ? n1 : n0;
      for (size_t j = 0; j < nk; j++)
        if (!strcmp(tk[j].name, tw[i].name) && strcmp(tw[i].name, "transformer.wte.weight")) {
          ASSERT(memcmp(colo_gpt_grads(s[k]) + tk[j].offset, colo_gpt_grads(whole) + tw[i].offset,
                        tw[i].numel * sizeof(float)) == 0);
          compared++;
        }
    }
  ASSERT_EQ_INT(compared, nw - 1); /* all but the tied embedding, whose halves are summed */
  colo_gpt_destroy(s[0]);
  colo_gpt_destroy(s[1]);
  colo_gpt_destroy(whole);
  colo_pool_destroy(pool);
}

TEST_MAIN()
