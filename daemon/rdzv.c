/* The rendezvous store colod serves to the ranks of running attempts: put, and get that waits
 * for the key. Scoped to (job, attempt): a call for an attempt that is not running is refused,
 * and the keys of an attempt go when it ends. Bounded: see the limits below. */
#include "rdzv.h"

#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "colod.h"
#include "jobs.h"

#define MAX_KEY     256
#define MAX_VALUE   (64u << 10)
#define MAX_KEYS    4096
#define MAX_WAIT_MS 600000u
#define MAX_WAITERS 65536

typedef struct rdzv_key_s {
  struct rdzv_key_s *next;
  char *key;
  uint8_t *value;
  size_t len;
} rdzv_key_t;

typedef struct rdzv_scope_s {
  struct rdzv_scope_s *next;
  uint64_t job_id;
  uint32_t attempt;
  rdzv_key_t *keys;
  size_t n_keys;
} rdzv_scope_t;

typedef struct rdzv_waiter_s {
  struct rdzv_waiter_s *next;
  colo_rpc_call_t *call;
  uint64_t job_id;
  uint32_t attempt;
  char key[MAX_KEY + 1];
  uint64_t deadline_mono_ms;
  int gone;
} rdzv_waiter_t;

struct colod_rdzv_s {
  rdzv_scope_t *scopes;
  rdzv_waiter_t *waiters;
  size_t n_waiters;
};

static colod_rdzv_t *state(colod_t *d) {
  if (!d->rdzv)
    d->rdzv = calloc(1, sizeof *d->rdzv);
  return d->rdzv;
}

static rdzv_scope_t *scope_find(colod_rdzv_t *r, uint64_t job, uint32_t attempt, int create) {
  for (rdzv_scope_t *s = r->scopes; s; s = s->next)
    if (s->job_id == job && s->attempt == attempt)
      return s;
  if (!create)
    return NULL;
  rdzv_scope_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->job_id = job;
  s->attempt = attempt;
  s->next = r->scopes;
  r->scopes = s;
  return s;
}

static rdzv_key_t *key_find(rdzv_scope_t *s, const char *key) {
  for (rdzv_key_t *k = s ? s->keys : NULL; k; k = k->next)
    if (!strcmp(k->key, key))
      return k;
  return NULL;
}

static void scope_free(rdzv_scope_t *s) {
  while (s->keys) {
    rdzv_key_t *k = s->keys;
    s->keys = k->next;
    free(k->key);
    free(k->value);
    free(k);
  }
  free(s);
}

/* The request is for an attempt that runs now; otherwise the call is failed and 0 returned. */
static int check_scope(colod_t *d, colo_rpc_call_t *call, int has_job, uint64_t job, int has_att,
                       uint32_t attempt, const char *key) {
  uint32_t cur, world;
  if (!has_job || !job || !has_att || !attempt) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "job_id and attempt are required");
    return 0;
  }
  if (!key || !key[0] || strnlen(key, MAX_KEY + 1) > MAX_KEY) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "key must be 1 to %d bytes", MAX_KEY);
    return 0;
  }
  if (!colod_jobs_attempt(d, job, &cur, &world) || cur != attempt) {
    colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "attempt %u of job %llu is not running",
                  attempt, (unsigned long long)job);
    return 0;
  }
  return 1;
}

static void reply_value(colo_rpc_call_t *call, const rdzv_key_t *k) {
  Colo__V1__RendezvousGetResponse r = COLO__V1__RENDEZVOUS_GET_RESPONSE__INIT;
  r.has_value = 1;
  r.value.data = k->value;
  r.value.len = k->len;
  colo_rpc_reply(call, &r.base);
}

void colod_rdzv_put(colod_t *d, colo_rpc_call_t *call, const Colo__V1__RendezvousPutRequest *req) {
  if (!check_scope(d, call, req->has_job_id, req->job_id, req->has_attempt, req->attempt, req->key))
    return;
  if (req->value.len > MAX_VALUE) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "value of %zu bytes exceeds %u",
                  req->value.len, MAX_VALUE);
    return;
  }
  colod_rdzv_t *r = state(d);
  rdzv_scope_t *s = r ? scope_find(r, req->job_id, req->attempt, 1) : NULL;
  if (!s) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  rdzv_key_t *k = key_find(s, req->key);
  if (!k) {
    if (s->n_keys >= MAX_KEYS) {
      colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "attempt %u of job %llu has %d keys",
                    req->attempt, (unsigned long long)req->job_id, MAX_KEYS);
      return;
    }
    k = calloc(1, sizeof *k);
    if (!k || !(k->key = strdup(req->key))) {
      free(k);
      colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
      return;
    }
    k->next = s->keys;
    s->keys = k;
    s->n_keys++;
  }
  uint8_t *v = malloc(req->value.len ? req->value.len : 1);
  if (!v) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  if (req->value.len)
    memcpy(v, req->value.data, req->value.len);
  free(k->value);
  k->value = v;
  k->len = req->value.len;
  Colo__V1__RendezvousPutResponse resp = COLO__V1__RENDEZVOUS_PUT_RESPONSE__INIT;
  colo_rpc_reply(call, &resp.base);
  /* the waiters for this key get it now */
  for (rdzv_waiter_t *w = r->waiters; w; w = w->next)
    if (!w->gone && w->call && w->job_id == req->job_id && w->attempt == req->attempt &&
        !strcmp(w->key, req->key)) {
      reply_value(w->call, k);
      w->call = NULL; /* answered; freed by the next sweep */
    }
}

