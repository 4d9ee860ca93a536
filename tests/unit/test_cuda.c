/* The CUDA backend against the CPU backend: every entry of the operation table on fresh random
 * inputs, forward and backward, then the whole model's loss and gradients, then the device pool;
 * in each storage type. fp32 and TF32 are compared with the fp32 CPU table; bf16 and fp16 with
 * the CPU's bf16 and fp16 tables (cpu_lowp.c), which compute in fp32 and round what they store,
 * as the GPU's kernels do. Both sides get the same inputs, already rounded to the storage type.
 *
 * Tolerances are relative errors, max|gpu − cpu| / max|cpu| over each output: fp32 1e-5, TF32
 * 1e-3, fp16 3e-3 and bf16 1e-2 (one unit in the last place of a 16-bit store is 1e-3 and 4e-3
 * of the value; the products add in another order). TF32 rounds both factors of every product to
 * 10 bits of mantissa (a relative error of up to 2^-11 = 4.9e-4 each): an H100 gave 3.1e-4 to
 * 4.9e-4 on the products and attention, so 1e-3, two such units, is its bound. A NaN or inf in a
 * GPU output never passes.
 * A *_bwd's outputs start from the same random values on both sides, those it writes (the input
 * gradients of matmul_bwd, lmhead_bwd, gelu_bwd, attention_bwd) and those it adds to (the
 * parameter gradients, layernorm_bwd's and rmsnorm_bwd's dinp): a kernel that adds where it should
 * write, or the reverse, shows.
 *
 * It needs a GPU: without one (CI), or in a build without the CUDA backend, it prints one line
 * saying why and exits 77, which ctest reports as skipped. With COLO_CUDA_EMULATE=1 the "GPU" is
 * the CPU dressed as one (backend/cpu_device.c: device memory that only the table may touch, and
 * checked pointers), so that CI runs this harness and its device paths too: every check must
 * then be exact. `test_cuda --self` puts the plain CPU tables in the GPU's place. It runs
 * sequentially in one process (no fork per test: a CUDA context does not survive fork).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/nf4.h"
#include "core/pool.h"
#include "core/rng.h"
#include "model/gpt.h"

static const colo_backend_t *cpu, *gpu; /* the same storage type */
static colo_pool_t *dpool;              /* the "GPU"'s memory for the test's tensors */
static colo_rng_t rng;
static int failures, checks, self, exact; /* exact: the GPU's table computes the CPU's bits */
static int tf32;                          /* the products round their factors to TF32 */
static colo_dtype_t dt;                   /* the storage type under test */
static size_t asz;

static float *randv(size_t n, float scale) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++)
    x[i] = scale * colo_rng_normal(&rng);
  return x;
}

/* host copies in the storage type */
static void *hact(const float *x, size_t n) {
  void *h = malloc(n * asz);
  colo_dtype_from_float(h, x, n, dt);
  return h;
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

/* a device copy of fp32 values rounded to the storage type */
static void *upa(const float *x, size_t n) {
  void *h = hact(x, n), *d = up(h, n, asz);
  free(h);
  return d;
}

static void verdict(const char *what, double rel, double tol, int finite) {
  if (exact)
    tol = 0.0; /* the CPU's arithmetic on both sides */
  int ok = finite && rel <= tol;
  checks++;
  failures += !ok;
  printf("%s %-48s rel %.2e (tolerance %.0e)%s\n", ok ? "PASS" : "FAIL", what, rel, tol,
         finite ? "" : " NOT FINITE");
}

static void compare(const char *what, const float *h, const float *ref, size_t n, double tol) {
  double maxref = 0.0, maxdiff = 0.0;
  int finite = 1;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(h[i]))
      finite = 0;
    double r = fabs((double)ref[i]), e = fabs((double)h[i] - (double)ref[i]);
    maxref = r > maxref ? r : maxref;
    maxdiff = e > maxdiff ? e : maxdiff;
  }
  verdict(what, maxdiff / (maxref > 0.0 ? maxref : 1.0), tol, finite);
}

/* the device fp32 tensor d against the CPU's fp32 ref; frees d */
static void check(const char *what, float *d, const float *ref, size_t n, double tol) {
  float *h = malloc(n * sizeof *h);
  gpu->to_host(h, d, n * sizeof *h);
  colo_pool_free(dpool, d);
  compare(what, h, ref, n, tol);
  free(h);
}

/* the device tensor d in the storage type against the CPU's ref in it; frees d */
static void check_a(const char *what, void *d, const void *ref, size_t n, double tol) {
  void *hd = malloc(n * asz);
  float *h = malloc(n * sizeof *h), *r = malloc(n * sizeof *r);
  gpu->to_host(hd, d, n * asz);
  colo_pool_free(dpool, d);
  colo_dtype_to_float(h, hd, n, dt);
  colo_dtype_to_float(r, ref, n, dt);
  compare(what, h, r, n, tol);
  free(hd), free(h), free(r);
}

/* how many of n values of sz bytes differ in their bits between a and b (host memory) */
static size_t bits_differ(const void *a, const void *b, size_t n, size_t sz) {
  size_t differ = 0;
  for (size_t i = 0; i < n; i++)
    differ += memcmp((const char *)a + i * sz, (const char *)b + i * sz, sz) != 0;
  return differ;
}

/* two device buffers of n values of sz bytes: the same bits, value for value */
static void check_same_bits(const char *what, const void *d1, const void *d2, size_t n, size_t sz) {
  unsigned char *a = malloc(n * sz), *b = malloc(n * sz);
  gpu->to_host(a, d1, n * sz);
  gpu->to_host(b, d2, n * sz);
  verdict(what, (double)bits_differ(a, b, n, sz), 0.0, 1);
  free(a), free(b);
}

static const char *tag; /* " (bf16)" and so on */

static const char *named(const char *what) {
  static char name[192];
  snprintf(name, sizeof name, "%s%s", what, tag);
  return name;
}

enum { B = 4, T = 64, C = 96, NH = 4, V = 1000, N = B * T };

static void test_matmul(double tol) {
  int OC = 3 * C;
  size_t ni = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
  float *inp = randv(ni, 1.0f), *w = randv(nw, 0.1f), *b = randv((size_t)OC, 0.1f);
  void *h_inp = hact(inp, ni), *h_w = hact(w, nw), *out = calloc(no, asz);
  void *d_inp = upa(inp, ni), *d_w = upa(w, nw), *d_out = up(out, no, asz);
  float *d_b = upf(b, OC);
  cpu->matmul_fwd(out, h_inp, h_w, b, N, C, OC);
  gpu->matmul_fwd(d_out, d_inp, d_w, d_b, N, C, OC);
  check_a(named("matmul_fwd with bias"), d_out, out, no, tol);
  d_out = up(out, no, asz);
  cpu->matmul_fwd(out, h_inp, h_w, NULL, N, C, OC);
  gpu->matmul_fwd(d_out, d_inp, d_w, NULL, N, C, OC);
  check_a(named("matmul_fwd without bias"), d_out, out, no, tol);
  /* backward onto random values: dinp written, dw and db added to */
  float *dout = randv(no, 1.0f), *dinp = randv(ni, 1.0f), *dw = randv(nw, 1.0f),
        *db = randv(OC, 1.0f);
  void *h_dout = hact(dout, no), *h_dinp = hact(dinp, ni);
  void *d_dout = upa(dout, no), *d_dinp = upa(dinp, ni);
  float *d_dw = upf(dw, nw), *d_db = upf(db, OC);
  cpu->matmul_bwd(h_dinp, dw, db, h_dout, h_inp, h_w, N, C, OC);
  gpu->matmul_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
  check_a(named("matmul_bwd dinp"), d_dinp, h_dinp, ni, tol);
  check(named("matmul_bwd dw (fp32)"), d_dw, dw, nw, tol);
  check(named("matmul_bwd db (fp32)"), d_db, db, OC, 1e-5);
  /* the MLP's product and GELU (with COLO_CUDA_GELU_FUSION=1 cuBLASLt's epilogues: GELU of the
   * unrounded sum, one rounding fewer than the CPU's pair) */
  for (int withb = 1; withb >= 0; withb--) {
    void *pre = calloc(no, asz), *gl = calloc(no, asz), *d_pre = up(pre, no, asz);
    d_out = up(gl, no, asz);
    cpu->matmul_gelu_fwd(gl, pre, h_inp, h_w, withb ? b : NULL, N, C, OC);
    gpu->matmul_gelu_fwd(d_out, d_pre, d_inp, d_w, withb ? d_b : NULL, N, C, OC);
    check_a(named(withb ? "matmul_gelu_fwd gelu" : "matmul_gelu_fwd gelu, no bias"), d_out, gl, no,
            tol);
    check_a(named(withb ? "matmul_gelu_fwd pre-activation" : "matmul_gelu_fwd pre, no bias"), d_pre,
            pre, no, tol);
    free(pre), free(gl);
  }
  {
    /* backward: inp stands for GELU's output, gpre for its input; dinp written, dw, db added to */
    float *gpre = randv(ni, 1.5f), *dw2 = randv(nw, 1.0f), *db2 = randv(OC, 1.0f);
    void *h_gpre = hact(gpre, ni), *d_gpre = upa(gpre, ni), *h_di = hact(dinp, ni);
    void *d_di = upa(dinp, ni);
    float *d_dw2 = upf(dw2, nw), *d_db2 = upf(db2, OC);
    cpu->matmul_gelu_bwd(h_di, dw2, db2, h_dout, h_inp, h_w, h_gpre, N, C, OC);
    gpu->matmul_gelu_bwd(d_di, d_dw2, d_db2, d_dout, d_inp, d_w, d_gpre, N, C, OC);
    check_a(named("matmul_gelu_bwd dinp"), d_di, h_di, ni, tol);
    check(named("matmul_gelu_bwd dw (fp32)"), d_dw2, dw2, nw, tol);
    check(named("matmul_gelu_bwd db (fp32)"), d_db2, db2, OC, 1e-5);
    colo_pool_free(dpool, d_gpre);
    free(gpre), free(dw2), free(db2), free(h_gpre), free(h_di);
  }
  /* the tied head */
  size_t nv = (size_t)V * C, nl = (size_t)N * V;
  float *wte = randv(nv, 0.1f);
  void *h_wte = hact(wte, nv), *logits = calloc(nl, asz);
  void *d_wte = upa(wte, nv), *d_logits = up(logits, nl, asz);
  cpu->lmhead_fwd(logits, h_inp, h_wte, N, C, V);
  gpu->lmhead_fwd(d_logits, d_inp, d_wte, N, C, V);
  check_a(named("lmhead_fwd"), d_logits, logits, nl, tol);
  float *dl = randv(nl, 0.01f), *dwte = randv(nv, 1.0f);
  void *h_dl = hact(dl, nl), *d_dl = upa(dl, nl);
  float *d_dwte = upf(dwte, nv);
  free(h_dinp);
  h_dinp = hact(dinp, ni);
  d_dinp = upa(dinp, ni);
  cpu->lmhead_bwd(h_dinp, dwte, h_dl, h_inp, h_wte, N, C, V);
  gpu->lmhead_bwd(d_dinp, d_dwte, d_dl, d_inp, d_wte, N, C, V);
  check_a(named("lmhead_bwd dinp"), d_dinp, h_dinp, ni, tol);
  check(named("lmhead_bwd dwte (fp32)"), d_dwte, dwte, nv, tol);
  void *frees[] = {d_inp, d_w, d_b, d_dout, d_wte, d_dl};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
    colo_pool_free(dpool, frees[i]);
  void *hfrees[] = {inp, w,      b,      h_inp, h_w,   out,    dout, dinp, dw,
                    db,  h_dout, h_dinp, wte,   h_wte, logits, dl,   dwte, h_dl};
  for (size_t i = 0; i < sizeof hfrees / sizeof hfrees[0]; i++)
    free(hfrees[i]);
}

