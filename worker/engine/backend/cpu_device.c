/* The CPU tables dressed as a device: device = 1, so the model, the training loop and the
 * checkpoints take their GPU paths, and memory that only the table may touch, as a GPU's.
 * COLO_CUDA_EMULATE=1 makes colo_backend_cuda return it (cuda_loader.c): `--device gpu` then
 * runs without a GPU, and the GPU's tests (test_cuda, integration_gpu_train) check the GPU paths
 * of everything above the backend on every CI run.
 *
 * Two mistakes that a GPU punishes, and a CPU run would not see, are caught at once:
 *   - host code reading or writing backend memory itself. Each allocation is a mapping of its
 *     own, kept PROT_NONE; an operation opens the allocations its arguments point into for its
 *     length and closes them again, so a host access outside the table faults (a signal handler
 *     names the allocation when no sanitizer has one of its own), and so does an entry that
 *     strays out of its arguments' allocations;
 *   - a table entry given host memory: every pointer an entry gets must lie in a live
 *     allocation, or the process stops naming the entry.
 * It computes what the CPU table of the same storage type computes, bit for bit. Slower than the
 * CPU table (two mprotect calls per argument per operation): it is for tests. TF32 has no CPU form;
 * it runs as fp32. Operations must come from one thread at a time (the GPU backend asks the same).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend.h"

/* ---- the memory: a mapping per allocation ---- */

typedef struct {
  char *p;
  size_t len; /* mapped: the request rounded up to pages */
} mapping_t;

static struct {
  pthread_mutex_t lock;
  mapping_t *m;
  size_t n, cap;
  size_t page;
  int open; /* inside an operation: mappings readable and writable */
} mem = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0, 0};

static void die(const char *what, const char *detail) {
  fprintf(stderr, "colo: emulated GPU: %s%s\n", what, detail);
  abort();
}

/* the allocation holding [p, p + bytes), or NULL */
static const mapping_t *find(const void *p, size_t bytes) {
  const char *c = p;
  for (size_t i = 0; i < mem.n; i++)
    if (c >= mem.m[i].p && c + bytes <= mem.m[i].p + mem.m[i].len)
      return &mem.m[i];
  return NULL;
}

/* An operation opens the allocations its arguments point into, and only those: an entry that
 * reads or writes past them faults as host code would. */
enum { MAX_ARGS = 8 };
static const mapping_t *opened[MAX_ARGS];
static int n_opened;

static void set_prot(const mapping_t *m, int prot) {
  if (mprotect(m->p, m->len, prot) != 0)
    die("mprotect failed", "");
}

static void open_arg(const void *p, size_t bytes, const char *entry) {
  if (!p)
    return; /* NULL is the entry's to judge */
  const mapping_t *m = find(p, bytes);
  if (!m) {
    char detail[160];
    snprintf(detail, sizeof detail, " got %p, which is not device memory (host memory?)", p);
    die(entry, detail);
  }
  for (int i = 0; i < n_opened; i++)
    if (opened[i] == m)
      return;
  if (n_opened == MAX_ARGS)
    die(entry, ": too many arguments");
  set_prot(m, PROT_READ | PROT_WRITE);
  opened[n_opened++] = m;
}

static void ops_begin(void) {
  mem.open = 1;
}

static void ops_end(void) {
  for (int i = 0; i < n_opened; i++)
    set_prot(opened[i], PROT_NONE);
  n_opened = 0;
  mem.open = 0;
}

static struct sigaction previous_segv;

static void on_segv(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  const mapping_t *m = mem.open ? NULL : find(si->si_addr, 1);
  if (m) {
    char msg[200];
    int n = snprintf(msg, sizeof msg,
                     "colo: emulated GPU: host code touched device memory at %p (an allocation "
                     "of %zu bytes): only the backend's table may\n",
                     si->si_addr, m->len);
    if (n > 0 && write(2, msg, (size_t)n) < 0) { /* nothing more to do */
    }
  }
  sigaction(sig, &previous_segv, NULL); /* then the default: the fault ends the process */
}

