/* A Jinja interpreter for chat templates: a lexer (whitespace control, trim_blocks,
 * lstrip_blocks), a recursive-descent parser into a tree, and a tree walker over values.
 * Everything a parse or a render allocates lives in an arena freed at its end; errors unwind
 * with longjmp, as Lua's do. The semantics are jinja2's (3.1) as transformers configures it,
 * Python's where jinja2 defers to Python (truth, equality, str(), repr(), arithmetic). */
#include "jinja.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unicode/ustring.h>

#include "../../../common/error.h"

/* ---- memory ---- */

typedef struct blk {
  struct blk *next;
  size_t used, cap, pad; /* the header is 32 bytes: data stays 16-aligned */
  char data[];
} blk_t;

typedef struct {
  blk_t *head;
  jmp_buf *oom;
} arena_t;

static void *amem(arena_t *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  blk_t *b = a->head;
  if (!b || b->used + n > b->cap) {
    size_t cap = n > 65536 ? n : 65536;
    if (!(b = malloc(sizeof *b + cap)))
      longjmp(*a->oom, COLO_ENOMEM);
    b->next = a->head, b->used = 0, b->cap = cap;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  return memset(p, 0, n);
}

static void afree(arena_t *a) {
  for (blk_t *b = a->head, *next; b; b = next)
    next = b->next, free(b);
  a->head = NULL;
}

typedef struct {
  const char *s;
  size_t n;
} str_t;

static str_t astr(arena_t *a, const char *s, size_t n) {
  char *p = amem(a, n + 1);
  if (n)
    memcpy(p, s, n);
  return (str_t){p, n};
}

static int str_is(str_t s, const char *z) {
  return s.n == strlen(z) && !memcmp(s.s, z, s.n);
}

/* ---- tokens ---- */

enum { K_TEXT, K_VBEGIN, K_VEND, K_BBEGIN, K_BEND, K_NAME, K_STR, K_INT, K_FLOAT, K_OP, K_EOF };

typedef struct {
  int k, line;
  str_t s; /* text, name, decoded string, operator */
  long long i;
  double f;
} tok_t;

/* ---- the tree ---- */

enum {
  N_BODY,
  N_TEXT,
  N_OUT,
  N_IF,
  N_FOR,
  N_SET,
  N_SETBLOCK,
  N_MACRO,
  N_BREAK,
  N_CONTINUE,
  N_GEN,
  E_LIT,
  E_NAME,
  E_ATTR,
  E_ITEM,
  E_SLICE,
  E_CALL,
  E_FILTER,
  E_TEST,
  E_BIN,
  E_CMP,
  E_CONCAT,
  E_AND,
  E_OR,
  E_NOT,
  E_NEG,
  E_COND,
  E_LIST,
  E_DICT
};

typedef struct val val_t;
typedef struct node node_t;

typedef struct {
  size_t n, cap;
  val_t *v;
  int tuple; /* a tuple: printed (a, b), not equal to a list */
} list_t;

typedef struct {
  size_t n, cap;
  str_t *k;
  val_t *v;
  int ns; /* a namespace(): its attributes may be set */
} dict_t;

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_FUNC } vk_t;

enum { F_GLOBAL, F_MACRO, F_METHOD };
typedef struct fn fn_t;

struct val {
  vk_t k;
  union {
    int b;
    long long i;
    double f;
    str_t s; /* a string; for V_UNDEF, why it is undefined */
    list_t *l;
    dict_t *d;
    fn_t *fn;
  };
};

typedef struct frame frame_t;

struct fn {
  int kind;
  str_t name;
  const node_t *macro;
  frame_t *scope; /* where a macro was defined */
  val_t self;     /* a method's object */
};

struct node {
  int kind, line, op, neg;
  str_t s, s2; /* text, name; s2: set's attribute */
  val_t lit;   /* E_LIT */
  node_t *a, *b, *c;
  node_t **kids; /* a body's statements, arguments, items (a dict's: key, value, ...) */
  size_t nk;
  str_t *names; /* for and set targets, a macro's parameters; keyword arguments' names */
  size_t nn;
  node_t **kwv; /* keyword arguments' values; a macro's defaults (NULL: none) */
  size_t nkw;
  int *ops; /* E_CMP: nk - 1 operators */
};

struct colo_jinja {
  arena_t a;
  node_t *root;
  int has_gen;
  jmp_buf jb;
};

/* operators */
enum {
  O_ADD = 1,
  O_SUB,
  O_MUL,
  O_DIV,
  O_FLOORDIV,
  O_MOD,
  O_POW,
  O_EQ,
  O_NE,
  O_LT,
  O_GT,
  O_LE,
  O_GE,
  O_IN,
  O_NOTIN
};

/* ---- the lexer ---- */

typedef struct {
  arena_t *a;
  jmp_buf *jb;
  char *err;
  size_t errlen;
  const char *name;
  tok_t *t;
  size_t nt, cap, i;
  int has_gen;
  int depth; /* of nested expressions and statements: the parser's (and the walker's) stack */
} parser_t;

__attribute__((format(printf, 3, 4), noreturn)) static void perr(parser_t *p, int line,
                                                                 const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  colo_fail(p->err, p->errlen, COLO_EPARSE, "%s:%d: %s", p->name, line, why);
  longjmp(*p->jb, COLO_EPARSE);
}

static tok_t *push_tok(parser_t *p, int k, int line) {
  if (p->nt == p->cap) {
    size_t c = p->cap ? 2 * p->cap : 256;
    tok_t *t = amem(p->a, c * sizeof *t);
    if (p->nt)
      memcpy(t, p->t, p->nt * sizeof *t);
    p->t = t, p->cap = c;
  }
  tok_t *t = &p->t[p->nt++];
  memset(t, 0, sizeof *t);
  t->k = k, t->line = line;
  return t;
}

/* Python's \s on one byte (the ASCII whitespace; a template's other spaces are kept) */
static int ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static size_t put_utf8(char *o, uint32_t c) {
  if (c < 0x80)
    return o[0] = (char)c, 1;
  if (c < 0x800)
    return o[0] = (char)(0xc0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3f)), 2;
  if (c < 0x10000)
    return o[0] = (char)(0xe0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 0x3f)),
           o[2] = (char)(0x80 | (c & 0x3f)), 3;
  return o[0] = (char)(0xf0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 0x3f)),
         o[2] = (char)(0x80 | (c >> 6 & 0x3f)), o[3] = (char)(0x80 | (c & 0x3f)), 4;
}

static int hexval(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* a string literal at s[*pos] (its quote), decoded as Python's unicode-escape does */
static str_t lex_string(parser_t *p, const char *s, size_t n, size_t *pos, int *line) {
  char q = s[*pos];
  size_t i = *pos + 1, start = i;
  while (i < n && s[i] != q) {
    if (s[i] == '\\' && i + 1 < n)
      i++;
    i++;
  }
  if (i >= n)
    perr(p, *line, "a string is not closed");
  char *o = amem(p->a, i - start + 1);
  size_t k = 0;
  for (size_t j = start; j < i; j++) {
    if (s[j] == '\n')
      (*line)++;
    if (s[j] != '\\') {
      o[k++] = s[j];
      continue;
    }
    char c = s[++j];
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
      uint32_t v = 0;
      int ok = j + (size_t)digits < i;
      for (int d = 1; ok && d <= digits; d++)
        ok = hexval(s[j + (size_t)d]) >= 0, v = v * 16 + (uint32_t)hexval(s[j + (size_t)d]);
      if (!ok || v > 0x10ffff)
        perr(p, *line, "a string's \\%c escape is cut short", c);
      k += put_utf8(o + k, v); /* at most 4 bytes for the escape's 4 to 10 */
      j += (size_t)digits;
      continue;
    }
    if (c >= '0' && c <= '7') { /* up to three octal digits */
      uint32_t v = 0;
      int d = 0;
      while (d < 3 && j < i && s[j] >= '0' && s[j] <= '7')
        v = v * 8 + (uint32_t)(s[j++] - '0'), d++;
      j--;
      k += put_utf8(o + k, v);
      continue;
    }
    const char *from = "ntr\\'\"abfv\n", *to = "\n\t\r\\'\"\a\b\f\v";
    const char *w = strchr(from, c);
    if (c == '\n') /* a backslash and newline: nothing */
      continue;
    if (w && *w)
      o[k++] = to[w - from];
    else
      o[k++] = '\\', o[k++] = c;
  }
  *pos = i + 1;
  return (str_t){o, k};
}

static const char *const OPS[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                  "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                  "]",  "{",  "}",  ",",  ".",  ":",  "|"};

/* The tokens inside a tag from s[*pos] to its end ("}}" or "%}", after an optional "-");
 * returns whether the end strips the whitespace after it. */
static int lex_tag(parser_t *p, const char *s, size_t n, size_t *pos, int *line, char close) {
  size_t i = *pos;
  int l0 = *line, depth = 0; /* open brackets: an end of the tag inside them is an operator */
  for (;;) {
    while (i < n && ws(s[i]))
      *line += s[i++] == '\n';
    if (i >= n)
      perr(p, l0, "the tag begun here is not closed");
    int strip = s[i] == '-' && i + 2 < n && s[i + 1] == close && s[i + 2] == '}';
    if (!depth && (strip || (s[i] == close && i + 1 < n && s[i + 1] == '}'))) {
      push_tok(p, close == '}' ? K_VEND : K_BEND, *line);
      *pos = i + 2 + (size_t)strip;
      return strip;
    }
    char c = s[i];
    if (c == '_' || ((c | 32) >= 'a' && (c | 32) <= 'z')) {
      size_t j = i;
      while (j < n && (s[j] == '_' || ((s[j] | 32) >= 'a' && (s[j] | 32) <= 'z') ||
                       (s[j] >= '0' && s[j] <= '9')))
        j++;
      push_tok(p, K_NAME, *line)->s = (str_t){s + i, j - i};
      i = j;
    } else if (c >= '0' && c <= '9') {
      size_t j = i;
      int fl = 0;
      while (j < n && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_'))
        j++;
      if (j + 1 < n && s[j] == '.' && s[j + 1] >= '0' && s[j + 1] <= '9') {
        fl = 1, j++;
        while (j < n && ((s[j] >= '0' && s[j] <= '9') || s[j] == '_'))
          j++;
      }
      if (j < n && (s[j] | 32) == 'e') {
        size_t e = j + 1 + (j + 1 < n && (s[j + 1] == '+' || s[j + 1] == '-'));
        if (e < n && s[e] >= '0' && s[e] <= '9') {
          fl = 1, j = e;
          while (j < n && s[j] >= '0' && s[j] <= '9')
            j++;
        }
      }
      char buf[64];
      size_t k = 0;
      for (size_t x = i; x < j && k < sizeof buf - 1; x++)
        if (s[x] != '_')
          buf[k++] = s[x];
      buf[k] = 0;
      tok_t *t = push_tok(p, fl ? K_FLOAT : K_INT, *line);
      if (fl)
        t->f = strtod(buf, NULL);
      else
        t->i = strtoll(buf, NULL, 10);
      i = j;
    } else if (c == '\'' || c == '"') {
      int l0 = *line;
      str_t v = lex_string(p, s, n, &i, line);
      push_tok(p, K_STR, l0)->s = v;
    } else {
      size_t k = 0;
      while (k < sizeof OPS / sizeof OPS[0] &&
             !(i + strlen(OPS[k]) <= n && !memcmp(s + i, OPS[k], strlen(OPS[k]))))
        k++;
      if (k == sizeof OPS / sizeof OPS[0])
        perr(p, *line, "unexpected character '%c'", c);
      push_tok(p, K_OP, *line)->s = (str_t){OPS[k], strlen(OPS[k])};
      i += strlen(OPS[k]);
      depth += c == '(' || c == '[' || c == '{';
      depth -= depth > 0 && (c == ')' || c == ']' || c == '}');
    }
  }
}

static void lex(parser_t *p, const char *src) {
  size_t n0 = strlen(src), n = 0;
  char *s = amem(p->a, n0 + 1);
  for (size_t i = 0; i < n0; i++) /* newlines normalized to \n */
    if (src[i] == '\r')
      s[n++] = '\n', i += i + 1 < n0 && src[i + 1] == '\n';
    else
      s[n++] = src[i];
  if (n && s[n - 1] == '\n') /* keep_trailing_newline=False */
    n--;
  size_t pos = 0;
  int line = 1, strip_next = 0, line_start = 1;
  while (pos < n) {
    size_t at = pos;
    while (at + 1 < n &&
           !(s[at] == '{' && (s[at + 1] == '{' || s[at + 1] == '%' || s[at + 1] == '#')))
      at++;
    if (at + 1 >= n)
      at = n;
    size_t t0 = pos, t1 = at;
    if (strip_next) { /* the tag before ended with "-" */
      while (t0 < t1 && ws(s[t0]))
        t0++;
      line_start = t0 > pos && s[t0 - 1] == '\n';
      strip_next = 0;
    }
    if (at < n) {
      char k = s[at + 1], m = at + 2 < n ? s[at + 2] : 0;
      if (m == '-') {
        while (t1 > t0 && ws(s[t1 - 1]))
          t1--;
      } else if (k != '{' && m != '+') { /* lstrip_blocks */
        size_t l = t1;
        while (l > t0 && s[l - 1] != '\n')
          l--;
        int only = 1;
        for (size_t x = l; x < t1; x++)
          only &= s[x] == ' ' || s[x] == '\t' || s[x] == '\f' || s[x] == '\v';
        if ((l > t0 || line_start) && only)
          t1 = l;
      }
    }
    int tl = line;
    for (size_t x = pos; x < at; x++)
      line += s[x] == '\n';
    if (t1 > t0)
      push_tok(p, K_TEXT, tl)->s = (str_t){s + t0, t1 - t0};
    if (at >= n)
      break;
    char k = s[at + 1];
    size_t i = at + 2 + (at + 2 < n && (s[at + 2] == '-' || s[at + 2] == '+'));
    int strip;
    if (k == '#') {
      size_t e = i;
      while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}'))
        line += s[e++] == '\n';
      if (e + 1 >= n)
        perr(p, line, "a comment is not closed");
      strip = e > i && s[e - 1] == '-';
      pos = e + 2;
    } else {
      push_tok(p, k == '{' ? K_VBEGIN : K_BBEGIN, line);
      strip = lex_tag(p, s, n, &i, &line, k == '{' ? '}' : '%');
      pos = i;
    }
    if (strip)
      strip_next = 1;
    else if (k != '{' && pos < n && s[pos] == '\n') /* trim_blocks */
      pos++, line++;
    line_start = pos > 0 && s[pos - 1] == '\n';
  }
  push_tok(p, K_EOF, line);
}

