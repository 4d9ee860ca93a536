/* Streamed tokenisation of a text file into llm.c token shards. */
#include "prepare.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cjson/cJSON.h>

#include "../../../common/error.h"
#include "chat.h"
#include "data.h"
#include "nfc.h"

#define BUF ((size_t)16 << 20)

/* the files of one kind (train or val), all under temporary names until the end */
typedef struct {
  const char *dir, *kind;
  size_t shard_tokens; /* 0: one file */
  int wide;            /* uint32 tokens (llm.c's Llama 3 shards), else uint16 */
  int masked;          /* colo's shards with a loss mask (COLO_SHARD_MAGIC_MASKED) */
  int pairs;           /* preference shards (COLO_SHARD_MAGIC_PAIRS): a table of sequences */
  FILE *f;
  uint64_t *seq; /* pairs: where the file's sequences begin */
  size_t n_seq, seq_cap;
  size_t in_file, total, counted; /* counted: tokens that count as targets */
  uint8_t *bits;                  /* masked: the file's mask so far, written after its tokens */
  size_t bits_cap;
  int count, cap;
  char (*tmp)[1200];
} out_t;

static void final_name(const out_t *o, int i, char *out, size_t len) {
  if (o->shard_tokens)
    snprintf(out, len, "%s/%s_%06d.bin", o->dir, o->kind, i);
  else
    snprintf(out, len, "%s/%s.bin", o->dir, o->kind);
}

static int write_header(FILE *f, size_t n, int wide, int masked, int pairs, size_t n_seq) {
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {wide ? COLO_SHARD_MAGIC_U32 : COLO_SHARD_MAGIC,
                                         wide ? COLO_SHARD_VERSION_U32 : COLO_SHARD_VERSION,
                                         (int32_t)n};
  if (masked) {
    hdr[0] = pairs ? COLO_SHARD_MAGIC_PAIRS : COLO_SHARD_MAGIC_MASKED;
    hdr[1] = pairs ? COLO_SHARD_VERSION_PAIRS : COLO_SHARD_VERSION_MASKED;
    hdr[3] = wide ? 4 : 2;
    hdr[4] = (int32_t)n_seq;
  }
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
  if (o->bits)
    memset(o->bits, 0, o->bits_cap);
  o->n_seq = 0;
  if (write_header(o->f, 0, o->wide, o->masked, o->pairs, 0) < 0)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count - 1], strerror(errno));
  return 0;
}

/* the mask after the tokens, the header's count written, the file flushed to disk and closed */
static int out_finish_file(out_t *o, char *err, size_t errlen) {
  FILE *f = o->f;
  o->f = NULL;
  size_t nb = (o->in_file + 7) / 8;
  int ok = !o->masked || nb == 0 || fwrite(o->bits, 1, nb, f) == nb;
  static const uint8_t zero[8];
  size_t pad = (8 - (COLO_SHARD_HEADER_INTS * 4 + o->in_file * (o->wide ? 4 : 2) + nb) % 8) % 8;
  ok = ok && (!o->pairs || ((pad == 0 || fwrite(zero, 1, pad, f) == pad) &&
                            (o->n_seq == 0 || fwrite(o->seq, 8, o->n_seq, f) == o->n_seq)));
  ok = ok && write_header(f, o->in_file, o->wide, o->masked, o->pairs, o->n_seq) == 0 &&
       fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  return ok ? 0 : colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count - 1], strerror(errno));
}

/* room in o's mask for its file's first n tokens */
static int mask_room(out_t *o, size_t n) {
  size_t need = (n + 7) / 8;
  if (need <= o->bits_cap)
    return 0;
  size_t c = o->bits_cap ? o->bits_cap : 1 << 16;
  while (c < need)
    c *= 2;
  uint8_t *g = realloc(o->bits, c);
  if (!g)
    return COLO_ENOMEM;
  memset(g + o->bits_cap, 0, c - o->bits_cap);
  o->bits = g;
  o->bits_cap = c;
  return 0;
}

/* pairs: a sequence begins at o's next token */
static int out_sequence(out_t *o, char *err, size_t errlen) {
  if (!o->f) {
    int rc = out_open(o, err, errlen);
    if (rc < 0)
      return rc;
  }
  if (o->n_seq == o->seq_cap) {
    size_t c = o->seq_cap ? 2 * o->seq_cap : 1024;
    uint64_t *g = realloc(o->seq, c * sizeof *g);
    if (!g)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    o->seq = g;
    o->seq_cap = c;
  }
  o->seq[o->n_seq++] = o->in_file;
  return 0;
}

/* n tokens of o's width; `counts`: whether they count as targets of the loss (its mask's bits;
 * every token counts in a shard without one) */
static int out_put(out_t *o, const void *tokens, size_t n, int counts, char *err, size_t errlen) {
  const char *t = tokens;
  size_t w = o->wide ? 4 : 2;
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
    if (fwrite(t, w, k, o->f) != k)
      return colo_fail(err, errlen, COLO_EIO, "%s: %s", o->tmp[o->count - 1], strerror(errno));
    if (o->masked && mask_room(o, o->in_file + k) < 0)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the loss mask");
    for (size_t i = o->in_file; o->masked && counts && i < o->in_file + k; i++)
      o->bits[i >> 3] |= (uint8_t)(1u << (i & 7));
    o->counted += counts ? k : 0;
    o->in_file += k;
    o->total += k;
    t += k * w;
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
  free(o->bits);
  free(o->seq);
}

#define MAX_SEG 16

