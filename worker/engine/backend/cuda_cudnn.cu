/* cuDNN's fused attention, through its backend API (COLO_CUDA_ATTENTION=cudnn).
 *
 * backend.h's causal attention is described to cuDNN as a graph of its operations, which cuDNN's
 * runtime-fusion engine compiles into one flash-attention kernel for the forward and one for the
 * backward. cuDNN 9.19 (the one here) has a single SDPA operation too, but it masks causally only
 * from 9.21 on, so the graph is the one cuDNN's own frontend builds for such a library:
 *
 *   forward   S = Q·Kᵀ · scale, masked where the key is after the query (row and column indices
 *             compared, −inf selected), softmax with its statistics (max, Σ exp, lse = max +
 *             log Σ, the saved log-sum-exp), O = P·V with P rounded to the storage type;
 *   backward  D = Σ dO·O per query (kept in the workspace), P = exp(S·scale − lse) masked again,
 *             dV = Pᵀ·dO, dS = P·(dO·Vᵀ − D)·scale, dK = dSᵀ·Q, and dQ = dS·K either
 *             accumulated in fp32 (in the workspace) with atomics and rounded once, or, in the
 *             deterministic backward, a product of its own over dS kept in cuDNN's workspace
 *             (B·NH·T·T values in the storage type: 192 MiB for GPT-2 124M at B = 8), which
 *             gives the same bits on every run. cuDNN's frontend builds the same graph when it
 *             is asked for a deterministic algorithm on Hopper: a dQ accumulator the caller
 *             gives is what tells cuDNN's engine to add dQ up with atomics.
 *
 * Q, K and V are read where they lie, inside qkv[B][T][3C] (head h's columns h·HS…, stride 3C a
 * token); out and dqkv are written the same way, and lse[B][NH][T] is cuDNN's statistics tensor
 * as it stands. A plan is built per shape, the first cuDNN's heuristics offer that compiles, and
 * kept for the process's life (a handful of shapes: training's, evaluation's).
 *
 * cuDNN is loaded at run time (dlopen), not linked: libcolo_cuda.so still loads where cuDNN is
 * not installed, and COLO_CUDNN_LIBRARY names a copy elsewhere (a PyTorch wheel's, say). */
#include "cuda_common.cuh"

#ifdef COLO_NO_CUDNN /* built where cuDNN's headers are not: the attention says so when asked for  \
                      */

int cudnn_attention_open(char *err, size_t errlen) {
  snprintf(err, errlen,
           "this build of colo has no cuDNN support (no cudnn_graph.h when it was built)");
  return 0;
}
const char *cudnn_attention_error(void) {
  return "no cuDNN support in this build";
}
int cudnn_attention_fwd(colo_dtype_t, void *, float *, const void *, int, int, int, int,
                        cudaStream_t) {
  return 0;
}
int cudnn_attention_bwd(colo_dtype_t, void *, const void *, const void *, const void *,
                        const float *, int, int, int, int, int, cudaStream_t) {
  return 0;
}
int cudnn_attention_plan_offline(const char *, colo_dtype_t, int, int, int, int, char *why,
                                 size_t len) {
  snprintf(why, len, "no cuDNN support in this build");
  return 0;
}
int cudnn_devprop_json(char *, size_t, char *err, size_t errlen) {
  snprintf(err, errlen, "no cuDNN support in this build");
  return 0;
}
const cudnn_shadow_t *cudnn_attention_shadow(int, colo_dtype_t, int, int, int, int) {
  return NULL;
}
int64_t cudnn_attention_bwd_bytes(colo_dtype_t, int, int, int, int, int) {
  return -1;
}

#else

#include <cudnn_graph.h>
#include <dlfcn.h>
#include <math.h>
#include <string.h>

/* ---- the library, loaded on demand ---- */

#define CUDNN_FUNCTIONS(X)                                                                         \
  X(cudnnGetVersion)                                                                               \
  X(cudnnGetErrorString)                                                                           \
  X(cudnnGetLastErrorString)                                                                       \
  X(cudnnCreate)                                                                                   \
  X(cudnnSetStream)                                                                                \
  X(cudnnBackendCreateDescriptor)                                                                  \
  X(cudnnBackendDestroyDescriptor)                                                                 \
  X(cudnnBackendSetAttribute)                                                                      \
  X(cudnnBackendGetAttribute)                                                                      \
  X(cudnnBackendFinalize)                                                                          \
  X(cudnnBackendExecute)

static struct {
  void *lib;
  cudnnHandle_t handle;
  cudnnBackendDescriptor_t devprop; /* without a handle: a GPU described, plans built offline */
#define X(f) decltype(&::f) f;
  CUDNN_FUNCTIONS(X)
#undef X
} dn;

