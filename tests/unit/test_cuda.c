/* The CUDA backend against the CPU backend: every entry of the operation table on fresh random
 * inputs, forward and backward, then the whole model's loss and gradients, then the device pool.
 *
 * Tolerances are relative errors against the fp32 CPU result, max|gpu − cpu| / max|cpu| over
 * each output: 1e-5 for fp32, and for the products again on tensor cores 3e-4 (TF32), 3e-3
 * (fp16) and 1e-2 (bf16). A NaN or inf in a GPU output never
 * passes. Outputs that accumulate (every *_bwd) start from the same random values on both sides.
 *
 * It needs a GPU: without one (CI), or in a build without the CUDA backend, it prints one line
 * saying why and exits 77, which ctest reports as skipped. It runs sequentially in one process
 * (no fork per test: a CUDA context does not survive fork).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/gpt.h"

static const colo_backend_t *cpu, *gpu;
static colo_pool_t *dpool; /* device memory for the test's tensors */
static colo_rng_t rng;
static int failures, checks;

static float *randv(size_t n, float scale) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = scale * colo_rng_normal(&rng);
  return x;
}

static float *copyv(const float *x, size_t n) {
  float *y = malloc(n * sizeof *y);
  memcpy(y, x, n * sizeof *y);
  return y;
}

/* a device copy of host data (n elements of size sz) */
static void *up(const void *h, size_t n, size_t sz) {
  void *d = colo_pool_alloc(dpool, n * sz, "test tensor");
  if (!d) {
    fprintf(stderr, "FAIL: %s\n", colo_pool_error(dpool));
    exit(1);
  }
  gpu->from_host(d, h, n * sz);
  return d;
}

static float *upf(const float *h, size_t n) {
  return up(h, n, sizeof(float));
}

/* compares the device tensor d with the CPU result ref; frees d */
static void check(const char *what, float *d, const float *ref, size_t n, double tol) {
  float *h = malloc(n * sizeof *h);
  gpu->to_host(h, d, n * sizeof *h);
  colo_pool_free(dpool, d);
  double maxref = 0.0, maxdiff = 0.0;
  int finite = 1;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(h[i]))
      finite = 0;
    double r = fabs((double)ref[i]), e = fabs((double)h[i] - (double)ref[i]);
    maxref = r > maxref ? r : maxref;
    maxdiff = e > maxdiff ? e : maxdiff;
  }
  double rel = maxdiff / (maxref > 0.0 ? maxref : 1.0);
  int ok = finite && rel <= tol;
  checks++;
  failures += !ok;
  printf("%s %-44s rel %.2e (tolerance %.0e)%s\n", ok ? "PASS" : "FAIL", what, rel, tol,
         finite ? "" : " NOT FINITE");
  free(h);
}

enum { B = 4, T = 64, C = 96, NH = 4, V = 1000, N = B * T };

