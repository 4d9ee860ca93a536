/* colod's gRPC handlers: the method table of colo.v1.Cluster. Every request is validated
 * before it touches state; failures answer INVALID_ARGUMENT (bad input), NOT_FOUND,
 * FAILED_PRECONDITION (wrong state) or INTERNAL, each with an exact message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/jobspec.h"
#include "../common/log.h"
#include "../common/pbcodec.h"
#include "colo/v1/cluster.pb-c.h"
#include "colod.h"
#include "jobs.h"
#include "logs.h"
#include "notify.h"
#include "rdzv.h"
#include "usage.h"

#define MAX_LIST      1000
#define MAX_TOKEN     128
#define MAX_HOST_NAME 64
#define MAX_ADDRESS   128
#define MAX_DEVICES   COLOD_MAX_DEVICES
#define MAX_HB_RANKS  4096

struct colod_watch_s {
  colod_t *d;
  colo_rpc_call_t *call;
  uint64_t job_id;
  int progress;
  colod_watch_t *prev, *next;
};

/* ---- conversions ---- */

/* Fills msg from a job row. The spec is unpacked into *spec_out (free it after use), or left out
 * when with_spec is 0. */
/* A checkpoint row as a message; its strings are copies (freed by checkpoint_msg_strings_free). */
static void checkpoint_to_msg(const colo_checkpoint_t *ck, Colo__V1__Checkpoint *c) {
  colo__v1__checkpoint__init(c);
  c->has_job_id = c->has_attempt = c->has_step = c->has_bytes = c->has_created_ms = 1;
  c->job_id = ck->job_id;
  c->attempt = ck->attempt;
  c->step = ck->step;
  c->bytes = ck->bytes;
  c->created_ms = ck->created_ms;
  c->has_request = ck->request > 0;
  c->request = ck->request;
  c->has_val_loss = ck->has_val_loss;
  c->val_loss = ck->val_loss;
  c->has_score = ck->has_score;
  c->score = ck->score;
  c->path = strdup(ck->path);
  c->manifest_sha256 = strdup(ck->manifest_sha256);
}

static void checkpoint_msg_strings_free(Colo__V1__Checkpoint *c) {
  free(c->path);
  free(c->manifest_sha256);
}

static int newest_ck_cb(const colo_checkpoint_t *ck, void *data) {
  Colo__V1__Checkpoint *c = malloc(sizeof *c);
  if (c)
    checkpoint_to_msg(ck, c);
  *(Colo__V1__Checkpoint **)data = c;
  return 1; /* newest first */
}

static void checkpoint_msg_free(Colo__V1__Checkpoint *c) {
  if (!c)
    return;
  checkpoint_msg_strings_free(c);
  free(c);
}

/* Frees what job_to_msg allocated besides the spec. */
static void job_msg_clear(Colo__V1__Job *msg) {
  checkpoint_msg_free(msg->newest_checkpoint);
  msg->newest_checkpoint = NULL;
  if (msg->progress)
    colo__v1__progress__free_unpacked(msg->progress, NULL);
  msg->progress = NULL;
  free(msg->slowed);
  msg->slowed = NULL;
}

/* A copy of the job's newest progress record: for a running attempt the one colod holds (none
 * before the attempt's first), otherwise the one kept in the store when the last attempt ended.
 * NULL when there is none. */
static Colo__V1__Progress *progress_copy(colod_t *d, const colo_job_t *j) {
  const Colo__V1__Progress *live = colod_jobs_progress(d, j->id);
  if (!live && j->state == COLO_JOB_RUNNING)
    return NULL;
  if (!live)
    return j->progress_len ? colo__v1__progress__unpack(NULL, j->progress_len, j->progress) : NULL;
  uint8_t buf[256];
  size_t n = colo__v1__progress__get_packed_size(live);
  if (n > sizeof buf)
    return NULL;
  colo__v1__progress__pack(live, buf);
  return colo__v1__progress__unpack(NULL, n, buf);
}

/* colod's time limits on a spec (submitted, or updated with a new limit): a job without one gets
 * default_time_limit, or max_time_limit where only that is set; one past max_time_limit is
 * refused with the reason in err. */
static int time_limit_policy(colod_t *d, Colo__V1__ResourceSpec *r, char *err, size_t len) {
  uint32_t max_s = (uint32_t)(d->cfg.max_time_limit_ms / 1000);
  uint32_t def_s = (uint32_t)(d->cfg.default_time_limit_ms / 1000);
  if (!r->time_limit_s && (def_s || max_s)) {
    r->time_limit_s = def_s && (!max_s || def_s <= max_s) ? def_s : max_s;
    r->has_time_limit_s = 1;
  }
  if (max_s && r->time_limit_s > max_s) {
    snprintf(err, len, "resources.time_limit_s=%u exceeds max_time_limit (%u s)", r->time_limit_s,
             max_s);
    return COLO_EINVAL;
  }
  return 0;
}

/* A job's notify.url must start with one of the operator's notify_allow prefixes: colod posts
 * to no address a request chose. */
static int notify_policy(colod_t *d, const Colo__V1__NotifySpec *n, char *err, size_t len) {
  if (!n || !n->url || !n->url[0] || colo_url_allowed(n->url, d->cfg.notify_allow))
    return 0;
  if (!d->cfg.notify_allow[0])
    snprintf(err, len,
             "notify.url: this coordinator takes no job's notification URL (its "
             "notify_allow is empty)");
  else
    snprintf(err, len,
             "notify.url \"%.200s\" starts with none of the coordinator's notify_allow "
             "prefixes (%.400s)",
             n->url, d->cfg.notify_allow);
  return COLO_EINVAL;
}

/* Fills msg from a job row, with the newest progress record colod holds and the newest
 * checkpoint (clear it with job_msg_clear). The spec is unpacked into *spec_out (free it after
 * use), or left out when with_spec is 0. */
static int job_to_msg(colod_t *d, const colo_job_t *j, int with_spec, Colo__V1__Job *msg,
                      Colo__V1__JobSpec **spec_out) {
  colo__v1__job__init(msg);
  msg->has_id = 1;
  msg->id = j->id;
  msg->name = (char *)j->name;
  msg->has_state = 1;
  msg->state = (Colo__V1__JobState)j->state;
  msg->has_attempt = 1;
  msg->attempt = j->attempt;
  msg->has_restarts = 1;
  msg->restarts = j->restarts;
  msg->has_created_ms = 1;
  msg->created_ms = j->created_ms;
  msg->has_updated_ms = 1;
  msg->updated_ms = j->updated_ms;
  msg->message = (char *)j->message;
  if (j->owner[0])
    msg->owner = (char *)j->owner;
  /* the scheduler's live reason, which stays put until this reply is packed (one loop) */
  const char *waiting = colod_jobs_waiting(d, j->id);
  if (waiting && (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING))
    msg->waiting = (char *)waiting;
  uint32_t of = 0, at = colod_jobs_in_line(d, j->id, &of);
  msg->has_queue_position = msg->has_queue_length = at != 0;
  msg->queue_position = at;
  msg->queue_length = of;
  int64_t start_by, expect;
  if (colod_jobs_holds(d, j->id, &start_by, &expect)) {
    msg->has_holds_room = msg->holds_room = 1;
    msg->has_starts_by_ms = start_by != INT64_MAX;
    msg->starts_by_ms = start_by;
    msg->has_expected_start_ms = expect != INT64_MAX;
    msg->expected_start_ms = expect;
  }
  int64_t started = j->state == COLO_JOB_RUNNING ? colod_jobs_started(d, j->id) : 0;
  msg->has_attempt_started_ms = started != 0;
  msg->attempt_started_ms = started;
  uint32_t dp = j->state == COLO_JOB_RUNNING ? colod_jobs_running_dp(d, j->id) : 0;
  msg->has_running_dp = dp != 0;
  msg->running_dp = dp;
  msg->has_resume_step = 1;
  msg->resume_step = j->resume_step;
  if (j->hold) {
    msg->has_held = msg->held = 1;
    msg->has_held_by_admin = 1;
    msg->held_by_admin = j->hold == COLO_HOLD_ADMIN;
    msg->hold_reason = (char *)j->hold_reason;
  }
  char slowed[640];
  if (started && colod_jobs_slowed(d, j->id, slowed, sizeof slowed))
    msg->slowed = strdup(slowed); /* NULL out of memory: the reply goes without it */
  msg->progress = progress_copy(d, j);
  colo_store_checkpoint_list(d->store, j->id, newest_ck_cb, &msg->newest_checkpoint);
  *spec_out = NULL;
  if (with_spec) {
    *spec_out = colo__v1__job_spec__unpack(NULL, j->spec_len, j->spec);
    if (!*spec_out) {
      job_msg_clear(msg);
      return COLO_EINTERNAL;
    }
    msg->spec = *spec_out;
  }
  return 0;
}

static void reply_job(colod_t *d, colo_rpc_call_t *call, const colo_job_t *j, int kind) {
  Colo__V1__Job msg;
  Colo__V1__JobSpec *spec;
  if (job_to_msg(d, j, 1, &msg, &spec) < 0) {
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "job %llu has an unreadable spec",
                  (unsigned long long)j->id);
    return;
  }
  switch (kind) {
  case 0: {
    Colo__V1__SubmitJobResponse r = COLO__V1__SUBMIT_JOB_RESPONSE__INIT;
    r.job = &msg;
    colo_rpc_reply(call, &r.base);
    break;
  }
  case 1: {
    Colo__V1__GetJobResponse r = COLO__V1__GET_JOB_RESPONSE__INIT;
    r.job = &msg;
    colo_rpc_reply(call, &r.base);
    break;
  }
  case 2: {
    Colo__V1__CancelJobResponse r = COLO__V1__CANCEL_JOB_RESPONSE__INIT;
    r.job = &msg;
    colo_rpc_reply(call, &r.base);
    break;
  }
  case 3: {
    Colo__V1__ResumeJobResponse r = COLO__V1__RESUME_JOB_RESPONSE__INIT;
    r.job = &msg;
    colo_rpc_reply(call, &r.base);
    break;
  }
  default: {
    Colo__V1__UpdateJobResponse r = COLO__V1__UPDATE_JOB_RESPONSE__INIT;
    r.job = &msg;
    colo_rpc_reply(call, &r.base);
    break;
  }
  }
  colo__v1__job_spec__free_unpacked(spec, NULL);
  job_msg_clear(&msg);
}

