/* Shards, the byte tokenizer, and deterministic sampling. */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "../core/rng.h"

static int map_file(const char *path, colo_shard_file_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: not a regular file", path);
  }
  size_t len = (size_t)sb.st_size;
  int32_t hdr[COLO_SHARD_HEADER_INTS];
  if (len < sizeof hdr) {
    close(fd);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: shorter than the 1024-byte shard header", path);
  }
  void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(errno));
  memcpy(hdr, map, sizeof hdr);
  int rc = 0;
  int choices = hdr[0] == COLO_SHARD_MAGIC_CHOICES;
  int seqs = hdr[0] == COLO_SHARD_MAGIC_PAIRS || choices; /* a table of sequences */
  int masked = hdr[0] == COLO_SHARD_MAGIC_MASKED || seqs;
  int wide = hdr[0] == COLO_SHARD_MAGIC_U32 || (masked && hdr[3] == 4);
  int version = choices  ? COLO_SHARD_VERSION_CHOICES
                : seqs   ? COLO_SHARD_VERSION_PAIRS
                : masked ? COLO_SHARD_VERSION_MASKED
                : wide   ? COLO_SHARD_VERSION_U32
                         : COLO_SHARD_VERSION;
  size_t tsz = wide ? sizeof(uint32_t) : sizeof(uint16_t);
  /* the sequence table: after the mask, at a multiple of 8; a choice shard's questions and the
   * endings' lengths after it */
  size_t n = hdr[2] < 0 ? 0 : (size_t)hdr[2], at = (sizeof hdr + n * tsz + (n + 7) / 8 + 7) & ~7ul;
  size_t ns = hdr[4] < 0 ? 0 : (size_t)hdr[4], nq = choices && hdr[5] > 0 ? (size_t)hdr[5] : 0;
  if (hdr[0] != COLO_SHARD_MAGIC && hdr[0] != COLO_SHARD_MAGIC_U32 && !masked)
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: not a token shard (magic %d, expected %d, or %d for uint32 tokens, or %d "
                   "with a loss mask, or %d of preference pairs, or %d of multiple-choice "
                   "questions)",
                   path, hdr[0], COLO_SHARD_MAGIC, COLO_SHARD_MAGIC_U32, COLO_SHARD_MAGIC_MASKED,
                   COLO_SHARD_MAGIC_PAIRS, COLO_SHARD_MAGIC_CHOICES);
  else if (hdr[1] != version)
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: shard version %d is not supported (expected %d: %s)", path, hdr[1], version,
                   choices  ? "multiple-choice questions"
                   : seqs   ? "preference pairs"
                   : masked ? "tokens with a loss mask"
                   : wide   ? "uint32 tokens"
                            : "uint16 tokens");
  else if (masked && hdr[3] != 2 && hdr[3] != 4)
    rc =
        colo_fail(err, errlen, COLO_EPARSE, "%s: a token width of %d bytes (2 or 4)", path, hdr[3]);
  else if (hdr[2] < 0)
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: negative token count %d", path, hdr[2]);
  else if ((len - sizeof hdr) / tsz < (size_t)hdr[2] ||
           (masked && len - sizeof hdr - (size_t)hdr[2] * tsz < ((size_t)hdr[2] + 7) / 8))
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: truncated: the header says %d tokens%s", path,
                   hdr[2], masked ? " and their loss mask" : "");
  else if (seqs && !choices && (hdr[4] < 0 || hdr[4] % 2))
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: %d sequences: a preference shard holds two a pair", path, hdr[4]);
  else if (choices && (hdr[4] < 0 || hdr[5] < 0))
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: %d sequences of %d questions", path, hdr[4],
                   hdr[5]);
  else if (seqs && (len < at || (len - at) / 8 < ns ||
                    (len - at - 8 * ns) / 4 < (choices ? 2 * nq + ns : 0)))
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: truncated: the header says %d sequences%s, and their table is not all "
                   "there",
                   path, hdr[4], choices ? " and their questions" : "");
  for (size_t i = 0; rc == 0 && seqs && i < ns; i++) {
    const uint64_t *q = (const uint64_t *)((const char *)map + at);
    uint64_t end = i + 1 < ns ? q[i + 1] : n;
    if ((i == 0 && q[0] != 0) || q[i] + 2 > end)
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s: sequence %zu begins at token %llu and ends at %llu: each holds two "
                     "tokens at least, the first beginning at 0, in order",
                     path, i, (unsigned long long)q[i], (unsigned long long)end);
  }
  const uint32_t *quest =
      choices && rc == 0 ? (const uint32_t *)((const char *)map + at + 8 * ns) : NULL;
  size_t used = 0;
  for (size_t i = 0; rc == 0 && choices && i < nq; i++) {
    if (quest[2 * i] < 2 || quest[2 * i + 1] >= quest[2 * i] || quest[2 * i] > ns - used)
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s: question %zu has %u choices, the right one number %u, after %zu "
                     "sequences of %zu: each has 2 or more, the right one among them",
                     path, i, quest[2 * i], quest[2 * i + 1], used, ns);
    used += rc == 0 ? quest[2 * i] : 0;
  }
  if (rc == 0 && choices && used != ns)
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: its %zu questions have %zu choices, and it holds %zu sequences", path, nq,
                   used, ns);
  if (rc < 0) {
    munmap(map, len);
    return rc;
  }
  out->map = map;
  out->map_len = len;
  out->tokens = (const char *)map + sizeof hdr;
  out->wide = wide;
  out->n = (size_t)hdr[2];
  if (masked)
    out->mask = (const uint8_t *)out->tokens + out->n * tsz;
  if (seqs) {
    out->seq = (const uint64_t *)((const char *)map + at);
    out->n_seq = ns;
  }
  if (choices) {
    out->quest = quest;
    out->n_quest = nq;
    out->chars = quest + 2 * nq;
  }
  return 0;
}

