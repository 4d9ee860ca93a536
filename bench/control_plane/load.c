/* control_plane_load: concurrent gRPC clients against colod. Each thread has its own channel
 * and issues blocking calls back to back for a fixed time; every latency is recorded and the
 * percentiles come from all of them.
 *
 *   control_plane_load --server ADDR --job FILE [--preload N] [--threads T] [--seconds S]
 *                      [--method get|submit|both] [--ids N]
 *
 * GetJob asks for ids 1..N (--ids; default the preloaded jobs', which a fresh colod numbers
 * 1..preload). --preload 0 with --ids reads the jobs a colod holds already.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "colo/v1/cluster.pb-c.h"
#include "common/pbcodec.h"
#include "proto/rpc.h"

typedef struct {
  const char *server;
  Colo__V1__JobSpec *spec;
  int method; /* 0 get, 1 submit */
  double seconds;
  uint64_t n_jobs;
  uint32_t seed;
  uint64_t *lat_ns;
  size_t n, cap;
  size_t errors;
} worker_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int one_call(colo_rpc_client_t *c, worker_t *w) {
  colo_rpc_status_t st;
  ProtobufCMessage *resp = NULL;
  int rc;
  if (w->method == 0) {
    Colo__V1__GetJobRequest req = COLO__V1__GET_JOB_REQUEST__INIT;
    req.has_id = 1;
    w->seed = w->seed * 1103515245u + 12345u;
    req.id = 1 + (w->seed >> 8) % w->n_jobs;
    rc = colo_rpc_call(c, "/colo.v1.Cluster/GetJob", &req.base,
                       &colo__v1__get_job_response__descriptor, 5000, &resp, &st);
  } else {
    Colo__V1__SubmitJobRequest req = COLO__V1__SUBMIT_JOB_REQUEST__INIT;
    req.spec = w->spec;
    rc = colo_rpc_call(c, "/colo.v1.Cluster/SubmitJob", &req.base,
                       &colo__v1__submit_job_response__descriptor, 5000, &resp, &st);
  }
  if (rc == 0)
    protobuf_c_message_free_unpacked(resp, NULL);
  else if (w->errors++ == 0)
    fprintf(stderr, "control_plane_load: %s: %s\n", colo_rpc_status_name(st.code), st.message);
  return rc;
}

static void worker_main(void *arg) {
  worker_t *w = arg;
  colo_rpc_client_t *c;
  char err[256];
  if (colo_rpc_client_open(w->server, NULL, &c, err, sizeof err) < 0) {
    fprintf(stderr, "control_plane_load: %s\n", err);
    w->errors++;
    return;
  }
  one_call(c, w); /* connect outside the measured window */
  uint64_t end = now_ns() + (uint64_t)(w->seconds * 1e9);
  for (;;) {
    uint64_t t0 = now_ns();
    if (t0 >= end)
      break;
    if (one_call(c, w) == 0) {
      if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 65536;
        w->lat_ns = realloc(w->lat_ns, w->cap * sizeof *w->lat_ns);
      }
      w->lat_ns[w->n++] = now_ns() - t0;
    }
  }
  colo_rpc_client_close(c);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void run(const char *server, Colo__V1__JobSpec *spec, int method, int threads,
                double seconds, uint64_t n_jobs) {
  worker_t *w = calloc((size_t)threads, sizeof *w);
  uv_thread_t *th = calloc((size_t)threads, sizeof *th);
  uint64_t t0 = now_ns();
  for (int i = 0; i < threads; i++) {
    w[i] = (worker_t){server, spec, method, seconds, n_jobs, 7919u * (uint32_t)(i + 1), 0, 0, 0, 0};
    uv_thread_create(&th[i], worker_main, &w[i]);
  }
  size_t total = 0, errors = 0;
  for (int i = 0; i < threads; i++) {
    uv_thread_join(&th[i]);
    total += w[i].n;
    errors += w[i].errors;
  }
  double elapsed = (double)(now_ns() - t0) / 1e9;
  uint64_t *all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < threads; i++) {
    memcpy(all + k, w[i].lat_ns, w[i].n * sizeof *all);
    k += w[i].n;
    free(w[i].lat_ns);
  }
  qsort(all, total, sizeof *all, cmp_u64);
