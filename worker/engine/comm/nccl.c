/* The NCCL communicator: collectives on device buffers for GPU ranks.
 *
 * Bootstrap: rank 0 serves the rendezvous store (comm/store.c); the first member of every
 * communicator (the world, and each group) calls ncclGetUniqueId and puts it in the store under
 * a key naming the members, the others get it.
 *
 * Failure: communicators are created nonblocking (config.blocking = 0). After every call the
 * rank polls ncclCommGetAsyncError and the stream against the communicator's deadline; past it,
 * ncclCommAbort ends the communicator and the call returns COLO_ETIMEDOUT, so a dead peer ends
 * a run with an error, never a hang.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "../../../common/error.h"
#include "comm.h"
#include "store.h"

typedef struct {
  colo_comm_t base;
  ncclComm_t comm;
  cudaStream_t stream;
  float *one; /* a device float for barriers */
  int *members;
  int is_world, aborted, timeout_ms, device, world_rank;
  char store_addr[256];
  colo_rdzv_server_t *store; /* the world's rank 0 only */
} nccl_comm_t;

#define NC(c) ((nccl_comm_t *)(c))

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail(nccl_comm_t *c, int rc, const char *what, const char *why) {
  snprintf(c->base.error, sizeof c->base.error, "%s: %s", what, why);
  if (c->comm && !c->aborted) {
    ncclCommAbort(c->comm);
    c->aborted = 1;
    c->comm = NULL;
  }
  return rc;
}

/* Waits for the communicator's pending work and the stream, up to the deadline. */
static int wait_done(nccl_comm_t *c, const char *what, int64_t deadline) {
  for (;;) {
    ncclResult_t a = ncclSuccess;
    ncclCommGetAsyncError(c->comm, &a);
    if (a != ncclSuccess && a != ncclInProgress)
      return fail(c, COLO_EIO, what, ncclGetErrorString(a));
    if (a == ncclSuccess) {
      cudaError_t e = cudaStreamQuery(c->stream);
      if (e == cudaSuccess)
        return 0;
      if (e != cudaErrorNotReady)
        return fail(c, COLO_EIO, what, cudaGetErrorString(e));
    }
    if (mono_ms() >= deadline) {
      char why[96];
      snprintf(why, sizeof why, "timed out after %d ms (a peer died or stopped answering)",
               c->timeout_ms);
      return fail(c, COLO_ETIMEDOUT, what, why);
    }
    usleep(50);
  }
}

/* Every operation: refuse after an abort, enqueue, wait. */
#define RUN(c, what, call)                                                                         \
  do {                                                                                             \
    if ((c)->aborted)                                                                              \
      return fail((c), COLO_ECANCELED, (what),                                                     \
                  "the communicator was aborted by an earlier error");                             \
    int64_t deadline_ = mono_ms() + (c)->timeout_ms;                                               \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                                 \
      return fail((c), COLO_EIO, (what), ncclGetErrorString(r_));                                  \
    return wait_done((c), (what), deadline_);                                                      \
  } while (0)

static int allreduce_sum(colo_comm_t *cm, float *buf, size_t n) {
  nccl_comm_t *c = NC(cm);
  RUN(c, "all-reduce", ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c->comm, c->stream));
}

static int reduce_scatter_sum(colo_comm_t *cm, float *buf, size_t n) {
  nccl_comm_t *c = NC(cm);
  /* in place: this rank's slice of the input is the output */
  RUN(c, "reduce-scatter",
      ncclReduceScatter(buf, buf + (size_t)cm->rank * n, n, ncclFloat, ncclSum, c->comm,
                        c->stream));
}

static int all_gather(colo_comm_t *cm, float *buf, size_t n) {
  nccl_comm_t *c = NC(cm);
  RUN(c, "all-gather",
      ncclAllGather(buf + (size_t)cm->rank * n, buf, n, ncclFloat, c->comm, c->stream));
}