static void install_handler(void) {
  struct sigaction cur;
  if (sigaction(SIGSEGV, NULL, &cur) != 0 || cur.sa_handler != SIG_DFL)
    return; /* a sanitizer's handler reports with a stack trace: better */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
}

/* Allocations of 2 MiB and more start at a 2 MiB boundary, as transparent huge pages (asked
 * for): opening and closing one (mprotect) then changes a page-table entry per 2 MiB rather
 * than per 4 KiB page, which was most of an emulated step's time (the flat buffers an entry's
 * argument points into are opened whole). Its end is still its last 4 KiB page's. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *map_aligned(size_t len) {
  if (len < HUGE_PAGE)
    return mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *p = mmap(NULL, len + HUGE_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return p;
  char *a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (a > p)
    munmap(p, (size_t)(a - p));
  if (a + len < p + len + HUGE_PAGE)
    munmap(a + len, (size_t)(p + len + HUGE_PAGE - (a + len)));
  madvise(a, len, MADV_HUGEPAGE); /* a hint: where the kernel declines, small pages still work */
  return a;
}

static void *dev_alloc(size_t bytes) {
  size_t len = (bytes + mem.page - 1) / mem.page * mem.page; /* its end still a page's */
  void *p = map_aligned(len ? len : mem.page);
  if (p == MAP_FAILED)
    return NULL; /* the pool reports it */
  pthread_mutex_lock(&mem.lock);
  if (mem.n == mem.cap) {
    size_t cap = mem.cap ? 2 * mem.cap : 64;
    mapping_t *m = realloc(mem.m, cap * sizeof *m);
    if (!m) {
      pthread_mutex_unlock(&mem.lock);
      munmap(p, len ? len : mem.page);
      return NULL;
    }
    mem.m = m, mem.cap = cap;
  }
  mem.m[mem.n++] = (mapping_t){p, len ? len : mem.page};
  pthread_mutex_unlock(&mem.lock);
  return p; /* zeroed, as an anonymous mapping is */
}

static void dev_free(void *p) {
  if (!p)
    return;
  pthread_mutex_lock(&mem.lock);
  for (size_t i = 0; i < mem.n; i++)
    if (mem.m[i].p == p) {
      munmap(p, mem.m[i].len);
      mem.m[i] = mem.m[--mem.n];
      pthread_mutex_unlock(&mem.lock);
      return;
    }
  pthread_mutex_unlock(&mem.lock);
  die("freeing memory it did not allocate", "");
}

static const colo_allocator_t ALLOCATOR = {dev_alloc, dev_free};

static int owns(const void *p) {
  return p && find(p, 1) != NULL;
}

/* ---- the memory entries ---- */

static void zero(void *p, size_t bytes) {
  if (!find(p, bytes))
    die("zero", ": not device memory, or past an allocation's end");
  open_arg(p, bytes, "zero");
  ops_begin();
  memset(p, 0, bytes);
  ops_end();
}

static void copy(void *dst, const void *src, size_t bytes) {
  if (!find(dst, bytes) || !find(src, bytes))
    die("copy", ": not device memory, or past an allocation's end");
  open_arg(dst, bytes, "copy");
  open_arg(src, bytes, "copy");
  ops_begin();
  memmove(dst, src, bytes);
  ops_end();
}

static void copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                   size_t rows) {
  if (!rows || !width)
    return;
  size_t dspan = (rows - 1) * dpitch + width, sspan = (rows - 1) * spitch + width;
  if (dpitch < width || spitch < width || !find(dst, dspan) || !find(src, sspan))
    die("copy2d", ": not device memory, past an allocation's end, or a pitch below the width");
  open_arg(dst, dspan, "copy2d");
  open_arg(src, sspan, "copy2d");
  ops_begin();
  for (size_t r = 0; r < rows; r++)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  ops_end();
}

