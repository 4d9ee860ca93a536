/* Deleting ended jobs (retention.h). */
#include "retention.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../common/error.h"
#include "../common/fs.h"
#include "../common/log.h"
#include "colod.h"
#include "jobs.h"

#define BATCH           256 /* jobs listed, checked and deleted in one transaction */
#define TICK_BUDGET_MS  50  /* a tick's purge stops after this, and goes on at the next */
#define MIN_INTERVAL_MS 1000
#define MAX_INTERVAL_MS 600000

static void remove_logs(colod_t *d, uint64_t id) {
  char path[1200];
  snprintf(path, sizeof path, "%s/logs/job-%llu", d->cfg.state_dir, (unsigned long long)id);
  if (colo_rmtree(path) < 0)
    colo_log(COLO_LOG_WARN, "retention", "job %llu: cannot remove its logs %s: %s",
             (unsigned long long)id, path, strerror(errno));
}

int colod_job_delete(colod_t *d, uint64_t id, char *err, size_t len) {
  uint64_t naming;
  colod_jobs_naming(d, &id, 1, &naming);
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
  remove_logs(d, id);
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
  colod_jobs_naming(d, ids, n, naming);
  size_t keep = 0;
  for (size_t i = 0; i < n; i++)
    if (!naming[i])
      ids[keep++] = ids[i];
  if (keep && (rc = colo_store_jobs_purge(d->store, ids, keep, r->before_ms, &deleted)) < 0)
    return rc;
  for (size_t i = 0; i < deleted; i++)
    remove_logs(d, ids[i]);
  r->deleted += deleted;
  d->stats.deleted += deleted;
  return n == BATCH;
}

void colod_retention_tick(colod_t *d) {
  colod_retention_t *r = &d->retention;
  uint64_t retention = d->cfg.job_retention_ms;
  uint64_t now = colod_mono_ms(d);
  if (!retention || now < r->due_mono_ms)
    return;
  if (!r->before_ms) { /* a new round */
    r->before_ms = colod_now_ms() - (int64_t)retention;
    r->cursor = (colo_store_end_cursor_t){0, 0};
    r->deleted = 0;
  }
  int more;
  do {
    more = purge_batch(d);
  } while (more > 0 && (uv_update_time(d->loop), colod_mono_ms(d) - now < TICK_BUDGET_MS));
  if (more > 0)
    return; /* on at the next tick */
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
  r->due_mono_ms = colod_mono_ms(d) + every;
  r->before_ms = 0;
}
