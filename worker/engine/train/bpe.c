/* GPT-2's byte-level BPE: loading its files, encoding and decoding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <errno.h>
#include <limits.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../../../common/error.h"
#include "data.h"

/* GPT-2's pre-tokenizer: contractions, letters, digits, other symbols, each with one leading
 * space; whitespace runs leave their last space to the word that follows */
static const char PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
                              "\\s+(?!\\S)|\\s+";

#define N_CP 324 /* the code points bytes are written as: 256 + the 68 unprintable bytes */

typedef struct {
  const char *s;
  size_t len;
} tok_t;

struct colo_bpe {
  tok_t *tok; /* by id; s NULL where the vocabulary has no such id */
  int n_tok;
  char *arena; /* every token's bytes */
  int byte_id[256];
  int *slot; /* bytes -> id: open addressing, id + 1 (0: empty) */
  size_t slot_cap;
  uint64_t *pair_key; /* (a + 1) << 32 | b (0: empty) -> rank, merged id */
  int *pair_rank, *pair_id;
  size_t pair_cap;
  pcre2_code *re;
};

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static int lookup(const colo_bpe_t *t, const char *s, size_t n) {
  for (size_t i = fnv(s, n) & (t->slot_cap - 1);; i = (i + 1) & (t->slot_cap - 1)) {
    int id = t->slot[i] - 1;
    if (id < 0)
      return -1;
    if (t->tok[id].len == n && !memcmp(t->tok[id].s, s, n))
      return id;
  }
}

static int pair(const colo_bpe_t *t, int a, int b, int *merged) {
  uint64_t key = (uint64_t)(a + 1) << 32 | (uint32_t)b;
  for (size_t i = mix(key) & (t->pair_cap - 1);; i = (i + 1) & (t->pair_cap - 1)) {
    if (!t->pair_key[i])
      return INT_MAX;
    if (t->pair_key[i] == key) {
      *merged = t->pair_id[i];
      return t->pair_rank[i];
    }
  }
}

/* GPT-2's table from bytes to the code points its files write them as: the printable bytes as
 * themselves, the others as 256, 257, ... in byte order */
static void byte_map(int b2u[256], int u2b[N_CP]) {
  int n = 0;
  for (int i = 0; i < N_CP; i++)
    u2b[i] = -1;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    b2u[b] = keep ? b : 256 + n++;
    u2b[b2u[b]] = b;
  }
}

/* A token as its file writes it (UTF-8 of mapped code points) back to its bytes, into out
 * (room for n bytes: never more than the input's); -1 when it is not byte-level. */
static long unmap(const int u2b[N_CP], const char *s, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    int cp, len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : 0;
    if (!len || i + (size_t)len > n)
      return -1; /* byte-level files use code points below 0x800 only */
    cp = len == 1 ? c : (c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F);
    if (len == 2 && ((unsigned char)s[i + 1] & 0xC0) != 0x80)
      return -1;
    if (cp >= N_CP || u2b[cp] < 0)
      return -1;
    out[k++] = (char)u2b[cp];
    i += (size_t)len;
  }
  return (long)k;
}

/* the whole file, NUL-terminated, into *text: 0 or a COLO_E* code with the reason in err */
static int slurp(const char *path, char **text, size_t *len, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  int rc = colo_read_all(f, path, text, len, err, errlen);
  fclose(f);
  return rc;
}

void colo_bpe_free(colo_bpe_t *t) {
  if (!t)
    return;
  free(t->tok);
  free(t->arena);
  free(t->slot);
  free(t->pair_key);
  free(t->pair_rank);
  free(t->pair_id);
  if (t->re)
    pcre2_code_free(t->re);
  free(t);
}

static size_t pow2_above(size_t n) {
  size_t c = 16;
  while (c < 2 * n)
    c *= 2;
  return c;
}

