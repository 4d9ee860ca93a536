/* colo-train: one training process. Runs standalone (no daemons) for a single-node run or a
 * test; the worker starts it the same way.
 *
 *   colo-train prepare --input TEXT --out DIR [--val-fraction F] [--tokenizer DIR]
 *                      [--shard-tokens N]
 *   colo-train tokenize --tokenizer DIR [--decode]
 *   colo-train train   [--job FILE] [--data-root DIR] [--ckpt-dir DIR] [flags]
 *   colo-train eval    --checkpoint DIR [--best] [--ema] --data FILE [--batches N] [--batch-size B]
 *   colo-train sample  --checkpoint DIR [--tokens N] [--temperature T] [--top-k K] [--seed S]
 *                      [--prompt TEXT] [--tokenizer DIR]
 *   colo-train export  --checkpoint DIR --out FILE [--format hf|gguf|peft] [--tokenizer PATH]
 *   colo-train average --checkpoint DIR... [--last N] [--weights W,...] --out FILE
 *
 * Exit codes: 0 success, 1 the work failed (the reason on one line), 2 bad usage, 78
 * (COLO_EXIT_CONFIG) train failed on what the job asks for (a missing data file, weights that
 * do not fit the model): another attempt would fail the same way; 75 (COLO_EXIT_STOPPED) train
 * stopped as asked: SIGTERM or SIGINT, once, makes every rank finish its step, save a checkpoint
 * there and exit; a second one ends the process at once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../common/error.h"
#include "../../common/fs.h"
#include "../../common/jobspec.h"
#include "../../common/pbcodec.h"
#include "backend/backend.h"
#include "comm/store.h"
#include "rdzv_colod.h"
#include "train/bpe.h"
#include "train/chat.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/gguf.h"
#include "train/hf.h"
#include "train/prepare.h"
#include "train/train.h"

static int usage_error(const char *cmd, const char *msg) {
  fprintf(stderr, "colo-train%s%s: %s; try 'colo-train %s%s--help'\n", cmd ? " " : "",
          cmd ? cmd : "", msg, cmd ? cmd : "", cmd ? " " : "");
  return 2;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: colo-train COMMAND [options]\n"
          "\n"
          "commands:\n"
          "  prepare   turn text files into train and val token shards (bytes, or a "
          "byte-level BPE:\n"
          "            a tokenizer.json such as Llama 3's, or GPT-2's files)\n"
          "  tokenize  text to token ids and back\n"
          "  render    conversations through a chat template (Jinja), as prepare sees them\n"
          "  inspect   a shard's tokens as text, marking what counts as a target of the loss\n"
          "  train     train a GPT-2 or Llama model from a job file and/or flags\n"
          "  eval      validation loss of a checkpoint on a shard\n"
          "  sample    generate text from a checkpoint\n"
          "  export    a checkpoint of any layout as one HuggingFace safetensors file, or GGUF\n"
          "  average   the mean of several checkpoints' weights (checkpoint averaging, a soup)\n"
          "  hf-config a transformers config.json as a job file's model section\n"
          "\n"
          "'colo-train COMMAND --help' lists a command's options.\n");
}

/* ---- prepare ---- */

/* the tokenizer from --tokenizer DIR (or FILE), or NULL (bytes) when none was given; exits on
 * errors */
static int open_tokenizer(const char *cmd, const char *dir, colo_bpe_t **out) {
  *out = NULL;
  if (!dir)
    return 0;
  char err[1400];
  int rc = colo_bpe_load(dir, out, err, sizeof err);
  if (rc < 0)
    fprintf(stderr, "colo-train %s: %s\n", cmd, err);
  return rc;
}

/* --json's object on a line of standard output, then freed: 0, or 1 out of memory */
static int print_json(cJSON *r) {
  char *text = r ? cJSON_PrintUnformatted(r) : NULL;
  if (text)
    puts(text);
  free(text);
  cJSON_Delete(r);
  return text ? 0 : 1;
}

/* prepare --json: the summary as one object */
static int prepare_json(const char *out, const colo_prepare_opts_t *po,
                        const colo_prepare_stats_t *st, int vocab) {
  static const char *kind[2] = {"train", "val"};
  cJSON *r = cJSON_CreateObject();
  for (int k = 0; k < 2; k++) {
    char path[2200];
    snprintf(path, sizeof path, po->shard_tokens ? "%s/%s_*.bin" : "%s/%s.bin", out, kind[k]);
    cJSON *x = cJSON_AddObjectToObject(r, kind[k]);
    cJSON_AddStringToObject(x, "path", path);
    cJSON_AddNumberToObject(x, "tokens", (double)st->tokens[k]);
    cJSON_AddNumberToObject(x, "files", st->files[k]);
    cJSON_AddNumberToObject(x, "targets", (double)(st->masked ? st->counted[k] : st->tokens[k]));
  }
  cJSON_AddNumberToObject(r, "bytes", (double)st->bytes);
  cJSON_AddNumberToObject(r, "documents", st->documents);
  cJSON_AddNumberToObject(r, "document_token", st->eot);
  cJSON_AddNumberToObject(r, "end_token", st->end);
  cJSON_AddNumberToObject(r, "vocab_size", vocab ? vocab : 256);
  cJSON_AddBoolToObject(r, "uint32", st->wide);
  cJSON_AddBoolToObject(r, "masked", st->masked);
  if (po->chosen_field) {
    cJSON_AddNumberToObject(cJSON_GetObjectItem(r, "train"), "pairs", (double)st->pairs[0]);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(r, "val"), "pairs", (double)st->pairs[1]);
  }
  return print_json(r);
}

/* prepare's multiple-choice questions: DIR/choices.bin */
static int prepare_choices(const char *input, const char *dir, const colo_bpe_t *bpe,
                           const colo_choices_fields_t *cf, int json, char *err, size_t errlen) {
  char path[2100];
  snprintf(path, sizeof path, "%s/choices.bin", dir);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", dir, strerror(errno));
  colo_choices_stats_t st;
  int rc = colo_choices_prepare(input, path, bpe, cf, &st, err, errlen);
  if (rc < 0)
    return rc;
  if (json) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "choices", path);
    cJSON_AddNumberToObject(r, "questions", (double)st.questions);
    cJSON_AddNumberToObject(r, "sequences", (double)st.sequences);
    cJSON_AddNumberToObject(r, "tokens", (double)st.tokens);
    cJSON_AddNumberToObject(r, "longest", (double)st.longest);
    cJSON_AddNumberToObject(r, "vocab_size", bpe ? colo_bpe_vocab_size(bpe) : 256);
    cJSON_AddBoolToObject(r, "uint32", st.wide);
    return print_json(r) == 0 ? 0 : COLO_EIO;
  }
  printf("%zu questions, %zu endings of %zu tokens (the longest sequence %zu) -> %s\n",
         st.questions, st.sequences, st.tokens, st.longest, path);
  return 0;
}

