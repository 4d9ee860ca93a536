/* cuDNN's fused attention (backend/cuda_cudnn.cu) planned without a GPU: for each shape and
 * storage type, the forward's and the backward's operation graphs are handed to cuDNN for an
 * H100 described by its properties (tests/data/cudnn_devprop_h100.json), and an engine must take
 * each graph and compile its kernels. A graph cuDNN's engines do not recognise as attention (an
 * operation missing, a transposed view wrong, a tensor of the wrong type) fails here, with
 * cuDNN's own words, on any machine with cuDNN installed; CI included. Then what the graphs
 * say is computed on the CPU, in fp32, operation by operation as cuDNN documents them (from the
 * record cuda_cudnn.cu keeps beside the descriptors), and compared with colo's CPU attention:
 * a wrong mask, scale, transposed view or gradient term fails here. What only a GPU can show,
 * that cuDNN's kernels compute what the graphs say, is test_cuda's under
 * COLO_CUDA_ATTENTION=cudnn.
 *
 * The properties are an H100 SXM5 80GB's published figures in the form cuDNN 9.19 reads (132
 * SMs, 50 MiB of L2, 227 KiB of shared memory a block may opt into, 1980 MHz, PCI id 0x2330;
 * deviceVer 900 is cuDNN's name for sm_90). `test_cudnn_plan --write-devprop FILE`, run on a GPU,
 * writes cuDNN's own description of that GPU, to check them against or replace them.
 *
 * Where no NVIDIA driver is installed cuDNN still needs libcuda.so.1 to be loadable: the
 * toolkit's stub (which answers every call with "this is a stub") is loaded in its place, so
 * that every step runs but the last, loading the compiled kernels onto a device. Exit 77
 * (skipped, one line why) where cuDNN or the stub is missing. */
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_common.cuh"

/* ---- the graphs' arithmetic on the CPU, in fp32, against colo's CPU attention ----
 * Each tensor is a view (shape, strides) of a float buffer: the caller's for its own tensors
 * (q, k, v at their columns of qkv, ...), one of its own for an intermediate; a reshape views
 * its input's buffer with other strides, as cuDNN's reshape of a virtual tensor does. Pointwise
 * operations broadcast dimensions of extent 1; a reduction sums (or takes the max) over the
 * dimensions its output has as 1. */
typedef struct {
  float *buf[64];
} views_t;

static int64_t offset_of(const cudnn_shadow_tensor_t *t, const int64_t i[4]) {
  int64_t o = 0;
  for (int k = 0; k < 4; k++)
    o += (t->dim[k] == 1 ? 0 : i[k]) * t->stride[k];
  return o;
}

static size_t span_of(const cudnn_shadow_tensor_t *t) {
  int64_t last = 0;
  for (int k = 0; k < 4; k++)
    last += (t->dim[k] - 1) * t->stride[k];
  return (size_t)last + 1;
}

#define FOR_EACH(t, i)                                                                             \
  for (i[0] = 0; i[0] < (t)->dim[0]; i[0]++)                                                       \
    for (i[1] = 0; i[1] < (t)->dim[1]; i[1]++)                                                     \
      for (i[2] = 0; i[2] < (t)->dim[2]; i[2]++)                                                   \
        for (i[3] = 0; i[3] < (t)->dim[3]; i[3]++)