/* one thread's share of a round: its pieces, its tokens, or why it failed */
typedef struct {
  uint32_t *ends;
  size_t n_ends, ends_cap, done;
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

/* the state of one run: the inputs, the buffer and its pieces, the two outputs */
typedef struct {
  const colo_prepare_opts_t *o;
  out_t out[2];
  char *buf;
  size_t cap, len, base, split, total;
  int part, eot, threads, docs;
  int end;          /* prompt and completion pairs: the token after each completion; -1: none */
  int ended[2];     /* the part's last token is `end`, which is also the document token */
  colo_chat_t chat; /* conversations' template */
  int chat_open;
  uint32_t *ends; /* under BPE: where the round's pieces end */
  size_t n_ends, ends_cap;
  seg_t seg[MAX_SEG];
  void *tok; /* tokens of the outputs' width */
  size_t tcap;
  double t0, last;
  /* a tokenizer that normalizes (colo_bpe_nfc): a text's bytes as read, before they are
   * normalized into buf; raw_eof once the input has no more */
  char *raw;
  size_t raw_len, raw_cap;
  int raw_eof;
  int doc_text; /* no text of the document is out yet: its first piece takes the tokenizer's
                 * prefix (colo_bpe_prefixed at COLO_BPE_START) */
} run_t;

/* where a UTF-8 character begins at or before len, so that a character cut by the buffer's end
 * waits for the rest of it */
static size_t char_floor(const char *s, size_t len) {
  size_t i = len;
  while (i > 0 && len - i < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
    i--;
  if (i == 0 || len - i >= 4)
    return len; /* not UTF-8: the check names it */
  unsigned char c = (unsigned char)s[i - 1];
  size_t need = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return len - (i - 1) >= need ? len : i - 1;
}

/* Where a piece most likely begins: after a newline, at printable ASCII other than space (GPT-2's
 * and Llama 3's patterns never run a piece from a newline into such a character, though the
 * piece before may end elsewhere when the text is cut there) */
static int likely_cut(const char *b, size_t p) {
  return b[p - 1] == '\n' && b[p] > ' ' && b[p] < 0x7f;
}

/* the first of ends[x, y) at or past v, y when none (a round's pieces end in order) */
static size_t first_end(const uint32_t *ends, size_t x, size_t y, size_t v) {
  while (x < y) {
    size_t m = x + (y - x) / 2;
    if (ends[m] < v)
      x = m + 1;
    else
      y = m;
  }
  return x;
}

/* The round's pieces (under BPE) into r->ends, and *end, where they end. Up to `threads`
 * threads check the text's UTF-8 and split it, each from a place where a piece likely begins
 * up to where its successor starts; stitched in order, a range whose start turned out to be
 * inside a piece goes on from where its predecessor's last piece ended: at its first piece
 * ending there, else split again from there (the pieces from a piece's start are the same
 * whoever finds them, as the first split does not look behind). The pieces are the whole text's
 * for any number of threads. */
static int split_round(run_t *r, const char *buf, size_t len, int more, size_t at_doc, size_t *end,
                       char *err, size_t errlen) {
  const colo_bpe_t *bpe = r->o->bpe;
  size_t lim = more ? char_floor(buf, len) : len, s[MAX_SEG + 1], bad[MAX_SEG];
  int ns = lim < ((size_t)1 << 20) ? 1 : r->threads; /* a range of 1 MiB at least */
  s[0] = 0;
  for (int i = 1; i < ns; i++) {
    size_t p = lim / (size_t)ns * (size_t)i;
    p = p < s[i - 1] + 1 ? s[i - 1] + 1 : p;
    while (p < lim && !likely_cut(buf, p))
      p++;
    s[i] = p < lim ? p : lim;
  }
  s[ns] = lim;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ns)
  for (int i = 0; i < ns; i++)
    bad[i] = s[i] + colo_utf8_invalid(buf + s[i], s[i + 1] - s[i]);
  for (int i = 0; i < ns; i++)
    if (bad[i] < s[i + 1])
      return colo_fail(err, errlen, COLO_EPARSE, "the text is not UTF-8 at byte %zu",
                       at_doc + bad[i]);
#pragma omp parallel for schedule(dynamic, 1) num_threads(ns)
  for (int i = 0; i < ns; i++) {
    seg_t *g = &r->seg[i];
    g->n_ends = 0;
    g->rc = colo_bpe_split(bpe, buf, lim, s[i], s[i + 1], more, &g->ends, &g->n_ends, &g->ends_cap,
                           &g->done, g->err, sizeof g->err);
  }
  size_t at = 0; /* where the pieces so far end */
  r->n_ends = 0;
  for (int i = 0; i < ns; i++) {
    seg_t *g = &r->seg[i];
    if (g->rc < 0)
      return colo_fail(err, errlen, g->rc, "%s", g->err);
    if (at < s[i])
      break; /* the range before stopped short of this one: more text decides the piece there */
    size_t k = 0;
    if (at > s[i]) { /* this range began inside a piece */
      k = first_end(g->ends, 0, g->n_ends, at);
      if (k < g->n_ends && g->ends[k] == at) {
        k++;
      } else {
        k = g->n_ends = 0;
        g->rc = colo_bpe_split(bpe, buf, lim, at, s[i + 1], more, &g->ends, &g->n_ends,
                               &g->ends_cap, &g->done, g->err, sizeof g->err);
        if (g->rc < 0)
          return colo_fail(err, errlen, g->rc, "%s", g->err);
      }
    }
    size_t add = g->n_ends - k;
    if (r->n_ends + add > r->ends_cap) {
      size_t c = r->ends_cap ? r->ends_cap : 1024;
      while (c < r->n_ends + add)
        c *= 2;
      uint32_t *e = realloc(r->ends, c * sizeof *e);
      if (!e)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the pieces");
      r->ends = e;
      r->ends_cap = c;
    }
    memcpy(r->ends + r->n_ends, g->ends + k, add * sizeof *g->ends);
    r->n_ends += add;
    at = g->done > at ? g->done : at;
  }
  *end = at;
  return 0;
}

/* n ids into o at its width, counting as targets or not */
static int emit(run_t *r, out_t *o, const int *ids, size_t n, int counts, char *err,
                size_t errlen) {
  if (n > r->tcap) {
    void *g = realloc(r->tok, n * 4);
    if (!g)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu tokens", n);
    r->tok = g;
    r->tcap = n;
  }
  for (size_t i = 0; i < n; i++)
    if (o->wide)
      ((uint32_t *)r->tok)[i] = (uint32_t)ids[i];
    else
      ((uint16_t *)r->tok)[i] = (uint16_t)ids[i];
  return out_put(o, r->tok, n, counts, err, errlen);
}

/* The pending document token first (when there is text); then bytes as tokens: buf[from, to);
 * under BPE: the round's pieces from..to-1, cut into up to `threads` runs of about equal bytes,
 * encoded in parallel and written in order. */
static int put_text(run_t *r, const char *buf, size_t from, size_t to, out_t *o, int *pending,
                    char *err, size_t errlen) {
  const colo_bpe_t *bpe = r->o->bpe;
  int rc = 0;
  if (*pending && to > from) {
    *pending = 0;
    if ((rc = emit(r, o, &r->eot, 1, 1, err, errlen)) < 0)
      return rc;
  }
  if (!bpe) { /* bytes as tokens */
    seg_t *g = &r->seg[0];
    if (to - from > g->cap) {
      int *ids = realloc(g->ids, (to - from) * sizeof *ids);
      if (!ids)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu tokens", to - from);
      g->ids = ids;
      g->cap = to - from;
    }
    for (size_t i = from; i < to; i++)
      g->ids[i - from] = (unsigned char)buf[i];
    return emit(r, o, g->ids, to - from, 1, err, errlen);
  }
  if (to == from)
    return 0;
  const uint32_t *e = r->ends;
  size_t b[MAX_SEG + 1], lo = from ? e[from - 1] : 0, span = e[to - 1] - lo;
  int ns = span < ((size_t)1 << 20) ? 1 : r->threads; /* a run of 1 MiB at least */
  b[0] = from;
  for (int i = 1; i < ns; i++) { /* the first piece ending past the run's share */
    b[i] = first_end(e, b[i - 1], to, lo + span / (size_t)ns * (size_t)i);
  }
  b[ns] = to;
  int first = r->doc_text;
  r->doc_text = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ns)
  for (int i = 0; i < ns; i++) {
    seg_t *g = &r->seg[i];
    g->n = 0;
    g->rc = colo_bpe_encode_pieces(bpe, buf, e, b[i], b[i + 1], first && i == 0, &g->ids, &g->n,
                                   &g->cap);
  }
  for (int i = 0; i < ns && rc == 0; i++) { /* in order */
    seg_t *g = &r->seg[i];
    if (g->rc < 0)
      return colo_fail(err, errlen, g->rc, "out of memory for the tokens");
    rc = emit(r, o, g->ids, g->n, 1, err, errlen);
  }
  return rc;
}

