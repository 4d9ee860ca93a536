/* Checkpoints: a directory step_NNNNNNNN/ with a safetensors file per shard writer
 * (rank_RRRRR.safetensors: its parameters under HuggingFace GPT-2 names, and the AdamW moments
 * as optimizer.exp_avg.<name> and optimizer.exp_avg_sq.<name>; under ZeRO, slices of them as
 * <name>@<first element>) and manifest.json (step, model, mesh, data position, RNG, optimizer
 * step, loss scale, size, sha256 and mesh place of every file). A DPO run with a precomputed
 * reference adds dpo_reference.safetensors, listed among the files with "kind": "dpo_reference"
 * (not a shard of the model).
 *
 * The manifest is written last; the directory is built under a temporary name, every file and
 * the directory are fsync'd, then it is renamed into place. A directory without a valid manifest
 * is not a checkpoint. Loading verifies every file's size and sha256 first and refuses a
 * mismatch with a message naming the file.
 */
#ifndef COLO_CHECKPOINT_H
#define COLO_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "../model/gpt.h"
#include "../model/lora.h"
#include "../optim/adamw.h"
#include "../optim/spike.h"
#include "safetensors.h"

typedef struct {
  uint64_t step; /* optimizer steps done */
  uint64_t seed; /* data sampling and initialisation seed */
  int adam_t;    /* AdamW updates done */
  /* optimizer.name: muon (manifest "optimizer": {"kind": "muon", "momentum"}): the first moments
   * of the blocks' weight matrices are Muon's momentum, their second moments zero */
  int muon;
  float muon_momentum;
  float loss_scale;    /* the dynamic loss scale; 1 without loss scaling */
  int loss_scale_good; /* clean steps since the scale last changed */
  colo_gpt_config_t model;
  int dp, tp, pp, world;
  int zero;       /* the ZeRO stage it was saved under: > 0, a file per data-parallel rank */
  int asked;      /* written because it was asked for (SIGUSR1, CheckpointJob): kept by
                   * colo_ckpt_prune, which counts and removes only the others */
  float val_loss; /* the validation loss measured at its step; NaN: none was */
  /* has_score: train.best_metric's score (score_name, say "hs.acc_norm") measured at its step,
   * which ranks it, higher better, in place of val_loss */
  int has_score;
  float score;
  char score_name[80];
  /* early stopping (train.early_stop_patience), when es_kept: the lowest validation loss so far,
   * its step, and the evaluations since it */
  int es_kept;
  float es_best;
  int es_best_step, es_since;
  /* skipping spikes (optimizer.skip_spike_sigma), when spike_kept: the history it judges by */
  int spike_kept;
  colo_spike_t spike;
  /* documents (data.document_token), when documents: the token that begins each; a run that
   * evaluates the checkpoint attends within them as its training did */
  int documents, document_token;
  /* LoRA (lora.rank > 0): the checkpoint holds the adapters and their moments alone; the frozen
   * model is lora_base's weights (a path as the run's train.init_from named it), or, that empty,
   * the seed's initialisation */
  colo_lora_config_t lora;
  char lora_base[1024];
  /* DPO with a precomputed reference (train.dpo_beta): the checkpoint holds its table of the
   * reference's log-probabilities (colo_ckpt_write_dpo), listed in the manifest */
  int dpo_reference;
  /* the weights' exponential moving average (train.ema_decay; manifest "ema"), when ema_updates
   * (how many steps it has averaged) > 0: tensors ema.<name>, laid out as the parameters */
  float ema_decay;
  uint64_t ema_updates;
} colo_ckpt_meta_t;

/* The kinds of values a checkpoint holds for each of the model's elements: the parameters, the
 * first and second moments, and the weights' moving average. */
enum { COLO_CKPT_PARAMS, COLO_CKPT_M, COLO_CKPT_V, COLO_CKPT_EMA, COLO_CKPT_KINDS };

/* Ranges of the model's flat layout that a file holds, for colo_ckpt_write_tensors (a ZeRO
 * rank's pieces, or whole chunks): n ranges [lo[r], hi[r]), the kinds of each (bit j: kind j,
 * 0 the parameters, 1 the first moments, 2 the second, 3 the moving average), and read(ctx, r, j)
 * giving host floats
 * of range r's kind j, valid until the next call; NULL when it failed, with the reason in err.
 * No two ranges hold the same kind of an element. */
typedef struct {
  size_t n;
  const size_t *lo, *hi;
  const unsigned char *kinds;
  const float *(*read)(void *ctx, size_t r, int what, char *err, size_t errlen);
  void *ctx;
  /* optimizer.name: muon: the second moments of Muon's tensors (zero) are not written; loading
   * a checkpoint whose manifest says "muon" gives them zeros */
  int muon;
} colo_ckpt_pieces_t;