/* Documents' positions for B rows of T (backend.h's attention entries): a document begins at
 * each row's first token and second (one of a single token), where t mod 37 is 17, at 64 and 65
 * (a tile's first row, and one of a single token there) and at the last token: documents that
 * begin at, inside and across the kernels' 64-row tiles. Returned in host memory (malloc). */
static int *doc_positions(int B_, int T_) {
  int *pos = malloc((size_t)B_ * T_ * sizeof *pos);
  for (int b = 0; b < B_; b++)
    for (int t = 0, s = 0; t < T_; t++) {
      if (t <= 1 || t % 37 == 17 || t == 64 || t == 65 || t == T_ - 1)
        s = t;
      pos[b * T_ + t] = t - s;
    }
  return pos;
}

static void test_encoder(void) {
  int tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = (int)(colo_rng_u64(&rng) % V);
  tok[1] = tok[0];               /* a repeated token: its rows add up */
  for (int i = 4; i < N; i += 4) /* and a few tokens of the shard, each in rows far apart */
    tok[i] = 100 + (i / 4) % 5;
  int v0 = 100, v1 = 700; /* a vocab-parallel shard */
  size_t ne = (size_t)(v1 - v0) * C, np = (size_t)T * C, no = (size_t)N * C;
  float *wte = randv(ne, 0.1f), *wpe = randv(np, 0.1f);
  void *out = calloc(no, asz);
  int *d_tok = up(tok, N, sizeof(int));
  float *d_wte = upf(wte, ne), *d_wpe = upf(wpe, np);
  void *d_out = up(out, no, asz);
  cpu->encoder_fwd(out, tok, wte, wpe, B, T, C, v0, v1, NULL);
  gpu->encoder_fwd(d_out, d_tok, d_wte, d_wpe, B, T, C, v0, v1, NULL);
  check_a(named("encoder_fwd (a shard, with positions)"), d_out, out, no, 0.0);
  d_out = up(out, no, asz);
  cpu->encoder_fwd(out, tok, wte, NULL, B, T, C, v0, v1, NULL);
  gpu->encoder_fwd(d_out, d_tok, d_wte, NULL, B, T, C, v0, v1, NULL);
  check_a(named("encoder_fwd (without positions)"), d_out, out, no, 0.0);
  float *dout = randv(no, 1.0f), *dwte = randv(ne, 1.0f), *dwpe = randv(np, 1.0f);
  void *h_dout = hact(dout, no), *d_dout = upa(dout, no);
  float *d_dwte = upf(dwte, ne), *d_dwpe = upf(dwpe, np);
  cpu->encoder_bwd(dwte, dwpe, h_dout, tok, B, T, C, v0, v1, NULL);
  gpu->encoder_bwd(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, v0, v1, NULL);
  /* the same additions in the same order: exact */
  check(named("encoder_bwd dwte (same order: exact)"), d_dwte, dwte, ne, 0.0);
  check(named("encoder_bwd dwpe (same order: exact)"), d_dwpe, dwpe, np, 0.0);
  /* documents: the position embedding's row of each token's place in its document */
  int *pos = doc_positions(B, T), *d_pos = up(pos, N, sizeof(int));
  d_out = up(out, no, asz);
  cpu->encoder_fwd(out, tok, wte, wpe, B, T, C, v0, v1, pos);
  gpu->encoder_fwd(d_out, d_tok, d_wte, d_wpe, B, T, C, v0, v1, d_pos);
  check_a(named("encoder_fwd (documents)"), d_out, out, no, 0.0);
  d_dwte = upf(dwte, ne), d_dwpe = upf(dwpe, np); /* check() took the others */
  cpu->encoder_bwd(dwte, dwpe, h_dout, tok, B, T, C, v0, v1, pos);
  gpu->encoder_bwd(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, v0, v1, d_pos);
  check(named("encoder_bwd dwte (documents, exact)"), d_dwte, dwte, ne, 0.0);
  check(named("encoder_bwd dwpe (documents, exact)"), d_dwpe, dwpe, np, 0.0);
  colo_pool_free(dpool, d_pos);
  free(pos);
  colo_pool_free(dpool, d_tok), colo_pool_free(dpool, d_wte), colo_pool_free(dpool, d_wpe);
  colo_pool_free(dpool, d_dout);
  free(wte), free(wpe), free(out), free(dout), free(h_dout), free(dwte), free(dwpe);
}

