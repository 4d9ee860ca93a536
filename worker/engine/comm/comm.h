/* The communicator seam: the operations ranks use to train together. This build has the
 * single-rank implementation (every collective is the identity); the NCCL and CPU (shared
 * memory, TCP) implementations come with the 3-D parallel issue and plug in here. */
#ifndef COLO_COMM_H
#define COLO_COMM_H

#include <stddef.h>

typedef struct colo_comm_s colo_comm_t;

typedef struct {
  const char *name;
  int (*rank)(const colo_comm_t *c);
  int (*size)(const colo_comm_t *c);
  /* in-place sum over all ranks; 0 or a negative colo code (a dead peer: an error, not a hang) */
  int (*allreduce_sum)(colo_comm_t *c, float *buf, size_t n);
  int (*barrier)(colo_comm_t *c);
  void (*destroy)(colo_comm_t *c);
} colo_comm_ops_t;

struct colo_comm_s {
  const colo_comm_ops_t *ops;
};

/* A communicator for a world of one. */
colo_comm_t *colo_comm_single(void);

#endif
