/* colod: the coordinator's one context, passed everywhere. No other mutable globals. */
#ifndef COLOD_H
#define COLOD_H

#include <stdint.h>

#include <uv.h>

#include "../common/jobspec.h"
#include "../proto/rpc.h"
#include "../storage/store.h"
#include "colo/v1/cluster.pb-c.h"
#include "config.h"
#include "fairshare.h"
#include "push.h"
#include "retention.h"

typedef struct colod_watch_s colod_watch_t;
typedef struct colod_job_live_s colod_job_live_t;
typedef struct colod_log_reader_s colod_log_reader_t;
typedef struct colod_rdzv_s colod_rdzv_t;

#define COLOD_MAX_DEVICES 1024 /* a host's devices at most */

#define COLOD_DEVSET_WHYS 16 /* devices whose own reason a set keeps: a GPU node's 8 or 16 */

/* A set of a host's devices that its worker reports at each beat (HeartbeatRequest.unhealthy,
 * .slowed), with the first one's reason and each of the first COLOD_DEVSET_WHYS devices' own. */
typedef struct {
  uint64_t bits[COLOD_MAX_DEVICES / 64];
  uint32_t n;
  char why[128];                     /* the first one's */
  char whys[COLOD_DEVSET_WHYS][128]; /* device k's own, "" for one not in the set */
} colod_devset_t;

static inline int colod_devset_has(const colod_devset_t *s, uint32_t k) {
  return s->n && k < COLOD_MAX_DEVICES && (s->bits[k / 64] >> (k % 64)) & 1;
}

/* the reason device k is in the set: its own, or past COLOD_DEVSET_WHYS the first one's */
static inline const char *colod_devset_why(const colod_devset_t *s, uint32_t k) {
  return k < COLOD_DEVSET_WHYS && s->whys[k][0] ? s->whys[k] : s->why;
}

/* A host's liveness, kept in memory: heartbeats do not write to the database; only a change
 * between UP and DOWN does. */
typedef struct {
  uint64_t id;
  char name[65]; /* as registered */
  uint64_t session;
  uint64_t last_seen_mono_ms;
  int64_t last_seen_ms;
  int state;
  uint32_t n_devices;
  int device_kind;       /* of its devices (colo.v1.DeviceKind) */
  char address[129];     /* where its ranks are reached */
  uint32_t draining;     /* ranks of ended attempts still running there (last heartbeat) */
  uint64_t memory_bytes; /* host memory it registered with; 0: not said */
  int cordoned;          /* an operator's CordonHost: no new ranks here */
  int64_t cordon_at_ms;  /* a cordon to come (a maintenance), Unix ms; 0: none */
  int cordon_evict;      /* and its running jobs stopped then */
  int stopping;          /* its worker said it is shutting down: no new ranks until it registers */
  colod_push_t *push;    /* push.c: its worker's WatchHost stream, or NULL */
  colod_devset_t sick;   /* devices its worker reports unfit: no new ranks go there */
  colod_devset_t slow;   /* and at lowered clocks: they take ranks last */
  /* its labels (RegisterHostRequest.labels) as ",a100,ib,", for jobs' resources.host_labels */
  char labels[COLO_MAX_LABELS * (COLO_MAX_LABEL + 1) + 2];
} colod_host_live_t;

/* Counters since colod started, served at /metrics (metrics.c); each kept by the module that
 * does the counted thing. */
typedef struct {
  uint64_t heartbeats;   /* api.c: heartbeats of known host sessions answered */
  uint64_t sched_passes; /* jobs.c: scheduling passes that had jobs to place */
  uint64_t sched_ns;     /* and their time */
  uint32_t holds;        /* jobs.c: jobs holding room after the last pass */
  uint64_t notify_sent, notify_failed, notify_dropped; /* notify.c: job records posted */
  uint64_t entered[COLO_JOB_STATE_MAX + 1]; /* api.c, jobs.c: job state changes, by state entered */
  uint64_t preempted;                       /* jobs.c: jobs stopped for a higher priority */
  uint64_t nudges;                          /* push.c: HostNudge messages sent */
  uint64_t deleted;                         /* retention.c: jobs deleted (purged or DeleteJob) */
} colod_stats_t;

