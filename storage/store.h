/* colo_store: colod's state in SQLite (WAL, foreign keys, busy timeout, synchronous=FULL so an
 * acknowledged write survives a crash). Only prepared statements touch the database. Every job
 * state transition is one transaction that also appends one row to job_events.
 *
 * Not thread-safe: colod uses one store from its loop thread. Functions return 0 or a negative
 * colo code; on failure outputs are untouched and colo_store_errmsg() says why.
 */
#ifndef COLO_STORE_H
#define COLO_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct colo_store_s colo_store_t;

/* The schema version this build migrates to. */
#define COLO_STORE_SCHEMA_VERSION 17

/* Job states; the numbers equal colo.v1.JobState. */
enum {
  COLO_JOB_PENDING = 1,
  COLO_JOB_RUNNING = 2,
  COLO_JOB_RESTARTING = 3,
  COLO_JOB_SUCCEEDED = 4,
  COLO_JOB_FAILED = 5,
  COLO_JOB_CANCELLED = 6,
  COLO_JOB_TIMED_OUT = 7, /* its attempt reached resources.time_limit_s; resumable */
};
#define COLO_JOB_STATE_MAX 7
const char *colo_job_state_name(int state); /* "PENDING", ...; "UNKNOWN" otherwise */
int colo_job_state_terminal(int state);
/* 1 if the state machine allows from -> to. */
int colo_job_transition_allowed(int from, int to);

enum { COLO_HOST_UP = 1, COLO_HOST_DOWN = 2 };

typedef struct {
  uint64_t id;
  char name[129];
  int state;
  uint32_t attempt, restarts, max_restarts;
  int64_t created_ms, updated_ms;
  char message[257];
  uint64_t resume_step;
  char client_token[129];
  char owner[129]; /* who submitted it: a user's certificate CN under mutual TLS, else "" */
  uint8_t *spec;   /* packed colo.v1.JobSpec, owned; free with colo_job_clear */
  size_t spec_len;
  uint8_t *progress; /* packed colo.v1.Progress, the newest kept (NULL: none), owned */
  size_t progress_len;
  int hold;              /* COLO_HOLD_*: a held job is not placed until released */
  char hold_reason[257]; /* why, as the one who held it said ("" when not held) */
} colo_job_t;
void colo_job_clear(colo_job_t *job);

typedef struct {
  uint64_t job_id, seq;
  int state;
  char message[257];
  int64_t time_ms;
} colo_job_event_t;

typedef struct {
  uint64_t id;
  char name[129];
  char address[129];
  int state;
  uint64_t session;
  uint64_t memory_bytes;
  uint32_t cpu_count;
  int64_t registered_ms, last_seen_ms;
  uint8_t *devices; /* packed repeated colo.v1.Device (a Host message's devices), owned */
  size_t devices_len;
  int cordoned;            /* an operator's: no new ranks are placed here */
  char cordon_reason[257]; /* why, as they said it ("" when neither cordoned nor to be) */
  int64_t cordon_at_ms;    /* a cordon to come then (a maintenance); 0: none */
  int cordon_evict;        /* and its running jobs then stopped, to go on elsewhere */
} colo_host_t;
void colo_host_clear(colo_host_t *host);

typedef struct {
  uint32_t rank;
  uint64_t host_id;
  uint32_t device_index;
  uint32_t dp_idx, tp_idx, pp_idx;
} colo_rank_place_t;

typedef struct {
  uint64_t job_id, step;
  uint32_t attempt;
  char path[513];
  char manifest_sha256[65];
  uint64_t bytes;
  int64_t created_ms;
  uint32_t request; /* the CheckpointJob request of its attempt it answers; 0: none */
  int has_val_loss; /* 1: val_loss was measured at its step (checkpoint.keep_best) */
  float val_loss;
  int has_score; /* 1: the job's train.best_metric, a score, was measured at its step; it ranks
                  * the checkpoint (higher better) in place of val_loss */
  float score;
} colo_checkpoint_t;

