#include "ranks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "common/pbcodec.h"
#include "common/setloss.h"
#include "launch.h"

#define PATH_CAP   1200
#define CK_QUEUE   8
#define EVAL_QUEUE 16

struct colo_wrank_s {
  colo_wrank_t *next;
  colo_ranks_t *rs;
  uint64_t job_id;
  uint32_t attempt, rank;
  int phase; /* COLO__V1__RANK_PHASE__* */
  int exit_code, signal;
  int desired; /* in the last reconcile */
  int stopping;
  uint32_t ckpt_want, ckpt_sent; /* checkpoints colod asked of its attempt, and passed on */
  char message[256];
  char early[200]; /* an early stop's reason (its progress record), the message of a clean exit */
  colo_rank_proc_t proc;
  char dir[PATH_CAP]; /* run_dir/job-J/attempt-A */
  char log_path[PATH_CAP], progress_path[PATH_CAP], pid_path[PATH_CAP];
  /* progress file: bytes consumed, the newest step record and checkpoint */
  uint64_t progress_off;
  int has_progress;
  Colo__V1__Progress progress;
  colo_set_losses_t *val_sets;   /* progress.val_sets' storage (setloss.h) */
  int has_resumed, resumed_sent; /* the resume record, until a heartbeat delivers it */
  uint64_t resumed_step;
  /* checkpoints written and not yet delivered to colod, oldest first */
  Colo__V1__Checkpoint ck[CK_QUEUE], *ck_ptr[CK_QUEUE];
  char ck_path[CK_QUEUE][PATH_CAP], ck_sha[CK_QUEUE][65];
  size_t n_ck, n_ck_sent;
  /* evaluations not yet delivered to colod, oldest first */
  Colo__V1__ProgressSample ev[EVAL_QUEUE], *ev_ptr[EVAL_QUEUE];
  colo_set_losses_t *ev_sets[EVAL_QUEUE]; /* ev[k].val_sets' storage, which moves with it */
  size_t n_ev, n_ev_sent;
  /* log shipping: bytes of the current file sent, and of everything sent */
  uint64_t ship_off, shipped_total;
  uint8_t *chunk;
  size_t chunk_len;
  size_t chunk_carry; /* the chunk's first bytes are the carry, the rest is the current file's */
  uint8_t *carry;     /* that tail, until a heartbeat delivers it */
  size_t carry_len;
};

/* ---- helpers ---- */

static colo_wrank_t *find(colo_ranks_t *rs, uint64_t job, uint32_t attempt, uint32_t rank) {
  for (colo_wrank_t *r = rs->head; r; r = r->next)
    if (r->job_id == job && r->attempt == attempt && r->rank == rank)
      return r;
  return NULL;
}

static void unlink_rank(colo_ranks_t *rs, colo_wrank_t *r) {
  for (colo_wrank_t **pp = &rs->head; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      rs->n--;
      return;
    }
}

static void check_all_stopped(colo_ranks_t *rs) {
  if (!rs->all_stopped)
    return;
  for (colo_wrank_t *r = rs->head; r; r = r->next)
    if (r->proc.running)
      return;
  void (*cb)(void *) = rs->all_stopped;
  rs->all_stopped = NULL;
  cb(rs->all_stopped_data);
}

/* Everything the rank wrote has reached colod (or its log is gone). */
static int log_drained(const colo_wrank_t *r) {
  struct stat sb;
  if (r->carry_len > 0 || r->n_ck > 0) /* checkpoints not yet reported count too */
    return 0;
  return !r->log_path[0] || stat(r->log_path, &sb) != 0 || (uint64_t)sb.st_size <= r->ship_off;
}

/* An attempt's directory goes once the last of its ranks here is gone (their logs are at colod),
 * and the job's with it when no other attempt is left in it. */
static void remove_attempt_dir(colo_ranks_t *rs, const char *dir) {
  if (!dir[0])
    return;
  for (colo_wrank_t *o = rs->head; o; o = o->next)
    if (!strcmp(o->dir, dir))
      return;
  if (colo_rmtree(dir) < 0) {
    colo_log(COLO_LOG_WARN, "ranks", "cannot remove %s: %s", dir, strerror(errno));
    return;
  }
  char job[PATH_CAP];
  snprintf(job, sizeof job, "%s", dir);
  char *slash = strrchr(job, '/');
  if (slash) {
    *slash = '\0';
    rmdir(job); /* fails, as it should, while another attempt's directory is in it */
  }
}

static void read_progress(colo_wrank_t *r);

/* Drops the k oldest queued evaluations; their storage goes round to the end for reuse. */
static void ev_shift(colo_wrank_t *r, size_t k) {
  colo_set_losses_t *spare[EVAL_QUEUE];
  if (k == 0)
    return;
  memcpy(spare, r->ev_sets, k * sizeof spare[0]);
  memmove(&r->ev[0], &r->ev[k], (r->n_ev - k) * sizeof r->ev[0]);
  memmove(&r->ev_sets[0], &r->ev_sets[k], (EVAL_QUEUE - k) * sizeof r->ev_sets[0]);
  memcpy(&r->ev_sets[EVAL_QUEUE - k], spare, k * sizeof spare[0]);
  r->n_ev -= k;
}

static void free_rank(colo_wrank_t *r) {
  colo_set_losses_free(r->val_sets);
  for (size_t k = 0; k < EVAL_QUEUE; k++)
    colo_set_losses_free(r->ev_sets[k]);
  free(r->chunk);
  free(r->carry);
  free(r);
}

/* An ended rank leaves the table, and its attempt's directory with the last of them. */
static void drop_rank(colo_ranks_t *rs, colo_wrank_t *r) {
  unlink_rank(rs, r);
  if (!rs->cfg->keep_run_dirs)
    remove_attempt_dir(rs, r->dir);
  free_rank(r);
}

/* Why a rank that exited non-zero failed, as it said last: the last line of its log that
 * colo-train wrote its error on ("colo-train ...: reason"), else the last line; into r->message
 * (tabs and control characters as spaces, at most its size). */
