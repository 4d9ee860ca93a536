/* Token data: llm.c's shard formats (a 256 × int32 header: magic, version, token count; then
 * the tokens: GPT-2's magic 20240520, version 1, uint16 tokens; Llama 3's 20240801, version 7,
 * uint32 tokens, for vocabularies past 65,536), and a batch sampler that depends only on
 * (seed, step, micro-step, rank, world): data parallelism and exact resume need no loader state. */
#ifndef COLO_DATA_H
#define COLO_DATA_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include <glob.h>

#include "../../../common/jobspec.h" /* COLO_BLEND_SLOTS, COLO_MAX_SOURCES */

#define COLO_SHARD_MAGIC       20240520
#define COLO_SHARD_VERSION     1
#define COLO_SHARD_MAGIC_U32   20240801 /* llm.c's Llama 3 shards */
#define COLO_SHARD_VERSION_U32 7
#define COLO_SHARD_HEADER_INTS 256
/* colo's shards with a loss mask (supervised fine-tuning): the same header with this magic,
 * version 1, the token count, then the token width in bytes (2 or 4); the tokens; then a bit a
 * token (ceil(n / 8) bytes, token i in bit i % 8 of byte i / 8), set where the token counts as
 * a target of the loss. A distinct magic: llm.c's readers refuse it rather than train on the
 * prompts. */
#define COLO_SHARD_MAGIC_MASKED   20261125
#define COLO_SHARD_VERSION_MASKED 1
/* colo's preference shards (DPO, `colo-train prepare --chosen-field --rejected-field`): the
 * masked layout, with the number of sequences S in the header's fifth int, and after the mask,
 * zero bytes to a multiple of 8, then S uint64 offsets where the sequences begin (the first 0,
 * ascending; the last runs to the end of the tokens). Sequences 2i and 2i + 1 are pair i's
 * chosen and rejected answers, each [document token] prompt answer [end], the answer and its
 * end counting as targets. */
#define COLO_SHARD_MAGIC_PAIRS   20261128
#define COLO_SHARD_VERSION_PAIRS 1
/* colo's multiple-choice shards (`colo-train prepare --context-field --endings-field
 * --label-field`: HellaSwag's questions, or any set of questions each with one right answer among
 * several): the preference shard's layout, with the number of sequences S in the header's fifth
 * int and of questions Q in its sixth; after the sequences' starts, Q pairs of uint32 (the
 * question's number of choices K >= 2, and the right one's number, below K), question q's
 * sequences the K after question q - 1's; then S uint32, each ending's length in characters
 * (Unicode code points: lm-evaluation-harness's acc_norm divides by it). A sequence is a context
 * and one of its endings, the ending's tokens counting as targets. */
#define COLO_SHARD_MAGIC_CHOICES   20261129
#define COLO_SHARD_VERSION_CHOICES 1

/* One shard file, mapped read-only (ranks of a node share its pages). */
typedef struct {
  const void *tokens;  /* uint16, or uint32 when wide */
  const uint8_t *mask; /* a bit a token, set where it counts as a target; NULL: all count */
  const uint64_t *seq; /* a preference or choice shard's sequence starts, n_seq of them */
  size_t n_seq;
  const uint32_t *quest; /* a choice shard's questions: (choices, right one) each; else NULL */
  size_t n_quest;
  const uint32_t *chars; /* a choice shard's endings' lengths in characters, n_seq of them */
  int wide;
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
      *windows;   /* [n_files + 1]: windows of block_size T before each file (colo_shard_windows) */
  size_t *blocks; /* [n_files + 1]: the same for windows that do not overlap (data.order shuffle) */
  int T;
  int masked; /* some file has a loss mask */
  int pairs;  /* every file is a preference shard; n_pairs of them in all */
  size_t n_pairs;
  int choices;     /* a file is a multiple-choice shard (colo_choices_open takes one alone) */
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
/* The same for the file at path: COLO_ENOENT when there is none, COLO_EIO naming why else. */
int colo_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen);