static void fail_store(colod_t *d, colo_rpc_call_t *call, int rc) {
  const char *msg = colo_store_errmsg(d->store);
  if (rc == COLO_ENOENT || rc == COLO_ESTATE || rc == COLO_EINVAL || rc == COLO_ETOOBIG) {
    colo_rpc_fail_err(call, rc, msg);
    return;
  }
  colo_log(COLO_LOG_ERROR, "api", "%s: store error: %s", colo_rpc_call_method(call)->path, msg);
  colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "coordinator storage error");
}

static int bounded_str(const char *s, size_t max) {
  return s && strnlen(s, max + 1) <= max;
}

/* ---- the caller: a certificate's role, under mutual TLS with tls_roles ---- */

enum { R_USER = 1, R_ADMIN = 2, R_WORKER = 4 };

typedef struct {
  int enforced; /* mutual TLS with tls_roles: the fields below are the caller's */
  int has_cert;
  int role; /* R_*, 0: none */
  char cn[129], ou[65];
} caller_t;

static void caller_of(colod_t *d, colo_rpc_call_t *call, caller_t *c) {
  memset(c, 0, sizeof *c);
  c->enforced = d->cfg.tls_client_ca[0] && d->cfg.tls_roles;
  if (!c->enforced)
    return;
  c->has_cert = colo_rpc_call_peer_cert(call, c->cn, sizeof c->cn, c->ou, sizeof c->ou);
  c->role = !strcmp(c->ou, "user")     ? R_USER
            : !strcmp(c->ou, "admin")  ? R_ADMIN
            : !strcmp(c->ou, "worker") ? R_WORKER
                                       : 0;
}

/* A user may change (cancel, resume) only the jobs it submitted, and with logs_private read only
 * their logs; an admin any. `what` ends "only its owner or an admin may ...". 1: go on; otherwise
 * the call is failed. */
static int may_change(colod_t *d, colo_rpc_call_t *call, const colo_job_t *j, const char *verb) {
  caller_t c;
  caller_of(d, call, &c);
  if (!c.enforced || c.role != R_USER || !strcmp(j->owner, c.cn))
    return 1;
  colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                "job %llu belongs to %s%s%s; only its owner or an admin may %s",
                (unsigned long long)j->id, j->owner[0] ? "\"" : "",
                j->owner[0] ? j->owner : "no one", j->owner[0] ? "\"" : "", verb);
  return 0;
}

/* may_change for a job by id, read only where roles apply; a job that cannot be read is left
 * to the handler's own error */
static int may_change_id(colod_t *d, colo_rpc_call_t *call, uint64_t id, const char *verb) {
  colo_job_t j;
  if (!d->cfg.tls_client_ca[0] || !d->cfg.tls_roles || colo_store_job_get(d->store, id, &j) < 0)
    return 1;
  int ok = may_change(d, call, &j, verb);
  colo_job_clear(&j);
  return ok;
}

/* ---- jobs ---- */

static void h_submit(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__SubmitJobRequest *req = (const void *)m;
  char err[512];
  if (d->draining) {
    colo_rpc_fail(call, GRPC_STATUS_UNAVAILABLE, "colod is shutting down");
    return;
  }
  if (!req->spec) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "spec must be set");
    return;
  }
  if (req->client_token && !bounded_str(req->client_token, MAX_TOKEN)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "client_token is longer than %d bytes",
                  MAX_TOKEN);
    return;
  }
  /* a field this colod does not know would be stored unread, or (field number 0, which
   * protobuf-c reads but cannot write back) not stored at all */
  char where[256];
  uint32_t field;
  if (colo_pb_find_unknown(&req->spec->base, where, sizeof where, &field)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "spec%s%.200s has field number %u, which this coordinator does not know (a "
                  "newer client's, or not a JobSpec)",
                  where[0] ? "." : "", where, field);
    return;
  }
  /* work on a private copy: defaults are filled in and the filled spec is what is stored */
  size_t len = colo__v1__job_spec__get_packed_size(req->spec);
  uint8_t *buf = malloc(len ? len : 1);
  Colo__V1__JobSpec *spec = NULL;
  if (buf) {
    colo__v1__job_spec__pack(req->spec, buf);
    spec = colo__v1__job_spec__unpack(NULL, len, buf);
  }
  free(buf);
  if (!spec || colo_jobspec_fill_defaults(spec) < 0) {
    if (spec)
      colo__v1__job_spec__free_unpacked(spec, NULL);
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  if (colo_jobspec_validate(spec, err, sizeof err) < 0 ||
      time_limit_policy(d, spec->resources, err, sizeof err) < 0 ||
      notify_policy(d, spec->notify, err, sizeof err) < 0) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
    return;
  }
  /* it can ever run under its owner's limit */
  caller_t who;
  caller_of(d, call, &who);
  const char *owner = who.enforced ? who.cn : "";
  uint64_t world = colo_jobspec_world(spec);
  uint32_t limit = colod_config_owner_max_devices(&d->cfg, owner);
  if (world > limit) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "the job needs %llu devices at once; owner_max_devices allows %s%s%s %u",
                  (unsigned long long)world, owner[0] ? "\"" : "", owner[0] ? owner : "its owner",
                  owner[0] ? "\"" : "", limit);
    return;
  }
  const char *account = spec->account ? spec->account : "";
  limit = colod_config_account_max_devices(&d->cfg, account);
  if (world > limit) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "the job needs %llu devices at once; account_max_devices allows %s%s%s %u",
                  (unsigned long long)world, account[0] ? "account \"" : "jobs without an account",
                  account, account[0] ? "\"" : "", limit);
    colo__v1__job_spec__free_unpacked(spec, NULL);
    return;
  }
  /* the jobs it waits for exist: its `after`, then train.init_from_job */
  uint64_t from = spec->train->has_init_from_job ? spec->train->init_from_job : 0;
  for (size_t i = 0; i < spec->n_after + (from != 0); i++) {
    colo_job_t dep;
    int in_after = i < spec->n_after;
    uint64_t id = in_after ? spec->after[i] : from;
    int rc = colo_store_job_get(d->store, id, &dep);
    if (rc == 0) {
      colo_job_clear(&dep);
      continue;
    }
    colo__v1__job_spec__free_unpacked(spec, NULL);
    if (rc == COLO_ENOENT)
      colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s: there is no job %llu",
                    in_after ? "after" : "train.init_from_job", (unsigned long long)id);
    else
      fail_store(d, call, rc);
    return;
  }
  len = colo__v1__job_spec__get_packed_size(spec);
  buf = malloc(len ? len : 1);
  if (!buf) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  colo__v1__job_spec__pack(spec, buf);
  colo_job_t job;
  colo_job_room_t room = {owner, colod_config_owner_max_jobs(&d->cfg, owner), account,
                          colod_config_account_max_jobs(&d->cfg, account)};
  int rc = colo_store_job_insert(d->store, spec->name, buf, len, spec->max_restarts,
                                 req->client_token, &room, colod_now_ms(), &job);
  free(buf);
  colo__v1__job_spec__free_unpacked(spec, NULL);
  if (rc == COLO_EEXIST) { /* a retried submit: answer with the job it created */
    reply_job(d, call, &job, 0);
    colo_job_clear(&job);
    return;
  }
  if (rc < 0) {
    fail_store(d, call, rc);
    return;
  }
  d->stats.entered[COLO_JOB_PENDING]++;
  colo_log(COLO_LOG_INFO, "api", "job %llu \"%s\" submitted%s%s", (unsigned long long)job.id,
           job.name, job.owner[0] ? " by " : "", job.owner);
  colod_jobs_kick(d);
  reply_job(d, call, &job, 0);
  colo_job_clear(&job);
}

static int need_id(colo_rpc_call_t *call, protobuf_c_boolean has, uint64_t id) {
  if (!has || id == 0) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "id must be set");
    return 0;
  }
  return 1;
}

/* The job a call names: 0 with *job filled (the caller clears it), or -1 with the call answered
 * (no id: INVALID_ARGUMENT; unknown: NOT_FOUND; the store's error). */
static int get_job(colod_t *d, colo_rpc_call_t *call, protobuf_c_boolean has, uint64_t id,
                   colo_job_t *job) {
  if (!need_id(call, has, id))
    return -1;
  int rc = colo_store_job_get(d->store, id, job);
  if (rc < 0) {
    fail_store(d, call, rc);
    return -1;
  }
  return 0;
}

static void h_get(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__GetJobRequest *req = (const void *)m;
  colo_job_t job;
  if (get_job(d, call, req->has_id, req->id, &job) < 0)
    return;
  reply_job(d, call, &job, 1);
  colo_job_clear(&job);
}

typedef struct {
  colod_t *d;
  Colo__V1__Job *msgs;
  Colo__V1__JobSpec **specs;
  colo_job_t *rows;
  size_t n;
  int err;
} list_acc_t;

static int list_cb(const colo_job_t *j, void *data) {
  list_acc_t *a = data;
  colo_job_t *row = &a->rows[a->n];
  *row = *j;
  row->spec = malloc(j->spec_len ? j->spec_len : 1);
  if (!row->spec) {
    a->err = COLO_ENOMEM;
    return 1;
  }
  memcpy(row->spec, j->spec, j->spec_len);
  if (job_to_msg(a->d, row, 1, &a->msgs[a->n], &a->specs[a->n]) < 0) {
    free(row->spec);
    a->err = COLO_EINTERNAL;
    return 1;
  }
  a->n++;
  return 0;
}

