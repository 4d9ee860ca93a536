/* coloctl output helpers: aligned text tables for people, durations and sizes. */
#ifndef COLOCTL_OUTPUT_H
#define COLOCTL_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct table_s table_t;

/* A table with the given column headers (NULL-terminated list). */
table_t *table_new(const char *const *headers);
/* Adds a row; one printf-formatted cell per column, in order. Cells are copied. */
void table_row(table_t *t, ...);
/* The same from an array of as many cells as the table has columns. */
void table_row_cells(table_t *t, const char *const *cells);
void table_print(const table_t *t, FILE *out);
/* The same, each line after `indent` spaces. */
void table_print_indented(const table_t *t, FILE *out, int indent);
void table_free(table_t *t);

/* A job state's name in capitals (colo.v1.JobState): "RUNNING" */
const char *state_name(int s);

/* "3s", "4m12s", "2h05m", "3d04h" */
void fmt_age(int64_t ms, char *buf, size_t n);
/* "1.5 GiB" */
void fmt_bytes(uint64_t b, char *buf, size_t n);

#endif
