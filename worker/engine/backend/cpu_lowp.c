/* The CPU backend with activations stored in bf16 or fp16: each operation widens its inputs to
 * fp32, runs the fp32 CPU operation, and rounds what it stores (nearest, ties to even). It is the
 * arithmetic the CUDA backend's bf16 and fp16 tables do (compute in fp32, round on store), so
 * test_cuda checks them against it, and colo-train can train with it (`--precision bf16` on the
 * CPU) to show what reduced-precision storage does to a run without a GPU. It converts on every
 * call, into reused scratch buffers, and takes about 1.5x fp32's time; parameters, gradients and
 * optimizer state are the fp32 table's, untouched. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define COLO_POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define COLO_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define COLO_POISON(p, n)   ((void)(p), (void)(n))
#define COLO_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static const colo_backend_t *f32(void) {
  return colo_backend_cpu();
}

/* Scratch: the fp32 copies an operation makes, kept for the next operation. Copies this large
 * come from mmap and go back to the kernel on free(), so every call page-faulted on every page it
 * touched: a step took 2.5-3.5x what it takes with the copies reused (the comment at the top had
 * blamed the conversions). A few buffers are kept, SCRATCH_KEEP bytes in all at most; a request
 * takes the smallest that fits. Each buffer starts with a header holding its capacity. */
#define SCRATCH_SLOTS 8
#define SCRATCH_KEEP  ((size_t)256 << 20)
#define SCRATCH_HDR   64 /* keeps the floats 64-byte aligned */

static struct {
  void *base; /* NULL: an empty slot */
  size_t cap; /* floats */
} scratch[SCRATCH_SLOTS];
static size_t scratch_kept; /* bytes in the slots */
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t scratch_bytes(size_t cap) {
  return SCRATCH_HDR + cap * sizeof(float);
}

static float *scratch_take(size_t n) {
  void *base = NULL;
  pthread_mutex_lock(&scratch_lock);
  int best = -1;
  for (int i = 0; i < SCRATCH_SLOTS; i++)
    if (scratch[i].base && scratch[i].cap >= n && (best < 0 || scratch[i].cap < scratch[best].cap))
      best = i;
  if (best >= 0) {
    base = scratch[best].base;
    scratch[best].base = NULL;
    scratch_kept -= scratch_bytes(scratch[best].cap);
  }
  pthread_mutex_unlock(&scratch_lock);
  if (!base) {
    if (posix_memalign(&base, SCRATCH_HDR, scratch_bytes(n ? n : 1)) != 0) {
      fprintf(stderr, "colo-train: out of memory converting activations (%zu bytes)\n",
              scratch_bytes(n));
      exit(1);
    }
    *(size_t *)base = n ? n : 1;
  }
  COLO_UNPOISON((char *)base + SCRATCH_HDR, n * sizeof(float));
  return (float *)((char *)base + SCRATCH_HDR);
}

/* gives a buffer from scratch_take back (nothing for NULL): kept while there is room, in place of
 * a smaller one if need be, else freed */
static void scratch_give(float *f) {
  if (!f)
    return;
  void *base = (char *)f - SCRATCH_HDR;
  size_t cap = *(size_t *)base;
  COLO_POISON(f, cap * sizeof(float));
  pthread_mutex_lock(&scratch_lock);
  int slot = -1; /* an empty slot, else the one holding the smallest buffer */
  for (int i = 0; i < SCRATCH_SLOTS; i++) {
    if (!scratch[i].base) {
      slot = i;
      break;
    }
    if (slot < 0 || scratch[i].cap < scratch[slot].cap)
      slot = i;
  }
  if (scratch[slot].base && scratch[slot].cap < cap) { /* all full: drop the smallest */
    scratch_kept -= scratch_bytes(scratch[slot].cap);
    free(scratch[slot].base);
    scratch[slot].base = NULL;
  }
  if (!scratch[slot].base && scratch_kept + scratch_bytes(cap) <= SCRATCH_KEEP) {
    scratch[slot].base = base;
    scratch[slot].cap = cap;
    scratch_kept += scratch_bytes(cap);
    base = NULL;
  }
  pthread_mutex_unlock(&scratch_lock);
  free(base);
}

