/* The shared-memory byte ring. */
#include "ring.h"

#include <string.h>

void colo_ring_init(colo_ring_t *r, size_t cap) {
  atomic_store_explicit(&r->head, 0, memory_order_relaxed);
  atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
  r->cap = cap;
}

size_t colo_ring_write(colo_ring_t *r, const void *src, size_t n) {
  uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
  size_t space = (size_t)(r->cap - (head - tail));
  if (n > space)
    n = space;
  if (n == 0)
    return 0;
  size_t at = (size_t)(head % r->cap), first = r->cap - at < n ? r->cap - at : n;
  memcpy(r->data + at, src, first);
  memcpy(r->data, (const unsigned char *)src + first, n - first);
  atomic_store_explicit(&r->head, head + n, memory_order_release);
  return n;
}

size_t colo_ring_read(colo_ring_t *r, void *dst, size_t n) {
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
  size_t avail = (size_t)(head - tail);
  if (n > avail)
    n = avail;
  if (n == 0)
    return 0;
  size_t at = (size_t)(tail % r->cap), first = r->cap - at < n ? r->cap - at : n;
  memcpy(dst, r->data + at, first);
  memcpy((unsigned char *)dst + first, r->data, n - first);
  atomic_store_explicit(&r->tail, tail + n, memory_order_release);
  return n;
}