static void h_list(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__ListJobsRequest *req = (const void *)m;
  uint32_t limit = req->has_limit ? req->limit : 100;
  if (limit == 0 || limit > MAX_LIST) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "limit=%u must be between 1 and %d", limit,
                  MAX_LIST);
    return;
  }
  uint32_t mask = 0;
  for (size_t i = 0; i < req->n_states; i++) {
    int s = (int)req->states[i];
    if (s < COLO_JOB_PENDING || s > COLO_JOB_STATE_MAX) {
      colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "states[%zu]=%d is not a job state", i, s);
      return;
    }
    mask |= 1u << s;
  }
  if (req->name_prefix && strlen(req->name_prefix) > COLO_MAX_NAME) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "name_prefix is longer than %d bytes",
                  COLO_MAX_NAME);
    return;
  }
  if (req->owner && strlen(req->owner) > 128) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "owner is longer than 128 bytes");
    return;
  }
  if (req->account && strlen(req->account) > 64) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "account is longer than 64 bytes");
    return;
  }
  colo_job_filter_t f = {.state_mask = mask,
                         .after_id = req->has_after_id ? req->after_id : 0,
                         .name_prefix = req->name_prefix,
                         .owner = req->owner,
                         .account = req->account};
  list_acc_t a = {.d = d};
  /* one extra row tells whether another page follows */
  a.msgs = calloc(limit + 1, sizeof *a.msgs);
  a.specs = calloc(limit + 1, sizeof *a.specs);
  a.rows = calloc(limit + 1, sizeof *a.rows);
  int rc = COLO_ENOMEM;
  if (a.msgs && a.specs && a.rows)
    rc = colo_store_job_list(d->store, &f, limit + 1, list_cb, &a);
  if (rc == 0)
    rc = a.err;
  if (rc < 0) {
    fail_store(d, call, rc);
  } else {
    Colo__V1__ListJobsResponse r = COLO__V1__LIST_JOBS_RESPONSE__INIT;
    size_t n = a.n > limit ? limit : a.n;
    Colo__V1__Job **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!ptrs) {
      colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      for (size_t i = 0; i < n; i++)
        ptrs[i] = &a.msgs[i];
      r.n_jobs = n;
      r.jobs = ptrs;
      r.has_next_after_id = 1;
      r.next_after_id = a.n > limit ? a.rows[limit - 1].id : 0;
      colo_rpc_reply(call, &r.base);
      free(ptrs);
    }
  }
  for (size_t i = 0; i < a.n; i++) {
    colo__v1__job_spec__free_unpacked(a.specs[i], NULL);
    job_msg_clear(&a.msgs[i]);
    free(a.rows[i].spec);
  }
  free(a.msgs);
  free(a.specs);
  free(a.rows);
}

static void h_cancel(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__CancelJobRequest *req = (const void *)m;
  if (!need_id(call, req->has_id, req->id))
    return;
  if (req->reason && !bounded_str(req->reason, 200)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "reason is longer than 200 bytes");
    return;
  }
  if (!may_change_id(d, call, req->id, "cancel it"))
    return;
  char msg[256];
  snprintf(msg, sizeof msg, "cancelled%s%s", req->reason && req->reason[0] ? ": " : "",
           req->reason ? req->reason : "");
  colod_jobs_keep_progress(d, req->id);
  colo_job_t job;
  int rc = colo_store_job_transition(d->store, req->id, COLO_JOB_CANCELLED, msg, 0, colod_now_ms(),
                                     &job);
  if (rc < 0) {
    fail_store(d, call, rc);
    return;
  }
  d->stats.entered[COLO_JOB_CANCELLED]++;
  colo_log(COLO_LOG_INFO, "api", "job %llu cancelled", (unsigned long long)job.id);
  colod_watch_notify(d, &job);
  colod_jobs_kick(d); /* its ranks are withdrawn at once */
  reply_job(d, call, &job, 2);
  colo_job_clear(&job);
}

static void h_delete(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__DeleteJobRequest *req = (const void *)m;
  colo_job_t job;
  if (get_job(d, call, req->has_id, req->id, &job) < 0)
    return;
  Colo__V1__Job msg;
  Colo__V1__JobSpec *spec = NULL;
  char err[512];
  int rc;
  if (!may_change(d, call, &job, "delete it")) {
    colo_job_clear(&job);
    return;
  }
  if (job_to_msg(d, &job, 1, &msg, &spec) < 0) { /* the reply is the job as it was */
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "job %llu has an unreadable spec",
                  (unsigned long long)job.id);
  } else if ((rc = colod_job_delete(d, job.id, err, sizeof err)) < 0) {
    if (rc == COLO_ENOENT || rc == COLO_ESTATE)
      colo_rpc_fail_err(call, rc, err);
    else {
      colo_log(COLO_LOG_ERROR, "api", "DeleteJob: store error: %s", err);
      colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "coordinator storage error");
    }
  } else {
    Colo__V1__DeleteJobResponse r = COLO__V1__DELETE_JOB_RESPONSE__INIT;
    r.job = &msg;
    colo_rpc_reply(call, &r.base);
  }
  if (spec) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
    job_msg_clear(&msg);
  }
  colo_job_clear(&job);
}

static void h_checkpoint_job(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__CheckpointJobRequest *req = (const void *)m;
  if (!need_id(call, req->has_id, req->id) || !may_change_id(d, call, req->id, "checkpoint it"))
    return;
  colo_job_t job;
  if (get_job(d, call, req->has_id, req->id, &job) < 0)
    return;
  uint32_t attempt = 0, seq = 0;
  char why[256];
  int rc = colod_jobs_checkpoint(d, req->id, &attempt, &seq, why, sizeof why);
  if (rc == COLO_ESTATE) {
    colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "%s", why);
  } else if (rc < 0) {
    colo_log(COLO_LOG_ERROR, "api", "CheckpointJob: store error: %s", why);
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "coordinator storage error");
  } else {
    Colo__V1__Job msg;
    Colo__V1__JobSpec *spec;
    if (job_to_msg(d, &job, 1, &msg, &spec) < 0) {
      colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "job %llu has an unreadable spec",
                    (unsigned long long)job.id);
    } else {
      Colo__V1__CheckpointJobResponse r = COLO__V1__CHECKPOINT_JOB_RESPONSE__INIT;
      r.job = &msg;
      r.has_attempt = r.has_request = 1;
      r.attempt = attempt;
      r.request = seq;
      colo_rpc_reply(call, &r.base);
      colo__v1__job_spec__free_unpacked(spec, NULL);
      job_msg_clear(&msg);
    }
  }
  colo_job_clear(&job);
}

typedef struct {
  uint64_t step;
  int found;
} ck_find_t;

static int ck_find_cb(const colo_checkpoint_t *ck, void *data) {
  ck_find_t *f = data;
  if (ck->step == f->step) {
    f->found = 1;
    return 1;
  }
  return 0;
}

static void h_resume(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__ResumeJobRequest *req = (const void *)m;
  uint64_t step = req->has_from_step ? req->from_step : 0;
  colo_job_t cur;
  if (get_job(d, call, req->has_id, req->id, &cur) < 0)
    return;
  int allowed = may_change(d, call, &cur, "resume it");
  int cur_state = cur.state;
  char owner[sizeof cur.owner];
  snprintf(owner, sizeof owner, "%s", cur.owner);
  colo_usage_key_t key; /* its account */
  colod_usage_key(cur.spec, cur.spec_len, &key);
  colo_job_clear(&cur);
  if (!allowed)
    return;
  if (cur_state != COLO_JOB_FAILED && cur_state != COLO_JOB_CANCELLED &&
      cur_state != COLO_JOB_TIMED_OUT) {
    colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                  "job %llu is %s; only a FAILED, CANCELLED or TIMED_OUT job can be resumed",
                  (unsigned long long)req->id, colo_job_state_name(cur_state));
    return;
  }
  if (step > 0) {
    ck_find_t f = {step, 0};
    int rc = colo_store_checkpoint_list(d->store, req->id, ck_find_cb, &f);
    if (rc < 0) {
      fail_store(d, call, rc);
      return;
    }
    if (!f.found) {
      colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION,
                    "job %llu has no complete checkpoint at step %llu", (unsigned long long)req->id,
                    (unsigned long long)step);
      return;
    }
  }
  /* a resumed job has not ended again: within its owner's owner_max_jobs and its account's
   * account_max_jobs */
  colo_job_room_t r = {owner, colod_config_owner_max_jobs(&d->cfg, owner), key.account,
                       colod_config_account_max_jobs(&d->cfg, key.account)};
  int room = colo_store_job_room(d->store, &r);
  if (room < 0) {
    fail_store(d, call, room);
    return;
  }
  char msg[128];
  if (step)
    snprintf(msg, sizeof msg, "resumed from step %llu", (unsigned long long)step);
  else
    snprintf(msg, sizeof msg, "resumed from the newest checkpoint");
  colo_job_t job;
  int rc = colo_store_job_transition(d->store, req->id, COLO_JOB_PENDING, msg, step, colod_now_ms(),
                                     &job);
  if (rc < 0) {
    fail_store(d, call, rc);
    return;
  }
  d->stats.entered[COLO_JOB_PENDING]++;
  colod_watch_notify(d, &job);
  colod_jobs_kick(d);
  reply_job(d, call, &job, 3);
  colo_job_clear(&job);
}

/* ---- watches ---- */

/* UpdateJob: a hold or a release, and new values of the spec's priority, max_restarts and
 * resources.time_limit_s, all checked before one transaction writes them. */
