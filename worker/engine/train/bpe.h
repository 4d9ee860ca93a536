/* Byte-level BPE tokenizers: GPT-2's, from the files HuggingFace ships with a GPT-2 (vocab.json
 * and merges.txt) or OpenAI's originals (encoder.json and vocab.bpe), and any HuggingFace
 * tokenizer.json of a byte-level BPE (Llama 3's, GPT-2's, and others of their kind), so that
 * text can be prepared for, and sampled from, a model fine-tuned from such weights.
 *
 * Encoding follows the published encoders: the text (UTF-8), in NFC where the tokenizer.json's
 * normalizer asks for it (Qwen2's), is split by the pre-tokenizer's
 * patterns (GPT-2's: contractions, letters, digits, other symbols, whitespace; a tokenizer.json
 * names its own; PCRE2 with Unicode properties), each piece's bytes start as one token each, and
 * the pair of neighbouring tokens whose merge comes first in the merges is merged everywhere in
 * the piece, left to right, until no pair has a merge (under a tokenizer.json's ignore_merges a
 * piece that is a token of the vocabulary is that token at once). The text is ordinary text: a
 * special token's name in it ("<|endoftext|>") is encoded as the characters it is made of, as
 * tiktoken's encode_ordinary and llm.c's data scripts do. Decoding concatenates the tokens'
 * bytes (a special token's: its name). */
#ifndef COLO_BPE_H
#define COLO_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct colo_bpe colo_bpe_t;

/* Loads a tokenizer.json (the path itself, or path/tokenizer.json), else path/vocab.json and
 * path/merges.txt, else path/encoder.json and path/vocab.bpe. Every byte must be a token and
 * every merge's parts and result in the vocabulary (COLO_EPARSE naming the file and where);
 * COLO_EINVAL naming what a tokenizer.json has that colo does not read (a normalizer other than
 * NFC, a pre-tokenizer other than Split, Digits and ByteLevel, SentencePiece's kind other than
 * colo_bpe_sentencepiece's, ...);
 * COLO_ENOENT when none of the files is there. */
int colo_bpe_load(const char *path, colo_bpe_t **out, char *err, size_t errlen);
void colo_bpe_free(colo_bpe_t *t);

/* One more than the largest token id (50257 for GPT-2, 128256 for Llama 3). */
int colo_bpe_vocab_size(const colo_bpe_t *t);

/* Whether the tokenizer normalizes text to NFC before it splits it (a tokenizer.json whose
 * normalizer is NFC: Qwen2's). colo_bpe_encode does so itself; text split with colo_bpe_split
 * must be normalized by the caller (colo_nfc, train/nfc.h). */
int colo_bpe_nfc(const colo_bpe_t *t);

/* Appends the tokens of len bytes of text to *ids (grown with realloc; *n of *cap used).
 * COLO_EPARSE when the text is not UTF-8, naming the byte offset counted from `base` (where the
 * text starts in a larger one). */
int colo_bpe_encode(const colo_bpe_t *t, const char *text, size_t len, size_t base, int **ids,
                    size_t *n, size_t *cap, char *err, size_t errlen);

/* Where a text stands in the input it was cut from, as HuggingFace cuts an input at its added
 * tokens: at its beginning (a document, a prompt), after an added token (a chat template's text
 * after <|im_start|>), or going on from the text before it (a completion after its prompt).
 * colo_bpe_encode_in encodes a text so placed: SentencePiece's tokenizers put their "▁" before
 * it or not by that (colo_bpe_prefixed); colo_bpe_encode's text is at START. */
enum { COLO_BPE_START = 0, COLO_BPE_AFTER = 1, COLO_BPE_ON = 2 };
int colo_bpe_encode_in(const colo_bpe_t *t, int where, const char *text, size_t len, size_t base,
                       int **ids, size_t *n, size_t *cap, char *err, size_t errlen);

/* The offset of the first byte of text[0, n) that does not begin a valid UTF-8 character
 * (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF); n when it is all
 * valid. A character cut short by the end counts as invalid. */
size_t colo_utf8_invalid(const char *text, size_t n);

/* The first step of encoding, for text that streams through a buffer: text[0, len) must be
 * valid UTF-8 (colo_utf8_invalid), `from` the start of a piece of the first pre-tokenizer (0 at
 * the text's start). Appends the end of each piece from there to *ends (grown with realloc; *n
 * of *cap used), until one ends at or past `until`, or the text ends. With `more` (text may
 * follow len) it stops before the first piece that more text could change (PCRE2's hard partial
 * matching tells), so the pieces are those of the whole text. *done: where the last one ends.
 * COLO_ETOOBIG when len is 2^32 bytes or more, COLO_ENOMEM, COLO_EINVAL (a PCRE2 error). */
int colo_bpe_split(const colo_bpe_t *t, const char *text, size_t len, size_t from, size_t until,
                   int more, uint32_t **ends, size_t *n, size_t *cap, size_t *done, char *err,
                   size_t errlen);