/* ---- the parser ---- */

static tok_t *cur(parser_t *p) {
  return &p->t[p->i];
}

static int is_op(parser_t *p, const char *op) {
  return cur(p)->k == K_OP && str_is(cur(p)->s, op);
}

static int is_name(parser_t *p, const char *name) {
  return cur(p)->k == K_NAME && str_is(cur(p)->s, name);
}

static int skip_op(parser_t *p, const char *op) {
  return is_op(p, op) ? (p->i++, 1) : 0;
}

static int skip_name(parser_t *p, const char *name) {
  return is_name(p, name) ? (p->i++, 1) : 0;
}

static const char *tok_what(tok_t *t, char *buf, size_t n) {
  switch (t->k) {
  case K_TEXT:
    return "text";
  case K_VBEGIN:
    return "'{{'";
  case K_VEND:
    return "the end of the tag";
  case K_BBEGIN:
    return "'{%'";
  case K_BEND:
    return "the end of the tag";
  case K_EOF:
    return "the end of the template";
  case K_STR:
    return "a string";
  case K_INT:
  case K_FLOAT:
    return "a number";
  default:
    snprintf(buf, n, "'%.*s'", (int)(t->s.n < 40 ? t->s.n : 40), t->s.s);
    return buf;
  }
}

static void expect_op(parser_t *p, const char *op) {
  char b[64];
  if (!skip_op(p, op))
    perr(p, cur(p)->line, "expected '%s', found %s", op, tok_what(cur(p), b, sizeof b));
}

static void expect_end(parser_t *p) {
  char b[64];
  if (cur(p)->k != K_BEND)
    perr(p, cur(p)->line, "expected the end of the tag, found %s", tok_what(cur(p), b, sizeof b));
  p->i++;
}

static str_t expect_name(parser_t *p) {
  char b[64];
  if (cur(p)->k != K_NAME)
    perr(p, cur(p)->line, "expected a name, found %s", tok_what(cur(p), b, sizeof b));
  return p->t[p->i++].s;
}

static node_t *mk(parser_t *p, int kind, int line) {
  node_t *x = amem(p->a, sizeof *x);
  x->kind = kind, x->line = line;
  return x;
}

/* a growing array of node pointers */
typedef struct {
  node_t **v;
  size_t n, cap;
} nodes_t;

static void nodes_push(parser_t *p, nodes_t *v, node_t *x) {
  if (v->n == v->cap) {
    size_t c = v->cap ? 2 * v->cap : 8;
    node_t **g = amem(p->a, c * sizeof *g);
    if (v->n)
      memcpy(g, v->v, v->n * sizeof *g);
    v->v = g, v->cap = c;
  }
  v->v[v->n++] = x;
}

typedef struct {
  str_t *v;
  size_t n, cap;
} names_t;

static void names_push(parser_t *p, names_t *v, str_t s) {
  if (v->n == v->cap) {
    size_t c = v->cap ? 2 * v->cap : 4;
    str_t *g = amem(p->a, c * sizeof *g);
    if (v->n)
      memcpy(g, v->v, v->n * sizeof *g);
    v->v = g, v->cap = c;
  }
  v->v[v->n++] = s;
}

#define MAX_DEPTH 200

static node_t *parse_expr(parser_t *p);
static node_t *parse_or(parser_t *p);
static node_t *parse_unary(parser_t *p, int with_filter);
static node_t *parse_primary(parser_t *p);

/* arguments of a call after its "(": positional, then keyword (name=value) */
static void parse_args(parser_t *p, node_t *x) {
  nodes_t args = {0}, kwv = {0};
  names_t kw = {0};
  while (!skip_op(p, ")")) {
    if (args.n + kwv.n)
      expect_op(p, ",");
    if (skip_op(p, ")"))
      break;
    if (cur(p)->k == K_NAME && p->t[p->i + 1].k == K_OP && str_is(p->t[p->i + 1].s, "=")) {
      names_push(p, &kw, cur(p)->s);
      p->i += 2;
      nodes_push(p, &kwv, parse_expr(p));
    } else {
      if (kwv.n)
        perr(p, cur(p)->line, "a positional argument follows a keyword argument");
      nodes_push(p, &args, parse_expr(p));
    }
  }
  x->kids = args.v, x->nk = args.n;
  x->names = kw.v, x->nn = kw.n;
  x->kwv = kwv.v, x->nkw = kwv.n;
}

static node_t *parse_subscript(parser_t *p, node_t *obj) {
  int line = cur(p)->line;
  if (skip_op(p, ".")) {
    if (cur(p)->k == K_INT) {
      node_t *x = mk(p, E_ITEM, line), *k = mk(p, E_LIT, line);
      k->lit = (val_t){.k = V_INT, .i = p->t[p->i++].i};
      x->a = obj, x->b = k;
      return x;
    }
    node_t *x = mk(p, E_ATTR, line);
    x->a = obj, x->s = expect_name(p);
    return x;
  }
  expect_op(p, "[");
  node_t *part[3] = {NULL, NULL, NULL};
  int colons = 0;
  for (;;) {
    if (is_op(p, "]"))
      break;
    if (skip_op(p, ":")) {
      if (++colons > 2)
        perr(p, line, "a slice has at most three parts");
      continue;
    }
    part[colons] = parse_expr(p);
  }
  expect_op(p, "]");
  if (!colons) {
    if (!part[0])
      perr(p, line, "an empty subscript");
    node_t *x = mk(p, E_ITEM, line);
    x->a = obj, x->b = part[0];
    return x;
  }
  node_t *x = mk(p, E_SLICE, line);
  x->a = obj;
  x->kids = amem(p->a, 3 * sizeof *x->kids), x->nk = 3;
  for (int k = 0; k < 3; k++)
    x->kids[k] = part[k];
  return x;
}

static node_t *parse_postfix(parser_t *p, node_t *x) {
  for (;;) {
    if (is_op(p, ".") || is_op(p, "[")) {
      x = parse_subscript(p, x);
    } else if (is_op(p, "(")) {
      node_t *c = mk(p, E_CALL, cur(p)->line);
      p->i++;
      c->a = x;
      parse_args(p, c);
      x = c;
    } else {
      return x;
    }
  }
}

static str_t dotted_name(parser_t *p) {
  str_t s = expect_name(p);
  while (is_op(p, ".") && p->t[p->i + 1].k == K_NAME) { /* a dotted filter or test name */
    p->i++;
    str_t t = expect_name(p);
    s.n = (size_t)(t.s + t.n - s.s);
  }
  return s;
}

static node_t *parse_filter_expr(parser_t *p, node_t *x) {
  for (;;) {
    int line = cur(p)->line;
    if (skip_op(p, "|")) {
      node_t *f = mk(p, E_FILTER, line);
      f->a = x, f->s = dotted_name(p);
      if (skip_op(p, "("))
        parse_args(p, f);
      x = f;
    } else if (skip_name(p, "is")) {
      node_t *t = mk(p, E_TEST, line);
      t->a = x;
      t->neg = skip_name(p, "not");
      t->s = dotted_name(p);
      tok_t *c = cur(p);
      if (skip_op(p, "(")) {
        parse_args(p, t);
      } else if ((c->k == K_NAME || c->k == K_STR || c->k == K_INT || c->k == K_FLOAT ||
                  is_op(p, "(") || is_op(p, "[") || is_op(p, "{")) &&
                 !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
        if (is_name(p, "is"))
          perr(p, line, "tests cannot be chained with 'is'");
        t->kids = amem(p->a, sizeof *t->kids), t->nk = 1;
        t->kids[0] = parse_postfix(p, parse_primary(p));
      }
      x = t;
    } else if (is_op(p, "(")) {
      node_t *c = mk(p, E_CALL, line);
      p->i++;
      c->a = x;
      parse_args(p, c);
      x = c;
    } else {
      return x;
    }
  }
}

/* a parenthesized expression or tuple, after its "(" */
static node_t *parse_paren(parser_t *p, int line) {
  if (skip_op(p, ")")) {
    node_t *t = mk(p, E_LIST, line);
    t->neg = 1;
    return t;
  }
  node_t *x = parse_expr(p);
  if (!is_op(p, ",")) {
    expect_op(p, ")");
    return x;
  }
  nodes_t items = {0};
  nodes_push(p, &items, x);
  while (skip_op(p, ",") && !is_op(p, ")"))
    nodes_push(p, &items, parse_expr(p));
  expect_op(p, ")");
  node_t *t = mk(p, E_LIST, line);
  t->kids = items.v, t->nk = items.n, t->neg = 1; /* a tuple */
  return t;
}

static node_t *parse_primary(parser_t *p) {
  tok_t *t = cur(p);
  int line = t->line;
  char b[64];
  node_t *x;
  switch (t->k) {
  case K_NAME:
    p->i++;
    x = mk(p, E_LIT, line);
    if (str_is(t->s, "true") || str_is(t->s, "True"))
      x->lit = (val_t){.k = V_BOOL, .b = 1};
    else if (str_is(t->s, "false") || str_is(t->s, "False"))
      x->lit = (val_t){.k = V_BOOL, .b = 0};
    else if (str_is(t->s, "none") || str_is(t->s, "None"))
      x->lit = (val_t){.k = V_NONE};
    else
      x->kind = E_NAME, x->s = t->s;
    return x;
  case K_STR: { /* adjacent strings are one */
    size_t n = 0, j = p->i;
    while (p->t[j].k == K_STR)
      n += p->t[j++].s.n;
    char *s = amem(p->a, n + 1);
    n = 0;
    while (cur(p)->k == K_STR) {
      if (cur(p)->s.n)
        memcpy(s + n, cur(p)->s.s, cur(p)->s.n);
      n += cur(p)->s.n;
      p->i++;
    }
    x = mk(p, E_LIT, line);
    x->lit = (val_t){.k = V_STR, .s = {s, n}};
    return x;
  }
  case K_INT:
    p->i++;
    x = mk(p, E_LIT, line);
    x->lit = (val_t){.k = V_INT, .i = t->i};
    return x;
  case K_FLOAT:
    p->i++;
    x = mk(p, E_LIT, line);
    x->lit = (val_t){.k = V_FLOAT, .f = t->f};
    return x;
  case K_OP:
    if (skip_op(p, "("))
      return parse_paren(p, line);
    if (skip_op(p, "[")) {
      nodes_t items = {0};
      while (!skip_op(p, "]")) {
        if (items.n)
          expect_op(p, ",");
        if (skip_op(p, "]"))
          break;
        nodes_push(p, &items, parse_expr(p));
      }
      x = mk(p, E_LIST, line);
      x->kids = items.v, x->nk = items.n;
      return x;
    }
    if (skip_op(p, "{")) {
      nodes_t items = {0};
      while (!skip_op(p, "}")) {
        if (items.n)
          expect_op(p, ",");
        if (skip_op(p, "}"))
          break;
        nodes_push(p, &items, parse_expr(p));
        expect_op(p, ":");
        nodes_push(p, &items, parse_expr(p));
      }
      x = mk(p, E_DICT, line);
      x->kids = items.v, x->nk = items.n;
      return x;
    }
    break;
  default:
    break;
  }
  perr(p, line, "unexpected %s", tok_what(t, b, sizeof b));
}

static node_t *parse_unary(parser_t *p, int with_filter) {
  int line = cur(p)->line;
  node_t *x;
  if (++p->depth > MAX_DEPTH)
    perr(p, line, "expressions nested more than %d deep", MAX_DEPTH);
  if (skip_op(p, "-")) {
    x = mk(p, E_NEG, line);
    x->a = parse_unary(p, 0);
  } else if (skip_op(p, "+")) {
    x = parse_unary(p, 0);
  } else {
    x = parse_primary(p);
  }
  x = parse_postfix(p, x);
  x = with_filter ? parse_filter_expr(p, x) : x;
  p->depth--;
  return x;
}

static node_t *bin(parser_t *p, int op, node_t *a, node_t *b, int line) {
  node_t *x = mk(p, E_BIN, line);
  x->op = op, x->a = a, x->b = b;
  return x;
}

static node_t *parse_pow(parser_t *p) {
  node_t *x = parse_unary(p, 1);
  while (is_op(p, "**")) {
    int line = cur(p)->line;
    p->i++;
    x = bin(p, O_POW, x, parse_unary(p, 1), line);
  }
  return x;
}

static node_t *parse_math2(parser_t *p) {
  node_t *x = parse_pow(p);
  for (;;) {
    int line = cur(p)->line, op = is_op(p, "*")    ? O_MUL
                                  : is_op(p, "/")  ? O_DIV
                                  : is_op(p, "//") ? O_FLOORDIV
                                  : is_op(p, "%")  ? O_MOD
                                                   : 0;
    if (!op)
      return x;
    p->i++;
    x = bin(p, op, x, parse_pow(p), line);
  }
}

static node_t *parse_concat(parser_t *p) {
  node_t *x = parse_math2(p);
  if (!is_op(p, "~"))
    return x;
  nodes_t parts = {0};
  nodes_push(p, &parts, x);
  int line = cur(p)->line;
  while (skip_op(p, "~"))
    nodes_push(p, &parts, parse_math2(p));
  node_t *c = mk(p, E_CONCAT, line);
  c->kids = parts.v, c->nk = parts.n;
  return c;
}