static int cmd_prepare(int argc, char **argv) {
  const char *input = NULL, *out = NULL, *tokdir = NULL;
  colo_prepare_opts_t po = {.val_fraction = 0.1, .progress = stderr};
  static const struct option o[] = {{"input", required_argument, 0, 'i'},
                                    {"out", required_argument, 0, 'o'},
                                    {"val-fraction", required_argument, 0, 'v'},
                                    {"tokenizer", required_argument, 0, 'k'},
                                    {"shard-tokens", required_argument, 0, 's'},
                                    {"threads", required_argument, 0, 't'},
                                    {"buffer-mib", required_argument, 0, 'B'},
                                    {"text-field", required_argument, 0, 'f'},
                                    {"prompt-field", required_argument, 0, 'p'},
                                    {"completion-field", required_argument, 0, 'c'},
                                    {"chosen-field", required_argument, 0, 'C'},
                                    {"rejected-field", required_argument, 0, 'R'},
                                    {"messages-field", required_argument, 0, 'm'},
                                    {"chat-template", required_argument, 0, 'T'},
                                    {"context-field", required_argument, 0, 'X'},
                                    {"endings-field", required_argument, 0, 'E'},
                                    {"label-field", required_argument, 0, 'L'},
                                    {"choice-separator", required_argument, 0, 'S'},
                                    {"context-template", required_argument, 0, 'P'},
                                    {"label-names-field", required_argument, 0, 'N'},
                                    {"json", no_argument, 0, 'j'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c, json = 0, choices = 0, context_field = 0;
  colo_choices_fields_t cf = {"ctx", "endings", "label", " ", NULL, NULL};
  char *end;
  while ((c = getopt_long(argc, argv, "i:o:v:k:s:t:f:p:c:C:R:m:T:X:E:L:S:P:N:jh", o, NULL)) != -1) {
    switch (c) {
    case 'P':
      cf.context_template = optarg;
      choices = 1;
      break;
    case 'X':
      if (!*optarg)
        return usage_error("prepare", "--context-field needs a field's name");
      cf.context_field = optarg;
      choices = 1;
      context_field = 1;
      break;
    case 'N':
      if (!*optarg)
        return usage_error("prepare", "--label-names-field needs a field's name");
      cf.label_names_field = optarg;
      choices = 1;
      break;
    case 'E':
    case 'L':
      if (!*optarg)
        return usage_error("prepare", c == 'E' ? "--endings-field needs a field's name"
                                               : "--label-field needs a field's name");
      *(c == 'E' ? &cf.endings_field : &cf.label_field) = optarg;
      choices = 1;
      break;
    case 'S':
      cf.sep = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'i':
      input = optarg;
      break;
    case 'o':
      out = optarg;
      break;
    case 'v':
      po.val_fraction = strtod(optarg, &end);
      if (end == optarg || *end)
        return usage_error("prepare", "--val-fraction needs a number");
      break;
    case 'k':
      tokdir = optarg;
      break;
    case 's':
      po.shard_tokens = strtoull(optarg, &end, 10);
      if (end == optarg || *end || po.shard_tokens == 0 || optarg[0] == '-')
        return usage_error("prepare", "--shard-tokens needs a positive number of tokens");
      break;
    case 't':
      po.threads = (int)strtol(optarg, &end, 10);
      if (end == optarg || *end || po.threads < 1)
        return usage_error("prepare", "--threads needs a positive number");
      break;
    case 'B': {
      long mib = strtol(optarg, &end, 10);
      if (end == optarg || *end || mib < 1 || mib > 1024)
        return usage_error("prepare", "--buffer-mib needs a number of MiB from 1 to 1024");
      po.buffer_bytes = (size_t)mib << 20;
      break;
    }
    case 'f':
      if (!*optarg)
        return usage_error("prepare", "--text-field needs a field's name");
      po.text_field = optarg;
      break;
    case 'p':
    case 'c':
      if (!*optarg)
        return usage_error("prepare", c == 'p' ? "--prompt-field needs a field's name"
                                               : "--completion-field needs a field's name");
      *(c == 'p' ? &po.prompt_field : &po.completion_field) = optarg;
      break;
    case 'C':
    case 'R':
      if (!*optarg)
        return usage_error("prepare", c == 'C' ? "--chosen-field needs a field's name"
                                               : "--rejected-field needs a field's name");
      *(c == 'C' ? &po.chosen_field : &po.rejected_field) = optarg;
      break;
    case 'm':
      if (!*optarg)
        return usage_error("prepare", "--messages-field needs a field's name");
      po.messages_field = optarg;
      break;
    case 'T':
      po.chat_template = optarg;
      break;
    case 'h':
      printf("usage: colo-train prepare --input TEXT|PATTERN --out DIR [--val-fraction F (0.1)]\n"
             "                          [--tokenizer PATH] [--shard-tokens N] [--threads N]\n"
             "                          [--buffer-mib N (16)]\n"
             "                          [--text-field NAME (text)]\n"
             "                          [--prompt-field NAME --completion-field NAME]\n"
             "                          [--prompt-field NAME --chosen-field NAME\n"
             "                           --rejected-field NAME]\n"
             "                          [--messages-field NAME --chat-template T] [--json]\n"
             "Writes DIR/train.bin and DIR/val.bin in llm.c's shard format; the last F of the\n"
             "input is the validation split. Tokens are the text's bytes (vocabulary 256), or\n"
             "with --tokenizer a byte-level BPE: a HuggingFace tokenizer.json (Llama 3's,\n"
             "GPT-2's, ...; the file or PATH/tokenizer.json), or GPT-2's PATH/vocab.json and\n"
             "PATH/merges.txt (or OpenAI's encoder.json and vocab.bpe); the text must be UTF-8.\n"
             "A vocabulary past 65,536 tokens writes llm.c's uint32 shards. With --shard-tokens,\n"
             "train_000000.bin, train_000001.bin, ... and val_* of N tokens each (a corpus\n"
             "larger than one shard's 2^31 tokens needs it); train on them with --train-data\n"
             "'train_*.bin'. The input is streamed: any size passes through a 16 MiB buffer\n"
             "(--buffer-mib; a BPE thread's each); progress goes to standard error. A pattern\n"
             "('docs/*.txt') takes every file it matches, each a document, after the\n"
             "tokenizer's document token under --tokenizer\n"
             "(GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>). A file of JSON lines\n"
             "(*.jsonl, *.ndjson) holds a document a line, its text in the field --text-field;\n"
             "validation starts at the first line at or past the split. Files ending in .gz\n"
             "are gzip's, in .zst zstd's, read decompressed (the split counts bytes of text).\n"
             "BPE encodes on --threads threads (default: the machine's, at most 16); the\n"
             "tokens are the same for any number.\n"
             "Supervised fine-tuning: with --prompt-field and --completion-field each line of\n"
             "the JSON lines holds a prompt and its completion; a pair becomes [document token]\n"
             "prompt completion [end], the end being the tokenizer's eos_token\n"
             "(tokenizer_config.json) or else its document token. The shards then carry a loss\n"
             "mask (colo's format, magic 20261125): training and evaluation take the loss on\n"
             "the completions and their ends alone.\n"
             "Preference pairs (DPO, train.dpo_beta): with --prompt-field, --chosen-field and\n"
             "--rejected-field each line holds a prompt, the preferred answer and the other\n"
             "(TRL's prompt, chosen, rejected); each answer becomes a sequence [document\n"
             "token] prompt answer [end], written to colo's preference shards (magic 20261128:\n"
             "the masked format and a table of where each sequence begins); the answers and\n"
             "their ends are the targets. A pair goes whole to train.bin or val.bin. In TRL's\n"
             "conversational form (the prompt a list of messages, each answer a list of the\n"
             "assistant's or a string) each answer follows the prompt in --chat-template (by\n"
             "default the tokenizer's own), its messages alone counting.\n"
             "Conversations: with --messages-field each line holds a list of messages, each\n"
             "{\"role\": ..., \"content\": ...}, written out in --chat-template after the\n"
             "document token: llama3 (<|start_header_id|>role<|end_header_id|>\\n\\ncontent\n"
             "<|eot_id|>, the content trimmed), chatml (<|im_start|>role\\ncontent<|im_end|>\\n),\n"
             "tokenizer (the tokenizer's own chat_template, from its tokenizer_config.json or\n"
             "chat_template.jinja) or a Jinja file (a path with '/' or ending .jinja), run as\n"
             "transformers runs it, the line's other fields (tools, ...) its variables too;\n"
             "colo-train render shows the text. The loss is taken on what the assistant says:\n"
             "its messages and their ends (under Jinja, the template's {%% generation %%}\n"
             "blocks, else what each assistant message adds after the conversation before it\n"
             "with the generation prompt). ShareGPT's messages, {\"from\": \"human\"|\"gpt\"|\n"
             "\"system\", \"value\": ...}, are taken as the user's, the assistant's and the\n"
             "system's (--messages-field conversations).\n"
             "Multiple-choice questions (HellaSwag's, to score a model on): with\n"
             "--endings-field (or --context-field or --label-field; by default HellaSwag's\n"
             "ctx, endings and label) each line holds a context, a list of endings and the\n"
             "right one's number (or a string of digits, or a letter: A is 0); each ending\n"
             "becomes a sequence, the context's tokens then those of --choice-separator\n"
             "(default \" \") and the ending, encoded apart, as llm.c's HellaSwag evaluation,\n"
             "written whole to DIR/choices.bin (magic 20261129; --val-fraction and\n"
             "--shard-tokens do not apply). Score a checkpoint on it with colo-train eval\n"
             "--choices, or name it in a job's data.choice_sets (train --choice-set).\n"
             "A field may be a path into objects (choices.text); --endings-field may name\n"
             "several fields, each an ending (sol1,sol2: PIQA's); --context-template makes\n"
             "the context of the line's fields ('Question: {question}\\nAnswer:', \\n a new\n"
             "line); --label-names-field names a list in which the label is found (ARC's\n"
             "--endings-field choices.text --label-field answerKey --label-names-field\n"
             "choices.label).\n"
             "--json: what was written as one JSON object on standard output (the shards'\n"
             "paths, tokens, files and targets of the loss; bytes, documents, the document\n"
             "and end tokens, the vocabulary's size, uint32 or not, masked or not).\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!input || !out)
    return usage_error("prepare", "--input and --out are required");
  if (!po.chosen_field != !po.rejected_field)
    return usage_error("prepare", "--chosen-field and --rejected-field go together");
  if (!po.chosen_field && !po.prompt_field != !po.completion_field)
    return usage_error("prepare", "--prompt-field and --completion-field go together");
  if (po.prompt_field && po.text_field)
    return usage_error("prepare", "--text-field is for documents of text, not with --prompt-field");
  if (po.chat_template && !po.messages_field && !po.chosen_field)
    return usage_error("prepare", "--chat-template goes with --messages-field or --chosen-field");
  if (po.messages_field && (po.text_field || po.prompt_field))
    return usage_error("prepare", "--messages-field takes conversations, not with --text-field "
                                  "or --prompt-field");
  if (context_field && cf.context_template)
    return usage_error("prepare", "--context-field and --context-template do not go together");
  if (choices && (po.text_field || po.prompt_field || po.messages_field || po.shard_tokens))
    return usage_error("prepare", "--context-field, --endings-field and --label-field take "
                                  "multiple-choice questions, not with --text-field, "
                                  "--prompt-field, --messages-field or --shard-tokens");
  colo_bpe_t *bpe;
  if (open_tokenizer("prepare", tokdir, &bpe) < 0)
    return 1;
  po.bpe = bpe;
  if (po.messages_field && !po.chat_template) { /* the tokenizer's own, where it has one */
    if (!bpe || !colo_bpe_chat_template(bpe)) {
      colo_bpe_free(bpe);
      return usage_error("prepare", bpe ? "--messages-field: the tokenizer has no chat template "
                                          "of its own; name one with --chat-template (llama3, "
                                          "chatml or a Jinja file)"
                                        : "--messages-field needs a --tokenizer and a chat "
                                          "template (its own, or --chat-template)");
    }
    po.chat_template = "tokenizer";
  }
  if (po.chosen_field && !po.chat_template && bpe && colo_bpe_chat_template(bpe))
    po.chat_template = "tokenizer"; /* for prompts that are lists of messages */
  char err[1400];
  if (choices) {
    int rc = prepare_choices(input, out, bpe, &cf, json, err, sizeof err);
    colo_bpe_free(bpe);
    if (rc < 0)
      fprintf(stderr, "colo-train prepare: %s\n", err);
    return rc < 0 ? 1 : 0;
  }
  colo_prepare_stats_t st;
  int rc = colo_prepare(input, out, &po, &st, err, sizeof err);
  int vocab = bpe ? colo_bpe_vocab_size(bpe) : 0;
  char doc[64] = "";
  size_t dl;
  const char *dt = bpe && st.eot >= 0 ? colo_bpe_token(bpe, st.eot, &dl) : NULL;
  if (dt)
    snprintf(doc, sizeof doc, ", each after the %.*s token (%d)", (int)(dl < 40 ? dl : 40), dt,
             st.eot);
  char ending[96] = "";
  const char *et = bpe && st.end >= 0 ? colo_bpe_token(bpe, st.end, &dl) : NULL;
  if (et)
    snprintf(ending, sizeof ending, "; each %s ends with %.*s (%d)",
             po.chosen_field ? "answer given as text" : "completion", (int)(dl < 40 ? dl : 40), et,
             st.end);
  colo_bpe_free(bpe);
  if (rc < 0) {
    fprintf(stderr, "colo-train prepare: %s\n", err);
    return 1;
  }
  if (json)
    return prepare_json(out, &po, &st, vocab);
  if (st.masked && po.messages_field)
    printf("%d conversations of %zu bytes in %s%s template%s\n", st.documents, st.bytes,
           strcmp(po.chat_template, "tokenizer") ? po.chat_template : "the tokenizer's own",
           strcmp(po.chat_template, "tokenizer") ? "'s" : "", doc);
  else if (st.masked && po.chosen_field)
    printf("%d preference pairs of %zu bytes (%zu train, %zu val), each answer a sequence%s%s\n",
           st.documents, st.bytes, st.pairs[0], st.pairs[1], doc, ending);
  else if (st.masked)
    printf("%d prompts and completions of %zu bytes%s%s\n", st.documents, st.bytes, doc, ending);
  else if (st.documents > 1)
    printf("%d documents of %zu bytes%s\n", st.documents, st.bytes, doc);
  if (dt && st.documents > 1 && !po.chosen_field)
    printf("to train with attention within each document: data.document_token: %d (colo-train "
           "train --document-token %d)\n",
           st.eot, st.eot);
  static const char *kind[2] = {"train", "val"};
  for (int k = 0; k < 2; k++) {
    char counted[96] = "";
    if (st.masked)
      snprintf(counted, sizeof counted, ", %zu of them targets of the loss (%.1f%%)", st.counted[k],
               st.tokens[k] ? 100.0 * (double)st.counted[k] / st.tokens[k] : 0.0);
    if (po.shard_tokens)
      printf("%s/%s_*.bin: %zu tokens in %d files%s\n", out, kind[k], st.tokens[k], st.files[k],
             counted);
    else
      printf("%s/%s.bin: %zu tokens%s\n", out, kind[k], st.tokens[k], counted);
  }
  if (vocab)
    printf("tokens of a %d-token vocabulary%s: the model's vocab_size must be at least %d "
           "(or %d, a multiple of 128, as llm.c pads GPT-2's to 50304)\n",
           vocab, st.wide ? ", 32 bits each (llm.c's Llama 3 shards)" : "", vocab,
           (vocab + 127) / 128 * 128);
  return 0;
}

/* ---- hf-config ---- */

/* hf-config's LongRoPE fields, where the model has them: the divisors as floats exactly (nine
 * digits), in JSON (after other fields) or as the YAML section's lines */
static void print_longrope(const colo_gpt_config_t *c, int json) {
  for (int k = 0; k < 2 && c->rope_ext; k++) {
    const char *name = k ? "rope_long_factor" : "rope_short_factor";
    printf(json ? ", \"%s\": [" : "  %s: [", name);
    for (int i = 0; i < c->rope_ext; i++)
      printf("%s%.9g", i ? ", " : "", (double)(k ? c->rope_long : c->rope_short)[i]);
    printf(json ? "]" : "]\n");
  }
  if (c->rope_ext && c->rope_attn > 0)
    printf(json ? ", \"rope_attention_factor\": %.9g" : "  rope_attention_factor: %.9g\n",
           (double)c->rope_attn);
}

static int cmd_hf_config(int argc, char **argv) {
  int json = 0;
  long block = 1024;
  char *end;
  static const struct option o[] = {{"block-size", required_argument, 0, 'b'},
                                    {"json", no_argument, 0, 'j'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "b:jh", o, NULL)) != -1) {
    switch (c) {
    case 'b':
      block = strtol(optarg, &end, 10);
      if (end == optarg || *end || block < 0 || block > (1 << 24))
        return usage_error("hf-config", "--block-size needs a number of tokens (0: the file's)");
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      printf("usage: colo-train hf-config CONFIG [--block-size T (1024)] [--json]\n"
             "Reads a transformers config.json (CONFIG, or CONFIG/config.json) of a\n"
             "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM or\n"
             "GPT2LMHeadModel and\n"
             "prints the model section of a job file that has its shape, so that\n"
             "train.init_from can start from its weights (its model.safetensors, or their\n"
             "index). block_size is T, at most the\n"
             "file's max_position_embeddings (--block-size 0: that). --json: the section as a\n"
             "JSON object. A config colo's blocks cannot follow (biases, another activation,\n"
             "norm eps or rope_scaling type, ...) is refused naming the field.\n");
      return 0;
    default:
      return 2;
    }
  }
  if (optind != argc - 1)
    return usage_error("hf-config", "one CONFIG is needed");
  colo_gpt_config_t cfg;
  char err[1400];
  if (colo_hf_read_config(argv[optind], &cfg, err, sizeof err) < 0) {
    fprintf(stderr, "colo-train hf-config: %s\n", err);
    return 1;
  }
  int most = cfg.block_size, t = block && block < most ? (int)block : most;
  int llama = cfg.arch == COLO_ARCH_LLAMA;
  /* the fields as the job file names them; those at their defaults left out */
  struct {
    const char *name;
    double v;
    int on;
  } f[] = {{"n_layer", cfg.n_layer, 1},
           {"n_head", cfg.n_head, 1},
           {"n_kv_head", cfg.n_kv_head, llama && cfg.n_kv_head != cfg.n_head},
           {"n_embd", cfg.n_embd, 1},
           {"head_dim", cfg.head_dim, cfg.head_dim > 0},
           {"mlp_hidden", cfg.mlp_hidden, cfg.mlp_hidden > 0},
           {"vocab_size", cfg.vocab_size, 1},
           {"block_size", t, 1},
           {"sliding_window", cfg.sliding_window, cfg.sliding_window > 0},
           {"rope_theta", cfg.rope_theta, llama},
           {"rope_scaling_factor", cfg.rope_factor, cfg.rope_factor > 0},
           {"rope_low_freq_factor", cfg.rope_low, cfg.rope_factor > 0},
           {"rope_high_freq_factor", cfg.rope_high, cfg.rope_factor > 0},
           {"rope_original_context", cfg.rope_orig, cfg.rope_factor > 0 || cfg.rope_ext},
           {"rms_norm_eps", cfg.norm_eps, llama && cfg.norm_eps > 0 && cfg.norm_eps != 1e-5f}};
  if (json) {
    printf("{\"arch\": \"%s\"", colo_gpt_arch_name(cfg.arch));
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
      if (f[i].on)
        printf(", \"%s\": %.7g", f[i].name, f[i].v); /* a float's digits */
    print_longrope(&cfg, 1);
    if (cfg.hf_phi3)
      printf(", \"hf_layout\": \"phi3\"");
    printf(", \"tie_embeddings\": %s%s%s}\n", cfg.untied_head ? "false" : "true",
           cfg.qkv_bias ? ", \"qkv_bias\": true" : "", cfg.qk_norm ? ", \"qk_norm\": true" : "");
    return 0;
  }
  printf("# the shape of %s (%s)\nmodel:\n  arch: %s\n", argv[optind],
         cfg.qk_norm          ? "Qwen3ForCausalLM"
         : cfg.qkv_bias       ? "Qwen2ForCausalLM"
         : cfg.sliding_window ? "MistralForCausalLM"
         : llama              ? "LlamaForCausalLM"
                              : "GPT2LMHeadModel",
         colo_gpt_arch_name(cfg.arch));
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].on)
      printf("  %s: %.7g\n", f[i].name, f[i].v);
  print_longrope(&cfg, 0);
  if (cfg.hf_phi3)
    printf("  hf_layout: phi3\n");
  printf("  tie_embeddings: %s\n", cfg.untied_head ? "false" : "true");
  if (cfg.qkv_bias)
    printf("  qkv_bias: true\n");
  if (cfg.qk_norm)
    printf("  qk_norm: true\n");
  if (t < most)
    printf("# block_size: %d of the %d positions the model knows (--block-size sets it)\n", t,
           most);
  return 0;
}

/* ---- tokenize ---- */

/* ---- inspect ---- */

static int cmd_inspect(int argc, char **argv) {
  const char *data = NULL, *tokdir = NULL;
  long from = 0, count = 256;
  int json = 0;
  static const struct option o[] = {{"data", required_argument, 0, 'd'},
                                    {"tokenizer", required_argument, 0, 'k'},
                                    {"from", required_argument, 0, 'f'},
                                    {"tokens", required_argument, 0, 'n'},
                                    {"json", no_argument, 0, 'j'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c;
  char *e;
  while ((c = getopt_long(argc, argv, "d:k:f:n:jh", o, NULL)) != -1) {
    switch (c) {
    case 'd':
      data = optarg;
      break;
    case 'k':
      tokdir = optarg;
      break;
    case 'f':
      from = strtol(optarg, &e, 10);
      if (*e || e == optarg || from < 0)
        return usage_error("inspect", "--from is a token's place, 0 or more");
      break;
    case 'n':
      count = strtol(optarg, &e, 10);
      if (*e || e == optarg || count < 1)
        return usage_error("inspect", "--tokens is 1 or more");
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      printf("usage: colo-train inspect --data SHARD [--tokenizer PATH] [--from N (0)]\n"
             "                          [--tokens N (256)] [--json]\n"
             "Shows a shard's tokens from place N (a pattern's files one after another) as\n"
             "text, marking what counts as a target of the loss (the shards prepare writes\n"
             "with a mask: the completions, the assistant's messages): in color on a terminal,\n"
             "else between [[ and ]]. Tokens are bytes without --tokenizer. With --json, a\n"
             "JSON object a token: its place, id, text (or \"bytes\", a token that is part of\n"
             "a UTF-8 character) and whether it counts.\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!data)
    return usage_error("inspect", "--data is required");
  colo_bpe_t *bpe;
  if (open_tokenizer("inspect", tokdir, &bpe) < 0)
    return 1;
  colo_shard_t sh;
  char err[1400];
  if (colo_shard_load(data, &sh, err, sizeof err) < 0) {
    colo_bpe_free(bpe);
    fprintf(stderr, "colo-train inspect: %s\n", err);
    return 1;
  }
  int rc = 0, tty = !json && isatty(STDOUT_FILENO), in = 0;
  if ((size_t)from >= sh.n) {
    fprintf(stderr, "colo-train inspect: --from %ld: %s holds %zu tokens\n", from, data, sh.n);
    rc = 1;
  }
  size_t at = 0;
  for (size_t f = 0; rc == 0 && f < sh.n_files && count > 0; at += sh.files[f++].n) {
    const colo_shard_file_t *file = &sh.files[f];
    for (size_t i = (size_t)from > at ? (size_t)from - at : 0; i < file->n && count > 0;
         i++, count--) {
      unsigned id = colo_shard_token(file, i);
      int counts = !file->mask || (file->mask[i >> 3] >> (i & 7) & 1);
      size_t tl = 1;
      char byte = (char)id;
      const char *tb = bpe ? colo_bpe_token(bpe, (int)id, &tl) : &byte;
      if (!tb)
        tb = "", tl = 0;
      if (json) {
        cJSON *r = cJSON_CreateObject();
        char *text = malloc(tl + 1), *line = NULL;
        if (r && text) {
          memcpy(text, tb, tl);
          text[tl] = 0;
          cJSON_AddNumberToObject(r, "at", (double)(at + i));
          cJSON_AddNumberToObject(r, "id", id);
          if (bpe && strlen(text) == tl && colo_utf8_invalid(text, tl) == tl) {
            cJSON_AddStringToObject(r, "text", text);
          } else { /* a part of a character (or a NUL): its bytes */
            cJSON *b = cJSON_AddArrayToObject(r, "bytes");
            for (size_t k = 0; b && k < tl; k++)
              cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)tb[k]));
          }
          cJSON_AddBoolToObject(r, "counts", counts);
          line = cJSON_PrintUnformatted(r);
        }
        if (line)
          printf("%s\n", line);
        else
          rc = 1, fprintf(stderr, "colo-train inspect: out of memory\n");
        free(line);
        free(text);
        cJSON_Delete(r);
        continue;
      }
      if (counts != in) /* a run that counts begins or ends */
        fputs(counts ? (tty ? "\x1b[1;32m" : "[[") : (tty ? "\x1b[0m" : "]]"), stdout);
      in = counts;
      fwrite(tb, 1, tl, stdout);
    }
  }
  if (in)
    fputs(tty ? "\x1b[0m" : "]]", stdout);
  if (!json && rc == 0)
    putchar('\n');
  colo_shard_free(&sh);
  colo_bpe_free(bpe);
  return rc == 0 && fflush(stdout) == 0 ? 0 : 1;
}

/* ---- render ---- */

static int cmd_render(int argc, char **argv) {
  const char *tokdir = NULL, *tpl = "tokenizer", *input = NULL, *field = "messages";
  int gen = 0, json = 0;
  static const struct option o[] = {{"tokenizer", required_argument, 0, 'k'},
                                    {"chat-template", required_argument, 0, 'T'},
                                    {"input", required_argument, 0, 'i'},
                                    {"messages-field", required_argument, 0, 'm'},
                                    {"add-generation-prompt", no_argument, 0, 'g'},
                                    {"json", no_argument, 0, 'j'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "k:T:i:m:gjh", o, NULL)) != -1) {
    switch (c) {
    case 'k':
      tokdir = optarg;
      break;
    case 'T':
      tpl = optarg;
      break;
    case 'i':
      input = optarg;
      break;
    case 'm':
      field = optarg;
      break;
    case 'g':
      gen = 1;
      break;
    case 'j':
      json = 1;
      break;
    case 'h':
      printf("usage: colo-train render --tokenizer PATH --input FILE.jsonl\n"
             "                         [--chat-template tokenizer|FILE.jinja (tokenizer)]\n"
             "                         [--messages-field NAME (messages)] "
             "[--add-generation-prompt] [--json]\n"
             "Writes each line's conversation as the chat template renders it: the\n"
             "tokenizer's own (its tokenizer_config.json's chat_template, or the\n"
             "chat_template.jinja beside it) or a Jinja file, run as transformers runs it\n"
             "(the line's other fields, such as tools, are the template's variables too).\n"
             "This is the text prepare --messages-field --chat-template tokenizer|FILE\n"
             "tokenizes. With --json, a JSON object a line: its line, its text, and\n"
             "\"assistant\": the [from, to) bytes of the text that count as targets of the\n"
             "loss (the template's {%% generation %%} blocks, else what each assistant\n"
             "message adds after the conversation before it and the generation prompt).\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!tokdir || !input)
    return usage_error("render", "--tokenizer and --input are required");
  colo_bpe_t *bpe;
  if (open_tokenizer("render", tokdir, &bpe) < 0)
    return 1;
  char err[1400];
  colo_chat_t chat;
  char *text = NULL;
  size_t len = 0;
  int rc = colo_chat_open(&chat, tpl, bpe, err, sizeof err);
  if (rc == 0 && chat.kind != COLO_CHAT_JINJA)
    rc = colo_fail(err, sizeof err, COLO_EINVAL,
                   "render runs Jinja templates (tokenizer or a file); %s is colo's own", tpl);
  if (rc == 0)
    rc = colo_read_file(input, &text, &len, err, sizeof err);
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  int line = 0;
  for (size_t at = 0; rc == 0 && at < len;) {
    size_t end = at;
    while (end < len && text[end] != '\n')
      end++;
    line++;
    cJSON *j = cJSON_ParseWithLength(text + at, end - at);
    int blank = 1;
    for (size_t k = at; k < end; k++)
      blank &= text[k] == ' ' || text[k] == '\t' || text[k] == '\r';
    at = end + 1;
    if (blank) {
      cJSON_Delete(j);
      continue;
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, field);
    int bad = 0;
    cJSON *msgs = cJSON_IsArray(m) ? colo_chat_messages(m, &bad) : NULL;
    char *out = NULL, why[1000];
    size_t n = 0, ns = 0;
    colo_jinja_span_t *sp = NULL;
    if (!cJSON_IsObject(j) || !cJSON_IsArray(m))
      rc = colo_fail(err, sizeof err, COLO_EPARSE, "%s:%d: not a JSON object with a list \"%s\"",
                     input, line, field);
    else if (!msgs)
      rc = colo_fail(err, sizeof err, COLO_EPARSE,
                     "%s:%d: message %d is not an object with a string \"role\" (or ShareGPT's "
                     "\"from\" and \"value\")",
                     input, line, bad);
    else if (colo_chat_render(&chat, j, msgs, gen, &out, &n, gen ? NULL : &sp, &ns, why,
                              sizeof why) < 0)
      rc = colo_fail(err, sizeof err, COLO_EPARSE, "%s:%d: %s", input, line, why);
    if (rc == 0 && json) {
      cJSON *r = cJSON_CreateObject(), *spans = cJSON_CreateArray();
      cJSON_AddNumberToObject(r, "line", line);
      cJSON_AddStringToObject(r, "text", out);
      for (size_t k = 0; k < ns; k++) {
        double pair[2] = {(double)sp[k].from, (double)sp[k].to};
        cJSON_AddItemToArray(spans, cJSON_CreateDoubleArray(pair, 2));
      }
      cJSON_AddItemToObject(r, "assistant", spans);
      char *s = cJSON_PrintUnformatted(r);
      if (!s || strlen(out) != n)
        rc = colo_fail(err, sizeof err, COLO_EINVAL, "%s:%d: the rendered text holds a NUL byte",
                       input, line);
      else
        printf("%s\n", s);
      free(s);
      cJSON_Delete(r);
    } else if (rc == 0) {
      fwrite(out, 1, n, stdout);
      putchar('\n');
    }
    free(out);
    free(sp);
    cJSON_Delete(msgs);
    cJSON_Delete(j);
  }
  free(text);
  colo_chat_close(&chat);
  colo_bpe_free(bpe);
  if (rc < 0) {
    fprintf(stderr, "colo-train render: %s\n", err);
    return 1;
  }
  return fflush(stdout) == 0 ? 0 : 1;
}

static int cmd_tokenize(int argc, char **argv) {
  const char *tokdir = NULL;
  int decode = 0;
  static const struct option o[] = {{"tokenizer", required_argument, 0, 'k'},
                                    {"decode", no_argument, 0, 'd'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "k:dh", o, NULL)) != -1) {
    switch (c) {
    case 'k':
      tokdir = optarg;
      break;
    case 'd':
      decode = 1;
      break;
    case 'h':
      printf("usage: colo-train tokenize --tokenizer PATH [--decode] < IN > OUT\n"
             "       colo-train tokenize --tokenizer PATH FILE...\n"
             "Encodes UTF-8 text on standard input with a byte-level BPE (PATH as for prepare)\n"
             "and writes the token ids, one per line; with --decode reads ids (any whitespace\n"
             "between them) and writes their text. With FILEs, each file's text is encoded\n"
             "apart and its ids written on a line of their own, separated by spaces.\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!tokdir)
    return usage_error("tokenize", "--tokenizer is required");
  if (decode && optind < argc)
    return usage_error("tokenize", "--decode reads standard input, not files");
  colo_bpe_t *bpe;
  if (open_tokenizer("tokenize", tokdir, &bpe) < 0)
    return 1;
  setvbuf(stdout, NULL, _IOFBF, 1 << 16); /* data, not a log: buffered, not a line at a time */
  char err[1400];
  int rc = 0;
  if (optind < argc) { /* files: a line of ids each */
    for (int i = optind; i < argc && rc == 0; i++) {
      size_t len = 0, n = 0, icap = 0;
      char *text = NULL;
      int *ids = NULL;
      if (colo_read_file(argv[i], &text, &len, err, sizeof err) < 0 ||
          colo_bpe_encode(bpe, text, len, 0, &ids, &n, &icap, err, sizeof err) < 0) {
        fprintf(stderr, "colo-train tokenize: %s%s%s\n", text ? argv[i] : "", text ? ": " : "",
                err);
        rc = 1;
      }
      for (size_t k = 0; rc == 0 && k < n; k++)
        printf(k + 1 < n ? "%d " : "%d", ids[k]);
      if (rc == 0)
        putchar('\n');
      free(text);
      free(ids);
    }
  } else if (decode) {
    long id;
    int got;
    while ((got = scanf("%ld", &id)) == 1) {
      size_t n;
      const char *b = colo_bpe_token(bpe, (int)id, &n);
      if (!b || id > INT_MAX) {
        fprintf(stderr, "colo-train tokenize: %ld is not a token of this vocabulary\n", id);
        rc = 1;
        break;
      }
      fwrite(b, 1, n, stdout);
    }
    if (rc == 0 && got != EOF) {
      fprintf(stderr, "colo-train tokenize: the input is not token ids\n");
      rc = 1;
    }
  } else {
    size_t len = 0, n = 0, icap = 0;
    char *text = NULL;
    int *ids = NULL;
    if (colo_read_all(stdin, "standard input", &text, &len, err, sizeof err) < 0 ||
        colo_bpe_encode(bpe, text, len, 0, &ids, &n, &icap, err, sizeof err) < 0) {
      fprintf(stderr, "colo-train tokenize: %s%s\n", text ? "standard input: " : "", err);
      rc = 1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
      printf("%d\n", ids[i]);
    free(text);
    free(ids);
  }
  colo_bpe_free(bpe);
  if (fflush(stdout) != 0)
    rc = 1;
  return rc;
}

/* ---- train ---- */

static void train_usage(void) {
  printf(
      "usage: colo-train train [--job FILE] [options]\n"
      "\n"
      "A job file (docs/job-file.md) gives the model, data, optimizer and schedule; the flags\n"
      "below override it. Without a job file the defaults of cluster.proto apply.\n"
      "\n"
      "  --job FILE            job file (YAML or JSON)\n"
      "  --data-root DIR       where data paths are resolved (default .)\n"
      "  --nvme-root DIR       where memory.nvme_dir is resolved (default .)\n"
      "  --train-data PATH     train shard, relative to the data root; a pattern (*, ?, [])\n"
      "                        takes every file it matches (train_*.bin)\n"
      "  --val-data PATH       val shard, relative to the data root (a pattern too)\n"
      "  --data-source PATH[=WEIGHT]  a training set of a blend (once per set; in place of\n"
      "                        --train-data and the job file's): each step's sequences come\n"
      "                        from the sets in the proportions of their weights (default 1)\n"
      "  --val-source PATH[=WEIGHT]  a validation set (once per set; in place of --val-data\n"
      "                        and the job file's): the validation loss is the sets' weighted\n"
      "                        mean, and each one's is reported by its path\n"
      "  --choice-set [NAME=]PATH  a multiple-choice set (prepare --endings-field; once per\n"
      "                        set): at each evaluation each set's accuracy is reported by\n"
      "                        NAME (default its path): acc, and acc_norm per character\n"
      "  --choice-questions N  score each set's first N questions alone (0: all)\n"
      "  --data-order random|shuffle  windows at any offset drawn with replacement (default),\n"
      "                        or epochs of windows that do not overlap, shuffled each epoch\n"
      "  --document-token N    the token that begins each document (prepare prints it):\n"
      "                        attention stays within a document, positions restart at each\n"
      "  --init-from PATH      start from these weights, relative to the data root: GPT-2 in a\n"
      "                        safetensors file under HuggingFace's names, or a checkpoint (a\n"
      "                        LoRA run's: a LoRA run goes on training its adapters on the\n"
      "                        model they adapted; another starts from them merged in)\n"
      "  --init-from-checkpoints DIR  start from the newest complete checkpoint under DIR\n"
      "                        (another run's --ckpt-dir; how a worker runs train.init_from_job;\n"
      "                        its train.init_pick and init_step pick another)\n"
      "  --neftune-alpha A     NEFTune: uniform noise in +-A/sqrt(block·n_embd) on the\n"
      "                        embeddings in training (Transformers' neftune_noise_alpha;\n"
      "                        the paper used 5; default 0: none)\n"
      "  --ema-decay D         keep the weights' exponential moving average in host memory\n"
      "                        (w += (1-D)(p-w) after each step; DeepSeek-V3's), written\n"
      "                        into the checkpoints: eval, sample and export --ema read it\n"
      "                        (0.999, say; default 0: none)\n"
      "  --dpo-beta B          DPO: train on preference pairs (prepare --chosen-field\n"
      "                        --rejected-field) with beta B (TRL's default 0.1), the\n"
      "                        reference the model as the run starts; the loss, reward\n"
      "                        accuracy and margin are reported\n"
      "  --dpo-precompute true the reference's log-probabilities computed once, before the\n"
      "                        first step, and kept in the checkpoints (always so for a\n"
      "                        whole model's run: without --lora-rank)\n"
      "  --dpo-loss L          sigmoid (DPO's, the default), hinge (SLiC) or ipo (IPO, on\n"
      "                        the answers' mean log-probabilities per token); without a\n"
      "                        reference: simpo (SimPO) or orpo (ORPO, beta its lambda)\n"
      "  --dpo-label-smoothing E  cDPO: the sigmoid (or SimPO) loss for labels flipped\n"
      "                        with probability E (TRL's label_smoothing; default 0)\n"
      "  --dpo-simpo-gamma G   SimPO's target margin (TRL's simpo_gamma; default 0.5)\n"
      "  --dpo-rpo-alpha A     RPO: add A x the chosen answer's NLL per token to the loss\n"
      "                        (TRL's rpo_alpha; default 0)\n"
      "  --lora-rank R         LoRA: freeze the model and train adapters of rank R (default 0:\n"
      "                        the whole model); checkpoints hold the adapters alone, one\n"
      "                        file whatever the layout; --pp and --tp split the model and\n"
      "                        its adapters; --zero 3 shards the frozen model over the ranks\n"
      "  --lora-alpha A        the adapters' updates are scaled by A/R (default 16)\n"
      "  --lora-targets LIST   the products adapted: attn.c_attn, attn.c_proj, mlp.c_fc,\n"
      "                        mlp.c_proj, comma-separated, or all (default)\n"
      "  --lora-quant nf4      QLoRA: keep the frozen model's block matrices in NF4 (4 bits a\n"
      "                        value and a scale per 64, as bitsandbytes): about 0.28x their\n"
      "                        16-bit bytes; the adapters learn against the dequantized values;\n"
      "                        --zero 3 shards them over the ranks\n"
      "  --lora-double-quant true\n"
      "                        with --lora-quant nf4: the scales quantized too, a byte per 64\n"
      "                        values and an fp32 per 16,384 (QLoRA's double quantization,\n"
      "                        bitsandbytes' bnb_4bit_use_double_quant): 0.516 bytes a value\n"
      "                        where NF4 alone takes 0.5625\n"
      "  --lora-dropout P      drop each adapter's input element-wise with probability P in\n"
      "                        training (PEFT's lora_dropout; default 0)\n"
      "  --lora-rslora true    rank-stabilized LoRA: updates scaled by A/sqrt(R), not A/R\n"
      "  --lora-plus-ratio X   LoRA+: the B matrices learn at --lr times X, the A matrices at\n"
      "                        --lr (PEFT's loraplus_lr_ratio; default: one rate); DoRA's\n"
      "                        magnitudes learn at --lr times X too, as PEFT's 1-D tensors\n"
      "  --lora-dora true      DoRA: each adapted product's output columns rescaled to a\n"
      "                        learned magnitude (PEFT's use_dora)\n"
      "  --ckpt-dir DIR        checkpoint directory (default: no checkpoints)\n"
      "  --resume DIR|auto     resume from a checkpoint, or the newest valid one in --ckpt-dir\n"
      "  --stop-at STEP        save a checkpoint and stop after STEP steps (schedule unchanged)\n"
      "  --n-layer N --n-head N --n-embd N --block-size N --vocab-size N\n"
      "  --arch gpt2|llama     the block: GPT-2's, or Llama's (RMSNorm, rotary positions,\n"
      "                        SwiGLU, no biases)\n"
      "  --mlp-hidden N        the MLP's width (default 4·n_embd; llama 8·n_embd/3 to 64)\n"
      "  --rope-theta X        llama: the rotary positions' base (default 10000)\n"
      "  --qkv-bias true|false llama: biases on the queries, keys and values (Qwen2's)\n"
      "  --rms-norm-eps X      llama: RMSNorm's epsilon (default 1e-5; Qwen2's 1e-6)\n"
      "  --qk-norm true|false  llama: RMSNorm on each query and key head (Qwen3's)\n"
      "  --head-dim N          llama: each head's width, where not n_embd/n_head\n"
      "  --sliding-window N    llama: each query attends its N most recent keys (Mistral\n"
      "                        v0.1's 4096; default 0: every earlier key)\n"
      "  --hf-layout phi3      llama: export writes Phi-3's layout (Phi3ForCausalLM)\n"
      "  --n-kv-head N         llama: key and value heads, dividing n_head (grouped-query\n"
      "                        attention; default n_head)\n"
      "  --tie-embeddings true|false  llama: false gives the LM head a matrix of its own\n"
      "  --rope-scaling-factor X  llama: Llama 3.1's rescaling of the rotary frequencies\n"
      "                        (with --rope-low-freq-factor, --rope-high-freq-factor and\n"
      "                        --rope-original-context; default none)\n"
      "  --batch-size B --grad-accum N --steps N --seed S\n"
      "                        (--steps 0 with --init-from: the model evaluated once on\n"
      "                        --val-data and --choice-set sets, not trained)\n"
      "  --lr X --min-lr X --warmup N --weight-decay X --grad-clip X --beta2 X\n"
      "  --schedule cosine|linear|constant|wsd  after the warm-up; wsd holds lr, then decays\n"
      "                        linearly over the last --decay-steps N (default: a fifth)\n"
      "  --optimizer adamw|muon  muon: the blocks' weight matrices by Muon (momentum\n"
      "                        --muon-momentum X, default 0.95; its update's RMS matched to\n"
      "                        AdamW's, so --lr and --weight-decay serve both), the rest by AdamW\n"
      "  --muon-lr X           Muon's peak learning rate, scheduled as --lr is (default: --lr)\n"
      "  --muon-adjust-lr match_rms_adamw|original  Muon's update scaled by 0.2*sqrt(max(rows,\n"
      "                        cols)) (the default), or sqrt(max(1, out/in)) as "
      "torch.optim.Muon's\n"
      "                        default (pair it with a --muon-lr of its own, e.g. 0.02)\n"
      "  --skip-spike-sigma S  skip the update of a step whose loss or gradient norm is more\n"
      "                        than S standard deviations above the mean of the last\n"
      "                        --skip-spike-window N steps' (default 128); 0: never\n"
      "  --device cpu|gpu      the CPU backend, or the CUDA one (a GPU per rank)\n"
      "  --gpu N               which GPU (default 0, or the rank under --nproc; a worker sets\n"
      "                        CUDA_VISIBLE_DEVICES)\n"
      "  --comm auto|nccl|host  GPU ranks' collectives: NCCL when each rank has a GPU of its\n"
      "                        own (auto, the default), NCCL or fail, or through host memory\n"
      "  --precision fp32|bf16|fp16  how activations are stored (fp32 arithmetic and master\n"
      "                        weights always; bf16, fp16: tensor-core products on a GPU, where\n"
      "                        bf16 is the default; emulated and slower on the CPU; fp16 scales\n"
      "                        the loss)\n"
      "  --tf32 true|false     GPU, fp32: TF32 tensor cores for the products (default false)\n"
      "  --loss-scaling auto|none|dynamic   dynamic loss scaling (auto: on under fp16)\n"
      "  --loss-scale-init X --loss-scale-window N   its first scale and doubling window\n"
      "  --plant-overflow S[,S...]  fault injection for tests: the last rank's gradients of\n"
      "                        these steps (1-based) become inf, as an fp16 overflow would\n"
      "  --dp N --tp N --pp N  parallel layout: data, tensor and pipeline parallel sizes\n"
      "  --cp N                context parallelism: each sequence split over N ranks\n"
      "                        (attention exchanges them for heads: DeepSpeed-Ulysses)\n"
      "  --sp true|false       Megatron sequence parallelism (needs tp > 1)\n"
      "  --zero Z              ZeRO stage: 0, 1, 2 or 3\n"
      "  --chunk-mib N         ZeRO's chunk size (default 0: searched for the least padding)\n"
      "  --nproc N             start N local ranks (dp x cp x tp x pp = N), as torchrun does\n"
      "  --comm-timeout MS     deadline of every collective (default 60000)\n"
      "  --eval-interval N --eval-batches N --ckpt-interval N --recompute\n"
      "  --ckpt-keep N         newest complete checkpoints kept (default 3; at least 1)\n"
      "  --ckpt-keep-best true|false  also keep the one with the lowest validation loss,\n"
      "                        evaluating at each checkpoint (needs --val-data)\n"
      "  --export-format gguf|hf|peft|gguf-lora  once every step is trained, the last\n"
      "                        checkpoint also as CKPT_DIR/model.gguf (llama.cpp's), or\n"
      "                        model.safetensors and config.json (HuggingFace's), or a LoRA\n"
      "                        run's adapters in CKPT_DIR/adapter (PEFT's) or\n"
      "                        CKPT_DIR/adapter.gguf (llama.cpp's); --export-tokenizer PATH\n"
      "                        (under the data root) and --export-type f32|f16|bf16|q8_0|q4_0 as\n"
      "                        export's; --export-ema true: the weights' moving average\n"
      "                        (--ema-decay) in their place\n"
      "  --early-stop N        end the run when N evaluations in a row find no new lowest\n"
      "                        validation loss (--early-stop-min-delta D: lower by more than D)\n"
      "  --best-metric M       what ranks evaluations for --ckpt-keep-best and --early-stop:\n"
      "                        val_loss (default), or a choice set's score, higher better:\n"
      "                        NAME.acc, NAME.acc_norm or NAME.acc_token\n"
      "  --threads N           OpenMP and OpenBLAS threads (default: all cores)\n"
      "  --memory-limit MIB    capacity of the memory pool\n"
      "  --placement device|static|auto  where a GPU run's chunks live: all on the GPU; the\n"
      "                        fractions below on it and the rest in host memory or NVMe; or\n"
      "                        what fits after a warm-up step (auto, ZeRO 1 and up; the GPU's\n"
      "                        free memory or --memory-limit)\n"
      "  --chunk-cache true|false  auto at --zero 3: keep gathered chunks on the GPU between\n"
      "                        uses while there is room (default true)\n"
      "  --param-device-fraction F  parameter pieces kept on the GPU (needs --zero 3)\n"
      "  --optim-device-fraction F  optimizer-state pieces kept on the GPU (--zero 1 and up)\n"
      "  --optim-nvme-fraction F    optimizer-state pieces in a file under --nvme-dir\n"
      "  --nvme-dir DIR        relative to --nvme-root, made if missing\n"
      "  --progress FILE       JSON lines of progress ('-' for stdout)\n"
      "  --progress-fd N       JSON lines of progress to an inherited descriptor\n"
      "  --quiet               no per-step line\n"
      "  --dump-reference FILE tensors for reference tests (batches, grads, weights)\n"
      "\n"
      "A rank started by another launcher finds its place in COLO_RANK, COLO_WORLD, COLO_STORE\n"
      "(host:port of the rendezvous store rank 0 serves, or colod://HOST:PORT/JOB/ATTEMPT for\n"
      "colod's) and COLO_BIND (its own address);\n"
      "COLO_COMM_SHM=0 keeps ranks of one host on TCP; with COLO_WORKER_PID set, the rank stops\n"
      "when that process (its worker) is no longer its parent.\n"
      "\n"
      "SIGUSR1 saves a checkpoint at the next step, the same on every rank, and trains on.\n"
      "SIGTERM or SIGINT (Ctrl-C) stops the run at the next step, the same step on every rank,\n"
      "with a checkpoint there (given --ckpt-dir); a second one ends it at once.\n"
      "\n"
      "Exit status: 0 done; 1 failed; 2 bad usage; 75 stopped as asked (SIGTERM or SIGINT),\n"
      "which colod restarts from the checkpoint without counting a restart; 78 failed on what\n"
      "the job asks for (a missing or malformed data file or weights, a model they do not fit),\n"
      "which another attempt would meet again: colod does not restart such a job.\n");
}

static void clear_path(char **path) {
  free(*path);
  *path = NULL;
}

static void clear_sources(Colo__V1__DataSource ***src, size_t *n) {
  for (size_t k = 0; k < *n; k++)
    colo__v1__data_source__free_unpacked((*src)[k], NULL);
  free(*src);
  *src = NULL;
  *n = 0;
}

/* Data sets of a blend, or validation sets, resolved under the data root for colo-train. */
typedef struct {
  char buf[COLO_MAX_SOURCES][2100];
  const char *paths[COLO_MAX_SOURCES], *names[COLO_MAX_SOURCES];
  double weights[COLO_MAX_SOURCES];
} resolved_t;

static void resolve_sources(resolved_t *r, Colo__V1__DataSource *const *src, size_t n,
                            const char *root) {
  for (size_t k = 0; k < n && k < COLO_MAX_SOURCES; k++) {
    snprintf(r->buf[k], sizeof r->buf[k], "%s/%s", root, src[k]->path);
    r->paths[k] = r->buf[k];
    r->names[k] = colo_val_source_name(src[k]);
    r->weights[k] = src[k]->weight;
  }
}

/* Applies one --flag value onto the spec. Returns 0, 1 when the flag is not a spec flag, or
 * -1 on a bad value. */
static int spec_flag(Colo__V1__JobSpec *s, const char *flag, const char *val) {
  static const struct {
    const char *flag;
    const char *yaml; /* section: {field: %s} */
  } MAP[] = {
      {"n-layer", "model: {n_layer: %s}"},
      {"n-head", "model: {n_head: %s}"},
      {"n-embd", "model: {n_embd: %s}"},
      {"block-size", "model: {block_size: %s}"},
      {"vocab-size", "model: {vocab_size: %s}"},
      {"arch", "model: {arch: %s}"},
      {"mlp-hidden", "model: {mlp_hidden: %s}"},
      {"rope-theta", "model: {rope_theta: %s}"},
      {"n-kv-head", "model: {n_kv_head: %s}"},
      {"tie-embeddings", "model: {tie_embeddings: %s}"},
      {"qkv-bias", "model: {qkv_bias: %s}"},
      {"rms-norm-eps", "model: {rms_norm_eps: %s}"},
      {"qk-norm", "model: {qk_norm: %s}"},
      {"head-dim", "model: {head_dim: %s}"},
      {"sliding-window", "model: {sliding_window: %s}"},
      {"hf-layout", "model: {hf_layout: %s}"},
      {"rope-scaling-factor", "model: {rope_scaling_factor: %s}"},
      {"rope-low-freq-factor", "model: {rope_low_freq_factor: %s}"},
      {"rope-high-freq-factor", "model: {rope_high_freq_factor: %s}"},
      {"rope-original-context", "model: {rope_original_context: %s}"},
      {"batch-size", "train: {batch_size: %s}"},
      {"grad-accum", "train: {grad_accum: %s}"},
      {"steps", "train: {steps: %s}"},
      {"seed", "train: {seed: %s}"},
      {"eval-interval", "train: {eval_interval: %s}"},
      {"eval-batches", "train: {eval_batches: %s}"},
      {"choice-questions", "train: {choice_questions: %s}"},
      {"lr", "optimizer: {lr: %s}"},
      {"min-lr", "optimizer: {min_lr: %s}"},
      {"warmup", "optimizer: {warmup_steps: %s}"},
      {"weight-decay", "optimizer: {weight_decay: %s}"},
      {"grad-clip", "optimizer: {grad_clip: %s}"},
      {"optimizer", "optimizer: {name: %s}"},
      {"muon-momentum", "optimizer: {muon_momentum: %s}"},
      {"muon-lr", "optimizer: {muon_lr: %s}"},
      {"muon-adjust-lr", "optimizer: {muon_adjust_lr: %s}"},
      {"skip-spike-sigma", "optimizer: {skip_spike_sigma: %s}"},
      {"skip-spike-window", "optimizer: {skip_spike_window: %s}"},
      {"beta2", "optimizer: {beta2: %s}"},
      {"schedule", "optimizer: {schedule: %s}"},
      {"decay-steps", "optimizer: {decay_steps: %s}"},
      {"loss-scaling", "train: {loss_scaling: %s}"},
      {"device", "resources: {device: %s}"},
      {"comm", "resources: {comm: %s}"},
      {"placement", "memory: {placement: %s}"},
      {"param-device-fraction", "memory: {param_device_fraction: %s}"},
      {"optim-device-fraction", "memory: {optim_device_fraction: %s}"},
      {"optim-nvme-fraction", "memory: {optim_nvme_fraction: %s}"},
      {"nvme-dir", "memory: {nvme_dir: %s}"},
      {"chunk-mib", "memory: {chunk_mib: %s}"},
      {"chunk-cache", "memory: {chunk_cache: %s}"},
      {"tf32", "train: {tf32: %s}"},
      {"precision", "train: {precision: %s}"},
      {"loss-scale-init", "train: {loss_scale_init: %s}"},
      {"loss-scale-window", "train: {loss_scale_window: %s}"},
      {"ckpt-interval", "checkpoint: {interval: %s}"},
      {"ckpt-keep", "checkpoint: {keep: %s}"},
      {"ckpt-keep-best", "checkpoint: {keep_best: %s}"},
      {"export-format", "checkpoint: {export_format: %s}"},
      {"export-tokenizer", "checkpoint: {export_tokenizer: '%s'}"},
      {"export-type", "checkpoint: {export_type: %s}"},
      {"export-ema", "checkpoint: {export_ema: %s}"},
      {"early-stop", "train: {early_stop_patience: %s}"},
      {"early-stop-min-delta", "train: {early_stop_min_delta: %s}"},
      {"best-metric", "train: {best_metric: '%s'}"},
      {"train-data", "data: {train_path: '%s'}"},
      {"val-data", "data: {val_path: '%s'}"},
      {"data-order", "data: {order: %s}"},
      {"document-token", "data: {document_token: %s}"},
      {"init-from", "train: {init_from: '%s'}"},
      {"lora-rank", "train: {lora_rank: %s}"},
      {"lora-alpha", "train: {lora_alpha: %s}"},
      {"lora-targets", "train: {lora_targets: '%s'}"},
      {"lora-quant", "train: {lora_quant: '%s'}"},
      {"lora-dropout", "train: {lora_dropout: %s}"},
      {"lora-rslora", "train: {lora_rslora: %s}"},
      {"lora-plus-ratio", "train: {lora_plus_ratio: %s}"},
      {"lora-dora", "train: {lora_dora: %s}"},
      {"lora-double-quant", "train: {lora_double_quant: %s}"},
      {"neftune-alpha", "train: {neftune_alpha: %s}"},
      {"ema-decay", "train: {ema_decay: %s}"},
      {"dpo-beta", "train: {dpo_beta: %s}"},
      {"dpo-precompute", "train: {dpo_precompute: %s}"},
      {"dpo-loss", "train: {dpo_loss: '%s'}"},
      {"dpo-label-smoothing", "train: {dpo_label_smoothing: %s}"},
      {"dpo-simpo-gamma", "train: {dpo_simpo_gamma: %s}"},
      {"dpo-rpo-alpha", "train: {dpo_rpo_alpha: %s}"},
      {"zero", "parallel: {zero_stage: %s}"},
      {"dp", "parallel: {dp: %s}"},
      {"tp", "parallel: {tp: %s}"},
      {"pp", "parallel: {pp: %s}"},
      {"cp", "parallel: {cp: %s}"},
      {"sp", "parallel: {sequence_parallel: %s}"},
      {"micro-batches", "parallel: {micro_batches: %s}"},
  };
  const char *yaml = NULL;
  for (size_t i = 0; i < sizeof MAP / sizeof MAP[0] && !yaml; i++)
    if (strcmp(MAP[i].flag, flag) == 0)
      yaml = MAP[i].yaml;
  int choice = !strcmp(flag, "choice-set");
  if (!yaml && strcmp(flag, "data-source") != 0 && strcmp(flag, "val-source") != 0 && !choice)
    return 1;
  if (strchr(val, '\'') || strchr(val, '\n')) {
    fprintf(stderr, "colo-train train: --%s: bad value\n", flag);
    return -1;
  }
  char doc[1200], err[512];
  if (yaml) {
    snprintf(doc, sizeof doc, yaml, val);
  } else if (choice) { /* NAME=PATH, or PATH: one more multiple-choice set */
    const char *eq = strchr(val, '=');
    snprintf(doc, sizeof doc, "data: {choice_sets: [{path: '%s', name: '%.*s'}]}",
             eq ? eq + 1 : val, eq ? (int)(eq - val) : 0, val);
  } else { /* PATH or PATH=WEIGHT: one more source of a blend, or validation set */
    const char *eq = strrchr(val, '=');
    snprintf(doc, sizeof doc, "data: {%s: [{path: '%.*s', weight: %s}]}",
             flag[0] == 'v' ? "val_sources" : "sources", eq ? (int)(eq - val) : (int)strlen(val),
             val, eq ? eq + 1 : "1");
  }
  {
    Colo__V1__JobSpec *one;
    char src[64];
    snprintf(src, sizeof src, "--%s", flag);
    if (colo_pb_from_yaml(doc, strlen(doc), src, &colo__v1__job_spec__descriptor,
                          (ProtobufCMessage **)&one, err, sizeof err) < 0) {
      fprintf(stderr, "colo-train train: %s\n", err);
      return -1;
    }
    /* merge: pack both, concatenated protobuf messages merge field by field */
    size_t la = colo__v1__job_spec__get_packed_size(s),
           lb = colo__v1__job_spec__get_packed_size(one);
    uint8_t *buf = malloc(la + lb);
    colo__v1__job_spec__pack(s, buf);
    colo__v1__job_spec__pack(one, buf + la);
    colo__v1__job_spec__free_unpacked(one, NULL);
    Colo__V1__JobSpec *merged = colo__v1__job_spec__unpack(NULL, la + lb, buf);
    free(buf);
    if (!merged)
      return -1;
    /* swap contents: the caller keeps its pointer */
    Colo__V1__JobSpec tmp = *s;
    *s = *merged;
    *merged = tmp;
    colo__v1__job_spec__free_unpacked(merged, NULL);
    /* a blend's sources and one training set replace each other, as do validation sets */
    Colo__V1__DataSpec *d = s->data;
    if (!yaml && !choice)
      clear_path(flag[0] == 'v' ? &d->val_path : &d->train_path);
    else if (!strcmp(flag, "val-data"))
      clear_sources(&d->val_sources, &d->n_val_sources);
    else if (!strcmp(flag, "train-data"))
      clear_sources(&d->sources, &d->n_sources);
    return 0;
  }
}

/* SIGTERM and SIGINT ask for a stop (train.h: stop_requested): the training loop stops at the
 * next step's start. In a process on its own the first restores the default action, so that a
 * second ends it at once (a second Ctrl-C). The local launcher passes the first on to its ranks
 * (a signal sent to it alone reaches them; one sent to the process group, as Ctrl-C's, reaches
 * them twice, which they take as one) and waits for them; a second ends it, and so them
 * (PR_SET_PDEATHSIG). */
static volatile sig_atomic_t stop_requested;
static volatile pid_t *launched; /* the launcher's ranks (-1: reaped), or NULL */
static volatile int n_launched;
static int stop_once = 1; /* a second signal takes the default action; 0 in a launcher's rank */

static void on_stop_signal(int sig) {
  stop_requested = 1;
  for (int r = 0; launched && r < n_launched; r++)
    if (launched[r] > 0)
      kill(launched[r], SIGTERM);
  if (stop_once)
    signal(sig, SIG_DFL);
}

/* SIGUSR1 asks for a checkpoint now (train.h: save_requested), and the run goes on: colod's
 * CheckpointJob reaches the ranks this way. The local launcher passes it on to its ranks. */
static volatile sig_atomic_t save_requested;

static void on_save_signal(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  /* a worker's sigqueue carries the request's number (reported with the checkpoint); a plain
   * kill counts one more */
  if (si && si->si_code == SI_QUEUE) {
    if (si->si_value.sival_int > save_requested) /* one it has not seen */
      save_requested = si->si_value.sival_int;
  } else {
    save_requested++;
  }
  for (int r = 0; launched && r < n_launched; r++)
    if (launched[r] > 0)
      sigqueue(launched[r], SIGUSR1, (union sigval){.sival_int = save_requested});
}

static void catch_stop_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART; /* interrupted reads and writes go on; poll's EINTR is retried */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sa.sa_handler = NULL;
  sa.sa_sigaction = on_save_signal;
  sa.sa_flags |= SA_SIGINFO;
  sigaction(SIGUSR1, &sa, NULL);
}

static char **main_argv; /* main's, for wait_passively's exec */

/* More ranks × threads than cores (a --threads the user gave): libgomp's idle threads spin for a
 * while before they sleep, on cores another rank needs. Two 2-thread ranks on 2 cores trained at
 * half the speed they train at with OMP_WAIT_POLICY=passive. libgomp reads that once, when it
 * loads, and the ranks are forks of this process: so the launcher sets it and executes itself
 * again, unless the user set it (one thread a rank has no idle threads). Returns when nothing is to
 * be done or the exec failed. */
static void wait_passively(int world, int threads) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 2 || cores <= 0 || (long)world * threads <= cores || getenv("OMP_WAIT_POLICY"))
    return;
  printf("colo-train: %d ranks x %d threads on %ld cores: OpenMP threads wait passively "
         "(OMP_WAIT_POLICY=passive)\n",
         world, threads, cores);
  fflush(stdout);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", main_argv);
  fprintf(stderr, "colo-train: could not execute itself again (%s); threads spin as before\n",
          strerror(errno));
}

/* The local launcher: forks `world` ranks with COLO_RANK, COLO_WORLD and COLO_STORE set, then
 * waits. In a child it returns -(rank + 1); in the parent the exit status for the whole run:
 * 0 when every rank succeeded; COLO_EXIT_STOPPED when they stopped as asked (none failing
 * otherwise); otherwise 1 (COLO_EXIT_CONFIG when the rank that failed first
 * exited with it), naming that rank. After a failure
 * the other ranks get the communicator timeout (plus 5 s) to notice and exit with their own
 * message; then SIGTERM, and SIGKILL 10 s later. */
static int launch(int world, int comm_timeout_ms) {
  char err[256], addr[64];
  int port;
  int fd = colo_tcp_listen("127.0.0.1", 0, &port, err, sizeof err);
  if (fd < 0) {
    fprintf(stderr, "colo-train train: %s\n", err);
    return 1;
  }
  /* rank 0 serves the store on this very socket (COLO_STORE_FD): the port is never let go, so
   * nothing else on the host can take it between here and there */
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  fflush(stdout);
  pid_t *pids = calloc((size_t)world, sizeof *pids);
  for (int r = 0; r < world; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      char v[32];
      /* no orphans: a rank dies with its launcher; and it shows as colo-rank<N> in ps */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() == 1)
        _exit(1);
      snprintf(v, sizeof v, "colo-rank%d", r);
      prctl(PR_SET_NAME, v);
      snprintf(v, sizeof v, "%d", r);
      setenv("COLO_RANK", v, 1);
      snprintf(v, sizeof v, "%d", world);
      setenv("COLO_WORLD", v, 1);
      setenv("COLO_STORE", addr, 1);
      if (r == 0) {
        snprintf(v, sizeof v, "%d", fd);
        setenv("COLO_STORE_FD", v, 1);
      } else {
        close(fd);
      }
      free(pids);
      stop_once = 0;
      return -(r + 1);
    }
    pids[r] = pid;
  }
  close(fd); /* rank 0's now */
  launched = pids;
  n_launched = world;
  if (stop_requested) /* asked before every rank was there to take it */
    for (int r = 0; r < world; r++)
      kill(pids[r], SIGTERM);
  int failed = -1, status = 0, left = world, phase = 0, stopped = 0;
  time_t deadline = 0;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, deadline ? WNOHANG : 0);
    if (pid == 0) { /* waiting for the other ranks after a failure */
      if (time(NULL) >= deadline) {
        for (int r = 0; r < world; r++)
          if (pids[r] > 0)
            kill(pids[r], phase == 0 ? SIGTERM : SIGKILL);
        phase++;
        deadline = time(NULL) + 10;
      }
      usleep(50000);
      continue;
    }
    if (pid < 0)
      break;
    int r = 0;
    while (r < world && pids[r] != pid)
      r++;
    if (r == world)
      continue;
    pids[r] = -1; /* before the handler could signal a reused pid */
    left--;
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) == COLO_EXIT_STOPPED) { /* the others stop there too */
      stopped++;
      ok = 1;
    }
    if (!ok && failed < 0) {
      failed = r;
      status = st;
      deadline = time(NULL) + comm_timeout_ms / 1000 + 5;
    }
  }
  n_launched = 0;
  launched = NULL;
  free(pids);
  if (failed >= 0) {
    if (WIFSIGNALED(status))
      fprintf(stderr, "colo-train train: rank %d was killed by signal %d; the run stopped\n",
              failed, WTERMSIG(status));
    else
      fprintf(stderr, "colo-train train: rank %d exited with status %d; the run stopped\n", failed,
              WEXITSTATUS(status));
    return WIFEXITED(status) && WEXITSTATUS(status) == COLO_EXIT_CONFIG ? COLO_EXIT_CONFIG : 1;
  }
  return stopped ? COLO_EXIT_STOPPED : 0;
}

