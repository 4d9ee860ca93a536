/* Streamed tokenisation of a text file into llm.c token shards. */
#include "prepare.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "data.h"

#define BUF ((size_t)16 << 20)

/* the files of one kind (train or val), all under temporary names until the end */
typedef struct {
  const char *dir, *kind;
  size_t shard_tokens; /* 0: one file */
  FILE *f;
  size_t in_file, total;
  int count, cap;
  char (*tmp)[1200];
} out_t;

static void final_name(const out_t *o, int i, char *out, size_t len) {
  if (o->shard_tokens)
    snprintf(out, len, "%s/%s_%06d.bin", o->dir, o->kind, i);
  else
    snprintf(out, len, "%s/%s.bin", o->dir, o->kind);
}

static int write_header(FILE *f, size_t n) {
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC, COLO_SHARD_VERSION, (int32_t)n};
  return fseek(f, 0, SEEK_SET) == 0 && fwrite(hdr, sizeof hdr, 1, f) == 1 ? 0 : -1;
}

static int out_open(out_t *o, char *err, size_t errlen) {
  if (o->count == o->cap) {
    int cap = o->cap ? 2 * o->cap : 8;
    char(*g)[1200] = realloc(o->tmp, (size_t)cap * sizeof *g);
    if (!g)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    o->tmp = g;
    o->cap = cap;
  }
  char final[1100];
  final_name(o, o->count, final, sizeof final);
  snprintf(o->tmp[o->count], sizeof o->tmp[0], "%s.tmp", final);
  if (!(o->f = fopen(o->tmp[o->count], "wb+")))
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count], strerror(errno));
  o->count++;
  o->in_file = 0;
  if (write_header(o->f, 0) < 0)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count - 1], strerror(errno));
  return 0;
}

/* the header's count written, the file flushed to disk and closed */
static int out_finish_file(out_t *o, char *err, size_t errlen) {
  FILE *f = o->f;
  o->f = NULL;
  int ok = write_header(f, o->in_file) == 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  return ok ? 0 : colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count - 1], strerror(errno));
}

static int out_put(out_t *o, const uint16_t *t, size_t n, char *err, size_t errlen) {
  while (n) {
    if (!o->f) {
      int rc = out_open(o, err, errlen);
      if (rc < 0)
        return rc;
    }
    size_t room = (o->shard_tokens ? o->shard_tokens : (size_t)INT32_MAX) - o->in_file;
    if (!o->shard_tokens && n > room)
      return colo_fail(err, errlen, COLO_ETOOBIG,
                       "more than %d %s tokens do not fit one shard: --shard-tokens N writes "
                       "%s_000000.bin, %s_000001.bin, ... of N tokens each",
                       INT32_MAX, o->kind, o->kind, o->kind);
    size_t k = n < room ? n : room;
    if (fwrite(t, sizeof *t, k, o->f) != k)
      return colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count - 1], strerror(errno));
    o->in_file += k;
    o->total += k;
    t += k;
    n -= k;
    if (o->shard_tokens && o->in_file == o->shard_tokens) {
      int rc = out_finish_file(o, err, errlen);
      if (rc < 0)
        return rc;
    }
  }
  return 0;
}

/* the last file finished (an empty one when there were no tokens at all) */
static int out_close(out_t *o, char *err, size_t errlen) {
  int rc = !o->f && !o->count ? out_open(o, err, errlen) : 0;
  return rc == 0 && o->f ? out_finish_file(o, err, errlen) : rc;
}

/* every file renamed into place, and the numbered files of an earlier, longer run removed (a
 * pattern would take them) */
static int out_commit(out_t *o, char *err, size_t errlen) {
  char final[1100];
  for (int i = 0; i < o->count; i++) {
    final_name(o, i, final, sizeof final);
    if (rename(o->tmp[i], final) != 0)
      return colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", o->tmp[i], final,
                       strerror(errno));
  }
  for (int i = o->count; o->shard_tokens; i++) {
    final_name(o, i, final, sizeof final);
    if (unlink(final) != 0)
      break;
  }
  return 0;
}

static void out_free(out_t *o, int remove) {
  if (o->f)
    fclose(o->f);
  for (int i = 0; remove && i < o->count; i++)
    unlink(o->tmp[i]);
  free(o->tmp);
}

/* Where GPT-2's pre-tokenizer always cuts: a line's end followed by a printable ASCII character
 * other than space (a piece never runs from a newline into what is not whitespace). Bytes as
 * tokens may cut anywhere. */
static int cut_at(const char *b, size_t p, const colo_bpe_t *bpe) {
  return !bpe || p == 0 || (b[p - 1] == '\n' && b[p] > ' ' && b[p] < 0x7f);
}