static int broadcast(colo_comm_t *cm, float *buf, size_t n, int root) {
  nccl_comm_t *c = NC(cm);
  RUN(c, "broadcast", ncclBroadcast(buf, buf, n, ncclFloat, root, c->comm, c->stream));
}

static ncclResult_t group_sendrecv(nccl_comm_t *c, const float *sbuf, size_t sn, int speer,
                                   float *rbuf, size_t rn, int rpeer) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess)
    return r;
  if (speer >= 0)
    r = ncclSend(sbuf, sn, ncclFloat, speer, c->comm, c->stream);
  if ((r == ncclSuccess || r == ncclInProgress) && rpeer >= 0)
    r = ncclRecv(rbuf, rn, ncclFloat, rpeer, c->comm, c->stream);
  ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess && r != ncclInProgress ? r : e;
}

static int send_(colo_comm_t *cm, const float *buf, size_t n, int peer) {
  nccl_comm_t *c = NC(cm);
  RUN(c, "send", ncclSend(buf, n, ncclFloat, peer, c->comm, c->stream));
}

static int recv_(colo_comm_t *cm, float *buf, size_t n, int peer) {
  nccl_comm_t *c = NC(cm);
  RUN(c, "recv", ncclRecv(buf, n, ncclFloat, peer, c->comm, c->stream));
}

/* both in one NCCL group, so neither waits for the other */
static int sendrecv(colo_comm_t *cm, const float *sbuf, size_t sn, int speer, float *rbuf,
                    size_t rn, int rpeer) {
  nccl_comm_t *c = NC(cm);
  if (speer < 0 && rpeer < 0)
    return 0;
  RUN(c, "sendrecv", group_sendrecv(c, sbuf, sn, speer, rbuf, rn, rpeer));
}

static int barrier(colo_comm_t *cm) {
  return allreduce_sum(cm, NC(cm)->one, 1);
}

static void abort_(colo_comm_t *cm) {
  nccl_comm_t *c = NC(cm);
  if (c->comm && !c->aborted) {
    ncclCommAbort(c->comm);
    c->aborted = 1;
    c->comm = NULL;
  }
}

static void destroy(colo_comm_t *cm) {
  nccl_comm_t *c = NC(cm);
  if (c->comm && !c->aborted)
    ncclCommDestroy(c->comm);
  if (c->one)
    cudaFree(c->one);
  if (c->stream)
    cudaStreamDestroy(c->stream);
  colo_rdzv_server_stop(c->store);
  free(c->members);
  free(c);
}

static int nccl_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                      size_t errlen);

static const colo_comm_ops_t NCCL = {.name = "nccl",
                                     .allreduce_sum = allreduce_sum,
                                     .reduce_scatter_sum = reduce_scatter_sum,
                                     .all_gather = all_gather,
                                     .broadcast = broadcast,
                                     .send = send_,
                                     .recv = recv_,
                                     .sendrecv = sendrecv,
                                     .barrier = barrier,
                                     .abort = abort_,
                                     .destroy = destroy,
                                     .group = nccl_group};

/* The id of the communicator whose members are `members`: the first makes it, the rest read it
 * from the store; then every member joins, nonblocking, within the deadline. */