/* checkpoint.export_format: the newest checkpoint of a finished run as ckpt_dir/model.gguf, or
 * model.safetensors and config.json */
static int export_last(const char *ckpt_dir, const char *format, const char *tokenizer,
                       const char *type) {
  char last[2100], skipped[1024] = "", out[2200], config[2200], err[1024];
  if (colo_ckpt_find_latest(ckpt_dir, last, sizeof last, skipped, sizeof skipped) < 0) {
    fprintf(stderr, "colo-train train: checkpoint.export_format: %s has no complete checkpoint\n",
            ckpt_dir);
    return 1;
  }
  int gguf = !strcmp(format, "gguf"), peft = !strcmp(format, "peft");
  int glora = !strcmp(format, "gguf-lora");
  snprintf(out, sizeof out, "%s/%s", ckpt_dir,
           gguf    ? "model.gguf"
           : peft  ? "adapter"
           : glora ? "adapter.gguf"
                   : "model.safetensors");
  snprintf(config, sizeof config, "%s/config.json", ckpt_dir);
  int rc = gguf
               ? colo_export_gguf(last, out, tokenizer, colo_gguf_type_parse(type), err, sizeof err)
           : peft  ? colo_export_adapters(last, out, COLO_ADAPTERS_PEFT, err, sizeof err)
           : glora ? colo_export_adapters(last, out, COLO_ADAPTERS_GGUF, err, sizeof err)
                   : colo_export_checkpoint(last, out, config, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "colo-train train: exporting %s: %s\n", last, err);
    return rc == COLO_EINVAL ? COLO_EXIT_CONFIG : 1;
  }
  if (peft)
    printf("exported %s's adapters for PEFT in %s (adapter_model.safetensors, "
           "adapter_config.json)\n",
           last, out);
  else if (glora)
    printf("exported %s's adapters as llama.cpp's LoRA adapter file %s\n", last, out);
  else
    printf("exported %s as %s%s%s\n", last, out, gguf ? "" : " and ", gguf ? "" : config);
  return 0;
}

