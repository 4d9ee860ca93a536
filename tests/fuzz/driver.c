/* A deterministic mutation fuzzer for one target of tests/fuzz, for builds without libFuzzer
 * (gcc; CI runs it under AddressSanitizer and UBSan): the target's seeds, then inputs made by
 * stacking 1 to 4 random mutations (bits, bytes, integers, syntax tokens, cuts, copies and
 * splices) onto a seed, from a fixed random seed.
 *
 *   fuzz_X [--runs N] [--seconds S] [--seed R] [FILE...]   seeds from the files, then N inputs
 *   fuzz_X --replay FILE                                     one input, as it is
 *   fuzz_X --write-seeds DIR [FILE...]                       the seeds as files (libFuzzer's
 * corpus)
 *
 * A fault ends the process with the sanitizer's report (or the signal); the input that caused
 * it is first written to fuzz-crash-PID.bin in the working directory, for --replay. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

#define MAX_INPUT (64 * 1024)

typedef struct {
  uint8_t *data;
  size_t size;
} blob_t;

static blob_t *seeds;
static size_t n_seeds, cap_seeds;
static uint8_t cur[MAX_INPUT];
static size_t cur_size;
static const char *seed_dir; /* --write-seeds */

/* a token of the documents the targets read: YAML, JSON and their numbers */
static const char *const TOKENS[] = {
    ": ",         "- ",
    "{",          "}",
    "[",          "]",
    ",",          "\n",
    "  ",         "'",
    "\"",         "&a ",
    "*a",         "!!str",
    "<<: ",       "~",
    "null",       "true",
    "-1",         "0",
    "1e999",      "-1e999",
    "4294967296", "18446744073709551616",
    "nan",        ".inf",
    "0x7f",       "\\u0000",
    "..",         "/",
    "%",          "#",
    "---\n",      "...",
    "?",          "|\n",
    ">-\n",       "\t",
    "\"\\",       "[[[[",
    "{\"a\":",    "\"dtype\":",
    "\"F32\"",    "\"BF16\"",
    "\"shape\":", "\"data_offsets\":",
};

static uint64_t rng = 1;
static uint64_t next(void) { /* splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static size_t below(size_t n) {
  return n ? (size_t)(next() % n) : 0;
}

static void keep_crash(void) {
  char name[64];
  snprintf(name, sizeof name, "fuzz-crash-%d.bin", (int)getpid());
  int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t w = write(fd, cur, cur_size);
    (void)w;
    close(fd);
  }
  char msg[128];
  int n = snprintf(msg, sizeof msg, "fuzz: the input that failed is in %s (--replay it)\n", name);
  ssize_t w = write(2, msg, n > 0 && (size_t)n < sizeof msg ? (size_t)n : 0);
  (void)w;
}

static void on_signal(int sig) {
  keep_crash();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* sanitizers call this before they end the process; absent without them */
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static void add_seed(const uint8_t *data, size_t size) {
  if (size > MAX_INPUT)
    size = MAX_INPUT;
  if (seed_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%04zu", seed_dir, n_seeds);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) {
      fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
      exit(1);
    }
    fclose(f);
  }
  if (n_seeds == cap_seeds) {
    cap_seeds = cap_seeds ? 2 * cap_seeds : 16;
    seeds = realloc(seeds, cap_seeds * sizeof *seeds);
    if (!seeds)
      abort();
  }
  uint8_t *d = malloc(size ? size : 1);
  if (!d)
    abort();
  memcpy(d, data, size);
  seeds[n_seeds++] = (blob_t){d, size};
}

static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz: %s: %s\n", path, strerror(errno));
    exit(2);
  }
  uint8_t *buf = malloc(MAX_INPUT);
  if (!buf)
    abort();
  *size = fread(buf, 1, MAX_INPUT, f);
  fclose(f);
  return buf;
}

