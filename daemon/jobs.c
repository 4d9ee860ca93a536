/* The job manager: placement, desired ranks, rank reports, the attempt state machine. */
#include "jobs.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <search.h>
#include <string.h>
#include <time.h>

#include "../common/error.h"
#include "../common/jobspec.h"
#include "../common/log.h"
#include "../common/setloss.h"
#include "colod.h"
#include "logs.h"
#include "plan.h"
#include "sched.h"

struct colod_job_live_s {
  colod_job_live_t *next;
  uint64_t id;
  int state;
  uint32_t attempt, restarts, max_restarts;
  uint64_t resume_step;
  char owner[129];  /* who submitted it ("": no mutual TLS) */
  double share;     /* its owner's weighed device hours, when a pass ordered it (fairshare.h) */
  uint32_t in_line; /* waiting for room: its place in the last pass's order (1: first); 0: not */
  int hold;         /* COLO_HOLD_*: held, it is not placed (UpdateJob) */
  int over_limit; /* in the last pass, placing it would have passed owner_ or account_max_devices */
  int holds;      /* in the last pass, it held room (a reservation) ... */
  int64_t start_by; /* ... to start by then at the latest (Unix ms); INT64_MAX: not known */
  int64_t expect;   /* ... and should start then, by estimates; INT64_MAX: not known */
  char hold_reason[257];
  int seen;
  Colo__V1__JobSpec *spec;
  uint32_t world, dp, cp, tp, pp; /* dp and world: the attempt's (set_dp), else the spec's */
  /* the attempt's spec where it runs with fewer data-parallel groups than the spec asks
   * (parallel.min_dp): dp, and train.grad_accum raised by as much; NULL: the spec itself */
  Colo__V1__JobSpec *run_spec;
  /* the current attempt, while RUNNING */
  uint32_t placed_attempt; /* 0: none loaded */
  colo_rank_place_t *place;
  int *phase, *exit_code, *sig;
  char (*why)[160]; /* what an exited rank said last (its worker read it from its log) */
  char rendezvous[160];
  uint64_t launch_resume_step;
  int resume_seen;    /* rank 0's resumed_step of this attempt was taken */
  int evicting;       /* why colod stops its ranks (COLO_STOP_*, 0: it does not): desired nowhere */
  uint32_t ckpt_seq;  /* checkpoints asked of its ranks (CheckpointJob), told to their workers */
  int64_t started_ms; /* the attempt's start (Unix ms), for resources.time_limit_s */
  /* reports */
  Colo__V1__Progress progress;
  colo_set_losses_t *val_sets;  /* progress.val_sets' storage (setloss.h) */
  colo_set_losses_t *eval_sets; /* a queued evaluation's, on its way to the store */
  int has_progress;
  /* the attempt's first progress record colod took (its step and time), for its speed */
  uint64_t first_step;
  int64_t first_ms;
  uint64_t ck_step;
  /* the training curve: the attempt being sampled and the step of its next sample */
  uint32_t sample_attempt;
  uint64_t next_sample;
  /* placement */
  int after_met; /* every job in its spec's `after` (and train.init_from_job) has SUCCEEDED */
  char init_ckpts[COLO_MAX_PATH + 1]; /* train.init_from_job's checkpoint dir; "": none */
  uint64_t not_before_mono_ms;
  char wait_why[512];
};

/* ---- the live table, from the store ---- */

/* What the hosts of an attempt's ranks should run has changed: their workers beat now. */
static void nudge_hosts(colod_t *d, const colod_job_live_t *j) {
  for (uint32_t r = 0; r < j->world; r++)
    colod_push_nudge(d, j->place[r].host_id);
}

static void set_dp(colod_job_live_t *j, uint32_t dp);

/* An attempt's ranks, placements and reports go. ended: the job has ended (a cancel, say), and
 * until its workers' next beats say how many of its ranks are left, their hosts count them as
 * draining, so that no pass takes their devices for free meanwhile (an elastic job growing back
 * stopped itself for room it then did not find). A job that restarts takes its own devices
 * again, as its workers end its old ranks first. */
static void live_clear_attempt(colod_t *d, colod_job_live_t *j, int ended) {
  if (j->place && j->phase) { /* an attempt that ends: its ranks still running are stopped */
    nudge_hosts(d, j);
    for (uint32_t r = 0; ended && r < j->world; r++) {
      colod_host_live_t *h = j->phase[r] != COLO__V1__RANK_PHASE__RANK_PHASE_EXITED
                                 ? colod_host_live(d, j->place[r].host_id)
                                 : NULL;
      if (h)
        h->draining++;
    }
  }
  free(j->place);
  free(j->phase);
  free(j->exit_code);
  free(j->sig);
  free(j->why);
  j->place = NULL;
  j->phase = j->exit_code = j->sig = NULL;
  j->why = NULL;
  j->placed_attempt = 0;
  j->rendezvous[0] = '\0';
  j->evicting = 0;
  if (j->spec)
    set_dp(j, j->spec->parallel->dp); /* the next attempt tries the whole again */
}

/* The attempt's data-parallel degree: the spec's, or fewer groups (dp divides the spec's), run
 * from a copy of the spec with train.grad_accum and train.eval_batches multiplied by as much:
 * the same global batch, the same sequences in each step and in each evaluation. Where the copy
 * cannot be made, the spec's stays (attempt_world then finds the world is not the attempt's). */
static void set_dp(colod_job_live_t *j, uint32_t dp) {
  if (j->run_spec)
    colo__v1__job_spec__free_unpacked(j->run_spec, NULL);
  j->run_spec = NULL;
  uint32_t full = j->spec->parallel->dp;
  j->dp = full;
  j->world = j->dp * j->cp * j->tp * j->pp;
  if (dp == full || dp == 0 || full % dp)
    return;
  size_t len = colo__v1__job_spec__get_packed_size(j->spec);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf)
    return;
  colo__v1__job_spec__pack(j->spec, buf);
  Colo__V1__JobSpec *c = colo__v1__job_spec__unpack(NULL, len, buf);
  free(buf);
  if (!c)
    return;
  colo_jobspec_fill_defaults(c);
  c->parallel->has_dp = 1;
  c->parallel->dp = dp;
  c->train->has_grad_accum = 1;
  c->train->grad_accum *= full / dp;
  c->train->has_eval_batches = 1; /* the same sequences evaluated (colo_sample_eval_batch) */
  c->train->eval_batches *= full / dp;
  j->run_spec = c;
  j->dp = dp;
  j->world = j->dp * j->cp * j->tp * j->pp;
}

static int id_order(const void *a, const void *b);

static void live_free(colod_t *d, colod_job_live_t *j) {
  tdelete(j, &d->jobs_by_id, id_order); /* none, for one never added */
  live_clear_attempt(d, j, 1);
  if (j->spec)
    colo__v1__job_spec__free_unpacked(j->spec, NULL);
  colo_set_losses_free(j->val_sets);
  colo_set_losses_free(j->eval_sets);
  free(j);
}

static int id_order(const void *a, const void *b) {
  const colod_job_live_t *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* by id in O(log n): API calls look a job up several times each, and sync_jobs every job a pass */
static colod_job_live_t *live_find(colod_t *d, uint64_t id) {
  colod_job_live_t key = {.id = id};
  colod_job_live_t **found = tfind(&key, &d->jobs_by_id, id_order);
  return found ? *found : NULL;
}

/* The rendezvous of an attempt: colod's own store ("colod"), or, with rendezvous: rank0, one that
 * rank 0 serves on its host, on a port that the job and attempt pick from the configured range
 * (so that a restarted colod computes the same one). */
static void make_rendezvous(colod_t *d, colod_job_live_t *j) {
  if (strcmp(d->cfg.rdzv_mode, "rank0") != 0) {
    snprintf(j->rendezvous, sizeof j->rendezvous, "colod");
    return;
  }
  colod_host_live_t *h = colod_host_live(d, j->place[0].host_id);
  uint32_t port = d->cfg.rdzv_port_base + (uint32_t)((j->id * 7919u + j->attempt * 131u) % 1000u);
  snprintf(j->rendezvous, sizeof j->rendezvous, "%s:%u", h ? h->address : "127.0.0.1", port);
}

/* train.init_from_job's checkpoint directory under the checkpoint root, as its workers name it:
 * that job's checkpoint.dir, or job-N. */
static void init_dir(colod_t *d, colod_job_live_t *j) {
  uint64_t from = j->spec->train->has_init_from_job ? j->spec->train->init_from_job : 0;
  j->init_ckpts[0] = '\0';
  if (!from)
    return;
  colo_job_t row;
  Colo__V1__JobSpec *s = NULL;
  if (colo_store_job_get(d->store, from, &row) == 0) {
    s = colo__v1__job_spec__unpack(NULL, row.spec_len, row.spec);
    colo_job_clear(&row);
  } else {
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu: cannot read job %llu's checkpoint dir: %s",
             (unsigned long long)j->id, (unsigned long long)from, colo_store_errmsg(d->store));
  }
  if (s && s->checkpoint && s->checkpoint->dir && s->checkpoint->dir[0])
    snprintf(j->init_ckpts, sizeof j->init_ckpts, "%s", s->checkpoint->dir);
  else
    snprintf(j->init_ckpts, sizeof j->init_ckpts, "job-%llu", (unsigned long long)from);
  if (s)
    colo__v1__job_spec__free_unpacked(s, NULL);
}

/* 1 when an attempt of n ranks is the job's: the spec's world, or (elastic) fewer data-parallel
 * groups, which it then runs with (set_dp) */
static int attempt_world(colod_job_live_t *j, size_t n) {
  if (n == j->world)
    return 1;
  uint32_t group = j->cp * j->tp * j->pp, full = j->spec->parallel->dp,
           min = j->spec->parallel->min_dp;
  if (!min || n == 0 || n % group || n / group < min || full % (n / group))
    return 0;
  set_dp(j, (uint32_t)(n / group));
  return j->world == n;
}

static int load_attempt(colod_t *d, colod_job_live_t *j) {
  live_clear_attempt(d, j, 0); /* the spec's dp again: the most ranks an attempt has */
  j->place = calloc(j->world, sizeof *j->place);
  j->phase = calloc(j->world, sizeof *j->phase);
  j->exit_code = calloc(j->world, sizeof *j->exit_code);
  j->sig = calloc(j->world, sizeof *j->sig);
  j->why = calloc(j->world, sizeof *j->why);
  size_t n = 0;
  if (!j->place || !j->phase || !j->exit_code || !j->sig || !j->why ||
      colo_store_attempt_ranks(d->store, j->id, j->attempt, j->place, j->world, &n) < 0 ||
      !attempt_world(j, n)) {
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu attempt %u: cannot load its %u ranks (%zu found)",
             (unsigned long long)j->id, j->attempt, j->world, n);
    live_clear_attempt(d, j, 0);
    return COLO_EINTERNAL;
  }
  j->placed_attempt = j->attempt;
  j->resume_seen = 0;
  init_dir(d, j);
  /* a stop stored before a colod restart goes on */
  int stop = 0;
  int64_t started = colod_now_ms();
  uint32_t seq = 0;
  if (colo_store_attempt_get(d->store, j->id, j->attempt, &stop, &started, &seq) < 0)
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu attempt %u: cannot read whether it is stopping: %s",
             (unsigned long long)j->id, j->attempt, colo_store_errmsg(d->store));
  j->evicting = stop;
  j->started_ms = started;
  j->ckpt_seq = seq;
  if (j->evicting)
    colo_log(COLO_LOG_INFO, "jobs", "job %llu attempt %u: its ranks are still stopping (%s)",
             (unsigned long long)j->id, j->attempt,
             stop == COLO_STOP_TIME_LIMIT ? "time limit" : "evicted");
  make_rendezvous(d, j);
  return 0;
}

typedef struct {
  colod_t *d;
  uint64_t last_id;
  uint32_t count;
} sync_t;

static int newest_ck_cb(const colo_checkpoint_t *ck, void *data) {
  *(uint64_t *)data = ck->step;
  return 1; /* newest first: the first is enough */
}