/* 0, or −1 with why said: an operation or a mode this evaluator does not know */
static int evaluate(const cudnn_shadow_t *sh, views_t *v, char *why, size_t len) {
  for (int n = 0; n < sh->nop; n++) {
    const cudnn_shadow_op_t *op = &sh->op[n];
    const cudnn_shadow_tensor_t *y = &sh->t[op->out];
    const cudnn_shadow_tensor_t *a = op->in[0] >= 0 ? &sh->t[op->in[0]] : NULL;
    const cudnn_shadow_tensor_t *b = op->in[1] >= 0 ? &sh->t[op->in[1]] : NULL;
    const cudnn_shadow_tensor_t *c = op->in[2] >= 0 ? &sh->t[op->in[2]] : NULL;
    float *Y = v->buf[op->out], *A = a ? v->buf[op->in[0]] : NULL;
    float *Bv = b ? v->buf[op->in[1]] : NULL, *Cv = c ? v->buf[op->in[2]] : NULL;
    int64_t i[4];
    if (op->kind == 's') { /* a view of the same memory */
      v->buf[op->out] = A;
      continue;
    }
    if (op->kind == 'm') { /* [.., M, K] · [.., K, N] */
      FOR_EACH(y, i) {
        double acc = 0;
        for (int64_t k = 0; k < a->dim[3]; k++) {
          int64_t ia[4] = {i[0], i[1], i[2], k}, ib[4] = {i[0], i[1], k, i[3]};
          acc += (double)A[offset_of(a, ia)] * Bv[offset_of(b, ib)];
        }
        Y[offset_of(y, i)] = (float)acc;
      }
      continue;
    }
    if (op->kind == 'r') {
      int max = op->mode == CUDNN_REDUCE_TENSOR_MAX;
      if (!max && op->mode != CUDNN_REDUCE_TENSOR_ADD) {
        snprintf(why, len, "reduction mode %d", op->mode);
        return -1;
      }
      FOR_EACH(y, i) Y[offset_of(y, i)] = max ? -INFINITY : 0.0f;
      FOR_EACH(a, i) {
        float x = A[offset_of(a, i)], *o = &Y[offset_of(y, i)];
        *o = max ? fmaxf(*o, x) : *o + x;
      }
      continue;
    }
    FOR_EACH(y, i) {
      float x = a ? A[offset_of(a, i)] : 0, bb = b ? Bv[offset_of(b, i)] : 0;
      float r;
      switch (op->mode) {
      case CUDNN_POINTWISE_ADD:
        r = x + bb;
        break;
      case CUDNN_POINTWISE_SUB:
        r = x - bb;
        break;
      case CUDNN_POINTWISE_MUL:
        r = x * bb;
        break;
      case CUDNN_POINTWISE_DIV:
        r = x / bb;
        break;
      case CUDNN_POINTWISE_EXP:
        r = expf(x);
        break;
      case CUDNN_POINTWISE_LOG:
        r = logf(x);
        break;
      case CUDNN_POINTWISE_IDENTITY:
        r = x;
        break;
      case CUDNN_POINTWISE_GEN_INDEX:
        r = (float)i[op->axis];
        break;
      case CUDNN_POINTWISE_CMP_GE:
        r = x >= bb ? 1.0f : 0.0f;
        break;
      case CUDNN_POINTWISE_BINARY_SELECT:
        r = Cv[offset_of(c, i)] != 0.0f ? x : bb;
        break;
      default:
        snprintf(why, len, "pointwise mode %d", op->mode);
        return -1;
      }
      Y[offset_of(y, i)] = r;
    }
  }
  return 0;
}

/* whether tensor k is a reshape's output: a view of its input's buffer */
static int is_view(const cudnn_shadow_t *sh, int k) {
  for (int o = 0; o < sh->nop; o++)
    if (sh->op[o].kind == 's' && sh->op[o].out == k)
      return 1;
  return 0;
}

static double rel_err(const float *got, const float *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i]))
      return INFINITY;
    num = fmax(num, fabs((double)got[i] - want[i]));
    den = fmax(den, fabs((double)want[i]));
  }
  return den > 0 ? num / den : num;
}

/* the graphs of one shape evaluated as described, against backend_cpu's attention: 1 when out,
 * lse and dqkv agree within 1e-5. bwd: the backward's graph (CUDNN_GRAPH_BWD, whose dQ is added
 * up in fp32, or CUDNN_GRAPH_BWD_DETERMINISTIC, whose dQ is a product of its own) */