/* one random change to cur */
static void mutate(void) {
  size_t n = cur_size;
  switch (below(8)) {
  case 0: /* a bit */
    if (n)
      cur[below(n)] ^= (uint8_t)(1u << below(8));
    break;
  case 1: { /* a byte: random or a boundary */
    static const uint8_t B[] = {0, 1, 0x7f, 0x80, 0xff, '0', '9', 'a'};
    if (n)
      cur[below(n)] = below(2) ? (uint8_t)next() : B[below(sizeof B)];
    break;
  }
  case 2: { /* random bytes in */
    size_t k = 1 + below(8), at = below(n + 1);
    if (n + k > MAX_INPUT)
      break;
    memmove(cur + at + k, cur + at, n - at);
    for (size_t i = 0; i < k; i++)
      cur[at + i] = (uint8_t)next();
    cur_size += k;
    break;
  }
  case 3: { /* a cut */
    if (!n)
      break;
    size_t at = below(n), k = 1 + below(n - at < 16 ? n - at : 16);
    memmove(cur + at, cur + at + k, n - at - k);
    cur_size -= k;
    break;
  }
  case 4: { /* a copy of a range, inserted elsewhere */
    if (!n)
      break;
    size_t from = below(n), k = 1 + below(n - from < 64 ? n - from : 64), at = below(n + 1);
    if (n + k > MAX_INPUT)
      break;
    uint8_t tmp[64];
    memcpy(tmp, cur + from, k);
    memmove(cur + at + k, cur + at, n - at);
    memcpy(cur + at, tmp, k);
    cur_size += k;
    break;
  }
  case 5: { /* a token */
    const char *t = TOKENS[below(sizeof TOKENS / sizeof *TOKENS)];
    size_t k = strlen(t), at = below(n + 1);
    if (n + k > MAX_INPUT)
      break;
    memmove(cur + at + k, cur + at, n - at);
    memcpy(cur + at, t, k);
    cur_size += k;
    break;
  }
  case 6: { /* a splice: this input's head, another seed's tail */
    const blob_t *o = &seeds[below(n_seeds)];
    size_t at = below(n + 1), from = below(o->size + 1), k = o->size - from;
    if (at + k > MAX_INPUT)
      k = MAX_INPUT - at;
    memcpy(cur + at, o->data + from, k);
    cur_size = at + k;
    break;
  }
  default: { /* an integer: a length, an offset, a varint */
    static const uint64_t V[] = {
        0,         1,          0x7f,       0x80,       0xff,
        0xffff,    0x7fffffff, 0x80000000, 0xffffffff, 0x7fffffffffffffffull,
        UINT64_MAX};
    size_t w = (size_t)1 << below(4);
    if (n < w)
      break;
    uint64_t v = V[below(sizeof V / sizeof *V)];
    memcpy(cur + below(n - w + 1), &v, w);
    break;
  }
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void run(const uint8_t *data, size_t size) {
  if (data != cur) {
    memcpy(cur, data, size);
    cur_size = size;
  }
  /* the target gets its own copy, exactly sized, so that a read past the end is caught */
  uint8_t *in = malloc(cur_size ? cur_size : 1);
  if (!in)
    abort();
  memcpy(in, cur, cur_size);
  LLVMFuzzerTestOneInput(in, cur_size);
  free(in);
}

int main(int argc, char **argv) {
  long runs = 10000;
  double seconds = 0;
  const char *replay = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = atol(argv[++i]);
    else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      rng = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--replay") && i + 1 < argc)
      replay = argv[++i];
    else if (!strcmp(argv[i], "--write-seeds") && i + 1 < argc)
      seed_dir = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--runs N] [--seconds S] [--seed R] [--write-seeds DIR] [FILE...]\n"
              "       %s --replay FILE\n",
              argv[0], argv[0]);
      return strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  if (__sanitizer_set_death_callback)
    __sanitizer_set_death_callback(keep_crash);
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGABRT, on_signal);
  signal(SIGFPE, on_signal);
  if (replay) {
    size_t size;
    uint8_t *buf = read_file(replay, &size);
    run(buf, size);
    free(buf);
    printf("fuzz: %s ran without a fault\n", replay);
    return 0;
  }
  if (seed_dir && mkdir(seed_dir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "fuzz: %s: %s\n", seed_dir, strerror(errno));
    return 2;
  }
  for (; i < argc; i++) {
    size_t size;
    uint8_t *buf = read_file(argv[i], &size);
    colo_fuzz_seeds(buf, size, add_seed);
    free(buf);
  }
  colo_fuzz_seeds(NULL, 0, add_seed);
  if (seed_dir) {
    printf("fuzz: %zu seeds written to %s\n", n_seeds, seed_dir);
    return 0;
  }
  if (!n_seeds) {
    fprintf(stderr, "fuzz: no seeds\n");
    return 2;
  }
  double t0 = now_s();
  for (size_t s = 0; s < n_seeds; s++)
    run(seeds[s].data, seeds[s].size);
  long r = 0;
  for (; r < runs && !(seconds > 0 && now_s() - t0 > seconds); r++) {
    const blob_t *s = &seeds[below(n_seeds)];
    memcpy(cur, s->data, s->size);
    cur_size = s->size;
    for (size_t k = 1 + below(4); k > 0; k--)
      mutate();
    run(cur, cur_size);
  }
  printf("fuzz: %zu seeds and %ld mutated inputs in %.1f s, without a fault\n", n_seeds, r,
         now_s() - t0);
  for (size_t s = 0; s < n_seeds; s++)
    free(seeds[s].data);
  free(seeds);
  return 0;
}