static int sync_cb(const colo_job_t *row, void *data) {
  sync_t *s = data;
  colod_t *d = s->d;
  colod_job_live_t *j = live_find(d, row->id);
  if (!j) {
    j = calloc(1, sizeof *j);
    if (!j)
      return 1;
    j->id = row->id;
    j->spec = colo__v1__job_spec__unpack(NULL, row->spec_len, row->spec);
    if (!j->spec) {
      colo_log(COLO_LOG_ERROR, "jobs", "job %llu has an unreadable spec",
               (unsigned long long)row->id);
      free(j);
      return 0;
    }
    colo_jobspec_fill_defaults(j->spec);
    j->dp = j->spec->parallel->dp;
    j->tp = j->spec->parallel->tp;
    j->cp = j->spec->parallel->cp;
    j->pp = j->spec->parallel->pp;
    j->world = j->dp * j->cp * j->tp * j->pp;
    colo__v1__progress__init(&j->progress);
    /* the newest checkpoint already known, so that a report of it is not a new row */
    colo_store_checkpoint_list(d->store, j->id, newest_ck_cb, &j->ck_step);
    colod_job_live_t **pp = &d->jobs;
    while (*pp && (*pp)->id < j->id)
      pp = &(*pp)->next;
    if (!tsearch(j, &d->jobs_by_id, id_order)) {
      live_free(d, j);
      return 1;
    }
    j->next = *pp;
    *pp = j;
  }
  int was = j->state;
  if (was != (int)row->state) /* moved by a call (cancel, resume): its wait is another */
    j->wait_why[0] = '\0';
  j->state = row->state;
  j->attempt = row->attempt;
  j->restarts = row->restarts;
  j->max_restarts = row->max_restarts;
  j->resume_step = row->resume_step;
  snprintf(j->owner, sizeof j->owner, "%s", row->owner);
  j->hold = row->hold;
  snprintf(j->hold_reason, sizeof j->hold_reason, "%s", row->hold_reason);
  j->seen = 1;
  if (j->state == COLO_JOB_RUNNING && j->placed_attempt != j->attempt) {
    load_attempt(d, j);
    /* after a colod restart: the attempt's first launch resumed as chosen */
    j->launch_resume_step = j->restarts == 0 ? j->resume_step : 0;
  } else if (j->state != COLO_JOB_RUNNING && j->placed_attempt) {
    live_clear_attempt(d, j, colo_job_state_terminal(j->state));
  }
  if (was == COLO_JOB_RUNNING && j->state != COLO_JOB_RUNNING)
    j->has_progress = 0;
  s->last_id = row->id;
  s->count++;
  return 0;
}

/* Brings the table in line with the store: new jobs in, finished (or cancelled) jobs out. */
static void sync_jobs(colod_t *d) {
  d->jobs_stale = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    j->seen = 0;
  uint32_t mask = (1u << COLO_JOB_PENDING) | (1u << COLO_JOB_RUNNING) | (1u << COLO_JOB_RESTARTING);
  sync_t s = {d, 0, 0};
  do {
    s.count = 0;
    colo_job_filter_t f = {.state_mask = mask, .after_id = s.last_id};
    if (colo_store_job_list(d->store, &f, 1000, sync_cb, &s) < 0) {
      colo_log(COLO_LOG_ERROR, "jobs", "cannot list jobs: %s", colo_store_errmsg(d->store));
      for (colod_job_live_t *j = d->jobs; j; j = j->next)
        j->seen = 1; /* keep everything as it is until the store answers */
      return;
    }
  } while (s.count == 1000);
  for (colod_job_live_t **pp = &d->jobs; *pp;) {
    colod_job_live_t *j = *pp;
    if (!j->seen) {
      *pp = j->next;
      live_free(d, j);
    } else {
      pp = &j->next;
    }
  }
}

/* ---- state changes ---- */

/* interrupted: to RESTARTING for ranks that stopped as asked (colo_store_job_interrupted) */
static int transition_as(colod_t *d, colod_job_live_t *j, int to, const char *msg,
                         int interrupted) {
  colo_job_t row;
  if (j->state == COLO_JOB_RUNNING)
    colod_jobs_keep_progress(d, j->id);
  j->wait_why[0] = '\0'; /* a new state: the scheduler says again why, if it waits */
  j->in_line = 0;
  int rc = interrupted
               ? colo_store_job_interrupted(d->store, j->id, msg, colod_now_ms(), &row)
               : colo_store_job_transition(d->store, j->id, to, msg, 0, colod_now_ms(), &row);
  if (rc < 0) {
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu: cannot go to %s: %s", (unsigned long long)j->id,
             colo_job_state_name(to), colo_store_errmsg(d->store));
    return rc;
  }
  if (row.state >= 1 && row.state <= COLO_JOB_STATE_MAX)
    d->stats.entered[row.state]++;
  colo_log(to == COLO_JOB_SUCCEEDED ? COLO_LOG_INFO : COLO_LOG_WARN, "jobs", "job %llu: %s: %s",
           (unsigned long long)j->id, colo_job_state_name(to), msg);
  j->state = row.state;
  j->restarts = row.restarts;
  colod_watch_notify(d, &row);
  colo_job_clear(&row);
  if (to != COLO_JOB_RUNNING)
    live_clear_attempt(d, j, colo_job_state_terminal(j->state));
  return 0;
}

static int transition(colod_t *d, colod_job_live_t *j, int to, const char *msg) {
  return transition_as(d, j, to, msg, 0);
}

static void on_kick(uv_timer_t *t);

/* How an attempt ended badly: a failure, a job that cannot run as written, or ranks that stopped
 * as asked (their worker shut down, or they were sent a stop signal) after saving a checkpoint. */
enum { END_FAILED, END_CONFIG, END_STOPPED };

/* A job gone RESTARTING is placed once `backoff` ms have passed: when they end, not at the tick
 * after (the restart timer runs for the soonest such end). */
static void restart_after(colod_t *d, colod_job_live_t *j, uint64_t backoff) {
  j->not_before_mono_ms = colod_mono_ms(d) + backoff;
  if (!d->draining &&
      (!uv_is_active((uv_handle_t *)&d->restart) || uv_timer_get_due_in(&d->restart) > backoff))
    uv_timer_start(&d->restart, on_kick, backoff, 0);
}

static void end_attempt(colod_t *d, colod_job_live_t *j, const char *why, int how) {
  char msg[600];
  if (j->evicting == COLO_STOP_TIME_LIMIT) {
    /* stopped for its time limit: however its ranks ended, the job ends here */
    snprintf(msg, sizeof msg,
             "its time limit (resources.time_limit_s=%u) was reached: %s; `coloctl resume %llu` "
             "goes on from its newest checkpoint",
             j->spec->resources->time_limit_s, why, (unsigned long long)j->id);
    transition(d, j, COLO_JOB_TIMED_OUT, msg);
  } else if (how ==
             END_CONFIG) { /* the job cannot run as written: another attempt would fail alike */
    snprintf(msg, sizeof msg, "%s; not restarted: the job cannot run as written", why);
    transition(d, j, COLO_JOB_FAILED, msg);
  } else if (how == END_STOPPED) {
    /* not the job's failure: no restart counted, and the first back-off, never doubled (a stop
     * that keeps coming before any step is not restarted in a tight loop). A stop colod asked
     * for (an eviction, a preemption) has none: the job waits for room elsewhere, and keeps its
     * turn among the waiting jobs. */
    int asked = j->evicting;
    snprintf(msg, sizeof msg, "%s; restarting from its checkpoint (not counted as a restart)", why);
    if (transition_as(d, j, COLO_JOB_RESTARTING, msg, 1) == 0)
      restart_after(d, j, asked ? 0 : d->cfg.restart_backoff_ms);
  } else if (j->restarts < j->max_restarts) {
    uint64_t backoff = d->cfg.restart_backoff_ms;
    for (uint32_t i = 0; i < j->restarts && backoff < 60ull * d->cfg.restart_backoff_ms; i++)
      backoff *= 2;
    snprintf(msg, sizeof msg, "%s; restart %u of %u in %llu ms", why, j->restarts + 1,
             j->max_restarts, (unsigned long long)backoff);
    if (transition(d, j, COLO_JOB_RESTARTING, msg) == 0)
      restart_after(d, j, backoff);
  } else {
    snprintf(msg, sizeof msg, "%s; no restarts left (max_restarts=%u)", why, j->max_restarts);
    transition(d, j, COLO_JOB_FAILED, msg);
  }
}

/* A rank failed on a device its worker reports unhealthy: the reason says so, for the user to
 * see that the hardware, not the job, is the likely cause. (The failure counts as a restart all
 * the same, as a dead node's does; the next attempt goes to other devices.) */
static void blame_device(colod_t *d, const colod_job_live_t *j, uint32_t r, char *why, size_t len) {
  const colod_host_live_t *h = colod_host_live(d, j->place[r].host_id);
  uint32_t dev = j->place[r].device_index;
  if (!h || dev >= h->n_devices || !colod_devset_has(&h->sick, dev))
    return;
  size_t n = strlen(why);
  if (n < len)
    snprintf(why + n, len - n, " on device %u of host %s, which its worker reports unhealthy: %s",
             dev, h->name, colod_devset_why(&h->sick, dev));
}

/* A RUNNING attempt: done, failed, or still going. */
static void check_attempt(colod_t *d, colod_job_live_t *j) {
  char why[400] = "";
  uint32_t done = 0;
  /* a rank that failed on the job itself (COLO_EXIT_CONFIG) is the reason, whichever exited */
  int config = 0;
  for (uint32_t r = 0; r < j->world && !config; r++)
    if (j->phase[r] == COLO__V1__RANK_PHASE__RANK_PHASE_EXITED &&
        j->exit_code[r] == COLO_EXIT_CONFIG) {
      config = 1;
      snprintf(why, sizeof why, "rank %u exited with code %d: %s", r, j->exit_code[r], j->why[r]);
    }
  /* ranks that stopped as asked (COLO_EXIT_STOPPED) end it without a failure, unless one did
   * fail */
  char stopped[400] = "";
  int bad = -1; /* the rank that failed */
  for (uint32_t r = 0; r < j->world && !why[0]; r++) {
    colod_host_live_t *h = colod_host_live(d, j->place[r].host_id);
    if (j->phase[r] == COLO__V1__RANK_PHASE__RANK_PHASE_EXITED) {
      if (j->sig[r] == SIGTERM && j->evicting) {
        /* asked to stop before it could catch the signal (still starting): stopped, not failed */
        if (!stopped[0])
          snprintf(stopped, sizeof stopped,
                   "rank %u ended on SIGTERM while starting, before it could save a checkpoint", r);
      } else if (j->sig[r]) {
        snprintf(why, sizeof why, "rank %u was killed by signal %d", r, j->sig[r]);
        bad = (int)r;
      } else if (j->exit_code[r] == COLO_EXIT_STOPPED) {
        if (!stopped[0]) /* the first says where they stopped */
          snprintf(stopped, sizeof stopped, "rank %u %s", r,
                   j->why[r][0] ? j->why[r] : "stopped as asked");
      } else if (j->exit_code[r])
        snprintf(why, sizeof why, "rank %u exited with code %d%s%s", r, j->exit_code[r],
                 j->why[r][0] ? ": " : "", j->why[r]);
      else
        done++;
    } else if (!h || h->state != COLO_HOST_UP) {
      snprintf(why, sizeof why, "host %llu of rank %u is down",
               (unsigned long long)j->place[r].host_id, r);
    }
  }
  if (why[0] && bad >= 0 && !config)
    blame_device(d, j, (uint32_t)bad, why, sizeof why);
  if (why[0]) {
    end_attempt(d, j, why, config ? END_CONFIG : END_FAILED);
  } else if (stopped[0]) {
    end_attempt(d, j, stopped, END_STOPPED);
  } else if (done == j->world) {
    char msg[384]; /* and why rank 0 ended before its last step (an early stop), if it did */
    if (j->world == 1)
      snprintf(msg, sizeof msg, "its rank exited 0%s%s", j->why[0][0] ? ": " : "", j->why[0]);
    else
      snprintf(msg, sizeof msg, "all %u ranks exited 0%s%s", j->world, j->why[0][0] ? ": " : "",
               j->why[0]);
    transition(d, j, COLO_JOB_SUCCEEDED, msg);
  }
}

