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
 * Gradients are averaged over the group (callers scale the loss by 1/dp).
 *
 * A frozen model (LoRA: colo_gpt_set_lora before colo_zero_init) has no gradients or optimizer
 * state of its own: stage 3 shards its parameters alone (fetched and released as above, the
 * hooks without gradients), stage 0 keeps it whole, and stages 1 and 2 are refused. Its
 * parameters never change, so the chunk cache keeps gathered chunks from one step to the next
 * (colo_zero_end_step). Its optimizer (the adapters') is the caller's. */
#ifndef COLO_ZERO_H
#define COLO_ZERO_H

#include <stddef.h>

#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../model/gpt.h"
#include "../optim/adamw.h"
#include "chunks.h"

/* Static placement, as Colossal-AI's Gemini places chunks: this rank's pieces taken in execution
 * order, the first ones kept on the device up to a fraction of its floats, the rest in host
 * memory, and optimizer pieces also in a file on NVMe. Parameters leave the device only as
 * ZeRO-3 pieces (fetched to the device when the model asks for them), optimizer state as the
 * pieces of stage 1 and up; the optimizer state of a piece whose parameters are in host memory
 * is never on the device. A piece off the device is updated there by the CPU's AdamW (its
 * gradients copied out, and its parameters when they live on the device). */
typedef struct {
  float param_device; /* fraction of parameter pieces kept on the device (stage 3) */
  float optim_device; /* of optimizer pieces on the device (stage 1 and up) */
  float optim_nvme;   /* of optimizer pieces in a file under nvme_dir */
  const char *nvme_dir;
} colo_placement_t;

enum { COLO_HOME_DEVICE, COLO_HOME_HOST, COLO_HOME_NVME };

/* What stage 3's fetches did since the last colo_zero_take_stats. */
typedef struct {
  size_t fills;       /* full chunks made: the piece copied in, and all-gathered when dp > 1 */
  size_t up_bytes;    /* of those copies, bytes from host memory onto the device */
  size_t hits;        /* fetches of a chunk the cache kept: nothing copied or gathered */
  size_t evictions;   /* kept chunks freed to make room */
  size_t cache_bytes; /* the most the cache held at once */
} colo_fetch_stats_t;

typedef struct {
  colo_comm_t *comm; /* the data-parallel group */
  int stage, rank, dp;
  int frozen; /* the model's LoRA: no gradients or optimizer pieces here */
  /* bytes of a parameter piece's element: 4, or 2 when a frozen model's pieces are kept in the
   * activations' 16-bit type, every value exact in it (colo_zero_attach_from decides) */
  size_t esz;
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
  float *param_piece; /* this rank's parameters, shard_n elements of esz bytes */
  float **param_full; /* per chunk: the gathered chunk while fetched */
  int *fetched;       /* per chunk: tensors fetched and not yet released */
  colo_comm_t *tp;    /* tensor-parallel group (replicated tensors count once in the norm) */
  /* placement (colo_zero_place): per chunk, where its pieces live and their offset there */
  unsigned char *param_home, *optim_home; /* COLO_HOME_* */
  size_t *param_off, *optim_off;
  size_t optim_n[3], param_n[2]; /* elements of pieces by home (optimizer: each of m and v) */
  float *host_m, *host_v;        /* optimizer pieces in host memory */
  float *param_host;             /* stage 3: parameter pieces in host memory */
  float *scratch;                /* host: one piece each of gradients, parameters, m and v */
  size_t max_piece;
  int nvme_fd; /* optimizer pieces on NVMe: m then v, per chunk; -1: none */
  char nvme_path[1024];
  char error[1200]; /* the last failure that was not the communicator's */
  /* stage 3's chunk cache (colo_zero_cache) and the order of uses it evicts by: a use is a
   * chunk's first fetch after a release; a round runs from one optimizer step to the next */
  int cache_on;
  size_t watermark;
  unsigned char *cached; /* per chunk: gathered, kept after its last release */
  size_t cache_bytes;
  size_t *uses, n_uses, cap_uses;      /* this round's uses, in order */
  size_t *prev_uses, n_prev, cap_prev; /* the previous round's */
  size_t *last_use;                    /* per chunk: its latest use in this round */
  colo_fetch_stats_t stats;
  /* Muon (colo_zero_muon): a chunk's capacity, where its pieces of Muon's input are gathered */
  float *muon_chunk;
  unsigned char *muon_in; /* per chunk: whether it holds one of Muon's tensors */
} colo_zero_t;

/* chunk_floats: the chunks' capacity (memory.chunk_mib), 0 to search for the least padding.
 * pool: where stage 2 allocates gradient pieces and chunk buffers (their bytes count there). */
int colo_zero_init(colo_zero_t *z, colo_comm_t *comm, int stage, size_t chunk_floats,
                   colo_gpt_t *model, colo_pool_t *pool, char *err, size_t errlen);

/* Places the pieces (after init, before the optimizer is made: its moments on the device are
 * colo_zero_optim_numel's). NULL, or every fraction 1 and NVMe 0: everything on the device.
 * The NVMe file is made and unlinked at once, so a rank that dies leaves nothing behind. */
int colo_zero_place(colo_zero_t *z, const colo_placement_t *pl, char *err, size_t errlen);

/* Where this rank's pieces are, counted: chunks by home, and the bytes off the device. */
typedef struct {
  size_t chunks, param_device, optim_device, optim_nvme; /* chunks whose pieces are there */
  size_t host_bytes, nvme_bytes; /* parameter and moment pieces in host memory, on NVMe */
} colo_placed_t;
void colo_zero_placed(const colo_zero_t *z, colo_placed_t *out);

/* Automatic placement (memory.placement=auto): a run starts with everything it may move off
 * the device (colo_zero_place with fractions 0), trains a warm-up step, and then gives this the
 * room its measured peak left on the device: pieces move onto it in execution order, the
 * parameters' first (read twice a step), then the optimizer state's, as long as they fit. */
int colo_zero_place_auto(colo_zero_t *z, colo_adamw_t *opt, size_t room, char *err, size_t errlen);

/* Stage 3's chunk cache, Gemini's eviction within a step: a gathered chunk stays on the device
 * after its last release while the pool holds at most `watermark` bytes, so that its next fetch
 * (the backward's, the next layer's in the same chunk, the next micro-batch's) copies and gathers
 * nothing. When room is needed, by an allocation that would pass the watermark or that the
 * device refuses, kept chunks are freed, the one whose next use is furthest first (by the
 * previous round's order of uses; never used again: first). The optimizer step frees them all,
 * as their parameters change. Training is the same bit for bit. watermark 0: off. */
void colo_zero_cache(colo_zero_t *z, size_t watermark);
void colo_zero_take_stats(colo_zero_t *z, colo_fetch_stats_t *out);

/* Stages 2 and 3: installs the model hooks, once the parameters are initialised or loaded
 * (stage 3 takes its pieces from them and frees the model's full copy). */
int colo_zero_attach(colo_zero_t *z, char *err, size_t errlen);
/* Stage 3 with a model made without parameters (colo_gpt_stage_t.no_params): the pieces come
 * from `pieces`, host memory of shard_n floats laid out as colo_zero_keep fills it. A frozen
 * model whose values are all exact in the backend's 16-bit activation type (the Hub's BF16
 * weights under bf16) keeps its pieces in that type, half the bytes, the group agreeing: a
 * fetch gathers them so and widens the chunk to fp32, the same values. */
int colo_zero_attach_from(colo_zero_t *z, const float *pieces, char *err, size_t errlen);

/* After an optimizer step that changed none of the model's parameters (a frozen model's: the
 * adapters' step): this step's order of fetches becomes the one the chunk cache evicts by, and
 * the chunks it keeps stay (colo_zero_step ends a step of the model's own). */
void colo_zero_end_step(colo_zero_t *z);

/* Before each step's first backward: clears the stage 2 gradient pieces. */
void colo_zero_zero_grads(colo_zero_t *z);

/* Under tensor parallelism: the group over which split tensors' norms are summed (replicated
 * tensors count once). */
void colo_zero_set_tp(colo_zero_t *z, colo_comm_t *tp);

/* The global gradient norm, over the group (the clipping factor is colo_clip_factor's). */
int colo_zero_grad_norm(colo_zero_t *z, const colo_backend_t *be, float *norm);
void colo_zero_free(colo_zero_t *z);

/* How many floats each of the optimizer's m and v holds on this rank, in the backend's memory
 * (pieces placed in host memory or on NVMe are the placement's). */
size_t colo_zero_optim_numel(const colo_zero_t *z, const colo_gpt_t *model);

/* Sums the gradients over the group, chunk by chunk. */
int colo_zero_reduce_grads(colo_zero_t *z, colo_gpt_t *model);

/* Muon (opt's cfg.muon), at every stage, after the placement: the second moments of Muon's
 * matrices (this rank's offsets of them, where its optimizer state is on the device) dropped from
 * opt's v (colo_adamw_drop_v; placement's moves lay v out anew). At stages 1 to 3 also a chunk's
 * buffer from the pool: each rank makes the update's input (muon.h's u) for its piece of a chunk
 * from its piece of the momentum (by the CPU where the piece's optimizer state is in host memory
 * or on NVMe), the chunk's pieces are all-gathered into it, and each rank orthogonalizes the
 * matrices its piece touches (whole: a tensor never straddles chunks) on the device and applies
 * its piece (by the CPU to parameters in host memory): an all-gather a chunk that holds one of
 * Muon's tensors, and the same update as stage 0's. */
int colo_zero_muon(colo_zero_t *z, colo_adamw_t *opt, char *err, size_t errlen);

/* One AdamW (and Muon) update of this rank's share, then (stage 1) the all-gather of the
 * parameters. */
int colo_zero_step(colo_zero_t *z, colo_adamw_t *opt, const colo_backend_t *be, colo_gpt_t *model,
                   float lr, float grad_scale);

/* Loading a checkpoint into the pieces: colo_zero_keep copies the part of flat range
 * [off, off + n) (values v) that this rank owns into `pieces`, host memory of shard_n floats laid
 * out as the rank's pieces; colo_zero_take_moments then puts such pieces of m and v where the
 * optimizer keeps them (the device, host memory or NVMe). */
void colo_zero_keep(const colo_zero_t *z, size_t off, const float *v, size_t n, float *pieces);
/* The part [*lo, *hi) of flat range [off, off + n), relative to off, that this rank's pieces
 * hold (one run: a tensor lies in one chunk); *lo = *hi = 0 when none. */
void colo_zero_owned(const colo_zero_t *z, size_t off, size_t n, size_t *lo, size_t *hi);
int colo_zero_take_moments(colo_zero_t *z, colo_adamw_t *opt, const float *piece_m,
                           const float *piece_v);

/* Chunk k's piece of this rank, its flat range [*lo, *hi), in host memory, for a checkpoint:
 * its parameters (what 0; below stage 3 the model's own), first (1) or second (2) moments. Where
 * it lives when that is host memory, else a copy in the host scratch, valid until the next call.
 * NULL when it failed (colo_zero_error says why). */
const float *colo_zero_piece_host(colo_zero_t *z, const colo_adamw_t *opt, size_t k, int what,
                                  size_t *lo, size_t *hi);

/* Parameters from `pieces`, host memory of this rank's pieces laid out as colo_zero_keep's (of a
 * fp32 model, stages 1 to 3): at stage 3 written into its pieces where they live (the chunk
 * cache dropped), at stages 1 and 2 all-gathered into the model's whole parameters, every rank
 * of the group calling it. The weights' moving average is evaluated so, and put back. */
int colo_zero_put_params(colo_zero_t *z, const float *pieces);

/* Why the last call that failed did: the NVMe file's error, or the communicator's. */
const char *colo_zero_error(const colo_zero_t *z);

#endif