static void waiter_cancelled(colo_rpc_call_t *call, void *data) {
  rdzv_waiter_t *w = data;
  (void)call;
  w->gone = 1;
}

void colod_rdzv_get(colod_t *d, colo_rpc_call_t *call, const Colo__V1__RendezvousGetRequest *req) {
  if (!check_scope(d, call, req->has_job_id, req->job_id, req->has_attempt, req->attempt, req->key))
    return;
  colod_rdzv_t *r = state(d);
  if (!r) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  rdzv_key_t *k = key_find(scope_find(r, req->job_id, req->attempt, 0), req->key);
  if (k) {
    reply_value(call, k);
    return;
  }
  uint32_t wait = req->has_wait_ms ? req->wait_ms : 0;
  if (wait == 0) {
    colo_rpc_fail(call, GRPC_STATUS_NOT_FOUND, "key \"%s\" is not set", req->key);
    return;
  }
  if (wait > MAX_WAIT_MS)
    wait = MAX_WAIT_MS;
  if (r->n_waiters >= MAX_WAITERS) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "too many waiting gets");
    return;
  }
  rdzv_waiter_t *w = calloc(1, sizeof *w);
  if (!w) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  w->call = call;
  w->job_id = req->job_id;
  w->attempt = req->attempt;
  snprintf(w->key, sizeof w->key, "%s", req->key);
  w->deadline_mono_ms = colod_mono_ms(d) + wait;
  w->next = r->waiters;
  r->waiters = w;
  r->n_waiters++;
  colo_rpc_call_on_cancel(call, waiter_cancelled, w);
}

void colod_rdzv_tick(colod_t *d) {
  colod_rdzv_t *r = d->rdzv;
  if (!r)
    return;
  uint64_t now = colod_mono_ms(d);
  for (rdzv_waiter_t **pp = &r->waiters; *pp;) {
    rdzv_waiter_t *w = *pp;
    uint32_t cur, world;
    int running = colod_jobs_attempt(d, w->job_id, &cur, &world) && cur == w->attempt;
    if (w->call && w->gone)
      colo_rpc_fail(w->call, GRPC_STATUS_CANCELLED, "the caller went away");
    else if (w->call && !running)
      colo_rpc_fail(w->call, GRPC_STATUS_ABORTED, "attempt %u of job %llu ended", w->attempt,
                    (unsigned long long)w->job_id);
    else if (w->call && now >= w->deadline_mono_ms)
      colo_rpc_fail(w->call, GRPC_STATUS_DEADLINE_EXCEEDED, "key \"%s\" was not set in time",
                    w->key);
    else if (w->call) {
      pp = &w->next;
      continue;
    }
    *pp = w->next;
    r->n_waiters--;
    free(w);
  }
  /* the keys of attempts that ended */
  for (rdzv_scope_t **pp = &r->scopes; *pp;) {
    rdzv_scope_t *s = *pp;
    uint32_t cur, world;
    if (colod_jobs_attempt(d, s->job_id, &cur, &world) && cur == s->attempt) {
      pp = &s->next;
      continue;
    }
    *pp = s->next;
    scope_free(s);
  }
}

void colod_rdzv_close_all(colod_t *d, const char *why) {
  colod_rdzv_t *r = d->rdzv;
  if (!r)
    return;
  while (r->waiters) {
    rdzv_waiter_t *w = r->waiters;
    r->waiters = w->next;
    if (w->call)
      colo_rpc_fail(w->call, GRPC_STATUS_UNAVAILABLE, "%s", why);
    free(w);
  }
  while (r->scopes) {
    rdzv_scope_t *s = r->scopes;
    r->scopes = s->next;
    scope_free(s);
  }
  free(r);
  d->rdzv = NULL;
}