/* ---- placement ---- */

/* Stops a running attempt's ranks, for `kind` (COLO_STOP_MOVE: an eviction, a preemption;
 * COLO_STOP_TIME_LIMIT): stored with the attempt first, so that a restarted colod goes on with
 * it, then desired nowhere. They save a checkpoint where they stop and exit 75, which ends the
 * attempt as interrupted (a move) or the job TIMED_OUT. */
static int stop_for(colod_t *d, colod_job_live_t *j, const char *why, int kind) {
  if (j->evicting)
    return 0;
  int rc = colo_store_attempt_stop(d->store, j->id, j->attempt, kind);
  if (rc < 0) {
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu attempt %u: cannot store its stop (%s): %s",
             (unsigned long long)j->id, j->attempt, why, colo_store_errmsg(d->store));
    return rc;
  }
  colo_log(COLO_LOG_INFO, "jobs", "job %llu attempt %u: stopping its ranks (%s)",
           (unsigned long long)j->id, j->attempt, why);
  j->evicting = kind;
  nudge_hosts(d, j);
  return 0;
}

/* the host memory each of a job's ranks claims (resources.host_memory_mib), in bytes */
static uint64_t rank_mem(const colod_job_live_t *j) {
  return j->spec->resources->host_memory_mib << 20;
}

/* A snapshot's busy flag of a device its worker reports unfit: taken, whoever gives it back. */
#define SICK 2

/* Marks a placed or running job's devices in a snapshot as taken (1) or given back (0), and the
 * host memory its ranks claim with them. */
static void snap_mark(const colod_job_live_t *j, colo_sched_host_t *hosts, size_t n, int taken) {
  uint64_t mem = rank_mem(j);
  for (uint32_t r = 0; r < j->world; r++) {
    size_t h = colo_sched_find(hosts, n, j->place[r].host_id);
    if (h == n)
      continue;
    uint8_t *b = (uint8_t *)hosts[h].busy + j->place[r].device_index;
    if (j->place[r].device_index < hosts[h].n_devices && *b != SICK)
      *b = (uint8_t)taken;
    if (hosts[h].mem_free == UINT64_MAX)
      continue;
    if (taken)
      hosts[h].mem_free -= hosts[h].mem_free < mem ? hosts[h].mem_free : mem;
    else
      hosts[h].mem_free += mem;
  }
}

/* Why a job waits, logged when it changes. */
static void set_waiting(colod_job_live_t *j, const char *why) {
  if (strcmp(why, j->wait_why) != 0)
    colo_log(COLO_LOG_INFO, "jobs", "job %llu waits: %s", (unsigned long long)j->id, why);
  snprintf(j->wait_why, sizeof j->wait_why, "%s", why);
}

/* Places a waiting job on the snapshot's hosts if it fits, committing the attempt. Returns 1:
 * placed; 0: no room; -1: an error. Says why in `why` when it returns 0 or -1. */
static int place(colod_t *d, colod_job_live_t *j, colo_sched_host_t *hosts, size_t n_hosts,
                 char *why, size_t whylen) {
  colo_rank_place_t *out = calloc(j->world, sizeof *out); /* waiting: the spec's whole world */
  if (!out) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  uint64_t t0 = uv_hrtime();
  uint32_t full = j->spec->parallel->dp, min = j->spec->parallel->min_dp, dp = full;
  int rc = colo_sched_place(hosts, n_hosts, j->pp, dp * j->cp, j->tp,
                            j->spec->resources->devices_per_node, rank_mem(j), out, why, whylen);
  /* elastic: the most data-parallel groups that fit, each count dividing the spec's (why: the
   * whole's reason) */
  while (rc == COLO_EBUSY && min && --dp >= min) {
    char fewer[256];
    if (full % dp == 0)
      rc = colo_sched_place(hosts, n_hosts, j->pp, dp * j->cp, j->tp,
                            j->spec->resources->devices_per_node, rank_mem(j), out, fewer,
                            sizeof fewer);
  }
  if (rc < 0) {
    size_t len = strlen(why);
    if (rc == COLO_EBUSY && min && min < full && len < whylen)
      snprintf(why + len, whylen - len, " (nor %u data-parallel group%s, parallel.min_dp)", min,
               min == 1 ? "" : "s");
    free(out);
    return rc == COLO_EBUSY ? 0 : -1;
  }
  j->wait_why[0] = '\0';
  uint64_t resume = j->state == COLO_JOB_PENDING ? j->resume_step : 0;
  colo_job_t row;
  /* fewer groups (elastic): load_attempt takes the attempt's dp from its stored ranks, as after
   * a colod restart */
  rc = colo_store_attempt_begin(d->store, j->id, out, dp * j->cp * j->tp * j->pp, resume,
                                colod_now_ms(), &row);
  free(out);
  if (rc < 0) {
    snprintf(why, whylen, "cannot begin an attempt: %s", colo_store_errmsg(d->store));
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu: %s", (unsigned long long)j->id, why);
    return -1;
  }
  d->stats.entered[COLO_JOB_RUNNING]++;
  j->state = row.state;
  j->attempt = row.attempt;
  colod_watch_notify(d, &row);
  colo_job_clear(&row);
  if (load_attempt(d, j) < 0) {
    snprintf(why, whylen, "cannot load its attempt %u", j->attempt);
    return -1;
  }
  j->launch_resume_step = resume;
  j->has_progress = 0;
  nudge_hosts(d, j);
  if (resume) /* a new line of checkpoints from the chosen one */
    j->ck_step = resume;
  colo_log(COLO_LOG_INFO, "jobs",
           "job %llu attempt %u: %u ranks placed in %.3f ms (stored), rendezvous %s%s",
           (unsigned long long)j->id, j->attempt, j->world, (double)(uv_hrtime() - t0) / 1e6,
           j->rendezvous, resume ? ", resuming from a chosen step" : "");
  if (j->run_spec)
    colo_log(COLO_LOG_INFO, "jobs",
             "job %llu attempt %u: elastic: %u of its %u data-parallel groups fit, each with "
             "train.grad_accum=%u (the same global batch)",
             (unsigned long long)j->id, j->attempt, j->dp, full, j->run_spec->train->grad_accum);
  return 1;
}

/* 1 when the host has every label the job asks for (resources.host_labels). */
static int has_labels(const colod_host_live_t *h, const colod_job_live_t *j) {
  const Colo__V1__ResourceSpec *r = j->spec->resources;
  for (size_t i = 0; i < r->n_host_labels; i++) {
    char want[COLO_MAX_LABEL + 3];
    snprintf(want, sizeof want, ",%s,", r->host_labels[i]);
    if (!strstr(h->labels, want))
      return 0;
  }
  return 1;
}

/* The snapshot's hosts the job may run on, by index: of its kind of device, with its labels. */
static size_t fit_hosts(colod_t *d, const colod_job_live_t *j, const colo_sched_host_t *hosts,
                        size_t n, size_t *idx) {
  size_t nf = 0;
  for (size_t h = 0; h < n; h++) {
    colod_host_live_t *hl = colod_host_live(d, hosts[h].host_id);
    if (hl && hl->device_kind == (int)j->spec->resources->device && has_labels(hl, j))
      idx[nf++] = h;
  }
  return nf;
}

/* The jobs that hold devices (RUNNING and placed), gathered once a pass and added to as it places
 * more: preemption and reservations look at them for each waiting job, and walking every live job
 * instead took 30 ms a pass with 1,000 waiting jobs. */
typedef struct {
  colod_job_live_t **v;
  size_t n;
} running_t;

/* A trial placement of a waiting job on a copy of the snapshot, with some running jobs gone:
 * what it is tried against, and its scratch space, allocated once for all the trials of one
 * decision (an allocation a trial cost more than the trial at 1,000 hosts). */
typedef struct {
  colod_t *d;
  const colod_job_live_t *w;
  const running_t *running;
  const colo_sched_host_t *hosts; /* the snapshot */
  size_t n;
  const uint8_t *busy; /* the snapshot's device flags, `total` of them */
  size_t total;
  colod_job_live_t **jobs; /* the running jobs a trial may count gone: those marked in freed */
  uint8_t *freed;
  size_t n_jobs;
  colo_rank_place_t *out; /* the last trial's placement */
  size_t *order;          /* the snapshot's hosts of the job's device kind and labels */
  size_t n_order;
  colo_sched_host_t *copy, *fit; /* scratch: n each */
  uint8_t *tb;                   /* scratch: total */
} trial_t;

static int trial_init(trial_t *t, colod_t *d, const colod_job_live_t *w, const running_t *running,
                      const colo_sched_host_t *hosts, size_t n, const uint8_t *busy, size_t total,
                      colod_job_live_t **jobs, uint8_t *freed, size_t n_jobs) {
  *t = (trial_t){d, w, running, hosts, n, busy, total, jobs, freed, n_jobs};
  size_t m = n ? n : 1;
  t->out = calloc(w->world, sizeof *t->out);
  t->order = calloc(m, sizeof *t->order);
  t->copy = calloc(m, sizeof *t->copy);
  t->fit = calloc(m, sizeof *t->fit);
  t->tb = malloc(total ? total : 1);
  if (!t->out || !t->order || !t->copy || !t->fit || !t->tb)
    return COLO_ENOMEM;
  t->n_order = fit_hosts(d, w, hosts, n, t->order);
  return 0;
}

static void trial_free(trial_t *t) {
  free(t->out);
  free(t->order);
  free(t->copy);
  free(t->fit);
  free(t->tb);
}

/* Would the job fit if the running jobs marked in t->freed (and those already stopping) were
 * gone? Its placement is left in t->out. */
static int fits_without(trial_t *t) {
  const colo_sched_host_t *hosts = t->hosts;
  size_t n = t->n;
  memcpy(t->tb, t->busy, t->total);
  for (size_t h = 0; h < n; h++) {
    t->copy[h] = hosts[h];
    t->copy[h].busy = t->tb + (hosts[h].busy - t->busy);
  }
  for (size_t i = 0; i < t->running->n; i++)
    if (t->running->v[i]->evicting)
      snap_mark(t->running->v[i], t->copy, n, 0);
  for (size_t v = 0; v < t->n_jobs; v++)
    if (t->freed[v])
      snap_mark(t->jobs[v], t->copy, n, 0);
  for (size_t i = 0; i < t->n_order; i++)
    t->fit[i] = t->copy[t->order[i]];
  const colod_job_live_t *w = t->w;
  char why[256];
  return colo_sched_place(t->fit, t->n_order, w->pp, w->dp * w->cp, w->tp,
                          w->spec->resources->devices_per_node, rank_mem(w), t->out, why,
                          sizeof why) == 0;
}

/* The fewest of t->jobs, taken in their order from the first (at least `lo`), whose going would
 * let the job fit, where all of them going does: by bisection, since freeing more devices never
 * makes a placement fail (colo_sched_place places whenever the hosts hold enough whole groups).
 * Counts its trials; leaves t->freed as its last trial left it. */
static size_t shortest_prefix(trial_t *t, size_t lo, size_t *trials) {
  size_t k = t->n_jobs;
  while (lo < k) {
    size_t mid = lo + (k - lo) / 2;
    for (size_t i = 0; i < t->n_jobs; i++)
      t->freed[i] = i < mid;
    ++*trials;
    if (fits_without(t))
      k = mid;
    else
      lo = mid + 1;
  }
  return k;
}

/* lowest priority first, then newest first */
static int victim_order(const void *a, const void *b) {
  const colod_job_live_t *x = *(colod_job_live_t *const *)a, *y = *(colod_job_live_t *const *)b;
  if (x->spec->priority != y->spec->priority)
    return x->spec->priority < y->spec->priority ? -1 : 1;
  return x->id > y->id ? -1 : x->id < y->id;
}

/* A waiting job that found no room: stops the fewest running jobs of lower priority (lowest
 * first, then newest) whose devices would let it be placed. Jobs already stopping count as gone.
 * Returns how many jobs it waits for (stopped now or stopping already); 0: preemption would not
 * place it, and nothing was stopped. */
