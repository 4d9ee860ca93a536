/* bench/comm_cpu: all-reduce bandwidth of the CPU communicator. Forks `ranks` processes on
 * loopback, all-reduces buffers from 1 MiB to 256 MiB, and prints a JSON line per size with the
 * median time, the algorithm bandwidth (bytes / time) and the bus bandwidth (algbw × 2(p−1)/p,
 * the traffic a ring moves per rank, as nccl-tests report it). Also measures this machine's
 * memcpy bandwidth for comparison.
 *   comm_cpu_allreduce RANKS [MAX_MIB]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/store.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void memcpy_bw(void) {
  size_t n = 256u << 20;
  char *a = malloc(n), *b = malloc(n);
  memset(a, 1, n);
  memset(b, 2, n);
  double t[5];
  for (int i = 0; i < 5; i++) {
    double t0 = now();
    memcpy(b, a, n);
    t[i] = now() - t0;
  }
  qsort(t, 5, sizeof *t, cmp_d);
  printf("{\"memcpy_GBps\": %.2f}\n", (double)n / t[2] / 1e9);
  free(a);
  free(b);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: comm_cpu_allreduce RANKS [MAX_MIB]\n");
    return 2;
  }
  int world = atoi(argv[1]), max_mib = argc > 2 ? atoi(argv[2]) : 256;
  if (world < 2 || world > 64) {
    fprintf(stderr, "RANKS must be 2..64\n");
    return 2;
  }
  if (world == 2)
    memcpy_bw();
  char err[256], addr[64];
  int port, fd = colo_tcp_listen("127.0.0.1", 0, &port, err, sizeof err);
  close(fd);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  fflush(stdout);
  for (int r = 0; r < world; r++) {
    if (fork() != 0)
      continue;
    colo_comm_t *c;
    if (colo_comm_tcp_create(addr, r, world, "127.0.0.1", 120000, &c, err, sizeof err) < 0) {
      fprintf(stderr, "rank %d: %s\n", r, err);
      _exit(1);
    }
    for (int mib = 1; mib <= max_mib; mib *= 4) {
      size_t n = ((size_t)mib << 20) / sizeof(float);
      float *buf = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; i++)
        buf[i] = 1.0f;
      int iters = mib <= 16 ? 10 : 3;
      double t[10];
      c->ops->allreduce_sum(c, buf, n); /* warm-up */
      for (int i = 0; i < iters; i++) {
        c->ops->barrier(c);
        double t0 = now();
        if (c->ops->allreduce_sum(c, buf, n) < 0) {
          fprintf(stderr, "rank %d: %s\n", r, colo_comm_error(c));
          _exit(1);
        }
        t[i] = now() - t0;
      }
      qsort(t, (size_t)iters, sizeof *t, cmp_d);
      double med = t[iters / 2], bytes = (double)n * sizeof(float);
      double algbw = bytes / med / 1e9, busbw = algbw * 2.0 * (world - 1) / world;
      if (r == 0)
        printf("{\"ranks\": %d, \"MiB\": %d, \"median_ms\": %.3f, \"algbw_GBps\": %.3f, "
               "\"busbw_GBps\": %.3f}\n",
               world, mib, med * 1e3, algbw, busbw);
      fflush(stdout);
      free(buf);
    }
    c->ops->destroy(c);
    _exit(0);
  }
  int ok = 1, st;
  for (int r = 0; r < world; r++) {
    wait(&st);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok ? 0 : 1;
}
