/* The rendezvous store: one thread per client connection, a mutex-guarded table, a condition
 * variable for gets that wait. Frames: op (1 byte: 'S' set, 'G' get), key length and key,
 * value length and value (set only); replies: 'K' for a set, 'V' + length + value for a get. */
#include "store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/error.h"

#define MAX_ITEM 4096
#define MAX_KEYS 4096

typedef struct {
  char *key, *value;
} kv_t;

struct colo_rdzv_server_s {
  int fd;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  kv_t kv[MAX_KEYS];
  int n_kv;
  int stopping;
  int clients[256];
  int n_clients;
};

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int split_addr(const char *addr, char *host, size_t hl, char *port, size_t pl) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon == addr || !colon[1])
    return -1;
  size_t n = (size_t)(colon - addr);
  if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') { /* [v6]:port */
    addr++;
    n -= 2;
  }
  if (n >= hl)
    return -1;
  memcpy(host, addr, n);
  host[n] = '\0';
  snprintf(port, pl, "%s", colon + 1);
  return 0;
}

/* the local port a socket is bound to; -1 when it has none */
static int sock_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
    return -1;
  return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                       : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

int colo_tcp_listen(const char *host, int port, int *bound_port, char *err, size_t errlen) {
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  int gai = getaddrinfo(host, ps, &hints, &res);
  if (gai != 0) {
    snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
    return -1;
  }
  /* A fixed port may be held a moment by a socket that is not a server: a rank on this host
   * that dials it before it listens can get it as its own port (a TCP self-connect, which
   * colo_tcp_connect resets at once). Bound a while later, it is free; a server's stays taken. */
  int64_t deadline = mono_ms() + (port ? 3000 : 0);
  int fd, one = 1;
  for (;;) {
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0)
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 256) == 0)
      break;
    int e = errno;
    if (fd >= 0)
      close(fd);
    if (e != EADDRINUSE || mono_ms() >= deadline) {
      snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(e));
      freeaddrinfo(res);
      return -1;
    }
    usleep(20000);
  }
  freeaddrinfo(res);
  if (bound_port)
    *bound_port = sock_port(fd);
  return fd;
}

/* A TCP connection to a port on this host that nobody listens on can be made to itself, when
 * the kernel picks that same port as the connection's own (a simultaneous open): its two ends
 * are one address. */
static int self_connected(int fd) {
  struct sockaddr_storage a = {0}, b = {0};
  socklen_t la = sizeof a, lb = sizeof b;
  if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
      getpeername(fd, (struct sockaddr *)&b, &lb) != 0)
    return 0;
  return la == lb && memcmp(&a, &b, la) == 0;
}

int colo_tcp_connect(const char *addr, int timeout_ms, char *err, size_t errlen) {
  char host[256], port[16];
  if (split_addr(addr, host, sizeof host, port, sizeof port) < 0) {
    snprintf(err, errlen, "bad address \"%s\": expected host:port", addr);
    return -1;
  }
  struct addrinfo hints = {0}, *res;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0) {
    snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
    return -1;
  }
  int64_t deadline = mono_ms() + timeout_ms;
  for (;;) {
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int up = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
    if (up && self_connected(fd)) { /* no server yet: the kernel gave it the port it dialled */
      /* closed with a reset, not through TIME_WAIT, which would hold the port for a minute */
      struct linger lg = {1, 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      up = 0;
      errno = ECONNREFUSED;
    }
    if (up) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      freeaddrinfo(res);
      return fd;
    }
    int e = errno;
    if (fd >= 0)
      close(fd);
    if (mono_ms() >= deadline || (e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH)) {
      snprintf(err, errlen, "cannot connect to %s: %s", addr, strerror(e));
      freeaddrinfo(res);
      return -1;
    }
    usleep(20000); /* the peer is not listening yet */
  }
}

