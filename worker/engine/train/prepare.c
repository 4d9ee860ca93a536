/* Streamed tokenisation of a text file into llm.c token shards. */
#include "prepare.h"

#include <errno.h>
#include <omp.h>
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

#define MAX_SEG 16

/* one thread's share of a round: its tokens, or why it failed */
typedef struct {
  int *ids;
  size_t n, cap;
  int rc;
  char err[600];
} seg_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* the state of one run: the inputs, the buffer, the two outputs */
typedef struct {
  const colo_prepare_opts_t *o;
  out_t out[2];
  char *buf;
  size_t cap, len, base, split, total;
  int part, eot, threads;
  seg_t seg[MAX_SEG];
  uint16_t *tok;
  size_t tcap;
  double t0, last;
} run_t;

/* buf[from, end) (of a document, buf[0] its byte `at`) into o: under BPE cut into
 * up to `threads` segments at the pre-tokenizer's cuts, encoded in parallel and written in
 * order; the pending <|endoftext|> first */
static int put_text(run_t *r, const char *buf, size_t from, size_t end, size_t at, out_t *o,
                    int *pending, char *err, size_t errlen) {
  const colo_bpe_t *bpe = r->o->bpe;
  int rc = 0;
  if (*pending && end > from) {
    uint16_t e = (uint16_t)r->eot;
    *pending = 0;
    if ((rc = out_put(o, &e, 1, err, errlen)) < 0)
      return rc;
  }
  if (!bpe) { /* bytes as tokens */
    size_t n = end - from;
    if (n > r->tcap) {
      uint16_t *g = realloc(r->tok, n * sizeof *g);
      if (!g)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu tokens", n);
      r->tok = g;
      r->tcap = n;
    }
    for (size_t i = 0; i < n; i++)
      r->tok[i] = (unsigned char)buf[from + i];
    return out_put(o, r->tok, n, err, errlen);
  }
  size_t b[MAX_SEG + 1], span = end - from;
  int ns = span < ((size_t)1 << 20) ? 1 : r->threads; /* a segment of 1 MiB at least */
  b[0] = from;
  for (int i = 1; i < ns; i++) {
    size_t p = from + span / (size_t)ns * (size_t)i;
    p = p < b[i - 1] ? b[i - 1] : p;
    while (p < end && !cut_at(buf, p, bpe))
      p++;
    b[i] = p;
  }
  b[ns] = end;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ns)
  for (int i = 0; i < ns; i++) {
    seg_t *g = &r->seg[i];
    g->n = 0;
    g->rc = colo_bpe_encode(bpe, buf + b[i], b[i + 1] - b[i], at + b[i], &g->ids, &g->n, &g->cap,
                            g->err, sizeof g->err);
  }
  for (int i = 0; i < ns && rc == 0; i++) { /* in order: the first failure is the first in text */
    seg_t *g = &r->seg[i];
    if (g->rc < 0)
      return colo_fail(err, errlen, g->rc, "%s", g->err);
    if (g->n > r->tcap) {
      uint16_t *t = realloc(r->tok, g->n * sizeof *t);
      if (!t)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu tokens", g->n);
      r->tok = t;
      r->tcap = g->n;
    }
    for (size_t k = 0; k < g->n; k++)
      r->tok[k] = (uint16_t)g->ids[k];
    rc = out_put(o, r->tok, g->n, err, errlen);
  }
  return rc;
}

/* One document (a file) through the buffer; `last`: the final one, where the split is due at
 * the latest. */
