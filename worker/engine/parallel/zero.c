/* ZeRO stages 0 to 3 over chunks. Every buffer of parameters, gradients and moments is the
 * backend's memory (a GPU's on a device backend) or, placed off it (placement.c), host memory or
 * NVMe; zero_mem.h moves them. */
#include "zero.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "../core/dtype.h"
#include "../optim/muon.h"
#include "zero_mem.h"

static int gather_chunk(colo_zero_t *z, size_t k, const float *piece_src, float *dst);
static float *hook_begin(void *ctx, size_t t);
static int hook_ready(void *ctx, size_t t);
static const float *hook_fetch(void *ctx, size_t t);
static void hook_release(void *ctx, size_t t);
static const colo_gpt_hooks_t HOOKS2 = {hook_begin, hook_ready, NULL, NULL};
static const colo_gpt_hooks_t HOOKS3 = {hook_begin, hook_ready, hook_fetch, hook_release};
static const colo_gpt_hooks_t HOOKS3_FROZEN = {NULL, NULL, hook_fetch, hook_release};

/* chunk k's moments: on the device or in host memory where they live, else the scratch (m, v of
 * max_piece floats each) with n floats of each read from NVMe (0: none, for a piece about to be
 * overwritten) */
static int moments_at(colo_zero_t *z, const colo_adamw_t *opt, size_t k, size_t n, float **m,
                      float **v) {
  size_t o = z->optim_off[k];
  switch (z->optim_home[k]) {
  case COLO_HOME_DEVICE:
    *m = opt->m + o, *v = opt->v + o;
    return 0;
  case COLO_HOME_HOST:
    *m = z->host_m + o, *v = z->host_v + o;
    return 0;
  default:
    *m = z->scratch + 2 * z->max_piece, *v = z->scratch + 3 * z->max_piece;
    return colo_zero_nvme_moments(z, k, *m, *v, n, 0);
  }
}

const char *colo_zero_error(const colo_zero_t *z) {
  return z->error[0] ? z->error : colo_comm_error(z->comm);
}