static void test_matmul(double tol, const char *tag) {
  char name[64];
  int OC = 3 * C;
  float *inp = randv((size_t)N * C, 1.0f), *w = randv((size_t)C * OC, 0.1f),
        *b = randv((size_t)OC, 0.1f);
  float *out = malloc((size_t)N * OC * sizeof *out);
  float *d_inp = upf(inp, (size_t)N * C), *d_w = upf(w, (size_t)C * OC), *d_b = upf(b, OC);
  float *d_out = upf(out, (size_t)N * OC);
  cpu->matmul_fwd(out, inp, w, b, N, C, OC);
  gpu->matmul_fwd(d_out, d_inp, d_w, d_b, N, C, OC);
  snprintf(name, sizeof name, "matmul_fwd with bias%s", tag);
  check(name, d_out, out, (size_t)N * OC, tol);
  d_out = upf(out, (size_t)N * OC);
  cpu->matmul_fwd(out, inp, w, NULL, N, C, OC);
  gpu->matmul_fwd(d_out, d_inp, d_w, NULL, N, C, OC);
  snprintf(name, sizeof name, "matmul_fwd without bias%s", tag);
  check(name, d_out, out, (size_t)N * OC, tol);
  /* backward, accumulating onto random values */
  float *dout = randv((size_t)N * OC, 1.0f), *dinp = randv((size_t)N * C, 1.0f),
        *dw = randv((size_t)C * OC, 1.0f), *db = randv(OC, 1.0f);
  float *d_dout = upf(dout, (size_t)N * OC), *d_dinp = upf(dinp, (size_t)N * C),
        *d_dw = upf(dw, (size_t)C * OC), *d_db = upf(db, OC);
  cpu->matmul_bwd(dinp, dw, db, dout, inp, w, N, C, OC);
  gpu->matmul_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
  snprintf(name, sizeof name, "matmul_bwd dinp%s", tag);
  check(name, d_dinp, dinp, (size_t)N * C, tol);
  snprintf(name, sizeof name, "matmul_bwd dw%s", tag);
  check(name, d_dw, dw, (size_t)C * OC, tol);
  snprintf(name, sizeof name, "matmul_bwd db%s", tag);
  check(name, d_db, db, OC, 1e-5);
  /* the tied head */
  float *wte = randv((size_t)V * C, 0.1f), *logits = malloc((size_t)N * V * sizeof(float));
  float *d_wte = upf(wte, (size_t)V * C), *d_logits = upf(logits, (size_t)N * V);
  cpu->lmhead_fwd(logits, inp, wte, N, C, V);
  gpu->lmhead_fwd(d_logits, d_inp, d_wte, N, C, V);
  snprintf(name, sizeof name, "lmhead_fwd%s", tag);
  check(name, d_logits, logits, (size_t)N * V, tol);
  float *dl = randv((size_t)N * V, 0.01f), *dwte = randv((size_t)V * C, 1.0f);
  float *d_dl = upf(dl, (size_t)N * V), *d_dwte = upf(dwte, (size_t)V * C);
  d_dinp = upf(dinp, (size_t)N * C);
  cpu->lmhead_bwd(dinp, dwte, dl, inp, wte, N, C, V);
  gpu->lmhead_bwd(d_dinp, d_dwte, d_dl, d_inp, d_wte, N, C, V);
  snprintf(name, sizeof name, "lmhead_bwd dinp%s", tag);
  check(name, d_dinp, dinp, (size_t)N * C, tol);
  snprintf(name, sizeof name, "lmhead_bwd dwte%s", tag);
  check(name, d_dwte, dwte, (size_t)V * C, tol);
  float *frees[] = {d_inp, d_w, d_b, d_dout, d_wte, d_dl};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
    colo_pool_free(dpool, frees[i]);
  free(inp), free(w), free(b), free(out), free(dout), free(dinp), free(dw), free(db);
  free(wte), free(logits), free(dl), free(dwte);
}

static void test_encoder(void) {
  int tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = (int)(colo_rng_u64(&rng) % V);
  tok[1] = tok[0];        /* a repeated token: its rows add up */
  int v0 = 100, v1 = 700; /* a vocab-parallel shard */
  float *wte = randv((size_t)(v1 - v0) * C, 0.1f), *wpe = randv((size_t)T * C, 0.1f);
  float *out = malloc((size_t)N * C * sizeof *out);
  int *d_tok = up(tok, N, sizeof(int));
  float *d_wte = upf(wte, (size_t)(v1 - v0) * C), *d_wpe = upf(wpe, (size_t)T * C),
        *d_out = upf(out, (size_t)N * C);
  cpu->encoder_fwd(out, tok, wte, wpe, B, T, C, v0, v1);
  gpu->encoder_fwd(d_out, d_tok, d_wte, d_wpe, B, T, C, v0, v1);
  check("encoder_fwd (a shard, with positions)", d_out, out, (size_t)N * C, 0.0);
  d_out = upf(out, (size_t)N * C);
  cpu->encoder_fwd(out, tok, wte, NULL, B, T, C, v0, v1);
  gpu->encoder_fwd(d_out, d_tok, d_wte, NULL, B, T, C, v0, v1);
  check("encoder_fwd (without positions)", d_out, out, (size_t)N * C, 0.0);
  float *dout = randv((size_t)N * C, 1.0f), *dwte = randv((size_t)(v1 - v0) * C, 1.0f),
        *dwpe = randv((size_t)T * C, 1.0f);
  float *d_dout = upf(dout, (size_t)N * C), *d_dwte = upf(dwte, (size_t)(v1 - v0) * C),
        *d_dwpe = upf(dwpe, (size_t)T * C);
  cpu->encoder_bwd(dwte, dwpe, dout, tok, B, T, C, v0, v1);
  gpu->encoder_bwd(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, v0, v1);
  /* the same additions in the same order: exact */
  check("encoder_bwd dwte (same order: exact)", d_dwte, dwte, (size_t)(v1 - v0) * C, 0.0);
  check("encoder_bwd dwpe (same order: exact)", d_dwpe, dwpe, (size_t)T * C, 0.0);
  colo_pool_free(dpool, d_tok), colo_pool_free(dpool, d_wte), colo_pool_free(dpool, d_wpe);
  colo_pool_free(dpool, d_dout);
  free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
}

