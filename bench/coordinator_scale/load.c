/* coordinator_scale_load: simulated workers against colod. Registers `hosts` hosts of `devices`
 * CPU devices each, then heartbeats every host once a second (spread evenly over the second,
 * from `threads` threads with a channel each) for `seconds`, reporting the ranks colod places
 * on it as RUNNING, as a real worker would. Halfway through it submits one job of pp × dp × tp
 * ranks and measures the time from SubmitJob to the job being RUNNING with every rank placed.
 * With --fill N, N jobs of one host each (priority -1) take N hosts first, and the job, given a
 * higher --priority, preempts some of them: ranks colod withdraws are reported as having exited
 * with 75, as colo-train's do when stopped as asked.
 * Prints one JSON line: heartbeats, latency percentiles, errors, the placement time.
 *
 *   coordinator_scale_load --server ADDR [--hosts N] [--devices D] [--threads T]
 *                          [--seconds S] [--dp N] [--tp N] [--fill N] [--priority P]
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "colo/v1/cluster.pb-c.h"
#include "proto/rpc.h"

typedef struct {
  uint64_t host_id, session;
  /* ranks placed here: reported back as RUNNING */
  size_t n_running;
  Colo__V1__RankStatus *running;
  /* ranks colod withdrew: reported once as EXITED with 75, stopped as asked */
  size_t n_exited;
  Colo__V1__RankStatus *exited;
} sim_host_t;

typedef struct {
  const char *server;
  sim_host_t *hosts;
  size_t first, n; /* this thread's hosts */
  double seconds;
  uint64_t start_ns;
  uint64_t *lat_ns;
  size_t n_lat, cap_lat;
  size_t errors, launches, stops;
} thread_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
  uint64_t n = now_ns();
  if (t <= n)
    return;
  struct timespec ts = {(time_t)((t - n) / 1000000000ull), (long)((t - n) % 1000000000ull)};
  nanosleep(&ts, NULL);
}

static int desired_has(const Colo__V1__HeartbeatResponse *resp, const Colo__V1__RankStatus *s) {
  for (size_t i = 0; i < resp->n_desired; i++)
    if (resp->desired[i]->job_id == s->job_id && resp->desired[i]->attempt == s->attempt &&
        resp->desired[i]->rank == s->rank)
      return 1;
  return 0;
}

/* whether colod wants exactly the ranks the host runs */
static int same_ranks(const sim_host_t *h, const Colo__V1__HeartbeatResponse *resp) {
  if (resp->n_desired != h->n_running)
    return 0;
  for (size_t i = 0; i < h->n_running; i++)
    if (!desired_has(resp, &h->running[i]))
      return 0;
  return 1;
}