static void exit_reason(colo_wrank_t *r) {
  int fd = r->log_path[0] ? open(r->log_path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd < 0)
    return;
  char buf[4096];
  struct stat sb;
  off_t at = fstat(fd, &sb) == 0 && sb.st_size > (off_t)sizeof buf - 1
                 ? sb.st_size - (off_t)sizeof buf + 1
                 : 0;
  ssize_t n = pread(fd, buf, sizeof buf - 1, at);
  close(fd);
  if (n <= 0)
    return;
  buf[n] = '\0';
  const char *pick = NULL, *last = NULL;
  for (char *line = buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    if (line == buf && at > 0)
      continue; /* the tail of a line cut by the window */
    if (*line)
      last = line;
    if (!strncmp(line, "colo-train", 10))
      pick = line;
  }
  if (!pick)
    pick = last;
  if (!pick)
    return;
  /* "colo-train train: rank 3: reason" says no more than "reason" where the rank is known */
  if (!strncmp(pick, "colo-train train: ", 18))
    pick += 18;
  unsigned rk;
  int used = 0;
  if (sscanf(pick, "rank %u: %n", &rk, &used) == 1 && used > 0)
    pick += used;
  size_t k = 0;
  for (; pick[k] && k + 1 < sizeof r->message; k++)
    r->message[k] = (unsigned char)pick[k] < 0x20 ? ' ' : pick[k];
  r->message[k] = '\0';
}

static void on_rank_exit(colo_rank_proc_t *p, int64_t exit_status, int term_signal) {
  colo_wrank_t *r = p->data;
  colo_ranks_t *rs = r->rs;
  r->phase = COLO__V1__RANK_PHASE__RANK_PHASE_EXITED;
  r->exit_code = (int)exit_status;
  r->signal = term_signal;
  unlink(r->pid_path);
  if (exit_status != 0 && !term_signal && !r->message[0])
    exit_reason(r);
  if (exit_status == 0 && !term_signal && r->progress_path[0]) {
    read_progress(r); /* its last records: an early stop says why it ended before its last step */
    if (r->early[0] && !r->message[0])
      snprintf(r->message, sizeof r->message, "%s", r->early);
  }
  if (term_signal)
    colo_log(COLO_LOG_INFO, "ranks", "job %llu attempt %u rank %u (pid %d) ended by signal %d%s",
             (unsigned long long)r->job_id, r->attempt, r->rank, p->pid, term_signal,
             r->stopping ? " (stopped)" : "");
  else
    colo_log(exit_status == 0 ? COLO_LOG_INFO : COLO_LOG_WARN, "ranks",
             "job %llu attempt %u rank %u (pid %d) exited with code %d",
             (unsigned long long)r->job_id, r->attempt, r->rank, p->pid, (int)exit_status);
  /* an unwanted rank is forgotten by colo_ranks_status_done once its log is shipped */
  check_all_stopped(rs);
  if (rs->on_exit)
    rs->on_exit(rs->on_exit_data);
}

/* ---- starting a rank ---- */

