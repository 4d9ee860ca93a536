/* colod's metrics endpoint: the hosts, the jobs and colod itself in Prometheus' text exposition
 * format (version 0.0.4), for a Prometheus server to scrape and alert on.
 *
 * HTTP is libmicrohttpd's, run on colod's own loop rather than on a thread of its own: it is
 * started in epoll mode without a thread, its epoll descriptor is watched by a uv_poll_t and its
 * timeouts by a uv_timer_t, and each wake-up calls MHD_run. Requests are thus answered on the
 * loop thread, where colod's state may be read without locks, and a scrape costs a pass over the
 * hosts and the unfinished jobs plus one query of the store (the job counts by state).
 *
 * Served: GET (or HEAD) /metrics and /healthz (200 "ok", or 503 while colod drains); 404 for any
 * other path, 405 for any other method. Plain HTTP without authentication, as a Prometheus
 * exporter usually is: the address is loopback unless an operator says otherwise. */
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "../common/error.h"
#include "../common/log.h"
#include "colod.h"
#include "jobs.h"

struct colod_metrics_s {
  struct MHD_Daemon *mhd;
  uv_poll_t poll;  /* MHD's epoll descriptor */
  uv_timer_t wake; /* MHD's next timeout (idle connections) */
  int port;
  int closing;
  int open_handles; /* of poll and wake, while they close */
};

/* ---- the exposition ---- */

static void family(FILE *out, const char *name, const char *type, const char *help) {
  fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* a label value: backslash, double quote and newline escaped */
static void label(FILE *out, const char *v) {
  fputc('"', out);
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      fputc('\\', out);
    if (*v == '\n')
      fputs("\\n", out);
    else
      fputc(*v, out);
  }
  fputc('"', out);
}

static void number(FILE *out, double v) {
  if (isnan(v))
    fputs(" NaN\n", out);
  else if (isinf(v))
    fputs(v > 0 ? " +Inf\n" : " -Inf\n", out);
  else
    fprintf(out, " %.15g\n", v);
}

static void state_label(FILE *out, int state) {
  char low[32];
  snprintf(low, sizeof low, "%s", colo_job_state_name(state));
  for (char *c = low; *c; c++)
    *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
  fprintf(out, "state=\"%s\"", low);
}

static void process_metrics(colod_t *d, FILE *out) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  family(out, "process_cpu_seconds_total", "counter", "User and system CPU time spent, seconds.");
  fprintf(out, "process_cpu_seconds_total");
  number(out, (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                  ru.ru_stime.tv_usec / 1e6);
  unsigned long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%lu %lu", &pages, &resident) == 2) {
      family(out, "process_resident_memory_bytes", "gauge", "Resident memory, bytes.");
      fprintf(out, "process_resident_memory_bytes");
      number(out, (double)resident * (double)sysconf(_SC_PAGESIZE));
    }
    fclose(f);
  }
  DIR *fds = opendir("/proc/self/fd");
  if (fds) {
    long n = 0;
    for (struct dirent *e; (e = readdir(fds));)
      n += e->d_name[0] != '.';
    closedir(fds);
    family(out, "process_open_fds", "gauge", "Open file descriptors.");
    fprintf(out, "process_open_fds");
    number(out, (double)(n - 1)); /* less the one reading the directory */
  }
  family(out, "process_start_time_seconds", "gauge", "Start time, seconds since the epoch.");
  fprintf(out, "process_start_time_seconds");
  number(out, (double)d->started_ms / 1000.0);
  family(out, "colo_build_info", "gauge", "colod's version, as a label.");
  fprintf(out, "colo_build_info{version=");
  label(out, COLO_VERSION);
  fprintf(out, "} 1\n");
}

static void host_labels(FILE *out, const char *metric, const colod_host_live_t *h) {
  fprintf(out, "%s{host=", metric);
  label(out, h->name);
  fprintf(out, ",id=\"%llu\"}", (unsigned long long)h->id);
}