/* The tokens of pieces i0..i1-1 of a split (piece i spans ends[i - 1] or 0 to ends[i]),
 * appended to *ids; `first`: piece i0 begins a text that takes the tokenizer's prefix
 * (colo_bpe_prefixed). COLO_ENOMEM is the only failure. */
int colo_bpe_encode_pieces(const colo_bpe_t *t, const char *text, const uint32_t *ends, size_t i0,
                           size_t i1, int first, int **ids, size_t *n, size_t *cap);

/* SentencePiece's BPE (a tokenizer.json of byte_fallback: Llama 2's, Mistral's, Gemma's), read
 * as HuggingFace converts it: its "▁" is a space, in the tokens as in the text; a character the
 * vocabulary lacks is its UTF-8 bytes' <0xNN> tokens; BPE over the text (its pieces start at each
 * run of spaces: no token of such a vocabulary joins one to what stands before it, which loading
 * checks). colo_bpe_sentencepiece says whether t is one. colo_bpe_prefixed: 1 where a non-empty
 * text at `where` (COLO_BPE_*) begins with a "▁" the tokenizer adds, so that its first token
 * holds a byte the text does not: at an input's start under the Prepend normalizer (Llama 2's,
 * Mistral v0.1's) or Metaspace's prepend_scheme always or first (newer conversions), after an
 * added token too but for first; never for Gemma's, nor for a text going on; else 0. Decoding
 * gives that space back: " Hello" for "Hello". A literal "▁" in a text is taken as the character
 * it is (its bytes' tokens), where HuggingFace takes it as a space. */
int colo_bpe_sentencepiece(const colo_bpe_t *t);
int colo_bpe_prefixed(const colo_bpe_t *t, int where);

/* The id of the token of these bytes ("<|endoftext|>"), special tokens included; -1 when there
 * is none. */
int colo_bpe_lookup(const colo_bpe_t *t, const char *s, size_t n);

/* The token that begins each document of a prepared corpus: a tokenizer.json's template's
 * beginning of text (Llama 3's <|begin_of_text|>), else GPT-2's <|endoftext|> (as llm.c's data
 * sets have it) where the vocabulary has it; -1 when neither. *bos: 1 when it is a beginning of
 * text (a sample starts from it), 0 when a delimiter. */
int colo_bpe_doc_token(const colo_bpe_t *t, int *bos);

/* The end-of-text token a tokenizer_config.json beside the tokenizer.json names (eos_token:
 * Llama 3's <|end_of_text|>, an instruct model's <|eot_id|>); -1 when none. */
int colo_bpe_eos(const colo_bpe_t *t);

/* The added token (tokenizer.json's added_tokens, special or not) that s[0..n) begins with, the
 * longest where several do, as HuggingFace splits them out of a text before the model sees it;
 * its length in *len. -1 when none. */
int colo_bpe_added_at(const colo_bpe_t *t, const char *s, size_t n, size_t *len);

/* The chat template the tokenizer comes with: chat_template.jinja beside its tokenizer.json, else
 * tokenizer_config.json's chat_template (the "default" of a list); NULL when none. */
const char *colo_bpe_chat_template(const colo_bpe_t *t);

/* tokenizer_config.json's bos_token (eos 0) or eos_token (eos 1) as text; NULL when none. */
const char *colo_bpe_special_text(const colo_bpe_t *t, int eos);

/* What token id is: one of the model's (NORMAL), an added token marked special (SPECIAL: Llama
 * 3's <|begin_of_text|>) or not (ADDED: Qwen2.5's <tool_call>), or NONE where the vocabulary
 * has no such id. */
enum { COLO_BPE_NONE = 0, COLO_BPE_NORMAL, COLO_BPE_SPECIAL, COLO_BPE_ADDED };
int colo_bpe_token_kind(const colo_bpe_t *t, int id);

/* Token id as the vocabulary file writes it: its bytes in GPT-2's byte-level characters
 * (UTF-8, ended by a 0) in out[cap]; its length, or -1 when there is no such token or it does
 * not fit. */
int colo_bpe_byte_level(const colo_bpe_t *t, int id, char *out, size_t cap);

/* Byte b as GPT-2's byte-level character (UTF-8) in out; its length, 1 or 2. */
int colo_bpe_byte_char(int b, char out[2]);

/* The merges, first first: pair i merges token ids (*pairs)[2i] and (*pairs)[2i + 1] (the
 * caller frees *pairs). 0, or COLO_ENOMEM. */
int colo_bpe_merges(const colo_bpe_t *t, int **pairs, size_t *n);

/* The pre-tokenizer, by the name llama.cpp knows it under (GGUF's tokenizer.ggml.pre): "gpt-2",
 * "llama-bpe" (Llama 3's) or "qwen2"; NULL for any other. */
const char *colo_bpe_pre_name(const colo_bpe_t *t);

/* The bytes of token id; NULL for an id the vocabulary does not have. */
const char *colo_bpe_token(const colo_bpe_t *t, int id, size_t *len);

#endif