static int load(char *err, size_t errlen) {
  if (dn.lib)
    return 1;
  const char *path = getenv("COLO_CUDNN_LIBRARY");
  if (path && *path) {
    dn.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    dn.lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!dn.lib)
      dn.lib = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!dn.lib) {
    snprintf(err, errlen,
             "cuDNN could not be loaded (%s); COLO_CUDNN_LIBRARY may name its libcudnn.so.9",
             dlerror());
    return 0;
  }
#define X(f)                                                                                       \
  if (!(dn.f = (decltype(&::f))dlsym(dn.lib, #f))) {                                               \
    snprintf(err, errlen, "cuDNN has no %s: a cuDNN 9 is needed", #f);                             \
    return 0;                                                                                      \
  }
  CUDNN_FUNCTIONS(X)
#undef X
  size_t v = dn.cudnnGetVersion();
  if (v < 90000) {
    snprintf(err, errlen, "cuDNN %zu.%zu is too old: its fused attention needs cuDNN 9", v / 10000,
             v / 100 % 100);
    return 0;
  }
  return 1;
}

int cudnn_attention_open(char *err, size_t errlen) {
  if (dn.handle)
    return 1;
  if (!load(err, errlen))
    return 0;
  cudnnStatus_t s = dn.cudnnCreate(&dn.handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    snprintf(err, errlen, "cudnnCreate: %s", dn.cudnnGetErrorString(s));
    dn.handle = NULL;
    return 0;
  }
  return 1;
}

/* ---- a graph's descriptors: errors are sticky, the first one is kept with cuDNN's words ---- */

enum { MAX_DESCS = 224, MAX_OPS = 32, MAX_CONFIGS = 16 };

typedef struct {
  cudnnBackendDescriptor_t d[MAX_DESCS], ops[MAX_OPS];
  int n, nops;
  int64_t next_uid; /* the next virtual tensor's */
  cudnnStatus_t st; /* CUDNN_STATUS_SUCCESS until a call fails */
  char why[320];
  cudnn_shadow_t shadow;                  /* what it computes (cuda_common.cuh) */
  cudnnBackendDescriptor_t shadow_of[64]; /* each shadow tensor's descriptor */
} graph_t;

static void fail(graph_t *g, cudnnStatus_t s, const char *what) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  g->st = s;
  char msg[224] = "";
  dn.cudnnGetLastErrorString(msg, sizeof msg);
  snprintf(g->why, sizeof g->why, "%s: %s%s%s", what, dn.cudnnGetErrorString(s), *msg ? ": " : "",
           msg);
}

static cudnnBackendDescriptor_t make(graph_t *g, cudnnBackendDescriptorType_t t) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return NULL;
  if (g->n == MAX_DESCS) {
    fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors for one graph");
    return NULL;
  }
  cudnnBackendDescriptor_t d = NULL;
  cudnnStatus_t s = dn.cudnnBackendCreateDescriptor(t, &d);
  if (s != CUDNN_STATUS_SUCCESS) {
    fail(g, s, "cudnnBackendCreateDescriptor");
    return NULL;
  }
  return g->d[g->n++] = d;
}

static void set(graph_t *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t n, const void *v) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  cudnnStatus_t s = dn.cudnnBackendSetAttribute(d, a, t, n, v);
  if (s != CUDNN_STATUS_SUCCESS) {
    char what[48];
    snprintf(what, sizeof what, "setting attribute %d", (int)a);
    fail(g, s, what);
  }
}

static void setd(graph_t *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                 cudnnBackendDescriptor_t v) {
  set(g, d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

static void finalize(graph_t *g, cudnnBackendDescriptor_t d, const char *what) {
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  cudnnStatus_t s = dn.cudnnBackendFinalize(d);
  if (s != CUDNN_STATUS_SUCCESS)
    fail(g, s, what);
}

static void graph_free(graph_t *g) {
  while (g->n > 0)
    dn.cudnnBackendDestroyDescriptor(g->d[--g->n]);
  g->nops = 0;
}

/* ---- tensors and operations ---- */

typedef struct {
  int64_t dim[4], stride[4];
} shape_t;

static cudnnBackendDescriptor_t tensor(graph_t *g, int64_t uid, cudnnDataType_t t, shape_t s,
                                       bool virt, bool by_value) {
  cudnnBackendDescriptor_t d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t align = 16;
  set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t);
  set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dim);
  set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.stride);
  set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  if (by_value)
    set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  finalize(g, d, "a tensor");
  cudnn_shadow_t *sh = &g->shadow;
  if (g->st == CUDNN_STATUS_SUCCESS && sh->nt < (int)(sizeof sh->t / sizeof sh->t[0])) {
    cudnn_shadow_tensor_t *st = &sh->t[sh->nt];
    st->uid = uid;
    memcpy(st->dim, s.dim, sizeof st->dim);
    memcpy(st->stride, s.stride, sizeof st->stride);
    g->shadow_of[sh->nt++] = d;
  } else if (g->st == CUDNN_STATUS_SUCCESS) {
    fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many tensors for one graph's shadow");
  }
  return d;
}