static void test_layernorm_gelu(void) {
  float *inp = randv((size_t)N * C, 2.0f), *w = randv(C, 1.0f), *b = randv(C, 1.0f);
  for (size_t i = 0; i < (size_t)N * C; i++)
    inp[i] += 3.0f; /* a mean far from 0 */
  float *out = malloc((size_t)N * C * sizeof *out), *mean = malloc(N * sizeof *mean),
        *rstd = malloc(N * sizeof *rstd);
  float *d_inp = upf(inp, (size_t)N * C), *d_w = upf(w, C), *d_b = upf(b, C),
        *d_out = upf(inp, (size_t)N * C), *d_mean = upf(inp, N), *d_rstd = upf(inp, N);
  cpu->layernorm_fwd(out, mean, rstd, inp, w, b, N, C);
  gpu->layernorm_fwd(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
  check("layernorm_fwd out", d_out, out, (size_t)N * C, 1e-5);
  check("layernorm_fwd mean", d_mean, mean, N, 1e-5);
  check("layernorm_fwd rstd", d_rstd, rstd, N, 1e-5);
  d_mean = upf(mean, N); /* the backward uses the CPU's saved statistics on both sides */
  d_rstd = upf(rstd, N);
  float *dout = randv((size_t)N * C, 1.0f), *dinp = randv((size_t)N * C, 1.0f),
        *dw = randv(C, 1.0f), *db = randv(C, 1.0f);
  float *d_dout = upf(dout, (size_t)N * C), *d_dinp = upf(dinp, (size_t)N * C), *d_dw = upf(dw, C),
        *d_db = upf(db, C);
  cpu->layernorm_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  gpu->layernorm_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
  check("layernorm_bwd dinp", d_dinp, dinp, (size_t)N * C, 1e-5);
  check("layernorm_bwd dw", d_dw, dw, C, 1e-5);
  check("layernorm_bwd db", d_db, db, C, 1e-5);
  /* GELU: the CPU's tanh is 1 - 2/(e^2u + 1), the GPU's tanhf: a few ulps apart */
  size_t n = (size_t)N * C;
  float *x = randv(n, 3.0f), *y = malloc(n * sizeof *y);
  float *d_x = upf(x, n), *d_y = upf(x, n);
  cpu->gelu_fwd(y, x, n);
  gpu->gelu_fwd(d_y, d_x, n);
  check("gelu_fwd", d_y, y, n, 1e-5);
  float *dy = randv(n, 1.0f), *dx = randv(n, 1.0f);
  float *d_dy = upf(dy, n), *d_dx = upf(dx, n);
  cpu->gelu_bwd(dx, x, dy, n);
  gpu->gelu_bwd(d_dx, d_x, d_dy, n);
  check("gelu_bwd", d_dx, dx, n, 1e-5);
  float *d_a = upf(x, n), *d_s = upf(y, n), *sum = malloc(n * sizeof *sum);
  cpu->add(sum, x, y, n);
  gpu->add(d_s, d_a, d_s, n); /* out may alias an input, as the model's LayerNorm sums do */
  check("add", d_s, sum, n, 0.0);
  cpu->scale(sum, 0.37f, n);
  d_s = upf(x, n);
  gpu->add(d_s, d_a, upf(y, n), n);
  gpu->scale(d_s, 0.37f, n);
  check("scale", d_s, sum, n, 0.0);
  float *frees[] = {d_inp, d_w, d_b, d_mean, d_rstd, d_dout, d_x, d_dy, d_a};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
    colo_pool_free(dpool, frees[i]);
  free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dinp);
  free(dw), free(db), free(x), free(y), free(dy), free(dx), free(sum);
}