/* An input file: zstd's (*.zst) through libzstd, any other through zlib (gzip's, *.gz,
 * decompressed; others read as they are). */
typedef struct {
  gzFile gz;
  ZSTD_DCtx *zs;
  int fd;
  ZSTD_inBuffer zin; /* compressed bytes read and not yet decompressed */
  char *zbuf;
  size_t zcap;
  int zeof;
  size_t last; /* ZSTD_decompressStream's last return: 0 where a frame ends */
} in_t;

static int ends_with(const char *s, const char *end) {
  size_t n = strlen(s), k = strlen(end);
  return n > k && !strcmp(s + n - k, end);
}

static void in_close(in_t *in) {
  if (in->gz)
    gzclose(in->gz);
  if (in->zs) {
    ZSTD_freeDCtx(in->zs);
    close(in->fd);
  }
  free(in->zbuf);
  memset(in, 0, sizeof *in);
}

static int in_open(const char *path, in_t *in, char *err, size_t errlen) {
  memset(in, 0, sizeof *in);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && ends_with(path, ".zst")) {
    in->fd = fd;
    in->zcap = ZSTD_DStreamInSize();
    in->zbuf = malloc(in->zcap);
    if (!in->zbuf || !(in->zs = ZSTD_createDCtx())) {
      close(fd);
      free(in->zbuf);
      in->zbuf = NULL;
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    }
    in->zin.src = in->zbuf;
    return 0;
  }
  if (fd < 0 || !(in->gz = gzdopen(fd, "rb"))) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return colo_fail(err, errlen, e == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(e));
  }
  gzbuffer(in->gz, 1 << 20);
  return 0;
}

/* up to n bytes of zstd's output: how many, or -1 with the reason */
static long zstd_read(in_t *in, char *buf, size_t n, const char *path, char *err, size_t errlen) {
  ZSTD_outBuffer out = {buf, n, 0};
  while (out.pos < out.size) {
    if (in->zin.pos == in->zin.size && !in->zeof) {
      ssize_t k;
      do
        k = read(in->fd, in->zbuf, in->zcap);
      while (k < 0 && errno == EINTR);
      if (k < 0)
        return colo_fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(errno));
      in->zeof = k == 0;
      in->zin.size = (size_t)k;
      in->zin.pos = 0;
    }
    int drained = in->zeof && in->zin.pos == in->zin.size;
    if (drained && in->last == 0)
      break; /* all read, and the last frame ended and was all given */
    size_t before = out.pos, used = in->zin.pos, r = ZSTD_decompressStream(in->zs, &out, &in->zin);
    if (ZSTD_isError(r))
      return colo_fail(err, errlen, COLO_EIO, "%s: zstd: %s", path, ZSTD_getErrorName(r));
    if (out.pos != before || in->zin.pos != used)
      in->last = r; /* (with nothing in or out it asks for the next frame's header) */
    if (drained && out.pos == before)
      break; /* nothing more comes out */
  }
  if (out.pos < out.size && in->last != 0) /* the input ended inside a frame */
    return colo_fail(err, errlen, COLO_EIO, "%s: the zstd stream is cut short", path);
  return (long)out.pos;
}

/* up to n bytes from in into buf: how many, or -1 with the reason (a damaged gzip or zstd
 * file) */
static long in_read(in_t *in, char *buf, size_t n, const char *path, char *err, size_t errlen) {
  if (in->zs)
    return zstd_read(in, buf, n, path, err, errlen);
  size_t got = 0;
  while (got < n) {
    unsigned want = n - got > (1u << 30) ? 1u << 30 : (unsigned)(n - got);
    int k = gzread(in->gz, buf + got, want);
    if (k < 0) {
      int code;
      const char *why = gzerror(in->gz, &code);
      return colo_fail(err, errlen, COLO_EIO, "%s: %s", path, why ? why : "read error");
    }
    if (k == 0) {
      int code;
      gzerror(in->gz, &code);
      if (code == Z_BUF_ERROR) /* the stream ended before gzip's end */
        return colo_fail(err, errlen, COLO_EIO, "%s: the gzip stream is cut short", path);
      break;
    }
    got += (size_t)k;
  }
  return (long)got;
}

/* The buffer filled from in as NFC (colo_nfc): the bytes read into r->raw, a third of the room
 * at a time (NFC at most triples UTF-8), normalized up to where more text cannot change them;
 * the rest waits in r->raw for the next read. *eof once in has no more and r->raw is empty. */
static int fill_nfc(run_t *r, in_t *in, const char *path, int *eof, char *err, size_t errlen) {
  for (size_t want; !*eof && (want = (r->cap - r->len) / 3) > 0;) {
    if (r->raw_cap < want) {
      char *g = realloc(r->raw, want);
      if (!g)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      r->raw = g, r->raw_cap = want;
    }
    if (r->raw_len < want && !r->raw_eof) {
      long got = in_read(in, r->raw + r->raw_len, want - r->raw_len, path, err, errlen);
      if (got < 0)
        return (int)got;
      r->raw_len += (size_t)got;
      r->raw_eof = r->raw_len < want;
    }
    size_t take = r->raw_len < want ? r->raw_len : want, nn, used;
    int more = !(r->raw_eof && take == r->raw_len);
    char *norm;
    if (colo_nfc(r->raw, take, more, &norm, &nn, &used) < 0)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the normalized text");
    if (used == 0 && more && take == want) { /* a third of the buffer that never ends a segment */
      free(norm);
      if (colo_nfc(r->raw, take, 0, &norm, &nn, &used) < 0)
        return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the normalized text");
    }
    memcpy(r->buf + r->len, norm ? norm : r->raw, norm ? nn : used);
    r->len += norm ? nn : used;
    free(norm);
    memmove(r->raw, r->raw + used, r->raw_len - used);
    r->raw_len -= used;
    *eof = r->raw_eof && r->raw_len == 0;
    if (used == 0)
      break; /* the rest waits for more room */
  }
  return 0;
}