/* an fp32 copy of n stored values (NULL for NULL) */
static float *widen(colo_dtype_t t, const void *src, size_t n) {
  if (!src)
    return NULL;
  float *f = scratch_take(n);
  colo_dtype_to_float(f, src, n, t);
  return f;
}

/* stores n fp32 values rounded and frees them (nothing for a NULL dst) */
static void narrow(colo_dtype_t t, void *dst, float *f, size_t n) {
  if (dst)
    colo_dtype_from_float(dst, f, n, t);
  scratch_give(f);
}

static float *fresh(size_t n) {
  return scratch_take(n);
}

/* ---- the operations, for storage type t ---- */

static void matmul_fwd_t(colo_dtype_t t, void *out, const void *inp, const void *w, const float *b,
                         int N, int C, int OC) {
  float *fi = widen(t, inp, (size_t)N * C), *fw = widen(t, w, (size_t)C * OC);
  float *fo = fresh((size_t)N * OC);
  f32()->matmul_fwd(fo, fi, fw, b, N, C, OC);
  narrow(t, out, fo, (size_t)N * OC);
  scratch_give(fi);
  scratch_give(fw);
}

static void matmul_bwd_t(colo_dtype_t t, void *dinp, float *dw, float *db, const void *dout,
                         const void *inp, const void *w, int N, int C, int OC) {
  float *fd = widen(t, dout, (size_t)N * OC);
  float *fi = dw ? widen(t, inp, (size_t)N * C) : NULL;
  float *fw = dinp ? widen(t, w, (size_t)C * OC) : NULL;
  float *fdi = dinp ? fresh((size_t)N * C) : NULL; /* written, not added to */
  f32()->matmul_bwd(fdi, dw, db, fd, fi, fw, N, C, OC);
  narrow(t, dinp, fdi, (size_t)N * C);
  scratch_give(fd);
  scratch_give(fi);
  scratch_give(fw);
}

static void lmhead_fwd_t(colo_dtype_t t, void *out, const void *inp, const void *wte, int N, int C,
                         int V) {
  float *fi = widen(t, inp, (size_t)N * C), *fw = widen(t, wte, (size_t)V * C);
  float *fo = fresh((size_t)N * V);
  f32()->lmhead_fwd(fo, fi, fw, N, C, V);
  narrow(t, out, fo, (size_t)N * V);
  scratch_give(fi);
  scratch_give(fw);
}

static void lmhead_bwd_t(colo_dtype_t t, void *dinp, float *dwte, const void *dout, const void *inp,
                         const void *wte, int N, int C, int V) {
  float *fd = widen(t, dout, (size_t)N * V);
  float *fi = dwte ? widen(t, inp, (size_t)N * C) : NULL;
  float *fw = dinp ? widen(t, wte, (size_t)V * C) : NULL;
  float *fdi = dinp ? fresh((size_t)N * C) : NULL;
  f32()->lmhead_bwd(fdi, dwte, fd, fi, fw, N, C, V);
  narrow(t, dinp, fdi, (size_t)N * C);
  scratch_give(fd);
  scratch_give(fi);
  scratch_give(fw);
}

static void encoder_fwd_t(colo_dtype_t t, void *out, const int *tokens, const float *wte,
                          const float *wpe, int B, int T, int C, int v0, int v1, const int *pos) {
  float *fo = fresh((size_t)B * T * C);
  f32()->encoder_fwd(fo, tokens, wte, wpe, B, T, C, v0, v1, pos);
  narrow(t, out, fo, (size_t)B * T * C);
}

static void encoder_bwd_t(colo_dtype_t t, float *dwte, float *dwpe, const void *dout,
                          const int *tokens, int B, int T, int C, int v0, int v1, const int *pos) {
  float *fd = widen(t, dout, (size_t)B * T * C);
  f32()->encoder_bwd(dwte, dwpe, fd, tokens, B, T, C, v0, v1, pos);
  scratch_give(fd);
}

static void layernorm_fwd_t(colo_dtype_t t, void *out, float *mean, float *rstd, const void *inp,
                            const float *w, const float *b, int N, int C) {
  float *fi = widen(t, inp, (size_t)N * C), *fo = fresh((size_t)N * C);
  f32()->layernorm_fwd(fo, mean, rstd, fi, w, b, N, C);
  narrow(t, out, fo, (size_t)N * C);
  scratch_give(fi);
}

