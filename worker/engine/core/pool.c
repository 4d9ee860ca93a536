/* The CPU memory pool: aligned host allocations with a capacity and a peak counter. Each block
 * carries a 64-byte header recording its size, so frees are exact. */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 64

struct colo_pool_s {
  char name[32];
  size_t capacity, used, peak;
  char error[256];
};

colo_pool_t *colo_pool_create(const char *name, size_t capacity) {
  colo_pool_t *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  snprintf(p->name, sizeof p->name, "%s", name);
  p->capacity = capacity;
  return p;
}

void colo_pool_destroy(colo_pool_t *pool) {
  free(pool);
}

void *colo_pool_alloc(colo_pool_t *pool, size_t bytes, const char *what) {
  if (pool->capacity && bytes > pool->capacity - pool->used) {
    snprintf(pool->error, sizeof pool->error,
             "%s memory pool: %s needs %zu bytes but only %zu of %zu are free", pool->name, what,
             bytes, pool->capacity - pool->used, pool->capacity);
    return NULL;
  }
  size_t total = ALIGN + ((bytes + ALIGN - 1) / ALIGN) * ALIGN;
  char *base = aligned_alloc(ALIGN, total);
  if (!base) {
    snprintf(pool->error, sizeof pool->error, "%s memory pool: the system has no %zu bytes for %s",
             pool->name, bytes, what);
    return NULL;
  }
  memset(base, 0, total);
  *(size_t *)base = bytes;
  pool->used += bytes;
  if (pool->used > pool->peak)
    pool->peak = pool->used;
  return base + ALIGN;
}

void colo_pool_free(colo_pool_t *pool, void *p) {
  if (!p)
    return;
  char *base = (char *)p - ALIGN;
  pool->used -= *(size_t *)base;
  free(base);
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
