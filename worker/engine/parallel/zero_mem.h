/* Private to parallel/zero.c and parallel/placement.c: moving and finding the pieces, wherever
 * they live. xcopy and xzero use the backend's copies where a side is its memory and plain
 * memory operations where both are the host's. */
#ifndef COLO_ZERO_MEM_H
#define COLO_ZERO_MEM_H

#include <stdlib.h>
#include <string.h>

#include "zero.h"

static inline int owned(const colo_zero_t *z, const void *p) {
  return z->be->owns && z->be->owns(p);
}

static inline void xcopy(const colo_zero_t *z, void *dst, const void *src, size_t bytes) {
  if (!bytes)
    return;
  int d = owned(z, dst), s = owned(z, src);
  if (d && s)
    z->be->copy(dst, src, bytes);
  else if (d)
    z->be->from_host(dst, src, bytes);
  else if (s)
    z->be->to_host(dst, src, bytes);
  else
    memcpy(dst, src, bytes);
}

static inline void xzero(const colo_zero_t *z, void *p, size_t bytes) {
  if (!bytes)
    return;
  if (owned(z, p))
    z->be->zero(p, bytes);
  else
    memset(p, 0, bytes);
}

/* chunk k's parameter piece (stage 3), wherever it lives: elements of z->esz bytes */
static inline void *piece_at(const colo_zero_t *z, size_t k) {
  char *base = (char *)(z->param_home[k] == COLO_HOME_HOST ? z->param_host : z->param_piece);
  return base + z->param_off[k] * z->esz;
}

/* the same, of fp32 pieces (every model but a frozen one's in 16 bits) */
static inline float *param_at(const colo_zero_t *z, size_t k) {
  return (float *)piece_at(z, k);
}

/* host memory for n parameter piece elements */
static inline size_t piece_floats(const colo_zero_t *z, size_t n) {
  return (n * z->esz + sizeof(float) - 1) / sizeof(float);
}

/* host memory for pieces placed off the device and the host update's scratch: the backend's
 * (page-locked on a GPU, so that copies run at the bus's speed), zeroed */
static inline float *host_floats(const colo_zero_t *z, size_t n) {
  size_t bytes = (n ? n : 1) * sizeof(float);
  float *p = colo_host_alloc(z->be, bytes);
  if (p)
    memset(p, 0, bytes);
  return p;
}

static inline void host_free(const colo_zero_t *z, void *p) {
  if (z->be)
    colo_host_free(z->be, p);
  else
    free(p);
}

/* The moment offsets of Muon's matrices that have no second moment in opt's v: at stage 0 the
 * model's, under ZeRO those of this rank's pieces whose optimizer state is on the device (host
 * memory and NVMe keep v whole); as pairs [p[2i], p[2i+1]), *n_pairs of them, in memory the
 * caller frees; NULL for want of it (zero.c) */
size_t *colo_zero_muon_pairs(const colo_zero_t *z, size_t *n_pairs);

/* stage 3: frees the chunks the cache keeps (zero.c) */
void colo_zero_drop_cache(colo_zero_t *z);

/* chunk k's moments on NVMe: n floats of m and of v, at the start of its region, read (write 0)
 * or written; a failure is said in z->error (placement.c) */
int colo_zero_nvme_moments(colo_zero_t *z, size_t k, float *m, float *v, size_t n, int write);

#endif
