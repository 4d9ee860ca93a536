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

#include "../storage/store.h"

struct colod_s;

/* A purge in progress: where it is among the ended jobs, and when the next one is due. */
typedef struct {
  uint64_t due_mono_ms;           /* 0: at the next tick */
  colo_store_end_cursor_t cursor; /* the last job this round listed */
  int64_t before_ms;              /* this round's cut-off: jobs that ended before it go */
  uint64_t deleted;               /* by this round, so far */
} colod_retention_t;

/* Called every tick: with job_retention set, deletes the jobs that ended longer ago than it, a
 * time-boxed batch at a time, so that a large backlog never holds the loop up. */
void colod_retention_tick(struct colod_s *d);

/* DeleteJob: deletes one ended job and its logs. COLO_ENOENT (no such job), COLO_ESTATE (it has not
 * ended, or a job not yet ended waits for it) with why in err; the store's error otherwise. */
int colod_job_delete(struct colod_s *d, uint64_t id, char *err, size_t len);

#endif