/* Maps a shard, or with *, ? or [ in path every file the pattern matches (glob(3); none is
 * COLO_ENOENT). Refuses a bad magic, version or a token count a file does not hold, with the
 * file named in err. */
int colo_shard_load(const char *path, colo_shard_t *out, char *err, size_t errlen);
void colo_shard_free(colo_shard_t *s);
/* Counts the windows of T + 1 tokens for sampling, at any offset and (blocks) at multiples of T;
 * a file of T + 1 tokens or fewer has none. COLO_EINVAL when no file has one. */
int colo_shard_windows(colo_shard_t *s, int T, char *err, size_t errlen);
/* The first token >= limit, as its file and index there; 0 when there is none. */
int colo_shard_find_above(const colo_shard_t *s, unsigned limit, const char **file, size_t *at,
                          unsigned *token);
/* Whether some file holds the token (the scan stops at the first). */
int colo_shard_has(const colo_shard_t *s, unsigned token);
/* token i of a file */
static inline unsigned colo_shard_token(const colo_shard_file_t *f, size_t i) {
  return f->wide ? ((const uint32_t *)f->tokens)[i] : ((const uint16_t *)f->tokens)[i];
}

/* whether token i of a file counts as a target of the loss */
static inline int colo_shard_counts(const colo_shard_file_t *f, size_t i) {
  return !f->mask || (f->mask[i >> 3] >> (i & 7) & 1);
}

/* Writes tokens as a (uint16) shard atomically (temporary name, fsync, rename). */
int colo_shard_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen);

/* Targets are token ids, or -1 where the token does not count (a masked shard's prompt): the
 * loss leaves those out, and takes its mean over the targets that count. */

/* Fills inputs[B][T] and targets[B][T] with the windows for (seed, step, micro, rank, world):
 * sequence b of this rank is global sequence (micro·world + rank)·B + b, and its window is number
 * hash(seed, step, global) mod W of the W windows (one file of n tokens: the one starting there,
 * of n - T). Needs colo_shard_windows(s, T) first. */
void colo_sample_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int micro, int rank,
                       int world, int B, int T, int *inputs, int *targets);

/* Window w (of s->blocks[s->n_files]) of those at multiples of T, which do not overlap: an
 * evaluation of the whole set (train.eval_batches 0) reads each once. */
void colo_shard_block(const colo_shard_t *s, size_t w, int T, int *inputs, int *targets);

/* How a step's training sequences are drawn (data.order). RANDOM: each a window at any offset,
 * drawn with replacement. SHUFFLE: epochs over the windows at multiples of T, which do not
 * overlap (each window's last token is the next one's first): sequence G of the run (counted
 * across steps, micro-steps and ranks) is window π_e(G mod W) of epoch e = G / W, π_e a seeded
 * permutation drawn anew each epoch. Either depends only on (seed, step, micro, rank, world), so
 * a resumed or resized run draws what the uninterrupted one does. */
enum { COLO_ORDER_RANDOM = 1, COLO_ORDER_SHUFFLE = 2 };

/* A blend's period (COLO_BLEND_SLOTS, common/jobspec.h, which validates the weights against it):
 * its sources share each run of COLO_BLEND_SLOTS sequences in whole slots,
 * their weights rounded to them by largest remainder, in an order shuffled anew each period.
 * Source k's sequences are then counted on their own, so it goes through its epochs as if it
 * were trained on alone. */

/* The training data of a run: one data set or a blend of several. */
typedef struct {
  colo_shard_t *src;
  size_t n_src;
  uint32_t *cum; /* [n_src + 1]: slots of a period before each source */
  int order;
  int T;
} colo_blend_t;

/* Loads each path (a shard or a pattern) with its weight (weights NULL: one source), counts
 * their windows for block size T, and refuses a weight of less than 1/COLO_BLEND_SLOTS of their
 * sum. 0, or a COLO_E* code with the reason (and the source) in err. */
int colo_blend_open(colo_blend_t *b, const char *const *paths, const double *weights, size_t n,
                    int order, int T, char *err, size_t errlen);
