/* Dynamic loss scaling. */
#include "loss_scale.h"

#include <math.h>

void colo_loss_scaler_init(colo_loss_scaler_t *s, float init, int window) {
  s->enabled = init > 0.0f;
  s->window = window > 0 ? window : 2000;
  s->good_steps = 0;
  s->skipped = 0;
  if (!s->enabled) {
    s->scale = 1.0f;
    return;
  }
  int e;
  frexpf(init, &e); /* init = f · 2^e with f in [0.5, 1): the power of two at or below is 2^(e-1) */
  s->scale = ldexpf(1.0f, e - 1);
  if (s->scale < COLO_LOSS_SCALE_MIN)
    s->scale = COLO_LOSS_SCALE_MIN;
  if (s->scale > COLO_LOSS_SCALE_MAX)
    s->scale = COLO_LOSS_SCALE_MAX;
}

float colo_loss_scaler_factor(const colo_loss_scaler_t *s) {
  return s->enabled ? s->scale : 1.0f;
}

int colo_loss_scaler_update(colo_loss_scaler_t *s, float norm) {
  int finite = isfinite(norm);
  if (!s->enabled)
    return finite ? 1 : -1;
  if (!finite) {
    if (s->scale <= COLO_LOSS_SCALE_MIN)
      return -1;
    s->skipped++;
    s->good_steps = 0;
    s->scale *= 0.5f;
    return 0;
  }
  if (++s->good_steps >= s->window) {
    s->good_steps = 0;
    if (s->scale < COLO_LOSS_SCALE_MAX)
      s->scale *= 2.0f;
  }
  return 1;
}