/* Saving is done by the ranks together, in three calls with a barrier of the world between each
 * (train.c): rank 0 begins (a fresh root/.step_NNNNNNNN.tmp), every shard writer writes its
 * file into it, rank 0 commits (the manifest with every file's size, sha256 and place, written
 * last, fsync'd, the directory renamed to step_NNNNNNNN). The shard writers of pipeline stage s
 * and tensor-parallel rank t are its data-parallel ranks d: world rank (s·dp + d)·tp + t, whose
 * file is rank_<world rank>.safetensors. Without ZeRO, d = 0 alone writes its parameters and
 * moments whole. Under ZeRO every d writes the slices of its own pieces, nothing gathered: d = 0
 * also the whole parameters at stages 1 and 2, every d its pieces of them at stage 3. At
 * pp = tp = dp = 1 that is one file of whole tensors, which HuggingFace's GPT-2 reads as it is. */
int colo_ckpt_begin(const char *root, uint64_t step, char *err, size_t errlen);
/* A shard writer's file, colo_ckpt_write_tensors's in the checkpoint being made. */
int colo_ckpt_write_shard(const char *root, uint64_t step, colo_gpt_t *model, const float *params,
                          const float *m, const float *v, const colo_ckpt_pieces_t *pieces,
                          int rank, char *err, size_t errlen);
/* One safetensors file at path of this rank's tensors as its model holds them (its stage's, its
 * tensor-parallel shapes; the last stage's copy of the tied embedding left out): the whole
 * parameters from params, moments from m and v (each NULL: not written), then the parts of
 * `pieces` (NULL: none), each tensor's part under `<name>@<first element>` as a 1-D slice, or
 * under its own name when the piece holds all of it. The loader puts slices back together from
 * the files of a place. Written piece by piece, so a GPU's pieces pass through host memory a
 * chunk at a time. */
int colo_ckpt_write_tensors(const char *path, colo_gpt_t *model, const float *params,
                            const float *m, const float *v, const colo_ckpt_pieces_t *pieces,
                            char *err, size_t errlen);
/* The directory of step `step`'s checkpoint under root: root/step_NNNNNNNN. */
void colo_ckpt_step_dir(const char *root, uint64_t step, char *out, size_t len);

/* path_out gets the checkpoint's directory. A missing shard fails it, and removes the
 * temporary directory. */
int colo_ckpt_commit(const char *root, const colo_ckpt_meta_t *meta, char *path_out,
                     size_t path_len, char *err, size_t errlen);
/* Removes what an unfinished save left. */
void colo_ckpt_abandon(const char *root, uint64_t step);

/* Reads and checks manifest.json only. */
int colo_ckpt_read_meta(const char *dir, colo_ckpt_meta_t *meta, char *err, size_t errlen);

/* Checks the manifest, then loads this rank's parameters, as its model holds them (its stage's
 * tensors, its tensor-parallel shards), into params (NULL: the model's own buffer) and, when opt
 * is not NULL, its moments into opt's m and v of the same layout, and AdamW's step: from shards
 * of any other mesh, each tensor reassembled from its shards and cut to this rank's. Each file it
 * reads is checked against its size and sha256 in the manifest first (a rank reads only its
 * stage's shards). The model's shape must match the manifest. A failure may leave the buffers
 * partly loaded. */
int colo_ckpt_load(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                   colo_adamw_t *opt, char *err, size_t errlen);

/* Where colo_ckpt_load_to puts what it loads: put(ctx, what, off, v, n) takes the n floats of
 * one tensor of kind `what` (COLO_CKPT_*: the parameters, moments or moving average) at offset off
 * of the model's flat layout, for each kind whose bit is set in `kinds`. So that a rank that
 * keeps a part of them (ZeRO's pieces, a GPU's memory) never holds them whole. */
typedef struct {
  int kinds;
  void (*put)(void *ctx, int what, size_t off, const float *v, size_t n);
  /* NULL: every element; else narrows [*lo, *hi) (first 0, n) to the part of the tensor of n
   * floats at off that it takes (*lo >= *hi: none), and only that part is read, under the same
   * tensor-parallel split from the files' pages that hold it (a ZeRO rank resuming its own
   * pieces reads its own) */
  void (*want)(void *ctx, int what, size_t off, size_t n, size_t *lo, size_t *hi);
  void *ctx;
} colo_ckpt_sink_t;
/* The checkpoint's moving average of its weights (train.ema_decay) into params (NULL: the
 * model's own buffer) as colo_ckpt_load puts its parameters; COLO_EINVAL when it has none. */
int colo_ckpt_load_ema(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                       char *err, size_t errlen);

/* colo_ckpt_load's work, into a sink (meta->adam_t is AdamW's step). */
int colo_ckpt_load_to(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model,
                      const colo_ckpt_sink_t *sink, char *err, size_t errlen);

/* Initial weights for a fresh run (train.init_from), into params as colo_ckpt_load does:
 *   - a checkpoint directory: its parameters, verified (not its moments, step or data position);
 *   - a safetensors file of GPT-2 under HuggingFace's names, with or without the "transformer."
 *     prefix (GPT2Model's file as the Hub has it, GPT2LMHeadModel's, or colo's own), in F32,
 *     F16 or BF16. Its model must be this one (layers, width, vocab and block; the head count is
 *     not in the file), lm_head.weight if present must equal wte.weight (GPT-2 ties them), and
 *     the attention-mask buffers of older files are skipped; any other tensor is an error;
 *   - for a llama model, HuggingFace's Llama layout (colo_hf_read_llama). */