/* the buffer filled from in, as far as it goes (*eof once in has no more) */
static int fill(run_t *r, in_t *in, const char *path, int *eof, char *err, size_t errlen) {
  if (*eof || r->len == r->cap)
    return 0;
  long got = in_read(in, r->buf + r->len, r->cap - r->len, path, err, errlen);
  if (got < 0)
    return (int)got;
  r->len += (size_t)got;
  if (r->len < r->cap)
    *eof = 1;
  return 0;
}

/* a file's size as text: its own, or for gzip's (*.gz) and zstd's (*.zst) what it decompresses
 * to */
static int text_size(const char *path, size_t *size, char *err, size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return colo_fail(err, errlen, COLO_EINVAL, "%s: not a regular file", path);
  *size = (size_t)sb.st_size;
  if (!ends_with(path, ".gz") && !ends_with(path, ".zst"))
    return 0;
  in_t in;
  int rc = in_open(path, &in, err, errlen);
  char *buf = rc == 0 ? malloc(1 << 20) : NULL;
  long got = 0;
  *size = 0;
  if (rc == 0 && !buf)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  while (rc == 0 && (got = in_read(&in, buf, 1 << 20, path, err, errlen)) > 0)
    *size += (size_t)got;
  if (got < 0)
    rc = (int)got;
  free(buf);
  in_close(&in);
  return rc;
}

/* a line on o->progress every 5 s */
static void progress(run_t *r) {
  double now = now_s();
  if (r->o->progress && now - r->last >= 5.0) {
    fprintf(r->o->progress, "prepare: %.1f of %.1f MB (%.0f%%), %zu tokens, %.1f MB/s\n",
            (double)r->base / 1e6, (double)r->total / 1e6,
            100.0 * (double)r->base / (double)(r->total ? r->total : 1),
            r->out[0].total + r->out[1].total, (double)r->base / 1e6 / (now - r->t0));
    fflush(r->o->progress);
    r->last = now;
  }
}

/* One document (a file) through the buffer; `last`: the final one, where the split is due at
 * the latest. */
static int one_document(run_t *r, const char *path, int last, char *err, size_t errlen) {
  const colo_prepare_opts_t *o = r->o;
  in_t in;
  int rc = in_open(path, &in, err, errlen), eof = 0;
  if (rc < 0)
    return rc;
  /* the tokenizer's document token before each document (GPT-2's <|endoftext|>, as llm.c's data
   * sets have it; Llama 3's <|begin_of_text|>), in the part that takes its first tokens */
  int pending = r->eot >= 0;
  r->doc_text = 1;
  size_t doc = r->base; /* where this document starts in the whole text */
  int nfc = o->bpe && colo_bpe_nfc(o->bpe);
  r->len = r->raw_len = 0;
  r->raw_eof = 0;
  while (rc == 0) {
    if ((rc = (nfc ? fill_nfc : fill)(r, &in, path, &eof, err, errlen)) < 0)
      break;
    char *buf = r->buf;
    size_t len = r->len, base = r->base;
    /* this round takes the text up to where the last piece that more text cannot change ends
     * (all of it at the end); bytes as tokens may cut anywhere */
    size_t end = len;
    r->n_ends = 0;
    if (o->bpe)
      rc = split_round(r, buf, len, !eof, base - doc, &end, err, errlen);
    if (rc == 0 && !eof && end == 0) { /* one piece longer than the buffer: a larger one */
      if (r->cap >= ((size_t)1 << 31)) {
        rc = colo_fail(err, errlen, COLO_ETOOBIG,
                       "a piece of the pre-tokenizer longer than %zu bytes at byte %zu", r->cap,
                       base - doc);
        break;
      }
      char *g = realloc(r->buf, 2 * r->cap + 1);
      if (!g) {
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for a piece of %zu bytes", len);
        break;
      }
      r->buf = g;
      r->cap *= 2;
      continue;
    }
    size_t from = 0, ne = o->bpe ? r->n_ends : end;
    if (rc == 0 && r->part == 0 && ((eof && last) || r->split <= base + end)) {
      /* validation starts here; under BPE where the first piece at or after it begins */
      size_t p = r->split > base ? r->split - base : 0, k = p < end ? p : end;
      if (o->bpe) { /* piece k begins where piece k - 1 ends */
        k = p ? first_end(r->ends, 0, ne, p) + 1 : 0;
        k = k < ne ? k : ne;
      }
      rc = put_text(r, buf, 0, k, &r->out[0], &pending, err, errlen);
      r->part = 1;
      from = k;
    }
    if (rc == 0)
      rc = put_text(r, buf, from, ne, &r->out[r->part], &pending, err, errlen);
    if (rc == COLO_EPARSE) { /* the text's fault: name it */
      char why[512];
      snprintf(why, sizeof why, "%s", err);
      colo_fail(err, errlen, rc, "%s: %s", path, why);
    }
    if (rc < 0)
      break;
    memmove(buf, buf + end, len - end);
    r->len -= end;
    r->base += end;
    progress(r);
    if (eof && r->len == 0)
      break;
  }
  if (rc == 0 && pending) /* an empty document */
    rc = emit(r, &r->out[r->part], &r->eot, 1, 1, err, errlen);
  in_close(&in);
  return rc;
}

/* ---- JSON lines: a document a line ---- */

#define NONE ((size_t)-1)

/* A text of a batch, with what goes around it: a line is one (a document) or several (a prompt
 * and its completion; a conversation's turns). */
typedef struct {
  size_t at;       /* where its line begins in the whole input (the split's measure) */
  size_t from;     /* its tokens count as targets from this byte of the text on; NONE: none */
  int pre, post;   /* a special token before it and after it; -1: none */
  int post_counts; /* whether `post` counts */
  int starts;      /* it begins a document: after the document token; the split may come first */
  int line;        /* for messages */
  size_t until;    /* and up to (not from) this byte; NONE: to its end */
  int after;       /* its text follows an added token where it stands (a chat template's first
                    * text after the beginning of text it renders) */
} entry_t;

/* a batch of entries: their texts one after another */
typedef struct {
  char *text;
  size_t len, cap;
  size_t *start; /* where entry i's text begins in text (and n + 1: the end) */
  entry_t *e;
  size_t n, ncap;
} batch_t;

