/* coloctl compare: jobs side by side (a sweep's), by the fields of their specs that differ and
 * how far each got, best validation loss first. */
#ifndef COLOCTL_COMPARE_H
#define COLOCTL_COMPARE_H

#include <stddef.h>
#include <stdio.h>

#include "colo/v1/cluster.pb-c.h"

/* Prints the jobs side by side: a table for people (ID, NAME, STATE, each field of the specs
 * whose value is not the same in every job, the name aside, STEP, LOSS, VAL LOSS, and a column
 * for each validation set any job reports, data.val_sources, by its name), or with json an array
 * of {id, name, state, fields: {path: value}, step, loss, val_loss, val_sets: {name: loss}}. Fields
 * are dotted paths in the specs' field order (optimizer.lr); a list is shown as JSON. Rows go by
 * validation loss, lowest first and those without one last, then by training loss, then by id.
 * Returns 0, or -1 out of memory. */
int compare_print(const Colo__V1__Job *const *jobs, size_t n, int json, FILE *out);

#endif
