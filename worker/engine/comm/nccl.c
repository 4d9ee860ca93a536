/* The NCCL communicator: collectives on device buffers for GPU ranks.
 *
 * Bootstrap: over a host communicator (tcp, or single for one rank). Its ranks first all-gather
 * their GPUs' UUIDs: NCCL needs a GPU per rank, and a shared one fails every rank alike with a
 * message naming them, before NCCL is touched. Then the first member of every communicator (the
 * world, and each group) calls ncclGetUniqueId and broadcasts it through the host world or the
 * matching host group.
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

typedef struct {
  colo_comm_t base;
  ncclComm_t comm;
  cudaStream_t stream;
  int own_stream; /* made here (destroyed with it), not the backend's */
  float *one;     /* a device float for barriers */
  int aborted, timeout_ms, device;
  colo_comm_t *host; /* the world only: the host communicator its groups bootstrap over */
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
  if (c->host) /* peers waiting in a group's set-up fail too */
    c->host->ops->abort(c->host);
}

/* frees c; its host communicator stays the caller's */
static void release(nccl_comm_t *c) {
  if (c->comm && !c->aborted)
    ncclCommDestroy(c->comm);
  if (c->one)
    cudaFree(c->one);
  if (c->stream && c->own_stream)
    cudaStreamDestroy(c->stream);
  free(c);
}

static void destroy(colo_comm_t *cm) {
  colo_comm_t *host = NC(cm)->host;
  release(NC(cm));
  if (host)
    host->ops->destroy(host);
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

/* Joins the NCCL communicator of host's members: host's rank 0 makes the id and broadcasts it,
 * then every member joins, nonblocking, within the deadline. */
static int join(nccl_comm_t *c, colo_comm_t *host, char *err, size_t errlen) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (host->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      snprintf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
      return COLO_EIO;
    }
  }
  int rc = colo_comm_broadcast_bytes(host, id.internal, sizeof id.internal, 0);
  if (rc < 0) {
    snprintf(err, errlen, "sending the NCCL id: %s", colo_comm_error(host));
    return rc;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  int64_t deadline = mono_ms() + c->timeout_ms;
  ncclResult_t r = ncclCommInitRankConfig(&c->comm, host->size, id, host->rank, &config);
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

/* a communicator of host's shape on `device`, not joined yet */
static nccl_comm_t *new_comm(colo_comm_t *host, int device, void *stream, int timeout_ms, char *err,
                             size_t errlen) {
  nccl_comm_t *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->base.ops = &NCCL;
  c->base.rank = host->rank;
  c->base.size = host->size;
  c->device = device;
  c->timeout_ms = timeout_ms;
  c->stream = stream;
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess && !c->stream) {
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    c->own_stream = e == cudaSuccess;
  }
  if (e == cudaSuccess)
    e = cudaMalloc((void **)&c->one, sizeof(float));
  if (e != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
    release(c);
    return NULL;
  }
  return c;
}

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi names a GPU */
static void uuid_text(const unsigned char u[16], char *out, size_t len) {
  int k = snprintf(out, len, "GPU-");
  for (int i = 0; i < 16 && k > 0 && (size_t)k < len; i++)
    k += snprintf(out + k, len - (size_t)k, "%s%02x",
                  i == 4 || i == 6 || i == 8 || i == 10 ? "-" : "", u[i]);
}

int colo_comm_nccl_create(colo_comm_t *host, int device, void *stream, int timeout_ms,
                          colo_comm_t **out, char *err, size_t errlen) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
    cudaGetLastError();
    /* the others wait in the all-gather below: end it for them */
    host->ops->abort(host);
    return COLO_EIO;
  }
  int a, b;
  int rc = colo_comm_find_shared(host, prop.uuid.bytes, sizeof prop.uuid.bytes, &a, &b);
  if (rc < 0) {
    snprintf(err, errlen, "comparing the ranks' GPUs: %s", colo_comm_error(host));
    return rc;
  }
  if (rc == 1) {
    char id[64] = "";
    if (host->rank == a || host->rank == b)
      uuid_text((const unsigned char *)prop.uuid.bytes, id, sizeof id);
    snprintf(err, errlen, "ranks %d and %d share one GPU%s%s: NCCL needs a GPU per rank", a, b,
             id[0] ? " " : "", id);
    return COLO_EBUSY;
  }
  nccl_comm_t *c = new_comm(host, device, stream, timeout_ms, err, errlen);
  if (!c) {
    host->ops->abort(host);
    return COLO_EIO;
  }
  if ((rc = join(c, host, err, errlen)) < 0) {
    host->ops->abort(host);
    release(c);
    return rc;
  }
  c->host = host;
  *out = &c->base;
  return 0;
}

static int nccl_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                      size_t errlen) {
  nccl_comm_t *w = NC(world);
  colo_comm_t *hg = NULL;
  if (!w->host) {
    snprintf(err, errlen, "NCCL groups are made from the world communicator, not from a group");
    return COLO_EINVAL;
  }
  int rc = colo_comm_group(w->host, ranks, n, &hg, err, errlen);
  if (rc < 0)
    return rc;
  nccl_comm_t *c =
      new_comm(hg, w->device, w->own_stream ? NULL : w->stream, w->timeout_ms, err, errlen);
  if (!c)
    rc = COLO_EIO;
  else if ((rc = join(c, hg, err, errlen)) < 0)
    release(c);
  else
    *out = &c->base;
  if (rc < 0) /* members waiting for the id fail at once */
    hg->ops->abort(hg);
  hg->ops->destroy(hg); /* the id has travelled: the NCCL group needs no more of it */
  return rc;
}
