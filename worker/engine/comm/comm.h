/* Communicators: how ranks train together. One interface, several implementations:
 *   - single: a world of one (every collective is the identity);
 *   - tcp: CPU ranks over TCP sockets, on one host or many (works across network namespaces);
 *   - nccl: GPU ranks' device buffers, bootstrapped over a host communicator;
 *   - staged: a wrapper for the buffers that are not in the memory its inner one moves.
 * A group communicator (a data-, tensor- or pipeline-parallel group) is made from the world one
 * with colo_comm_group.
 *
 * Every call has a deadline (the communicator's timeout). A peer that dies or stops answering
 * ends the call with an error naming it (COLO_EIO or COLO_ETIMEDOUT, message in
 * colo_comm_error), never a hang; after an error the communicator is aborted and every later call
 * fails at once. Calls are blocking and must be made in the same order by every member.
 */
#ifndef COLO_COMM_H
#define COLO_COMM_H

#include <stddef.h>

typedef struct colo_comm_s colo_comm_t;

typedef struct {
  const char *name;
  /* in-place sum over the group */
  int (*allreduce_sum)(colo_comm_t *c, float *buf, size_t n);
  /* buf holds size × n floats; afterwards this rank's n-float slice (at rank × n) holds the sum
   * of everyone's slice; the rest of buf is scratch */
  int (*reduce_scatter_sum)(colo_comm_t *c, float *buf, size_t n);
  /* buf holds size × n floats; this rank's slice (at rank × n) is sent to all; afterwards
   * every slice holds its owner's data */
  int (*all_gather)(colo_comm_t *c, float *buf, size_t n);
  int (*broadcast)(colo_comm_t *c, float *buf, size_t n, int root);
  int (*send)(colo_comm_t *c, const float *buf, size_t n, int peer);
  int (*recv)(colo_comm_t *c, float *buf, size_t n, int peer);
  /* sends sn floats to speer and receives rn floats from rpeer, both at once (a peer of -1
   * leaves that direction out): two ranks that exchange tensors larger than the transport's
   * buffers must use this, where a send on each side would wait for the other forever */
  int (*sendrecv)(colo_comm_t *c, const float *sbuf, size_t sn, int speer, float *rbuf, size_t rn,
                  int rpeer);
  int (*barrier)(colo_comm_t *c);
  /* closes every connection: peers' calls fail at once; later calls on c fail */
  void (*abort)(colo_comm_t *c);
  void (*destroy)(colo_comm_t *c);
  /* a sub-group; called by its members only (see colo_comm_group) */
  int (*group)(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
               size_t errlen);
} colo_comm_ops_t;

struct colo_comm_s {
  const colo_comm_ops_t *ops;
  int rank, size;
  int shm_peers; /* members reached through shared memory (same host) */
  char error[256];
};

static inline int colo_comm_rank(const colo_comm_t *c) {
  return c->rank;
}
static inline int colo_comm_size(const colo_comm_t *c) {
  return c->size;
}
static inline const char *colo_comm_error(const colo_comm_t *c) {
  return c->error;
}

/* A communicator for a world of one. */
colo_comm_t *colo_comm_single(void);

/* A world communicator over TCP. Rank 0 serves the rendezvous store at store_addr
 * ("host:port"); every rank listens on bind_host (port chosen by the kernel), publishes its
 * address in the store, and connects to every other rank. timeout_ms bounds every later call
 * and the set-up itself. */
int colo_comm_tcp_create(const char *store_addr, int rank, int world, const char *bind_host,
                         int timeout_ms, colo_comm_t **out, char *err, size_t errlen);

/* A group made of the world ranks ranks[0..n) (this rank must be one of them), created by its
 * members only; it must not outlive the world. Group rank i is world rank ranks[i]. */
int colo_comm_group(colo_comm_t *world, const int *ranks, int n, colo_comm_t **out, char *err,
                    size_t errlen);

/* Which memory a staged communicator's inner one moves (staged.c). */
typedef enum {
  COLO_STAGE_HOST,  /* host memory (tcp): the backend's buffers go through a host scratch */
  COLO_STAGE_DEVICE /* the backend's memory (NCCL): host buffers go through a device scratch */
} colo_stage_t;

/* A communicator for the ranks of a device backend `be` over `inner`, which moves the memory
 * `where` names: a buffer elsewhere is copied there around each call, the others pass through.
 * It takes over inner (destroys it) and stages the groups made from it. NULL: out of memory. */
struct colo_backend_s;
colo_comm_t *colo_comm_staged(colo_comm_t *inner, const struct colo_backend_s *be,
                              colo_stage_t where);

/* Set-up exchanges of bytes, host memory (bytes.c): a broadcast from root; and an all-gather of
 * each rank's n-byte id that returns 1 with the first two ranks holding the same one in *a < *b,
 * 0 when all differ, or an error. Every member calls them. */
int colo_comm_broadcast_bytes(colo_comm_t *c, void *bytes, size_t n, int root);
int colo_comm_find_shared(colo_comm_t *c, const void *id, size_t n, int *a, int *b);

/* All-to-all: sbuf holds size blocks of n floats, block d for member d; afterwards rbuf's block s
 * holds what member s sent this rank. This rank's own block is not copied (rbuf's stays as it
 * was: the caller reads it from sbuf). Pairwise sendrecv rounds (alltoall.c), so any
 * communicator does it; every member calls it. */
int colo_comm_all_to_all(colo_comm_t *c, const float *sbuf, float *rbuf, size_t n);

/* NCCL, for GPUs (built when CUDA and NCCL are found: COLO_HAVE_NCCL), over the host world
 * communicator `host` (tcp, or single for one rank): the NCCL ids of the world and of every
 * group travel through it and its groups. Every rank calls it. Buffers are device pointers on
 * `device` (host ones: wrap it in colo_comm_staged with COLO_STAGE_DEVICE). Collectives are
 * queued on `stream` (a cudaStream_t: the backend's, so they follow its kernels; NULL: one of
 * its own) and waited for. Communicators are nonblocking: every call is polled against the
 * deadline and aborted (ncclCommAbort) when it passes, so a dead peer ends a call with an error,
 * never a hang. On success it takes over host; on failure host is still the caller's to
 * destroy. When two ranks share one GPU (NCCL refuses that) it fails on every rank alike with
 * COLO_EBUSY, err naming them, and host intact: callers may go on with it together. Any other
 * failure aborts host, so that no peer waits for this rank. */
int colo_comm_nccl_create(colo_comm_t *host, int device, void *stream, int timeout_ms,
                          colo_comm_t **out, char *err, size_t errlen);

#endif