static int join(nccl_comm_t *c, const int *members, int n, int me, char *err, size_t errlen) {
  char key[512], val[2 * sizeof(ncclUniqueId) + 1];
  int k = snprintf(key, sizeof key, "nccl/id");
  for (int i = 0; i < n && k < (int)sizeof key - 12; i++)
    k += snprintf(key + k, sizeof key - (size_t)k, "/%d", members[i]);
  ncclUniqueId id;
  if (me == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      snprintf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
      return COLO_EIO;
    }
    for (size_t i = 0; i < sizeof id; i++)
      snprintf(val + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    if (colo_rdzv_set(c->store_addr, key, val, c->timeout_ms, err, errlen) < 0)
      return COLO_EUNAVAIL;
  } else {
    if (colo_rdzv_get(c->store_addr, key, val, sizeof val, c->timeout_ms, err, errlen) < 0)
      return COLO_EUNAVAIL;
    if (strlen(val) != 2 * sizeof id) {
      snprintf(err, errlen, "store key %s holds no NCCL id", key);
      return COLO_EPROTO;
    }
    for (size_t i = 0; i < sizeof id; i++) {
      unsigned x;
      sscanf(val + 2 * i, "%2x", &x);
      id.internal[i] = (char)x;
    }
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  int64_t deadline = mono_ms() + c->timeout_ms;
  ncclResult_t r = ncclCommInitRankConfig(&c->comm, n, id, me, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(err, errlen, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
    return COLO_EIO;
  }
  for (;;) {
    ncclResult_t a;
    ncclCommGetAsyncError(c->comm, &a);
    if (a == ncclSuccess)
      return 0;
    if (a != ncclInProgress || mono_ms() >= deadline) {
      snprintf(err, errlen, "joining the NCCL communicator: %s",
               a == ncclInProgress ? "timed out" : ncclGetErrorString(a));
      ncclCommAbort(c->comm);
      c->comm = NULL;
      return a == ncclInProgress ? COLO_ETIMEDOUT : COLO_EIO;
    }
    usleep(100);
  }
}

static nccl_comm_t *new_comm(int device, int timeout_ms, const char *store_addr) {
  nccl_comm_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->base.ops = &NCCL;
  c->device = device;
  c->timeout_ms = timeout_ms;
  snprintf(c->store_addr, sizeof c->store_addr, "%s", store_addr);
  return c;
}

static int device_setup(nccl_comm_t *c, char *err, size_t errlen) {
  cudaError_t e = cudaSetDevice(c->device);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaMalloc((void **)&c->one, sizeof(float));
  if (e != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", c->device, cudaGetErrorString(e));
    return COLO_EIO;
  }
  return 0;
}

int colo_comm_nccl_create(const char *store_addr, int rank, int world, int device, int timeout_ms,
                          colo_comm_t **out, char *err, size_t errlen) {
  if (world < 1 || rank < 0 || rank >= world) {
    snprintf(err, errlen, "rank %d outside a world of %d", rank, world);
    return COLO_EINVAL;
  }
  nccl_comm_t *c = new_comm(device, timeout_ms, store_addr);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  c->is_world = 1;
  c->base.rank = c->world_rank = rank;
  c->base.size = world;
  c->members = malloc((size_t)world * sizeof *c->members);
  for (int i = 0; i < world; i++)
    c->members[i] = i;
  int rc = device_setup(c, err, errlen);
  if (rc == 0 && rank == 0 && colo_rdzv_served_by_rank0(store_addr))
    rc = colo_rdzv_server_start(store_addr, &c->store, err, errlen);
  if (rc == 0)
    rc = join(c, c->members, world, rank, err, errlen);
  if (rc < 0) {
    destroy(&c->base);
    return rc;
  }
  *out = &c->base;
  return 0;
}

static int nccl_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                      size_t errlen) {
  nccl_comm_t *w = NC(world);
  int me = -1;
  for (int i = 0; i < n; i++)
    if (ranks[i] == world->rank)
      me = i;
  if (me < 0) {
    snprintf(err, errlen, "rank %d is not a member of the group", world->rank);
    return COLO_EINVAL;
  }
  nccl_comm_t *c = new_comm(w->device, w->timeout_ms, w->store_addr);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  c->base.rank = me;
  c->base.size = n;
  c->world_rank = world->rank;
  c->members = malloc((size_t)n * sizeof *c->members);
  memcpy(c->members, ranks, (size_t)n * sizeof *ranks);
  int rc = device_setup(c, err, errlen);
  if (rc == 0)
    rc = join(c, ranks, n, me, err, errlen);
  if (rc < 0) {
    destroy(&c->base);
    return rc;
  }
  *out = &c->base;
  return 0;
}