/* an operation's record in the shadow; its tensors by their descriptors (NULL: none) */
static void shadow_op(graph_t *g, char kind, int mode, int64_t axis, cudnnBackendDescriptor_t a,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y) {
  cudnn_shadow_t *sh = &g->shadow;
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  if (sh->nop == (int)(sizeof sh->op / sizeof sh->op[0])) {
    fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations for one graph's shadow");
    return;
  }
  cudnnBackendDescriptor_t ds[4] = {a, b, t, y};
  int idx[4] = {-1, -1, -1, -1};
  for (int k = 0; k < 4; k++)
    for (int i = 0; ds[k] && i < sh->nt; i++)
      if (g->shadow_of[i] == ds[k])
        idx[k] = i;
  cudnn_shadow_op_t *op = &sh->op[sh->nop++];
  op->kind = kind, op->mode = mode, op->axis = axis;
  op->in[0] = idx[0], op->in[1] = idx[1], op->in[2] = idx[2], op->out = idx[3];
}

static cudnnBackendDescriptor_t virt(graph_t *g, cudnnDataType_t t, shape_t s) {
  return tensor(g, g->next_uid++, t, s, true, false);
}

/* a float given by value (from host memory) at execution */
static cudnnBackendDescriptor_t scalar(graph_t *g, int64_t uid) {
  shape_t one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
  return tensor(g, uid, CUDNN_DATA_FLOAT, one, false, true);
}

/* An operation of type t whose attributes a[i] are the descriptors d[i] (NULL ones left unset),
 * finalized and added to the graph. */
static void operation(graph_t *g, cudnnBackendDescriptorType_t t, int n,
                      const cudnnBackendAttributeName_t *a, const cudnnBackendDescriptor_t *d,
                      const char *what) {
  cudnnBackendDescriptor_t op = make(g, t);
  for (int i = 0; i < n; i++)
    if (d[i])
      setd(g, op, a[i], d[i]);
  finalize(g, op, what);
  if (g->st != CUDNN_STATUS_SUCCESS)
    return;
  if (g->nops == MAX_OPS) {
    fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations for one graph");
    return;
  }
  g->ops[g->nops++] = op;
}