static void host_metrics(colod_t *d, FILE *out) {
  uint32_t up = 0, down = 0, cordoned = 0;
  for (size_t i = 0; i < d->n_hosts; i++) {
    up += d->hosts[i].state == COLO_HOST_UP;
    down += d->hosts[i].state != COLO_HOST_UP;
    cordoned += d->hosts[i].cordoned != 0;
  }
  family(out, "colo_hosts", "gauge", "Registered hosts, by liveness.");
  fprintf(out, "colo_hosts{state=\"up\"} %u\ncolo_hosts{state=\"down\"} %u\n", up, down);
  family(out, "colo_hosts_cordoned", "gauge", "Hosts an operator took out of placement.");
  fprintf(out, "colo_hosts_cordoned %u\n", cordoned);
  if (!d->n_hosts)
    return;
  uint32_t *used = calloc(d->n_hosts, sizeof *used);
  if (used)
    colod_jobs_devices_used_all(d, used);
  enum {
    H_UP,
    H_CORDONED,
    H_WATCHING,
    H_DEVICES,
    H_USED,
    H_UNHEALTHY,
    H_SLOWED,
    H_DRAINING,
    H_SEEN,
    H_CORDON_AT,
    H_N
  };
  static const struct {
    const char *name, *type, *help;
  } per_host[H_N] = {
      {"colo_host_up", "gauge", "1 while the host's heartbeats arrive, 0 once it is DOWN."},
      {"colo_host_cordoned", "gauge", "1 while an operator keeps new ranks off the host."},
      {"colo_host_watching", "gauge",
       "1 while the host's worker holds its WatchHost stream (nudged at once of changes)."},
      {"colo_host_devices", "gauge", "Devices (GPUs or CPU slots) the host registered."},
      {"colo_host_devices_used", "gauge", "Devices that ranks of running attempts hold."},
      {"colo_host_devices_unhealthy", "gauge",
       "Devices the host's worker reports unfit (uncorrected ECC errors): no new ranks go there."},
      {"colo_host_devices_slowed", "gauge",
       "Devices the host's worker reports at lowered clocks (thermal slowdown, power brake): "
       "ranks there run slower."},
      {"colo_host_ranks_draining", "gauge", "Ranks of ended attempts still stopping there."},
      {"colo_host_last_seen_timestamp_seconds", "gauge",
       "The host's last heartbeat (or registration), seconds since the epoch."},
      {"colo_host_cordon_scheduled_timestamp_seconds", "gauge",
       "When a cordon to come (a maintenance window) begins, seconds since the epoch; only hosts "
       "with one."},
  };
  for (int m = 0; m < H_N; m++) {
    family(out, per_host[m].name, per_host[m].type, per_host[m].help);
    for (size_t i = 0; i < d->n_hosts; i++) {
      const colod_host_live_t *h = &d->hosts[i];
      double v = 0;
      if (m == H_CORDON_AT && !h->cordon_at_ms)
        continue;
      switch (m) {
      case H_UP:
        v = h->state == COLO_HOST_UP;
        break;
      case H_CORDONED:
        v = h->cordoned != 0;
        break;
      case H_WATCHING:
        v = h->push != NULL;
        break;
      case H_DEVICES:
        v = h->n_devices;
        break;
      case H_USED:
        v = used ? used[i] : 0;
        break;
      case H_UNHEALTHY:
        v = h->sick.n;
        break;
      case H_SLOWED:
        v = h->slow.n;
        break;
      case H_DRAINING:
        v = h->draining;
        break;
      case H_SEEN:
        v = (double)h->last_seen_ms / 1000.0;
        break;
      default: /* H_CORDON_AT */
        v = (double)h->cordon_at_ms / 1000.0;
        break;
      }
      host_labels(out, per_host[m].name, h);
      number(out, v);
    }
  }
  free(used);
}

/* ---- jobs: one metric family at a time, each a pass over the jobs ---- */

enum {
  J_INFO,
  J_WORLD,
  J_PRIORITY,
  J_ATTEMPT,
  J_RESTARTS,
  J_WAITING,
  J_STOPPING,
  J_HELD,
  J_IN_LINE,
  J_STARTED,
  J_SLOWED,
  J_STEP,
  J_TOTAL,
  J_LOSS,
  J_VAL_LOSS,
  J_EMA_VAL_LOSS,
  J_LR,
  J_TOKENS,
  J_MEMORY,
  J_HOST_MEMORY,
  J_EPOCHS,
  J_N
};

