/* AdamW, the schedule and gradient clipping. */
#include "adamw.h"
#include "muon.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"

int colo_adamw_init(colo_adamw_t *opt, const colo_adamw_config_t *cfg, size_t n_params,
                    colo_pool_t *pool, char *err, size_t errlen) {
  opt->cfg = *cfg;
  opt->n = n_params;
  opt->t = 0;
  opt->pool = pool;
  opt->work = NULL;
  opt->tp = NULL;
  opt->hole = opt->hole_before = NULL;
  opt->n_hole = 0;
  opt->m = colo_pool_alloc(pool, n_params * sizeof(float), "optimizer state");
  opt->v = opt->m ? colo_pool_alloc(pool, n_params * sizeof(float), "optimizer state") : NULL;
  if (!opt->v) {
    snprintf(err, errlen, "%s", colo_pool_error(pool));
    colo_pool_free(pool, opt->m);
    opt->m = NULL;
    return COLO_ENOMEM;
  }
  return 0;
}

int colo_adamw_muon_init(colo_adamw_t *opt, const colo_gpt_t *model, int with_input,
                         colo_comm_t *tp, char *err, size_t errlen) {
  size_t nt;
  opt->tp = tp;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  size_t n = colo_muon_work_floats(table, nt, with_input);
  if (!n)
    return 0;
  opt->work = colo_pool_alloc(opt->pool, n * sizeof(float), "Muon's scratch");
  if (!opt->work) {
    snprintf(err, errlen, "%s", colo_pool_error(opt->pool));
    return COLO_ENOMEM;
  }
  return 0;
}

void colo_adamw_free(colo_adamw_t *opt) {
  colo_pool_free(opt->pool, opt->m);
  colo_pool_free(opt->pool, opt->v);
  colo_pool_free(opt->pool, opt->work);
  opt->m = opt->v = opt->work = NULL;
  free(opt->hole);
  free(opt->hole_before);
  opt->hole = opt->hole_before = NULL;
  opt->n_hole = 0;
}

size_t colo_adamw_v_floats(size_t n, const size_t *pairs, size_t n_pairs) {
  size_t gone = 0;
  for (size_t i = 0; i < n_pairs; i++)
    gone += pairs[2 * i + 1] - pairs[2 * i];
  return n - gone;
}

int colo_adamw_set_v(colo_adamw_t *opt, float *v, size_t n, const size_t *pairs, size_t n_pairs,
                     char *err, size_t errlen) {
  size_t *hole = NULL, *before = NULL;
  if (n_pairs) {
    hole = malloc(2 * n_pairs * sizeof *hole);
    before = malloc((n_pairs + 1) * sizeof *before);
    if (!hole || !before) {
      free(hole), free(before);
      snprintf(err, errlen, "no host memory for the optimizer's map");
      return COLO_ENOMEM;
    }
    memcpy(hole, pairs, 2 * n_pairs * sizeof *hole);
    before[0] = 0;
    for (size_t i = 0; i < n_pairs; i++)
      before[i + 1] = before[i] + hole[2 * i + 1] - hole[2 * i];
  }
  colo_pool_free(opt->pool, opt->v);
  free(opt->hole), free(opt->hole_before);
  opt->v = v, opt->n = n;
  opt->hole = hole, opt->hole_before = before, opt->n_hole = n_pairs;
  return 0;
}

int colo_adamw_drop_v(colo_adamw_t *opt, const size_t *pairs, size_t n_pairs, char *err,
                      size_t errlen) {
  size_t kept = colo_adamw_v_floats(opt->n, pairs, n_pairs);
  if (kept == opt->n || opt->n_hole)
    return 0;
  /* the kept second moments (all zero before a first step) in a buffer of their own size, the
   * old one freed first: the peak never holds both */
  colo_pool_free(opt->pool, opt->v);
  opt->v = NULL;
  float *v = colo_pool_alloc(opt->pool, (kept ? kept : 1) * sizeof(float), "optimizer state");
  if (!v) {
    snprintf(err, errlen, "%s", colo_pool_error(opt->pool));
    return COLO_ENOMEM;
  }
  int rc = colo_adamw_set_v(opt, v, opt->n, pairs, n_pairs, err, errlen);
  if (rc < 0)
    colo_pool_free(opt->pool, v);
  return rc;
}