static void h_update(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__UpdateJobRequest *req = (const void *)m;
  if (!need_id(call, req->has_id, req->id))
    return;
  int requeue = req->has_requeue && req->requeue;
  if (!req->has_hold && !req->has_priority && !req->has_max_restarts && !req->has_time_limit_s &&
      !requeue) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "nothing to change: set hold, requeue, priority, max_restarts or time_limit_s");
    return;
  }
  if (requeue && req->has_hold && !req->hold) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "requeue goes with hold: true or no hold: a running job is not held");
    return;
  }
  if (req->reason && !bounded_str(req->reason, 200)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "reason is longer than 200 bytes");
    return;
  }
  if (req->reason && req->reason[0] && !(req->has_hold && req->hold)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "reason goes with hold: true");
    return;
  }
  colo_job_t cur;
  if (get_job(d, call, req->has_id, req->id, &cur) < 0)
    return;
  caller_t c;
  caller_of(d, call, &c);
  int admin = c.enforced && c.role == R_ADMIN;
  Colo__V1__JobSpec *spec = NULL;
  uint8_t *packed = NULL;
  char what[512] = "", err[512];
  size_t n = 0;
  colo_job_update_t u = {.hold = -1, .requeue = requeue};
  if (!may_change(d, call, &cur, "change it"))
    goto out;
  if (requeue && colod_jobs_requeue(d, cur.id, NULL, 1, err, sizeof err) < 0) {
    colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "%s", err);
    goto out;
  }
  if (requeue && !req->has_hold) /* with a hold: "requeued and held by ..." */
    n += (size_t)snprintf(what, sizeof what, "requeued%s%s", c.enforced ? " by " : "",
                          c.enforced ? c.cn : "");
  if (req->has_hold) {
    if (cur.hold == COLO_HOLD_ADMIN && c.enforced && !admin) {
      colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                    "job %llu was held by an admin; only an admin may %s it",
                    (unsigned long long)cur.id, req->hold ? "hold" : "release");
      goto out;
    }
    if (!req->hold && !cur.hold) {
      colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "job %llu is not held",
                    (unsigned long long)cur.id);
      goto out;
    }
    u.hold = !req->hold ? COLO_HOLD_NONE : admin ? COLO_HOLD_ADMIN : COLO_HOLD_OWNER;
    u.hold_reason = req->reason ? req->reason : "";
    n += (size_t)snprintf(what, sizeof what, "%s%s%s%s%s%s", requeue ? "requeued and " : "",
                          req->hold ? "held" : "released", c.enforced ? " by " : "",
                          c.enforced ? c.cn : "", req->hold && u.hold_reason[0] ? ": " : "",
                          req->hold ? u.hold_reason : "");
  }
  if (req->has_priority || req->has_max_restarts || req->has_time_limit_s) {
    spec = colo__v1__job_spec__unpack(NULL, cur.spec_len, cur.spec);
    if (!spec || colo_jobspec_fill_defaults(spec) < 0) {
      colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "job %llu has an unreadable spec",
                    (unsigned long long)cur.id);
      goto out;
    }
    /* a new time limit under colod's policy (0: its default) */
    uint32_t limit = req->time_limit_s;
    if (req->has_time_limit_s) {
      Colo__V1__ResourceSpec r = *spec->resources;
      r.time_limit_s = limit;
      if (time_limit_policy(d, &r, err, sizeof err) < 0) {
        colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
        goto out;
      }
      limit = r.time_limit_s;
    }
    /* what changes, for the job's event: "priority 0 -> 10" */
#define CHANGE(has, field, value, label, fmt, unit)                                                \
  if (has) {                                                                                       \
    if (n < sizeof what)                                                                           \
      n += (size_t)snprintf(what + n, sizeof what - n, "%s" label " " fmt " -> " fmt unit,         \
                            n ? ", " : "", field, value);                                          \
    field = value;                                                                                 \
  }
    CHANGE(req->has_priority, spec->priority, req->priority, "priority", "%d", "")
    CHANGE(req->has_max_restarts, spec->max_restarts, req->max_restarts, "max_restarts", "%u", "")
    CHANGE(req->has_time_limit_s, spec->resources->time_limit_s, limit, "time limit", "%u", " s")
#undef CHANGE
    spec->has_priority |= req->has_priority;
    spec->has_max_restarts |= req->has_max_restarts;
    spec->resources->has_time_limit_s |= req->has_time_limit_s;
    if (colo_jobspec_validate(spec, err, sizeof err) < 0) {
      colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
      goto out;
    }
    u.spec_len = colo__v1__job_spec__get_packed_size(spec);
    packed = malloc(u.spec_len ? u.spec_len : 1);
    if (!packed) {
      colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
      goto out;
    }
    colo__v1__job_spec__pack(spec, packed);
    u.spec = packed;
    u.max_restarts = spec->max_restarts;
    if (!req->has_hold && c.enforced && n < sizeof what)
      snprintf(what + n, sizeof what - n, " (by %s)", c.cn);
  }
  u.message = what;
  colo_job_t job;
  int rc = colo_store_job_update(d->store, cur.id, &u, colod_now_ms(), &job);
  if (rc < 0) {
    fail_store(d, call, rc);
    goto out;
  }
  colo_log(COLO_LOG_INFO, "api", "job %llu: %s", (unsigned long long)job.id, what);
  colod_jobs_updated(d, &job);
  if (requeue && colod_jobs_requeue(d, job.id, what, 0, err, sizeof err) < 0) {
    colo_log(COLO_LOG_ERROR, "api", "job %llu: cannot requeue: %s", (unsigned long long)job.id,
             err);
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "coordinator storage error");
    colo_job_clear(&job);
    goto out;
  }
  if (req->has_hold) /* its message says so */
    colod_watch_notify(d, &job);
  reply_job(d, call, &job, 4);
  colo_job_clear(&job);
out:
  free(packed);
  if (spec)
    colo__v1__job_spec__free_unpacked(spec, NULL);
  colo_job_clear(&cur);
}

static void watch_free(colod_t *d, colod_watch_t *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    d->watches = w->next;
  if (w->next)
    w->next->prev = w->prev;
  d->n_watches--;
  free(w);
}

static void watch_cancelled(colo_rpc_call_t *call, void *data) {
  colod_watch_t *w = data;
  colod_t *d = w->d;
  colo_rpc_stream_end(call, GRPC_STATUS_CANCELLED, "watcher went away");
  watch_free(d, w);
}

static void send_state(colo_rpc_call_t *call, const colo_job_t *j) {
  Colo__V1__JobEvent ev = COLO__V1__JOB_EVENT__INIT;
  ev.has_job_id = 1;
  ev.job_id = j->id;
  ev.has_state = 1;
  ev.state = (Colo__V1__JobState)j->state;
  ev.message = (char *)j->message;
  ev.has_time_ms = 1;
  ev.time_ms = j->updated_ms;
  colo_rpc_stream_send(call, &ev.base);
}

void colod_watch_notify(colod_t *d, const colo_job_t *job) {
  colod_notify_job(d, job);
  colod_watch_t *w = d->watches;
  while (w) {
    colod_watch_t *next = w->next;
    if (w->job_id == job->id) {
      send_state(w->call, job);
      if (colo_job_state_terminal(job->state)) {
        colo_rpc_stream_end(w->call, GRPC_STATUS_OK, NULL);
        watch_free(d, w);
      }
    }
    w = next;
  }
}

void colod_watch_progress(colod_t *d, uint64_t job_id, int state, const Colo__V1__Progress *p) {
  for (colod_watch_t *w = d->watches; w; w = w->next) {
    if (w->job_id != job_id || !w->progress)
      continue;
    Colo__V1__JobEvent ev = COLO__V1__JOB_EVENT__INIT;
    ev.has_job_id = ev.has_seq = ev.has_state = ev.has_time_ms = 1;
    ev.job_id = job_id;
    ev.seq = 0;
    ev.state = (Colo__V1__JobState)state;
    ev.time_ms = p->has_time_ms ? p->time_ms : colod_now_ms();
    ev.progress = (Colo__V1__Progress *)p;
    colo_rpc_stream_send(w->call, &ev.base);
  }
}

void colod_watch_close_all(colod_t *d, const char *why) {
  while (d->watches) {
    colo_rpc_stream_end(d->watches->call, GRPC_STATUS_UNAVAILABLE, why);
    watch_free(d, d->watches);
  }
}

/* The job a new stream is about: fails the call (and returns -1) for a missing id, a colod that
 * is shutting down, or an unknown job. */
static int stream_job(colod_t *d, colo_rpc_call_t *call, int has_id, uint64_t id, colo_job_t *job) {
  if (!need_id(call, has_id, id))
    return -1;
  if (d->draining) {
    colo_rpc_fail(call, GRPC_STATUS_UNAVAILABLE, "colod is shutting down");
    return -1;
  }
  return get_job(d, call, has_id, id, job);
}

static void h_watch(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__WatchJobRequest *req = (const void *)m;
  colo_job_t job;
  if (stream_job(d, call, req->has_id, req->id, &job) < 0)
    return;
  send_state(call, &job);
  if (colo_job_state_terminal(job.state)) {
    colo_job_clear(&job);
    colo_rpc_stream_end(call, GRPC_STATUS_OK, NULL);
    return;
  }
  colo_job_clear(&job);
  if (d->n_watches >= d->cfg.max_watchers) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "too many watchers (max_watchers=%u)",
                  d->cfg.max_watchers);
    return;
  }
  colod_watch_t *w = calloc(1, sizeof *w);
  if (!w) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  w->d = d;
  w->call = call;
  w->job_id = req->id;
  w->progress = req->has_progress ? req->progress : 1;
  w->next = d->watches;
  if (d->watches)
    d->watches->prev = w;
  d->watches = w;
  d->n_watches++;
  colo_rpc_call_on_cancel(call, watch_cancelled, w);
}

/* ---- hosts ---- */