/* the families from J_STEP on are fields of the running attempt's progress record (`field`, read
 * through protobuf-c's descriptor), absent until its first report or where the field is unset */
static const struct {
  const char *name, *help, *field;
} JOB_FAMILIES[J_N] = {
    [J_INFO] = {"colo_job_info", "A job that is not finished: its name, owner, account and state."},
    [J_WORLD] = {"colo_job_world_size", "Ranks of the job (dp x tp x pp)."},
    [J_PRIORITY] = {"colo_job_priority", "The job's priority (-1000..1000)."},
    [J_ATTEMPT] = {"colo_job_attempt", "The job's current (or last) attempt, from 1."},
    [J_RESTARTS] = {"colo_job_restarts", "Automatic restarts the job has used."},
    [J_WAITING] = {"colo_job_waiting",
                   "1 while the job waits for room (coloctl status says why), else 0."},
    [J_STOPPING] = {"colo_job_stopping",
                    "1 while colod stops the job's ranks (eviction, preemption, time limit)."},
    [J_HELD] = {"colo_job_held",
                "1 while the job is held (coloctl hold): not placed until released; 2: by an "
                "admin, whom only an admin may release; else 0."},
    [J_IN_LINE] = {"colo_job_queue_position",
                   "While the job waits for room: its place in line (1: offered room first)."},
    [J_STARTED] = {"colo_job_attempt_start_timestamp_seconds",
                   "When the running attempt started, seconds since the epoch."},
    [J_SLOWED] = {"colo_job_ranks_slowed",
                  "Of the running attempt's ranks, those on devices whose clocks their workers "
                  "report lowered (coloctl status names them)."},
    [J_STEP] = {"colo_job_step", "The running attempt's last reported step.", "step"},
    [J_TOTAL] = {"colo_job_total_steps", "The steps the job trains for.", "total_steps"},
    [J_LOSS] = {"colo_job_loss", "Training loss at colo_job_step.", "loss"},
    [J_VAL_LOSS] = {"colo_job_val_loss", "The newest validation loss.", "val_loss"},
    [J_EMA_VAL_LOSS] = {"colo_job_ema_val_loss",
                        "The newest validation loss of the weights' moving average "
                        "(train.ema_decay), evaluated in their place.",
                        "ema_val_loss"},
    [J_LR] = {"colo_job_learning_rate", "Learning rate at colo_job_step.", "lr"},
    [J_TOKENS] = {"colo_job_tokens_per_second", "Training throughput of the whole job.",
                  "tokens_per_s"},
    [J_MEMORY] = {"colo_job_device_memory_bytes",
                  "Rank 0's peak of device (or CPU engine) memory, bytes.", "memory_bytes"},
    [J_HOST_MEMORY] = {"colo_job_host_memory_bytes",
                       "Rank 0's parameter and optimizer pieces kept in host memory, bytes.",
                       "host_memory_bytes"},
    [J_EPOCHS] = {"colo_job_epochs",
                  "How far the job is through its training data: epochs of its training set (of "
                  "a blend's, the set gone through most).",
                  "epochs"},
};

typedef struct {
  colod_t *d;
  FILE *out;
  int which;
  const ProtobufCFieldDescriptor *field; /* the progress field of a family from J_STEP on */
} job_pass_t;

