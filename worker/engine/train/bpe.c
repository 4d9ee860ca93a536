/* Byte-level BPE: loading GPT-2's files or a HuggingFace tokenizer.json, encoding and decoding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <ctype.h>
#include <limits.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "../../../common/error.h"
#include "data.h"
#include "nfc.h"

/* GPT-2's pre-tokenizer (ByteLevel's use_regex): contractions, letters, digits, other symbols,
 * each with one leading space; whitespace runs leave their last space to the word that follows */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

/* SentencePiece's BPE (sp) merges over the whole text, but no token of its vocabularies has a
 * "▁" (a space, as colo stores it) after anything but another: a merge never joins a run of
 * spaces to what stands before it (load_hf checks this), so the pieces may start at each run */
static const char SP_PATTERN[] = " *[^ ]+| +";
enum { PREPEND_NONE = 0, PREPEND_ALWAYS = 1, PREPEND_FIRST = 2 };

#define N_CP      324 /* the code points bytes are written as: 256 + the 68 unprintable bytes */
#define MAX_SPLIT 4   /* pre-tokenizers that split, one after another */

typedef struct {
  const char *s;
  size_t len;
} tok_t;

struct colo_bpe {
  tok_t *tok; /* by id; s NULL where the vocabulary has no such id */
  int n_tok;
  char *arena; /* every token's bytes */
  int byte_id[256];
  int *slot; /* the model's tokens: bytes -> id: open addressing, id + 1 (0: empty) */
  size_t slot_cap;
  int *special; /* the ids of the added tokens the model's vocabulary does not have */
  int n_special;
  int *added; /* every added token's id, longest first (what colo_bpe_added_at matches) */
  int n_added;
  unsigned char added_first[256]; /* a byte some added token begins with */
  char *chat_template;            /* tokenizer_config.json's (or chat_template.jinja); NULL */
  char *bos_text, *eos_text;      /* tokenizer_config.json's bos_token, eos_token; NULL */
  uint64_t *pair_key;             /* (a + 1) << 32 | b (0: empty) -> rank, merged id */
  int *pair_rank, *pair_id;
  size_t pair_cap;
  pcre2_code *re[MAX_SPLIT]; /* the splits in order: each splits the pieces of the one before */
  int n_re;
  int ignore_merges;   /* a piece that is a token is that token (tiktoken's rule, Llama 3's) */
  int doc, doc_bos;    /* colo_bpe_doc_token's answer */
  int eos;             /* tokenizer_config.json's eos_token; -1: none */
  int nfc;             /* the normalizer is NFC (Qwen2's): text is normalized before it is split */
  int sp;              /* SentencePiece's kind (byte_fallback: Llama 2's, Gemma's): tokens of
                        * characters, "▁" stored as the space it stands for, "<0xNN>" tokens for
                        * the bytes of a character the vocabulary does not have */
  int prepend;         /* sp: a "▁" before a text (PREPEND_ALWAYS: Llama 2's Prepend normalizer,
                        * or before one that begins its input only: PREPEND_FIRST) */
  unsigned char *kind; /* by id: COLO_BPE_* */
  int b2u[256];        /* each byte's byte-level character (byte_map) */
  char patterns[1024]; /* the splits' patterns, each ended by '\n' (colo_bpe_pre_name) */
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

/* A SentencePiece token as colo stores it: its UTF-8 with each "▁" (U+2581) a space, into out
 * (never longer than the input) */
static long sp_text(const char *s, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (i + 2 < n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
      out[k++] = ' ';
      i += 2;
    } else {
      out[k++] = s[i];
    }
  }
  return (long)k;
}

/* the byte a byte-fallback token "<0xNN>" stands for; -1 for any other token */
static int byte_token(const char *s) {
  unsigned v;
  char end;
  if (strlen(s) != 6 || strncmp(s, "<0x", 3) || s[5] != '>' ||
      sscanf(s + 3, "%2x%c", &v, &end) != 2 || end != '>' || !isxdigit((unsigned char)s[3]) ||
      !isxdigit((unsigned char)s[4]))
    return -1;
  return (int)v;
}

/* a token of the model's files as colo stores it: its bytes (byte-level), or its text (sp) */
static long token_text(const colo_bpe_t *t, const int u2b[N_CP], const char *s, size_t n,
                       char *out) {
  return t->sp ? sp_text(s, n, out) : unmap(u2b, s, n, out);
}