static node_t *parse_math1(parser_t *p) {
  node_t *x = parse_concat(p);
  for (;;) {
    int line = cur(p)->line, op = is_op(p, "+") ? O_ADD : is_op(p, "-") ? O_SUB : 0;
    if (!op)
      return x;
    p->i++;
    x = bin(p, op, x, parse_concat(p), line);
  }
}

static node_t *parse_compare(parser_t *p) {
  int line = cur(p)->line;
  node_t *x = parse_math1(p);
  nodes_t kids = {0};
  int ops[64], n = 0;
  for (;;) {
    int op = is_op(p, "==")     ? O_EQ
             : is_op(p, "!=")   ? O_NE
             : is_op(p, "<")    ? O_LT
             : is_op(p, ">")    ? O_GT
             : is_op(p, "<=")   ? O_LE
             : is_op(p, ">=")   ? O_GE
             : is_name(p, "in") ? O_IN
             : (is_name(p, "not") && p->t[p->i + 1].k == K_NAME && str_is(p->t[p->i + 1].s, "in"))
                 ? O_NOTIN
                 : 0;
    if (!op)
      break;
    p->i += op == O_NOTIN ? 2 : 1;
    if (n == 63)
      perr(p, line, "too many comparisons in a row");
    if (!n)
      nodes_push(p, &kids, x);
    ops[n++] = op;
    nodes_push(p, &kids, parse_math1(p));
  }
  if (!n)
    return x;
  node_t *c = mk(p, E_CMP, line);
  c->kids = kids.v, c->nk = kids.n;
  c->ops = amem(p->a, (size_t)n * sizeof *c->ops);
  memcpy(c->ops, ops, (size_t)n * sizeof *ops);
  return c;
}

static node_t *parse_not(parser_t *p) {
  int line = cur(p)->line;
  if (skip_name(p, "not")) {
    node_t *x = mk(p, E_NOT, line);
    if (++p->depth > MAX_DEPTH)
      perr(p, line, "expressions nested more than %d deep", MAX_DEPTH);
    x->a = parse_not(p);
    p->depth--;
    return x;
  }
  return parse_compare(p);
}

/* a or b or ... (or 1), or a and b and ... (or 0) */
static node_t *parse_logic(parser_t *p, int or) {
  node_t *x = or ? parse_logic(p, 0) : parse_not(p);
  while (is_name(p, or ? "or" : "and")) {
    node_t *y = mk(p, or ? E_OR : E_AND, cur(p)->line);
    p->i++;
    y->a = x, y->b = or ? parse_logic(p, 0) : parse_not(p);
    x = y;
  }
  return x;
}

static node_t *parse_or(parser_t *p) {
  return parse_logic(p, 1);
}

static node_t *parse_expr(parser_t *p) {
  node_t *x = parse_or(p);
  while (is_name(p, "if")) {
    node_t *c = mk(p, E_COND, cur(p)->line);
    p->i++;
    c->a = x;
    c->b = parse_or(p);
    c->c = skip_name(p, "else") ? parse_expr(p) : NULL;
    x = c;
  }
  return x;
}

/* Statements up to a block tag named in stops (NULL-terminated; p->i is left at its name, and
 * *stopped says which), or the end of the template when stops is empty. */
static node_t *parse_body(parser_t *p, const char *const *stops, const char **stopped);

static void assign_targets(parser_t *p, names_t *t) {
  names_push(p, t, expect_name(p));
  while (skip_op(p, ","))
    names_push(p, t, expect_name(p));
}

static node_t *parse_if(parser_t *p, int line) {
  static const char *const stops[] = {"elif", "else", "endif", NULL};
  static const char *const end[] = {"endif", NULL};
  node_t *x = mk(p, N_IF, line);
  x->a = parse_expr(p);
  expect_end(p);
  const char *stopped;
  x->b = parse_body(p, stops, &stopped);
  int l2 = cur(p)->line;
  p->i++; /* the stop's name */
  if (!strcmp(stopped, "elif")) {
    if (++p->depth > MAX_DEPTH)
      perr(p, l2, "more than %d elif in a row", MAX_DEPTH);
    x->c = parse_if(p, l2);
    p->depth--;
    return x;
  }
  expect_end(p);
  if (!strcmp(stopped, "else")) {
    x->c = parse_body(p, end, &stopped);
    p->i++;
    expect_end(p);
  }
  return x;
}

static node_t *parse_stmt(parser_t *p) {
  int line = cur(p)->line;
  str_t w = expect_name(p);
  const char *stopped;
  if (str_is(w, "if"))
    return parse_if(p, line);
  if (str_is(w, "for")) {
    static const char *const stops[] = {"else", "endfor", NULL};
    static const char *const end[] = {"endfor", NULL};
    node_t *x = mk(p, N_FOR, line);
    names_t t = {0};
    int paren = skip_op(p, "(");
    assign_targets(p, &t);
    if (paren)
      expect_op(p, ")");
    x->names = t.v, x->nn = t.n;
    if (!skip_name(p, "in"))
      perr(p, line, "expected 'in' in a for loop");
    x->a = parse_or(p);
    if (skip_name(p, "if"))
      x->c = parse_expr(p);
    skip_name(p, "recursive");
    expect_end(p);
    node_t *body = parse_body(p, stops, &stopped);
    x->kids = body->kids, x->nk = body->nk;
    p->i++;
    expect_end(p);
    if (!strcmp(stopped, "else")) {
      x->b = parse_body(p, end, &stopped);
      p->i++;
      expect_end(p);
    }
    return x;
  }
  if (str_is(w, "set")) {
    static const char *const end[] = {"endset", NULL};
    names_t t = {0};
    str_t first = expect_name(p), attr = {0};
    names_push(p, &t, first);
    if (skip_op(p, "."))
      attr = expect_name(p);
    else
      while (skip_op(p, ","))
        names_push(p, &t, expect_name(p));
    if (skip_op(p, "=")) {
      node_t *x = mk(p, N_SET, line);
      x->names = t.v, x->nn = t.n, x->s2 = attr;
      x->a = parse_expr(p);
      if (is_op(p, ",")) { /* set a, b = x, y: a tuple */
        nodes_t items = {0};
        nodes_push(p, &items, x->a);
        while (skip_op(p, ","))
          nodes_push(p, &items, parse_expr(p));
        x->a = mk(p, E_LIST, line);
        x->a->kids = items.v, x->a->nk = items.n, x->a->neg = 1;
      }
      expect_end(p);
      return x;
    }
    if (attr.n || t.n > 1)
      perr(p, line, "a set block takes one name");
    node_t *x = mk(p, N_SETBLOCK, line);
    x->names = t.v, x->nn = 1;
    expect_end(p);
    x->a = parse_body(p, end, &stopped);
    p->i++;
    expect_end(p);
    return x;
  }
  if (str_is(w, "macro")) {
    static const char *const end[] = {"endmacro", NULL};
    node_t *x = mk(p, N_MACRO, line);
    x->s = expect_name(p);
    expect_op(p, "(");
    names_t params = {0};
    nodes_t defs = {0};
    while (!skip_op(p, ")")) {
      if (params.n)
        expect_op(p, ",");
      if (skip_op(p, ")"))
        break;
      names_push(p, &params, expect_name(p));
      nodes_push(p, &defs, skip_op(p, "=") ? parse_expr(p) : NULL);
    }
    x->names = params.v, x->nn = params.n, x->kwv = defs.v, x->nkw = defs.n;
    expect_end(p);
    x->a = parse_body(p, end, &stopped);
    p->i++;
    if (cur(p)->k == K_NAME) /* {% endmacro name %} */
      p->i++;
    expect_end(p);
    return x;
  }
  if (str_is(w, "break") || str_is(w, "continue")) {
    expect_end(p);
    return mk(p, str_is(w, "break") ? N_BREAK : N_CONTINUE, line);
  }
  if (str_is(w, "generation")) {
    static const char *const end[] = {"endgeneration", NULL};
    node_t *x = mk(p, N_GEN, line);
    expect_end(p);
    x->a = parse_body(p, end, &stopped);
    p->i++;
    expect_end(p);
    p->has_gen = 1;
    return x;
  }
  perr(p, line,
       "{%% %.*s %%} is not read (colo's Jinja has if, for, set, macro, break, "
       "continue and generation)",
       (int)(w.n < 40 ? w.n : 40), w.s);
}

static node_t *parse_body(parser_t *p, const char *const *stops, const char **stopped) {
  nodes_t kids = {0};
  node_t *body = mk(p, N_BODY, cur(p)->line);
  if (++p->depth > MAX_DEPTH)
    perr(p, cur(p)->line, "statements nested more than %d deep", MAX_DEPTH);
  for (;;) {
    tok_t *t = cur(p);
    if (t->k == K_EOF) {
      if (stops && stops[0])
        perr(p, t->line, "the template ends before {%% %s %%}",
             stops[1] ? stops[1 + (stops[2] != NULL)] : stops[0]);
      break;
    }
    if (t->k == K_TEXT) {
      node_t *x = mk(p, N_TEXT, t->line);
      x->s = t->s;
      nodes_push(p, &kids, x);
      p->i++;
    } else if (t->k == K_VBEGIN) {
      node_t *x = mk(p, N_OUT, t->line);
      p->i++;
      x->a = parse_expr(p);
      char b[64];
      if (cur(p)->k != K_VEND)
        perr(p, cur(p)->line, "expected the end of the expression, found %s",
             tok_what(cur(p), b, sizeof b));
      p->i++;
      nodes_push(p, &kids, x);
    } else if (t->k == K_BBEGIN) {
      p->i++;
      if (cur(p)->k == K_NAME)
        for (size_t k = 0; stops && stops[k]; k++)
          if (str_is(cur(p)->s, stops[k])) {
            *stopped = stops[k];
            body->kids = kids.v, body->nk = kids.n;
            p->depth--;
            return body;
          }
      static const char *const enders[] = {"endif", "endfor", "endset",        "endmacro",
                                           "elif",  "else",   "endgeneration", NULL};
      for (size_t k = 0; cur(p)->k == K_NAME && enders[k]; k++)
        if (str_is(cur(p)->s, enders[k]))
          perr(p, cur(p)->line, "{%% %s %%} without its opening tag", enders[k]);
      nodes_push(p, &kids, parse_stmt(p));
    } else {
      char b[64];
      perr(p, t->line, "unexpected %s", tok_what(t, b, sizeof b));
    }
  }
  body->kids = kids.v, body->nk = kids.n;
  p->depth--;
  return body;
}

int colo_jinja_parse(const char *src, const char *name, colo_jinja_t **out, char *err,
                     size_t errlen) {
  *out = NULL;
  colo_jinja_t *t = calloc(1, sizeof *t);
  if (!t)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  t->a.oom = &t->jb;
  parser_t p = {&t->a, &t->jb, err, errlen, name ? name : "template", NULL, 0, 0, 0, 0, 0};
  int rc = setjmp(t->jb);
  if (rc) {
    if (rc == COLO_ENOMEM)
      colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    colo_jinja_free(t);
    return rc;
  }
  lex(&p, src);
  t->root = parse_body(&p, NULL, NULL);
  t->has_gen = p.has_gen;
  *out = t;
  return 0;
}

void colo_jinja_free(colo_jinja_t *t) {
  if (!t)
    return;
  afree(&t->a);
  free(t);
}

int colo_jinja_has_generation(const colo_jinja_t *t) {
  return t->has_gen;
}

/* ---- values ---- */

struct frame {
  frame_t *up;
  dict_t vars;
};

typedef struct {
  arena_t a;
  jmp_buf jb;
  char *err;
  size_t errlen;
  char *out;
  size_t n, cap;
  int capture; /* rendering into a set block or a macro's text */
  frame_t *f, *root;
  int ctl; /* 1: break, 2: continue */
  int depth;
  long steps; /* statements run and items made: a template that would run away is stopped */
  int nest;   /* eval and exec calls open */
  colo_jinja_span_t *spans;
  size_t nspans, spcap;
} r_t;

/* a render's bounds: a template that would run away (nested ranges) is stopped, saying so */
#define MAX_STEPS 20000000L
#define MAX_OUT   ((size_t)256 << 20)