/* Opens (creating if needed) and migrates to COLO_STORE_SCHEMA_VERSION. */
int colo_store_open(const char *path, colo_store_t **out, char *err, size_t errlen);
/* Opens and migrates only up to `version` (tests build older schemas with it). */
int colo_store_open_at(const char *path, int version, colo_store_t **out, char *err, size_t errlen);
void colo_store_close(colo_store_t *st);
const char *colo_store_errmsg(const colo_store_t *st);
int colo_store_schema_version(colo_store_t *st);
/* Runs PRAGMA integrity_check; 0 when it answers "ok". */
int colo_store_integrity_check(colo_store_t *st);

/* Room for one more job that has not ended: the most its owner, and its account, may have
 * (owner_max_jobs, account_max_jobs; UINT32_MAX: no limit). owner NULL: "". */
typedef struct {
  const char *owner;
  uint32_t owner_max;
  const char *account; /* JobSpec.account, "" for none */
  uint32_t account_max;
} colo_job_room_t;

/* Jobs. insert stores a PENDING job of room->owner and its first event. With a client_token that
 * the same owner used already, returns COLO_EEXIST and fills *out with the existing job (caller
 * clears it). Where the owner or the account has as many jobs that have not ended as room allows
 * already, stores nothing and returns COLO_ETOOBIG (colo_store_job_room). */
int colo_store_job_insert(colo_store_t *st, const char *name, const uint8_t *spec, size_t spec_len,
                          uint32_t max_restarts, const char *client_token,
                          const colo_job_room_t *room, int64_t now_ms, colo_job_t *out);
int colo_store_job_get(colo_store_t *st, uint64_t id, colo_job_t *out);
/* Which jobs colo_store_job_list gives: those with id > after_id whose state bit (1 << state) is
 * in state_mask (0: any), whose name starts with name_prefix and whose owner is owner (NULL: any
 * name, any owner). */
typedef struct {
  uint32_t state_mask;
  uint64_t after_id;
  const char *name_prefix;
  const char *owner;
  const char *account; /* JobSpec.account ("": none); NULL: any */
} colo_job_filter_t;
/* Calls cb for the jobs the filter takes, in id order, at most `limit`. cb returns non-zero to
 * stop. The job is cleared after cb. */
typedef int (*colo_store_job_cb)(const colo_job_t *job, void *data);
int colo_store_job_list(colo_store_t *st, const colo_job_filter_t *f, uint32_t limit,
                        colo_store_job_cb cb, void *data);
/* How many jobs of an owner ("": none) have not ended (PENDING, RUNNING or RESTARTING). */
int colo_store_job_unfinished(colo_store_t *st, const char *owner, uint64_t *n);
/* 0 when the owner and the account may each have one more job that has not ended;
 * COLO_ETOOBIG with why otherwise, or the store's error. */
int colo_store_job_room(colo_store_t *st, const colo_job_room_t *room);
/* counts[state] for every state 1..COLO_JOB_STATE_MAX; counts has COLO_JOB_STATE_MAX+1 slots. */
int colo_store_job_counts(colo_store_t *st, uint32_t *counts);

/* Accounting outlives the jobs it counts: deleting a job (colo_store_job_delete,
 * colo_store_jobs_purge) first adds its attempts' device time to usage_hours, in the same
 * transaction, by the hour it was used in, its owner, its account and its kind of device. The
 * store does not unpack specs: the key callback reads the account and the device kind (a
 * colo.v1.DeviceKind) from the job's packed spec; without one they are "" and 0. */
typedef struct {
  char account[65];
  int device;
} colo_usage_key_t;
typedef void (*colo_store_usage_key_cb)(const uint8_t *spec, size_t len, colo_usage_key_t *key);
/* The same callback gives a job's account its column (jobs.account, which lists filter by) when
 * it is stored or its spec changes; setting it reads the account of each job stored without one
 * (older rows). 0, or the store's error. */