int colo_ckpt_load_weights(const char *path, colo_gpt_t *model, float *params, char *err,
                           size_t errlen);
/* The same, a tensor at a time into a sink (its parameters: kind 0; the part sink->want narrows
 * each tensor to), so that a rank that keeps a part (ZeRO-3's pieces) never holds them whole. */
int colo_ckpt_load_weights_to(const char *path, colo_gpt_t *model, const colo_ckpt_sink_t *sink,
                              char *err, size_t errlen);

/* The checkpoint at `step` under root, when it is complete and verifies (as
 * colo_ckpt_find_latest's): its directory in out; else < 0 and why in err. */
int colo_ckpt_find_step(const char *root, uint64_t step, char *out, size_t out_len, char *err,
                        size_t errlen);
/* The newest checkpoint under root that verifies; the ones that do not are skipped and named
 * in `skipped` (may be NULL). COLO_ENOENT when there is none. */
int colo_ckpt_find_latest(const char *root, char *out, size_t out_len, char *skipped,
                          size_t skipped_len);
/* The best checkpoint under root by what its manifest records (colo_ckpt_rank: the highest score,
 * else the lowest validation loss; the newest of equals) that verifies, as
 * colo_ckpt_find_latest; COLO_ENOENT when none records one or none of those verifies. */
int colo_ckpt_find_best(const char *root, char *out, size_t out_len, char *skipped,
                        size_t skipped_len);
/* What ranks a checkpoint, lower better: minus its score when it records one (the run's
 * train.best_metric), else its validation loss; NaN: neither (it is not ranked). */
float colo_ckpt_rank(const colo_ckpt_meta_t *meta);
/* The `want` newest checkpoints under root that verify, oldest first: their directories in dirs
 * and their steps in steps; *n says how many there are (fewer when there are not so many).
 * COLO_ENOENT: root is no directory. */
int colo_ckpt_newest(const char *root, size_t want, char (*dirs)[1200], uint64_t *steps, size_t *n);

/* Keeps the `keep` newest checkpoints under root that have a manifest (and anything newer than
 * the oldest of them), those written as asked, and with keep_best the best by what its manifest
 * records (colo_ckpt_rank; the newest of equals); removes the others. *removed says how many.
 * keep <= 0 keeps all. */
int colo_ckpt_prune(const char *root, int keep, int keep_best, int *removed);

/* Removes the checkpoints under root newer than `step`: after a resume from `step` they belong
 * to a line of training that will not continue (or did not verify). Returns how many, named in
 * `removed`. */
int colo_ckpt_drop_after(const char *root, uint64_t step, char *removed, size_t removed_len);

/* A LoRA run's file in the checkpoint being made (rank_00000.safetensors): the adapters from p,
 * their moments from m and v (host floats in l's table layout), under the table's names and
 * optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>. */
int colo_ckpt_write_lora(const char *root, uint64_t step, const colo_lora_t *l, const float *p,
                         const float *m, const float *v, char *err, size_t errlen);
/* Checks the manifest and its files, that the checkpoint is a LoRA run's of l's rank, alpha,
 * targets, rsLoRA and DoRA (on meta->model) and, with same_model (a resume), that it kept its
 * frozen model as l's does (NF4 or not), then reads the adapters into p and, when m and v are
 * not NULL, their moments (host floats in l's table layout): a pipeline stage's its own tensors,
 * a tensor-parallel rank's its parts of them. */
int colo_ckpt_load_lora(const char *dir, colo_ckpt_meta_t *meta, const colo_lora_t *l, float *p,
                        float *m, float *v, int same_model, char *err, size_t errlen);

/* DPO's precomputed reference (train.dpo_beta): each set's table of the reference's
 * log-probabilities of its pairs, (chosen, rejected) as pairs[i] x 2 floats, under names[i]
 * ("train", "val.K"), in dpo_reference.safetensors of the checkpoint being made; written by rank
 * 0 before colo_ckpt_commit, which lists it in the manifest when meta->dpo_reference is set. */
int colo_ckpt_write_dpo(const char *root, uint64_t step, const char *const *names,
                        const float *const *tables, const size_t *pairs, int n, char *err,
                        size_t errlen);
/* Reads table `name` of a checkpoint's DPO reference (verified against the manifest first) into
 * dst, which takes `pairs` x 2 floats: COLO_ENOENT when the checkpoint has none, COLO_EINVAL when
 * it holds another number of pairs, each with a message. */
int colo_ckpt_read_dpo(const char *dir, const char *name, float *dst, size_t pairs, char *err,
                       size_t errlen);

/* sha256 of a file as 64 hex characters; also its size. */
int colo_sha256_file(const char *path, char hex[65], uint64_t *bytes);

#endif