__attribute__((format(printf, 3, 4), noreturn)) static void rerr(r_t *r, int line, const char *fmt,
                                                                 ...) {
  char why[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  colo_fail(r->err, r->errlen, COLO_EINVAL, "line %d: %s", line, why);
  longjmp(r->jb, COLO_EINVAL);
}

static const val_t UNDEF = {.k = V_UNDEF};

static val_t undef(r_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static val_t undef(r_t *r, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  n = n < 0 ? 0 : n >= (int)sizeof why ? (int)sizeof why - 1 : n;
  return (val_t){.k = V_UNDEF, .s = astr(&r->a, why, (size_t)n)};
}

static val_t vstr(str_t s) {
  return (val_t){.k = V_STR, .s = s};
}

static val_t vint(long long i) {
  return (val_t){.k = V_INT, .i = i};
}

static val_t vbool(int b) {
  return (val_t){.k = V_BOOL, .b = !!b};
}

static val_t vfloat(double f) {
  return (val_t){.k = V_FLOAT, .f = f};
}

static list_t *new_list(r_t *r, size_t cap) {
  list_t *l = amem(&r->a, sizeof *l);
  l->cap = cap ? cap : 4;
  l->v = amem(&r->a, l->cap * sizeof *l->v);
  return l;
}

static void list_push(r_t *r, list_t *l, val_t v) {
  if (++r->steps > MAX_STEPS)
    rerr(r, 0, "the template ran more than %ld steps", MAX_STEPS);
  if (l->n == l->cap) {
    val_t *g = amem(&r->a, 2 * l->cap * sizeof *g);
    memcpy(g, l->v, l->n * sizeof *g);
    l->v = g, l->cap *= 2;
  }
  l->v[l->n++] = v;
}

static val_t vlist(list_t *l) {
  return (val_t){.k = V_LIST, .l = l};
}

static dict_t *new_dict(r_t *r) {
  return amem(&r->a, sizeof(dict_t));
}

static val_t *dict_find(const dict_t *d, str_t k) {
  for (size_t i = 0; i < d->n; i++)
    if (d->k[i].n == k.n && !memcmp(d->k[i].s, k.s, k.n))
      return &d->v[i];
  return NULL;
}

static void dict_set(r_t *r, dict_t *d, str_t k, val_t v) {
  val_t *x = dict_find(d, k);
  if (x) {
    *x = v;
    return;
  }
  if (d->n == d->cap) {
    size_t c = d->cap ? 2 * d->cap : 8;
    str_t *kk = amem(&r->a, c * sizeof *kk);
    val_t *vv = amem(&r->a, c * sizeof *vv);
    if (d->n)
      memcpy(kk, d->k, d->n * sizeof *kk), memcpy(vv, d->v, d->n * sizeof *vv);
    d->k = kk, d->v = vv, d->cap = c;
  }
  d->k[d->n] = k, d->v[d->n++] = v;
}

static val_t vdict(dict_t *d) {
  return (val_t){.k = V_DICT, .d = d};
}

static val_t from_json(r_t *r, const cJSON *j) {
  if (cJSON_IsString(j))
    return vstr(astr(&r->a, j->valuestring, strlen(j->valuestring)));
  if (cJSON_IsBool(j))
    return vbool(cJSON_IsTrue(j));
  if (cJSON_IsNumber(j)) {
    double x = j->valuedouble;
    return x == floor(x) && fabs(x) < 9007199254740992.0 ? vint((long long)x) : vfloat(x);
  }
  if (cJSON_IsArray(j)) {
    list_t *l = new_list(r, (size_t)cJSON_GetArraySize(j));
    const cJSON *x;
    cJSON_ArrayForEach(x, j) list_push(r, l, from_json(r, x));
    return vlist(l);
  }
  if (cJSON_IsObject(j)) {
    dict_t *d = new_dict(r);
    const cJSON *x;
    cJSON_ArrayForEach(x, j)
        dict_set(r, d, astr(&r->a, x->string, strlen(x->string)), from_json(r, x));
    return vdict(d);
  }
  return (val_t){.k = V_NONE};
}

static const char *type_name(val_t v) {
  static const char *const names[] = {"Undefined", "NoneType", "bool", "int",     "float",
                                      "str",       "list",     "dict", "function"};
  return names[v.k];
}

/* ---- a growing byte buffer in the arena ---- */

typedef struct {
  char *s;
  size_t n, cap;
} buf_t;

static void bput(r_t *r, buf_t *b, const char *s, size_t n) {
  if (b->n + n > MAX_OUT)
    rerr(r, 0, "a string of the template passed %zu MiB", MAX_OUT >> 20);
  if (b->n + n + 1 > b->cap) {
    size_t c = b->cap ? 2 * b->cap : 64;
    while (c < b->n + n + 1)
      c *= 2;
    char *g = amem(&r->a, c);
    if (b->n)
      memcpy(g, b->s, b->n);
    b->s = g, b->cap = c;
  }
  if (n)
    memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void bputs(r_t *r, buf_t *b, const char *s) {
  bput(r, b, s, strlen(s));
}

static str_t bstr(buf_t *b) {
  return (str_t){b->s ? b->s : "", b->n};
}

/* Python's repr() of a float */
static void float_repr(double x, char *o, size_t on) {
  if (isnan(x)) {
    snprintf(o, on, "nan");
    return;
  }
  if (isinf(x)) {
    snprintf(o, on, x < 0 ? "-inf" : "inf");
    return;
  }
  char e[40];
  int prec = 1;
  for (; prec <= 17; prec++) { /* the shortest that reads back */
    snprintf(e, sizeof e, "%.*e", prec - 1, x);
    if (strtod(e, NULL) == x)
      break;
  }
  char digits[24];
  size_t nd = 0;
  const char *s = e + (e[0] == '-');
  for (; *s && *s != 'e'; s++)
    if (*s >= '0' && *s <= '9')
      digits[nd++] = *s;
  int exp = atoi(s + 1);
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  digits[nd] = 0;
  char *w = o;
  size_t left = on;
#define OUT(...)                                                                                   \
  do {                                                                                             \
    int k_ = snprintf(w, left, __VA_ARGS__);                                                       \
    k_ = k_ < 0 ? 0 : (size_t)k_ >= left ? (int)left - 1 : k_;                                     \
    w += k_, left -= (size_t)k_;                                                                   \
  } while (0)
  if (x < 0 || (x == 0 && signbit(x)))
    OUT("-");
  if (exp < -4 || exp >= 16) {
    OUT("%c", digits[0]);
    if (nd > 1)
      OUT(".%s", digits + 1);
    OUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  } else if (exp < 0) {
    OUT("0.");
    for (int i = -1; i > exp; i--)
      OUT("0");
    OUT("%s", digits);
  } else {
    for (int i = 0; i <= exp; i++)
      OUT("%c", i < (int)nd ? digits[i] : '0');
    OUT(".");
    if ((int)nd > exp + 1)
      OUT("%s", digits + exp + 1);
    else
      OUT("0");
  }
#undef OUT
}

static void to_buf(r_t *r, buf_t *b, val_t v, int repr);

static void str_repr(r_t *r, buf_t *b, str_t s) {
  int sq = memchr(s.s, '\'', s.n) != NULL, dq = memchr(s.s, '"', s.n) != NULL;
  char q = sq && !dq ? '"' : '\'';
  bput(r, b, &q, 1);
  for (size_t i = 0; i < s.n; i++) {
    unsigned char c = (unsigned char)s.s[i];
    char esc[8];
    if (c == '\\' || c == (unsigned char)q)
      esc[0] = '\\', esc[1] = (char)c, bput(r, b, esc, 2);
    else if (c == '\n')
      bputs(r, b, "\\n");
    else if (c == '\r')
      bputs(r, b, "\\r");
    else if (c == '\t')
      bputs(r, b, "\\t");
    else if (c < 0x20 || c == 0x7f)
      snprintf(esc, sizeof esc, "\\x%02x", c), bputs(r, b, esc);
    else
      bput(r, b, (const char *)&c, 1);
  }
  bput(r, b, &q, 1);
}

/* str(v), or repr(v) with repr set */
static void to_buf(r_t *r, buf_t *b, val_t v, int repr) {
  char num[64];
  switch (v.k) {
  case V_UNDEF:
    return;
  case V_NONE:
    bputs(r, b, "None");
    return;
  case V_BOOL:
    bputs(r, b, v.b ? "True" : "False");
    return;
  case V_INT:
    snprintf(num, sizeof num, "%lld", v.i);
    bputs(r, b, num);
    return;
  case V_FLOAT:
    float_repr(v.f, num, sizeof num);
    bputs(r, b, num);
    return;
  case V_STR:
    if (repr)
      str_repr(r, b, v.s);
    else
      bput(r, b, v.s.s, v.s.n);
    return;
  case V_LIST:
    bputs(r, b, v.l->tuple ? "(" : "[");
    for (size_t i = 0; i < v.l->n; i++) {
      if (i)
        bputs(r, b, ", ");
      to_buf(r, b, v.l->v[i], 1);
    }
    bputs(r, b, v.l->tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
    return;
  case V_DICT:
    if (v.d->ns) {
      bputs(r, b, "<Namespace>");
      return;
    }
    bputs(r, b, "{");
    for (size_t i = 0; i < v.d->n; i++) {
      if (i)
        bputs(r, b, ", ");
      str_repr(r, b, v.d->k[i]);
      bputs(r, b, ": ");
      to_buf(r, b, v.d->v[i], 1);
    }
    bputs(r, b, "}");
    return;
  case V_FUNC:
    bputs(r, b, "<function>");
    return;
  }
}

static str_t to_str(r_t *r, val_t v) {
  if (v.k == V_STR)
    return v.s;
  buf_t b = {0};
  to_buf(r, &b, v, 0);
  return bstr(&b);
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=...) */
static void json_buf(r_t *r, buf_t *b, val_t v, int indent, int depth, int sort, int line) {
  char num[64];
  switch (v.k) {
  case V_NONE:
    bputs(r, b, "null");
    return;
  case V_BOOL:
    bputs(r, b, v.b ? "true" : "false");
    return;
  case V_INT:
    snprintf(num, sizeof num, "%lld", v.i);
    bputs(r, b, num);
    return;
  case V_FLOAT:
    if (isnan(v.f))
      bputs(r, b, "NaN");
    else if (isinf(v.f))
      bputs(r, b, v.f < 0 ? "-Infinity" : "Infinity");
    else
      float_repr(v.f, num, sizeof num), bputs(r, b, num);
    return;
  case V_STR:
    bputs(r, b, "\"");
    for (size_t i = 0; i < v.s.n; i++) {
      unsigned char c = (unsigned char)v.s.s[i];
      const char *e = c == '"'    ? "\\\""
                      : c == '\\' ? "\\\\"
                      : c == '\n' ? "\\n"
                      : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t"
                      : c == '\b' ? "\\b"
                      : c == '\f' ? "\\f"
                                  : NULL;
      if (e)
        bputs(r, b, e);
      else if (c < 0x20)
        snprintf(num, sizeof num, "\\u%04x", c), bputs(r, b, num);
      else
        bput(r, b, (const char *)&c, 1);
    }
    bputs(r, b, "\"");
    return;
  case V_LIST:
  case V_DICT: {
    int dict = v.k == V_DICT;
    size_t n = dict ? v.d->n : v.l->n;
    bputs(r, b, dict ? "{" : "[");
    if (!n) {
      bputs(r, b, dict ? "}" : "]");
      return;
    }
    size_t *order = amem(&r->a, n * sizeof *order);
    for (size_t i = 0; i < n; i++)
      order[i] = i;
    if (dict && sort) /* insertion sort of the keys, bytewise (code point order) */
      for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
          str_t x = v.d->k[order[j - 1]], y = v.d->k[order[j]];
          size_t m = x.n < y.n ? x.n : y.n;
          int c = memcmp(x.s, y.s, m);
          if (c < 0 || (c == 0 && x.n <= y.n))
            break;
          size_t t = order[j];
          order[j] = order[j - 1], order[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++) {
      if (i)
        bputs(r, b, indent >= 0 ? "," : ", ");
      if (indent >= 0) {
        bputs(r, b, "\n");
        for (int s = 0; s < indent * (depth + 1); s++)
          bputs(r, b, " ");
      }
      if (dict) {
        json_buf(r, b, vstr(v.d->k[order[i]]), indent, depth + 1, sort, line);
        bputs(r, b, ": ");
      }
      json_buf(r, b, dict ? v.d->v[order[i]] : v.l->v[i], indent, depth + 1, sort, line);
    }
    if (indent >= 0) {
      bputs(r, b, "\n");
      for (int s = 0; s < indent * depth; s++)
        bputs(r, b, " ");
    }
    bputs(r, b, dict ? "}" : "]");
    return;
  }
  default:
    rerr(r, line, "tojson: Object of type %s is not JSON serializable", type_name(v));
  }
}

static int truthy(val_t v) {
  switch (v.k) {
  case V_UNDEF:
  case V_NONE:
    return 0;
  case V_BOOL:
    return v.b;
  case V_INT:
    return v.i != 0;
  case V_FLOAT:
    return v.f != 0;
  case V_STR:
    return v.s.n != 0;
  case V_LIST:
    return v.l->n != 0;
  case V_DICT:
    return v.d->ns || v.d->n != 0;
  default:
    return 1;
  }
}

static int is_num(val_t v) {
  return v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL;
}

static double num(val_t v) {
  return v.k == V_FLOAT ? v.f : v.k == V_INT ? (double)v.i : (double)v.b;
}

static int equal(val_t a, val_t b) {
  if (is_num(a) && is_num(b)) {
    if (a.k != V_FLOAT && b.k != V_FLOAT)
      return (a.k == V_INT ? a.i : a.b) == (b.k == V_INT ? b.i : b.b);
    return num(a) == num(b);
  }
  if (a.k != b.k)
    return 0;
  switch (a.k) {
  case V_UNDEF:
  case V_NONE:
    return 1;
  case V_STR:
    return a.s.n == b.s.n && !memcmp(a.s.s, b.s.s, a.s.n);
  case V_LIST:
    if (a.l->n != b.l->n || a.l->tuple != b.l->tuple)
      return 0;
    for (size_t i = 0; i < a.l->n; i++)
      if (!equal(a.l->v[i], b.l->v[i]))
        return 0;
    return 1;
  case V_DICT:
    if (a.d == b.d)
      return 1;
    if (a.d->n != b.d->n || a.d->ns || b.d->ns)
      return 0;
    for (size_t i = 0; i < a.d->n; i++) {
      val_t *x = dict_find(b.d, a.d->k[i]);
      if (!x || !equal(a.d->v[i], *x))
        return 0;
    }
    return 1;
  default:
    return a.fn == b.fn;
  }
}

/* ---- UTF-8 ---- */

static size_t cp_count(str_t s) {
  size_t n = 0;
  for (size_t i = 0; i < s.n; i++)
    n += ((unsigned char)s.s[i] & 0xc0) != 0x80;
  return n;
}

/* the byte offset of code point k (k <= count) */
static size_t cp_offset(str_t s, size_t k) {
  size_t i = 0;
  while (i < s.n && k) {
    i++;
    while (i < s.n && ((unsigned char)s.s[i] & 0xc0) == 0x80)
      i++;
    k--;
  }
  return i;
}

static uint32_t cp_at(str_t s, size_t i, size_t *len) {
  const unsigned char *u = (const unsigned char *)s.s + i;
  size_t k = u[0] < 0x80 ? 1 : u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 1;
  if (i + k > s.n)
    k = 1;
  if (k == 1 && u[0] >= 0x80) { /* a byte that begins no character: U+FFFD, never a space */
    *len = 1;
    return 0xfffd;
  }
  uint32_t c = k == 1 ? u[0] : (uint32_t)(u[0] & (0x3f >> (k - 1)));
  for (size_t j = 1; j < k; j++)
    c = c << 6 | (u[j] & 0x3f);
  *len = k;
  return c;
}

/* Python's str.isspace() */
static int py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

static int in_chars(uint32_t c, const str_t *chars) {
  if (!chars)
    return py_space(c);
  for (size_t i = 0; i < chars->n;) {
    size_t len;
    if (cp_at(*chars, i, &len) == c)
      return 1;
    i += len;
  }
  return 0;
}

/* str.strip / lstrip / rstrip (which: 3, 1, 2) of chars (NULL: whitespace) */
static str_t strip(str_t s, const str_t *chars, int which) {
  size_t len;
  if (which & 1)
    while (s.n && in_chars(cp_at(s, 0, &len), chars))
      s.s += len, s.n -= len;
  while ((which & 2) && s.n) {
    size_t i = s.n - 1;
    while (i > 0 && ((unsigned char)s.s[i] & 0xc0) == 0x80)
      i--;
    if (!in_chars(cp_at(s, i, &len), chars))
      break;
    s.n = i;
  }
  return s;
}

void colo_jinja_trim(const char **s, size_t *n) {
  str_t t = strip((str_t){*s, *n}, NULL, 3);
  *s = t.s, *n = t.n;
}

/* upper or lower case, as ICU's full mapping gives (Python's str.upper and lower) */
static str_t case_map(r_t *r, str_t s, int upper, int line) {
  UErrorCode st = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(NULL, 0, &n16, s.s, (int32_t)s.n, &st);
  st = U_ZERO_ERROR;
  UChar *a = amem(&r->a, ((size_t)n16 + 1) * sizeof *a);
  u_strFromUTF8(a, n16 + 1, NULL, s.s, (int32_t)s.n, &st);
  if (U_FAILURE(st))
    rerr(r, line, "a string that is not UTF-8");
  int32_t cap = 3 * n16 + 1, m;
  UChar *b = amem(&r->a, (size_t)cap * sizeof *b);
  m = upper ? u_strToUpper(b, cap, a, n16, "", &st) : u_strToLower(b, cap, a, n16, "", &st);
  int32_t n8 = 0;
  UErrorCode st2 = U_ZERO_ERROR;
  u_strToUTF8(NULL, 0, &n8, b, m, &st2);
  char *o = amem(&r->a, (size_t)n8 + 1);
  st2 = U_ZERO_ERROR;
  u_strToUTF8(o, n8 + 1, NULL, b, m, &st2);
  if (U_FAILURE(st) || U_FAILURE(st2))
    rerr(r, line, "a case mapping failed");
  return (str_t){o, (size_t)n8};
}

static str_t cat(r_t *r, str_t a, str_t b) {
  char *o = amem(&r->a, a.n + b.n + 1);
  if (a.n)
    memcpy(o, a.s, a.n);
  if (b.n)
    memcpy(o + a.n, b.s, b.n);
  return (str_t){o, a.n + b.n};
}

static int str_find(str_t h, str_t nd, size_t from) {
  if (nd.n == 0)
    return (int)from;
  for (size_t i = from; i + nd.n <= h.n; i++)
    if (!memcmp(h.s + i, nd.s, nd.n))
      return (int)i;
  return -1;
}

static str_t replace(r_t *r, str_t s, str_t old, str_t new, long long count) {
  buf_t b = {0};
  size_t i = 0;
  if (!old.n) { /* Python inserts new around every character */
    size_t len;
    while (count != 0 && i <= s.n) {
      bput(r, &b, new.s, new.n);
      count--;
      if (i == s.n) {
        i++;
        break;
      }
      cp_at(s, i, &len);
      bput(r, &b, s.s + i, len);
      i += len;
    }
    if (i < s.n)
      bput(r, &b, s.s + i, s.n - i);
    return bstr(&b);
  }
  for (int at; count != 0 && (at = str_find(s, old, i)) >= 0; count--) {
    bput(r, &b, s.s + i, (size_t)at - i);
    bput(r, &b, new.s, new.n);
    i = (size_t)at + old.n;
  }
  bput(r, &b, s.s + i, s.n - i);
  return bstr(&b);
}

/* ---- evaluation ---- */

static val_t eval(r_t *r, const node_t *x);
static void exec_body(r_t *r, const node_t *body);

static val_t lookup(r_t *r, str_t name) {
  for (frame_t *f = r->f; f; f = f->up) {
    val_t *v = dict_find(&f->vars, name);
    if (v)
      return *v;
  }
  return undef(r, "'%.*s' is undefined", (int)name.n, name.s);
}

static void need_defined(r_t *r, val_t v, int line) {
  if (v.k == V_UNDEF)
    rerr(r, line, "%.*s", (int)v.s.n, v.s.s);
}

static val_t method(r_t *r, val_t self, str_t name) {
  fn_t *f = amem(&r->a, sizeof *f);
  f->kind = F_METHOD, f->name = name, f->self = self;
  return (val_t){.k = V_FUNC, .fn = f};
}

static int is_method(val_t v, str_t name) {
  static const char *const str_m[] = {"strip",    "lstrip",  "rstrip",  "split", "startswith",
                                      "endswith", "upper",   "lower",   "title", "capitalize",
                                      "replace",  "find",    "count",   "join",  "splitlines",
                                      "isdigit",  "isspace", "isalpha", NULL};
  static const char *const dict_m[] = {"items", "keys", "values", "get", NULL};
  const char *const *m = v.k == V_STR ? str_m : v.k == V_DICT && !v.d->ns ? dict_m : NULL;
  for (size_t i = 0; m && m[i]; i++)
    if (str_is(name, m[i]))
      return 1;
  return 0;
}

static val_t get_attr(r_t *r, val_t obj, str_t name, int line) {
  need_defined(r, obj, line);
  if (obj.k == V_DICT) {
    if (is_method(obj, name))
      return method(r, obj, name);
    val_t *v = dict_find(obj.d, name);
    return v ? *v : undef(r, "'dict object' has no attribute '%.*s'", (int)name.n, name.s);
  }
  if (is_method(obj, name))
    return method(r, obj, name);
  return undef(r, "'%s object' has no attribute '%.*s'", type_name(obj), (int)name.n, name.s);
}

static val_t get_item(r_t *r, val_t obj, val_t key, int line) {
  need_defined(r, obj, line);
  if ((obj.k == V_LIST || obj.k == V_STR) && (key.k == V_INT || key.k == V_BOOL)) {
    long long i = key.k == V_INT ? key.i : key.b;
    size_t n = obj.k == V_LIST ? obj.l->n : cp_count(obj.s);
    if (i < 0)
      i += (long long)n;
    if (i < 0 || (size_t)i >= n)
      return undef(r, "'%s object' has no element %lld", type_name(obj),
                   key.k == V_INT ? key.i : key.b);
    if (obj.k == V_LIST)
      return obj.l->v[i];
    size_t at = cp_offset(obj.s, (size_t)i), len;
    cp_at(obj.s, at, &len);
    return vstr((str_t){obj.s.s + at, len});
  }
  if (obj.k == V_DICT && key.k == V_STR) {
    val_t *v = dict_find(obj.d, key.s);
    if (v)
      return *v;
    if (is_method(obj, key.s))
      return method(r, obj, key.s);
    return undef(r, "'dict object' has no attribute '%.*s'", (int)key.s.n, key.s.s);
  }
  if (key.k == V_STR && is_method(obj, key.s))
    return method(r, obj, key.s);
  return undef(r, "'%s object' has no element", type_name(obj));
}

/* Python's slice indices of a sequence of n for start, stop, step (NULL: none) */
static void slice_indices(r_t *r, const val_t *v, long long n, long long *start, long long *stop,
                          long long *step, int line) {
  for (int k = 0; k < 3; k++)
    if (v[k].k != V_UNDEF && v[k].k != V_NONE && v[k].k != V_INT && v[k].k != V_BOOL)
      rerr(r, line, "slice indices must be integers or None");
  *step = v[2].k == V_INT ? v[2].i : 1;
  if (*step == 0)
    rerr(r, line, "slice step cannot be zero");
  long long lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
  for (int k = 0; k < 2; k++) {
    long long *o = k ? stop : start;
    if (v[k].k != V_INT) {
      *o = (*step < 0) == (k == 0) ? hi : lo;
      continue;
    }
    long long x = v[k].i;
    if (x < 0)
      x += n, x = x < lo ? lo : x;
    else
      x = x > hi ? hi : x;
    *o = x;
  }
}

static val_t slice(r_t *r, val_t obj, const val_t *parts, int line) {
  need_defined(r, obj, line);
  if (obj.k != V_LIST && obj.k != V_STR)
    rerr(r, line, "'%s' object is not subscriptable", type_name(obj));
  long long n = obj.k == V_LIST ? (long long)obj.l->n : (long long)cp_count(obj.s);
  long long a, b, st;
  slice_indices(r, parts, n, &a, &b, &st, line);
  if (obj.k == V_LIST) {
    list_t *l = new_list(r, 0);
    for (long long i = a; st > 0 ? i < b : i > b; i += st)
      list_push(r, l, obj.l->v[i]);
    return vlist(l);
  }
  buf_t o = {0};
  bput(r, &o, "", 0);
  for (long long i = a; st > 0 ? i < b : i > b; i += st) {
    size_t at = cp_offset(obj.s, (size_t)i), len;
    cp_at(obj.s, at, &len);
    bput(r, &o, obj.s.s + at, len);
  }
  return vstr(bstr(&o));
}

/* the items a for loop or a filter goes through */
static list_t *iterate(r_t *r, val_t v, int line) {
  list_t *l = new_list(r, 0);
  switch (v.k) {
  case V_UNDEF:
    return l;
  case V_LIST:
    return v.l;
  case V_DICT:
    for (size_t i = 0; i < v.d->n; i++)
      list_push(r, l, vstr(v.d->k[i]));
    return l;
  case V_STR:
    for (size_t i = 0, len; i < v.s.n; i += len) {
      cp_at(v.s, i, &len);
      list_push(r, l, vstr((str_t){v.s.s + i, len}));
    }
    return l;
  default:
    rerr(r, line, "'%s' object is not iterable", type_name(v));
  }
}

/* Python's printf-style str % args: %s, %r, %d, %i, %f (with a precision), %%; a tuple's items
 * are the arguments, anything else is one */
static str_t percent(r_t *r, str_t f, val_t args, int line) {
  list_t one = {1, 1, &args, 0};
  const list_t *a = args.k == V_LIST && args.l->tuple ? args.l : &one;
  size_t k = 0;
  buf_t b = {0};
  bput(r, &b, "", 0);
  for (size_t i = 0; i < f.n; i++) {
    if (f.s[i] != '%') {
      bput(r, &b, f.s + i, 1);
      continue;
    }
    int prec = -1;
    if (++i < f.n && f.s[i] == '.') {
      prec = 0;
      while (++i < f.n && f.s[i] >= '0' && f.s[i] <= '9')
        prec = prec * 10 + (f.s[i] - '0');
    }
    char c = i < f.n ? f.s[i] : 0;
    if (c == '%') {
      bputs(r, &b, "%");
      continue;
    }
    if (!strchr("srdif", c) || !c)
      rerr(r, line, "str %% args: colo's Jinja reads %%s, %%r, %%d, %%i, %%f and %%%%");
    if (k >= a->n)
      rerr(r, line, "not enough arguments for format string");
    val_t v = a->v[k++];
    char nb[64];
    if (c == 's' || c == 'r') {
      to_buf(r, &b, v, c == 'r');
    } else if (!is_num(v)) {
      rerr(r, line, "%%%c format: a number is required, not %s", c, type_name(v));
    } else if (c == 'f') {
      snprintf(nb, sizeof nb, "%.*f", prec < 0 ? 6 : prec > 30 ? 30 : prec, num(v));
      bputs(r, &b, nb);
    } else {
      snprintf(nb, sizeof nb, "%lld",
               v.k == V_FLOAT ? (long long)v.f
               : v.k == V_INT ? v.i
                              : (long long)v.b);
      bputs(r, &b, nb);
    }
  }
  if (k < a->n)
    rerr(r, line, "not all arguments converted during string formatting");
  return bstr(&b);
}

static val_t arith(r_t *r, int op, val_t a, val_t b, int line) {
  need_defined(r, a, line);
  need_defined(r, b, line);
  static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
  if (is_num(a) && is_num(b)) {
    int ints = a.k != V_FLOAT && b.k != V_FLOAT;
    long long x = a.k == V_INT ? a.i : a.b, y = b.k == V_INT ? b.i : b.b;
    double fx = num(a), fy = num(b);
    switch (op) {
    case O_ADD:
      return ints ? vint(x + y) : vfloat(fx + fy);
    case O_SUB:
      return ints ? vint(x - y) : vfloat(fx - fy);
    case O_MUL:
      return ints ? vint(x * y) : vfloat(fx * fy);
    case O_DIV:
      if (fy == 0)
        rerr(r, line, "division by zero");
      return vfloat(fx / fy);
    case O_FLOORDIV:
    case O_MOD:
      if (fy == 0)
        rerr(r, line, "division by zero");
      if (ints) {
        long long q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0)))
          q--, m += y;
        return vint(op == O_FLOORDIV ? q : m);
      } else {
        double m = fmod(fx, fy);
        if (m != 0 && ((m < 0) != (fy < 0)))
          m += fy;
        return vfloat(op == O_FLOORDIV ? floor(fx / fy) : m);
      }
    case O_POW:
      if (ints && y >= 0) {
        long long p = 1;
        for (long long k = 0; k < y; k++)
          p *= x;
        return vint(p);
      }
      return vfloat(pow(fx, fy));
    }
  }
  if (op == O_ADD && a.k == V_STR && b.k == V_STR)
    return vstr(cat(r, a.s, b.s));
  if (op == O_MOD && a.k == V_STR)
    return vstr(percent(r, a.s, b, line));
  if (op == O_ADD && a.k == V_LIST && b.k == V_LIST) {
    list_t *l = new_list(r, a.l->n + b.l->n);
    for (size_t i = 0; i < a.l->n; i++)
      list_push(r, l, a.l->v[i]);
    for (size_t i = 0; i < b.l->n; i++)
      list_push(r, l, b.l->v[i]);
    return vlist(l);
  }
  if (op == O_MUL && ((a.k == V_STR || a.k == V_LIST) && (b.k == V_INT || b.k == V_BOOL))) {
    long long k = b.k == V_INT ? b.i : b.b;
    if (a.k == V_STR) {
      buf_t o = {0};
      bput(r, &o, "", 0);
      for (long long i = 0; i < k; i++)
        bput(r, &o, a.s.s, a.s.n);
      return vstr(bstr(&o));
    }
    list_t *l = new_list(r, 0);
    for (long long i = 0; i < k; i++)
      for (size_t j = 0; j < a.l->n; j++)
        list_push(r, l, a.l->v[j]);
    return vlist(l);
  }
  if (op == O_MUL && (b.k == V_STR || b.k == V_LIST) && (a.k == V_INT || a.k == V_BOOL))
    return arith(r, op, b, a, line);
  rerr(r, line, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], type_name(a),
       type_name(b));
}

