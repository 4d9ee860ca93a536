/* Llama 3's and ChatML's chat templates, and Jinja's. */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"
#include "data.h"

static int open_jinja(colo_chat_t *c, const char *name, const colo_bpe_t *bpe, char *err,
                      size_t errlen);

int colo_chat_open(colo_chat_t *c, const char *name, const colo_bpe_t *bpe, char *err,
                   size_t errlen) {
  static const char *const specials[2][3] = {
      {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
      {"<|im_start|>", NULL, "<|im_end|>"}};
  memset(c, 0, sizeof *c);
  c->begin = c->end_header = c->end = -1;
  int k = !name ? -1 : !strcmp(name, "llama3") ? 0 : !strcmp(name, "chatml") ? 1 : -1;
  int jinja = name && (!strcmp(name, "tokenizer") || strchr(name, '/') ||
                       (strlen(name) > 6 && !strcmp(name + strlen(name) - 6, ".jinja")));
  if (k < 0 && !jinja)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "chat template %s: the templates are llama3, chatml, tokenizer (the "
                     "tokenizer's own) and a Jinja file (a path with '/' or ending .jinja)",
                     name ? name : "(none)");
  if (!bpe)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "a chat template needs a --tokenizer with its special tokens");
  if (jinja)
    return open_jinja(c, name, bpe, err, errlen);
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

static colo_chat_piece_t piece(int pre, int post, const char *a, size_t an, const char *b,
                               size_t bn, const char *c, size_t cn, size_t from) {
  colo_chat_piece_t p = {pre, post, {a, b, c}, {an, bn, cn}, from, 0};
  return p;
}