/* n more bytes of text for the last entry */
static int batch_append(batch_t *b, const char *s, size_t n) {
  if (b->len + n > b->cap) {
    size_t c = b->cap ? b->cap : 1 << 20;
    while (c < b->len + n)
      c *= 2;
    char *g = realloc(b->text, c);
    if (!g)
      return COLO_ENOMEM;
    b->text = g;
    b->cap = c;
  }
  if (n)
    memcpy(b->text + b->len, s, n);
  b->len += n;
  b->start[b->n] = b->len;
  return 0;
}

/* a new entry e of the text s (n bytes; batch_append adds to it) */
static int batch_add(batch_t *b, const char *s, size_t n, entry_t e) {
  if (b->n + 2 > b->ncap) {
    size_t c = b->ncap ? 2 * b->ncap : 1024;
    size_t *x = realloc(b->start, c * sizeof *x);
    if (x)
      b->start = x;
    entry_t *y = x ? realloc(b->e, c * sizeof *y) : NULL;
    if (!y)
      return COLO_ENOMEM;
    b->e = y;
    b->ncap = c;
  }
  b->start[b->n] = b->len;
  b->e[b->n++] = e;
  b->start[b->n] = b->len;
  return batch_append(b, s, n);
}

/* Where entry d of a batch stands in its line's text (colo_bpe_encode_in): at its start (a line's
 * first, with no special token before it), going on from the entry before (a completion after
 * its prompt: no special token before it nor after that one), else after an added token */
static int where_in(const batch_t *b, size_t d) {
  const entry_t *e = &b->e[d];
  if (e->starts && e->pre < 0 && !e->after)
    return COLO_BPE_START;
  return d > 0 && !e->starts && e->pre < 0 && b->e[d - 1].post < 0 ? COLO_BPE_ON : COLO_BPE_AFTER;
}

/* the number of the n tokens that begin before byte `at` of their text (the first at 0, less
 * the tokenizer's prefix where it took one, a "▁" the text does not hold: `prefixed`) */
static size_t tokens_before(const colo_bpe_t *bpe, const int *ids, size_t n, size_t at,
                            int prefixed) {
  size_t b = 0, k = 0, pre = n && prefixed ? 1 : 0;
  while (k < n && b < at) {
    size_t len;
    colo_bpe_token(bpe, ids[k++], &len);
    b += len - (k == 1 ? pre : 0);
  }
  return k;
}

/* n tokens of o, those whose first byte is at or past `from` (of their text) and before `until`
 * counting */
static int emit_from(run_t *r, out_t *o, const int *ids, size_t n, size_t from, size_t until,
                     int prefixed, char *err, size_t errlen) {
  if (from == NONE || !r->o->bpe || (from == 0 && until == NONE))
    return emit(r, o, ids, n, from == 0 && until == NONE, err, errlen);
  size_t k0 = tokens_before(r->o->bpe, ids, n, from, prefixed);
  size_t k1 = until == NONE ? n : tokens_before(r->o->bpe, ids, n, until, prefixed);
  k1 = k1 < k0 ? k0 : k1;
  int rc = emit(r, o, ids, k0, 0, err, errlen);
  if (rc == 0)
    rc = emit(r, o, ids + k0, k1 - k0, 1, err, errlen);
  return rc < 0 ? rc : emit(r, o, ids + k1, n - k1, 0, err, errlen);
}

/* The batch's entries: under BPE each text encoded whole (split and merged), the entries in up
 * to `threads` runs of about equal bytes encoded in parallel; then each, in order, into train or,
 * once a line begins at or past the split, val: a document's first after the document token. */