static void test_layernorm_gelu(double tol) {
  size_t n = (size_t)N * C;
  float *inp = randv(n, 2.0f), *w = randv(C, 1.0f), *b = randv(C, 1.0f);
  for (size_t i = 0; i < n; i++)
    inp[i] += 3.0f; /* a mean far from 0 */
  void *h_inp = hact(inp, n), *out = calloc(n, asz);
  float *mean = malloc(N * sizeof *mean), *rstd = malloc(N * sizeof *rstd);
  void *d_inp = upa(inp, n), *d_out = up(out, n, asz);
  float *d_w = upf(w, C), *d_b = upf(b, C), *d_mean = upf(inp, N), *d_rstd = upf(inp, N);
  cpu->layernorm_fwd(out, mean, rstd, h_inp, w, b, N, C);
  gpu->layernorm_fwd(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
  check_a(named("layernorm_fwd out"), d_out, out, n, tol);
  check(named("layernorm_fwd mean (fp32)"), d_mean, mean, N, 1e-5);
  check(named("layernorm_fwd rstd (fp32)"), d_rstd, rstd, N, 1e-5);
  d_mean = upf(mean, N); /* the backward uses the CPU's saved statistics on both sides */
  d_rstd = upf(rstd, N);
  float *dout = randv(n, 1.0f), *dinp = randv(n, 1.0f), *dw = randv(C, 1.0f), *db = randv(C, 1.0f);
  void *h_dout = hact(dout, n), *h_dinp = hact(dinp, n);
  void *d_dout = upa(dout, n), *d_dinp = upa(dinp, n);
  float *d_dw = upf(dw, C), *d_db = upf(db, C);
  cpu->layernorm_bwd(h_dinp, dw, db, h_dout, h_inp, w, mean, rstd, N, C);
  gpu->layernorm_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
  check_a(named("layernorm_bwd dinp"), d_dinp, h_dinp, n, tol);
  check(named("layernorm_bwd dw (fp32)"), d_dw, dw, C, 1e-5);
  check(named("layernorm_bwd db (fp32)"), d_db, db, C, 1e-5);
  {
    /* the weights one value past a 16-byte boundary, where the GPU takes the kernels that read a
     * row three times and the weights one value at a time: the same bits as the kernels that
     * keep the row in registers */
    float *wo = colo_pool_alloc(dpool, (C + 1) * sizeof(float), "test tensor");
    float *bo = colo_pool_alloc(dpool, (C + 1) * sizeof(float), "test tensor");
    gpu->from_host(wo + 1, w, C * sizeof(float));
    gpu->from_host(bo + 1, b, C * sizeof(float));
    void *o[2] = {up(out, n, asz), up(out, n, asz)}, *di[2] = {upa(dinp, n), upa(dinp, n)};
    float *mo[2] = {upf(mean, N), upf(mean, N)}, *ro[2] = {upf(rstd, N), upf(rstd, N)};
    for (int k = 0; k < 2; k++) {
      gpu->layernorm_fwd(o[k], mo[k], ro[k], d_inp, k ? wo + 1 : d_w, k ? bo + 1 : d_b, N, C);
      gpu->layernorm_bwd(di[k], NULL, NULL, d_dout, d_inp, k ? wo + 1 : d_w, d_mean, d_rstd, N, C);
    }
    check_same_bits(named("layernorm_fwd weights aligned and not: the same bits"), o[0], o[1], n,
                    asz);
    check_same_bits(named("layernorm_fwd rstd, aligned and not"), ro[0], ro[1], N, sizeof(float));
    check_same_bits(named("layernorm_bwd weights aligned and not: the same bits"), di[0], di[1], n,
                    asz);
    void *fr[] = {wo, bo, o[0], o[1], di[0], di[1], mo[0], mo[1], ro[0], ro[1]};
    for (size_t k = 0; k < sizeof fr / sizeof fr[0]; k++)
      colo_pool_free(dpool, fr[k]);
  }
  /* GELU: the CPU's tanh is 1 - 2/(e^2u + 1), the GPU's tanhf: a few ulps apart */
  float *x = randv(n, 3.0f), *dy = randv(n, 1.0f), *dx = randv(n, 1.0f);
  void *h_x = hact(x, n), *y = calloc(n, asz), *h_dy = hact(dy, n), *h_dx = hact(dx, n);
  void *d_x = upa(x, n), *d_y = up(y, n, asz), *d_dy = upa(dy, n), *d_dx = upa(dx, n);
  cpu->gelu_fwd(y, h_x, n);
  gpu->gelu_fwd(d_y, d_x, n);
  check_a(named("gelu_fwd"), d_y, y, n, tol);
  cpu->gelu_bwd(h_dx, h_x, h_dy, n);
  gpu->gelu_bwd(d_dx, d_x, d_dy, n);
  check_a(named("gelu_bwd"), d_dx, h_dx, n, tol);
  /* out may alias an input, as the model's residual sums do: exact, one rounding of a + b */
  void *sum = calloc(n, asz), *d_s = up(y, n, asz);
  cpu->add(sum, h_x, y, n);
  gpu->add(d_s, d_x, d_s, n);
  check_a(named("add"), d_s, sum, n, 0.0);
  float *fs = randv(n, 1.0f), *d_fs = upf(fs, n);
  cpu->scale(fs, 0.37f, n);
  gpu->scale(d_fs, 0.37f, n);
  check(named("scale (fp32)"), d_fs, fs, n, 0.0);
  /* a weight's compute copy: fp32 rounded to the storage type, as the host rounds */
  void *d_c = up(y, C, asz), *hc = hact(w, C);
  gpu->to_act(d_c, d_w, C);
  check_a(named("to_act"), d_c, hc, C, 0.0);
  /* a frozen token embedding kept in the storage type: its rows, copied (a token outside the
   * vocabulary gets zeros) */
  {
    int V = 37, Nt = 29, tok[29];
    for (int i = 0; i < Nt; i++)
      tok[i] = (i * 7) % (V + 3) - (i == 5); /* some ≥ V, one −1 */
    float *tab = randv((size_t)V * C, 1.0f);
    void *h_tab = hact(tab, (size_t)V * C), *h_e = calloc((size_t)Nt * C, asz);
    void *d_tab = upa(tab, (size_t)V * C), *d_e = up(h_e, (size_t)Nt * C, asz);
    int *d_tok = up(tok, Nt, sizeof(int));
    cpu->embed_fwd(h_e, tok, h_tab, Nt, C, V);
    gpu->embed_fwd(d_e, d_tok, d_tab, Nt, C, V);
    check_a(named("embed_fwd"), d_e, h_e, (size_t)Nt * C, 0.0);
    colo_pool_free(dpool, d_tab);
    colo_pool_free(dpool, d_tok);
    free(tab), free(h_tab), free(h_e);
  }
  /* LoRA's dropout: the same mask (a hash of its coordinates) and scale, exactly, in place too */
  {
    float *dx = randv(n, 1.0f);
    void *h_d = hact(dx, n), *d_d = upa(dx, n), *h_o = calloc(n, asz), *d_o = up(h_o, n, asz);
    uint32_t th = (uint32_t)(0.1 * 16777216.0);
    cpu->dropout(h_o, h_d, N, C, 0x1234567890abcdefull, 77, 96, th, 1.0f / 0.9f);
    gpu->dropout(d_o, d_d, N, C, 0x1234567890abcdefull, 77, 96, th, 1.0f / 0.9f);
    check_a(named("dropout"), d_o, h_o, n, 0.0);
    cpu->dropout(h_d, h_d, N, C, 5, 0, 0, th, 1.0f / 0.9f);
    gpu->dropout(d_d, d_d, N, C, 5, 0, 0, th, 1.0f / 0.9f);
    check_a(named("dropout in place"), d_d, h_d, n, 0.0);
    free(dx), free(h_d), free(h_o);
  }
  /* NEFTune's noise: the same values (a hash of their coordinates), added and rounded alike */
  {
    float *dx = randv(n, 1.0f);
    void *h_x = hact(dx, n), *d_x = upa(dx, n);
    cpu->noise(h_x, N, C, 0xfedcba9876543210ull, 4096, 0.125f);
    gpu->noise(d_x, N, C, 0xfedcba9876543210ull, 4096, 0.125f);
    check_a(named("noise"), d_x, h_x, n, 0.0);
    free(dx), free(h_x);
  }
  /* a loss's gradient weighted by rows (DPO): the same products, rounded alike; weights of
   * either sign and zero */
  {
    float *dx = randv(n, 1.0f), *w = randv((size_t)N, 2.0f);
    w[0] = 0.0f;
    void *h_x = hact(dx, n), *d_x = upa(dx, n);
    float *d_w = upf(w, (size_t)N);
    cpu->scale_rows(h_x, w, N, C);
    gpu->scale_rows(d_x, d_w, N, C);
    check_a(named("scale_rows"), d_x, h_x, n, 0.0);
    free(dx), free(w), free(h_x);
  }
  /* NF4's compute copies (QLoRA): the same values, rounded as the host rounds, exactly; a shape
   * of odd size whose tiles end inside both dimensions, and one of Llama's */
  const int shapes[2][2] = {{77, 45}, {256, 1536}};
  for (int k = 0; k < 2; k++) {
    int r = shapes[k][0], c = shapes[k][1];
    size_t nq = (size_t)r * c, nc = colo_nf4_code_bytes(nq), nb = colo_nf4_blocks(nq);
    float *wq = randv(nq, 0.02f), *amax = malloc(nb * sizeof *amax);
    uint8_t *codes = malloc(nc);
    colo_nf4_quantize(wq, r, c, codes, amax);
    void *hq = malloc(nq * asz);
    cpu->dequant_nf4(hq, codes, amax, r, c);
    void *d_q = up(hq, nq, asz); /* overwritten below */
    gpu->zero(d_q, nq * asz);
    uint8_t *d_codes = up(codes, nc, 1);
    float *d_amax = upf(amax, nb);
    gpu->dequant_nf4(d_q, d_codes, d_amax, r, c);
    check_a(named(k ? "dequant_nf4 256x1536" : "dequant_nf4 77x45"), d_q, hq, nq, 0.0);
    /* double quantization's scales (one block of 256 of them, and 24): exactly the host's */
    size_t words = colo_nf4_packed_floats(nq, 1);
    float *pk = malloc(words * sizeof *pk), *hs = malloc(nb * sizeof *hs);
    colo_nf4_pack(wq, r, c, 1, pk);
    const uint8_t *pb = (const uint8_t *)pk;
    const float *stats = (const float *)(const void *)(pb + colo_nf4_stats_at(nq));
    cpu->dequant_scales(hs, pb + colo_nf4_codes_padded(nq), stats, (int)nb);
    float *d_pk = upf(pk, words), *d_s = upf(hs, nb);
    gpu->zero(d_s, nb * sizeof *d_s);
    const uint8_t *d_pb = (const uint8_t *)d_pk;
    gpu->dequant_scales(d_s, d_pb + colo_nf4_codes_padded(nq),
                        (const float *)(const void *)(d_pb + colo_nf4_stats_at(nq)), (int)nb);
    check(named(k ? "dequant_scales 6144" : "dequant_scales 55"), d_s, hs, nb, 0.0);
    colo_pool_free(dpool, d_pk);
    free(pk), free(hs);
    colo_pool_free(dpool, d_codes);
    colo_pool_free(dpool, d_amax);
    free(wq), free(amax), free(codes), free(hq);
  }
  void *frees[] = {d_inp, d_w, d_b, d_mean, d_rstd, d_dout, d_x, d_dy};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
    colo_pool_free(dpool, frees[i]);
  void *hfrees[] = {inp,    w, b,  h_inp, out, mean, rstd, dout, dinp, dw, db, h_dout,
                    h_dinp, x, dy, dx,    h_x, y,    h_dy, h_dx, sum,  fs, hc};
  for (size_t i = 0; i < sizeof hfrees / sizeof hfrees[0]; i++)
    free(hfrees[i]);
}

/* DoRA's entries: the columns' squared norms of w + dtᵀ (shapes whose 32-wide tiles end inside
 * both dimensions, and one wider than a block's rows), the rescaling forward (with a bias, and in
 * place without one, as the backward runs it), and the magnitude's gradient. The sums are fp32 on
 * both sides, in another order on the GPU. */
static void test_dora(double tol) {
  const int shapes[2][2] = {{77, 45}, {96, 300}};
  for (int k = 0; k < 2; k++) {
    int in = shapes[k][0], out = shapes[k][1];
    size_t nw = (size_t)in * out, no = (size_t)N * out;
    float *w = randv(nw, 0.1f), *dtf = randv(nw, 0.02f), *sq = malloc(out * sizeof *sq);
    void *h_w = hact(w, nw), *h_dt = hact(dtf, nw), *d_w = upa(w, nw), *d_dt = upa(dtf, nw);
    float *d_sq = upf(w, out);
    cpu->dora_norm(sq, h_w, h_dt, in, out);
    gpu->dora_norm(d_sq, d_w, d_dt, in, out);
    check(named(k ? "dora_norm 96x300 (fp32)" : "dora_norm 77x45 (fp32)"), d_sq, sq, out, 1e-5);
    float *mag = randv(out, 1.0f), *b = randv(out, 1.0f), *z = randv(no, 1.0f);
    float *dm = randv(out, 1.0f), *d_sqf = upf(sq, out), *d_mag = upf(mag, out), *d_b = upf(b, out);
    void *h_z = hact(z, no), *h_o = calloc(no, asz), *d_z = upa(z, no), *d_o = up(h_o, no, asz);
    cpu->dora_scale(h_o, h_z, mag, sq, b, N, out);
    gpu->dora_scale(d_o, d_z, d_mag, d_sqf, d_b, N, out);
    check_a(named("dora_scale"), d_o, h_o, no, tol);
    void *d_z2 = upa(z, no);
    cpu->dora_scale(h_z, h_z, mag, sq, NULL, N, out);
    gpu->dora_scale(d_z2, d_z2, d_mag, d_sqf, NULL, N, out);
    check_a(named("dora_scale in place, no bias"), d_z2, h_z, no, tol);
    /* the dropped path's: out += z · (g − 1) + b */
    float *acc = randv(no, 1.0f);
    void *h_acc = hact(acc, no), *d_acc = upa(acc, no), *h_z0 = hact(z, no), *d_z0 = upa(z, no);
    cpu->dora_add(h_acc, h_z0, mag, sq, b, N, out);
    gpu->dora_add(d_acc, d_z0, d_mag, d_sqf, d_b, N, out);
    check_a(named("dora_add"), d_acc, h_acc, no, tol);
    colo_pool_free(dpool, d_z0);
    free(acc), free(h_acc), free(h_z0);
    float *dout = randv(no, 1.0f), *d_dm = upf(dm, out);
    void *h_d = hact(dout, no), *d_d = upa(dout, no), *h_z1 = hact(z, no);
    cpu->dora_dmag(dm, h_d, h_z1, sq, N, out);
    gpu->dora_dmag(d_dm, d_d, d_z, d_sqf, N, out);
    check(named("dora_dmag (fp32, accumulated)"), d_dm, dm, out, 1e-5);
    void *frees[] = {d_w, d_dt, d_sqf, d_mag, d_b, d_z, d_d};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
      colo_pool_free(dpool, frees[i]);
    void *hfrees[] = {w, dtf, sq, h_w, h_dt, mag, b, z, dm, h_z, h_o, dout, h_d, h_z1};
    for (size_t i = 0; i < sizeof hfrees / sizeof hfrees[0]; i++)
      free(hfrees[i]);
  }
}

/* attention of B sequences of T tokens, C channels in NH heads. In 16-bit storage the GPU fuses
 * it (cuda_flash.cu) for head sizes 32, 64 and 128 and runs batched products otherwise (as in
 * fp32), so the shapes below take both paths, with sequences that end inside a 64-row tile.
 * docs 1: within documents (doc_positions, up to 37 tokens long); 2: those in a sliding window
 * of 20, as the model passes it (positions capped at 19). */
static void test_attention(double tol, int B, int T, int C, int NH, int docs) {
  size_t N = (size_t)B * T, nq = N * 3 * C, nl = (size_t)B * NH * T, no = N * C;
  char what[96];
  const char *dd = docs == 2 ? ", documents in a window of 20" : docs ? ", documents" : "";
  int *pos = docs ? doc_positions(B, T) : NULL;
  for (size_t i = 0; docs == 2 && i < N; i++)
    pos[i] = pos[i] < 19 ? pos[i] : 19;
  int *d_pos = pos ? up(pos, N, sizeof(int)) : NULL;
  float *qkv = randv(nq, 1.0f), *lse = calloc(nl, sizeof(float));
  void *h_qkv = hact(qkv, nq), *out = calloc(no, asz);
  void *d_qkv = upa(qkv, nq), *d_out = up(out, no, asz);
  float *d_lse = upf(lse, nl);
  cpu->attention_fwd(out, lse, h_qkv, B, T, C, NH, pos);
  gpu->attention_fwd(d_out, d_lse, d_qkv, B, T, C, NH, d_pos);
  snprintf(what, sizeof what, "attention_fwd out, hs %d T %d%s", C / NH, T, dd);
  check_a(named(what), d_out, out, no, tol);
  snprintf(what, sizeof what, "attention_fwd log-sum-exp (fp32), hs %d T %d%s", C / NH, T, dd);
  check(named(what), d_lse, lse, nl, tol);
  d_out = up(out, no, asz); /* the CPU's out and lse on both sides */
  d_lse = upf(lse, nl);
  float *dout = randv(no, 1.0f), *dqkv = randv(nq, 1.0f);
  void *h_dout = hact(dout, no), *h_dqkv = hact(dqkv, nq);
  void *d_dout = upa(dout, no), *d_dqkv = upa(dqkv, nq);
  cpu->attention_bwd(h_dqkv, h_dout, h_qkv, out, lse, B, T, C, NH, pos);
  gpu->attention_bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, d_pos);
  snprintf(what, sizeof what, "attention_bwd dqkv, hs %d T %d%s", C / NH, T, dd);
  /* under TF32 dQ and dK come from two products in a row, dS = P∘(dO·Vᵀ − D) and then dS·K, each
   * rounding both its factors: twice the one product's bound (an H200 gave 1.7e-3 on some
   * inputs) */
  check_a(named(what), d_dqkv, h_dqkv, nq, tf32 ? 2 * tol : tol);
  colo_pool_free(dpool, d_qkv), colo_pool_free(dpool, d_lse), colo_pool_free(dpool, d_dout);
  colo_pool_free(dpool, d_out);
  if (d_pos)
    colo_pool_free(dpool, d_pos);
  free(pos);
  free(qkv), free(lse), free(h_qkv), free(out), free(dout), free(dqkv), free(h_dout);
  free(h_dqkv);
}

