/* The job manager of colod: places pending jobs, tells workers which ranks to run, follows what
 * they report, and drives each job's state machine from it.
 *
 * The store is the truth; this module keeps, for every job that is not finished, what is only
 * worth keeping in memory: the current attempt's placement (loaded from the store), each rank's
 * last reported phase, the newest progress record, the back-off before the next attempt. A
 * restarted colod rebuilds it from the store and from the next heartbeat of each worker, so a
 * running attempt goes on undisturbed.
 *
 * Each tick (colod_jobs_tick):
 *   - a RUNNING attempt whose ranks all exited 0 makes the job SUCCEEDED;
 *   - one whose rank failed, or whose host is DOWN, ends: RESTARTING while restarts remain
 *     (the next attempt resumes from the newest checkpoint that verifies, after a back-off
 *     doubling per restart), FAILED otherwise. Its ranks are withdrawn: workers stop them;
 *   - PENDING and RESTARTING jobs are placed in id order, all ranks or none, on hosts that have
 *     finished stopping the ranks of earlier attempts.
 */
#ifndef COLOD_JOBS_H
#define COLOD_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "../storage/store.h"
#include "colo/v1/cluster.pb-c.h"

struct colod_s;
typedef struct colod_job_live_s colod_job_live_t;

void colod_jobs_tick(struct colod_s *d);
/* Runs colod_jobs_tick on the next loop iteration, rather than at the next tick: after a submit,
 * a resume or a rank that exited, so that placement and failover do not wait up to 250 ms. */
void colod_jobs_kick(struct colod_s *d);
void colod_jobs_free(struct colod_s *d);

/* The heartbeat of a known host session: takes in its rank statuses and fills resp->desired
 * (pointing into colod's memory: valid until the next tick; free with colod_jobs_reply_done). */
void colod_jobs_heartbeat(struct colod_s *d, uint64_t host_id,
                          const Colo__V1__HeartbeatRequest *req, Colo__V1__HeartbeatResponse *resp);
void colod_jobs_reply_done(Colo__V1__HeartbeatResponse *resp);

/* The store changed a live job's row (UpdateJob: its spec, hold): the live job takes the new
 * spec (priority, restarts, time limit take effect from the next pass) and hold, and a pass runs
 * on the next loop iteration. */
void colod_jobs_updated(struct colod_s *d, const colo_job_t *row);

/* Writes the job's newest progress record to the store (when its attempt ends). */
void colod_jobs_keep_progress(struct colod_s *d, uint64_t job_id);

/* The newest progress record of a job, or NULL. */
const Colo__V1__Progress *colod_jobs_progress(struct colod_s *d, uint64_t job_id);

/* Why a job waiting to be placed (PENDING, or RESTARTING after its back-off) is not placed yet,
 * as the last placement attempt said ("no room: ..."); NULL when it is not waiting for room. */
const char *colod_jobs_waiting(struct colod_s *d, uint64_t job_id);
/* A job's place among the jobs waiting for room, in the order the last scheduling pass offered
 * them room (1: first; priority, then fair share, then age), with how many there were in *of; 0
 * when it is not among them (running, ended, waiting for jobs it runs after, or in back-off). */
uint32_t colod_jobs_in_line(struct colod_s *d, uint64_t job_id, uint32_t *of);
/* 1 when the last scheduling pass had the waiting job hold room (a reservation, plan.h), with
 * the latest it starts in *start_by and when it should start by the running jobs' progress in
 * *expect (Unix ms; INT64_MAX: not known); 0 otherwise. */
int colod_jobs_holds(struct colod_s *d, uint64_t job_id, int64_t *start_by, int64_t *expect);
/* A RUNNING job's ranks on devices whose clocks their workers report lowered: how many, and in
 * out (len bytes; NULL: the count alone) which, the first few named with their host's reason; 0
 * (out "") when none. */
uint32_t colod_jobs_slowed(struct colod_s *d, uint64_t job_id, char *out, size_t len);
/* A RUNNING job's current attempt's start (Unix ms); 0 otherwise. */
int64_t colod_jobs_started(struct colod_s *d, uint64_t job_id);
/* A RUNNING job's current attempt's data-parallel groups (fewer than its spec's where elastic);
 * 0 otherwise. */
