/* Accounting (GetUsage): the device hours jobs used, by owner or by job, over a window of time,
 * from the store's attempts and their ranks. An attempt holds one device per rank from its start
 * to its end as colod recorded them; a running one, to now. A deleted job's attempts are in the
 * store's usage_hours, by the hour: the part of such an hour's time in use (from the first
 * moment to the last a device was held in it) that a window covers counts as that part of its
 * device time, as if spread evenly (exact for a window that covers it, or for one job with the
 * same ranks throughout). */
#include "usage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/grow.h"
#include "../common/log.h"
#include "colod.h"

#define MAX_ROWS 10000

typedef struct {
  char owner[129];
  char account[65];
  int device; /* colo.v1.DeviceKind */
  uint64_t job_id, last_job;
  char name[65];
  double ms; /* device-milliseconds */
  uint32_t jobs, attempts;
} row_t;

typedef struct {
  int64_t since, until, now;
  int by_job, by_account;
  const char *owner, *account; /* only theirs (GetUsageRequest.owner, account); NULL: all */
  row_t *rows;
  size_t n, cap;
  uint64_t spec_job; /* the job whose device kind and account are in spec_* */
  int spec_device;
  char spec_account[65];
  double gpu_ms, cpu_ms;
  int oom;
} usage_t;

/* the row of an owner (or an account), or by job of job_id; deleted jobs (job_id 0), by job, have
 * a row for each owner, account and device */
static row_t *row_for(usage_t *u, uint64_t job_id, const char *owner, const char *account,
                      int device, const char *name) {
  /* by job, attempts come in job order: the job's row is the last one made */
  if (u->by_job && job_id && u->n && u->rows[u->n - 1].job_id == job_id)
    return &u->rows[u->n - 1];
  for (size_t i = 0; (!u->by_job || !job_id) && i < u->n; i++) {
    row_t *r = &u->rows[i];
    if (r->device == device && r->job_id == (u->by_job ? job_id : 0) &&
        (u->by_account ? !strcmp(r->account, account)
                       : !strcmp(r->owner, owner) && (!u->by_job || !strcmp(r->account, account))))
      return r;
  }
  if (COLO_GROW(u->rows, u->n, u->cap) < 0)
    return NULL;
  row_t *r = &u->rows[u->n++];
  memset(r, 0, sizeof *r);
  if (!u->by_account)
    snprintf(r->owner, sizeof r->owner, "%s", owner);
  snprintf(r->account, sizeof r->account, "%s", account);
  r->device = device;
  if (u->by_job) {
    r->job_id = job_id;
    snprintf(r->name, sizeof r->name, "%s", name);
  }
  return r;
}

void colod_usage_key(const uint8_t *spec_bytes, size_t len, colo_usage_key_t *key) {
  Colo__V1__JobSpec *spec = colo__v1__job_spec__unpack(NULL, len, spec_bytes);
  key->device = spec && spec->resources && spec->resources->has_device
                    ? (int)spec->resources->device
                    : COLO__V1__DEVICE_KIND__DEVICE_KIND_CPU;
  snprintf(key->account, sizeof key->account, "%s", spec && spec->account ? spec->account : "");
  if (spec)
    colo__v1__job_spec__free_unpacked(spec, NULL);
}

int colod_usage_spec(const colo_usage_row_t *a, uint64_t *job, int *device, char *account,
                     size_t len) {
  if (*job != a->job_id) { /* read once a job: its attempts come one after another */
    colo_usage_key_t key;
    colod_usage_key(a->spec, a->spec_len, &key);
    *device = key.device;
    if (account)
      snprintf(account, len, "%s", key.account);
    *job = a->job_id;
  }
  return *device;
}

int colod_usage_device(const colo_usage_row_t *a, uint64_t *job, int *device) {
  return colod_usage_spec(a, job, device, NULL, 0);
}

/* whether device time of this owner and account is asked for */
static int counted(const usage_t *u, const char *owner, const char *account) {
  return (!u->owner || !strcmp(owner, u->owner)) && (!u->account || !strcmp(account, u->account));
}

