#include "choices.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../../common/error.h"

int colo_choices_open(const char *path, colo_choices_t *c, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  int rc = colo_shard_load(path, &c->s, err, errlen);
  if (rc < 0)
    return rc;
  const colo_shard_file_t *f = &c->s.files[0];
  if (c->s.n_files != 1)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: a multiple-choice set is one file, and this names %zu", path, c->s.n_files);
  else if (!f->quest)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s is not a multiple-choice shard (colo-train prepare --context-field "
                   "--endings-field --label-field makes one)",
                   path);
  else if (f->n_quest == 0)
    rc = colo_fail(err, errlen, COLO_EINVAL, "%s holds no questions", path);
  else if (!(c->first = malloc((f->n_quest + 1) * sizeof *c->first)))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (rc < 0) {
    colo_choices_close(c);
    return rc;
  }
  c->f = f;
  c->n_seq = f->n_seq;
  c->n_quest = f->n_quest;
  c->first[0] = 0;
  for (size_t q = 0; q < f->n_quest; q++)
    c->first[q + 1] = c->first[q] + f->quest[2 * q];
  return 0;
}

void colo_choices_limit(colo_choices_t *c, size_t n) {
  if (n > 0 && n < c->f->n_quest) {
    c->n_quest = n;
    c->n_seq = c->first[n];
  }
}

void colo_choices_close(colo_choices_t *c) {
  colo_shard_free(&c->s);
  free(c->first);
  memset(c, 0, sizeof *c);
}

void colo_choices_batch(const colo_choices_t *c, size_t first, int B, int T, int *in, int *tg) {
  const colo_shard_file_t *x = c->f;
  for (int b = 0; b < B; b++) {
    size_t q = first + (size_t)b, a = 0, e = 0;
    if (q < c->n_seq) {
      a = (size_t)x->seq[q];
      e = q + 1 < x->n_seq ? (size_t)x->seq[q + 1] : x->n;
    }
    size_t from = e - a > (size_t)T + 1 ? e - (size_t)T - 1 : a;
    for (int t = 0; t < T; t++) {
      size_t i = from + (size_t)t, j = i + 1;
      in[(size_t)b * T + t] = j < e ? (int)colo_shard_token(x, i) : 0;
      tg[(size_t)b * T + t] = j < e && colo_shard_counts(x, j) ? (int)colo_shard_token(x, j) : -1;
    }
  }
}

int colo_choices_width(const colo_choices_t *c, size_t first, int B, int T) {
  const colo_shard_file_t *x = c->f;
  size_t most = 1;
  for (size_t q = first; q < first + (size_t)B && q < c->n_seq; q++) {
    size_t e = q + 1 < x->n_seq ? (size_t)x->seq[q + 1] : x->n, n = e - (size_t)x->seq[q] - 1;
    most = n > most ? n : most;
  }
  return most < (size_t)T ? (int)most : T;
}

/* the first of n values that is highest (NaN never is) */
static int argmax(const double *v, int n) {
  int best = 0;
  for (int k = 1; k < n; k++)
    if (v[k] > v[best] || isnan(v[best]))
      best = k;
  return best;
}

void colo_choices_score(const colo_choices_t *c, const float *lp, const float *cnt,
                        colo_choices_score_t *out, int (*pick)[3]) {
  size_t right[3] = {0, 0, 0}, most = 0;
  for (size_t q = 0; q < c->n_quest; q++)
    most = c->f->quest[2 * q] > most ? c->f->quest[2 * q] : most;
  double *v = malloc(3 * most * sizeof *v); /* a question's endings' three measures */
  for (size_t q = 0; v && q < c->n_quest; q++) {
    size_t s0 = c->first[q];
    int K = (int)c->f->quest[2 * q], label = (int)c->f->quest[2 * q + 1];
    for (int k = 0; k < K; k++) {
      double l = lp[s0 + k], chars = c->f->chars[s0 + k], n = cnt[s0 + k];
      v[k] = l;
      v[most + k] = chars > 0 ? l / chars : -INFINITY;
      v[2 * most + k] = n > 0 ? l / n : -INFINITY;
    }
    for (int m = 0; m < 3; m++) {
      int p = argmax(v + m * most, K);
      right[m] += p == label;
      if (pick)
        pick[q][m] = p;
    }
  }
  double n = v ? (double)c->n_quest : NAN; /* no memory: no scores */
  free(v);
  *out = (colo_choices_score_t){right[0] / n, right[1] / n, right[2] / n, c->n_quest};
}