typedef struct colod_metrics_s colod_metrics_t;

typedef struct colod_s {
  uv_loop_t *loop;
  colod_config_t cfg;
  const char *config_path; /* NULL: defaults and flags only */
  char **overrides;        /* --set and flag settings, re-applied on reload */
  int n_overrides;
  colo_store_t *store;
  colo_rpc_server_t *rpc;
  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t tick;
  uv_timer_t kick;          /* jobs.c: runs the job manager soon after an event, between ticks */
  uv_timer_t host_deadline; /* api.c: fires when the first UP host's host_timeout runs out */
  uv_timer_t restart;       /* jobs.c: runs it when the soonest restart back-off ends */
  int64_t started_ms;
  uint64_t watchdog_usec; /* 0: no systemd watchdog */
  uint64_t last_watchdog_mono_ms;
  colod_watch_t *watches;
  uint32_t n_watches;
  colod_host_live_t *hosts; /* in id order (colod_host_live looks them up by bisection) */
  size_t n_hosts, cap_hosts;
  colod_job_live_t *jobs;          /* jobs.c: every job that is not finished, in id order */
  void *jobs_by_id;                /* jobs.c: the same, by id (a tsearch(3) tree) */
  int jobs_stale;                  /* jobs.c: kicked since `jobs` was last read from the store */
  uint32_t jobs_in_line;           /* jobs.c: jobs left waiting for room by the last pass */
  colod_log_reader_t *log_readers; /* logs.c: ReadLogs streams */
  colod_rdzv_t *rdzv;              /* rdzv.c: rendezvous keys and waiting gets */
  colod_push_t *pushes;            /* push.c: workers' WatchHost streams */
  uint32_t n_pushes;
  uint64_t *push_pending; /* push.c: hosts to nudge when push_flush fires */
  size_t n_push_pending, cap_push_pending;
  uv_timer_t push_flush;
  colod_stats_t stats;
  colod_fair_t fair;           /* fairshare.c: owners' recent usage, for the wait order */
  colod_metrics_t *metrics;    /* metrics.c: the HTTP endpoint, or NULL */
  colod_retention_t retention; /* retention.c: job_retention's purge */
  int notify_in_flight;        /* notify.c: job records being posted */
  int draining;
  int exit_code;
} colod_t;

int64_t colod_now_ms(void); /* wall clock, ms since the epoch */
/* Unix ms as "2026-11-23 14:32:10 UTC" */
void colod_fmt_utc(int64_t ms, char *buf, size_t len);
uint64_t colod_mono_ms(colod_t *d); /* loop time */

/* api.c */
extern const colo_rpc_method_t colod_methods[];
extern const size_t colod_n_methods;
/* Sends a job's state change to its watchers; ends their streams when it is terminal. */
void colod_watch_notify(colod_t *d, const colo_job_t *job);
/* Ends every watch stream (on shutdown). */
void colod_watch_close_all(colod_t *d, const char *why);
/* Loads host liveness from the store at start-up: every UP host gets a full host_timeout. */
int colod_hosts_load(colod_t *d);
/* Marks hosts DOWN whose heartbeats stopped for host_timeout. */
void colod_hosts_check(colod_t *d);
/* Makes the cordons to come whose time has come (CordonHostRequest.at_ms): cordoned, stored
 * first, and with evict their running jobs stopped. */
void colod_hosts_cordons_due(colod_t *d);
colod_host_live_t *colod_host_live(colod_t *d, uint64_t id);
/* Sends a progress record to the job's watchers that asked for them. */
void colod_watch_progress(colod_t *d, uint64_t job_id, int state, const Colo__V1__Progress *p);

#endif
