/* colo-workerd's WatchHost stream. colod nudges a worker whenever what its host should run
 * changes; the worker then beats at once instead of at its next interval (the beat's reply
 * carries the change). The stream blocks, so it runs on a thread of its own with its own client
 * (rpc.h: one client per thread) and hands each nudge to the loop through a uv_async_t.
 *
 * The stream is only a shortcut: while it is down the worker works as before, at its interval.
 * A broken stream is opened again after a back-off (0.2 s, doubling to 5 s); one colod refuses
 * for the session (a colod that restarted and lost it) waits for the next registration. */
#include "watch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "colo/v1/cluster.pb-c.h"
#include "common/error.h"
#include "common/log.h"

#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000

struct colo_watch_s {
  uv_async_t async; /* first: the handle's memory is the struct's */
  void (*nudge)(void *data);
  void *data;
  colo_rpc_client_t *cli;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* under mu */
  uint64_t host_id, session, generation; /* generation: bumped by each new session */
  int stop;
  /* the thread's own */
  int open;    /* the stream is up: its first nudge came */
  int failing; /* a failure was logged, and no stream came up since */
};

static void on_closed(uv_handle_t *h) {
  free(h); /* the struct: the handle is its first member */
}

static void on_async(uv_async_t *a) {
  colo_watch_t *w = (colo_watch_t *)a;
  w->nudge(w->data);
}

static int on_nudge(const ProtobufCMessage *m, void *data) {
  colo_watch_t *w = data;
  const Colo__V1__HostNudge *n = (const void *)m;
  if (!w->open) {
    w->open = 1;
    colo_log(w->failing ? COLO_LOG_INFO : COLO_LOG_DEBUG, "worker",
             "colod nudges this worker when what it should run changes (seq %llu)",
             (unsigned long long)n->seq);
    w->failing = 0;
  }
  uv_async_send(&w->async);
  return 0;
}

/* Waits under mu until stop, a new session, or `ms` (0: no limit) pass. */
static void wait_for(colo_watch_t *w, uint64_t generation, uint32_t ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  while (!w->stop && w->generation == generation)
    if (ms == 0 ? pthread_cond_wait(&w->cv, &w->mu) != 0
                : pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0)
      break;
}

static void *watch_main(void *arg) {
  colo_watch_t *w = arg;
  uint32_t backoff = BACKOFF_MIN_MS;
  pthread_mutex_lock(&w->mu);
  while (!w->stop) {
    if (!w->generation) {
      wait_for(w, 0, 0);
      continue;
    }
    uint64_t generation = w->generation;
    Colo__V1__WatchHostRequest req = COLO__V1__WATCH_HOST_REQUEST__INIT;
    req.has_host_id = req.has_session = 1;
    req.host_id = w->host_id;
    req.session = w->session;
    pthread_mutex_unlock(&w->mu);
    colo_rpc_status_t st = {GRPC_STATUS_UNKNOWN, "the call failed in the transport"};
    uint64_t t0 = uv_hrtime();
    w->open = 0;
    colo_rpc_call_stream(w->cli, "/colo.v1.Cluster/WatchHost", &req.base,
                         &colo__v1__host_nudge__descriptor, 0, on_nudge, w, &st);
    /* a stream that stayed up a while was working: a new failure starts the back-off again */
    int lasted = uv_hrtime() - t0 > 10ull * 1000000000ull;
    pthread_mutex_lock(&w->mu);
    if (w->stop)
      break;
    if (lasted)
      backoff = BACKOFF_MIN_MS;
    if (!w->failing)
      colo_log(COLO_LOG_INFO, "worker",
               "no nudges from colod: %s: %s (beats keep their interval meanwhile)",
               colo_rpc_status_name(st.code), st.message);
    w->failing = 1;
    if (st.code == GRPC_STATUS_FAILED_PRECONDITION || st.code == GRPC_STATUS_UNIMPLEMENTED) {
      /* a session colod does not know: the next registration brings another; a colod without
       * WatchHost (an older one): likewise, at its next registration */
      wait_for(w, generation, 0);
      continue;
    }
    wait_for(w, generation, backoff);
    backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int colo_watch_start(uv_loop_t *loop, const char *target, const colo_rpc_client_opts_t *opts,
                     void (*nudge)(void *data), void *data, colo_watch_t **out, char *err,
                     size_t errlen) {
  colo_watch_t *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  int rc = colo_rpc_client_open(target, opts, &w->cli, err, errlen);
  if (rc < 0) {
    free(w);
    return rc;
  }
  w->nudge = nudge;
  w->data = data;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  uv_async_init(loop, &w->async, on_async);
  if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
    snprintf(err, errlen, "cannot start the WatchHost thread");
    colo_rpc_client_close(w->cli);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    uv_close((uv_handle_t *)&w->async, on_closed);
    return COLO_EINTERNAL;
  }
  *out = w;
  return 0;
}

void colo_watch_session(colo_watch_t *w, uint64_t host_id, uint64_t session) {
  pthread_mutex_lock(&w->mu);
  w->host_id = host_id;
  w->session = session;
  w->generation++;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

void colo_watch_stop(colo_watch_t *w) {
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  colo_rpc_client_cancel(w->cli);
  pthread_join(w->thread, NULL);
  colo_rpc_client_close(w->cli);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  uv_close((uv_handle_t *)&w->async, on_closed);
}
