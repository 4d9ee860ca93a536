/* A communicator whose buffers are not all in the memory it moves, for a device backend's ranks.
 * It wraps one that moves either host memory or the backend's (`where`):
 *   - COLO_STAGE_HOST: the inner one moves host memory (tcp, with shared memory on one host).
 *     Buffers that are the backend's memory (be->owns) are copied to a host scratch, moved, and
 *     copied back; host buffers pass straight through. Correct on any GPU and any network, and
 *     slow by two copies over PCIe a call.
 *   - COLO_STAGE_DEVICE: the inner one moves the backend's memory (NCCL). Host buffers (a loss, a
 *     norm, a ZeRO piece placed in host memory) go through a scratch in the backend's memory;
 *     the backend's own pass straight through, the fast path.
 * Groups made from it are staged the same way. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"
#include "../backend/backend.h"

typedef struct {
  colo_comm_t base;
  colo_comm_t *inner;
  const colo_backend_t *be;
  colo_stage_t where;
  /* the memory the inner one moves: its allocator, and the copies into it and out of it */
  void *(*alloc)(size_t bytes);
  void (*release)(void *p);
  void (*in)(void *dst, const void *src, size_t bytes);
  void (*out)(void *dst, const void *src, size_t bytes);
  void *buf, *buf2; /* scratch there, grown on demand (buf2: sendrecv's receive side) */
  size_t cap, cap2;
} staged_t;

#define ST(c) ((staged_t *)(c))

static const colo_comm_ops_t STAGED;

/* whether a buffer must go through the scratch */
static int away(const staged_t *s, const void *buf) {
  return !!s->be->owns(buf) == (s->where == COLO_STAGE_HOST);
}

/* scratch *b of at least n floats (NULL: out of memory) */
static float *grow(staged_t *s, void **b, size_t *cap, size_t n) {
  if (n > *cap) {
    void *g = s->alloc(n * sizeof(float));
    if (!g) {
      snprintf(s->base.error, sizeof s->base.error,
               "staging %zu floats in %s memory: out of memory", n,
               s->where == COLO_STAGE_HOST ? "host" : "device");
      return NULL;
    }
    if (*b)
      s->release(*b);
    *b = g, *cap = n;
  }
  return *b;
}

/* the scratch copy of n floats at buf (NULL: out of memory), filled from buf when `in` */
static float *out_of(staged_t *s, const float *buf, size_t n, int in) {
  float *h = grow(s, &s->buf, &s->cap, n);
  if (h && in)
    s->in(h, buf, n * sizeof(float));
  return h;
}

static int done(staged_t *s, int rc) {
  if (rc < 0)
    snprintf(s->base.error, sizeof s->base.error, "%s", colo_comm_error(s->inner));
  return rc;
}

/* a call that reads and writes `total` floats of buf */
#define INOUT(call_on)                                                                             \
  do {                                                                                             \
    if (!total || !away(s, buf))                                                                   \
      return done(s, call_on(buf));                                                                \
    float *h = out_of(s, buf, total, 1);                                                           \
    if (!h)                                                                                        \
      return COLO_ENOMEM;                                                                          \
    int rc = call_on(h);                                                                           \
    if (rc == 0)                                                                                   \
      s->out(buf, h, total * sizeof(float));                                                       \
    return done(s, rc);                                                                            \
  } while (0)

static int allreduce_sum(colo_comm_t *c, float *buf, size_t n) {
  staged_t *s = ST(c);
  size_t total = n;
#define CALL(p) s->inner->ops->allreduce_sum(s->inner, p, n)
  INOUT(CALL);
#undef CALL
}

static int reduce_scatter_sum(colo_comm_t *c, float *buf, size_t n) {
  staged_t *s = ST(c);
  size_t total = n * (size_t)c->size;
#define CALL(p) s->inner->ops->reduce_scatter_sum(s->inner, p, n)
  INOUT(CALL);
#undef CALL
}

static int all_gather(colo_comm_t *c, float *buf, size_t n) {
  staged_t *s = ST(c);
  size_t total = n * (size_t)c->size;
#define CALL(p) s->inner->ops->all_gather(s->inner, p, n)
  INOUT(CALL);
#undef CALL
}