/* the file as a JSON object into *out (cJSON_Delete it): 0, or a COLO_E* code with the reason */
static int read_json(const char *path, cJSON **out, char *err, size_t errlen) {
  size_t len;
  char *text;
  *out = NULL;
  int rc = colo_read_file(path, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  *out = cJSON_ParseWithLength(text, len);
  free(text);
  if (cJSON_IsObject(*out))
    return 0;
  cJSON_Delete(*out);
  *out = NULL;
  return colo_fail(err, errlen, COLO_EPARSE, "%s: not a JSON object", path);
}

void colo_bpe_free(colo_bpe_t *t) {
  if (!t)
    return;
  free(t->tok);
  free(t->arena);
  free(t->slot);
  free(t->special);
  free(t->added);
  free(t->kind);
  free(t->chat_template);
  free(t->bos_text);
  free(t->eos_text);
  free(t->pair_key);
  free(t->pair_rank);
  free(t->pair_id);
  for (int i = 0; i < t->n_re; i++)
    pcre2_code_free(t->re[i]);
  free(t);
}

static size_t pow2_above(size_t n) {
  size_t c = 16;
  while (c < 2 * n)
    c *= 2;
  return c;
}

/* The tokens: the model's vocabulary (an object of byte-level tokens and their ids) and the
 * added tokens a tokenizer.json lists (objects of id and content; NULL for none), whose content
 * is their bytes as they are. `file` names the source in messages. */
static int load_vocab(colo_bpe_t *t, const cJSON *vocab, const cJSON *added, const char *file,
                      const int u2b[N_CP], char *err, size_t errlen) {
  size_t bytes = 0, n = 0, n_added = 0;
  int max_id = -1;
  const cJSON *it;
  cJSON_ArrayForEach(it, vocab) {
    double id = cJSON_IsNumber(it) ? it->valuedouble : -1;
    if (!(id >= 0 && id < 1 << 24) || id != (int)id)
      return colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" has no valid id", file,
                       it->string);
    max_id = (int)id > max_id ? (int)id : max_id;
    bytes += strlen(it->string);
    n++;
  }
  cJSON_ArrayForEach(it, added) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(it, "content");
    double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
    if (!cJSON_IsString(s) || !(v >= 0 && v < 1 << 24) || v != (int)v)
      return colo_fail(err, errlen, COLO_EPARSE,
                       "%s: added_tokens[%zu] has no valid id and content", file, n_added);
    max_id = (int)v > max_id ? (int)v : max_id;
    bytes += strlen(s->valuestring);
    n_added++;
  }
  t->n_tok = max_id + 1;
  t->tok = calloc((size_t)(t->n_tok ? t->n_tok : 1), sizeof *t->tok);
  t->arena = malloc(bytes ? bytes : 1);
  t->slot_cap = pow2_above(n);
  t->slot = calloc(t->slot_cap, sizeof *t->slot);
  t->special = malloc((n_added ? n_added : 1) * sizeof *t->special);
  t->added = malloc((n_added ? n_added : 1) * sizeof *t->added);
  t->kind = calloc((size_t)(t->n_tok ? t->n_tok : 1), 1);
  if (!t->tok || !t->arena || !t->slot || !t->special || !t->added || !t->kind)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %s", file);
  size_t at = 0;
  for (int b = 0; b < 256; b++)
    t->byte_id[b] = -1;
  cJSON_ArrayForEach(it, vocab) {
    int id = (int)it->valuedouble, fb = t->sp ? byte_token(it->string) : -1;
    if (fb >= 0) { /* a byte of a character the vocabulary lacks: decoded, never looked up */
      if (t->tok[id].s || t->byte_id[fb] >= 0)
        return colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" or its id %d appears twice",
                         file, it->string, id);
      t->arena[at] = (char)fb;
      t->tok[id] = (tok_t){t->arena + at++, 1};
      t->kind[id] = COLO_BPE_NORMAL;
      t->byte_id[fb] = id;
      continue;
    }
    long k = token_text(t, u2b, it->string, strlen(it->string), t->arena + at);
    if (k < 0)
      return colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" is not GPT-2's byte-level form",
                       file, it->string);
    if (t->tok[id].s || lookup(t, t->arena + at, (size_t)k) >= 0)
      return colo_fail(err, errlen, COLO_EPARSE, "%s: token \"%s\" or its id %d appears twice",
                       file, it->string, id);
    t->tok[id] = (tok_t){t->arena + at, (size_t)k};
    t->kind[id] = COLO_BPE_NORMAL;
    size_t i = fnv(t->arena + at, (size_t)k) & (t->slot_cap - 1);
    while (t->slot[i])
      i = (i + 1) & (t->slot_cap - 1);
    t->slot[i] = id + 1;
    at += (size_t)k;
  }
  /* an added token the vocabulary has already (GPT-2's <|endoftext|>) stays as it is there */
  cJSON_ArrayForEach(it, added) {
    int id = (int)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
    const char *s = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
    size_t k = strlen(s);
    t->kind[id] = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(it, "special")) ? COLO_BPE_ADDED
                                                                                 : COLO_BPE_SPECIAL;
    if (k) { /* longest first: insertion into the sorted list */
      int j = t->n_added++;
      while (j > 0 && k > t->tok[t->added[j - 1]].len)
        t->added[j] = t->added[j - 1], j--;
      t->added[j] = id;
      t->added_first[(unsigned char)s[0]] = 1;
    }
    if (t->tok[id].s)
      continue;
    memcpy(t->arena + at, s, k);
    t->tok[id] = (tok_t){t->arena + at, k};
    t->special[t->n_special++] = id;
    at += k;
  }
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    if (!t->sp && (t->byte_id[b] = lookup(t, &c, 1)) < 0)
      return colo_fail(err, errlen, COLO_EPARSE, "%s: byte 0x%02x has no token of its own", file,
                       b);
  }
  for (int id = 0; t->sp && id < t->n_tok; id++) { /* SP_PATTERN's premise */
    const tok_t *k = &t->tok[id];
    for (size_t i = 1; k->s && t->kind[id] == COLO_BPE_NORMAL && i < k->len; i++)
      if (k->s[i] == ' ' && k->s[i - 1] != ' ')
        return colo_fail(err, errlen, COLO_EINVAL,
                         "%s: token %d \"%.*s\" has a \"▁\" after another character, which "
                         "colo's reading of SentencePiece's BPE does not take",
                         file, id, (int)k->len, k->s);
  }
  return 0;
}

static int merges_alloc(colo_bpe_t *t, size_t n) {
  t->pair_cap = pow2_above(n);
  t->pair_key = calloc(t->pair_cap, sizeof *t->pair_key);
  t->pair_rank = calloc(t->pair_cap, sizeof *t->pair_rank);
  t->pair_id = calloc(t->pair_cap, sizeof *t->pair_id);
  return t->pair_key && t->pair_rank && t->pair_id ? 0 : COLO_ENOMEM;
}

/* The merge of byte-level tokens a and b (as their files write them) at the next rank; buf has
 * room for their bytes. -1 when a part or the merged token is not in the vocabulary. */
