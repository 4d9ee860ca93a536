/* Per-set validation losses of a progress record (setloss.h). */
#include "setloss.h"

#include <stdio.h>
#include <stdlib.h>

#include "error.h"

struct colo_set_losses_s {
  Colo__V1__SetLoss sets[COLO_SET_LOSSES_MAX];
  Colo__V1__SetLoss *ptrs[COLO_SET_LOSSES_MAX];
  char names[COLO_SET_LOSSES_MAX][COLO_SET_LOSS_NAME];
  Colo__V1__SetScore scores[COLO_SET_LOSSES_MAX];
  Colo__V1__SetScore *sptrs[COLO_SET_LOSSES_MAX];
  char snames[COLO_SET_LOSSES_MAX][COLO_SET_LOSS_NAME];
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

int colo_set_scores_put(colo_set_losses_t **store, Colo__V1__SetScore ***out, size_t *n_out,
                        Colo__V1__SetScore *const *in, size_t n) {
  *n_out = 0;
  *out = NULL;
  if (n == 0)
    return 0;
  if (!*store && !(*store = calloc(1, sizeof **store)))
    return COLO_ENOMEM;
  colo_set_losses_t *s = *store;
  size_t k = 0;
  for (size_t i = 0; i < n && k < COLO_SET_LOSSES_MAX; i++) {
    if (!in[i] || !in[i]->name)
      continue;
    Colo__V1__SetScore *x = &s->scores[k];
    colo__v1__set_score__init(x);
    snprintf(s->snames[k], sizeof s->snames[k], "%s", in[i]->name);
    x->name = s->snames[k];
    x->has_acc = x->has_acc_norm = x->has_acc_token = x->has_questions = 1;
    x->acc = in[i]->acc;
    x->acc_norm = in[i]->acc_norm;
    x->acc_token = in[i]->acc_token;
    x->questions = in[i]->questions;
    s->sptrs[k++] = x;
  }
  *out = k ? s->sptrs : NULL;
  *n_out = k;
  return 0;
}

void colo_set_losses_free(colo_set_losses_t *store) {
  free(store);
}
