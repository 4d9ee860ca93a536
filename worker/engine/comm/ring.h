/* A single-producer, single-consumer byte ring in shared memory: the transport between two
 * ranks on one host. head counts bytes written, tail bytes read; each lives on its own cache
 * line and is published with release/acquire ordering. Calls never block: they move what fits
 * and return the count. */
#ifndef COLO_RING_H
#define COLO_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  _Atomic uint64_t head;
  char pad0[56];
  _Atomic uint64_t tail;
  char pad1[56];
  uint64_t cap; /* data bytes */
  char pad2[56];
  unsigned char data[];
} colo_ring_t;

/* The bytes a ring of `cap` data bytes occupies. */
static inline size_t colo_ring_size(size_t cap) {
  return sizeof(colo_ring_t) + cap;
}

void colo_ring_init(colo_ring_t *r, size_t cap);
size_t colo_ring_write(colo_ring_t *r, const void *src, size_t n);
size_t colo_ring_read(colo_ring_t *r, void *dst, size_t n);

#endif