int colo_chat_message(const colo_chat_t *c, const char *role, size_t rn, const char *content,
                      size_t cn, colo_chat_piece_t out[2]) {
  if (c->kind == COLO_CHAT_LLAMA3) {
    colo_jinja_trim(&content, &cn); /* the template's `| trim` */
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
  /* a piece's text follows a special token: the template's, or the piece's before it */
  int rc = colo_bpe_encode_in(bpe, COLO_BPE_AFTER, text, len, 0, ids, n, cap, err, errlen);
  free(text);
  if (rc == 0 && p->post >= 0 && push(ids, n, cap, p->post) < 0)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  return rc;
}

void colo_chat_close(colo_chat_t *c) {
  colo_jinja_free(c->tpl);
  c->tpl = NULL;
}

/* the end of an assistant's message: the first added token after its content, in a
 * conversation of one exchange */
static int find_end(colo_chat_t *c) {
  const char *conv = "[{\"role\": \"user\", \"content\": \"Hi\"}, "
                     "{\"role\": \"assistant\", \"content\": \"Bye\"}]";
  cJSON *msgs = cJSON_Parse(conv);
  char *text = NULL, err[256];
  size_t len, ns = 0;
  colo_jinja_span_t *spans = NULL;
  int end = -1;
  if (msgs && colo_chat_render(c, NULL, msgs, 0, &text, &len, &spans, &ns, err, sizeof err) == 0 &&
      ns == 1) {
    for (size_t i = spans[0].from; i + 3 <= spans[0].to && end < 0; i++)
      if (!memcmp(text + i, "Bye", 3))
        for (size_t j = i + 3, k; j < len && end < 0; j++)
          end = colo_bpe_added_at(c->bpe, text + j, len - j, &k);
  }
  free(text);
  free(spans);
  cJSON_Delete(msgs);
  return end;
}

static int open_jinja(colo_chat_t *c, const char *name, const colo_bpe_t *bpe, char *err,
                      size_t errlen) {
  c->kind = COLO_CHAT_JINJA;
  c->bpe = bpe;
  char *file = NULL;
  const char *src;
  if (!strcmp(name, "tokenizer")) {
    c->name = "the tokenizer's chat template";
    if (!(src = colo_bpe_chat_template(bpe)))
      return colo_fail(err, errlen, COLO_EINVAL,
                       "--chat-template tokenizer: the tokenizer has no chat template (no "
                       "chat_template in its tokenizer_config.json, no chat_template.jinja)");
  } else {
    size_t n;
    int rc = colo_read_file(name, &file, &n, err, errlen);
    if (rc < 0)
      return rc;
    if (strlen(file) != n) {
      free(file);
      return colo_fail(err, errlen, COLO_EINVAL, "%s: a chat template with a NUL byte", name);
    }
    c->name = name;
    src = file;
  }
  int rc = colo_jinja_parse(src, strcmp(name, "tokenizer") ? name : "chat_template", &c->tpl, err,
                            errlen);
  free(file);
  if (rc == 0)
    c->end = find_end(c);
  return rc;
}

static int render(const colo_chat_t *c, cJSON *vars, const cJSON *msgs, size_t upto, int gen,
                  char **text, size_t *len, colo_jinja_span_t **spans, size_t *ns, char *err,
                  size_t errlen) {
  cJSON *m = cJSON_CreateArray();
  const cJSON *x;
  size_t i = 0;
  cJSON_ArrayForEach(x, msgs) {
    if (i++ >= upto)
      break;
    if (!m || !cJSON_AddItemReferenceToArray(m, (cJSON *)x))
      break;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(vars, "messages");
  cJSON_DeleteItemFromObjectCaseSensitive(vars, "add_generation_prompt");
  if (!m || !cJSON_AddItemToObject(vars, "messages", m) ||
      !cJSON_AddBoolToObject(vars, "add_generation_prompt", gen)) {
    if (m && !cJSON_GetObjectItemCaseSensitive(vars, "messages"))
      cJSON_Delete(m);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  return colo_jinja_render(c->tpl, vars, text, len, spans, ns, err, errlen);
}

/* at, or the start of an added token of s (n bytes) that begins in [from, at) and runs past it */
static size_t added_start(const colo_bpe_t *bpe, const char *s, size_t n, size_t from, size_t at) {
  size_t k;
  for (size_t a = from; a < at; a++)
    if (colo_bpe_added_at(bpe, s + a, n - a, &k) >= 0 && a + k > at)
      at = a;
  return at;
}

/* Where the first of the template's end tokens (c->end) at or after `from` ends in s (n bytes),
 * or COLO_CHAT_NONE: none follows */
static size_t end_token(const colo_chat_t *c, const char *s, size_t n, size_t from) {
  size_t k;
  for (size_t a = from; a < n; a++)
    if (colo_bpe_added_at(c->bpe, s + a, n - a, &k) == c->end)
      return a + k;
  return COLO_CHAT_NONE;
}

/* to, less the whitespace of s before it (down to from) */
static size_t trim_end(const char *s, size_t from, size_t to) {
  while (to > from &&
         (s[to - 1] == ' ' || s[to - 1] == '\n' || s[to - 1] == '\t' || s[to - 1] == '\r'))
    to--;
  return to;
}

int colo_chat_render(const colo_chat_t *c, const cJSON *vars, const cJSON *msgs,
                     int add_generation_prompt, char **text, size_t *len, colo_jinja_span_t **spans,
                     size_t *nspans, char *err, size_t errlen) {
  *text = NULL, *len = 0;
  if (spans)
    *spans = NULL, *nspans = 0;
  cJSON *v = vars ? cJSON_Duplicate(vars, 1) : cJSON_CreateObject();
  const char *bos = colo_bpe_special_text(c->bpe, 0), *eos = colo_bpe_special_text(c->bpe, 1);
  if (!v ||
      (bos && !cJSON_GetObjectItemCaseSensitive(v, "bos_token") &&
       !cJSON_AddStringToObject(v, "bos_token", bos)) ||
      (eos && !cJSON_GetObjectItemCaseSensitive(v, "eos_token") &&
       !cJSON_AddStringToObject(v, "eos_token", eos))) {
    cJSON_Delete(v);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  size_t nm = (size_t)cJSON_GetArraySize(msgs);
  int rc = render(c, v, msgs, nm, add_generation_prompt, text, len,
                  spans && colo_jinja_has_generation(c->tpl) ? spans : NULL, nspans, err, errlen);
  if (rc < 0 || !spans || colo_jinja_has_generation(c->tpl)) {
    cJSON_Delete(v);
    return rc;
  }
  colo_jinja_span_t *sp = NULL;
  size_t ns = 0, i = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, msgs) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
    i++;
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "assistant"))
      continue;
    char *pre = NULL, *upto = NULL;
    size_t pn, un;
    rc = render(c, v, msgs, i - 1, 1, &pre, &pn, NULL, NULL, err, errlen);
    if (rc == 0)
      rc = render(c, v, msgs, i, 0, &upto, &un, NULL, NULL, err, errlen);
    /* its end: where the conversation up to it and the whole part (a template may close the
     * conversation with an end of text), not inside a character or an added token */
    size_t to = 0;
    while (rc == 0 && to < un && to < *len && upto[to] == (*text)[to])
      to++;
    if (rc == 0 && (pn > *len || memcmp(pre, *text, pn) || to < pn))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "message %zu: %s does not render the conversation before it with the "
                     "generation prompt as the beginning of the whole, so what the assistant "
                     "says cannot be told from the rest; a template that marks it with "
                     "{%% generation %%} blocks can be",
                     i, c->name);
    /* the conversation up to it must run on as the whole does to its end (but for a closing
     * token of the conversation, an end of text). A template that renders a message otherwise
     * when it ends the conversation (Qwen3's adds a <think> block there, and keeps reasoning it
     * drops from earlier turns) gives no end there: the message then ends in the whole at the
     * first of the template's end tokens after it begins (Qwen3's <|im_end|>), where the
     * template has one; without one, the part the two share would stand for the message */
    if (rc == 0 && to < un) {
      size_t d = added_start(c->bpe, upto, un, pn, to), r = trim_end(upto, d, un), k;
      size_t e = c->end >= 0 ? end_token(c, *text, *len, pn) : COLO_CHAT_NONE;
      if (r > d && e != COLO_CHAT_NONE) {
        to = e;
      } else if (r > d && !(colo_bpe_added_at(c->bpe, upto + d, r - d, &k) >= 0 && k == r - d)) {
        char shown[64]; /* where they part, its line breaks written \n */
        size_t o = 0;
        for (size_t a = d; a < r && a < d + 24 && o + 3 < sizeof shown; a++)
          if (upto[a] == '\n')
            shown[o++] = '\\', shown[o++] = 'n';
          else
            shown[o++] = upto[a];
        shown[o] = '\0';
        rc = colo_fail(err, errlen, COLO_EINVAL,
                       "message %zu: %s renders it otherwise when it ends the conversation than "
                       "within the whole (\"%s\" there), so what the assistant says cannot be "
                       "told from the rest; --chat-template chatml, a template that marks it with "
                       "{%% generation %%} blocks, or conversations that end at it can be",
                       i, c->name, shown);
      }
    }
    while (rc == 0 && to > pn && to < *len && ((unsigned char)(*text)[to] & 0xc0) == 0x80)
      to--;
    if (rc == 0)
      to = trim_end(*text, pn, added_start(c->bpe, *text, *len, pn, to));
    if (rc == 0 && to > pn) {
      colo_jinja_span_t *g = realloc(sp, (ns + 1) * sizeof *g);
      if (!g)
        rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
      else
        sp = g, sp[ns++] = (colo_jinja_span_t){pn, to};
    }
    free(pre);
    free(upto);
    if (rc < 0)
      break;
  }
  cJSON_Delete(v);
  if (rc < 0) {
    free(sp);
    free(*text);
    *text = NULL, *len = 0;
    return rc;
  }
  *spans = sp, *nspans = ns;
  return 0;
}