static int contains(r_t *r, val_t hay, val_t x, int line) {
  need_defined(r, hay, line);
  if (hay.k == V_STR) {
    if (x.k != V_STR)
      rerr(r, line, "'in <string>' requires string as left operand, not %s", type_name(x));
    return str_find(hay.s, x.s, 0) >= 0;
  }
  if (hay.k == V_LIST) {
    for (size_t i = 0; i < hay.l->n; i++)
      if (equal(hay.l->v[i], x))
        return 1;
    return 0;
  }
  if (hay.k == V_DICT)
    return x.k == V_STR && dict_find(hay.d, x.s) != NULL;
  rerr(r, line, "argument of type '%s' is not iterable", type_name(hay));
}

static int order(r_t *r, val_t a, val_t b, int line) { /* <0, 0, >0 */
  if (is_num(a) && is_num(b))
    return num(a) < num(b) ? -1 : num(a) > num(b);
  if (a.k == V_STR && b.k == V_STR) {
    size_t m = a.s.n < b.s.n ? a.s.n : b.s.n;
    int c = memcmp(a.s.s, b.s.s, m);
    return c ? c : (a.s.n > b.s.n) - (a.s.n < b.s.n);
  }
  if (a.k == V_LIST && b.k == V_LIST) {
    for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
      if (!equal(a.l->v[i], b.l->v[i]))
        return order(r, a.l->v[i], b.l->v[i], line);
    return (a.l->n > b.l->n) - (a.l->n < b.l->n);
  }
  rerr(r, line, "'<' not supported between instances of '%s' and '%s'", type_name(a), type_name(b));
}