/* where a host is in d->hosts, kept in id order, or where it would go */
static size_t host_live_at(const colod_t *d, uint64_t id) {
  size_t lo = 0, hi = d->n_hosts;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (d->hosts[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

colod_host_live_t *colod_host_live(colod_t *d, uint64_t id) {
  size_t i = host_live_at(d, id);
  return i < d->n_hosts && d->hosts[i].id == id ? &d->hosts[i] : NULL;
}

static colod_host_live_t *host_live_add(colod_t *d, uint64_t id) {
  colod_host_live_t *h = colod_host_live(d, id);
  if (h)
    return h;
  if (d->n_hosts == d->cap_hosts) {
    size_t cap = d->cap_hosts ? d->cap_hosts * 2 : 16;
    colod_host_live_t *n = realloc(d->hosts, cap * sizeof *n);
    if (!n)
      return NULL;
    d->hosts = n;
    d->cap_hosts = cap;
  }
  size_t at = host_live_at(d, id);
  memmove(&d->hosts[at + 1], &d->hosts[at], (d->n_hosts - at) * sizeof *d->hosts);
  d->n_hosts++;
  h = &d->hosts[at];
  memset(h, 0, sizeof *h);
  h->id = id;
  return h;
}

/* Device count, kind and address of a host, kept with its liveness for the scheduler. */
static void host_live_devices(colod_host_live_t *l, const char *name, const char *address,
                              Colo__V1__Device **devs, size_t n, char *const *labels,
                              size_t n_labels) {
  snprintf(l->name, sizeof l->name, "%s", name);
  l->n_devices = (uint32_t)n;
  l->device_kind = n ? (int)devs[0]->kind : 0;
  snprintf(l->address, sizeof l->address, "%s", address);
  size_t len = (size_t)snprintf(l->labels, sizeof l->labels, ",");
  for (size_t i = 0; i < n_labels && len < sizeof l->labels; i++)
    len += (size_t)snprintf(l->labels + len, sizeof l->labels - len, "%s,", labels[i]);
}

static int load_host_cb(const colo_host_t *h, void *data) {
  colod_t *d = data;
  colod_host_live_t *l = host_live_add(d, h->id);
  if (!l)
    return 1;
  Colo__V1__Host *dev = colo__v1__host__unpack(NULL, h->devices_len, h->devices);
  host_live_devices(l, h->name, h->address, dev ? dev->devices : NULL, dev ? dev->n_devices : 0,
                    dev ? dev->labels : NULL, dev ? dev->n_labels : 0);
  l->memory_bytes = h->memory_bytes;
  if (dev)
    colo__v1__host__free_unpacked(dev, NULL);
  l->session = h->session;
  l->state = h->state;
  l->cordoned = h->cordoned;
  l->cordon_at_ms = h->cordon_at_ms;
  l->cordon_evict = h->cordon_evict;
  l->last_seen_ms = h->last_seen_ms;
  l->last_seen_mono_ms = colod_mono_ms(d); /* a restarted colod gives every host a full timeout */
  return 0;
}

int colod_hosts_load(colod_t *d) {
  return colo_store_host_list(d->store, load_host_cb, d);
}

static void on_host_deadline(uv_timer_t *t) {
  colod_t *d = t->data;
  if (d->draining)
    return;
  uv_update_time(d->loop);
  colod_hosts_check(d);
}

/* Marks DOWN every UP host silent for host_timeout, and arms a timer for the next host that
 * would be: a host goes DOWN when its timeout runs out, not at the next tick after. */
void colod_hosts_check(colod_t *d) {
  uint64_t now = colod_mono_ms(d), next = UINT64_MAX;
  int downs = 0;
  for (size_t i = 0; i < d->n_hosts; i++) {
    colod_host_live_t *h = &d->hosts[i];
    if (h->state != COLO_HOST_UP)
      continue;
    uint64_t deadline = h->last_seen_mono_ms + d->cfg.host_timeout_ms;
    if (now < deadline) {
      next = deadline < next ? deadline : next;
      continue;
    }
    if (colo_store_host_set_state(d->store, h->id, COLO_HOST_DOWN, h->last_seen_ms) < 0) {
      colo_log(COLO_LOG_ERROR, "hosts", "cannot mark host %llu DOWN: %s", (unsigned long long)h->id,
               colo_store_errmsg(d->store));
      continue;
    }
    h->state = COLO_HOST_DOWN;
    downs++;
    colo_log(COLO_LOG_WARN, "hosts", "host %llu is DOWN: no heartbeat for %llu ms",
             (unsigned long long)h->id, (unsigned long long)(now - h->last_seen_mono_ms));
  }
  if (downs)
    colod_jobs_kick(d); /* their jobs' attempts end now */
  if (next != UINT64_MAX && !d->draining)
    uv_timer_start(&d->host_deadline, on_host_deadline, next - now, 0);
}

static int host_name_ok(const char *n) {
  if (!n || !*n || strlen(n) > MAX_HOST_NAME)
    return 0;
  for (const char *c = n; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_' || *c == '.'))
      return 0;
  return 1;
}

static void h_register(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__RegisterHostRequest *req = (const void *)m;
  if (!host_name_ok(req->name)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "name must be 1 to %d characters of letters, digits, '-', '_' and '.'",
                  MAX_HOST_NAME);
    return;
  }
  if (!req->address || !req->address[0] || !bounded_str(req->address, MAX_ADDRESS)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "address must be 1 to %d bytes", MAX_ADDRESS);
    return;
  }
  if (req->n_devices > MAX_DEVICES) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%zu devices exceed the limit of %d",
                  req->n_devices, MAX_DEVICES);
    return;
  }
  char err[256];
  if (colo_labels_check("labels", req->labels, req->n_labels, err, sizeof err) < 0) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%s", err);
    return;
  }
  /* devices and labels are stored as a packed Host message holding only them */
  Colo__V1__Host hm = COLO__V1__HOST__INIT;
  hm.n_devices = req->n_devices;
  hm.devices = req->devices;
  hm.n_labels = req->n_labels;
  hm.labels = req->labels;
  size_t len = colo__v1__host__get_packed_size(&hm);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  colo__v1__host__pack(&hm, buf);
  colo_host_t h;
  int rc = colo_store_host_register(d->store, req->name, req->address, buf, len, req->memory_bytes,
                                    req->cpu_count, colod_now_ms(), &h);
  free(buf);
  if (rc < 0) {
    fail_store(d, call, rc);
    return;
  }
  colod_host_live_t *l = host_live_add(d, h.id);
  if (l) {
    l->session = h.session;
    l->state = COLO_HOST_UP;
    l->cordoned = h.cordoned;
    l->cordon_at_ms = h.cordon_at_ms;
    l->cordon_evict = h.cordon_evict;
    l->stopping = 0; /* a worker that registers is not shutting down */
    l->last_seen_ms = h.last_seen_ms;
    l->last_seen_mono_ms = colod_mono_ms(d);
    host_live_devices(l, h.name, req->address, req->devices, req->n_devices, req->labels,
                      req->n_labels);
    l->memory_bytes = req->has_memory_bytes ? req->memory_bytes : 0;
  }
  colo_log(COLO_LOG_INFO, "hosts", "host %s (%llu) registered from %s, %zu devices, session %llu",
           h.name, (unsigned long long)h.id, colo_rpc_call_peer(call), req->n_devices,
           (unsigned long long)h.session);
  Colo__V1__RegisterHostResponse r = COLO__V1__REGISTER_HOST_RESPONSE__INIT;
  r.has_host_id = r.has_session = r.has_heartbeat_interval_ms = 1;
  r.host_id = h.id;
  r.session = h.session;
  r.heartbeat_interval_ms = d->cfg.heartbeat_ms;
  colo_rpc_reply(call, &r.base);
  colo_host_clear(&h);
}

/* A set of a host's devices that a beat reports (level-triggered: it replaces the last), with the
 * first one's reason. 0: as it was; 1: changed; 2: changed, and fewer than before. */
static int device_set(const colod_host_live_t *l, Colo__V1__DeviceHealth *const *list,
                      size_t n_list, colod_devset_t *set) {
  colod_devset_t now;
  memset(&now, 0, sizeof now); /* compared whole with the last */
  const char *first = "";
  for (size_t i = 0; i < n_list; i++) {
    const Colo__V1__DeviceHealth *h = list[i];
    if (!h->has_index || h->index >= l->n_devices ||
        (now.bits[h->index / 64] >> (h->index % 64)) & 1)
      continue; /* not one of its devices, or said twice */
    now.bits[h->index / 64] |= 1ull << (h->index % 64);
    if (!now.n++ && h->reason)
      first = h->reason;
    if (h->index < COLOD_DEVSET_WHYS)
      snprintf(now.whys[h->index], sizeof now.whys[h->index], "%.120s", h->reason ? h->reason : "");
  }
  snprintf(now.why, sizeof now.why, "%.120s", first);
  if (!memcmp(&now, set, sizeof now))
    return 0; /* as at its last beat (a reason may change: a pending row remap that failed) */
  int fewer = now.n < set->n;
  *set = now;
  return fewer ? 2 : 1;
}

/* A device set as a Host message's indices, first reason and each device's own (left unset for
 * an empty set). */
static void devset_to_msg(const colod_host_live_t *l, const colod_devset_t *set, uint32_t **idx,
                          size_t *n, char **why, Colo__V1__DeviceHealth ***each, size_t *n_each) {
  if (!set->n)
    return;
  *idx = calloc(set->n, sizeof **idx);
  *each = calloc(set->n, sizeof **each);
  for (uint32_t k = 0; *idx && *each && k < l->n_devices; k++)
    if (colod_devset_has(set, k)) {
      Colo__V1__DeviceHealth *h = malloc(sizeof *h);
      char *reason = strdup(colod_devset_why(set, k));
      if (!h || !reason) { /* the reply goes without this one's reason */
        free(h);
        free(reason);
      } else {
        colo__v1__device_health__init(h);
        h->has_index = 1;
        h->index = k;
        h->reason = reason;
        (*each)[(*n_each)++] = h;
      }
      (*idx)[(*n)++] = k;
    }
  *why = strdup(set->why);
}

/* The devices a beat reports unfit, or at lowered clocks: a change is logged, and a device fit
 * again may take ranks at once. */
static void host_health(colod_t *d, colod_host_live_t *l, const Colo__V1__HeartbeatRequest *req) {
  int c = device_set(l, req->unhealthy, req->n_unhealthy, &l->sick);
  if (c && l->sick.n)
    colo_log(COLO_LOG_WARN, "hosts",
             "host %s: %u device%s unhealthy (the first: %s); no new ranks go there", l->name,
             l->sick.n, l->sick.n == 1 ? "" : "s", l->sick.why);
  else if (c)
    colo_log(COLO_LOG_INFO, "hosts", "host %s: all its devices are healthy again", l->name);
  if (c == 2)
    colod_jobs_kick(d);
  c = device_set(l, req->slowed, req->n_slowed, &l->slow);
  if (c && l->slow.n)
    colo_log(COLO_LOG_WARN, "hosts", "host %s: %u device%s slowed (the first: %s)", l->name,
             l->slow.n, l->slow.n == 1 ? "" : "s", l->slow.why);
  else if (c)
    colo_log(COLO_LOG_INFO, "hosts", "host %s: no device is slowed any more", l->name);
}

