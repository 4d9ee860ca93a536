/* Skipping the updates of loss and gradient-norm spikes (optimizer.skip_spike_sigma), as
 * OLMo-core's SkipStepAdamW does: a step whose loss or global gradient norm lies more than
 * `sigma` sample standard deviations above the mean of the last `window` steps' is not applied
 * (no update, no optimizer step counted; its data is spent). The statistics wait for half a window
 * of history and leave out values that are not finite; every step's values go into the history,
 * skipped or not, so that a lasting shift is soon the new normal. The history is kept in the
 * checkpoint: a resumed run judges as an uninterrupted one does. */
#ifndef COLO_SPIKE_H
#define COLO_SPIKE_H

#include <stdint.h>

#define COLO_SPIKE_MAX_WINDOW 1024

typedef struct {
  float loss[COLO_SPIKE_MAX_WINDOW], norm[COLO_SPIKE_MAX_WINDOW]; /* oldest first */
  int n;
  uint64_t skipped; /* steps skipped as spikes, over the whole run (resumes included) */
} colo_spike_t;

/* What the history says of a step's values: skip 1 when either spikes; the thresholds (mean +
 * sigma·std; NaN while the history is too short to judge) */
typedef struct {
  int skip;
  float loss_limit, norm_limit;
  int history; /* the steps judged against */
} colo_spike_verdict_t;

colo_spike_verdict_t colo_spike_judge(const colo_spike_t *s, float sigma, int window, float loss,
                                      float norm);
/* Adds a step's values to the history, dropping the oldest past `window`. */
void colo_spike_push(colo_spike_t *s, int window, float loss, float norm);

#endif