static void envf(char **env, size_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void envf(char **env, size_t *n, const char *fmt, ...) {
  char buf[PATH_CAP + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  env[(*n)++] = strdup(buf);
}

static int write_job_file(const char *path, const Colo__V1__JobSpec *spec, char *why, size_t n) {
  cJSON *j = colo_pb_to_json(&spec->base);
  char *text = j ? cJSON_Print(j) : NULL;
  cJSON_Delete(j);
  char tmp[PATH_CAP + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = text ? fopen(tmp, "w") : NULL;
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f && fclose(f) != 0)
    ok = 0;
  free(text);
  if (!ok || rename(tmp, path) != 0) {
    snprintf(why, n, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return COLO_EIO;
  }
  return 0;
}

/* Checks what came over the network before anything is written or started. */
static int check_launch(const Colo__V1__RankLaunch *l, Colo__V1__JobSpec *spec, char *why,
                        size_t n) {
  if (!l->has_job_id || !l->has_attempt || !l->has_rank || !l->has_world || !spec) {
    snprintf(why, n, "launch without job, attempt, rank, world or spec");
    return COLO_EINVAL;
  }
  colo_jobspec_fill_defaults(spec);
  if (colo_jobspec_validate(spec, why, n) < 0)
    return COLO_EINVAL;
  if (colo_jobspec_world(spec) != l->world || l->rank >= l->world) {
    snprintf(why, n, "rank %u of world %u does not fit the spec's world %llu", l->rank, l->world,
             colo_jobspec_world(spec));
    return COLO_EINVAL;
  }
  if (!l->rendezvous || !l->rendezvous[0] || strlen(l->rendezvous) > 255 ||
      strchr(l->rendezvous, '/') || strchr(l->rendezvous, '=')) {
    snprintf(why, n, "bad rendezvous address");
    return COLO_EINVAL;
  }
  if (l->init_from_checkpoints && l->init_from_checkpoints[0] &&
      (strlen(l->init_from_checkpoints) > COLO_MAX_PATH ||
       !colo_path_is_contained(l->init_from_checkpoints))) {
    snprintf(why, n, "init_from_checkpoints must be a path under the checkpoint root");
    return COLO_EINVAL;
  }
  return 0;
}

static int start_rank(colo_ranks_t *rs, colo_wrank_t *r, const Colo__V1__RankLaunch *l, char *why,
                      size_t whylen) {
  const Colo__V1__WorkerConfig *cfg = rs->cfg;
  Colo__V1__JobSpec *spec = l->spec;
  int rc = check_launch(l, spec, why, whylen);
  if (rc < 0)
    return rc;
  char dir[PATH_CAP], job_file[PATH_CAP + 16], ckpt_dir[PATH_CAP], resume[PATH_CAP + 32];
  snprintf(dir, sizeof dir, "%s/job-%llu/attempt-%u", cfg->run_dir, (unsigned long long)l->job_id,
           l->attempt);
  if (colo_mkdirs(dir, 0750) < 0) {
    snprintf(why, whylen, "cannot create %s: %s", dir, strerror(errno));
    return COLO_EIO;
  }
  snprintf(r->dir, sizeof r->dir, "%s", dir);
  snprintf(job_file, sizeof job_file, "%s/job.json", dir);
  if ((rc = write_job_file(job_file, spec, why, whylen)) < 0)
    return rc;
  if (spec->checkpoint->dir && spec->checkpoint->dir[0])
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/%s", cfg->checkpoint_root, spec->checkpoint->dir);
  else
    snprintf(ckpt_dir, sizeof ckpt_dir, "%s/job-%llu", cfg->checkpoint_root,
             (unsigned long long)l->job_id);
  if (colo_mkdirs(ckpt_dir, 0750) < 0) {
    snprintf(why, whylen, "cannot create %s: %s", ckpt_dir, strerror(errno));
    return COLO_EIO;
  }
  if (l->has_resume_step && l->resume_step > 0)
    snprintf(resume, sizeof resume, "%s/step_%08llu", ckpt_dir, (unsigned long long)l->resume_step);
  else
    snprintf(resume, sizeof resume, "auto");
  snprintf(r->log_path, sizeof r->log_path, "%s/rank-%u.log", dir, l->rank);
  snprintf(r->progress_path, sizeof r->progress_path, "%s/rank-%u.progress", dir, l->rank);
  unlink(r->progress_path); /* a record of an earlier start must not count for this one */
  char threads[16], init[PATH_CAP + COLO_MAX_PATH + 2];
  snprintf(threads, sizeof threads, "%u", rs->threads);
  if (l->init_from_checkpoints && l->init_from_checkpoints[0]) /* train.init_from_job's */
    snprintf(init, sizeof init, "%s/%s", cfg->checkpoint_root, l->init_from_checkpoints);
  char *argv[] = {(char *)cfg->colo_train,
                  "train",
                  "--job",
                  job_file,
                  "--data-root",
                  (char *)cfg->data_root,
                  "--ckpt-dir",
                  ckpt_dir,
                  "--nvme-root",
                  (char *)cfg->nvme_root,
                  "--resume",
                  resume,
                  "--progress",
                  r->progress_path,
                  "--threads",
                  threads,
                  NULL,
                  NULL,
                  NULL};
  if (l->init_from_checkpoints && l->init_from_checkpoints[0]) {
    argv[sizeof argv / sizeof argv[0] - 3] = "--init-from-checkpoints";
    argv[sizeof argv / sizeof argv[0] - 2] = init;
  }
  extern char **environ;
  size_t n_env = 0;
  while (environ[n_env])
    n_env++;
  /* the settings below, what passes from the worker's environment, and rank_env */
  char **env = calloc(48 + n_env + cfg->n_rank_env, sizeof *env);
  if (!env) {
    snprintf(why, whylen, "out of memory");
    return COLO_ENOMEM;
  }
  size_t ne = 0;
  envf(env, &ne, "COLO_JOB_ID=%llu", (unsigned long long)l->job_id);
  envf(env, &ne, "COLO_ATTEMPT=%u", l->attempt);
  envf(env, &ne, "COLO_RANK=%u", l->rank);
  envf(env, &ne, "COLO_WORLD=%u", l->world);
  envf(env, &ne, "COLO_DP_IDX=%u", l->dp_idx);
  envf(env, &ne, "COLO_TP_IDX=%u", l->tp_idx);
  envf(env, &ne, "COLO_PP_IDX=%u", l->pp_idx);
  envf(env, &ne, "COLO_DEVICE=%u", l->device_index);
  if (!strcmp(l->rendezvous, "colod")) /* colod's store, where this worker reaches colod */
    envf(env, &ne, "COLO_STORE=colod://%s/%llu/%u", cfg->coordinator, (unsigned long long)l->job_id,
         l->attempt);
  else
    envf(env, &ne, "COLO_STORE=%s", l->rendezvous);
  envf(env, &ne, "COLO_BIND=%s", cfg->address);
  /* the worker's TLS files, for colod's rendezvous store */
  const char *const TLS[][2] = {{"COLO_TLS_CA", cfg->tls_ca},
                                {"COLO_TLS_CERT", cfg->tls_cert},
                                {"COLO_TLS_KEY", cfg->tls_key},
                                {"COLO_TLS_SERVER_NAME", cfg->tls_server_name}};
  for (size_t i = 0; i < sizeof TLS / sizeof TLS[0]; i++)
    if (TLS[i][1] && TLS[i][1][0])
      envf(env, &ne, "%s=%s", TLS[i][0], TLS[i][1]);
  envf(env, &ne, "COLO_WORKER_PID=%d", (int)getpid());
  envf(env, &ne, "COLO_RANK_ID=%llu.%u.%u", (unsigned long long)l->job_id, l->attempt, l->rank);
  envf(env, &ne, "OMP_NUM_THREADS=%u", rs->threads);
  envf(env, &ne, "OPENBLAS_NUM_THREADS=%u", rs->threads);
  if (getenv("OMP_WAIT_POLICY") && strlen(getenv("OMP_WAIT_POLICY")) < PATH_CAP)
    envf(env, &ne, "OMP_WAIT_POLICY=%s", getenv("OMP_WAIT_POLICY"));
  else if (rs->wait_passively)
    envf(env, &ne, "OMP_WAIT_POLICY=passive");
  if (spec->resources->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU)
    envf(env, &ne, "CUDA_VISIBLE_DEVICES=%u", l->device_index);
  /* what a rank needs from the worker's own environment, and nothing else: these, and every
   * variable of NCCL's and of the CUDA backend's (its library, attention, epilogues, profile,
   * the emulated GPU, cuDNN's library) */
  static const char *const PASS[] = {"PATH",         "LD_LIBRARY_PATH", "HOME",
                                     "TMPDIR",       "ASAN_OPTIONS",    "UBSAN_OPTIONS",
                                     "LSAN_OPTIONS", "COLO_COMM_SHM",   "COLO_COMM_TIMEOUT_MS"};
  static const char *const PREFIX[] = {"NCCL_", "COLO_CUDA_", "COLO_CUDNN_"};
  for (size_t i = 0; i < sizeof PASS / sizeof PASS[0]; i++) {
    const char *v = getenv(PASS[i]);
    if (v && strlen(v) < PATH_CAP)
      envf(env, &ne, "%s=%s", PASS[i], v);
  }
  for (size_t e = 0; e < n_env; e++)
    for (size_t i = 0; i < sizeof PREFIX / sizeof PREFIX[0]; i++)
      if (!strncmp(environ[e], PREFIX[i], strlen(PREFIX[i])) && strlen(environ[e]) < PATH_CAP)
        envf(env, &ne, "%s", environ[e]);
  for (size_t i = 0; i < cfg->n_rank_env; i++) { /* the worker config's win over those passed */
    const char *eq = strchr(cfg->rank_env[i], '=');
    size_t k = 0, len = eq ? (size_t)(eq - cfg->rank_env[i]) + 1 : 0;
    while (k < ne && strncmp(env[k], cfg->rank_env[i], len) != 0)
      k++;
    if (k < ne) { /* getenv finds the first of a name: replace it */
      free(env[k]);
      env[k] = env[--ne];
    }
    envf(env, &ne, "%s", cfg->rank_env[i]);
  }
  env[ne] = NULL;
  r->proc.data = r;
  rc = colo_rank_start(rs->loop, &r->proc, argv, env, dir, r->log_path, on_rank_exit, why, whylen);
  for (size_t i = 0; i < ne; i++)
    free(env[i]);
  free(env);
  if (rc < 0)
    return rc;
  snprintf(r->pid_path, sizeof r->pid_path, "%s/pids/%d", cfg->run_dir, r->proc.pid);
  FILE *pf = fopen(r->pid_path, "w");
  if (pf) {
    fprintf(pf, "%llu.%u.%u\n", (unsigned long long)l->job_id, l->attempt, l->rank);
    fclose(pf);
  }
  colo_log(COLO_LOG_INFO, "ranks", "job %llu attempt %u rank %u/%u started (pid %d, log %s)",
           (unsigned long long)l->job_id, l->attempt, l->rank, l->world, r->proc.pid, r->log_path);
  return 0;
}

#define PROBE_MS 100

/* A new rank's first progress record (it is training) goes to colod at once: the probe reads
 * the progress files of STARTING ranks until none is left. */
static void on_probe(uv_timer_t *t) {
  colo_ranks_t *rs = t->data;
  int started = 0, starting = 0;
  for (colo_wrank_t *r = rs->head; r; r = r->next) {
    if (r->phase != COLO__V1__RANK_PHASE__RANK_PHASE_STARTING || !r->proc.running)
      continue;
    read_progress(r);
    if (r->phase == COLO__V1__RANK_PHASE__RANK_PHASE_RUNNING)
      started = 1;
    else
      starting = 1;
  }
  if (!starting) {
    uv_timer_stop(&rs->probe);
    rs->probe_on = 0;
  }
  if (started && rs->on_started)
    rs->on_started(rs->on_exit_data);
}

int colo_ranks_init(colo_ranks_t *rs, uv_loop_t *loop, const Colo__V1__WorkerConfig *cfg,
                    uint32_t slots, char *err, size_t errlen) {
  memset(rs, 0, sizeof *rs);
  rs->loop = loop;
  uv_timer_init(loop, &rs->probe);
  rs->probe.data = rs;
  rs->cfg = cfg;
  rs->threads = cfg->rank_threads;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (rs->threads == 0) {
    rs->threads = cores > 0 && slots > 0 ? (uint32_t)cores / slots : 1;
    if (rs->threads == 0)
      rs->threads = 1;
  }
  /* idle OpenMP threads spinning on cores the other ranks need */
  rs->wait_passively = rs->threads > 1 && cores > 0 && (long)slots * rs->threads > cores;
  char pids[PATH_CAP];
  snprintf(pids, sizeof pids, "%s/pids", cfg->run_dir);
  if (colo_mkdirs(pids, 0750) < 0) {
    snprintf(err, errlen, "cannot create %s: %s", pids, strerror(errno));
    return COLO_EIO;
  }
  return 0;
}

/* Passes a checkpoint colod asked for on to a running rank: SIGUSR1, which colo-train takes as
 * "save one at the next step". Not before it runs (its first progress record): until colo-train
 * has set its handler, SIGUSR1 would end it. Several asked at once are one. */
static void ask_checkpoint(colo_wrank_t *r) {
  if (r->ckpt_want <= r->ckpt_sent || r->phase != COLO__V1__RANK_PHASE__RANK_PHASE_RUNNING ||
      !r->proc.running || r->stopping)
    return;
  /* the request's number rides with the signal: the rank reports it with the checkpoint */
  union sigval v = {.sival_int = (int)r->ckpt_want};
  if (sigqueue(r->proc.pid, SIGUSR1, v) == 0)
    colo_log(COLO_LOG_INFO, "ranks", "job %llu attempt %u rank %u: checkpoint %u asked",
             (unsigned long long)r->job_id, r->attempt, r->rank, r->ckpt_want);
  r->ckpt_sent = r->ckpt_want;
}

void colo_ranks_reconcile(colo_ranks_t *rs, Colo__V1__RankLaunch *const *desired, size_t n) {
  for (colo_wrank_t *r = rs->head; r; r = r->next)
    r->desired = 0;
  for (size_t i = 0; i < n; i++) {
    const Colo__V1__RankLaunch *l = desired[i];
    colo_wrank_t *r = find(rs, l->job_id, l->attempt, l->rank);
    if (r) {
      r->desired = 1;
      r->ckpt_want = l->has_checkpoint_seq ? l->checkpoint_seq : 0;
      ask_checkpoint(r);
      continue;
    }
    r = calloc(1, sizeof *r);
    if (!r)
      continue;
    r->rs = rs;
    r->job_id = l->job_id;
    r->attempt = l->attempt;
    r->rank = l->rank;
    r->desired = 1;
    r->ckpt_want = l->has_checkpoint_seq ? l->checkpoint_seq : 0;
    r->phase = COLO__V1__RANK_PHASE__RANK_PHASE_STARTING;
    colo__v1__progress__init(&r->progress);
    r->next = rs->head;
    rs->head = r;
    rs->n++;
    if (start_rank(rs, r, l, r->message, sizeof r->message) < 0) {
      colo_log(COLO_LOG_WARN, "ranks", "job %llu attempt %u rank %u cannot start: %s",
               (unsigned long long)l->job_id, l->attempt, l->rank, r->message);
      r->phase = COLO__V1__RANK_PHASE__RANK_PHASE_EXITED;
      r->exit_code = 127;
    }
  }
  colo_wrank_t *next;
  for (colo_wrank_t *r = rs->head; r; r = next) {
    next = r->next;
    if (r->desired)
      continue;
    if (r->proc.running) {
      if (!r->stopping)
        colo_log(COLO_LOG_INFO, "ranks",
                 "job %llu attempt %u rank %u is no longer wanted: stopping",
                 (unsigned long long)r->job_id, r->attempt, r->rank);
      r->stopping = 1;
      colo_rank_stop(&r->proc, rs->cfg->stop_grace_ms);
    } else if (rs->n_st == 0 && log_drained(r)) {
      drop_rank(rs, r);
    }
  }
  if (!rs->probe_on && !rs->closing)
    for (colo_wrank_t *r = rs->head; r; r = r->next)
      if (r->phase == COLO__V1__RANK_PHASE__RANK_PHASE_STARTING && r->proc.running) {
        uv_timer_start(&rs->probe, on_probe, PROBE_MS, PROBE_MS);
        rs->probe_on = 1;
        break;
      }
}

/* ---- progress records ---- */

static void apply_record(colo_wrank_t *r, const char *line) {
  cJSON *j = cJSON_Parse(line);
  if (!j)
    return;
  const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(j, "event"));
  double step = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "step"));
  if (ev && !strcmp(ev, "step") && step >= 0) {
    Colo__V1__Progress *p = &r->progress;
    p->has_step = p->has_total_steps = p->has_loss = p->has_lr = 1;
    p->has_tokens_per_s = p->has_memory_bytes = p->has_time_ms = 1;
    p->step = (uint64_t)step;
    p->total_steps = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "total_steps"));
    p->loss = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "loss"));
    p->lr = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "lr"));
    p->tokens_per_s = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "tokens_per_s"));
    p->memory_bytes = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "memory_bytes"));
    p->time_ms = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "time_ms"));
    const cJSON *ep = cJSON_GetObjectItem(j, "epochs");
    p->has_epochs = cJSON_IsNumber(ep);
    p->epochs = cJSON_IsNumber(ep) ? (float)cJSON_GetNumberValue(ep) : 0.0f;
    const cJSON *hb = cJSON_GetObjectItem(j, "host_bytes"); /* placement off the device */
    p->has_host_memory_bytes = cJSON_IsNumber(hb);
    p->host_memory_bytes = cJSON_IsNumber(hb) ? (uint64_t)cJSON_GetNumberValue(hb) : 0;
    const cJSON *sk = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "spike"), "skipped_total");
    p->has_spikes_skipped = cJSON_IsNumber(sk) && cJSON_GetNumberValue(sk) >= 0;
    p->spikes_skipped = p->has_spikes_skipped ? (uint64_t)cJSON_GetNumberValue(sk) : 0;
    r->has_progress = 1;
  } else if (ev && !strcmp(ev, "eval") && step >= 0) {
    Colo__V1__Progress *p = &r->progress;
    /* null: no validation set, multiple-choice sets alone (a train.steps=0 job's) */
    const cJSON *vl = cJSON_GetObjectItem(j, "val_loss");
    p->has_val_loss = cJSON_IsNumber(vl);
    p->has_val_step = 1;
    p->val_loss = p->has_val_loss ? (float)cJSON_GetNumberValue(vl) : 0.0f;
    p->val_step = (uint64_t)step;
    /* the weights' moving average's, in their place (train.ema_decay) */
    const cJSON *ev_ema = cJSON_GetObjectItem(j, "ema_val_loss");
    p->has_ema_val_loss = p->has_val_loss && cJSON_IsNumber(ev_ema);
    p->ema_val_loss = p->has_ema_val_loss ? (float)cJSON_GetNumberValue(ev_ema) : 0.0f;
    /* each validation set's, by name (data.val_sources) */
    const char *names[COLO_SET_LOSSES_MAX];
    float losses[COLO_SET_LOSSES_MAX];
    size_t n = 0;
    const cJSON *sets = cJSON_GetObjectItem(j, "val_sets"), *it;
    cJSON_ArrayForEach(it, sets) {
      if (n < COLO_SET_LOSSES_MAX && it->string && cJSON_IsNumber(it)) {
        names[n] = it->string;
        losses[n++] = (float)cJSON_GetNumberValue(it);
      }
    }
    colo_set_losses_put(&r->val_sets, &p->val_sets, &p->n_val_sets, names, losses, n);
    /* each multiple-choice set's scores, by name (data.choice_sets) */
    Colo__V1__SetScore sc[COLO_SET_LOSSES_MAX], *scp[COLO_SET_LOSSES_MAX];
    size_t ns = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "choices")) {
      if (ns < COLO_SET_LOSSES_MAX && it->string && cJSON_IsObject(it)) {
        colo__v1__set_score__init(&sc[ns]);
        sc[ns].name = it->string;
        sc[ns].acc = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "acc"));
        sc[ns].acc_norm = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "acc_norm"));
        sc[ns].acc_token = (float)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "acc_token"));
        double q = cJSON_GetNumberValue(cJSON_GetObjectItem(it, "questions"));
        sc[ns].questions = q >= 0 && q < 4294967296.0 ? (uint32_t)q : 0;
        scp[ns] = &sc[ns];
        ns++;
      }
    }
    colo_set_scores_put(&r->val_sets, &p->choice_scores, &p->n_choice_scores, scp, ns);
    /* early stopping's count, as of this evaluation (train.early_stop_patience) */
    /* (a score's, higher better, under train.best_metric) */
    const cJSON *bv = cJSON_GetObjectItem(j, "best_val_loss"),
                *bsc = cJSON_GetObjectItem(j, "best_score"),
                *bs = cJSON_GetObjectItem(j, "best_step"),
                *since = cJSON_GetObjectItem(j, "evals_since_best");
    p->has_best_val_step = p->has_evals_since_best =
        (cJSON_IsNumber(bv) || cJSON_IsNumber(bsc)) && cJSON_IsNumber(bs) &&
        cJSON_IsNumber(since) && cJSON_GetNumberValue(bs) >= 0 && cJSON_GetNumberValue(since) >= 0;
    p->has_best_val_loss = p->has_best_val_step && cJSON_IsNumber(bv);
    p->has_best_score = p->has_best_val_step && !p->has_best_val_loss;
    p->best_val_loss = p->has_best_val_loss ? (float)cJSON_GetNumberValue(bv) : 0.0f;
    p->best_score = p->has_best_score ? (float)cJSON_GetNumberValue(bsc) : 0.0f;
    p->best_val_step = p->has_best_val_step ? (uint64_t)cJSON_GetNumberValue(bs) : 0;
    p->evals_since_best = p->has_evals_since_best ? (uint32_t)cJSON_GetNumberValue(since) : 0;
    r->has_progress = 1;
    if (r->n_ev == EVAL_QUEUE) /* colod away for long: the oldest unsent one is dropped */
      ev_shift(r, 1);
    size_t k = r->n_ev++;
    Colo__V1__ProgressSample *e = &r->ev[k];
    colo__v1__progress_sample__init(e);
    e->has_attempt = e->has_step = e->has_time_ms = 1;
    e->has_val_loss = p->has_val_loss;
    e->attempt = r->attempt;
    e->step = (uint64_t)step;
    e->val_loss = p->val_loss;
    e->has_ema_val_loss = p->has_ema_val_loss;
    e->ema_val_loss = p->ema_val_loss;
    colo_set_losses_put(&r->ev_sets[k], &e->val_sets, &e->n_val_sets, names, losses, n);
    colo_set_scores_put(&r->ev_sets[k], &e->choice_scores, &e->n_choice_scores, scp, ns);
    e->time_ms = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "time_ms"));
  } else if (ev && !strcmp(ev, "init_from") && step >= 0) { /* a checkpoint's weights: its step */
    r->progress.has_model_step = 1;
    r->progress.model_step = (uint64_t)step;
  } else if (ev && !strcmp(ev, "early_stop")) { /* why it ends before its last step */
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(j, "message"));
    size_t k = 0;
    for (; why && why[k] && k + 1 < sizeof r->early; k++)
      r->early[k] = (unsigned char)why[k] < 0x20 ? ' ' : why[k];
    r->early[k] = '\0';
  } else if (ev && !strcmp(ev, "resumed") && step >= 0) {
    r->has_resumed = 1;
    r->resumed_step = (uint64_t)step;
  } else if (ev && !strcmp(ev, "checkpoint") && step >= 0) {
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItem(j, "path"));
    const char *sha = cJSON_GetStringValue(cJSON_GetObjectItem(j, "manifest_sha256"));
    if (path && strlen(path) < PATH_CAP) {
      if (r->n_ck == CK_QUEUE) { /* colod away for long: the oldest unsent one is dropped */
        memmove(&r->ck_path[0], &r->ck_path[1], (CK_QUEUE - 1) * sizeof r->ck_path[0]);
        memmove(&r->ck_sha[0], &r->ck_sha[1], (CK_QUEUE - 1) * sizeof r->ck_sha[0]);
        memmove(&r->ck[0], &r->ck[1], (CK_QUEUE - 1) * sizeof r->ck[0]);
        r->n_ck--;
      }
      size_t k = r->n_ck++;
      Colo__V1__Checkpoint *c = &r->ck[k];
      colo__v1__checkpoint__init(c);
      snprintf(r->ck_path[k], PATH_CAP, "%s", path);
      snprintf(r->ck_sha[k], 65, "%s", sha ? sha : "");
      c->has_job_id = c->has_attempt = c->has_step = c->has_bytes = c->has_created_ms = 1;
      c->job_id = r->job_id;
      c->attempt = r->attempt;
      c->step = (uint64_t)step;
      c->bytes = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "bytes"));
      c->created_ms = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "time_ms"));
      const cJSON *req = cJSON_GetObjectItem(j, "request"); /* written as CheckpointJob asked */
      c->has_request = cJSON_IsNumber(req) && cJSON_GetNumberValue(req) >= 1;
      c->request = c->has_request ? (uint32_t)cJSON_GetNumberValue(req) : 0;
      const cJSON *vl = cJSON_GetObjectItem(j, "val_loss"); /* evaluated at its step */
      c->has_val_loss = cJSON_IsNumber(vl) && isfinite(cJSON_GetNumberValue(vl));
      c->val_loss = c->has_val_loss ? (float)cJSON_GetNumberValue(vl) : 0;
      const cJSON *sc = cJSON_GetObjectItem(j, "score"); /* train.best_metric's, there */
      c->has_score = cJSON_IsNumber(sc) && isfinite(cJSON_GetNumberValue(sc));
      c->score = c->has_score ? (float)cJSON_GetNumberValue(sc) : 0;
    }
  }
  cJSON_Delete(j);
}

