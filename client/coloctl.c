/* coloctl: the user's client for colod.
 *
 * Exit codes: 0 success; 1 the coordinator is unreachable or refused the request (the reason is
 * printed on one line); 2 bad usage.
 */
#define _GNU_SOURCE /* strptime, timegm */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "../common/error.h"
#include "../common/jobspec.h"
#include "../common/pbcodec.h"
#include "../proto/rpc.h"
#include "colo/v1/cluster.pb-c.h"
#include "compare.h"
#include "output.h"
#include "pipeline.h"

#define DEFAULT_SERVER "127.0.0.1:7070"
#define EXIT_FAIL      1
#define EXIT_USAGE     2
#define EXIT_JOB       3 /* watch, submit --wait: the job ended without succeeding */

typedef struct {
  const char *server;
  colo_rpc_tls_t tls;
  int json;
  uint64_t timeout_ms;
  colo_rpc_client_t *cli;
} ctl_t;

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: coloctl [--server ADDR] [--json] [--timeout MS] COMMAND [ARGS]\n"
      "\n"
      "commands:\n"
      "  submit FILE [--set F=V]... [--after[-ended] JOB[,JOB]...] [--sweep F=V1,V2...]...\n"
      "         [--token T] [--dry-run] [--wait]\n"
      "                                       submit a job file (YAML or JSON), with fields\n"
      "                                       set on top (--set train.steps=600); prints its id;\n"
      "                                       --after: it starts once those jobs succeeded\n"
      "                                       (--after-ended: once they ended, in any state);\n"
      "                                       --sweep: a job per combination of the values\n"
      "                                       (NAME-1, NAME-2, ...), each line its id, name and\n"
      "                                       settings; all are checked before any is sent.\n"
      "                                       A pipeline file (stages: docs/job-file.md)\n"
      "                                       submits each stage after those it names;\n"
      "                                       --wait: then follows each job, as watch\n"
      "                                       does, until it ends (exit 3: one did not succeed)\n"
      "  status [JOB] [--watch] [--interval MS]\n"
      "                                       the cluster and its jobs, or one job in detail;\n"
      "                                       --watch redraws it in place until interrupted\n"
      "                                       (or until JOB ends)\n"
      "  list [--state S]... [--limit N] [--name PREFIX] [--owner O] [--account A]\n"
      "                                       jobs, oldest first; --name: those whose name\n"
      "                                       starts with PREFIX (a pipeline's: NAME.)\n"
      "  compare JOB... | --name PREFIX [--owner O] [--account A]\n"
      "                                       jobs side by side (a sweep's): the fields of\n"
      "                                       their specs that differ, step, loss and\n"
      "                                       validation loss, the lowest validation loss first\n"
      "  queue [--owner O] [--account A]      the jobs waiting to be placed, in the order colod\n"
      "                                       offers them room: each one's place, when it\n"
      "                                       starts (within: a bound from the time limits of\n"
      "                                       the jobs before it; about: an estimate from their\n"
      "                                       progress) and why it waits\n"
      "  cancel JOB... [--reason TEXT]        cancel jobs (a sweep's, say)\n"
      "  cancel --name PREFIX [--owner O] [--account A] [--reason TEXT]\n"
      "                                       cancel every unfinished job so named (a\n"
      "                                       pipeline's stages: --name NAME.)\n"
      "  resume JOB [--from-step N]           resume a failed, cancelled or timed-out job\n"
      "  delete JOB... | --name PREFIX [--owner O] [--account A]\n"
      "                                       delete ended jobs: their records, events and\n"
      "                                       logs (checkpoint files stay)\n"
      "  hold JOB... [--reason TEXT]          keep waiting jobs from being placed until\n"
      "                                       released (one an admin held: by an admin)\n"
      "  release JOB...                       let held jobs be placed again\n"
      "  requeue JOB... [--hold [--reason TEXT]]\n"
      "                                       running jobs stop at a step with a checkpoint and\n"
      "                                       wait to be placed again (not a restart); --hold:\n"
      "                                       only once released\n"
      "  update JOB... [--priority N] [--max-restarts N] [--time-limit T]\n"
      "                                       change jobs that have not ended; T: seconds,\n"
      "                                       30m, 2h, 1d, or none\n"
      "  watch JOB                            follow a job's state changes until it ends;\n"
      "                                       exits 0 if it SUCCEEDED, else 3\n"
      "  events JOB [--last N]                its history: each state change and each change\n"
      "                                       made to it (hold, priority), oldest first\n"
      "  hosts                                hosts and their devices\n"
      "  cordon HOST [--reason TEXT] [--evict] [--at TIME]\n"
      "                                       place no new ranks on a host, across restarts\n"
      "                                       too; those running stay, or with --evict stop\n"
      "                                       at a step with a checkpoint and their jobs\n"
      "                                       restart elsewhere (not counted as restarts);\n"
      "                                       --at: a maintenance from TIME (2h from now, a\n"
      "                                       UTC 2026-11-25T02:00:00Z): until then it takes\n"
      "                                       only jobs whose time limits end by then\n"
      "  uncordon HOST                        place ranks there again\n"
      "  logs JOB [--rank N] [--attempt A] [--tail BYTES] [-f]\n"
      "                                       a rank's output (default rank 0, the newest\n"
      "                                       attempt); -f follows it across attempts until\n"
      "                                       the job ends\n"
      "  checkpoint JOB [--wait]              a running job's ranks save a checkpoint at their\n"
      "                                       next step and train on; --wait until it is there\n"
      "  checkpoints JOB [--best]             the job's complete checkpoints, newest first;\n"
      "                                       --best: the path of the best: the highest\n"
      "                                       score (train.best_metric), else the lowest\n"
      "                                       validation loss (exit 1: none records one)\n"
      "  usage [--since T] [--until T] [--by owner|job|account] [--limit N]\n"
      "        [--owner O] [--account A]\n"
      "                                       device hours used, most first; T: 7d, 12h, 30m\n"
      "                                       ago, a UTC date 2026-11-01[T12:00:00Z], or Unix\n"
      "                                       ms (default: from the first job to now);\n"
      "                                       --owner, --account: only their jobs'\n"
      "  history JOB [--rows N]               the training curve: a line of the loss, then N\n"
      "                                       evenly spaced steps (default 20) and every\n"
      "                                       evaluation; --json gives every sample\n"
      "\n"
      "options:\n"
      "  -s, --server ADDR   coordinator address (default $COLO_SERVER or " DEFAULT_SERVER ")\n"
      "  -j, --json          machine-readable output\n"
      "  -t, --timeout MS    per-call deadline in ms (default 10000; watch has none)\n"
      "      --tls-ca FILE   TLS: the CA colod's certificate chains to (default $COLO_TLS_CA)\n"
      "      --tls-cert FILE your certificate, for a colod that asks for one ($COLO_TLS_CERT)\n"
      "      --tls-key FILE  its key ($COLO_TLS_KEY)\n"
      "      --tls-server-name NAME  the name in colod's certificate, where it is not the\n"
      "                      server's host ($COLO_TLS_SERVER_NAME)\n"
      "  -h, --help          this help\n"
      "      --version       print the version\n"
      "\n"
      "Job files are documented in docs/job-file.md; examples/ has one to start from.\n"
      "exit codes: 0 success, 1 the coordinator is unreachable or refused, 2 bad usage, 3 the\n"
      "job watched (watch, submit --wait) ended without succeeding\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "coloctl: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "; try 'coloctl --help'\n");
  va_end(ap);
  return EXIT_USAGE;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_id(const char *s, uint64_t *id) {
  char *end;
  if (!s || !*s || *s == '-')
    return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || v == 0)
    return -1;
  *id = v;
  return 0;
}

static int connect_ctl(ctl_t *c) {
  char err[512];
  colo_rpc_tls_from_env(&c->tls); /* what the flags did not set */
  colo_rpc_client_opts_t opts = {.tls = &c->tls};
  if (colo_rpc_client_open(c->server, &opts, &c->cli, err, sizeof err) < 0) {
    fprintf(stderr, "coloctl: %s\n", err);
    return EXIT_FAIL;
  }
  return 0;
}

/* One line on stderr for a failed call; distinguishes an unreachable coordinator. */
static int call_failed(ctl_t *c, const colo_rpc_status_t *st) {
  if (st->code == GRPC_STATUS_UNAVAILABLE || st->code == GRPC_STATUS_DEADLINE_EXCEEDED) {
    /* a TLS mismatch reads as a closed socket: say what may be missing */
    const char *hint = "";
    int tls_like = st->code == GRPC_STATUS_UNAVAILABLE &&
                   (strstr(st->message, "Socket closed") || strstr(st->message, "andshake") ||
                    strstr(st->message, "SSL") || strstr(st->message, "Ssl"));
    if (tls_like && !colo_rpc_tls_enabled(&c->tls))
      hint = " (if colod uses TLS: --tls-ca, and --tls-cert and --tls-key where it asks for a "
             "certificate, or COLO_TLS_CA, COLO_TLS_CERT and COLO_TLS_KEY)";
    else if (tls_like && !(c->tls.cert && c->tls.cert[0]))
      hint = " (if colod asks for a certificate: --tls-cert and --tls-key, or COLO_TLS_CERT and "
             "COLO_TLS_KEY)";
    fprintf(stderr, "coloctl: cannot reach the coordinator at %s: %s%s\n", c->server, st->message,
            hint);
  } else
    fprintf(stderr, "coloctl: %s: %s\n", colo_rpc_status_name(st->code), st->message);
  return EXIT_FAIL;
}

static int call(ctl_t *c, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp) {
  colo_rpc_status_t st;
  char path[128];
  snprintf(path, sizeof path, "/colo.v1.Cluster/%s", method);
  if (colo_rpc_call(c->cli, path, req, resp_desc, c->timeout_ms, resp, &st) < 0)
    return call_failed(c, &st);
  return 0;
}

static int get_job(ctl_t *c, uint64_t id, Colo__V1__GetJobResponse **out) {
  Colo__V1__GetJobRequest req = COLO__V1__GET_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = id;
  return call(c, "GetJob", &req.base, &colo__v1__get_job_response__descriptor,
              (ProtobufCMessage **)out);
}

static void sleep_ms(uint64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void print_json(const ProtobufCMessage *m) {
  cJSON *j = colo_pb_to_json(m);
  char *s = cJSON_PrintUnformatted(j);
  printf("%s\n", s);
  cJSON_free(s);
  cJSON_Delete(j);
}

static unsigned long long world_of(const Colo__V1__Job *j) {
  if (!j->spec || !j->spec->parallel)
    return 0;
  return colo_jobspec_world(j->spec);
}

/* ---- submit ---- */

/* --sweep FIELD=V1,V2,...: one job per combination of the values (job arrays) */
#define MAX_SWEEPS     8
#define MAX_SWEEP_JOBS 256

typedef struct {
  const char *file;
  const char *sets[64];
  int n_sets;
  uint64_t after[COLO_MAX_AFTER + 1];
  size_t n_after;
  int after_ended; /* --after-ended: after_condition ended */
  struct {
    char field[201];
    char *values[MAX_SWEEP_JOBS];
    int n;
  } sweep[MAX_SWEEPS];
  int n_sweeps;
  char sweep_buf[MAX_SWEEPS][1001];
} submit_t;

/* The spec of combination `k` (0: no sweep): the file, the --set fields, the sweep's values and
 * --after; a sweep's job is named NAME-(k+1). *what gets the sweep's settings. */
static int build_spec(const submit_t *o, int k, Colo__V1__JobSpec **out, char *what, size_t wlen,
                      char *err, size_t errlen) {
  Colo__V1__JobSpec *spec;
  if (colo_pb_from_yaml_file(o->file, &colo__v1__job_spec__descriptor, (ProtobufCMessage **)&spec,
                             err, errlen) < 0)
    return EXIT_FAIL;
  what[0] = '\0';
  for (int i = 0; i < o->n_sets + o->n_sweeps; i++) {
    char set[1300];
    if (i < o->n_sets) {
      snprintf(set, sizeof set, "%s", o->sets[i]);
    } else { /* the first --sweep varies slowest */
      int w = i - o->n_sets, stride = 1;
      for (int v = w + 1; v < o->n_sweeps; v++)
        stride *= o->sweep[v].n;
      snprintf(set, sizeof set, "%s=%s", o->sweep[w].field,
               o->sweep[w].values[(k / stride) % o->sweep[w].n]);
      size_t wl = strlen(what);
      snprintf(what + wl, wlen - wl, "%s%s", wl ? " " : "", set);
    }
    if (colo_pb_set((ProtobufCMessage **)&spec, &colo__v1__job_spec__descriptor, set, err, errlen) <
        0) {
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return EXIT_USAGE;
    }
  }
  if (o->n_after) { /* after the file's own */
    uint64_t *all = realloc(spec->after, (spec->n_after + o->n_after) * sizeof *all);
    if (!all) {
      colo__v1__job_spec__free_unpacked(spec, NULL);
      snprintf(err, errlen, "out of memory");
      return EXIT_FAIL;
    }
    memcpy(all + spec->n_after, o->after, o->n_after * sizeof *o->after);
    spec->after = all;
    spec->n_after += o->n_after;
    if (o->after_ended) {
      spec->has_after_condition = 1;
      spec->after_condition = COLO__V1__AFTER_CONDITION__AFTER_CONDITION_ENDED;
    }
  }
  if (o->n_sweeps && spec->name) {
    char name[COLO_MAX_NAME + 1], suffix[16];
    snprintf(suffix, sizeof suffix, "-%d", k + 1);
    int keep = (int)(COLO_MAX_NAME - strlen(suffix));
    snprintf(name, sizeof name, "%.*s%s", keep, spec->name, suffix);
    free(spec->name);
    spec->name = strdup(name);
  }
  *out = spec;
  return 0;
}

static int parse_sweep(submit_t *o, const char *arg) {
  const char *eq = strchr(arg, '=');
  if (o->n_sweeps == MAX_SWEEPS)
    return usage_error("submit: at most %d --sweep fields", MAX_SWEEPS);
  if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof o->sweep[0].field || !eq[1] ||
      strlen(eq + 1) >= sizeof o->sweep_buf[0])
    return usage_error("submit: --sweep takes FIELD=VALUE,VALUE,..., not '%s'", arg);
  int w = o->n_sweeps++;
  snprintf(o->sweep[w].field, sizeof o->sweep[w].field, "%.*s", (int)(eq - arg), arg);
  snprintf(o->sweep_buf[w], sizeof o->sweep_buf[w], "%s", eq + 1);
  o->sweep[w].n = 0;
  for (char *save = NULL, *v = strtok_r(o->sweep_buf[w], ",", &save); v;
       v = strtok_r(NULL, ",", &save)) {
    if (o->sweep[w].n == MAX_SWEEP_JOBS)
      return usage_error("submit: --sweep %s has more than %d values", o->sweep[w].field,
                         MAX_SWEEP_JOBS);
    o->sweep[w].values[o->sweep[w].n++] = v;
  }
  if (!o->sweep[w].n)
    return usage_error("submit: --sweep takes FIELD=VALUE,VALUE,..., not '%s'", arg);
  return 0;
}