static int cmd_train(int argc, char **argv) {
  const char *job = NULL, *data_root = ".", *ckpt_dir = NULL, *resume = NULL, *progress = NULL;
  const char *nvme_root = ".", *init_ckpts = NULL;
  const char *dump = NULL, *plant = NULL;
  int gpu = 0, gpu_given = 0;
  int threads = 0, stop_at = 0, quiet = 0, recompute = -1, progress_fd = -1, nproc = 1;
  int comm_timeout = 60000;
  long memory_mib = 0;
  char err[2048];
  Colo__V1__JobSpec *spec = malloc(sizeof *spec);
  colo__v1__job_spec__init(spec);
  spec->name = strdup("colo-train");
  /* first pass: the job file, so flags apply on top of it in any order */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      train_usage();
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return 0;
    }
    if (!strcmp(argv[i], "--job") && i + 1 < argc) {
      colo__v1__job_spec__free_unpacked(spec, NULL);
      if (colo_pb_from_yaml_file(argv[i + 1], &colo__v1__job_spec__descriptor,
                                 (ProtobufCMessage **)&spec, err, sizeof err) < 0) {
        fprintf(stderr, "colo-train train: %s\n", err);
        return 1;
      }
      job = argv[i + 1];
    }
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      char msg[160];
      snprintf(msg, sizeof msg, "unexpected argument '%.100s' (after %.40s)", a,
               i > 1 ? argv[i - 1] : "train");
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return usage_error("train", msg);
    }
    const char *flag = a + 2;
    int has_val = i + 1 < argc;
    const char *val = has_val ? argv[i + 1] : NULL;
    int used = 1;
    if (!strcmp(flag, "job"))
      ;
    else if (!strcmp(flag, "data-root"))
      data_root = val;
    else if (!strcmp(flag, "ckpt-dir"))
      ckpt_dir = val;
    else if (!strcmp(flag, "nvme-root"))
      nvme_root = val;
    else if (!strcmp(flag, "init-from-checkpoints"))
      init_ckpts = val;
    else if (!strcmp(flag, "resume"))
      resume = val;
    else if (!strcmp(flag, "stop-at"))
      stop_at = val ? atoi(val) : 0;
    else if (!strcmp(flag, "threads"))
      threads = val ? atoi(val) : 0;
    else if (!strcmp(flag, "memory-limit"))
      memory_mib = val ? atol(val) : 0;
    else if (!strcmp(flag, "progress"))
      progress = val;
    else if (!strcmp(flag, "progress-fd"))
      progress_fd = val ? atoi(val) : -1;
    else if (!strcmp(flag, "dump-reference"))
      dump = val;
    else if (!strcmp(flag, "plant-overflow"))
      plant = val;
    else if (!strcmp(flag, "gpu"))
      gpu = val ? atoi(val) : 0, gpu_given = 1;
    else if (!strcmp(flag, "nproc"))
      nproc = val ? atoi(val) : 0;
    else if (!strcmp(flag, "comm-timeout"))
      comm_timeout = val ? atoi(val) : 0;
    else if (!strcmp(flag, "quiet")) {
      quiet = 1;
      used = 0;
    } else if (!strcmp(flag, "recompute")) {
      recompute = 1;
      used = 0;
    } else {
      if (!has_val) {
        colo__v1__job_spec__free_unpacked(spec, NULL);
        fprintf(stderr, "colo-train train: --%s needs a value\n", flag);
        return 2;
      }
      int r = spec_flag(spec, flag, val);
      if (r != 0) {
        colo__v1__job_spec__free_unpacked(spec, NULL);
        if (r > 0)
          fprintf(stderr, "colo-train train: unknown option '%s'; try 'colo-train train --help'\n",
                  a);
        return 2;
      }
    }
    if (used) {
      if (!has_val) {
        colo__v1__job_spec__free_unpacked(spec, NULL);
        fprintf(stderr, "colo-train train: %s needs a value\n", a);
        return 2;
      }
      i++;
    }
  }
  (void)job;
  colo_jobspec_fill_defaults(spec);
  if (recompute == 1)
    spec->train->recompute = 1;
  if (colo_jobspec_validate(spec, err, sizeof err) < 0) {
    fprintf(stderr, "colo-train train: %s\n", err);
    colo__v1__job_spec__free_unpacked(spec, NULL);
    return COLO_EXIT_CONFIG; /* the job as written */
  }
  /* another job's checkpoints (train.init_from_job, which the worker resolves to a directory):
   * its newest complete one gives the initial weights, or under train.init_pick=best the one
   * with the lowest validation loss */
  char init_ckpt[2100] = "";
  if (init_ckpts) {
    char skipped[1024] = "";
    if (spec->train->init_from && spec->train->init_from[0]) {
      fprintf(stderr, "colo-train train: --init-from-checkpoints and train.init_from are "
                      "exclusive: give one\n");
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return COLO_EXIT_CONFIG;
    }
    int best = spec->train->init_pick == COLO__V1__INIT_PICK__INIT_PICK_BEST;
    char why[512];
    if (spec->train->init_step > 0 &&
        colo_ckpt_find_step(init_ckpts, spec->train->init_step, init_ckpt, sizeof init_ckpt, why,
                            sizeof why) < 0) {
      fprintf(stderr,
              "colo-train train: train.init_step=%u: no complete checkpoint at step %u under %s "
              "to take the initial weights from: %s\n",
              spec->train->init_step, spec->train->init_step, init_ckpts, why);
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return COLO_EXIT_CONFIG;
    }
    if (spec->train->init_step == 0 &&
        (best ? colo_ckpt_find_best : colo_ckpt_find_latest)(
            init_ckpts, init_ckpt, sizeof init_ckpt, skipped, sizeof skipped) < 0) {
      fprintf(stderr,
              "colo-train train: no complete checkpoint under %s%s to take the initial weights "
              "from%s%s%s\n",
              init_ckpts,
              best ? " that records a validation loss or a score (train.init_pick=best; the "
                     "job's checkpoint.keep_best evaluates each)"
                   : "",
              skipped[0] ? " (unusable: " : "", skipped, skipped[0] ? ")" : "");
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return COLO_EXIT_CONFIG;
    }
  }

  /* where this process stands: launched by a launcher, launching, or alone */
  const char *env_rank = getenv("COLO_RANK"), *env_world = getenv("COLO_WORLD");
  int world = env_world ? atoi(env_world) : nproc, rank = env_rank ? atoi(env_rank) : 0;
  if ((unsigned long long)world != colo_jobspec_world(spec)) {
    fprintf(stderr,
            "colo-train train: parallel.dp×cp×tp×pp=%llu but %d processes: give --nproc %llu\n",
            colo_jobspec_world(spec), world, colo_jobspec_world(spec));
    colo__v1__job_spec__free_unpacked(spec, NULL);
    return 2;
  }
  catch_stop_signals();
  if (world > 1 && !env_rank)
    wait_passively(world, threads);
  if (world > 1 && !env_rank) {
    int rc = launch(world, comm_timeout);
    if (rc >= 0) { /* the launcher's own exit status */
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return rc;
    }
    rank = -rc - 1; /* a child: this rank */
    if (!gpu_given)
      gpu = rank; /* a GPU each, as torchrun's LOCAL_RANK */
    if (threads == 0) {
      long n = sysconf(_SC_NPROCESSORS_ONLN) / world;
      threads = n > 0 ? (int)n : 1;
    }
  }
  char train_path[2100], val_path[2100];
  snprintf(train_path, sizeof train_path, "%s/%s", data_root,
           spec->data->train_path ? spec->data->train_path : "");
  /* a blend's sources, resolved under the data root (validated: at most COLO_MAX_SOURCES) */
  static resolved_t blend, vals, choices; /* static: 270 KiB each */
  resolve_sources(&blend, spec->data->sources, spec->data->n_sources, data_root);
  resolve_sources(&vals, spec->data->val_sources, spec->data->n_val_sources, data_root);
  resolve_sources(&choices, spec->data->choice_sets, spec->data->n_choice_sets, data_root);
  val_path[0] = '\0'; /* none: only multiple-choice sets are evaluated (train.steps=0) */
  if (spec->data->val_path && spec->data->val_path[0])
    snprintf(val_path, sizeof val_path, "%s/%s", data_root, spec->data->val_path);
  /* checkpoint.export_format: what rank 0 writes once every step is trained */
  const Colo__V1__CheckpointSpec *ck = spec->checkpoint;
  char exp_format[16] = "", exp_type[8] = "f16", exp_tok[2100] = "";
  int exp_ema = ck->export_ema;
  if (ck->export_format && ck->export_format[0]) {
    snprintf(exp_format, sizeof exp_format, "%s", ck->export_format);
    if (ck->export_type && ck->export_type[0])
      snprintf(exp_type, sizeof exp_type, "%s", ck->export_type);
    if (ck->export_tokenizer && ck->export_tokenizer[0])
      snprintf(exp_tok, sizeof exp_tok, "%s/%s", data_root, ck->export_tokenizer);
    if (!ckpt_dir && rank == 0)
      fprintf(stderr, "colo-train train: checkpoint.export_format: no checkpoints (--ckpt-dir), "
                      "so the run exports nothing\n");
    /* what would make the export fail fails now, not after the training */
    colo_bpe_t *t = NULL;
    int bad = rank == 0 && !strcmp(exp_format, "gguf") &&
              ((exp_tok[0] && colo_bpe_load(exp_tok, &t, err, sizeof err) < 0) ||
               colo_gguf_check(t, (int)spec->model->vocab_size, "checkpoint.export_tokenizer", err,
                               sizeof err) < 0);
    colo_bpe_free(t);
    if (bad) {
      fprintf(stderr, "colo-train train: checkpoint.export_tokenizer: %s\n", err);
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return COLO_EXIT_CONFIG;
    }
  }
  /* train.init_average: the mean of init_from_job's newest checkpoints, which every rank writes
   * alike (the same bits) beside this job's checkpoints and loads as init_from */
  char avg_tmp[2300] = ""; /* without a checkpoint directory: a file of this process's, removed */
  if (init_ckpts && spec->train->init_average > 1) {
    unsigned na = spec->train->init_average;
    uint64_t steps[64];
    static char dirs[64][1200];
    const char *p[64];
    size_t have = 0;
    colo_ckpt_newest(init_ckpts, na, dirs, steps, &have);
    if (have < na) {
      fprintf(stderr,
              "colo-train train: train.init_average=%u: %s holds %zu complete checkpoint%s to "
              "average\n",
              na, init_ckpts, have, have == 1 ? "" : "s");
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return COLO_EXIT_CONFIG;
    }
    for (unsigned i = 0; i < na; i++) /* oldest first */
      p[i] = dirs[i];
    char mine[2300];
    if (ckpt_dir) {
      mkdir(ckpt_dir, 0755);
      snprintf(init_ckpt, sizeof init_ckpt, "%s/init_average.safetensors", ckpt_dir);
    } else {
      const char *t = getenv("TMPDIR");
      snprintf(avg_tmp, sizeof avg_tmp, "%s/colo-init-average-%d.safetensors",
               t && t[0] ? t : "/tmp", (int)getpid());
      snprintf(init_ckpt, sizeof init_ckpt, "%s", avg_tmp);
    }
    snprintf(mine, sizeof mine, "%s.rank%d", init_ckpt, rank);
    if (colo_average_checkpoints(p, NULL, (int)na, mine, NULL, err, sizeof err) < 0 ||
        (rename(mine, init_ckpt) != 0 &&
         snprintf(err, sizeof err, "%s: %s", init_ckpt, strerror(errno)) > 0)) {
      fprintf(stderr, "colo-train train: train.init_average=%u: %s\n", na, err);
      unlink(mine);
      colo__v1__job_spec__free_unpacked(spec, NULL);
      return COLO_EXIT_CONFIG;
    }
    if (rank == 0)
      printf("initial weights: the mean of %u checkpoints of %s, steps %llu to %llu, in %s\n", na,
             init_ckpts, (unsigned long long)steps[0], (unsigned long long)steps[na - 1],
             init_ckpt);
  }
  char init_from[2100] = "";
  if (spec->train->init_from && spec->train->init_from[0])
    snprintf(init_from, sizeof init_from, "%s/%s", data_root, spec->train->init_from);
  else if (init_ckpt[0])
    snprintf(init_from, sizeof init_from, "%s", init_ckpt);
  colo_train_config_t cfg = {0};
  const Colo__V1__ModelSpec *ms = spec->model;
  cfg.model = (colo_gpt_config_t){.vocab_size = (int)ms->vocab_size,
                                  .block_size = (int)ms->block_size,
                                  .n_layer = (int)ms->n_layer,
                                  .n_head = (int)ms->n_head,
                                  .n_embd = (int)ms->n_embd,
                                  .arch = ms->arch == COLO__V1__ARCH__ARCH_LLAMA ? COLO_ARCH_LLAMA
                                                                                 : COLO_ARCH_GPT2,
                                  .mlp_hidden = (int)ms->mlp_hidden,
                                  .rope_theta = ms->rope_theta,
                                  .n_kv_head = (int)ms->n_kv_head,
                                  .untied_head = !ms->tie_embeddings,
                                  .rope_factor = ms->rope_scaling_factor,
                                  .rope_low = ms->rope_low_freq_factor,
                                  .rope_high = ms->rope_high_freq_factor,
                                  .rope_orig = (int)ms->rope_original_context,
                                  .norm_eps = ms->rms_norm_eps,
                                  .qkv_bias = ms->qkv_bias,
                                  .qk_norm = ms->qk_norm,
                                  .head_dim = (int)ms->head_dim,
                                  .sliding_window = (int)ms->sliding_window,
                                  .rope_ext = (int)ms->n_rope_short_factor,
                                  .rope_attn = ms->rope_attention_factor,
                                  .hf_phi3 = ms->hf_layout && !strcmp(ms->hf_layout, "phi3")};
  for (size_t i = 0; i < ms->n_rope_short_factor && i < COLO_ROPE_EXT_MAX; i++) {
    cfg.model.rope_short[i] = ms->rope_short_factor[i];
    cfg.model.rope_long[i] = ms->rope_long_factor[i]; /* as many: the spec was validated */
  }
  const Colo__V1__OptimizerSpec *o = spec->optimizer;
  cfg.optim =
      (colo_adamw_config_t){o->lr,
                            o->min_lr,
                            o->beta1,
                            o->beta2,
                            o->eps,
                            o->weight_decay,
                            o->grad_clip,
                            (int)o->warmup_steps,
                            (int)spec->train->steps,
                            (int)o->schedule,
                            (int)colo_decay_steps(spec),
                            o->name == COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_MUON,
                            o->muon_momentum,
                            o->muon_lr / o->lr, /* 0: lr (colo_muon_lr_ratio) */
                            o->muon_adjust_lr == COLO__V1__MUON_ADJUST_LR__MUON_ADJUST_LR_ORIGINAL};
  cfg.spike_sigma = o->skip_spike_sigma;
  cfg.spike_window = (int)o->skip_spike_window;
  cfg.batch_size = (int)spec->train->batch_size;
  cfg.grad_accum = (int)spec->train->grad_accum;
  cfg.steps = (int)spec->train->steps;
  cfg.eval_interval = (int)spec->train->eval_interval;
  cfg.eval_batches = (int)spec->train->eval_batches;
  cfg.choice_questions = spec->train->choice_questions;
  cfg.ckpt_interval = (int)spec->checkpoint->interval;
  cfg.ckpt_keep = (int)spec->checkpoint->keep;
  cfg.ckpt_keep_best = spec->checkpoint->keep_best;
  cfg.early_stop = (int)spec->train->early_stop_patience;
  cfg.early_stop_delta = spec->train->early_stop_min_delta;
  colo_best_metric(spec, &cfg.best_set, &cfg.best_kind); /* validated */
  cfg.recompute = spec->train->recompute;
  cfg.neftune_alpha = spec->train->neftune_alpha;
  cfg.ema_decay = spec->train->ema_decay;
  cfg.dpo_beta = spec->train->dpo_beta;
  cfg.dpo_precompute = spec->train->dpo_precompute;
  cfg.dpo_loss = colo_dpo_loss_parse(spec->train->dpo_loss);
  cfg.dpo_simpo_gamma = spec->train->dpo_simpo_gamma;
  cfg.dpo_rpo_alpha = spec->train->dpo_rpo_alpha;
  cfg.dpo_label_smoothing = spec->train->dpo_label_smoothing;
  cfg.seed = spec->train->seed;
  cfg.train_path = train_path;
  cfg.val_path = val_path;
  cfg.source_paths = blend.paths;
  cfg.source_weights = blend.weights;
  cfg.n_sources = (int)spec->data->n_sources;
  cfg.val_paths = vals.paths;
  cfg.val_names = vals.names;
  cfg.val_weights = vals.weights;
  cfg.n_val = (int)spec->data->n_val_sources;
  cfg.choice_paths = choices.paths;
  cfg.choice_names = choices.names;
  cfg.n_choice = (int)spec->data->n_choice_sets;
  cfg.data_order = spec->data->order == COLO__V1__DATA_ORDER__DATA_ORDER_SHUFFLE
                       ? COLO_ORDER_SHUFFLE
                       : COLO_ORDER_RANDOM;
  cfg.document_token = spec->data->document_token;
  cfg.init_from = init_from[0] ? init_from : NULL;
  if (spec->train->lora_rank > 0) { /* validated with the spec: the targets parse */
    cfg.lora.rank = (int)spec->train->lora_rank;
    cfg.lora.alpha = spec->train->lora_alpha;
    cfg.lora.targets = COLO_LORA_ALL;
    if (spec->train->lora_targets && spec->train->lora_targets[0])
      colo_lora_targets_parse(spec->train->lora_targets, &cfg.lora.targets, NULL, 0);
    if (spec->train->lora_quant && !strcmp(spec->train->lora_quant, "nf4"))
      cfg.lora.quant = COLO_LORA_QUANT_NF4;
    cfg.lora.dropout = spec->train->lora_dropout;
    cfg.lora.rslora = spec->train->lora_rslora;
    cfg.lora.plus_ratio = spec->train->lora_plus_ratio;
    cfg.lora.dora = spec->train->lora_dora;
    cfg.lora.double_quant = spec->train->lora_double_quant;
  }
  cfg.ckpt_dir = ckpt_dir;
  cfg.resume = resume;
  cfg.stop_at = stop_at;
  cfg.memory_limit = (size_t)memory_mib << 20;
  cfg.quiet = quiet;
  cfg.dump_path = dump;
  cfg.world = world;
  cfg.rank = rank;
  cfg.store_addr = getenv("COLO_STORE");
  cfg.parent_pid = getenv("COLO_WORKER_PID") ? atoi(getenv("COLO_WORKER_PID")) : 0;
  cfg.stop_requested = &stop_requested;
  cfg.save_requested = &save_requested;
  cfg.bind_host = getenv("COLO_BIND") ? getenv("COLO_BIND") : "127.0.0.1";
  cfg.comm_timeout_ms =
      getenv("COLO_COMM_TIMEOUT_MS") ? atoi(getenv("COLO_COMM_TIMEOUT_MS")) : comm_timeout;
  cfg.zero_stage = (int)spec->parallel->zero_stage;
  cfg.chunk_floats = (size_t)spec->memory->chunk_mib << 18; /* MiB of fp32 */
  cfg.tp = (int)spec->parallel->tp;
  cfg.sequence_parallel = spec->parallel->sequence_parallel;
  cfg.pp = (int)spec->parallel->pp;
  cfg.cp = (int)spec->parallel->cp;
  cfg.micro_batches = (int)spec->parallel->micro_batches;
  const Colo__V1__TrainSpec *ts = spec->train;
  cfg.device = spec->resources->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU;
  cfg.gpu = gpu;
  cfg.comm = spec->resources->comm == COLO__V1__COMM_KIND__COMM_KIND_NCCL   ? COLO_COMM_NCCL
             : spec->resources->comm == COLO__V1__COMM_KIND__COMM_KIND_HOST ? COLO_COMM_HOST
                                                                            : COLO_COMM_AUTO;
  /* the GPU's products: bf16 and fp16 on tensor cores, fp32 with or without TF32 */
  cfg.math = ts->precision == COLO__V1__PRECISION__PRECISION_BF16   ? COLO_MATH_BF16
             : ts->precision == COLO__V1__PRECISION__PRECISION_FP16 ? COLO_MATH_FP16
             : ts->tf32                                             ? COLO_MATH_TF32
                                                                    : COLO_MATH_FP32;
  int scaling = ts->loss_scaling == COLO__V1__LOSS_SCALING__LOSS_SCALING_DYNAMIC ||
                (ts->loss_scaling == COLO__V1__LOSS_SCALING__LOSS_SCALING_AUTO &&
                 ts->precision == COLO__V1__PRECISION__PRECISION_FP16);
  cfg.loss_scale_init = scaling ? ts->loss_scale_init : 0.0f;
  cfg.loss_scale_window = (int)ts->loss_scale_window;
  const Colo__V1__MemorySpec *mem = spec->memory;
  char nvme_dir[2100] = "";
  cfg.placement_auto = mem->placement == COLO__V1__PLACEMENT__PLACEMENT_AUTO;
  cfg.chunk_cache = mem->chunk_cache;
  if (mem->placement == COLO__V1__PLACEMENT__PLACEMENT_STATIC) {
    cfg.placement_static = 1;
    cfg.param_device_fraction = mem->param_device_fraction;
    cfg.optim_device_fraction = mem->optim_device_fraction;
    cfg.optim_nvme_fraction = mem->optim_nvme_fraction;
    if (mem->nvme_dir && mem->nvme_dir[0]) {
      snprintf(nvme_dir, sizeof nvme_dir, "%s/%s", nvme_root, mem->nvme_dir);
      cfg.nvme_dir = nvme_dir;
    }
  }
  int planted[64];
  if (plant) {
    const char *q = plant;
    while (*q) {
      char *end;
      long v = strtol(q, &end, 10);
      if (end == q || v < 1 || v > INT_MAX || (*end && *end != ',') ||
          cfg.n_plant == (int)(sizeof planted / sizeof planted[0])) {
        colo__v1__job_spec__free_unpacked(spec, NULL);
        return usage_error("train", "--plant-overflow wants up to 64 step numbers, like 3,7");
      }
      planted[cfg.n_plant++] = (int)v;
      q = *end ? end + 1 : end;
    }
    cfg.plant_steps = planted;
  }
  if (world > 1 && !cfg.store_addr) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
    return usage_error("train", "COLO_WORLD is set but COLO_STORE is not");
  }
  if (resume && !strcmp(resume, "auto") && !ckpt_dir) {
    colo__v1__job_spec__free_unpacked(spec, NULL);
    return usage_error("train", "--resume auto needs --ckpt-dir");
  }
  FILE *pf = NULL;
  if (progress && !strcmp(progress, "-"))
    pf = stdout;
  else if (progress)
    pf = fopen(progress, "a");
  else if (progress_fd >= 0)
    pf = fdopen(progress_fd, "a");
  if ((progress || progress_fd >= 0) && !pf) {
    fprintf(stderr, "colo-train train: cannot open the progress stream: %s\n", strerror(errno));
    colo__v1__job_spec__free_unpacked(spec, NULL);
    return 1;
  }
  cfg.progress = pf;
  colo_backend_cpu_set_threads(threads);
  float loss, val;
  int rc = colo_train_run(&cfg, &loss, &val, err, sizeof err);
  if (avg_tmp[0])
    unlink(avg_tmp);
  if (pf && pf != stdout)
    fclose(pf);
  colo__v1__job_spec__free_unpacked(spec, NULL);
  if (rc == COLO_ESTOPPED) { /* every rank says where it stopped, as it would say why it failed */
    if (world > 1)
      fprintf(stderr, "colo-train train: rank %d: %s\n", rank, err);
    else
      fprintf(stderr, "colo-train train: %s\n", err);
    return COLO_EXIT_STOPPED;
  }
  if (rc < 0) {
    if (world > 1)
      fprintf(stderr, "colo-train train: rank %d: %s\n", rank, err);
    else
      fprintf(stderr, "colo-train train: %s\n", err);
    /* what the job asks for cannot be done: running it again would fail the same way */
    return rc == COLO_EINVAL || rc == COLO_ENOENT || rc == COLO_EPARSE ? COLO_EXIT_CONFIG : 1;
  }
  if (exp_format[0] && ckpt_dir && rank == 0 && !(stop_at > 0 && stop_at < cfg.steps)) {
    colo_checkpoint_weights_ema(exp_ema); /* checkpoint.export_ema: the average in their place */
    return export_last(ckpt_dir, exp_format, exp_tok[0] ? exp_tok : NULL, exp_type);
  }
  return 0;
}

