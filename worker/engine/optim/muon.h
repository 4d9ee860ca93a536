/* Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers"; torch.optim.Muon) for the
 * blocks' weight matrices, with the update's RMS matched to AdamW's (Liu et al. 2025,
 * "Muon is Scalable for LLM Training": torch's adjust_lr_fn="match_rms_adamw"), so that
 * optimizer.lr, the schedule and weight_decay serve both. The embeddings, a separate head,
 * norms and biases stay with AdamW (optimizer.name: muon; adamw.h's colo_adamw_step runs both).
 *
 * Each matrix is orthogonalized by itself: attention's q, k and v (GPT-2's c_attn holds them
 * side by side, as columns), its output projection, the MLP's up projection (Llama's gate and up
 * each), and its down projection: a step of Muon on one is m = β·m + (1−β)·g, u = (1−β)·g + β·m
 * (Nesterov's), O = NewtonSchulz5(u), p = p·(1 − lr·wd) − lr·0.2·√max(rows, cols)·O. The
 * momentum lives in the moments' first buffer (the checkpoints' optimizer.exp_avg); these tensors
 * have no second moments (colo_adamw_drop_v). */
#ifndef COLO_MUON_H
#define COLO_MUON_H

#include <stddef.h>

#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../model/gpt.h"

#define COLO_MUON_NS_STEPS 5
#define COLO_MUON_EPS      1e-7f

/* One matrix Muon orthogonalizes: rows × cols at row stride ld, from `offset` within its
 * tensor. */
typedef struct {
  size_t offset;
  int rows, cols, ld;
} colo_muon_block_t;

/* Whether Muon updates tensor p (a block's 2-D weight, this rank's table); 0: AdamW does. */
int colo_muon_takes(const colo_param_t *p);
/* How many tensor-parallel ranks share tensor p's matrices (1: this rank holds them whole). */
int colo_muon_shards(const colo_param_t *p);
/* The matrices of tensor p (colo_muon_takes) as this rank holds them: q, k and v, gate and up, or
 * the whole (each its share under tensor parallelism); returns how many (1 to 3). */
int colo_muon_blocks(const colo_param_t *p, colo_muon_block_t out[3]);
/* The scratch a step needs, in floats of backend memory: for the largest of the matrices whole,
 * muon_orth's work and (split by tensor parallelism) room for the gathered matrix, after room
 * for the largest tensor's input when with_input (colo_muon_tensor's; ZeRO keeps the input in
 * its chunk buffer). 0: the model has none. */
size_t colo_muon_work_floats(const colo_param_t *table, size_t n, int with_input);
/* The factor Muon's orthogonalized update of a rows × cols matrix (colo's layout: rows in, cols
 * out) is scaled by: 0.2·√max(rows, cols), its RMS AdamW's; original: √max(1, cols/rows), as
 * torch.optim.Muon's adjust_lr_fn="original" for the nn.Linear (out × in) it would be. */
float colo_muon_scale(int rows, int cols, int original);
/* u: tensor p's Muon input, this rank's, in p's layout: each of its matrices replaced by its
 * orthogonalization scaled by colo_muon_scale of the matrix whole; work: muon_orth's, and
 * the gathered matrix's. A matrix split by tensor parallelism (colo_muon_shards > 1) is
 * all-gathered over tp, its group (rank t holding share t), orthogonalized whole by every rank,
 * and each keeps its share: every rank of the group must call this for the same tensors in the
 * same order. Returns 0, or the gather's error (< 0). */
int colo_muon_orthogonalize(const colo_backend_t *be, const colo_param_t *p, float *u, float *work,
                            colo_comm_t *tp, int original);
/* One Muon update of tensor p (colo_muon_takes) of the flat buffers params and grads: momentum m
 * (p's numel), momentum beta, learning rate lr, weight decay wd, gradients times grad_scale
 * first, the update scaled as colo_muon_scale's original says; work: colo_muon_work_floats of
 * backend memory; tp: p's tensor-parallel group (NULL when tp = 1). Returns 0 or the gather's
 * error. */
int colo_muon_tensor(const colo_backend_t *be, const colo_param_t *p, float *params,
                     const float *grads, float *m, float *work, colo_comm_t *tp, float beta,
                     float lr, float wd, float grad_scale, int original);

#endif