static int add_merge(colo_bpe_t *t, const int u2b[N_CP], const char *a, size_t na, const char *b,
                     size_t nb, int *rank, char *buf) {
  long ka = token_text(t, u2b, a, na, buf);
  long kb = ka < 0 ? -1 : token_text(t, u2b, b, nb, buf + ka);
  int x = ka < 0 || kb < 0 ? -1 : lookup(t, buf, (size_t)ka);
  int y = x < 0 ? -1 : lookup(t, buf + ka, (size_t)kb);
  int xy = y < 0 ? -1 : lookup(t, buf, (size_t)(ka + kb));
  if (xy < 0)
    return -1;
  uint64_t key = (uint64_t)(x + 1) << 32 | (uint32_t)y;
  size_t i = mix(key) & (t->pair_cap - 1);
  while (t->pair_key[i] && t->pair_key[i] != key)
    i = (i + 1) & (t->pair_cap - 1);
  if (!t->pair_key[i]) { /* a repeated merge keeps its first rank */
    t->pair_key[i] = key;
    t->pair_rank[i] = *rank;
    t->pair_id[i] = xy;
  }
  (*rank)++;
  return 0;
}

static int load_merges(colo_bpe_t *t, const char *path, const int u2b[N_CP], char *err,
                       size_t errlen) {
  size_t len;
  char *text;
  int rc = colo_read_file(path, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  size_t lines = 1;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  char *buf = malloc(len + 1);
  if (merges_alloc(t, lines) < 0 || !buf) {
    free(text);
    free(buf);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %s", path);
  }
  int rank = 0, line = 0;
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
    } else if (add_merge(t, u2b, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp + 1 - s), &rank,
                         buf) < 0) {
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s:%d: \"%.*s\": a part or the merged token is not in the vocabulary", path,
                     line, (int)n, s);
    }
    s = e ? e + 1 : s + n;
  }
  free(text);
  free(buf);
  return rc;
}

/* a pre-tokenizer's pattern, compiled (literal: a Split's String) */
static int add_split(colo_bpe_t *t, const char *pattern, int literal, const char *file, char *err,
                     size_t errlen) {
  if (t->n_re == MAX_SPLIT)
    return colo_fail(err, errlen, COLO_EINVAL, "%s: more than %d splitting pre-tokenizers", file,
                     MAX_SPLIT);
  int code;
  PCRE2_SIZE at;
  pcre2_code *re =
      pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &code, &at, NULL);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return colo_fail(err, errlen, COLO_EINVAL, "%s: the pre-tokenizer's pattern \"%s\": %s", file,
                     pattern, (char *)msg);
  }
  uint32_t behind = 0;
  pcre2_pattern_info(re, PCRE2_INFO_MAXLOOKBEHIND, &behind);
  if (t->n_re == 0 && behind > 0) { /* the first split streams from piece boundaries */
    pcre2_code_free(re);
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s: the pre-tokenizer's pattern \"%s\" looks behind (a lookbehind, \\b or "
                     "\\B), which colo does not read in the first split",
                     file, pattern);
  }
  /* where JIT is there (else interpreted), with hard partial matching for the streamed split */
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
  t->re[t->n_re++] = re;
  size_t used = strlen(t->patterns);
  snprintf(t->patterns + used, sizeof t->patterns - used, "%s%s\n", literal ? "=" : "", pattern);
  return 0;
}

static const char *json_str(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A tokenizer.json's pre_tokenizer: Split (a Regex or String pattern, behavior Isolated),
 * Digits, and ByteLevel (GPT-2's pattern under use_regex), alone or in a Sequence; a Split
 * after the ByteLevel would see its byte-level characters, and is refused with the others. */
static int load_pre(colo_bpe_t *t, const cJSON *p, int *byte_level, const char *file, char *err,
                    size_t errlen) {
  const char *type = json_str(p, "type");
  if (!type)
    return colo_fail(err, errlen, COLO_EPARSE, "%s: a pre_tokenizer without a type", file);
  if (!strcmp(type, "Sequence")) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) {
      int rc = load_pre(t, it, byte_level, file, err, errlen);
      if (rc < 0)
        return rc;
    }
    return 0;
  }
  if (*byte_level)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s: a %s pre-tokenizer after ByteLevel; colo reads splits before it only",
                     file, type);
  if (!strcmp(type, "ByteLevel")) {
    *byte_level = 1;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space")))
      return colo_fail(err, errlen, COLO_EINVAL,
                       "%s: a ByteLevel pre-tokenizer with add_prefix_space, which colo does not "
                       "read",
                       file);
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
    return re && cJSON_IsFalse(re) ? 0 : add_split(t, GPT2_PATTERN, 0, file, err, errlen);
  }
  if (!strcmp(type, "Digits"))
    return add_split(t,
                     cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "individual_digits"))
                         ? "\\p{N}"
                         : "\\p{N}+",
                     0, file, err, errlen);
  if (!strcmp(type, "Split")) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
    const char *re = json_str(pat, "Regex"), *lit = json_str(pat, "String");
    const char *behavior = json_str(p, "behavior");
    if (!re && !lit)
      return colo_fail(err, errlen, COLO_EPARSE, "%s: a Split without a Regex or String pattern",
                       file);
    if (!behavior || strcmp(behavior, "Isolated") ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "invert")))
      return colo_fail(err, errlen, COLO_EINVAL,
                       "%s: a Split with behavior %s%s; colo reads Isolated, not inverted", file,
                       behavior ? behavior : "(none)",
                       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "invert")) ? ", inverted"
                                                                                   : "");
    return add_split(t, re ? re : lit, !re, file, err, errlen);
  }
  return colo_fail(err, errlen, COLO_EINVAL,
                   "%s: a %s pre-tokenizer, which colo does not read (it reads Split, Digits and "
                   "ByteLevel)",
                   file, type);
}

