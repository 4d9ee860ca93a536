/* coordinator_scale_load: simulated workers against colod. Registers `hosts` hosts of `devices`
 * CPU devices each, then heartbeats every host once a second (spread evenly over the second,
 * from `threads` threads with a channel each) for `seconds`, reporting the ranks colod places
 * on it as RUNNING, as a real worker would. Halfway through it submits one job of pp × dp × tp
 * ranks and measures the time from SubmitJob to the job being RUNNING with every rank placed.
 * With --fill N, N jobs of one host each (priority -1) take N hosts first, and the job, given a
 * higher --priority, preempts some of them: ranks colod withdraws are reported as having exited
 * with 75, as colo-train's do when stopped as asked.
 * With --push, every host also keeps a WatchHost stream open, as colo-workerd does, and beats at
 * once when colod nudges it (all streams on one completion queue, read by one thread).
 * Prints one JSON line: heartbeats, latency percentiles, errors, the time from the job's submit
 * to its RUNNING, and to the last of its ranks started on the simulated hosts.
 *
 *   coordinator_scale_load --server ADDR [--hosts N] [--devices D] [--threads T]
 *                          [--seconds S] [--dp N] [--tp N] [--fill N] [--priority P] [--push]
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "colo/v1/cluster.pb-c.h"
#include "proto/rpc.h"
#include "proto/rpc_internal.h"

typedef struct {
  uint64_t host_id, session;
  /* ranks placed here: reported back as RUNNING */
  size_t n_running;
  Colo__V1__RankStatus *running;
  /* ranks colod withdrew: reported once as EXITED with 75, stopped as asked */
  size_t n_exited;
  Colo__V1__RankStatus *exited;
  /* --push: its WatchHost stream, and whether a nudge came since its last beat */
  grpc_call *call;
  grpc_byte_buffer *recv;
  grpc_metadata_array md, trail;
  grpc_status_code code;
  grpc_slice details;
  atomic_int nudged;
} sim_host_t;

/* the measured job's id (the fill jobs come first), and how many of its ranks were started */
static uint64_t scale_job;
static atomic_size_t scale_started;

typedef struct {
  const char *server;
  sim_host_t *hosts;
  size_t first, stride, n; /* this thread's hosts: first, first + stride, ... (n of them) */
  double seconds;
  uint64_t start_ns;
  uint64_t *lat_ns;
  size_t n_lat, cap_lat;
  size_t errors, launches, stops, nudged_beats;
  int push;
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
      if (!known && resp->desired[i]->job_id == scale_job)
        atomic_fetch_add(&scale_started, 1);
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
      if (!t->push) {
        sleep_until(at);
      } else { /* meanwhile, the nudged hosts beat at once (checked every 0.5 ms) */
        for (;;) {
          for (size_t k = 0; k < t->n; k++) {
            sim_host_t *h = &t->hosts[t->first + k * t->stride];
            if (atomic_exchange(&h->nudged, 0)) {
              t->nudged_beats++;
              heartbeat(c, t, h);
              if (h->n_exited)
                heartbeat(c, t, h);
            }
          }
          uint64_t now = now_ns();
          if (now >= at)
            break;
          sleep_until(now + (at - now < 500000 ? at - now : 500000));
        }
      }
      heartbeat(c, t, &t->hosts[t->first + i * t->stride]);
      if (t->hosts[t->first + i * t->stride].n_exited) /* as a worker beats when a rank exits */
        heartbeat(c, t, &t->hosts[t->first + i * t->stride]);
    }
  }
out:
  colo_rpc_client_close(c);
  return NULL;
}

/* ---- --push: the hosts' WatchHost streams ---- */

enum { TAG_START, TAG_RECV, TAG_STATUS };
#define TAG(i, kind) ((void *)(uintptr_t)(((uintptr_t)(i) + 1) << 2 | (kind)))

typedef struct {
  grpc_completion_queue *cq;
  grpc_channel *channel;
  sim_host_t *hosts;
  size_t n;
  size_t open, nudges, failed; /* streams whose first nudge came; nudges; streams that ended */
} push_t;

static void push_recv(push_t *p, size_t i) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &p->hosts[i].recv;
  grpc_call_start_batch(p->hosts[i].call, &op, 1, TAG(i, TAG_RECV), NULL);
}