static int load_vocab(colo_bpe_t *t, const char *path, const int u2b[N_CP], char *err,
                      size_t errlen) {
  size_t len;
  char *text;
  int rc = slurp(path, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: not a JSON object of tokens and ids", path);
  }
  size_t bytes = 0, n = 0;
  int max_id = -1;
  cJSON *it;
  cJSON_ArrayForEach(it, root) {
    double id = cJSON_IsNumber(it) ? it->valuedouble : -1;
    if (!(id >= 0 && id < 1 << 24) || id != (int)id) {
      cJSON_Delete(root);
      return colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" has no valid id", path,
                       it->string);
    }
    max_id = (int)id > max_id ? (int)id : max_id;
    bytes += strlen(it->string);
    n++;
  }
  t->n_tok = max_id + 1;
  t->tok = calloc((size_t)(t->n_tok ? t->n_tok : 1), sizeof *t->tok);
  t->arena = malloc(bytes ? bytes : 1);
  t->slot_cap = pow2_above(n);
  t->slot = calloc(t->slot_cap, sizeof *t->slot);
  if (!t->tok || !t->arena || !t->slot) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %s", path);
  }
  size_t at = 0;
  rc = 0;
  cJSON_ArrayForEach(it, root) {
    int id = (int)it->valuedouble;
    long k = unmap(u2b, it->string, strlen(it->string), t->arena + at);
    if (k < 0) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" is not GPT-2's byte-level form",
                     path, it->string);
      break;
    }
    if (t->tok[id].s || lookup(t, t->arena + at, (size_t)k) >= 0) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" or its id %d appears twice", path,
                     it->string, id);
      break;
    }
    t->tok[id] = (tok_t){t->arena + at, (size_t)k};
    size_t i = fnv(t->arena + at, (size_t)k) & (t->slot_cap - 1);
    while (t->slot[i])
      i = (i + 1) & (t->slot_cap - 1);
    t->slot[i] = id + 1;
    at += (size_t)k;
  }
  cJSON_Delete(root);
  for (int b = 0; rc == 0 && b < 256; b++) {
    char c = (char)b;
    if ((t->byte_id[b] = lookup(t, &c, 1)) < 0)
      rc = colo_fail(err, errlen, COLO_EPARSE, "%s: byte 0x%02x has no token of its own", path, b);
  }
  return rc;
}

static int load_merges(colo_bpe_t *t, const char *path, const int u2b[N_CP], char *err,
                       size_t errlen) {
  size_t len;
  char *text;
  int rc = slurp(path, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  size_t lines = 1;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  t->pair_cap = pow2_above(lines);
  t->pair_key = calloc(t->pair_cap, sizeof *t->pair_key);
  t->pair_rank = calloc(t->pair_cap, sizeof *t->pair_rank);
  t->pair_id = calloc(t->pair_cap, sizeof *t->pair_id);
  char *buf = malloc(len + 1);
  if (!t->pair_key || !t->pair_rank || !t->pair_id || !buf) {
    free(text);
    free(buf);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %s", path);
  }
  int rank = 0, line = 0;
  rc = 0;
  for (char *s = text; rc == 0 && *s;) {
    char *e = strchr(s, '\n');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    line++;
    if (n && s[n - 1] == '\r')
      n--;
    char *sp = memchr(s, ' ', n);
    if (n == 0 || (line == 1 && !strncmp(s, "#version", 8))) {
      /* the version line, or an empty one */
    } else if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "%s:%d: not two tokens separated by a space", path,
                     line);
    } else {
      long ka = unmap(u2b, s, (size_t)(sp - s), buf);
      long kb = ka < 0 ? -1 : unmap(u2b, sp + 1, n - (size_t)(sp + 1 - s), buf + ka);
      int a = ka < 0 || kb < 0 ? -1 : lookup(t, buf, (size_t)ka);
      int b = a < 0 ? -1 : lookup(t, buf + ka, (size_t)kb);
      int ab = b < 0 ? -1 : lookup(t, buf, (size_t)(ka + kb));
      if (ab < 0) {
        rc = colo_fail(err, errlen, COLO_EPARSE,
                       "%s:%d: \"%.*s\": a part or the merged token is not in the vocabulary", path,
                       line, (int)n, s);
      } else {
        uint64_t key = (uint64_t)(a + 1) << 32 | (uint32_t)b;
        size_t i = mix(key) & (t->pair_cap - 1);
        while (t->pair_key[i] && t->pair_key[i] != key)
          i = (i + 1) & (t->pair_cap - 1);
        if (!t->pair_key[i]) { /* a repeated merge keeps its first rank */
          t->pair_key[i] = key;
          t->pair_rank[i] = rank;
          t->pair_id[i] = ab;
        }
        rank++;
      }
    }
    s = e ? e + 1 : s + n;
  }
  free(text);
  free(buf);
  return rc;
}

