/* colod's push to workers. A worker keeps one WatchHost stream open; whenever what its host should
 * run changes (jobs.c: ranks placed there, stopped, or their attempt ended), colod sends it a
 * nudge and it beats at once, rather than at its next interval. The nudge carries no state: the
 * heartbeat's reply stays the one carrier of the desired ranks, so a lost nudge costs only time,
 * and a worker without a stream (an older one, or one whose stream broke) works as before.
 *
 * Nudges in one loop turn are coalesced: a host is queued once (its stream's `pending`), and a
 * zero timer sends one nudge to each queued host after the turn's work is done. */
#include "push.h"

#include <stdlib.h>

#include "../common/error.h"
#include "../common/log.h"
#include "colod.h"

struct colod_push_s {
  colod_push_t *prev, *next; /* d->pushes */
  colod_t *d;
  colo_rpc_call_t *call;
  uint64_t host_id;
  uint64_t seq;
  int pending; /* its host is in d->push_pending */
};

static void push_free(colod_t *d, colod_push_t *p) {
  colod_host_live_t *l = colod_host_live(d, p->host_id);
  if (l && l->push == p)
    l->push = NULL;
  if (p->prev)
    p->prev->next = p->next;
  else
    d->pushes = p->next;
  if (p->next)
    p->next->prev = p->prev;
  d->n_pushes--;
  free(p);
}

static void push_cancelled(colo_rpc_call_t *call, void *data) {
  colod_push_t *p = data;
  colo_log(COLO_LOG_DEBUG, "push", "host %llu: its worker's WatchHost went away",
           (unsigned long long)p->host_id);
  colo_rpc_stream_end(call, GRPC_STATUS_CANCELLED, "worker went away");
  push_free(p->d, p);
}

/* Sends one nudge; a stream whose worker reads too slowly has been ended by the send. */
static void send_nudge(colod_t *d, colod_push_t *p) {
  Colo__V1__HostNudge n = COLO__V1__HOST_NUDGE__INIT;
  n.has_seq = 1;
  n.seq = p->seq++;
  p->pending = 0;
  d->stats.nudges++;
  if (colo_rpc_stream_send(p->call, &n.base) == COLO_ETOOBIG) {
    colo_log(COLO_LOG_WARN, "push", "host %llu: its worker does not read its nudges; stream ended",
             (unsigned long long)p->host_id);
    push_free(d, p);
  }
}

void colod_push_watch(colod_t *d, colo_rpc_call_t *call, const Colo__V1__WatchHostRequest *req) {
  if (d->draining) {
    colo_rpc_fail(call, GRPC_STATUS_UNAVAILABLE, "colod is shutting down");
    return;
  }
  if (!req->has_host_id || !req->has_session) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "host_id and session are required");
    return;
  }
  colod_host_live_t *l = colod_host_live(d, req->host_id);
  if (!l || l->session != req->session) {
    colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                  "host %llu has no session %llu: register first", (unsigned long long)req->host_id,
                  (unsigned long long)req->session);
    return;
  }
  colod_push_t *p = calloc(1, sizeof *p);
  if (!p) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  if (l->push) { /* a worker that reconnected before its old stream was seen to break */
    colo_rpc_stream_end(l->push->call, GRPC_STATUS_ABORTED,
                        "replaced by a newer WatchHost for this host");
    push_free(d, l->push);
  }
  p->d = d;
  p->call = call;
  p->host_id = req->host_id;
  p->next = d->pushes;
  if (d->pushes)
    d->pushes->prev = p;
  d->pushes = p;
  d->n_pushes++;
  l->push = p;
  colo_rpc_call_on_cancel(call, push_cancelled, p);
  colo_log(COLO_LOG_DEBUG, "push", "host %llu: its worker watches from %s",
           (unsigned long long)p->host_id, colo_rpc_call_peer(call));
  send_nudge(d, p); /* seq 0: beat once, for what changed while no stream was open */
}

static void on_flush(uv_timer_t *t) {
  colod_t *d = t->data;
  /* a host queued twice (its stream replaced in between) is nudged once: `pending` is cleared */
  for (size_t i = 0; i < d->n_push_pending; i++) {
    colod_host_live_t *l = colod_host_live(d, d->push_pending[i]);
    if (l && l->push && l->push->pending)
      send_nudge(d, l->push);
  }
  d->n_push_pending = 0;
}

void colod_push_nudge(colod_t *d, uint64_t host_id) {
  if (d->draining)
    return;
  colod_host_live_t *l = colod_host_live(d, host_id);
  if (!l || !l->push || l->push->pending)
    return;
  if (d->n_push_pending == d->cap_push_pending) {
    size_t cap = d->cap_push_pending ? d->cap_push_pending * 2 : 64;
    uint64_t *n = realloc(d->push_pending, cap * sizeof *n);
    if (!n)
      return; /* the worker hears of it at its next beat */
    d->push_pending = n;
    d->cap_push_pending = cap;
  }
  d->push_pending[d->n_push_pending++] = host_id;
  l->push->pending = 1;
  if (!uv_is_active((uv_handle_t *)&d->push_flush))
    uv_timer_start(&d->push_flush, on_flush, 0, 0);
}

uint32_t colod_push_streams(const colod_t *d) {
  return d->n_pushes;
}

void colod_push_close_all(colod_t *d, const char *why) {
  while (d->pushes) {
    colo_rpc_stream_end(d->pushes->call, GRPC_STATUS_UNAVAILABLE, why);
    push_free(d, d->pushes);
  }
  free(d->push_pending);
  d->push_pending = NULL;
  d->n_push_pending = d->cap_push_pending = 0;
}
