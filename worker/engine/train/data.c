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
  if (hdr[0] != COLO_SHARD_MAGIC)
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: not a token shard (magic %d, expected %d)", path,
                   hdr[0], COLO_SHARD_MAGIC);
  else if (hdr[1] != COLO_SHARD_VERSION)
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s: shard version %d is not supported (expected %d: uint16 tokens)", path,
                   hdr[1], COLO_SHARD_VERSION);
  else if (hdr[2] < 0)
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: negative token count %d", path, hdr[2]);
  else if ((len - sizeof hdr) / sizeof(uint16_t) < (size_t)hdr[2])
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: truncated: the header says %d tokens", path,
                   hdr[2]);
  if (rc < 0) {
    munmap(map, len);
    return rc;
  }
  out->map = map;
  out->map_len = len;
  out->tokens = (const uint16_t *)((const char *)map + sizeof hdr);
  out->n = (size_t)hdr[2];
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
    }
  }
  colo_paths_close(&ps);
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
  memset(s, 0, sizeof *s);
}

int colo_shard_windows(colo_shard_t *s, int T, char *err, size_t errlen) {
  free(s->windows);
  if (!(s->windows = calloc(s->n_files + 1, sizeof *s->windows)))
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  s->T = T;
  for (size_t i = 0; i < s->n_files; i++) {
    size_t n = s->files[i].n;
    s->windows[i + 1] = s->windows[i] + (n > (size_t)T + 1 ? n - (size_t)T : 0);
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
      if (s->files[f].tokens[i] >= limit) {
        *file = s->files[f].path;
        *at = i;
        *token = s->files[f].tokens[i];
        return 1;
      }
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

static void window(const colo_shard_t *s, uint64_t h, int T, int *in, int *tg) {
  size_t w = (size_t)(h % (uint64_t)s->windows[s->n_files]), lo = 0, hi = s->n_files;
  while (hi - lo > 1) { /* the file whose windows hold w */
    size_t mid = (lo + hi) / 2;
    if (s->windows[mid] <= w)
      lo = mid;
    else
      hi = mid;
  }
  const uint16_t *x = s->files[lo].tokens + (w - s->windows[lo]);
  for (int t = 0; t < T; t++) {
    in[t] = x[t];
    tg[t] = x[t + 1];
  }
}

void colo_sample_batch(const colo_shard_t *s, uint64_t seed, uint64_t step, int micro, int rank,
                       int world, int B, int T, int *inputs, int *targets) {
  for (int b = 0; b < B; b++) {
    uint64_t global =
        ((uint64_t)micro * (uint64_t)world + (uint64_t)rank) * (uint64_t)B + (uint64_t)b;
    window(s, colo_hash4(seed, step, global, 0x7472616eull /* "tran" */), T, inputs + (size_t)b * T,
           targets + (size_t)b * T);
  }
}

void colo_sample_eval_batch(const colo_shard_t *s, uint64_t seed, int i, int rank, int world, int B,
                            int T, int *inputs, int *targets) {
  for (int b = 0; b < B; b++) {
    uint64_t global = ((uint64_t)i * (uint64_t)world + (uint64_t)rank) * (uint64_t)B + (uint64_t)b;
    window(s, colo_hash4(seed, 0, global, 0x6576616cull /* "eval" */), T, inputs + (size_t)b * T,
           targets + (size_t)b * T);
  }
}
