/* The TCP communicator: a full mesh of sockets between the ranks of a world, ring algorithms
 * for the collectives, and one poll() loop that moves a send and a receive forward together, so
 * large transfers in a ring never deadlock on full socket buffers.
 *
 * Failure: every call has a deadline; an EOF or reset from a peer ends the call with a message
 * naming that rank, and the communicator aborts itself (closes every socket), so the peers' own
 * calls fail at once instead of waiting for their deadlines.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "comm.h"
#include "store.h"

typedef struct tcp_world_s tcp_world_t;

typedef struct {
  colo_comm_t base;
  tcp_world_t *w;
  int *members; /* group rank -> world rank */
  int is_world;
  float *scratch;
  size_t scratch_n;
} tcp_comm_t;

struct tcp_world_s {
  int *fds; /* by world rank; -1 for self */
  int world, rank;
  int timeout_ms;
  int aborted;
  char store_addr[256];
  colo_rdzv_server_t *store; /* rank 0 only */
  tcp_comm_t *self;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int comm_fail(tcp_comm_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void world_abort(tcp_world_t *w) {
  if (w->aborted)
    return;
  w->aborted = 1;
  for (int i = 0; i < w->world; i++)
    if (w->fds[i] >= 0) {
      shutdown(w->fds[i], SHUT_RDWR);
      close(w->fds[i]);
      w->fds[i] = -1;
    }
}

/* The first rank to see a peer fail records why in the store before it aborts; a rank that then
 * sees its own connections close reads that record, so every rank names the rank that really
 * failed, not a neighbour that aborted because of it. */
#define ABORT_KEY "abort/reason"

static int comm_fail(tcp_comm_t *c, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char why[200];
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  tcp_world_t *w = c->w;
  snprintf(c->base.error, sizeof c->base.error, "%s", why);
  if (!w->aborted && (rc == COLO_EIO || rc == COLO_ETIMEDOUT)) {
    char cause[256], e[128];
    if (colo_rdzv_get(w->store_addr, ABORT_KEY, cause, sizeof cause, 300, e, sizeof e) == 0) {
      snprintf(c->base.error, sizeof c->base.error, "%s (first failure, seen by %s)", why, cause);
    } else {
      snprintf(cause, sizeof cause, "rank %d: %s", w->rank, why);
      colo_rdzv_set(w->store_addr, ABORT_KEY, cause, 300, e, sizeof e);
    }
  }
  world_abort(w);
  return rc;
}

/* Sends sbytes to world rank sp and receives rbytes from world rank rp, together (either may be
 * -1 or zero bytes). */
static int xfer(tcp_comm_t *c, int sp, const void *sbuf, size_t sbytes, int rp, void *rbuf,
                size_t rbytes) {
  tcp_world_t *w = c->w;
  if (w->aborted)
    return comm_fail(c, COLO_ECANCELED, "the communicator was aborted by an earlier error");
  int64_t deadline = mono_ms() + w->timeout_ms;
  const char *sp_ = sbuf;
  char *rp_ = rbuf;
  if (sp < 0)
    sbytes = 0;
  if (rp < 0)
    rbytes = 0;
  while (sbytes > 0 || rbytes > 0) {
    struct pollfd pf[2];
    int n = 0, si = -1, ri = -1;
    if (sbytes > 0) {
      pf[n] = (struct pollfd){w->fds[sp], POLLOUT, 0};
      si = n++;
    }
    if (rbytes > 0) {
      if (si >= 0 && rp == sp) { /* the same socket both ways */
        pf[si].events |= POLLIN;
        ri = si;
      } else {
        pf[n] = (struct pollfd){w->fds[rp], POLLIN, 0};
        ri = n++;
      }
    }
    int64_t left = deadline - mono_ms();
    if (left <= 0)
      return comm_fail(c, COLO_ETIMEDOUT, "timed out after %d ms waiting for rank %d",
                       w->timeout_ms, rbytes > 0 ? rp : sp);
    int r = poll(pf, (nfds_t)n, (int)left);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return comm_fail(c, COLO_EIO, "poll: %s", strerror(errno));
    if (r == 0)
      continue; /* the deadline check above reports it */
    if (ri >= 0 && (pf[ri].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t k = recv(w->fds[rp], rp_, rbytes, MSG_DONTWAIT);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
        return comm_fail(c, COLO_EIO, "rank %d closed its connection: it exited or died", rp);
      if (k > 0) {
        rp_ += k;
        rbytes -= (size_t)k;
      }
    }
    if (si >= 0 && sbytes > 0 && (pf[si].revents & (POLLOUT | POLLHUP | POLLERR))) {
      ssize_t k = send(w->fds[sp], sp_, sbytes, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k < 0 && errno != EAGAIN && errno != EINTR)
        return comm_fail(c, COLO_EIO, "rank %d closed its connection: it exited or died", sp);
      if (k > 0) {
        sp_ += k;
        sbytes -= (size_t)k;
      }
    }
  }
  return 0;
}

static float *scratch(tcp_comm_t *c, size_t n) {
  if (c->scratch_n < n) {
    free(c->scratch);
    c->scratch = malloc(n * sizeof(float));
    c->scratch_n = c->scratch ? n : 0;
  }
  return c->scratch;
}

#define TC(cm)  ((tcp_comm_t *)(cm))
#define NEXT(c) ((c)->members[((c)->base.rank + 1) % (c)->base.size])
#define PREV(c) ((c)->members[((c)->base.rank + (c)->base.size - 1) % (c)->base.size])

/* segment k of n floats split p ways */
static size_t seg_lo(size_t n, int p, int k) {
  return n * (size_t)k / (size_t)p;
}

/* Ring reduce-scatter over segments bounded by seg_lo: afterwards this rank holds the sum of
 * segment `rank`. */
static int ring_reduce_scatter(tcp_comm_t *c, float *buf, size_t n) {
  int p = c->base.size, me = c->base.rank;
  size_t maxseg = n / (size_t)p + 1;
  float *tmp = scratch(c, maxseg);
  if (!tmp)
    return comm_fail(c, COLO_ENOMEM, "out of memory");
  for (int s = 0; s < p - 1; s++) {
    int ks = ((me - 1 - s) % p + p) % p, kr = ((me - 2 - s) % p + p) % p;
    size_t slo = seg_lo(n, p, ks), shi = seg_lo(n, p, ks + 1);
    size_t rlo = seg_lo(n, p, kr), rhi = seg_lo(n, p, kr + 1);
    int rc = xfer(c, NEXT(c), buf + slo, (shi - slo) * sizeof(float), PREV(c), tmp,
                  (rhi - rlo) * sizeof(float));
    if (rc < 0)
      return rc;
    for (size_t i = 0; i < rhi - rlo; i++)
      buf[rlo + i] += tmp[i];
  }
  return 0;
}

/* Ring all-gather: this rank's segment `rank` goes around. */
static int ring_all_gather(tcp_comm_t *c, float *buf, size_t n) {
  int p = c->base.size, me = c->base.rank;
  for (int s = 0; s < p - 1; s++) {
    int ks = ((me - s) % p + p) % p, kr = ((me - s - 1) % p + p) % p;
    size_t slo = seg_lo(n, p, ks), shi = seg_lo(n, p, ks + 1);
    size_t rlo = seg_lo(n, p, kr), rhi = seg_lo(n, p, kr + 1);
    int rc = xfer(c, NEXT(c), buf + slo, (shi - slo) * sizeof(float), PREV(c), buf + rlo,
                  (rhi - rlo) * sizeof(float));
    if (rc < 0)
      return rc;
  }
  return 0;
}

static int allreduce_sum(colo_comm_t *cm, float *buf, size_t n) {
  tcp_comm_t *c = TC(cm);
  if (c->base.size == 1)
    return 0;
  int rc = ring_reduce_scatter(c, buf, n);
  return rc < 0 ? rc : ring_all_gather(c, buf, n);
}

static int reduce_scatter_sum(colo_comm_t *cm, float *buf, size_t n) {
  tcp_comm_t *c = TC(cm);
  return c->base.size == 1 ? 0 : ring_reduce_scatter(c, buf, n * (size_t)c->base.size);
}

static int all_gather(colo_comm_t *cm, float *buf, size_t n) {
  tcp_comm_t *c = TC(cm);
  return c->base.size == 1 ? 0 : ring_all_gather(c, buf, n * (size_t)c->base.size);
}

static int broadcast(colo_comm_t *cm, float *buf, size_t n, int root) {
  tcp_comm_t *c = TC(cm);
  int p = c->base.size, me = c->base.rank;
  if (root < 0 || root >= p)
    return comm_fail(c, COLO_EINVAL, "broadcast root %d outside a group of %d", root, p);
  /* a chain from the root: each rank receives from its predecessor and passes it on */
  int pos = (me - root + p) % p;
  if (pos > 0) {
    int rc = xfer(c, -1, NULL, 0, PREV(c), buf, n * sizeof(float));
    if (rc < 0)
      return rc;
  }
  if (pos < p - 1)
    return xfer(c, NEXT(c), buf, n * sizeof(float), -1, NULL, 0);
  return 0;
}

static int send_(colo_comm_t *cm, const float *buf, size_t n, int peer) {
  tcp_comm_t *c = TC(cm);
  if (peer < 0 || peer >= c->base.size || peer == c->base.rank)
    return comm_fail(c, COLO_EINVAL, "send to %d in a group of %d", peer, c->base.size);
  return xfer(c, c->members[peer], buf, n * sizeof(float), -1, NULL, 0);
}

static int recv_(colo_comm_t *cm, float *buf, size_t n, int peer) {
  tcp_comm_t *c = TC(cm);
  if (peer < 0 || peer >= c->base.size || peer == c->base.rank)
    return comm_fail(c, COLO_EINVAL, "recv from %d in a group of %d", peer, c->base.size);
  return xfer(c, -1, NULL, 0, c->members[peer], buf, n * sizeof(float));
}

static int barrier(colo_comm_t *cm) {
  float one = 1.0f;
  int rc = allreduce_sum(cm, &one, 1);
  if (rc == 0 && one != (float)cm->size)
    return comm_fail(TC(cm), COLO_EPROTO, "barrier: %g of %d ranks arrived", (double)one, cm->size);
  return rc;
}

static void abort_(colo_comm_t *cm) {
  world_abort(TC(cm)->w);
}

static void destroy(colo_comm_t *cm) {
  tcp_comm_t *c = TC(cm);
  if (c->is_world) {
    tcp_world_t *w = c->w;
    world_abort(w);
    colo_rdzv_server_stop(w->store);
    free(w->fds);
    free(w);
  }
  free(c->members);
  free(c->scratch);
  free(c);
}

static const colo_comm_ops_t TCP = {
    "tcp",  allreduce_sum, reduce_scatter_sum, all_gather, broadcast, send_, recv_, barrier,
    abort_, destroy};

static void set_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int colo_comm_tcp_create(const char *store_addr, int rank, int world, const char *bind_host,
                         int timeout_ms, colo_comm_t **out, char *err, size_t errlen) {
  if (world < 1 || rank < 0 || rank >= world) {
    snprintf(err, errlen, "rank %d outside a world of %d", rank, world);
    return COLO_EINVAL;
  }
  tcp_world_t *w = calloc(1, sizeof *w);
  tcp_comm_t *c = calloc(1, sizeof *c);
  w->fds = malloc((size_t)world * sizeof *w->fds);
  c->members = malloc((size_t)world * sizeof *c->members);
  for (int i = 0; i < world; i++) {
    w->fds[i] = -1;
    c->members[i] = i;
  }
  w->world = world;
  w->rank = rank;
  w->timeout_ms = timeout_ms;
  snprintf(w->store_addr, sizeof w->store_addr, "%s", store_addr);
  c->w = w;
  c->is_world = 1;
  c->base.ops = &TCP;
  c->base.rank = rank;
  c->base.size = world;
  w->self = c;
  int rc = 0, lfd = -1, port = 0;
  if (rank == 0 && (rc = colo_rdzv_server_start(store_addr, &w->store, err, errlen)) < 0)
    goto fail;
  lfd = colo_tcp_listen(bind_host, 0, &port, err, errlen);
  if (lfd < 0) {
    rc = COLO_EIO;
    goto fail;
  }
  char key[64], val[300];
  snprintf(key, sizeof key, "addr/%d", rank);
  snprintf(val, sizeof val, strchr(bind_host, ':') ? "[%s]:%d" : "%s:%d", bind_host, port);
  CHECK_GOTO(colo_rdzv_set(store_addr, key, val, timeout_ms, err, errlen), rc, fail);
  /* connect to every lower rank, accept every higher one; a hello names the connecting rank */
  for (int j = 0; j < rank; j++) {
    snprintf(key, sizeof key, "addr/%d", j);
    CHECK_GOTO(colo_rdzv_get(store_addr, key, val, sizeof val, timeout_ms, err, errlen), rc, fail);
    int fd = colo_tcp_connect(val, timeout_ms, err, errlen);
    if (fd < 0) {
      rc = COLO_EIO;
      goto fail;
    }
    int32_t hello = rank;
    if (send(fd, &hello, 4, MSG_NOSIGNAL) != 4) {
      close(fd);
      snprintf(err, errlen, "cannot greet rank %d at %s", j, val);
      rc = COLO_EIO;
      goto fail;
    }
    set_socket(fd);
    w->fds[j] = fd;
  }
  int64_t deadline = mono_ms() + timeout_ms;
  for (int accepted = 0; accepted < world - 1 - rank;) {
    struct pollfd pf = {lfd, POLLIN, 0};
    int left = (int)(deadline - mono_ms());
    if (left <= 0 || poll(&pf, 1, left) <= 0) {
      snprintf(err, errlen, "timed out after %d ms waiting for %d higher ranks to connect",
               timeout_ms, world - 1 - rank - accepted);
      rc = COLO_ETIMEDOUT;
      goto fail;
    }
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      continue;
    int32_t hello = -1;
    struct pollfd hp = {fd, POLLIN, 0};
    if (poll(&hp, 1, timeout_ms) <= 0 || recv(fd, &hello, 4, MSG_WAITALL) != 4 || hello <= rank ||
        hello >= world || w->fds[hello] >= 0) {
      close(fd); /* not one of ours, or a duplicate */
      continue;
    }
    set_socket(fd);
    w->fds[hello] = fd;
    accepted++;
  }
  close(lfd);
  lfd = -1;
  /* everyone is connected before anyone relies on it (rank 0 may then stop the store) */
  if (barrier(&c->base) < 0) {
    snprintf(err, errlen, "%s", c->base.error);
    rc = COLO_EIO;
    goto fail;
  }
  *out = &c->base;
  return 0;
fail:
  if (lfd >= 0)
    close(lfd);
  destroy(&c->base);
  return rc;
}

int colo_comm_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                    size_t errlen) {
  if (world->ops != &TCP) {
    if (n == 1 && ranks[0] == world->rank) {
      *out = colo_comm_single();
      return *out ? 0 : COLO_ENOMEM;
    }
    snprintf(err, errlen, "groups need a tcp world communicator");
    return COLO_EINVAL;
  }
  tcp_comm_t *wc = TC(world);
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= wc->w->world) {
      snprintf(err, errlen, "group member %d outside a world of %d", ranks[i], wc->w->world);
      return COLO_EINVAL;
    }
    if (ranks[i] == world->rank)
      me = i;
  }
  if (me < 0) {
    snprintf(err, errlen, "rank %d is not a member of the group", world->rank);
    return COLO_EINVAL;
  }
  tcp_comm_t *c = calloc(1, sizeof *c);
  c->members = malloc((size_t)n * sizeof *c->members);
  memcpy(c->members, ranks, (size_t)n * sizeof *ranks);
  c->w = wc->w;
  c->base.ops = &TCP;
  c->base.rank = me;
  c->base.size = n;
  *out = &c->base;
  return 0;
}