/* ---- eval / sample ---- */

/* --device cpu|gpu and --gpu N of eval and sample: the GPU to use, or -1 for the CPU; -2 on a
 * bad value (said) */
static int device_flag(const char *cmd, const char *device, int gpu) {
  if (!device || !strcmp(device, "cpu"))
    return -1;
  if (strcmp(device, "gpu") != 0 || gpu < 0) {
    usage_error(cmd, "--device must be cpu or gpu, and --gpu 0 or more");
    return -2;
  }
  return gpu;
}

/* What --checkpoint DIR of eval, sample and export takes (pick_checkpoint), for their --help */
#define CKPT_DIR_HELP                                                                              \
  "DIR: a checkpoint, or a directory of them (a job's): its newest complete one, or\n"             \
  "with --best the best by its manifest (checkpoint.keep_best: the lowest validation\n"            \
  "loss, or the highest score of the run's train.best_metric); or a\n"                             \
  "HuggingFace model's directory (config.json and model.safetensors: GPT-2's, Llama's,\n"          \
  "Qwen2's, as the Hub has them). --ema reads the checkpoint's moving average of its\n"            \
  "weights (train.ema_decay) in their place.\n"

/* --checkpoint DIR of eval, sample and export: a checkpoint (step_N), or a directory of them
 * (a job's), of which the newest complete one, or with --best the one with the lowest
 * validation loss its manifest records; named on standard error. 0, or -1 having said why. */