static void job_metric(const colod_job_view_t *j, void *data) {
  job_pass_t *p = data;
  FILE *out = p->out;
  const Colo__V1__Progress *g = j->progress;
  double v;
  switch (p->which) {
  case J_INFO:
    fprintf(out, "colo_job_info{job=\"%llu\",name=", (unsigned long long)j->id);
    label(out, j->name);
    fprintf(out, ",owner=");
    label(out, j->owner);
    fprintf(out, ",account=");
    label(out, j->account);
    fputc(',', out);
    state_label(out, j->state);
    fprintf(out, "} 1\n");
    return;
  case J_WORLD:
    v = j->world;
    break;
  case J_PRIORITY:
    v = j->priority;
    break;
  case J_ATTEMPT:
    v = j->attempt;
    break;
  case J_RESTARTS:
    v = j->restarts;
    break;
  case J_WAITING:
    v = j->waiting;
    break;
  case J_STOPPING:
    v = j->stopping;
    break;
  case J_HELD:
    v = j->held;
    break;
  case J_IN_LINE:
    if (!j->in_line)
      return;
    v = j->in_line;
    break;
  case J_STARTED:
    if (!j->started_ms)
      return;
    v = (double)j->started_ms / 1000.0;
    break;
  case J_SLOWED:
    if (!j->started_ms)
      return;
    v = colod_jobs_slowed(p->d, j->id, NULL, 0);
    break;
  default: {
    const ProtobufCFieldDescriptor *f = p->field;
    const char *base = (const char *)g;
    if (!g || !f || !*(const protobuf_c_boolean *)(base + f->quantifier_offset))
      return;
    if (f->type == PROTOBUF_C_TYPE_FLOAT)
      v = *(const float *)(base + f->offset);
    else if (f->type == PROTOBUF_C_TYPE_UINT64)
      v = (double)*(const uint64_t *)(base + f->offset);
    else
      return;
    break;
  }
  }
  fprintf(out, "%s{job=\"%llu\"}", JOB_FAMILIES[p->which].name, (unsigned long long)j->id);
  number(out, v);
}

/* colo_job_set_val_loss: each validation set's loss (data.val_sources), by name */
static void set_val_losses(const colod_job_view_t *j, void *data) {
  FILE *out = data;
  for (size_t i = 0; j->progress && i < j->progress->n_val_sets; i++) {
    fprintf(out, "colo_job_set_val_loss{job=\"%llu\",set=", (unsigned long long)j->id);
    label(out, j->progress->val_sets[i]->name ? j->progress->val_sets[i]->name : "");
    fputc('}', out);
    number(out, j->progress->val_sets[i]->loss);
  }
}

/* colo_job_choice_accuracy: each multiple-choice set's scores (data.choice_sets), by name and
 * by how the pick is made */
static void choice_scores(const colod_job_view_t *j, void *data) {
  FILE *out = data;
  for (size_t i = 0; j->progress && i < j->progress->n_choice_scores; i++) {
    const Colo__V1__SetScore *c = j->progress->choice_scores[i];
    const char *by[3] = {"acc", "acc_norm", "acc_token"};
    const float v[3] = {c->acc, c->acc_norm, c->acc_token};
    for (int k = 0; k < 3; k++) {
      fprintf(out, "colo_job_choice_accuracy{job=\"%llu\",set=", (unsigned long long)j->id);
      label(out, c->name ? c->name : "");
      fprintf(out, ",score=\"%s\"}", by[k]);
      number(out, v[k]);
    }
  }
}

static int job_metrics(colod_t *d, FILE *out) {
  uint32_t counts[COLO_JOB_STATE_MAX + 1] = {0};
  int rc = colo_store_job_counts(d->store, counts);
  if (rc == 0) {
    family(out, "colo_jobs", "gauge", "Jobs in the store, by state.");
    for (int s = 1; s <= COLO_JOB_STATE_MAX; s++) {
      fprintf(out, "colo_jobs{");
      state_label(out, s);
      fprintf(out, "} %u\n", counts[s]);
    }
  } else {
    colo_log(COLO_LOG_WARN, "metrics", "cannot count the jobs: %s", colo_store_errmsg(d->store));
  }
  family(out, "colo_job_state_changes_total", "counter",
         "Job state changes colod made since it started, by the state entered.");
  for (int s = 1; s <= COLO_JOB_STATE_MAX; s++) {
    fprintf(out, "colo_job_state_changes_total{");
    state_label(out, s);
    fprintf(out, "} %llu\n", (unsigned long long)d->stats.entered[s]);
  }
  for (int w = 0; w < J_N; w++) {
    family(out, JOB_FAMILIES[w].name, "gauge", JOB_FAMILIES[w].help);
    /* looked up once a family, not once a job */
    job_pass_t p = {d, out, w,
                    JOB_FAMILIES[w].field
                        ? protobuf_c_message_descriptor_get_field_by_name(
                              &colo__v1__progress__descriptor, JOB_FAMILIES[w].field)
                        : NULL};
    colod_jobs_each(d, job_metric, &p);
  }
  family(out, "colo_job_set_val_loss", "gauge",
         "The newest validation loss of each of the job's validation sets (data.val_sources), "
         "by name; colo_job_val_loss is their weighted mean.");
  colod_jobs_each(d, set_val_losses, out);
  family(out, "colo_job_choice_accuracy", "gauge",
         "The newest accuracy on each of the job's multiple-choice sets (data.choice_sets), by "
         "name and score: acc (the ending of the highest log-probability), acc_norm (per "
         "character), acc_token (per token).");
  colod_jobs_each(d, choice_scores, out);
  return rc < 0 ? -1 : 0;
}