static int compare(r_t *r, int op, val_t a, val_t b, int line) {
  switch (op) {
  case O_EQ:
    return equal(a, b);
  case O_NE:
    return !equal(a, b);
  case O_IN:
    return contains(r, b, a, line);
  case O_NOTIN:
    return !contains(r, b, a, line);
  case O_LT:
    return order(r, a, b, line) < 0;
  case O_GT:
    return order(r, a, b, line) > 0;
  case O_LE:
    return order(r, a, b, line) <= 0;
  default:
    return order(r, a, b, line) >= 0;
  }
}

/* call arguments, evaluated */
typedef struct {
  val_t *pos;
  size_t npos;
  str_t *kw;
  val_t *kwv;
  size_t nkw;
  int line;
} args_t;

static args_t eval_args(r_t *r, const node_t *x, size_t skip) {
  args_t a = {0};
  a.line = x->line;
  a.npos = x->nk - skip;
  a.pos = amem(&r->a, (a.npos + 1) * sizeof *a.pos);
  for (size_t i = 0; i < a.npos; i++)
    a.pos[i] = eval(r, x->kids[skip + i]);
  a.nkw = x->nkw;
  a.kw = x->names;
  a.kwv = amem(&r->a, (a.nkw + 1) * sizeof *a.kwv);
  for (size_t i = 0; i < a.nkw; i++)
    a.kwv[i] = eval(r, x->kwv[i]);
  return a;
}

/* argument i (or keyword `name`), or def */
static val_t arg(const args_t *a, size_t i, const char *name, val_t def) {
  if (i < a->npos)
    return a->pos[i];
  for (size_t k = 0; name && k < a->nkw; k++)
    if (str_is(a->kw[k], name))
      return a->kwv[k];
  return def;
}

static long long int_arg(r_t *r, const args_t *a, size_t i, const char *name, long long def) {
  val_t v = arg(a, i, name, vint(def));
  if (v.k == V_BOOL)
    return v.b;
  if (v.k != V_INT)
    rerr(r, a->line, "%s must be an integer, not %s", name, type_name(v));
  return v.i;
}

static str_t str_arg(r_t *r, const args_t *a, size_t i, const char *name) {
  val_t v = arg(a, i, name, UNDEF);
  if (v.k != V_STR)
    rerr(r, a->line, "%s must be a string, not %s", name, type_name(v));
  return v.s;
}

static int run_test(r_t *r, str_t name, val_t v, const args_t *a);
static val_t run_filter(r_t *r, str_t name, val_t v, const args_t *a);

static val_t call_method(r_t *r, fn_t *f, const args_t *a) {
  val_t self = f->self;
  str_t m = f->name;
  int line = a->line;
  if (self.k == V_DICT) {
    if (str_is(m, "get")) {
      val_t k = arg(a, 0, "key", UNDEF), *v = k.k == V_STR ? dict_find(self.d, k.s) : NULL;
      return v ? *v : arg(a, 1, "default", (val_t){.k = V_NONE});
    }
    list_t *l = new_list(r, self.d->n);
    for (size_t i = 0; i < self.d->n; i++) {
      if (str_is(m, "keys")) {
        list_push(r, l, vstr(self.d->k[i]));
      } else if (str_is(m, "values")) {
        list_push(r, l, self.d->v[i]);
      } else {
        list_t *pair = new_list(r, 2);
        pair->tuple = 1;
        list_push(r, pair, vstr(self.d->k[i]));
        list_push(r, pair, self.d->v[i]);
        list_push(r, l, vlist(pair));
      }
    }
    return vlist(l);
  }
  str_t s = self.s;
  if (str_is(m, "strip") || str_is(m, "lstrip") || str_is(m, "rstrip")) {
    val_t c = arg(a, 0, "chars", (val_t){.k = V_NONE});
    return vstr(strip(s, c.k == V_STR ? &c.s : NULL, m.s[0] == 'l' ? 1 : m.s[0] == 'r' ? 2 : 3));
  }
  if (str_is(m, "upper") || str_is(m, "lower"))
    return vstr(case_map(r, s, m.s[0] == 'u', line));
  if (str_is(m, "startswith") || str_is(m, "endswith")) {
    val_t p = arg(a, 0, "prefix", UNDEF);
    list_t one = {1, 1, &p}, *opts = p.k == V_LIST ? p.l : &one;
    for (size_t i = 0; i < opts->n; i++) {
      val_t o = opts->v[i];
      if (o.k != V_STR)
        rerr(r, line, "%.*s takes strings", (int)m.n, m.s);
      if (o.s.n <= s.n && !memcmp(m.s[0] == 's' ? s.s : s.s + s.n - o.s.n, o.s.s, o.s.n))
        return vbool(1);
    }
    return vbool(0);
  }
  if (str_is(m, "split")) {
    val_t sep = arg(a, 0, "sep", (val_t){.k = V_NONE});
    long long max = int_arg(r, a, 1, "maxsplit", -1);
    list_t *l = new_list(r, 0);
    if (sep.k == V_STR) {
      if (!sep.s.n)
        rerr(r, line, "empty separator");
      size_t i = 0;
      for (int at; max != 0 && (at = str_find(s, sep.s, i)) >= 0; max--) {
        list_push(r, l, vstr((str_t){s.s + i, (size_t)at - i}));
        i = (size_t)at + sep.s.n;
      }
      list_push(r, l, vstr((str_t){s.s + i, s.n - i}));
      return vlist(l);
    }
    size_t i = 0, len;
    for (;;) { /* runs of non-whitespace */
      while (i < s.n && py_space(cp_at(s, i, &len)))
        i += len;
      if (i >= s.n)
        break;
      if (max == 0) {
        list_push(r, l, vstr(strip((str_t){s.s + i, s.n - i}, NULL, 2)));
        break;
      }
      size_t j = i;
      while (j < s.n && !py_space(cp_at(s, j, &len)))
        j += len;
      list_push(r, l, vstr((str_t){s.s + i, j - i}));
      i = j, max--;
    }
    return vlist(l);
  }
  if (str_is(m, "splitlines")) {
    list_t *l = new_list(r, 0);
    size_t i = 0;
    while (i < s.n) {
      size_t j = i;
      while (j < s.n && s.s[j] != '\n')
        j++;
      list_push(r, l, vstr((str_t){s.s + i, j - i}));
      i = j + 1;
    }
    return vlist(l);
  }
  if (str_is(m, "replace"))
    return vstr(replace(r, s, str_arg(r, a, 0, "old"), str_arg(r, a, 1, "new"),
                        int_arg(r, a, 2, "count", -1)));
  if (str_is(m, "find")) {
    int at = str_find(s, str_arg(r, a, 0, "sub"), 0);
    return vint(at < 0 ? -1 : (long long)cp_count((str_t){s.s, (size_t)at}));
  }
  if (str_is(m, "count")) {
    str_t sub = str_arg(r, a, 0, "sub");
    long long k = 0;
    if (!sub.n)
      return vint((long long)cp_count(s) + 1);
    for (int at = 0; (at = str_find(s, sub, (size_t)at)) >= 0; at += (int)sub.n)
      k++;
    return vint(k);
  }
  if (str_is(m, "join")) {
    list_t *l = iterate(r, arg(a, 0, "iterable", UNDEF), line);
    buf_t o = {0};
    bput(r, &o, "", 0);
    for (size_t i = 0; i < l->n; i++) {
      if (l->v[i].k != V_STR)
        rerr(r, line, "join: sequence item %zu: expected str instance, %s found", i,
             type_name(l->v[i]));
      if (i)
        bput(r, &o, s.s, s.n);
      bput(r, &o, l->v[i].s.s, l->v[i].s.n);
    }
    return vstr(bstr(&o));
  }
  if (str_is(m, "isdigit") || str_is(m, "isspace") || str_is(m, "isalpha")) {
    if (!s.n)
      return vbool(0);
    for (size_t i = 0, len; i < s.n; i += len) {
      uint32_t c = cp_at(s, i, &len);
      int ok = m.s[2] == 'd'   ? c >= '0' && c <= '9'
               : m.s[2] == 's' ? py_space(c)
                               : (c | 32) >= 'a' && (c | 32) <= 'z';
      if (!ok)
        return vbool(0);
    }
    return vbool(1);
  }
  /* title, capitalize */
  return run_filter(r, m, self, a);
}

static val_t call_macro(r_t *r, fn_t *f, const args_t *a) {
  const node_t *m = f->macro;
  if (r->depth >= 64)
    rerr(r, a->line, "macros nested more than 64 deep");
  if (a->npos > m->nn)
    rerr(r, a->line, "macro '%.*s' takes %zu arguments, %zu given", (int)m->s.n, m->s.s, m->nn,
         a->npos);
  frame_t *f2 = amem(&r->a, sizeof *f2), *saved = r->f;
  f2->up = f->scope;
  r->f = f2;
  for (size_t i = 0; i < m->nn; i++) {
    val_t v = arg(a, i, NULL, UNDEF);
    for (size_t k = 0; i >= a->npos && k < a->nkw; k++)
      if (a->kw[k].n == m->names[i].n && !memcmp(a->kw[k].s, m->names[i].s, a->kw[k].n))
        v = a->kwv[k];
    if (v.k == V_UNDEF && m->kwv[i])
      v = eval(r, m->kwv[i]);
    else if (v.k == V_UNDEF)
      v = undef(r, "'%.*s' is undefined", (int)m->names[i].n, m->names[i].s);
    dict_set(r, &f2->vars, m->names[i], v);
  }
  char *o = r->out;
  size_t n = r->n, cap = r->cap;
  r->out = NULL, r->n = r->cap = 0;
  r->capture++, r->depth++;
  exec_body(r, m->a);
  r->capture--, r->depth--;
  r->ctl = 0;
  str_t text = {r->out ? r->out : "", r->n};
  r->out = o, r->n = n, r->cap = cap;
  r->f = saved;
  return vstr(text);
}

static val_t call(r_t *r, val_t f, const args_t *a) {
  need_defined(r, f, a->line);
  if (f.k != V_FUNC)
    rerr(r, a->line, "'%s' object is not callable", type_name(f));
  if (f.fn->kind == F_METHOD)
    return call_method(r, f.fn, a);
  if (f.fn->kind == F_MACRO)
    return call_macro(r, f.fn, a);
  str_t g = f.fn->name;
  if (str_is(g, "raise_exception")) {
    str_t s = to_str(r, arg(a, 0, "message", UNDEF));
    rerr(r, a->line, "the template raised: %.*s", (int)s.n, s.s);
  }
  if (str_is(g, "range")) {
    long long lo = 0, hi, st = 1;
    if (a->npos >= 2)
      lo = int_arg(r, a, 0, "start", 0), hi = int_arg(r, a, 1, "stop", 0),
      st = int_arg(r, a, 2, "step", 1);
    else
      hi = int_arg(r, a, 0, "stop", 0);
    if (st == 0)
      rerr(r, a->line, "range() arg 3 must not be zero");
    list_t *l = new_list(r, 0);
    for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) {
      if (l->n >= 1000000)
        rerr(r, a->line, "range() of more than 1,000,000 items");
      list_push(r, l, vint(i));
    }
    return vlist(l);
  }
  if (str_is(g, "namespace") || str_is(g, "dict")) {
    dict_t *d = new_dict(r);
    d->ns = g.s[0] == 'n';
    for (size_t i = 0; i < a->npos; i++) /* namespace(mapping) */
      if (a->pos[i].k == V_DICT)
        for (size_t k = 0; k < a->pos[i].d->n; k++)
          dict_set(r, d, a->pos[i].d->k[k], a->pos[i].d->v[k]);
    for (size_t i = 0; i < a->nkw; i++)
      dict_set(r, d, a->kw[i], a->kwv[i]);
    return vdict(d);
  }
  /* strftime_now(format): the local time now, as transformers gives it */
  str_t fmt = str_arg(r, a, 0, "format");
  char z[256], o[512];
  snprintf(z, sizeof z, "%.*s", (int)fmt.n, fmt.s);
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  size_t n = strftime(o, sizeof o, z, &tm);
  return vstr(astr(&r->a, o, n));
}

