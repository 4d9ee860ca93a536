/* The ranks of one colo-workerd: the reconcile half of the heartbeat. colod's reply lists the
 * ranks that should run on this node (RankLaunch); colo_ranks_reconcile starts what is missing
 * and stops what is no longer wanted. colo_ranks_status builds the actual state for the next
 * heartbeat: phase, exit code or signal, the newest progress record and checkpoint the rank wrote
 * to its progress file, and the next piece of its log.
 *
 * A rank runs in run_dir/job-J/attempt-A/: job.json (its spec), rank-R.log (stdout and stderr,
 * rotated past log_max_bytes), rank-R.progress (colo-train's JSON lines). run_dir/pids/ holds one
 * file per running rank, so that a worker that was killed finds and ends the ranks it left
 * behind when it starts again (colo_ranks_reap_orphans).
 */
#ifndef COLO_WORKER_RANKS_H
#define COLO_WORKER_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "colo/v1/cluster.pb-c.h"
#include "colo/v1/worker_config.pb-c.h"

typedef struct colo_wrank_s colo_wrank_t;

typedef struct {
  uv_loop_t *loop;
  const Colo__V1__WorkerConfig *cfg;
  uint32_t threads;   /* compute threads per rank */
  int wait_passively; /* slots × threads exceed the cores: OMP_WAIT_POLICY=passive (colo_train.c) */
  colo_wrank_t *head;
  size_t n;
  /* the statuses of the last colo_ranks_status, owned until colo_ranks_status_done */
  Colo__V1__RankStatus **st;
  colo_wrank_t **st_rank;
  size_t n_st;
  void (*all_stopped)(void *data);
  void *all_stopped_data;
  /* a rank exited, or a new one wrote its first progress record: colod should hear of it now
   * rather than at the next interval */
  void (*on_exit)(void *data);
  void (*on_started)(void *data);
  void *on_exit_data;
  /* while a rank is STARTING, its progress file is read every PROBE_MS for its first record */
  uv_timer_t probe;
  int probe_on, closing;
} colo_ranks_t;

/* cfg must outlive rs. slots: this node's rank slots (for the default thread count). */
int colo_ranks_init(colo_ranks_t *rs, uv_loop_t *loop, const Colo__V1__WorkerConfig *cfg,
                    uint32_t slots, char *err, size_t errlen);

/* Starts the desired ranks that are not here, stops (SIGTERM, then SIGKILL after
 * stop_grace_ms) the ones here that are not desired. A rank that exited stays reported until
 * colod no longer wants it. */
void colo_ranks_reconcile(colo_ranks_t *rs, Colo__V1__RankLaunch *const *desired, size_t n);

/* The actual state of every rank, for a heartbeat. The array stays valid until
 * colo_ranks_status_done, which is told whether colod got it (then the log bytes it carried
 * count as delivered). */
size_t colo_ranks_status(colo_ranks_t *rs, Colo__V1__RankStatus ***out);
void colo_ranks_status_done(colo_ranks_t *rs, int delivered);

/* Stops every rank; `done` runs once all have exited (at once when none runs). */
void colo_ranks_stop_all(colo_ranks_t *rs, void (*done)(void *data), void *data);

/* Ranks that a previous worker on this run_dir left running: SIGKILL to their process groups.
 * Returns how many were ended. */
int colo_ranks_reap_orphans(colo_ranks_t *rs);

/* After the loop has ended (colo_ranks_stop_all's `done`, then uv_run returned): frees the
 * ranks still in the table, those that exited and were still reported or still had output to
 * ship. Their run directories stay; the next worker on this run_dir finds what is left. */
void colo_ranks_free(colo_ranks_t *rs);

/* The number of ranks here (running or exited and still reported). */
size_t colo_ranks_count(const colo_ranks_t *rs);

#endif