int colo_zero_init(colo_zero_t *z, colo_comm_t *comm, int stage, size_t chunk_floats,
                   colo_gpt_t *model, colo_pool_t *pool, char *err, size_t errlen) {
  memset(z, 0, sizeof *z);
  z->nvme_fd = -1;
  if (stage < 0 || stage > 3) {
    snprintf(err, errlen, "parallel.zero_stage=%d must be 0, 1, 2 or 3", stage);
    return COLO_EINVAL;
  }
  z->frozen = colo_gpt_lora(model) != NULL;
  z->esz = sizeof(float);
  if (z->frozen && (stage == 1 || stage == 2)) {
    snprintf(err, errlen,
             "parallel.zero_stage=%d shards gradients and optimizer state, and a frozen model "
             "(LoRA) has none: zero_stage=3 shards its parameters, 0 keeps it whole",
             stage);
    return COLO_EINVAL;
  }
  z->model = model;
  z->be = colo_gpt_backend(model);
  z->pool = pool;
  z->comm = comm;
  z->stage = stage;
  z->rank = colo_comm_rank(comm);
  z->dp = colo_comm_size(comm);
  size_t nt;
  const colo_param_t *table = colo_gpt_storage_table(model, &nt);
  int rc = colo_chunks_plan(table, nt, z->dp, chunk_floats, &z->chunks);
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
  /* stages 1 and 2 all-gather updated parameters through it (stage 3 gathers into the chunk
   * it fetches) */
  int staged = (stage == 1 || stage == 2) && z->dp > 1;
  z->staging = !staged ? NULL
               : z->be->device
                   ? colo_pool_alloc(pool, (maxcap ? maxcap : 1) * sizeof(float), "staging")
                   : calloc(maxcap ? maxcap : 1, sizeof(float));
  if (staged && !z->staging) {
    snprintf(err, errlen, "%s", z->be->device ? colo_pool_error(pool) : "out of memory");
    colo_zero_free(z);
    return COLO_ENOMEM;
  }
  z->max_piece = maxcap / (size_t)z->dp;
  /* everything on the device until colo_zero_place says otherwise */
  z->param_home = calloc(z->chunks.n ? z->chunks.n : 1, 1);
  z->optim_home = calloc(z->chunks.n ? z->chunks.n : 1, 1);
  z->param_off = calloc(z->chunks.n ? z->chunks.n : 1, sizeof *z->param_off);
  z->optim_off = calloc(z->chunks.n ? z->chunks.n : 1, sizeof *z->optim_off);
  if (!z->shard_off || !z->param_home || !z->optim_home || !z->param_off || !z->optim_off) {
    colo_zero_free(z);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  for (size_t k = 0; k < z->chunks.n; k++)
    z->param_off[k] = z->optim_off[k] = z->shard_off[k];
  z->param_n[COLO_HOME_DEVICE] = z->shard_n;
  z->optim_n[COLO_HOME_DEVICE] = z->frozen ? 0 : z->shard_n;
  if (stage >= 2) {
    z->grad_full = calloc(z->chunks.n, sizeof *z->grad_full);
    z->ready = calloc(z->chunks.n, sizeof *z->ready);
    z->n_in = calloc(z->chunks.n, sizeof *z->n_in);
    z->chunk_of = calloc(nt, sizeof *z->chunk_of);
    if (!z->grad_full || !z->ready || !z->n_in || !z->chunk_of) {
      snprintf(err, errlen, "out of memory");
      colo_zero_free(z);
      return COLO_ENOMEM;
    }
    for (size_t i = 0, k = 0; i < nt; i++) {
      while (table[i].offset >= z->chunks.chunks[k].hi)
        k++;
      z->chunk_of[i] = k;
      z->n_in[k]++;
    }
  }
  if (stage == 3) {
    z->param_full = calloc(z->chunks.n, sizeof *z->param_full);
    z->fetched = calloc(z->chunks.n, sizeof *z->fetched);
    z->cached = calloc(z->chunks.n, 1);
    z->last_use = calloc(z->chunks.n, sizeof *z->last_use);
    if (!z->param_full || !z->fetched || !z->cached || !z->last_use) {
      snprintf(err, errlen, "out of memory");
      colo_zero_free(z);
      return COLO_ENOMEM;
    }
  }
  return 0;
}

/* A frozen model's pieces in the activations' 16-bit type, when every value of every rank's
 * pieces is exact in it and each piece is a whole number of floats to gather (else fp32, as
 * always): this rank's pieces (host, fp32) checked, the group agreeing. Host pieces placed
 * before (colo_zero_place) are made again at the smaller size. */
static int choose_half(colo_zero_t *z, const float *pieces, char *err, size_t errlen) {
  colo_dtype_t t = z->be->act_dtype;
  if (t == COLO_DTYPE_F32) /* the same on every rank: nothing to agree on */
    return 0;
  float bad = 0.0f;
  uint16_t *h = malloc(z->max_piece * sizeof *h + 1);
  float *back = malloc(z->max_piece * sizeof *back + 1);
  if (!h || !back)
    bad = 1.0f;
  for (size_t k = 0; k < z->chunks.n && bad == 0.0f; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    colo_dtype_from_float(h, pieces + z->shard_off[k], hi - lo, t);
    colo_dtype_to_float(back, h, hi - lo, t);
    if ((z->dp > 1 && piece % 2) ||
        memcmp(back, pieces + z->shard_off[k], (hi - lo) * sizeof(float)))
      bad = 1.0f;
  }
  free(h);
  free(back);
  if (z->dp > 1 && z->comm->ops->allreduce_sum(z->comm, &bad, 1) < 0) {
    snprintf(err, errlen, "agreeing on the pieces' type: %s", colo_comm_error(z->comm));
    return COLO_EIO;
  }
  if (bad != 0.0f)
    return 0;
  z->esz = 2;
  if (z->param_host) { /* placed in host memory at fp32's size */
    host_free(z, z->param_host);
    if (!(z->param_host = host_floats(z, piece_floats(z, z->param_n[COLO_HOME_HOST])))) {
      snprintf(err, errlen, "no host memory for the parameter pieces");
      return COLO_ENOMEM;
    }
  }
  return 0;
}

int colo_zero_attach(colo_zero_t *z, char *err, size_t errlen) {
  return colo_zero_attach_from(z, NULL, err, errlen);
}

int colo_zero_attach_from(colo_zero_t *z, const float *pieces, char *err, size_t errlen) {
  if (pieces && z->stage != 3) {
    snprintf(err, errlen, "parameter pieces are ZeRO-3's, and this is stage %d", z->stage);
    return COLO_EINVAL;
  }
  if (z->stage < 2)
    return 0;
  /* the pieces are made only now: from `pieces` (a model made without parameters), or from the
   * model's own buffer, which they share the device with only for the copy (set-up's peak) */
  if (z->stage == 3) { /* keep this rank's pieces of the parameters */
    /* (NF4's pieces are packed bytes: kept as they are) */
    int rc =
        pieces && z->frozen && !colo_gpt_nf4(z->model) ? choose_half(z, pieces, err, errlen) : 0;
    if (rc < 0)
      return rc;
    size_t pd = z->param_n[COLO_HOME_DEVICE];
    if (!(z->param_piece = colo_pool_alloc(z->pool, (pd ? pd : 1) * z->esz, "parameter pieces"))) {
      snprintf(err, errlen, "%s", colo_pool_error(z->pool));
      return COLO_ENOMEM;
    }
    const float *p = colo_gpt_params(z->model);
    uint16_t *h16 = z->esz == 2 ? malloc(z->max_piece * sizeof *h16 + 1) : NULL;
    if (z->esz == 2 && !h16) {
      snprintf(err, errlen, "out of memory");
      return COLO_ENOMEM;
    }
    for (size_t k = 0; k < z->chunks.n; k++) {
      size_t lo, hi, piece;
      colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
      const float *src = pieces ? pieces + z->shard_off[k] : p + lo;
      xzero(z, piece_at(z, k), piece * z->esz);
      if (h16) /* exact: choose_half checked every value */
        colo_dtype_from_float(h16, src, hi - lo, z->be->act_dtype);
      xcopy(z, piece_at(z, k), h16 ? (const void *)h16 : src, (hi - lo) * z->esz);
    }
    free(h16);
  }
  colo_gpt_set_hooks(z->model,
                     z->stage == 2 ? &HOOKS2
                     : z->frozen   ? &HOOKS3_FROZEN
                                   : &HOOKS3,
                     z); /* frees the model's */
  if (z->frozen)
    return 0;
  if (!(z->grad_piece = colo_pool_alloc(z->pool, (z->shard_n ? z->shard_n : 1) * sizeof(float),
                                        "gradient pieces"))) {
    snprintf(err, errlen, "%s", colo_pool_error(z->pool));
    return COLO_ENOMEM;
  }
  return 0;
}

/* stage 3: a use of chunk k, in this round's order */
static void record_use(colo_zero_t *z, size_t k) {
  if (z->n_uses == z->cap_uses) {
    size_t cap = z->cap_uses ? 2 * z->cap_uses : 4 * z->chunks.n + 16;
    size_t *u = realloc(z->uses, cap * sizeof *u);
    if (!u)
      return; /* the order is a hint: without it, eviction guesses worse */
    z->uses = u, z->cap_uses = cap;
  }
  z->last_use[k] = z->n_uses;
  z->uses[z->n_uses++] = k;
}

/* how many uses from now chunk k is next used, by the previous round; SIZE_MAX: not again */
static size_t next_use(const colo_zero_t *z, size_t k) {
  for (size_t i = z->n_uses; i < z->n_prev; i++)
    if (z->prev_uses[i] == k)
      return i - z->n_uses;
  return SIZE_MAX;
}

/* chunk k leaves the cache: fetched again (its buffer in use), or freed (uncache) */
static void unkeep(colo_zero_t *z, size_t k) {
  z->cached[k] = 0;
  z->cache_bytes -= z->chunks.chunks[k].capacity * sizeof(float);
}

static void uncache(colo_zero_t *z, size_t k) {
  unkeep(z, k);
  colo_pool_free(z->pool, z->param_full[k]);
  z->param_full[k] = NULL;
}

/* frees kept chunks, the furthest next use first (ties: the least recently used), until
 * `want` bytes are freed or none is kept; the bytes freed */
static size_t evict(colo_zero_t *z, size_t want) {
  size_t freed = 0;
  while (freed < want) {
    size_t victim = SIZE_MAX, far = 0, old = 0;
    for (size_t k = 0; k < z->chunks.n; k++) {
      if (!z->cached[k])
        continue;
      size_t d = next_use(z, k);
      if (victim == SIZE_MAX || d > far || (d == far && z->last_use[k] < old))
        victim = k, far = d, old = z->last_use[k];
    }
    if (victim == SIZE_MAX)
      break;
    freed += z->chunks.chunks[victim].capacity * sizeof(float);
    uncache(z, victim);
    z->stats.evictions++;
  }
  return freed;
}

/* the pool's shrinker. Under data parallelism every rank of the group must keep the same chunks,
 * or one would all-gather alone: their pools see the same allocations, so the watermark and the
 * capacity decide alike on each; a device fuller than its pool counts on is one rank's own, so
 * there the allocation fails as it would without the cache. */
static size_t reclaim(void *ctx, size_t want, int device_full) {
  colo_zero_t *z = ctx;
  return device_full && z->dp > 1 ? 0 : evict(z, want);
}

void colo_zero_drop_cache(colo_zero_t *z) {
  if (z->cached)
    for (size_t k = 0; k < z->chunks.n; k++)
      if (z->cached[k])
        uncache(z, k);
}

void colo_zero_cache(colo_zero_t *z, size_t watermark) {
  if (z->stage != 3)
    return;
  colo_zero_drop_cache(z);
  z->cache_on = watermark > 0;
  z->watermark = watermark;
  colo_pool_set_reclaim(z->pool, z->cache_on ? reclaim : NULL, z, watermark);
}

void colo_zero_take_stats(colo_zero_t *z, colo_fetch_stats_t *out) {
  *out = z->stats;
  memset(&z->stats, 0, sizeof z->stats);
  z->stats.cache_bytes = z->cache_bytes;
}

/* stage 3: the end of a round (the optimizer step): the kept chunks are stale (unless the model
 * is frozen), and this round's order becomes the one eviction goes by */
static void end_round(colo_zero_t *z) {
  if (!z->frozen)
    colo_zero_drop_cache(z);
  size_t *u = z->prev_uses, cap = z->cap_prev;
  z->prev_uses = z->uses, z->n_prev = z->n_uses, z->cap_prev = z->cap_uses;
  z->uses = u, z->cap_uses = cap, z->n_uses = 0;
}

/* stage 3: a tensor's values, its chunk gathered on the first fetch (one rank whose piece is on
 * the device: the piece itself, nothing copied), or kept from its last use (the chunk cache) */
static const float *hook_fetch(void *ctx, size_t t) {
  colo_zero_t *z = ctx;
  size_t k = z->chunk_of[t];
  const colo_chunk_t *c = &z->chunks.chunks[k];
  size_t nt;
  const colo_param_t *table = colo_gpt_storage_table(z->model, &nt);
  if (z->fetched[k] == 0)
    record_use(z, k);
  if (z->dp == 1 && z->param_home[k] == COLO_HOME_DEVICE && z->esz == sizeof(float)) {
    /* the piece is the whole chunk */
    z->fetched[k]++;
    return param_at(z, k) + (table[t].offset - c->lo);
  }
  if (z->cached[k]) {
    unkeep(z, k);
    z->stats.hits++;
  } else if (!z->param_full[k]) {
    size_t piece = c->capacity / (size_t)z->dp;
    float *full = colo_pool_alloc(z->pool, c->capacity * sizeof(float), "parameters");
    if (!full)
      return NULL;
    /* 16-bit pieces are gathered so (a piece is a whole number of floats), then widened */
    char *g = z->esz == sizeof(float)
                  ? (char *)full
                  : colo_pool_alloc(z->pool, c->capacity * z->esz, "parameters");
    if (!g) {
      colo_pool_free(z->pool, full);
      return NULL;
    }
    xcopy(z, g + (size_t)z->rank * piece * z->esz, piece_at(z, k), piece * z->esz);
    if (z->dp > 1 &&
        z->comm->ops->all_gather(z->comm, (float *)g, piece * z->esz / sizeof(float)) < 0) {
      if (g != (char *)full)
        colo_pool_free(z->pool, g);
      colo_pool_free(z->pool, full);
      return NULL;
    }
    if (g != (char *)full) {
      z->be->to_f32(full, g, c->capacity);
      colo_pool_free(z->pool, g);
    }
    z->param_full[k] = full;
    z->stats.fills++;
    if (z->param_home[k] == COLO_HOME_HOST)
      z->stats.up_bytes += piece * z->esz;
  }
  z->fetched[k]++;
  return z->param_full[k] + (table[t].offset - c->lo);
}

/* stage 3: after a chunk's last release it is freed, or kept while the pool is under the
 * cache's watermark (evict decides which kept chunk gives way when it is not) */
static void hook_release(void *ctx, size_t t) {
  colo_zero_t *z = ctx;
  size_t k = z->chunk_of[t];
  if (--z->fetched[k] != 0 || !z->param_full[k])
    return;
  if (!z->cache_on) {
    colo_pool_free(z->pool, z->param_full[k]);
    z->param_full[k] = NULL;
    return;
  }
  z->cached[k] = 1;
  z->cache_bytes += z->chunks.chunks[k].capacity * sizeof(float);
  size_t used = colo_pool_used(z->pool);
  if (used > z->watermark)
    evict(z, used - z->watermark);
  if (z->cache_bytes > z->stats.cache_bytes)
    z->stats.cache_bytes = z->cache_bytes;
}

void colo_zero_end_step(colo_zero_t *z) {
  if (z->stage == 3)
    end_round(z);
}

void colo_zero_set_tp(colo_zero_t *z, colo_comm_t *tp) {
  z->tp = tp;
}

void colo_zero_zero_grads(colo_zero_t *z) {
  if (z->grad_piece)
    xzero(z, z->grad_piece, z->shard_n * sizeof(float));
}

/* stage 2: the buffer of the tensor's chunk, allocated (zeroed) on first use in a backward */
static float *hook_begin(void *ctx, size_t t) {
  colo_zero_t *z = ctx;
  size_t k = z->chunk_of[t];
  const colo_chunk_t *c = &z->chunks.chunks[k];
  if (!z->grad_full[k] &&
      !(z->grad_full[k] = colo_pool_alloc(z->pool, c->capacity * sizeof(float), "gradients")))
    return NULL;
  size_t nt;
  const colo_param_t *table = colo_gpt_storage_table(z->model, &nt);
  return z->grad_full[k] + (table[t].offset - c->lo);
}

/* stage 2: when the chunk's last tensor is final, reduce-scatter it into this rank's piece */
static int hook_ready(void *ctx, size_t t) {
  colo_zero_t *z = ctx;
  size_t k = z->chunk_of[t];
  if (++z->ready[k] < z->n_in[k])
    return 0;
  z->ready[k] = 0;
  const colo_chunk_t *c = &z->chunks.chunks[k];
  size_t piece = c->capacity / (size_t)z->dp;
  float *g = z->grad_full[k];
  int rc = z->dp > 1 ? z->comm->ops->reduce_scatter_sum(z->comm, g, piece) : 0;
  if (rc == 0) {
    z->be->accumulate(z->grad_piece + z->shard_off[k], g + (size_t)z->rank * piece, piece);
  }
  colo_pool_free(z->pool, g);
  z->grad_full[k] = NULL;
  return rc;
}

int colo_zero_grad_norm(colo_zero_t *z, const colo_backend_t *be, float *norm) {
  if (z->stage < 2) {
    *norm = (float)sqrt(be->sumsq(colo_gpt_grads(z->model), colo_gpt_num_params(z->model)));
    return 0;
  }
  float sq;
  if (!z->tp) {
    sq = (float)be->sumsq(z->grad_piece, z->shard_n);
  } else { /* replicated tensors are on every rank of the tensor-parallel group: a tp-th each */
    size_t nt;
    const colo_param_t *table = colo_gpt_storage_table(z->model, &nt);
    double acc = 0.0, inv_tp = 1.0 / colo_comm_size(z->tp);
    for (size_t k = 0; k < z->chunks.n; k++) {
      size_t lo, hi, piece;
      colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
      for (size_t i = 0; i < nt; i++) {
        size_t a = table[i].offset, b = a + table[i].numel;
        if (b <= lo || a >= hi)
          continue;
        size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        double s = be->sumsq(z->grad_piece + z->shard_off[k] + (x - lo), y - x);
        acc += table[i].split == COLO_SPLIT_NONE ? s * inv_tp : s;
      }
    }
    sq = (float)acc;
  }
  if (z->dp > 1) {
    int rc = z->comm->ops->allreduce_sum(z->comm, &sq, 1);
    if (rc < 0)
      return rc;
  }
  if (z->tp) {
    int rc = z->tp->ops->allreduce_sum(z->tp, &sq, 1);
    if (rc < 0)
      return rc;
  }
  *norm = sqrtf(sq);
  return 0;
}

void colo_zero_free(colo_zero_t *z) {
  if (z->cache_on)
    colo_pool_set_reclaim(z->pool, NULL, NULL, 0);
  z->cache_on = 0;
  free(z->cached);
  free(z->last_use);
  free(z->uses);
  free(z->prev_uses);
  z->cached = NULL;
  z->last_use = z->uses = z->prev_uses = NULL;
  z->n_uses = z->n_prev = z->cap_uses = z->cap_prev = 0;
  if (z->grad_full)
    for (size_t k = 0; k < z->chunks.n; k++)
      colo_pool_free(z->pool, z->grad_full[k]);
  if (z->grad_piece)
    colo_pool_free(z->pool, z->grad_piece);
  if (z->param_full)
    for (size_t k = 0; k < z->chunks.n; k++)
      colo_pool_free(z->pool, z->param_full[k]);
  if (z->param_piece)
    colo_pool_free(z->pool, z->param_piece);
  free(z->param_full);
  free(z->fetched);
  z->param_full = NULL;
  z->param_piece = NULL;
  z->fetched = NULL;
  free(z->grad_full);
  free(z->ready);
  free(z->n_in);
  free(z->chunk_of);
  z->grad_full = NULL;
  z->grad_piece = NULL;
  z->ready = z->n_in = NULL;
  z->chunk_of = NULL;
  free(z->param_home);
  free(z->optim_home);
  free(z->param_off);
  free(z->optim_off);
  host_free(z, z->host_m);
  host_free(z, z->host_v);
  host_free(z, z->param_host);
  host_free(z, z->scratch);
  z->param_home = z->optim_home = NULL;
  z->param_off = z->optim_off = NULL;
  z->host_m = z->host_v = z->param_host = z->scratch = NULL;
  if (z->nvme_fd >= 0)
    close(z->nvme_fd);
  z->nvme_fd = -1;
  colo_chunks_free(&z->chunks);
  free(z->shard_off);
  if (z->be && z->be->device)
    colo_pool_free(z->pool, z->staging);
  else
    free(z->staging);
  if (z->muon_chunk)
    colo_pool_free(z->pool, z->muon_chunk);
  free(z->muon_in);
  z->muon_in = NULL;
  z->shard_off = NULL;
  z->staging = z->muon_chunk = NULL;
}

size_t *colo_zero_muon_pairs(const colo_zero_t *z, size_t *n_pairs) {
  size_t nt, n = 0;
  const colo_param_t *table =
      z->stage == 0 ? colo_gpt_params_table(z->model, &nt) : colo_gpt_storage_table(z->model, &nt);
  size_t *pairs = malloc(2 * (nt * (z->stage == 0 ? 1 : z->chunks.n) + 1) * sizeof *pairs);
  if (!pairs)
    return NULL;
  for (size_t k = 0; k < (z->stage == 0 ? 1 : z->chunks.n); k++) {
    size_t lo = 0, hi = colo_gpt_num_params(z->model), piece, base = 0;
    if (z->stage > 0) {
      if (z->optim_home[k] != COLO_HOME_DEVICE) /* host memory and NVMe keep v whole */
        continue;
      colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
      base = z->optim_off[k];
    }
    for (size_t i = 0; i < nt; i++) {
      size_t a = table[i].offset, b = a + table[i].numel;
      if (b <= lo || a >= hi || !colo_muon_takes(&table[i]))
        continue;
      size_t x = base + (a > lo ? a : lo) - lo, y = base + (b < hi ? b : hi) - lo;
      if (n && pairs[2 * n - 1] == x) /* adjacent matrices: one hole */
        pairs[2 * n - 1] = y;
      else
        pairs[2 * n] = x, pairs[2 * n + 1] = y, n++;
    }
  }
  *n_pairs = n;
  return pairs;
}

int colo_zero_muon(colo_zero_t *z, colo_adamw_t *opt, char *err, size_t errlen) {
  if (z->stage > 0) { /* which chunks hold a matrix of Muon's; a buffer for the largest of them */
    size_t nt, cap = 0;
    const colo_param_t *table = colo_gpt_storage_table(z->model, &nt);
    if (!(z->muon_in = calloc(z->chunks.n ? z->chunks.n : 1, 1))) {
      snprintf(err, errlen, "no host memory for Muon's map");
      return COLO_ENOMEM;
    }
    for (size_t k = 0; k < z->chunks.n; k++) {
      const colo_chunk_t *c = &z->chunks.chunks[k];
      for (size_t i = 0; i < nt && !z->muon_in[k]; i++)
        z->muon_in[k] = table[i].offset < c->hi && table[i].offset + table[i].numel > c->lo &&
                        colo_muon_takes(&table[i]);
      if (z->muon_in[k] && c->capacity > cap)
        cap = c->capacity;
    }
    if (!(z->muon_chunk =
              colo_pool_alloc(z->pool, (cap ? cap : 1) * sizeof(float), "Muon's chunk"))) {
      snprintf(err, errlen, "%s", colo_pool_error(z->pool));
      return COLO_ENOMEM;
    }
  }
  size_t n;
  size_t *pairs = colo_zero_muon_pairs(z, &n);
  if (!pairs) {
    snprintf(err, errlen, "no host memory for Muon's map");
    return COLO_ENOMEM;
  }
  int rc = colo_adamw_drop_v(opt, pairs, n, err, errlen);
  free(pairs);
  return rc;
}

size_t colo_zero_optim_numel(const colo_zero_t *z, const colo_gpt_t *model) {
  return z->stage == 0 ? colo_gpt_num_params(model) : z->optim_n[COLO_HOME_DEVICE];
}

int colo_zero_reduce_grads(colo_zero_t *z, colo_gpt_t *model) {
  if (z->dp == 1 || z->stage >= 2) /* stages 2 and 3 reduced each chunk in the backward */
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
  xzero(z, z->staging + (size_t)z->rank * piece, piece * sizeof(float));
  xcopy(z, z->staging + (size_t)z->rank * piece, piece_src, (hi - lo) * sizeof(float));
  int rc = z->comm->ops->all_gather(z->comm, z->staging, piece);
  if (rc == 0)
    xcopy(z, dst + c->lo, z->staging, (c->hi - c->lo) * sizeof(float));
  return rc;
}

/* chunk k's update on the host, by the CPU's AdamW: its moments there or read from NVMe, its
 * gradients copied out, and its parameters too where they live on the device. With muon, Muon's
 * tensors get their input made instead (muon_momentum, over the gradients' copy: *muon, the
 * piece's floats, valid until the next host update), left for muon_step to orthogonalize. */
static int host_step(colo_zero_t *z, colo_adamw_t *opt, size_t k, size_t lo, size_t hi, float lr,
                     float grad_scale, float **muon) {
  size_t n = hi - lo, nt;
  if (muon)
    *muon = z->scratch;
  if (!n)
    return 0;
  const colo_backend_t *cpu = colo_backend_cpu();
  const colo_adamw_config_t *cf = &opt->cfg;
  const colo_param_t *table = colo_gpt_storage_table(z->model, &nt);
  float *g = z->scratch, *p = z->scratch + z->max_piece, *m, *v;
  xcopy(z, g, z->stage == 1 ? colo_gpt_grads(z->model) + lo : z->grad_piece + z->shard_off[k],
        n * sizeof(float));
  float *home = z->stage == 3 ? param_at(z, k) : colo_gpt_params(z->model) + lo;
  int in_place = !owned(z, home);
  if (in_place)
    p = home;
  else
    xcopy(z, p, home, n * sizeof(float));
  int rc = moments_at(z, opt, k, n, &m, &v);
  if (rc < 0)
    return rc;
  for (size_t i = 0; i < nt; i++) {
    size_t a = table[i].offset, b = a + table[i].numel;
    if (b <= lo || a >= hi)
      continue;
    size_t x = a > lo ? a : lo, y = b < hi ? b : hi, o = x - lo;
    if (muon && colo_muon_takes(&table[i]))
      cpu->muon_momentum(g + o, g + o, m + o, y - x, cf->muon_momentum, grad_scale);
    else
      cpu->adamw(p + o, g + o, m + o, v + o, y - x, lr, cf->beta1, cf->beta2, cf->eps,
                 table[i].decay ? cf->weight_decay : 0.0f, grad_scale, opt->t);
  }
  if (!in_place)
    xcopy(z, home, p, n * sizeof(float));
  return z->optim_home[k] == COLO_HOME_NVME ? colo_zero_nvme_moments(z, k, m, v, n, 1) : 0;
}

/* chunk k's update with Muon (colo_zero_muon): AdamW on this rank's piece of the other tensors,
 * Muon's input for its piece of Muon's in the chunk buffer, gathered, then each of Muon's tensors
 * that the piece touches orthogonalized whole and its piece applied. A piece whose optimizer state
 * is off the device is updated as host_step's, by the CPU, but for the orthogonalization: its input
 * (made over its gradients' host copy) goes up into the chunk buffer, and Muon's update comes down
 * to parameters that live in host memory. */
static int muon_step(colo_zero_t *z, colo_adamw_t *opt, size_t k, float lr, float grad_scale) {
  const colo_adamw_config_t *cf = &opt->cfg;
  const colo_chunk_t *c = &z->chunks.chunks[k];
  size_t lo, hi, piece, nt;
  colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
  size_t n = hi - lo;
  const colo_param_t *table = colo_gpt_storage_table(z->model, &nt);
  /* the chunk holds one of Muon's tensors: every rank of the group gathers it */
  int any = z->muon_in[k];
  float *u = z->muon_chunk + (size_t)z->rank * piece;
  float *p = z->stage == 3 ? param_at(z, k) : colo_gpt_params(z->model) + lo;
  if (z->optim_home[k] != COLO_HOME_DEVICE) { /* by the CPU, Muon's input then sent up */
    float *h;
    int rc = host_step(z, opt, k, lo, hi, lr, grad_scale, any ? &h : NULL);
    if (rc < 0 || !any)
      return rc;
    xzero(z, u + n, (piece - n) * sizeof(float));
    xcopy(z, u, h, n * sizeof(float));
  } else {
    const colo_backend_t *be = z->be;
    float *m = opt->m + z->optim_off[k];
    float *g = z->stage == 1 ? colo_gpt_grads(z->model) + lo : z->grad_piece + z->shard_off[k];
    if (any)
      xzero(z, u, piece * sizeof(float));
    for (size_t i = 0; i < nt; i++) {
      size_t a = table[i].offset, b = a + table[i].numel;
      if (b <= lo || a >= hi)
        continue;
      size_t x = a > lo ? a : lo, y = b < hi ? b : hi, o = x - lo;
      if (colo_muon_takes(&table[i]))
        be->muon_momentum(u + o, g + o, m + o, y - x, cf->muon_momentum, grad_scale);
      else /* v holds the other tensors' second moments alone */
        be->adamw(p + o, g + o, m + o, opt->v + colo_adamw_v_off(opt, z->optim_off[k] + o), y - x,
                  lr, cf->beta1, cf->beta2, cf->eps, table[i].decay ? cf->weight_decay : 0.0f,
                  grad_scale, opt->t);
    }
    if (!any)
      return 0;
  }
  if (z->dp > 1) {
    int rc = z->comm->ops->all_gather(z->comm, z->muon_chunk, piece);
    if (rc < 0)
      return rc;
  }
  float mlr = lr * colo_muon_lr_ratio(cf);
  for (size_t i = 0; i < nt; i++) {
    size_t a = table[i].offset, b = a + table[i].numel;
    if (b <= lo || a >= hi || !colo_muon_takes(&table[i]))
      continue;
    float *t = z->muon_chunk + (a - c->lo); /* the tensor's input, whole */
    int rc = colo_muon_orthogonalize(z->be, &table[i], t, opt->work, opt->tp, cf->muon_original);
    if (rc < 0)
      return rc;
    size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
    if (z->param_home[k] == COLO_HOME_DEVICE) {
      z->be->muon_apply(p + (x - lo), t + (x - a), y - x, mlr, cf->weight_decay);
    } else { /* parameters in host memory: the update comes down to them */
      float *d = z->scratch + z->max_piece;
      xcopy(z, d, t + (x - a), (y - x) * sizeof(float));
      colo_backend_cpu()->muon_apply(p + (x - lo), d, y - x, mlr, cf->weight_decay);
    }
  }
  return 0;
}

int colo_zero_step(colo_zero_t *z, colo_adamw_t *opt, const colo_backend_t *be, colo_gpt_t *model,
                   float lr, float grad_scale) {
  if (z->stage == 0)
    return colo_adamw_step(opt, be, model, lr, grad_scale);
  opt->t++;
  if (z->stage == 3)
    end_round(z);
  float *p = colo_gpt_params(model);
  size_t nt;
  const colo_param_t *table = colo_gpt_storage_table(model, &nt);
  const colo_adamw_config_t *cf = &opt->cfg;
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    if (z->muon_chunk) {
      int rc = muon_step(z, opt, k, lr, grad_scale);
      if (rc < 0)
        return rc;
      continue;
    }
    if (z->optim_home[k] != COLO_HOME_DEVICE) {
      int rc = host_step(z, opt, k, lo, hi, lr, grad_scale, NULL);
      if (rc < 0)
        return rc;
      continue;
    }
    float *m = opt->m + z->optim_off[k], *v = opt->v + z->optim_off[k];
    if (z->stage == 1) {
      colo_adamw_step_range(cf, opt->t, be, model, lo, hi, m, v, lr, grad_scale);
      continue;
    }
    /* stages 2 and 3: the gradients (and at 3 the parameters) are this rank's piece */
    for (size_t i = 0; i < nt; i++) {
      size_t a = table[i].offset, b = a + table[i].numel;
      if (b <= lo || a >= hi)
        continue;
      size_t x = a > lo ? a : lo, y = b < hi ? b : hi, o = x - lo;
      float *pp = z->stage == 3 ? param_at(z, k) + o : p + x;
      be->adamw(pp, z->grad_piece + z->shard_off[k] + o, m + o, v + o, y - x, lr, cf->beta1,
                cf->beta2, cf->eps, table[i].decay ? cf->weight_decay : 0.0f, grad_scale, opt->t);
    }
  }
  if (z->stage == 3)
    return 0; /* gathered again when next fetched */
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

int colo_zero_put_params(colo_zero_t *z, const float *pieces) {
  float *p = colo_gpt_params(z->model);
  if (z->stage == 3)
    colo_zero_drop_cache(z); /* gathered from the pieces about to change */
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    const float *src = pieces + z->shard_off[k];
    if (z->stage == 3) {
      xcopy(z, param_at(z, k), src, (hi - lo) * sizeof(float));
    } else if (z->dp == 1) {
      xcopy(z, p + lo, src, (hi - lo) * sizeof(float));
    } else {
      int rc = gather_chunk(z, k, src, p);
      if (rc < 0)
        return rc;
    }
  }
  return 0;
}

