/* colod configuration: one table drives the YAML config file, --set overrides, validation
 * messages, SIGHUP reloads and --print-config. */
#ifndef COLOD_CONFIG_H
#define COLOD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  char listen[256];                 /* gRPC listen address */
  char state_dir[1024];             /* SQLite database and other state */
  int log_level;                    /* colo_log_level_t */
  uint32_t host_timeout_ms;         /* a host silent this long is DOWN */
  uint32_t heartbeat_ms;            /* interval told to workers */
  uint32_t drain_timeout_ms;        /* SIGTERM: how long in-flight calls may take */
  uint32_t max_message_kib;         /* largest request accepted */
  uint32_t max_watchers;            /* concurrent WatchJob streams */
  uint32_t restart_backoff_ms;      /* before a failed job's next attempt, doubling per restart */
  uint32_t elastic_grow_after_ms;   /* an elastic job below its dp grows back after this long */
  uint32_t fair_share_half_life_ms; /* usage this old counts half in the wait order; 0: off */
  char fair_share_by[16];           /* "owner" or "account": whose hours order the wait */
  char fair_share_weights[1024];    /* "owner=weight,...": their hours count 1/weight; others 1 */
  char owner_max_devices[1024];     /* "owner=n,...,*=n": devices an owner's jobs hold at once */
  char owner_max_jobs[1024];        /* "owner=n,...,*=n": an owner's jobs that have not ended */
  char account_max_devices[1024];   /* "account=n,...,*=n": devices an account's jobs hold */
  char account_max_jobs[1024];      /* "account=n,...,*=n": an account's jobs that have not ended */
  uint32_t reservations;            /* waiting jobs that try to hold room, per pass */
  uint64_t default_time_limit_ms;   /* a job submitted without a time limit gets it; 0: none */
  uint64_t max_time_limit_ms;       /* the longest time limit a job may have; 0: a year */
  char rdzv_mode[16];               /* "colod" or "rank0" */
  uint32_t rdzv_port_base;          /* rank0 rendezvous ports: base .. base + 999 */
  uint32_t log_max_mib;             /* per rank log kept by colod */
  uint64_t job_retention_ms;        /* ended jobs are deleted this long after; 0: never */
  char tls_cert[1024];              /* TLS: colod's certificate (PEM); empty: no TLS */
  char tls_key[1024];               /* and its key */
  char tls_client_ca[1024];         /* mutual TLS: clients need a certificate from this CA */
  uint32_t tls_roles;       /* mutual TLS: a certificate's OU is its role (user, admin, worker) */
  uint32_t logs_private;    /* with tls_roles: a user reads only its own jobs' logs */
  char metrics_listen[256]; /* Prometheus /metrics over HTTP; empty: none */
  char notify_url[1024];    /* POST a record of each job that ends or restarts; empty: none */
  char notify_allow[4096];  /* URL prefixes a job's notify.url may start with; empty: none */
} colod_config_t;

/* Defaults from the table. */
void colod_config_defaults(colod_config_t *cfg);

/* Applies one "name=value" (or name and value) setting. Returns 0 or COLO_EINVAL with an exact
 * message in err, leaving cfg untouched. */
int colod_config_set(colod_config_t *cfg, const char *name, const char *value, char *err,
                     size_t errlen);

/* Reads a YAML mapping of settings from path on top of cfg. All or nothing: on error cfg is
 * untouched and err says "FILE:LINE: why". */
int colod_config_load(colod_config_t *cfg, const char *path, char *err, size_t errlen);

/* An owner's fair-share weight from cfg->fair_share_weights (its entry, else "*"'s, else 1):
 * its recent device hours are divided by it in the wait order. */
double colod_config_weight(const colod_config_t *cfg, const char *owner);

/* The most devices an owner's running jobs may hold at once, from cfg->owner_max_devices (its
 * entry, else "*"'s); UINT32_MAX: no limit. */
uint32_t colod_config_owner_max_devices(const colod_config_t *cfg, const char *owner);

/* The most devices the running jobs charged to an account (JobSpec.account) may hold at once,
 * from cfg->account_max_devices (its entry, else "*"'s); UINT32_MAX: no limit. */
uint32_t colod_config_account_max_devices(const colod_config_t *cfg, const char *account);

/* The most jobs an owner may have that have not ended, from cfg->owner_max_jobs; UINT32_MAX: no
 * limit. */
uint32_t colod_config_owner_max_jobs(const colod_config_t *cfg, const char *owner);
/* The same for the jobs charged to an account, from cfg->account_max_jobs. */
uint32_t colod_config_account_max_jobs(const colod_config_t *cfg, const char *account);

/* Prints every setting with its value and help, as a valid config file. */
void colod_config_print(const colod_config_t *cfg, FILE *out);

/* Copies the settings that may change at run time from `next` into `cur` and logs, for each
 * setting that changed but needs a restart, a warning. Returns how many were applied. */
int colod_config_reload(colod_config_t *cur, const colod_config_t *next);

#endif