static void layernorm_bwd_t(colo_dtype_t t, void *dinp, float *dw, float *db, const void *dout,
                            const void *inp, const float *w, const float *mean, const float *rstd,
                            int N, int C) {
  size_t n = (size_t)N * C;
  float *fd = widen(t, dout, n), *fi = widen(t, inp, n), *fdi = widen(t, dinp, n);
  f32()->layernorm_bwd(fdi, dw, db, fd, fi, w, mean, rstd, N, C);
  narrow(t, dinp, fdi, n);
  scratch_give(fd);
  scratch_give(fi);
}

static void rmsnorm_fwd_t(colo_dtype_t t, void *out, float *rstd, const void *inp, const float *w,
                          int N, int C, float eps) {
  float *fi = widen(t, inp, (size_t)N * C), *fo = fresh((size_t)N * C);
  f32()->rmsnorm_fwd(fo, rstd, fi, w, N, C, eps);
  narrow(t, out, fo, (size_t)N * C);
  scratch_give(fi);
}

static void rmsnorm_bwd_t(colo_dtype_t t, void *dinp, float *dw, const void *dout, const void *inp,
                          const float *w, const float *rstd, int N, int C) {
  size_t n = (size_t)N * C;
  float *fd = widen(t, dout, n), *fi = widen(t, inp, n), *fdi = widen(t, dinp, n);
  f32()->rmsnorm_bwd(fdi, dw, fd, fi, w, rstd, N, C);
  narrow(t, dinp, fdi, n);
  scratch_give(fd);
  scratch_give(fi);
}

static void qk_norm_fwd_t(colo_dtype_t t, void *x, void *raw, float *rstd, const float *wq,
                          const float *wk, int N, int W, int NQ, int NK, int hs, float eps) {
  size_t n = (size_t)N * W, nr = (size_t)N * (NQ + NK) * hs;
  float *fx = widen(t, x, n), *fr = fresh(nr);
  f32()->qk_norm_fwd(fx, fr, rstd, wq, wk, N, W, NQ, NK, hs, eps);
  narrow(t, x, fx, n);
  narrow(t, raw, fr, nr);
}

static void qk_norm_bwd_t(colo_dtype_t t, void *dx, float *dwq, float *dwk, const void *raw,
                          const float *rstd, const float *wq, const float *wk, int N, int W, int NQ,
                          int NK, int hs) {
  size_t n = (size_t)N * W, nr = (size_t)N * (NQ + NK) * hs;
  float *fd = widen(t, dx, n), *fr = widen(t, raw, nr);
  f32()->qk_norm_bwd(fd, dwq, dwk, fr, rstd, wq, wk, N, W, NQ, NK, hs);
  narrow(t, dx, fd, n);
  scratch_give(fr);
}

static void rope_t(colo_dtype_t t, void *qkv, int B, int T, int C, int NH, int pos0,
                   const float *inv_freq, float mag, int dir, const int *pos) {
  size_t n = (size_t)B * T * 3 * C;
  float *f = widen(t, qkv, n);
  f32()->rope(f, B, T, C, NH, pos0, inv_freq, mag, dir, pos);
  narrow(t, qkv, f, n);
}

static void kv_expand_t(colo_dtype_t t, void *dst, const void *src, int N, int C, int NH, int NKV) {
  size_t ns = (size_t)N * (C + 2 * (size_t)NKV * (C / NH)), nd = (size_t)N * 3 * C;
  float *fs = widen(t, src, ns), *fd = fresh(nd);
  f32()->kv_expand(fd, fs, N, C, NH, NKV);
  narrow(t, dst, fd, nd);
  scratch_give(fs);
}

static void kv_reduce_t(colo_dtype_t t, void *dst, const void *src, int N, int C, int NH, int NKV) {
  size_t nd = (size_t)N * (C + 2 * (size_t)NKV * (C / NH)), ns = (size_t)N * 3 * C;
  float *fs = widen(t, src, ns), *fd = fresh(nd);
  f32()->kv_reduce(fd, fs, N, C, NH, NKV);
  narrow(t, dst, fd, nd);
  scratch_give(fs);
}

static void swiglu_fwd_t(colo_dtype_t t, void *out, const void *pre, int N, int H) {
  float *fp = widen(t, pre, (size_t)N * 2 * H), *fo = fresh((size_t)N * H);
  f32()->swiglu_fwd(fo, fp, N, H);
  narrow(t, out, fo, (size_t)N * H);
  scratch_give(fp);
}