int colo_paths_open(colo_paths_t *p, const char *path, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  p->one[0] = path;
  p->v = (char *const *)p->one;
  p->n = 1;
  if (!(p->pattern = strpbrk(path, "*?[") != NULL))
    return 0;
  int got = glob(path, GLOB_ERR, NULL, &p->g);
  if (got == 0 && p->g.gl_pathc > 0) {
    p->v = p->g.gl_pathv;
    p->n = p->g.gl_pathc;
    return 0;
  }
  globfree(&p->g);
  p->pattern = 0;
  p->n = 0;
  return got == GLOB_NOMATCH || got == 0
             ? colo_fail(err, errlen, COLO_ENOENT, "%s: no file matches", path)
             : colo_fail(err, errlen, COLO_EIO, "%s: cannot list the files it names", path);
}

void colo_paths_close(colo_paths_t *p) {
  if (p->pattern)
    globfree(&p->g);
  p->pattern = 0;
  p->n = 0;
}

int colo_read_all(FILE *f, const char *what, char **out, size_t *len, char *err, size_t errlen) {
  char *buf = NULL;
  size_t cap = 0, n = 0, got;
  do {
    if (n + 65536 + 1 > cap) {
      char *g = realloc(buf, cap = 2 * cap + 65536 + 1);
      if (!g) {
        free(buf);
        return colo_fail(err, errlen, COLO_ENOMEM, "%s: out of memory", what);
      }
      buf = g;
    }
    n += got = fread(buf + n, 1, 65536, f);
  } while (got == 65536);
  if (ferror(f)) {
    free(buf);
    return colo_fail(err, errlen, COLO_EIO, "%s: read error", what);
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

int colo_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  int rc = colo_read_all(f, path, out, len, err, errlen);
  fclose(f);
  return rc;
}

int colo_shard_load(const char *path, colo_shard_t *out, char *err, size_t errlen) {
  colo_shard_t s = {0};
  snprintf(s.path, sizeof s.path, "%s", path);
  colo_paths_t ps;
  int rc = colo_paths_open(&ps, path, err, errlen);
  if (rc == 0 && !(s.files = calloc(ps.n, sizeof *s.files)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  for (size_t i = 0; rc == 0 && i < ps.n; i++) {
    rc = map_file(ps.v[i], &s.files[i], err, errlen);
    if (rc == 0) {
      s.n_files++;
      s.n += s.files[i].n;
      s.masked |= s.files[i].mask != NULL;
      s.pairs = (i == 0 || s.pairs) && s.files[i].seq && !s.files[i].quest;
      s.n_pairs += s.files[i].quest ? 0 : s.files[i].n_seq / 2;
      s.choices |= s.files[i].quest != NULL;
    }
  }
  colo_paths_close(&ps);
  if (rc == 0 && s.n_pairs && !s.pairs)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: some of its files are preference shards and some are not", path);
  if (rc < 0) {
    colo_shard_free(&s);
    return rc;
  }
  *out = s;
  return 0;
}

void colo_shard_free(colo_shard_t *s) {
  for (size_t i = 0; i < s->n_files; i++)
    munmap(s->files[i].map, s->files[i].map_len);
  free(s->files);
  free(s->windows);
  free(s->blocks);
  memset(s, 0, sizeof *s);
}

int colo_shard_windows(colo_shard_t *s, int T, char *err, size_t errlen) {
  free(s->windows);
  free(s->blocks);
  s->windows = calloc(s->n_files + 1, sizeof *s->windows);
  s->blocks = calloc(s->n_files + 1, sizeof *s->blocks);
  if (!s->windows || !s->blocks)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  s->T = T;
  for (size_t i = 0; i < s->n_files; i++) {
    size_t n = s->files[i].n, has = n > (size_t)T; /* a window is T + 1 tokens */
    s->windows[i + 1] = s->windows[i] + (has ? n - (size_t)T : 0);
    s->blocks[i + 1] = s->blocks[i] + (has ? (n - 1) / (size_t)T : 0);
  }
  if (s->windows[s->n_files] == 0)
    return colo_fail(err, errlen, COLO_EINVAL, "%s: %zu tokens are too few for block_size %d%s",
                     s->path, s->n, T, s->n_files > 1 ? " in any one file" : "");
  return 0;
}

int colo_shard_find_above(const colo_shard_t *s, unsigned limit, const char **file, size_t *at,
                          unsigned *token) {
  for (size_t f = 0; f < s->n_files; f++)
    for (size_t i = 0; i < s->files[f].n; i++)
      if (colo_shard_token(&s->files[f], i) >= limit) {
        *file = s->files[f].path;
        *at = i;
        *token = colo_shard_token(&s->files[f], i);
        return 1;
      }
  return 0;
}

int colo_shard_has(const colo_shard_t *s, unsigned token) {
  for (size_t f = 0; f < s->n_files; f++)
    for (size_t i = 0; i < s->files[f].n; i++)
      if (colo_shard_token(&s->files[f], i) == token)
        return 1;
  return 0;
}

int colo_shard_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen) {
  if (n > INT32_MAX) {
    snprintf(err, errlen, "%s: %zu tokens do not fit one shard", path, n);
    return COLO_ETOOBIG;
  }
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
    return COLO_EIO;
  }
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC, COLO_SHARD_VERSION, (int32_t)n};
  FILE *f = fdopen(fd, "wb");
  int ok = f && fwrite(hdr, sizeof hdr, 1, f) == 1 &&
           (n == 0 || fwrite(tokens, sizeof(uint16_t), n, f) == n) && fflush(f) == 0 &&
           fsync(fd) == 0;
  if (f)
    fclose(f);
  else
    close(fd);
  if (!ok || rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    unlink(tmp);
    return COLO_EIO;
  }
  return 0;
}