static int put_batch(run_t *r, batch_t *b, const char *path, char *err, size_t errlen) {
  const colo_bpe_t *bpe = r->o->bpe;
  size_t bounds[MAX_SEG + 1], *ntok = malloc((b->n + 1) * sizeof *ntok);
  if (!ntok)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int ns = b->len < ((size_t)1 << 20) || !bpe ? 1 : r->threads, rc = 0;
  bounds[0] = 0;
  for (int i = 1; i <= ns; i++) { /* the first entry starting past the run's share */
    size_t want = b->len / (size_t)ns * (size_t)i, k = bounds[i - 1];
    while (k < b->n && (i == ns || b->start[k] < want))
      k++;
    bounds[i] = k;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(ns)
  for (int i = 0; i < ns; i++) {
    seg_t *g = &r->seg[i];
    g->n = 0;
    g->rc = 0;
    for (size_t d = bounds[i]; d < bounds[i + 1] && g->rc == 0; d++) {
      size_t before = g->n, n = b->start[d + 1] - b->start[d];
      const char *t = b->text + b->start[d];
      if (bpe) {
        g->rc = colo_bpe_encode_in(bpe, where_in(b, d), t, n, 0, &g->ids, &g->n, &g->cap, g->err,
                                   sizeof g->err);
        if (g->rc == COLO_EPARSE) { /* the text's fault: name its line */
          char why[512];
          snprintf(why, sizeof why, "%s", g->err);
          snprintf(g->err, sizeof g->err, "%s:%d: %s of the document", path, b->e[d].line, why);
        }
      } else if (g->n + n > g->cap) {
        int *x = realloc(g->ids, (g->n + n) * sizeof *x);
        g->rc = x ? 0 : COLO_ENOMEM;
        if (x)
          g->ids = x, g->cap = g->n + n;
      }
      for (size_t k = 0; !bpe && g->rc == 0 && k < n; k++)
        g->ids[g->n++] = (unsigned char)t[k];
      ntok[d] = g->n - before;
    }
  }
  int masked = r->out[0].masked, pairs = r->out[0].pairs;
  for (int i = 0; i < ns && rc == 0; i++) { /* in order */
    seg_t *g = &r->seg[i];
    if (g->rc < 0) {
      rc = colo_fail(err, errlen, g->rc, "%s", g->rc == COLO_ENOMEM ? "out of memory" : g->err);
      break;
    }
    size_t at = 0;
    for (size_t d = bounds[i]; d < bounds[i + 1] && rc == 0; d++) {
      const entry_t *e = &b->e[d];
      if (e->starts) {
        if (r->part == 0 && e->at >= r->split)
          r->part = 1; /* validation starts with the first line at or past the split */
        /* the document token, unless the text before ended with it (GPT-2's <|endoftext|> ends
         * one pair and begins the next; a preference pair's sequences each have their own); not
         * a target where there is a mask */
        if (pairs)
          rc = out_sequence(&r->out[r->part], err, errlen);
        if (rc == 0 && r->eot >= 0 && (!r->ended[r->part] || pairs))
          rc = emit(r, &r->out[r->part], &r->eot, 1, !masked, err, errlen);
        r->docs += !pairs || r->out[r->part].n_seq % 2;
      }
      out_t *o = &r->out[r->part];
      if (rc == 0 && e->pre >= 0)
        rc = emit(r, o, &e->pre, 1, 0, err, errlen);
      if (rc == 0)
        rc = emit_from(r, o, g->ids + at, ntok[d], e->from, e->until,
                       bpe && colo_bpe_prefixed(bpe, where_in(b, d)), err, errlen);
      if (rc == 0 && e->post >= 0)
        rc = emit(r, o, &e->post, 1, e->post_counts, err, errlen);
      r->ended[r->part] = e->post >= 0 && e->post == r->eot;
      at += ntok[d];
    }
  }
  free(ntok);
  b->len = b->n = 0;
  return rc;
}

/* A conversation through a Jinja template (the line's other fields the template's variables too):
 * its messages as they are ({"role", ...}; ShareGPT's made role and content), rendered; the
 * document token's text where the text begins with it left to the document token; the rest cut
 * at the added tokens into entries, each text's tokens counting within what the assistant says
 * (colo_chat_render's spans), and each added token counting where it begins within one. */
static int jinja_entries(run_t *r, batch_t *b, const cJSON *j, const cJSON *m, size_t at, int line,
                         const char *path, size_t skip, char *err, size_t errlen) {
  const colo_bpe_t *bpe = r->o->bpe;
  int bad, rc = 0;
  cJSON *msgs = colo_chat_messages(m, &bad);
  if (!msgs && bad)
    rc = colo_fail(err, errlen, COLO_EPARSE,
                   "%s:%d: message %d is not an object with a string \"role\" (or ShareGPT's "
                   "\"from\" and \"value\")",
                   path, line, bad);
  else if (!msgs)
    rc = COLO_ENOMEM;
  char *text = NULL, why[600];
  size_t len = 0, ns = 0;
  colo_jinja_span_t *sp = NULL;
  if (rc == 0 &&
      (rc = colo_chat_render(&r->chat, j, msgs, 0, &text, &len, &sp, &ns, why, sizeof why)) < 0)
    rc = rc == COLO_ENOMEM ? rc : colo_fail(err, errlen, COLO_EPARSE, "%s:%d: %s", path, line, why);
  cJSON_Delete(msgs);
  size_t i = 0, dl = 0, kl = 0;
  const char *dt = r->eot >= 0 ? colo_bpe_token(bpe, r->eot, &dl) : NULL;
  if (dt && dl <= len && !memcmp(text, dt, dl))
    i = dl; /* the template's own beginning of text: the document token */
  entry_t e = {at, NONE, -1, -1, 0, 1, line, NONE, i > 0};
  for (size_t seg = i; rc == 0; i += kl, seg = i) {
    int id = -1;
    while (i < len && (id = colo_bpe_added_at(bpe, text + i, len - i, &kl)) < 0)
      i++;
    /* the text [seg, i), then the added token id (-1: the end) */
    e.from = e.until = NONE, e.post = id, e.post_counts = 0;
    int hits = 0;
    for (size_t s = skip; s < ns; s++) { /* the first `skip` are the prompt's */
      if (sp[s].from < i && sp[s].to > seg) {
        hits++;
        e.from = (sp[s].from > seg ? sp[s].from : seg) - seg;
        e.until = sp[s].to < i ? sp[s].to - seg : NONE;
      }
      e.post_counts |= id >= 0 && sp[s].from <= i && i < sp[s].to;
    }
    for (int w = 0; rc == 0 && colo_bpe_nfc(bpe) && w < 2; w++) { /* offsets in the text the */
      size_t *o = w ? &e.until : &e.from, nn;                     /* encoder sees: NFC's */
      char *norm = NULL;
      if (*o == NONE || *o == 0)
        continue;
      if (colo_nfc(text + seg, *o, 0, &norm, &nn, &(size_t){0}) < 0)
        rc = COLO_ENOMEM;
      else if (norm)
        *o = nn;
      free(norm);
    }
    if (hits > 1)
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s:%d: two of the assistant's messages with no added token between them "
                     "(bytes %zu to %zu of the rendered text): their tokens cannot be told apart",
                     path, line, seg, i);
    if (rc == 0 && (i > seg || id >= 0) && batch_add(b, text + seg, i - seg, e) < 0)
      rc = COLO_ENOMEM;
    e.starts = 0;
    if (i >= len)
      break;
  }
  free(text);
  free(sp);
  return rc == COLO_ENOMEM ? colo_fail(err, errlen, rc, "out of memory") : rc;
}

/* The entries of a conversation m (messages {"role", "content"}, or ShareGPT's {"from",
 * "value"}) of line j in the chat template, a document of its own. Its first `prompt` messages
 * are a preference pair's prompt: what the assistant says in them does not count. */
static int conversation_entries(run_t *r, batch_t *b, const cJSON *j, const cJSON *m, int prompt,
                                size_t at, int line, const char *path, char *err, size_t errlen) {
  const cJSON *x;
  entry_t e = {at, NONE, -1, -1, 0, 1, line, NONE};
  if (r->chat.kind == COLO_CHAT_JINJA) { /* spans: one a message of the assistant's, in order */
    size_t skip = 0;
    int k = 0;
    cJSON_ArrayForEach(x, m) {
      const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
      const char *cs;
      const char *rs = cJSON_IsString(role) ? role->valuestring : colo_chat_sharegpt_role(x, &cs);
      skip += k++ < prompt && rs && !strcmp(rs, "assistant");
    }
    return jinja_entries(r, b, j, m, at, line, path, skip, err, errlen);
  }
  int k = 0;
  cJSON_ArrayForEach(x, m) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(x, "content");
    k++;
    const char *rs, *cs;
    if (cJSON_IsString(role) && cJSON_IsString(content)) {
      rs = role->valuestring, cs = content->valuestring;
    } else if ((rs = colo_chat_sharegpt_role(x, &cs)) == NULL) {
      const cJSON *from = cJSON_GetObjectItemCaseSensitive(x, "from");
      if (cJSON_IsString(from) && cs)
        return colo_fail(err, errlen, COLO_EPARSE,
                         "%s:%d: message %d is from \"%.40s\": ShareGPT's \"human\", \"gpt\" "
                         "and \"system\" are known",
                         path, line, k, from->valuestring);
      return colo_fail(err, errlen, COLO_EPARSE,
                       "%s:%d: message %d is not an object with strings \"role\" and "
                       "\"content\" (or ShareGPT's \"from\" and \"value\")",
                       path, line, k);
    }
    size_t rn = strlen(rs), cn = strlen(cs);
    int learn = !strcmp(rs, "assistant") && k > prompt;
    colo_chat_piece_t pc[2];
    int np = colo_chat_message(&r->chat, rs, rn, cs, cn, pc);
    for (int i = 0; i < np; i++, e.starts = 0) {
      e.pre = pc[i].pre, e.post = pc[i].post;
      e.from = learn ? pc[i].from : NONE;
      e.post_counts = learn && pc[i].learn_post;
      if (batch_add(b, pc[i].text[0], pc[i].len[0], e) < 0 ||
          batch_append(b, pc[i].text[1], pc[i].len[1]) < 0 ||
          batch_append(b, pc[i].text[2], pc[i].len[2]) < 0)
        return COLO_ENOMEM;
    }
  }
  return 0;
}