static void swiglu_bwd_t(colo_dtype_t t, void *dpre, const void *pre, const void *dout, int N,
                         int H) {
  float *fp = widen(t, pre, (size_t)N * 2 * H), *fd = widen(t, dout, (size_t)N * H);
  float *fdp = fresh((size_t)N * 2 * H);
  f32()->swiglu_bwd(fdp, fp, fd, N, H);
  narrow(t, dpre, fdp, (size_t)N * 2 * H);
  scratch_give(fp);
  scratch_give(fd);
}

static void gelu_fwd_t(colo_dtype_t t, void *out, const void *inp, size_t n) {
  float *fi = widen(t, inp, n), *fo = fresh(n);
  f32()->gelu_fwd(fo, fi, n);
  narrow(t, out, fo, n);
  scratch_give(fi);
}

static void gelu_bwd_t(colo_dtype_t t, void *dinp, const void *inp, const void *dout, size_t n) {
  float *fi = widen(t, inp, n), *fd = widen(t, dout, n), *fdi = fresh(n);
  f32()->gelu_bwd(fdi, fi, fd, n);
  narrow(t, dinp, fdi, n);
  scratch_give(fi);
  scratch_give(fd);
}

/* the pair of entries, one after the other: rounded where they round */
static void matmul_gelu_fwd_t(colo_dtype_t t, void *out, void *pre, const void *inp, const void *w,
                              const float *b, int N, int C, int OC) {
  matmul_fwd_t(t, pre, inp, w, b, N, C, OC);
  gelu_fwd_t(t, out, pre, (size_t)N * OC);
}

static void matmul_gelu_bwd_t(colo_dtype_t t, void *dinp, float *dw, float *db, const void *dout,
                              const void *inp, const void *w, const void *pre, int N, int C,
                              int OC) {
  matmul_bwd_t(t, dinp, dw, db, dout, inp, w, N, C, OC);
  if (dinp)
    gelu_bwd_t(t, dinp, pre, dinp, (size_t)N * C);
}

static void attention_fwd_t(colo_dtype_t t, void *out, float *lse, const void *qkv, int B, int T,
                            int C, int NH, const int *pos) {
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  float *fq = widen(t, qkv, nq), *fo = fresh(no);
  f32()->attention_fwd(fo, lse, fq, B, T, C, NH, pos);
  narrow(t, out, fo, no);
  scratch_give(fq);
}

static void attention_bwd_t(colo_dtype_t t, void *dqkv, const void *dout, const void *qkv,
                            const float *lse, int B, int T, int C, int NH, const int *pos) {
  /* the fp32 table recomputes the probabilities and needs neither out nor lse */
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  float *fdq = fresh(nq), *fd = widen(t, dout, no), *fq = widen(t, qkv, nq);
  f32()->attention_bwd(fdq, fd, fq, NULL, lse, B, T, C, NH, pos);
  narrow(t, dqkv, fdq, nq);
  scratch_give(fd);
  scratch_give(fq);
}

static void add_t(colo_dtype_t t, void *out, const void *a, const void *b, size_t n) {
  float *fa = widen(t, a, n), *fb = widen(t, b, n), *fo = fresh(n);
  f32()->add(fo, fa, fb, n);
  narrow(t, out, fo, n);
  scratch_give(fa);
  scratch_give(fb);
}

static void crossentropy_fwd_t(colo_dtype_t t, float *losses, void *probs, const void *logits,
                               const int *targets, int N, int V) {
  size_t n = (size_t)N * V;
  float *f = widen(t, logits, n);
  f32()->crossentropy_fwd(losses, f, f, targets, N, V); /* the losses from fp32 probabilities */
  narrow(t, probs, f, n);
}

static void crossentropy_bwd_t(colo_dtype_t t, void *dlogits, const void *probs, const int *targets,
                               float dloss, int N, int V) {
  size_t n = (size_t)N * V;
  float *f = widen(t, probs, n);
  f32()->crossentropy_bwd(f, f, targets, dloss, N, V);
  narrow(t, dlogits, f, n);
}