static uint32_t preempt_for(colod_t *d, colod_job_live_t *w, const running_t *running,
                            const colo_sched_host_t *hosts, size_t n, const uint8_t *busy,
                            size_t total) {
  size_t nv = running->n, stopping = 0;
  colod_job_live_t **v = calloc(nv ? nv : 1, sizeof *v);
  uint8_t *freed = calloc(nv ? nv : 1, 1);
  uint32_t waits = 0;
  trial_t t;
  if (trial_init(&t, d, w, running, hosts, n, busy, total, v, freed, 0) < 0 || !v || !freed)
    goto done;
  nv = 0;
  for (size_t i = 0; i < running->n; i++) {
    colod_job_live_t *j = running->v[i];
    if (j->evicting) {
      stopping++;
      continue;
    }
    if (j->spec->priority < w->spec->priority)
      v[nv++] = j;
  }
  qsort(v, nv, sizeof *v, victim_order);
  if (stopping && fits_without(&t)) {
    waits = (uint32_t)stopping; /* what is stopping already makes room */
    goto done;
  }
  /* one trial with every candidate gone rules preemption out */
  uint64_t t0 = uv_hrtime();
  size_t trials = 1;
  memset(freed, 1, nv);
  t.n_jobs = nv;
  if (!nv || !fits_without(&t))
    goto done;
  size_t k = shortest_prefix(&t, 1, &trials);
  for (size_t i = 0; i < nv; i++)
    freed[i] = i < k;
  /* as few as do: give back, newest choice first, those it fits without */
  for (size_t i = k - 1; i-- > 0;) {
    freed[i] = 0;
    trials++;
    if (!fits_without(&t))
      freed[i] = 1;
  }
  uint32_t chosen = 0;
  for (size_t i = 0; i < k; i++)
    chosen += freed[i];
  colo_log(COLO_LOG_INFO, "jobs",
           "job %llu preempts %u job%s: chosen among %zu of lower priority in %zu trials, %.3f ms",
           (unsigned long long)w->id, chosen, chosen == 1 ? "" : "s", nv, trials,
           (double)(uv_hrtime() - t0) / 1e6);
  for (size_t i = 0; i < k; i++) {
    if (!freed[i])
      continue;
    char why[160];
    snprintf(why, sizeof why, "preempted by job %llu, priority %d over %d",
             (unsigned long long)w->id, w->spec->priority, v[i]->spec->priority);
    if (stop_for(d, v[i], why, COLO_STOP_MOVE) == 0) {
      waits++;
      d->stats.preempted++;
    }
  }
  waits += (uint32_t)stopping;
done:
  trial_free(&t);
  free(v);
  free(freed);
  return waits;
}

/* When a running job will have given its devices back at the latest (Unix ms): the end of its
 * attempt's time limit, or INT64_MAX when it has none. */
static int64_t end_bound(const colod_job_live_t *j) {
  uint32_t limit = j->spec->resources->time_limit_s;
  return limit ? j->started_ms + (int64_t)limit * 1000 : INT64_MAX;
}

/* When a running job should reach its last step (Unix ms), at its speed since the first progress
 * record of its attempt colod took; INT64_MAX where that is not known yet. An estimate: it
 * chooses where a job holds room, and never lets one take a held device. */