static int attempt_cb(const colo_usage_row_t *a, void *data) {
  usage_t *u = data;
  int64_t end = a->ended_ms ? a->ended_ms : u->now;
  int64_t from = a->started_ms > u->since ? a->started_ms : u->since;
  int64_t to = end < u->until ? end : u->until;
  if (to <= from || !a->ranks)
    return 0;
  colod_usage_spec(a, &u->spec_job, &u->spec_device, u->spec_account, sizeof u->spec_account);
  if (!counted(u, a->owner, u->spec_account))
    return 0;
  row_t *r = row_for(u, a->job_id, a->owner, u->spec_account, u->spec_device, a->name);
  if (!r) {
    u->oom = 1;
    return 1;
  }
  double ms = (double)(to - from) * a->ranks;
  r->ms += ms;
  r->attempts++;
  if (r->last_job != a->job_id) {
    r->jobs++;
    r->last_job = a->job_id;
  }
  if (u->spec_device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU)
    u->gpu_ms += ms;
  else
    u->cpu_ms += ms;
  return 0;
}

double colod_usage_hour_part(const colo_usage_hour_t *h, int64_t from, int64_t to) {
  int64_t a = from > h->from_ms ? from : h->from_ms, b = to < h->to_ms ? to : h->to_ms;
  return b > a ? (double)(b - a) / (double)(h->to_ms - h->from_ms) : 0;
}

static int hour_cb(const colo_usage_hour_t *h, void *data) {
  usage_t *u = data;
  double part = colod_usage_hour_part(h, u->since, u->until);
  if (part <= 0 || !counted(u, h->owner, h->account))
    return 0;
  row_t *r = row_for(u, 0, h->owner, h->account, h->device, "(deleted jobs)");
  if (!r) {
    u->oom = 1;
    return 1;
  }
  double ms = (double)h->device_ms * part;
  r->ms += ms;
  r->attempts += h->attempts;
  r->jobs += h->jobs;
  if (h->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU)
    u->gpu_ms += ms;
  else
    u->cpu_ms += ms;
  return 0;
}

/* most device time first; ties by owner (or account), then job */
static int row_order(const void *a, const void *b) {
  const row_t *x = a, *y = b;
  if (x->ms != y->ms)
    return x->ms < y->ms ? 1 : -1;
  int c = strcmp(x->owner, y->owner);
  if (!c)
    c = strcmp(x->account, y->account);
  if (c)
    return c;
  if (x->device != y->device)
    return x->device < y->device ? -1 : 1;
  return x->job_id < y->job_id ? -1 : x->job_id > y->job_id;
}

/* the wait order: fewest weighed hours for the weight first; ties by owner, then device */
static int share_order(const void *a, const void *b) {
  const colod_share_t *x = a, *y = b;
  double kx = x->hours / x->weight, ky = y->hours / y->weight;
  if (kx != ky)
    return kx < ky ? -1 : 1;
  int c = strcmp(x->owner, y->owner);
  return c ? c : (x->device > y->device) - (x->device < y->device);
}

