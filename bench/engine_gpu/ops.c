/* bench/engine_gpu: the training step's operations one at a time, at one model's shapes, on the
 * GPU (or the CPU), for where a step's time goes without the profile's events between calls.
 * Each operation is called `iters` times in a row after a warm-up, then the backend's queue is
 * drained (a 4-byte to_host): the time a call is the wall time over the calls, as a step's
 * queue of calls sees it. Per operation, one JSON line: its name, how many times a training step
 * makes it (no recomputation, one micro-batch), milliseconds a call, and the FLOPs (products,
 * attention) or bytes (the rest) of a call. A last line sums calls × time over the step: set
 * against the step's own time, the difference is what the step spends between operations
 * (launches, synchronisation, the host's work). ops_torch.py times PyTorch's kernels for the same
 * operations; run.sh sets the two side by side.
 *   engine_ops [--device cpu|gpu] [--precision fp32|bf16|fp16] [--n-layer L] [--n-head H]
 *              [--n-embd C] [--block-size T] [--batch-size B] [--vocab-size V] [--iters N]
 * Defaults: GPT-2 124M at B=8, T=1024, V=50304, bf16 on the GPU; 20 calls an operation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/pool.h"
#include "core/rng.h"

static const colo_backend_t *be;
static colo_pool_t *pool;
static colo_rng_t rng;
static size_t A; /* bytes an activation */
static int iters = 20;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* everything is kept to the end (a few GiB at GPT-2 124M's shapes), then freed */
static void *held[64];
static int nheld;

static void *dev(size_t bytes, const char *what) {
  void *p = nheld < 64 ? colo_pool_alloc(pool, bytes ? bytes : 1, what) : NULL;
  if (!p) {
    fprintf(stderr, "engine_ops: %s\n", nheld < 64 ? colo_pool_error(pool) : "too many tensors");
    exit(1);
  }
  return held[nheld++] = p;
}

/* n random values (normal, times scale) in the backend's memory: fp32, or activations */
static void *rnd(size_t n, float scale, int act, const char *what) {
  float *h = malloc(n * sizeof *h);
  void *hb = act ? malloc(n * A) : NULL;
  if (!h || (act && !hb)) {
    fprintf(stderr, "engine_ops: out of host memory for %s\n", what);
    exit(1);
  }
  for (size_t i = 0; i < n; i++)
    h[i] = scale * colo_rng_normal(&rng);
  void *d = dev(n * (act ? A : sizeof(float)), what);
  if (act) {
    colo_dtype_from_float(hb, h, n, be->act_dtype);
    be->from_host(d, hb, n * A);
  } else {
    be->from_host(d, h, n * sizeof(float));
  }
  free(h);
  free(hb);
  return d;
}

static float *sync_buf;

static void sync_all(void) {
  float x;
  be->to_host(&x, sync_buf, sizeof x);
}

/* OP(name, per_step, flops, bytes, call): the call `iters` times after two, timed */
static double total_ms;
#define OP(name, per_step, flops, bytes, call)                                                     \
  do {                                                                                             \
    for (int w_ = 0; w_ < 2; w_++)                                                                 \
      call;                                                                                        \
    sync_all();                                                                                    \
    double t0_ = now();                                                                            \
    for (int i_ = 0; i_ < iters; i_++)                                                             \
      call;                                                                                        \
    sync_all();                                                                                    \
    double ms_ = (now() - t0_) * 1e3 / iters;                                                      \
    total_ms += (per_step)*ms_;                                                                    \
    printf("{\"op\":\"%s\",\"per_step\":%d,\"ms\":%.5f,\"flops\":%.6g,\"bytes\":%.6g}\n", name,    \
           (int)(per_step), ms_, (double)(flops), (double)(bytes));                                \
    fflush(stdout);                                                                                \
  } while (0)

static int arg_int(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long x = strtol(v ? v : "", &end, 10);
  if (!v || *end || errno || x < 1 || x > 1000000000) {
    fprintf(stderr, "engine_ops: %s needs a positive integer, not '%s'\n", flag, v ? v : "");
    exit(2);
  }
  return (int)x;
}

static const char USAGE[] =
    "usage: engine_ops [--device cpu|gpu] [--precision fp32|bf16|fp16] [--n-layer L]\n"
    "                  [--n-head H] [--n-embd C] [--block-size T] [--batch-size B]\n"
    "                  [--vocab-size V] [--iters N]\n"
    "Times each operation of a training step at one model's shapes (GPT-2 124M, B=8, T=1024,\n"
    "V=50304 by default; bf16 on the GPU, fp32 on the CPU) and prints a JSON line for each.\n";

static int L = 12, NH = 12, C = 768, T = 1024, B = 8, V = 50304;

/* the variable an integer flag sets, or NULL */
static int *int_flag(const char *a) {
  static const struct {
    const char *flag;
    int *var;
  } flags[] = {{"--n-layer", &L},    {"--n-head", &NH},    {"--n-embd", &C},   {"--block-size", &T},
               {"--batch-size", &B}, {"--vocab-size", &V}, {"--iters", &iters}};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (!strcmp(a, flags[i].flag))
      return flags[i].var;
  return NULL;
}

int main(int argc, char **argv) {
  int gpu = 1, math = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(a, "--device") && v && (!strcmp(v, "cpu") || !strcmp(v, "gpu"))) {
      gpu = !strcmp(v, "gpu");
    } else if (!strcmp(a, "--precision") && v) {
      math = !strcmp(v, "fp32")   ? COLO_MATH_FP32
             : !strcmp(v, "bf16") ? COLO_MATH_BF16
             : !strcmp(v, "fp16") ? COLO_MATH_FP16
                                  : -2;
      if (math == -2) {
        fprintf(stderr, "engine_ops: --precision must be fp32, bf16 or fp16, not '%s'\n", v);
        return 2;
      }
    } else if (int_flag(a)) {
      *int_flag(a) = arg_int(a, v);
    } else {
      fprintf(stderr, "engine_ops: unknown or incomplete argument '%s'\n%s", a, USAGE);
      return 2;
    }
    i++;
  }
  if (C % NH) {
    fprintf(stderr, "engine_ops: --n-embd %d is not a multiple of --n-head %d\n", C, NH);
    return 2;
  }
  if (math < 0)
    math = gpu ? COLO_MATH_BF16 : COLO_MATH_FP32;
  char err[256];
  if (gpu) {
    if (!(be = colo_backend_cuda(0, math, err, sizeof err))) {
      fprintf(stderr, "engine_ops: %s\n", err);
      return 1;
    }
  } else {
    colo_backend_cpu_set_threads(0); /* as colo-train: OpenBLAS single-threaded under OpenMP */
    be = colo_backend_cpu_dtype(colo_math_dtype(math));
  }
  pool = colo_pool_create_with(be->name, 0, be->allocator);
  A = be->act_size;
  colo_rng_seed(&rng, 1);
  sync_buf = dev(sizeof(float), "sync");
  size_t N = (size_t)B * T, HS = (size_t)(C / NH), NC = N * C;
  printf(
      "{\"backend\":\"%s\",\"L\":%d,\"NH\":%d,\"C\":%d,\"T\":%d,\"B\":%d,\"V\":%d,\"iters\":%d}\n",
      be->name, L, NH, C, T, B, V, iters);

  /* a block's tensors: one set, reused by every call */
  void *x = rnd(NC, 1.0f, 1, "x"), *y = rnd(NC, 1.0f, 1, "y"), *dy = rnd(NC, 1.0f, 1, "dy");
  void *w_qkv = rnd((size_t)C * 3 * C, 0.02f, 1, "w_qkv"),
       *w_ap = rnd((size_t)C * C, 0.02f, 1, "w");
  void *w_fc = rnd((size_t)C * 4 * C, 0.02f, 1, "w_fc"),
       *w_fp = rnd((size_t)4 * C * C, 0.02f, 1, "w");
  float *b4 = rnd((size_t)4 * C, 0.02f, 0, "b"), *lnw = rnd((size_t)C, 1.0f, 0, "lnw");
  float *dw = dev((size_t)4 * C * C * sizeof(float), "dw"), *db = dev(4 * (size_t)C * 4, "db");
  float *mean = dev(N * sizeof(float), "mean"), *rstd = dev(N * sizeof(float), "rstd");
  void *qkv = dev(N * 3 * C * A, "qkv"), *att = dev(NC * A, "att"), *dqkv = dev(N * 3 * C * A, "d");
  void *pre = dev(N * 4 * C * A, "pre"), *gl = dev(N * 4 * C * A, "gelu");
  void *dpre = dev(N * 4 * C * A, "dpre"), *out = dev(NC * A, "out"), *dx = dev(NC * A, "dx");
  float *lse = dev((size_t)B * NH * T * sizeof(float), "lse");
  double mm = 2.0 * (double)N * C * C; /* FLOPs of a C×C product over the rows */
  double att_f = 2.0 * B * NH * (double)T * T * (double)HS; /* causal: half of 4·B·NH·T²·HS */

  /* forward, a block */
  OP("layernorm_fwd", 2 * L + 1, 0, 2.0 * NC * A,
     be->layernorm_fwd(out, mean, rstd, x, lnw, b4, (int)N, C));
  OP("matmul_fwd qkv", L, 3 * mm, 0, be->matmul_fwd(qkv, x, w_qkv, b4, (int)N, C, 3 * C));
  OP("attention_fwd", L, att_f, 0, be->attention_fwd(att, lse, qkv, B, T, C, NH, NULL));
  OP("matmul_fwd attproj", L, mm, 0, be->matmul_fwd(out, att, w_ap, b4, (int)N, C, C));
  OP("add", 2 * L, 0, 3.0 * NC * A, be->add(out, x, y, NC));
  OP("matmul_gelu_fwd fc", L, 4 * mm, 0,
     be->matmul_gelu_fwd(gl, pre, x, w_fc, b4, (int)N, C, 4 * C));
  OP("matmul_fwd fcproj", L, 4 * mm, 0, be->matmul_fwd(out, gl, w_fp, b4, (int)N, 4 * C, C));
  /* backward, a block */
  /* GELU's output is kept by the forward (session 51), made again only under train.recompute:
   * timed, not in the step's sum */
  OP("gelu_fwd (recomputation only)", 0, 0, 8.0 * NC * A, be->gelu_fwd(gl, pre, 4 * NC));
  OP("matmul_gelu_bwd fcproj", L, 8 * mm, 0,
     be->matmul_gelu_bwd(dpre, dw, db, dy, gl, w_fp, pre, (int)N, 4 * C, C));
  OP("matmul_bwd fc", L, 8 * mm, 0, be->matmul_bwd(dx, dw, db, dpre, x, w_fc, (int)N, C, 4 * C));
  OP("layernorm_bwd", 2 * L + 1, 0, 3.0 * NC * A,
     be->layernorm_bwd(dx, dw, db, dy, x, lnw, mean, rstd, (int)N, C));
  OP("matmul_bwd attproj", L, 2 * mm, 0, be->matmul_bwd(dx, dw, db, dy, att, w_ap, (int)N, C, C));
  OP("attention_bwd", L, 2.5 * att_f, 0,
     be->attention_bwd(dqkv, dy, qkv, att, lse, B, T, C, NH, NULL));
  OP("matmul_bwd qkv", L, 6 * mm, 0, be->matmul_bwd(dx, dw, db, dqkv, x, w_qkv, (int)N, C, 3 * C));

  /* the embedding and the head */
  int *tok = malloc(N * sizeof *tok);
  for (size_t i = 0; i < N; i++)
    tok[i] = (int)(colo_rng_u64(&rng) % (unsigned)V);
  int *dtok = dev(N * sizeof(int), "tokens");
  be->from_host(dtok, tok, N * sizeof(int));
  free(tok);
  float *wte = rnd((size_t)V * C, 0.02f, 0, "wte"), *wpe = rnd((size_t)T * C, 0.01f, 0, "wpe");
  float *dwte = dev((size_t)V * C * sizeof(float), "dwte");
  float *dwpe = dev((size_t)T * C * sizeof(float), "dwpe");
  void *wte_a = dev((size_t)V * C * A, "wte compute copy"), *logits = dev(N * (size_t)V * A, "lg");
  be->to_act(wte_a, wte, (size_t)V * C);
  OP("encoder_fwd", 1, 0, NC * A, be->encoder_fwd(out, dtok, wte, wpe, B, T, C, 0, V, NULL));
  OP("lmhead_fwd", 1, 2.0 * N * C * V, 0, be->lmhead_fwd(logits, x, wte_a, (int)N, C, V));
  OP("crossentropy_fused", 1, 0, 2.0 * N * V * A,
     be->crossentropy_fused(lse, logits, dtok, 1.0f / (float)N, (int)N, V));
  OP("lmhead_bwd", 1, 4.0 * N * C * V, 0, be->lmhead_bwd(dx, dwte, logits, x, wte_a, (int)N, C, V));
  OP("encoder_bwd", 1, 0, NC * A, be->encoder_bwd(dwte, dwpe, dy, dtok, B, T, C, 0, V, NULL));

  /* the parameters: GPT-2's tensors, in the model's order (embeddings, each block's twelve, the
   * final LayerNorm); AdamW is called once a run of neighbours that decay alike */
  size_t nt = 0, sizes[2 + 12 * 64 + 2];
  int decays[2 + 12 * 64 + 2];
  if (L > 64) {
    fprintf(stderr, "engine_ops: at most 64 layers\n");
    return 2;
  }
  size_t cc = (size_t)C;
  size_t blk[12] = {cc, cc, cc * 3 * cc, 3 * cc, cc * cc,     cc,
                    cc, cc, cc * 4 * cc, 4 * cc, 4 * cc * cc, cc};
  int blk_d[12] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0};
  sizes[nt] = (size_t)V * C, decays[nt++] = 1;
  sizes[nt] = (size_t)T * C, decays[nt++] = 1;
  for (int l = 0; l < L; l++)
    for (int k = 0; k < 12; k++)
      sizes[nt] = blk[k], decays[nt++] = blk_d[k];
  sizes[nt] = cc, decays[nt++] = 0;
  sizes[nt] = cc, decays[nt++] = 0;
  size_t phi = 0, mats = (size_t)V * C + (size_t)L * 12 * cc * cc;
  for (size_t i = 0; i < nt; i++)
    phi += sizes[i];
  size_t runs[2 + 12 * 64 + 2][2], nr = 0; /* offset, length */
  for (size_t i = 0, off = 0; i < nt; off += sizes[i], i++)
    if (nr && decays[i] == decays[i - 1])
      runs[nr - 1][1] += sizes[i];
    else
      runs[nr][0] = off, runs[nr][1] = sizes[i], nr++;
  float *p = dev(phi * sizeof(float), "params"), *g = rnd(phi, 1e-3f, 0, "grads");
  float *m = dev(phi * sizeof(float), "m"), *v = dev(phi * sizeof(float), "v");
  void *copies = dev(mats * A, "compute copies");
  char name[96];
  OP("to_act (the matrices' compute copies)", 1, 0, (4.0 + (double)A) * mats,
     be->to_act(copies, p, mats));
  OP("zero (the gradients)", 1, 0, 4.0 * phi, be->zero(g, phi * sizeof(float)));
  OP("sumsq (the gradients' norm)", 1, 0, 4.0 * phi, be->sumsq(g, phi));
  snprintf(name, sizeof name, "adamw (%zu tensors in %zu calls)", nt, nr);
  OP(
      name, 1, 0, 28.0 * phi, for (size_t r = 0; r < nr; r++) {
        size_t o = runs[r][0];
        be->adamw(p + o, g + o, m + o, v + o, runs[r][1], 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
      });
  printf("{\"op\":\"sum of the parts\",\"ms\":%.4f,\"params\":%zu}\n", total_ms, phi);
  for (int i = 0; i < nheld; i++)
    colo_pool_free(pool, held[i]);
  colo_pool_destroy(pool);
  return 0;
}