/* Prints a --json array of submitted jobs when all were (ok), and frees it; NULL: nothing. */
static void end_json_array(cJSON *arr, int ok) {
  if (!arr)
    return;
  if (ok) {
    char *txt = cJSON_PrintUnformatted(arr);
    printf("%s\n", txt);
    cJSON_free(txt);
  }
  cJSON_Delete(arr);
}

/* A pipeline file's stages, submitted in order, each with the ids of the stages before it. With
 * --token T each stage's is T-STAGE: submitting again after a failure makes each stage once. */
static int submit_pipeline(ctl_t *c, const char *file, colo_pipeline_t *p, const char *token,
                           int dry) {
  if (dry) {
    printf("%s: a pipeline of %zu stages, valid:", file, p->n);
    for (size_t k = 0; k < p->n; k++)
      printf("%s %s (world %llu)", k ? "," : "", p->stages[k].name,
             colo_jobspec_world(p->stages[k].spec));
    printf("\n");
    return 0;
  }
  int rc = connect_ctl(c);
  uint64_t ids[COLO_MAX_STAGES];
  cJSON *arr = c->json ? cJSON_CreateArray() : NULL;
  for (size_t k = 0; k < p->n && !rc; k++) {
    colo_stage_t *s = &p->stages[k];
    char tok[300];
    Colo__V1__SubmitJobRequest req = COLO__V1__SUBMIT_JOB_REQUEST__INIT;
    req.spec = colo_pipeline_bind(p, k, ids);
    if (token)
      snprintf(tok, sizeof tok, "%.200s-%s", token, s->name);
    req.client_token = token ? tok : NULL;
    Colo__V1__SubmitJobResponse *resp = NULL;
    rc = call(c, "SubmitJob", &req.base, &colo__v1__submit_job_response__descriptor,
              (ProtobufCMessage **)&resp);
    if (rc) {
      if (k) {
        fprintf(stderr, "coloctl: stage %s was not submitted; the %zu before it were (jobs",
                s->name, k);
        for (size_t i = 0; i < k; i++)
          fprintf(stderr, " %llu", (unsigned long long)ids[i]);
        fprintf(stderr, ")%s\n",
                token ? ": submit again with the same --token to go on from it"
                      : ": cancel them, or give --token to be able to go on");
      }
      break;
    }
    ids[k] = resp->job->id;
    if (arr) {
      cJSON_AddItemToArray(arr, colo_pb_to_json(&resp->job->base));
    } else {
      printf("%llu %s", (unsigned long long)ids[k], resp->job->name);
      for (size_t i = 0; i < s->n_after; i++)
        printf("%s%s", i ? ", " : " (after ", p->stages[s->after[i]].name);
      if (s->init_from >= 0)
        printf("%s weights from %s", s->n_after ? ";" : " (", p->stages[s->init_from].name);
      printf("%s\n", s->n_after ? ")" : "");
    }
    colo__v1__submit_job_response__free_unpacked(resp, NULL);
  }
  end_json_array(arr, rc == 0);
  return rc;
}

static int watch_job(ctl_t *c, uint64_t id); /* ---- watch ---- */

static int cmd_submit(ctl_t *c, int argc, char **argv) {
  const char *token = NULL;
  submit_t *o = calloc(1, sizeof *o);
  if (!o)
    return EXIT_FAIL;
  int dry = 0, wait = 0, rc = 0;
  for (int i = 0; i < argc && !rc; i++) {
    if (!strcmp(argv[i], "--token") && i + 1 < argc)
      token = argv[++i];
    else if (!strcmp(argv[i], "--wait"))
      wait = 1;
    else if ((!strcmp(argv[i], "--after") || !strcmp(argv[i], "--after-ended")) &&
             i + 1 < argc) { /* --after 7,8 */
      const char *flag = argv[i], *ids = argv[++i], *p = ids;
      int ended = !strcmp(flag, "--after-ended");
      if (o->n_after && ended != o->after_ended)
        rc = usage_error("submit: give --after or --after-ended, not both");
      o->after_ended = ended;
      if (!rc && (!ids[0] || strspn(ids, "0123456789,") != strlen(ids)))
        rc = usage_error("submit: %s takes job ids separated by commas, not '%s'", flag, ids);
      while (!rc && *p) {
        char *end;
        unsigned long long id = strtoull(p, &end, 10);
        if (end == p || o->n_after > COLO_MAX_AFTER)
          rc = usage_error("submit: %s takes job ids separated by commas, not '%s'", flag, ids);
        else
          o->after[o->n_after++] = id;
        p = *end == ',' ? end + 1 : end;
      }
    } else if (!strcmp(argv[i], "--sweep") && i + 1 < argc)
      rc = parse_sweep(o, argv[++i]);
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && o->n_sets < 64)
      o->sets[o->n_sets++] = argv[++i];
    else if (!strcmp(argv[i], "--dry-run"))
      dry = 1;
    else if (argv[i][0] == '-')
      rc = usage_error("submit: unknown option '%s'", argv[i]);
    else if (!o->file)
      o->file = argv[i];
    else
      rc = usage_error("submit takes one job file");
  }
  if (!rc && !o->file)
    rc = usage_error("submit needs a job file");
  if (!rc) { /* a pipeline file: its stages, each checked before any is sent */
    colo_pipeline_t pipe;
    char perr[1300];
    int is = colo_pipeline_load(o->file, o->sets, o->n_sets, &pipe, perr, sizeof perr);
    if (is != 0) {
      if (is < 0)
        fprintf(stderr, "coloctl: %s\n", perr);
      else if (o->n_after || o->n_sweeps)
        rc = usage_error("submit: --after and --sweep are for a job file; a pipeline's stages "
                         "say what they run after");
      else if (wait)
        rc = usage_error("submit: --wait is for a job file; watch a pipeline's stages with "
                         "coloctl watch");
      else
        rc = submit_pipeline(c, o->file, &pipe, token, dry);
      colo_pipeline_free(&pipe);
      free(o);
      return is < 0 ? EXIT_FAIL : rc;
    }
  }
  int n_jobs = 1;
  for (int w = 0; w < o->n_sweeps && !rc; w++)
    if ((n_jobs *= o->sweep[w].n) > MAX_SWEEP_JOBS)
      rc = usage_error("submit: the sweep makes more than %d jobs", MAX_SWEEP_JOBS);
  if (rc) {
    free(o);
    return rc;
  }
  /* every job is built and checked here first: a bad one submits none */
  Colo__V1__JobSpec **specs = calloc((size_t)n_jobs, sizeof *specs);
  char(*what)[1024] = calloc((size_t)n_jobs, sizeof *what);
  char err[1024];
  for (int k = 0; k < n_jobs && !rc && specs && what; k++) {
    rc = build_spec(o, k, &specs[k], what[k], sizeof what[k], err, sizeof err);
    if (rc)
      fprintf(stderr, "coloctl: %s\n", err);
    else if (dry || o->n_sweeps) { /* check locally with the coordinator's rules */
      if (colo_jobspec_fill_defaults(specs[k]) < 0 ||
          colo_jobspec_validate(specs[k], err, sizeof err) < 0) {
        fprintf(stderr, "coloctl: %s%s%s%s: %s\n", o->file, what[k][0] ? " (" : "", what[k],
                what[k][0] ? ")" : "", err);
        rc = EXIT_FAIL;
      }
    }
  }
  if (!specs || !what)
    rc = EXIT_FAIL;
  if (!rc && dry) { /* send nothing */
    if (c->json && n_jobs == 1)
      print_json(&specs[0]->base);
    else if (n_jobs == 1)
      printf("%s: valid (world %llu)\n", o->file, colo_jobspec_world(specs[0]));
    else
      printf("%s: %d jobs valid (world %llu each)\n", o->file, n_jobs,
             colo_jobspec_world(specs[0]));
  } else if (!rc) {
    rc = connect_ctl(c);
  }
  cJSON *arr = c->json && o->n_sweeps ? cJSON_CreateArray() : NULL;
  uint64_t *ids = calloc((size_t)n_jobs, sizeof *ids);
  int n_ids = 0;
  if (!ids)
    rc = EXIT_FAIL;
  for (int k = 0; k < n_jobs && !rc && !dry; k++) {
    char tok[300];
    Colo__V1__SubmitJobRequest req = COLO__V1__SUBMIT_JOB_REQUEST__INIT;
    req.spec = specs[k];
    if (token && o->n_sweeps) /* one per job: a retried sweep makes each once */
      snprintf(tok, sizeof tok, "%.250s-%d", token, k + 1);
    req.client_token = token && o->n_sweeps ? tok : (char *)token;
    Colo__V1__SubmitJobResponse *resp = NULL;
    rc = call(c, "SubmitJob", &req.base, &colo__v1__submit_job_response__descriptor,
              (ProtobufCMessage **)&resp);
    if (rc) {
      if (k)
        fprintf(stderr,
                "coloctl: job %d of the sweep (%s) was not submitted; the %d before it "
                "were\n",
                k + 1, what[k], k);
      break;
    }
    ids[n_ids++] = resp->job->id;
    if (arr)
      cJSON_AddItemToArray(arr, colo_pb_to_json(&resp->job->base));
    else if (c->json)
      print_json(&resp->job->base);
    else if (o->n_sweeps)
      printf("%llu %s %s\n", (unsigned long long)resp->job->id, resp->job->name, what[k]);
    else
      printf("%llu\n", (unsigned long long)resp->job->id);
    colo__v1__submit_job_response__free_unpacked(resp, NULL);
  }
  end_json_array(arr, rc == 0);
  /* --wait: each job in turn until it ends; EXIT_JOB when one did not succeed */
  for (int k = 0; k < n_ids && wait && !dry && rc != EXIT_FAIL; k++) {
    int one = watch_job(c, ids[k]);
    rc = one == EXIT_FAIL || !rc ? one : rc;
  }
  free(ids);
  for (int k = 0; specs && k < n_jobs; k++)
    if (specs[k])
      colo__v1__job_spec__free_unpacked(specs[k], NULL);
  free(specs);
  free(what);
  free(o);
  return rc;
}

/* ---- status / list ---- */

/* Time per step from a progress record: the record's tokens/s is the job's, which processes
 * batch × block × accumulation × dp tokens a step (an elastic job running fewer groups
 * accumulates more, the same product). 0 when unknown. */
static double step_seconds(const Colo__V1__Job *j) {
  const Colo__V1__Progress *p = j->progress;
  const Colo__V1__JobSpec *s = j->spec;
  if (!p || !p->has_tokens_per_s || p->tokens_per_s <= 0 || !s || !s->train || !s->model)
    return 0;
  unsigned dp = s->parallel ? s->parallel->dp : 1;
  return (double)s->train->batch_size * s->model->block_size * s->train->grad_accum * dp /
         (double)p->tokens_per_s;
}

static void fmt_eta(const Colo__V1__Job *j, char *buf, size_t n) {
  double per = step_seconds(j);
  const Colo__V1__Progress *p = j->progress;
  if (j->state != COLO__V1__JOB_STATE__JOB_STATE_RUNNING || per <= 0 || !p->has_total_steps ||
      p->step > p->total_steps) {
    snprintf(buf, n, "-");
    return;
  }
  fmt_age((int64_t)((double)(p->total_steps - p->step) * per * 1000.0), buf, n);
}

/* When a waiting job starts: "within 1h05m" (a bound), "about 12m" (an estimate), "not known"
 * (it holds room, whose start nothing bounds yet), or "-" (it holds none). */
static void fmt_start(const Colo__V1__Job *j, int64_t now, char *buf, size_t n) {
  int64_t at = j->has_starts_by_ms ? j->starts_by_ms : j->expected_start_ms;
  if (!j->holds_room) {
    snprintf(buf, n, "-");
  } else if (!j->has_starts_by_ms && !j->has_expected_start_ms) {
    snprintf(buf, n, "not known");
  } else if (at <= now) {
    snprintf(buf, n, "now");
  } else {
    char age[32];
    fmt_age(at - now, age, sizeof age);
    snprintf(buf, n, "%s %s", j->has_starts_by_ms ? "within" : "about", age);
  }
}

static void job_row(table_t *t, const Colo__V1__Job *j, int64_t now) {
  char id[24], att[16], world[24], steps[48], age[32], loss[24], tok[24], eta[32], ck[24];
  snprintf(id, sizeof id, "%llu", (unsigned long long)j->id);
  snprintf(att, sizeof att, "%u", j->attempt);
  snprintf(world, sizeof world, "%llu", world_of(j));
  unsigned total = j->spec && j->spec->train ? j->spec->train->steps : 0;
  const Colo__V1__Progress *p = j->progress;
  if (p && p->has_step)
    snprintf(steps, sizeof steps, "%llu/%u", (unsigned long long)p->step, total);
  else
    snprintf(steps, sizeof steps, "-/%u", total);
  snprintf(loss, sizeof loss, p && p->has_loss ? "%.4f" : "-", p ? (double)p->loss : 0.0);
  snprintf(tok, sizeof tok, p && p->has_tokens_per_s ? "%.0f" : "-",
           p ? (double)p->tokens_per_s : 0.0);
  fmt_eta(j, eta, sizeof eta);
  if (j->newest_checkpoint)
    snprintf(ck, sizeof ck, "%llu", (unsigned long long)j->newest_checkpoint->step);
  else
    snprintf(ck, sizeof ck, "-");
  fmt_age(now - j->created_ms, age, sizeof age);
  /* a waiting job: why it waits (no room, the jobs it runs after) says more than "submitted" */
  const char *msg = j->waiting && j->waiting[0] ? j->waiting : j->message ? j->message : "";
  char line[640];
  if (j->has_queue_position && j->waiting && j->waiting[0]) { /* and its place in line */
    snprintf(line, sizeof line, "%u of %u in line: %s", j->queue_position, j->queue_length, msg);
    msg = line;
  }
  table_row(t, id, j->name ? j->name : "", state_name(j->state), att, world, steps, loss, tok, eta,
            ck, age, msg);
}

static const char *const JOB_HEADERS[] = {"ID",   "NAME",    "STATE", "ATTEMPT", "WORLD",
                                          "STEP", "LOSS",    "TOK/S", "ETA",     "CKPT",
                                          "AGE",  "MESSAGE", NULL};

/* Fetches every job matching states (all pages). The caller frees each response. */
typedef struct {
  Colo__V1__ListJobsResponse **pages;
  size_t n;
} pages_t;

/* the jobs in those states (none: any) whose name starts with name_prefix and whose owner is owner
 * (NULL: any), at most max, a page of up to 1000 at a time */
/* ListJobs page by page: at most max jobs in those states (none: any) whose name starts with
 * name_prefix, of owner and charged to account (NULL: any) */
