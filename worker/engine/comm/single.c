/* The world of one: collectives leave their buffers as they are. */
#include "comm.h"

#include <stdlib.h>

static int rank(const colo_comm_t *c) {
  (void)c;
  return 0;
}
static int size(const colo_comm_t *c) {
  (void)c;
  return 1;
}
static int allreduce_sum(colo_comm_t *c, float *buf, size_t n) {
  (void)c;
  (void)buf;
  (void)n;
  return 0;
}
static int barrier(colo_comm_t *c) {
  (void)c;
  return 0;
}
static void destroy(colo_comm_t *c) {
  free(c);
}

static const colo_comm_ops_t SINGLE = {"single", rank, size, allreduce_sum, barrier, destroy};

colo_comm_t *colo_comm_single(void) {
  colo_comm_t *c = malloc(sizeof *c);
  if (c)
    c->ops = &SINGLE;
  return c;
}
