/* AdamW over a model's flat parameter buffer: moments m and v beside the parameters, weight
 * decay only on tensors marked to decay, clipping by the global gradient norm, and the learning
 * rate schedule (linear warm-up, then cosine, linear, constant, or held then decayed: wsd). */
#ifndef COLO_ADAMW_H
#define COLO_ADAMW_H

#include <stddef.h>

#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../core/pool.h"
#include "../model/gpt.h"

typedef struct {
  float lr, min_lr, beta1, beta2, eps, weight_decay, grad_clip;
  int warmup_steps, total_steps;
  int schedule;    /* colo.v1.Schedule: 1 cosine, 2 linear, 3 constant, 4 wsd */
  int decay_steps; /* wsd: the last decay_steps steps decay linearly to min_lr */
  /* optimizer.name: muon: the blocks' weight matrices by Muon with momentum muon_momentum
   * (muon.h), the other tensors by AdamW; 0: AdamW for all */
  int muon;
  float muon_momentum;
  float muon_lr_ratio; /* Muon's learning rate over lr (optimizer.muon_lr / lr; 0 or 1: lr) */
  int muon_original;   /* optimizer.muon_adjust_lr: original (else match_rms_adamw) */
} colo_adamw_config_t;

typedef struct {
  colo_adamw_config_t cfg;
  float *m, *v; /* [n_params] */
  size_t n;
  int t; /* updates done */
  colo_pool_t *pool;
  float *work;     /* Muon's scratch (colo_muon_work_floats), when cfg.muon */
  colo_comm_t *tp; /* Muon: the tensor-parallel group its split matrices are gathered over */
  /* Muon's matrices have no second moment: moment offsets [hole[2i], hole[2i+1]) (sorted,
   * disjoint) have none in v, which holds the others' in order (colo_adamw_drop_v);
   * hole_before[i]: how many offsets the holes before hole i cover (i ≤ n_hole) */
  size_t *hole, *hole_before, n_hole;
} colo_adamw_t;

int colo_adamw_init(colo_adamw_t *opt, const colo_adamw_config_t *cfg, size_t n_params,
                    colo_pool_t *pool, char *err, size_t errlen);
void colo_adamw_free(colo_adamw_t *opt);

/* Muon's scratch for model's tensors, from the optimizer's pool (cfg.muon only); with_input:
 * room for a tensor's input too (colo_muon_work_floats; ZeRO stage 0, whose step is
 * colo_adamw_step's); tp: the model's tensor-parallel group (NULL when tp = 1). */
int colo_adamw_muon_init(colo_adamw_t *opt, const colo_gpt_t *model, int with_input,
                         colo_comm_t *tp, char *err, size_t errlen);

/* Drops the second moments of moment offsets [pairs[2i], pairs[2i+1]) for i < n_pairs (sorted,
 * disjoint: Muon's matrices, which have none): v shrinks to the other offsets', in order. Once,
 * before a first step. */
int colo_adamw_drop_v(colo_adamw_t *opt, const size_t *pairs, size_t n_pairs, char *err,
                      size_t errlen);
/* How many second moments n moment offsets keep without those of pairs (as drop_v's). */
size_t colo_adamw_v_floats(size_t n, const size_t *pairs, size_t n_pairs);
/* Lays the moments out anew (placement.c's moves): m and v for n offsets, v being `v` (the pool's,
 * of colo_adamw_v_floats floats, its values the caller's to put) without the second moments of
 * pairs; the old v and its map are freed. Fails (v not taken, nothing changed) only for want of
 * host memory for the map. */
int colo_adamw_set_v(colo_adamw_t *opt, float *v, size_t n, const size_t *pairs, size_t n_pairs,
                     char *err, size_t errlen);
/* Where moment offset i's second moment is in v (i not in a dropped range; i itself without any):
 * a bisection of the holes, once for a run of tensors. */
size_t colo_adamw_v_off(const colo_adamw_t *opt, size_t i);
/* The second moments of offsets [off, off + n) to host memory h, zeros for dropped ones; and
 * from h into v, dropped ones left out. */
void colo_adamw_v_get(const colo_adamw_t *opt, const colo_backend_t *be, size_t off, size_t n,
                      float *h);
void colo_adamw_v_put(const colo_adamw_t *opt, const colo_backend_t *be, size_t off, size_t n,
                      const float *h);

/* Muon's learning rate over lr's at every step (optimizer.muon_lr / lr; 1 without muon_lr). */
float colo_muon_lr_ratio(const colo_adamw_config_t *cfg);

/* The learning rate for step (0-based) under the schedule. */
float colo_lr_at(const colo_adamw_config_t *cfg, int step);

/* The factor clipping applies for a global gradient norm: min(1, clip/(norm+1e-6)), as
 * torch.nn.utils.clip_grad_norm_; clip 0 disables it (1). */
float colo_clip_factor(float clip, float norm);

/* The global L2 norm of the gradients and the factor clipping applies (colo_clip_factor). */
float colo_grad_norm(const colo_backend_t *be, const float *grads, size_t n, float clip,
                     float *scale_out);

/* One update with learning rate lr; gradients are multiplied by grad_scale first. With cfg.muon
 * Muon updates the blocks' weight matrices (muon.h), AdamW the rest. Returns 0, or the error of
 * Muon's gather over the tensor-parallel group (< 0). */
int colo_adamw_step(colo_adamw_t *opt, const colo_backend_t *be, colo_gpt_t *model, float lr,
                    float grad_scale);

/* AdamW (never Muon) on the flat parameter range [lo, hi) only, with moments m[0..hi-lo) for that
 * range and update number t (ZeRO: a rank updates the piece it owns). */
void colo_adamw_step_range(const colo_adamw_config_t *cfg, int t, const colo_backend_t *be,
                           colo_gpt_t *model, size_t lo, size_t hi, float *m, float *v, float lr,
                           float grad_scale);

#endif