/* y = mode(x, b, t) elementwise, computed in prec; b and t may be NULL; axis ≥ 0 for GEN_INDEX */
static void pointwise(graph_t *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis = -1) {
  cudnnBackendDescriptor_t pd = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  set(g, pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  set(g, pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  if (axis >= 0)
    set(g, pd, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  finalize(g, pd, "a pointwise descriptor");
  const cudnnBackendAttributeName_t a[] = {
      CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
      CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
      CUDNN_ATTR_OPERATION_POINTWISE_YDESC};
  const cudnnBackendDescriptor_t d[] = {pd, x, b, t, y};
  operation(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 5, a, d, "a pointwise operation");
  shadow_op(g, 'p', mode, axis, x, b, t, y);
}

/* y = x reduced over the dimensions where y has extent 1, in fp32 */
static void reduction(graph_t *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y) {
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  finalize(g, rd, "a reduction descriptor");
  const cudnnBackendAttributeName_t a[] = {CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                                           CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
                                           CUDNN_ATTR_OPERATION_REDUCTION_DESC};
  const cudnnBackendDescriptor_t d[] = {x, y, rd};
  operation(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, a, d, "a reduction operation");
  shadow_op(g, 'r', mode, -1, x, NULL, NULL, y);
}

/* c = a·b over the last two dimensions, batched over the first two, accumulated in fp32 */
static void matmul(graph_t *g, cudnnBackendDescriptor_t a_, cudnnBackendDescriptor_t b,
                   cudnnBackendDescriptor_t c) {
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t md = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  set(g, md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
  finalize(g, md, "a matmul descriptor");
  const cudnnBackendAttributeName_t a[] = {
      CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
      CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
  const cudnnBackendDescriptor_t d[] = {a_, b, c, md};
  operation(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, a, d, "a matmul operation");
  shadow_op(g, 'm', 0, -1, a_, b, NULL, c);
}

/* y: x seen with other dimensions and strides (a transposed view) */
static void reshape(graph_t *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  const cudnnBackendAttributeName_t a[] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                                           CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
  const cudnnBackendDescriptor_t d[] = {x, y};
  operation(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, a, d, "a reshape operation");
  shadow_op(g, 's', 0, -1, x, NULL, NULL, y);
}

/* ---- the attention's graphs ---- */

/* the non-virtual tensors' ids; virtual ones count from V_FIRST */
enum {
  U_Q = CUDNN_U_Q,
  U_K = CUDNN_U_K,
  U_V = CUDNN_U_V,
  U_O = CUDNN_U_O,
  U_LSE = CUDNN_U_LSE,
  U_SCALE = CUDNN_U_SCALE,
  U_NEG = CUDNN_U_NEG,
  U_ONE = CUDNN_U_ONE,
  U_DO = CUDNN_U_DO,
  U_DQ = CUDNN_U_DQ,
  U_DK = CUDNN_U_DK,
  U_DV = CUDNN_U_DV,
  U_D = CUDNN_U_D,
  U_DQF = CUDNN_U_DQF,
  V_FIRST = CUDNN_SHADOW_VIRTUAL
};

typedef struct {
  int B, T, C, NH, H, D;
  shape_t q, kt, o, lse, s, st, rows; /* s: scores [B][H][T][T]; st: the same, transposed */
} dims_t;

static dims_t dims_of(int B, int T, int C, int NH) {
  dims_t d;
  int64_t b = B, t = T, h = NH, hs = C / NH, c3 = 3 * (int64_t)C;
  d.B = B, d.T = T, d.C = C, d.NH = NH, d.H = NH, d.D = (int)hs;
  d.q = {{b, h, t, hs}, {t * c3, hs, c3, 1}};
  d.kt = {{b, h, hs, t}, {t * c3, hs, 1, c3}};
  d.o = {{b, h, t, hs}, {t * C, hs, C, 1}};
  d.lse = {{b, h, t, 1}, {h * t, t, 1, 1}};
  d.s = {{b, h, t, t}, {h * t * t, t * t, t, 1}};
  d.st = {{b, h, t, t}, {h * t * t, t * t, 1, t}};
  d.rows = {{b, h, t, hs}, {h * t * hs, t * hs, hs, 1}};
  return d;
}

/* x with −inf where the key (column) comes after the query (row) */
static cudnnBackendDescriptor_t causal(graph_t *g, const dims_t *d, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t neg) {
  cudnnBackendDescriptor_t row = virt(g, CUDNN_DATA_INT32, d->s),
                           col = virt(g, CUDNN_DATA_INT32, d->s);
  pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
  pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
  cudnnBackendDescriptor_t keep = virt(g, CUDNN_DATA_BOOLEAN, d->s);
  pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep);
  cudnnBackendDescriptor_t y = virt(g, CUDNN_DATA_FLOAT, d->s);
  pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg, keep, y);
  return y;
}

static void build_fwd(graph_t *g, const dims_t *d, cudnnDataType_t io) {
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = tensor(g, U_Q, io, d->q, false, false);
  cudnnBackendDescriptor_t kt = tensor(g, U_K, io, d->kt, false, false);
  cudnnBackendDescriptor_t v = tensor(g, U_V, io, d->q, false, false);
  cudnnBackendDescriptor_t o = tensor(g, U_O, io, d->o, false, false);
  cudnnBackendDescriptor_t lse = tensor(g, U_LSE, F, d->lse, false, false);
  cudnnBackendDescriptor_t scale = scalar(g, U_SCALE), neg = scalar(g, U_NEG);

  cudnnBackendDescriptor_t s = virt(g, F, d->s), ss = virt(g, F, d->s);
  matmul(g, q, kt, s);
  pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, ss);
  cudnnBackendDescriptor_t sm = causal(g, d, ss, neg);
  cudnnBackendDescriptor_t mx = virt(g, F, d->lse), sub = virt(g, F, d->s), e = virt(g, F, d->s);
  reduction(g, CUDNN_REDUCE_TENSOR_MAX, sm, mx);
  pointwise(g, CUDNN_POINTWISE_SUB, F, sm, mx, NULL, sub);
  pointwise(g, CUDNN_POINTWISE_EXP, F, sub, NULL, NULL, e);
  cudnnBackendDescriptor_t sum = virt(g, F, d->lse), lg = virt(g, F, d->lse);
  reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
  pointwise(g, CUDNN_POINTWISE_LOG, F, sum, NULL, NULL, lg);
  pointwise(g, CUDNN_POINTWISE_ADD, F, mx, lg, NULL, lse);
  cudnnBackendDescriptor_t p = virt(g, io, d->s); /* rounded to the storage type for P·V */
  pointwise(g, CUDNN_POINTWISE_DIV, F, e, sum, NULL, p);
  matmul(g, p, v, o);
}

/* det: dQ = dS·K as a product of its own over dS kept in cuDNN's workspace (B·NH·T·T in the
 * storage type), each value written once: the same bits every run. Otherwise dQ is added up in
 * fp32 with atomics as the key blocks finish, and rounded once. */
static void build_bwd(graph_t *g, const dims_t *d, cudnnDataType_t io, int det) {
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = tensor(g, U_Q, io, d->q, false, false);
  cudnnBackendDescriptor_t kt = tensor(g, U_K, io, d->kt, false, false);
  cudnnBackendDescriptor_t vt = tensor(g, U_V, io, d->kt, false, false);
  cudnnBackendDescriptor_t o = tensor(g, U_O, io, d->o, false, false);
  cudnnBackendDescriptor_t dout = tensor(g, U_DO, io, d->o, false, false);
  cudnnBackendDescriptor_t lse = tensor(g, U_LSE, F, d->lse, false, false);
  cudnnBackendDescriptor_t dq = tensor(g, U_DQ, io, d->q, false, false);
  cudnnBackendDescriptor_t dk = tensor(g, U_DK, io, d->q, false, false);
  cudnnBackendDescriptor_t dv = tensor(g, U_DV, io, d->q, false, false);
  cudnnBackendDescriptor_t scale = scalar(g, U_SCALE), neg = scalar(g, U_NEG),
                           one = scalar(g, U_ONE);
  cudnnBackendDescriptor_t dsum = tensor(g, U_D, F, d->lse, false, false); /* workspace */

  /* D = Σ dO·O per query (the product dense, [B][H][T][D]: cuDNN's frontend gives it strides
   * that overlap where T is a multiple of H, which its engine ignores and test_cudnn_plan's CPU
   * evaluation would not) */
  cudnnBackendDescriptor_t x = virt(g, F, d->rows), r = virt(g, F, d->lse);
  pointwise(g, CUDNN_POINTWISE_MUL, F, dout, o, NULL, x);
  reduction(g, CUDNN_REDUCE_TENSOR_ADD, x, r);
  pointwise(g, CUDNN_POINTWISE_MUL, F, r, one, NULL, dsum);

  /* P = exp(S·scale − lse), masked */
  cudnnBackendDescriptor_t s = virt(g, F, d->s), ss = virt(g, F, d->s), sl = virt(g, F, d->s);
  matmul(g, q, kt, s);
  pointwise(g, CUDNN_POINTWISE_MUL, F, s, scale, NULL, ss);
  pointwise(g, CUDNN_POINTWISE_SUB, F, ss, lse, NULL, sl);
  cudnnBackendDescriptor_t sm = causal(g, d, sl, neg);
  cudnnBackendDescriptor_t p = virt(g, F, d->s);
  pointwise(g, CUDNN_POINTWISE_EXP, F, sm, NULL, NULL, p);

  /* dV = Pᵀ·dO */
  cudnnBackendDescriptor_t pt = virt(g, io, d->st);
  reshape(g, p, pt);
  matmul(g, pt, dout, dv);

  /* dS = P·(dO·Vᵀ − D)·scale */
  cudnnBackendDescriptor_t dp = virt(g, F, d->s), dpd = virt(g, F, d->s), ds = virt(g, F, d->s);
  cudnnBackendDescriptor_t dss = virt(g, F, d->s);
  matmul(g, dout, vt, dp);
  pointwise(g, CUDNN_POINTWISE_SUB, F, dp, dsum, NULL, dpd);
  pointwise(g, CUDNN_POINTWISE_MUL, F, dpd, p, NULL, ds);
  pointwise(g, CUDNN_POINTWISE_MUL, F, ds, scale, NULL, dss);

  /* dK = dSᵀ·Q */
  cudnnBackendDescriptor_t dst = virt(g, io, d->st);
  reshape(g, dss, dst);
  matmul(g, dst, q, dk);

  /* dQ = dS·K: directly (det), or in fp32 (in colo's part of the workspace) and then rounded; a
   * dQ accumulator the caller gives is how cuDNN's engine is told to add it up with atomics */
  cudnnBackendDescriptor_t k = virt(g, io, d->q);
  reshape(g, kt, k);
  if (det) {
    matmul(g, dss, k, dq);
    return;
  }
  cudnnBackendDescriptor_t dqf = tensor(g, U_DQF, F, d->rows, false, false);
  matmul(g, dss, k, dqf);
  pointwise(g, CUDNN_POINTWISE_IDENTITY, F, dqf, NULL, NULL, dq);
}

/* the global index of the engine an engine configuration names; −1 if cuDNN does not say */
static int64_t engine_of(cudnnBackendDescriptor_t cfg) {
  cudnnBackendDescriptor_t e = NULL;
  int64_t n = 0, idx = -1;
  if (dn.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS)
    return -1;
  if (dn.cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  1, &n, &e) != CUDNN_STATUS_SUCCESS ||
      dn.cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                  &idx) != CUDNN_STATUS_SUCCESS)
    idx = -1;
  dn.cudnnBackendDestroyDescriptor(e);
  return idx;
}