int colo_chat_encode_text(const colo_bpe_t *bpe, const char *text, size_t len, int start, int **ids,
                          size_t *n, size_t *cap, char *err, size_t errlen) {
  size_t seg = 0, i = 0, k;
  int rc = 0;
  while (rc == 0 && i <= len) {
    int id = i < len ? colo_bpe_added_at(bpe, text + i, len - i, &k) : -1;
    if (i < len && id < 0) {
      i++;
      continue;
    }
    if (i > seg)
      rc = colo_bpe_encode_in(bpe, seg == 0 && start ? COLO_BPE_START : COLO_BPE_AFTER, text + seg,
                              i - seg, 0, ids, n, cap, err, errlen);
    if (rc == 0 && id >= 0 && push(ids, n, cap, id) < 0)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    if (i == len)
      break;
    i += k, seg = i;
  }
  return rc;
}

/* A message in ShareGPT's form, {"from": "human" | "gpt" | "system", "value": text}: its role as
 * the chat templates name it (user, assistant, system), its text in *value. NULL when the
 * message is not of that form, *value then its text when it has one (an unknown "from"). */
const char *colo_chat_sharegpt_role(const cJSON *x, const char **value) {
  static const char *const map[][2] = {
      {"human", "user"}, {"gpt", "assistant"}, {"system", "system"}};
  const cJSON *from = cJSON_GetObjectItemCaseSensitive(x, "from");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(x, "value");
  *value = cJSON_IsString(v) ? v->valuestring : NULL;
  if (!cJSON_IsString(from) || !*value)
    return NULL;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(from->valuestring, map[i][0]))
      return map[i][1];
  return NULL;
}

cJSON *colo_chat_messages(const cJSON *m, int *bad) {
  cJSON *msgs = cJSON_CreateArray();
  const cJSON *x;
  int k = 0;
  *bad = 0;
  cJSON_ArrayForEach(x, m) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(x, "role");
    const char *cs, *rs;
    cJSON *y = NULL;
    k++;
    if (!msgs)
      return NULL;
    if (cJSON_IsObject(x) && cJSON_IsString(role)) {
      y = cJSON_Duplicate(x, 1);
    } else if ((rs = colo_chat_sharegpt_role(x, &cs)) != NULL) {
      y = cJSON_CreateObject();
      if (y &&
          (!cJSON_AddStringToObject(y, "role", rs) || !cJSON_AddStringToObject(y, "content", cs)))
        cJSON_Delete(y), y = NULL;
    } else {
      *bad = k;
      cJSON_Delete(msgs);
      return NULL;
    }
    if (!y || !cJSON_AddItemToArray(msgs, y)) {
      cJSON_Delete(y);
      cJSON_Delete(msgs);
      return NULL;
    }
  }
  return msgs;
}
