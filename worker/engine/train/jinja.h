/* Jinja, as HuggingFace's chat templates are written in it and transformers renders them
 * (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls;
 * transformers' tojson, raise_exception, strftime_now and {% generation %}).
 *
 * What is read: text, {{ }}, {% %} and {# #} with whitespace control (- and +); if/elif/else,
 * for (tuples, a filter, else, loop.*, break, continue), set (names, namespace attributes,
 * blocks), macro and its call, generation; literals, lists, dicts, attributes, subscripts and
 * slices, calls, filters, tests, arithmetic, ~, comparisons, in, and/or/not, x if c else y; the
 * filters, tests, methods and globals that chat templates use (see jinja.c). Values are JSON's
 * plus what a template makes; a number from JSON without a fraction is an integer.
 * What is not: extends, blocks, include, import, call blocks, filter blocks, autoescape. */
#ifndef COLO_JINJA_H
#define COLO_JINJA_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct colo_jinja colo_jinja_t;

/* Parses the template src (NUL-terminated). 0, or COLO_EPARSE naming the line and what is wrong;
 * COLO_ENOMEM. `name` names the template in messages. */
int colo_jinja_parse(const char *src, const char *name, colo_jinja_t **out, char *err,
                     size_t errlen);
void colo_jinja_free(colo_jinja_t *t);

/* Whether the template marks what the assistant says with {% generation %} blocks. */
int colo_jinja_has_generation(const colo_jinja_t *t);

typedef struct {
  size_t from, to; /* bytes of the output */
} colo_jinja_span_t;

/* Renders t with the variables of `vars` (a JSON object). *out (malloc'd, NUL-terminated, *len
 * bytes) is the text; *spans (malloc'd, may be NULL) the output of each {% generation %} block,
 * *nspans of them. 0, or COLO_EINVAL with the template's error (raise_exception's message, an
 * undefined value where one is needed, a type error), naming its line; COLO_ENOMEM. */
int colo_jinja_render(const colo_jinja_t *t, const cJSON *vars, char **out, size_t *len,
                      colo_jinja_span_t **spans, size_t *nspans, char *err, size_t errlen);

/* Jinja's trim, Python's str.strip(): the Unicode whitespace (str.isspace) at both ends of
 * [*s, *s + *n) left off. */
void colo_jinja_trim(const char **s, size_t *n);

#endif