uint32_t colod_jobs_running_dp(struct colod_s *d, uint64_t job_id);

/* Devices of a host that ranks of running attempts hold. */
uint32_t colod_jobs_devices_used(struct colod_s *d, uint64_t host_id);
/* The same for every host at once: used[i] for d->hosts[i] (d->n_hosts slots). */
void colod_jobs_devices_used_all(struct colod_s *d, uint32_t *used);

/* What /metrics (and fair share) see of a job that is not finished; valid during the callback
 * only. */
typedef struct {
  uint64_t id;
  const char *name, *owner;
  const char *account; /* JobSpec.account, "" for none */
  int state;
  uint32_t attempt, restarts, world;
  int32_t priority;
  int device;                         /* the kind it asks for (colo.v1.DeviceKind) */
  int64_t started_ms;                 /* the RUNNING attempt's start (Unix ms); 0 otherwise */
  const Colo__V1__Progress *progress; /* the current attempt's newest, or NULL */
  int waiting;                        /* the scheduler says why it is not placed */
  int stopping;                       /* colod is stopping its ranks (a move, a time limit) */
  uint32_t in_line;                   /* colod_jobs_in_line: its place in line, or 0 */
  int held;                           /* COLO_HOLD_*: held (UpdateJob), it is not placed */
} colod_job_view_t;
typedef void (*colod_job_view_cb)(const colod_job_view_t *job, void *data);
/* Calls cb for every job that is not finished, in id order. */
void colod_jobs_each(struct colod_s *d, colod_job_view_cb cb, void *data);

/* Stops, for an eviction, every RUNNING job that has a rank on the host: its ranks are no longer
 * desired anywhere, so their workers ask them to stop; they save a checkpoint at a step they
 * agree on and exit 75, which ends the attempt as interrupted (restarted from there, not
 * counted). The mark is stored with the attempt first, so that a restarted colod goes on
 * stopping them. Writes the jobs' ids into ids (at most cap) and their count into *n; returns 0,
 * or the store's error for a job it could not mark (that job is not stopped; the others are). */
int colod_jobs_evict(struct colod_s *d, uint64_t host_id, uint64_t *ids, size_t cap, size_t *n);

/* Requeues a RUNNING job, as an eviction stops its jobs: its ranks are desired nowhere, save a
 * checkpoint at a step they agree on and exit 75, and it waits to be placed again. check_only:
 * only says whether it can. COLO_ESTATE with why in err when it is not running or its ranks are
 * stopping already; the store's error otherwise. */
int colod_jobs_requeue(struct colod_s *d, uint64_t job_id, const char *why, int check_only,
                       char *err, size_t len);

/* Asks a RUNNING job's ranks for a checkpoint at their next step: counted with its attempt in
 * the store (*seq: the count, this one included), then told to its workers at once. COLO_ESTATE
 * with why when the job is not running or its ranks are stopping; the store's error otherwise. */
int colod_jobs_checkpoint(struct colod_s *d, uint64_t job_id, uint32_t *attempt, uint32_t *seq,
                          char *why, size_t len);

/* 1 when attempt `attempt` of the job is RUNNING and has a rank on the host. */
int colod_jobs_attempt_on_host(struct colod_s *d, uint64_t job_id, uint32_t attempt,
                               uint64_t host_id);

/* For each of ids, naming[i] gets the id of a job not yet ended that needs it (0: none), which
 * keeps it from being deleted: one whose train.init_from_job names it, or whose `after` does and
 * that has not started yet. With sync, reads the store's jobs that have not ended first where
 * a kick (a submit, a resume) has come since the last read; without, the table as it is. */
void colod_jobs_naming(struct colod_s *d, const uint64_t *ids, size_t n, uint64_t *naming,
                       int sync);

/* The current attempt of a live job: 1 and *attempt, *world set when it is RUNNING. */
int colod_jobs_attempt(struct colod_s *d, uint64_t job_id, uint32_t *attempt, uint32_t *world);

#endif
