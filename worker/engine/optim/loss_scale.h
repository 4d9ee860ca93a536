/* Dynamic loss scaling for fp16 training, with PyTorch's GradScaler semantics: the loss is
 * multiplied by `scale` before the backward; a step whose gradients hold an inf or NaN is
 * skipped (no update, no optimizer step counted) and halves the scale; after `window` clean
 * steps in a row the scale doubles. Scales are powers of two, so scaling and unscaling are exact
 * in floating point: with no overflow a scaled fp32 run is bit-identical to an unscaled one.
 *
 * The overflow test is the global gradient norm: it is summed over every group, so every rank
 * sees the same inf or NaN and takes the same decision. */
#ifndef COLO_LOSS_SCALE_H
#define COLO_LOSS_SCALE_H

#include <stdint.h>

typedef struct {
  int enabled;
  float scale;      /* the current factor (1 when disabled) */
  int window;       /* clean steps before the scale doubles */
  int good_steps;   /* clean steps since the last change */
  uint64_t skipped; /* steps skipped for overflow in this run */
} colo_loss_scaler_t;

/* Bounds: past 2^24 a larger scale buys fp16 nothing; an overflow at scale 1 means the
 * gradients overflow however they are scaled, and ends the run (as DeepSpeed's min_loss_scale). */
#define COLO_LOSS_SCALE_MIN 1.0f
#define COLO_LOSS_SCALE_MAX 16777216.0f

/* Disabled when init <= 0. init is rounded down to a power of two. */
void colo_loss_scaler_init(colo_loss_scaler_t *s, float init, int window);

/* The factor the backward multiplies the loss by. */
float colo_loss_scaler_factor(const colo_loss_scaler_t *s);

/* After the backward: `norm` is the global norm of the scaled gradients. Returns 1 when the step
 * is to be taken (finite), 0 when it is skipped, and -1 when it overflowed at the minimum scale
 * (or, disabled, overflowed at all): the run cannot go on. Updates the scale. */
int colo_loss_scaler_update(colo_loss_scaler_t *s, float norm);

#endif