/* The special token a post-processor's template puts before the text (Llama 3's
 * <|begin_of_text|>): its id, or -1 */
static int template_bos(const colo_bpe_t *t, const cJSON *pp) {
  const char *type = json_str(pp, "type");
  const cJSON *it;
  if (type && !strcmp(type, "Sequence")) {
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
      int id = template_bos(t, it);
      if (id >= 0)
        return id;
    }
    return -1;
  }
  if (!type || strcmp(type, "TemplateProcessing"))
    return -1;
  const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
  const char *name = json_str(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
  if (!name)
    return -1;
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pp, "special_tokens"),
                                       name),
      "ids");
  const cJSON *id = cJSON_GetArrayItem(ids, 0);
  if (cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble < t->n_tok &&
      t->tok[(int)id->valuedouble].s)
    return (int)id->valuedouble;
  return colo_bpe_lookup(t, name, strlen(name));
}

/* the model's field, when it is there and not null */
static const cJSON *field(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A tokenizer.json's normalizer: 1 for NFC (alone, or in a Sequence with nothing else), 0 for
 * none (an empty Sequence), -1 for any other */
static int normalizer_nfc(const cJSON *norm) {
  const char *type = json_str(norm, "type");
  if (type && !strcmp(type, "NFC"))
    return 1;
  if (!type || strcmp(type, "Sequence"))
    return -1;
  int nfc = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(norm, "normalizers")) {
    int k = normalizer_nfc(it);
    if (k < 0)
      return -1;
    nfc |= k;
  }
  return nfc;
}

/* whether a normalizer or pre-tokenizer field `key` of o is the string "▁" */
static int is_meta(const cJSON *o, const char *key) {
  const char *v = json_str(o, key);
  return v && !strcmp(v, "\xe2\x96\x81");
}

/* SentencePiece's BPE as HuggingFace converts it (byte_fallback): the normalizer Replace(" ",
 * "▁"), after Prepend("▁") where every text begins with one (Llama 2's, Mistral's; not Gemma's),
 * and no pre-tokenizer; or no normalizer and Metaspace (its "▁", prepend_scheme always or never,
 * split false). Then the split SP_PATTERN. */
static int load_sp(colo_bpe_t *t, const cJSON *norm, const cJSON *pre, const char *file, char *err,
                   size_t errlen) {
  const cJSON *list = norm, *it;
  const char *type = json_str(norm, "type");
  int replace = 0, bad = 0;
  if (type && !strcmp(type, "Sequence"))
    list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
  else if (norm)
    list = NULL;
  for (it = list ? list->child : norm; norm && it; it = list ? it->next : NULL) {
    const char *k = json_str(it, "type");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(it, "pattern");
    if (k && !strcmp(k, "Prepend") && is_meta(it, "prepend") && !replace && !t->prepend)
      t->prepend = PREPEND_ALWAYS;
    else if (k && !strcmp(k, "Replace") && is_meta(it, "content") && json_str(pat, "String") &&
             !strcmp(json_str(pat, "String"), " ") && !replace)
      replace = 1;
    else
      bad = 1;
  }
  if (pre && !norm) { /* Metaspace in place of the normalizer */
    const char *k = json_str(pre, "type"), *scheme = json_str(pre, "prepend_scheme");
    if (!k || strcmp(k, "Metaspace") || !is_meta(pre, "replacement") ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "split")) ||
        (scheme && strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never")))
      return colo_fail(
          err, errlen, COLO_EINVAL,
          "%s: a SentencePiece tokenizer with a %s pre-tokenizer%s%s%s; colo reads "
          "Metaspace with split false and prepend_scheme always, first or never",
          file, k ? k : "(untyped)", scheme ? " of prepend_scheme " : "", scheme ? scheme : "",
          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "split")) ? ", split" : "");
    t->prepend = !scheme ? (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"))
                                ? PREPEND_ALWAYS
                                : PREPEND_NONE)
                 : !strcmp(scheme, "always") ? PREPEND_ALWAYS
                 : !strcmp(scheme, "first")  ? PREPEND_FIRST
                                             : PREPEND_NONE;
    replace = 1;
  } else if (pre) {
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s: a SentencePiece tokenizer with a %s pre-tokenizer beside its normalizer, "
                     "which colo does not read",
                     file, json_str(pre, "type") ? json_str(pre, "type") : "(untyped)");
  }
  if (bad || !replace)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s: a SentencePiece tokenizer (byte_fallback) whose normalizer is not "
                     "Replace(\" \", \"▁\"), after Prepend(\"▁\") or alone, which colo does not "
                     "read",
                     file);
  return add_split(t, SP_PATTERN, 0, file, err, errlen);
}

