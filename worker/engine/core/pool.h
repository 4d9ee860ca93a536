/* Memory pools with a capacity: every engine allocation of a device's memory goes through one,
 * so a run that would exceed its budget fails with a clear message instead of swapping, and the
 * peak is known. The CPU pool hands out 64-byte aligned host memory. */
#ifndef COLO_POOL_H
#define COLO_POOL_H

#include <stddef.h>

typedef struct colo_pool_s colo_pool_t;

/* Memory other than the host's (a GPU's): alloc returns zeroed memory or NULL. */
typedef struct {
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
} colo_allocator_t;

/* capacity 0: unlimited. name appears in messages ("cpu"). */
colo_pool_t *colo_pool_create(const char *name, size_t capacity);
/* A pool over another allocator (NULL: the host's); its blocks are recorded in a table, since
 * their memory cannot carry a header. */
colo_pool_t *colo_pool_create_with(const char *name, size_t capacity, const colo_allocator_t *a);
void colo_pool_destroy(colo_pool_t *pool);

/* Zeroed, 64-byte aligned (the allocator's alignment for another allocator). NULL when the capacity
 * would be exceeded or the system has no memory; colo_pool_error() then says which and how much. */
void *colo_pool_alloc(colo_pool_t *pool, size_t bytes, const char *what);
void colo_pool_free(colo_pool_t *pool, void *p);

/* A cache's shrinker (the ZeRO-3 chunk cache, parallel/zero.c): before an allocation that would
 * take the pool past `watermark` bytes in use, and again when the capacity refuses one, fn is
 * asked to free at least `want` bytes of what it keeps in this pool (through colo_pool_free; it
 * must not allocate) and returns how many it freed; `device_full` when it is asked because the
 * allocator refused (the device has less than the pool counts on: other processes use it). An
 * allocation is never refused for the watermark itself: it only says when the cache gives way.
 * fn NULL: none. */
typedef size_t (*colo_pool_reclaim_fn)(void *ctx, size_t want, int device_full);
void colo_pool_set_reclaim(colo_pool_t *pool, colo_pool_reclaim_fn fn, void *ctx, size_t watermark);

size_t colo_pool_used(const colo_pool_t *pool);
/* Starts measuring the peak again from what is in use now. */
void colo_pool_reset_peak(colo_pool_t *pool);
size_t colo_pool_peak(const colo_pool_t *pool);
size_t colo_pool_capacity(const colo_pool_t *pool);
const char *colo_pool_error(const colo_pool_t *pool);

#endif
