/* Deterministic random numbers: xoshiro256** seeded through splitmix64, and a stateless hash
 * for values that must depend only on their coordinates (data sampling by seed, step, rank).
 * Same seed, same sequence, on every machine and thread count. */
#ifndef COLO_RNG_H
#define COLO_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t s[4];
} colo_rng_t;

void colo_rng_seed(colo_rng_t *r, uint64_t seed);
uint64_t colo_rng_u64(colo_rng_t *r);
/* uniform in [0, 1) with 24 random bits */
float colo_rng_uniform(colo_rng_t *r);
/* standard normal (Box–Muller, both values used in turn would need state: one per call) */
float colo_rng_normal(colo_rng_t *r);

/* out[k] = std · a standard normal, for k < n: the values of (seed, stream) alone, the same on
 * every machine and thread count. Blocks of COLO_RNG_BLOCK values have generators of their own
 * (seeded by colo_hash4(seed, stream, block, 0)), each draw of Box–Muller gives two values (cos
 * and sin), and the blocks are drawn in parallel (OpenMP): a model's initial weights in a
 * fraction of a sequential stream's time. */
enum { COLO_RNG_BLOCK = 1 << 16 };
void colo_rng_normals(uint64_t seed, uint64_t stream, float *out, size_t n, float std);

/* A well-mixed 64-bit function of four words (splitmix64 finaliser chained). */
uint64_t colo_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* Dropout masks that depend on their coordinates alone, the same in every backend (the CUDA
 * kernel includes this): element (row, col) of the mask keyed by key survives when the top 24
 * bits of splitmix64's output number row·2³² + col from state key are at least thresh (dropout
 * probability p: thresh = p · 2²⁴, truncated). */
#ifdef __CUDACC__
#define COLO_HOST_DEVICE __host__ __device__
#else
#define COLO_HOST_DEVICE
#endif
static inline COLO_HOST_DEVICE uint32_t colo_cell_u24(uint64_t key, uint64_t row, uint64_t col) {
  uint64_t z = key + ((row << 32) + col + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) >> 40);
}
static inline COLO_HOST_DEVICE int colo_dropout_keep(uint64_t key, uint64_t row, uint64_t col,
                                                     uint32_t thresh) {
  return colo_cell_u24(key, row, col) >= thresh;
}

/* NEFTune's noise (Jain et al. 2023) for element (row, col) keyed by key: mag · (2u − 1), u =
 * colo_cell_u24's 24 bits / 2²⁴ (the dropout masks' numbers, so exact in fp32), the product
 * rounded before it is added (colo_noise_add; the CUDA kernel rounds alike). Uniform in
 * [−mag, mag). */
static inline COLO_HOST_DEVICE float colo_noise_unit(uint64_t key, uint64_t row, uint64_t col) {
  return 2.0f * ((float)colo_cell_u24(key, row, col) * (1.0f / 16777216.0f)) - 1.0f;
}
#ifndef __CUDACC__
/* x[n][c] += mag · colo_noise_unit(key, row0 + n, c), for n < N, c < C (host, fp32) */
void colo_noise_add(float *x, int N, int C, uint64_t key, uint64_t row0, float mag);

/* The rows of masks and noise keyed by a row's number, under context parallelism: a rank's rows
 * are runs of `piece` tokens of sequences of `seq`, its own from token `off` of each (piece 0:
 * the batch's rows in order). Row n of the rank's is the batch's row *row, and the run it begins
 * holds the returned number of rows (at most `left`), numbered on from it. */
static inline size_t colo_piece_run(size_t n, size_t left, size_t piece, size_t seq, size_t off,
                                    uint64_t *row) {
  if (!piece) {
    *row = n;
    return left;
  }
  *row = (uint64_t)(n / piece * seq + off + n % piece);
  size_t run = piece - n % piece;
  return run < left ? run : left;
}
#endif

#endif