/* Liveness, the ranks' actual state in, their desired state out (jobs.c). */
static void h_heartbeat(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__HeartbeatRequest *req = (const void *)m;
  Colo__V1__HeartbeatResponse r = COLO__V1__HEARTBEAT_RESPONSE__INIT;
  r.has_heartbeat_interval_ms = 1;
  r.heartbeat_interval_ms = d->cfg.heartbeat_ms;
  if (req->n_ranks > MAX_HB_RANKS) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%zu ranks exceed the limit of %d",
                  req->n_ranks, MAX_HB_RANKS);
    return;
  }
  if (req->n_unhealthy > MAX_DEVICES || req->n_slowed > MAX_DEVICES) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "%zu %s devices exceed the limit of %d",
                  req->n_unhealthy > MAX_DEVICES ? req->n_unhealthy : req->n_slowed,
                  req->n_unhealthy > MAX_DEVICES ? "unhealthy" : "slowed", MAX_DEVICES);
    return;
  }
  colod_host_live_t *l = req->has_host_id ? colod_host_live(d, req->host_id) : NULL;
  if (!l || !req->has_session || l->session != req->session) {
    r.has_reregister = 1;
    r.reregister = 1;
    colo_rpc_reply(call, &r.base);
    return;
  }
  l->last_seen_mono_ms = colod_mono_ms(d);
  l->last_seen_ms = colod_now_ms();
  if (req->has_stopping && req->stopping && !l->stopping) {
    l->stopping = 1;
    colo_log(COLO_LOG_INFO, "hosts", "host %llu: its worker is stopping; nothing new goes there",
             (unsigned long long)l->id);
  }
  if (l->state != COLO_HOST_UP) {
    if (colo_store_host_set_state(d->store, l->id, COLO_HOST_UP, l->last_seen_ms) == 0) {
      l->state = COLO_HOST_UP;
      colo_log(COLO_LOG_INFO, "hosts", "host %llu is UP again", (unsigned long long)l->id);
    }
  }
  host_health(d, l, req);
  colod_jobs_heartbeat(d, l->id, req, &r);
  d->stats.heartbeats++;
  colo_rpc_reply(call, &r.base);
  colod_jobs_reply_done(&r);
}

typedef struct {
  colod_t *d;
  Colo__V1__Host *hosts;
  Colo__V1__Host **ptrs;
  size_t n, cap;
  int err;
} hosts_acc_t;

static int hosts_cb(const colo_host_t *h, void *data) {
  hosts_acc_t *a = data;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    Colo__V1__Host *nh = realloc(a->hosts, cap * sizeof *nh);
    if (!nh) {
      a->err = COLO_ENOMEM;
      return 1;
    }
    a->hosts = nh;
    a->cap = cap;
  }
  Colo__V1__Host *m = &a->hosts[a->n];
  Colo__V1__Host *dev = colo__v1__host__unpack(NULL, h->devices_len, h->devices);
  colo__v1__host__init(m);
  m->has_id = m->has_state = m->has_memory_bytes = m->has_cpu_count = 1;
  m->has_registered_ms = m->has_last_seen_ms = m->has_devices_used = 1;
  m->id = h->id;
  m->name = strdup(h->name);
  m->address = strdup(h->address);
  colod_host_live_t *l = colod_host_live(a->d, h->id);
  m->state = (Colo__V1__HostState)(l ? l->state : h->state);
  m->memory_bytes = h->memory_bytes;
  m->cpu_count = h->cpu_count;
  m->registered_ms = h->registered_ms;
  m->last_seen_ms = l && l->last_seen_ms > h->last_seen_ms ? l->last_seen_ms : h->last_seen_ms;
  m->devices_used = colod_jobs_devices_used(a->d, h->id);
  m->has_cordoned = 1;
  m->cordoned = h->cordoned != 0;
  m->cordon_reason = h->cordoned || h->cordon_at_ms ? strdup(h->cordon_reason) : NULL;
  m->has_cordon_at_ms = m->has_cordon_evict = h->cordon_at_ms != 0;
  m->cordon_at_ms = h->cordon_at_ms;
  m->cordon_evict = h->cordon_evict != 0;
  m->has_watching = 1;
  m->watching = l && l->push;
  if (l && l->state == COLO_HOST_UP) {
    devset_to_msg(l, &l->sick, &m->unhealthy_devices, &m->n_unhealthy_devices, &m->unhealthy_reason,
                  &m->unhealthy_reasons, &m->n_unhealthy_reasons);
    devset_to_msg(l, &l->slow, &m->slowed_devices, &m->n_slowed_devices, &m->slowed_reason,
                  &m->slowed_reasons, &m->n_slowed_reasons);
  }
  if (dev) { /* take the devices and labels over from the unpacked message */
    m->n_devices = dev->n_devices;
    m->devices = dev->devices;
    m->n_labels = dev->n_labels;
    m->labels = dev->labels;
    dev->n_devices = dev->n_labels = 0;
    dev->devices = NULL;
    dev->labels = NULL;
    colo__v1__host__free_unpacked(dev, NULL);
  }
  a->n++;
  return 0;
}

static void hosts_acc_free(hosts_acc_t *a) {
  for (size_t i = 0; i < a->n; i++) {
    Colo__V1__Host *m = &a->hosts[i];
    free(m->name);
    free(m->address);
    free(m->cordon_reason);
    free(m->unhealthy_devices);
    free(m->unhealthy_reason);
    free(m->slowed_devices);
    free(m->slowed_reason);
    for (size_t k = 0; k < m->n_unhealthy_reasons; k++)
      colo__v1__device_health__free_unpacked(m->unhealthy_reasons[k], NULL);
    free(m->unhealthy_reasons);
    for (size_t k = 0; k < m->n_slowed_reasons; k++)
      colo__v1__device_health__free_unpacked(m->slowed_reasons[k], NULL);
    free(m->slowed_reasons);
    for (size_t k = 0; k < m->n_devices; k++)
      colo__v1__device__free_unpacked(m->devices[k], NULL);
    free(m->devices);
    for (size_t k = 0; k < m->n_labels; k++)
      free(m->labels[k]);
    free(m->labels);
  }
  free(a->hosts);
  free(a->ptrs);
}

static void h_hosts(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  (void)m;
  hosts_acc_t a = {.d = d};
  int rc = colo_store_host_list(d->store, hosts_cb, &a);
  if (rc == 0)
    rc = a.err;
  if (rc == 0) {
    a.ptrs = calloc(a.n ? a.n : 1, sizeof *a.ptrs);
    if (!a.ptrs)
      rc = COLO_ENOMEM;
  }
  if (rc < 0) {
    fail_store(d, call, rc);
  } else {
    for (size_t i = 0; i < a.n; i++)
      a.ptrs[i] = &a.hosts[i];
    Colo__V1__ListHostsResponse r = COLO__V1__LIST_HOSTS_RESPONSE__INIT;
    r.n_hosts = a.n;
    r.hosts = a.ptrs;
    colo_rpc_reply(call, &r.base);
  }
  hosts_acc_free(&a);
}

/* the furthest ahead a cordon to come may be set (a year and a day) */
#define MAX_CORDON_AHEAD_MS (366ll * 86400000)

/* An operator's cordon or uncordon, by host name: stored first, then the scheduler's view. */
static void h_cordon(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__CordonHostRequest *req = (const void *)m;
  if (!req->name || !req->name[0]) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "name is required");
    return;
  }
  if (!bounded_str(req->name, 128)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "name is longer than 128 bytes");
    return;
  }
  if (req->reason && !bounded_str(req->reason, 200)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "reason is longer than 200 bytes");
    return;
  }
  int cordon = req->has_cordon ? req->cordon : 1;
  int evict = req->has_evict && req->evict;
  if (evict && !cordon) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "evict needs cordon: an uncordoned host would take the ranks back");
    return;
  }
  int64_t at = req->has_at_ms ? req->at_ms : 0, now = colod_now_ms();
  if (req->has_at_ms && !cordon) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "at_ms needs cordon: an uncordon takes effect at once");
    return;
  }
  if (req->has_at_ms && (at <= now || at - now > MAX_CORDON_AHEAD_MS)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  at <= now ? "at_ms is not in the future: leave it out to cordon now"
                            : "at_ms is more than a year ahead");
    return;
  }
  colo_host_t h;
  int rc = colo_store_host_by_name(d->store, req->name, &h);
  if (rc == 0) {
    uint64_t id = h.id;
    colo_host_clear(&h);
    rc = colo_store_host_cordon(d->store, id, cordon && !at, req->reason, at, evict);
    if (rc == 0)
      rc = colo_store_host_get(d->store, id, &h);
  }
  if (rc < 0) {
    fail_store(d, call, rc);
    return;
  }
  colod_host_live_t *l = colod_host_live(d, h.id);
  if (l) {
    l->cordoned = h.cordoned;
    l->cordon_at_ms = h.cordon_at_ms;
    l->cordon_evict = h.cordon_evict;
  }
  if (at) {
    char when[32];
    colod_fmt_utc(at, when, sizeof when);
    colo_log(COLO_LOG_INFO, "api", "host %s to be cordoned at %s%s%s%s", h.name, when,
             evict ? ", its jobs stopped then" : "", h.cordon_reason[0] ? ": " : "",
             h.cordon_reason);
  } else {
    colo_log(COLO_LOG_INFO, "api", "host %s %s%s%s", h.name, cordon ? "cordoned" : "uncordoned",
             cordon && h.cordon_reason[0] ? ": " : "", cordon ? h.cordon_reason : "");
  }
  if (!cordon || at)
    colod_jobs_kick(d); /* a waiting job may fit now, or the room to come has changed */
  uint64_t evicted[64]; /* all are stopped; the reply names the first 64 */
  size_t n_all = 0;
  if (evict && !at && colod_jobs_evict(d, h.id, evicted, 64, &n_all) < 0) {
    colo_host_clear(&h);
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL,
                  "coordinator storage error: the host is cordoned, but not every job on it could "
                  "be marked for eviction; ask again");
    return;
  }
  size_t n_evicted = n_all < 64 ? n_all : 64;
  if (evict && !at)
    colo_log(COLO_LOG_INFO, "api", "host %s evicted: %zu running job%s stopping", h.name, n_all,
             n_all == 1 ? "" : "s");
  hosts_acc_t a = {.d = d};
  hosts_cb(&h, &a);
  colo_host_clear(&h);
  if (a.err || a.n != 1) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    Colo__V1__CordonHostResponse r = COLO__V1__CORDON_HOST_RESPONSE__INIT;
    r.host = &a.hosts[0];
    r.n_evicted_jobs = n_evicted;
    r.evicted_jobs = evicted;
    colo_rpc_reply(call, &r.base);
  }
  hosts_acc_free(&a);
}