static int fetch_jobs(ctl_t *c, const Colo__V1__JobState *states, size_t n_states,
                      const char *name_prefix, const char *owner, const char *account, uint32_t max,
                      pages_t *out) {
  uint64_t after = 0;
  uint32_t got = 0;
  out->pages = NULL;
  out->n = 0;
  for (;;) {
    Colo__V1__ListJobsRequest req = COLO__V1__LIST_JOBS_REQUEST__INIT;
    req.n_states = n_states;
    req.states = (Colo__V1__JobState *)states; /* only read */
    req.has_limit = 1;
    req.limit = max - got < 1000 ? max - got : 1000;
    req.has_after_id = 1;
    req.after_id = after;
    req.name_prefix = (char *)name_prefix;
    req.owner = (char *)owner;
    req.account = (char *)account;
    Colo__V1__ListJobsResponse *resp = NULL;
    int rc = call(c, "ListJobs", &req.base, &colo__v1__list_jobs_response__descriptor,
                  (ProtobufCMessage **)&resp);
    if (rc)
      return rc;
    out->pages = realloc(out->pages, (out->n + 1) * sizeof *out->pages);
    out->pages[out->n++] = resp;
    got += (uint32_t)resp->n_jobs;
    if (!resp->next_after_id || got >= max)
      return 0;
    after = resp->next_after_id;
  }
}

static void free_pages(pages_t *p) {
  for (size_t i = 0; i < p->n; i++)
    colo__v1__list_jobs_response__free_unpacked(p->pages[i], NULL);
  free(p->pages);
}

static void print_jobs(ctl_t *c, pages_t *p) {
  if (c->json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < p->n; i++)
      for (size_t k = 0; k < p->pages[i]->n_jobs; k++)
        cJSON_AddItemToArray(arr, colo_pb_to_json(&p->pages[i]->jobs[k]->base));
    char *s = cJSON_PrintUnformatted(arr);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(arr);
    return;
  }
  table_t *t = table_new(JOB_HEADERS);
  int64_t now = now_ms();
  for (size_t i = 0; i < p->n; i++)
    for (size_t k = 0; k < p->pages[i]->n_jobs; k++)
      job_row(t, p->pages[i]->jobs[k], now);
  table_print(t, stdout);
  table_free(t);
}

static int parse_state(const char *s, Colo__V1__JobState *out) {
  for (int i = 1; i <= 7; i++)
    if (!strcasecmp(s, state_name(i))) {
      *out = (Colo__V1__JobState)i;
      return 0;
    }
  return -1;
}

static int cmd_list(ctl_t *c, int argc, char **argv) {
  Colo__V1__JobState states[8];
  size_t n_states = 0;
  uint32_t limit = 100000;
  const char *name = NULL, *owner = NULL, *account = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--state") && i + 1 < argc) {
      if (n_states == 8 || parse_state(argv[++i], &states[n_states]) < 0)
        return usage_error("list: --state must be one of pending, running, restarting, "
                           "succeeded, failed, cancelled, timed_out");
      n_states++;
    } else if (!strcmp(argv[i], "--limit") && i + 1 < argc) {
      uint64_t v;
      if (parse_id(argv[++i], &v) < 0 || v > 100000)
        return usage_error("list: --limit must be between 1 and 100000");
      limit = (uint32_t)v;
    } else if (!strcmp(argv[i], "--name") && i + 1 < argc) {
      name = argv[++i];
    } else if (!strcmp(argv[i], "--owner") && i + 1 < argc) {
      owner = argv[++i];
    } else if (!strcmp(argv[i], "--account") && i + 1 < argc) {
      account = argv[++i];
    } else {
      return usage_error("list: unexpected argument '%s'", argv[i]);
    }
  }
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  pages_t p;
  rc = fetch_jobs(c, states, n_states, name, owner, account, limit, &p);
  if (rc == 0)
    print_jobs(c, &p);
  free_pages(&p);
  return rc;
}

static void print_job_detail(const Colo__V1__Job *j) {
  char age[32], buf[64];
  const Colo__V1__JobSpec *s = j->spec;
  fmt_age(now_ms() - j->created_ms, age, sizeof age);
  printf("job %llu \"%s\"\n", (unsigned long long)j->id, j->name ? j->name : "");
  printf("  state      %s (%s)\n", state_name(j->state), j->message ? j->message : "");
  if (j->owner && j->owner[0])
    printf("  owner      %s\n", j->owner);
  if (s && s->account && s->account[0])
    printf("  account    %s\n", s->account);
  if (s && s->priority)
    printf("  priority   %d\n", s->priority);
  if (s && s->n_after) {
    printf("  after      job%s", s->n_after == 1 ? "" : "s");
    for (size_t i = 0; i < s->n_after; i++)
      printf("%s %llu", i ? "," : "", (unsigned long long)s->after[i]);
    printf(s->after_condition == COLO__V1__AFTER_CONDITION__AFTER_CONDITION_ENDED
               ? " (each must end first, in any state)\n"
           : s->cancel_on_dependency_failure
               ? " (each must succeed first; cancelled if one ends otherwise)\n"
               : " (each must succeed first)\n");
  }
  if (s && s->resources && s->resources->time_limit_s) {
    char lim[32], left[32] = "";
    fmt_age((int64_t)s->resources->time_limit_s * 1000, lim, sizeof lim);
    if (j->has_attempt_started_ms) {
      int64_t rest = j->attempt_started_ms + (int64_t)s->resources->time_limit_s * 1000 - now_ms();
      char r[32];
      fmt_age(rest > 0 ? rest : 0, r, sizeof r);
      snprintf(left, sizeof left, ", %s left", r);
    }
    printf("  time limit %s an attempt%s\n", lim, left);
  }
  if (s && s->notify && s->notify->url && s->notify->url[0]) {
    static const char *const told[] = {"", "started", "restarting", "ended", "failed"};
    printf("  notify     %s (", s->notify->url);
    for (size_t i = 0; i < s->notify->n_on; i++)
      printf("%s%s", i ? ", " : "",
             s->notify->on[i] > 0 && s->notify->on[i] <= 4 ? told[s->notify->on[i]] : "?");
    printf("%s)\n", s->notify->n_on ? "" : "ended, restarting");
  }
  if (j->slowed && j->slowed[0])
    printf("  slowed     %s\n", j->slowed);
  if (j->waiting && j->waiting[0])
    printf("  waiting    %s\n", j->waiting);
  else if (j->held) /* in a restart's back-off, say */
    printf("  held       by %s%s%s (coloctl release %llu)\n",
           j->held_by_admin ? "an admin" : "its owner",
           j->hold_reason && j->hold_reason[0] ? ": " : "", j->hold_reason ? j->hold_reason : "",
           (unsigned long long)j->id);
  if (j->has_queue_position)
    printf("  in line    %u of %u (priority first, then the owner with the fewest recent device "
           "hours, then the oldest)\n",
           j->queue_position, j->queue_length);
  if (j->holds_room) {
    char start[48];
    fmt_start(j, now_ms(), start, sizeof start);
    printf("  starts     %s (room is held for it%s)\n", start,
           j->has_starts_by_ms        ? ", by the time limits of the jobs before it"
           : j->has_expected_start_ms ? "; an estimate from the progress of the jobs before it"
                                      : "");
  }
  printf("  attempt    %u, restarts %u of %u\n", j->attempt, j->restarts, s ? s->max_restarts : 0);
  printf("  submitted  %s ago\n", age);
  if (j->progress && j->progress->has_step) {
    char eta[32];
    fmt_eta(j, eta, sizeof eta);
    char epochs[48] = "";
    if (j->progress->has_epochs)
      snprintf(epochs, sizeof epochs, ", epoch %.2f", (double)j->progress->epochs);
    printf("  progress   step %llu/%llu%s, loss %.4f, lr %.2e, %.0f tokens/s, ETA %s\n",
           (unsigned long long)j->progress->step, (unsigned long long)j->progress->total_steps,
           epochs, (double)j->progress->loss, (double)j->progress->lr,
           (double)j->progress->tokens_per_s, eta);
  }
  if (j->progress && j->progress->has_spikes_skipped && s && s->optimizer) /* skip_spike_sigma */
    printf("  spikes     %llu step%s skipped: loss or gradient norm above the last %u steps' mean "
           "+ %g sd\n",
           (unsigned long long)j->progress->spikes_skipped,
           j->progress->spikes_skipped == 1 ? "" : "s", s->optimizer->skip_spike_window,
           (double)s->optimizer->skip_spike_sigma);
  if (j->progress && j->progress->has_memory_bytes && j->progress->memory_bytes) {
    char dev[32], host[32];
    int gpu = s && s->resources && s->resources->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU;
    fmt_bytes(j->progress->memory_bytes, dev, sizeof dev);
    fmt_bytes(j->progress->host_memory_bytes, host, sizeof host);
    printf("  memory     rank 0: peak %s of %s memory%s%s%s\n", dev, gpu ? "GPU" : "host",
           j->progress->has_host_memory_bytes ? ", and " : "",
           j->progress->has_host_memory_bytes ? host : "",
           j->progress->has_host_memory_bytes ? " of pieces placed in host memory" : "");
  }
  if (j->progress && j->progress->has_val_loss) {
    printf("  eval       val loss %.4f at step %llu (coloctl history %llu: the curve)\n",
           (double)j->progress->val_loss, (unsigned long long)j->progress->val_step,
           (unsigned long long)j->id);
    if (j->progress->has_ema_val_loss) /* train.ema_decay's, in the weights' place */
      printf("             the weights' moving average %.4f\n", (double)j->progress->ema_val_loss);
    for (size_t i = 0; i < j->progress->n_val_sets; i++) /* data.val_sources: each set's */
      printf("             %s %.4f\n", j->progress->val_sets[i]->name,
             (double)j->progress->val_sets[i]->loss);
    for (size_t i = 0; i < j->progress->n_choice_scores; i++) { /* data.choice_sets */
      const Colo__V1__SetScore *c = j->progress->choice_scores[i];
      printf("             %s acc %.4f, acc_norm %.4f (per character), acc_token %.4f over %u "
             "questions\n",
             c->name ? c->name : "", (double)c->acc, (double)c->acc_norm, (double)c->acc_token,
             c->questions);
    }
  }
  if (j->progress && j->progress->has_evals_since_best) { /* train.early_stop_patience */
    uint32_t patience = s && s->train ? s->train->early_stop_patience : 0;
    const Colo__V1__Progress *p = j->progress;
    if (p->has_best_score) /* train.best_metric: a score, higher better */
      printf("  early stop highest %s %.4f at step %llu; %u evaluation%s since without a new "
             "highest, of %u\n",
             s && s->train && s->train->best_metric ? s->train->best_metric : "score",
             (double)p->best_score, (unsigned long long)p->best_val_step, p->evals_since_best,
             p->evals_since_best == 1 ? "" : "s", patience);
    else
      printf("  early stop lowest val loss %.4f at step %llu; %u evaluation%s since without a new "
             "lowest, of %u\n",
             (double)p->best_val_loss, (unsigned long long)p->best_val_step, p->evals_since_best,
             p->evals_since_best == 1 ? "" : "s", patience);
  }
  if (j->newest_checkpoint) {
    char ckage[32];
    fmt_age(now_ms() - j->newest_checkpoint->created_ms, ckage, sizeof ckage);
    printf("  checkpoint step %llu, %s ago (%s)\n", (unsigned long long)j->newest_checkpoint->step,
           ckage, j->newest_checkpoint->path ? j->newest_checkpoint->path : "");
  }
  if (!s || !s->model || !s->parallel || !s->train || !s->optimizer || !s->data)
    return;
  const Colo__V1__ModelSpec *m = s->model;
  int llama = m->arch == COLO__V1__ARCH__ARCH_LLAMA;
  char kv[48] = "", mlp[32] = "", win[40] = "";
  int n = m->head_dim ? snprintf(kv, sizeof kv, " of %u", m->head_dim) : 0;
  if (m->n_kv_head && m->n_kv_head != m->n_head)
    snprintf(kv + n, sizeof kv - (size_t)n, " (%u key)", m->n_kv_head);
  if (m->mlp_hidden)
    snprintf(mlp, sizeof mlp, ", MLP %u", m->mlp_hidden);
  if (m->sliding_window)
    snprintf(win, sizeof win, ", window %u", m->sliding_window);
  printf("  model      %s, %u layers, %u heads%s, %u wide%s, block %u%s, vocab %u%s%s%s\n",
         llama ? "llama" : "gpt2", m->n_layer, m->n_head, kv, m->n_embd, mlp, m->block_size, win,
         m->vocab_size, llama && !m->tie_embeddings ? ", untied head" : "",
         m->qkv_bias ? ", q, k and v biases" : "", m->qk_norm ? ", QK-norm" : "");
  char cp[24] = "";
  if (s->parallel->cp > 1)
    snprintf(cp, sizeof cp, " cp=%u", s->parallel->cp);
  printf("  layout     dp=%u%s tp=%u pp=%u (world %llu), zero %u%s, %u micro-batches\n",
         s->parallel->dp, cp, s->parallel->tp, s->parallel->pp, world_of(j),
         s->parallel->zero_stage, s->parallel->sequence_parallel ? ", sequence parallel" : "",
         s->parallel->micro_batches);
  if (s->parallel->min_dp) {
    printf("  elastic    dp from %u to %u", s->parallel->min_dp, s->parallel->dp);
    if (j->has_running_dp && j->running_dp && j->running_dp < s->parallel->dp)
      printf(": running with dp=%u, each rank accumulating %u× (the same global batch)",
             j->running_dp, s->train->grad_accum * (s->parallel->dp / j->running_dp));
    printf("\n");
  }
  if (s->train->steps == 0) /* an evaluation job: its model evaluated once, not trained */
    printf(
        "  training   none: the model is evaluated (train.steps 0), batch %u, %s",
        s->train->batch_size,
        colo_pb_enum_short(&colo__v1__precision__descriptor, s->train->precision, buf, sizeof buf));
  else
    printf(
        "  training   %u steps, batch %u × accum %u, %s, lr %g (%s)", s->train->steps,
        s->train->batch_size, s->train->grad_accum,
        colo_pb_enum_short(&colo__v1__precision__descriptor, s->train->precision, buf, sizeof buf),
        (double)s->optimizer->lr,
        colo_pb_enum_short(&colo__v1__schedule__descriptor, s->optimizer->schedule, age,
                           sizeof age));
  if (s->train->steps && s->optimizer->name == COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_MUON) {
    printf(", Muon (momentum %g", (double)s->optimizer->muon_momentum);
    if (s->optimizer->muon_lr > 0.0f)
      printf(", lr %g", (double)s->optimizer->muon_lr);
    if (s->optimizer->muon_adjust_lr == COLO__V1__MUON_ADJUST_LR__MUON_ADJUST_LR_ORIGINAL)
      printf(", scaled as the original");
    printf(") for the blocks' matrices, AdamW for the rest");
  }
  if (s->train->neftune_alpha > 0.0f)
    printf(", NEFTune noise alpha %g", (double)s->train->neftune_alpha);
  if (s->train->ema_decay > 0.0f)
    printf(", the weights' moving average (decay %g)", (double)s->train->ema_decay);
  if (s->train->dpo_beta > 0.0f) {
    const char *dl = s->train->dpo_loss && s->train->dpo_loss[0] ? s->train->dpo_loss : "sigmoid";
    printf(", DPO beta %g on preference pairs%s", (double)s->train->dpo_beta,
           s->train->lora_rank == 0 || s->train->dpo_precompute ? " (reference precomputed)" : "");
    if (strcmp(dl, "sigmoid") != 0)
      printf(", %s loss", dl);
    if (s->train->dpo_label_smoothing > 0.0f)
      printf(", label smoothing %g", (double)s->train->dpo_label_smoothing);
    if (s->train->dpo_rpo_alpha > 0.0f)
      printf(", RPO alpha %g", (double)s->train->dpo_rpo_alpha);
  }
  printf("\n");
  const Colo__V1__DataSpec *d = s->data;
  printf("  data       train %s", d->train_path ? d->train_path : d->n_sources ? "" : "-");
  double wsum = 0;
  for (size_t k = 0; k < d->n_sources; k++)
    wsum += d->sources[k]->weight;
  for (size_t k = 0; k < d->n_sources; k++) /* a blend: each set with its share */
    printf("%s%s (%.3g%%)", k ? ", " : "", d->sources[k]->path,
           100.0 * d->sources[k]->weight / wsum);
  printf("%s%s%s", d->order == COLO__V1__DATA_ORDER__DATA_ORDER_SHUFFLE ? ", shuffled epochs" : "",
         d->val_path ? ", val " : "", d->val_path ? d->val_path : "");
  if (d->document_token >= 0)
    printf(", attention within documents (token %d begins each)", (int)d->document_token);
  printf("\n");
  if (s->train->init_from && s->train->init_from[0])
    printf("  weights    from %s\n", s->train->init_from);
  else if (s->train->has_init_from_job && s->train->init_from_job && s->train->init_average)
    printf("  weights    the mean of job %llu's %u newest checkpoints\n",
           (unsigned long long)s->train->init_from_job, s->train->init_average);
  else if (s->train->has_init_from_job && s->train->init_from_job && s->train->init_step)
    printf("  weights    from job %llu's checkpoint at step %u\n",
           (unsigned long long)s->train->init_from_job, s->train->init_step);
  else if (s->train->has_init_from_job && s->train->init_from_job) {
    char at[48] = ""; /* the step it was, once the ranks have said */
    if (j->progress && j->progress->has_model_step)
      snprintf(at, sizeof at, " (step %llu)", (unsigned long long)j->progress->model_step);
    printf("  weights    from job %llu's %s checkpoint%s\n",
           (unsigned long long)s->train->init_from_job,
           s->train->init_pick == COLO__V1__INIT_PICK__INIT_PICK_BEST ? "best" : "newest", at);
  }
  if (s->train->lora_rank > 0) {
    int nf4 = s->train->lora_quant && !strcmp(s->train->lora_quant, "nf4");
    printf("  lora       rank %u, alpha %g%s on %s: the model frozen%s", s->train->lora_rank,
           (double)s->train->lora_alpha, s->train->lora_rslora ? " (rsLoRA)" : "",
           s->train->lora_targets && s->train->lora_targets[0] ? s->train->lora_targets : "all",
           nf4 && s->train->lora_double_quant ? ", its matrices in NF4 (QLoRA), double-quantized"
           : nf4                              ? ", its matrices in NF4 (QLoRA)"
                                              : "");
    if (s->train->lora_dropout > 0.0f)
      printf("; dropout %g", (double)s->train->lora_dropout);
    if (s->train->lora_plus_ratio > 0.0f && s->train->lora_plus_ratio != 1.0f)
      printf("; LoRA+: B learns at %g x lr", (double)s->train->lora_plus_ratio);
    if (s->train->lora_dora)
      printf("; DoRA: a magnitude per output");
    printf("\n");
  }
  if (j->resume_step)
    printf("  resume     from step %llu\n", (unsigned long long)j->resume_step);
}