/* the devices each owner (or account) of a live job holds with running attempts */
typedef struct {
  const char *key;
  uint32_t devices;
} key_devices_t;

typedef struct {
  key_devices_t *v;
  size_t n, cap;
  int by_account;
} key_pass_t;

static void key_device(const colod_job_view_t *j, void *data) {
  key_pass_t *p = data;
  const char *key = p->by_account ? j->account : j->owner;
  size_t i = 0;
  while (i < p->n && strcmp(p->v[i].key, key) != 0)
    i++;
  if (i == p->n) {
    if (p->n == p->cap) {
      size_t cap = p->cap ? p->cap * 2 : 16;
      key_devices_t *v = realloc(p->v, cap * sizeof *v);
      if (!v)
        return;
      p->v = v;
      p->cap = cap;
    }
    p->v[p->n++] = (key_devices_t){key, 0};
  }
  if (j->state == COLO_JOB_RUNNING && j->started_ms)
    p->v[i].devices += j->world;
}

/* colo_owner_devices and colo_owner_max_devices, or the account's */
static void key_metrics(colod_t *d, FILE *out, int by_account) {
  const char *what = by_account ? "account" : "owner";
  key_pass_t p = {.by_account = by_account};
  colod_jobs_each(d, key_device, &p); /* the names live as long as their jobs */
  char name[64], help[256];
  snprintf(name, sizeof name, "colo_%s_devices", what);
  snprintf(help, sizeof help,
           "Devices the running jobs of each %s of a job that is not finished "
           "hold.",
           what);
  family(out, name, "gauge", help);
  for (size_t i = 0; i < p.n; i++) {
    fprintf(out, "%s{%s=", name, what);
    label(out, p.v[i].key);
    fprintf(out, "} %u\n", p.v[i].devices);
  }
  snprintf(name, sizeof name, "colo_%s_max_devices", what);
  snprintf(help, sizeof help,
           "%s_max_devices: the most devices each such %s's running jobs may "
           "hold at once (absent: no limit).",
           what, what);
  family(out, name, "gauge", help);
  for (size_t i = 0; i < p.n; i++) {
    uint32_t limit = by_account ? colod_config_account_max_devices(&d->cfg, p.v[i].key)
                                : colod_config_owner_max_devices(&d->cfg, p.v[i].key);
    if (limit == UINT32_MAX)
      continue;
    fprintf(out, "%s{%s=", name, what);
    label(out, p.v[i].key);
    fprintf(out, "} %u\n", limit);
  }
  free(p.v);
}