void colod_hosts_cordons_due(colod_t *d) {
  int64_t now = colod_now_ms();
  for (size_t i = 0; i < d->n_hosts; i++) {
    colod_host_live_t *l = &d->hosts[i];
    if (!l->cordon_at_ms || now < l->cordon_at_ms)
      continue;
    colo_host_t h;
    int rc = colo_store_host_get(d->store, l->id, &h);
    if (rc == 0) {
      rc = colo_store_host_cordon(d->store, l->id, 1, h.cordon_reason, 0, 0);
      colo_host_clear(&h);
    }
    if (rc < 0) { /* tried again at the next tick */
      colo_log(COLO_LOG_ERROR, "hosts", "host %s: cannot store its cordon: %s", l->name,
               colo_store_errmsg(d->store));
      continue;
    }
    int evict = l->cordon_evict;
    l->cordoned = 1;
    l->cordon_at_ms = 0;
    l->cordon_evict = 0;
    uint64_t ids[1];
    size_t n = 0;
    if (evict && colod_jobs_evict(d, l->id, ids, 1, &n) < 0)
      colo_log(COLO_LOG_ERROR, "hosts",
               "host %s: not every job on it could be marked for "
               "eviction: %s",
               l->name, colo_store_errmsg(d->store));
    colo_log(COLO_LOG_INFO, "hosts", "host %s cordoned, as planned%s", l->name,
             evict ? "; its running jobs stopping" : "");
    if (evict)
      colo_log(COLO_LOG_INFO, "hosts", "host %s evicted: %zu running job%s stopping", l->name, n,
               n == 1 ? "" : "s");
  }
}

static void count_held(const colod_job_view_t *j, void *data) {
  *(uint32_t *)data += j->held != 0 && j->state != COLO_JOB_RUNNING;
}

static void h_cluster(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  (void)m;
  uint32_t counts[COLO_JOB_STATE_MAX + 1];
  hosts_acc_t a = {.d = d};
  int rc = colo_store_job_counts(d->store, counts);
  if (rc == 0)
    rc = colo_store_host_list(d->store, hosts_cb, &a);
  if (rc == 0)
    rc = a.err;
  if (rc < 0) {
    hosts_acc_free(&a);
    fail_store(d, call, rc);
    return;
  }
  Colo__V1__GetClusterStatusResponse r = COLO__V1__GET_CLUSTER_STATUS_RESPONSE__INIT;
  r.has_hosts_up = r.has_hosts_down = r.has_devices_total = r.has_devices_used = 1;
  r.has_hosts_cordoned = 1;
  for (size_t i = 0; i < a.n; i++) {
    r.hosts_cordoned += a.hosts[i].cordoned;
    if (a.hosts[i].state == COLO__V1__HOST_STATE__HOST_STATE_UP) {
      r.hosts_up++;
      r.devices_total += (uint32_t)a.hosts[i].n_devices;
      r.devices_used += a.hosts[i].devices_used;
    } else {
      r.hosts_down++;
    }
  }
  hosts_acc_free(&a);
  r.has_jobs_pending = r.has_jobs_running = r.has_jobs_restarting = 1;
  r.has_jobs_succeeded = r.has_jobs_failed = r.has_jobs_cancelled = 1;
  r.jobs_pending = counts[COLO_JOB_PENDING];
  r.jobs_running = counts[COLO_JOB_RUNNING];
  r.jobs_restarting = counts[COLO_JOB_RESTARTING];
  r.jobs_succeeded = counts[COLO_JOB_SUCCEEDED];
  r.jobs_failed = counts[COLO_JOB_FAILED];
  r.jobs_cancelled = counts[COLO_JOB_CANCELLED];
  r.has_jobs_timed_out = 1;
  r.jobs_timed_out = counts[COLO_JOB_TIMED_OUT];
  r.has_jobs_held = 1;
  colod_jobs_each(d, count_held, &r.jobs_held);
  r.version = COLO_VERSION;
  r.has_started_ms = 1;
  r.started_ms = d->started_ms;
  colo_rpc_reply(call, &r.base);
}

/* ---- checkpoints and logs ---- */

typedef struct {
  Colo__V1__Checkpoint *msgs;
  Colo__V1__Checkpoint **ptrs;
  size_t n, cap;
} ck_acc_t;

static int ck_list_cb(const colo_checkpoint_t *ck, void *data) {
  ck_acc_t *a = data;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    Colo__V1__Checkpoint *n = realloc(a->msgs, cap * sizeof *n);
    if (!n)
      return 1;
    a->msgs = n;
    a->cap = cap;
  }
  checkpoint_to_msg(ck, &a->msgs[a->n++]);
  return 0;
}

/* For the calls that list something of a job: the id is given and the job exists, or the call
 * is answered with why not (INVALID_ARGUMENT, NOT_FOUND). */
static int job_known(colod_t *d, colo_rpc_call_t *call, int has_id, uint64_t id) {
  colo_job_t job;
  if (get_job(d, call, has_id, id, &job) < 0)
    return 0;
  colo_job_clear(&job);
  return 1;
}

/* ListJobEvents: a page of at most EVENTS_PAGE, and whether more follow */
#define EVENTS_PAGE 1000

typedef struct {
  Colo__V1__JobEvent msg;
  char text[257];
} event_slot_t;

typedef struct {
  event_slot_t *slots; /* EVENTS_PAGE + 1: one more says there are more */
  size_t n;
} event_acc_t;

static int event_list_cb(const colo_job_event_t *ev, void *data) {
  event_acc_t *a = data;
  event_slot_t *e = &a->slots[a->n++];
  colo__v1__job_event__init(&e->msg);
  e->msg.has_job_id = e->msg.has_seq = e->msg.has_state = e->msg.has_time_ms = 1;
  e->msg.job_id = ev->job_id;
  e->msg.seq = ev->seq;
  e->msg.state = (Colo__V1__JobState)ev->state;
  e->msg.time_ms = ev->time_ms;
  snprintf(e->text, sizeof e->text, "%s", ev->message);
  e->msg.message = e->text;
  return a->n == EVENTS_PAGE + 1;
}

static void h_events(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__ListJobEventsRequest *req = (const void *)m;
  if (!job_known(d, call, req->has_job_id, req->job_id))
    return;
  uint32_t last = req->has_last ? req->last : 0;
  if (last > EVENTS_PAGE) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "last must be at most %d", EVENTS_PAGE);
    return;
  }
  event_acc_t a = {calloc(EVENTS_PAGE + 1, sizeof *a.slots), 0};
  Colo__V1__JobEvent **ptrs = calloc(EVENTS_PAGE + 1, sizeof *ptrs);
  int rc = !a.slots || !ptrs ? COLO_ENOMEM
           : last
               ? colo_store_job_events_last(d->store, req->job_id, last, event_list_cb, &a)
               : colo_store_job_events(d->store, req->job_id,
                                       req->has_after_seq ? req->after_seq : 0, event_list_cb, &a);
  if (rc < 0) {
    fail_store(d, call, rc);
  } else {
    Colo__V1__ListJobEventsResponse r = COLO__V1__LIST_JOB_EVENTS_RESPONSE__INIT;
    r.has_more = 1;
    r.more = a.n > EVENTS_PAGE;
    r.n_events = r.more ? EVENTS_PAGE : a.n;
    for (size_t i = 0; i < r.n_events; i++)
      ptrs[i] = &a.slots[i].msg;
    r.events = ptrs;
    colo_rpc_reply(call, &r.base);
  }
  free(ptrs);
  free(a.slots);
}

static void h_checkpoints(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__ListCheckpointsRequest *req = (const void *)m;
  if (!job_known(d, call, req->has_job_id, req->job_id))
    return;
  ck_acc_t a = {0};
  int rc = colo_store_checkpoint_list(d->store, req->job_id, ck_list_cb, &a);
  a.ptrs = calloc(a.n ? a.n : 1, sizeof *a.ptrs);
  if (rc < 0 || !a.ptrs) {
    fail_store(d, call, rc < 0 ? rc : COLO_ENOMEM);
  } else {
    for (size_t i = 0; i < a.n; i++)
      a.ptrs[i] = &a.msgs[i];
    Colo__V1__ListCheckpointsResponse r = COLO__V1__LIST_CHECKPOINTS_RESPONSE__INIT;
    r.n_checkpoints = a.n;
    r.checkpoints = a.ptrs;
    colo_rpc_reply(call, &r.base);
  }
  for (size_t i = 0; i < a.n; i++)
    checkpoint_msg_strings_free(&a.msgs[i]);
  free(a.msgs);
  free(a.ptrs);
}

typedef struct {
  Colo__V1__ProgressSample *msgs, **ptrs;
  size_t n, cap;
  /* the evaluations' per-set losses, unpacked from the store: msgs[k].val_sets point into them */
  Colo__V1__ProgressSample **sets;
  size_t n_sets, cap_sets;
} sample_acc_t;

static int sample_list_cb(const colo_progress_sample_t *p, void *data) {
  sample_acc_t *a = data;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 256;
    Colo__V1__ProgressSample *n = realloc(a->msgs, cap * sizeof *n);
    if (!n)
      return 1;
    a->msgs = n;
    a->cap = cap;
  }
  Colo__V1__ProgressSample *x = &a->msgs[a->n++];
  colo__v1__progress_sample__init(x);
  x->has_attempt = x->has_step = x->has_time_ms = 1;
  x->attempt = p->attempt;
  x->step = p->step;
  x->time_ms = p->time_ms;
  x->has_loss = x->has_lr = x->has_tokens_per_s = p->has_loss;
  x->loss = p->loss;
  x->lr = p->lr;
  x->tokens_per_s = p->tokens_per_s;
  x->has_val_loss = p->has_val;
  x->val_loss = p->val_loss;
  if (p->has_val && p->val_sets_len) {
    if (a->n_sets == a->cap_sets) {
      size_t cap = a->cap_sets ? a->cap_sets * 2 : 64;
      Colo__V1__ProgressSample **n = realloc(a->sets, cap * sizeof *n);
      if (!n)
        return 1;
      a->sets = n;
      a->cap_sets = cap;
    }
    Colo__V1__ProgressSample *u =
        colo__v1__progress_sample__unpack(NULL, p->val_sets_len, (const uint8_t *)p->val_sets);
    if (u) { /* unreadable: the sample without them */
      a->sets[a->n_sets++] = u;
      x->n_val_sets = u->n_val_sets;
      x->val_sets = u->val_sets;
      x->n_choice_scores = u->n_choice_scores;
      x->choice_scores = u->choice_scores;
      x->has_ema_val_loss = u->has_ema_val_loss;
      x->ema_val_loss = u->ema_val_loss;
    }
  }
  return 0;
}

