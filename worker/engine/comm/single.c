/* The world of one: collectives leave their buffers as they are. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>

#include "../../../common/error.h"

static int identity(colo_comm_t *c, float *buf, size_t n) {
  (void)c;
  (void)buf;
  (void)n;
  return 0;
}
static int bcast(colo_comm_t *c, float *buf, size_t n, int root) {
  (void)c;
  (void)buf;
  (void)n;
  return root == 0 ? 0 : COLO_EINVAL;
}
static int no_peer_send(colo_comm_t *c, const float *buf, size_t n, int peer) {
  (void)c;
  (void)buf;
  (void)n;
  (void)peer;
  return COLO_EINVAL; /* a world of one has no peer */
}
static int no_peer_recv(colo_comm_t *c, float *buf, size_t n, int peer) {
  (void)c;
  (void)buf;
  (void)n;
  (void)peer;
  return COLO_EINVAL;
}
static int no_peer_sendrecv(colo_comm_t *c, const float *sbuf, size_t sn, int speer, float *rbuf,
                            size_t rn, int rpeer) {
  (void)c;
  (void)sbuf;
  (void)sn;
  (void)rbuf;
  (void)rn;
  return speer < 0 && rpeer < 0 ? 0 : COLO_EINVAL;
}
static int barrier(colo_comm_t *c) {
  (void)c;
  return 0;
}
static void abort_(colo_comm_t *c) {
  (void)c;
}
static void destroy(colo_comm_t *c) {
  free(c);
}

static const colo_comm_ops_t SINGLE = {.name = "single",
                                       .allreduce_sum = identity,
                                       .reduce_scatter_sum = identity,
                                       .all_gather = identity,
                                       .broadcast = bcast,
                                       .send = no_peer_send,
                                       .recv = no_peer_recv,
                                       .sendrecv = no_peer_sendrecv,
                                       .barrier = barrier,
                                       .abort = abort_,
                                       .destroy = destroy};

colo_comm_t *colo_comm_single(void) {
  colo_comm_t *c = calloc(1, sizeof *c);
  if (c) {
    c->ops = &SINGLE;
    c->rank = 0;
    c->size = 1;
  }
  return c;
}