/* ---- events ---- */

static void fmt_utc_s(int64_t ms, char *buf, size_t n) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

/* One page of a job's events: the newest `last`, or those after after_seq. */
static int fetch_events(ctl_t *c, uint64_t id, uint32_t last, uint64_t after_seq,
                        Colo__V1__ListJobEventsResponse **out) {
  Colo__V1__ListJobEventsRequest req = COLO__V1__LIST_JOB_EVENTS_REQUEST__INIT;
  req.has_job_id = 1;
  req.job_id = id;
  req.has_last = last > 0;
  req.last = last;
  req.has_after_seq = after_seq > 0;
  req.after_seq = after_seq;
  return call(c, "ListJobEvents", &req.base, &colo__v1__list_job_events_response__descriptor,
              (ProtobufCMessage **)out);
}

static void event_row(table_t *t, const Colo__V1__JobEvent *e) {
  char seq[24], when[32];
  snprintf(seq, sizeof seq, "%llu", (unsigned long long)e->seq);
  fmt_utc_s(e->time_ms, when, sizeof when);
  table_row(t, seq, when, state_name(e->state), e->message ? e->message : "");
}

static const char *const EVENT_HEADERS[] = {"SEQ", "TIME (UTC)", "STATE", "MESSAGE", NULL};

/* The newest few of a job's events, under its detail (status JOB). */
static void print_recent_events(ctl_t *c, uint64_t id) {
  Colo__V1__ListJobEventsResponse *r = NULL;
  if (fetch_events(c, id, 5, 0, &r) || !r->n_events) {
    if (r)
      colo__v1__list_job_events_response__free_unpacked(r, NULL);
    return;
  }
  printf("  events     the newest %zu of %llu (coloctl events %llu: all)\n", r->n_events,
         (unsigned long long)r->events[r->n_events - 1]->seq, (unsigned long long)id);
  table_t *t = table_new(EVENT_HEADERS);
  for (size_t i = 0; i < r->n_events; i++)
    event_row(t, r->events[i]);
  table_print_indented(t, stdout, 4);
  table_free(t);
  colo__v1__list_job_events_response__free_unpacked(r, NULL);
}

static int cmd_events(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0, last = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--last") && i + 1 < argc) {
      if (parse_id(argv[++i], &last) < 0 || last > 1000)
        return usage_error("events: --last must be a number of events from 1 to 1000");
    } else if (!id && parse_id(argv[i], &id) == 0) {
      continue;
    } else {
      return usage_error("events: unexpected argument '%s'", argv[i]);
    }
  }
  if (!id)
    return usage_error("events needs a job id");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  cJSON *arr = c->json ? cJSON_CreateArray() : NULL;
  table_t *t = c->json ? NULL : table_new(EVENT_HEADERS);
  uint64_t after = 0;
  int more = 1;
  while (rc == 0 && more) {
    Colo__V1__ListJobEventsResponse *r = NULL;
    rc = fetch_events(c, id, (uint32_t)last, after, &r);
    if (rc)
      break;
    for (size_t i = 0; i < r->n_events; i++) {
      if (arr)
        cJSON_AddItemToArray(arr, colo_pb_to_json(&r->events[i]->base));
      else
        event_row(t, r->events[i]);
      after = r->events[i]->seq;
    }
    more = !last && r->more && r->n_events;
    colo__v1__list_job_events_response__free_unpacked(r, NULL);
  }
  if (rc == 0 && arr) {
    char *txt = cJSON_PrintUnformatted(arr);
    printf("%s\n", txt);
    cJSON_free(txt);
  } else if (rc == 0) {
    table_print(t, stdout);
  }
  cJSON_Delete(arr);
  table_free(t);
  return rc;
}

/* One status report; *state gets the job's state when id is set. */
static int status_once(ctl_t *c, uint64_t id, int *state) {
  int rc;
  if (id) {
    Colo__V1__GetJobResponse *resp = NULL;
    if ((rc = get_job(c, id, &resp)))
      return rc;
    if (c->json) {
      print_json(&resp->job->base);
    } else {
      print_job_detail(resp->job);
      print_recent_events(c, id);
    }
    *state = resp->job->state;
    colo__v1__get_job_response__free_unpacked(resp, NULL);
    return 0;
  }
  Colo__V1__GetClusterStatusRequest creq = COLO__V1__GET_CLUSTER_STATUS_REQUEST__INIT;
  Colo__V1__GetClusterStatusResponse *cs = NULL;
  rc = call(c, "GetClusterStatus", &creq.base, &colo__v1__get_cluster_status_response__descriptor,
            (ProtobufCMessage **)&cs);
  if (rc)
    return rc;
  /* active jobs, then the most recent finished ones */
  Colo__V1__JobState active[] = {COLO__V1__JOB_STATE__JOB_STATE_PENDING,
                                 COLO__V1__JOB_STATE__JOB_STATE_RUNNING,
                                 COLO__V1__JOB_STATE__JOB_STATE_RESTARTING};
  pages_t p;
  rc = fetch_jobs(c, active, 3, NULL, NULL, NULL, 100000, &p);
  if (rc) {
    colo__v1__get_cluster_status_response__free_unpacked(cs, NULL);
    free_pages(&p);
    return rc;
  }
  if (c->json) {
    cJSON *o = colo_pb_to_json(&cs->base);
    cJSON *arr = cJSON_AddArrayToObject(o, "active_jobs");
    for (size_t i = 0; i < p.n; i++)
      for (size_t k = 0; k < p.pages[i]->n_jobs; k++)
        cJSON_AddItemToArray(arr, colo_pb_to_json(&p.pages[i]->jobs[k]->base));
    char *s = cJSON_PrintUnformatted(o);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
  } else {
    char up[32];
    fmt_age(now_ms() - cs->started_ms, up, sizeof up);
    printf("coordinator %s  colo %s  up %s\n", c->server, cs->version ? cs->version : "?", up);
    char cord[32] = "";
    if (cs->hosts_cordoned)
      snprintf(cord, sizeof cord, " (%u cordoned)", cs->hosts_cordoned);
    printf("hosts       %u up, %u down%s; devices %u used of %u\n", cs->hosts_up, cs->hosts_down,
           cord, cs->devices_used, cs->devices_total);
    char held[32] = "";
    if (cs->jobs_held)
      snprintf(held, sizeof held, " (%u held)", cs->jobs_held);
    printf("jobs        %u pending%s, %u running, %u restarting, %u succeeded, %u failed, "
           "%u cancelled, %u timed out\n\n",
           cs->jobs_pending, held, cs->jobs_running, cs->jobs_restarting, cs->jobs_succeeded,
           cs->jobs_failed, cs->jobs_cancelled, cs->jobs_timed_out);
    size_t n = 0;
    for (size_t i = 0; i < p.n; i++)
      n += p.pages[i]->n_jobs;
    if (n == 0)
      printf("no active jobs (coloctl list shows every job)\n");
    else
      print_jobs(c, &p);
  }
  free_pages(&p);
  colo__v1__get_cluster_status_response__free_unpacked(cs, NULL);
  return 0;
}

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) {
  (void)sig;
  interrupted = 1;
}

static int cmd_status(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0, interval = 1000;
  int watch = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--watch") || !strcmp(argv[i], "-w")) {
      watch = 1;
    } else if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
      if (parse_id(argv[++i], &interval) < 0 || interval < 100)
        return usage_error("status: --interval must be at least 100 ms");
    } else if (!id && parse_id(argv[i], &id) == 0) {
      continue;
    } else {
      return usage_error("status: unexpected argument '%s'", argv[i]);
    }
  }
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  if (!watch) {
    int state = 0;
    return status_once(c, id, &state);
  }
  /* the live view: redraw in place on a terminal, one report after another otherwise */
  int tty = isatty(STDOUT_FILENO) && !c->json;
  signal(SIGINT, on_interrupt);
  signal(SIGTERM, on_interrupt);
  while (!interrupted) {
    if (tty)
      printf("\033[H\033[J");
    int state = 0;
    rc = status_once(c, id, &state);
    if (!tty && !c->json)
      printf("\n");
    fflush(stdout);
    if (rc || (id && state >= COLO__V1__JOB_STATE__JOB_STATE_SUCCEEDED))
      break;
    sleep_ms(interval);
  }
  return rc;
}

/* ---- queue ---- */

/* in line first, by place; then the rest waiting (held, after other jobs, in back-off), by id */
static int queue_order(const void *a, const void *b) {
  const Colo__V1__Job *x = *(Colo__V1__Job *const *)a, *y = *(Colo__V1__Job *const *)b;
  uint32_t px = x->has_queue_position ? x->queue_position : UINT32_MAX;
  uint32_t py = y->has_queue_position ? y->queue_position : UINT32_MAX;
  if (px != py)
    return px < py ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int cmd_queue(ctl_t *c, int argc, char **argv) {
  const char *owner = NULL, *account = NULL;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--owner") && i + 1 < argc)
      owner = argv[++i];
    else if (!strcmp(argv[i], "--account") && i + 1 < argc)
      account = argv[++i];
    else
      return usage_error("queue: unexpected argument '%s'", argv[i]);
  }
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  static const Colo__V1__JobState waiting[] = {COLO__V1__JOB_STATE__JOB_STATE_PENDING,
                                               COLO__V1__JOB_STATE__JOB_STATE_RESTARTING};
  pages_t p;
  rc = fetch_jobs(c, waiting, 2, NULL, owner, account, 100000, &p);
  size_t n = 0;
  for (size_t i = 0; i < p.n; i++)
    n += p.pages[i]->n_jobs;
  Colo__V1__Job **v = calloc(n ? n : 1, sizeof *v);
  if (rc == 0 && !v) {
    fprintf(stderr, "coloctl: out of memory\n");
    rc = EXIT_FAIL;
  }
  if (rc) {
    free(v);
    free_pages(&p);
    return rc;
  }
  n = 0;
  for (size_t i = 0; i < p.n; i++)
    for (size_t k = 0; k < p.pages[i]->n_jobs; k++)
      v[n++] = p.pages[i]->jobs[k];
  qsort(v, n, sizeof *v, queue_order);
  if (c->json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
      cJSON_AddItemToArray(arr, colo_pb_to_json(&v[i]->base));
    char *out = cJSON_PrintUnformatted(arr);
    printf("%s\n", out);
    cJSON_free(out);
    cJSON_Delete(arr);
  } else {
    static const char *const headers[] = {"POS",  "ID",    "NAME",    "OWNER", "WORLD",
                                          "PRIO", "START", "WAITING", NULL};
    table_t *t = table_new(headers);
    int64_t now = now_ms();
    size_t in_line = 0;
    for (size_t i = 0; i < n; i++) {
      const Colo__V1__Job *j = v[i];
      char pos[16] = "-", start[48], id[24], world[24], prio[16];
      if (j->has_queue_position) {
        snprintf(pos, sizeof pos, "%u", j->queue_position);
        in_line++;
      }
      fmt_start(j, now, start, sizeof start);
      const char *why = j->waiting && j->waiting[0] ? j->waiting
                        : j->held                   ? "held (coloctl release)"
                        : j->message                ? j->message
                                                    : "";
      snprintf(id, sizeof id, "%llu", (unsigned long long)j->id);
      snprintf(world, sizeof world, "%llu", world_of(j));
      snprintf(prio, sizeof prio, "%d", j->spec ? j->spec->priority : 0);
      table_row(t, pos, id, j->name ? j->name : "", j->owner && j->owner[0] ? j->owner : "-", world,
                prio, start, why);
    }
    table_print(t, stdout);
    table_free(t);
    printf("%zu in line, %zu more waiting (held, after other jobs, or in a restart's back-off)\n",
           in_line, n - in_line);
  }
  free(v);
  free_pages(&p);
  return 0;
}