static int graphs_compute_attention(int bwd, int B, int T, int C, int NH, char *why, size_t len) {
  const cudnn_shadow_t *fs = cudnn_attention_shadow(CUDNN_GRAPH_FWD, COLO_DTYPE_BF16, B, T, C, NH);
  const cudnn_shadow_t *bs = cudnn_attention_shadow(bwd, COLO_DTYPE_BF16, B, T, C, NH);
  if (!fs || !bs) {
    snprintf(why, len, "no graph for the shape");
    return 0;
  }
  size_t N = (size_t)B * T, nq = N * 3 * C, no = N * C, nl = (size_t)B * NH * T;
  float *qkv = (float *)malloc(nq * 4), *out = (float *)calloc(no, 4),
        *lse = (float *)calloc(nl, 4);
  float *dout = (float *)malloc(no * 4), *dqkv = (float *)calloc(nq, 4);
  float *ref_out = (float *)calloc(no, 4), *ref_lse = (float *)calloc(nl, 4);
  float *ref_dqkv = (float *)calloc(nq, 4), *dsum = (float *)calloc(nl, 4);
  float *dqf = (float *)calloc(N * C, 4);
  uint64_t r = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < nq; i++)
    qkv[i] =
        (float)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.0f * 2 -
        1;
  for (size_t i = 0; i < no; i++)
    dout[i] =
        (float)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 40) / 16777216.0f * 2 -
        1;
  float scale = 1.0f / sqrtf((float)(C / NH)), neg = -INFINITY, one = 1.0f;
  int ok = 1;
  for (int pass = 0; pass < 2 && ok; pass++) {
    const cudnn_shadow_t *sh = pass ? bs : fs;
    views_t v = {};
    for (int k = 0; k < sh->nt; k++) {
      switch (sh->t[k].uid) {
      case CUDNN_U_Q:
        v.buf[k] = qkv;
        break;
      case CUDNN_U_K:
        v.buf[k] = qkv + C;
        break;
      case CUDNN_U_V:
        v.buf[k] = qkv + 2 * C;
        break;
      case CUDNN_U_O:
        v.buf[k] = pass ? ref_out : out;
        break; /* the backward reads the CPU's */
      case CUDNN_U_LSE:
        v.buf[k] = pass ? ref_lse : lse;
        break;
      case CUDNN_U_SCALE:
        v.buf[k] = &scale;
        break;
      case CUDNN_U_NEG:
        v.buf[k] = &neg;
        break;
      case CUDNN_U_ONE:
        v.buf[k] = &one;
        break;
      case CUDNN_U_DO:
        v.buf[k] = dout;
        break;
      case CUDNN_U_DQ:
        v.buf[k] = dqkv;
        break;
      case CUDNN_U_DK:
        v.buf[k] = dqkv + C;
        break;
      case CUDNN_U_DV:
        v.buf[k] = dqkv + 2 * C;
        break;
      case CUDNN_U_D:
        v.buf[k] = dsum;
        break;
      case CUDNN_U_DQF:
        v.buf[k] = dqf;
        break;
      default: /* an intermediate: a buffer of its own, unless a reshape views another's */
        v.buf[k] = is_view(sh, k) ? NULL : (float *)calloc(span_of(&sh->t[k]), 4);
      }
    }
    if (evaluate(sh, &v, why, len) < 0)
      ok = 0;
    for (int k = 0; k < sh->nt; k++)
      if (sh->t[k].uid >= CUDNN_SHADOW_VIRTUAL && !is_view(sh, k))
        free(v.buf[k]);
    if (!pass) { /* colo's CPU attention, the reference */
      const colo_backend_t *cpu = colo_backend_cpu();
      cpu->attention_fwd(ref_out, ref_lse, qkv, B, T, C, NH, NULL);
      cpu->attention_bwd(ref_dqkv, dout, qkv, ref_out, ref_lse, B, T, C, NH, NULL);
    }
  }
  double e[3] = {rel_err(out, ref_out, no), rel_err(lse, ref_lse, nl), rel_err(dqkv, ref_dqkv, nq)};
  if (ok)
    snprintf(why, len,
             "relative errors against colo's CPU attention: out %.1e, lse %.1e, dqkv %.1e", e[0],
             e[1], e[2]);
  ok = ok && e[0] < 1e-5 && e[1] < 1e-5 && e[2] < 1e-5;
  free(qkv), free(out), free(lse), free(dout), free(dqkv), free(ref_out), free(ref_lse);
  free(ref_dqkv), free(dsum), free(dqf);
  return ok;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = (char *)malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s)
    s[n] = 0;
  fclose(f);
  return s;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write-devprop")) {
    static char json[16384];
    char err[256];
    if (!cudnn_devprop_json(json, sizeof json, err, sizeof err)) {
      fprintf(stderr, "test_cudnn_plan: %s\n", err);
      return 1;
    }
    FILE *f = fopen(argv[2], "w");
    if (!f || fputs(json, f) < 0 || fclose(f)) {
      perror(argv[2]);
      return 1;
    }
    printf("wrote %s\n", argv[2]);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: test_cudnn_plan [--write-devprop FILE]\n");
    return 2;
  }
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) &&
      !dlopen(COLO_CUDA_STUB, RTLD_NOW | RTLD_GLOBAL)) {
    printf("SKIP: no libcuda.so.1 and no stub at %s\n", COLO_CUDA_STUB);
    return 77;
  }
  void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  const char *env = getenv("COLO_CUDNN_LIBRARY");
  if (!lib && !(env && *env)) {
    printf("SKIP: cuDNN 9 is not installed (no libcudnn.so.9; COLO_CUDNN_LIBRARY may name one)\n");
    return 77;
  }
  char *devprop = slurp(COLO_SOURCE_DIR "/tests/data/cudnn_devprop_h100.json");
  if (!devprop) {
    perror(COLO_SOURCE_DIR "/tests/data/cudnn_devprop_h100.json");
    return 1;
  }
  struct {
    colo_dtype_t t;
    int B, T, C, NH;
  } cases[] = {
      {COLO_DTYPE_BF16, 8, 1024, 768, 12}, /* GPT-2 124M at bench/engine_gpu's batch */
      {COLO_DTYPE_BF16, 2, 100, 128, 2},   /* test_cuda's shapes: head sizes 64, 32, 128, 24 */
      {COLO_DTYPE_BF16, 3, 64, 64, 2},     /* with sequences that end inside a tile */
      {COLO_DTYPE_BF16, 1, 130, 256, 2},   {COLO_DTYPE_BF16, 4, 64, 96, 4},
      {COLO_DTYPE_F16, 8, 1024, 768, 12},  {COLO_DTYPE_F16, 2, 100, 128, 2},
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char why[640];
    int ok = cudnn_attention_plan_offline(devprop, cases[i].t, cases[i].B, cases[i].T, cases[i].C,
                                          cases[i].NH, why, sizeof why);
    printf("%s %s B %d T %d, %d heads of %d: %s\n", ok ? "PASS" : "FAIL",
           cases[i].t == COLO_DTYPE_BF16 ? "bf16" : "fp16", cases[i].B, cases[i].T, cases[i].NH,
           cases[i].C / cases[i].NH, why);
    failures += !ok;
  }
  /* what the graphs compute, evaluated on the CPU as cuDNN documents its operations */
  struct {
    int B, T, C, NH;
  } small[] = {{2, 37, 32, 2}, {1, 64, 96, 4}};
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
    for (int bwd = CUDNN_GRAPH_BWD; bwd <= CUDNN_GRAPH_BWD_DETERMINISTIC; bwd++) {
      char why[640];
      int ok = graphs_compute_attention(bwd, small[i].B, small[i].T, small[i].C, small[i].NH, why,
                                        sizeof why);
      printf("%s graphs' arithmetic%s, B %d T %d, %d heads of %d: %s\n", ok ? "PASS" : "FAIL",
             bwd == CUDNN_GRAPH_BWD ? "" : " (the deterministic backward)", small[i].B, small[i].T,
             small[i].NH, small[i].C / small[i].NH, why);
      failures += !ok;
    }
  /* a case that is not cuDNN's (a head size its kernels do not take) is refused, not planned */
  char why[640];
  int ok = cudnn_attention_plan_offline(devprop, COLO_DTYPE_BF16, 2, 64, 40, 4, why, sizeof why);
  printf("%s head size 10 refused: %s\n", ok ? "FAIL" : "PASS", why);
  failures += ok;
  free(devprop);
  printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