/* The operation graph and its plan: the first engine configuration cuDNN's heuristics (mode A,
 * then the fallback list) offer that finalizes; *engine is its engine's index. NULL, with g->why
 * said, when none does. Offline (a GPU described, no handle), a plan that compiled but could not
 * be loaded for want of a driver ends the search too, with g->st CUDNN_STATUS_EXECUTION_FAILED_
 * CUDA_DRIVER: the graph passed the engine's checks and its kernels were built. */
static cudnnBackendDescriptor_t plan_graph(graph_t *g, int64_t *workspace, int64_t *engine) {
  cudnnBackendDescriptor_t og = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (dn.handle)
    set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dn.handle);
  set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
  finalize(g, og, "the operation graph");
  cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  char last_msg[224] = "cuDNN's heuristics offered no engine for this graph";
  for (size_t m = 0; m < sizeof modes / sizeof modes[0] && g->st == CUDNN_STATUS_SUCCESS; m++) {
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    setd(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
    if (!dn.handle)
      setd(g, heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, dn.devprop);
    finalize(g, heur, "the heuristics");
    int64_t n = 0;
    if (g->st == CUDNN_STATUS_SUCCESS) {
      cudnnStatus_t s = dn.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
      if (s != CUDNN_STATUS_SUCCESS)
        fail(g, s, "the heuristics' results");
    }
    if (n > MAX_CONFIGS)
      n = MAX_CONFIGS;
    cudnnBackendDescriptor_t cfg[MAX_CONFIGS];
    for (int64_t i = 0; i < n; i++)
      cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (g->st != CUDNN_STATUS_SUCCESS)
      break;
    cudnnStatus_t s = dn.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfg);
    if (s != CUDNN_STATUS_SUCCESS) {
      fail(g, s, "the heuristics' results");
      break;
    }
    for (int64_t i = 0; i < n && g->st == CUDNN_STATUS_SUCCESS; i++) {
      cudnnBackendDescriptor_t plan = make(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (dn.handle)
        set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dn.handle);
      else
        setd(g, plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, dn.devprop);
      setd(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg[i]);
      if (g->st != CUDNN_STATUS_SUCCESS)
        break;
      /* an engine that cannot take this graph fails here: the next is tried */
      *engine = engine_of(cfg[i]);
      if ((last = dn.cudnnBackendFinalize(plan)) != CUDNN_STATUS_SUCCESS) {
        dn.cudnnGetLastErrorString(last_msg, sizeof last_msg);
        if (!dn.handle && last == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) {
          g->st = last;
          snprintf(g->why, sizeof g->why, "engine %lld compiled it; loading it needs a GPU",
                   (long long)*engine);
          return NULL;
        }
        continue;
      }
      *workspace = 0;
      cudnnStatus_t w = dn.cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                    CUDNN_TYPE_INT64, 1, NULL, workspace);
      if (w != CUDNN_STATUS_SUCCESS) {
        fail(g, w, "the plan's workspace size");
        return NULL;
      }
      return plan;
    }
  }
  if (g->st == CUDNN_STATUS_SUCCESS) {
    g->st = last;
    snprintf(g->why, sizeof g->why, "no engine takes the graph: %s%s%s",
             dn.cudnnGetErrorString(last), *last_msg ? ": " : "", last_msg);
  }
  return NULL;
}