/* the i with prefix[i] <= w < prefix[i + 1], of n */
static size_t find_prefix(const size_t *prefix, size_t n, size_t w) {
  size_t lo = 0, hi = n;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (prefix[mid] <= w)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* the set bits of mask bits [lo, hi) */
static size_t count_bits(const uint8_t *m, size_t lo, size_t hi) {
  size_t c = 0;
  for (; lo < hi && (lo & 7); lo++)
    c += m[lo >> 3] >> (lo & 7) & 1;
  for (; lo + 8 <= hi; lo += 8)
    c += (size_t)__builtin_popcount(m[lo >> 3]);
  for (; lo < hi; lo++)
    c += m[lo >> 3] >> (lo & 7) & 1;
  return c;
}

/* tokens [at, at + T] of file x as inputs and targets, a target -1 where the mask leaves it out;
 * in NULL: only counted. Returns the targets that count. */
static size_t copy_window(const colo_shard_file_t *x, size_t at, int T, int *in, int *tg) {
  if (!in)
    return x->mask ? count_bits(x->mask, at + 1, at + 1 + (size_t)T) : (size_t)T;
  if (!x->mask) { /* every target counts */
    for (int t = 0; t < T; t++) {
      in[t] = (int)colo_shard_token(x, at + (size_t)t);
      tg[t] = (int)colo_shard_token(x, at + (size_t)t + 1);
    }
    return (size_t)T;
  }
  size_t c = 0;
  for (int t = 0; t < T; t++) {
    size_t i = at + (size_t)t + 1;
    int k = colo_shard_counts(x, i);
    in[t] = (int)colo_shard_token(x, i - 1);
    tg[t] = k ? (int)colo_shard_token(x, i) : -1;
    c += (size_t)k;
  }
  return c;
}

static size_t window(const colo_shard_t *s, uint64_t h, int T, int *in, int *tg) {
  size_t w = (size_t)(h % (uint64_t)s->windows[s->n_files]);
  size_t f = find_prefix(s->windows, s->n_files, w);
  return copy_window(&s->files[f], w - s->windows[f], T, in, tg);
}

/* window w of those at multiples of T */
static size_t block(const colo_shard_t *s, size_t w, int T, int *in, int *tg) {
  size_t f = find_prefix(s->blocks, s->n_files, w);
  return copy_window(&s->files[f], (w - s->blocks[f]) * (size_t)T, T, in, tg);
}

void colo_shard_block(const colo_shard_t *s, size_t w, int T, int *inputs, int *targets) {
  block(s, w, T, inputs, targets);
}

uint64_t colo_permute(uint64_t x, uint64_t n, uint64_t key1, uint64_t key2) {
  int bits = 2;
  while (bits < 64 && (1ull << bits) < n)
    bits++;
  bits += bits & 1;
  int h = bits / 2;
  uint64_t mask = (1ull << h) - 1;
  do { /* a bijection of [0, 2^bits); x's cycle comes back below n, where x started */
    uint64_t l = x >> h, r = x & mask;
    for (uint64_t round = 0; round < 4; round++) {
      uint64_t t = l ^ (colo_hash4(key1, key2, round, r) & mask);
      l = r;
      r = t;
    }
    x = (l << h) | r;
  } while (x >= n);
  return x;
}

#define TAG_TRAIN   0x7472616eull /* "tran" */
#define TAG_SHUFFLE 0x73687566ull /* "shuf" */
#define TAG_BLEND   0x626c6e64ull /* "blnd" */

/* sequence g of source k (its own count) into in, tg */
static size_t source_sequence(const colo_blend_t *d, size_t k, uint64_t seed, uint64_t g, int *in,
                              int *tg) {
  const colo_shard_t *s = &d->src[k];
  if (d->order == COLO_ORDER_SHUFFLE) {
    uint64_t W = s->blocks[s->n_files], epoch = g / W;
    return block(s, (size_t)colo_permute(g % W, W, colo_hash4(seed, k, TAG_SHUFFLE, 0), epoch),
                 d->T, in, tg);
  }
  return window(s, colo_hash4(seed, g, k, TAG_TRAIN ^ TAG_BLEND), d->T, in, tg);
}

int colo_blend_open(colo_blend_t *b, const char *const *paths, const double *weights, size_t n,
                    int order, int T, char *err, size_t errlen) {
  memset(b, 0, sizeof *b);
  b->order = order;
  b->T = T;
  if (n == 0 || (order != COLO_ORDER_RANDOM && order != COLO_ORDER_SHUFFLE))
    return colo_fail(err, errlen, COLO_EINVAL, "no training data, or an unknown data order");
  b->src = calloc(n, sizeof *b->src);
  b->cum = calloc(n + 1, sizeof *b->cum);
  if (!b->src || !b->cum) {
    colo_blend_close(b);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  int rc = 0;
  for (size_t k = 0; k < n && rc == 0; k++) {
    rc = colo_shard_load(paths[k], &b->src[k], err, errlen);
    if (rc == 0) {
      b->n_src++;
      rc = colo_shard_windows(&b->src[k], T, err, errlen);
    }
  }
  /* largest remainder: floor(share · slots) each, the slots left to the largest remainders */
  double sum = 0, rem[COLO_MAX_SOURCES];
  for (size_t k = 0; k < n; k++)
    sum += weights ? weights[k] : 1.0;
  uint32_t slots[COLO_MAX_SOURCES], given = 0;
  if (rc == 0 && n > COLO_MAX_SOURCES)
    rc = colo_fail(err, errlen, COLO_EINVAL, "a blend of %zu training sets; at most %d", n,
                   COLO_MAX_SOURCES);
  for (size_t k = 0; k < n && rc == 0; k++) {
    double q = (weights ? weights[k] : 1.0) / sum * COLO_BLEND_SLOTS;
    if (!(q >= 1.0))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: its weight is less than 1/%d of the weights' sum", paths[k],
                     COLO_BLEND_SLOTS);
    else {
      slots[k] = (uint32_t)q;
      rem[k] = q - slots[k];
      given += slots[k];
    }
  }
  while (rc == 0 && given < COLO_BLEND_SLOTS) {
    size_t best = 0;
    for (size_t k = 1; k < n; k++)
      if (rem[k] > rem[best])
        best = k;
    slots[best]++;
    rem[best] = -1.0;
    given++;
  }
  for (size_t k = 0; k < n && rc == 0; k++)
    b->cum[k + 1] = b->cum[k] + slots[k];
  if (rc < 0)
    colo_blend_close(b);
  return rc;
}

void colo_blend_close(colo_blend_t *b) {
  for (size_t k = 0; b->src && k < b->n_src; k++)
    colo_shard_free(&b->src[k]);
  free(b->src);
  free(b->cum);
  memset(b, 0, sizeof *b);
}

/* colo_sample_batch's windows (inputs NULL: only counted); the targets that count */
static size_t sample_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int micro, int rank,
                           int world, int B, int T, int *inputs, int *targets) {
  size_t c = 0;
  for (int b = 0; b < B; b++) {
    uint64_t global =
        ((uint64_t)micro * (uint64_t)world + (uint64_t)rank) * (uint64_t)B + (uint64_t)b;
    size_t o = (size_t)b * T;
    c += window(s, colo_hash4(seed, step, global, TAG_TRAIN), T, inputs ? inputs + o : NULL,
                targets ? targets + o : NULL);
  }
  return c;
}