static int load_hf(colo_bpe_t *t, const char *path, const int u2b[N_CP], char *err, size_t errlen) {
  cJSON *root;
  int rc = read_json(path, &root, err, errlen);
  if (rc < 0)
    return rc;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const char *type = json_str(model, "type");
  const cJSON *norm = field(root, "normalizer"), *pre = field(root, "pre_tokenizer"), *v;
  int byte_level = 0;
  if (!cJSON_IsObject(model))
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: not a tokenizer.json (no model object)", path);
  else if (type && strcmp(type, "BPE"))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: a %s model; colo reads byte-level BPE tokenizers (GPT-2's, Llama 3's)",
                   path, type);
  else if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: the model has no vocab object and merges list",
                   path);
  else if ((t->sp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) &&
           (rc = load_sp(t, norm, pre, path, err, errlen)) < 0)
    ;
  else if (((v = field(model, "continuing_subword_prefix")) && cJSON_IsString(v) &&
            *v->valuestring) ||
           ((v = field(model, "end_of_word_suffix")) && cJSON_IsString(v) && *v->valuestring))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: a BPE with a subword prefix or suffix, which colo does not read", path);
  else if ((v = field(model, "dropout")) && cJSON_IsNumber(v) && v->valuedouble > 0)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: a BPE with dropout %g; colo encodes without (set it to null)", path,
                   v->valuedouble);
  else if (!t->sp && norm && (t->nfc = normalizer_nfc(norm)) < 0)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: a %s normalizer, which colo does not read (it reads tokenizers without "
                   "one, as GPT-2's and Llama 3's are, and NFC, Qwen2's)",
                   path, json_str(norm, "type") ? json_str(norm, "type") : "(untyped)");
  else if (!t->sp && !pre)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: no pre_tokenizer; colo reads byte-level BPE tokenizers, whose "
                   "pre-tokenizer is ByteLevel, and SentencePiece's (byte_fallback)",
                   path);
  if (rc == 0 && !t->sp)
    rc = load_pre(t, pre, &byte_level, path, err, errlen);
  if (rc == 0 && !t->sp && !byte_level)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: no ByteLevel pre-tokenizer; colo reads byte-level BPE tokenizers", path);
  if (rc == 0 && t->n_re == 0)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: no pre-tokenizer splits the text (ByteLevel without use_regex and no "
                   "Split), which colo does not read",
                   path);
  if (rc == 0)
    rc = load_vocab(t, vocab, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), path, u2b,
                    err, errlen);
  const char *unk = json_str(model, "unk_token");
  int unk_id = rc == 0 && unk ? colo_bpe_lookup(t, unk, strlen(unk)) : -1;
  for (int b = 0; rc == 0 && t->sp && b < 256; b++) /* a byte without its <0xNN>: unknown */
    if (t->byte_id[b] < 0 && (t->byte_id[b] = unk_id) < 0)
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s: byte 0x%02x has no byte-fallback token <0x%02X>, and the model no "
                     "unk_token",
                     path, b, b);
  t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
  size_t longest = 0, i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, merges) {
    const char *s = cJSON_IsString(it) ? it->valuestring : NULL;
    size_t k = s ? strlen(s) : 0;
    for (const cJSON *p = cJSON_IsArray(it) ? it->child : NULL; p; p = p->next)
      k += cJSON_IsString(p) ? strlen(p->valuestring) : 0;
    longest = k > longest ? k : longest;
  }
  char *buf = rc == 0 ? malloc(longest + 1) : NULL;
  if (rc == 0 && (!buf || merges_alloc(t, (size_t)cJSON_GetArraySize(merges)) < 0))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %s", path);
  int rank = 0;
  cJSON_ArrayForEach(it, merges) {
    if (rc < 0)
      break;
    const char *a = NULL, *b = NULL; /* "a b", or ["a", "b"] as newer files write them */
    size_t na = 0, nb = 0;
    if (cJSON_IsString(it)) {
      const char *sp = strchr(it->valuestring, ' ');
      if (sp && sp > it->valuestring && sp[1] && !strchr(sp + 1, ' '))
        a = it->valuestring, na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
    } else if (cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
               cJSON_IsString(it->child->next)) {
      a = it->child->valuestring, na = strlen(a);
      b = it->child->next->valuestring, nb = strlen(b);
    }
    if (!a)
      rc =
          colo_fail(err, errlen, COLO_EPARSE,
                    "%s: model.merges[%zu] is not two tokens (\"a b\" or [\"a\", \"b\"])", path, i);
    else if (add_merge(t, u2b, a, na, b, nb, &rank, buf) < 0)
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s: model.merges[%zu] \"%.*s\" \"%.*s\": a part or the merged token is not "
                     "in the vocabulary",
                     path, i, (int)na, a, (int)nb, b);
    i++;
  }
  free(buf);
  if (rc == 0)
    t->doc_bos = (t->doc = template_bos(t, field(root, "post_processor"))) >= 0;
  cJSON_Delete(root);
  return rc;
}

static int is_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* a tokenizer_config.json's special token: a string, or an object with its content */
static const char *config_token(const cJSON *config, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, key);
  return cJSON_IsString(v) ? v->valuestring : json_str(v, "content");
}

/* the file `name` in the folder of `path` */
static void beside(const char *path, const char *name, char *out, size_t n) {
  const char *slash = strrchr(path, '/');
  if (slash)
    snprintf(out, n, "%.*s/%s", (int)(slash - path), path, name);
  else
    snprintf(out, n, "%s", name);
}

/* The tokenizer_config.json beside the tokenizer.json, when there is one: its eos_token, and
 * where the post-processor has no template, its bos_token when that differs from its eos_token
 * (Llama 3's <|begin_of_text|>, where GPT-2's names <|endoftext|> for both). */
static int read_config(colo_bpe_t *t, const char *path, char *err, size_t errlen) {
  char cfg[1300];
  beside(path, "tokenizer_config.json", cfg, sizeof cfg);
  cJSON *root;
  if (!is_file(cfg))
    return 0;
  int rc = read_json(cfg, &root, err, errlen);
  if (rc < 0)
    return rc;
  const char *bos = config_token(root, "bos_token"), *eos = config_token(root, "eos_token");
  int id = bos && !(eos && !strcmp(bos, eos)) ? colo_bpe_lookup(t, bos, strlen(bos)) : -1;
  if (id >= 0 && t->doc < 0)
    t->doc = id, t->doc_bos = 1;
  if (eos)
    t->eos = colo_bpe_lookup(t, eos, strlen(eos));
  /* the chat template: a string, or a list of {name, template} of which "default" */
  const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template"), *x;
  const cJSON *list = cJSON_IsArray(ct) ? ct : NULL;
  const char *tpl = cJSON_IsString(ct) ? ct->valuestring : NULL;
  cJSON_ArrayForEach(x, list) {
    const char *name = json_str(x, "name");
    if (name && !strcmp(name, "default"))
      tpl = json_str(x, "template");
  }
  if ((bos && !(t->bos_text = strdup(bos))) || (eos && !(t->eos_text = strdup(eos))) ||
      (tpl && !(t->chat_template = strdup(tpl)))) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  cJSON_Delete(root);
  return 0;
}

