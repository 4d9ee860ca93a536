/* The NCCL communicator, on real GPUs: every collective against the values it must produce, on
 * one rank per device (2 ranks when the machine has 2 GPUs, else 1), bootstrapped over the TCP
 * communicator, on a stream of the caller's and on one of its own, and groups; then two ranks on
 * one GPU, which must both fail with the reason, their host communicator still usable. Without a
 * CUDA device the test is skipped (exit 77) with the reason; CI compiles it and skips. */
#include <cuda_runtime.h>
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "comm/comm.h"
#include "comm/store.h"
#include "comm_test.h"

static int rank_main(const char *addr, int rank, int world) {
  colo_comm_t *host, *c;
  char err[256];
  if (colo_comm_tcp_create(addr, rank, world, "127.0.0.1", 20000, &host, err, sizeof err) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return 1;
  }
  /* collectives on a stream of the caller's: they must follow what was queued on it before */
  cudaStream_t stream;
  CHECKR(cudaSetDevice(rank) == cudaSuccess);
  CHECKR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  if (colo_comm_nccl_create(host, rank, stream, 20000, &c, err, sizeof err) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return 1;
  }
  {
    float *d1, v = (float)(rank + 1);
    CHECKR(cudaMalloc((void **)&d1, sizeof *d1) == cudaSuccess);
    CHECKR(cudaMemsetAsync(d1, 0, sizeof *d1, stream) == cudaSuccess);
    CHECKR(cudaMemcpyAsync(d1, &v, sizeof v, cudaMemcpyHostToDevice, stream) == cudaSuccess);
    CHECKR(c->ops->allreduce_sum(c, d1, 1) == 0); /* no wait between: the stream orders them */
    CHECKR(cudaMemcpy(&v, d1, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECKR(v == (float)(world * (world + 1) / 2));
    /* a group of each rank alone, and one of everyone in reverse order */
    int alone[1] = {rank}, all[2] = {1, 0};
    colo_comm_t *g1, *g2;
    CHECKR(colo_comm_group(c, alone, 1, &g1, err, sizeof err) == 0);
    CHECKR(g1->size == 1 && g1->rank == 0);
    CHECKR(g1->ops->allreduce_sum(g1, d1, 1) == 0);
    g1->ops->destroy(g1);
    if (world == 2) {
      CHECKR(colo_comm_group(c, all, 2, &g2, err, sizeof err) == 0);
      CHECKR(g2->rank == 1 - rank);
      v = (float)(10 * (rank + 1));
      CHECKR(cudaMemcpy(d1, &v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess);
      CHECKR(g2->ops->broadcast(g2, d1, 1, 0) == 0); /* group rank 0 is world rank 1 */
      CHECKR(cudaMemcpy(&v, d1, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECKR(v == 20.0f);
      g2->ops->destroy(g2);
    }
    cudaFree(d1);
  }
  size_t n = 1000003; /* odd, and large enough for NCCL's ring algorithms */
  float *h = malloc(n * world * sizeof *h), *d;
  CHECKR(cudaMalloc((void **)&d, n * world * sizeof *d) == cudaSuccess);
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(rank + 1) * (float)(i % 97);
  cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice);
  CHECKR(c->ops->allreduce_sum(c, d, n) == 0);
  cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost);
  float tri = (float)(world * (world + 1) / 2);
  for (size_t i = 0; i < n; i++)
    CHECKR(h[i] == tri * (float)(i % 97));
  /* reduce-scatter, all-gather, broadcast */
  for (size_t i = 0; i < n * world; i++)
    h[i] = (float)rank + (float)(i % 1000);
  cudaMemcpy(d, h, n * world * sizeof *h, cudaMemcpyHostToDevice);
  CHECKR(c->ops->reduce_scatter_sum(c, d, n) == 0);
  cudaMemcpy(h, d, n * world * sizeof *h, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; i++) {
    size_t g = (size_t)rank * n + i;
    CHECKR(h[g] == (float)(world * (world - 1) / 2) + (float)world * (float)(g % 1000));
  }
  for (size_t i = 0; i < n; i++)
    h[(size_t)rank * n + i] = (float)(rank * 7) + (float)(i % 13);
  cudaMemcpy(d, h, n * world * sizeof *h, cudaMemcpyHostToDevice);
  CHECKR(c->ops->all_gather(c, d, n) == 0);
  cudaMemcpy(h, d, n * world * sizeof *h, cudaMemcpyDeviceToHost);
  for (int r = 0; r < world; r++)
    for (size_t i = 0; i < n; i++)
      CHECKR(h[(size_t)r * n + i] == (float)(r * 7) + (float)(i % 13));
  h[0] = rank == 0 ? 42.0f : 0.0f;
  cudaMemcpy(d, h, sizeof *h, cudaMemcpyHostToDevice);
  CHECKR(c->ops->broadcast(c, d, 1, 0) == 0);
  cudaMemcpy(h, d, sizeof *h, cudaMemcpyDeviceToHost);
  CHECKR(h[0] == 42.0f);
  if (world == 2) { /* point to point */
    h[0] = (float)(10 + rank);
    cudaMemcpy(d, h, sizeof *h, cudaMemcpyHostToDevice);
    if (rank == 0)
      CHECKR(c->ops->send(c, d, 1, 1) == 0);
    else
      CHECKR(c->ops->recv(c, d + 1, 1, 0) == 0);
    if (rank == 1) {
      cudaMemcpy(h, d + 1, sizeof *h, cudaMemcpyDeviceToHost);
      CHECKR(h[0] == 10.0f);
    }
    /* both ways at once, n floats each (the pipeline's exchange) */
    for (size_t i = 0; i < n; i++)
      h[i] = (float)(rank * 100) + (float)(i % 31);
    cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice);
    CHECKR(c->ops->sendrecv(c, d, n, 1 - rank, d + n, n, 1 - rank) == 0);
    cudaMemcpy(h, d + n, n * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
      CHECKR(h[i] == (float)((1 - rank) * 100) + (float)(i % 31));
  }
  CHECKR(c->ops->barrier(c) == 0);
  cudaFree(d);
  free(h);
  c->ops->destroy(c); /* and the host communicator with it */
  cudaStreamDestroy(stream);
  return 0;
}

/* two ranks on GPU 0: both refused alike, the host communicator left working */
static int shared_main(const char *addr, int rank) {
  colo_comm_t *host, *c = NULL;
  char err[256] = "";
  if (colo_comm_tcp_create(addr, rank, 2, "127.0.0.1", 20000, &host, err, sizeof err) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, err);
    return 1;
  }
  int rc = colo_comm_nccl_create(host, 0, NULL, 20000, &c, err, sizeof err);
  if (rank == 0)
    printf("two ranks on GPU 0: %s\n", err);
  CHECKR(rc == COLO_EBUSY && c == NULL);
  CHECKR(strstr(err, "ranks 0 and 1 share one GPU GPU-") != NULL);
  float v = 1.0f;
  CHECKR(host->ops->allreduce_sum(host, &v, 1) == 0 && v == 2.0f);
  host->ops->destroy(host);
  return 0;
}

static int run(int world, int shared) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  fflush(stdout);
  pid_t pids[2];
  for (int r = 0; r < world; r++)
    if ((pids[r] = fork()) == 0)
      _exit(shared ? shared_main(addr, r) : rank_main(addr, r, world));
  int ok = 0;
  for (int r = 0; r < world; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok == world;
}

/* The number of CUDA devices, or -1 with the error in why: asked in a child of its own, for a
 * CUDA context does not survive fork — a parent that had asked would leave its ranks "CUDA
 * device 0: initialization error", as the first run on an H100 showed. */
static int count_devices(char *why, size_t n) {
  int fd[2];
  if (pipe(fd) < 0)
    return snprintf(why, n, "pipe: %s", strerror(errno)), -1;
  pid_t pid = fork();
  if (pid == 0) {
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    char msg[200];
    int len = snprintf(msg, sizeof msg, "%d %s", e == cudaSuccess ? devices : -1,
                       e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    if (write(fd[1], msg, (size_t)len) != len)
      _exit(1);
    _exit(0);
  }
  close(fd[1]);
  char msg[200] = "";
  ssize_t got = pid > 0 ? read(fd[0], msg, sizeof msg - 1) : -1;
  close(fd[0]);
  if (pid > 0)
    waitpid(pid, NULL, 0);
  int devices = -1, at = 0;
  if (got <= 0 || sscanf(msg, "%d %n", &devices, &at) != 1)
    return snprintf(why, n, "the child that counts devices said nothing"), -1;
  snprintf(why, n, "%s", msg + at);
  return devices;
}

int main(void) {
  char why[200];
  int devices = count_devices(why, sizeof why);
  if (devices < 1) {
    printf("SKIP: no CUDA device here (%s): the NCCL communicator is compiled, not run\n", why);
    return 77;
  }
  int world = devices >= 2 ? 2 : 1;
  int passed = run(world, 0);
  printf("NCCL collectives on %d GPU rank%s: %s\n", world, world > 1 ? "s" : "",
         passed ? "passed" : "FAILED");
  int shared = run(2, 1);
  printf("two ranks on one GPU refused: %s\n", shared ? "passed" : "FAILED");
  printf("%d passed, %d failed\n", passed + shared, 2 - passed - shared);
  return passed && shared ? 0 : 1;
}