/* a filter or test's function argument (select's test, map's filter) applied to v */
static int run_test(r_t *r, str_t name, val_t v, const args_t *a) {
  int line = a->line;
  val_t x = arg(a, 0, NULL, UNDEF);
#define T(n) str_is(name, n)
  if (T("defined"))
    return v.k != V_UNDEF;
  if (T("undefined"))
    return v.k == V_UNDEF;
  if (T("none"))
    return v.k == V_NONE;
  if (T("boolean"))
    return v.k == V_BOOL;
  if (T("true"))
    return v.k == V_BOOL && v.b;
  if (T("false"))
    return v.k == V_BOOL && !v.b;
  if (T("integer"))
    return v.k == V_INT;
  if (T("float"))
    return v.k == V_FLOAT;
  if (T("number"))
    return is_num(v);
  if (T("string"))
    return v.k == V_STR;
  if (T("mapping"))
    return v.k == V_DICT;
  if (T("iterable") || T("sequence"))
    return v.k == V_STR || v.k == V_LIST || v.k == V_DICT || v.k == V_UNDEF;
  if (T("callable"))
    return v.k == V_FUNC;
  if (T("odd") || T("even") || T("divisibleby")) {
    if (v.k != V_INT && v.k != V_BOOL)
      rerr(r, line, "the %.*s test takes an integer", (int)name.n, name.s);
    long long i = v.k == V_INT ? v.i : v.b, d = T("divisibleby") ? int_arg(r, a, 0, "num", 1) : 2;
    if (d == 0)
      rerr(r, line, "division by zero");
    return T("odd") ? i % 2 != 0 : i % d == 0;
  }
  if (T("eq") || T("equalto") || T("=="))
    return equal(v, x);
  if (T("ne") || T("!="))
    return !equal(v, x);
  if (T("lt") || T("lessthan") || T("<"))
    return order(r, v, x, line) < 0;
  if (T("gt") || T("greaterthan") || T(">"))
    return order(r, v, x, line) > 0;
  if (T("le") || T("<="))
    return order(r, v, x, line) <= 0;
  if (T("ge") || T(">="))
    return order(r, v, x, line) >= 0;
  if (T("in"))
    return contains(r, x, v, line);
  if (T("sameas"))
    return v.k == x.k && equal(v, x);
  if (T("lower") || T("upper")) {
    if (v.k != V_STR)
      return 0;
    str_t c = case_map(r, v.s, T("upper"), line);
    return c.n == v.s.n && !memcmp(c.s, v.s.s, c.n);
  }
  if (T("escaped"))
    return 0;
#undef T
  rerr(r, line, "no test named '%.*s'", (int)name.n, name.s);
}

/* args with the first n positional arguments left off (select's and map's own) */
static args_t shift(const args_t *a, size_t n) {
  args_t b = *a;
  n = n < b.npos ? n : b.npos;
  b.pos += n, b.npos -= n;
  return b;
}

static val_t attr_path(r_t *r, val_t v, str_t path, int line) { /* map(attribute="a.b") */
  size_t i = 0;
  while (i <= path.n) {
    size_t j = i;
    while (j < path.n && path.s[j] != '.')
      j++;
    str_t part = {path.s + i, j - i};
    int digits = part.n > 0;
    for (size_t k = 0; k < part.n; k++)
      digits &= part.s[k] >= '0' && part.s[k] <= '9';
    v = digits          ? get_item(r, v, vint(strtoll(part.s, NULL, 10)), line)
        : v.k == V_DICT ? get_item(r, v, vstr(part), line)
                        : get_attr(r, v, part, line);
    if (v.k == V_UNDEF)
      return v;
    i = j + 1;
  }
  return v;
}

static val_t run_filter(r_t *r, str_t name, val_t v, const args_t *a) {
  int line = a->line;
#define F(n) str_is(name, n)
  if (F("default") || F("d")) {
    val_t def = arg(a, 0, "default_value", vstr((str_t){"", 0}));
    val_t b = arg(a, 1, "boolean", vbool(0));
    return v.k == V_UNDEF || (truthy(b) && !truthy(v)) ? def : v;
  }
  if (F("length") || F("count")) {
    if (v.k == V_UNDEF)
      return vint(0);
    if (v.k == V_STR)
      return vint((long long)cp_count(v.s));
    if (v.k == V_LIST)
      return vint((long long)v.l->n);
    if (v.k == V_DICT)
      return vint((long long)v.d->n);
    rerr(r, line, "object of type '%s' has no len()", type_name(v));
  }
  if (F("tojson")) {
    val_t ind = arg(a, 0, "indent", (val_t){.k = V_NONE});
    buf_t b = {0};
    bput(r, &b, "", 0);
    need_defined(r, v, line);
    json_buf(r, &b, v, ind.k == V_INT ? (int)ind.i : -1, 0,
             truthy(arg(a, 99, "sort_keys", vbool(0))), line);
    return vstr(bstr(&b));
  }
  if (F("safe") || F("string") || F("e") || F("escape")) {
    str_t s = to_str(r, v);
    if (F("safe") || F("string"))
      return vstr(s);
    buf_t b = {0};
    bput(r, &b, "", 0);
    for (size_t i = 0; i < s.n; i++) {
      char c = s.s[i];
      const char *e = c == '&'    ? "&amp;"
                      : c == '<'  ? "&lt;"
                      : c == '>'  ? "&gt;"
                      : c == '"'  ? "&#34;"
                      : c == '\'' ? "&#39;"
                                  : NULL;
      if (e)
        bputs(r, &b, e);
      else
        bput(r, &b, &c, 1);
    }
    return vstr(bstr(&b));
  }
  if (F("trim")) {
    val_t c = arg(a, 0, "chars", (val_t){.k = V_NONE});
    return vstr(strip(to_str(r, v), c.k == V_STR ? &c.s : NULL, 3));
  }
  if (F("upper") || F("lower"))
    return vstr(case_map(r, to_str(r, v), F("upper"), line));
  if (F("capitalize") || F("title")) {
    str_t s = to_str(r, v);
    buf_t b = {0};
    bput(r, &b, "", 0);
    int word = 1; /* title: a word begins after -, whitespace, (, {, [ or < */
    for (size_t i = 0, len; i < s.n; i += len) {
      uint32_t c = cp_at(s, i, &len);
      int begins = F("title") ? word : i == 0;
      str_t one = case_map(r, (str_t){s.s + i, len}, begins, line);
      bput(r, &b, one.s, one.n);
      word = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_space(c);
    }
    return vstr(bstr(&b));
  }
  if (F("replace")) {
    need_defined(r, v, line);
    return vstr(replace(r, to_str(r, v), str_arg(r, a, 0, "old"), str_arg(r, a, 1, "new"),
                        int_arg(r, a, 2, "count", -1)));
  }
  if (F("int")) {
    if (v.k == V_INT || v.k == V_BOOL)
      return vint(v.k == V_INT ? v.i : v.b);
    if (v.k == V_FLOAT)
      return vint((long long)v.f);
    if (v.k == V_STR) {
      char z[64], *end;
      snprintf(z, sizeof z, "%.*s", (int)(v.s.n < 63 ? v.s.n : 63), v.s.s);
      double f = strtod(z, &end);
      if (end != z && !*strip((str_t){end, strlen(end)}, NULL, 3).s)
        return vint((long long)f);
    }
    return arg(a, 0, "default", vint(0));
  }
  if (F("float")) {
    if (is_num(v))
      return vfloat(num(v));
    if (v.k == V_STR) {
      char z[64], *end;
      snprintf(z, sizeof z, "%.*s", (int)(v.s.n < 63 ? v.s.n : 63), v.s.s);
      double f = strtod(z, &end);
      if (end != z)
        return vfloat(f);
    }
    return arg(a, 0, "default", vfloat(0));
  }
  if (F("abs")) {
    if (!is_num(v))
      rerr(r, line, "bad operand type for abs(): '%s'", type_name(v));
    return v.k == V_FLOAT ? vfloat(fabs(v.f)) : vint(llabs(v.k == V_INT ? v.i : v.b));
  }
  if (F("round")) {
    if (!is_num(v))
      rerr(r, line, "round takes a number");
    double p = pow(10, (double)int_arg(r, a, 0, "precision", 0));
    return vfloat(nearbyint(num(v) * p) / p);
  }
  if (F("list") || F("reverse") || F("first") || F("last") || F("unique") || F("items") ||
      F("join") || F("map") || F("select") || F("reject") || F("selectattr") || F("rejectattr") ||
      F("sum") || F("min") || F("max") || F("sort") || F("dictsort")) {
    if (F("items") || F("dictsort")) {
      if (v.k == V_UNDEF)
        return vlist(new_list(r, 0));
      if (v.k != V_DICT)
        rerr(r, line, "%.*s takes a mapping", (int)name.n, name.s);
      val_t items = call_method(r, method(r, v, (str_t){"items", 5}).fn, a);
      if (F("dictsort")) /* by key */
        for (size_t i = 1; i < items.l->n; i++)
          for (size_t j = i;
               j > 0 && order(r, items.l->v[j - 1].l->v[0], items.l->v[j].l->v[0], line) > 0; j--) {
            val_t t = items.l->v[j];
            items.l->v[j] = items.l->v[j - 1], items.l->v[j - 1] = t;
          }
      return items;
    }
    if (v.k == V_STR && F("reverse")) {
      list_t *cs = iterate(r, v, line);
      buf_t b = {0};
      bput(r, &b, "", 0);
      for (size_t i = cs->n; i-- > 0;)
        bput(r, &b, cs->v[i].s.s, cs->v[i].s.n);
      return vstr(bstr(&b));
    }
    list_t *in = iterate(r, v, line), *l = new_list(r, in->n);
    if (F("first") || F("last"))
      return in->n ? in->v[F("first") ? 0 : in->n - 1]
                   : undef(r, "No %s item, sequence was empty.", F("first") ? "first" : "last");
    if (F("join")) {
      str_t sep = arg(a, 0, "d", vstr((str_t){"", 0})).s;
      val_t at = arg(a, 1, "attribute", UNDEF);
      buf_t b = {0};
      bput(r, &b, "", 0);
      for (size_t i = 0; i < in->n; i++) {
        if (i)
          bput(r, &b, sep.s, sep.n);
        val_t x = at.k == V_STR ? attr_path(r, in->v[i], at.s, line) : in->v[i];
        str_t s = to_str(r, x);
        bput(r, &b, s.s, s.n);
      }
      return vstr(bstr(&b));
    }
    if (F("sum")) {
      val_t t = arg(a, 1, "start", vint(0)), at = arg(a, 0, "attribute", UNDEF);
      for (size_t i = 0; i < in->n; i++)
        t = arith(r, O_ADD, t, at.k == V_STR ? attr_path(r, in->v[i], at.s, line) : in->v[i], line);
      return t;
    }
    for (size_t i = 0; i < in->n; i++) {
      val_t x = in->v[i];
      if (F("map")) {
        val_t at = arg(a, 99, "attribute", UNDEF);
        if (at.k == V_STR) {
          val_t got = attr_path(r, x, at.s, line);
          list_push(r, l, got.k == V_UNDEF ? arg(a, 99, "default", got) : got);
        } else {
          args_t rest = shift(a, 1);
          list_push(r, l, run_filter(r, str_arg(r, a, 0, "filter"), x, &rest));
        }
        continue;
      }
      if (F("select") || F("reject")) {
        args_t rest = shift(a, 1);
        int ok = a->npos ? run_test(r, a->pos[0].s, x, &rest) : truthy(x);
        if (ok == F("select"))
          list_push(r, l, x);
        continue;
      }
      if (F("selectattr") || F("rejectattr")) {
        val_t got = attr_path(r, x, str_arg(r, a, 0, "attribute"), line);
        args_t rest = shift(a, 2);
        int ok = a->npos > 1 ? run_test(r, str_arg(r, a, 1, "test"), got, &rest) : truthy(got);
        if (ok == F("selectattr"))
          list_push(r, l, x);
        continue;
      }
      if (F("unique")) {
        int seen = 0;
        for (size_t k = 0; k < l->n && !seen; k++)
          seen = equal(l->v[k], x);
        if (!seen)
          list_push(r, l, x);
        continue;
      }
      list_push(r, l, x);
    }
    if (F("reverse"))
      for (size_t i = 0; i < l->n / 2; i++) {
        val_t t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i], l->v[l->n - 1 - i] = t;
      }
    if (F("sort") || F("min") || F("max")) {
      val_t at = arg(a, F("sort") ? 2 : 1, "attribute", UNDEF);
      int rev = F("sort") && truthy(arg(a, 0, "reverse", vbool(0)));
      for (size_t i = 1; i < l->n; i++) /* stable insertion sort */
        for (size_t j = i; j > 0; j--) {
          val_t x = l->v[j - 1], y = l->v[j];
          if (at.k == V_STR)
            x = attr_path(r, x, at.s, line), y = attr_path(r, y, at.s, line);
          int c = order(r, x, y, line);
          if (rev ? c >= 0 : c <= 0)
            break;
          val_t t = l->v[j];
          l->v[j] = l->v[j - 1], l->v[j - 1] = t;
        }
      if (!F("sort"))
        return l->n ? l->v[F("min") ? 0 : l->n - 1] : undef(r, "an empty sequence");
    }
    return vlist(l);
  }
  if (F("indent")) {
    val_t w = arg(a, 0, "width", vint(4));
    str_t ind = w.k == V_STR ? w.s : (str_t){"", 0};
    buf_t sp = {0};
    bput(r, &sp, "", 0);
    if (w.k != V_STR)
      for (long long i = 0; i < int_arg(r, a, 0, "width", 4); i++)
        bputs(r, &sp, " ");
    if (w.k != V_STR)
      ind = bstr(&sp);
    int first = truthy(arg(a, 1, "first", vbool(0))), blank = truthy(arg(a, 2, "blank", vbool(0)));
    str_t s = to_str(r, v);
    buf_t b = {0};
    bput(r, &b, "", 0);
    if (first)
      bput(r, &b, ind.s, ind.n);
    size_t i = 0;
    int line0 = 1;
    while (i < s.n) {
      size_t j = i;
      while (j < s.n && s.s[j] != '\n')
        j++;
      if (!line0) {
        bputs(r, &b, "\n");
        if (j > i || blank)
          bput(r, &b, ind.s, ind.n);
      }
      bput(r, &b, s.s + i, j - i);
      line0 = 0;
      i = j + 1;
    }
    return vstr(bstr(&b));
  }
  if (F("wordcount")) {
    list_t *w =
        call_method(r, method(r, vstr(to_str(r, v)), (str_t){"split", 5}).fn, &(args_t){0}).l;
    return vint((long long)w->n);
  }