static int pick_checkpoint(const char *cmd, const char *arg, int best, char *out, size_t len) {
  char manifest[2200], skipped[1024] = "";
  snprintf(manifest, sizeof manifest, "%s/manifest.json", arg);
  if (access(manifest, F_OK) == 0) {
    if (best) {
      fprintf(stderr,
              "colo-train %s: %s is one checkpoint; --best picks among a directory of them\n", cmd,
              arg);
      return -1;
    }
    snprintf(out, len, "%s", arg);
    return 0;
  }
  int steps = 0; /* checkpoints in it: else it is taken for one, and its loader says why not */
  DIR *dd = opendir(arg);
  for (struct dirent *e; dd && !steps && (e = readdir(dd));)
    steps = !strncmp(e->d_name, "step_", 5);
  if (dd)
    closedir(dd);
  if (!steps && !best) {
    snprintf(out, len, "%s", arg);
    return 0;
  }
  if ((best ? colo_ckpt_find_best : colo_ckpt_find_latest)(arg, out, len, skipped, sizeof skipped) <
      0) {
    fprintf(stderr,
            "colo-train %s: %s is not a checkpoint, nor a directory with a complete one%s%s%s%s\n",
            cmd, arg, best ? " that records a validation loss or a score" : "",
            skipped[0] ? " (unusable: " : "", skipped, skipped[0] ? ")" : "");
    return -1;
  }
  fprintf(stderr, "colo-train %s: %s\n", cmd, out);
  return 0;
}

