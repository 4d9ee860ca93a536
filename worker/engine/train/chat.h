/* Chat templates, written out as HuggingFace renders them and tokenized as it tokenizes the
 * rendered text: the special tokens by id, each text between two of them encoded whole. Two are
 * built in, Llama 3's and ChatML's; any other is Jinja (the tokenizer's own chat_template, or a
 * file), run by jinja.c. */
#ifndef COLO_CHAT_H
#define COLO_CHAT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "bpe.h"
#include "jinja.h"

typedef enum { COLO_CHAT_LLAMA3 = 0, COLO_CHAT_CHATML = 1, COLO_CHAT_JINJA = 2 } colo_chat_kind_t;

typedef struct {
  colo_chat_kind_t kind;
  const char *name;
  int begin, end_header, end; /* Llama 3: <|start_header_id|>, <|end_header_id|>, <|eot_id|>;
                                 ChatML: <|im_start|>, -1, <|im_end|>; Jinja: -1, -1, the added
                                 token that ends an assistant's message (-1: none found) */
  colo_jinja_t *tpl;          /* COLO_CHAT_JINJA */
  const colo_bpe_t *bpe;
} colo_chat_t;

/* The template `name` with the tokenizer's ids of its special tokens: "llama3" or "chatml" (built
 * in), "tokenizer" (the tokenizer's own chat_template, run as Jinja), or a file of Jinja (a name
 * with a '/' or ending in .jinja). 0, or COLO_EINVAL naming an unknown template, a tokenizer
 * without a template, or a special token the tokenizer does not have; COLO_EPARSE naming where a
 * Jinja template is wrong. colo_chat_close frees it. */
int colo_chat_open(colo_chat_t *c, const char *name, const colo_bpe_t *bpe, char *err,
                   size_t errlen);
void colo_chat_close(colo_chat_t *c);

/* A conversation through a Jinja template (COLO_CHAT_JINJA). The template's variables are the
 * fields of `vars` (a JSON line's object: tools, documents and such reach the template), with
 * `messages` set to msgs, the tokenizer's bos_token and eos_token, and add_generation_prompt.
 * The text into *text (malloc'd, *len bytes). With spans, what the assistant says into *spans
 * (malloc'd; *nspans): the template's {% generation %} blocks where it has them, else for each
 * assistant message the text it adds after the conversation before it with the generation prompt
 * (the messages before it rendered with add_generation_prompt, then up to it without), up to its
 * last character that is not whitespace; where the template renders a message otherwise when it
 * ends the conversation (Qwen3's <think> block), up to the first of the template's end tokens
 * after it begins (c->end: <|im_end|>). A template under which the conversation before a message
 * with the generation prompt is not the beginning of the whole, or one that renders the last
 * message its own way and has no end token, is refused there: COLO_EINVAL, as are the template's
 * own errors. */
int colo_chat_render(const colo_chat_t *c, const cJSON *vars, const cJSON *msgs,
                     int add_generation_prompt, char **text, size_t *len, colo_jinja_span_t **spans,
                     size_t *nspans, char *err, size_t errlen);

/* A message in ShareGPT's form, {"from": "human" | "gpt" | "system", "value": text}: its role as
 * the chat templates name it (user, assistant, system), its text in *value. NULL when the
 * message is not of that form, *value then its text when it has one (an unknown "from"). */
const char *colo_chat_sharegpt_role(const cJSON *x, const char **value);

/* The messages of a JSON line (a list) as a Jinja template takes them: each {"role", ...} as it
 * is, ShareGPT's {"from", "value"} made {"role", "content"}. NULL when out of memory (*bad 0) or
 * when message *bad (from 1) is of neither form. */
cJSON *colo_chat_messages(const cJSON *m, int *bad);

/* Appends the tokens of a rendered text: the added tokens in it by id, the text between two of
 * them encoded whole (as HuggingFace's tokenizer does). `start`: the text begins its input (not
 * after a beginning of text taken apart), where a SentencePiece tokenizer's "▁" may go. 0, or
 * the encoder's error. */
int colo_chat_encode_text(const colo_bpe_t *bpe, const char *text, size_t len, int start, int **ids,
                          size_t *n, size_t *cap, char *err, size_t errlen);

/* A message is written out as up to two pieces, each a special token (or -1), a text of up to
 * three parts, and a special token (or -1) after it:
 *   Llama 3: <|start_header_id|> ROLE <|end_header_id|>, then "\n\n" CONTENT <|eot_id|>, the
 *            content trimmed as Jinja's trim does (Python's str.strip());
 *   ChatML:  <|im_start|> ROLE "\n" CONTENT <|im_end|>, then "\n".
 * `from` is the byte of the piece's text where the content begins (NONE in a piece without
 * it): an assistant's tokens that begin there or after are what it learns, and so is the end
 * token after it (`learn_post`). */
#define COLO_CHAT_NONE ((size_t)-1)
typedef struct {
  int pre, post;
  const char *text[3];
  size_t len[3];
  size_t from;
  int learn_post; /* the post token ends the content */
} colo_chat_piece_t;

/* The pieces of a message (role, content) into out[0..]; returns how many (1 or 2). */
int colo_chat_message(const colo_chat_t *c, const char *role, size_t rn, const char *content,
                      size_t cn, colo_chat_piece_t out[2]);

/* The assistant's turn about to begin, as add_generation_prompt renders it (Llama 3's header and
 * "\n\n"; ChatML's <|im_start|> "assistant\n"): its pieces into out; returns how many. */
int colo_chat_generation(const colo_chat_t *c, colo_chat_piece_t out[2]);

/* Appends the tokens of a piece (its special tokens and its encoded text) to *ids. 0, or the
 * encoder's error. */
int colo_chat_encode(const colo_bpe_t *bpe, const colo_chat_piece_t *p, int **ids, size_t *n,
                     size_t *cap, char *err, size_t errlen);

#endif