int colo_store_set_usage_key(colo_store_t *st, colo_store_usage_key_cb cb);

/* Deleting ended jobs (colod's job_retention, DeleteJob). The schema deletes with a job its
 * events, attempts and their ranks, checkpoint records and training curve; the files it names
 * (rank logs, checkpoints) are the caller's.
 *
 * ended_before lists, oldest end first, at most cap ended jobs (SUCCEEDED, FAILED, CANCELLED,
 * TIMED_OUT) whose end (updated_ms) is before before_ms, from after the cursor *at (zeroed: from
 * the oldest), which it moves past the last one listed. */
typedef struct {
  int64_t ended_ms;
  uint64_t id;
} colo_store_end_cursor_t;
int colo_store_jobs_ended_before(colo_store_t *st, int64_t before_ms, colo_store_end_cursor_t *at,
                                 uint64_t *ids, size_t cap, size_t *n);
/* Deletes one job that has ended: COLO_ENOENT when there is none, COLO_ESTATE (with why) when it
 * has not ended. */
int colo_store_job_delete(colo_store_t *st, uint64_t id);
/* Deletes, in one transaction, those of ids that are still ended, and ended before before_ms
 * (0: whenever): a job resumed since it was listed stays. *deleted: how many went, which are
 * then the first *deleted entries of ids. */
int colo_store_jobs_purge(colo_store_t *st, uint64_t *ids, size_t n, int64_t before_ms,
                          size_t *deleted);

/* Keeps a job's newest progress record (packed colo.v1.Progress). colod writes it when an
 * attempt ends, so a finished job still shows where it got to. */
int colo_store_job_set_progress(colo_store_t *st, uint64_t id, const uint8_t *progress, size_t len);

/* One state change in one transaction: checks the state machine (COLO_ESTATE when the edge is
 * not allowed), updates the job, closes its current attempt when leaving RUNNING, counts a
 * restart when entering RESTARTING, records resume_step and resets restarts when entering
 * PENDING again (a resume), and appends an event. Entering RUNNING goes through
 * colo_store_attempt_begin. On success fills *out (may be NULL). */
int colo_store_job_transition(colo_store_t *st, uint64_t id, int to, const char *message,
                              uint64_t resume_step, int64_t now_ms, colo_job_t *out);

/* RUNNING -> RESTARTING for an attempt whose ranks stopped as asked (a worker's shutdown, a
 * stop signal): as colo_store_job_transition, but the attempt ends CANCELLED rather than FAILED
 * and no restart is counted, since the job did not fail. */
/* How a job is held: not at all, by its owner (who may release it), or by an admin (only an
 * admin may release it: colod checks who asks). */
enum { COLO_HOLD_NONE = 0, COLO_HOLD_OWNER = 1, COLO_HOLD_ADMIN = 2 };

/* What colo_store_job_update changes. */
typedef struct {
  const uint8_t *spec; /* the job's new packed colo.v1.JobSpec, with max_restarts; NULL: as is */
  size_t spec_len;
  uint32_t max_restarts; /* the spec's, which the jobs table keeps in a column too */
  int hold;              /* COLO_HOLD_* with hold_reason, which also becomes the job's message;
                            -1: as it is */
  const char *hold_reason;
  const char *message; /* the event appended: what changed, by whom */
  int requeue;         /* a RUNNING job (COLO_ESTATE otherwise) is being stopped to wait again:
                          it may be held */
} colo_job_update_t;

/* Changes a job that has not ended (COLO_ESTATE otherwise), in one transaction that appends an
 * event in its current state. Holding (hold > 0) needs a PENDING or RESTARTING job, or a RUNNING
 * one with requeue (COLO_ESTATE);
 * a job that ends is no longer held. On success fills *out (may be NULL). */
int colo_store_job_update(colo_store_t *st, uint64_t id, const colo_job_update_t *u, int64_t now_ms,
                          colo_job_t *out);