/* ---- plans, kept per shape ---- */

enum { MAX_PLANS = 8 };

enum { /* a plan's graph */
       FWD = CUDNN_GRAPH_FWD,
       BWD_ATOMIC = CUDNN_GRAPH_BWD,
       BWD_DETERMINISTIC = CUDNN_GRAPH_BWD_DETERMINISTIC
};

typedef struct {
  int used, bwd, B, T, C, NH; /* bwd: one of the three above */
  colo_dtype_t t;
  graph_t g;
  cudnnBackendDescriptor_t plan; /* NULL: none could be built (g.why says why) */
  int64_t workspace;             /* the plan's own bytes */
  int64_t engine;                /* the index of cuDNN's engine that runs it */
  size_t extra;                  /* the backward's D and fp32 dQ, in the workspace after those */
} plan_t;

static plan_t plans[MAX_PLANS];
static int next_slot;
static void *ws; /* one workspace for every plan: they run on one stream, one at a time */
static size_t ws_bytes;
static const float NEG_INF = -INFINITY, ONE = 1.0f; /* scalars given by value */

static size_t align256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

static plan_t *plan_for(int bwd, colo_dtype_t t, int B, int T, int C, int NH) {
  for (int i = 0; i < MAX_PLANS; i++) {
    plan_t *p = &plans[i];
    if (p->used && p->bwd == bwd && p->t == t && p->B == B && p->T == T && p->C == C && p->NH == NH)
      return p;
  }
  plan_t *p = &plans[next_slot];
  next_slot = (next_slot + 1) % MAX_PLANS;
  if (p->used) {
    if (dn.handle) /* its kernels may still be queued: the plan holds their code */
      CK(cudaDeviceSynchronize());
    graph_free(&p->g);
  }
  memset(p, 0, sizeof *p);
  p->used = 1, p->bwd = bwd, p->t = t, p->B = B, p->T = T, p->C = C, p->NH = NH;
  p->g.next_uid = V_FIRST;
  dims_t d = dims_of(B, T, C, NH);
  cudnnDataType_t io = t == COLO_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  if (bwd)
    build_bwd(&p->g, &d, io, bwd == BWD_DETERMINISTIC);
  else
    build_fwd(&p->g, &d, io);
  p->plan = plan_graph(&p->g, &p->workspace, &p->engine);
  if (bwd)
    p->extra = align256((size_t)B * NH * T * sizeof(float)) +
               (bwd == BWD_ATOMIC ? align256((size_t)B * NH * T * (C / NH) * sizeof(float)) : 0);
  return p;
}