/* Opens every host's stream; each completion is handled by push_main. */
static void push_open(push_t *p, const char *server, sim_host_t *hosts, size_t n) {
  p->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  p->channel = grpc_channel_create(server, creds, NULL);
  grpc_channel_credentials_release(creds);
  p->hosts = hosts;
  p->n = n;
  for (size_t i = 0; i < n; i++) {
    sim_host_t *h = &hosts[i];
    Colo__V1__WatchHostRequest req = COLO__V1__WATCH_HOST_REQUEST__INIT;
    req.has_host_id = req.has_session = 1;
    req.host_id = h->host_id;
    req.session = h->session;
    grpc_byte_buffer *send = colo_rpc_pack(&req.base);
    h->call = grpc_channel_create_call(p->channel, NULL, GRPC_PROPAGATE_DEFAULTS, p->cq,
                                       grpc_slice_from_static_string("/colo.v1.Cluster/WatchHost"),
                                       NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_metadata_array_init(&h->md);
    grpc_metadata_array_init(&h->trail);
    h->details = grpc_empty_slice();
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &h->md;
    grpc_call_start_batch(h->call, ops, 4, TAG(i, TAG_START), NULL);
    grpc_byte_buffer_destroy(send); /* the batch holds its own reference */
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[0].data.recv_status_on_client.trailing_metadata = &h->trail;
    ops[0].data.recv_status_on_client.status = &h->code;
    ops[0].data.recv_status_on_client.status_details = &h->details;
    grpc_call_start_batch(h->call, ops, 1, TAG(i, TAG_STATUS), NULL);
    push_recv(p, i);
  }
}

/* Reads the streams until every one has ended (push_close cancels them). */
static void *push_main(void *arg) {
  push_t *p = arg;
  size_t ended = 0;
  while (ended < p->n) {
    grpc_event ev = grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type != GRPC_OP_COMPLETE)
      break;
    uintptr_t tag = (uintptr_t)ev.tag;
    size_t i = (tag >> 2) - 1;
    sim_host_t *h = &p->hosts[i];
    if ((tag & 3) == TAG_STATUS) {
      ended++;
      if (h->code != GRPC_STATUS_CANCELLED && p->failed++ == 0) {
        char *why = grpc_slice_to_c_string(h->details);
        fprintf(stderr, "coordinator_scale_load: WatchHost of host %llu ended: %d %s\n",
                (unsigned long long)h->host_id, (int)h->code, why);
        gpr_free(why);
      }
    } else if ((tag & 3) == TAG_RECV && ev.success && h->recv) {
      grpc_byte_buffer_destroy(h->recv);
      h->recv = NULL;
      p->nudges++;
      atomic_store(&h->nudged, 1);
      push_recv(p, i);
    }
  }
  return NULL;
}