static int broadcast(colo_comm_t *c, float *buf, size_t n, int root) {
  staged_t *s = ST(c);
  size_t total = n;
#define CALL(p) s->inner->ops->broadcast(s->inner, p, n, root)
  INOUT(CALL);
#undef CALL
}

static int staged_send(colo_comm_t *c, const float *buf, size_t n, int peer) {
  staged_t *s = ST(c);
  if (!n || !away(s, buf))
    return done(s, s->inner->ops->send(s->inner, buf, n, peer));
  float *h = out_of(s, buf, n, 1);
  return h ? done(s, s->inner->ops->send(s->inner, h, n, peer)) : COLO_ENOMEM;
}

static int staged_recv(colo_comm_t *c, float *buf, size_t n, int peer) {
  staged_t *s = ST(c);
  if (!n || !away(s, buf))
    return done(s, s->inner->ops->recv(s->inner, buf, n, peer));
  float *h = out_of(s, buf, n, 0);
  if (!h)
    return COLO_ENOMEM;
  int rc = s->inner->ops->recv(s->inner, h, n, peer);
  if (rc == 0)
    s->out(buf, h, n * sizeof(float));
  return done(s, rc);
}

static int staged_sendrecv(colo_comm_t *c, const float *sbuf, size_t sn, int speer, float *rbuf,
                           size_t rn, int rpeer) {
  staged_t *s = ST(c);
  const float *hs = sbuf;
  float *hr = rbuf;
  if (speer >= 0 && sn && away(s, sbuf) && !(hs = out_of(s, sbuf, sn, 1)))
    return COLO_ENOMEM;
  int raway = rpeer >= 0 && rn && away(s, rbuf);
  if (raway && !(hr = grow(s, &s->buf2, &s->cap2, rn)))
    return COLO_ENOMEM;
  int rc = s->inner->ops->sendrecv(s->inner, hs, sn, speer, hr, rn, rpeer);
  if (rc == 0 && raway)
    s->out(rbuf, hr, rn * sizeof(float));
  return done(s, rc);
}

static int barrier(colo_comm_t *c) {
  return done(ST(c), ST(c)->inner->ops->barrier(ST(c)->inner));
}

static void abort_(colo_comm_t *c) {
  ST(c)->inner->ops->abort(ST(c)->inner);
}

static void destroy(colo_comm_t *c) {
  staged_t *s = ST(c);
  s->inner->ops->destroy(s->inner);
  if (s->buf)
    s->release(s->buf);
  if (s->buf2)
    s->release(s->buf2);
  free(s);
}

static int group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                 size_t errlen) {
  colo_comm_t *inner = NULL;
  int rc = colo_comm_group(ST(world)->inner, ranks, n, &inner, err, errlen);
  if (rc < 0)
    return rc;
  if (!(*out = colo_comm_staged(inner, ST(world)->be, ST(world)->where))) {
    inner->ops->destroy(inner);
    snprintf(err, errlen, "a staged group: out of memory");
    return COLO_ENOMEM;
  }
  return 0;
}

static const colo_comm_ops_t STAGED = {.name = "staged",
                                       .allreduce_sum = allreduce_sum,
                                       .reduce_scatter_sum = reduce_scatter_sum,
                                       .all_gather = all_gather,
                                       .broadcast = broadcast,
                                       .send = staged_send,
                                       .recv = staged_recv,
                                       .sendrecv = staged_sendrecv,
                                       .barrier = barrier,
                                       .abort = abort_,
                                       .destroy = destroy,
                                       .group = group};

colo_comm_t *colo_comm_staged(colo_comm_t *inner, const colo_backend_t *be, colo_stage_t where) {
  staged_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->base.ops = &STAGED;
  s->base.rank = inner->rank;
  s->base.size = inner->size;
  s->base.shm_peers = inner->shm_peers;
  s->inner = inner;
  s->be = be;
  s->where = where;
  if (where == COLO_STAGE_HOST) {
    s->alloc = malloc, s->release = free, s->in = be->to_host, s->out = be->from_host;
  } else {
    s->alloc = be->allocator->alloc, s->release = be->allocator->free;
    s->in = be->from_host, s->out = be->to_host;
  }
  return &s->base;
}