/* The attention's backward twice on the same inputs at GPT-2 124M's shape (B 4, T 1024, 12 heads
 * of 64): the same bits both times, which exact resume and the parallel runs' equality rest on.
 * The one mode that is not held to it is COLO_CUDA_ATTENTION=cudnn, cuDNN's backward that adds
 * dQ up with atomics: there it says how many values differed, which shows the check can fail. */
static void test_attention_repeats(void) {
  enum { RB = 4, RT = 1024, RC = 768, RNH = 12 };
  size_t nq = (size_t)RB * RT * 3 * RC, no = (size_t)RB * RT * RC, nl = (size_t)RB * RNH * RT;
  float *qkv = randv(nq, 1.0f), *dout = randv(no, 1.0f);
  void *d_qkv = upa(qkv, nq), *d_dout = upa(dout, no);
  void *d_out = colo_pool_alloc(dpool, no * asz, "test tensor");
  float *d_lse = colo_pool_alloc(dpool, nl * sizeof(float), "test tensor");
  void *d_dq[2], *h_dq[2];
  gpu->attention_fwd(d_out, d_lse, d_qkv, RB, RT, RC, RNH, NULL);
  for (int r = 0; r < 2; r++) {
    d_dq[r] = colo_pool_alloc(dpool, nq * asz, "test tensor");
    gpu->attention_bwd(d_dq[r], d_dout, d_qkv, d_out, d_lse, RB, RT, RC, RNH, NULL);
    h_dq[r] = malloc(nq * asz);
    gpu->to_host(h_dq[r], d_dq[r], nq * asz);
  }
  size_t differ = bits_differ(h_dq[0], h_dq[1], nq, asz), nonfinite = 0;
  float *f = malloc(nq * sizeof *f);
  colo_dtype_to_float(f, h_dq[0], nq, dt);
  for (size_t i = 0; i < nq; i++)
    nonfinite += !isfinite(f[i]);
  const char *att = getenv("COLO_CUDA_ATTENTION");
  if (att && !strcmp(att, "cudnn")) {
    printf("INFO: %s: %zu of %zu values differ between two runs (cuDNN's backward adds dQ with "
           "atomics)\n",
           named("attention_bwd twice, B 4 T 1024"), differ, nq);
  } else {
    checks++;
    if (differ || nonfinite) {
      failures++;
      printf("FAIL %s: %zu of %zu values differ between two runs, %zu not finite\n",
             named("attention_bwd twice, the same bits, B 4 T 1024"), differ, nq, nonfinite);
    } else {
      printf("PASS %s\n", named("attention_bwd twice, the same bits, B 4 T 1024"));
    }
  }
  colo_pool_free(dpool, d_qkv), colo_pool_free(dpool, d_dout), colo_pool_free(dpool, d_out);
  colo_pool_free(dpool, d_lse), colo_pool_free(dpool, d_dq[0]), colo_pool_free(dpool, d_dq[1]);
  free(qkv), free(dout), free(h_dq[0]), free(h_dq[1]), free(f);
}

