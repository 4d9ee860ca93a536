/* xoshiro256** (Blackman and Vigna) with splitmix64 seeding; Box–Muller normals. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void colo_rng_seed(colo_rng_t *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++)
    r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

uint64_t colo_rng_u64(colo_rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

float colo_rng_uniform(colo_rng_t *r) {
  return (float)(colo_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

float colo_rng_normal(colo_rng_t *r) {
  /* u1 in (0, 1] so the log is finite */
  double u1 = ((double)(colo_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = (double)(colo_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void colo_rng_normals(uint64_t seed, uint64_t stream, float *out, size_t n, float std) {
  long nb = (long)((n + COLO_RNG_BLOCK - 1) / COLO_RNG_BLOCK);
#pragma omp parallel for schedule(static)
  for (long b = 0; b < nb; b++) {
    colo_rng_t r;
    colo_rng_seed(&r, colo_hash4(seed, stream, (uint64_t)b, 0));
    size_t k0 = (size_t)b * COLO_RNG_BLOCK, k1 = k0 + COLO_RNG_BLOCK < n ? k0 + COLO_RNG_BLOCK : n;
    for (size_t k = k0; k < k1; k += 2) {
      double u1 = ((double)(colo_rng_u64(&r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
      double u2 = (double)(colo_rng_u64(&r) >> 11) * (1.0 / 9007199254740992.0);
      double rad = sqrt(-2.0 * log(u1)), a = 2.0 * M_PI * u2;
      out[k] = std * (float)(rad * cos(a));
      if (k + 1 < k1)
        out[k + 1] = std * (float)(rad * sin(a));
    }
  }
}

uint64_t colo_hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t x = a;
  uint64_t h = splitmix64(&x);
  x = h ^ b;
  h = splitmix64(&x);
  x = h ^ c;
  h = splitmix64(&x);
  x = h ^ d;
  return splitmix64(&x);
}

/* built without floating-point contraction (CMakeLists.txt): the product, then the sum */
void colo_noise_add(float *x, int N, int C, uint64_t key, uint64_t row0, float mag) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > 65536)
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      float e = mag * colo_noise_unit(key, row0 + (uint64_t)n, (uint64_t)c);
      x[(size_t)n * C + c] += e;
    }
}