/* a copy between device memory `dev` and host memory `host` (one of them dst, the other src) */
static void host_copy(void *dst, const void *src, size_t bytes, const void *dev, const void *host,
                      const char *what, const char *why) {
  if (!find(dev, bytes) || find(host, 1))
    die(what, why);
  open_arg(dev, bytes, what);
  ops_begin();
  memcpy(dst, src, bytes);
  ops_end();
}

static void to_host(void *dst, const void *src, size_t bytes) {
  host_copy(dst, src, bytes, src, dst, "to_host",
            ": the source must be device memory and the destination host memory");
}

static void from_host(void *dst, const void *src, size_t bytes) {
  host_copy(dst, src, bytes, dst, src, "from_host",
            ": the destination must be device memory and the source host memory");
}

/* ---- the compute entries: the CPU table's, with their pointers checked and the memory open ----
 */

/* BODY: the call on the CPU table `base`; ARGS...: its pointer arguments */
#define RUN(entry, call, ...)                                                                      \
  do {                                                                                             \
    const void *ptrs_[] = {__VA_ARGS__};                                                           \
    for (size_t i_ = 0; i_ < sizeof ptrs_ / sizeof ptrs_[0]; i_++)                                 \
      open_arg(ptrs_[i_], 1, entry);                                                               \
    ops_begin();                                                                                   \
    call;                                                                                          \
    ops_end();                                                                                     \
  } while (0)

/* b.entry = entry_sfx, for each entry of a list */
#define SET_OP(n, sfx) b.n = n##_##sfx;

/* "page-locked" host memory: a mapping of its own with its length in front, so that a free()
 * of it (or a host_free of malloc's) is an error the sanitizers and glibc report, as mixing
 * cudaFreeHost and free would be on a GPU */
static void *host_alloc(size_t bytes) {
  size_t len = bytes + 64;
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  memcpy(p, &len, sizeof len);
  return p + 64;
}

static void host_free(void *p) {
  size_t len;
  memcpy(&len, (char *)p - 64, sizeof len);
  munmap((char *)p - 64, len);
}