/* eval --choices: a checkpoint's scores on a multiple-choice set */
static int eval_choices(const char *ckpt, const char *set, const char *samples, long limit, int bs,
                        int threads, const char *device, int gpu, int best, int doc, int json) {
  if (bs < 1)
    return usage_error("eval", "--batch-size must be 1 or more");
  colo_backend_cpu_set_threads(threads);
  char err[1400], dir[2100], tmp[2200];
  int on = device_flag("eval", device, gpu);
  if (on == -2)
    return 2;
  if (pick_checkpoint("eval", ckpt, best, dir, sizeof dir) < 0)
    return 1;
  FILE *sf = NULL;
  if (samples) { /* written under a temporary name, renamed once complete */
    snprintf(tmp, sizeof tmp, "%s.tmp", samples);
    if (!(sf = fopen(tmp, "w"))) {
      fprintf(stderr, "colo-train eval: %s: %s\n", tmp, strerror(errno));
      return 1;
    }
  }
  colo_choices_score_t sc;
  int rc = colo_eval_choices(dir, set, bs, on, doc, (size_t)limit, &sc, sf, err, sizeof err);
  if (sf && fclose(sf) != 0 && rc == 0)
    rc = colo_fail(err, sizeof err, COLO_EIO, "%s: %s", tmp, strerror(errno));
  if (sf && rc == 0 && rename(tmp, samples) != 0)
    rc = colo_fail(err, sizeof err, COLO_EIO, "%s: %s", samples, strerror(errno));
  if (sf && rc < 0)
    unlink(tmp);
  if (rc < 0) {
    fprintf(stderr, "colo-train eval: %s\n", err);
    return 1;
  }
  if (json) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "checkpoint", dir);
    cJSON_AddStringToObject(r, "choices", set);
    cJSON_AddNumberToObject(r, "questions", (double)sc.questions);
    cJSON_AddNumberToObject(r, "acc", sc.acc);
    cJSON_AddNumberToObject(r, "acc_norm", sc.acc_norm);
    cJSON_AddNumberToObject(r, "acc_token", sc.acc_token);
    return print_json(r);
  }
  printf("%zu questions: acc %.4f, acc_norm %.4f (per character), acc_token %.4f (per token)\n",
         sc.questions, sc.acc, sc.acc_norm, sc.acc_token);
  return 0;
}