/* ---- cancel / resume ---- */

/* cancel JOB [JOB...] (a sweep's jobs): each is tried; the exit status is the first failure's */
/* A call made for each of several jobs (cancel, hold, update): req's id is set to each in turn
 * (*id points into req); its response (resp_desc) carries the job as `job`, printed with print,
 * or as JSON (an array with as_array). The first failure's exit code, after trying them all. */
typedef void (*job_print_fn)(const Colo__V1__Job *j, const void *arg);
static int each_job(ctl_t *c, const char *method, ProtobufCMessage *req, uint64_t *id,
                    const ProtobufCMessageDescriptor *resp_desc, const uint64_t *ids, int n,
                    int as_array, job_print_fn print, const void *arg) {
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field_by_name(resp_desc, "job");
  cJSON *arr = c->json && as_array ? cJSON_CreateArray() : NULL;
  int first = 0;
  for (int k = 0; k < n; k++) {
    *id = ids[k];
    ProtobufCMessage *resp = NULL;
    int rc = call(c, method, req, resp_desc, &resp);
    if (rc) {
      first = first ? first : rc;
      continue;
    }
    const Colo__V1__Job *j = *(Colo__V1__Job *const *)((const char *)resp + f->offset);
    if (!j)
      first = first ? first : 1;
    else if (arr)
      cJSON_AddItemToArray(arr, colo_pb_to_json(&j->base));
    else if (c->json)
      print_json(&j->base);
    else
      print(j, arg);
    protobuf_c_message_free_unpacked(resp, NULL);
  }
  if (arr) {
    char *txt = cJSON_PrintUnformatted(arr);
    printf("%s\n", txt);
    cJSON_free(txt);
    cJSON_Delete(arr);
  }
  return first;
}

static void print_cancelled(const Colo__V1__Job *j, const void *arg) {
  (void)arg;
  printf("job %llu %s\n", (unsigned long long)j->id, state_name(j->state));
}

/* The jobs a command names: ids (JOB...), or --name PREFIX [--owner O] [--account A], every job so
 * named in one of `states` (`which` says what they are, "unfinished"); --reason TEXT where reason
 * is not NULL. 0 with *n set, *n 0 when the name matched none (said, or [] printed); else the exit
 * status, with what was wrong said. */
typedef struct {
  const char *cmd, *which, *done; /* "cancel", "unfinished", "cancelled" */
  const Colo__V1__JobState *states;
  size_t n_states;
} jobs_named_t;

static int jobs_named(ctl_t *c, const jobs_named_t *w, int argc, char **argv, uint64_t *ids,
                      int *n_out, const char **reason, int *by_name) {
  int n = 0;
  const char *name = NULL, *owner = NULL, *account = NULL;
  for (int i = 0; i < argc; i++) {
    if (reason && !strcmp(argv[i], "--reason") && i + 1 < argc)
      *reason = argv[++i];
    else if (!strcmp(argv[i], "--name") && i + 1 < argc)
      name = argv[++i];
    else if (!strcmp(argv[i], "--owner") && i + 1 < argc)
      owner = argv[++i];
    else if (!strcmp(argv[i], "--account") && i + 1 < argc)
      account = argv[++i];
    else if (n < MAX_SWEEP_JOBS && parse_id(argv[i], &ids[n]) == 0)
      n++;
    else
      return usage_error("%s: unexpected argument '%s'", w->cmd, argv[i]);
  }
  if (n && (name || owner || account))
    return usage_error("%s: give job ids, or --name PREFIX [--owner O] [--account A], not both",
                       w->cmd);
  if (!n && (owner || account) && !name)
    return usage_error("%s: --%s needs --name PREFIX too (each of an %s's jobs by name)", w->cmd,
                       owner ? "owner" : "account", owner ? "owner" : "account");
  if (name && !name[0])
    return usage_error("%s: --name needs a non-empty prefix", w->cmd);
  if (!n && !name)
    return usage_error("%s needs a job id, or --name PREFIX", w->cmd);
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  *by_name = name != NULL;
  if (name) { /* the jobs so named (a pipeline's stages: PIPELINE.; a sweep's) */
    pages_t p;
    rc = fetch_jobs(c, w->states, w->n_states, name, owner, account, MAX_SWEEP_JOBS, &p);
    for (size_t i = 0; rc == 0 && i < p.n; i++)
      for (size_t k = 0; k < p.pages[i]->n_jobs && n < MAX_SWEEP_JOBS; k++)
        ids[n++] = p.pages[i]->jobs[k]->id;
    free_pages(&p);
    if (rc)
      return rc;
    if (!n) {
      if (c->json)
        printf("[]\n");
      else
        printf("no %s job's name starts with '%s'%s%s%s%s: nothing %s\n", w->which, name,
               owner ? " for owner " : "", owner ? owner : "", account ? " in account " : "",
               account ? account : "", w->done);
    }
  }
  *n_out = n;
  return 0;
}

static int cmd_cancel(ctl_t *c, int argc, char **argv) {
  static const Colo__V1__JobState active[] = {COLO__V1__JOB_STATE__JOB_STATE_PENDING,
                                              COLO__V1__JOB_STATE__JOB_STATE_RUNNING,
                                              COLO__V1__JOB_STATE__JOB_STATE_RESTARTING};
  static const jobs_named_t w = {"cancel", "unfinished", "cancelled", active, 3};
  uint64_t ids[MAX_SWEEP_JOBS];
  int n = 0, by_name = 0;
  const char *reason = NULL;
  int rc = jobs_named(c, &w, argc, argv, ids, &n, &reason, &by_name);
  if (rc || !n)
    return rc;
  Colo__V1__CancelJobRequest req = COLO__V1__CANCEL_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.reason = (char *)reason;
  return each_job(c, "CancelJob", &req.base, &req.id, &colo__v1__cancel_job_response__descriptor,
                  ids, n, n > 1 || by_name, print_cancelled, NULL);
}

static void print_deleted(const Colo__V1__Job *j, const void *arg) {
  (void)arg;
  printf("job %llu (%s, %s) deleted\n", (unsigned long long)j->id, j->name ? j->name : "",
         state_name(j->state));
}

/* delete JOB... | --name PREFIX [--owner O] [--account A]: ended jobs, with their records and logs
 */
/* coloctl compare: jobs side by side, by what differs in their specs (compare.h) */
static int cmd_compare(ctl_t *c, int argc, char **argv) {
  static const jobs_named_t w = {"compare", "known", "compared", NULL, 0};
  uint64_t ids[MAX_SWEEP_JOBS];
  int n = 0, by_name = 0;
  int rc = jobs_named(c, &w, argc, argv, ids, &n, NULL, &by_name);
  if (rc || !n)
    return rc;
  Colo__V1__GetJobResponse **resp = calloc((size_t)n, sizeof *resp);
  const Colo__V1__Job **jobs = calloc((size_t)n, sizeof *jobs);
  if (!resp || !jobs)
    rc = 1;
  for (int i = 0; i < n && rc == 0; i++)
    if ((rc = get_job(c, ids[i], &resp[i])) == 0)
      jobs[i] = resp[i]->job;
  if (rc == 0 && compare_print(jobs, (size_t)n, c->json, stdout) < 0) {
    fprintf(stderr, "coloctl: compare: out of memory\n");
    rc = 1;
  }
  for (int i = 0; resp && i < n; i++)
    if (resp[i])
      colo__v1__get_job_response__free_unpacked(resp[i], NULL);
  free(resp);
  free(jobs);
  return rc;
}

static int cmd_delete(ctl_t *c, int argc, char **argv) {
  static const Colo__V1__JobState ended[] = {
      COLO__V1__JOB_STATE__JOB_STATE_SUCCEEDED, COLO__V1__JOB_STATE__JOB_STATE_FAILED,
      COLO__V1__JOB_STATE__JOB_STATE_CANCELLED, COLO__V1__JOB_STATE__JOB_STATE_TIMED_OUT};
  static const jobs_named_t w = {"delete", "ended", "deleted", ended, 4};
  uint64_t ids[MAX_SWEEP_JOBS];
  int n = 0, by_name = 0;
  int rc = jobs_named(c, &w, argc, argv, ids, &n, NULL, &by_name);
  if (rc || !n)
    return rc;
  Colo__V1__DeleteJobRequest req = COLO__V1__DELETE_JOB_REQUEST__INIT;
  req.has_id = 1;
  return each_job(c, "DeleteJob", &req.base, &req.id, &colo__v1__delete_job_response__descriptor,
                  ids, n, n > 1 || by_name, print_deleted, NULL);
}

static int cmd_resume(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0, step = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--from-step") && i + 1 < argc) {
      if (parse_id(argv[++i], &step) < 0)
        return usage_error("resume: --from-step must be a positive step number");
    } else if (!id && parse_id(argv[i], &id) == 0) {
      continue;
    } else {
      return usage_error("resume: unexpected argument '%s'", argv[i]);
    }
  }
  if (!id)
    return usage_error("resume needs a job id");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__ResumeJobRequest req = COLO__V1__RESUME_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = id;
  req.has_from_step = step > 0;
  req.from_step = step;
  Colo__V1__ResumeJobResponse *resp = NULL;
  rc = call(c, "ResumeJob", &req.base, &colo__v1__resume_job_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  if (c->json)
    print_json(&resp->job->base);
  else
    printf("job %llu %s (%s)\n", (unsigned long long)id, state_name(resp->job->state),
           resp->job->message ? resp->job->message : "");
  colo__v1__resume_job_response__free_unpacked(resp, NULL);
  return 0;
}

/* ---- hold, release, update ---- */

/* Seconds from "5400", "90s", "30m", "2h" or "1d"; "0" and "none": no limit. */
static int parse_seconds(const char *s, uint32_t *out) {
  if (!strcmp(s, "none")) {
    *out = 0;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || *s == '-' || errno)
    return -1;
  unsigned long long unit = !*end               ? 1
                            : !strcmp(end, "s") ? 1
                            : !strcmp(end, "m") ? 60
                            : !strcmp(end, "h") ? 3600
                            : !strcmp(end, "d") ? 86400
                                                : 0;
  if (!unit || v > UINT32_MAX / unit)
    return -1;
  *out = (uint32_t)(v * unit);
  return 0;
}

/* What UpdateJob made of a job, in a line: its state, what changed, and what it waits for. */
static void print_updated(const Colo__V1__Job *j, const void *arg) {
  const Colo__V1__UpdateJobRequest *req = arg;
  const Colo__V1__JobSpec *s = j->spec;
  int waits = j->waiting && j->waiting[0];
  printf("job %llu %s", (unsigned long long)j->id, state_name(j->state));
  if (req->has_requeue && req->requeue)
    printf(", requeued: its ranks stop at a step with a checkpoint, then it waits to be placed%s",
           req->has_hold ? "" : " again");
  if (req->has_hold && (!j->held || !waits)) /* a held job's reason to wait says it is held */
    printf("%s%s", req->has_requeue && req->requeue ? " once released: " : ", ",
           j->held ? (j->held_by_admin ? "held by an admin" : "held") : "released");
  if (req->has_priority && s)
    printf(", priority %d", s->priority);
  if (req->has_max_restarts && s)
    printf(", max_restarts %u", s->max_restarts);
  if (req->has_time_limit_s && s && s->resources) {
    char lim[32] = "none";
    if (s->resources->time_limit_s)
      fmt_age((int64_t)s->resources->time_limit_s * 1000, lim, sizeof lim);
    printf(", time limit %s", lim);
  }
  if (waits)
    printf(": %s", j->waiting);
  printf("\n");
}

/* UpdateJob for each job */
static int update_jobs(ctl_t *c, const uint64_t *ids, int n, Colo__V1__UpdateJobRequest *req) {
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  req->has_id = 1;
  return each_job(c, "UpdateJob", &req->base, &req->id, &colo__v1__update_job_response__descriptor,
                  ids, n, n > 1, print_updated, req);
}

/* hold JOB... [--reason TEXT], release JOB... and requeue JOB... [--hold [--reason TEXT]] */
static int hold(ctl_t *c, int argc, char **argv, const char *verb) {
  int requeue = !strcmp(verb, "requeue"), on = !strcmp(verb, "hold");
  uint64_t ids[MAX_SWEEP_JOBS];
  int n = 0;
  const char *reason = NULL;
  for (int i = 0; i < argc; i++) {
    if ((on || requeue) && !strcmp(argv[i], "--reason") && i + 1 < argc)
      reason = argv[++i];
    else if (requeue && !strcmp(argv[i], "--hold"))
      on = 1;
    else if (n < MAX_SWEEP_JOBS && parse_id(argv[i], &ids[n]) == 0)
      n++;
    else
      return usage_error("%s: unexpected argument '%s'", verb, argv[i]);
  }
  if (!n)
    return usage_error("%s needs a job id", verb);
  if (reason && !on)
    return usage_error("%s: --reason goes with --hold", verb);
  Colo__V1__UpdateJobRequest req = COLO__V1__UPDATE_JOB_REQUEST__INIT;
  req.has_hold = !requeue || on;
  req.hold = on;
  req.has_requeue = req.requeue = requeue;
  req.reason = (char *)reason;
  return update_jobs(c, ids, n, &req);
}

static int cmd_hold(ctl_t *c, int argc, char **argv) {
  return hold(c, argc, argv, "hold");
}

static int cmd_release(ctl_t *c, int argc, char **argv) {
  return hold(c, argc, argv, "release");
}

static int cmd_requeue(ctl_t *c, int argc, char **argv) {
  return hold(c, argc, argv, "requeue");
}

static int cmd_update(ctl_t *c, int argc, char **argv) {
  uint64_t ids[MAX_SWEEP_JOBS];
  int n = 0;
  Colo__V1__UpdateJobRequest req = COLO__V1__UPDATE_JOB_REQUEST__INIT;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end;
    if (!strcmp(a, "--priority") && v) {
      errno = 0;
      long p = strtol(v, &end, 10);
      if (end == v || *end || errno || p < INT32_MIN || p > INT32_MAX)
        return usage_error("update: --priority must be a whole number (-1000..1000)");
      req.has_priority = 1;
      req.priority = (int32_t)p;
      i++;
    } else if (!strcmp(a, "--max-restarts") && v) {
      errno = 0;
      unsigned long r = strtoul(v, &end, 10);
      if (end == v || *end || *v == '-' || errno || r > UINT32_MAX)
        return usage_error("update: --max-restarts must be a number of restarts (0..100)");
      req.has_max_restarts = 1;
      req.max_restarts = (uint32_t)r;
      i++;
    } else if (!strcmp(a, "--time-limit") && v) {
      if (parse_seconds(v, &req.time_limit_s) < 0)
        return usage_error("update: --time-limit must be seconds, or 30m, 2h, 1d; none: no limit");
      req.has_time_limit_s = 1;
      i++;
    } else if (n < MAX_SWEEP_JOBS && parse_id(a, &ids[n]) == 0) {
      n++;
    } else {
      return usage_error("update: unexpected argument '%s'", a);
    }
  }
  if (!n)
    return usage_error("update needs a job id");
  if (!req.has_priority && !req.has_max_restarts && !req.has_time_limit_s)
    return usage_error(
        "update: nothing to change: give --priority, --max-restarts or --time-limit");
  return update_jobs(c, ids, n, &req);
}