#define EMU_TABLE(sfx, DT)                                                                         \
  static const colo_backend_t *base_##sfx(void) {                                                  \
    return colo_backend_cpu_dtype(DT);                                                             \
  }                                                                                                \
  static void to_act_##sfx(void *d, const float *s, size_t n) {                                    \
    RUN("to_act", base_##sfx()->to_act(d, s, n), d, s);                                            \
  }                                                                                                \
  static void to_f32_##sfx(float *d, const void *s, size_t n) {                                    \
    RUN("to_f32", base_##sfx()->to_f32(d, s, n), d, s);                                            \
  }                                                                                                \
  static void dequant_nf4_##sfx(void *w, const uint8_t *c, const float *a, int r, int cl) {        \
    RUN("dequant_nf4", base_##sfx()->dequant_nf4(w, c, a, r, cl), w, c, a);                        \
  }                                                                                                \
  static void embed_fwd_##sfx(void *o, const int *tk, const void *tb, int N, int C, int V) {       \
    RUN("embed_fwd", base_##sfx()->embed_fwd(o, tk, tb, N, C, V), o, tk, tb);                      \
  }                                                                                                \
  static void dropout_##sfx(void *o, const void *i, int N, int C, uint64_t k, uint64_t r0, int c0, \
                            uint32_t th, float s) {                                                \
    RUN("dropout", base_##sfx()->dropout(o, i, N, C, k, r0, c0, th, s), o, i);                     \
  }                                                                                                \
  static void noise_##sfx(void *x, int N, int C, uint64_t k, uint64_t r0, float mag) {             \
    RUN("noise", base_##sfx()->noise(x, N, C, k, r0, mag), x);                                     \
  }                                                                                                \
  static void scale_rows_##sfx(void *x, const float *w, int N, int C) {                            \
    RUN("scale_rows", base_##sfx()->scale_rows(x, w, N, C), x, w);                                 \
  }                                                                                                \
  static void dora_norm_##sfx(float *sq, const void *w, const void *d, int in, int out) {          \
    RUN("dora_norm", base_##sfx()->dora_norm(sq, w, d, in, out), sq, w, d);                        \
  }                                                                                                \
  static void dora_scale_##sfx(void *o, const void *i, const float *m, const float *sq,            \
                               const float *b, int N, int C) {                                     \
    RUN("dora_scale", base_##sfx()->dora_scale(o, i, m, sq, b, N, C), o, i, m, sq, b);             \
  }                                                                                                \
  static void dora_add_##sfx(void *o, const void *i, const float *m, const float *sq,              \
                             const float *b, int N, int C) {                                       \
    RUN("dora_add", base_##sfx()->dora_add(o, i, m, sq, b, N, C), o, i, m, sq, b);                 \
  }                                                                                                \
  static void dora_dmag_##sfx(float *dm, const void *d, const void *z, const float *sq, int N,     \
                              int C) {                                                             \
    RUN("dora_dmag", base_##sfx()->dora_dmag(dm, d, z, sq, N, C), dm, d, z, sq);                   \
  }                                                                                                \
  static void matmul_fwd_##sfx(void *o, const void *i, const void *w, const float *b, int N,       \
                               int C, int OC) {                                                    \
    RUN("matmul_fwd", base_##sfx()->matmul_fwd(o, i, w, b, N, C, OC), o, i, w, b);                 \
  }                                                                                                \
  static void matmul_bwd_##sfx(void *di, float *dw, float *db, const void *d, const void *i,       \
                               const void *w, int N, int C, int OC) {                              \
    RUN("matmul_bwd", base_##sfx()->matmul_bwd(di, dw, db, d, i, w, N, C, OC), di, dw, db, d, i,   \
        w);                                                                                        \
  }                                                                                                \
  static void matmul_gelu_fwd_##sfx(void *o, void *pre, const void *i, const void *w,              \
                                    const float *b, int N, int C, int OC) {                        \
    RUN("matmul_gelu_fwd", base_##sfx()->matmul_gelu_fwd(o, pre, i, w, b, N, C, OC), o, pre, i, w, \
        b);                                                                                        \
  }                                                                                                \
  static void matmul_gelu_bwd_##sfx(void *di, float *dw, float *db, const void *d, const void *i,  \
                                    const void *w, const void *pre, int N, int C, int OC) {        \
    RUN("matmul_gelu_bwd", base_##sfx()->matmul_gelu_bwd(di, dw, db, d, i, w, pre, N, C, OC), di,  \
        dw, db, d, i, w, pre);                                                                     \
  }                                                                                                \
  static void lmhead_fwd_##sfx(void *o, const void *i, const void *w, int N, int C, int V) {       \
    RUN("lmhead_fwd", base_##sfx()->lmhead_fwd(o, i, w, N, C, V), o, i, w);                        \
  }                                                                                                \
  static void lmhead_bwd_##sfx(void *di, float *dw, const void *d, const void *i, const void *w,   \
                               int N, int C, int V) {                                              \
    RUN("lmhead_bwd", base_##sfx()->lmhead_bwd(di, dw, d, i, w, N, C, V), di, dw, d, i, w);        \
  }                                                                                                \
  static void encoder_fwd_##sfx(void *o, const int *tok, const float *wte, const float *wpe,       \
                                int B, int T, int C, int v0, int v1, const int *pos) {             \
    RUN("encoder_fwd", base_##sfx()->encoder_fwd(o, tok, wte, wpe, B, T, C, v0, v1, pos), o, tok,  \
        wte, wpe, pos);                                                                            \
  }                                                                                                \
  static void encoder_bwd_##sfx(float *dwte, float *dwpe, const void *d, const int *tok, int B,    \
                                int T, int C, int v0, int v1, const int *pos) {                    \
    RUN("encoder_bwd", base_##sfx()->encoder_bwd(dwte, dwpe, d, tok, B, T, C, v0, v1, pos), dwte,  \
        dwpe, d, tok, pos);                                                                        \
  }                                                                                                \
  static void layernorm_fwd_##sfx(void *o, float *mean, float *rstd, const void *i,                \
                                  const float *w, const float *b, int N, int C) {                  \
    RUN("layernorm_fwd", base_##sfx()->layernorm_fwd(o, mean, rstd, i, w, b, N, C), o, mean, rstd, \
        i, w, b);                                                                                  \
  }                                                                                                \
  static void layernorm_bwd_##sfx(void *di, float *dw, float *db, const void *d, const void *i,    \
                                  const float *w, const float *mean, const float *rstd, int N,     \
                                  int C) {                                                         \
    RUN("layernorm_bwd", base_##sfx()->layernorm_bwd(di, dw, db, d, i, w, mean, rstd, N, C), di,   \
        dw, db, d, i, w, mean, rstd);                                                              \
  }                                                                                                \
  static void rmsnorm_fwd_##sfx(void *o, float *rstd, const void *i, const float *w, int N, int C, \
                                float eps) {                                                       \
    RUN("rmsnorm_fwd", base_##sfx()->rmsnorm_fwd(o, rstd, i, w, N, C, eps), o, rstd, i, w);        \
  }                                                                                                \
  static void rmsnorm_bwd_##sfx(void *di, float *dw, const void *d, const void *i, const float *w, \
                                const float *rstd, int N, int C) {                                 \
    RUN("rmsnorm_bwd", base_##sfx()->rmsnorm_bwd(di, dw, d, i, w, rstd, N, C), di, dw, d, i, w,    \
        rstd);                                                                                     \
  }                                                                                                \
  static void qk_norm_fwd_##sfx(void *x, void *r, float *rstd, const float *wq, const float *wk,   \
                                int N, int W, int NQ, int NK, int hs, float eps) {                 \
    RUN("qk_norm_fwd", base_##sfx()->qk_norm_fwd(x, r, rstd, wq, wk, N, W, NQ, NK, hs, eps), x, r, \
        rstd, wq, wk);                                                                             \
  }                                                                                                \
  static void qk_norm_bwd_##sfx(void *dx, float *dwq, float *dwk, const void *r,                   \
                                const float *rstd, const float *wq, const float *wk, int N, int W, \
                                int NQ, int NK, int hs) {                                          \
    RUN("qk_norm_bwd", base_##sfx()->qk_norm_bwd(dx, dwq, dwk, r, rstd, wq, wk, N, W, NQ, NK, hs), \
        dx, dwq, dwk, r, rstd, wq, wk);                                                            \
  }                                                                                                \
  static void rope_##sfx(void *q, int B, int T, int C, int NH, int p0, const float *f, float mg,   \
                         int dir, const int *pos) {                                                \
    RUN("rope", base_##sfx()->rope(q, B, T, C, NH, p0, f, mg, dir, pos), q, f, pos);               \
  }                                                                                                \
  static void kv_expand_##sfx(void *d, const void *s, int N, int C, int NH, int NKV) {             \
    RUN("kv_expand", base_##sfx()->kv_expand(d, s, N, C, NH, NKV), d, s);                          \
  }                                                                                                \
  static void kv_reduce_##sfx(void *d, const void *s, int N, int C, int NH, int NKV) {             \
    RUN("kv_reduce", base_##sfx()->kv_reduce(d, s, N, C, NH, NKV), d, s);                          \
  }                                                                                                \
  static void swiglu_fwd_##sfx(void *o, const void *p, int N, int H) {                             \
    RUN("swiglu_fwd", base_##sfx()->swiglu_fwd(o, p, N, H), o, p);                                 \
  }                                                                                                \
  static void swiglu_bwd_##sfx(void *dp, const void *p, const void *d, int N, int H) {             \
    RUN("swiglu_bwd", base_##sfx()->swiglu_bwd(dp, p, d, N, H), dp, p, d);                         \
  }                                                                                                \
  static void gelu_fwd_##sfx(void *o, const void *i, size_t n) {                                   \
    RUN("gelu_fwd", base_##sfx()->gelu_fwd(o, i, n), o, i);                                        \
  }                                                                                                \
  static void gelu_bwd_##sfx(void *di, const void *i, const void *d, size_t n) {                   \
    RUN("gelu_bwd", base_##sfx()->gelu_bwd(di, i, d, n), di, i, d);                                \
  }                                                                                                \
  static void attention_fwd_##sfx(void *o, float *lse, const void *q, int B, int T, int C, int NH, \
                                  const int *pos) {                                                \
    RUN("attention_fwd", base_##sfx()->attention_fwd(o, lse, q, B, T, C, NH, pos), o, lse, q,      \
        pos);                                                                                      \
  }                                                                                                \
  static void attention_bwd_##sfx(void *dq, const void *d, const void *q, const void *o,           \
                                  const float *lse, int B, int T, int C, int NH, const int *pos) { \
    RUN("attention_bwd", base_##sfx()->attention_bwd(dq, d, q, o, lse, B, T, C, NH, pos), dq, d,   \
        q, o, lse, pos);                                                                           \
  }                                                                                                \
  static void add_##sfx(void *o, const void *a, const void *b, size_t n) {                         \
    RUN("add", base_##sfx()->add(o, a, b, n), o, a, b);                                            \
  }                                                                                                \
  static void crossentropy_fwd_##sfx(float *l, void *p, const void *lg, const int *tg, int N,      \
                                     int V) {                                                      \
    RUN("crossentropy_fwd", base_##sfx()->crossentropy_fwd(l, p, lg, tg, N, V), l, p, lg, tg);     \
  }                                                                                                \
  static void crossentropy_bwd_##sfx(void *dl, const void *p, const int *tg, float s, int N,       \
                                     int V) {                                                      \
    RUN("crossentropy_bwd", base_##sfx()->crossentropy_bwd(dl, p, tg, s, N, V), dl, p, tg);        \
  }                                                                                                \
  static void crossentropy_fused_##sfx(float *l, void *lg, const int *tg, float s, int N, int V) { \
    RUN("crossentropy_fused", base_##sfx()->crossentropy_fused(l, lg, tg, s, N, V), l, lg, tg);    \
  }                                                                                                \
  static void vocab_max_##sfx(float *m, const void *lg, int N, int Vl) {                           \
    RUN("vocab_max", base_##sfx()->vocab_max(m, lg, N, Vl), m, lg);                                \
  }                                                                                                \
  static void vocab_sumexp_##sfx(float *s, const void *lg, const float *gm, int N, int Vl) {       \
    RUN("vocab_sumexp", base_##sfx()->vocab_sumexp(s, lg, gm, N, Vl), s, lg, gm);                  \
  }                                                                                                \
  static void vocab_target_##sfx(float *t, const void *lg, const int *tg, int v0, int N, int Vl) { \
    RUN("vocab_target", base_##sfx()->vocab_target(t, lg, tg, v0, N, Vl), t, lg, tg);              \
  }                                                                                                \
  static void vocab_ce_bwd_##sfx(void *dl, const void *lg, const float *gm, const float *gs,       \
                                 const int *tg, int v0, float s, int N, int Vl) {                  \
    RUN("vocab_ce_bwd", base_##sfx()->vocab_ce_bwd(dl, lg, gm, gs, tg, v0, s, N, Vl), dl, lg, gm,  \
        gs, tg);                                                                                   \
  }                                                                                                \
  static void adamw_##sfx(float *p, const float *g, float *m, float *v, size_t n, float lr,        \
                          float b1, float b2, float eps, float wd, float gs, int t) {              \
    RUN("adamw", base_##sfx()->adamw(p, g, m, v, n, lr, b1, b2, eps, wd, gs, t), p, g, m, v);      \
  }                                                                                                \
  static void muon_momentum_##sfx(float *u, const float *g, float *m, size_t n, float b,           \
                                  float gs) {                                                      \
    RUN("muon_momentum", base_##sfx()->muon_momentum(u, g, m, n, b, gs), u, g, m);                 \
  }                                                                                                \
  static void muon_orth_##sfx(float *x, float *w, int r, int c, int ld, int k, float e, float s) { \
    RUN("muon_orth", base_##sfx()->muon_orth(x, w, r, c, ld, k, e, s), x, w);                      \
  }                                                                                                \
  static void muon_apply_##sfx(float *p, const float *u, size_t n, float lr, float wd) {           \
    RUN("muon_apply", base_##sfx()->muon_apply(p, u, n, lr, wd), p, u);                            \
  }                                                                                                \
  static void muon_transpose_##sfx(float *d, int dld, const float *s, int sld, int r, int c) {     \
    RUN("muon_transpose", base_##sfx()->muon_transpose(d, dld, s, sld, r, c), d, s);               \
  }                                                                                                \
  static double sumsq_##sfx(const float *x, size_t n) {                                            \
    double r = 0.0;                                                                                \
    RUN("sumsq", r = base_##sfx()->sumsq(x, n), x);                                                \
    return r;                                                                                      \
  }                                                                                                \
  static void scale_##sfx(float *x, float s, size_t n) {                                           \
    RUN("scale", base_##sfx()->scale(x, s, n), x);                                                 \
  }                                                                                                \
  static void accumulate_##sfx(float *d, const float *s, size_t n) {                               \
    RUN("accumulate", base_##sfx()->accumulate(d, s, n), d, s);                                    \
  }                                                                                                \
  static void dequant_scales_##sfx(float *a, const uint8_t *q, const float *s, int nb) {           \
    RUN("dequant_scales", base_##sfx()->dequant_scales(a, q, s, nb), a, q, s);                     \
  }                                                                                                \
  static colo_backend_t table_##sfx(const char *name) {                                            \
    colo_backend_t b = *base_##sfx();                                                              \
    b.name = name;                                                                                 \
    b.device = 1;                                                                                  \
    b.allocator = &ALLOCATOR;                                                                      \
    b.zero = zero;                                                                                 \
    b.copy = copy;                                                                                 \
    b.copy2d = copy2d;                                                                             \
    b.to_host = to_host;                                                                           \
    b.from_host = from_host;                                                                       \
    b.owns = owns;                                                                                 \
    b.host_alloc = host_alloc;                                                                     \
    b.host_free = host_free;                                                                       \
    COLO_ACT_OPS(SET_OP, sfx)                                                                      \
    COLO_F32_OPS(SET_OP, sfx)                                                                      \
    return b;                                                                                      \
  }

EMU_TABLE(f32, COLO_DTYPE_F32)
EMU_TABLE(bf16, COLO_DTYPE_BF16)
EMU_TABLE(fp16, COLO_DTYPE_F16)

static colo_backend_t F32, BF16, FP16;
static pthread_once_t made = PTHREAD_ONCE_INIT;

static void make_tables(void) {
  mem.page = (size_t)sysconf(_SC_PAGESIZE);
  install_handler();
  F32 = table_f32("cpu-emulated-gpu");
  BF16 = table_bf16("cpu-emulated-gpu-bf16");
  FP16 = table_fp16("cpu-emulated-gpu-fp16");
}

const colo_backend_t *colo_backend_cpu_device(colo_dtype_t t) {
  pthread_once(&made, make_tables);
  return t == COLO_DTYPE_BF16 ? &BF16 : t == COLO_DTYPE_F16 ? &FP16 : &F32;
}