/* A preference pair in TRL's conversational form: the prompt a list of messages, each answer a
 * list of messages (the assistant's) or a string (one assistant message): each answer after the
 * prompt, a conversation of its own in the chat template, the answer's messages alone counting. */
static int conversational_pair(run_t *r, batch_t *b, const cJSON *j, const cJSON *const v[3],
                               const char *const f[3], size_t at, int line, const char *path,
                               char *err, size_t errlen) {
  if (!r->chat_open)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "%s:%d: \"%s\" is a list of messages: they need a chat template "
                     "(--chat-template, or a tokenizer with its own)",
                     path, line, f[0]);
  int rc = 0;
  for (int k = 1; k < 3 && rc == 0; k++) {
    if (!cJSON_IsArray(v[k]) && !cJSON_IsString(v[k]))
      return colo_fail(err, errlen, COLO_EPARSE,
                       "%s:%d: \"%s\" is neither a list of messages nor a string", path, line,
                       f[k]);
    cJSON *msgs = cJSON_Duplicate(v[0], 1), *x;
    if (msgs && cJSON_IsString(v[k])) {
      cJSON *a = cJSON_CreateObject();
      cJSON_AddItemToArray(msgs, a);
      if (!cJSON_AddStringToObject(a, "role", "assistant") ||
          !cJSON_AddStringToObject(a, "content", v[k]->valuestring))
        rc = COLO_ENOMEM;
    }
    for (x = cJSON_IsArray(v[k]) ? v[k]->child : NULL; msgs && x && rc == 0; x = x->next)
      if (!cJSON_AddItemToArray(msgs, cJSON_Duplicate(x, 1)))
        rc = COLO_ENOMEM;
    if (!msgs)
      rc = COLO_ENOMEM;
    if (rc == 0)
      rc = conversation_entries(r, b, j, msgs, cJSON_GetArraySize(v[0]), at, line, path, err,
                                errlen);
    cJSON_Delete(msgs);
  }
  return rc;
}

/* The entries of one line's object j (at: where the line begins): its document, its prompt and
 * completion, or its conversation in the chat template (each message {"role", "content"}, or
 * ShareGPT's {"from", "value"}). COLO_EPARSE naming what is missing. */
static int line_entries(run_t *r, batch_t *b, const cJSON *j, size_t at, int line, const char *path,
                        char *err, size_t errlen) {
  const colo_prepare_opts_t *o = r->o;
  entry_t e = {at, NONE, -1, -1, 0, 1, line, NONE};
  if (o->messages_field) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, o->messages_field);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0)
      return colo_fail(err, errlen, COLO_EPARSE, "%s:%d: not a JSON object with a list \"%s\"",
                       path, line, o->messages_field);
    return conversation_entries(r, b, j, m, 0, at, line, path, err, errlen);
  }
  if (o->chosen_field) { /* the prompt with each answer: two sequences */
    const char *f[3] = {o->prompt_field, o->chosen_field, o->rejected_field};
    const cJSON *v[3];
    for (int k = 0; k < 3; k++)
      v[k] = cJSON_GetObjectItemCaseSensitive(j, f[k]);
    if (cJSON_IsArray(v[0]) && cJSON_GetArraySize(v[0]) > 0)
      return conversational_pair(r, b, j, v, f, at, line, path, err, errlen);
    for (int k = 0; k < 3; k++)
      if (!cJSON_IsString(v[k]))
        return colo_fail(err, errlen, COLO_EPARSE,
                         "%s:%d: not a JSON object with strings \"%s\", \"%s\" and \"%s\" (or "
                         "TRL's conversational form: \"%s\" a list of messages)",
                         path, line, f[0], f[1], f[2], f[0]);
    entry_t ce = {at, 0, -1, r->end, 1, 0, line, NONE};
    for (int k = 1; k < 3; k++)
      if (batch_add(b, v[0]->valuestring, strlen(v[0]->valuestring), e) < 0 ||
          batch_add(b, v[k]->valuestring, strlen(v[k]->valuestring), ce) < 0)
        return COLO_ENOMEM;
    return 0;
  }
  if (o->prompt_field) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, o->prompt_field);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, o->completion_field);
    if (!cJSON_IsString(p) || !cJSON_IsString(c))
      return colo_fail(err, errlen, COLO_EPARSE,
                       "%s:%d: not a JSON object with strings \"%s\" and \"%s\"", path, line,
                       o->prompt_field, o->completion_field);
    if (batch_add(b, p->valuestring, strlen(p->valuestring), e) < 0)
      return COLO_ENOMEM;
    /* the completion, then the end that counts with it */
    entry_t ce = {at, 0, -1, r->end, 1, 0, line, NONE};
    return batch_add(b, c->valuestring, strlen(c->valuestring), ce) < 0 ? COLO_ENOMEM : 0;
  }
  const char *field = o->text_field ? o->text_field : "text";
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!cJSON_IsString(v))
    return colo_fail(err, errlen, COLO_EPARSE, "%s:%d: not a JSON object with a string \"%s\"",
                     path, line, field);
  e.from = 0;
  return batch_add(b, v->valuestring, strlen(v->valuestring), e) < 0 ? COLO_ENOMEM : 0;
}

/* A file of JSON lines, each line an object (blank lines skipped) of a document, a prompt and
 * its completion, or a conversation (line_entries), read through the buffer, batched and encoded
 * in parallel. */