static int64_t end_estimate(const colod_job_live_t *j) {
  const Colo__V1__Progress *p = &j->progress;
  if (!j->has_progress || !p->has_time_ms || !p->has_total_steps || !j->first_ms ||
      p->step <= j->first_step || p->time_ms <= j->first_ms)
    return INT64_MAX;
  if (p->step >= p->total_steps)
    return p->time_ms;
  double ms = (double)(p->total_steps - p->step) * (double)(p->time_ms - j->first_ms) /
              (double)(p->step - j->first_step);
  return ms < 3e11 ? p->time_ms + (int64_t)ms : INT64_MAX; /* past ten years: not known */
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* A reservation (plan.h): a waiting job that neither fits nor can preempt holds room on the hosts
 * idx[0..nf) where it can start soonest, as the time limits of the jobs there end, so the jobs
 * after it take only what it cannot use before then. The first job to wait may hold room whose
 * start is not known (it waits for jobs without a time limit): where the running jobs' progress
 * says it should start soonest, or, before they say, on the hosts with the most free devices
 * now. Those after it hold only with a known start. An elastic job (parallel.min_dp) holds room
 * for the fewest data-parallel groups it may start with, as place() takes them: it starts as
 * soon as those fit, with more where more do then, and grows to all of them later. Returns 1
 * with what is held in `what`; 0: nothing held. */
static int reserve(colod_t *d, colod_job_live_t *w, colo_plan_t *p, const size_t *idx, size_t nf,
                   char *what, size_t whatlen) {
  uint32_t full = w->spec->parallel->dp, dp = full, min = w->spec->parallel->min_dp;
  for (uint32_t k = min ? min : full; k < full; k++)
    if (full % k == 0) { /* the fewest groups place() would take */
      dp = k;
      break;
    }
  uint32_t world = dp * w->cp * w->tp * w->pp;
  colo_rank_place_t *out = calloc(world, sizeof *out);
  uint64_t *ids = calloc(world, sizeof *ids);
  int rc = 0;
  if (!out || !ids)
    goto done;
  const Colo__V1__ResourceSpec *res = w->spec->resources;
  rc = colo_plan_reserve(p, w->id, idx, nf, w->pp, dp * w->cp, w->tp, res->devices_per_node,
                         rank_mem(w), (int64_t)res->time_limit_s * 1000,
                         colo_plan_job_holds(p) == 0, out);
  if (rc <= 0)
    goto done;
  const colo_hold_t *h = &p->holds[p->n_holds - 1];
  w->holds = 1;
  w->start_by = h->start;
  w->expect = h->expect;
  for (uint32_t r = 0; r < world; r++)
    ids[r] = out[r].host_id;
  qsort(ids, world, sizeof *ids, cmp_u64); /* the snapshot's order */
  size_t len = 0, named = 0;
  what[0] = '\0';
  for (uint32_t r = 0; r < world; r++) {
    if (r && ids[r] == ids[r - 1])
      continue;
    const colod_host_live_t *hl = colod_host_live(d, ids[r]);
    if (named++ < 4 && len < whatlen)
      len += (size_t)snprintf(what + len, whatlen - len, "%s%s", named > 1 ? ", " : "",
                              hl ? hl->name : "?");
  }
  if (named > 4 && len < whatlen)
    len += (size_t)snprintf(what + len, whatlen - len, " and %zu more", named - 4);
  if (len < whatlen)
    len += (size_t)snprintf(what + len, whatlen - len, " (%u free device%s there now)", h->n_free,
                            h->n_free == 1 ? "" : "s");
  if (dp < full && len < whatlen)
    len += (size_t)snprintf(what + len, whatlen - len,
                            ", for %u of its %u data-parallel groups (parallel.min_dp)", dp, full);
  if (h->start != INT64_MAX && len < whatlen) {
    char at[32];
    colod_fmt_utc(h->start, at, sizeof at);
    snprintf(what + len, whatlen - len,
             "; it starts by %s at the latest, as the time limits of the jobs before it end", at);
  } else if (h->expect != INT64_MAX && len < whatlen) {
    char at[32];
    colod_fmt_utc(h->expect, at, sizeof at);
    snprintf(what + len, whatlen - len,
             "; it should start about %s, as the jobs before it reach their last step at their "
             "speed so far",
             at);
  }
  rc = 1;
done:
  free(out);
  free(ids);
  return rc;
}

/* For a waiting job's reason: the free devices holds keep from it, and whose. */
static void held_note(colod_t *d, const colo_plan_t *p, const colo_plan_taken_t *t, char *buf,
                      size_t len) {
  const colo_hold_t *h = &p->holds[t->first];
  char whose[160], at[32] = "";
  if (h->start != INT64_MAX)
    colod_fmt_utc(h->start, at, sizeof at);
  if (!h->job_id) {
    const colod_host_live_t *hl = colod_host_live(d, p->hosts[h->host].host_id);
    snprintf(whose, sizeof whose, "the maintenance of %s from %s", hl ? hl->name : "?", at);
  } else {
    snprintf(whose, sizeof whose, "job %llu%s%s", (unsigned long long)h->job_id,
             at[0] && t->holders == 1 ? " until " : "", t->holders == 1 ? at : "");
  }
  char more[48] = "";
  if (t->holders > 1)
    snprintf(more, sizeof more, " and %u more hold%s", t->holders - 1, t->holders > 2 ? "s" : "");
  snprintf(buf, len, " (%u device%s held for %s%s not counted)", t->devices,
           t->devices == 1 ? "" : "s", whose, more);
}

/* Whether a PENDING job still waits for a job in its `after` to succeed (or, with
 * after_condition ended, to end) or for its train.init_from_job to succeed, saying which in
 * `why`. Once all have, it never waits for them again. `never` says why the job waited for can
 * no longer do so by itself (it ended otherwise, or was deleted first), or is left empty. */
static int waits_after(colod_t *d, colod_job_live_t *j, char *why, size_t len, char *never,
                       size_t never_len) {
  never[0] = '\0';
  const Colo__V1__TrainSpec *t = j->spec->train;
  uint64_t from = t->has_init_from_job ? t->init_from_job : 0;
  size_t n = j->spec->n_after + (from != 0); /* the weights' job is waited for too */
  int any_end = j->spec->after_condition == COLO__V1__AFTER_CONDITION__AFTER_CONDITION_ENDED;
  for (size_t i = 0; i < n && !j->after_met; i++) {
    int in_after = i < j->spec->n_after;
    uint64_t id = in_after ? j->spec->after[i] : from;
    const colod_job_live_t *o = live_find(d, id);
    int state = o ? o->state : 0;
    const char *goal = in_after && any_end ? "end" : "succeed";
    if (!o) { /* not live: it has ended */
      colo_job_t row;
      int rc = colo_store_job_get(d->store, id, &row);
      /* only an ended job is deleted: what it ended as is not known, but an end is all an
       * after_condition of ended asks, and a job that ran had its wait over then */
      if (rc == COLO_ENOENT && (j->attempt > 0 || (in_after && any_end)))
        continue;
      if (rc == COLO_ENOENT) {
        snprintf(why, len,
                 "waits for job %llu, which was deleted before this job started: it can never "
                 "start (cancel it)",
                 (unsigned long long)id);
        snprintf(never, never_len, "job %llu, which it waited for, was deleted before it started",
                 (unsigned long long)id);
        return 1;
      }
      if (rc < 0) {
        snprintf(why, len, "waits for job %llu to %s (its state cannot be read: %s)",
                 (unsigned long long)id, goal, colo_store_errmsg(d->store));
        return 1;
      }
      state = row.state;
      colo_job_clear(&row);
    }
    if (state == COLO_JOB_SUCCEEDED || (in_after && any_end && colo_job_state_terminal(state)))
      continue;
    size_t left = n - i - 1;
    char more[48] = "";
    if (left)
      snprintf(more, sizeof more, "; %zu more in its after not checked yet", left);
    if (colo_job_state_terminal(state)) {
      snprintf(why, len,
               "waits for job %llu to succeed: it ended %s, and starts only if that job is "
               "resumed and succeeds (or cancel this one)%s",
               (unsigned long long)id, colo_job_state_name(state), more);
      snprintf(never, never_len, "job %llu, which it waited for to succeed, ended %s",
               (unsigned long long)id, colo_job_state_name(state));
    } else
      snprintf(why, len, "waits for job %llu to %s (it is %s)%s", (unsigned long long)id, goal,
               colo_job_state_name(state), more);
    return 1;
  }
  j->after_met = 1;
  return 0;
}

/* the order waiting jobs are offered room: highest priority first; then, with fair share, the
 * job whose owner used the fewest weighed device hours of its kind of device; then oldest */
static int wait_order(const void *a, const void *b) {
  const colod_job_live_t *x = *(colod_job_live_t *const *)a, *y = *(colod_job_live_t *const *)b;
  if (x->spec->priority != y->spec->priority)
    return x->spec->priority > y->spec->priority ? -1 : 1;
  if (x->share != y->share)
    return x->share < y->share ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Each waiting job's share (fairshare.h), where it can change the order: with a half-life, and
 * jobs of two owners (or accounts, with fair_share_by account) waiting. Otherwise (one owner, or
 * none under plain TLS) the store is not read and the order is priority, then age. */
static void fair_shares(colod_t *d, colod_job_live_t **waiting, size_t n) {
  int by_account = colod_fair_by_account(d), owners = 0;
#define WHOSE(j) (by_account ? ((j)->spec->account ? (j)->spec->account : "") : (j)->owner)
  for (size_t i = 1; i < n && !owners; i++)
    owners = strcmp(WHOSE(waiting[i]), WHOSE(waiting[0])) != 0;
  owners = owners && d->cfg.fair_share_half_life_ms && colod_fair_refresh(d) == 0;
  for (size_t i = 0; i < n; i++)
    waiting[i]->share =
        owners ? colod_fair_key(d, WHOSE(waiting[i]), (int)waiting[i]->spec->resources->device) : 0;
#undef WHOSE
}

/* The devices each owner's (or account's) running jobs hold in a pass, against
 * owner_max_devices (account_max_devices). */
typedef struct {
  const char *key; /* the owner, or the account */
  uint32_t used, limit;
} device_use_t;

typedef struct {
  device_use_t *v; /* NULL: no limit (none set, or out of memory: none applied this pass) */
  size_t n;
  int by_account;
} device_uses_t;

static const char *account_of(const colod_job_live_t *j) {
  return j->spec->account ? j->spec->account : "";
}

/* The owner's or account's slot (v has room for one per live job). */
static device_use_t *device_use(colod_t *d, device_uses_t *u, const colod_job_live_t *j) {
  if (!u->v)
    return NULL;
  const char *key = u->by_account ? account_of(j) : j->owner;
  for (size_t i = 0; i < u->n; i++)
    if (!strcmp(u->v[i].key, key))
      return &u->v[i];
  uint32_t limit = u->by_account ? colod_config_account_max_devices(&d->cfg, key)
                                 : colod_config_owner_max_devices(&d->cfg, key);
  u->v[u->n] = (device_use_t){key, 0, limit};
  return &u->v[u->n++];
}

/* With the limit set: the devices each owner's (account's) running jobs hold. */
static device_uses_t device_uses(colod_t *d, int by_account) {
  device_uses_t u = {NULL, 0, by_account};
  if (!(by_account ? d->cfg.account_max_devices : d->cfg.owner_max_devices)[0])
    return u;
  size_t live = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    live++;
  u.v = calloc(live ? live : 1, sizeof *u.v);
  for (colod_job_live_t *j = d->jobs; j && u.v; j = j->next)
    if (j->state == COLO_JOB_RUNNING && j->place)
      device_use(d, &u, j)->used += j->world;
  return u;
}

/* Whether placing the job now would pass its owner's or its account's device limit, saying
 * which in why. */
static int over_limit(const colod_job_live_t *j, const device_use_t *mine, const device_use_t *acct,
                      char *why, size_t len) {
  if (mine && (uint64_t)mine->used + j->world > mine->limit) {
    snprintf(why, len,
             "waits for its owner's devices: %s%s hold %u of the %u devices owner_max_devices "
             "allows %s at once, and it needs %u",
             j->owner[0] ? j->owner : "running jobs", j->owner[0] ? "'s running jobs" : "",
             mine->used, mine->limit, j->owner[0] ? j->owner : "their owner", j->world);
    return 1;
  }
  if (acct && (uint64_t)acct->used + j->world > acct->limit) {
    const char *a = account_of(j);
    snprintf(why, len,
             "waits for its account's devices: the running jobs %s%s hold %u of the %u devices "
             "account_max_devices allows at once, and it needs %u",
             a[0] ? "of account " : "without an account", a, acct->used, acct->limit, j->world);
    return 1;
  }
  return 0;
}

/* A held job's reason to wait. */
static void held_why(const colod_job_live_t *j, char *why, size_t len) {
  snprintf(why, len, "held by %s%s%s; it is placed once released (coloctl release %llu)",
           j->hold == COLO_HOLD_ADMIN ? "an admin" : "its owner", j->hold_reason[0] ? ": " : "",
           j->hold_reason, (unsigned long long)j->id);
}

enum { KINDS = COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU + 1 }; /* of devices */

/* A snapshot of the hosts that can take ranks: UP, and done stopping earlier attempts; *hosts
 * and *busy (every host's devices, *total of them) to free, *hosts NULL when out of memory.
 * Counts, by device kind, the UP hosts an operator took out, and the devices their workers report
 * unfit (marked SICK: snap_mark leaves them taken), for the waiting jobs' reasons. Returns how
 * many hosts it holds. */
static size_t snapshot(colod_t *d, colo_sched_host_t **hosts_out, uint8_t **busy_out, size_t *total,
                       uint32_t cordoned[KINDS], uint32_t sick[KINDS]) {
  *total = 0;
  for (size_t i = 0; i < d->n_hosts; i++)
    *total += d->hosts[i].n_devices;
  colo_sched_host_t *hosts = calloc(d->n_hosts ? d->n_hosts : 1, sizeof *hosts);
  uint8_t *busy = calloc(*total ? *total : 1, 1);
  *hosts_out = hosts;
  *busy_out = busy;
  if (!hosts || !busy) {
    free(hosts);
    free(busy);
    *hosts_out = NULL;
    *busy_out = NULL;
    return 0;
  }
  size_t n = 0, off = 0;
  for (size_t i = 0; i < d->n_hosts; i++) {
    colod_host_live_t *h = &d->hosts[i];
    uint8_t *b = busy + off;
    off += h->n_devices;
    if (h->state == COLO_HOST_UP && h->cordoned && h->device_kind >= 0 && h->device_kind < KINDS)
      cordoned[h->device_kind]++;
    if (h->state != COLO_HOST_UP || h->draining > 0 || h->n_devices == 0 || h->cordoned ||
        h->stopping)
      continue;
    hosts[n].host_id = h->id;
    hosts[n].n_devices = h->n_devices;
    hosts[n].busy = b;
    hosts[n].mem_free = h->memory_bytes ? h->memory_bytes : UINT64_MAX;
    hosts[n].slow = h->slow.n ? h->slow.bits : NULL; /* taken last */
    n++;
    for (uint32_t k = 0; h->sick.n && k < h->n_devices; k++)
      if (colod_devset_has(&h->sick, k)) {
        b[k] = SICK;
        if (h->device_kind >= 0 && h->device_kind < KINDS)
          sick[h->device_kind]++;
      }
  }
  return n;
}

/* Elastic jobs (parallel.min_dp) that run with fewer data-parallel groups than their spec asks
 * go back to all of them once there is room: with every running job's devices taken but theirs,
 * the spec's dp fits, and their attempt has run elastic_grow_after. Their ranks stop at a step
 * with a checkpoint (a move, not counted as a restart) and the next pass places the whole. Not
 * while a job waits for room (it is offered room first), and one job a pass. */
static void grow_back(colod_t *d) {
  int64_t now_ms = colod_now_ms();
  colod_job_live_t *cand = NULL;
  for (colod_job_live_t *j = d->jobs; j; j = j->next) {
    if ((j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING) && j->in_line)
      return;
    if (!cand && j->state == COLO_JOB_RUNNING && j->place && !j->evicting && j->run_spec &&
        now_ms - j->started_ms >= (int64_t)d->cfg.elastic_grow_after_ms)
      cand = j;
  }
  if (!cand)
    return;
  colo_sched_host_t *hosts, *fit;
  uint8_t *busy;
  size_t total, *idx;
  uint32_t cordoned[KINDS] = {0}, sick[KINDS] = {0};
  size_t n = snapshot(d, &hosts, &busy, &total, cordoned, sick);
  uint32_t full = cand->spec->parallel->dp;
  colo_rank_place_t *out = calloc((size_t)full * cand->cp * cand->tp * cand->pp, sizeof *out);
  fit = calloc(n ? n : 1, sizeof *fit);
  idx = calloc(n ? n : 1, sizeof *idx);
  if (hosts && out && fit && idx) {
    for (colod_job_live_t *j = d->jobs; j; j = j->next)
      if (j->state == COLO_JOB_RUNNING && j->place && j != cand)
        snap_mark(j, hosts, n, 1);
    size_t nf = fit_hosts(d, cand, hosts, n, idx);
    for (size_t h = 0; h < nf; h++)
      fit[h] = hosts[idx[h]];
    char why[256];
    if (colo_sched_place(fit, nf, cand->pp, full * cand->cp, cand->tp,
                         cand->spec->resources->devices_per_node, rank_mem(cand), out, why,
                         sizeof why) == 0) {
      snprintf(why, sizeof why, "elastic: room for all %u data-parallel groups again, from %u",
               full, cand->dp);
      stop_for(d, cand, why, COLO_STOP_MOVE);
    }
  }
  free(out);
  free(fit);
  free(idx);
  free(hosts);
  free(busy);
}

/* cancel_on_dependency_failure: a job waited for ended otherwise (why: waits_after's `never`).
 * Jobs that wait for this one see it CANCELLED on the next pass, which the kick brings. */
static void cancel_for_dependency(colod_t *d, colod_job_live_t *j, const char *why) {
  char msg[256];
  snprintf(msg, sizeof msg, "cancelled (cancel_on_dependency_failure): %s", why);
  if (transition(d, j, COLO_JOB_CANCELLED, msg) == 0)
    colod_jobs_kick(d);
}

static void schedule(colod_t *d) {
  uint64_t now = colod_mono_ms(d), t0 = uv_hrtime();
  size_t n_wait = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    if ((j->state == COLO_JOB_PENDING ||
         (j->state == COLO_JOB_RESTARTING && now >= j->not_before_mono_ms)))
      n_wait++;
  if (!n_wait)
    return;
  colod_job_live_t **waiting = calloc(n_wait, sizeof *waiting);
  if (!waiting)
    return;
  n_wait = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next) {
    char why[sizeof j->wait_why], never[160];
    j->holds = 0;
    if (j->hold && (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING)) {
      held_why(j, why, sizeof why);
      set_waiting(j, why); /* not a candidate either, until released */
      j->in_line = 0;
    } else if (j->state == COLO_JOB_PENDING &&
               waits_after(d, j, why, sizeof why, never, sizeof never)) {
      set_waiting(j, why); /* not a candidate: it neither holds room nor preempts */
      j->in_line = 0;
      if (never[0] && j->spec->cancel_on_dependency_failure)
        cancel_for_dependency(d, j, never);
    } else if ((j->state == COLO_JOB_PENDING ||
                (j->state == COLO_JOB_RESTARTING && now >= j->not_before_mono_ms)))
      waiting[n_wait++] = j;
  }
  if (!n_wait) {
    free(waiting);
    return;
  }
  fair_shares(d, waiting, n_wait);
  qsort(waiting, n_wait, sizeof *waiting, wait_order);
  /* a snapshot of the hosts that can take ranks: UP, and done stopping earlier attempts */
  colo_sched_host_t *hosts;
  uint8_t *busy;
  size_t total;
  uint32_t cordoned[KINDS] = {0}, sick[KINDS] = {0};
  size_t n = snapshot(d, &hosts, &busy, &total, cordoned, sick);
  if (!hosts) {
    free(waiting);
    return;
  }
  size_t n_run = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    n_run += j->state == COLO_JOB_RUNNING && j->place;
  running_t running = {calloc(n_run + n_wait, sizeof *running.v), 0}; /* and those placed now */
  /* the devices' future (plan.h): free as the time limits of the jobs on them end, and held */
  int64_t now_ms = colod_now_ms();
  colo_plan_t plan;
  int planned = colo_plan_init(&plan, hosts, n, busy, total, now_ms, d->cfg.reservations) == 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next) {
    if (j->state != COLO_JOB_RUNNING || !j->place)
      continue;
    snap_mark(j, hosts, n, 1);
    if (running.v)
      running.v[running.n++] = j;
    int64_t until = j->evicting ? now_ms : end_bound(j); /* stopping: gone as soon as it can be */
    if (planned &&
        colo_plan_claim(&plan, j->place, j->world, rank_mem(j), until, end_estimate(j)) < 0)
      planned = 0;
  }
  /* hosts to be cordoned (a maintenance): jobs placed there must end by then */
  for (size_t h = 0; planned && h < n; h++) {
    colod_host_live_t *hl = colod_host_live(d, hosts[h].host_id);
    if (hl && hl->cordon_at_ms)
      colo_plan_block(&plan, h, hl->cordon_at_ms);
  }
  uint8_t *view = malloc(total ? total : 1);
  colo_sched_host_t *fit = calloc(n ? n : 1, sizeof *fit);
  size_t *idx = calloc(n ? n : 1, sizeof *idx);
  device_uses_t owners = device_uses(d, 0), accounts = device_uses(d, 1);
  uint32_t tries = 0; /* jobs that tried to hold room: the first `reservations` that cannot start */
  for (size_t i = 0; i < n_wait; i++)
    waiting[i]->over_limit = 0;
  for (size_t i = 0; i < n_wait && view && fit && idx && running.v && planned; i++) {
    colod_job_live_t *j = waiting[i];
    device_use_t *mine = device_use(d, &owners, j), *acct = device_use(d, &accounts, j);
    char limit_why[sizeof j->wait_why];
    j->over_limit = over_limit(j, mine, acct, limit_why, sizeof limit_why);
    if (j->over_limit) { /* not placed, and neither holds room nor preempts */
      set_waiting(j, limit_why);
      continue;
    }
    /* only hosts of the kind of device the job asks for, with its labels */
    int kind = (int)j->spec->resources->device;
    size_t nf = fit_hosts(d, j, hosts, n, idx);
    const Colo__V1__ResourceSpec *res = j->spec->resources;
    if (!nf && res->n_host_labels) { /* none to take room on, or to preempt on */
      char why[sizeof j->wait_why];
      size_t len = (size_t)snprintf(why, sizeof why,
                                    "no room: no host open to new ranks has its kind of device "
                                    "and the label%s",
                                    res->n_host_labels == 1 ? "" : "s");
      for (size_t k = 0; k < res->n_host_labels && len < sizeof why; k++)
        len += (size_t)snprintf(why + len, sizeof why - len, "%s %s", k ? "," : "",
                                res->host_labels[k]);
      if (len < sizeof why)
        snprintf(why + len, sizeof why - len, " (coloctl hosts: each host's labels)");
      set_waiting(j, why);
      continue;
    }
    /* held devices it may use: those whose hold starts after its time limit ends */
    int64_t ends = res->time_limit_s ? now_ms + (int64_t)res->time_limit_s * 1000 : INT64_MAX;
    colo_plan_taken_t taken = colo_plan_view(&plan, ends, idx, nf, view);
    const uint8_t *flags = plan.n_held ? view : busy;
    for (size_t h = 0; h < nf; h++) {
      fit[h] = hosts[idx[h]];
      fit[h].busy = flags + (hosts[idx[h]].busy - busy);
    }
    char why[sizeof j->wait_why];
    int rc = place(d, j, fit, nf, why, sizeof why);
    if (rc > 0) { /* taken for the jobs placed after it */
      if (mine)
        mine->used += j->world;
      if (acct)
        acct->used += j->world;
      snap_mark(j, hosts, n, 1);
      running.v[running.n++] = j;
      if (colo_plan_claim(&plan, j->place, j->world, rank_mem(j), ends, ends) < 0)
        planned = 0;
      continue;
    }
    size_t len = strlen(why);
    uint32_t nc = kind >= 0 && kind < KINDS ? cordoned[kind] : 0;
    if (rc == 0 && nc && len < sizeof why)
      len += (size_t)snprintf(why + len, sizeof why - len, " (%u cordoned host%s not counted)", nc,
                              nc == 1 ? "" : "s");
    uint32_t ns = kind >= 0 && kind < KINDS ? sick[kind] : 0;
    if (rc == 0 && ns && len < sizeof why)
      len += (size_t)snprintf(why + len, sizeof why - len, " (%u unhealthy device%s not counted)",
                              ns, ns == 1 ? "" : "s");
    if (rc == 0 && taken.devices && len < sizeof why) {
      held_note(d, &plan, &taken, why + len, sizeof why - len);
      len = strlen(why);
    }
    if (rc < 0) {
      set_waiting(j, why);
      continue;
    }
    /* preemption only for the first to wait: behind a reservation, jobs hold room in turn */
    int first = colo_plan_job_holds(&plan) == 0;
    uint32_t waits = nf && first ? preempt_for(d, j, &running, hosts, n, busy, total) : 0;
    if (waits) {
      snprintf(why, sizeof why, "waits for %u stopping job%s to make room", waits,
               waits == 1 ? "" : "s");
      set_waiting(j, why);
      break; /* the room it waits for is not given to the jobs after it */
    }
    char what[384];
    if (nf && tries++ < d->cfg.reservations && reserve(d, j, &plan, idx, nf, what, sizeof what) &&
        len < sizeof why)
      snprintf(why + len, sizeof why - len, "; its room is held on %s", what);
    set_waiting(j, why);
  }
  d->stats.holds = (uint32_t)colo_plan_job_holds(&plan);
  colo_plan_free(&plan);
  free(view);
  free(fit);
  free(idx);
  free(running.v);
  free(owners.v);
  free(accounts.v);
  /* the places in line of those still waiting (not for their owner's devices), for their status */
  uint32_t k = 0;
  for (size_t i = 0; i < n_wait; i++) {
    colod_job_live_t *j = waiting[i];
    j->in_line = (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING) && !j->over_limit
                     ? ++k
                     : 0;
  }
  d->jobs_in_line = k;
  uint64_t took = uv_hrtime() - t0;
  d->stats.sched_passes++;
  d->stats.sched_ns += took;
  colo_log(COLO_LOG_DEBUG, "jobs", "scheduling pass: %zu waiting jobs, %zu hosts, %.3f ms", n_wait,
           n, (double)took / 1e6);
  free(waiting);
  free(hosts);
  free(busy);
}