/* Reads the complete lines added to the progress file since the last call. */
static void read_progress(colo_wrank_t *r) {
  int fd = open(r->progress_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  char buf[8192];
  for (;;) {
    ssize_t got = pread(fd, buf, sizeof buf - 1, (off_t)r->progress_off);
    if (got <= 0)
      break;
    buf[got] = '\0';
    char *start = buf, *nl;
    while ((nl = strchr(start, '\n'))) {
      *nl = '\0';
      apply_record(r, start);
      start = nl + 1;
    }
    size_t used = (size_t)(start - buf);
    if (used == 0) { /* a line longer than the buffer: skip it */
      used = (size_t)got;
    }
    r->progress_off += used;
    if ((size_t)got < sizeof buf - 1)
      break;
  }
  close(fd);
  if (r->has_progress && r->phase == COLO__V1__RANK_PHASE__RANK_PHASE_STARTING)
    r->phase = COLO__V1__RANK_PHASE__RANK_PHASE_RUNNING;
}

/* ---- logs: rotation and shipping ---- */

/* Rotates by copy and truncate: the rank keeps writing to its O_APPEND descriptor, so the file
 * cannot be renamed from under it. The bytes of the copy not yet shipped become the carry,
 * shipped before anything of the new file. Only what the rank writes between the end of the
 * copy and the truncate (microseconds) is lost. */
static void rotate_log(colo_wrank_t *r) {
  const Colo__V1__WorkerConfig *cfg = r->rs->cfg;
  char from[PATH_CAP + 16], to[PATH_CAP + 16];
  for (uint32_t k = cfg->log_keep; k >= 2; k--) {
    snprintf(from, sizeof from, "%s.%u", r->log_path, k - 1);
    snprintf(to, sizeof to, "%s.%u", r->log_path, k);
    rename(from, to);
  }
  snprintf(to, sizeof to, "%s.1", r->log_path);
  int in = open(r->log_path, O_RDONLY | O_CLOEXEC);
  int out =
      in >= 0 && cfg->log_keep > 0 ? open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640) : -1;
  char buf[65536];
  ssize_t got;
  uint64_t copied = 0;
  while (in >= 0 && (got = read(in, buf, sizeof buf)) > 0) {
    if (out >= 0 && write(out, buf, (size_t)got) != got)
      break;
    if (copied + (uint64_t)got > r->ship_off) { /* the part not shipped yet */
      uint64_t from_off = copied > r->ship_off ? 0 : r->ship_off - copied;
      size_t add = (size_t)((uint64_t)got - from_off);
      uint8_t *c = realloc(r->carry, r->carry_len + add);
      if (c) {
        memcpy(c + r->carry_len, buf + from_off, add);
        r->carry = c;
        r->carry_len += add;
      }
    }
    copied += (uint64_t)got;
  }
  if (out >= 0)
    close(out);
  if (in >= 0) {
    close(in);
    if (truncate(r->log_path, 0) != 0)
      colo_log(COLO_LOG_WARN, "ranks", "cannot truncate %s: %s", r->log_path, strerror(errno));
  }
  r->ship_off = 0;
}

