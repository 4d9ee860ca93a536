/* Chunks: parameters packed in execution order into equal-capacity chunks, the unit ZeRO
 * shards and communicates. A tensor never straddles two chunks; a tensor larger than the chunk
 * capacity gets a chunk of its own, rounded up. Every capacity is a multiple of the
 * data-parallel degree, so each of the dp ranks owns an equal piece of every chunk.
 *
 * The capacity is searched to waste the least memory (padding): among sizes from the largest
 * tensor down to 1/64 of it, the one whose packing has the least total padding, ties to the
 * larger size (fewer, larger messages). */
#ifndef COLO_CHUNKS_H
#define COLO_CHUNKS_H

#include <stddef.h>

#include "../model/gpt.h"

typedef struct {
  size_t lo, hi;   /* the flat parameter range it holds */
  size_t capacity; /* padded size, a multiple of dp */
} colo_chunk_t;

typedef struct {
  colo_chunk_t *chunks;
  size_t n;
  size_t capacity; /* the chosen chunk capacity */
  size_t waste;    /* Σ capacity − parameters */
  int dp;
} colo_chunks_t;

/* capacity > 0: chunks of that many floats (memory.chunk_mib), rounded up to a multiple of dp,
 * with no search; a larger tensor still gets a chunk of its own. */
int colo_chunks_plan(const colo_param_t *table, size_t nt, int dp, size_t capacity,
                     colo_chunks_t *out);
void colo_chunks_free(colo_chunks_t *c);

/* This rank's piece of chunk k: the flat range [lo, hi) it owns (possibly empty where the piece
 * falls in the padding), and the piece length (capacity / dp). */
void colo_chunk_piece(const colo_chunks_t *c, size_t k, int rank, size_t *lo, size_t *hi,
                      size_t *piece);

#endif
