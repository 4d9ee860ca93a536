/* Data parallelism with ZeRO over chunks (colo_chunks_t):
 *   stage 0: gradients are all-reduced chunk by chunk; every rank updates everything;
 *   stage 1: the AdamW moments are sharded: each rank keeps and updates only its piece of every
 *            chunk (1/dp of the optimizer state), then the pieces are all-gathered;
 *   stage 2: the gradients too: the model writes them into a chunk's buffer through hooks; as
 *            soon as every tensor of the chunk is final the chunk is reduce-scattered into this
 *            rank's piece and its buffer freed, so at most a few chunks of full gradients exist.
 *   stage 3: the parameters too: each rank keeps its pieces; a chunk is all-gathered when the
 *            model fetches one of its tensors and freed when the last is released, so at most a
 *            few chunks of full parameters exist.
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
  size_t *shard_off;        /* where chunk k's piece starts in the sharded moments */
  size_t shard_n;           /* Σ pieces */
  float *staging;           /* one chunk's capacity, in the backend's memory */
  const colo_backend_t *be; /* the model's: on a GPU every buffer here is device memory */
  /* stage 2 */
  colo_gpt_t *model;
  colo_pool_t *pool;
  float *grad_piece; /* this rank's summed gradients, shard_n floats */
  float **grad_full; /* per chunk: its gradient buffer while the backward fills it */
  int *ready, *n_in; /* per chunk: tensors final in this backward, tensors it holds */
  size_t *chunk_of;  /* per tensor: its chunk */
  /* stage 3 */
  float *param_piece; /* this rank's parameters, shard_n floats */
  float **param_full; /* per chunk: the gathered chunk while fetched */
  int *fetched;       /* per chunk: tensors fetched and not yet released */
  colo_comm_t *tp;    /* tensor-parallel group (replicated tensors count once in the norm) */
} colo_zero_t;

/* pool: where stage 2 allocates gradient pieces and chunk buffers (their bytes count there). */
int colo_zero_init(colo_zero_t *z, colo_comm_t *comm, int stage, colo_gpt_t *model,
                   colo_pool_t *pool, char *err, size_t errlen);

/* Stages 2 and 3: installs the model hooks, once the parameters are initialised or loaded
 * (stage 3 takes its pieces from them and frees the model's full copy). */
int colo_zero_attach(colo_zero_t *z, char *err, size_t errlen);

/* Stage 3: all ranks gather the full parameters into `flat` (for a checkpoint). */
int colo_zero_gather_params(colo_zero_t *z, float *flat);

/* Before each step's first backward: clears the stage 2 gradient pieces. */
void colo_zero_zero_grads(colo_zero_t *z);

/* Under tensor parallelism: the group over which split tensors' norms are summed (replicated
 * tensors count once). */
void colo_zero_set_tp(colo_zero_t *z, colo_comm_t *tp);

/* The global gradient norm, over the group (the clipping factor is colo_clip_factor's). */
int colo_zero_grad_norm(colo_zero_t *z, const colo_backend_t *be, float *norm);
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