/* colo_blend_batch (inputs NULL: only counted); the targets that count */
static size_t blend_batch(const colo_blend_t *d, uint64_t seed, uint64_t step, int accum, int micro,
                          int rank, int world, int B, int *inputs, int *targets) {
  int T = d->T;
  if (d->n_src == 1 && d->order == COLO_ORDER_RANDOM) /* as before blends, for old runs */
    return sample_batch(&d->src[0], seed, step, micro, rank, world, B, T, inputs, targets);
  size_t c = 0;
  for (int b = 0; b < B; b++) {
    uint64_t g = ((step * (uint64_t)accum + (uint64_t)micro) * (uint64_t)world + (uint64_t)rank) *
                     (uint64_t)B +
                 (uint64_t)b;
    size_t k = 0;
    if (d->n_src > 1) { /* the slot of g's period, and its place among its source's */
      uint64_t period = g / COLO_BLEND_SLOTS;
      uint32_t q = (uint32_t)colo_permute(g % COLO_BLEND_SLOTS, COLO_BLEND_SLOTS,
                                          colo_hash4(seed, TAG_BLEND, 0, 0), period);
      while (q >= d->cum[k + 1])
        k++;
      g = period * (d->cum[k + 1] - d->cum[k]) + (q - d->cum[k]);
    }
    size_t o = (size_t)b * T;
    c += source_sequence(d, k, seed, g, inputs ? inputs + o : NULL, targets ? targets + o : NULL);
  }
  return c;
}