/* ---- making a set ---- */

typedef struct {
  int *tok;
  size_t n, cap;
  uint8_t *bits; /* a bit a token: counts */
  size_t bits_cap;
  uint64_t *seq;
  uint32_t *chars;
  size_t n_seq, seq_cap;
  uint32_t *quest;
  size_t n_quest, quest_cap;
} build_t;

static int grow(void **p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 1024;
  while (c < need)
    c *= 2;
  void *g = realloc(*p, c * size);
  if (!g)
    return COLO_ENOMEM;
  *p = g;
  *cap = c;
  return 0;
}

/* n tokens, counting or not */
static int put_tokens(build_t *b, const int *ids, size_t n, int counts) {
  size_t bc = b->bits_cap;
  if (grow((void **)&b->tok, &b->cap, b->n + n, sizeof *b->tok) < 0 ||
      grow((void **)&b->bits, &b->bits_cap, (b->n + n + 7) / 8, 1) < 0)
    return COLO_ENOMEM;
  if (b->bits_cap > bc)
    memset(b->bits + bc, 0, b->bits_cap - bc);
  for (size_t i = 0; i < n; i++, b->n++) {
    b->tok[b->n] = ids[i];
    if (counts)
      b->bits[b->n >> 3] |= (uint8_t)(1u << (b->n & 7));
  }
  return 0;
}

/* the characters (code points) of UTF-8 text: its bytes that do not continue one */
static uint32_t code_points(const char *s, size_t n) {
  uint32_t k = 0;
  for (size_t i = 0; i < n; i++)
    k += ((unsigned char)s[i] & 0xC0) != 0x80;
  return k;
}

/* text's tokens into *ids (bytes, or bpe's: at `where`, COLO_BPE_START for a context, ON for
 * an ending that goes on from it) */
static int encode(const colo_bpe_t *bpe, int where, const char *text, size_t len, int **ids,
                  size_t *n, size_t *cap, char *err, size_t errlen) {
  *n = 0;
  if (bpe)
    return colo_bpe_encode_in(bpe, where, text, len, 0, ids, n, cap, err, errlen);
  if (grow((void **)ids, cap, len + 1, sizeof **ids) < 0)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  for (size_t i = 0; i < len; i++)
    (*ids)[(*n)++] = (unsigned char)text[i];
  return 0;
}

/* the right ending's number from the label: an integer, a string of digits, or a letter */
static int label_of(const cJSON *v, long *out) {
  if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble)) {
    *out = (long)v->valuedouble;
    return 0;
  }
  if (!cJSON_IsString(v) || !v->valuestring[0])
    return -1;
  const char *s = v->valuestring;
  if (s[0] >= 'A' && s[0] <= 'Z' && !s[1]) {
    *out = s[0] - 'A';
    return 0;
  }
  char *e;
  errno = 0;
  *out = strtol(s, &e, 10);
  return *e || errno ? -1 : 0;
}

/* the value at a dotted path of n bytes ("choices.text": j's "choices" object's "text"), or NULL */
static const cJSON *field_at(const cJSON *j, const char *path, size_t n) {
  char key[256];
  while (j && n) {
    const char *dot = memchr(path, '.', n);
    size_t k = dot ? (size_t)(dot - path) : n;
    if (k >= sizeof key)
      return NULL;
    memcpy(key, path, k);
    key[k] = '\0';
    j = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, key) : NULL;
    path += k + (dot != NULL);
    n -= k + (dot != NULL);
  }
  return j;
}