static void push_close(push_t *p, pthread_t thread) {
  for (size_t i = 0; i < p->n; i++)
    grpc_call_cancel(p->hosts[i].call, NULL);
  pthread_join(thread, NULL);
  for (size_t i = 0; i < p->n; i++) {
    sim_host_t *h = &p->hosts[i];
    grpc_call_unref(h->call);
    grpc_metadata_array_destroy(&h->md);
    grpc_metadata_array_destroy(&h->trail);
    grpc_slice_unref(h->details);
    if (h->recv)
      grpc_byte_buffer_destroy(h->recv);
  }
  grpc_completion_queue_shutdown(p->cq);
  while (grpc_completion_queue_next(p->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN)
    ;
  grpc_completion_queue_destroy(p->cq);
  grpc_channel_destroy(p->channel);
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
  int hosts = 1000, devices = 8, threads = 16, dp = 64, tp = 8, fill = 0, priority = 0, push = 0;
  double seconds = 30;
  static const struct option opts[] = {
      {"server", required_argument, 0, 's'},   {"hosts", required_argument, 0, 'H'},
      {"devices", required_argument, 0, 'D'},  {"threads", required_argument, 0, 'T'},
      {"seconds", required_argument, 0, 'S'},  {"dp", required_argument, 0, 'd'},
      {"tp", required_argument, 0, 't'},       {"fill", required_argument, 0, 'f'},
      {"priority", required_argument, 0, 'p'}, {"push", no_argument, 0, 'P'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
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
    case 'P':
      push = 1;
      break;
    case 'h':
      printf("usage: coordinator_scale_load --server ADDR [--hosts N] [--devices D] "
             "[--threads T] [--seconds S] [--dp N] [--tp N] [--fill N] [--priority P] [--push]\n");
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
  scale_job = (uint64_t)fill + 1; /* ids start at 1 in a new state */
  push_t pu;
  pthread_t push_thread;
  memset(&pu, 0, sizeof pu);
  if (push) {
    push_open(&pu, server, hs, (size_t)hosts);
    pthread_create(&push_thread, NULL, push_main, &pu);
  }

  thread_t *ts = calloc((size_t)threads, sizeof *ts);
  pthread_t *tids = calloc((size_t)threads, sizeof *tids);
  uint64_t start = now_ns() + 200000000ull;
  /* interleaved, as hosts next to each other (by id) often change together: one job's, or the
   * jobs a preemption stops; a real cluster has a worker per host beating on its own */
  size_t per = (size_t)hosts / (size_t)threads, extra = (size_t)hosts % (size_t)threads;
  for (int i = 0; i < threads; i++) {
    ts[i].server = server;
    ts[i].hosts = hs;
    ts[i].first = (size_t)i;
    ts[i].stride = (size_t)threads;
    ts[i].n = per + ((size_t)i < extra);
    ts[i].seconds = seconds;
    ts[i].start_ns = start;
    ts[i].push = push;
    pthread_create(&tids[i], NULL, thread_main, &ts[i]);
  }
  /* halfway: one job of dp × tp ranks; time from submit until it is RUNNING */
  sleep_until(start + (uint64_t)(seconds * 0.4 * 1e9));
  colo_rpc_status_t st;
  double place_ms = -1, started_ms = -1;
  uint64_t t0 = now_ns(), id;
  if (submit_job(c, "scale", dp, tp, priority, &id) == 0) {
    if (id != scale_job)
      fprintf(stderr, "coordinator_scale_load: the job is %llu, not %llu: its starts not counted\n",
              (unsigned long long)id, (unsigned long long)scale_job);
    while (now_ns() - t0 < 10000000000ull && place_ms < 0) {
      Colo__V1__GetJobRequest g = COLO__V1__GET_JOB_REQUEST__INIT;
      g.has_id = 1;
      g.id = id;
      Colo__V1__GetJobResponse *gr = NULL;
      if (colo_rpc_call(c, "/colo.v1.Cluster/GetJob", &g.base,
                        &colo__v1__get_job_response__descriptor, 5000, (ProtobufCMessage **)&gr,
                        &st) == 0) {
        int running = gr->job->state == COLO__V1__JOB_STATE__JOB_STATE_RUNNING;
        colo__v1__get_job_response__free_unpacked(gr, NULL);
        if (running)
          place_ms = (double)(now_ns() - t0) / 1e6;
      }
      struct timespec ps = {0, 2000000};
      nanosleep(&ps, NULL);
    }
    /* every rank started by its simulated host */
    while (now_ns() - t0 < 10000000000ull) {
      if (atomic_load(&scale_started) >= (size_t)(dp * tp)) {
        started_ms = (double)(now_ns() - t0) / 1e6;
        break;
      }
      struct timespec ps = {0, 1000000};
      nanosleep(&ps, NULL);
    }
  }
  for (int i = 0; i < threads; i++)
    pthread_join(tids[i], NULL);
  if (push)
    push_close(&pu, push_thread);
  size_t n = 0, errors = 0, launches = 0, stops = 0, nudged_beats = 0;
  for (int i = 0; i < threads; i++) {
    nudged_beats += ts[i].nudged_beats;
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
         "\"submit_to_running_ms\":%.1f,\"submit_to_started_ms\":%.1f,\"ranks_launched\":%zu,"
         "\"ranks_stopped\":%zu,\"push\":%s,\"nudges\":%zu,\"nudged_beats\":%zu,"
         "\"streams_failed\":%zu}\n",
         hosts, devices, threads, seconds, reg_s, n, (double)n / seconds, errors, PCT(0.5),
         PCT(0.99), PCT(0.999), n ? (double)all[n - 1] / 1e6 : 0.0, fill, fill_s, dp * tp, priority,
         place_ms, started_ms, launches, stops, push ? "true" : "false", pu.nudges, nudged_beats,
         pu.failed);
  colo_rpc_client_close(c);
  return errors || pu.failed ? 1 : 0;
}