/* Rows whose target is -1 (a loss mask leaves them out) in d, n rows of V in the storage type:
 * each must have a loss of 0 in losses (when given) and a gradient of exact zeros. Frees
 * nothing. */
static void check_left_out(const char *what, const void *d, const float *d_losses, const int *tg,
                           int n, int V) {
  size_t nl = (size_t)n * V;
  void *hd = malloc(nl * asz);
  float *h = malloc(nl * sizeof *h), *l = malloc((size_t)n * sizeof *l);
  gpu->to_host(hd, d, nl * asz);
  colo_dtype_to_float(h, hd, nl, dt);
  if (d_losses)
    gpu->to_host(l, d_losses, (size_t)n * sizeof *l);
  int bad = 0, rows = 0;
  for (int i = 0; i < n; i++) {
    if (tg[i] >= 0)
      continue;
    rows++;
    bad += d_losses && l[i] != 0.0f;
    for (int v = 0; v < V; v++)
      bad += h[(size_t)i * V + v] != 0.0f;
  }
  checks++;
  failures += bad > 0 || rows == 0;
  printf("%s %-48s %d rows, %d values not zero\n", bad || !rows ? "FAIL" : "PASS", what, rows, bad);
  free(hd), free(h), free(l);
}

static void test_losses(double tol) {
  int tg[N];
  for (int i = 0; i < N; i++) /* every fifth left out, as a loss mask's prompts are */
    tg[i] = i % 5 == 4 ? -1 : (int)(colo_rng_u64(&rng) % V);
  size_t nl = (size_t)N * V;
  float *logits = randv(nl, 3.0f), *losses = malloc(N * sizeof(float));
  void *probs = hact(logits, nl);
  int *d_tg = up(tg, N, sizeof(int));
  void *d_probs = upa(logits, nl);
  float *d_losses = upf(logits, N);
  cpu->crossentropy_fwd(losses, probs, probs, tg, N, V); /* in place, as the model calls it */
  gpu->crossentropy_fwd(d_losses, d_probs, d_probs, d_tg, N, V);
  check(named("crossentropy_fwd losses (fp32)"), d_losses, losses, N, 1e-5);
  void *p_gpu = up(probs, nl, asz); /* the CPU's probabilities for the backward on both sides */
  check_a(named("crossentropy_fwd probabilities (in place)"), d_probs, probs, nl, tol);
  cpu->crossentropy_bwd(probs, probs, tg, 0.125f, N, V);
  gpu->crossentropy_bwd(p_gpu, p_gpu, d_tg, 0.125f, N, V);
  check_left_out(named("crossentropy_bwd: targets -1 left out"), p_gpu, NULL, tg, N, V);
  check_a(named("crossentropy_bwd (in place)"), p_gpu, probs, nl, dt ? 0.0 : 1e-6);
  /* both at once, as a training step calls them */
  void *fused = hact(logits, nl), *d_fused = upa(logits, nl);
  float *d_fl = upf(logits, N);
  cpu->crossentropy_fused(losses, fused, tg, 0.125f, N, V);
  gpu->crossentropy_fused(d_fl, d_fused, d_tg, 0.125f, N, V);
  check_left_out(named("crossentropy_fused: targets -1 left out"), d_fused, d_fl, tg, N, V);
  check(named("crossentropy_fused losses (fp32)"), d_fl, losses, N, 1e-5);
  check_a(named("crossentropy_fused gradient (in place)"), d_fused, fused, nl, dt ? tol : 1e-5);
  free(fused);
  {
    /* rows longer than a block's shared memory (227 KiB on an H100: 120,003 values of 16 bits
     * are 234 KiB), which the GPU reads three times rather than keep; an odd length, so one
     * value at a time */
    enum { WN = 6, WV = 120003 };
    int wtg[WN] = {0, WV - 1, -1, 77777, 3, 119999};
    size_t wl = (size_t)WN * WV;
    colo_rng_t keep = rng; /* the checks after this one get the inputs they had before it */
    float *wlog = randv(wl, 3.0f), *wloss = malloc(WN * sizeof(float));
    rng = keep;
    void *h_w = hact(wlog, wl), *d_w = upa(wlog, wl);
    int *d_wtg = up(wtg, WN, sizeof(int));
    float *d_wl = upf(wlog, WN);
    cpu->crossentropy_fused(wloss, h_w, wtg, 0.125f, WN, WV);
    gpu->crossentropy_fused(d_wl, d_w, d_wtg, 0.125f, WN, WV);
    /* sums of 120,003 terms in another order: √n·2⁻²⁴ ≈ 2e-5 of the sum (an H200 gave 1.0e-5 on
     * the losses, 1.8e-5 on the fp32 gradient) */
    check(named("crossentropy_fused losses, rows of 120003"), d_wl, wloss, WN, 5e-5);
    check_a(named("crossentropy_fused gradient, rows of 120003"), d_w, h_w, wl, dt ? tol : 5e-5);
    colo_pool_free(dpool, d_wtg);
    free(wlog), free(wloss), free(h_w);
  }
  /* vocab-parallel pieces over a shard of 400 columns starting at 300 */
  int Vl = 400, v0 = 300;
  size_t ns = (size_t)N * Vl;
  float *shard = malloc(ns * sizeof *shard);
  for (int n = 0; n < N; n++)
    memcpy(shard + (size_t)n * Vl, logits + (size_t)n * V + v0, (size_t)Vl * sizeof(float));
  void *h_shard = hact(shard, ns), *dsh = calloc(ns, asz);
  float *rmax = malloc(N * sizeof(float)), *sum = malloc(N * sizeof(float)),
        *tl = malloc(N * sizeof(float));
  void *d_shard = upa(shard, ns), *d_dsh = up(dsh, ns, asz);
  float *d_rmax = upf(shard, N), *d_sum = upf(shard, N), *d_tl = upf(shard, N);
  cpu->vocab_max(rmax, h_shard, N, Vl);
  gpu->vocab_max(d_rmax, d_shard, N, Vl);
  check(named("vocab_max"), d_rmax, rmax, N, 0.0);
  float *d_gmax = upf(rmax, N);
  cpu->vocab_sumexp(sum, h_shard, rmax, N, Vl);
  gpu->vocab_sumexp(d_sum, d_shard, d_gmax, N, Vl);
  check(named("vocab_sumexp"), d_sum, sum, N, 1e-5);
  cpu->vocab_target(tl, h_shard, tg, v0, N, Vl);
  gpu->vocab_target(d_tl, d_shard, d_tg, v0, N, Vl);
  check(named("vocab_target (0 outside the shard)"), d_tl, tl, N, 0.0);
  float *d_gsum = upf(sum, N);
  cpu->vocab_ce_bwd(dsh, h_shard, rmax, sum, tg, v0, 0.5f, N, Vl);
  gpu->vocab_ce_bwd(d_dsh, d_shard, d_gmax, d_gsum, d_tg, v0, 0.5f, N, Vl);
  check_left_out(named("vocab_ce_bwd: targets -1 left out"), d_dsh, NULL, tg, N, Vl);
  check_a(named("vocab_ce_bwd"), d_dsh, dsh, ns, dt ? tol : 1e-5);
  colo_pool_free(dpool, d_tg), colo_pool_free(dpool, d_shard), colo_pool_free(dpool, d_gmax);
  colo_pool_free(dpool, d_gsum);
  free(logits), free(probs), free(losses), free(shard), free(h_shard), free(rmax), free(sum);
  free(tl), free(dsh);
}

