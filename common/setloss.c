/* Per-set validation losses of a progress record (setloss.h). */
#include "setloss.h"

#include <stdio.h>
#include <stdlib.h>

#include "error.h"

struct colo_set_losses_s {
  Colo__V1__SetLoss sets[COLO_SET_LOSSES_MAX];
  Colo__V1__SetLoss *ptrs[COLO_SET_LOSSES_MAX];
  char names[COLO_SET_LOSSES_MAX][COLO_SET_LOSS_NAME];
};

int colo_set_losses_put(colo_set_losses_t **store, Colo__V1__SetLoss ***sets, size_t *n_sets,
                        const char *const *names, const float *losses, size_t n) {
  *n_sets = 0;
  *sets = NULL;
  if (n == 0)
    return 0;
  if (!*store && !(*store = calloc(1, sizeof **store)))
    return COLO_ENOMEM;
  colo_set_losses_t *s = *store;
  if (n > COLO_SET_LOSSES_MAX)
    n = COLO_SET_LOSSES_MAX;
  for (size_t i = 0; i < n; i++) {
    colo__v1__set_loss__init(&s->sets[i]);
    snprintf(s->names[i], sizeof s->names[i], "%s", names[i] ? names[i] : "");
    s->sets[i].name = s->names[i];
    s->sets[i].has_loss = 1;
    s->sets[i].loss = losses[i];
    s->ptrs[i] = &s->sets[i];
  }
  *sets = s->ptrs;
  *n_sets = n;
  return 0;
}

void colo_set_losses_free(colo_set_losses_t *store) {
  free(store);
}