void colo_blend_batch(const colo_blend_t *d, uint64_t seed, uint64_t step, int accum, int micro,
                      int rank, int world, int B, int *inputs, int *targets) {
  blend_batch(d, seed, step, accum, micro, rank, world, B, inputs, targets);
}

int colo_blend_masked(const colo_blend_t *d) {
  for (size_t k = 0; k < d->n_src; k++)
    if (d->src[k].masked)
      return 1;
  return 0;
}

uint64_t colo_blend_counted(const colo_blend_t *d, uint64_t seed, uint64_t step, int accum,
                            int world, int B) {
  if (!colo_blend_masked(d))
    return (uint64_t)accum * (uint64_t)world * (uint64_t)B * (uint64_t)d->T;
  uint64_t c = 0;
  for (int micro = 0; micro < accum; micro++)
    for (int r = 0; r < world; r++)
      c += blend_batch(d, seed, step, accum, micro, r, world, B, NULL, NULL);
  return c;
}

double colo_blend_epochs(const colo_blend_t *d, size_t k, uint64_t sequences) {
  const colo_shard_t *s = &d->src[k];
  double share = (double)(d->cum[k + 1] - d->cum[k]) / COLO_BLEND_SLOTS;
  return (double)sequences * share / (double)s->blocks[s->n_files];
}