static void test_optimizer(void) {
  size_t n = 1000003;
  float *p = randv(n, 1.0f), *g = randv(n, 1.0f), *m = randv(n, 0.1f), *v = randv(n, 0.1f);
  for (size_t i = 0; i < n; i++)
    v[i] = v[i] * v[i]; /* second moments are not negative */
  float *d_p = upf(p, n), *d_g = upf(g, n), *d_m = upf(m, n), *d_v = upf(v, n);
  /* the same arrays one value past a 16-byte boundary, where the GPU takes its single-value
   * kernel, not its 16-byte one: the two must give the same bits */
  float *e[4], *src[4] = {p, g, m, v};
  for (int k = 0; k < 4; k++) {
    e[k] = colo_pool_alloc(dpool, (n + 1) * sizeof(float), "test tensor");
    gpu->from_host(e[k] + 1, src[k], n * sizeof(float));
  }
  for (int t = 1; t <= 3; t++) {
    cpu->adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    gpu->adamw(d_p, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    gpu->adamw(e[0] + 1, e[1] + 1, e[2] + 1, e[3] + 1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
  }
  check_same_bits("adamw aligned and not: the same bits", d_p, e[0] + 1, n, sizeof(float));
  for (int k = 0; k < 4; k++)
    colo_pool_free(dpool, e[k]);
  check("adamw parameters, 3 steps", d_p, p, n, 1e-6);
  check("adamw first moments", d_m, m, n, 1e-6);
  check("adamw second moments", d_v, v, n, 1e-6);
  double a = cpu->sumsq(g, n), b = gpu->sumsq(d_g, n);
  verdict("sumsq (double), and the same twice", fabs(a - b) / a + (b != gpu->sumsq(d_g, n)), 1e-12,
          isfinite(b));
  a = cpu->sumsq(g + 1, n - 2), b = gpu->sumsq(d_g + 1, n - 2); /* a head and a tail of scalars */
  verdict("sumsq (double) from 4 bytes past a 16-byte boundary", fabs(a - b) / a, 1e-12,
          isfinite(b));
  colo_pool_free(dpool, d_g);
  free(p), free(g), free(m), free(v);
}

/* Muon's three entries: the momentum and the update elementwise (fp32 always), the Newton–Schulz
 * orthogonalization of a wide block and of a tall one inside wider rows (the columns past the
 * block untouched), on fp32 products, or on TF32 tensor cores in a 16-bit run (tol) */
static void test_muon(double tol) {
  size_t n = 200003;
  float *g = randv(n, 1.0f), *m = randv(n, 0.1f), *u = calloc(n, sizeof *u);
  float *d_g = upf(g, n), *d_m = upf(m, n), *d_u = upf(u, n);
  for (int t = 1; t <= 3; t++) {
    cpu->muon_momentum(u, g, m, n, 0.95f, 0.5f);
    gpu->muon_momentum(d_u, d_g, d_m, n, 0.95f, 0.5f);
  }
  check("muon_momentum momentum, 3 steps", d_m, m, n, 1e-6);
  check("muon_momentum (Nesterov) update", d_u, u, n, 1e-6);
  float *p = randv(n, 1.0f), *d_p = upf(p, n);
  d_u = upf(u, n);
  cpu->muon_apply(p, u, n, 2e-2f, 0.1f);
  gpu->muon_apply(d_p, d_u, n, 2e-2f, 0.1f);
  check("muon_apply", d_p, p, n, 1e-6);
  colo_pool_free(dpool, d_u);
  static const struct {
    int rows, cols, ld;
    const char *what;
  } shape[] = {{96, 300, 320, "muon_orth 96 x 300 of rows of 320"},
               {200, 64, 192, "muon_orth 200 x 64 (tall) of rows of 192"}};
  for (int k = 0; k < 2; k++) {
    int r = shape[k].rows, c = shape[k].cols, ld = shape[k].ld, s = r < c ? r : c;
    size_t nx = (size_t)r * ld, nw = 2 * (size_t)r * c + 2 * (size_t)s * s;
    float *x = randv(nx, 1.0f), *w = calloc(nw, sizeof *w);
    float *d_x = upf(x, nx), *d_w = upf(w, nw);
    cpu->muon_orth(x, w, r, c, ld, 5, 1e-7f, 0.2f * sqrtf((float)(r > c ? r : c)));
    gpu->muon_orth(d_x, d_w, r, c, ld, 5, 1e-7f, 0.2f * sqrtf((float)(r > c ? r : c)));
    colo_pool_free(dpool, d_w);
    char what[96];
    snprintf(what, sizeof what, "%s%s", shape[k].what, tag);
    check(what, d_x, x, nx, tol);
    free(x), free(w);
  }
  /* a column block of a tensor-parallel share, as rows (Muon's gather), into wider rows: the
   * CPU's against the definition, the device's against the CPU's, padding untouched */
  int tr = 70, tc = 50, sld = 64, dld = 80;
  size_t ns = (size_t)tr * sld, nd = (size_t)tc * dld;
  float *src = randv(ns, 1.0f), *dst = randv(nd, 1.0f), *want = malloc(nd * sizeof *want);
  memcpy(want, dst, nd * sizeof *want);
  for (int r = 0; r < tr; r++)
    for (int c = 0; c < tc; c++)
      want[(size_t)c * dld + r] = src[(size_t)r * sld + c];
  float *d_src = upf(src, ns), *d_dst = upf(dst, nd);
  cpu->muon_transpose(dst, dld, src, sld, tr, tc);
  gpu->muon_transpose(d_dst, dld, d_src, sld, tr, tc);
  double worst = 0.0;
  for (size_t i = 0; i < nd; i++)
    worst = fmax(worst, fabs((double)dst[i] - want[i]));
  verdict("muon_transpose on the CPU: 70 x 50 of rows of 64 into rows of 80", worst, 0.0, 1);
  check("muon_transpose 70 x 50 of rows of 64 into rows of 80", d_dst, dst, nd, 0.0);
  colo_pool_free(dpool, d_src);
  free(src), free(dst), free(want);
  colo_pool_free(dpool, d_g);
  free(g), free(m), free(u), free(p);
}

/* copy2d (context parallelism's packing): 37 rows of 90 bytes from rows of 130 into rows of
 * 100, on the CPU against the definition and on the device against the CPU, the gaps untouched;
 * odd offsets and widths, as 16-bit heads give */
static void test_copy2d(void) {
  size_t rows = 37, width = 90, sp = 130, dpitch = 100, ns = rows * sp + 3, nd = rows * dpitch;
  unsigned char *src = malloc(ns), *dst = malloc(nd), *want = malloc(nd), *got = malloc(nd);
  for (size_t i = 0; i < ns; i++)
    src[i] = (unsigned char)(i * 7 + 1);
  for (size_t i = 0; i < nd; i++)
    dst[i] = want[i] = (unsigned char)(i * 13 + 5);
  for (size_t r = 0; r < rows; r++)
    memcpy(want + r * dpitch, src + 3 + r * sp, width);
  unsigned char *d_src = up(src, ns, 1), *d_dst = up(dst, nd, 1);
  cpu->copy2d(dst, dpitch, src + 3, sp, width, rows);
  gpu->copy2d(d_dst, dpitch, d_src + 3, sp, width, rows);
  gpu->to_host(got, d_dst, nd);
  verdict("copy2d on the CPU: 37 rows of 90 bytes, pitches 130 and 100", memcmp(dst, want, nd) != 0,
          0.0, 1);
  verdict("copy2d 37 rows of 90 bytes, pitches 130 and 100", memcmp(got, want, nd) != 0, 0.0, 1);
  colo_pool_free(dpool, d_src);
  colo_pool_free(dpool, d_dst);
  free(src), free(dst), free(want), free(got);
}

/* The whole model on both sides from the same initial weights (recomputing on the GPU side): the
 * loss, every gradient, and the loss after two AdamW steps. Three heads of 32: the GPU's fused
 * attention in 16-bit storage. */
/* LLAMA's operations: RMSNorm, the rotary positions (both ways), SwiGLU */
static void test_llama_ops(double tol) {
  size_t n = (size_t)N * C;
  float *inp = randv(n, 2.0f), *w = randv(C, 1.0f);
  void *h_inp = hact(inp, n), *out = calloc(n, asz);
  float *rstd = malloc(N * sizeof *rstd);
  void *d_inp = upa(inp, n), *d_out = up(out, n, asz);
  float *d_w = upf(w, C), *d_rstd = upf(inp, N);
  cpu->rmsnorm_fwd(out, rstd, h_inp, w, N, C, 1e-6f); /* Qwen2's eps */
  gpu->rmsnorm_fwd(d_out, d_rstd, d_inp, d_w, N, C, 1e-6f);
  check_a(named("rmsnorm_fwd out"), d_out, out, n, tol);
  check(named("rmsnorm_fwd rstd (fp32)"), d_rstd, rstd, N, 1e-5);
  d_rstd = upf(rstd, N); /* the backward uses the CPU's saved statistics on both sides */
  float *dout = randv(n, 1.0f), *dinp = randv(n, 1.0f), *dw = randv(C, 1.0f);
  void *h_dout = hact(dout, n), *h_dinp = hact(dinp, n);
  void *d_dout = upa(dout, n), *d_dinp = upa(dinp, n);
  float *d_dw = upf(dw, C);
  cpu->rmsnorm_bwd(h_dinp, dw, h_dout, h_inp, w, rstd, N, C);
  gpu->rmsnorm_bwd(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
  check_a(named("rmsnorm_bwd dinp (added to)"), d_dinp, h_dinp, n, tol);
  check(named("rmsnorm_bwd dw (fp32)"), d_dw, dw, C, 1e-5);
  colo_pool_free(dpool, d_inp), colo_pool_free(dpool, d_w), colo_pool_free(dpool, d_rstd);
  colo_pool_free(dpool, d_dout);
  free(inp), free(w), free(h_inp), free(out), free(rstd), free(dout), free(dinp), free(dw);
  free(h_dout), free(h_dinp);
  /* QK-norm on rows of C + 2·48 (4 query heads of 24, 2 key heads, the values untouched): the
   * heads normalized in place, their raw copy; the backward in place, the weights added to */
  {
    int W = C + 2 * 48, NQ = 4, NK = 2, hs = 24, nh = NQ + NK;
    size_t nx = (size_t)N * W, nr = (size_t)N * nh * hs;
    float *x = randv(nx, 2.0f), *wq = randv(hs, 1.0f), *wk = randv(hs, 1.0f);
    void *h_x = hact(x, nx), *h_raw = calloc(nr, asz), *d_x = upa(x, nx),
         *d_raw = up(h_raw, nr, asz);
    float *qrstd = malloc((size_t)N * nh * sizeof *qrstd), *d_qrstd = upf(x, (size_t)N * nh);
    float *d_wq = upf(wq, hs), *d_wk = upf(wk, hs);
    cpu->qk_norm_fwd(h_x, h_raw, qrstd, wq, wk, N, W, NQ, NK, hs, 1e-6f);
    gpu->qk_norm_fwd(d_x, d_raw, d_qrstd, d_wq, d_wk, N, W, NQ, NK, hs, 1e-6f);
    check_a(named("qk_norm_fwd x (values untouched)"), d_x, h_x, nx, tol);
    check_a(named("qk_norm_fwd raw (copies: exact)"), d_raw, h_raw, nr, 0.0);
    check(named("qk_norm_fwd rstd (fp32)"), d_qrstd, qrstd, (size_t)N * nh, 1e-5);
    float *dx = randv(nx, 1.0f), *dwq = randv(hs, 1.0f), *dwk = randv(hs, 1.0f);
    void *h_dx = hact(dx, nx), *d_dx = upa(dx, nx);
    d_raw = up(h_raw, nr, asz);
    d_qrstd = upf(qrstd, (size_t)N * nh);
    float *d_dwq = upf(dwq, hs), *d_dwk = upf(dwk, hs);
    cpu->qk_norm_bwd(h_dx, dwq, dwk, h_raw, qrstd, wq, wk, N, W, NQ, NK, hs);
    gpu->qk_norm_bwd(d_dx, d_dwq, d_dwk, d_raw, d_qrstd, d_wq, d_wk, N, W, NQ, NK, hs);
    check_a(named("qk_norm_bwd dx (in place)"), d_dx, h_dx, nx, tol);
    check(named("qk_norm_bwd dwq (added to, fp32)"), d_dwq, dwq, hs, 1e-5);
    check(named("qk_norm_bwd dwk (added to, fp32)"), d_dwk, dwk, hs, 1e-5);
    colo_pool_free(dpool, d_raw), colo_pool_free(dpool, d_qrstd);
    colo_pool_free(dpool, d_wq), colo_pool_free(dpool, d_wk);
    free(x), free(wq), free(wk), free(h_x), free(h_raw), free(qrstd), free(dx), free(dwq);
    free(dwk), free(h_dx);
  }
  /* rotary positions on qkv[B][T][3C], from position 5, and back */
  size_t nq = (size_t)N * 3 * C;
  float *q = randv(nq, 1.0f);
  void *h_q = hact(q, nq), *d_q = upa(q, nq);
  float freq[64]; /* head size C/NH = 24; with Llama 3's rescaling, which moves every band */
  colo_rope_freqs(C / NH, 10000.0f, 8.0f, 1.0f, 4.0f, 64, freq);
  float *d_freq = upf(freq, (size_t)C / NH / 2);
  cpu->rope(h_q, B, T, C, NH, 5, freq, 1.0f, 1, NULL);
  gpu->rope(d_q, B, T, C, NH, 5, d_freq, 1.0f, 1, NULL);
  void *d_q2 = up(h_q, nq, asz); /* the CPU's rotated values, rotated back on both sides */
  check_a(named("rope forward"), d_q, h_q, nq, tol);
  cpu->rope(h_q, B, T, C, NH, 5, freq, 1.0f, -1, NULL);
  gpu->rope(d_q2, B, T, C, NH, 5, d_freq, 1.0f, -1, NULL);
  check_a(named("rope back"), d_q2, h_q, nq, tol);
  /* documents: each token at its place in its document */
  int *pos = doc_positions(B, T), *d_pos = up(pos, N, sizeof(int));
  d_q = up(h_q, nq, asz);
  cpu->rope(h_q, B, T, C, NH, 0, freq, 1.0f, 1, pos);
  gpu->rope(d_q, B, T, C, NH, 0, d_freq, 1.0f, 1, d_pos);
  check_a(named("rope forward (documents)"), d_q, h_q, nq, tol);
  d_q = up(h_q, nq, asz); /* scaled (LongRoPE's attention factor), forward and back */
  cpu->rope(h_q, B, T, C, NH, 3, freq, 1.19f, 1, NULL);
  gpu->rope(d_q, B, T, C, NH, 3, d_freq, 1.19f, 1, NULL);
  check_a(named("rope forward, scaled by 1.19"), d_q, h_q, nq, tol);
  d_q = up(h_q, nq, asz);
  cpu->rope(h_q, B, T, C, NH, 3, freq, 1.19f, -1, NULL);
  gpu->rope(d_q, B, T, C, NH, 3, d_freq, 1.19f, -1, NULL);
  check_a(named("rope back, scaled by 1.19"), d_q, h_q, nq, tol);
  colo_pool_free(dpool, d_pos);
  free(pos);
  colo_pool_free(dpool, d_freq);
  free(q), free(h_q);
  /* grouped-query attention by repetition: NH = 4 query heads of 24, 2 key and value heads */
  size_t nw = (size_t)N * (C + 2 * 48), n3 = (size_t)N * 3 * C;
  float *kv = randv(nw, 1.0f), *rep = randv(n3, 1.0f), *red = randv(nw, 1.0f);
  void *h_kv = hact(kv, nw), *h_rep = hact(rep, n3), *h_red = hact(red, nw);
  void *d_kv = upa(kv, nw), *d_rep = upa(rep, n3), *d_red = upa(red, nw);
  cpu->kv_expand(h_rep, h_kv, N, C, 4, 2);
  gpu->kv_expand(d_rep, d_kv, N, C, 4, 2);
  check_a(named("kv_expand (copies: exact)"), d_rep, h_rep, n3, 0.0);
  d_rep = up(h_rep, n3, asz);
  cpu->kv_reduce(h_red, h_rep, N, C, 4, 2);
  gpu->kv_reduce(d_red, d_rep, N, C, 4, 2);
  check_a(named("kv_reduce (written)"), d_red, h_red, nw, tol);
  colo_pool_free(dpool, d_kv), colo_pool_free(dpool, d_rep);
  free(kv), free(rep), free(red), free(h_kv), free(h_rep), free(h_red);
  /* SwiGLU over pre[N][2H], H = C */
  size_t np = (size_t)N * 2 * C;
  float *pre = randv(np, 3.0f), *dy = randv(n, 1.0f), *dp = randv(np, 1.0f);
  void *h_pre = hact(pre, np), *y = calloc(n, asz), *h_dy = hact(dy, n), *h_dp = hact(dp, np);
  void *d_pre = upa(pre, np), *d_y = up(y, n, asz), *d_dy = upa(dy, n), *d_dp = upa(dp, np);
  cpu->swiglu_fwd(y, h_pre, N, C);
  gpu->swiglu_fwd(d_y, d_pre, N, C);
  check_a(named("swiglu_fwd"), d_y, y, n, tol);
  cpu->swiglu_bwd(h_dp, h_pre, h_dy, N, C);
  gpu->swiglu_bwd(d_dp, d_pre, d_dy, N, C);
  check_a(named("swiglu_bwd (written)"), d_dp, h_dp, np, tol);
  colo_pool_free(dpool, d_pre), colo_pool_free(dpool, d_dy);
  free(pre), free(dy), free(dp), free(h_pre), free(y), free(h_dy), free(h_dp);
}

static void test_model(double loss_tol, double grad_tol, int arch, int n_kv_head, int docs) {
  /* with grouped-query attention, also an untied head and RMSNorm eps, and Qwen2's q, k and v
   * biases with a sliding window of 24 (whole windows) or Qwen3's QK-norm with heads of 40 on 96
   * (documents) */
  colo_gpt_config_t cfg = {V,
                           T,
                           2,
                           3,
                           C,
                           .arch = arch,
                           .n_kv_head = n_kv_head,
                           .untied_head = n_kv_head != 0,
                           .qkv_bias = n_kv_head != 0 && !docs,
                           .qk_norm = n_kv_head != 0 && docs,
                           .head_dim = n_kv_head && docs ? 40 : 0, /* wider than C/3 = 32 */
                           .sliding_window = n_kv_head && !docs ? 24 : 0,
                           .norm_eps = n_kv_head ? 1e-6f : 0.0f};
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
  verdict(named("initial weights identical"), memcmp(w, colo_gpt_params(mc), np * sizeof *w) != 0,
          0.0, 1);
  int in[N], tg[N];
  for (int i = 0; i < N; i++) {
    in[i] = (int)(colo_rng_u64(&rng) % V);
    tg[i] = (int)(colo_rng_u64(&rng) % V);
    if (docs && i % 23 == 9) /* documents: token 0 begins one */
      in[i] = 0;
  }
  if (docs && (colo_gpt_set_documents(mc, 0, err, sizeof err) < 0 ||
               colo_gpt_set_documents(mg, 0, err, sizeof err) < 0)) {
    printf("FAIL documents: %s\n", err);
    failures++;
  }
  float *mom[2][2] = {
      {colo_pool_alloc(hp, np * sizeof(float), "m"), colo_pool_alloc(hp, np * sizeof(float), "v")},
      {colo_pool_alloc(dpool, np * sizeof(float), "m"),
       colo_pool_alloc(dpool, np * sizeof(float), "v")}};
  for (int step = 0; step < 3; step++) {
    colo_gpt_zero_grad(mc);
    colo_gpt_zero_grad(mg);
    float lc = colo_gpt_forward(mc, in, tg, B, T), lg = colo_gpt_forward(mg, in, tg, B, T);
    char what[160];
    snprintf(what, sizeof what, "%s%s%s loss, step %d: cpu %.6f gpu %.6f", colo_gpt_arch_name(arch),
             !n_kv_head ? ""
             : docs     ? " (1 key head, untied, QK-norm, heads of 40)"
                        : " (1 key head, untied, q, k, v biases, window of 24)",
             docs ? " (documents)" : "", step, (double)lc, (double)lg);
    verdict(named(what), fabs((double)lc - (double)lg) / fabs((double)lc), loss_tol, isfinite(lg));
    colo_gpt_backward(mc, 1.0f);
    colo_gpt_backward(mg, 1.0f);
    if (step == 0) {
      size_t nt;
      const colo_param_t *tab = colo_gpt_params_table(mc, &nt);
      for (size_t i = 0; i < nt; i++) {
        float *d = colo_pool_alloc(dpool, tab[i].numel * sizeof(float), "grad copy");
        gpu->copy(d, colo_gpt_grads(mg) + tab[i].offset, tab[i].numel * sizeof(float));
        snprintf(what, sizeof what, "grad %s", tab[i].name);
        check(named(what), d, colo_gpt_grads(mc) + tab[i].offset, tab[i].numel, grad_tol);
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
  verdict("device pool: capacity, zeroed, peak", !ok, 0.0, 1);
}

int main(int argc, char **argv) {
  char err[256];
  self = argc > 1 && !strcmp(argv[1], "--self");
  if (argc > 1 && !self) {
    fprintf(stderr, "usage: test_cuda [--self]\n");
    return 2;
  }
  exact = self || colo_backend_cuda_emulated();
  if (!self && !colo_backend_cuda_built() && !colo_backend_cuda_emulated()) {
    printf("SKIP: this build has no CUDA backend\n");
    return 77;
  }
  /* each precision: its CUDA table, the CPU table it is compared with, the tolerance of its
   * operations, of the model's loss and of the model's gradients */
  static const struct {
    int math;
    double tol, loss_tol, grad_tol;
    const char *tag;
  } modes[] = {{COLO_MATH_FP32, 1e-5, 1e-5, 1e-4, ""},
               {COLO_MATH_TF32, 1e-3, 1e-3, 1e-2, " (tf32)"},
               {COLO_MATH_FP16, 3e-3, 3e-3, 3e-2, " (fp16)"},
               {COLO_MATH_BF16, 1e-2, 1e-2, 1e-1, " (bf16)"}};
  colo_backend_cpu_set_threads(0);
  colo_rng_seed(&rng, 7);
  /* attention's scratch for a group of (sequence, head) pairs: 72 KiB, so that the test's 16
   * pairs of T = 64 run in groups of two (fp32) or three (16-bit), some spanning two sequences
   * (the default 24 MiB would take them all at once) */
  setenv("COLO_CUDA_ATTENTION_MIB", "0.0703", 0);
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    if (self && modes[i].math == COLO_MATH_TF32)
      continue; /* the CPU has no TF32 */
    dt = colo_math_dtype(modes[i].math);
    tf32 = modes[i].math == COLO_MATH_TF32;
    asz = colo_dtype_size(dt);
    tag = modes[i].tag;
    cpu = colo_backend_cpu_dtype(dt);
    gpu = self ? cpu : colo_backend_cuda(0, modes[i].math, err, sizeof err);
    if (!gpu) {
      printf("SKIP: %s\n", err);
      return 77;
    }
    if (gpu->act_dtype != dt) {
      printf("FAIL: the %s table stores %s\n", gpu->name, colo_dtype_name(gpu->act_dtype));
      return 1;
    }
    dpool = colo_pool_create_with("gpu", 0, gpu->allocator);
    if (i == 0) {
      test_pool();
      test_optimizer();
      test_copy2d();
    }
    if (modes[i].math == COLO_MATH_FP32 || modes[i].math == COLO_MATH_BF16)
      test_muon(modes[i].math == COLO_MATH_FP32 ? 1e-4 : 2e-2); /* 16-bit: TF32 products */
    test_matmul(modes[i].tol);
    for (int docs = 0; docs < 3; docs++) {
      test_attention(modes[i].tol, B, T, C, NH, docs); /* head size 24 */
      test_attention(modes[i].tol, 2, 100, 128, 2, docs);
      test_attention(modes[i].tol, 3, 64, 64, 2, docs);
      test_attention(modes[i].tol, 1, 130, 256, 2, docs);
    }
    if (asz == 2 && !self && !colo_backend_cuda_emulated())
      test_attention_repeats();            /* on a GPU, where the fused kernels and cuDNN's run */
    if (modes[i].math != COLO_MATH_TF32) { /* TF32 changes the products only */
      test_encoder();
      test_layernorm_gelu(modes[i].tol);
      test_llama_ops(modes[i].tol);
      test_dora(modes[i].tol);
      test_losses(modes[i].tol);
    }
    test_model(modes[i].loss_tol, modes[i].grad_tol, COLO_ARCH_GPT2, 0, 0);
    test_model(modes[i].loss_tol, modes[i].grad_tol, COLO_ARCH_LLAMA, 0, 0);
    test_model(modes[i].loss_tol, modes[i].grad_tol, COLO_ARCH_LLAMA, 1, 0);
    test_model(modes[i].loss_tol, modes[i].grad_tol, COLO_ARCH_GPT2, 0, 1);
    test_model(modes[i].loss_tol, modes[i].grad_tol, COLO_ARCH_LLAMA, 1, 1);
    colo_pool_destroy(dpool);
  }
  printf("%d checks, %d failed%s\n", checks, failures,
         self                           ? " (--self: the CPU tables in the GPU's place)"
         : colo_backend_cuda_emulated() ? " (COLO_CUDA_EMULATE=1: the CPU dressed as a GPU)"
                                        : "");
  return failures ? 1 : 0;
}