#undef F
  rerr(r, line, "no filter named '%.*s'", (int)name.n, name.s);
}

/* nested evaluations and statements (through macro calls too): the walker's stack */
#define MAX_NEST 2000

static val_t eval_node(r_t *r, const node_t *x);

static val_t eval(r_t *r, const node_t *x) {
  if (++r->nest > MAX_NEST)
    rerr(r, x->line, "expressions and statements nested more than %d deep", MAX_NEST);
  val_t v = eval_node(r, x);
  r->nest--;
  return v;
}

static val_t eval_node(r_t *r, const node_t *x) {
  switch (x->kind) {
  case E_LIT:
    return x->lit;
  case E_NAME:
    return lookup(r, x->s);
  case E_ATTR:
    return get_attr(r, eval(r, x->a), x->s, x->line);
  case E_ITEM: {
    val_t obj = eval(r, x->a);
    return get_item(r, obj, eval(r, x->b), x->line);
  }
  case E_SLICE: {
    val_t obj = eval(r, x->a), parts[3];
    for (int k = 0; k < 3; k++)
      parts[k] = x->kids[k] ? eval(r, x->kids[k]) : UNDEF;
    return slice(r, obj, parts, x->line);
  }
  case E_CALL: {
    val_t f = eval(r, x->a);
    args_t a = eval_args(r, x, 0);
    return call(r, f, &a);
  }
  case E_FILTER: {
    val_t v = eval(r, x->a);
    args_t a = eval_args(r, x, 0);
    return run_filter(r, x->s, v, &a);
  }
  case E_TEST: {
    val_t v = eval(r, x->a);
    args_t a = eval_args(r, x, 0);
    return vbool(run_test(r, x->s, v, &a) != x->neg);
  }
  case E_BIN:
    return arith(r, x->op, eval(r, x->a), eval(r, x->b), x->line);
  case E_CMP: {
    val_t a = eval(r, x->kids[0]);
    for (size_t i = 1; i < x->nk; i++) {
      val_t b = eval(r, x->kids[i]);
      if (!compare(r, x->ops[i - 1], a, b, x->line))
        return vbool(0);
      a = b;
    }
    return vbool(1);
  }
  case E_CONCAT: {
    buf_t b = {0};
    bput(r, &b, "", 0);
    for (size_t i = 0; i < x->nk; i++)
      to_buf(r, &b, eval(r, x->kids[i]), 0);
    return vstr(bstr(&b));
  }
  case E_AND: {
    val_t a = eval(r, x->a);
    return truthy(a) ? eval(r, x->b) : a;
  }
  case E_OR: {
    val_t a = eval(r, x->a);
    return truthy(a) ? a : eval(r, x->b);
  }
  case E_NOT:
    return vbool(!truthy(eval(r, x->a)));
  case E_NEG: {
    val_t v = eval(r, x->a);
    need_defined(r, v, x->line);
    if (!is_num(v))
      rerr(r, x->line, "bad operand type for unary -: '%s'", type_name(v));
    return v.k == V_FLOAT ? vfloat(-v.f) : vint(-(v.k == V_INT ? v.i : v.b));
  }
  case E_COND:
    return truthy(eval(r, x->b)) ? eval(r, x->a)
           : x->c                ? eval(r, x->c)
                                 : undef(r, "the if expression had no else");
  case E_LIST: {
    list_t *l = new_list(r, x->nk);
    l->tuple = x->neg;
    for (size_t i = 0; i < x->nk; i++)
      list_push(r, l, eval(r, x->kids[i]));
    return vlist(l);
  }
  case E_DICT: {
    dict_t *d = new_dict(r);
    for (size_t i = 0; i + 1 < x->nk; i += 2) {
      val_t k = eval(r, x->kids[i]);
      if (k.k != V_STR)
        rerr(r, x->line, "colo's Jinja takes strings alone as a dict's keys");
      dict_set(r, d, k.s, eval(r, x->kids[i + 1]));
    }
    return vdict(d);
  }
  default:
    rerr(r, x->line, "not an expression");
  }
}

static void out(r_t *r, const char *s, size_t n) {
  if (r->n + n > MAX_OUT)
    rerr(r, 0, "the template's text passed %zu MiB", MAX_OUT >> 20);
  buf_t b = {r->out, r->n, r->cap};
  bput(r, &b, s, n);
  r->out = b.s, r->n = b.n, r->cap = b.cap;
}

static void bind(r_t *r, frame_t *f, const str_t *names, size_t nn, val_t v, int line) {
  if (nn == 1) {
    dict_set(r, &f->vars, names[0], v);
    return;
  }
  if (v.k != V_LIST)
    rerr(r, line, "cannot unpack a %s into %zu names", type_name(v), nn);
  if (v.l->n != nn)
    rerr(r, line, "%s values to unpack (expected %zu, got %zu)",
         v.l->n > nn ? "too many" : "not enough", nn, v.l->n);
  for (size_t i = 0; i < nn; i++)
    dict_set(r, &f->vars, names[i], v.l->v[i]);
}

static void exec(r_t *r, const node_t *x);

static void exec_body(r_t *r, const node_t *body) {
  for (size_t i = 0; i < body->nk && !r->ctl; i++)
    exec(r, body->kids[i]);
}

static void exec_for(r_t *r, const node_t *x) {
  list_t *items = iterate(r, eval(r, x->a), x->line);
  frame_t *saved = r->f;
  if (x->c) { /* for x in seq if cond: the items that pass */
    list_t *kept = new_list(r, items->n);
    for (size_t i = 0; i < items->n; i++) {
      frame_t *f = amem(&r->a, sizeof *f);
      f->up = saved;
      r->f = f;
      bind(r, f, x->names, x->nn, items->v[i], x->line);
      if (truthy(eval(r, x->c)))
        list_push(r, kept, items->v[i]);
      r->f = saved;
    }
    items = kept;
  }
  size_t n = items->n;
  for (size_t i = 0; i < n; i++) {
    frame_t *f = amem(&r->a, sizeof *f);
    f->up = saved;
    r->f = f;
    bind(r, f, x->names, x->nn, items->v[i], x->line);
    dict_t *loop = new_dict(r);
    dict_set(r, loop, (str_t){"index", 5}, vint((long long)i + 1));
    dict_set(r, loop, (str_t){"index0", 6}, vint((long long)i));
    dict_set(r, loop, (str_t){"revindex", 8}, vint((long long)(n - i)));
    dict_set(r, loop, (str_t){"revindex0", 9}, vint((long long)(n - i - 1)));
    dict_set(r, loop, (str_t){"first", 5}, vbool(i == 0));
    dict_set(r, loop, (str_t){"last", 4}, vbool(i + 1 == n));
    dict_set(r, loop, (str_t){"length", 6}, vint((long long)n));
    dict_set(r, loop, (str_t){"depth", 5}, vint(1));
    dict_set(r, loop, (str_t){"depth0", 6}, vint(0));
    if (i > 0)
      dict_set(r, loop, (str_t){"previtem", 8}, items->v[i - 1]);
    if (i + 1 < n)
      dict_set(r, loop, (str_t){"nextitem", 8}, items->v[i + 1]);
    dict_set(r, &f->vars, (str_t){"loop", 4}, vdict(loop));
    for (size_t k = 0; k < x->nk && !r->ctl; k++)
      exec(r, x->kids[k]);
    r->f = saved;
    int ctl = r->ctl;
    r->ctl = 0;
    if (ctl == 1)
      break;
  }
  if (n == 0 && x->b)
    exec_body(r, x->b);
}

static void exec_node(r_t *r, const node_t *x);

static void exec(r_t *r, const node_t *x) {
  if (++r->steps > MAX_STEPS)
    rerr(r, x->line, "the template ran more than %ld steps", MAX_STEPS);
  if (++r->nest > MAX_NEST)
    rerr(r, x->line, "expressions and statements nested more than %d deep", MAX_NEST);
  exec_node(r, x);
  r->nest--;
}

static void exec_node(r_t *r, const node_t *x) {
  switch (x->kind) {
  case N_TEXT:
    out(r, x->s.s, x->s.n);
    return;
  case N_OUT: {
    str_t s = to_str(r, eval(r, x->a));
    out(r, s.s, s.n);
    return;
  }
  case N_IF:
    if (truthy(eval(r, x->a)))
      exec_body(r, x->b);
    else if (x->c && x->c->kind == N_IF)
      exec(r, x->c);
    else if (x->c)
      exec_body(r, x->c);
    return;
  case N_FOR:
    exec_for(r, x);
    return;
  case N_SET: {
    val_t v = eval(r, x->a);
    if (x->s2.n) {
      val_t ns = lookup(r, x->names[0]);
      if (ns.k != V_DICT || !ns.d->ns)
        rerr(r, x->line, "cannot assign attribute on non-namespace object");
      dict_set(r, ns.d, x->s2, v);
      return;
    }
    bind(r, r->f, x->names, x->nn, v, x->line);
    return;
  }
  case N_SETBLOCK: {
    char *o = r->out;
    size_t n = r->n, cap = r->cap;
    r->out = NULL, r->n = r->cap = 0;
    r->capture++;
    exec_body(r, x->a);
    r->capture--;
    str_t text = {r->out ? r->out : "", r->n};
    r->out = o, r->n = n, r->cap = cap;
    dict_set(r, &r->f->vars, x->names[0], vstr(text));
    return;
  }
  case N_MACRO: {
    fn_t *f = amem(&r->a, sizeof *f);
    f->kind = F_MACRO, f->name = x->s, f->macro = x, f->scope = r->f;
    dict_set(r, &r->f->vars, x->s, (val_t){.k = V_FUNC, .fn = f});
    return;
  }
  case N_BREAK:
    r->ctl = 1;
    return;
  case N_CONTINUE:
    r->ctl = 2;
    return;
  case N_GEN: {
    size_t from = r->n;
    exec_body(r, x->a);
    if (r->capture)
      return;
    if (r->nspans == r->spcap) {
      size_t c = r->spcap ? 2 * r->spcap : 16;
      colo_jinja_span_t *g = amem(&r->a, c * sizeof *g);
      if (r->nspans)
        memcpy(g, r->spans, r->nspans * sizeof *g);
      r->spans = g, r->spcap = c;
    }
    r->spans[r->nspans++] = (colo_jinja_span_t){from, r->n};
    return;
  }
  default:
    exec_body(r, x);
  }
}

int colo_jinja_render(const colo_jinja_t *t, const cJSON *vars, char **out, size_t *len,
                      colo_jinja_span_t **spans, size_t *nspans, char *err, size_t errlen) {
  *out = NULL, *len = 0;
  if (spans)
    *spans = NULL, *nspans = 0;
  r_t *r = calloc(1, sizeof *r);
  if (!r)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  r->a.oom = &r->jb;
  r->err = err, r->errlen = errlen;
  int rc = setjmp(r->jb);
  if (rc == 0) {
    r->root = amem(&r->a, sizeof *r->root);
    static const char *const globals[] = {"raise_exception", "range", "namespace", "dict",
                                          "strftime_now",    NULL};
    for (size_t i = 0; globals[i]; i++) {
      fn_t *f = amem(&r->a, sizeof *f);
      f->kind = F_GLOBAL, f->name = (str_t){globals[i], strlen(globals[i])};
      dict_set(r, &r->root->vars, f->name, (val_t){.k = V_FUNC, .fn = f});
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, vars)
        dict_set(r, &r->root->vars, astr(&r->a, v->string, strlen(v->string)), from_json(r, v));
    frame_t *top = amem(&r->a, sizeof *top); /* the template's own sets */
    top->up = r->root;
    r->f = top;
    exec_body(r, t->root);
    char *o = malloc(r->n + 1);
    colo_jinja_span_t *sp = r->nspans ? malloc(r->nspans * sizeof *sp) : NULL;
    if (!o || (r->nspans && !sp)) {
      free(o);
      free(sp);
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    } else {
      if (r->n)
        memcpy(o, r->out, r->n);
      o[r->n] = 0;
      *out = o, *len = r->n;
      if (spans) {
        if (r->nspans)
          memcpy(sp, r->spans, r->nspans * sizeof *sp);
        *spans = sp, *nspans = r->nspans;
      } else {
        free(sp);
      }
    }
  } else if (rc == COLO_ENOMEM) {
    colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  afree(&r->a);
  free(r);
  return rc;
}