int colo_store_job_interrupted(colo_store_t *st, uint64_t id, const char *message, int64_t now_ms,
                               colo_job_t *out);

/* PENDING or RESTARTING -> RUNNING: a new attempt with its rank placement, in one transaction. */
int colo_store_attempt_begin(colo_store_t *st, uint64_t job_id, const colo_rank_place_t *ranks,
                             size_t n_ranks, uint64_t resume_step, int64_t now_ms, colo_job_t *out);
int colo_store_attempt_ranks(colo_store_t *st, uint64_t job_id, uint32_t attempt,
                             colo_rank_place_t *ranks, size_t cap, size_t *n);
/* Why colod stops an open attempt's ranks (job_attempts.evicting; 0: it does not). */
enum {
  COLO_STOP_MOVE = 1,       /* an eviction or a preemption: the job goes on elsewhere */
  COLO_STOP_TIME_LIMIT = 2, /* its time limit: the job ends TIMED_OUT */
};
/* Marks an open attempt as stopping, for `why` (COLO_STOP_*), so that a restarted colod still
 * wants its ranks nowhere and ends the job as it would have. COLO_ENOENT when the attempt is not
 * open. */
int colo_store_attempt_stop(colo_store_t *st, uint64_t job_id, uint32_t attempt, int why);
/* An attempt's stop mark (COLO_STOP_*, 0: none), start time (Unix ms) and checkpoints asked
 * (colo_store_attempt_checkpoint). COLO_ENOENT: no such attempt. */
int colo_store_attempt_get(colo_store_t *st, uint64_t job_id, uint32_t attempt, int *stop,
                           int64_t *started_ms, uint32_t *checkpoint_seq);
/* Counts a checkpoint asked of an open attempt's ranks: *seq gets the new count, which its
 * workers compare with the last they passed on. COLO_ENOENT when the attempt is not open. */
int colo_store_attempt_checkpoint(colo_store_t *st, uint64_t job_id, uint32_t attempt,
                                  uint32_t *seq);

typedef int (*colo_store_event_cb)(const colo_job_event_t *ev, void *data);
/* A job's events after after_seq, oldest first; cb returns non-zero to stop. */
int colo_store_job_events(colo_store_t *st, uint64_t job_id, uint64_t after_seq,
                          colo_store_event_cb cb, void *data);
/* Its newest n events, oldest first. */
int colo_store_job_events_last(colo_store_t *st, uint64_t job_id, uint32_t n,
                               colo_store_event_cb cb, void *data);

/* Hosts. register inserts or replaces by name, marks it UP and starts a new session. */
int colo_store_host_register(colo_store_t *st, const char *name, const char *address,
                             const uint8_t *devices, size_t devices_len, uint64_t memory_bytes,
                             uint32_t cpu_count, int64_t now_ms, colo_host_t *out);
int colo_store_host_get(colo_store_t *st, uint64_t id, colo_host_t *out);
int colo_store_host_by_name(colo_store_t *st, const char *name, colo_host_t *out);
int colo_store_host_set_state(colo_store_t *st, uint64_t id, int state, int64_t now_ms);
int colo_store_host_touch(colo_store_t *st, uint64_t id, int64_t now_ms);
/* Cordons (cordoned 1, with the operator's reason) or uncordons (0: the reason is cleared) a
 * host, at once; or, with at_ms, keeps a cordon to come then (cordoned 0 until colod makes it
 * one; evict: its running jobs are stopped then too). Either replaces a cordon to come;
 * registering again keeps it all as it is. COLO_ENOENT: no such host. */
int colo_store_host_cordon(colo_store_t *st, uint64_t id, int cordoned, const char *reason,
                           int64_t at_ms, int evict);
typedef int (*colo_store_host_cb)(const colo_host_t *host, void *data);
int colo_store_host_list(colo_store_t *st, colo_store_host_cb cb, void *data);

