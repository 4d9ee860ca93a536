/* Growing arrays: the one idiom behind every array that gains an element at a time. */
#ifndef COLO_GROW_H
#define COLO_GROW_H

#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Room for element n of the array v whose capacity is cap (both lvalues): doubles it (from 64)
 * when full. 0, or COLO_ENOMEM with v and cap as they were. */
#define COLO_GROW(v, n, cap) ((n) < (cap) ? 0 : colo_grow_((void *)&(v), &(cap), sizeof *(v)))

static inline int colo_grow_(void *vp, size_t *cap, size_t size) {
  void *v, *grown;
  memcpy(&v, vp, sizeof v); /* the caller's pointer, whatever its type */
  size_t c = *cap ? 2 * *cap : 64;
  if (!(grown = realloc(v, c * size)))
    return COLO_ENOMEM;
  memcpy(vp, &grown, sizeof grown);
  *cap = c;
  return 0;
}

#endif
