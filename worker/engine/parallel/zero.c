/* ZeRO stages 0 and 1 over chunks. */
#include "zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"

int colo_zero_init(colo_zero_t *z, colo_comm_t *comm, int stage, colo_gpt_t *model, char *err,
                   size_t errlen) {
  memset(z, 0, sizeof *z);
  if (stage < 0 || stage > 1) {
    snprintf(err, errlen, "parallel.zero_stage=%d: this build implements ZeRO stages 0 and 1",
             stage);
    return COLO_ENOSYS;
  }
  z->comm = comm;
  z->stage = stage;
  z->rank = colo_comm_rank(comm);
  z->dp = colo_comm_size(comm);
  size_t nt;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  int rc = colo_chunks_plan(table, nt, z->dp, &z->chunks);
  if (rc < 0) {
    snprintf(err, errlen, "cannot plan chunks");
    return rc;
  }
  z->shard_off = calloc(z->chunks.n, sizeof *z->shard_off);
  size_t maxcap = 0;
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    z->shard_off[k] = z->shard_n;
    z->shard_n += piece;
    if (z->chunks.chunks[k].capacity > maxcap)
      maxcap = z->chunks.chunks[k].capacity;
  }
  z->staging = calloc(maxcap ? maxcap : 1, sizeof(float));
  if (!z->shard_off || !z->staging) {
    colo_zero_free(z);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  return 0;
}

void colo_zero_free(colo_zero_t *z) {
  colo_chunks_free(&z->chunks);
  free(z->shard_off);
  free(z->staging);
  z->shard_off = NULL;
  z->staging = NULL;
}

size_t colo_zero_optim_numel(const colo_zero_t *z, const colo_gpt_t *model) {
  return z->stage == 0 ? colo_gpt_num_params(model) : z->shard_n;
}

int colo_zero_reduce_grads(colo_zero_t *z, colo_gpt_t *model) {
  if (z->dp == 1)
    return 0;
  float *g = colo_gpt_grads(model);
  for (size_t k = 0; k < z->chunks.n; k++) {
    const colo_chunk_t *c = &z->chunks.chunks[k];
    int rc = z->comm->ops->allreduce_sum(z->comm, g + c->lo, c->hi - c->lo);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* the all-gather of a chunk of `src` (the flat parameter buffer, or full moments written from
 * shard pieces): pieces go into staging at rank × piece, the gathered chunk back into dst */
static int gather_chunk(colo_zero_t *z, size_t k, const float *piece_src, float *dst) {
  const colo_chunk_t *c = &z->chunks.chunks[k];
  size_t lo, hi, piece;
  colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
  memset(z->staging + (size_t)z->rank * piece, 0, piece * sizeof(float));
  memcpy(z->staging + (size_t)z->rank * piece, piece_src, (hi - lo) * sizeof(float));
  int rc = z->comm->ops->all_gather(z->comm, z->staging, piece);
  if (rc == 0)
    memcpy(dst + c->lo, z->staging, (c->hi - c->lo) * sizeof(float));
  return rc;
}

int colo_zero_step(colo_zero_t *z, colo_adamw_t *opt, const colo_backend_t *be, colo_gpt_t *model,
                   float lr, float grad_scale) {
  if (z->stage == 0) {
    colo_adamw_step(opt, be, model, lr, grad_scale);
    return 0;
  }
  opt->t++;
  float *p = colo_gpt_params(model);
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    colo_adamw_step_range(&opt->cfg, opt->t, be, model, lo, hi, opt->m + z->shard_off[k],
                          opt->v + z->shard_off[k], lr, grad_scale);
  }
  if (z->dp == 1)
    return 0;
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    int rc = gather_chunk(z, k, p + lo, p);
    if (rc < 0)
      return rc;
  }
  return 0;
}

int colo_zero_gather_moments(colo_zero_t *z, const colo_adamw_t *opt, float *full_m,
                             float *full_v) {
  for (size_t k = 0; k < z->chunks.n; k++) {
    int rc = gather_chunk(z, k, opt->m + z->shard_off[k], full_m);
    if (rc == 0)
      rc = gather_chunk(z, k, opt->v + z->shard_off[k], full_v);
    if (rc < 0)
      return rc;
  }
  return 0;
}

void colo_zero_take_moments(colo_zero_t *z, colo_adamw_t *opt, const float *full_m,
                            const float *full_v) {
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    memset(opt->m + z->shard_off[k], 0, piece * sizeof(float));
    memset(opt->v + z->shard_off[k], 0, piece * sizeof(float));
    memcpy(opt->m + z->shard_off[k], full_m + lo, (hi - lo) * sizeof(float));
    memcpy(opt->v + z->shard_off[k], full_v + lo, (hi - lo) * sizeof(float));
  }
}