double colo_blend_epochs_most(const colo_blend_t *d, uint64_t sequences) {
  double most = 0;
  for (size_t k = 0; k < d->n_src; k++) {
    double e = colo_blend_epochs(d, k, sequences);
    most = e > most ? e : most;
  }
  return most;
}

void colo_sample_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int micro, int rank,
                       int world, int B, int T, int *inputs, int *targets) {
  sample_batch(s, seed, step, micro, rank, world, B, T, inputs, targets);
}

static size_t eval_batch(const colo_shard_t *s, uint64_t seed, int i, int rank, int world, int B,
                         int T, int *inputs, int *targets) {
  size_t c = 0;
  for (int b = 0; b < B; b++) {
    uint64_t global = ((uint64_t)i * (uint64_t)world + (uint64_t)rank) * (uint64_t)B + (uint64_t)b;
    size_t o = (size_t)b * T;
    c += window(s, colo_hash4(seed, 0, global, 0x6576616cull /* "eval" */), T,
                inputs ? inputs + o : NULL, targets ? targets + o : NULL);
  }
  return c;
}

void colo_sample_eval_batch(const colo_shard_t *s, uint64_t seed, int i, int rank, int world, int B,
                            int T, int *inputs, int *targets) {
  eval_batch(s, seed, i, rank, world, B, T, inputs, targets);
}

uint64_t colo_eval_counted(const colo_shard_t *s, uint64_t seed, int batches, int world, int B,
                           int T) {
  uint64_t c = 0;
  if (batches == 0) {
    size_t W = s->blocks[s->n_files];
    if (!s->masked)
      return (uint64_t)W * (uint64_t)T;
    for (size_t w = 0; w < W; w++)
      c += block(s, w, T, NULL, NULL);
    return c;
  }
  if (!s->masked)
    return (uint64_t)batches * (uint64_t)world * (uint64_t)B * (uint64_t)T;
  for (int i = 0; i < batches; i++)
    for (int r = 0; r < world; r++)
      c += eval_batch(s, seed, i, r, world, B, T, NULL, NULL);
  return c;
}

/* ---- preference pairs ---- */

#define TAG_PAIRS 0x70616972ull /* "pair" */

/* Where sequence q of file x begins, ends, and where its answer (the first token that counts)
 * begins (its end when nothing counts). */