/* Stops an attempt that has run for its job's resources.time_limit_s. */
static void check_time_limit(colod_t *d, colod_job_live_t *j) {
  uint32_t limit = j->spec->resources->time_limit_s;
  if (!limit || j->evicting || colod_now_ms() - j->started_ms < (int64_t)limit * 1000)
    return;
  char why[96];
  snprintf(why, sizeof why, "its time limit of %u s is reached", limit);
  stop_for(d, j, why, COLO_STOP_TIME_LIMIT);
}

void colod_jobs_tick(colod_t *d) {
  sync_jobs(d);
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    if (j->state == COLO_JOB_RUNNING && j->place) {
      check_time_limit(d, j);
      check_attempt(d, j);
    }
  schedule(d);
  grow_back(d);
}

/* how long after a restart's back-off ends the workers beat again: placement takes about a
 * millisecond (bench/coordinator_scale), the margin covers timer slack */
#define NEXT_BEAT_SLACK_MS 50

static void on_kick(uv_timer_t *t) {
  colod_t *d = t->data;
  if (!d->draining)
    colod_jobs_tick(d);
}

void colod_jobs_kick(colod_t *d) {
  d->jobs_stale = 1;
  if (!d->draining && !uv_is_active((uv_handle_t *)&d->kick))
    uv_timer_start(&d->kick, on_kick, 0, 0);
}

void colod_jobs_free(colod_t *d) {
  while (d->jobs) {
    colod_job_live_t *j = d->jobs;
    d->jobs = j->next;
    live_free(d, j);
  }
}

/* ---- heartbeats ---- */

/* Registers a checkpoint that rank 0 of attempt `attempt` finished, newer than *ck_step, and
 * prunes the rows as the engine prunes the directories (checkpoint.keep and keep_best). */
static void register_checkpoint(colod_t *d, uint64_t job_id, uint32_t attempt,
                                const Colo__V1__CheckpointSpec *cs, uint64_t *ck_step,
                                const Colo__V1__Checkpoint *c) {
  int answers = c->has_request && c->request > 0; /* asked for (CheckpointJob): kept */
  if (!c->has_step || c->step == 0 || c->step <= *ck_step || !c->path || !c->path[0] ||
      strlen(c->path) >= sizeof(((colo_checkpoint_t *)0)->path))
    return;
  const char *sha = c->manifest_sha256 ? c->manifest_sha256 : "";
  if (strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64) {
    colo_log(COLO_LOG_WARN, "jobs",
             "job %llu: checkpoint at step %llu reported without a valid "
             "manifest sha256; not registered",
             (unsigned long long)job_id, (unsigned long long)c->step);
    *ck_step = c->step;
    return;
  }
  colo_checkpoint_t ck;
  memset(&ck, 0, sizeof ck);
  ck.job_id = job_id;
  ck.step = c->step;
  ck.attempt = attempt;
  snprintf(ck.path, sizeof ck.path, "%s", c->path);
  snprintf(ck.manifest_sha256, sizeof ck.manifest_sha256, "%s", sha);
  ck.bytes = c->bytes;
  ck.created_ms = c->has_created_ms && c->created_ms > 0 ? c->created_ms : colod_now_ms();
  ck.request = answers ? c->request : 0;
  ck.has_val_loss = c->has_val_loss && isfinite(c->val_loss);
  ck.val_loss = ck.has_val_loss ? c->val_loss : 0;
  ck.has_score = c->has_score && isfinite(c->score);
  ck.score = ck.has_score ? c->score : 0;
  if (colo_store_checkpoint_add(d->store, &ck) < 0) {
    colo_log(COLO_LOG_ERROR, "jobs", "job %llu: cannot register checkpoint %llu: %s",
             (unsigned long long)job_id, (unsigned long long)c->step, colo_store_errmsg(d->store));
    return;
  }
  *ck_step = c->step;
  if (colo_store_checkpoint_prune(d->store, job_id, cs->keep, cs->keep_best) < 0)
    colo_log(COLO_LOG_WARN, "jobs", "job %llu: cannot prune checkpoint rows: %s",
             (unsigned long long)job_id, colo_store_errmsg(d->store));
  colo_log(COLO_LOG_INFO, "jobs", "job %llu: checkpoint at step %llu registered (%s)%s",
           (unsigned long long)job_id, (unsigned long long)c->step, ck.path,
           answers ? ", as asked" : "");
}

static void take_checkpoint(colod_t *d, colod_job_live_t *j, const Colo__V1__Checkpoint *c) {
  register_checkpoint(d, j->id, j->attempt, j->spec->checkpoint, &j->ck_step, c);
}

/* Checkpoints that rank 0 of a job's last attempt finished after the attempt ended (it was
 * cancelled or failed, and its ranks were still stopping). They are on disk, and the engine
 * pruned older ones for them: the rows must follow, or a resume could choose a step that is
 * gone. Rare, so the job is read from the store. */
static void take_late_checkpoints(colod_t *d, const Colo__V1__RankStatus *s) {
  colo_job_t row;
  if (colo_store_job_get(d->store, s->job_id, &row) < 0)
    return;
  Colo__V1__JobSpec *spec =
      row.attempt == s->attempt ? colo__v1__job_spec__unpack(NULL, row.spec_len, row.spec) : NULL;
  colo_job_clear(&row);
  if (!spec)
    return;
  colo_jobspec_fill_defaults(spec);
  uint64_t ck_step = 0;
  colo_store_checkpoint_list(d->store, s->job_id, newest_ck_cb, &ck_step);
  for (size_t c = 0; c < s->n_checkpoints; c++)
    register_checkpoint(d, s->job_id, s->attempt, spec->checkpoint, &ck_step, s->checkpoints[c]);
  colo__v1__job_spec__free_unpacked(spec, NULL);
}

/* The curve being sampled is this attempt's (a new attempt starts its own). */
static void curve_attempt(colod_job_live_t *j, uint32_t attempt) {
  if (j->sample_attempt != attempt) {
    j->sample_attempt = attempt;
    j->next_sample = 0;
  }
}

/* Each validation set's loss, copied out of a worker's message into *store (at most
 * COLO_SET_LOSSES_MAX, names cut): *out then points there. */
static int copy_sets(colo_set_losses_t **store, Colo__V1__SetLoss *const *in, size_t n_in,
                     Colo__V1__SetLoss ***out, size_t *n_out) {
  const char *names[COLO_SET_LOSSES_MAX];
  float losses[COLO_SET_LOSSES_MAX];
  size_t n = 0;
  for (size_t i = 0; i < n_in && n < COLO_SET_LOSSES_MAX; i++)
    if (in[i] && in[i]->name) {
      names[n] = in[i]->name;
      losses[n++] = in[i]->loss;
    }
  return colo_set_losses_put(store, out, n_out, names, losses, n);
}