static const cJSON *field(const cJSON *j, const char *path) {
  return field_at(j, path, strlen(path));
}

/* n bytes of s onto the text *t (*len of *cap) */
static int text_add(char **t, size_t *len, size_t *cap, const char *s, size_t n) {
  if (grow((void **)t, cap, *len + n + 1, 1) < 0)
    return COLO_ENOMEM;
  memcpy(*t + *len, s, n);
  *len += n;
  (*t)[*len] = '\0';
  return 0;
}

/* the context: the field's string, or the template with each {path} the line's string there and
 * each \n a new line */
static int context_of(const cJSON *j, const colo_choices_fields_t *fl, char **t, size_t *cap,
                      const char *path, int line, char *err, size_t errlen) {
  size_t len = 0;
  if (!fl->context_template) {
    const cJSON *c = field(j, fl->context_field);
    if (!cJSON_IsString(c))
      return colo_fail(err, errlen, COLO_EPARSE, "%s:%d: \"%s\" is not a string", path, line,
                       fl->context_field);
    return text_add(t, &len, cap, c->valuestring, strlen(c->valuestring));
  }
  int rc = text_add(t, &len, cap, "", 0);
  for (const char *p = fl->context_template; rc == 0 && *p;) {
    const char *close = *p == '{' ? strchr(p, '}') : NULL;
    if (close) {
      const cJSON *v = field_at(j, p + 1, (size_t)(close - p - 1));
      if (!cJSON_IsString(v))
        return colo_fail(err, errlen, COLO_EPARSE,
                         "%s:%d: the context template's %.*s is not a string of the line", path,
                         line, (int)(close - p + 1), p);
      rc = text_add(t, &len, cap, v->valuestring, strlen(v->valuestring));
      p = close + 1;
    } else if (p[0] == '\\' && p[1] == 'n') {
      rc = text_add(t, &len, cap, "\n", 1);
      p += 2;
    } else {
      rc = text_add(t, &len, cap, p++, 1);
    }
  }
  return rc;
}

/* ending k's text: of the list at endings_field, or of its k-th comma-separated field; NULL past
 * the last. *K gets their number. */
static const cJSON *ending_at(const cJSON *j, const char *fields, int k, int *K) {
  if (!strchr(fields, ',')) {
    const cJSON *l = field(j, fields);
    *K = cJSON_IsArray(l) ? cJSON_GetArraySize(l) : 0;
    return cJSON_IsArray(l) ? cJSON_GetArrayItem(l, k) : NULL;
  }
  const cJSON *got = NULL;
  int n = 0;
  for (const char *p = fields;; n++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (n == k)
      got = field_at(j, p, len);
    if (!comma)
      break;
    p = comma + 1;
  }
  *K = n + 1;
  return got;
}

/* the right ending's number: label_of's, or with label_names_field the label's place among
 * those strings (ARC's answerKey among choices.label) */
static int right_one(const cJSON *j, const colo_choices_fields_t *fl, long *out) {
  const cJSON *lab = field(j, fl->label_field);
  if (!fl->label_names_field)
    return lab ? label_of(lab, out) : -1;
  const cJSON *names = field(j, fl->label_names_field), *it;
  long k = 0;
  if (!cJSON_IsArray(names))
    return -1;
  cJSON_ArrayForEach(it, names) {
    if (cJSON_IsString(it) && cJSON_IsString(lab) && !strcmp(it->valuestring, lab->valuestring)) {
      *out = k;
      return 0;
    }
    k++;
  }
  return -1;
}