static int one_document(run_t *r, const char *path, int last, char *err, size_t errlen) {
  const colo_prepare_opts_t *o = r->o;
  FILE *in = fopen(path, "rb");
  if (!in)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  /* GPT-2's delimiter before each document, as llm.c's data sets have it, in the part that
   * takes the document's first tokens */
  int rc = 0, eof = 0, pending = r->eot >= 0;
  size_t doc = r->base; /* where this document starts in the whole text */
  r->len = 0;
  while (rc == 0) {
    if (!eof && r->len < r->cap) {
      size_t got = fread(r->buf + r->len, 1, r->cap - r->len, in);
      r->len += got;
      if (r->len < r->cap) {
        if (ferror(in)) {
          rc = colo_fail(err, errlen, COLO_EIO, "%s: read error", path);
          break;
        }
        eof = 1;
      }
    }
    char *buf = r->buf;
    size_t len = r->len, base = r->base;
    /* this round takes the text up to the last cut in the buffer (all of it at the end) */
    size_t end = len;
    if (!eof)
      while (end > 0 && !cut_at(buf, end, o->bpe))
        end--;
    if (!eof && end == 0) { /* one line longer than the buffer: a larger one */
      char *g = realloc(r->buf, 2 * r->cap + 1);
      if (!g) {
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for a line of %zu bytes", len);
        break;
      }
      r->buf = g;
      r->cap *= 2;
      continue;
    }
    size_t from = 0;
    if (r->part == 0 && ((eof && last) || r->split <= base + end)) { /* validation starts here */
      size_t p = r->split > base ? r->split - base : 0;
      while (p < end && !cut_at(buf, p, o->bpe))
        p++;
      rc = put_text(r, buf, 0, p, base - doc, &r->out[0], &pending, err, errlen);
      r->part = 1;
      from = p;
    }
    if (rc == 0)
      rc = put_text(r, buf, from, end, base - doc, &r->out[r->part], &pending, err, errlen);
    if (rc == COLO_EPARSE) { /* the text's fault: name it */
      char why[512];
      snprintf(why, sizeof why, "%s", err);
      colo_fail(err, errlen, rc, "%s: %s", path, why);
    }
    memmove(buf, buf + end, len - end);
    r->len -= end;
    r->base += end;
    double now = now_s();
    if (o->progress && now - r->last >= 5.0) {
      fprintf(o->progress, "prepare: %.1f of %.1f MB (%.0f%%), %zu tokens, %.1f MB/s\n",
              (double)r->base / 1e6, (double)r->total / 1e6,
              100.0 * (double)r->base / (double)(r->total ? r->total : 1),
              r->out[0].total + r->out[1].total, (double)r->base / 1e6 / (now - r->t0));
      fflush(o->progress);
      r->last = now;
    }
    if (eof && r->len == 0)
      break;
  }
  if (rc == 0 && pending) { /* an empty document */
    uint16_t e = (uint16_t)r->eot;
    rc = out_put(&r->out[r->part], &e, 1, err, errlen);
  }
  fclose(in);
  return rc;
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
  /* the documents: one file, or every file a pattern matches, in name order */
  colo_paths_t docs;
  int rc = colo_paths_open(&docs, input, err, errlen);
  if (rc < 0)
    return rc;
  char *const *paths = docs.v;
  size_t nd = docs.n;
  run_t r = {o,
             {{out_dir, "train", o->shard_tokens, NULL, 0, 0, 0, 0, NULL},
              {out_dir, "val", o->shard_tokens, NULL, 0, 0, 0, 0, NULL}}};
  for (size_t i = 0; rc == 0 && i < nd; i++) {
    struct stat sb;
    if (stat(paths[i], &sb) != 0)
      rc = colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", paths[i],
                     strerror(errno));
    else if (!S_ISREG(sb.st_mode))
      rc = colo_fail(err, errlen, COLO_EINVAL, "%s: not a regular file", paths[i]);
    else
      r.total += (size_t)sb.st_size;
  }
  if (rc == 0 && mkdir(out_dir, 0755) != 0 && errno != EEXIST)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", out_dir, strerror(errno));
  r.split = r.total - (size_t)((double)r.total * o->val_fraction);
  r.eot = -1;
  if (o->bpe && nd > 1) { /* documents apart: GPT-2's <|endoftext|> where the vocabulary has it */
    static const char EOT[] = "<|endoftext|>";
    r.eot = colo_bpe_lookup(o->bpe, EOT, sizeof EOT - 1);
  }
  r.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  r.threads = r.threads < 1 ? 1 : r.threads > MAX_SEG ? MAX_SEG : r.threads;
  r.cap = BUF * (size_t)(o->bpe ? r.threads : 1); /* a round gives each thread a buffer's worth */
  if (rc == 0 && !(r.buf = malloc(r.cap + 1)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  r.t0 = r.last = now_s();
  for (size_t i = 0; rc == 0 && i < nd; i++)
    rc = one_document(&r, paths[i], i + 1 == nd, err, errlen);
  colo_paths_close(&docs);
  free(r.buf);
  for (int i = 0; i < MAX_SEG; i++)
    free(r.seg[i].ids);
  free(r.tok);
  for (int k = 0; k < 2 && rc == 0; k++)
    rc = out_close(&r.out[k], err, errlen);
  for (int k = 0; k < 2 && rc == 0; k++)
    rc = out_commit(&r.out[k], err, errlen);
  for (int k = 0; k < 2; k++) {
    st->tokens[k] = r.out[k].total;
    st->files[k] = r.out[k].count;
    out_free(&r.out[k], rc < 0);
  }
  st->bytes = r.total;
  st->documents = (int)nd;
  st->eot = r.eot;
  return rc;
}
