/* Muon for the blocks' weight matrices (muon.h). */
#include "muon.h"

#include <math.h>

int colo_muon_takes(const colo_param_t *p) {
  return p->ndim == 2 && (p->split == COLO_SPLIT_QKV || p->split == COLO_SPLIT_COLS ||
                          p->split == COLO_SPLIT_ROWS || p->split == COLO_SPLIT_GLU);
}

int colo_muon_blocks(const colo_param_t *p, colo_muon_block_t out[3]) {
  int rows = p->shape[0], cols = p->shape[1], n = 0;
  int at[4] = {0, cols, 0, 0};
  if (p->split ==
      COLO_SPLIT_QKV) { /* [C][q + 2·kv]: the queries' columns, the keys', the values' */
    int q = p->q_cols ? p->q_cols : cols / 3, kv = (cols - q) / 2;
    at[1] = q, at[2] = q + kv, at[3] = cols;
    n = 3;
  } else if (p->split == COLO_SPLIT_GLU) { /* [C][2H]: the gate's columns, then up's */
    at[1] = cols / 2, at[2] = cols;
    n = 2;
  } else
    n = 1;
  for (int i = 0; i < n; i++)
    out[i] = (colo_muon_block_t){(size_t)at[i], rows, at[i + 1] - at[i], cols};
  return n;
}

size_t colo_muon_work_floats(const colo_param_t *table, size_t n, int with_input) {
  size_t numel = 0, orth = 0;
  for (size_t i = 0; i < n; i++) {
    if (!colo_muon_takes(&table[i]))
      continue;
    colo_muon_block_t b[3];
    int k = colo_muon_blocks(&table[i], b);
    numel = table[i].numel > numel ? table[i].numel : numel;
    for (int j = 0; j < k; j++) {
      size_t r = (size_t)b[j].rows, c = (size_t)b[j].cols, s = r < c ? r : c;
      size_t w = 2 * r * c + 2 * s * s;
      orth = w > orth ? w : orth;
    }
  }
  return orth ? (with_input ? numel : 0) + orth : 0;
}

void colo_muon_orthogonalize(const colo_backend_t *be, const colo_param_t *p, float *u,
                             float *work) {
  colo_muon_block_t b[3];
  int k = colo_muon_blocks(p, b);
  for (int j = 0; j < k; j++) {
    int big = b[j].rows > b[j].cols ? b[j].rows : b[j].cols;
    be->muon_orth(u + b[j].offset, work, b[j].rows, b[j].cols, b[j].ld, COLO_MUON_NS_STEPS,
                  COLO_MUON_EPS, 0.2f * sqrtf((float)big));
  }
}

void colo_muon_tensor(const colo_backend_t *be, const colo_param_t *p, float *params,
                      const float *grads, float *m, float *work, float beta, float lr, float wd,
                      float grad_scale) {
  float *u = work;
  be->muon_momentum(u, grads + p->offset, m, p->numel, beta, grad_scale);
  colo_muon_orthogonalize(be, p, u, work + p->numel);
  be->muon_apply(params + p->offset, u, p->numel, lr, wd);
}
