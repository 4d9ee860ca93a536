/* Storage for a progress record's per-set validation losses (Progress.val_sets, with a job's
 * data.val_sources) and multiple-choice scores (choice_scores, with data.choice_sets): owned by
 * whoever keeps the record, a rank's worker or colod, which points the record's val_sets into it.
 * One allocation, made on first use, reused by every later evaluation; a copy of the record (a
 * struct assignment) shares it. */
#ifndef COLO_SETLOSS_H
#define COLO_SETLOSS_H

#include <stddef.h>

#include "colo/v1/cluster.pb-c.h"
#include "jobspec.h"

#define COLO_SET_LOSSES_MAX COLO_MAX_SOURCES /* data.val_sources at most */
#define COLO_SET_LOSS_NAME  128              /* bytes kept of a name, its NUL included */

typedef struct colo_set_losses_s colo_set_losses_t;

/* Points *sets (a record's val_sets, *n_sets its count: Progress's or ProgressSample's) at
 * *store's copy of the n sets (names cut to COLO_SET_LOSS_NAME - 1 bytes, the first
 * COLO_SET_LOSSES_MAX of them), allocating *store on first use. 0, or COLO_ENOMEM (none then). */
int colo_set_losses_put(colo_set_losses_t **store, Colo__V1__SetLoss ***sets, size_t *n_sets,
                        const char *const *names, const float *losses, size_t n);
/* The same for a record's multiple-choice scores (choice_scores, data.choice_sets): *out at
 * *store's copy of the n scores in (names cut likewise; an entry without a name left out). */
int colo_set_scores_put(colo_set_losses_t **store, Colo__V1__SetScore ***out, size_t *n_out,
                        Colo__V1__SetScore *const *in, size_t n);
void colo_set_losses_free(colo_set_losses_t *store);

#endif
