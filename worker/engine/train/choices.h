/* Multiple-choice evaluation (HellaSwag's, as llm.c and lm-evaluation-harness run it): questions
 * of a context and several endings, one of them right; the model picks the ending it finds most
 * likely after the context. A set is a multiple-choice shard (COLO_SHARD_MAGIC_CHOICES, data.h),
 * made by colo_choices_prepare from JSON lines. Scoring needs each sequence's log-probability of
 * its ending and the tokens it counted: the caller runs the model on colo_choices_batch's rows. */
#ifndef COLO_CHOICES_H
#define COLO_CHOICES_H

#include <stddef.h>

#include "bpe.h"
#include "data.h"

typedef struct {
  colo_shard_t s;
  const colo_shard_file_t *f; /* its one file */
  size_t n_seq, n_quest;      /* what is scored: colo_choices_limit may lower them */
  size_t *first; /* [n_quest + 1]: question q's sequences are first[q] .. first[q + 1] - 1 */
} colo_choices_t;

/* Maps a multiple-choice shard (one file). COLO_ENOENT when there is none, COLO_EINVAL for a
 * shard of another kind, a pattern, or one without questions, naming why. */
int colo_choices_open(const char *path, colo_choices_t *c, char *err, size_t errlen);
void colo_choices_close(colo_choices_t *c);
/* Scores the first n questions alone from now on (lm-evaluation-harness's --limit; 0 or more than
 * there are: all). */
void colo_choices_limit(colo_choices_t *c, size_t n);

/* B rows of T: row b is sequence first + b from its start (inputs its tokens, targets the next
 * tokens where they count, -1 elsewhere), padded after its end with input 0 and target -1; a
 * sequence longer than T + 1 tokens keeps its last T + 1 (lm-evaluation-harness's left
 * truncation). Rows past the last sequence are all padding. */
void colo_choices_batch(const colo_choices_t *c, size_t first, int B, int T, int *in, int *tg);

/* The fewest positions (at most T) that hold the windows of rows first .. first + B - 1 whole: a
 * batch of that width gives each row the log-probabilities of a batch of T (attention is causal,
 * and padding follows a sequence's end). */
int colo_choices_width(const colo_choices_t *c, size_t first, int B, int T);

/* the fraction of the questions whose right ending has the highest log-probability (acc), the
 * highest per character of the ending (acc_norm: lm-evaluation-harness's), the highest per token
 * (acc_token: llm.c's HellaSwag evaluation's "acc_norm"); ties go to the first */
typedef struct {
  double acc, acc_norm, acc_token;
  size_t questions;
} colo_choices_score_t;

/* Scores from each sequence's log-probability of its ending, lp[s], and its counted tokens,
 * cnt[s]; pick (NULL: not wanted) gets each question's three picks (by sum, per character, per
 * token). */
void colo_choices_score(const colo_choices_t *c, const float *lp, const float *cnt,
                        colo_choices_score_t *out, int (*pick)[3]);

/* What colo_choices_prepare reads of each JSON line, by field paths (a name, or names joined by
 * dots for a field of an object: "choices.text"):
 *   context_field: the context, a string; or context_template (NULL: the field), text with each
 *     {path} replaced by the line's string there and each \n a new line
 *     ("Question: {question}\nAnswer:");
 *   endings_field: a list of strings, or several paths joined by commas, each a string
 * ("sol1,sol2"); label_field: the right ending's number (an integer, a string of digits, or a
 * letter: "A" is 0); or with label_names_field (NULL: none), a path to a list of strings, the place
 * there of the label's string (ARC's answerKey among choices.label); sep goes between a context and
 * each ending (HellaSwag's " "). */
typedef struct {
  const char *context_field, *endings_field, *label_field, *sep;
  const char *context_template, *label_names_field;
} colo_choices_fields_t;

typedef struct {
  size_t questions, sequences, tokens;
  size_t longest; /* tokens of the longest sequence */
  int wide;       /* uint32 tokens */
} colo_choices_stats_t;

/* Tokenises a file of JSON lines of questions (blank lines skipped; a line that is not a question
 * is refused, naming it) into a multiple-choice shard at out_path (written to out_path.tmp,
 * renamed once complete): each question's K endings, each a sequence of the context's tokens
 * and then the tokens of sep + ending (encoded apart, as llm.c's HellaSwag evaluation encodes
 * them), the ending's counting. Tokens are bytes (bpe NULL) or bpe's; a context of no tokens is
 * the tokenizer's document token alone (refused without one). */
int colo_choices_prepare(const char *input, const char *out_path, const colo_bpe_t *bpe,
                         const colo_choices_fields_t *fields, colo_choices_stats_t *stats,
                         char *err, size_t errlen);

#endif