/* read or write exactly n bytes with a deadline */
static int io_all(int fd, void *buf, size_t n, int writing, int64_t deadline) {
  char *p = buf;
  while (n > 0) {
    int64_t left = deadline - mono_ms();
    if (left <= 0)
      return COLO_ETIMEDOUT;
    struct pollfd pfd = {fd, writing ? POLLOUT : POLLIN, 0};
    int r = poll(&pfd, 1, (int)left);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return r == 0 ? COLO_ETIMEDOUT : COLO_EIO;
    ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (k <= 0)
      return COLO_EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* ---- server ---- */

typedef struct {
  colo_rdzv_server_t *s;
  int fd;
} client_arg_t;

static const char *lookup(colo_rdzv_server_t *s, const char *key) {
  for (int i = 0; i < s->n_kv; i++)
    if (!strcmp(s->kv[i].key, key))
      return s->kv[i].value;
  return NULL;
}

static void *client_main(void *arg) {
  client_arg_t *a = arg;
  colo_rdzv_server_t *s = a->s;
  int fd = a->fd;
  free(a);
  const int64_t forever = INT64_MAX / 2;
  for (;;) {
    unsigned char op;
    uint32_t kl, vl;
    char key[MAX_ITEM + 1], val[MAX_ITEM + 1];
    if (io_all(fd, &op, 1, 0, forever) < 0 || io_all(fd, &kl, 4, 0, forever) < 0 || kl > MAX_ITEM ||
        io_all(fd, key, kl, 0, forever) < 0)
      break;
    key[kl] = '\0';
    if (op == 'S') {
      if (io_all(fd, &vl, 4, 0, forever) < 0 || vl > MAX_ITEM ||
          io_all(fd, val, vl, 0, forever) < 0)
        break;
      val[vl] = '\0';
      pthread_mutex_lock(&s->mu);
      int ok = 1;
      for (int i = 0; i < s->n_kv; i++)
        if (!strcmp(s->kv[i].key, key)) {
          free(s->kv[i].value);
          s->kv[i].value = strdup(val);
          ok = 2;
        }
      if (ok == 1 && s->n_kv < MAX_KEYS) {
        s->kv[s->n_kv].key = strdup(key);
        s->kv[s->n_kv].value = strdup(val);
        s->n_kv++;
      }
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
      unsigned char k = 'K';
      if (io_all(fd, &k, 1, 1, forever) < 0)
        break;
    } else if (op == 'G') {
      pthread_mutex_lock(&s->mu);
      const char *v;
      while (!(v = lookup(s, key)) && !s->stopping)
        pthread_cond_wait(&s->cv, &s->mu);
      if (v)
        snprintf(val, sizeof val, "%s", v);
      pthread_mutex_unlock(&s->mu);
      if (!v)
        break;
      vl = (uint32_t)strlen(val);
      unsigned char k = 'V';
      if (io_all(fd, &k, 1, 1, forever) < 0 || io_all(fd, &vl, 4, 1, forever) < 0 ||
          io_all(fd, val, vl, 1, forever) < 0)
        break;
    } else {
      break;
    }
  }
  close(fd);
  return NULL;
}

static void *accept_main(void *arg) {
  colo_rdzv_server_t *s = arg;
  for (;;) {
    int fd = accept(s->fd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      break; /* the listening socket was shut down */
    }
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->n_clients == 256) {
      pthread_mutex_unlock(&s->mu);
      close(fd);
      continue;
    }
    s->clients[s->n_clients++] = fd;
    pthread_mutex_unlock(&s->mu);
    client_arg_t *a = malloc(sizeof *a);
    a->s = s;
    a->fd = fd;
    pthread_t t;
    pthread_create(&t, NULL, client_main, a);
    pthread_detach(t);
  }
  return NULL;
}

int colo_rdzv_server_start(const char *addr, colo_rdzv_server_t **out, char *err, size_t errlen) {
  char host[256], port[16];
  if (split_addr(addr, host, sizeof host, port, sizeof port) < 0) {
    snprintf(err, errlen, "bad store address \"%s\": expected host:port", addr);
    return COLO_EINVAL;
  }
  colo_rdzv_server_t *s = calloc(1, sizeof *s);
  /* a socket already listening on that port, handed down by colo-train's local launcher
   * (COLO_STORE_FD), else one bound here */
  const char *inherited = getenv("COLO_STORE_FD");
  s->fd = -1;
  if (inherited) {
    int fd = atoi(inherited), listening = 0;
    socklen_t il = sizeof listening;
    unsetenv("COLO_STORE_FD");
    if (fd > 2 && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &il) == 0 && listening &&
        sock_port(fd) == atoi(port))
      s->fd = fd;
  }
  if (s->fd < 0)
    s->fd = colo_tcp_listen(host, atoi(port), NULL, err, errlen);
  if (s->fd < 0) {
    free(s);
    return COLO_EIO;
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_create(&s->thread, NULL, accept_main, s);
  *out = s;
  return 0;
}

void colo_rdzv_server_stop(colo_rdzv_server_t *s) {
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->cv);
  for (int i = 0; i < s->n_clients; i++)
    shutdown(s->clients[i], SHUT_RDWR); /* their threads end and close them */
  pthread_mutex_unlock(&s->mu);
  shutdown(s->fd, SHUT_RDWR);
  pthread_join(s->thread, NULL);
  close(s->fd);
  /* client threads are detached; give them a moment to leave before the table goes */
  usleep(20000);
  for (int i = 0; i < s->n_kv; i++) {
    free(s->kv[i].key);
    free(s->kv[i].value);
  }
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ---- client ---- */

static int request(const char *addr, unsigned char op, const char *key, const char *value,
                   char *out, size_t cap, int timeout_ms, char *err, size_t errlen) {
  int64_t deadline = mono_ms() + timeout_ms;
  int fd = colo_tcp_connect(addr, timeout_ms, err, errlen);
  if (fd < 0)
    return COLO_EUNAVAIL;
  uint32_t kl = (uint32_t)strlen(key), vl = value ? (uint32_t)strlen(value) : 0;
  int rc = 0;
  if (kl > MAX_ITEM || vl > MAX_ITEM)
    rc = COLO_ETOOBIG;
  if (rc == 0)
    rc = io_all(fd, &op, 1, 1, deadline);
  if (rc == 0)
    rc = io_all(fd, &kl, 4, 1, deadline);
  if (rc == 0)
    rc = io_all(fd, (void *)key, kl, 1, deadline);
  if (rc == 0 && op == 'S') {
    rc = io_all(fd, &vl, 4, 1, deadline);
    if (rc == 0)
      rc = io_all(fd, (void *)value, vl, 1, deadline);
  }
  unsigned char reply = 0;
  if (rc == 0)
    rc = io_all(fd, &reply, 1, 0, deadline);
  if (rc == 0 && op == 'G') {
    rc = io_all(fd, &vl, 4, 0, deadline);
    if (rc == 0 && (vl > MAX_ITEM || vl >= cap))
      rc = COLO_ETOOBIG;
    if (rc == 0)
      rc = io_all(fd, out, vl, 0, deadline);
    if (rc == 0)
      out[vl] = '\0';
  }
  close(fd);
  if (rc == COLO_ETIMEDOUT)
    snprintf(err, errlen, "rendezvous store %s: no value for \"%s\" within %d ms", addr, key,
             timeout_ms);
  else if (rc < 0)
    snprintf(err, errlen, "rendezvous store %s: %s while %s \"%s\"", addr, colo_strerror(rc),
             op == 'S' ? "setting" : "getting", key);
  return rc;
}

#define COLOD_PREFIX "colod://"

static colo_rdzv_remote_t remote_impl;

void colo_rdzv_set_remote(const colo_rdzv_remote_t *remote) {
  remote_impl = *remote;
}

int colo_rdzv_served_by_rank0(const char *addr) {
  return strncmp(addr, COLOD_PREFIX, strlen(COLOD_PREFIX)) != 0;
}

static int no_remote(const char *addr, char *err, size_t errlen) {
  snprintf(err, errlen, "rendezvous %s: this program cannot reach colod's store", addr);
  return COLO_ENOSYS;
}

int colo_rdzv_set(const char *addr, const char *key, const char *value, int timeout_ms, char *err,
                  size_t errlen) {
  if (!colo_rdzv_served_by_rank0(addr))
    return remote_impl.set ? remote_impl.set(addr, key, value, timeout_ms, err, errlen)
                           : no_remote(addr, err, errlen);
  return request(addr, 'S', key, value, NULL, 0, timeout_ms, err, errlen);
}

int colo_rdzv_get(const char *addr, const char *key, char *value, size_t cap, int timeout_ms,
                  char *err, size_t errlen) {
  if (!colo_rdzv_served_by_rank0(addr))
    return remote_impl.get ? remote_impl.get(addr, key, value, cap, timeout_ms, err, errlen)
                           : no_remote(addr, err, errlen);
  return request(addr, 'G', key, NULL, value, cap, timeout_ms, err, errlen);
}
