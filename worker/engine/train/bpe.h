/* GPT-2's byte-level BPE tokenizer, from the files HuggingFace ships with a GPT-2 (vocab.json and
 * merges.txt) or OpenAI's originals (encoder.json and vocab.bpe), so that text can be prepared
 * for, and sampled from, a model fine-tuned from GPT-2's weights.
 *
 * Encoding follows GPT-2's published encoder: the text (UTF-8) is split by GPT-2's pattern
 * (contractions, letters, digits, other symbols, whitespace; PCRE2 with Unicode properties),
 * each piece's bytes start as one token each, and the pair of neighbouring tokens whose merge
 * comes first in the merges file is merged everywhere in the piece, left to right, until no
 * pair has a merge. Decoding concatenates the tokens' bytes. */
#ifndef COLO_BPE_H
#define COLO_BPE_H

#include <stddef.h>

typedef struct colo_bpe colo_bpe_t;

/* Loads dir/vocab.json and dir/merges.txt, or dir/encoder.json and dir/vocab.bpe. Every byte must
 * be a token and every merge's parts and result in the vocabulary (COLO_EPARSE naming the file
 * and line otherwise); COLO_ENOENT when neither pair of files is there. */
int colo_bpe_load(const char *dir, colo_bpe_t **out, char *err, size_t errlen);
void colo_bpe_free(colo_bpe_t *t);

/* One more than the largest token id (50257 for GPT-2). */
int colo_bpe_vocab_size(const colo_bpe_t *t);

/* Appends the tokens of len bytes of text to *ids (grown with realloc; *n of *cap used).
 * COLO_EPARSE when the text is not UTF-8, naming the byte offset counted from `base` (where the
 * text starts in a larger one). */
int colo_bpe_encode(const colo_bpe_t *t, const char *text, size_t len, size_t base, int **ids,
                    size_t *n, size_t *cap, char *err, size_t errlen);

/* The id of the token of these bytes ("<|endoftext|>"); -1 when there is none. */
int colo_bpe_lookup(const colo_bpe_t *t, const char *s, size_t n);

/* The bytes of token id; NULL for an id the vocabulary does not have. */
const char *colo_bpe_token(const colo_bpe_t *t, int id, size_t *len);

#endif
