/* Fair share (fairshare.h): owners' weighed device hours from the store's attempts. */
#include "fairshare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "colod.h"
#include "jobs.h"
#include "usage.h"

/* hours used longer ago than this many half-lives weigh less than 2^-24 and are not read */
#define HORIZON_HALF_LIVES 24

double colod_fair_weighed_hours(int64_t from_ms, int64_t to_ms, int64_t now_ms, uint32_t ranks,
                                uint32_t half_life_ms) {
  if (to_ms > now_ms)
    to_ms = now_ms;
  if (to_ms <= from_ms || !ranks)
    return 0;
  double ms;
  if (!half_life_ms) {
    ms = (double)(to_ms - from_ms);
  } else { /* the integral of 2^(-(now - t) / h) dt from `from` to `to` */
    double h = half_life_ms;
    ms = h / M_LN2 * (exp2(-(double)(now_ms - to_ms) / h) - exp2(-(double)(now_ms - from_ms) / h));
  }
  return ms * ranks / 3.6e6;
}

static int share_order(const void *a, const void *b) {
  const colod_share_t *x = a, *y = b;
  int c = strcmp(x->owner, y->owner);
  return c ? c : (x->device > y->device) - (x->device < y->device);
}

static const colod_share_t *find(const colod_share_t *v, size_t n, const char *owner, int device) {
  colod_share_t key;
  snprintf(key.owner, sizeof key.owner, "%s", owner);
  key.device = device;
  return n ? bsearch(&key, v, n, sizeof *v, share_order) : NULL;
}

/* adds hours to the (owner, device) entry of v, sorted or not: a new one goes at the end */
static int add(colod_share_t **v, size_t *n, size_t *cap, const char *owner, int device,
               double hours) {
  size_t i = 0;
  while (i < *n && ((*v)[i].device != device || strcmp((*v)[i].owner, owner)))
    i++;
  if (i == *n) {
    if (*n == *cap) {
      size_t c = *cap ? 2 * *cap : 16;
      colod_share_t *p = realloc(*v, c * sizeof *p);
      if (!p)
        return -1;
      *v = p;
      *cap = c;
    }
    memset(&(*v)[i], 0, sizeof(*v)[i]);
    snprintf((*v)[i].owner, sizeof(*v)[i].owner, "%s", owner);
    (*v)[i].device = device;
    (*n)++;
  }
  (*v)[i].hours += hours;
  return 0;
}

typedef struct {
  colod_fair_t *f;
  int64_t from, now; /* ended attempts: those that ended in [from, now) */
  uint64_t spec_job; /* the job whose device kind and account are in spec_* */
  int spec_device, oom;
  char spec_account[65];
} reading_t;

int colod_fair_by_account(const colod_t *d) {
  return !strcmp(d->cfg.fair_share_by, "account");
}

static int attempt_cb(const colo_usage_row_t *a, void *data) {
  reading_t *r = data;
  colod_fair_t *f = r->f;
  /* running ones: from the live jobs (running_cb), without unpacking their specs here; ended
   * ones read before */
  if (!a->ended_ms || a->ended_ms < r->from)
    return 0;
  double h =
      colod_fair_weighed_hours(a->started_ms, a->ended_ms, r->now, a->ranks, f->half_life_ms);
  if (h <= 0)
    return 0;
  colod_usage_spec(a, &r->spec_job, &r->spec_device, r->spec_account, sizeof r->spec_account);
  /* one that ended in this very millisecond is no longer running, and the sums read from now on
   * take it next time: until then it counts with the running ones, which each refresh reads anew
   * (a pass that places jobs just after an attempt ends would otherwise count it nowhere) */
  int just = a->ended_ms >= r->now;
  if (add(just ? &f->running : &f->ended, just ? &f->n_running : &f->n_ended,
          just ? &f->cap_running : &f->cap_ended, f->by_account ? r->spec_account : a->owner,
          r->spec_device, h) < 0) {
    r->oom = 1;
    return 1;
  }
  return 0;
}

static int hour_cb(const colo_usage_hour_t *u, void *data) {
  reading_t *r = data;
  colod_fair_t *f = r->f;
  if (u->to_ms <= u->from_ms || u->device_ms <= 0)
    return 0;
  /* device_ms spread evenly over [from_ms, to_ms): device_ms / (to_ms - from_ms) devices */
  double h = colod_fair_weighed_hours(u->from_ms, u->to_ms, r->now, 1, f->half_life_ms) *
             (double)u->device_ms / (double)(u->to_ms - u->from_ms);
  if (h > 0 && add(&f->ended, &f->n_ended, &f->cap_ended, f->by_account ? u->account : u->owner,
                   u->device, h) < 0) {
    r->oom = 1;
    return 1;
  }
  return 0;
}