static void crossentropy_fused_t(colo_dtype_t t, float *losses, void *logits, const int *targets,
                                 float dloss, int N, int V) {
  size_t n = (size_t)N * V;
  float *f = widen(t, logits, n);
  f32()->crossentropy_fused(losses, f, targets, dloss, N, V); /* no rounding in between */
  narrow(t, logits, f, n);
}

static void vocab_max_t(colo_dtype_t t, float *rowmax, const void *logits, int N, int Vl) {
  float *f = widen(t, logits, (size_t)N * Vl);
  f32()->vocab_max(rowmax, f, N, Vl);
  scratch_give(f);
}

static void vocab_sumexp_t(colo_dtype_t t, float *sum, const void *logits, const float *gmax, int N,
                           int Vl) {
  float *f = widen(t, logits, (size_t)N * Vl);
  f32()->vocab_sumexp(sum, f, gmax, N, Vl);
  scratch_give(f);
}

static void vocab_target_t(colo_dtype_t t, float *tlogit, const void *logits, const int *targets,
                           int v0, int N, int Vl) {
  float *f = widen(t, logits, (size_t)N * Vl);
  f32()->vocab_target(tlogit, f, targets, v0, N, Vl);
  scratch_give(f);
}

static void vocab_ce_bwd_t(colo_dtype_t t, void *dlogits, const void *logits, const float *gmax,
                           const float *gsum, const int *targets, int v0, float dloss, int N,
                           int Vl) {
  size_t n = (size_t)N * Vl;
  float *f = widen(t, logits, n);
  f32()->vocab_ce_bwd(f, f, gmax, gsum, targets, v0, dloss, N, Vl);
  narrow(t, dlogits, f, n);
}

static void to_act_t(colo_dtype_t t, void *dst, const float *src, size_t n) {
  colo_dtype_from_float(dst, src, n, t);
}

static void to_f32_t(colo_dtype_t t, float *dst, const void *src, size_t n) {
  colo_dtype_to_float(dst, src, n, t);
}

static void dropout_t(colo_dtype_t t, void *out, const void *inp, int N, int C, uint64_t key,
                      uint64_t row0, int col0, uint32_t thresh, float scale) {
  size_t n = (size_t)N * C;
  float *f = widen(t, inp, n);
  f32()->dropout(f, f, N, C, key, row0, col0, thresh, scale);
  narrow(t, out, f, n);
}

static void noise_t(colo_dtype_t t, void *x, int N, int C, uint64_t key, uint64_t row0, float mag) {
  size_t n = (size_t)N * C;
  float *f = widen(t, x, n);
  f32()->noise(f, N, C, key, row0, mag);
  narrow(t, x, f, n);
}

static void scale_rows_t(colo_dtype_t t, void *x, const float *w, int N, int C) {
  size_t n = (size_t)N * C;
  float *f = widen(t, x, n);
  f32()->scale_rows(f, w, N, C);
  narrow(t, x, f, n);
}

static void dora_norm_t(colo_dtype_t t, float *sq, const void *w, const void *dt, int in, int out) {
  size_t n = (size_t)in * out;
  float *fw = widen(t, w, n), *fd = widen(t, dt, n);
  f32()->dora_norm(sq, fw, fd, in, out);
  scratch_give(fw);
  scratch_give(fd);
}

static void dora_scale_t(colo_dtype_t t, void *out, const void *inp, const float *mag,
                         const float *sq, const float *b, int N, int C) {
  size_t n = (size_t)N * C;
  float *f = widen(t, inp, n);
  f32()->dora_scale(f, f, mag, sq, b, N, C);
  narrow(t, out, f, n);
}

static void dora_add_t(colo_dtype_t t, void *out, const void *inp, const float *mag,
                       const float *sq, const float *b, int N, int C) {
  size_t n = (size_t)N * C;
  float *fo = widen(t, out, n), *fi = widen(t, inp, n);
  f32()->dora_add(fo, fi, mag, sq, b, N, C);
  narrow(t, out, fo, n);
  scratch_give(fi);
}

static void dora_dmag_t(colo_dtype_t t, float *dmag, const void *dout, const void *z,
                        const float *sq, int N, int C) {
  size_t n = (size_t)N * C;
  float *fd = widen(t, dout, n), *fz = widen(t, z, n);
  f32()->dora_dmag(dmag, fd, fz, sq, N, C);
  scratch_give(fd);
  scratch_give(fz);
}

