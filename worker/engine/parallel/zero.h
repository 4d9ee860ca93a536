/* Data parallelism with ZeRO over chunks (colo_chunks_t):
 *   stage 0: gradients are all-reduced chunk by chunk; every rank updates everything;
 *   stage 1: the AdamW moments are sharded: each rank keeps and updates only its piece of every
 *            chunk (1/dp of the optimizer state), then the pieces are all-gathered.
 * Stages 2 and 3 (gradients and then parameters sharded) come next; they are refused for now.
 * Gradients are averaged over the group (callers scale the loss by 1/dp). */
#ifndef COLO_ZERO_H
#define COLO_ZERO_H

#include <stddef.h>

#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../model/gpt.h"
#include "../optim/adamw.h"
#include "chunks.h"

typedef struct {
  colo_comm_t *comm; /* the data-parallel group */
  int stage, rank, dp;
  colo_chunks_t chunks;
  size_t *shard_off; /* where chunk k's piece starts in the sharded moments */
  size_t shard_n;    /* Σ pieces */
  float *staging;    /* one chunk's capacity */
} colo_zero_t;

int colo_zero_init(colo_zero_t *z, colo_comm_t *comm, int stage, colo_gpt_t *model, char *err,
                   size_t errlen);
void colo_zero_free(colo_zero_t *z);

/* How many floats each of the optimizer's m and v holds on this rank. */
size_t colo_zero_optim_numel(const colo_zero_t *z, const colo_gpt_t *model);

/* Sums the gradients over the group, chunk by chunk. */
int colo_zero_reduce_grads(colo_zero_t *z, colo_gpt_t *model);

/* One AdamW update of this rank's share, then (stage 1) the all-gather of the parameters. */
int colo_zero_step(colo_zero_t *z, colo_adamw_t *opt, const colo_backend_t *be, colo_gpt_t *model,
                   float lr, float grad_scale);

/* Full-size moments from the shards (every rank takes part; all end with the full copy), and
 * the reverse: keep this rank's pieces of full moments. */
int colo_zero_gather_moments(colo_zero_t *z, const colo_adamw_t *opt, float *full_m, float *full_v);
void colo_zero_take_moments(colo_zero_t *z, colo_adamw_t *opt, const float *full_m,
                            const float *full_v);

#endif