static void sequence_span(const colo_shard_file_t *x, size_t q, size_t *a, size_t *e, size_t *c) {
  *a = (size_t)x->seq[q];
  *e = q + 1 < x->n_seq ? (size_t)x->seq[q + 1] : x->n;
  for (*c = *a + 1; *c < *e && !colo_shard_counts(x, *c); (*c)++)
    ;
}

/* The first token of the window of sequence [a, e) of T + 1 tokens that follows its first: the
 * sequence's second when it fits; else, keeping the first token, the prompt loses its earliest
 * tokens so that the answer (from c) ends the window (TRL's prompt truncation, keeping the
 * prompt's end); an answer of T tokens or more keeps its start and the token before it, and
 * loses its end. */
static size_t window_from(size_t a, size_t e, size_t c, int T) {
  if (e - a <= (size_t)T + 1)
    return a + 1;
  if (e - c <= (size_t)T - 1)
    return e - (size_t)T;
  return c - 1 > a ? c - 1 : a + 1; /* no prompt at all: the sequence's start */
}

/* sequence q of file x into one row of T: its window (window_from), padded */
static void copy_sequence(const colo_shard_file_t *x, size_t q, int T, int *in, int *tg) {
  size_t a, e, c;
  sequence_span(x, q, &a, &e, &c);
  size_t from = window_from(a, e, c, T);
  /* window token k: the sequence's first for k = 0, then from + k − 1 */
  for (int t = 0; t < T; t++) {
    size_t i = t == 0 ? a : from + (size_t)t - 1, j = from + (size_t)t;
    in[t] = i < e ? (int)colo_shard_token(x, i) : 0;
    tg[t] = j < e && colo_shard_counts(x, j) ? (int)colo_shard_token(x, j) : -1;
  }
}

/* pair p of the set into rows 2b and 2b + 1 */
static void copy_pair(const colo_shard_t *s, size_t p, int T, int b, int *in, int *tg) {
  size_t f = 0;
  while (f + 1 < s->n_files && p >= s->files[f].n_seq / 2)
    p -= s->files[f++].n_seq / 2;
  for (int k = 0; k < 2; k++) {
    size_t o = (size_t)(2 * b + k) * (size_t)T;
    copy_sequence(&s->files[f], 2 * p + (size_t)k, T, in + o, tg + o);
  }
}

void colo_pairs_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int accum, int micro,
                      int rank, int world, int P, int T, int *inputs, int *targets, size_t *pairs) {
  uint64_t n = s->n_pairs;
  for (int b = 0; b < P; b++) {
    uint64_t g = (((step * (uint64_t)accum + (uint64_t)micro) * (uint64_t)world + (uint64_t)rank) *
                  (uint64_t)P) +
                 (uint64_t)b;
    uint64_t p = colo_permute(g % n, n, colo_hash4(seed, 0, TAG_PAIRS, 0), g / n);
    copy_pair(s, (size_t)p, T, b, inputs, targets);
    if (pairs)
      pairs[b] = (size_t)p;
  }
}

void colo_pairs_eval_batch(const colo_shard_t *s, int i, int rank, int world, int P, int T,
                           int *inputs, int *targets, size_t *pairs) {
  for (int b = 0; b < P; b++) {
    uint64_t g = ((uint64_t)i * (uint64_t)world + (uint64_t)rank) * (uint64_t)P + (uint64_t)b;
    copy_pair(s, (size_t)(g % s->n_pairs), T, b, inputs, targets);
    if (pairs)
      pairs[b] = (size_t)(g % s->n_pairs);
  }
}

void colo_pairs_cut(const colo_shard_t *s, int T, size_t *cut, size_t *lost) {
  *cut = *lost = 0;
  for (size_t f = 0; f < s->n_files; f++) {
    const colo_shard_file_t *x = &s->files[f];
    for (size_t q = 0; q < x->n_seq; q++) {
      size_t a, e, c;
      sequence_span(x, q, &a, &e, &c);
      if (e - a <= (size_t)T + 1)
        continue;
      (*cut)++;
      *lost += e - c > (size_t)T - 1;
    }
  }
}
