/* Memory pools: allocations with a capacity and a peak counter. A host block carries a 64-byte
 * header recording its size, so frees are exact; another allocator's blocks (device memory, which
 * the host cannot write a header into) are recorded in a table instead. */
#include "pool.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 64

typedef struct {
  void *p;
  size_t bytes;
} block_t;

struct colo_pool_s {
  char name[32];
  size_t capacity, used, peak;
  char error[256];
  const colo_allocator_t *a; /* NULL: host memory with headers */
  block_t *blocks;           /* another allocator's live blocks (a few hundred per model) */
  size_t n_blocks, cap_blocks;
  colo_pool_reclaim_fn reclaim; /* a cache that gives memory back when asked (pool.h) */
  void *reclaim_ctx;
  size_t watermark;
  int reclaiming;
};

void colo_pool_set_reclaim(colo_pool_t *pool, colo_pool_reclaim_fn fn, void *ctx,
                           size_t watermark) {
  pool->reclaim = fn;
  pool->reclaim_ctx = ctx;
  pool->watermark = watermark;
}

/* asks the cache for `want` bytes; 0 when it has none to give (or is already giving) */
static size_t reclaim(colo_pool_t *pool, size_t want, int device_full) {
  if (!pool->reclaim || pool->reclaiming || !want)
    return 0;
  pool->reclaiming = 1;
  size_t got = pool->reclaim(pool->reclaim_ctx, want, device_full);
  pool->reclaiming = 0;
  return got;
}

colo_pool_t *colo_pool_create(const char *name, size_t capacity) {
  return colo_pool_create_with(name, capacity, NULL);
}

colo_pool_t *colo_pool_create_with(const char *name, size_t capacity, const colo_allocator_t *a) {
  colo_pool_t *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  snprintf(p->name, sizeof p->name, "%s", name);
  p->capacity = capacity;
  p->a = a;
  return p;
}

void colo_pool_destroy(colo_pool_t *pool) {
  if (!pool)
    return;
  for (size_t i = 0; i < pool->n_blocks; i++)
    pool->a->free(pool->blocks[i].p);
  free(pool->blocks);
  free(pool);
}

static void *alloc_other(colo_pool_t *pool, size_t bytes, const char *what) {
  if (pool->n_blocks == pool->cap_blocks) {
    size_t cap = pool->cap_blocks ? 2 * pool->cap_blocks : 256;
    block_t *b = realloc(pool->blocks, cap * sizeof *b);
    if (!b) {
      snprintf(pool->error, sizeof pool->error, "%s memory pool: no host memory to record %s",
               pool->name, what);
      return NULL;
    }
    pool->blocks = b;
    pool->cap_blocks = cap;
  }
  void *p = pool->a->alloc(bytes ? bytes : 1);
  if (!p && reclaim(pool, bytes, 1)) /* the device is fuller than the pool knows: the cache first */
    p = pool->a->alloc(bytes ? bytes : 1);
  if (!p) {
    snprintf(pool->error, sizeof pool->error, "%s memory pool: the device has no %zu bytes for %s",
             pool->name, bytes, what);
    return NULL;
  }
  pool->blocks[pool->n_blocks++] = (block_t){p, bytes};
  return p;
}

void *colo_pool_alloc(colo_pool_t *pool, size_t bytes, const char *what) {
  if (pool->reclaim && pool->used + bytes > pool->watermark)
    reclaim(pool, pool->used + bytes - pool->watermark, 0);
  if (pool->capacity && bytes > pool->capacity - pool->used)
    reclaim(pool, bytes - (pool->capacity - pool->used), 0);
  if (pool->capacity && bytes > pool->capacity - pool->used) {
    snprintf(pool->error, sizeof pool->error,
             "%s memory pool: %s needs %zu bytes but only %zu of %zu are free", pool->name, what,
             bytes, pool->capacity - pool->used, pool->capacity);
    return NULL;
  }
  if (pool->a) {
    void *p = alloc_other(pool, bytes, what);
    if (p) {
      pool->used += bytes;
      if (pool->used > pool->peak)
        pool->peak = pool->used;
    }
    return p;
  }
  /* calloc, not aligned_alloc and memset: a large block comes from mmap already zero, and its
   * pages are touched first by whoever writes them (a 300M-parameter model's 4.6 GB were
   * zeroed twice over, by the kernel and by memset, before its first step). The header, ALIGN
   * bytes below what the caller gets, holds the size and calloc's own pointer. */
  size_t total = ALIGN + ((bytes + ALIGN - 1) / ALIGN) * ALIGN;
  char *raw = calloc(1, total + ALIGN);
  if (!raw && reclaim(pool, bytes, 1))
    raw = calloc(1, total + ALIGN);
  if (!raw) {
    snprintf(pool->error, sizeof pool->error, "%s memory pool: the system has no %zu bytes for %s",
             pool->name, bytes, what);
    return NULL;
  }
  char *base = raw + (ALIGN - (uintptr_t)raw % ALIGN) % ALIGN;
  ((size_t *)base)[0] = bytes;
  ((char **)base)[1] = raw;
  pool->used += bytes;
  if (pool->used > pool->peak)
    pool->peak = pool->used;
  return base + ALIGN;
}

void colo_pool_free(colo_pool_t *pool, void *p) {
  if (!p)
    return;
  if (pool->a) {
    for (size_t i = pool->n_blocks; i-- > 0;) /* newest first: frees mostly mirror allocations */
      if (pool->blocks[i].p == p) {
        pool->used -= pool->blocks[i].bytes;
        pool->a->free(p);
        pool->blocks[i] = pool->blocks[--pool->n_blocks];
        return;
      }
    return; /* not this pool's: a caller bug, but never a double free */
  }
  char *base = (char *)p - ALIGN;
  pool->used -= ((size_t *)base)[0];
  free(((char **)base)[1]);
}

size_t colo_pool_used(const colo_pool_t *pool) {
  return pool->used;
}
void colo_pool_reset_peak(colo_pool_t *pool) {
  pool->peak = pool->used;
}
size_t colo_pool_peak(const colo_pool_t *pool) {
  return pool->peak;
}
size_t colo_pool_capacity(const colo_pool_t *pool) {
  return pool->capacity;
}
const char *colo_pool_error(const colo_pool_t *pool) {
  return pool->error;
}
