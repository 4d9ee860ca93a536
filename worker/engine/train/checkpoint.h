/* Checkpoints: a directory step_NNNNNNNN/ with one safetensors file per rank
 * (rank_RRRRR.safetensors: parameters under HuggingFace GPT-2 names, and the AdamW moments as
 * optimizer.exp_avg.<name> and optimizer.exp_avg_sq.<name>) and manifest.json (step, model,
 * mesh, data position, RNG, optimizer step, loss scale, size and sha256 of every file).
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
#include "../optim/adamw.h"

typedef struct {
  uint64_t step;       /* optimizer steps done */
  uint64_t seed;       /* data sampling and initialisation seed */
  int adam_t;          /* AdamW updates done */
  float loss_scale;    /* the dynamic loss scale; 1 without loss scaling */
  int loss_scale_good; /* clean steps since the scale last changed */
  colo_gpt_config_t model;
  int dp, tp, pp, world;
} colo_ckpt_meta_t;

/* Saves into root/step_NNNNNNNN (root is created if needed); path_out gets that directory.
 * Tensors are written whole, in the model's full table (colo_gpt_full_table): params and the
 * optimizer's m and v are flat buffers of the whole model (params NULL: the model's own, which
 * is whole when it is not split). */
int colo_ckpt_save(const char *root, const colo_ckpt_meta_t *meta, colo_gpt_t *model,
                   const float *params, const colo_adamw_t *opt, int rank, char *path_out,
                   size_t path_len, char *err, size_t errlen);

/* Reads and checks manifest.json only. */
int colo_ckpt_read_meta(const char *dir, colo_ckpt_meta_t *meta, char *err, size_t errlen);

/* Verifies every file, then loads the whole model's parameters into params (NULL: the model's
 * own buffer, for a model that is not split) and, when opt is not NULL, whole moments into its m
 * and v, and its step. The model's shape must match the manifest. */
int colo_ckpt_load(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                   colo_adamw_t *opt, int rank, char *err, size_t errlen);

/* Initial weights for a fresh run (train.init_from), into params as colo_ckpt_load does:
 *   - a checkpoint directory: its parameters, verified (not its moments, step or data position);
 *   - a safetensors file of GPT-2 under HuggingFace's names, with or without the "transformer."
 *     prefix (GPT2Model's file as the Hub has it, GPT2LMHeadModel's, or colo's own), in F32,
 *     F16 or BF16. Its model must be this one (layers, width, vocab and block; the head count is
 *     not in the file), lm_head.weight if present must equal wte.weight (GPT-2 ties them), and
 *     the attention-mask buffers of older files are skipped; any other tensor is an error. */
int colo_ckpt_load_weights(const char *path, colo_gpt_t *model, float *params, char *err,
                           size_t errlen);

/* The newest checkpoint under root that verifies; the ones that do not are skipped and named
 * in `skipped` (may be NULL). COLO_ENOENT when there is none. */
int colo_ckpt_find_latest(const char *root, char *out, size_t out_len, char *skipped,
                          size_t skipped_len);

/* Keeps the `keep` newest checkpoints under root that have a manifest (and anything newer than
 * the oldest of them) and removes the older ones; *removed says how many. keep <= 0 keeps all. */
int colo_ckpt_prune(const char *root, int keep, int *removed);

/* Removes the checkpoints under root newer than `step`: after a resume from `step` they belong
 * to a line of training that will not continue (or did not verify). Returns how many, named in
 * `removed`. */
int colo_ckpt_drop_after(const char *root, uint64_t step, char *removed, size_t removed_len);

/* One F32 tensor for colo_safetensors_write. */
typedef struct {
  const char *name;
  const float *data;
  int ndim;
  int shape[2];
  size_t numel;
} colo_st_tensor_t;

/* Writes tensors as a safetensors file (F32, data 8-byte aligned) and fsyncs it. */
int colo_safetensors_write(const char *path, const colo_st_tensor_t *t, size_t n, char *err,
                           size_t errlen);

/* sha256 of a file as 64 hex characters; also its size. */
int colo_sha256_file(const char *path, char hex[65], uint64_t *bytes);

#endif
