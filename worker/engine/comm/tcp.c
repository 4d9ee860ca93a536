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
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "comm.h"
#include "ring.h"
#include "store.h"

#define RING_MIB 4 /* per direction, per pair of ranks on one host (COLO_COMM_SHM_MIB) */

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
  /* ranks on the same host: shared-memory rings by world rank (NULL: data goes over TCP, whose
   * socket then only tells whether the peer is alive) */
  colo_ring_t **out, **in;
  void **maps;
  size_t ring, map_len; /* a ring's data bytes; a pair's segment: two rings */
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
  w->aborted = 1; /* rings stay mapped until destroy: a peer may still be copying */
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

/* A peer reached through shared memory sends nothing on its socket after the set-up: anything
 * readable there (EOF, reset) means it is gone. */
static int peer_gone(tcp_world_t *w, int peer) {
  struct pollfd pf = {w->fds[peer], POLLIN, 0};
  if (poll(&pf, 1, 0) <= 0)
    return 0;
  char b;
  ssize_t k = recv(w->fds[peer], &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR);
}

/* Sends sbytes to world rank sp and receives rbytes from world rank rp, together (either may be
 * -1 or zero bytes), each over shared memory or TCP. */
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
  int s_shm = sbytes > 0 && w->out[sp], r_shm = rbytes > 0 && w->in[rp];
  unsigned idle = 0;
  while (sbytes > 0 || rbytes > 0) {
    int progressed = 0;
    if (sbytes > 0 && s_shm) {
      size_t k = colo_ring_write(w->out[sp], sp_, sbytes);
      sp_ += k;
      sbytes -= k;
      progressed |= k > 0;
    }
    if (rbytes > 0 && r_shm) {
      size_t k = colo_ring_read(w->in[rp], rp_, rbytes);
      rp_ += k;
      rbytes -= k;
      progressed |= k > 0;
    }
    int tcp_s = sbytes > 0 && !s_shm, tcp_r = rbytes > 0 && !r_shm;
    if (tcp_s || tcp_r) {
      struct pollfd pf[2];
      int n = 0, si = -1, ri = -1;
      if (tcp_s) {
        pf[n] = (struct pollfd){w->fds[sp], POLLOUT, 0};
        si = n++;
      }
      if (tcp_r) {
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
      /* while a shared-memory part is pending, only look at the sockets */
      int wait = (sbytes > 0 && s_shm) || (rbytes > 0 && r_shm) ? 0 : (int)left;
      int r = poll(pf, (nfds_t)n, wait);
      if (r < 0 && errno != EINTR)
        return comm_fail(c, COLO_EIO, "poll: %s", strerror(errno));
      if (r > 0 && ri >= 0 && (pf[ri].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t k = recv(w->fds[rp], rp_, rbytes, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
          return comm_fail(c, COLO_EIO, "rank %d closed its connection: it exited or died", rp);
        if (k > 0) {
          rp_ += k;
          rbytes -= (size_t)k;
          progressed = 1;
        }
      }
      if (r > 0 && si >= 0 && sbytes > 0 && (pf[si].revents & (POLLOUT | POLLHUP | POLLERR))) {
        ssize_t k = send(w->fds[sp], sp_, sbytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EINTR)
          return comm_fail(c, COLO_EIO, "rank %d closed its connection: it exited or died", sp);
        if (k > 0) {
          sp_ += k;
          sbytes -= (size_t)k;
          progressed = 1;
        }
      }
      if (wait > 0)
        continue; /* a blocking poll: no shared memory involved */
    }
    if (sbytes == 0 && rbytes == 0)
      break;
    if (progressed) {
      idle = 0;
      continue;
    }
    /* waiting on shared memory: yield first, then sleep a little longer each time, so a
     * waiting rank leaves the cores to ranks still computing */
    idle++;
    if ((idle & 63) == 0) {
      if (mono_ms() >= deadline)
        return comm_fail(c, COLO_ETIMEDOUT, "timed out after %d ms waiting for rank %d",
                         w->timeout_ms, rbytes > 0 ? rp : sp);
      int peer = rbytes > 0 && r_shm ? rp : sp;
      if (peer_gone(w, peer)) {
        /* a peer may write its last bytes and exit between the read above and this look: what
         * it wrote is still in the ring. Only what is missing after that is lost. */
        if (peer == rp && rbytes > 0 && r_shm) {
          size_t k = colo_ring_read(w->in[rp], rp_, rbytes);
          rp_ += k;
          rbytes -= k;
        }
        if ((peer == rp && rbytes > 0) || (peer == sp && sbytes > 0))
          return comm_fail(c, COLO_EIO, "rank %d closed its connection: it exited or died", peer);
        continue; /* all it sent has come; what is left is for another peer */
      }
    }
    if (idle < 256) {
      sched_yield();
    } else {
      struct timespec ts = {0, (long)(idle < 2256 ? (idle - 255) * 100 : 200000)};
      nanosleep(&ts, NULL);
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

static int sendrecv(colo_comm_t *cm, const float *sbuf, size_t sn, int speer, float *rbuf,
                    size_t rn, int rpeer) {
  tcp_comm_t *c = TC(cm);
  int p = c->base.size, me = c->base.rank;
  if (speer < -1 || speer >= p || speer == me || rpeer < -1 || rpeer >= p || rpeer == me)
    return comm_fail(c, COLO_EINVAL, "sendrecv with %d and %d in a group of %d", speer, rpeer, p);
  return xfer(c, speer < 0 ? -1 : c->members[speer], sbuf, sn * sizeof(float),
              rpeer < 0 ? -1 : c->members[rpeer], rbuf, rn * sizeof(float));
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
    for (int i = 0; i < w->world; i++)
      if (w->maps && w->maps[i])
        munmap(w->maps[i], w->map_len);
    free(w->maps);
    free(w->out);
    free(w->in);
    free(w->fds);
    free(w);
  }
  free(c->members);
  free(c->scratch);
  free(c);
}

static int tcp_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                     size_t errlen);

static const colo_comm_ops_t TCP = {.name = "tcp",
                                    .allreduce_sum = allreduce_sum,
                                    .reduce_scatter_sum = reduce_scatter_sum,
                                    .all_gather = all_gather,
                                    .broadcast = broadcast,
                                    .send = send_,
                                    .recv = recv_,
                                    .sendrecv = sendrecv,
                                    .barrier = barrier,
                                    .abort = abort_,
                                    .destroy = destroy,
                                    .group = tcp_group};

static void set_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int buf = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

/* one byte over a pair's socket, with a deadline */
static int hs_send(int fd, char b) {
  return send(fd, &b, 1, MSG_NOSIGNAL) == 1 ? 0 : -1;
}
static int hs_recv(int fd, int timeout_ms) {
  struct pollfd pf = {fd, POLLIN, 0};
  char b;
  if (poll(&pf, 1, timeout_ms) <= 0 || recv(fd, &b, 1, 0) != 1)
    return -1;
  return b;
}

/* Ranks on the same machine (same boot id) talk through shared memory: for each such pair the
 * lower rank creates a segment with one ring per direction, says 'S' over the socket, the higher
 * maps it and answers 'A', and the name is unlinked. Any failure answers 'N' and the pair keeps
 * TCP. Every rank handles its pairs in the same global order (by lower rank, then higher), so
 * the handshakes cannot deadlock. COLO_COMM_SHM=0 turns this off; COLO_COMM_SHM_MIB sizes the
 * rings (a segment of another size is refused: that pair keeps TCP). */
static void shm_setup(tcp_world_t *w, int timeout_ms) {
  const char *env = getenv("COLO_COMM_SHM");
  if (env && !strcmp(env, "0"))
    return;
  char boot[64] = "", key[64], err[128], token[64], other[64];
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f || !fgets(boot, sizeof boot, f)) {
    if (f)
      fclose(f);
    return;
  }
  fclose(f);
  boot[strcspn(boot, "\n")] = '\0';
  snprintf(key, sizeof key, "boot/%d", w->rank);
  if (colo_rdzv_set(w->store_addr, key, boot, timeout_ms, err, sizeof err) < 0)
    return;
  if (w->rank == 0) {
    snprintf(token, sizeof token, "%d-%lld", (int)getpid(), (long long)mono_ms());
    colo_rdzv_set(w->store_addr, "shm/token", token, timeout_ms, err, sizeof err);
  } else if (colo_rdzv_get(w->store_addr, "shm/token", token, sizeof token, timeout_ms, err,
                           sizeof err) < 0) {
    return;
  }
  size_t half = colo_ring_size(w->ring);
  for (int j = 0; j < w->world; j++) {
    if (j == w->rank)
      continue;
    snprintf(key, sizeof key, "boot/%d", j);
    if (colo_rdzv_get(w->store_addr, key, other, sizeof other, timeout_ms, err, sizeof err) < 0 ||
        strcmp(other, boot) != 0)
      continue; /* another machine (both ends see the same ids, so both skip) */
    int lo = w->rank < j ? w->rank : j, hi = w->rank < j ? j : w->rank, fd = w->fds[j];
    char name[96];
    snprintf(name, sizeof name, "/colo-%s-%d-%d", token, lo, hi);
    void *map = NULL;
    if (w->rank == lo) {
      int sfd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (sfd >= 0 && ftruncate(sfd, (off_t)(2 * half)) == 0)
        map = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
      if (sfd >= 0)
        close(sfd);
      if (map == MAP_FAILED)
        map = NULL;
      if (map) {
        colo_ring_init((colo_ring_t *)map, w->ring);
        colo_ring_init((colo_ring_t *)((char *)map + half), w->ring);
      }
      int reply = hs_send(fd, map ? 'S' : 'N') == 0 ? hs_recv(fd, timeout_ms) : -1;
      shm_unlink(name);
      if (reply != 'A' && map) {
        munmap(map, 2 * half);
        map = NULL;
      }
    } else {
      int said = hs_recv(fd, timeout_ms);
      if (said == 'S') {
        int sfd = shm_open(name, O_RDWR, 0);
        struct stat st;
        /* rings of another size (another COLO_COMM_SHM_MIB): the pair keeps TCP */
        if (sfd >= 0 && (fstat(sfd, &st) != 0 || (size_t)st.st_size != 2 * half)) {
          close(sfd);
          sfd = -1;
        }
        if (sfd >= 0) {
          map = mmap(NULL, 2 * half, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
          close(sfd);
          if (map == MAP_FAILED)
            map = NULL;
        }
        hs_send(fd, map ? 'A' : 'N');
      }
    }
    if (!map)
      continue;
    /* the first ring carries lo -> hi, the second hi -> lo */
    colo_ring_t *r0 = map, *r1 = (colo_ring_t *)((char *)map + half);
    w->maps[j] = map;
    w->out[j] = w->rank == lo ? r0 : r1;
    w->in[j] = w->rank == lo ? r1 : r0;
    w->self->base.shm_peers++;
  }
}

int colo_comm_tcp_create(const char *store_addr, int rank, int world, const char *bind_host,
                         int timeout_ms, colo_comm_t **out, char *err, size_t errlen) {
  if (world < 1 || rank < 0 || rank >= world) {
    snprintf(err, errlen, "rank %d outside a world of %d", rank, world);
    return COLO_EINVAL;
  }
  long mib = RING_MIB;
  const char *env = getenv("COLO_COMM_SHM_MIB");
  if (env) {
    char *end;
    errno = 0;
    mib = strtol(env, &end, 10);
    if (!*env || *end || errno || mib < 1 || mib > 1024) {
      snprintf(err, errlen,
               "COLO_COMM_SHM_MIB=%s must be 1 to 1024 (MiB of ring a direction, for each pair of "
               "ranks on one machine)",
               env);
      return COLO_EINVAL;
    }
  }
  tcp_world_t *w = calloc(1, sizeof *w);
  tcp_comm_t *c = calloc(1, sizeof *c);
  w->fds = malloc((size_t)world * sizeof *w->fds);
  w->out = calloc((size_t)world, sizeof *w->out);
  w->in = calloc((size_t)world, sizeof *w->in);
  w->maps = calloc((size_t)world, sizeof *w->maps);
  w->ring = (size_t)mib << 20;
  w->map_len = 2 * colo_ring_size(w->ring);
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
  if (rank == 0 && colo_rdzv_served_by_rank0(store_addr) &&
      (rc = colo_rdzv_server_start(store_addr, &w->store, err, errlen)) < 0)
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
  shm_setup(w, timeout_ms);
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
  return world->ops->group(world, ranks, n, out, err, errlen);
}

static int tcp_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                     size_t errlen) {
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
  for (int i = 0; i < n; i++)
    c->base.shm_peers += i != me && wc->w->out[ranks[i]] != NULL;
  *out = &c->base;
  return 0;
}
