/* Deleting ended jobs (retention.h). */
#include "retention.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/fs.h"
#include "../common/log.h"
#include "colod.h"
#include "fairshare.h"
#include "jobs.h"

#define BATCH           64 /* jobs listed, checked and deleted in one transaction */
#define SLICE_MS        25 /* a round works this long at a time, then lets the loop run as long */
#define MIN_INTERVAL_MS 1000
#define MAX_INTERVAL_MS 600000

/* Deleted jobs' log directories, removed on libuv's thread pool: removing thousands of files
 * would otherwise hold the loop up far longer than deleting their rows. One batch at a time, the
 * next queued behind it, so that a backlog's removal takes one core, not every one colod has. */
typedef struct rm_work_s {
  uv_work_t req;
  struct rm_work_s *next;
  colod_t *d;
  char dir[1100]; /* state_dir/logs */
  size_t n;
  char names[][24]; /* "job-N" under dir */
} rm_work_t;

static void rm_run(uv_work_t *req) {
  rm_work_t *w = req->data;
  for (size_t i = 0; i < w->n; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", w->dir, w->names[i]);
    if (colo_rmtree(path) < 0) /* colo_log is safe off the loop: one write(2) a line */
      colo_log(COLO_LOG_WARN, "retention", "cannot remove the logs %s: %s", path, strerror(errno));
  }
}

static void rm_done(uv_work_t *req, int status);

static void rm_next(colod_t *d) {
  colod_retention_t *r = &d->retention;
  while (!r->rm_busy && r->rm_queue) {
    rm_work_t *w = r->rm_queue;
    r->rm_queue = w->next;
    if (!r->rm_queue)
      r->rm_tail = NULL;
    if (uv_queue_work(d->loop, &w->req, rm_run, rm_done) == 0)
      r->rm_busy = 1;
    else
      free(w);
  }
}

static void rm_done(uv_work_t *req, int status) {
  rm_work_t *w = req->data;
  colod_t *d = w->d;
  (void)status;
  free(w);
  d->retention.rm_busy = 0;
  rm_next(d);
}

static void remove_logs(colod_t *d, const uint64_t *ids, size_t n) {
  if (!n)
    return;
  rm_work_t *w = malloc(sizeof *w + n * sizeof w->names[0]);
  if (!w) {
    colo_log(COLO_LOG_WARN, "retention", "out of memory: the logs of %zu deleted jobs stay", n);
    return;
  }
  snprintf(w->dir, sizeof w->dir, "%s/logs", d->cfg.state_dir);
  w->n = n;
  w->d = d;
  w->next = NULL;
  w->req.data = w;
  for (size_t i = 0; i < n; i++)
    snprintf(w->names[i], sizeof w->names[i], "job-%llu", (unsigned long long)ids[i]);
  colod_retention_t *r = &d->retention;
  if (r->rm_tail)
    r->rm_tail->next = w;
  else
    r->rm_queue = w;
  r->rm_tail = w;
  rm_next(d);
}

int colod_job_delete(colod_t *d, uint64_t id, char *err, size_t len) {
  uint64_t naming;
  colod_jobs_naming(d, &id, 1, &naming, 1);
  if (naming) {
    snprintf(err, len,
             "job %llu waits for job %llu (its after or train.init_from_job): cancel job %llu "
             "first",
             (unsigned long long)naming, (unsigned long long)id, (unsigned long long)naming);
    return COLO_ESTATE;
  }
  int rc = colo_store_job_delete(d->store, id);
  if (rc < 0) {
    snprintf(err, len, "%s", colo_store_errmsg(d->store));
    return rc;
  }
  remove_logs(d, &id, 1);
  colod_fair_deleted(d, INT64_MAX); /* it may have ended since the shares were read */
  d->stats.deleted++;
  colo_log(COLO_LOG_INFO, "retention", "job %llu deleted", (unsigned long long)id);
  return 0;
}

/* One batch: 1 when the round has more to list, 0 when it is done, <0 on a store error. */
static int purge_batch(colod_t *d) {
  colod_retention_t *r = &d->retention;
  uint64_t ids[BATCH], naming[BATCH];
  size_t n = 0, deleted = 0;
  int rc = colo_store_jobs_ended_before(d->store, r->before_ms, &r->cursor, ids, BATCH, &n);
  if (rc < 0 || n == 0)
    return rc;
  colod_jobs_naming(d, ids, n, naming, 1);
  size_t keep = 0;
  for (size_t i = 0; i < n; i++)
    if (!naming[i])
      ids[keep++] = ids[i];
  if (keep && (rc = colo_store_jobs_purge(d->store, ids, keep, r->before_ms, &deleted)) < 0)
    return rc;
  remove_logs(d, ids, deleted);
  if (deleted)
    colod_fair_deleted(d, r->before_ms);
  r->deleted += deleted;
  d->stats.deleted += deleted;
  return n == BATCH;
}

static void on_purge(uv_timer_t *t) {
  colod_t *d = t->data;
  colod_retention_t *r = &d->retention;
  uint64_t retention = d->cfg.job_retention_ms;
  if (!retention || d->draining)
    return;
  if (!r->before_ms) { /* a new round */
    r->before_ms = colod_now_ms() - (int64_t)retention;
    r->cursor = (colo_store_end_cursor_t){0, 0};
    r->deleted = 0;
  }
  uv_update_time(d->loop);
  uint64_t t0 = colod_mono_ms(d);
  int more;
  do {
    more = purge_batch(d);
    uv_update_time(d->loop);
  } while (more > 0 && colod_mono_ms(d) - t0 < SLICE_MS);
  if (more > 0) { /* the loop's turn, then on */
    uv_timer_start(&r->timer, on_purge, SLICE_MS, 0);
    return;
  }
  if (more < 0)
    colo_log(COLO_LOG_ERROR, "retention", "deleting ended jobs: %s", colo_store_errmsg(d->store));
  else if (r->deleted)
    colo_log(COLO_LOG_INFO, "retention",
             "deleted %llu jobs that ended more than job_retention ago, with their logs",
             (unsigned long long)r->deleted);
  uint64_t every = retention / 10;
  every = every < MIN_INTERVAL_MS   ? MIN_INTERVAL_MS
          : every > MAX_INTERVAL_MS ? MAX_INTERVAL_MS
                                    : every;
  r->before_ms = 0;
  uv_timer_start(&r->timer, on_purge, every, 0);
}

void colod_retention_start(colod_t *d) {
  uv_timer_init(d->loop, &d->retention.timer);
  d->retention.timer.data = d;
  colod_retention_reload(d);
}

void colod_retention_reload(colod_t *d) {
  if (d->cfg.job_retention_ms)
    uv_timer_start(&d->retention.timer, on_purge, 0, 0);
  else
    uv_timer_stop(&d->retention.timer);
}

static void on_closed(uv_handle_t *h) {
  (void)h;
}

void colod_retention_close(colod_t *d) {
  uv_close((uv_handle_t *)&d->retention.timer, on_closed);
}