static void heartbeat(colo_rpc_client_t *c, thread_t *t, sim_host_t *h) {
  Colo__V1__HeartbeatRequest req = COLO__V1__HEARTBEAT_REQUEST__INIT;
  req.has_host_id = req.has_session = 1;
  req.host_id = h->host_id;
  req.session = h->session;
  size_t n_ranks = h->n_running + h->n_exited;
  Colo__V1__RankStatus **ptrs = calloc(n_ranks ? n_ranks : 1, sizeof *ptrs);
  for (size_t i = 0; i < h->n_running; i++)
    ptrs[i] = &h->running[i];
  for (size_t i = 0; i < h->n_exited; i++)
    ptrs[h->n_running + i] = &h->exited[i];
  req.n_ranks = n_ranks;
  req.ranks = ptrs;
  Colo__V1__HeartbeatResponse *resp = NULL;
  colo_rpc_status_t st;
  uint64_t t0 = now_ns();
  int rc = colo_rpc_call(c, "/colo.v1.Cluster/Heartbeat", &req.base,
                         &colo__v1__heartbeat_response__descriptor, 5000,
                         (ProtobufCMessage **)&resp, &st);
  uint64_t dt = now_ns() - t0;
  free(ptrs);
  if (rc < 0) {
    if (t->errors++ == 0)
      fprintf(stderr, "coordinator_scale_load: heartbeat: %s: %s\n", colo_rpc_status_name(st.code),
              st.message);
    return;
  }
  if (t->n_lat == t->cap_lat) {
    t->cap_lat = t->cap_lat ? t->cap_lat * 2 : 4096;
    t->lat_ns = realloc(t->lat_ns, t->cap_lat * sizeof *t->lat_ns);
  }
  t->lat_ns[t->n_lat++] = dt;
  free(h->exited); /* reported */
  h->exited = NULL;
  h->n_exited = 0;
  if (!same_ranks(h, resp)) { /* start what colod wants: report it running; stop the rest */
    h->exited = calloc(h->n_running ? h->n_running : 1, sizeof *h->exited);
    for (size_t i = 0; i < h->n_running; i++)
      if (!desired_has(resp, &h->running[i])) {
        Colo__V1__RankStatus *s = &h->exited[h->n_exited++];
        *s = h->running[i];
        s->phase = COLO__V1__RANK_PHASE__RANK_PHASE_EXITED;
        s->has_exit_code = 1;
        s->exit_code = 75;
        t->stops++;
      }
    Colo__V1__RankStatus *old = h->running;
    size_t n_old = h->n_running;
    h->running = calloc(resp->n_desired ? resp->n_desired : 1, sizeof *h->running);
    for (size_t i = 0; i < resp->n_desired; i++) {
      int known = 0;
      for (size_t k = 0; k < n_old; k++)
        known |= old[k].job_id == resp->desired[i]->job_id &&
                 old[k].attempt == resp->desired[i]->attempt &&
                 old[k].rank == resp->desired[i]->rank;
      t->launches += !known;
      Colo__V1__RankStatus *s = &h->running[i];
      colo__v1__rank_status__init(s);
      s->has_job_id = s->has_attempt = s->has_rank = s->has_phase = 1;
      s->job_id = resp->desired[i]->job_id;
      s->attempt = resp->desired[i]->attempt;
      s->rank = resp->desired[i]->rank;
      s->phase = COLO__V1__RANK_PHASE__RANK_PHASE_RUNNING;
    }
    free(old);
    h->n_running = resp->n_desired;
  }
  colo__v1__heartbeat_response__free_unpacked(resp, NULL);
}

static void *thread_main(void *arg) {
  thread_t *t = arg;
  colo_rpc_client_t *c;
  char err[256];
  if (colo_rpc_client_open(t->server, NULL, &c, err, sizeof err) < 0) {
    fprintf(stderr, "coordinator_scale_load: %s\n", err);
    t->errors++;
    return NULL;
  }
  /* host i of all beats at offset i/total of every second */
  uint64_t period = 1000000000ull;
  uint64_t end = t->start_ns + (uint64_t)(t->seconds * 1e9);
  for (uint64_t round = 0;; round++) {
    for (size_t i = 0; i < t->n; i++) {
      uint64_t at = t->start_ns + round * period + period * i / t->n;
      if (at >= end)
        goto out;
      sleep_until(at);
      heartbeat(c, t, &t->hosts[t->first + i]);
      if (t->hosts[t->first + i].n_exited) /* as a worker beats when a rank exits */
        heartbeat(c, t, &t->hosts[t->first + i]);
    }
  }
out:
  colo_rpc_client_close(c);
  return NULL;
}

