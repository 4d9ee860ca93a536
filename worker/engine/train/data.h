/* Token data: llm.c's shard format (a 256 × int32 header: magic 20240520, version 1, token
 * count; then uint16 tokens), and a batch sampler that depends only on
 * (seed, step, micro-step, rank, world): data parallelism and exact resume need no loader state. */
#ifndef COLO_DATA_H
#define COLO_DATA_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <glob.h>

#define COLO_SHARD_MAGIC       20240520
#define COLO_SHARD_VERSION     1
#define COLO_SHARD_HEADER_INTS 256

/* One shard file, mapped read-only (ranks of a node share its pages). */
typedef struct {
  const uint16_t *tokens;
  size_t n;
  void *map;
  size_t map_len;
  char path[1024];
} colo_shard_file_t;

/* A data set: one shard, or every file a pattern matches (llm.c's train_000001.bin, ...), in
 * name order. Training windows never straddle two files. */
typedef struct {
  colo_shard_file_t *files;
  size_t n_files;
  size_t n; /* tokens in all files */
  size_t
      *windows; /* [n_files + 1]: windows of block_size T before each file (colo_shard_windows) */
  int T;
  char path[1024]; /* as given */
} colo_shard_t;

/* The files a data path names: itself, or with *, ? or [ every file the pattern matches, in
 * name order (glob(3)); none is COLO_ENOENT, naming the pattern. `v` lives in the struct: use it
 * where it was opened. */
typedef struct {
  glob_t g;
  int pattern;
  const char *one[1];
  char *const *v;
  size_t n;
} colo_paths_t;
int colo_paths_open(colo_paths_t *p, const char *path, char *err, size_t errlen);
void colo_paths_close(colo_paths_t *p);

/* All of stream f (named what in errors) into *out, NUL-terminated, its length in *len; the
 * caller frees it. 0, or a COLO_E* code with the reason in err. */
int colo_read_all(FILE *f, const char *what, char **out, size_t *len, char *err, size_t errlen);

/* Maps a shard, or with *, ? or [ in path every file the pattern matches (glob(3); none is
 * COLO_ENOENT). Refuses a bad magic, version or a token count a file does not hold, with the
 * file named in err. */
int colo_shard_load(const char *path, colo_shard_t *out, char *err, size_t errlen);
void colo_shard_free(colo_shard_t *s);
/* Counts the windows of T + 1 tokens for sampling; a file of T + 1 tokens or fewer has none.
 * COLO_EINVAL when no file has one. */
int colo_shard_windows(colo_shard_t *s, int T, char *err, size_t errlen);
/* The first token >= limit, as its file and index there; 0 when there is none. */
int colo_shard_find_above(const colo_shard_t *s, unsigned limit, const char **file, size_t *at,
                          unsigned *token);
/* Writes tokens as a shard atomically (temporary name, fsync, rename). */
int colo_shard_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen);

/* Fills inputs[B][T] and targets[B][T] with the windows for (seed, step, micro, rank, world):
 * sequence b of this rank is global sequence (micro·world + rank)·B + b, and its window is number
 * hash(seed, step, global) mod W of the W windows (one file of n tokens: the one starting there,
 * of n - T). Needs colo_shard_windows(s, T) first. */
void colo_sample_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int micro, int rank,
                       int world, int B, int T, int *inputs, int *targets);

/* The fixed windows of evaluation batch i (the same at every evaluation): this rank's B of the
 * world × B sequences of the batch, numbered across batches, so that a data-parallel evaluation
 * covers exactly the sequences a single process with batch world × B does, and batches × world
 * sequences are the same ones whatever the split (an elastic job's fewer ranks evaluate more
 * batches each). */
void colo_sample_eval_batch(const colo_shard_t *s, uint64_t seed, int i, int rank, int world, int B,
                            int T, int *inputs, int *targets);

#endif
