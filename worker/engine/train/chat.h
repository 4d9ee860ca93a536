/* Chat templates, written out as HuggingFace renders them and tokenized as it tokenizes the
 * rendered text: the special tokens by id, each text between two of them encoded whole. Two are
 * known: Llama 3's and ChatML's (Jinja, which every other template is written in, is not run). */
#ifndef COLO_CHAT_H
#define COLO_CHAT_H

#include <stddef.h>

#include "bpe.h"

typedef enum { COLO_CHAT_LLAMA3 = 0, COLO_CHAT_CHATML = 1 } colo_chat_kind_t;

typedef struct {
  colo_chat_kind_t kind;
  const char *name;
  int begin, end_header, end; /* Llama 3: <|start_header_id|>, <|end_header_id|>, <|eot_id|>;
                                 ChatML: <|im_start|>, -1, <|im_end|> */
} colo_chat_t;

/* The template `name` ("llama3", "chatml") with the tokenizer's ids of its special tokens. 0, or
 * COLO_EINVAL naming an unknown template or a special token the tokenizer does not have. */
int colo_chat_open(colo_chat_t *c, const char *name, const colo_bpe_t *bpe, char *err,
                   size_t errlen);

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