static void colod_metrics(colod_t *d, FILE *out) {
  family(out, "colo_heartbeats_total", "counter", "Worker heartbeats answered.");
  fprintf(out, "colo_heartbeats_total %llu\n", (unsigned long long)d->stats.heartbeats);
  family(out, "colo_scheduler_pass_seconds", "summary",
         "Scheduling passes that had jobs waiting to be placed, and their time.");
  fprintf(out, "colo_scheduler_pass_seconds_sum");
  number(out, (double)d->stats.sched_ns / 1e9);
  fprintf(out, "colo_scheduler_pass_seconds_count %llu\n",
          (unsigned long long)d->stats.sched_passes);
  family(out, "colo_scheduler_holds", "gauge",
         "Waiting jobs that held room (a reservation) after the last scheduling pass.");
  fprintf(out, "colo_scheduler_holds %u\n", d->stats.holds);
  family(out, "colo_preemptions_total", "counter",
         "Running jobs stopped to make room for one of higher priority.");
  fprintf(out, "colo_preemptions_total %llu\n", (unsigned long long)d->stats.preempted);
  family(out, "colo_nudges_total", "counter",
         "HostNudge messages sent to workers: their ranks changed, beat now.");
  fprintf(out, "colo_nudges_total %llu\n", (unsigned long long)d->stats.nudges);
  family(out, "colo_notifications_total", "counter",
         "Job records for notify_url: posted (sent), answered with an error or not at all "
         "(failed), or not posted with too many in flight (dropped).");
  fprintf(out, "colo_notifications_total{result=\"sent\"} %llu\n",
          (unsigned long long)d->stats.notify_sent);
  fprintf(out, "colo_notifications_total{result=\"failed\"} %llu\n",
          (unsigned long long)d->stats.notify_failed);
  fprintf(out, "colo_notifications_total{result=\"dropped\"} %llu\n",
          (unsigned long long)d->stats.notify_dropped);
  family(out, "colo_jobs_deleted_total", "counter",
         "Ended jobs deleted, by job_retention or DeleteJob, with their logs.");
  fprintf(out, "colo_jobs_deleted_total %llu\n", (unsigned long long)d->stats.deleted);
  family(out, "colo_rpc_calls_in_flight", "gauge",
         "gRPC calls colod holds: unanswered calls and open streams.");
  fprintf(out, "colo_rpc_calls_in_flight %zu\n", d->rpc ? colo_rpc_server_live_calls(d->rpc) : 0);
  family(out, "colo_watch_streams", "gauge", "Open WatchJob streams (coloctl status --watch).");
  fprintf(out, "colo_watch_streams %u\n", d->n_watches);
  family(out, "colo_jobs_in_line", "gauge",
         "Jobs waiting for room after the last scheduling pass (those waiting for other jobs to "
         "succeed, or in a restart back-off, not counted).");
  fprintf(out, "colo_jobs_in_line %u\n", d->jobs_in_line);
  /* fair share, brought to now: a read of the attempts that ended since the last one */
  colod_share_t *fs = NULL;
  size_t n = 0;
  if (d->cfg.fair_share_half_life_ms && colod_fair_refresh(d) == 0 &&
      colod_fair_list(d, &fs, &n) == 0) {
    family(out, "colo_fair_share_device_hours", "gauge",
           "Each owner's device hours, an hour weighed 2^(-age / fair_share_half_life): within a "
           "priority, the jobs of the owner with the fewest are offered room first.");
    for (size_t i = 0; i < n; i++) {
      fprintf(out,
              "colo_fair_share_device_hours{%s=", colod_fair_by_account(d) ? "account" : "owner");
      label(out, fs[i].owner);
      fprintf(out, ",device=\"%s\"}",
              fs[i].device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU ? "gpu" : "cpu");
      number(out, fs[i].hours);
    }
    free(fs);
  }
}

int colod_metrics_write(colod_t *d, FILE *out) {
  process_metrics(d, out);
  colod_metrics(d, out);
  key_metrics(d, out, 0);
  key_metrics(d, out, 1);
  host_metrics(d, out);
  return job_metrics(d, out);
}

/* ---- HTTP ---- */

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type,
                               char *body, size_t len, int allow) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (allow)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned status, const char *text,
                                    int allow) {
  char *body = strdup(text);
  if (!body)
    return MHD_NO;
  return respond(conn, status, "text/plain; charset=utf-8", body, strlen(body), allow);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_len, void **req_cls) {
  colod_t *d = cls;
  (void)version;
  (void)upload;
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    *upload_len = 0; /* a body is not read: the answer is the same */
    return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served\n", 1);
  }
  static int seen;
  if (!*req_cls) { /* the headers are in: answer on the next call, as MHD asks */
    *req_cls = &seen;
    return MHD_YES;
  }
  if (!strcmp(url, "/healthz"))
    return d->draining ? respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "draining\n", 0)
                       : respond_text(conn, MHD_HTTP_OK, "ok\n", 0);
  if (strcmp(url, "/metrics"))
    return respond_text(conn, MHD_HTTP_NOT_FOUND, "not found: colod serves /metrics and /healthz\n",
                        0);
  char *body = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&body, &len);
  if (!out)
    return respond_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", 0);
  int rc = colod_metrics_write(d, out);
  if (fclose(out) != 0) {
    free(body);
    return respond_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", 0);
  }
  if (rc < 0) { /* a partial page would read as jobs gone: none, and the scrape fails */
    free(body);
    return respond_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "the store cannot be read\n", 0);
  }
  return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len, 0);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n')
    msg[--n] = '\0';
  colo_log(COLO_LOG_WARN, "metrics", "%s", msg);
}

