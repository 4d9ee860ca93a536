/* Deleting ended jobs: job_retention's purge, and DeleteJob's one job at a time.
 *
 * The store deletes a job's rows (events, attempts and their ranks, checkpoint records, curve);
 * this module keeps every job that a job not yet ended names in its `after` or
 * train.init_from_job, and removes the deleted job's rank logs under state_dir/logs. Checkpoint
 * files are never touched: they are the user's, on storage colod does not own. */
#ifndef COLOD_RETENTION_H
#define COLOD_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "../storage/store.h"

struct colod_s;

/* The purge: its timer, and a round in progress: where it is among the ended jobs. */
typedef struct {
  uv_timer_t timer;
  colo_store_end_cursor_t cursor; /* the last job this round listed */
  int64_t before_ms;              /* this round's cut-off: jobs that ended before it go */
  uint64_t deleted;               /* by this round, so far */
  /* deleted jobs' log directories, removed one batch at a time on libuv's thread pool */
  struct rm_work_s *rm_queue, *rm_tail; /* waiting */
  int rm_busy;                          /* one batch is being removed */
} colod_retention_t;

/* With job_retention set, deletes the jobs that ended longer ago than it: a round at once, then
 * every tenth of job_retention (1 s to 10 min). A round works 50 ms at a time with 50 ms for the
 * loop between, so that a large backlog never holds up the calls colod serves. start inits the
 * timer; reload (after SIGHUP) starts a round now, or stops them when job_retention is 0; close
 * closes the timer (shutdown). */
void colod_retention_start(struct colod_s *d);
void colod_retention_reload(struct colod_s *d);
void colod_retention_close(struct colod_s *d);

/* DeleteJob: deletes one ended job and its logs. COLO_ENOENT (no such job), COLO_ESTATE (it has not
 * ended, or a job not yet ended waits for it) with why in err; the store's error otherwise. */
int colod_job_delete(struct colod_s *d, uint64_t id, char *err, size_t len);

#endif