static void *workspace_for(size_t bytes, cudaStream_t stream) {
  if (bytes > ws_bytes) {
    CK(cudaStreamSynchronize(stream)); /* queued plans may still use the old one */
    if (ws)
      CK(cudaFree(ws));
    CK(cudaMalloc(&ws, bytes));
    ws_bytes = bytes;
  }
  return ws;
}

static void execute(plan_t *p, int n, const int64_t *uids, void **ptrs, void *work,
                    cudaStream_t stream) {
  graph_t g = {};
  cudnnStatus_t s = dn.cudnnSetStream(dn.handle, stream);
  if (s != CUDNN_STATUS_SUCCESS)
    fail(&g, s, "cudnnSetStream");
  cudnnBackendDescriptor_t pack = make(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(&g, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  set(&g, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  set(&g, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &work);
  finalize(&g, pack, "the variant pack");
  if (g.st == CUDNN_STATUS_SUCCESS && (s = dn.cudnnBackendExecute(dn.handle, p->plan, pack)))
    fail(&g, s, "cudnnBackendExecute");
  graph_free(&g);
  if (g.st != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "colo-train: cuDNN attention %s failed: %s\n", p->bwd ? "backward" : "forward",
            g.why);
    exit(1);
  }
}

static char last_why[400];

const char *cudnn_attention_error(void) {
  return last_why;
}

/* 1: done; 0: not cuDNN's case (fp32 storage, a head size cuDNN's kernels do not take); −1: cuDNN
 * has no plan for it (cudnn_attention_error says why) */
static int usable(plan_t **out, int bwd, colo_dtype_t t, int B, int T, int C, int NH) {
  int hs = C / NH;
  if ((!dn.handle && !dn.devprop) || (t != COLO_DTYPE_BF16 && t != COLO_DTYPE_F16) || hs % 8 ||
      hs > 128)
    return 0;
  plan_t *p = plan_for(bwd, t, B, T, C, NH);
  if (!p->plan) {
    snprintf(last_why, sizeof last_why, "%s, %s, B %d, T %d, %d heads of %d: %s",
             bwd == BWD_DETERMINISTIC ? "deterministic backward"
             : bwd                    ? "backward"
                                      : "forward",
             t == COLO_DTYPE_BF16 ? "bf16" : "fp16", B, T, NH, hs, p->g.why);
    return -1;
  }
  *out = p;
  return 1;
}

int64_t cudnn_attention_bwd_bytes(colo_dtype_t t, int B, int T, int C, int NH, int deterministic) {
  plan_t *p = NULL;
  if (usable(&p, deterministic ? BWD_DETERMINISTIC : BWD_ATOMIC, t, B, T, C, NH) != 1)
    return -1;
  return (int64_t)(align256((size_t)p->workspace) + p->extra);
}

int cudnn_attention_fwd(colo_dtype_t t, void *out, float *lse, const void *qkv, int B, int T, int C,
                        int NH, cudaStream_t stream) {
  plan_t *p = NULL;
  int rc = usable(&p, 0, t, B, T, C, NH);
  if (rc != 1)
    return rc;
  float scale = 1.0f / sqrtf((float)(C / NH));
  const char *base = (const char *)qkv;
  size_t e = 2; /* bytes a value: bf16 and fp16 */
  int64_t uids[] = {U_Q, U_K, U_V, U_O, U_LSE, U_SCALE, U_NEG};
  void *ptrs[] = {(void *)base, (void *)(base + C * e), (void *)(base + 2 * C * e), out, lse,
                  &scale,       (void *)&NEG_INF};
  void *work = workspace_for(align256((size_t)p->workspace) + 256, stream);
  execute(p, 7, uids, ptrs, work, stream);
  return 1;
}

int cudnn_attention_bwd(colo_dtype_t t, void *dqkv, const void *dout, const void *qkv,
                        const void *out, const float *lse, int B, int T, int C, int NH,
                        int deterministic, cudaStream_t stream) {
  plan_t *p = NULL;
  int rc = usable(&p, deterministic ? BWD_DETERMINISTIC : BWD_ATOMIC, t, B, T, C, NH);
  if (rc != 1)
    return rc;
  float scale = 1.0f / sqrtf((float)(C / NH));
  const char *base = (const char *)qkv;
  char *dbase = (char *)dqkv;
  size_t e = 2;
  size_t own = align256((size_t)p->workspace);
  char *work = (char *)workspace_for(own + p->extra, stream);
  void *dsum = work + own;
  void *dqf = work + own + align256((size_t)B * NH * T * sizeof(float));
  /* cuDNN 9.6 on sets dQ's accumulator itself; zeroing it costs microseconds and spares a guess */
  if (!deterministic)
    CK(cudaMemsetAsync(dqf, 0, (size_t)B * NH * T * (C / NH) * sizeof(float), stream));
  /* U_DQF last: the deterministic graph has no accumulator, and is given the first 13 */
  int64_t uids[] = {U_Q,  U_K,  U_V,     U_O,   U_DO,  U_LSE, U_DQ,
                    U_DK, U_DV, U_SCALE, U_NEG, U_ONE, U_D,   U_DQF};
  void *ptrs[] = {(void *)base,
                  (void *)(base + C * e),
                  (void *)(base + 2 * C * e),
                  (void *)out,
                  (void *)dout,
                  (void *)lse,
                  dbase,
                  dbase + C * e,
                  dbase + 2 * C * e,
                  &scale,
                  (void *)&NEG_INF,
                  (void *)&ONE,
                  dsum,
                  dqf};
  execute(p, deterministic ? 13 : 14, uids, ptrs, work, stream);
  return 1;
}

/* Without a GPU: cuDNN loaded, a GPU described by its properties (cuDNN's JSON form of them), and
 * the plans for one shape built for it, forward and backward, their kernels compiled; nothing
 * runs. 1 when both compile (why then says by which engines), else 0 with why said. Where no
 * driver is installed, cuDNN needs libcuda.so.1 loaded all the same: the toolkit's stub serves
 * (test_cudnn_plan loads it), and loading the compiled kernels is the one step left undone. */
int cudnn_attention_plan_offline(const char *devprop_json, colo_dtype_t t, int B, int T, int C,
                                 int NH, char *why, size_t len) {
  if (!load(why, len))
    return 0;
  graph_t g = {};
  if (!dn.devprop) {
    cudnnBackendDescriptor_t d = make(&g, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
    set(&g, d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
        (int64_t)strlen(devprop_json) + 1, devprop_json);
    finalize(&g, d, "the device properties");
    if (g.st != CUDNN_STATUS_SUCCESS) {
      snprintf(why, len, "%s", g.why);
      graph_free(&g);
      return 0;
    }
    dn.devprop = d; /* kept: g is not freed */
  }
  size_t used = 0;
  static const char *names[] = {"forward", "backward", "deterministic backward"};
  for (int bwd = FWD; bwd <= BWD_DETERMINISTIC; bwd++) {
    plan_t *p = NULL;
    int rc = usable(&p, bwd, t, B, T, C, NH);
    if (rc == 0) {
      snprintf(why, len, "not a case for cuDNN's attention");
      return 0;
    }
    if (rc < 0 &&
        plan_for(bwd, t, B, T, C, NH)->g.st != CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) {
      snprintf(why, len, "%s", last_why);
      return 0;
    }
    p = plan_for(bwd, t, B, T, C, NH);
    used += (size_t)snprintf(why + used, used < len ? len - used : 0, "%s%s: %s", bwd ? "; " : "",
                             names[bwd], p->plan ? "planned" : p->g.why);
  }
  return 1;
}

const cudnn_shadow_t *cudnn_attention_shadow(int kind, colo_dtype_t t, int B, int T, int C,
                                             int NH) {
  plan_t *p = NULL;
  if (usable(&p, kind, t, B, T, C, NH) == 0)
    return NULL;
  p = plan_for(kind, t, B, T, C, NH); /* planned or not: the graph was built */
  return &p->g.shadow;
}

/* cuDNN's own description of this process's GPU (the JSON cudnn_attention_plan_offline reads);
 * needs a GPU. 0 with err said when it cannot. */
int cudnn_devprop_json(char *buf, size_t len, char *err, size_t errlen) {
  if (!cudnn_attention_open(err, errlen))
    return 0;
  graph_t g = {};
  cudnnBackendDescriptor_t d = make(&g, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  set(&g, d, CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, 1, &dn.handle);
  finalize(&g, d, "the device properties");
  int64_t n = 0;
  if (g.st == CUDNN_STATUS_SUCCESS) {
    cudnnStatus_t s = dn.cudnnBackendGetAttribute(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                                  CUDNN_TYPE_CHAR, (int64_t)len - 1, &n, buf);
    if (s != CUDNN_STATUS_SUCCESS)
      fail(&g, s, "the device properties' JSON");
  }
  int ok = g.st == CUDNN_STATUS_SUCCESS;
  if (ok)
    buf[n < (int64_t)len ? n : (int64_t)len - 1] = 0;
  else
    snprintf(err, errlen, "%s", g.why);
  graph_free(&g);
  return ok;
}

#endif /* COLO_NO_CUDNN */