/* A point of the training curve into the store (a failure is logged: the curve is advisory). */
static void add_sample(colod_t *d, colod_job_live_t *j, uint64_t step, const Colo__V1__Progress *p,
                       int train, int val) {
  colo_progress_sample_t smp = {.job_id = j->id,
                                .attempt = j->sample_attempt,
                                .step = step,
                                .has_loss = train,
                                .loss = p->loss,
                                .lr = p->lr,
                                .tokens_per_s = p->tokens_per_s,
                                .has_val = val,
                                .val_loss = p->val_loss,
                                .time_ms = p->has_time_ms ? p->time_ms : colod_now_ms()};
  /* each validation set's loss, packed as a ProgressSample of them alone */
  uint8_t *sets = NULL;
  if (val && (p->n_val_sets || p->n_choice_scores || p->has_ema_val_loss)) {
    Colo__V1__ProgressSample only = COLO__V1__PROGRESS_SAMPLE__INIT;
    only.n_val_sets = p->n_val_sets;
    only.val_sets = p->val_sets;
    only.n_choice_scores = p->n_choice_scores; /* data.choice_sets': with them */
    only.choice_scores = p->choice_scores;
    only.has_ema_val_loss = p->has_ema_val_loss; /* train.ema_decay's: with them too */
    only.ema_val_loss = p->ema_val_loss;
    size_t len = colo__v1__progress_sample__get_packed_size(&only);
    if ((sets = malloc(len ? len : 1))) {
      smp.val_sets_len = colo__v1__progress_sample__pack(&only, sets);
      smp.val_sets = sets;
    }
  }
  if (colo_store_sample_add(d->store, &smp) < 0)
    colo_log(COLO_LOG_WARN, "jobs", "job %llu: cannot keep a progress sample: %s",
             (unsigned long long)j->id, colo_store_errmsg(d->store));
  free(sets);
}

/* Rank 0's newest record of the running attempt: kept in memory for GetJob and WatchJob, and
 * sampled into the store, about 500 points over train.steps plus every evaluation. val_queued:
 * its evaluation also came in the status's queue (take_eval keeps that one). */
static void take_progress(colod_t *d, colod_job_live_t *j, uint32_t attempt,
                          const Colo__V1__Progress *p, int val_queued) {
  int new_step = p->has_step && !(j->has_progress && p->step <= j->progress.step);
  int new_val =
      p->has_val_step && p->has_val_loss &&
      !(j->has_progress && j->progress.has_val_step && p->val_step <= j->progress.val_step);
  if (!new_step && !new_val)
    return;
  Colo__V1__Progress q = COLO__V1__PROGRESS__INIT;
  if (j->has_progress)
    q = j->progress;
  if (p->has_model_step) { /* said once, as an attempt starts from given weights */
    q.has_model_step = 1;
    q.model_step = p->model_step;
  }
  if (new_step) {
    q.has_step = 1;
    q.step = p->step;
    q.has_total_steps = p->has_total_steps;
    q.total_steps = p->total_steps;
    q.has_loss = p->has_loss;
    q.loss = p->loss;
    q.has_lr = p->has_lr;
    q.lr = p->lr;
    q.has_tokens_per_s = p->has_tokens_per_s;
    q.tokens_per_s = p->tokens_per_s;
    q.has_memory_bytes = p->has_memory_bytes;
    q.memory_bytes = p->memory_bytes;
    q.has_host_memory_bytes = p->has_host_memory_bytes;
    q.host_memory_bytes = p->host_memory_bytes;
    q.has_epochs = p->has_epochs;
    q.epochs = p->epochs;
    q.has_spikes_skipped = p->has_spikes_skipped;
    q.spikes_skipped = p->spikes_skipped;
    q.has_time_ms = p->has_time_ms;
    q.time_ms = p->time_ms;
  }
  if (new_val) {
    q.has_val_loss = q.has_val_step = 1;
    q.val_loss = p->val_loss;
    q.val_step = p->val_step;
    q.has_ema_val_loss = p->has_ema_val_loss;
    q.ema_val_loss = p->ema_val_loss;
    if (copy_sets(&j->val_sets, p->val_sets, p->n_val_sets, &q.val_sets, &q.n_val_sets) < 0 ||
        colo_set_scores_put(&j->val_sets, &q.choice_scores, &q.n_choice_scores, p->choice_scores,
                            p->n_choice_scores) < 0)
      colo_log(COLO_LOG_WARN, "jobs", "job %llu: no memory for its validation sets' losses",
               (unsigned long long)j->id);
    q.has_best_val_loss = p->has_best_val_loss;
    q.best_val_loss = p->best_val_loss;
    q.has_best_score = p->has_best_score;
    q.best_score = p->best_score;
    q.has_best_val_step = p->has_best_val_step;
    q.best_val_step = p->best_val_step;
    q.has_evals_since_best = p->has_evals_since_best;
    q.evals_since_best = p->evals_since_best;
  }
  if (new_step && q.has_time_ms && (!j->has_progress || !j->first_ms)) {
    j->first_step = q.step;
    j->first_ms = q.time_ms;
  }
  j->progress = q;
  j->has_progress = 1;
  curve_attempt(j, attempt);
  uint64_t total = q.has_total_steps && q.total_steps ? q.total_steps : 1;
  uint64_t stride = (total + 499) / 500;
  if (new_step && q.step >= j->next_sample) {
    add_sample(d, j, q.step, &q, 1, 0);
    j->next_sample = q.step + stride;
  }
  if (new_val && !val_queued)
    add_sample(d, j, q.val_step, &q, 0, 1);
  colod_watch_progress(d, j->id, j->state, &j->progress);
}

/* An evaluation rank 0 finished: a point of the curve (each one, however close together). */
static void take_eval(colod_t *d, colod_job_live_t *j, uint32_t attempt,
                      const Colo__V1__ProgressSample *e) {
  if (!e->has_step || !e->has_val_loss || !isfinite(e->val_loss))
    return;
  curve_attempt(j, attempt);
  Colo__V1__Progress p = COLO__V1__PROGRESS__INIT;
  p.val_loss = e->val_loss;
  p.has_ema_val_loss = e->has_ema_val_loss;
  p.ema_val_loss = e->ema_val_loss;
  p.has_time_ms = e->has_time_ms;
  p.time_ms = e->time_ms;
  copy_sets(&j->eval_sets, e->val_sets, e->n_val_sets, &p.val_sets, &p.n_val_sets);
  colo_set_scores_put(&j->eval_sets, &p.choice_scores, &p.n_choice_scores, e->choice_scores,
                      e->n_choice_scores);
  add_sample(d, j, e->step, &p, 0, 1);
}

void colod_jobs_heartbeat(colod_t *d, uint64_t host_id, const Colo__V1__HeartbeatRequest *req,
                          Colo__V1__HeartbeatResponse *resp) {
  uint32_t draining = 0;
  for (size_t i = 0; i < req->n_ranks; i++) {
    const Colo__V1__RankStatus *s = req->ranks[i];
    if (!s->has_job_id || !s->has_attempt || !s->has_rank)
      continue;
    colod_job_live_t *j = live_find(d, s->job_id);
    if (s->has_log && s->log.len > 0 && s->has_log_offset)
      colod_logs_append(d, s->job_id, s->attempt, s->rank, s->log_offset, s->log.data, s->log.len,
                        j != NULL);
    int current = j && j->state == COLO_JOB_RUNNING && j->place && s->attempt == j->attempt &&
                  s->rank < j->world && j->place[s->rank].host_id == host_id;
    if (!current) {
      if (s->phase != COLO__V1__RANK_PHASE__RANK_PHASE_EXITED)
        draining++;
      if (s->rank == 0 && s->n_checkpoints > 0 && !(j && j->attempt > s->attempt))
        take_late_checkpoints(d, s);
      continue;
    }
    if (s->has_phase && s->phase >= COLO__V1__RANK_PHASE__RANK_PHASE_STARTING &&
        s->phase <= COLO__V1__RANK_PHASE__RANK_PHASE_EXITED) {
      if (s->phase == COLO__V1__RANK_PHASE__RANK_PHASE_EXITED &&
          j->phase[s->rank] != COLO__V1__RANK_PHASE__RANK_PHASE_EXITED)
        colod_jobs_kick(d); /* the attempt may be over */
      j->phase[s->rank] = s->phase;
      j->exit_code[s->rank] = s->has_exit_code ? s->exit_code : 0;
      j->sig[s->rank] = s->has_signal ? s->signal : 0;
      if (s->phase == COLO__V1__RANK_PHASE__RANK_PHASE_EXITED && s->message && s->message[0]) {
        colo_log(COLO_LOG_WARN, "jobs", "job %llu rank %u: %.200s", (unsigned long long)j->id,
                 s->rank, s->message);
        snprintf(j->why[s->rank], sizeof j->why[s->rank], "%s", s->message);
      }
    }
    if (s->rank == 0 && s->has_resumed_step && !j->resume_seen) {
      /* rank 0 removed the checkpoints after the one it resumed from: so do the rows */
      j->resume_seen = 1;
      if (colo_store_checkpoint_drop_after(d->store, j->id, s->resumed_step) < 0)
        colo_log(COLO_LOG_WARN, "jobs", "job %llu: cannot drop checkpoint rows: %s",
                 (unsigned long long)j->id, colo_store_errmsg(d->store));
      j->ck_step = s->resumed_step;
    }
    if (s->progress) {
      int queued = 0;
      for (size_t e = 0; e < s->n_evals && s->progress->has_val_step; e++)
        queued |= s->evals[e]->has_step && s->evals[e]->step == s->progress->val_step;
      take_progress(d, j, s->attempt, s->progress, queued);
    }
    for (size_t e = 0; e < s->n_evals && s->rank == 0; e++)
      take_eval(d, j, s->attempt, s->evals[e]);
    for (size_t c = 0; c < s->n_checkpoints && s->rank == 0; c++)
      take_checkpoint(d, j, s->checkpoints[c]);
  }
  colod_host_live_t *h = colod_host_live(d, host_id);
  if (h)
    h->draining = draining;
  /* a job restarting within the interval: every worker beats again just after it is placed,
   * so that the one that gets its ranks starts them at once */
  uint64_t now = colod_mono_ms(d), soonest = UINT64_MAX;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    if (j->state == COLO_JOB_RESTARTING && j->not_before_mono_ms > now &&
        j->not_before_mono_ms - now < soonest)
      soonest = j->not_before_mono_ms - now;
  if (soonest != UINT64_MAX && soonest + NEXT_BEAT_SLACK_MS < d->cfg.heartbeat_ms) {
    resp->has_next_beat_ms = 1;
    resp->next_beat_ms = (uint32_t)(soonest + NEXT_BEAT_SLACK_MS);
  }
  /* the desired state of this host */
  size_t n = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    if (j->state == COLO_JOB_RUNNING && j->place && !j->evicting)
      for (uint32_t r = 0; r < j->world; r++)
        n += j->place[r].host_id == host_id;
  if (n == 0)
    return;
  Colo__V1__RankLaunch *l = calloc(n, sizeof *l);
  resp->desired = calloc(n, sizeof *resp->desired);
  if (!l || !resp->desired) {
    free(l);
    free(resp->desired);
    resp->desired = NULL;
    return;
  }
  size_t k = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next) {
    if (j->state != COLO_JOB_RUNNING || !j->place || j->evicting)
      continue;
    for (uint32_t r = 0; r < j->world; r++) {
      const colo_rank_place_t *p = &j->place[r];
      if (p->host_id != host_id)
        continue;
      colo__v1__rank_launch__init(&l[k]);
      l[k].has_job_id = l[k].has_attempt = l[k].has_rank = l[k].has_world = 1;
      l[k].has_dp_idx = l[k].has_tp_idx = l[k].has_pp_idx = l[k].has_device_index = 1;
      l[k].has_resume_step = 1;
      l[k].job_id = j->id;
      l[k].attempt = j->attempt;
      l[k].rank = r;
      l[k].world = j->world;
      l[k].dp_idx = p->dp_idx;
      l[k].tp_idx = p->tp_idx;
      l[k].pp_idx = p->pp_idx;
      l[k].device_index = p->device_index;
      l[k].spec = j->run_spec ? j->run_spec : j->spec;
      l[k].rendezvous = j->rendezvous;
      l[k].resume_step = j->launch_resume_step;
      l[k].init_from_checkpoints = j->init_ckpts[0] ? j->init_ckpts : NULL;
      l[k].has_checkpoint_seq = j->ckpt_seq > 0;
      l[k].checkpoint_seq = j->ckpt_seq;
      resp->desired[k] = &l[k];
      k++;
    }
  }
  resp->n_desired = k;
}