static int jsonl_documents(run_t *r, const char *path, char *err, size_t errlen) {
  in_t in;
  int rc = in_open(path, &in, err, errlen), eof = 0, line = 0;
  if (rc < 0)
    return rc;
  batch_t b = {0};
  r->len = 0;
  while (rc == 0) {
    if ((rc = fill(r, &in, path, &eof, err, errlen)) < 0)
      break;
    size_t used = 0; /* the complete lines (all at the end) */
    while (rc == 0 && used < r->len) {
      char *s = r->buf + used, *nl = memchr(s, '\n', r->len - used);
      if (!nl && !eof)
        break;
      size_t n = nl ? (size_t)(nl - s) : r->len - used, k = 0;
      line++;
      while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
        k++;
      if (k < n) {
        cJSON *j = cJSON_ParseWithLength(s, n);
        rc = line_entries(r, &b, j, r->base + used, line, path, err, errlen);
        if (rc == COLO_ENOMEM)
          rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %s's documents", path);
        cJSON_Delete(j);
      }
      used += n + (nl != NULL);
      if (rc == 0 && b.len >= r->cap)
        rc = put_batch(r, &b, path, err, errlen);
    }
    if (rc < 0)
      break;
    if (!eof && used == 0) { /* one line longer than the buffer: a larger one */
      char *g = r->cap < ((size_t)1 << 31) ? realloc(r->buf, 2 * r->cap + 1) : NULL;
      if (!g) {
        rc = colo_fail(err, errlen, COLO_ENOMEM, "%s:%d: a line of more than %zu bytes", path,
                       line + 1, r->cap);
        break;
      }
      r->buf = g;
      r->cap *= 2;
      continue;
    }
    memmove(r->buf, r->buf + used, r->len - used);
    r->len -= used;
    r->base += used;
    progress(r);
    if (eof && r->len == 0)
      break;
  }
  if (rc == 0 && b.n)
    rc = put_batch(r, &b, path, err, errlen);
  free(b.text);
  free(b.start);
  free(b.e);
  in_close(&in);
  return rc;
}

/* *.jsonl or *.ndjson, compressed (gzip, zstd) or not */
static int is_jsonl(const char *path) {
  size_t n = strlen(path);
  if (n > 3 && !strcmp(path + n - 3, ".gz"))
    n -= 3;
  else if (n > 4 && !strcmp(path + n - 4, ".zst"))
    n -= 4;
  return (n > 6 && !strncmp(path + n - 6, ".jsonl", 6)) ||
         (n > 7 && !strncmp(path + n - 7, ".ndjson", 7));
}

int colo_prepare(const char *input, const char *out_dir, const colo_prepare_opts_t *o,
                 colo_prepare_stats_t *st, char *err, size_t errlen) {
  memset(st, 0, sizeof *st);
  if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0))
    return colo_fail(err, errlen, COLO_EINVAL, "--val-fraction %g must be in [0, 1)",
                     o->val_fraction);
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
  int wide = o->bpe && colo_bpe_vocab_size(o->bpe) > 65536; /* llm.c's uint32 shards */
  int masked = o->prompt_field != NULL || o->messages_field != NULL;
  int pairs = o->chosen_field != NULL;
  if (pairs && (!o->prompt_field || !o->rejected_field || o->completion_field)) {
    colo_paths_close(&docs);
    return colo_fail(err, errlen, COLO_EINVAL,
                     "preference pairs need a prompt, a chosen and a rejected field, and no "
                     "completion field");
  }
  if (pairs && o->shard_tokens) {
    colo_paths_close(&docs);
    return colo_fail(err, errlen, COLO_EINVAL,
                     "--shard-tokens cuts a stream of tokens; preference pairs are written whole "
                     "into one train.bin and one val.bin");
  }
  run_t r = {o,
             {{out_dir, "train", o->shard_tokens, wide, masked, pairs},
              {out_dir, "val", o->shard_tokens, wide, masked, pairs}}};
  for (size_t i = 0; rc == 0 && i < nd; i++) { /* the split's measure: bytes of text */
    size_t n = 0;
    rc = text_size(paths[i], &n, err, errlen);
    r.total += n;
  }
  if (rc == 0 && mkdir(out_dir, 0755) != 0 && errno != EEXIST)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", out_dir, strerror(errno));
  r.split = r.total - (size_t)((double)r.total * o->val_fraction);
  int jsonl = 0;
  for (size_t i = 0; i < nd; i++)
    jsonl |= is_jsonl(paths[i]);
  for (size_t i = 0; rc == 0 && masked && i < nd; i++)
    if (!is_jsonl(paths[i]))
      rc = colo_fail(err, errlen, COLO_EINVAL, "%s: %s come in JSON lines (*.jsonl, *.ndjson)",
                     paths[i],
                     pairs             ? "preference pairs"
                     : o->prompt_field ? "prompts and completions"
                                       : "conversations");
  r.eot = -1;
  if (o->bpe && (nd > 1 || jsonl)) { /* documents apart: the tokenizer's document token */
    int bos;
    r.eot = colo_bpe_doc_token(o->bpe, &bos);
  }
  /* a completion ends with the tokenizer's end of text (its tokenizer_config.json's eos_token),
   * else with the document token that begins the next (GPT-2's <|endoftext|>) */
  r.end = -1;
  if (o->prompt_field && o->bpe)
    r.end = colo_bpe_eos(o->bpe) >= 0 ? colo_bpe_eos(o->bpe) : r.eot;
  if (rc == 0 && (o->messages_field || (pairs && o->chat_template))) {
    rc = colo_chat_open(&r.chat, o->chat_template, o->bpe, err, errlen);
    r.chat_open = rc == 0;
  }
  r.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  r.threads = r.threads < 1 ? 1 : r.threads > MAX_SEG ? MAX_SEG : r.threads;
  /* a round gives each thread a buffer's worth */
  r.cap = (o->buffer_bytes ? o->buffer_bytes : BUF) * (size_t)(o->bpe ? r.threads : 1);
  if (rc == 0 && !(r.buf = malloc(r.cap + 1)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  r.t0 = r.last = now_s();
  for (size_t i = 0; rc == 0 && i < nd; i++)
    if (is_jsonl(paths[i]))
      rc = jsonl_documents(&r, paths[i], err, errlen);
    else if ((rc = one_document(&r, paths[i], i + 1 == nd, err, errlen)) == 0)
      r.docs++;
  colo_paths_close(&docs);
  colo_chat_close(&r.chat);
  free(r.buf);
  free(r.raw);
  for (int i = 0; i < MAX_SEG; i++) {
    free(r.seg[i].ids);
    free(r.seg[i].ends);
  }
  free(r.tok);
  free(r.ends);
  for (int k = 0; k < 2 && rc == 0; k++)
    rc = out_close(&r.out[k], err, errlen);
  for (int k = 0; k < 2 && rc == 0; k++)
    rc = out_commit(&r.out[k], err, errlen);
  for (int k = 0; k < 2; k++) {
    st->tokens[k] = r.out[k].total;
    st->counted[k] = r.out[k].counted;
    st->files[k] = r.out[k].count;
    st->pairs[k] = r.out[k].n_seq / 2;
    out_free(&r.out[k], rc < 0);
  }
  st->bytes = r.total;
  st->documents = r.docs;
  st->eot = r.eot;
  st->end = r.end;
  st->masked = masked;
  st->wide = wide;
  return rc;
}