const float *colo_zero_piece_host(colo_zero_t *z, const colo_adamw_t *opt, size_t k, int what,
                                  size_t *lo, size_t *hi) {
  size_t piece;
  colo_chunk_piece(&z->chunks, k, z->rank, lo, hi, &piece);
  size_t n = *hi - *lo;
  if (what == 0 && z->esz != sizeof(float)) { /* a frozen model's: never checkpointed */
    snprintf(z->error, sizeof z->error, "the frozen model's pieces are 16-bit: no fp32 copy");
    return NULL;
  }
  if (!z->scratch && !(z->scratch = host_floats(z, 4 * z->max_piece))) {
    snprintf(z->error, sizeof z->error, "no host memory for a piece's copy");
    return NULL;
  }
  float *src, *m, *v;
  if (what == 2 && opt->n_hole && z->optim_home[k] == COLO_HOME_DEVICE) { /* Muon's: zeros */
    float *dst = z->scratch + 3 * z->max_piece;
    colo_adamw_v_get(opt, z->be, z->optim_off[k], n, dst);
    return dst;
  }
  if (what == 0) {
    src = z->stage == 3 ? param_at(z, k) : colo_gpt_params(z->model) + *lo;
  } else {
    if (moments_at(z, opt, k, n, &m, &v) < 0)
      return NULL;
    src = what == 1 ? m : v;
  }
  if (!owned(z, src))
    return src;
  float *dst = z->scratch + (size_t)(what + 1) * z->max_piece;
  xcopy(z, dst, src, n * sizeof(float));
  return dst;
}