#define PCT(p) (total ? (double)all[(size_t)((double)(total - 1) * (p))] / 1e6 : 0.0)
  printf("{\"method\": \"%s\", \"threads\": %d, \"seconds\": %.2f, \"requests\": %zu, "
         "\"errors\": %zu, \"rps\": %.0f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, "
         "\"max_ms\": %.3f}\n",
         method == 0 ? "GetJob" : "SubmitJob", threads, elapsed, total, errors,
         (double)total / elapsed, PCT(0.50), PCT(0.99), PCT(0.999), PCT(1.0));
  fflush(stdout);
  free(all);
  free(w);
  free(th);
}

int main(int argc, char **argv) {
  const char *server = "127.0.0.1:7070", *job = NULL, *which = "both";
  int threads = 8, preload = 1000, ids = 0;
  double seconds = 5;
  static const struct option opts[] = {{"server", required_argument, 0, 's'},
                                       {"job", required_argument, 0, 'j'},
                                       {"preload", required_argument, 0, 'p'},
                                       {"threads", required_argument, 0, 't'},
                                       {"seconds", required_argument, 0, 'd'},
                                       {"method", required_argument, 0, 'm'},
                                       {"ids", required_argument, 0, 'i'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "s:j:p:t:d:m:i:h", opts, NULL)) != -1) {
    switch (o) {
    case 's':
      server = optarg;
      break;
    case 'j':
      job = optarg;
      break;
    case 'p':
      preload = atoi(optarg);
      break;
    case 't':
      threads = atoi(optarg);
      break;
    case 'd':
      seconds = atof(optarg);
      break;
    case 'm':
      which = optarg;
      break;
    case 'i':
      ids = atoi(optarg);
      break;
    case 'h':
      printf("usage: control_plane_load --server ADDR --job FILE [--preload N] [--threads T] "
             "[--seconds S] [--method get|submit|both] [--ids N]\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!ids)
    ids = preload;
  if (!job || threads < 1 || threads > 256 || seconds <= 0 || preload < 0 || ids < 1) {
    fprintf(stderr, "control_plane_load: --job FILE is required; threads 1..256; seconds > 0; "
                    "--preload or --ids at least 1\n");
    return 2;
  }
  char err[512];
  Colo__V1__JobSpec *spec;
  if (colo_pb_from_yaml_file(job, &colo__v1__job_spec__descriptor, (ProtobufCMessage **)&spec, err,
                             sizeof err) < 0) {
    fprintf(stderr, "control_plane_load: %s\n", err);
    return 2;
  }
  /* preload: the coordinator holds `preload` jobs before anything is measured */
  colo_rpc_client_t *c;
  if (colo_rpc_client_open(server, NULL, &c, err, sizeof err) < 0) {
    fprintf(stderr, "control_plane_load: %s\n", err);
    return 1;
  }
  worker_t pw = {server, spec, 1, 0, 1, 1, 0, 0, 0, 0};
  for (int i = 0; i < preload; i++)
    if (one_call(c, &pw) < 0) {
      colo_rpc_client_close(c);
      return 1;
    }
  colo_rpc_client_close(c);
  fprintf(stderr, "control_plane_load: preloaded %d jobs\n", preload);
  if (!strcmp(which, "get") || !strcmp(which, "both"))
    run(server, spec, 0, threads, seconds, (uint64_t)ids);
  if (!strcmp(which, "submit") || !strcmp(which, "both"))
    run(server, spec, 1, threads, seconds, (uint64_t)ids);
  colo__v1__job_spec__free_unpacked(spec, NULL);
  return 0;
}