/* Submits a job of dp × tp ranks at a priority: 0 with its id, or -1. */
static int submit_job(colo_rpc_client_t *c, const char *name, int dp, int tp, int priority,
                      uint64_t *id) {
  Colo__V1__JobSpec spec = COLO__V1__JOB_SPEC__INIT;
  Colo__V1__DataSpec data = COLO__V1__DATA_SPEC__INIT;
  Colo__V1__ParallelSpec par = COLO__V1__PARALLEL_SPEC__INIT;
  Colo__V1__ModelSpec model = COLO__V1__MODEL_SPEC__INIT;
  spec.name = (char *)name;
  spec.has_priority = priority != 0;
  spec.priority = priority;
  data.train_path = "scale/train.bin";
  data.val_path = "scale/val.bin";
  par.has_dp = par.has_tp = 1;
  par.dp = (uint32_t)dp;
  par.tp = (uint32_t)tp;
  model.has_n_head = 1;
  model.n_head = (uint32_t)(tp > 4 ? tp : 4);
  spec.data = &data;
  spec.parallel = &par;
  spec.model = &model;
  Colo__V1__SubmitJobRequest sreq = COLO__V1__SUBMIT_JOB_REQUEST__INIT;
  sreq.spec = &spec;
  Colo__V1__SubmitJobResponse *sresp = NULL;
  colo_rpc_status_t st;
  if (colo_rpc_call(c, "/colo.v1.Cluster/SubmitJob", &sreq.base,
                    &colo__v1__submit_job_response__descriptor, 10000, (ProtobufCMessage **)&sresp,
                    &st) < 0) {
    fprintf(stderr, "coordinator_scale_load: submit %s: %s\n", name, st.message);
    return -1;
  }
  *id = sresp->job->id;
  colo__v1__submit_job_response__free_unpacked(sresp, NULL);
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *server = NULL;
  int hosts = 1000, devices = 8, threads = 16, dp = 64, tp = 8, fill = 0, priority = 0;
  double seconds = 30;
  static const struct option opts[] = {{"server", required_argument, 0, 's'},
                                       {"hosts", required_argument, 0, 'H'},
                                       {"devices", required_argument, 0, 'D'},
                                       {"threads", required_argument, 0, 'T'},
                                       {"seconds", required_argument, 0, 'S'},
                                       {"dp", required_argument, 0, 'd'},
                                       {"tp", required_argument, 0, 't'},
                                       {"fill", required_argument, 0, 'f'},
                                       {"priority", required_argument, 0, 'p'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (o) {
    case 's':
      server = optarg;
      break;
    case 'H':
      hosts = atoi(optarg);
      break;
    case 'D':
      devices = atoi(optarg);
      break;
    case 'T':
      threads = atoi(optarg);
      break;
    case 'S':
      seconds = atof(optarg);
      break;
    case 'd':
      dp = atoi(optarg);
      break;
    case 't':
      tp = atoi(optarg);
      break;
    case 'f':
      fill = atoi(optarg);
      break;
    case 'p':
      priority = atoi(optarg);
      break;
    case 'h':
      printf("usage: coordinator_scale_load --server ADDR [--hosts N] [--devices D] "
             "[--threads T] [--seconds S] [--dp N] [--tp N] [--fill N] [--priority P]\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!server || hosts < 1 || devices < 1 || threads < 1 || threads > hosts || seconds < 4 ||
      fill < 0 || fill > hosts) {
    fprintf(stderr, "coordinator_scale_load: --server is required; hosts, devices, threads >= 1, "
                    "threads <= hosts, seconds >= 4, 0 <= fill <= hosts\n");
    return 2;
  }
  colo_rpc_client_t *c;
  char err[256];
  if (colo_rpc_client_open(server, NULL, &c, err, sizeof err) < 0) {
    fprintf(stderr, "coordinator_scale_load: %s\n", err);
    return 1;
  }
  sim_host_t *hs = calloc((size_t)hosts, sizeof *hs);
  Colo__V1__Device **devs = calloc((size_t)devices, sizeof *devs);
  Colo__V1__Device *dv = calloc((size_t)devices, sizeof *dv);
  for (int i = 0; i < devices; i++) {
    colo__v1__device__init(&dv[i]);
    dv[i].has_index = dv[i].has_kind = 1;
    dv[i].index = (uint32_t)i;
    dv[i].kind = COLO__V1__DEVICE_KIND__DEVICE_KIND_CPU;
    dv[i].name = "cpu";
    devs[i] = &dv[i];
  }
  uint64_t t_reg = now_ns();
  for (int i = 0; i < hosts; i++) {
    char name[64];
    snprintf(name, sizeof name, "sim-%05d", i);
    Colo__V1__RegisterHostRequest req = COLO__V1__REGISTER_HOST_REQUEST__INIT;
    req.name = name;
    req.address = "127.0.0.1";
    req.n_devices = (size_t)devices;
    req.devices = devs;
    Colo__V1__RegisterHostResponse *resp = NULL;
    colo_rpc_status_t st;
    if (colo_rpc_call(c, "/colo.v1.Cluster/RegisterHost", &req.base,
                      &colo__v1__register_host_response__descriptor, 10000,
                      (ProtobufCMessage **)&resp, &st) < 0) {
      fprintf(stderr, "coordinator_scale_load: register %s: %s\n", name, st.message);
      return 1;
    }
    hs[i].host_id = resp->host_id;
    hs[i].session = resp->session;
    colo__v1__register_host_response__free_unpacked(resp, NULL);
  }
  double reg_s = (double)(now_ns() - t_reg) / 1e9;
  /* the cluster filled with jobs of one host each, at priority -1, for the job to preempt */
  uint64_t t_fill = now_ns();
  for (int i = 0; i < fill; i++) {
    char name[64];
    uint64_t id;
    snprintf(name, sizeof name, "fill-%05d", i);
    if (submit_job(c, name, 1, devices, -1, &id) < 0)
      return 1;
  }
  double fill_s = (double)(now_ns() - t_fill) / 1e9;

  thread_t *ts = calloc((size_t)threads, sizeof *ts);
  pthread_t *tids = calloc((size_t)threads, sizeof *tids);
  uint64_t start = now_ns() + 200000000ull;
  size_t per = (size_t)hosts / (size_t)threads, extra = (size_t)hosts % (size_t)threads, at = 0;
  for (int i = 0; i < threads; i++) {
    ts[i].server = server;
    ts[i].hosts = hs;
    ts[i].first = at;
    ts[i].n = per + ((size_t)i < extra);
    at += ts[i].n;
    ts[i].seconds = seconds;
    ts[i].start_ns = start;
    pthread_create(&tids[i], NULL, thread_main, &ts[i]);
  }
  /* halfway: one job of dp × tp ranks; time from submit until it is RUNNING */
  sleep_until(start + (uint64_t)(seconds * 0.4 * 1e9));
  colo_rpc_status_t st;
  double place_ms = -1;
  uint64_t t0 = now_ns(), id;
  if (submit_job(c, "scale", dp, tp, priority, &id) == 0) {
    while (now_ns() - t0 < 10000000000ull) {
      Colo__V1__GetJobRequest g = COLO__V1__GET_JOB_REQUEST__INIT;
      g.has_id = 1;
      g.id = id;
      Colo__V1__GetJobResponse *gr = NULL;
      if (colo_rpc_call(c, "/colo.v1.Cluster/GetJob", &g.base,
                        &colo__v1__get_job_response__descriptor, 5000, (ProtobufCMessage **)&gr,
                        &st) == 0) {
        int running = gr->job->state == COLO__V1__JOB_STATE__JOB_STATE_RUNNING;
        colo__v1__get_job_response__free_unpacked(gr, NULL);
        if (running) {
          place_ms = (double)(now_ns() - t0) / 1e6;
          break;
        }
      }
      struct timespec ps = {0, 2000000};
      nanosleep(&ps, NULL);
    }
  }
  for (int i = 0; i < threads; i++)
    pthread_join(tids[i], NULL);
  size_t n = 0, errors = 0, launches = 0, stops = 0;
  for (int i = 0; i < threads; i++) {
    n += ts[i].n_lat;
    errors += ts[i].errors;
    launches += ts[i].launches;
    stops += ts[i].stops;
  }
  uint64_t *all = malloc((n ? n : 1) * sizeof *all);
  for (int i = 0, k = 0; i < threads; i++)
    for (size_t j = 0; j < ts[i].n_lat; j++)
      all[k++] = ts[i].lat_ns[j];
  qsort(all, n, sizeof *all, cmp_u64);
#define PCT(p) (n ? (double)all[(size_t)((double)(n - 1) * (p))] / 1e6 : 0.0)
  printf("{\"hosts\":%d,\"devices_per_host\":%d,\"threads\":%d,\"seconds\":%.0f,"
         "\"register_s\":%.3f,\"heartbeats\":%zu,\"heartbeats_per_s\":%.1f,\"errors\":%zu,"
         "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,"
         "\"fill_jobs\":%d,\"fill_s\":%.3f,\"job_ranks\":%d,\"job_priority\":%d,"
         "\"submit_to_running_ms\":%.1f,\"ranks_launched\":%zu,\"ranks_stopped\":%zu}\n",
         hosts, devices, threads, seconds, reg_s, n, (double)n / seconds, errors, PCT(0.5),
         PCT(0.99), PCT(0.999), n ? (double)all[n - 1] / 1e6 : 0.0, fill, fill_s, dp * tp, priority,
         place_ms, launches, stops);
  colo_rpc_client_close(c);
  return errors ? 1 : 0;
}