/* one line's question */
static int question(build_t *b, const cJSON *j, const colo_bpe_t *bpe,
                    const colo_choices_fields_t *fl, const char *path, int line, int **ids,
                    size_t *cap, colo_choices_stats_t *st, char *err, size_t errlen) {
  long label;
  int K;
  if (!cJSON_IsObject(j))
    return colo_fail(err, errlen, COLO_EPARSE, "%s:%d: not a JSON object", path, line);
  ending_at(j, fl->endings_field, 0, &K);
  if (K < 2)
    return colo_fail(err, errlen, COLO_EPARSE, "%s:%d: \"%s\" %s: 2 endings or more", path, line,
                     fl->endings_field,
                     strchr(fl->endings_field, ',') ? "names one field"
                     : K == 1                       ? "is a list of 1"
                     : field(j, fl->endings_field)  ? "is not a list of them"
                                                    : "is not there");
  int bad = right_one(j, fl, &label) < 0 || label < 0 || label >= K;
  if (bad && fl->label_names_field)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "%s:%d: \"%s\" is not one of the names in \"%s\" of the %d endings", path,
                     line, fl->label_field, fl->label_names_field, K);
  if (bad)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "%s:%d: \"%s\" is not the number of one of the %d endings (0 to %d, as a "
                     "number or a string, or a letter A to %c)",
                     path, line, fl->label_field, K, K - 1, 'A' + K - 1);
  char *ctx = NULL;
  size_t nc = 0, ne = 0, ctx_cap = 0;
  int *cids = NULL, *eids = *ids, doc = -1, bos;
  size_t ccap = 0;
  int rc = context_of(j, fl, &ctx, &ctx_cap, path, line, err, errlen);
  if (rc == 0)
    rc = encode(bpe, COLO_BPE_START, ctx, strlen(ctx), &cids, &nc, &ccap, err, errlen);
  free(ctx);
  if (rc == 0 && nc == 0) { /* nothing to predict the ending from but the document token */
    doc = bpe ? colo_bpe_doc_token(bpe, &bos) : -1;
    if (doc < 0)
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s:%d: the context is empty, and %s has no document token to begin with",
                     path, line, bpe ? "the tokenizer" : "bytes as tokens");
  }
  size_t sl = strlen(fl->sep);
  for (int k = 0; rc == 0 && k < K; k++) {
    int unused;
    const cJSON *e = ending_at(j, fl->endings_field, k, &unused);
    if (!cJSON_IsString(e) || !e->valuestring[0]) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "%s:%d: ending %d is not a string of text", path,
                     line, k);
      break;
    }
    size_t el = strlen(e->valuestring);
    char *text = malloc(sl + el + 1);
    if (!text) {
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      break;
    }
    memcpy(text, fl->sep, sl);
    memcpy(text + sl, e->valuestring, el + 1);
    rc = encode(bpe, COLO_BPE_ON, text, sl + el, &eids, &ne, cap, err, errlen);
    uint32_t chars = code_points(text, sl + el);
    free(text);
    if (rc < 0)
      break;
    uint32_t *ch = NULL;
    if (grow((void **)&b->seq, &b->seq_cap, b->n_seq + 1, sizeof *b->seq) < 0 ||
        !(ch = realloc(b->chars, b->seq_cap * sizeof *b->chars))) {
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      break;
    }
    b->chars = ch;
    b->seq[b->n_seq] = b->n;
    b->chars[b->n_seq++] = chars;
    if ((doc >= 0 && put_tokens(b, &doc, 1, 0) < 0) || put_tokens(b, cids, nc, 0) < 0 ||
        put_tokens(b, eids, ne, 1) < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    size_t len = nc + ne + (doc >= 0);
    st->longest = len > st->longest ? len : st->longest;
  }
  *ids = eids;
  free(cids);
  if (rc == COLO_EPARSE && !strstr(err, path)) { /* the tokenizer's: name the line */
    char why[512];
    snprintf(why, sizeof why, "%s", err);
    colo_fail(err, errlen, rc, "%s:%d: %s", path, line, why);
  }
  if (rc < 0)
    return rc;
  if (grow((void **)&b->quest, &b->quest_cap, 2 * b->n_quest + 2, sizeof *b->quest) < 0)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  b->quest[2 * b->n_quest] = (uint32_t)K;
  b->quest[2 * b->n_quest + 1] = (uint32_t)label;
  b->n_quest++;
  return 0;
}