void colod_jobs_reply_done(Colo__V1__HeartbeatResponse *resp) {
  if (resp->n_desired)
    free(resp->desired[0]);
  free(resp->desired);
  resp->desired = NULL;
  resp->n_desired = 0;
}

void colod_jobs_keep_progress(colod_t *d, uint64_t job_id) {
  colod_job_live_t *j = live_find(d, job_id);
  if (!j || !j->has_progress)
    return;
  uint8_t buf[256];
  size_t n = colo__v1__progress__get_packed_size(&j->progress);
  if (n > sizeof buf)
    return;
  colo__v1__progress__pack(&j->progress, buf);
  if (colo_store_job_set_progress(d->store, job_id, buf, n) < 0)
    colo_log(COLO_LOG_WARN, "jobs", "job %llu: cannot keep its progress: %s",
             (unsigned long long)job_id, colo_store_errmsg(d->store));
  /* the attempt's last step ends its curve, whatever the stride */
  if (j->sample_attempt && j->progress.has_step && j->progress.has_loss)
    add_sample(d, j, j->progress.step, &j->progress, 1, 0);
}

const Colo__V1__Progress *colod_jobs_progress(colod_t *d, uint64_t job_id) {
  colod_job_live_t *j = live_find(d, job_id);
  return j && j->has_progress ? &j->progress : NULL;
}

void colod_jobs_updated(colod_t *d, const colo_job_t *row) {
  colod_job_live_t *j = live_find(d, row->id);
  if (!j)
    return; /* not loaded yet: the next tick reads the row as it is now */
  Colo__V1__JobSpec *spec = colo__v1__job_spec__unpack(NULL, row->spec_len, row->spec);
  if (spec && colo_jobspec_fill_defaults(spec) == 0) {
    colo__v1__job_spec__free_unpacked(j->spec, NULL);
    j->spec = spec;
  } else if (spec) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
  }
  j->max_restarts = row->max_restarts;
  int was = j->hold;
  j->hold = row->hold;
  snprintf(j->hold_reason, sizeof j->hold_reason, "%s", row->hold_reason);
  if (j->hold && (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING)) {
    char why[sizeof j->wait_why];
    held_why(j, why, sizeof why);
    set_waiting(j, why);
    j->in_line = 0;
  } else if (was && !j->hold) {
    j->wait_why[0] = '\0'; /* the next pass says where it stands */
  }
  colod_jobs_kick(d);
}

int64_t colod_jobs_started(colod_t *d, uint64_t job_id) {
  colod_job_live_t *j = live_find(d, job_id);
  return j && j->state == COLO_JOB_RUNNING && j->place ? j->started_ms : 0;
}

uint32_t colod_jobs_running_dp(colod_t *d, uint64_t job_id) {
  colod_job_live_t *j = live_find(d, job_id);
  return j && j->state == COLO_JOB_RUNNING && j->place ? j->dp : 0;
}

uint32_t colod_jobs_slowed(colod_t *d, uint64_t job_id, char *out, size_t len) {
  colod_job_live_t *j = live_find(d, job_id);
  if (out)
    out[0] = '\0';
  if (!j || j->state != COLO_JOB_RUNNING || !j->place)
    return 0;
  enum { NAMED = 4 };
  char named[NAMED * 96] = "";
  size_t at = 0;
  uint32_t n = 0;
  for (uint32_t r = 0; r < j->world; r++) {
    const colod_host_live_t *h = colod_host_live(d, j->place[r].host_id);
    uint32_t dev = j->place[r].device_index;
    if (!h || dev >= h->n_devices || !colod_devset_has(&h->slow, dev))
      continue;
    if (++n <= NAMED && out && at < sizeof named) {
      const char *own = colod_devset_why(&h->slow, dev);
      at += (size_t)snprintf(named + at, sizeof named - at, "%srank %u (%s device %u%s%s)",
                             n > 1 ? ", " : "", r, h->name, dev, own[0] ? "; " : "", own);
    }
  }
  if (n && out)
    snprintf(out, len,
             "%u of %u rank%s on %s with lowered clocks: %s%s; each step waits for the slowest "
             "rank",
             n, j->world, j->world == 1 ? "" : "s", n == 1 ? "a device" : "devices", named,
             n > NAMED ? ", and more" : "");
  return n;
}

const char *colod_jobs_waiting(colod_t *d, uint64_t job_id) {
  colod_job_live_t *j = live_find(d, job_id);
  return j && (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING) && j->wait_why[0]
             ? j->wait_why
             : NULL;
}

uint32_t colod_jobs_in_line(colod_t *d, uint64_t job_id, uint32_t *of) {
  colod_job_live_t *j = live_find(d, job_id);
  *of = d->jobs_in_line;
  return j && (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING) ? j->in_line : 0;
}

int colod_jobs_holds(colod_t *d, uint64_t job_id, int64_t *start_by, int64_t *expect) {
  colod_job_live_t *j = live_find(d, job_id);
  if (!j || !j->holds || (j->state != COLO_JOB_PENDING && j->state != COLO_JOB_RESTARTING))
    return 0;
  *start_by = j->start_by;
  *expect = j->expect;
  return 1;
}

int colod_jobs_evict(colod_t *d, uint64_t host_id, uint64_t *ids, size_t cap, size_t *n) {
  int err = 0;
  *n = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next) {
    if (j->state != COLO_JOB_RUNNING || !j->place)
      continue;
    int here = 0;
    for (uint32_t r = 0; r < j->world && !here; r++)
      here = j->place[r].host_id == host_id;
    if (!here)
      continue;
    char why[64];
    snprintf(why, sizeof why, "host %llu evicted", (unsigned long long)host_id);
    int rc = stop_for(d, j, why, COLO_STOP_MOVE);
    if (rc < 0) {
      err = err ? err : rc;
      continue;
    }
    if (*n < cap)
      ids[*n] = j->id;
    (*n)++;
  }
  return err;
}

int colod_jobs_requeue(colod_t *d, uint64_t job_id, const char *why, int check_only, char *err,
                       size_t len) {
  colod_job_live_t *j = live_find(d, job_id);
  if (!j || j->state != COLO_JOB_RUNNING || !j->place) {
    snprintf(err, len, "job %llu is %s; only a RUNNING job can be requeued",
             (unsigned long long)job_id, j ? colo_job_state_name(j->state) : "not running");
    return COLO_ESTATE;
  }
  if (j->evicting) {
    snprintf(err, len, "job %llu: its ranks are stopping already (%s)", (unsigned long long)job_id,
             j->evicting == COLO_STOP_TIME_LIMIT ? "its time limit" : "moved");
    return COLO_ESTATE;
  }
  if (check_only)
    return 0;
  int rc = stop_for(d, j, why, COLO_STOP_MOVE);
  if (rc < 0)
    snprintf(err, len, "%s", colo_store_errmsg(d->store));
  return rc;
}

int colod_jobs_checkpoint(colod_t *d, uint64_t job_id, uint32_t *attempt, uint32_t *seq, char *why,
                          size_t len) {
  colod_job_live_t *j = live_find(d, job_id);
  if (!j || j->state != COLO_JOB_RUNNING || !j->place) {
    snprintf(why, len, "job %llu is not running: only a running job's ranks save a checkpoint",
             (unsigned long long)job_id);
    return COLO_ESTATE;
  }
  if (j->evicting) {
    snprintf(why, len, "job %llu's ranks are stopping, and save a checkpoint as they stop",
             (unsigned long long)job_id);
    return COLO_ESTATE;
  }
  int rc = colo_store_attempt_checkpoint(d->store, j->id, j->attempt, &j->ckpt_seq);
  if (rc < 0) {
    snprintf(why, len, "%s", colo_store_errmsg(d->store));
    return rc;
  }
  colo_log(COLO_LOG_INFO, "jobs", "job %llu attempt %u: checkpoint %u asked of its ranks",
           (unsigned long long)j->id, j->attempt, j->ckpt_seq);
  *attempt = j->attempt;
  *seq = j->ckpt_seq;
  nudge_hosts(d, j);
  return 0;
}

int colod_jobs_attempt_on_host(colod_t *d, uint64_t job_id, uint32_t attempt, uint64_t host_id) {
  colod_job_live_t *j = live_find(d, job_id);
  if (!j || j->state != COLO_JOB_RUNNING || !j->place || j->attempt != attempt)
    return 0;
  for (uint32_t r = 0; r < j->world; r++)
    if (j->place[r].host_id == host_id)
      return 1;
  return 0;
}

void colod_jobs_naming(colod_t *d, const uint64_t *ids, size_t n, uint64_t *naming, int sync) {
  if (sync && d->jobs_stale)
    sync_jobs(d); /* a job submitted or resumed since the last pass names its jobs */
  for (size_t i = 0; i < n; i++) {
    naming[i] = 0;
    for (const colod_job_live_t *j = d->jobs; j && !naming[i]; j = j->next) {
      const Colo__V1__TrainSpec *t = j->spec->train;
      if (t && t->has_init_from_job && t->init_from_job == ids[i])
        naming[i] = j->id;
      /* one that has run is past its wait (waits_after), but its restarts may still start
       * from the init_from_job's checkpoint */
      for (size_t k = 0; j->attempt == 0 && k < j->spec->n_after && !naming[i]; k++)
        if (j->spec->after[k] == ids[i])
          naming[i] = j->id;
    }
  }
}

int colod_jobs_attempt(colod_t *d, uint64_t job_id, uint32_t *attempt, uint32_t *world) {
  colod_job_live_t *j = live_find(d, job_id);
  if (!j || j->state != COLO_JOB_RUNNING)
    return 0;
  *attempt = j->attempt;
  *world = j->world;
  return 1;
}

void colod_jobs_each(colod_t *d, colod_job_view_cb cb, void *data) {
  for (colod_job_live_t *j = d->jobs; j; j = j->next) {
    colod_job_view_t v = {
        .id = j->id,
        .name = j->spec->name ? j->spec->name : "",
        .owner = j->owner,
        .account = j->spec->account ? j->spec->account : "",
        .state = j->state,
        .attempt = j->attempt,
        .restarts = j->restarts,
        .world = j->world,
        .priority = j->spec->priority,
        .device = (int)j->spec->resources->device,
        .started_ms = j->state == COLO_JOB_RUNNING && j->place ? j->started_ms : 0,
        .progress = j->has_progress ? &j->progress : NULL,
        .waiting =
            (j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING) && j->wait_why[0],
        .stopping = j->evicting != 0,
        .in_line = j->state == COLO_JOB_PENDING || j->state == COLO_JOB_RESTARTING ? j->in_line : 0,
        .held = j->hold,
    };
    cb(&v, data);
  }
}

void colod_jobs_devices_used_all(colod_t *d, uint32_t *used) {
  memset(used, 0, d->n_hosts * sizeof *used);
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    if (j->state == COLO_JOB_RUNNING && j->place)
      for (uint32_t r = 0; r < j->world; r++) {
        colod_host_live_t *h = colod_host_live(d, j->place[r].host_id);
        if (h)
          used[h - d->hosts]++;
      }
}

uint32_t colod_jobs_devices_used(colod_t *d, uint64_t host_id) {
  uint32_t n = 0;
  for (colod_job_live_t *j = d->jobs; j; j = j->next)
    if (j->state == COLO_JOB_RUNNING && j->place)
      for (uint32_t r = 0; r < j->world; r++)
        n += j->place[r].host_id == host_id;
  return n;
}