/* ---- watch ---- */

typedef struct {
  ctl_t *c;
  int state; /* the newest the stream said */
} watching_t;

static int on_event(const ProtobufCMessage *m, void *data) {
  watching_t *w = data;
  const Colo__V1__JobEvent *ev = (const void *)m;
  if (ev->has_state)
    w->state = ev->state;
  if (w->c->json) {
    print_json(m);
  } else {
    time_t t = (time_t)(ev->time_ms / 1000);
    struct tm tm;
    char ts[32];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    if (ev->progress && ev->progress->has_step)
      printf("%s  job %llu  step %llu/%llu  loss %.4f  %.0f tok/s\n", ts,
             (unsigned long long)ev->job_id, (unsigned long long)ev->progress->step,
             (unsigned long long)ev->progress->total_steps, (double)ev->progress->loss,
             (double)ev->progress->tokens_per_s);
    else if (ev->progress && ev->progress->has_val_step) { /* an evaluation alone (train.steps 0) */
      const Colo__V1__Progress *p = ev->progress;
      printf("%s  job %llu  evaluated at step %llu", ts, (unsigned long long)ev->job_id,
             (unsigned long long)p->val_step);
      if (p->has_val_loss)
        printf("  val loss %.4f", (double)p->val_loss);
      for (size_t k = 0; k < p->n_choice_scores; k++)
        printf("  %s acc_norm %.4f", p->choice_scores[k]->name ? p->choice_scores[k]->name : "",
               (double)p->choice_scores[k]->acc_norm);
      printf("\n");
    } else
      printf("%s  job %llu  %-10s  %s\n", ts, (unsigned long long)ev->job_id, state_name(ev->state),
             ev->message ? ev->message : "");
  }
  fflush(stdout);
  return 0;
}

/* Prints a job's state changes and progress until it ends: 0 when it SUCCEEDED, EXIT_JOB when
 * it ended otherwise, EXIT_FAIL when the stream failed (said why). */
static int watch_job(ctl_t *c, uint64_t id) {
  Colo__V1__WatchJobRequest req = COLO__V1__WATCH_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = id;
  watching_t w = {c, 0};
  colo_rpc_status_t st;
  if (colo_rpc_call_stream(c->cli, "/colo.v1.Cluster/WatchJob", &req.base,
                           &colo__v1__job_event__descriptor, 0, on_event, &w, &st) < 0)
    return call_failed(c, &st);
  return w.state == COLO__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : EXIT_JOB;
}

static int cmd_watch(ctl_t *c, int argc, char **argv) {
  uint64_t id;
  if (argc != 1 || parse_id(argv[0], &id) < 0)
    return usage_error("watch needs one job id");
  int rc = connect_ctl(c);
  return rc ? rc : watch_job(c, id);
}

/* ---- hosts ---- */

/* "g1: device 0 slowed (REASON): WHAT", a line a device with its own reason; "g1: devices 0, 3
 * slowed (the first: REASON): WHAT" from a colod that gives the first reason only */
static void print_devices(const char *host, const uint32_t *idx, size_t n, const char *state,
                          const char *reason, Colo__V1__DeviceHealth *const *each, size_t n_each,
                          const char *what) {
  if (n_each == n && n > 1) { /* each with its own reason, a line each */
    for (size_t k = 0; k < n_each; k++)
      printf("%s: device %u %s (%s): %s\n", host, each[k]->index, state,
             each[k]->reason ? each[k]->reason : "", what);
    return;
  }
  if (!n)
    return;
  printf("%s: device%s", host, n == 1 ? "" : "s");
  for (size_t k = 0; k < n; k++)
    printf("%s %u", k ? "," : "", idx[k]);
  printf(" %s (%s%s): %s\n", state, n > 1 ? "the first: " : "", reason ? reason : "", what);
}

/* "7d", "12h", "30m" before now (ahead: after it); "2026-11-01" or "2026-11-01T12:00:00Z"
 * (UTC); or Unix ms */
static int parse_when(const char *s, int64_t now, int ahead, int64_t *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end != s && v >= 0 && !end[1] && strchr("dhm", end[0]) && end[0]) {
    int64_t unit = end[0] == 'd' ? 86400000 : end[0] == 'h' ? 3600000 : 60000;
    if (v > now / unit)
      return -1;
    *out = ahead ? now + v * unit : now - v * unit;
    return 0;
  }
  if (end != s && !*end && v >= 0 && strlen(s) > 8) { /* Unix ms, not a short number */
    *out = v;
    return 0;
  }
  struct tm tm = {0};
  const char *rest = strptime(s, "%Y-%m-%d", &tm);
  if (rest && *rest == 'T')
    rest = strptime(rest, "T%H:%M:%SZ", &tm);
  if (!rest || *rest)
    return -1;
  *out = (int64_t)timegm(&tm) * 1000;
  return 0;
}

static void fmt_utc_ms(int64_t ms, char *buf, size_t n) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, n, "%Y-%m-%d %H:%M UTC", &tm);
}

static int cmd_hosts(ctl_t *c, int argc, char **argv) {
  (void)argv;
  if (argc)
    return usage_error("hosts takes no arguments");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__ListHostsRequest req = COLO__V1__LIST_HOSTS_REQUEST__INIT;
  Colo__V1__ListHostsResponse *resp = NULL;
  rc = call(c, "ListHosts", &req.base, &colo__v1__list_hosts_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  if (c->json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < resp->n_hosts; i++)
      cJSON_AddItemToArray(arr, colo_pb_to_json(&resp->hosts[i]->base));
    char *s = cJSON_PrintUnformatted(arr);
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(arr);
  } else if (resp->n_hosts == 0) {
    printf("no hosts have registered\n");
  } else {
    static const char *const H[] = {"NAME", "ADDRESS", "STATE",     "DEVICES", "USED", "FREE",
                                    "CPUS", "MEMORY",  "LAST SEEN", "LABELS",  NULL};
    table_t *t = table_new(H);
    int64_t now = now_ms();
    for (size_t i = 0; i < resp->n_hosts; i++) {
      const Colo__V1__Host *h = resp->hosts[i];
      char devs[128] = "", used[16], freed[16], cpus[16], mem[32], seen[40], kind[16];
      if (h->n_devices)
        snprintf(devs, sizeof devs, "%zu %s", h->n_devices,
                 colo_pb_enum_short(&colo__v1__device_kind__descriptor, h->devices[0]->kind, kind,
                                    sizeof kind));
      else
        snprintf(devs, sizeof devs, "0");
      snprintf(used, sizeof used, "%u", h->devices_used);
      size_t out = h->devices_used + h->n_unhealthy_devices; /* a sick one may run a rank too */
      snprintf(freed, sizeof freed, "%zu",
               h->state == COLO__V1__HOST_STATE__HOST_STATE_UP && !h->cordoned && h->n_devices > out
                   ? h->n_devices - out
                   : 0);
      snprintf(cpus, sizeof cpus, "%u", h->cpu_count);
      fmt_bytes(h->memory_bytes, mem, sizeof mem);
      fmt_age(now - h->last_seen_ms, seen, sizeof seen);
      strncat(seen, " ago", sizeof seen - strlen(seen) - 1);
      const char *state = h->state == COLO__V1__HOST_STATE__HOST_STATE_UP ? "UP" : "DOWN";
      char st[16];
      snprintf(st, sizeof st, "%s%s", state, h->cordoned ? ",CORDONED" : "");
      char labels[COLO_MAX_LABELS * (COLO_MAX_LABEL + 1) + 1] = "-";
      for (size_t k = 0, len = 0; k < h->n_labels && len < sizeof labels; k++)
        len +=
            (size_t)snprintf(labels + len, sizeof labels - len, "%s%s", k ? "," : "", h->labels[k]);
      table_row(t, h->name, h->address, st, devs, used, freed, cpus, mem, seen, labels);
    }
    table_print(t, stdout);
    table_free(t);
    for (size_t i = 0; i < resp->n_hosts; i++) { /* the operators' reasons, under the table */
      const Colo__V1__Host *h = resp->hosts[i];
      const char *why = h->cordon_reason ? h->cordon_reason : "";
      char when[32];
      if (h->cordoned) {
        printf("%s is cordoned%s%s\n", h->name, why[0] ? ": " : "", why);
      } else if (h->has_cordon_at_ms) {
        fmt_utc_ms(h->cordon_at_ms, when, sizeof when);
        printf("%s is to be cordoned at %s%s%s%s; until then it takes only jobs whose time "
               "limits end by then\n",
               h->name, when, h->cordon_evict ? ", its running jobs stopped" : "",
               why[0] ? ": " : "", why);
      }
    }
    for (size_t i = 0; i < resp->n_hosts; i++) {
      const Colo__V1__Host *h = resp->hosts[i];
      print_devices(h->name, h->unhealthy_devices, h->n_unhealthy_devices, "unhealthy",
                    h->unhealthy_reason, h->unhealthy_reasons, h->n_unhealthy_reasons,
                    "no new ranks go there");
    }
    for (size_t i = 0; i < resp->n_hosts; i++) {
      const Colo__V1__Host *h = resp->hosts[i];
      print_devices(h->name, h->slowed_devices, h->n_slowed_devices, "slowed", h->slowed_reason,
                    h->slowed_reasons, h->n_slowed_reasons, "ranks there run slower");
    }
    for (size_t i = 0; i < resp->n_hosts; i++)
      if (resp->hosts[i]->state == COLO__V1__HOST_STATE__HOST_STATE_UP && !resp->hosts[i]->watching)
        printf("%s hears of new or stopped ranks only at its heartbeats: its worker has no "
               "WatchHost stream open (an older worker, or the stream is down)\n",
               resp->hosts[i]->name);
  }
  colo__v1__list_hosts_response__free_unpacked(resp, NULL);
  return 0;
}