/* the set into path.tmp, flushed to disk, then renamed to path */
static int write_set(const build_t *b, const char *path, int wide, char *err, size_t errlen) {
  if (b->n > INT32_MAX || b->n_seq > INT32_MAX)
    return colo_fail(err, errlen, COLO_ETOOBIG,
                     "%zu tokens, %zu sequences: more than a shard holds", b->n, b->n_seq);
  char tmp[2100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", tmp, strerror(errno));
  int32_t hdr[COLO_SHARD_HEADER_INTS] = {
      COLO_SHARD_MAGIC_CHOICES, COLO_SHARD_VERSION_CHOICES, (int32_t)b->n, wide ? 4 : 2,
      (int32_t)b->n_seq,        (int32_t)b->n_quest};
  int ok = fwrite(hdr, sizeof hdr, 1, f) == 1;
  for (size_t i = 0; ok && i < b->n; i++) {
    uint32_t w = (uint32_t)b->tok[i];
    uint16_t h = (uint16_t)b->tok[i];
    ok = wide ? fwrite(&w, 4, 1, f) == 1 : fwrite(&h, 2, 1, f) == 1;
  }
  size_t nb = (b->n + 7) / 8;
  static const uint8_t zero[8];
  size_t pad = (8 - (sizeof hdr + b->n * (wide ? 4 : 2) + nb) % 8) % 8;
  ok = ok && (nb == 0 || fwrite(b->bits, 1, nb, f) == nb) &&
       (pad == 0 || fwrite(zero, 1, pad, f) == pad);
  ok = ok && (b->n_seq == 0 || fwrite(b->seq, 8, b->n_seq, f) == b->n_seq);
  ok = ok && (b->n_quest == 0 || fwrite(b->quest, 4, 2 * b->n_quest, f) == 2 * b->n_quest);
  ok = ok && (b->n_seq == 0 || fwrite(b->chars, 4, b->n_seq, f) == b->n_seq);
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, path) == 0)
    return 0;
  int e = errno;
  unlink(tmp);
  return colo_fail(err, errlen, COLO_EIO, "%s: %s", tmp, strerror(e));
}

int colo_choices_prepare(const char *input, const char *out_path, const colo_bpe_t *bpe,
                         const colo_choices_fields_t *fields, colo_choices_stats_t *stats,
                         char *err, size_t errlen) {
  memset(stats, 0, sizeof *stats);
  size_t il = strlen(input);
  if ((il > 3 && !strcmp(input + il - 3, ".gz")) || (il > 4 && !strcmp(input + il - 4, ".zst")))
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s: multiple-choice questions are read as plain JSON lines: decompress the "
                     "file first",
                     input);
  char *text;
  size_t len;
  int rc = colo_read_file(input, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  build_t b = {0};
  int *ids = NULL, line = 0;
  size_t cap = 0;
  for (char *s = text; rc == 0 && s < text + len;) {
    char *nl = memchr(s, '\n', (size_t)(text + len - s));
    size_t n = nl ? (size_t)(nl - s) : (size_t)(text + len - s), k = 0;
    line++;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
      k++;
    if (k < n) {
      cJSON *j = cJSON_ParseWithLength(s, n);
      rc = question(&b, j, bpe, fields, input, line, &ids, &cap, stats, err, errlen);
      cJSON_Delete(j);
    }
    s += n + (nl != NULL);
  }
  int wide = bpe && colo_bpe_vocab_size(bpe) > 65536;
  if (rc == 0 && b.n_quest == 0)
    rc = colo_fail(err, errlen, COLO_EINVAL, "%s holds no questions", input);
  if (rc == 0)
    rc = write_set(&b, out_path, wide, err, errlen);
  stats->questions = b.n_quest;
  stats->sequences = b.n_seq;
  stats->tokens = b.n;
  stats->wide = wide;
  free(text);
  free(ids);
  free(b.tok);
  free(b.bits);
  free(b.seq);
  free(b.chars);
  free(b.quest);
  return rc;
}
