/* Muon for the blocks' weight matrices (muon.h). */
#include "muon.h"

#include <math.h>

#include "../../../common/error.h"

int colo_muon_takes(const colo_param_t *p) {
  return p->ndim == 2 && (p->split == COLO_SPLIT_QKV || p->split == COLO_SPLIT_COLS ||
                          p->split == COLO_SPLIT_ROWS || p->split == COLO_SPLIT_GLU);
}

int colo_muon_shards(const colo_param_t *p) {
  int rows = p->split == COLO_SPLIT_ROWS, d = rows ? 0 : 1;
  if (p->ndim != 2 || p->shape[d] <= 0 || p->full_shape[d] <= p->shape[d])
    return 1;
  return p->full_shape[d] / p->shape[d];
}

int colo_muon_blocks(const colo_param_t *p, colo_muon_block_t out[3]) {
  int rows = p->shape[0], cols = p->shape[1], n = 0, tp = colo_muon_shards(p);
  int at[4] = {0, cols, 0, 0};
  if (p->split == COLO_SPLIT_QKV) {
    /* [C][q + 2·kv]: the queries' columns, the keys', the values' (each its 1/tp share) */
    int q = p->q_cols ? p->q_cols / tp : cols / 3, kv = (cols - q) / 2;
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

/* block b of tensor p whole: rows × cols over every shard */
static void whole(const colo_param_t *p, const colo_muon_block_t *b, int *rows, int *cols) {
  int tp = colo_muon_shards(p), by_rows = p->split == COLO_SPLIT_ROWS;
  *rows = by_rows ? b->rows * tp : b->rows;
  *cols = by_rows ? b->cols : b->cols * tp;
}

size_t colo_muon_work_floats(const colo_param_t *table, size_t n, int with_input) {
  size_t numel = 0, work = 0;
  for (size_t i = 0; i < n; i++) {
    if (!colo_muon_takes(&table[i]))
      continue;
    colo_muon_block_t b[3];
    int k = colo_muon_blocks(&table[i], b), tp = colo_muon_shards(&table[i]);
    numel = table[i].numel > numel ? table[i].numel : numel;
    for (int j = 0; j < k; j++) {
      int wr, wc;
      whole(&table[i], &b[j], &wr, &wc);
      size_t r = (size_t)wr, c = (size_t)wc, s = r < c ? r : c;
      /* the gathered matrix (tensor parallelism), then muon_orth's work for it */
      size_t w = (tp > 1 ? r * c : 0) + 2 * r * c + 2 * s * s;
      work = w > work ? w : work;
    }
  }
  return work ? (with_input ? numel : 0) + work : 0;
}

float colo_muon_scale(int rows, int cols, int original) {
  if (original)
    return sqrtf(cols > rows ? (float)cols / (float)rows : 1.0f);
  return 0.2f * sqrtf((float)(rows > cols ? rows : cols));
}

int colo_muon_orthogonalize(const colo_backend_t *be, const colo_param_t *p, float *u, float *work,
                            colo_comm_t *tp, int original) {
  colo_muon_block_t b[3];
  int k = colo_muon_blocks(p, b), shards = colo_muon_shards(p);
  int by_rows = p->split == COLO_SPLIT_ROWS;
  for (int j = 0; j < k; j++) {
    int wr, wc;
    whole(p, &b[j], &wr, &wc);
    float scale = colo_muon_scale(wr, wc, original);
    float *x = u + b[j].offset;
    if (shards == 1) {
      be->muon_orth(x, work, b[j].rows, b[j].cols, b[j].ld, COLO_MUON_NS_STEPS, COLO_MUON_EPS,
                    scale);
      continue;
    }
    if (!tp || colo_comm_size(tp) != shards)
      return COLO_EINVAL;
    /* the whole matrix from every rank's share: row blocks as they are; column blocks
     * transposed to rows, so that the shares stack into the matrix's transpose, orthogonalized
     * as such (the orthogonalization of a transpose is the transpose of the orthogonalization) */
    size_t slot = (size_t)b[j].rows * b[j].cols;
    float *all = work, *mine = all + (size_t)colo_comm_rank(tp) * slot;
    if (by_rows)
      be->copy(mine, x, slot * sizeof(float)); /* the one block, the whole local tensor */
    else
      be->muon_transpose(mine, b[j].rows, x, b[j].ld, b[j].rows, b[j].cols);
    int rc = tp->ops->all_gather(tp, all, slot);
    if (rc < 0)
      return rc;
    int r = by_rows ? wr : wc, c = by_rows ? wc : wr;
    be->muon_orth(all, all + (size_t)shards * slot, r, c, c, COLO_MUON_NS_STEPS, COLO_MUON_EPS,
                  scale);
    if (by_rows)
      be->copy(x, mine, slot * sizeof(float));
    else
      be->muon_transpose(x, b[j].ld, mine, b[j].rows, b[j].cols, b[j].rows);
  }
  return 0;
}

int colo_muon_tensor(const colo_backend_t *be, const colo_param_t *p, float *params,
                     const float *grads, float *m, float *work, colo_comm_t *tp, float beta,
                     float lr, float wd, float grad_scale, int original) {
  float *u = work;
  be->muon_momentum(u, grads + p->offset, m, p->numel, beta, grad_scale);
  int rc = colo_muon_orthogonalize(be, p, u, work + p->numel, tp, original);
  if (rc < 0)
    return rc;
  be->muon_apply(params + p->offset, u, p->numel, lr, wd);
  return 0;
}