void colo_blend_close(colo_blend_t *b);
/* colo_sample_batch over the blend, in its order: sequence b of this rank is sequence
 * ((step·accum + micro)·world + rank)·B + b of the run. One source in random order draws exactly
 * what colo_sample_batch does. */
void colo_blend_batch(const colo_blend_t *d, uint64_t seed, uint64_t step, int accum, int micro,
                      int rank, int world, int B, int *inputs, int *targets);
/* The targets that count in the step's whole batch: every micro-step's, every rank's (what
 * colo_blend_batch gives them all). Only a masked set has fewer than accum · world · B · T; it
 * is read from the masks alone, the same on every rank, so a run's loss is the mean over the
 * same targets under any layout. */
uint64_t colo_blend_counted(const colo_blend_t *d, uint64_t seed, uint64_t step, int accum,
                            int world, int B);
/* whether some source has a loss mask */
int colo_blend_masked(const colo_blend_t *d);

/* Epochs that `sequences` drawn sequences make of source k (its windows that do not overlap
 * once each, for either order) */
double colo_blend_epochs(const colo_blend_t *d, size_t k, uint64_t sequences);
/* The most epochs `sequences` make of any one source: how far the run has gone through its data */
double colo_blend_epochs_most(const colo_blend_t *d, uint64_t sequences);

/* A seeded permutation of [0, n): where x goes (a Feistel network over the bits that hold n,
 * walking the cycle back into range). */
uint64_t colo_permute(uint64_t x, uint64_t n, uint64_t key1, uint64_t key2);

/* The fixed windows of evaluation batch i (the same at every evaluation): this rank's B of the
 * world × B sequences of the batch, numbered across batches, so that a data-parallel evaluation
 * covers exactly the sequences a single process with batch world × B does, and batches × world
 * sequences are the same ones whatever the split (an elastic job's fewer ranks evaluate more
 * batches each). */
void colo_sample_eval_batch(const colo_shard_t *s, uint64_t seed, int i, int rank, int world, int B,
                            int T, int *inputs, int *targets);
/* The targets that count in evaluation batches [0, batches), all ranks' (batches 0: in every
 * window at multiples of T, what an evaluation of the whole set reads) */
uint64_t colo_eval_counted(const colo_shard_t *s, uint64_t seed, int batches, int world, int B,
                           int T);

/* Preference pairs (DPO) from a preference shard (every file one): a batch of P pairs is 2P rows,
 * pair b's chosen answer in row 2b and its rejected one in row 2b + 1, each its sequence from its
 * start (inputs its tokens, targets the next tokens where they count, -1 elsewhere), padded after
 * its end with input 0 and target -1. A sequence longer than T + 1 tokens keeps its first token
 * and loses the prompt's earliest tokens after it, so that the answer ends the window (TRL keeps
 * a prompt's end likewise); an answer of T tokens or more keeps its start (and the prompt's last
 * token) and loses its end. Pair g of the run (g = ((step·accum + micro)·world + rank)·P + b) is
 * pair π_e(g mod n) of epoch e = g / n, π_e a seeded permutation drawn anew each epoch, so that a
 * resumed or resized run reads what the uninterrupted one does. pairs (NULL: not wanted) gets
 * the P pairs' numbers in the set (0 .. n − 1, the file's order). */
void colo_pairs_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int accum, int micro,
                      int rank, int world, int P, int T, int *inputs, int *targets, size_t *pairs);
/* Evaluation batch i: pairs ((i·world + rank)·P + b) mod n, in the file's order, the same at
 * every evaluation; batches 0 (colo_pairs_eval_batches) reads each pair once. pairs as
 * colo_pairs_batch's. */
void colo_pairs_eval_batch(const colo_shard_t *s, int i, int rank, int world, int P, int T,
                           int *inputs, int *targets, size_t *pairs);
/* How many sequences of the set are longer than T + 1 tokens (cut: their prompts lose their
 * earliest tokens), and how many of those also lose their answer's end (an answer of T tokens or
 * more). */
void colo_pairs_cut(const colo_shard_t *s, int T, size_t *cut, size_t *lost);

#endif