/* the holes before offset i: the first hole whose end is past i, by bisection */
static size_t holes_below(const colo_adamw_t *opt, size_t i) {
  size_t lo = 0, hi = opt->n_hole;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (opt->hole[2 * mid + 1] <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

size_t colo_adamw_v_off(const colo_adamw_t *opt, size_t i) {
  return opt->n_hole ? i - opt->hole_before[holes_below(opt, i)] : i;
}

/* the kept runs of [off, off + n): each with its place in v, to or from h */
static void v_runs(const colo_adamw_t *opt, const colo_backend_t *be, size_t off, size_t n,
                   float *get, const float *put) {
  size_t end = off + n, i = off, h = holes_below(opt, off);
  while (i < end) {
    size_t a = h < opt->n_hole ? opt->hole[2 * h] : end,
           b = h < opt->n_hole ? opt->hole[2 * h + 1] : end;
    size_t stop = a < end ? a : end;
    if (i < stop) { /* kept: [i, stop), after the h holes before it */
      size_t at = i - opt->hole_before[h], bytes = (stop - i) * sizeof(float);
      if (get)
        be->to_host(get + (i - off), opt->v + at, bytes);
      else
        be->from_host(opt->v + at, put + (i - off), bytes);
      i = stop;
    }
    if (i >= end)
      break;
    size_t skip = b < end ? b : end; /* dropped: [i, skip) */
    if (get)
      memset(get + (i - off), 0, (skip - i) * sizeof(float));
    i = skip;
    h++;
  }
}

void colo_adamw_v_get(const colo_adamw_t *opt, const colo_backend_t *be, size_t off, size_t n,
                      float *h) {
  v_runs(opt, be, off, n, h, NULL);
}

void colo_adamw_v_put(const colo_adamw_t *opt, const colo_backend_t *be, size_t off, size_t n,
                      const float *h) {
  v_runs(opt, be, off, n, NULL, h);
}

float colo_muon_lr_ratio(const colo_adamw_config_t *c) {
  return c->muon_lr_ratio > 0.0f ? c->muon_lr_ratio : 1.0f;
}

float colo_lr_at(const colo_adamw_config_t *c, int step) {
  if (step < c->warmup_steps)
    return c->lr * (float)(step + 1) / (float)(c->warmup_steps + 1);
  if (c->schedule == 3 || c->total_steps <= c->warmup_steps)
    return c->lr;
  if (c->schedule == 4) { /* wsd: lr until the decay's first step, then linear to min_lr */
    int d = c->decay_steps > 0 ? c->decay_steps : 1, from = c->total_steps - d;
    if (step < from)
      return c->lr;
    float r = (float)(step - from) / (float)d;
    return c->min_lr + (1.0f - (r > 1.0f ? 1.0f : r)) * (c->lr - c->min_lr);
  }
  float ratio = (float)(step - c->warmup_steps) / (float)(c->total_steps - c->warmup_steps);
  if (ratio > 1.0f)
    ratio = 1.0f;
  float coeff = c->schedule == 2 ? 1.0f - ratio : 0.5f * (1.0f + cosf((float)M_PI * ratio));
  return c->min_lr + coeff * (c->lr - c->min_lr);
}

float colo_clip_factor(float clip, float norm) {
  return clip > 0.0f && clip / (norm + 1e-6f) < 1.0f ? clip / (norm + 1e-6f) : 1.0f;
}

float colo_grad_norm(const colo_backend_t *be, const float *grads, size_t n, float clip,
                     float *scale_out) {
  float norm = (float)sqrt(be->sumsq(grads, n));
  *scale_out = colo_clip_factor(clip, norm);
  return norm;
}

int colo_adamw_step(colo_adamw_t *opt, const colo_backend_t *be, colo_gpt_t *model, float lr,
                    float grad_scale) {
  opt->t++;
  const colo_adamw_config_t *c = &opt->cfg;
  if (!c->muon || !opt->work) {
    colo_adamw_step_range(c, opt->t, be, model, 0, colo_gpt_num_params(model), opt->m, opt->v, lr,
                          grad_scale);
    return 0;
  }
  /* Muon's tensors one by one, AdamW over the runs between them */
  size_t nt, lo = 0;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  float *p = colo_gpt_params(model), *g = colo_gpt_grads(model);
  for (size_t i = 0; i <= nt; i++) {
    if (i < nt && !colo_muon_takes(&table[i]))
      continue;
    size_t hi = i < nt ? table[i].offset : colo_gpt_num_params(model);
    if (hi > lo)
      colo_adamw_step_range(c, opt->t, be, model, lo, hi, opt->m + lo,
                            opt->v + colo_adamw_v_off(opt, lo), lr, grad_scale);
    if (i == nt)
      break;
    const colo_param_t *t = &table[i];
    int rc =
        colo_muon_tensor(be, t, p, g, opt->m + t->offset, opt->work, opt->tp, c->muon_momentum,
                         lr * colo_muon_lr_ratio(c), c->weight_decay, grad_scale, c->muon_original);
    if (rc < 0)
      return rc;
    lo = t->offset + t->numel;
  }
  return 0;
}

/* One call a run of adjacent tensors that share their decay (a block's LayerNorm parameters
 * and biases, say): the update is elementwise, so runs give what tensors give, in fewer calls
 * (GPT-2's 148 tensors are 98 runs; each call is a kernel on a GPU). */
void colo_adamw_step_range(const colo_adamw_config_t *c, int t, const colo_backend_t *be,
                           colo_gpt_t *model, size_t lo, size_t hi, float *m, float *v, float lr,
                           float grad_scale) {
  size_t nt;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  float *p = colo_gpt_params(model), *g = colo_gpt_grads(model);
  for (size_t i = 0; i < nt && lo < hi;) {
    size_t a = table[i].offset, b = a + table[i].numel;
    int decay = table[i].decay;
    for (i++; i < nt && table[i].decay == decay && table[i].offset == b; i++)
      b += table[i].numel;
    if (b <= lo || a >= hi)
      continue;
    size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
    be->adamw(p + x, g + x, m + (x - lo), v + (x - lo), y - x, lr, c->beta1, c->beta2, c->eps,
              decay ? c->weight_decay : 0.0f, grad_scale, t);
  }
}