/* cordon HOST [--reason TEXT] [--evict] [--at TIME] and uncordon HOST */
static int cordon(ctl_t *c, int argc, char **argv, int on) {
  const char *what = on ? "cordon" : "uncordon", *name = NULL, *reason = NULL;
  int evict = 0;
  int64_t at = 0;
  for (int i = 0; i < argc; i++) {
    if (on && !strcmp(argv[i], "--reason") && i + 1 < argc)
      reason = argv[++i];
    else if (on && !strcmp(argv[i], "--evict"))
      evict = 1;
    else if (on && !strcmp(argv[i], "--at") && i + 1 < argc) {
      if (parse_when(argv[++i], now_ms(), 1, &at) < 0)
        return usage_error("cordon: --at takes 30m, 12h, 2d (from now), a UTC date and time "
                           "(2026-11-25T02:00:00Z) or Unix ms, not '%s'",
                           argv[i]);
    } else if (!name && argv[i][0] != '-')
      name = argv[i];
    else
      return usage_error("%s: unexpected argument '%s'", what, argv[i]);
  }
  if (!name)
    return usage_error("%s needs a host name (coloctl hosts lists them)", what);
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__CordonHostRequest req = COLO__V1__CORDON_HOST_REQUEST__INIT;
  req.name = (char *)name;
  req.has_cordon = 1;
  req.cordon = on;
  req.reason = (char *)reason;
  req.has_evict = evict;
  req.evict = evict != 0;
  req.has_at_ms = at != 0;
  req.at_ms = at;
  Colo__V1__CordonHostResponse *resp = NULL;
  rc = call(c, "CordonHost", &req.base, &colo__v1__cordon_host_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  if (c->json && evict) {
    print_json(&resp->base);
  } else if (c->json) {
    print_json(&resp->host->base);
  } else if (at) {
    char when[32];
    fmt_utc_ms(at, when, sizeof when);
    printf("host %s to be cordoned at %s%s; until then it takes only jobs whose time limits "
           "end by then\n",
           name, when, evict ? ", its running jobs then stopped to restart elsewhere" : "");
  } else if (evict) {
    printf("host %s cordoned: no new ranks go there; %zu job%s stopping to restart elsewhere", name,
           resp->n_evicted_jobs, resp->n_evicted_jobs == 1 ? "" : "s");
    for (size_t i = 0; i < resp->n_evicted_jobs; i++)
      printf("%s%llu", i ? ", " : ": ", (unsigned long long)resp->evicted_jobs[i]);
    printf("\n");
  } else if (on) {
    printf("host %s cordoned: no new ranks go there; the %u running stay\n", name,
           resp->host->devices_used);
  } else
    printf("host %s uncordoned\n", name);
  colo__v1__cordon_host_response__free_unpacked(resp, NULL);
  return 0;
}

static int cmd_cordon(ctl_t *c, int argc, char **argv) {
  return cordon(c, argc, argv, 1);
}

static int cmd_uncordon(ctl_t *c, int argc, char **argv) {
  return cordon(c, argc, argv, 0);
}

/* ---- logs ---- */

typedef struct {
  ctl_t *c;
  uint32_t attempt; /* the attempt being read; 0: the server's choice, not known yet */
  uint64_t offset;  /* its next byte */
} logs_t;

static int on_log(const ProtobufCMessage *m, void *data) {
  logs_t *l = data;
  const Colo__V1__LogChunk *ch = (const void *)m;
  if (l->c->json) {
    print_json(m);
  } else {
    fwrite(ch->data.data, 1, ch->data.len, stdout);
    fflush(stdout);
  }
  l->attempt = ch->attempt;
  l->offset = ch->offset + ch->data.len;
  return interrupted ? 1 : 0;
}

static int cmd_logs(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0, rank = 0, attempt = 0, tail = 0;
  int follow = 0;
  for (int i = 0; i < argc; i++) {
    uint64_t *num = NULL;
    if (!strcmp(argv[i], "-f") || !strcmp(argv[i], "--follow"))
      follow = 1;
    else if (!strcmp(argv[i], "--rank"))
      num = &rank;
    else if (!strcmp(argv[i], "--attempt"))
      num = &attempt;
    else if (!strcmp(argv[i], "--tail"))
      num = &tail;
    else if (!id && parse_id(argv[i], &id) == 0)
      continue;
    else
      return usage_error("logs: unexpected argument '%s'", argv[i]);
    if (num) {
      char *end;
      if (i + 1 >= argc || !argv[i + 1][0] || argv[i + 1][0] == '-')
        return usage_error("logs: %s needs a number", argv[i]);
      *num = strtoull(argv[++i], &end, 10);
      if (*end || *num > UINT32_MAX)
        return usage_error("logs: %s needs a number", argv[i - 1]);
    }
  }
  if (!id)
    return usage_error("logs needs a job id");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  signal(SIGINT, on_interrupt);
  logs_t l = {c, (uint32_t)attempt, 0};
  int first = 1;
  while (!interrupted) {
    Colo__V1__ReadLogsRequest req = COLO__V1__READ_LOGS_REQUEST__INIT;
    req.has_job_id = req.has_rank = req.has_attempt = req.has_offset = req.has_follow = 1;
    req.job_id = id;
    req.rank = (uint32_t)rank;
    req.attempt = l.attempt;
    req.offset = l.offset;
    req.follow = follow;
    if (first && tail) {
      req.has_tail_bytes = 1;
      req.tail_bytes = (uint32_t)tail;
    }
    first = 0;
    colo_rpc_status_t st;
    if (colo_rpc_call_stream(c->cli, "/colo.v1.Cluster/ReadLogs", &req.base,
                             &colo__v1__log_chunk__descriptor, 0, on_log, &l, &st) < 0) {
      /* a job that has not started has no logs yet: -f waits for its first attempt */
      if (!(follow && st.code == GRPC_STATUS_FAILED_PRECONDITION))
        return call_failed(c, &st);
    }
    if (!follow || interrupted)
      break;
    /* the stream ends with its attempt: go on with the next one, until the job ends */
    Colo__V1__GetJobResponse *resp = NULL;
    if ((rc = get_job(c, id, &resp)))
      return rc;
    int done = resp->job->state >= COLO__V1__JOB_STATE__JOB_STATE_SUCCEEDED;
    uint32_t att = resp->job->attempt;
    colo__v1__get_job_response__free_unpacked(resp, NULL);
    if (l.attempt == 0 && att > 0)
      l.attempt = att;
    if (att > l.attempt) {
      fprintf(stderr, "coloctl: attempt %u ended; following attempt %u\n", l.attempt, att);
      l.attempt = att;
      l.offset = 0;
      continue;
    }
    if (done)
      break;
    sleep_ms(300);
  }
  return 0;
}

/* ---- checkpoints ---- */

/* What ranks a checkpoint's row for --best, lower better: minus the score of the job's
 * train.best_metric when it records one, else its validation loss; NaN: neither */
static float ckpt_rank(const Colo__V1__Checkpoint *k) {
  if (k->has_score && isfinite(k->score))
    return -k->score;
  return k->has_val_loss && isfinite(k->val_loss) ? k->val_loss : NAN;
}

static int cmd_checkpoints(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0;
  int best_only = 0, have = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--best"))
      best_only = 1;
    else if (!have && parse_id(argv[i], &id) == 0)
      have = 1;
    else
      return usage_error("checkpoints needs one job id (and optionally --best)");
  }
  if (!have)
    return usage_error("checkpoints needs one job id (and optionally --best)");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__ListCheckpointsRequest req = COLO__V1__LIST_CHECKPOINTS_REQUEST__INIT;
  req.has_job_id = 1;
  req.job_id = id;
  Colo__V1__ListCheckpointsResponse *resp = NULL;
  rc = call(c, "ListCheckpoints", &req.base, &colo__v1__list_checkpoints_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  if (best_only) { /* the best its row records (checkpoint.keep_best), the newest of equals */
    const Colo__V1__Checkpoint *b = NULL;
    float brank = INFINITY;
    for (size_t i = 0; i < resp->n_checkpoints; i++) { /* newest first */
      float r = ckpt_rank(resp->checkpoints[i]);
      if (r < brank) { /* NaN never is */
        b = resp->checkpoints[i];
        brank = r;
      }
    }
    if (b && c->json)
      print_json(&b->base);
    else if (b)
      printf("%s\n", b->path ? b->path : "");
    else
      fprintf(stderr,
              "coloctl: job %llu has no checkpoint that records a validation loss or a score (its "
              "checkpoint.keep_best evaluates each one)\n",
              (unsigned long long)id);
    colo__v1__list_checkpoints_response__free_unpacked(resp, NULL);
    return b ? 0 : 1;
  }
  if (c->json) {
    print_json(&resp->base);
  } else if (resp->n_checkpoints == 0) {
    printf("job %llu has no complete checkpoint\n", (unsigned long long)id);
  } else {
    /* the validation loss at a checkpoint's step: the one it records (the engine's manifest),
     * else an evaluation there in the curve colod sampled (checkpoints of older engines); and
     * which of those is the lowest */
    Colo__V1__GetJobHistoryRequest hreq = COLO__V1__GET_JOB_HISTORY_REQUEST__INIT;
    hreq.has_job_id = 1;
    hreq.job_id = id;
    Colo__V1__GetJobHistoryResponse *hist = NULL;
    if (call(c, "GetJobHistory", &hreq.base, &colo__v1__get_job_history_response__descriptor,
             (ProtobufCMessage **)&hist) != 0)
      hist = NULL; /* the table without them */
    float *val = calloc(resp->n_checkpoints, sizeof *val);
    size_t best = SIZE_MAX, best_score = SIZE_MAX; /* the lowest loss; the highest score */
    int scores = 0; /* train.best_metric's: they rank the checkpoints, not the losses */
    for (size_t i = 0; i < resp->n_checkpoints; i++) {
      const Colo__V1__Checkpoint *k = resp->checkpoints[i];
      scores |= k->has_score;
      if (k->has_score &&
          (best_score == SIZE_MAX || k->score > resp->checkpoints[best_score]->score))
        best_score = i;
    }
    for (size_t i = 0; val && i < resp->n_checkpoints; i++) {
      val[i] = resp->checkpoints[i]->has_val_loss ? resp->checkpoints[i]->val_loss : NAN;
      for (size_t k = 0; hist && !resp->checkpoints[i]->has_val_loss && k < hist->n_samples; k++) {
        const Colo__V1__ProgressSample *smp = hist->samples[k];
        if (smp->has_val_loss && smp->step == resp->checkpoints[i]->step)
          val[i] = smp->val_loss; /* the newest attempt's, the samples going by attempt */
      }
      if (isfinite(val[i]) && (best == SIZE_MAX || val[i] < val[best]))
        best = i;
    }
    static const char *const H[] = {"STEP",     "ATTEMPT",         "SIZE", "AGE",
                                    "VAL LOSS", "MANIFEST SHA256", "PATH", NULL};
    /* the score's column is named for the job's train.best_metric (HS.ACC_NORM) */
    char metric[80] = "SCORE";
    Colo__V1__GetJobResponse *gj = NULL;
    if (scores && get_job(c, id, &gj) == 0 && gj->job && gj->job->spec && gj->job->spec->train &&
        gj->job->spec->train->best_metric && gj->job->spec->train->best_metric[0]) {
      snprintf(metric, sizeof metric, "%s", gj->job->spec->train->best_metric);
      for (char *q = metric; *q; q++)
        *q = (char)toupper((unsigned char)*q);
    }
    if (gj)
      colo__v1__get_job_response__free_unpacked(gj, NULL);
    const char *const HS[] = {"STEP", "ATTEMPT",         "SIZE", "AGE", "VAL LOSS",
                              metric, "MANIFEST SHA256", "PATH", NULL};
    table_t *t = table_new(scores ? HS : H);
    int64_t now = now_ms();
    for (size_t i = 0; i < resp->n_checkpoints; i++) {
      const Colo__V1__Checkpoint *k = resp->checkpoints[i];
      char step[24], att[16], size[32], age[32], sha[20], vl[32] = "-", sc[32] = "-";
      snprintf(step, sizeof step, "%llu", (unsigned long long)k->step);
      snprintf(att, sizeof att, "%u", k->attempt);
      fmt_bytes(k->bytes, size, sizeof size);
      fmt_age(now - k->created_ms, age, sizeof age);
      snprintf(sha, sizeof sha, "%.12s", k->manifest_sha256 ? k->manifest_sha256 : "");
      if (val && isfinite(val[i]))
        snprintf(vl, sizeof vl, "%.4f%s", (double)val[i], i == best && !scores ? " (lowest)" : "");
      if (k->has_score)
        snprintf(sc, sizeof sc, "%.4f%s", (double)k->score, i == best_score ? " (highest)" : "");
      if (scores)
        table_row(t, step, att, size, age, vl, sc, sha, k->path ? k->path : "");
      else
        table_row(t, step, att, size, age, vl, sha, k->path ? k->path : "");
    }
    table_print(t, stdout);
    table_free(t);
    free(val);
    if (hist)
      colo__v1__get_job_history_response__free_unpacked(hist, NULL);
  }
  colo__v1__list_checkpoints_response__free_unpacked(resp, NULL);
  return 0;
}

/* ---- checkpoint ---- */

/* The checkpoint of a job that answers CheckpointJob request `request` (the first with a number
 * that high: a later request's answers it too), in *out; NULL when none is there yet. The
 * response holding it is returned in *resp for the caller to free. */
static int answering_checkpoint(ctl_t *c, uint64_t id, uint32_t attempt, uint32_t request,
                                Colo__V1__ListCheckpointsResponse **resp,
                                const Colo__V1__Checkpoint **out) {
  Colo__V1__ListCheckpointsRequest req = COLO__V1__LIST_CHECKPOINTS_REQUEST__INIT;
  req.has_job_id = 1;
  req.job_id = id;
  *out = NULL;
  int rc = call(c, "ListCheckpoints", &req.base, &colo__v1__list_checkpoints_response__descriptor,
                (ProtobufCMessage **)resp);
  for (size_t i = 0; rc == 0 && i < (*resp)->n_checkpoints; i++) { /* newest first */
    const Colo__V1__Checkpoint *k = (*resp)->checkpoints[i];
    if (k->attempt == attempt && k->request >= request)
      *out = k;
  }
  return rc;
}

static int cmd_checkpoint(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0;
  int wait = 0, have = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--wait"))
      wait = 1;
    else if (!have && parse_id(argv[i], &id) == 0)
      have = 1;
    else
      return usage_error("checkpoint: unexpected argument '%s'", argv[i]);
  }
  if (!have)
    return usage_error("checkpoint needs a job id");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__CheckpointJobRequest req = COLO__V1__CHECKPOINT_JOB_REQUEST__INIT;
  req.has_id = 1;
  req.id = id;
  Colo__V1__CheckpointJobResponse *resp = NULL;
  rc = call(c, "CheckpointJob", &req.base, &colo__v1__checkpoint_job_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  uint32_t attempt = resp->attempt, request = resp->request;
  if (c->json && !wait)
    print_json(&resp->base);
  else if (!c->json)
    printf("job %llu: checkpoint asked of attempt %u's ranks (request %u); they save it at their "
           "next step\n",
           (unsigned long long)id, attempt, request);
  colo__v1__checkpoint_job_response__free_unpacked(resp, NULL);
  /* --wait: until the checkpoint written for it is complete and registered */
  for (int64_t t0 = now_ms(); wait; usleep(200 * 1000)) {
    Colo__V1__ListCheckpointsResponse *ls = NULL;
    const Colo__V1__Checkpoint *ck;
    if ((rc = answering_checkpoint(c, id, attempt, request, &ls, &ck)) != 0)
      return rc;
    if (ck) {
      if (c->json)
        print_json(&ck->base);
      else
        printf("job %llu: checkpoint at step %llu: %s\n", (unsigned long long)id,
               (unsigned long long)ck->step, ck->path ? ck->path : "");
      colo__v1__list_checkpoints_response__free_unpacked(ls, NULL);
      return 0;
    }
    colo__v1__list_checkpoints_response__free_unpacked(ls, NULL);
    Colo__V1__GetJobRequest gr = COLO__V1__GET_JOB_REQUEST__INIT;
    gr.has_id = 1;
    gr.id = id;
    Colo__V1__GetJobResponse *g = NULL;
    if ((rc = call(c, "GetJob", &gr.base, &colo__v1__get_job_response__descriptor,
                   (ProtobufCMessage **)&g)) != 0)
      return rc;
    int gone =
        g->job->state != COLO__V1__JOB_STATE__JOB_STATE_RUNNING || g->job->attempt != attempt;
    char state[32];
    snprintf(state, sizeof state, "%s", state_name(g->job->state));
    colo__v1__get_job_response__free_unpacked(g, NULL);
    if (gone) {
      fprintf(stderr,
              "coloctl: job %llu's attempt %u ended (the job is %s) before it saved the "
              "checkpoint asked\n",
              (unsigned long long)id, attempt, state);
      return EXIT_FAIL;
    }
    if (now_ms() - t0 > 600000) {
      fprintf(stderr, "coloctl: job %llu: no checkpoint for request %u within 10 minutes\n",
              (unsigned long long)id, request);
      return EXIT_FAIL;
    }
  }
  return 0;
}

/* ---- usage ---- */

static int cmd_usage(ctl_t *c, int argc, char **argv) {
  Colo__V1__GetUsageRequest req = COLO__V1__GET_USAGE_REQUEST__INIT;
  int64_t now = now_ms();
  for (int i = 0; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if ((!strcmp(argv[i], "--since") || !strcmp(argv[i], "--until")) && v) {
      int64_t t;
      if (parse_when(v, now, 0, &t) < 0)
        return usage_error("usage: %s takes 7d, 12h, 30m, a UTC date (2026-11-01 or "
                           "2026-11-01T12:00:00Z) or Unix ms, not '%s'",
                           argv[i], v);
      if (argv[i][2] == 's') {
        req.has_since_ms = 1;
        req.since_ms = t;
      } else {
        req.has_until_ms = 1;
        req.until_ms = t;
      }
      i++;
    } else if (!strcmp(argv[i], "--by") && v &&
               (!strcmp(v, "owner") || !strcmp(v, "job") || !strcmp(v, "account"))) {
      req.has_group_by = 1;
      req.group_by = v[0] == 'j'   ? COLO__V1__USAGE_GROUP__USAGE_GROUP_JOB
                     : v[0] == 'a' ? COLO__V1__USAGE_GROUP__USAGE_GROUP_ACCOUNT
                                   : COLO__V1__USAGE_GROUP__USAGE_GROUP_OWNER;
      i++;
    } else if ((!strcmp(argv[i], "--owner") || !strcmp(argv[i], "--account")) && v) {
      *(argv[i][2] == 'o' ? &req.owner : &req.account) = (char *)v;
      i++;
    } else if (!strcmp(argv[i], "--limit") && v) {
      char *end;
      unsigned long n = strtoul(v, &end, 10);
      if (!*v || *end || n == 0 || n > 10000)
        return usage_error("usage: --limit takes 1 to 10000, not '%s'", v);
      req.has_limit = 1;
      req.limit = (uint32_t)n;
      i++;
    } else {
      return usage_error(
          "usage: unexpected '%s' (--since T, --until T, --by owner|job|account, --owner O, "
          "--account A, --limit N)",
          argv[i]);
    }
  }
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__GetUsageResponse *resp = NULL;
  rc = call(c, "GetUsage", &req.base, &colo__v1__get_usage_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  if (c->json) {
    print_json(&resp->base);
    colo__v1__get_usage_response__free_unpacked(resp, NULL);
    return 0;
  }
  int by_job = req.group_by == COLO__V1__USAGE_GROUP__USAGE_GROUP_JOB;
  int by_account = req.group_by == COLO__V1__USAGE_GROUP__USAGE_GROUP_ACCOUNT;
  static const char *const HO[] = {"OWNER", "DEVICE", "JOBS", "ATTEMPTS", "DEVICE-HOURS", NULL};
  static const char *const HA[] = {"ACCOUNT", "DEVICE", "JOBS", "ATTEMPTS", "DEVICE-HOURS", NULL};
  static const char *const HJ[] = {"JOB",    "NAME",     "OWNER",        "ACCOUNT",
                                   "DEVICE", "ATTEMPTS", "DEVICE-HOURS", NULL};
  table_t *t = table_new(by_job ? HJ : by_account ? HA : HO);
  for (size_t i = 0; i < resp->n_rows; i++) {
    const Colo__V1__UsageRow *r = resp->rows[i];
    const char *owner = r->owner && r->owner[0] ? r->owner : "-";
    const char *dev = r->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU ? "gpu" : "cpu";
    char id[24], jobs[16], att[16], hours[32];
    snprintf(id, sizeof id, r->job_id ? "%llu" : "-", (unsigned long long)r->job_id);
    snprintf(jobs, sizeof jobs, "%u", r->jobs);
    snprintf(att, sizeof att, "%u", r->attempts);
    snprintf(hours, sizeof hours, "%.3f", r->device_hours);
    const char *account = r->account && r->account[0] ? r->account : "-";
    if (by_job)
      table_row(t, id, r->job_name ? r->job_name : "", owner, account, dev, att, hours);
    else
      table_row(t, by_account ? account : owner, dev, jobs, att, hours);
  }
  if (resp->n_rows)
    table_print(t, stdout);
  table_free(t);
  char from[40], to[40];
  fmt_utc_ms(resp->since_ms, from, sizeof from);
  fmt_utc_ms(resp->until_ms, to, sizeof to);
  printf("%s%.3f GPU hours and %.3f CPU-slot hours from %s to %s", resp->n_rows ? "\n" : "",
         resp->gpu_hours, resp->cpu_hours, resp->since_ms ? from : "the first job", to);
  if (resp->rows_total > resp->n_rows)
    printf(" (the %zu largest of %u rows shown)", resp->n_rows, resp->rows_total);
  printf("\n");
  if (!by_job && !by_account &&
      resp->n_fair_share) { /* the order waiting jobs of one priority start in */
    uint64_t hl = resp->fair_share_half_life_ms;
    char half[32];
    if (hl % 86400000 == 0)
      snprintf(half, sizeof half, "%llud", (unsigned long long)(hl / 86400000));
    else if (hl % 3600000 == 0)
      snprintf(half, sizeof half, "%lluh", (unsigned long long)(hl / 3600000));
    else
      snprintf(half, sizeof half, "%.0fs", hl / 1000.0);
    int accounts = resp->fair_share_by && !strcmp(resp->fair_share_by, "account");
    printf("\nfair share now (an hour used %s ago counts half; hours count 1/WEIGHT); among "
           "waiting jobs of one priority, those of the first %s start first:\n",
           half, accounts ? "account" : "owner");
    static const char *const HF[] = {"OWNER", "DEVICE", "WEIGHED-HOURS", "WEIGHT", NULL};
    static const char *const HFA[] = {"ACCOUNT", "DEVICE", "WEIGHED-HOURS", "WEIGHT", NULL};
    table_t *f = table_new(accounts ? HFA : HF);
    for (size_t i = 0; i < resp->n_fair_share; i++) {
      const Colo__V1__FairShare *r = resp->fair_share[i];
      char hours[32], weight[32];
      snprintf(hours, sizeof hours, "%.3f", r->device_hours);
      snprintf(weight, sizeof weight, "%g", r->has_weight ? r->weight : 1.0);
      table_row(f, r->owner && r->owner[0] ? r->owner : "-",
                r->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU ? "gpu" : "cpu", hours, weight);
    }
    table_print(f, stdout);
    table_free(f);
  }
  colo__v1__get_usage_response__free_unpacked(resp, NULL);
  return 0;
}

/* ---- history ---- */

/* the loss curve in one line of block characters, `width` buckets averaged */
static void print_sparkline(Colo__V1__ProgressSample **smp, size_t n, size_t width) {
  static const char *const BAR[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    m += smp[i]->has_loss;
  if (m == 0)
    return;
  if (width > m)
    width = m;
  double *col = calloc(width, sizeof *col), lo = 1e300, hi = -1e300;
  size_t *cnt = calloc(width, sizeof *cnt), k = 0;
  uint64_t first = 0, last = 0;
  for (size_t i = 0; i < n; i++) {
    if (!smp[i]->has_loss)
      continue;
    if (k == 0)
      first = smp[i]->step;
    last = smp[i]->step;
    size_t b = k++ * width / m;
    col[b] += smp[i]->loss;
    cnt[b]++;
  }
  for (size_t b = 0; b < width; b++) {
    col[b] /= (double)cnt[b];
    lo = col[b] < lo ? col[b] : lo;
    hi = col[b] > hi ? col[b] : hi;
  }
  printf("loss %.4f ", col[0]);
  for (size_t b = 0; b < width; b++) {
    int level = hi > lo ? (int)((col[b] - lo) / (hi - lo) * 7.0 + 0.5) : 0;
    fputs(BAR[level], stdout);
  }
  printf(" %.4f  (steps %llu to %llu, %zu points; range %.4f to %.4f)\n", col[width - 1],
         (unsigned long long)first, (unsigned long long)last, m, lo, hi);
  free(col);
  free(cnt);
}

static int cmd_history(ctl_t *c, int argc, char **argv) {
  uint64_t id = 0;
  long rows = 20;
  int have_id = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
      char *end;
      rows = strtol(argv[++i], &end, 10);
      if (*end || rows < 1 || rows > 100000)
        return usage_error("--rows wants a number from 1 to 100000");
    } else if (!have_id && parse_id(argv[i], &id) == 0) {
      have_id = 1;
    } else {
      return usage_error("history needs one job id (and optionally --rows N)");
    }
  }
  if (!have_id)
    return usage_error("history needs one job id (and optionally --rows N)");
  int rc = connect_ctl(c);
  if (rc)
    return rc;
  Colo__V1__GetJobHistoryRequest req = COLO__V1__GET_JOB_HISTORY_REQUEST__INIT;
  req.has_job_id = 1;
  req.job_id = id;
  Colo__V1__GetJobHistoryResponse *resp = NULL;
  rc = call(c, "GetJobHistory", &req.base, &colo__v1__get_job_history_response__descriptor,
            (ProtobufCMessage **)&resp);
  if (rc)
    return rc;
  if (c->json) {
    print_json(&resp->base);
  } else if (resp->n_samples == 0) {
    printf("job %llu has no progress yet\n", (unsigned long long)id);
  } else {
    print_sparkline(resp->samples, resp->n_samples, 60);
    /* `rows` training points evenly spaced (the first and the last among them), and every
     * evaluation */
    size_t n = resp->n_samples, m = 0, k = 0;
    for (size_t i = 0; i < n; i++)
      m += resp->samples[i]->has_loss;
    char *pick = calloc(m ? m : 1, 1);
    size_t want = (size_t)rows < m ? (size_t)rows : m;
    for (size_t j = 0; j < want; j++) /* the j-th of want: point round(j·(m-1)/(want-1)) */
      pick[want > 1 ? (j * (m - 1) * 2 + (want - 1)) / ((want - 1) * 2) : 0] = 1;
    /* with several validation sets (data.val_sources), a column for each of the first 8 */
    enum { MAX_SETS = 8 };
    const char *sets[MAX_SETS], *H[7 + MAX_SETS + 1] = {"ATTEMPT", "STEP", "LOSS", "VAL LOSS"};
    size_t ns = 0, nh = 4;
    for (size_t i = 0; i < n; i++)
      for (size_t s = 0; s < resp->samples[i]->n_val_sets; s++) {
        const char *name = resp->samples[i]->val_sets[s]->name;
        size_t q = 0;
        while (q < ns && strcmp(sets[q], name ? name : ""))
          q++;
        if (q == ns && ns < MAX_SETS)
          sets[ns++] = name ? name : "";
      }
    /* and after them, for each multiple-choice set (data.choice_sets), its acc_norm */
    size_t nv = ns;
    char chead[MAX_SETS][160];
    for (size_t i = 0; i < n; i++)
      for (size_t s = 0; s < resp->samples[i]->n_choice_scores; s++) {
        const char *name = resp->samples[i]->choice_scores[s]->name;
        size_t q = nv;
        while (q < ns && strcmp(sets[q], name ? name : ""))
          q++;
        if (q == ns && ns < MAX_SETS) {
          sets[ns] = name ? name : "";
          snprintf(chead[ns], sizeof chead[ns], "%.140s ACC_NORM", sets[ns]);
          ns++;
        }
      }
    for (size_t s = 0; s < ns; s++)
      H[nh++] = s < nv ? sets[s] : chead[s];
    int ema = 0; /* train.ema_decay: the moving average's, evaluated in the weights' place */
    for (size_t i = 0; i < n; i++)
      ema |= resp->samples[i]->has_ema_val_loss;
    if (ema)
      H[nh++] = "EMA VAL LOSS";
    H[nh++] = "LR";
    H[nh++] = "TOK/S";
    H[nh] = NULL;
    table_t *t = table_new(H);
    char cells[7 + MAX_SETS][24];
    const char *row[7 + MAX_SETS];
    for (size_t c = 0; c < nh; c++)
      row[c] = cells[c];
    for (size_t i = 0; i < n; i++) {
      const Colo__V1__ProgressSample *x = resp->samples[i];
      int show = x->has_val_loss || (x->has_loss && pick[k]);
      k += x->has_loss;
      if (!show)
        continue;
      memset(cells, 0, sizeof cells);
      snprintf(cells[0], sizeof cells[0], "%u", x->attempt);
      snprintf(cells[1], sizeof cells[1], "%llu", (unsigned long long)x->step);
      if (x->has_loss) {
        snprintf(cells[2], sizeof cells[2], "%.4f", (double)x->loss);
        snprintf(cells[nh - 2], sizeof cells[0], "%.2e", (double)x->lr);
        snprintf(cells[nh - 1], sizeof cells[0], "%.0f", (double)x->tokens_per_s);
      }
      if (x->has_val_loss)
        snprintf(cells[3], sizeof cells[3], "%.4f", (double)x->val_loss);
      for (size_t v = 0; v < x->n_val_sets; v++)
        for (size_t s = 0; s < nv; s++)
          if (!strcmp(sets[s], x->val_sets[v]->name ? x->val_sets[v]->name : ""))
            snprintf(cells[4 + s], sizeof cells[0], "%.4f", (double)x->val_sets[v]->loss);
      for (size_t v = 0; v < x->n_choice_scores; v++)
        for (size_t s = nv; s < ns; s++)
          if (!strcmp(sets[s], x->choice_scores[v]->name ? x->choice_scores[v]->name : ""))
            snprintf(cells[4 + s], sizeof cells[0], "%.4f", (double)x->choice_scores[v]->acc_norm);
      if (x->has_ema_val_loss)
        snprintf(cells[4 + ns], sizeof cells[0], "%.4f", (double)x->ema_val_loss);
      table_row_cells(t, row);
    }
    table_print(t, stdout);
    table_free(t);
    free(pick);
  }
  colo__v1__get_job_history_response__free_unpacked(resp, NULL);
  return 0;
}

int main(int argc, char **argv) {
  ctl_t c = {0};
  c.server = getenv("COLO_SERVER");
  if (!c.server || !*c.server)
    c.server = DEFAULT_SERVER;
  c.timeout_ms = 10000;
  enum { OPT_VERSION = 256, OPT_TLS_CA, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_NAME };
  static const struct option opts[] = {{"server", required_argument, 0, 's'},
                                       {"json", no_argument, 0, 'j'},
                                       {"timeout", required_argument, 0, 't'},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, OPT_VERSION},
                                       {"tls-ca", required_argument, 0, OPT_TLS_CA},
                                       {"tls-cert", required_argument, 0, OPT_TLS_CERT},
                                       {"tls-key", required_argument, 0, OPT_TLS_KEY},
                                       {"tls-server-name", required_argument, 0, OPT_TLS_NAME},
                                       {0, 0, 0, 0}};
  int o;
  /* "+" stops at the command: options after it belong to the command */
  while ((o = getopt_long(argc, argv, "+s:jt:h", opts, NULL)) != -1) {
    switch (o) {
    case 's':
      c.server = optarg;
      break;
    case 'j':
      c.json = 1;
      break;
    case 't': {
      uint64_t v;
      if (parse_id(optarg, &v) < 0)
        return usage_error("--timeout must be a positive number of milliseconds");
      c.timeout_ms = v;
      break;
    }
    case 'h':
      usage(stdout);
      return 0;
    case OPT_VERSION:
      printf("coloctl %s\n", COLO_VERSION);
      return 0;
    case OPT_TLS_CA:
      c.tls.ca = optarg;
      break;
    case OPT_TLS_CERT:
      c.tls.cert = optarg;
      break;
    case OPT_TLS_KEY:
      c.tls.key = optarg;
      break;
    case OPT_TLS_NAME:
      c.tls.server_name = optarg;
      break;
    default:
      fprintf(stderr, "coloctl: try 'coloctl --help'\n");
      return EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[optind];
  int sub_argc = argc - optind - 1;
  char **sub_argv = argv + optind + 1;
  /* --json is accepted after the command too */
  int k = 0;
  for (int i = 0; i < sub_argc; i++) {
    if (!strcmp(sub_argv[i], "--json") || !strcmp(sub_argv[i], "-j"))
      c.json = 1;
    else
      sub_argv[k++] = sub_argv[i];
  }
  sub_argc = k;
  static const struct {
    const char *name;
    int (*fn)(ctl_t *, int, char **);
  } cmds[] = {{"submit", cmd_submit},
              {"status", cmd_status},
              {"list", cmd_list},
              {"compare", cmd_compare},
              {"queue", cmd_queue},
              {"cancel", cmd_cancel},
              {"delete", cmd_delete},
              {"resume", cmd_resume},
              {"hold", cmd_hold},
              {"release", cmd_release},
              {"update", cmd_update},
              {"requeue", cmd_requeue},
              {"watch", cmd_watch},
              {"events", cmd_events},
              {"hosts", cmd_hosts},
              {"logs", cmd_logs},
              {"checkpoints", cmd_checkpoints},
              {"history", cmd_history},
              {"cordon", cmd_cordon},
              {"uncordon", cmd_uncordon},
              {"usage", cmd_usage},
              {"checkpoint", cmd_checkpoint}};
  int rc = -1;
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(cmd, cmds[i].name))
      rc = cmds[i].fn(&c, sub_argc, sub_argv);
  if (rc < 0)
    rc = usage_error("unknown command '%s'", cmd);
  colo_rpc_client_close(c.cli);
  return rc;
}
