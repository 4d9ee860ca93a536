/* Token data: llm.c's shard format (a 256 × int32 header: magic 20240520, version 1, token
 * count; then uint16 tokens), the byte-level tokenizer, and a batch sampler that depends only on
 * (seed, step, micro-step, rank, world): data parallelism and exact resume need no loader state. */
#ifndef COLO_DATA_H
#define COLO_DATA_H

#include <stddef.h>
#include <stdint.h>

#define COLO_SHARD_MAGIC       20240520
#define COLO_SHARD_VERSION     1
#define COLO_SHARD_HEADER_INTS 256

typedef struct {
  uint16_t *tokens;
  size_t n;
  char path[1024];
} colo_shard_t;

/* Reads a whole shard. Refuses a bad magic, version or a token count the file does not hold,
 * with the file named in err. */
int colo_shard_load(const char *path, colo_shard_t *out, char *err, size_t errlen);
void colo_shard_free(colo_shard_t *s);
/* Writes tokens as a shard atomically (temporary name, fsync, rename). */
int colo_shard_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen);

/* Tokenisation of a text file into train and val shards in out_dir (train.bin, val.bin): bytes
 * as tokens (bpe NULL) or GPT-2's BPE; the last val_fraction of the tokens is validation. */
struct colo_bpe;
int colo_prepare_text(const char *input, const char *out_dir, double val_fraction,
                      const struct colo_bpe *bpe, size_t *n_train, size_t *n_val, char *err,
                      size_t errlen);

/* Fills inputs[B][T] and targets[B][T] with the windows for (seed, step, micro, rank, world):
 * sequence b of this rank is global sequence (micro·world + rank)·B + b, and its window starts at
 * hash(seed, step, global) mod (n - T). Needs n > T. */
void colo_sample_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int micro, int rank,
                       int world, int B, int T, int *inputs, int *targets);

/* The fixed windows of evaluation batch i (the same at every evaluation): this rank's B of the
 * world × B sequences of the batch, so a data-parallel evaluation covers exactly the sequences a
 * single process with batch world × B does. */
void colo_sample_eval_batch(const colo_shard_t *s, uint64_t seed, int i, int rank, int world, int B,
                            int T, int *inputs, int *targets);

#endif