static int cmd_eval(int argc, char **argv) {
  const char *ckpt = NULL, *data = NULL, *device = NULL, *choices = NULL, *samples = NULL;
  int batches = 20, bs = 12, threads = 0, gpu = 0, doc = COLO_EVAL_AS_TRAINED;
  long limit = 0;
  unsigned long long seed = 1337;
  static const struct option o[] = {{"checkpoint", required_argument, 0, 'c'},
                                    {"data", required_argument, 0, 'd'},
                                    {"device", required_argument, 0, 'D'},
                                    {"gpu", required_argument, 0, 'g'},
                                    {"batches", required_argument, 0, 'n'},
                                    {"batch-size", required_argument, 0, 'b'},
                                    {"seed", required_argument, 0, 's'},
                                    {"threads", required_argument, 0, 't'},
                                    {"best", no_argument, 0, 'B'},
                                    {"ema", no_argument, 0, 'E'},
                                    {"document-token", required_argument, 0, 'o'},
                                    {"choices", required_argument, 0, 'C'},
                                    {"samples", required_argument, 0, 'S'},
                                    {"limit", required_argument, 0, 'l'},
                                    {"json", no_argument, 0, 'j'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c, best = 0, json = 0;
  while ((c = getopt_long(argc, argv, "c:d:n:b:s:t:D:g:Bo:C:S:l:jh", o, NULL)) != -1) {
    switch (c) {
    case 'l': {
      char *e;
      limit = strtol(optarg, &e, 10);
      if (*e || e == optarg || limit < 0)
        return usage_error("eval", "--limit is a number of questions, 0 or more");
      break;
    }
    case 'C':
      choices = optarg;
      break;
    case 'S':
      samples = optarg;
      break;
    case 'j':
      json = 1;
      break;
    case 'o': {
      char *e;
      long v = strtol(optarg, &e, 10);
      if (*e || e == optarg || v < -1 || v > 1048575)
        return usage_error("eval", "--document-token is a token id, or -1 for none");
      doc = (int)v;
      break;
    }
    case 'c':
      ckpt = optarg;
      break;
    case 'B':
      best = 1;
      break;
    case 'E':
      colo_checkpoint_weights_ema(1);
      break;
    case 'd':
      data = optarg;
      break;
    case 'D':
      device = optarg;
      break;
    case 'g':
      gpu = atoi(optarg);
      break;
    case 'n':
      batches = atoi(optarg);
      break;
    case 'b':
      bs = atoi(optarg);
      break;
    case 's':
      seed = strtoull(optarg, NULL, 10);
      break;
    case 't':
      threads = atoi(optarg);
      break;
    case 'h':
      printf(
          "usage: colo-train eval --checkpoint DIR --data SHARD [--batches N (20; 0: every "
          "window of\n"
          "                       the shard once)] [--batch-size B (12)] [--seed S (1337)]\n"
          "                       [--device cpu|gpu (cpu)] [--gpu N (0)] [--threads N] "
          "[--best] [--ema]\n"
          "                       [--document-token N (the checkpoint's own; -1: none)] "
          "[--json]\n"
          "       colo-train eval --checkpoint DIR --choices SET [--samples FILE] [--limit N]\n"
          "                       [--batch-size B]\n"
          "                       [--device cpu|gpu] [--gpu N] [--threads N] [--best] [--ema] "
          "[--json]\n"
          "--json prints {\"checkpoint\", \"loss\" (to 9 digits), \"batches\", \"batch_size\"}.\n"
          "--choices scores a multiple-choice set (prepare --endings-field: HellaSwag's, say):\n"
          "for each question the ending of the highest log-probability after its context is\n"
          "the model's pick. It prints acc, acc_norm (the log-probability per character of\n"
          "the ending: lm-evaluation-harness's) and acc_token (per token: llm.c's); --json\n"
          "as {\"checkpoint\", \"choices\", \"questions\", \"acc\", \"acc_norm\", \"acc_token\"};\n"
          "--samples writes a JSON line a question (its label, the picks, and each ending's\n"
          "log-probability, tokens and characters); --limit N scores the first N questions\n"
          "alone (0: all). A sequence longer than the block keeps its last block_size + 1\n"
          "tokens.\n"
          "A checkpoint trained with data.document_token is evaluated with attention within\n"
          "documents, as its training evaluated; --document-token sets another token (one the\n"
          "shard holds), or -1 for whole windows.\n" CKPT_DIR_HELP);
      return 0;
    default:
      return 2;
    }
  }
  if (!ckpt || (!data == !choices))
    return usage_error("eval", "--checkpoint and one of --data and --choices are required");
  if ((samples || limit) && !choices)
    return usage_error("eval", "--samples and --limit go with --choices");
  if (choices)
    return eval_choices(ckpt, choices, samples, limit, bs, threads, device, gpu, best, doc, json);
  if (batches < 0 || bs < 1)
    return usage_error("eval", "--batches must be 0 or more and --batch-size 1 or more");
  colo_backend_cpu_set_threads(threads);
  char err[1024], dir[2100];
  float loss;
  int on = device_flag("eval", device, gpu);
  if (on == -2)
    return 2;
  if (pick_checkpoint("eval", ckpt, best, dir, sizeof dir) < 0)
    return 1;
  ckpt = dir;
  if (colo_eval_checkpoint(ckpt, data, batches, bs, seed, on, doc, &loss, err, sizeof err) < 0) {
    fprintf(stderr, "colo-train eval: %s\n", err);
    return 1;
  }
  if (json) { /* the loss to 9 digits: a float's, exactly */
    char num[32];
    snprintf(num, sizeof num, "%.9g", (double)loss);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "checkpoint", ckpt);
    cJSON_AddItemToObject(r, "loss", cJSON_CreateRaw(num));
    cJSON_AddNumberToObject(r, "batches", batches);
    cJSON_AddNumberToObject(r, "batch_size", bs);
    return print_json(r);
  }
  if (batches)
    printf("val loss %.4f (%d batches of %d)\n", (double)loss, batches, bs);
  else
    printf("val loss %.4f (every window of the shard once)\n", (double)loss);
  return 0;
}

static int cmd_sample(int argc, char **argv) {
  const char *ckpt = NULL, *prompt = "", *tokdir = NULL, *device = NULL, *chat = NULL,
             *system = NULL;
  int gpu = 0;
  char *end;
  int n = 200, top_k = 0, threads = 0, full_forward = 0;
  float temp = 1.0f, top_p = 1.0f;
  unsigned long long seed = 42;
  static const struct option o[] = {{"checkpoint", required_argument, 0, 'c'},
                                    {"tokens", required_argument, 0, 'n'},
                                    {"temperature", required_argument, 0, 'T'},
                                    {"top-k", required_argument, 0, 'k'},
                                    {"seed", required_argument, 0, 's'},
                                    {"prompt", required_argument, 0, 'p'},
                                    {"threads", required_argument, 0, 't'},
                                    {"tokenizer", required_argument, 0, 'K'},
                                    {"full-forward", no_argument, 0, 'F'},
                                    {"top-p", required_argument, 0, 'P'},
                                    {"device", required_argument, 0, 'D'},
                                    {"gpu", required_argument, 0, 'g'},
                                    {"best", no_argument, 0, 'B'},
                                    {"ema", no_argument, 0, 'E'},
                                    {"chat-template", required_argument, 0, 'C'},
                                    {"system", required_argument, 0, 'S'},
                                    {"interactive", no_argument, 0, 'i'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c, best = 0, interactive = 0;
  while ((c = getopt_long(argc, argv, "c:n:T:k:s:p:t:K:FP:D:g:BC:S:ih", o, NULL)) != -1) {
    switch (c) {
    case 'c':
      ckpt = optarg;
      break;
    case 'i':
      interactive = 1;
      break;
    case 'B':
      best = 1;
      break;
    case 'E':
      colo_checkpoint_weights_ema(1);
      break;
    case 'C':
      chat = optarg;
      break;
    case 'S':
      system = optarg;
      break;
    case 'n':
      n = atoi(optarg);
      break;
    case 'T':
      temp = strtof(optarg, &end);
      if (end == optarg || *end || !(temp >= 0.0f) || isinf(temp))
        return usage_error("sample", "--temperature must be a number of 0 or more (0: greedy)");
      break;
    case 'k':
      top_k = atoi(optarg);
      if (top_k < 0)
        return usage_error("sample", "--top-k must be 0 (all) or more");
      break;
    case 's':
      seed = strtoull(optarg, NULL, 10);
      break;
    case 'p':
      prompt = optarg;
      break;
    case 't':
      threads = atoi(optarg);
      break;
    case 'K':
      tokdir = optarg;
      break;
    case 'F':
      full_forward = 1;
      break;
    case 'D':
      device = optarg;
      break;
    case 'g':
      gpu = atoi(optarg);
      break;
    case 'P':
      top_p = strtof(optarg, &end);
      if (end == optarg || *end || !(top_p > 0.0f && top_p <= 1.0f))
        return usage_error("sample", "--top-p must be a number in (0, 1]");
      break;
    case 'h':
      printf("usage: colo-train sample --checkpoint DIR [--tokens N (200)] [--temperature T (1; 0 "
             "greedy)] [--top-k K (0: all)] [--top-p P (1: all)] [--seed S (42)]\n"
             "                         [--prompt TEXT] [--tokenizer DIR] [--threads N] "
             "[--full-forward]\n"
             "                         [--device cpu|gpu (cpu)] [--gpu N (0)] [--best] [--ema]\n"
             "                         [--chat-template T [--system TEXT] "
             "[--interactive]]\n" CKPT_DIR_HELP
             "--top-k draws from the K most likely tokens; --top-p from the fewest (most likely\n"
             "first) whose probabilities add up to P, after --top-k.\n"
             "Tokens are bytes, or with --tokenizer a byte-level BPE (as for prepare), where\n"
             "the text ends early at a document's end (<|endoftext|>, <|end_of_text|>, the\n"
             "eos_token of a tokenizer_config.json beside the tokenizer.json) or the next one's\n"
             "beginning (<|begin_of_text|>), and an empty prompt starts from the\n"
             "tokenizer's beginning of text where it has one (else a newline). Each token is one "
             "position's work against\n"
             "a cache of the keys and values before it, while the text fits the model's block;\n"
             "past it, or with --full-forward, the whole window runs again for each token.\n"
             "--chat-template (llama3, chatml, tokenizer, or a Jinja file, as for prepare): the\n"
             "prompt is a user's message (after --system's, if given), written out in the\n"
             "template as prepare --messages-field writes conversations, and what is printed\n"
             "is the assistant's answer, up to the template's end of a message (<|eot_id|>,\n"
             "<|im_end|>; under Jinja, the added token that follows an assistant's message).\n"
             "--interactive: a conversation: each line of standard input is the user's next\n"
             "message, answered in turn (the conversation so far in the prompt, its keys and\n"
             "values kept in the cache); \"/reset\" begins anew. With --chat-template.\n");
      return 0;
    default:
      return 2;
    }
  }
  if (!ckpt || n < 0)
    return usage_error("sample", "--checkpoint is required");
  if (system && !chat)
    return usage_error("sample", "--system goes with --chat-template");
  if (interactive && (!chat || !tokdir))
    return usage_error("sample", "--interactive needs --chat-template and --tokenizer");
  if (interactive && *prompt)
    return usage_error("sample", "--interactive reads its messages from standard input, not "
                                 "--prompt");
  colo_backend_cpu_set_threads(threads);
  int on = device_flag("sample", device, gpu);
  if (on == -2)
    return 2;
  char err[1024], dir[2100];
  if (pick_checkpoint("sample", ckpt, best, dir, sizeof dir) < 0)
    return 1;
  ckpt = dir;
  colo_bpe_t *bpe;
  if (open_tokenizer("sample", tokdir, &bpe) < 0)
    return 1;
  if (!chat) /* a continuation follows its prompt; a chat's answer stands alone */
    fputs(prompt, stdout);
  colo_sample_opts_t so = {n, temp, top_k, top_p, seed, bpe, full_forward, on, chat, system};
  int rc = interactive ? colo_chat_checkpoint(ckpt, &so, stdin, stdout,
                                              isatty(STDIN_FILENO) ? stderr : NULL, err, sizeof err)
                       : colo_sample_checkpoint(ckpt, prompt, &so, stdout, err, sizeof err);
  colo_bpe_free(bpe);
  if (rc < 0) {
    fprintf(stderr, "colo-train sample: %s\n", err);
    return 1;
  }
  if (!interactive)
    putchar('\n');
  return 0;
}

static int cmd_export(int argc, char **argv) {
  const char *ckpt = NULL, *out = NULL, *config = NULL, *format = NULL, *tokenizer = NULL;
  const char *type = "f16";
  static const struct option o[] = {{"checkpoint", required_argument, 0, 'c'},
                                    {"out", required_argument, 0, 'o'},
                                    {"config", required_argument, 0, 'C'},
                                    {"format", required_argument, 0, 'f'},
                                    {"tokenizer", required_argument, 0, 't'},
                                    {"type", required_argument, 0, 'T'},
                                    {"best", no_argument, 0, 'B'},
                                    {"ema", no_argument, 0, 'E'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c, best = 0;
  while ((c = getopt_long(argc, argv, "c:o:C:f:t:T:Bh", o, NULL)) != -1) {
    switch (c) {
    case 'c':
      ckpt = optarg;
      break;
    case 'C':
      config = optarg;
      break;
    case 'f':
      format = optarg;
      break;
    case 't':
      tokenizer = optarg;
      break;
    case 'T':
      type = optarg;
      break;
    case 'B':
      best = 1;
      break;
    case 'E':
      colo_checkpoint_weights_ema(1);
      break;
    case 'o':
      out = optarg;
      break;
    case 'h':
      printf(
          "usage: colo-train export --checkpoint DIR --out FILE [--format hf|gguf|peft|gguf-lora]\n"
          "                         [--best] [--ema]\n"
          "                         [--config FILE] [--tokenizer PATH] [--type "
          "f32|f16|bf16|q8_0|q4_0]\n"
          "Writes the checkpoint's parameters, whatever layout trained them, as one file of\n"
          "whole tensors. hf (the default, unless FILE ends in .gguf): a safetensors file in\n"
          "HuggingFace's layout, GPT2LMHeadModel's, or for a model.arch=llama model\n"
          "LlamaForCausalLM's (Qwen2ForCausalLM's with model.qkv_bias, Qwen3ForCausalLM's\n"
          "with model.qk_norm, MistralForCausalLM's with model.sliding_window). gguf:\n"
          "llama.cpp's file, the model and its tokenizer in one\n"
          "(architecture gpt2, llama, qwen2 with qkv_bias or qwen3 with qk_norm), for\n"
          "llama.cpp, Ollama and LM Studio. A LoRA run's checkpoint\n"
          "(train.lora_rank) is the model it adapted with the adapters merged in; peft: its\n"
          "adapters alone, as HuggingFace PEFT saves them, in directory FILE\n"
          "(adapter_model.safetensors and adapter_config.json), for PeftModel.from_pretrained\n"
          "on the model's own export; gguf-lora: them as llama.cpp's LoRA adapter file, for\n"
          "`llama-cli -m MODEL.gguf --lora FILE` on the model's own GGUF export.\n"
          "  --config FILE     hf: also write a transformers config.json for it there\n"
          "  --tokenizer PATH  gguf: the tokenizer the model's data was prepared with (a\n"
          "                    tokenizer.json, or a folder of one or of vocab.json and\n"
          "                    merges.txt); without it the model's 256 tokens are bytes\n"
          "  --type T          gguf: the matrices' and embeddings' type (default f16; q8_0:\n"
          "                    8-bit blocks of 32 with a scale each; q4_0: 4-bit blocks of 32,\n"
          "                    the embedding and head in q8_0; norms and biases are "
          "f32)\n" CKPT_DIR_HELP);
      return 0;
    default:
      return 2;
    }
  }
  if (!ckpt || !out || optind < argc)
    return usage_error("export", "--checkpoint and --out are required");
  size_t ol = strlen(out);
  int gguf = format ? !strcmp(format, "gguf") : ol > 5 && !strcmp(out + ol - 5, ".gguf");
  int peft = format && !strcmp(format, "peft"), glora = format && !strcmp(format, "gguf-lora");
  if (format && !gguf && !peft && !glora && strcmp(format, "hf"))
    return usage_error("export", "--format must be hf, gguf, peft or gguf-lora");
  if ((peft || glora) && config)
    return usage_error("export", "--config is for --format hf (PEFT's adapter_config.json is "
                                 "written with the adapters)");
  int gtype = colo_gguf_type_parse(type);
  if (gtype < 0)
    return usage_error("export", "--type must be f32, f16, bf16, q8_0 or q4_0");
  if (gguf && config)
    return usage_error("export", "--config is for --format hf (a GGUF file holds its config)");
  if (!gguf && (tokenizer || strcmp(type, "f16")))
    return usage_error("export", "--tokenizer and --type are for --format gguf");
  char err[1024], dir[2100];
  if (pick_checkpoint("export", ckpt, best, dir, sizeof dir) < 0)
    return 1;
  int rc = gguf    ? colo_export_gguf(dir, out, tokenizer, gtype, err, sizeof err)
           : peft  ? colo_export_adapters(dir, out, COLO_ADAPTERS_PEFT, err, sizeof err)
           : glora ? colo_export_adapters(dir, out, COLO_ADAPTERS_GGUF, err, sizeof err)
                   : colo_export_checkpoint(dir, out, config, err, sizeof err);
  if (rc < 0) {
    fprintf(stderr, "colo-train export: %s\n", err);
    return 1;
  }
  return 0;
}

#define MAX_AVERAGE 64

static int cmd_average(int argc, char **argv) {
  const char *ckpts[MAX_AVERAGE], *out = NULL, *config = NULL, *weights = NULL;
  int n = 0, last = 0;
  static const struct option o[] = {{"checkpoint", required_argument, 0, 'c'},
                                    {"last", required_argument, 0, 'l'},
                                    {"weights", required_argument, 0, 'w'},
                                    {"out", required_argument, 0, 'o'},
                                    {"config", required_argument, 0, 'C'},
                                    {"help", no_argument, 0, 'h'},
                                    {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "c:l:w:o:C:h", o, NULL)) != -1) {
    switch (c) {
    case 'c':
      if (n == MAX_AVERAGE)
        return usage_error("average", "at most 64 checkpoints");
      ckpts[n++] = optarg;
      break;
    case 'l': {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || v < 1 || v > MAX_AVERAGE)
        return usage_error("average", "--last must be 1 to 64");
      last = (int)v;
      break;
    }
    case 'w':
      weights = optarg;
      break;
    case 'o':
      out = optarg;
      break;
    case 'C':
      config = optarg;
      break;
    case 'h':
      printf("usage: colo-train average --checkpoint DIR [--checkpoint DIR]... --out FILE\n"
             "                          [--last N] [--weights W,W,...] [--config FILE]\n"
             "Writes the mean of the checkpoints' parameters, whatever layout trained each, as\n"
             "export --format hf writes one checkpoint's: a safetensors file in HuggingFace's\n"
             "layout, which train.init_from, eval, sample and export take (with its\n"
             "config.json beside it, a directory of them). Checkpoint averaging (fairseq's\n"
             "average_checkpoints.py; LAWA) smooths the end of a run; the mean of fine-tunings\n"
             "of one model is a model soup. All must be of one model. Each is read in turn, in\n"
             "double precision, so the memory needed is about three models' worth.\n"
             "  --checkpoint DIR  a checkpoint, a HuggingFace model's directory, or with --last\n"
             "                    a directory of checkpoints (a job's); up to 64\n"
             "  --last N          the N newest complete checkpoints of that one directory\n"
             "  --weights W,...   a weight for each, in order (> 0); default: equal\n"
             "  --config FILE     also write a transformers config.json for it there\n");
      return 0;
    default:
      return 2;
    }
  }
  if (n == 0 || !out || optind < argc)
    return usage_error("average", "--checkpoint and --out are required");
  char dirs[MAX_AVERAGE][1200];
  if (last) {
    if (n != 1)
      return usage_error("average", "--last takes one --checkpoint: a directory of checkpoints");
    uint64_t steps[MAX_AVERAGE];
    size_t have;
    if (colo_ckpt_newest(ckpts[0], (size_t)last, dirs, steps, &have) < 0 || have < (size_t)last) {
      fprintf(stderr, "colo-train average: --last %d: %s holds %zu complete checkpoint%s, not %d\n",
              last, ckpts[0], have, have == 1 ? "" : "s", last);
      return 1;
    }
    for (int i = 0; i < last; i++) /* oldest first */
      ckpts[i] = dirs[i];
    n = last;
  }
  double w[MAX_AVERAGE];
  int nw = 0;
  for (const char *p = weights; p && *p;) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || !(v > 0 && isfinite(v)) || (*end && *end != ','))
      return usage_error("average", "--weights must be numbers above 0, comma-separated");
    if (nw < MAX_AVERAGE)
      w[nw] = v;
    nw++;
    p = *end ? end + 1 : end;
  }
  if (weights && nw != n) {
    char msg[128];
    snprintf(msg, sizeof msg, "--weights gives %d weight%s for %d checkpoint%s", nw,
             nw == 1 ? "" : "s", n, n == 1 ? "" : "s");
    return usage_error("average", msg);
  }
  char err[1024];
  for (int k = 0; k < 2; k++) { /* their folders, made as needed (avg/model.safetensors) */
    const char *f = k ? config : out;
    const char *slash = f ? strrchr(f, '/') : NULL;
    char dir[2100];
    if (!slash || slash == f || (size_t)(slash - f) >= sizeof dir)
      continue;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - f), f);
    if (colo_mkdirs(dir, 0755) < 0) {
      fprintf(stderr, "colo-train average: %s: %s\n", dir, strerror(errno));
      return 1;
    }
  }
  if (colo_average_checkpoints(ckpts, weights ? w : NULL, n, out, config, err, sizeof err) < 0) {
    fprintf(stderr, "colo-train average: %s\n", err);
    return 1;
  }
  printf("colo-train average: %s: the %s of %d checkpoint%s\n", out,
         weights ? "weighted mean" : "mean", n, n == 1 ? "" : "s");
  return 0;
}

int main(int argc, char **argv) {
  main_argv = argv;
  colo_rdzv_colod_register();
  /* a line at a time even into a file: a rank's log is followed live (coloctl logs -f), and the
   * lines before a crash are the ones that matter */
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("colo-train %s\n", COLO_VERSION);
    return 0;
  }
  optind = 1;
  if (!strcmp(cmd, "prepare"))
    return cmd_prepare(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize"))
    return cmd_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "render"))
    return cmd_render(argc - 1, argv + 1);
  if (!strcmp(cmd, "inspect"))
    return cmd_inspect(argc - 1, argv + 1);
  if (!strcmp(cmd, "train"))
    return cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval"))
    return cmd_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "sample"))
    return cmd_sample(argc - 1, argv + 1);
  if (!strcmp(cmd, "export"))
    return cmd_export(argc - 1, argv + 1);
  if (!strcmp(cmd, "average"))
    return cmd_average(argc - 1, argv + 1);
  if (!strcmp(cmd, "hf-config"))
    return cmd_hf_config(argc - 1, argv + 1);
  fprintf(stderr, "colo-train: unknown command '%s'; try 'colo-train --help'\n", cmd);
  return 2;
}