/* chat_template.jinja beside the tokenizer.json (where transformers now saves the template),
 * which takes the place of tokenizer_config.json's */
static int read_template_file(colo_bpe_t *t, const char *path, char *err, size_t errlen) {
  char f[1300];
  beside(path, "chat_template.jinja", f, sizeof f);
  if (!is_file(f))
    return 0;
  char *text;
  size_t len;
  int rc = colo_read_file(f, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  free(t->chat_template);
  t->chat_template = text;
  return 0;
}

int colo_bpe_load(const char *path, colo_bpe_t **out, char *err, size_t errlen) {
  *out = NULL;
  static const char *names[2][2] = {{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}};
  char hf[1200], vocab[1200], merges[1200];
  int which = -1;
  if (is_file(path))
    snprintf(hf, sizeof hf, "%s", path);
  else
    snprintf(hf, sizeof hf, "%s/tokenizer.json", path);
  if (is_file(hf))
    which = 2;
  for (int k = 0; k < 2 && which < 0; k++) {
    snprintf(vocab, sizeof vocab, "%s/%s", path, names[k][0]);
    snprintf(merges, sizeof merges, "%s/%s", path, names[k][1]);
    which = is_file(vocab) && is_file(merges) ? k : -1;
  }
  if (which < 0)
    return colo_fail(err, errlen, COLO_ENOENT,
                     "%s has no tokenizer.json (HuggingFace's), vocab.json and merges.txt "
                     "(HuggingFace's GPT-2) or encoder.json and vocab.bpe (OpenAI's)",
                     path);
  colo_bpe_t *t = calloc(1, sizeof *t);
  if (!t)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  t->doc = t->eos = -1;
  int u2b[N_CP], rc;
  byte_map(t->b2u, u2b);
  if (which == 2) {
    rc = load_hf(t, hf, u2b, err, errlen);
    if (rc == 0)
      rc = read_config(t, hf, err, errlen);
    if (rc == 0)
      rc = read_template_file(t, hf, err, errlen);
  } else {
    cJSON *root;
    rc = read_json(vocab, &root, err, errlen);
    if (rc == 0)
      rc = load_vocab(t, root, NULL, vocab, u2b, err, errlen);
    cJSON_Delete(root);
    if (rc == 0)
      rc = load_merges(t, merges, u2b, err, errlen);
    if (rc == 0)
      rc = add_split(t, GPT2_PATTERN, 0, vocab, err, errlen);
  }
  if (rc == 0 && t->doc < 0) { /* GPT-2's delimiter, where the vocabulary has it */
    static const char EOT[] = "<|endoftext|>";
    t->doc = colo_bpe_lookup(t, EOT, sizeof EOT - 1);
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
  int id = lookup(t, s, n);
  for (int i = 0; id < 0 && i < t->n_special; i++) {
    const tok_t *k = &t->tok[t->special[i]];
    if (k->len == n && !memcmp(k->s, s, n))
      id = t->special[i];
  }
  return id;
}

int colo_bpe_doc_token(const colo_bpe_t *t, int *bos) {
  *bos = t->doc_bos;
  return t->doc;
}

int colo_bpe_eos(const colo_bpe_t *t) {
  return t->eos;
}

int colo_bpe_added_at(const colo_bpe_t *t, const char *s, size_t n, size_t *len) {
  if (!n || !t->added_first[(unsigned char)s[0]])
    return -1;
  for (int i = 0; i < t->n_added; i++) {
    const tok_t *k = &t->tok[t->added[i]];
    if (k->len <= n && !memcmp(k->s, s, k->len)) {
      *len = k->len;
      return t->added[i];
    }
  }
  return -1;
}

const char *colo_bpe_chat_template(const colo_bpe_t *t) {
  return t->chat_template;
}

const char *colo_bpe_special_text(const colo_bpe_t *t, int eos) {
  return eos ? t->eos_text : t->bos_text;
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

/* One piece: under ignore_merges the token it is, if it is one; else its bytes as tokens, then,
 * as GPT-2's encoder does, the first-ranked pair merged
 * everywhere in one pass from the left, until no pair has a merge. The tokens are a linked list
 * and the candidate pairs a heap by (rank, position), so a pass takes its occurrences in order
 * and a long piece costs m log m rather than m^2; the pairs a pass makes are added after it. */
static int encode_piece(const colo_bpe_t *t, const unsigned char *w, size_t m, int **ids, size_t *n,
                        size_t *cap) {
  if (m == 0)
    return 0;
  if (t->ignore_merges) {
    int id = lookup(t, (const char *)w, m);
    if (id >= 0)
      return push(ids, n, cap, &id, 1);
  }
  /* most pieces are short: their lists on the stack */
  enum { SHORT = 64 };
  int s_sym[SHORT], s_next[SHORT], s_prev[SHORT], s_done[SHORT];
  cand_t s_h[3 * SHORT];
  int small = m <= SHORT;
  int *sym = small ? s_sym : malloc(m * sizeof *sym);
  int *next = small ? s_next : malloc(m * sizeof *next);
  int *prev = small ? s_prev : malloc(m * sizeof *prev);
  int *done = small ? s_done : malloc(m * sizeof *done);
  cand_t *h = small ? s_h : malloc(3 * m * sizeof *h);
  size_t nh = 0, nd;
  int rc = sym && next && prev && done && h ? 0 : COLO_ENOMEM, merged;
  size_t ns = 0; /* the first symbols: bytes, or (sp) characters and the bytes of unknown ones */
  for (size_t i = 0, c; rc == 0 && i < m; i += c) {
    c = !t->sp || w[i] < 0xc0 ? 1 : w[i] < 0xe0 ? 2 : w[i] < 0xf0 ? 3 : 4;
    int id = t->sp ? lookup(t, (const char *)w + i, c) : t->byte_id[w[i]];
    for (size_t b = 0; b < (id < 0 ? c : 1); b++)
      sym[ns++] = id < 0 ? t->byte_id[w[i + b]] : id;
  }
  for (size_t i = 0; rc == 0 && i < ns; i++) {
    next[i] = i + 1 < ns ? (int)i + 1 : -1;
    prev[i] = (int)i - 1;
  }
  m = ns;
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
  if (!small) {
    free(sym);
    free(next);
    free(prev);
    free(done);
    free(h);
  }
  return rc;
}

/* the ovector's first pair after a match */
static void span(pcre2_match_data *md, size_t *a, size_t *b) {
  PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
  *a = ov[0];
  *b = ov[1];
}

/* One piece of split `level - 1` through the splits from `level` on (each split's matches and
 * the text between them are pieces: HuggingFace's Isolated behavior), then BPE. */
static int encode_level(const colo_bpe_t *t, int level, const char *s, size_t len,
                        pcre2_match_data *md, int **ids, size_t *n, size_t *cap) {
  if (level >= t->n_re || level >= MAX_SPLIT)
    return encode_piece(t, (const unsigned char *)s, len, ids, n, cap);
  int rc = 0;
  size_t off = 0, a, b;
  while (rc == 0 && off < len) {
    int got = pcre2_match(t->re[level], (PCRE2_SPTR)s, len, off,
                          PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY, md, NULL);
    if (got == PCRE2_ERROR_NOMATCH) {
      a = b = len;
    } else if (got < 0) {
      return COLO_EINVAL;
    } else {
      span(md, &a, &b);
    }
    if (a > off)
      rc = encode_level(t, level + 1, s + off, a - off, md, ids, n, cap);
    if (rc == 0 && b > a)
      rc = encode_level(t, level + 1, s + a, b - a, md, ids, n, cap);
    off = b;
  }
  return rc;
}

static int push_end(uint32_t **ends, size_t *n, size_t *cap, size_t v) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 1024;
    uint32_t *g = realloc(*ends, c * sizeof *g);
    if (!g)
      return COLO_ENOMEM;
    *ends = g;
    *cap = c;
  }
  (*ends)[(*n)++] = (uint32_t)v;
  return 0;
}

size_t colo_utf8_invalid(const char *text, size_t n) {
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    /* the sequence's length and the range of its second byte (the rest: 80..BF) */
    size_t k = c >= 0xC2 && c <= 0xDF   ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (!k || i + k > n || s[i + 1] < lo || s[i + 1] > hi)
      return i;
    for (size_t j = 2; j < k; j++)
      if ((s[i + j] & 0xC0) != 0x80)
        return i;
    i += k;
  }
  return n;
}

