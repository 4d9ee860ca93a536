/* Llama 3's and ChatML's chat templates. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"

int colo_chat_open(colo_chat_t *c, const char *name, const colo_bpe_t *bpe, char *err,
                   size_t errlen) {
  static const char *const specials[2][3] = {
      {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
      {"<|im_start|>", NULL, "<|im_end|>"}};
  memset(c, 0, sizeof *c);
  int k = !name ? -1 : !strcmp(name, "llama3") ? 0 : !strcmp(name, "chatml") ? 1 : -1;
  if (k < 0)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "chat template %s: the templates are llama3 and chatml",
                     name ? name : "(none)");
  if (!bpe)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "a chat template needs a --tokenizer with its special tokens");
  c->kind = (colo_chat_kind_t)k;
  c->name = k ? "chatml" : "llama3";
  int *ids[3] = {&c->begin, &c->end_header, &c->end};
  for (int i = 0; i < 3; i++) {
    const char *s = specials[k][i];
    *ids[i] = s ? colo_bpe_lookup(bpe, s, strlen(s)) : -1;
    if (s && *ids[i] < 0)
      return colo_fail(err, errlen, COLO_EINVAL, "chat template %s: the tokenizer has no %s token",
                       c->name, s);
  }
  return 0;
}

/* the code point of the UTF-8 character at s[i] (of n), its length in *len; -1 for a byte that
 * begins none */
static long utf8_at(const char *s, size_t n, size_t i, size_t *len) {
  const unsigned char *u = (const unsigned char *)s + i;
  size_t k = u[0] < 0x80 ? 1 : u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 0;
  if (!k || i + k > n)
    return -1;
  long c = k == 1 ? u[0] : u[0] & (0x3f >> (k - 1));
  for (size_t j = 1; j < k; j++)
    c = c << 6 | (u[j] & 0x3f);
  *len = k;
  return c;
}

/* Python's str.isspace(), which Jinja's trim strips */
static int py_space(long c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

/* Jinja's trim (Python's str.strip()) of [*s, *s + *n) */
static void trim(const char **s, size_t *n) {
  size_t len;
  while (*n && py_space(utf8_at(*s, *n, 0, &len)))
    *s += len, *n -= len;
  while (*n) { /* the last character: back over its continuation bytes */
    size_t i = *n - 1;
    while (i > 0 && ((unsigned char)(*s)[i] & 0xc0) == 0x80)
      i--;
    long c = utf8_at(*s, *n, i, &len);
    if (i + len != *n || !py_space(c))
      break;
    *n = i;
  }
}

static colo_chat_piece_t piece(int pre, int post, const char *a, size_t an, const char *b,
                               size_t bn, const char *c, size_t cn, size_t from) {
  colo_chat_piece_t p = {pre, post, {a, b, c}, {an, bn, cn}, from, 0};
  return p;
}

int colo_chat_message(const colo_chat_t *c, const char *role, size_t rn, const char *content,
                      size_t cn, colo_chat_piece_t out[2]) {
  if (c->kind == COLO_CHAT_LLAMA3) {
    trim(&content, &cn);
    out[0] = piece(c->begin, c->end_header, role, rn, NULL, 0, NULL, 0, COLO_CHAT_NONE);
    out[1] = piece(-1, c->end, "\n\n", 2, content, cn, NULL, 0, 2);
    out[1].learn_post = 1;
    return 2;
  }
  out[0] = piece(c->begin, c->end, role, rn, "\n", 1, content, cn, rn + 1);
  out[0].learn_post = 1;
  out[1] = piece(-1, -1, "\n", 1, NULL, 0, NULL, 0, COLO_CHAT_NONE);
  return 2;
}

int colo_chat_generation(const colo_chat_t *c, colo_chat_piece_t out[2]) {
  if (c->kind == COLO_CHAT_LLAMA3) { /* the header, then the "\n\n" the content follows */
    out[0] = piece(c->begin, c->end_header, "assistant", 9, NULL, 0, NULL, 0, COLO_CHAT_NONE);
    out[1] = piece(-1, -1, "\n\n", 2, NULL, 0, NULL, 0, COLO_CHAT_NONE);
    return 2;
  }
  out[0] = piece(c->begin, -1, "assistant", 9, "\n", 1, NULL, 0, COLO_CHAT_NONE);
  return 1;
}

static int push(int **ids, size_t *n, size_t *cap, int id) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    int *g = realloc(*ids, c * sizeof *g);
    if (!g)
      return COLO_ENOMEM;
    *ids = g;
    *cap = c;
  }
  (*ids)[(*n)++] = id;
  return 0;
}

int colo_chat_encode(const colo_bpe_t *bpe, const colo_chat_piece_t *p, int **ids, size_t *n,
                     size_t *cap, char *err, size_t errlen) {
  size_t len = p->len[0] + p->len[1] + p->len[2];
  char *text = malloc(len + 1);
  if (!text || (p->pre >= 0 && push(ids, n, cap, p->pre) < 0)) {
    free(text);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  for (size_t i = 0, at = 0; i < 3; at += p->len[i++])
    if (p->len[i])
      memcpy(text + at, p->text[i], p->len[i]);
  int rc = colo_bpe_encode(bpe, text, len, 0, ids, n, cap, err, errlen);
  free(text);
  if (rc == 0 && p->post >= 0 && push(ids, n, cap, p->post) < 0)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  return rc;
}