void colo_zero_owned(const colo_zero_t *z, size_t off, size_t n, size_t *lo, size_t *hi) {
  size_t a = n, b = 0;
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t plo, phi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &plo, &phi, &piece);
    size_t x = off > plo ? off : plo, y = off + n < phi ? off + n : phi;
    if (x < y) {
      a = x - off < a ? x - off : a;
      b = y - off > b ? y - off : b;
    }
  }
  *lo = a < b ? a : 0;
  *hi = a < b ? b : 0;
}

void colo_zero_keep(const colo_zero_t *z, size_t off, const float *v, size_t n, float *pieces) {
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    size_t x = off > lo ? off : lo, y = off + n < hi ? off + n : hi;
    if (x < y)
      memcpy(pieces + z->shard_off[k] + (x - lo), v + (x - off), (y - x) * sizeof(float));
  }
}

int colo_zero_take_moments(colo_zero_t *z, colo_adamw_t *opt, const float *piece_m,
                           const float *piece_v) {
  for (size_t k = 0; k < z->chunks.n; k++) {
    size_t lo, hi, piece;
    float *m, *v;
    colo_chunk_piece(&z->chunks, k, z->rank, &lo, &hi, &piece);
    moments_at(z, opt, k, 0, &m, &v); /* reads nothing */
    xzero(z, m, piece * sizeof(float));
    xcopy(z, m, piece_m + z->shard_off[k], (hi - lo) * sizeof(float));
    if (opt->n_hole && z->optim_home[k] == COLO_HOME_DEVICE) { /* Muon's matrices' left out */
      colo_adamw_v_put(opt, z->be, z->optim_off[k], hi - lo, piece_v + z->shard_off[k]);
      continue;
    }
    xzero(z, v, piece * sizeof(float));
    xcopy(z, v, piece_v + z->shard_off[k], (hi - lo) * sizeof(float));
    if (z->optim_home[k] == COLO_HOME_NVME && colo_zero_nvme_moments(z, k, m, v, piece, 1) < 0)
      return COLO_EIO;
  }
  return 0;
}