static void running_cb(const colod_job_view_t *j, void *data) {
  reading_t *r = data;
  colod_fair_t *f = r->f;
  if (!j->started_ms || r->oom) /* not running */
    return;
  double h = colod_fair_weighed_hours(j->started_ms, r->now, r->now, j->world, f->half_life_ms);
  if (h > 0 && add(&f->running, &f->n_running, &f->cap_running,
                   f->by_account ? j->account : j->owner, j->device, h) < 0)
    r->oom = 1;
}

int colod_fair_refresh(colod_t *d) {
  colod_fair_t *f = &d->fair;
  int64_t now = colod_now_ms();
  uint32_t hl = d->cfg.fair_share_half_life_ms;
  reading_t r = {.f = f, .now = now};
  int by_account = colod_fair_by_account(d);
  /* read whole the first time, when a reload changed how, or when the clock went back */
  int whole = !f->at_ms || hl != f->half_life_ms || by_account != f->by_account || now < f->at_ms;
  colod_share_t *old_ended = f->ended, *old_running = f->running;
  size_t old_n = f->n_ended, old_cap = f->cap_ended;
  if (whole) {
    f->ended = NULL;
    f->n_ended = f->cap_ended = 0;
    f->half_life_ms = hl;
    f->by_account = by_account;
    r.from = hl ? now - (int64_t)hl * HORIZON_HALF_LIVES : 0;
    if (r.from < 0)
      r.from = 0;
  } else { /* the sums so far, weighed down to now; then what ended since */
    double k = hl ? exp2(-(double)(now - f->at_ms) / hl) : 1;
    for (size_t i = 0; i < f->n_ended; i++)
      f->ended[i].hours *= k;
    r.from = f->read_to_ms;
  }
  f->running = NULL;
  f->n_running = f->cap_running = 0;
  /* since_ms is exclusive in the store's query: from - 1 includes attempts that ended at from */
  int rc = colo_store_usage(d->store, r.from > 0 ? r.from - 1 : 0, now, attempt_cb, &r);
  if (rc == 0 && !r.oom && whole)
    rc = colo_store_usage_hours(d->store, r.from, now, hour_cb, &r);
  if (rc == 0 && !r.oom)
    colod_jobs_each(d, running_cb, &r);
  if (rc < 0 || r.oom) {
    colo_log(COLO_LOG_ERROR, "fairshare", "cannot read the owners' usage: %s",
             r.oom ? "out of memory" : colo_store_errmsg(d->store));
    free(f->running);
    free(old_running);
    f->running = NULL;
    f->n_running = f->cap_running = 0;
    if (whole) { /* the old sums stay */
      free(f->ended);
      f->ended = old_ended;
      f->n_ended = old_n;
      f->cap_ended = old_cap;
    }
    f->at_ms = 0; /* partly read, or weighed down: read whole next time */
    return -1;
  }
  if (whole)
    free(old_ended);
  free(old_running);
  if (f->n_ended)
    qsort(f->ended, f->n_ended, sizeof *f->ended, share_order);
  if (f->n_running)
    qsort(f->running, f->n_running, sizeof *f->running, share_order);
  f->at_ms = f->read_to_ms = now;
  return 0;
}

double colod_fair_share(const colod_t *d, const char *owner, int device) {
  const colod_fair_t *f = &d->fair;
  const colod_share_t *e = find(f->ended, f->n_ended, owner, device);
  const colod_share_t *r = find(f->running, f->n_running, owner, device);
  return (e ? e->hours : 0) + (r ? r->hours : 0);
}

double colod_fair_key(const colod_t *d, const char *owner, int device) {
  return colod_fair_share(d, owner, device) / colod_config_weight(&d->cfg, owner);
}

int colod_fair_list(const colod_t *d, colod_share_t **out, size_t *n) {
  const colod_fair_t *f = &d->fair;
  size_t ne = f->n_ended, nr = f->n_running, i = 0, j = 0, k = 0;
  colod_share_t *v = malloc((ne + nr ? ne + nr : 1) * sizeof *v);
  if (!v)
    return -1;
  while (i < ne || j < nr) { /* a merge of the two sorted lists */
    int c = i == ne ? 1 : j == nr ? -1 : share_order(&f->ended[i], &f->running[j]);
    v[k] = c <= 0 ? f->ended[i] : f->running[j];
    if (c == 0)
      v[k].hours += f->running[j].hours;
    v[k].weight = colod_config_weight(&d->cfg, v[k].owner);
    i += c <= 0;
    j += c >= 0;
    k++;
  }
  *out = v;
  *n = k;
  return 0;
}

void colod_fair_deleted(colod_t *d, int64_t ended_before_ms) {
  if (ended_before_ms > d->fair.read_to_ms)
    d->fair.at_ms = 0;
}

void colod_fair_free(colod_t *d) {
  free(d->fair.ended);
  free(d->fair.running);
  memset(&d->fair, 0, sizeof d->fair);
}
