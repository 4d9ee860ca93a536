/* colo-train prepare: a text file into train and val token shards, streamed, so that a corpus
 * of any size passes through a bounded buffer (16 MiB, more only for a line longer than that). */
#ifndef COLO_PREPARE_H
#define COLO_PREPARE_H

#include <stdio.h>

#include "bpe.h"

typedef struct {
  double val_fraction;    /* the end of the text that is validation, in [0, 1) */
  const colo_bpe_t *bpe;  /* NULL: bytes as tokens (vocabulary 256) */
  size_t shard_tokens;    /* 0: one train.bin and one val.bin; else train_NNNNNN.bin, ... */
  FILE *progress;         /* a line every few seconds on long work; NULL: none */
  int threads;            /* BPE encoding threads (at most 16); 0: OpenMP's default */
  size_t buffer_bytes;    /* the text read a round, per BPE thread; 0: 16 MiB */
  const char *text_field; /* JSON lines: the field of a document's text; NULL: "text" */
  /* JSON lines of prompts and completions (supervised fine-tuning): the fields of each; NULL:
   * documents of text. Both or neither. */
  const char *prompt_field, *completion_field;
  /* JSON lines of preference pairs (DPO): with prompt_field, the fields of the chosen and the
   * rejected answer; NULL: none. Both or neither, without completion_field. */
  const char *chosen_field, *rejected_field;
  /* JSON lines of conversations: the field of each line's list of messages ({"role",
   * "content"}), written out in chat_template ("llama3" or "chatml"); NULL: none */
  const char *messages_field, *chat_template;
} colo_prepare_opts_t;

typedef struct {
  size_t tokens[2]; /* train, val */
  int files[2];
  size_t bytes;      /* of text */
  int documents;     /* text files, and JSON lines' documents */
  int eot;           /* the token put before each document; -1: none */
  int wide;          /* uint32 tokens */
  int masked;        /* shards with a loss mask (prompts and completions, conversations) */
  int end;           /* masked: the token put after each completion; -1: none */
  size_t counted[2]; /* the tokens that count as targets: all but a masked shard's prompts */
  size_t pairs[2];   /* preference pairs written */
} colo_prepare_stats_t;

/* Tokenises input into out_dir: a file, or with *, ? or [ every file the pattern matches, in
 * name order, each a document, except a file of JSON lines (*.jsonl, *.ndjson), whose every
 * line is an object with a document's text in its field text_field (blank lines skipped; a
 * line that is not is refused, naming it; the split is at the first line that begins at or past
 * the split's byte of the input); under BPE with several documents each then begins with the
 * tokenizer's document token where it has one (colo_bpe_doc_token: GPT-2's <|endoftext|>, as
 * llm.c's data sets are made; Llama 3's <|begin_of_text|>). Shards hold uint16 tokens (llm.c's
 * GPT-2 format), or uint32 (its Llama 3 format) for a vocabulary past 65,536. The split is at
 * byte n - floor(n * val_fraction) of all n bytes for bytes as tokens; under BPE where the first
 * piece of the pre-tokenizer at or after it begins, so train and val together are exactly the
 * whole text's tokens. Every file is written under a temporary name and renamed only once all
 * are complete: a failure (a byte that is not UTF-8 under BPE, a full disk) leaves no shard of
 * this run. An input ending in .gz (gzip) or .zst (zstd, any number of frames) is read
 * decompressed; the split counts bytes of the text.
 *
 * With prompt_field and completion_field, every line of the JSON lines holds a prompt and a
 * completion; each pair becomes [document token] prompt completion [end], and the shards are
 * colo's with a loss mask (COLO_SHARD_MAGIC_MASKED, data.h) in which only the completion and its
 * end count as targets. The end is the tokenizer's eos_token (tokenizer_config.json), else its
 * document token, which then also begins the next pair (GPT-2: <|endoftext|> prompt completion
 * <|endoftext|> prompt ...); bytes as tokens have none.
 *
 * With messages_field, every line holds a conversation: a list of messages with a role and a
 * content, written out as chat_template writes them, after the document token, and only the
 * assistant's messages (their content and its end) count as targets:
 *   llama3: <|start_header_id|>ROLE<|end_header_id|> then "\n\n" CONTENT <|eot_id|>, the content
 *           trimmed of whitespace, as Llama 3's template does (no date header);
 *   chatml: <|im_start|>ROLE "\n" CONTENT <|im_end|> then "\n".
 * The texts between special tokens are encoded whole, as HuggingFace encodes a rendered
 * template; of the assistant's, the tokens that begin in its content count.
 *
 * With prompt_field, chosen_field and rejected_field, every line holds a prompt and two answers
 * to it, the preferred and the other; the pair becomes two sequences, [document token] prompt
 * chosen [end] and [document token] prompt rejected [end] (prompt and answer encoded apart, as
 * TRL's DPO trainer encodes them; the end as a completion's). In TRL's conversational form, the
 * prompt a list of messages and each answer a list of the assistant's messages (or a string: one
 * such message), each answer is the conversation prompt + answer in chat_template (as
 * messages_field writes one), of which only the answer's messages count. They are written to
 * colo's preference shards (COLO_SHARD_MAGIC_PAIRS, data.h): the sequences' starts in a table.
 * A pair is written whole to train.bin or val.bin (shard_tokens is refused). */
int colo_prepare(const char *input, const char *out_dir, const colo_prepare_opts_t *o,
                 colo_prepare_stats_t *st, char *err, size_t errlen);

#endif