void colod_usage_get(colod_t *d, colo_rpc_call_t *call, const Colo__V1__GetUsageRequest *req) {
  int64_t now = colod_now_ms();
  usage_t u = {.since = req->has_since_ms ? req->since_ms : 0,
               .until = req->has_until_ms && req->until_ms ? req->until_ms : now,
               .now = now,
               .by_job =
                   req->has_group_by && req->group_by == COLO__V1__USAGE_GROUP__USAGE_GROUP_JOB,
               .by_account = req->has_group_by &&
                             req->group_by == COLO__V1__USAGE_GROUP__USAGE_GROUP_ACCOUNT};
  if (u.since < 0 || u.until < 0) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "since_ms and until_ms must not be negative");
    return;
  }
  if (u.since >= u.until) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  "since_ms (%lld) must be before until_ms (%lld)", (long long)u.since,
                  (long long)u.until);
    return;
  }
  if ((req->owner && strnlen(req->owner, 129) > 128) ||
      (req->account && strnlen(req->account, 65) > 64)) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                  req->owner && strnlen(req->owner, 129) > 128 ? "owner is longer than 128 bytes"
                                                               : "account is longer than 64 bytes");
    return;
  }
  u.owner = req->owner;
  u.account = req->account;
  if (req->limit == 0 || req->limit > MAX_ROWS) {
    colo_rpc_fail(call, GRPC_STATUS_INVALID_ARGUMENT, "limit %u must be 1 to %d", req->limit,
                  MAX_ROWS);
    return;
  }
  int rc = colo_store_usage(d->store, u.since, u.until, attempt_cb, &u);
  if (rc == 0 && !u.oom)
    rc = colo_store_usage_hours(d->store, u.since, u.until, hour_cb, &u);
  if (rc < 0 || u.oom) {
    colo_log(COLO_LOG_ERROR, "usage", "cannot sum the usage: %s",
             u.oom ? "out of memory" : colo_store_errmsg(d->store));
    colo_rpc_fail(call, GRPC_STATUS_INTERNAL, "coordinator storage error");
    free(u.rows);
    return;
  }
  if (u.n) /* rows is NULL when there are none */
    qsort(u.rows, u.n, sizeof *u.rows, row_order);
  size_t n = u.n < req->limit ? u.n : req->limit;
  Colo__V1__UsageRow *msgs = calloc(n ? n : 1, sizeof *msgs);
  Colo__V1__UsageRow **ptrs = calloc(n ? n : 1, sizeof *ptrs);
  if (!msgs || !ptrs) {
    free(msgs);
    free(ptrs);
    free(u.rows);
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    row_t *r = &u.rows[i];
    Colo__V1__UsageRow *m = &msgs[i];
    colo__v1__usage_row__init(m);
    m->owner = r->owner;
    if (u.by_account || u.by_job)
      m->account = r->account;
    m->has_device = 1;
    m->device = (Colo__V1__DeviceKind)r->device;
    if (u.by_job) {
      m->has_job_id = 1;
      m->job_id = r->job_id;
      m->job_name = r->name;
    }
    m->has_device_hours = m->has_jobs = m->has_attempts = 1;
    m->device_hours = r->ms / 3.6e6;
    m->jobs = r->jobs;
    m->attempts = r->attempts;
    ptrs[i] = m;
  }
  /* the fair share: brought to now, fewest weighed hours first */
  colod_share_t *fs = NULL;
  size_t nf = 0;
  if (d->cfg.fair_share_half_life_ms && colod_fair_refresh(d) == 0 &&
      colod_fair_list(d, &fs, &nf) == 0 && nf)
    qsort(fs, nf, sizeof *fs, share_order);
  Colo__V1__FairShare *fmsgs = calloc(nf ? nf : 1, sizeof *fmsgs);
  Colo__V1__FairShare **fptrs = calloc(nf ? nf : 1, sizeof *fptrs);
  if (!fmsgs || !fptrs) /* the reply goes without it */
    nf = 0;
  for (size_t i = 0; i < nf; i++) {
    Colo__V1__FairShare *m = &fmsgs[i];
    colo__v1__fair_share__init(m);
    m->owner = fs[i].owner;
    m->has_device = m->has_device_hours = m->has_weight = 1;
    m->device = (Colo__V1__DeviceKind)fs[i].device;
    m->device_hours = fs[i].hours;
    m->weight = fs[i].weight;
    fptrs[i] = m;
  }
  Colo__V1__GetUsageResponse resp = COLO__V1__GET_USAGE_RESPONSE__INIT;
  resp.n_fair_share = nf;
  resp.fair_share = nf ? fptrs : NULL;
  resp.has_fair_share_half_life_ms = 1;
  resp.fair_share_half_life_ms = d->cfg.fair_share_half_life_ms;
  resp.fair_share_by = d->cfg.fair_share_by;
  resp.n_rows = n;
  resp.rows = ptrs;
  resp.has_since_ms = resp.has_until_ms = resp.has_gpu_hours = resp.has_cpu_hours = 1;
  resp.has_rows_total = 1;
  resp.since_ms = u.since;
  resp.until_ms = u.until;
  resp.gpu_hours = u.gpu_ms / 3.6e6;
  resp.cpu_hours = u.cpu_ms / 3.6e6;
  resp.rows_total = (uint32_t)u.n;
  colo_rpc_reply(call, &resp.base);
  free(msgs);
  free(ptrs);
  free(u.rows);
  free(fs);
  free(fmsgs);
  free(fptrs);
}
