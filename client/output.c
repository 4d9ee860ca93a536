/* Aligned tables: every column as wide as its widest cell, two spaces between columns. */
#include "output.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct table_s {
  size_t cols;
  char **cells; /* rows × cols, row 0 is the header */
  size_t rows, cap;
};

table_t *table_new(const char *const *headers) {
  table_t *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  while (headers[t->cols])
    t->cols++;
  t->cap = 16;
  t->cells = calloc(t->cap * t->cols, sizeof *t->cells);
  for (size_t c = 0; c < t->cols; c++)
    t->cells[c] = strdup(headers[c]);
  t->rows = 1;
  return t;
}

void table_row(table_t *t, ...) {
  const char *cells[64];
  va_list ap;
  va_start(ap, t);
  for (size_t c = 0; c < t->cols && c < 64; c++)
    cells[c] = va_arg(ap, const char *);
  va_end(ap);
  table_row_cells(t, cells);
}

void table_row_cells(table_t *t, const char *const *cells) {
  if (t->rows == t->cap) {
    t->cap *= 2;
    t->cells = realloc(t->cells, t->cap * t->cols * sizeof *t->cells);
  }
  for (size_t c = 0; c < t->cols; c++)
    t->cells[t->rows * t->cols + c] = strdup(cells[c] ? cells[c] : "");
  t->rows++;
}

void table_print(const table_t *t, FILE *out) {
  table_print_indented(t, out, 0);
}

void table_print_indented(const table_t *t, FILE *out, int indent) {
  size_t *w = calloc(t->cols, sizeof *w);
  for (size_t r = 0; r < t->rows; r++)
    for (size_t c = 0; c < t->cols; c++) {
      size_t n = strlen(t->cells[r * t->cols + c]);
      if (n > w[c])
        w[c] = n;
    }
  for (size_t r = 0; r < t->rows; r++) {
    fprintf(out, "%*s", indent, "");
    for (size_t c = 0; c < t->cols; c++) {
      const char *s = t->cells[r * t->cols + c];
      if (c + 1 == t->cols)
        fprintf(out, "%s", s);
      else
        fprintf(out, "%-*s  ", (int)w[c], s);
    }
    fputc('\n', out);
  }
  free(w);
}

void table_free(table_t *t) {
  if (!t)
    return;
  for (size_t i = 0; i < t->rows * t->cols; i++)
    free(t->cells[i]);
  free(t->cells);
  free(t);
}

void fmt_age(int64_t ms, char *buf, size_t n) {
  if (ms < 0)
    ms = 0;
  int64_t s = ms / 1000;
  if (s < 60)
    snprintf(buf, n, "%llds", (long long)s);
  else if (s < 3600)
    snprintf(buf, n, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else if (s < 86400)
    snprintf(buf, n, "%lldh%02lldm", (long long)(s / 3600), (long long)(s % 3600 / 60));
  else
    snprintf(buf, n, "%lldd%02lldh", (long long)(s / 86400), (long long)(s % 86400 / 3600));
}

void fmt_bytes(uint64_t b, char *buf, size_t n) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, n, "%llu B", (unsigned long long)b);
  else
    snprintf(buf, n, "%.1f %s", v, units[u]);
}

const char *state_name(int s) {
  static const char *names[] = {"UNKNOWN",   "PENDING", "RUNNING",   "RESTARTING",
                                "SUCCEEDED", "FAILED",  "CANCELLED", "TIMED_OUT"};
  return (s >= 0 && s <= 7) ? names[s] : "UNKNOWN";
}