/* Checkpoints: a row exists only for a complete checkpoint. Adding a step that has a row
 * replaces it (a later attempt wrote that step again). */
int colo_store_checkpoint_add(colo_store_t *st, const colo_checkpoint_t *ck);
/* Keeps the rows of the `keep` newest steps of a job (0: all), as the engine keeps their files;
 * those written as asked (request > 0) are kept besides, and not counted; with keep_best, so is
 * the best of the others: the highest score (train.best_metric) where rows record one, else the
 * lowest validation loss (the newest of equals). */
int colo_store_checkpoint_prune(colo_store_t *st, uint64_t job_id, uint32_t keep, int keep_best);
/* Removes the rows of steps after `step` (a resume from `step` removed their files). */
int colo_store_checkpoint_drop_after(colo_store_t *st, uint64_t job_id, uint64_t step);
typedef int (*colo_store_checkpoint_cb)(const colo_checkpoint_t *ck, void *data);
/* Newest first. */
int colo_store_checkpoint_list(colo_store_t *st, uint64_t job_id, colo_store_checkpoint_cb cb,
                               void *data);

/* Accounting: an attempt and the devices it held (one per rank), from its start to its end as
 * colod recorded them. Pointers are valid during the callback only. */
typedef struct {
  uint64_t job_id;
  uint32_t attempt;
  const char *owner, *name;
  const uint8_t *spec; /* packed colo.v1.JobSpec */
  size_t spec_len;
  int64_t started_ms, ended_ms; /* ended_ms 0: still running */
  uint32_t ranks;
} colo_usage_row_t;
typedef int (*colo_store_usage_cb)(const colo_usage_row_t *row, void *data);
/* The attempts that held devices at some time in [since_ms, until_ms), by job then attempt. */
int colo_store_usage(colo_store_t *st, int64_t since_ms, int64_t until_ms, colo_store_usage_cb cb,
                     void *data);

/* The device time of deleted jobs, an hour of an owner's jobs of an account on a kind of device a
 * row (see colo_store_set_usage_key), with the first and the last moment of the hour they held
 * devices. jobs and attempts: those that began in that hour. */
#define COLO_USAGE_HOUR_MS 3600000
typedef struct {
  int64_t hour_ms; /* the hour's start */
  const char *owner, *account;
  int device;
  int64_t device_ms;
  int64_t from_ms, to_ms; /* within [hour_ms, hour_ms + COLO_USAGE_HOUR_MS] */
  uint32_t jobs, attempts;
} colo_usage_hour_t;
typedef int (*colo_store_usage_hour_cb)(const colo_usage_hour_t *row, void *data);
/* The hours whose [from_ms, to_ms) overlaps [since_ms, until_ms), oldest first. */
int colo_store_usage_hours(colo_store_t *st, int64_t since_ms, int64_t until_ms,
                           colo_store_usage_hour_cb cb, void *data);

/* A point of a job's training curve (colo.v1.ProgressSample); has_* say which values it has. */
typedef struct {
  uint64_t job_id;
  uint32_t attempt;
  uint64_t step;
  int has_loss, has_val;
  float loss, lr, tokens_per_s, val_loss;
  int64_t time_ms;
  /* with has_val: each validation set's loss, as colod packs them (a colo.v1.ProgressSample of
   * val_sets alone); NULL: none. Read back valid during the callback only. */
  const void *val_sets;
  size_t val_sets_len;
} colo_progress_sample_t;

/* Adds a point; one at the same (job, attempt, step) is merged (an evaluation joins the step's
 * training values). */
int colo_store_sample_add(colo_store_t *st, const colo_progress_sample_t *p);
typedef int (*colo_store_sample_cb)(const colo_progress_sample_t *p, void *data);
/* By attempt, then step. */
int colo_store_sample_list(colo_store_t *st, uint64_t job_id, colo_store_sample_cb cb, void *data);

#endif