static void test_attention(double tol, const char *tag) {
  char name[64];
  size_t nq = (size_t)N * 3 * C, na = (size_t)B * NH * T * T;
  float *qkv = randv(nq, 1.0f), *out = malloc((size_t)N * C * sizeof *out),
        *att = malloc(na * sizeof *att);
  float *d_qkv = upf(qkv, nq), *d_out = upf(qkv, (size_t)N * C), *d_att = upf(qkv, na);
  cpu->attention_fwd(out, att, qkv, B, T, C, NH);
  gpu->attention_fwd(d_out, d_att, d_qkv, B, T, C, NH);
  snprintf(name, sizeof name, "attention_fwd out%s", tag);
  check(name, d_out, out, (size_t)N * C, tol);
  snprintf(name, sizeof name, "attention_fwd probabilities (causal)%s", tag);
  check(name, d_att, att, na, tol);
  d_att = upf(att, na);
  float *dout = randv((size_t)N * C, 1.0f), *dqkv = randv(nq, 1.0f);
  float *d_dout = upf(dout, (size_t)N * C), *d_dqkv = upf(dqkv, nq);
  cpu->attention_bwd(dqkv, dout, qkv, att, B, T, C, NH);
  gpu->attention_bwd(d_dqkv, d_dout, d_qkv, d_att, B, T, C, NH);
  snprintf(name, sizeof name, "attention_bwd dqkv%s", tag);
  check(name, d_dqkv, dqkv, nq, tol);
  colo_pool_free(dpool, d_qkv), colo_pool_free(dpool, d_att), colo_pool_free(dpool, d_dout);
  free(qkv), free(out), free(att), free(dout), free(dqkv);
}

static void test_losses(void) {
  int tg[N];
  for (int i = 0; i < N; i++)
    tg[i] = (int)(colo_rng_u64(&rng) % V);
  size_t nl = (size_t)N * V;
  float *logits = randv(nl, 3.0f), *probs = copyv(logits, nl), *losses = malloc(N * sizeof(float));
  int *d_tg = up(tg, N, sizeof(int));
  float *d_probs = upf(logits, nl), *d_losses = upf(logits, N);
  cpu->crossentropy_fwd(losses, probs, probs, tg, N, V); /* in place, as the model calls it */
  gpu->crossentropy_fwd(d_losses, d_probs, d_probs, d_tg, N, V);
  check("crossentropy_fwd losses", d_losses, losses, N, 1e-5);
  float *p_gpu = upf(probs, nl); /* keep the CPU's probabilities for the backward on both sides */
  check("crossentropy_fwd probabilities (in place)", d_probs, probs, nl, 1e-5);
  cpu->crossentropy_bwd(probs, probs, tg, 0.125f, N, V);
  gpu->crossentropy_bwd(p_gpu, p_gpu, d_tg, 0.125f, N, V);
  check("crossentropy_bwd (in place)", p_gpu, probs, nl, 1e-6);
  /* vocab-parallel pieces over a shard of 400 columns starting at 300 */
  int Vl = 400, v0 = 300;
  float *shard = malloc((size_t)N * Vl * sizeof *shard);
  for (int n = 0; n < N; n++)
    memcpy(shard + (size_t)n * Vl, logits + (size_t)n * V + v0, (size_t)Vl * sizeof(float));
  float *rmax = malloc(N * sizeof(float)), *sum = malloc(N * sizeof(float)),
        *tl = malloc(N * sizeof(float));
  float *d_shard = upf(shard, (size_t)N * Vl), *d_rmax = upf(shard, N), *d_sum = upf(shard, N),
        *d_tl = upf(shard, N);
  cpu->vocab_max(rmax, shard, N, Vl);
  gpu->vocab_max(d_rmax, d_shard, N, Vl);
  check("vocab_max", d_rmax, rmax, N, 0.0);
  float *d_gmax = upf(rmax, N);
  cpu->vocab_sumexp(sum, shard, rmax, N, Vl);
  gpu->vocab_sumexp(d_sum, d_shard, d_gmax, N, Vl);
  check("vocab_sumexp", d_sum, sum, N, 1e-5);
  cpu->vocab_target(tl, shard, tg, v0, N, Vl);
  gpu->vocab_target(d_tl, d_shard, d_tg, v0, N, Vl);
  check("vocab_target (0 outside the shard)", d_tl, tl, N, 0.0);
  float *d_gsum = upf(sum, N), *dsh = malloc((size_t)N * Vl * sizeof *dsh),
        *d_dsh = upf(shard, (size_t)N * Vl);
  cpu->vocab_ce_bwd(dsh, shard, rmax, sum, tg, v0, 0.5f, N, Vl);
  gpu->vocab_ce_bwd(d_dsh, d_shard, d_gmax, d_gsum, d_tg, v0, 0.5f, N, Vl);
  check("vocab_ce_bwd", d_dsh, dsh, (size_t)N * Vl, 1e-5);
  colo_pool_free(dpool, d_tg), colo_pool_free(dpool, d_shard), colo_pool_free(dpool, d_gmax);
  colo_pool_free(dpool, d_gsum);
  free(logits), free(probs), free(losses), free(shard), free(rmax), free(sum), free(tl), free(dsh);
}