static void on_wake(uv_timer_t *t);

/* runs MHD's pending work, then sleeps until its descriptor is ready or its next timeout */
static void run_mhd(colod_metrics_t *m) {
  if (m->closing)
    return;
  MHD_run(m->mhd);
  MHD_UNSIGNED_LONG_LONG ms;
  if (MHD_get_timeout(m->mhd, &ms) == MHD_YES)
    uv_timer_start(&m->wake, on_wake, ms, 0);
  else
    uv_timer_stop(&m->wake);
}

static void on_wake(uv_timer_t *t) {
  run_mhd(t->data);
}

static void on_ready(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  run_mhd(p->data);
}

/* a listening TCP socket on "host:port" ("[v6]:port"), non-blocking */
static int listen_on(const char *addr, char *err, size_t errlen) {
  char host[256];
  snprintf(host, sizeof host, "%s", addr);
  char *colon = strrchr(host, ':');
  if (!colon)
    return colo_fail(err, errlen, COLO_EINVAL, "metrics_listen \"%s\" must be HOST:PORT", addr);
  *colon = '\0';
  const char *port = colon + 1;
  char *h = host;
  if (h[0] == '[' && colon > h + 1 && colon[-1] == ']') {
    colon[-1] = '\0';
    h++;
  }
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int g = getaddrinfo(h[0] ? h : NULL, port, &hints, &res);
  if (g != 0)
    return colo_fail(err, errlen, COLO_EINVAL, "metrics_listen \"%s\": %s", addr, gai_strerror(g));
  int fd = -1, e = 0;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      e = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      e = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    return colo_fail(err, errlen, COLO_EIO, "metrics_listen %s: cannot listen: %s", addr,
                     strerror(e));
  return fd;
}

int colod_metrics_start(colod_t *d, char *err, size_t errlen) {
  int fd = listen_on(d->cfg.metrics_listen, err, errlen);
  if (fd < 0)
    return fd;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
  colod_metrics_t *m = calloc(1, sizeof *m);
  if (!m) {
    close(fd);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  /* no thread of MHD's own: colod's loop runs it (MHD_run from the poll and the timer) */
  m->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, d,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET,
                            (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_END);
  const union MHD_DaemonInfo *info =
      m->mhd ? MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
  if (!info) {
    if (m->mhd)
      MHD_stop_daemon(m->mhd);
    else
      close(fd);
    free(m);
    return colo_fail(err, errlen, COLO_EIO, "metrics_listen %s: cannot start the HTTP server",
                     d->cfg.metrics_listen);
  }
  m->port = port;
  uv_poll_init(d->loop, &m->poll, info->epoll_fd);
  uv_timer_init(d->loop, &m->wake);
  m->poll.data = m->wake.data = m;
  uv_poll_start(&m->poll, UV_READABLE, on_ready);
  d->metrics = m;
  run_mhd(m);
  return 0;
}

int colod_metrics_port(const colod_t *d) {
  return d->metrics ? d->metrics->port : 0;
}

static void on_closed(uv_handle_t *h) {
  colod_metrics_t *m = h->data;
  if (--m->open_handles == 0) /* libuv runs close callbacks in no order to rely on */
    free(m);
}

void colod_metrics_stop(colod_t *d) {
  colod_metrics_t *m = d->metrics;
  if (!m)
    return;
  d->metrics = NULL;
  m->closing = 1;
  m->open_handles = 2;
  /* the poll lets go of MHD's epoll descriptor before MHD closes it */
  uv_close((uv_handle_t *)&m->poll, on_closed);
  uv_close((uv_handle_t *)&m->wake, on_closed);
  MHD_stop_daemon(m->mhd); /* closes the listening socket and every connection */
}