static void embed_fwd_t(colo_dtype_t t, void *out, const int *tokens, const void *table, int N,
                        int C, int V) {
  colo_embed_rows(out, tokens, table, N, (size_t)C * colo_dtype_size(t), V);
}

static void dequant_nf4_t(colo_dtype_t t, void *w, const uint8_t *codes, const float *absmax,
                          int rows, int cols) {
  size_t n = (size_t)rows * (size_t)cols;
  float *f = fresh(n);
  f32()->dequant_nf4(f, codes, absmax, rows, cols);
  narrow(t, w, f, n);
}

/* ---- a table per storage type: entries that name their type and call the above ---- */

/* b.entry = entry_sfx, for each entry of a list */
#define SET_OP(n, sfx) b.n = n##_##sfx;

#define LOWP_TABLE(sfx, T)                                                                         \
  static void matmul_fwd_##sfx(void *o, const void *i, const void *w, const float *b, int N,       \
                               int C, int OC) {                                                    \
    matmul_fwd_t(T, o, i, w, b, N, C, OC);                                                         \
  }                                                                                                \
  static void matmul_bwd_##sfx(void *di, float *dw, float *db, const void *d, const void *i,       \
                               const void *w, int N, int C, int OC) {                              \
    matmul_bwd_t(T, di, dw, db, d, i, w, N, C, OC);                                                \
  }                                                                                                \
  static void matmul_gelu_fwd_##sfx(void *o, void *pre, const void *i, const void *w,              \
                                    const float *b, int N, int C, int OC) {                        \
    matmul_gelu_fwd_t(T, o, pre, i, w, b, N, C, OC);                                               \
  }                                                                                                \
  static void matmul_gelu_bwd_##sfx(void *di, float *dw, float *db, const void *d, const void *i,  \
                                    const void *w, const void *pre, int N, int C, int OC) {        \
    matmul_gelu_bwd_t(T, di, dw, db, d, i, w, pre, N, C, OC);                                      \
  }                                                                                                \
  static void lmhead_fwd_##sfx(void *o, const void *i, const void *w, int N, int C, int V) {       \
    lmhead_fwd_t(T, o, i, w, N, C, V);                                                             \
  }                                                                                                \
  static void lmhead_bwd_##sfx(void *di, float *dw, const void *d, const void *i, const void *w,   \
                               int N, int C, int V) {                                              \
    lmhead_bwd_t(T, di, dw, d, i, w, N, C, V);                                                     \
  }                                                                                                \
  static void encoder_fwd_##sfx(void *o, const int *tok, const float *wte, const float *wpe,       \
                                int B, int Tt, int C, int v0, int v1, const int *pos) {            \
    encoder_fwd_t(T, o, tok, wte, wpe, B, Tt, C, v0, v1, pos);                                     \
  }                                                                                                \
  static void encoder_bwd_##sfx(float *dwte, float *dwpe, const void *d, const int *tok, int B,    \
                                int Tt, int C, int v0, int v1, const int *pos) {                   \
    encoder_bwd_t(T, dwte, dwpe, d, tok, B, Tt, C, v0, v1, pos);                                   \
  }                                                                                                \
  static void layernorm_fwd_##sfx(void *o, float *mean, float *rstd, const void *i,                \
                                  const float *w, const float *b, int N, int C) {                  \
    layernorm_fwd_t(T, o, mean, rstd, i, w, b, N, C);                                              \
  }                                                                                                \
  static void layernorm_bwd_##sfx(void *di, float *dw, float *db, const void *d, const void *i,    \
                                  const float *w, const float *mean, const float *rstd, int N,     \
                                  int C) {                                                         \
    layernorm_bwd_t(T, di, dw, db, d, i, w, mean, rstd, N, C);                                     \
  }                                                                                                \
  static void gelu_fwd_##sfx(void *o, const void *i, size_t n) {                                   \
    gelu_fwd_t(T, o, i, n);                                                                        \
  }                                                                                                \
  static void rmsnorm_fwd_##sfx(void *o, float *rstd, const void *i, const float *w, int N, int C, \
                                float eps) {                                                       \
    rmsnorm_fwd_t(T, o, rstd, i, w, N, C, eps);                                                    \
  }                                                                                                \
  static void rmsnorm_bwd_##sfx(void *di, float *dw, const void *d, const void *i, const float *w, \
                                const float *rstd, int N, int C) {                                 \
    rmsnorm_bwd_t(T, di, dw, d, i, w, rstd, N, C);                                                 \
  }                                                                                                \
  static void qk_norm_fwd_##sfx(void *x, void *r, float *rstd, const float *wq, const float *wk,   \
                                int N, int W, int NQ, int NK, int hs, float eps) {                 \
    qk_norm_fwd_t(T, x, r, rstd, wq, wk, N, W, NQ, NK, hs, eps);                                   \
  }                                                                                                \
  static void qk_norm_bwd_##sfx(void *dx, float *dwq, float *dwk, const void *r,                   \
                                const float *rstd, const float *wq, const float *wk, int N, int W, \
                                int NQ, int NK, int hs) {                                          \
    qk_norm_bwd_t(T, dx, dwq, dwk, r, rstd, wq, wk, N, W, NQ, NK, hs);                             \
  }                                                                                                \
  static void rope_##sfx(void *q, int B, int Tt, int C, int NH, int p0, const float *f, float mg,  \
                         int dir, const int *pos) {                                                \
    rope_t(T, q, B, Tt, C, NH, p0, f, mg, dir, pos);                                               \
  }                                                                                                \
  static void swiglu_fwd_##sfx(void *o, const void *p, int N, int H) {                             \
    swiglu_fwd_t(T, o, p, N, H);                                                                   \
  }                                                                                                \
  static void kv_expand_##sfx(void *d, const void *s, int N, int C, int NH, int NKV) {             \
    kv_expand_t(T, d, s, N, C, NH, NKV);                                                           \
  }                                                                                                \
  static void kv_reduce_##sfx(void *d, const void *s, int N, int C, int NH, int NKV) {             \
    kv_reduce_t(T, d, s, N, C, NH, NKV);                                                           \
  }                                                                                                \
  static void swiglu_bwd_##sfx(void *dp, const void *p, const void *d, int N, int H) {             \
    swiglu_bwd_t(T, dp, p, d, N, H);                                                               \
  }                                                                                                \
  static void gelu_bwd_##sfx(void *di, const void *i, const void *d, size_t n) {                   \
    gelu_bwd_t(T, di, i, d, n);                                                                    \
  }                                                                                                \
  static void attention_fwd_##sfx(void *o, float *lse, const void *q, int B, int Tt, int C,        \
                                  int NH, const int *pos) {                                        \
    attention_fwd_t(T, o, lse, q, B, Tt, C, NH, pos);                                              \
  }                                                                                                \
  static void attention_bwd_##sfx(void *dq, const void *d, const void *q, const void *o,           \
                                  const float *lse, int B, int Tt, int C, int NH,                  \
                                  const int *pos) {                                                \
    (void)o;                                                                                       \
    attention_bwd_t(T, dq, d, q, lse, B, Tt, C, NH, pos);                                          \
  }                                                                                                \
  static void add_##sfx(void *o, const void *a, const void *b, size_t n) {                         \
    add_t(T, o, a, b, n);                                                                          \
  }                                                                                                \
  static void crossentropy_fwd_##sfx(float *l, void *p, const void *lg, const int *tg, int N,      \
                                     int V) {                                                      \
    crossentropy_fwd_t(T, l, p, lg, tg, N, V);                                                     \
  }                                                                                                \
  static void crossentropy_bwd_##sfx(void *dl, const void *p, const int *tg, float s, int N,       \
                                     int V) {                                                      \
    crossentropy_bwd_t(T, dl, p, tg, s, N, V);                                                     \
  }                                                                                                \
  static void crossentropy_fused_##sfx(float *l, void *lg, const int *tg, float s, int N, int V) { \
    crossentropy_fused_t(T, l, lg, tg, s, N, V);                                                   \
  }                                                                                                \
  static void vocab_max_##sfx(float *m, const void *lg, int N, int Vl) {                           \
    vocab_max_t(T, m, lg, N, Vl);                                                                  \
  }                                                                                                \
  static void vocab_sumexp_##sfx(float *s, const void *lg, const float *gm, int N, int Vl) {       \
    vocab_sumexp_t(T, s, lg, gm, N, Vl);                                                           \
  }                                                                                                \
  static void vocab_target_##sfx(float *tl, const void *lg, const int *tg, int v0, int N,          \
                                 int Vl) {                                                         \
    vocab_target_t(T, tl, lg, tg, v0, N, Vl);                                                      \
  }                                                                                                \
  static void vocab_ce_bwd_##sfx(void *dl, const void *lg, const float *gm, const float *gs,       \
                                 const int *tg, int v0, float s, int N, int Vl) {                  \
    vocab_ce_bwd_t(T, dl, lg, gm, gs, tg, v0, s, N, Vl);                                           \
  }                                                                                                \
  static void to_act_##sfx(void *d, const float *s, size_t n) {                                    \
    to_act_t(T, d, s, n);                                                                          \
  }                                                                                                \
  static void to_f32_##sfx(float *d, const void *s, size_t n) {                                    \
    to_f32_t(T, d, s, n);                                                                          \
  }                                                                                                \
  static void dequant_nf4_##sfx(void *w, const uint8_t *c, const float *a, int r, int cl) {        \
    dequant_nf4_t(T, w, c, a, r, cl);                                                              \
  }                                                                                                \
  static void embed_fwd_##sfx(void *o, const int *tk, const void *tb, int N, int C, int V) {       \
    embed_fwd_t(T, o, tk, tb, N, C, V);                                                            \
  }                                                                                                \
  static void dropout_##sfx(void *o, const void *i, int N, int C, uint64_t k, uint64_t r0, int c0, \
                            uint32_t th, float s) {                                                \
    dropout_t(T, o, i, N, C, k, r0, c0, th, s);                                                    \
  }                                                                                                \
  static void noise_##sfx(void *x, int N, int C, uint64_t k, uint64_t r0, float mag) {             \
    noise_t(T, x, N, C, k, r0, mag);                                                               \
  }                                                                                                \
  static void scale_rows_##sfx(void *x, const float *w, int N, int C) {                            \
    scale_rows_t(T, x, w, N, C);                                                                   \
  }                                                                                                \
  static void dora_norm_##sfx(float *sq, const void *w, const void *d, int in, int out) {          \
    dora_norm_t(T, sq, w, d, in, out);                                                             \
  }                                                                                                \
  static void dora_scale_##sfx(void *o, const void *i, const float *m, const float *sq,            \
                               const float *b, int N, int C) {                                     \
    dora_scale_t(T, o, i, m, sq, b, N, C);                                                         \
  }                                                                                                \
  static void dora_add_##sfx(void *o, const void *i, const float *m, const float *sq,              \
                             const float *b, int N, int C) {                                       \
    dora_add_t(T, o, i, m, sq, b, N, C);                                                           \
  }                                                                                                \
  static void dora_dmag_##sfx(float *dm, const void *d, const void *z, const float *sq, int N,     \
                              int C) {                                                             \
    dora_dmag_t(T, dm, d, z, sq, N, C);                                                            \
  }                                                                                                \
  static colo_backend_t table_##sfx(void) {                                                        \
    colo_backend_t b = *f32(); /* memory, the optimizer and the norms: the fp32 table's */         \
    b.name = "cpu-" #sfx;                                                                          \
    b.act_dtype = T;                                                                               \
    b.act_size = 2;                                                                                \
    COLO_ACT_OPS(SET_OP, sfx)                                                                      \
    return b;                                                                                      \
  }

LOWP_TABLE(bf16, COLO_DTYPE_BF16)
LOWP_TABLE(fp16, COLO_DTYPE_F16)

static colo_backend_t BF16, FP16;
static pthread_once_t made = PTHREAD_ONCE_INIT;

static void make_tables(void) {
  BF16 = table_bf16();
  FP16 = table_fp16();
}

const colo_backend_t *colo_backend_cpu_dtype(colo_dtype_t t) {
  pthread_once(&made, make_tables);
  return t == COLO_DTYPE_BF16 ? &BF16 : t == COLO_DTYPE_F16 ? &FP16 : colo_backend_cpu();
}

colo_dtype_t colo_math_dtype(int math) {
  return math == COLO_MATH_BF16   ? COLO_DTYPE_BF16
         : math == COLO_MATH_FP16 ? COLO_DTYPE_F16
                                  : COLO_DTYPE_F32;
}