static void test_optimizer(void) {
  size_t n = 1000003;
  float *p = randv(n, 1.0f), *g = randv(n, 1.0f), *m = randv(n, 0.1f), *v = randv(n, 0.1f);
  for (size_t i = 0; i < n; i++)
    v[i] = v[i] * v[i]; /* second moments are not negative */
  float *d_p = upf(p, n), *d_g = upf(g, n), *d_m = upf(m, n), *d_v = upf(v, n);
  for (int t = 1; t <= 3; t++) {
    cpu->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    gpu->adamw(d_p, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
  }
  check("adamw parameters, 3 steps", d_p, p, n, 1e-6);
  check("adamw first moments", d_m, m, n, 1e-6);
  check("adamw second moments", d_v, v, n, 1e-6);
  double a = cpu->sumsq(g, n), b = gpu->sumsq(d_g, n);
  double rel = fabs(a - b) / a;
  int ok = rel <= 1e-12 && b == gpu->sumsq(d_g, n); /* and the same twice */
  checks++;
  failures += !ok;
  printf("%s %-44s rel %.2e (tolerance 1e-12), repeatable\n", ok ? "PASS" : "FAIL",
         "sumsq (double)", rel);
  colo_pool_free(dpool, d_g);
  free(p), free(g), free(m), free(v);
}

/* The whole model on both backends from the same initial weights: loss, every gradient, and the
 * loss after two AdamW steps. */
static void test_model(void) {
  colo_gpt_config_t cfg = {V, T, 2, NH, C};
  colo_pool_t *hp = colo_pool_create("cpu", 0);
  colo_gpt_t *mc = NULL, *mg = NULL;
  char err[256];
  if (colo_gpt_create(&cfg, B, 0, cpu, hp, &mc, err, sizeof err) < 0 ||
      colo_gpt_create(&cfg, B, 1, gpu, dpool, &mg, err, sizeof err) < 0) {
    printf("FAIL model create: %s\n", err);
    failures++;
    return;
  }
  colo_gpt_init(mc, 42);
  colo_gpt_init(mg, 42);
  size_t np = colo_gpt_num_params(mc);
  float *w = malloc(np * sizeof *w);
  gpu->to_host(w, colo_gpt_params(mg), np * sizeof *w);
  int same = memcmp(w, colo_gpt_params(mc), np * sizeof *w) == 0;
  checks++;
  failures += !same;
  printf("%s %-44s\n", same ? "PASS" : "FAIL", "initial weights identical (recompute on GPU)");
  int in[N], tg[N];
  for (int i = 0; i < N; i++) {
    in[i] = (int)(colo_rng_u64(&rng) % V);
    tg[i] = (int)(colo_rng_u64(&rng) % V);
  }
  float *mom[2][2] = {
      {colo_pool_alloc(hp, np * sizeof(float), "m"), colo_pool_alloc(hp, np * sizeof(float), "v")},
      {colo_pool_alloc(dpool, np * sizeof(float), "m"),
       colo_pool_alloc(dpool, np * sizeof(float), "v")}};
  for (int step = 0; step < 3; step++) {
    colo_gpt_zero_grad(mc);
    colo_gpt_zero_grad(mg);
    float lc = colo_gpt_forward(mc, in, tg, B, T), lg = colo_gpt_forward(mg, in, tg, B, T);
    double rel = fabs((double)lc - (double)lg) / fabs((double)lc);
    int ok = isfinite(lg) && rel <= 1e-5;
    checks++;
    failures += !ok;
    printf("%s model loss, step %d: cpu %.7f gpu %.7f   rel %.2e (tolerance 1e-05)\n",
           ok ? "PASS" : "FAIL", step, (double)lc, (double)lg, rel);
    colo_gpt_backward(mc, 1.0f);
    colo_gpt_backward(mg, 1.0f);
    if (step == 0) {
      size_t nt;
      const colo_param_t *tab = colo_gpt_params_table(mc, &nt);
      for (size_t i = 0; i < nt; i++) {
        float *d = colo_pool_alloc(dpool, tab[i].numel * sizeof(float), "grad copy");
        gpu->copy(d, colo_gpt_grads(mg) + tab[i].offset, tab[i].numel * sizeof(float));
        char name[96];
        snprintf(name, sizeof name, "grad %s", tab[i].name);
        check(name, d, colo_gpt_grads(mc) + tab[i].offset, tab[i].numel, 1e-4);
      }
    }
    for (int k = 0; k < 2; k++) {
      colo_gpt_t *m = k ? mg : mc;
      const colo_backend_t *be = k ? gpu : cpu;
      be->adamw(colo_gpt_params(m), colo_gpt_grads(m), mom[k][0], mom[k][1], np, 1e-3f, 0.9f, 0.95f,
                1e-8f, 0.0f, 1.0f, step + 1);
    }
  }
  colo_gpt_destroy(mc);
  colo_gpt_destroy(mg);
  colo_pool_free(hp, mom[0][0]), colo_pool_free(hp, mom[0][1]);
  colo_pool_free(dpool, mom[1][0]), colo_pool_free(dpool, mom[1][1]);
  colo_pool_destroy(hp);
  free(w);
}

static void test_pool(void) {
  colo_pool_t *p = colo_pool_create_with("gpu0", 1 << 20, gpu->allocator);
  void *a = colo_pool_alloc(p, 600 << 10, "a");
  void *b = colo_pool_alloc(p, 600 << 10, "b");
  int ok = a && !b && colo_pool_used(p) == (600u << 10) &&
           strstr(colo_pool_error(p), "gpu0 memory pool: b needs 614400 bytes") != NULL;
  float z[4] = {1, 1, 1, 1};
  gpu->to_host(z, a, sizeof z);
  ok = ok && z[0] == 0.0f && z[3] == 0.0f; /* zeroed */
  colo_pool_free(p, a);
  ok = ok && colo_pool_used(p) == 0 && colo_pool_peak(p) == (600u << 10);
  colo_pool_destroy(p);
  checks++;
  failures += !ok;
  printf("%s %-44s\n", ok ? "PASS" : "FAIL", "device pool: capacity, zeroed, peak");
}

int main(void) {
  char err[256];
  if (!colo_backend_cuda_built()) {
    printf("SKIP: this build has no CUDA backend\n");
    return 77;
  }
  cpu = colo_backend_cpu();
  gpu = colo_backend_cuda(0, COLO_MATH_FP32, err, sizeof err);
  if (!gpu) {
    printf("SKIP: %s\n", err);
    return 77;
  }
  colo_backend_cpu_set_threads(0);
  colo_rng_seed(&rng, 7);
  dpool = colo_pool_create_with("gpu", 0, gpu->allocator);
  test_pool();
  test_matmul(1e-5, "");
  test_encoder();
  test_layernorm_gelu();
  test_attention(1e-5, "");
  test_losses();
  test_optimizer();
  test_model();
  /* the products again on tensor cores: inputs rounded to TF32 (10-bit mantissa), fp16 (10) and
   * bf16 (7), accumulated in fp32 */
  static const struct {
    int math;
    double tol;
    const char *tag;
  } modes[] = {{COLO_MATH_TF32, 3e-4, " (tf32)"},
               {COLO_MATH_FP16, 3e-3, " (fp16)"},
               {COLO_MATH_BF16, 1e-2, " (bf16)"}};
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    gpu = colo_backend_cuda(0, modes[i].math, err, sizeof err);
    test_matmul(modes[i].tol, modes[i].tag);
    test_attention(modes[i].tol, modes[i].tag);
  }
  gpu = colo_backend_cuda(0, COLO_MATH_FP32, err, sizeof err);
  printf("%d checks, %d failed\n", checks, failures);
  colo_pool_destroy(dpool);
  return failures ? 1 : 0;
}