int colo_bpe_load(const char *dir, colo_bpe_t **out, char *err, size_t errlen) {
  *out = NULL;
  static const char *names[2][2] = {{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}};
  char vocab[1200], merges[1200];
  int which = -1;
  for (int k = 0; k < 2 && which < 0; k++) {
    snprintf(vocab, sizeof vocab, "%s/%s", dir, names[k][0]);
    snprintf(merges, sizeof merges, "%s/%s", dir, names[k][1]);
    FILE *a = fopen(vocab, "rb"), *b = fopen(merges, "rb");
    which = a && b ? k : -1;
    if (a)
      fclose(a);
    if (b)
      fclose(b);
  }
  if (which < 0)
    return colo_fail(err, errlen, COLO_ENOENT,
                     "%s has neither vocab.json and merges.txt (HuggingFace's GPT-2) nor "
                     "encoder.json and vocab.bpe (OpenAI's)",
                     dir);
  colo_bpe_t *t = calloc(1, sizeof *t);
  if (!t)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int b2u[256], u2b[N_CP];
  byte_map(b2u, u2b);
  int rc = load_vocab(t, vocab, u2b, err, errlen);
  if (rc == 0)
    rc = load_merges(t, merges, u2b, err, errlen);
  if (rc == 0) {
    int code;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                          &at, NULL);
    if (!t->re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(code, msg, sizeof msg);
      rc = colo_fail(err, errlen, COLO_EINVAL, "the pre-tokenizer's pattern: %s", (char *)msg);
    } else {
      pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* where JIT is there; else interpreted */
    }
  }
  if (rc < 0) {
    colo_bpe_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

int colo_bpe_vocab_size(const colo_bpe_t *t) {
  return t->n_tok;
}

int colo_bpe_lookup(const colo_bpe_t *t, const char *s, size_t n) {
  return lookup(t, s, n);
}

const char *colo_bpe_token(const colo_bpe_t *t, int id, size_t *len) {
  if (id < 0 || id >= t->n_tok || !t->tok[id].s)
    return NULL;
  *len = t->tok[id].len;
  return t->tok[id].s;
}

static int push(int **ids, size_t *n, size_t *cap, const int *v, size_t k) {
  if (*n + k > *cap) {
    size_t c = *cap ? *cap : 1024;
    while (c < *n + k)
      c *= 2;
    int *g = realloc(*ids, c * sizeof *g);
    if (!g)
      return COLO_ENOMEM;
    *ids = g;
    *cap = c;
  }
  memcpy(*ids + *n, v, k * sizeof *v);
  *n += k;
  return 0;
}

/* a candidate merge: the pair at node pos has rank `rank` (when still there) */
typedef struct {
  int rank, pos;
} cand_t;

static int cand_less(cand_t x, cand_t y) {
  return x.rank < y.rank || (x.rank == y.rank && x.pos < y.pos);
}

static void cand_push(cand_t *h, size_t *n, cand_t e) {
  size_t i = (*n)++;
  while (i > 0 && cand_less(e, h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = e;
}

static cand_t cand_pop(cand_t *h, size_t *n) {
  cand_t top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n)
      break;
    if (c + 1 < *n && cand_less(h[c + 1], h[c]))
      c++;
    if (!cand_less(h[c], last))
      break;
    h[i] = h[c];
    i = c;
  }
  if (*n)
    h[i] = last;
  return top;
}

/* One piece: its bytes as tokens, then, as GPT-2's encoder does, the first-ranked pair merged
 * everywhere in one pass from the left, until no pair has a merge. The tokens are a linked list
 * and the candidate pairs a heap by (rank, position), so a pass takes its occurrences in order
 * and a long piece costs m log m rather than m^2; the pairs a pass makes are added after it. */
static int encode_piece(const colo_bpe_t *t, const unsigned char *w, size_t m, int **ids, size_t *n,
                        size_t *cap) {
  if (m == 0)
    return 0;
  int *sym = malloc(m * sizeof *sym), *next = malloc(m * sizeof *next);
  int *prev = malloc(m * sizeof *prev), *done = malloc(m * sizeof *done);
  cand_t *h = malloc(3 * m * sizeof *h);
  size_t nh = 0, nd;
  int rc = sym && next && prev && done && h ? 0 : COLO_ENOMEM, merged;
  for (size_t i = 0; rc == 0 && i < m; i++) {
    sym[i] = t->byte_id[w[i]];
    next[i] = i + 1 < m ? (int)i + 1 : -1;
    prev[i] = (int)i - 1;
  }
  for (size_t i = 0; rc == 0 && i + 1 < m; i++) {
    int r = pair(t, sym[i], sym[i + 1], &merged);
    if (r != INT_MAX)
      cand_push(h, &nh, (cand_t){r, (int)i});
  }
  while (rc == 0 && nh) {
    int r = h[0].rank;
    nd = 0;
    while (nh && h[0].rank == r) { /* this pass: the pair's places, left to right */
      int i = cand_pop(h, &nh).pos, j = next[i];
      if (sym[i] < 0 || j < 0 || pair(t, sym[i], sym[j], &merged) != r)
        continue; /* merged away, or its pair changed since */
      sym[i] = merged;
      sym[j] = -1;
      next[i] = next[j];
      if (next[j] >= 0)
        prev[next[j]] = i;
      done[nd++] = i;
    }
    for (size_t k = 0; k < nd; k++) { /* the pairs the pass made */
      int i = done[k], p = prev[i], q = next[i], x;
      if (p >= 0 && (x = pair(t, sym[p], sym[i], &merged)) != INT_MAX)
        cand_push(h, &nh, (cand_t){x, p});
      if (q >= 0 && (x = pair(t, sym[i], sym[q], &merged)) != INT_MAX)
        cand_push(h, &nh, (cand_t){x, i});
    }
  }
  size_t k = 0;
  for (int i = 0; rc == 0 && i >= 0; i = next[i]) /* node 0 is never merged away */
    sym[k++] = sym[i];
  if (rc == 0)
    rc = push(ids, n, cap, sym, k);
  free(sym);
  free(next);
  free(prev);
  free(done);
  free(h);
  return rc;
}

int colo_bpe_encode(const colo_bpe_t *t, const char *text, size_t len, size_t base, int **ids,
                    size_t *n, size_t *cap, char *err, size_t errlen) {
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->re, NULL);
  if (!md)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int rc = 0;
  uint32_t opts = 0;
  for (size_t off = 0; off < len && rc == 0;) {
    int got = pcre2_match(t->re, (PCRE2_SPTR)text, len, off, opts, md, NULL);
    if (got <= PCRE2_ERROR_UTF8_ERR1 && got >= PCRE2_ERROR_UTF8_ERR21) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "the text is not UTF-8 at byte %zu",
                     base + (size_t)pcre2_get_startchar(md));
      break;
    }
    if (got < 0) { /* every character is a space, a letter, a digit or another: cannot be */
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(got, msg, sizeof msg);
      rc = colo_fail(err, errlen, COLO_EINVAL, "pre-tokenizing at byte %zu: %s", base + off,
                     (char *)msg);
      break;
    }
    opts = PCRE2_NO_UTF_CHECK; /* the first match checked the rest of the text */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (ov[0] != off || ov[1] <= off) {
      rc = colo_fail(err, errlen, COLO_EINVAL, "pre-tokenizing at byte %zu: no piece starts there",
                     base + off);
      break;
    }
    if (encode_piece(t, (const unsigned char *)text + ov[0], ov[1] - ov[0], ids, n, cap) < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the tokens");
    off = ov[1];
  }
  pcre2_match_data_free(md);
  return rc;
}
