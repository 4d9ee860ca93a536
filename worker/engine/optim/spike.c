#include "spike.h"

#include <math.h>
#include <string.h>

/* mean + sigma·(sample standard deviation) of the finite values; NaN with fewer than two */
static float limit(const float *x, int n, float sigma) {
  double sum = 0, sq = 0;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(x[i])) {
      sum += x[i];
      k++;
    }
  if (k < 2)
    return NAN;
  double mean = sum / k;
  for (int i = 0; i < n; i++)
    if (isfinite(x[i]))
      sq += (x[i] - mean) * (x[i] - mean);
  return (float)(mean + sigma * sqrt(sq / (k - 1)));
}

colo_spike_verdict_t colo_spike_judge(const colo_spike_t *s, float sigma, int window, float loss,
                                      float norm) {
  colo_spike_verdict_t v = {0, NAN, NAN, s->n};
  int need = window / 2 > 2 ? window / 2 : 2;
  if (sigma <= 0 || s->n < need)
    return v;
  v.loss_limit = limit(s->loss, s->n, sigma);
  v.norm_limit = limit(s->norm, s->n, sigma);
  /* a limit not known (a history of non-finite values) judges nothing */
  v.skip = (isfinite(v.loss_limit) && !(loss <= v.loss_limit)) ||
           (isfinite(v.norm_limit) && !(norm <= v.norm_limit));
  return v;
}

void colo_spike_push(colo_spike_t *s, int window, float loss, float norm) {
  if (window > COLO_SPIKE_MAX_WINDOW)
    window = COLO_SPIKE_MAX_WINDOW;
  if (window < 1)
    return;
  if (s->n >= window) { /* the oldest goes */
    int drop = s->n - window + 1;
    memmove(s->loss, s->loss + drop, (size_t)(s->n - drop) * sizeof s->loss[0]);
    memmove(s->norm, s->norm + drop, (size_t)(s->n - drop) * sizeof s->norm[0]);
    s->n -= drop;
  }
  s->loss[s->n] = loss;
  s->norm[s->n] = norm;
  s->n++;
}