static int put_tokens(const char *text, size_t n, size_t base, const colo_bpe_t *bpe, out_t *o,
                      int **ids, size_t *icap, uint16_t **tok, size_t *tcap, char *err,
                      size_t errlen) {
  size_t k = 0;
  if (!bpe) {
    k = n;
  } else {
    int rc = colo_bpe_encode(bpe, text, n, base, ids, &k, icap, err, errlen);
    if (rc < 0)
      return rc;
  }
  if (k > *tcap) {
    uint16_t *g = realloc(*tok, k * sizeof *g);
    if (!g)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu tokens", k);
    *tok = g;
    *tcap = k;
  }
  for (size_t i = 0; i < k; i++)
    (*tok)[i] = bpe ? (uint16_t)(*ids)[i] : (uint16_t)(unsigned char)text[i];
  return out_put(o, *tok, k, err, errlen);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int colo_prepare(const char *input, const char *out_dir, const colo_prepare_opts_t *o,
                 colo_prepare_stats_t *st, char *err, size_t errlen) {
  memset(st, 0, sizeof *st);
  if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0))
    return colo_fail(err, errlen, COLO_EINVAL, "--val-fraction %g must be in [0, 1)",
                     o->val_fraction);
  if (o->bpe && colo_bpe_vocab_size(o->bpe) > 65536)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "a vocabulary of %d tokens does not fit the shards' 16-bit tokens",
                     colo_bpe_vocab_size(o->bpe));
  if (o->shard_tokens > (size_t)INT32_MAX)
    return colo_fail(err, errlen, COLO_EINVAL, "--shard-tokens %zu is more than a shard holds (%d)",
                     o->shard_tokens, INT32_MAX);
  FILE *in = fopen(input, "rb");
  if (!in)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", input,
                     strerror(errno));
  struct stat sb;
  if (fstat(fileno(in), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(in);
    return colo_fail(err, errlen, COLO_EINVAL, "%s: not a regular file", input);
  }
  if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
    fclose(in);
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", out_dir, strerror(errno));
  }
  size_t n = (size_t)sb.st_size, split = n - (size_t)((double)n * o->val_fraction);
  out_t out[2] = {{out_dir, "train", o->shard_tokens, NULL, 0, 0, 0, 0, NULL},
                  {out_dir, "val", o->shard_tokens, NULL, 0, 0, 0, 0, NULL}};
  size_t cap = BUF, len = 0, base = 0, icap = 0, tcap = 0;
  char *buf = malloc(cap + 1);
  int *ids = NULL;
  uint16_t *tok = NULL;
  int rc = buf ? 0 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory"), part = 0, eof = 0;
  double t0 = now_s(), last = t0;
  while (rc == 0) {
    if (!eof && len < cap) {
      size_t got = fread(buf + len, 1, cap - len, in);
      len += got;
      if (len < cap) {
        if (ferror(in)) {
          rc = colo_fail(err, errlen, COLO_EIO, "%s: read error", input);
          break;
        }
        eof = 1;
      }
    }
    /* this round takes the text up to the last cut in the buffer (all of it at the end) */
    size_t end = len;
    if (!eof)
      while (end > 0 && !cut_at(buf, end, o->bpe))
        end--;
    if (!eof && end == 0) { /* one line longer than the buffer: a larger one */
      char *g = realloc(buf, 2 * cap + 1);
      if (!g) {
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for a line of %zu bytes", len);
        break;
      }
      buf = g;
      cap *= 2;
      continue;
    }
    size_t from = 0;
    if (part == 0 && (eof || split <= base + end)) { /* validation starts in this round */
      size_t p = split > base ? split - base : 0;
      while (p < end && !cut_at(buf, p, o->bpe))
        p++;
      rc = put_tokens(buf, p, base, o->bpe, &out[0], &ids, &icap, &tok, &tcap, err, errlen);
      part = 1;
      from = p;
    }
    if (rc == 0)
      rc = put_tokens(buf + from, end - from, base + from, o->bpe, &out[part], &ids, &icap, &tok,
                      &tcap, err, errlen);
    if (rc == COLO_EPARSE) { /* the text's fault: name it */
      char why[512];
      snprintf(why, sizeof why, "%s", err);
      colo_fail(err, errlen, rc, "%s: %s", input, why);
    }
    memmove(buf, buf + end, len - end);
    len -= end;
    base += end;
    double now = now_s();
    if (o->progress && now - last >= 5.0) {
      fprintf(o->progress, "prepare: %.1f of %.1f MB (%.0f%%), %zu tokens, %.1f MB/s\n",
              (double)base / 1e6, (double)n / 1e6, 100.0 * (double)base / (double)(n ? n : 1),
              out[0].total + out[1].total, (double)base / 1e6 / (now - t0));
      fflush(o->progress);
      last = now;
    }
    if (eof && len == 0)
      break;
  }
  fclose(in);
  free(buf);
  free(ids);
  free(tok);
  for (int k = 0; k < 2 && rc == 0; k++)
    rc = out_close(&out[k], err, errlen);
  for (int k = 0; k < 2 && rc == 0; k++)
    rc = out_commit(&out[k], err, errlen);
  for (int k = 0; k < 2; k++) {
    st->tokens[k] = out[k].total;
    st->files[k] = out[k].count;
    out_free(&out[k], rc < 0);
  }
  st->bytes = n;
  return rc;
}