static void read_log_chunk(colo_wrank_t *r) {
  const Colo__V1__WorkerConfig *cfg = r->rs->cfg;
  struct stat sb;
  free(r->chunk);
  r->chunk = NULL;
  r->chunk_len = 0;
  r->chunk_carry = 0;
  if (r->carry_len == 0 && stat(r->log_path, &sb) == 0) {
    uint64_t size = (uint64_t)sb.st_size;
    if (size < r->ship_off) /* truncated behind our back */
      r->ship_off = 0;
    /* rotate once everything is shipped, or when colod has been away for long */
    if (cfg->log_max_bytes > 0 &&
        ((size > cfg->log_max_bytes && r->ship_off == size) || size > 2 * cfg->log_max_bytes))
      rotate_log(r);
  }
  /* the rotated-away tail first, then the new file from its start */
  uint64_t size = stat(r->log_path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
  uint64_t want = size > r->ship_off ? size - r->ship_off : 0;
  if (r->carry_len + want > cfg->log_ship_bytes)
    want = r->carry_len < cfg->log_ship_bytes ? cfg->log_ship_bytes - r->carry_len : 0;
  if (r->carry_len + want == 0)
    return;
  r->chunk = malloc(r->carry_len + want);
  if (!r->chunk)
    return;
  if (r->carry_len)
    memcpy(r->chunk, r->carry, r->carry_len);
  r->chunk_carry = r->carry_len;
  ssize_t got = 0;
  int fd = want ? open(r->log_path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd >= 0) {
    got = pread(fd, r->chunk + r->carry_len, want, (off_t)r->ship_off);
    close(fd);
  }
  r->chunk_len = r->carry_len + (got > 0 ? (size_t)got : 0);
}

/* ---- heartbeat status ---- */

static void free_statuses(colo_ranks_t *rs) {
  for (size_t i = 0; i < rs->n_st; i++)
    free(rs->st[i]);
  free(rs->st);
  free(rs->st_rank);
  rs->st = NULL;
  rs->st_rank = NULL;
  rs->n_st = 0;
}

size_t colo_ranks_status(colo_ranks_t *rs, Colo__V1__RankStatus ***out) {
  free_statuses(rs);
  rs->st = calloc(rs->n ? rs->n : 1, sizeof *rs->st);
  rs->st_rank = calloc(rs->n ? rs->n : 1, sizeof *rs->st_rank);
  size_t k = 0;
  for (colo_wrank_t *r = rs->head; r && rs->st && rs->st_rank; r = r->next) {
    if (r->progress_path[0])
      read_progress(r);
    if (r->log_path[0])
      read_log_chunk(r);
    Colo__V1__RankStatus *s = malloc(sizeof *s);
    if (!s)
      break;
    colo__v1__rank_status__init(s);
    s->has_job_id = s->has_attempt = s->has_rank = s->has_phase = 1;
    s->job_id = r->job_id;
    s->attempt = r->attempt;
    s->rank = r->rank;
    s->phase = r->phase;
    if (r->phase == COLO__V1__RANK_PHASE__RANK_PHASE_EXITED) {
      s->has_exit_code = s->has_signal = 1;
      s->exit_code = r->exit_code;
      s->signal = r->signal;
    }
    if (r->proc.pid > 0) {
      s->has_pid = 1;
      s->pid = (uint32_t)r->proc.pid;
    }
    if (r->message[0])
      s->message = r->message;
    if (r->has_progress)
      s->progress = &r->progress;
    s->has_resumed_step = r->has_resumed;
    s->resumed_step = r->resumed_step;
    r->resumed_sent = r->has_resumed;
    for (size_t c = 0; c < r->n_ck; c++) { /* strings re-pointed: the queue may have moved */
      r->ck[c].path = r->ck_path[c];
      r->ck[c].manifest_sha256 = r->ck_sha[c];
      r->ck_ptr[c] = &r->ck[c];
    }
    s->n_checkpoints = r->n_ck;
    s->checkpoints = r->n_ck ? r->ck_ptr : NULL;
    r->n_ck_sent = r->n_ck;
    for (size_t e = 0; e < r->n_ev; e++)
      r->ev_ptr[e] = &r->ev[e];
    s->n_evals = r->n_ev;
    s->evals = r->n_ev ? r->ev_ptr : NULL;
    r->n_ev_sent = r->n_ev;
    if (r->log_path[0]) {
      s->has_log_offset = 1;
      s->log_offset = r->shipped_total;
      if (r->chunk_len) {
        s->has_log = 1;
        s->log.data = r->chunk;
        s->log.len = r->chunk_len;
      }
    }
    rs->st[k] = s;
    rs->st_rank[k] = r;
    k++;
  }
  rs->n_st = k;
  *out = rs->st;
  return k;
}

void colo_ranks_status_done(colo_ranks_t *rs, int delivered) {
  colo_wrank_t **seen = rs->st_rank;
  size_t n = rs->n_st;
  for (size_t i = 0; i < n && delivered; i++) {
    colo_wrank_t *r = seen[i];
    if (r->resumed_sent)
      r->has_resumed = 0;
    if (r->chunk_carry) {
      free(r->carry);
      r->carry = NULL;
      r->carry_len = 0;
    }
    r->ship_off += r->chunk_len - r->chunk_carry;
    r->shipped_total += r->chunk_len;
    /* delivered checkpoints leave the queue */
    size_t sent = r->n_ck_sent < r->n_ck ? r->n_ck_sent : r->n_ck;
    memmove(&r->ck_path[0], &r->ck_path[sent], (r->n_ck - sent) * sizeof r->ck_path[0]);
    memmove(&r->ck_sha[0], &r->ck_sha[sent], (r->n_ck - sent) * sizeof r->ck_sha[0]);
    memmove(&r->ck[0], &r->ck[sent], (r->n_ck - sent) * sizeof r->ck[0]);
    r->n_ck -= sent;
    ev_shift(r, r->n_ev_sent < r->n_ev ? r->n_ev_sent : r->n_ev);
  }
  for (colo_wrank_t *r = rs->head; r; r = r->next)
    r->n_ck_sent = r->n_ev_sent = 0;
  for (colo_wrank_t *r = rs->head; r; r = r->next) {
    free(r->chunk);
    r->chunk = NULL;
    r->chunk_len = 0;
  }
  free_statuses(rs);
  /* exited ranks that are no longer wanted and were held only for this status */
  colo_wrank_t *next;
  for (colo_wrank_t *r = rs->head; r; r = next) {
    next = r->next;
    if (!r->desired && !r->proc.running && r->phase == COLO__V1__RANK_PHASE__RANK_PHASE_EXITED &&
        (log_drained(r) || r->rs->all_stopped)) {
      drop_rank(rs, r);
    }
  }
}

void colo_ranks_stop_all(colo_ranks_t *rs, void (*done)(void *data), void *data) {
  rs->all_stopped = done;
  rs->all_stopped_data = data;
  if (!rs->closing) {
    rs->closing = 1;
    uv_close((uv_handle_t *)&rs->probe, NULL);
  }
  for (colo_wrank_t *r = rs->head; r; r = r->next) {
    r->desired = 0;
    if (r->proc.running) {
      r->stopping = 1;
      colo_rank_stop(&r->proc, rs->cfg->stop_grace_ms);
    }
  }
  check_all_stopped(rs);
}

int colo_ranks_reap_orphans(colo_ranks_t *rs) {
  char dirp[PATH_CAP];
  snprintf(dirp, sizeof dirp, "%s/pids", rs->cfg->run_dir);
  DIR *d = opendir(dirp);
  if (!d)
    return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (e->d_name[0] == '.' || *end || pid <= 1)
      continue;
    char path[PATH_CAP + 300], id[64] = "", want[96];
    snprintf(path, sizeof path, "%s/%s", dirp, e->d_name);
    FILE *f = fopen(path, "r");
    if (f) {
      if (!fgets(id, sizeof id, f))
        id[0] = '\0';
      fclose(f);
    }
    id[strcspn(id, "\n")] = '\0';
    /* only a process that is still that rank: its environment names it */
    snprintf(want, sizeof want, "COLO_RANK_ID=%s", id);
    char envp[64];
    snprintf(envp, sizeof envp, "/proc/%ld/environ", pid);
    int match = 0;
    FILE *ef = id[0] ? fopen(envp, "r") : NULL;
    if (ef) {
      char buf[8192];
      size_t got = fread(buf, 1, sizeof buf - 1, ef);
      fclose(ef);
      for (size_t off = 0; off < got; off += strlen(buf + off) + 1) {
        buf[got] = '\0';
        if (!strcmp(buf + off, want))
          match = 1;
      }
    }
    if (match && kill(-(pid_t)pid, SIGKILL) == 0) {
      colo_log(COLO_LOG_WARN, "ranks", "ended rank %s (pid %ld) left by an earlier worker", id,
               pid);
      n++;
    }
    unlink(path);
  }
  closedir(d);
  return n;
}

void colo_ranks_free(colo_ranks_t *rs) {
  if (rs->n_st)
    colo_ranks_status_done(rs, 0); /* a heartbeat the loop's end left unanswered */
  colo_wrank_t *next;
  for (colo_wrank_t *r = rs->head; r; r = next) {
    next = r->next;
    free_rank(r);
  }
  rs->head = NULL;
  rs->n = 0;
}

size_t colo_ranks_count(const colo_ranks_t *rs) {
  return rs->n;
}