static void h_history(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__GetJobHistoryRequest *req = (const void *)m;
  if (!job_known(d, call, req->has_job_id, req->job_id))
    return;
  sample_acc_t a = {0};
  int rc = colo_store_sample_list(d->store, req->job_id, sample_list_cb, &a);
  a.ptrs = calloc(a.n ? a.n : 1, sizeof *a.ptrs);
  if (rc < 0 || !a.ptrs) {
    fail_store(d, call, rc < 0 ? rc : COLO_ENOMEM);
  } else {
    for (size_t i = 0; i < a.n; i++)
      a.ptrs[i] = &a.msgs[i];
    Colo__V1__GetJobHistoryResponse r = COLO__V1__GET_JOB_HISTORY_RESPONSE__INIT;
    r.n_samples = a.n;
    r.samples = a.ptrs;
    colo_rpc_reply(call, &r.base);
  }
  for (size_t i = 0; i < a.n_sets; i++)
    colo__v1__progress_sample__free_unpacked(a.sets[i], NULL);
  free(a.sets);
  free(a.msgs);
  free(a.ptrs);
}

static void h_logs(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_t *d = data;
  const Colo__V1__ReadLogsRequest *req = (const void *)m;
  colo_job_t job;
  if (stream_job(d, call, req->has_job_id, req->job_id, &job) < 0)
    return;
  if (d->cfg.logs_private && !may_change(d, call, &job, "read its logs")) {
    colo_job_clear(&job);
    return;
  }
  Colo__V1__JobSpec *spec = colo__v1__job_spec__unpack(NULL, job.spec_len, job.spec);
  uint32_t attempt = req->has_attempt && req->attempt ? req->attempt : job.attempt;
  uint32_t last = job.attempt;
  colo_job_clear(&job);
  if (!spec) {
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "job %llu has an unreadable spec",
                  (unsigned long long)req->job_id);
    return;
  }
  colo_jobspec_fill_defaults(spec);
  unsigned long long world = colo_jobspec_world(spec);
  colo__v1__job_spec__free_unpacked(spec, NULL);
  uint32_t rank = req->has_rank ? req->rank : 0;
  if (rank >= world) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "rank %u is not in the job's world of %llu",
                  rank, world);
    return;
  }
  if (last == 0) {
    colo_rpc_fail(call, GRPC_STATUS_FAILED_PRECONDITION, "job %llu has not started yet: no logs",
                  (unsigned long long)req->job_id);
    return;
  }
  if (attempt > last) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "job %llu has no attempt %u (the last is %u)",
                  (unsigned long long)req->job_id, attempt, last);
    return;
  }
  colod_logs_start(d, call, req->job_id, attempt, rank, req->has_offset ? req->offset : 0,
                   req->has_tail_bytes ? req->tail_bytes : 0, req->has_follow && req->follow);
}

static void h_rdzv_put(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_rdzv_put(data, call, (const Colo__V1__RendezvousPutRequest *)m);
}

static void h_rdzv_get(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_rdzv_get(data, call, (const Colo__V1__RendezvousGetRequest *)m);
}

/* ---- who may call what: a certificate's role, under mutual TLS with tls_roles ---- */

/* 1 when the caller may go on; otherwise the call is failed with PERMISSION_DENIED. A worker's
 * certificate names its host: a heartbeat must be for the host of that name (registration checks
 * the name it registers in h_register). */
static int authorized(colod_t *d, colo_rpc_call_t *call, int roles, const ProtobufCMessage *m) {
  caller_t c;
  caller_of(d, call, &c);
  if (!c.enforced)
    return 1;
  const char *cn = c.cn, *ou = c.ou;
  int role = c.role;
  const char *method = strrchr(colo_rpc_call_method(call)->path, '/') + 1;
  if (!c.has_cert) {
    colo_rpc_fail(call, GRPC_STATUS_UNAUTHENTICATED, "a client certificate is required");
    return 0;
  }
  if (!role) {
    colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                  "certificate \"%s\" has no colo role: its OU must be user, admin or worker "
                  "(deploy/tls-certs.sh)",
                  cn);
    return 0;
  }
  if (!(role & roles)) {
    colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                  "certificate \"%s\" (%s) may not call %s: it needs %s", cn, ou, method,
                  roles & R_WORKER   ? "a worker's certificate"
                  : roles == R_ADMIN ? "an admin's certificate"
                                     : "a user's or an admin's certificate");
    return 0;
  }
  if (role == R_WORKER && !strcmp(method, "RegisterHost")) {
    const Colo__V1__RegisterHostRequest *req = (const void *)m;
    if (!req->name || strcmp(req->name, cn) != 0) {
      colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                    "worker certificate \"%s\" may register only host \"%s\"", cn, cn);
      return 0;
    }
  }
  if (role == R_WORKER && !strncmp(method, "Rendezvous", 10)) {
    /* Put and Get both start with job_id and attempt */
    uint64_t job = !strcmp(method, "RendezvousPut")
                       ? ((const Colo__V1__RendezvousPutRequest *)(const void *)m)->job_id
                       : ((const Colo__V1__RendezvousGetRequest *)(const void *)m)->job_id;
    uint32_t attempt = !strcmp(method, "RendezvousPut")
                           ? ((const Colo__V1__RendezvousPutRequest *)(const void *)m)->attempt
                           : ((const Colo__V1__RendezvousGetRequest *)(const void *)m)->attempt;
    colod_host_live_t *l = NULL;
    for (size_t i = 0; i < d->n_hosts && !l; i++)
      if (!strcmp(d->hosts[i].name, cn))
        l = &d->hosts[i];
    if (!l || !colod_jobs_attempt_on_host(d, job, attempt, l->id)) {
      colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                    "worker certificate \"%s\" has no running rank of job %llu attempt %u", cn,
                    (unsigned long long)job, attempt);
      return 0;
    }
  }
  int beat = !strcmp(method, "Heartbeat");
  if (role == R_WORKER && (beat || !strcmp(method, "WatchHost"))) { /* for its own host only */
    const Colo__V1__HeartbeatRequest *hb = (const void *)m;
    const Colo__V1__WatchHostRequest *wh = (const void *)m;
    colod_host_live_t *l = (beat ? hb->has_host_id : wh->has_host_id)
                               ? colod_host_live(d, beat ? hb->host_id : wh->host_id)
                               : NULL;
    if (l && strcmp(l->name, cn) != 0) {
      colo_rpc_fail(call, GRPC_STATUS_PERMISSION_DENIED,
                    "worker certificate \"%s\" may not %s for host \"%s\"", cn,
                    beat ? "beat" : "watch", l->name);
      return 0;
    }
  }
  return 1;
}

#define GUARD(fn, roles)                                                                           \
  static void g_##fn(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {               \
    if (authorized(data, call, roles, m))                                                          \
      fn(call, m, data);                                                                           \
  }
GUARD(h_submit, R_USER | R_ADMIN)
GUARD(h_get, R_USER | R_ADMIN)
GUARD(h_list, R_USER | R_ADMIN)
GUARD(h_cancel, R_USER | R_ADMIN)
GUARD(h_resume, R_USER | R_ADMIN)
GUARD(h_update, R_USER | R_ADMIN)
GUARD(h_delete, R_USER | R_ADMIN)
GUARD(h_checkpoint_job, R_USER | R_ADMIN)
GUARD(h_hosts, R_USER | R_ADMIN)
GUARD(h_cordon, R_ADMIN)
GUARD(h_cluster, R_USER | R_ADMIN)
GUARD(h_watch, R_USER | R_ADMIN)
GUARD(h_checkpoints, R_USER | R_ADMIN)
GUARD(h_events, R_USER | R_ADMIN)
GUARD(h_history, R_USER | R_ADMIN)
GUARD(h_logs, R_USER | R_ADMIN)
GUARD(h_rdzv_put, R_WORKER)
GUARD(h_rdzv_get, R_WORKER)
GUARD(h_register, R_WORKER)
GUARD(h_heartbeat, R_WORKER)

static void h_usage(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_usage_get(data, call, (const Colo__V1__GetUsageRequest *)(const void *)m);
}
GUARD(h_usage, R_USER | R_ADMIN)

static void h_watch_host(colo_rpc_call_t *call, const ProtobufCMessage *m, void *data) {
  colod_push_watch(data, call, (const Colo__V1__WatchHostRequest *)(const void *)m);
}
GUARD(h_watch_host, R_WORKER)

#define M(name, req, stream, fn)                                                                   \
  { "/colo.v1.Cluster/" name, &colo__v1__##req##__descriptor, stream, g_##fn }

const colo_rpc_method_t colod_methods[] = {
    M("SubmitJob", submit_job_request, 0, h_submit),
    M("GetJob", get_job_request, 0, h_get),
    M("ListJobs", list_jobs_request, 0, h_list),
    M("CancelJob", cancel_job_request, 0, h_cancel),
    M("ResumeJob", resume_job_request, 0, h_resume),
    M("UpdateJob", update_job_request, 0, h_update),
    M("DeleteJob", delete_job_request, 0, h_delete),
    M("CheckpointJob", checkpoint_job_request, 0, h_checkpoint_job),
    M("ListHosts", list_hosts_request, 0, h_hosts),
    M("CordonHost", cordon_host_request, 0, h_cordon),
    M("GetClusterStatus", get_cluster_status_request, 0, h_cluster),
    M("WatchJob", watch_job_request, 1, h_watch),
    M("ListJobEvents", list_job_events_request, 0, h_events),
    M("ListCheckpoints", list_checkpoints_request, 0, h_checkpoints),
    M("GetJobHistory", get_job_history_request, 0, h_history),
    M("GetUsage", get_usage_request, 0, h_usage),
    M("ReadLogs", read_logs_request, 1, h_logs),
    M("RendezvousPut", rendezvous_put_request, 0, h_rdzv_put),
    M("RendezvousGet", rendezvous_get_request, 0, h_rdzv_get),
    M("RegisterHost", register_host_request, 0, h_register),
    M("Heartbeat", heartbeat_request, 0, h_heartbeat),
    M("WatchHost", watch_host_request, 1, h_watch_host),
};
const size_t colod_n_methods = sizeof colod_methods / sizeof colod_methods[0];