int colo_bpe_split(const colo_bpe_t *t, const char *text, size_t len, size_t from, size_t until,
                   int more, uint32_t **ends, size_t *n, size_t *cap, size_t *done, char *err,
                   size_t errlen) {
  *done = from;
  if (len > UINT32_MAX)
    return colo_fail(err, errlen, COLO_ETOOBIG, "%zu bytes of text at once: more than 2^32", len);
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  if (!md)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  size_t off = from, a, b;
  uint32_t opts = PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY | (more ? PCRE2_PARTIAL_HARD : 0);
  int rc = 0;
  while (off < len && off < until && rc == 0) {
    int got = pcre2_match(t->re[0], (PCRE2_SPTR)text, len, off, opts, md, NULL);
    if (got == PCRE2_ERROR_PARTIAL)
      break; /* a piece more text could change (and the text before it, were it between pieces) */
    if (got == PCRE2_ERROR_NOMATCH) {
      if (more)
        break; /* text between pieces, which more text could extend */
      a = b = len;
    } else if (got < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(got, msg, sizeof msg);
      rc = colo_fail(err, errlen, COLO_EINVAL, "pre-tokenizing at byte %zu: %s", off, (char *)msg);
      break;
    } else {
      span(md, &a, &b);
    }
    if (a > off && push_end(ends, n, cap, a) < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the pieces");
    if (a > off && a >= until) { /* the text between pieces reached `until` */
      off = a;
      break;
    }
    if (rc == 0 && b > a && push_end(ends, n, cap, b) < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the pieces");
    off = b;
  }
  pcre2_match_data_free(md);
  *done = off;
  return rc;
}

int colo_bpe_encode_pieces(const colo_bpe_t *t, const char *text, const uint32_t *ends, size_t i0,
                           size_t i1, int first, int **ids, size_t *n, size_t *cap) {
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  if (!md)
    return COLO_ENOMEM;
  int rc = 0;
  for (size_t i = i0; i < i1 && rc == 0; i++) {
    size_t a = i ? ends[i - 1] : 0, len = ends[i] - a;
    if (i == i0 && first && t->prepend) { /* the text's "▁" goes into its first piece */
      char *s = malloc(len + 1);
      if (!s) {
        rc = COLO_ENOMEM;
        break;
      }
      s[0] = ' ';
      memcpy(s + 1, text + a, len);
      rc = encode_level(t, 1, s, len + 1, md, ids, n, cap);
      free(s);
      continue;
    }
    rc = encode_level(t, 1, text + a, len, md, ids, n, cap);
  }
  pcre2_match_data_free(md);
  return rc;
}

int colo_bpe_prefixed(const colo_bpe_t *t, int where) {
  return where == COLO_BPE_START   ? t->prepend != PREPEND_NONE
         : where == COLO_BPE_AFTER ? t->prepend == PREPEND_ALWAYS
                                   : 0;
}

int colo_bpe_sentencepiece(const colo_bpe_t *t) {
  return t->sp;
}

/* colo_bpe_encode of text already valid and normalized */
static int encode_text(const colo_bpe_t *t, const char *text, size_t len, int first, int **ids,
                       size_t *n, size_t *cap, char *err, size_t errlen) {
  uint32_t *ends = NULL;
  size_t ne = 0, ecap = 0, done;
  int rc = colo_bpe_split(t, text, len, 0, len, 0, &ends, &ne, &ecap, &done, err, errlen);
  if (rc == 0 && colo_bpe_encode_pieces(t, text, ends, 0, ne, first, ids, n, cap) < 0)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the tokens");
  free(ends);
  return rc;
}

int colo_bpe_nfc(const colo_bpe_t *t) {
  return t->nfc;
}

static int encode(const colo_bpe_t *t, const char *text, size_t len, size_t base, int first,
                  int **ids, size_t *n, size_t *cap, char *err, size_t errlen) {
  size_t bad = colo_utf8_invalid(text, len);
  if (bad < len)
    return colo_fail(err, errlen, COLO_EPARSE, "the text is not UTF-8 at byte %zu", base + bad);
  if (t->nfc) { /* the normalized text, when it is not that already */
    char *norm;
    size_t nn, used;
    if (colo_nfc(text, len, 0, &norm, &nn, &used) < 0)
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the normalized text");
    if (norm) {
      int rc = encode_text(t, norm, nn, first, ids, n, cap, err, errlen);
      free(norm);
      return rc;
    }
  }
  return encode_text(t, text, len, first, ids, n, cap, err, errlen);
}

int colo_bpe_encode(const colo_bpe_t *t, const char *text, size_t len, size_t base, int **ids,
                    size_t *n, size_t *cap, char *err, size_t errlen) {
  return encode(t, text, len, base, colo_bpe_prefixed(t, COLO_BPE_START), ids, n, cap, err, errlen);
}

int colo_bpe_encode_in(const colo_bpe_t *t, int where, const char *text, size_t len, size_t base,
                       int **ids, size_t *n, size_t *cap, char *err, size_t errlen) {
  return encode(t, text, len, base, colo_bpe_prefixed(t, where), ids, n, cap, err, errlen);
}

int colo_bpe_token_kind(const colo_bpe_t *t, int id) {
  return id >= 0 && id < t->n_tok && t->tok[id].s ? t->kind[id] : COLO_BPE_NONE;
}

/* b2u's character in UTF-8 (under U+0800: one or two bytes) */
static int utf8_small(unsigned cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  out[0] = (char)(0xc0 | cp >> 6);
  out[1] = (char)(0x80 | (cp & 0x3f));
  return 2;
}

int colo_bpe_byte_char(int b, char out[2]) {
  int b2u[256], u2b[N_CP];
  byte_map(b2u, u2b);
  return utf8_small((unsigned)b2u[b & 0xff], out);
}

int colo_bpe_byte_level(const colo_bpe_t *t, int id, char *out, size_t cap) {
  const tok_t *k = id >= 0 && id < t->n_tok ? &t->tok[id] : NULL;
  if (!k || !k->s)
    return -1;
  size_t n = 0;
  for (size_t i = 0; i < k->len; i++) {
    if (n + 3 > cap)
      return -1;
    n += (size_t)utf8_small((unsigned)t->b2u[(unsigned char)k->s[i]], out + n);
  }
  out[n] = '\0';
  return (int)n;
}

typedef struct {
  int rank, a, b;
} merge_t;

static int by_rank(const void *x, const void *y) {
  const merge_t *p = x, *q = y;
  return (p->rank > q->rank) - (p->rank < q->rank);
}

int colo_bpe_merges(const colo_bpe_t *t, int **pairs, size_t *n) {
  size_t k = 0;
  for (size_t i = 0; i < t->pair_cap; i++)
    k += t->pair_key[i] != 0;
  merge_t *m = malloc((k ? k : 1) * sizeof *m);
  *pairs = malloc((k ? 2 * k : 1) * sizeof **pairs);
  if (!m || !*pairs) {
    free(m);
    free(*pairs);
    *pairs = NULL;
    return COLO_ENOMEM;
  }
  k = 0;
  for (size_t i = 0; i < t->pair_cap; i++)
    if (t->pair_key[i])
      m[k++] = (merge_t){t->pair_rank[i], (int)(t->pair_key[i] >> 32) - 1,
                         (int)(uint32_t)t->pair_key[i]};
  qsort(m, k, sizeof *m, by_rank);
  for (size_t i = 0; i < k; i++) {
    (*pairs)[2 * i] = m[i].a;
    (*pairs)[2 * i + 1] = m[i].b;
  }
  free(m);
  *n = k;
  return 0;
}

const char *colo_bpe_pre_name(const colo_bpe_t *t) {
  static const struct {
    const char *name, *patterns;
  } known[] = {
      {"gpt-2",
       "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+\n"},
      {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+\n"},
      {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+\n"},
  };
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (!strcmp(t->patterns, known[i].patterns))
      return known[i].name;
  return NULL;
}
