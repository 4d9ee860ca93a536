/* GPT-2 as HuggingFace computes it: pre-LayerNorm blocks (eps 1e-5), learned positions,
 * GELU-tanh MLP, causal attention, biases everywhere, the LM head tied to the token embedding.
 *
 * Parameters live in one allocation sliced by a size table, in layer-major order and
 * HuggingFace's names and layouts (Conv1D weights are [in][out]), so a checkpoint is the
 * allocation written tensor by tensor. Gradients mirror the parameters.
 *
 * All computation goes through a colo_backend_t. Activations are stored as its act_dtype; with
 * bf16 or fp16 the products read compute copies of the matrices, rounded from the fp32 parameters
 * as each block runs; tensor-parallel collectives and pipeline boundaries widen them to fp32 on
 * the way through (the communicators move fp32). Not thread-safe; one model per rank.
 */
#ifndef COLO_GPT_H
#define COLO_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../core/pool.h"

/* The block's architecture. GPT2: as above. LLAMA: Llama's block on the same skeleton: RMSNorm
 * (eps 1e-5) in place of LayerNorm, rotary positions (RoPE, rotate-half, on the queries and keys)
 * in place of learned ones, a SwiGLU MLP (silu(x·W_gate) ⊙ x·W_up, then W_down), no biases; the
 * LM head stays tied to the token embedding. */
enum { COLO_ARCH_GPT2 = 0, COLO_ARCH_LLAMA = 1 };

/* LongRoPE's divisors a frequency list holds at most: heads of up to 512 */
enum { COLO_ROPE_EXT_MAX = 256 };

typedef struct {
  int vocab_size;   /* V */
  int block_size;   /* maximum T */
  int n_layer;      /* L */
  int n_head;       /* NH */
  int n_embd;       /* C */
  int arch;         /* COLO_ARCH_*; 0: GPT-2 */
  int mlp_hidden;   /* the MLP's inner width H; 0: colo_gpt_mlp_hidden's default */
  float rope_theta; /* LLAMA: RoPE's base; 0: 10000 */
  int n_kv_head;    /* LLAMA: key and value heads (grouped-query attention); 0: n_head */
  int untied_head;  /* LLAMA: an LM head of its own (lm_head.weight [V][C], vocab-parallel, on the
                     * last stage) instead of the token embedding's transpose */
  /* LLAMA: Llama 3's RoPE rescaling (colo_rope_freqs; factor 0: none), with its low and high
   * frequency factors (0: 1 and 4) and original context (0: 8192) */
  float rope_factor, rope_low, rope_high;
  int rope_orig;
  float norm_eps;     /* LLAMA: RMSNorm's epsilon (Qwen2's 1e-6); 0: 1e-5 */
  int qkv_bias;       /* LLAMA: biases on the queries, keys and values (Qwen2's): attn.c_attn.bias
                       * [C + 2·KV], as GPT-2's */
  int qk_norm;        /* LLAMA: RMSNorm over each query and key head before the rotation (Qwen3's
                       * QK-norm): attn.q_norm.weight and attn.k_norm.weight [hs] */
  int head_dim;       /* LLAMA: each head's width hs where it is not C/n_head (Qwen3 0.6B's 128 on
                       * 1024); 0: C/n_head. The queries are then Q = n_head·hs wide, not C */
  int sliding_window; /* LLAMA: each query attends its W most recent keys, itself among them
                       * (Mistral 7B v0.1's 4096, HF's sliding_window), within its document as
                       * ever; 0: every earlier key */
  /* LLAMA: LongRoPE (Phi-3.5 mini's, the 128k Phi-3s'; 0: none): rope_ext = hs/2 divisors of
   * the frequencies, rope_short's for a block of up to rope_orig tokens and rope_long's beyond
   * (HF picks by the sequence's length, colo by the block's); rope_attn scales the rotated
   * queries and keys (HF's attention factor, on cos and sin; 0: 1) */
  int rope_ext;
  float rope_short[COLO_ROPE_EXT_MAX], rope_long[COLO_ROPE_EXT_MAX];
  float rope_attn;
  int hf_phi3; /* LLAMA: exported in Phi-3's layout (q, k, v and gate, up fused; model.hf_layout) */
} colo_gpt_config_t;

/* The divisors a LongRoPE model uses: rope_long's when its block passes rope_orig, else
 * rope_short's; NULL without LongRoPE. */
const float *colo_gpt_rope_ext(const colo_gpt_config_t *cfg);

/* cfg->n_kv_head, or n_head when 0 */
int colo_gpt_kv_heads(const colo_gpt_config_t *cfg);
/* a head's width hs: cfg->head_dim, or C/n_head when 0 */
int colo_gpt_head_size(const colo_gpt_config_t *cfg);
/* the queries' (and attention's output's) width Q = n_head·hs: C unless head_dim says otherwise */
int colo_gpt_q_width(const colo_gpt_config_t *cfg);

/* The MLP's inner width: cfg->mlp_hidden, or by default 4·C (GPT2) or 8·C/3 rounded up to a
 * multiple of 64 (LLAMA, near GPT-2's parameter count with three matrices instead of two). */
int colo_gpt_mlp_hidden(const colo_gpt_config_t *cfg);
/* The architecture's name ("gpt2", "llama"), and the value of a name (-1: none). */
const char *colo_gpt_arch_name(int arch);
int colo_gpt_arch_parse(const char *name);

/* How a tensor is split over a tensor-parallel group (Megatron 1-D). */
enum {
  COLO_SPLIT_NONE = 0, /* replicated: LayerNorm, positions, row-parallel biases */
  COLO_SPLIT_VOCAB,    /* rows of the token embedding / LM head */
  COLO_SPLIT_COLS,     /* column-parallel: the output columns (c_fc weight and bias) */
  COLO_SPLIT_QKV,      /* column-parallel by heads within each of q, k, v (c_attn) */
  COLO_SPLIT_ROWS,     /* row-parallel: the input rows (c_proj weights) */
  COLO_SPLIT_GLU,      /* column-parallel within each of gate and up (LLAMA's c_fc) */
};

/* One parameter tensor: its HF name, this rank's shape and place in the flat buffer, the full
 * tensor's shape and place in the full model, its split, and whether AdamW decays it (matrices
 * and embeddings yes; biases and LayerNorm no). */
typedef struct {
  char name[64];
  int ndim;
  int shape[2];
  size_t offset, numel;
  int full_shape[2];
  size_t full_offset, full_numel;
  int split;
  int decay;
  int q_cols; /* COLO_SPLIT_QKV: the full tensor's query columns (the rest: keys, then values,
               * as many each); 0: a third */
} colo_param_t;

/* p: whole-model tensor f (of a full table) as each of tp ranks holds it: its shard's shape and
 * numel (offset as f's). */
void colo_param_shard(const colo_param_t *f, int tp, colo_param_t *p);
/* Where element li of rank t's shard of p sits in the full tensor. */
size_t colo_param_full_index(const colo_param_t *p, int t, int tp, size_t li);

/* per block: ln_1.{weight,bias}, attn.c_attn.{weight,bias}, attn.c_proj.{weight,bias},
 * ln_2.{weight,bias}, mlp.c_fc.{weight,bias}, mlp.c_proj.{weight,bias}. LLAMA's blocks have the
 * weights only (6), its model no transformer.wpe nor ln_f.bias; its c_attn is q, k and v as
 * GPT-2's ([C][C + 2·KV] with n_kv_head heads of keys and of values, KV = n_kv_head·C/n_head;
 * attention repeats each to its n_head/n_kv_head query heads, HF's repeat_kv), its mlp.c_fc [C][2H]
 * the gate's columns then the up projection's, and its mlp.c_proj [H][C] the down projection.
 * With qk_norm (Qwen3's) a LLAMA block has attn.q_norm.weight and attn.k_norm.weight [C/n_head]
 * after c_attn's. COLO_GPT_TENSORS_PER_LAYER is GPT-2's count. */
#define COLO_GPT_TENSORS_PER_LAYER 12
/* the tensors of one block of cfg's architecture */
int colo_gpt_tensors_per_layer(const colo_gpt_config_t *cfg);

typedef struct colo_gpt_s colo_gpt_t;

/* Allocates parameters, gradients and activations for batches of up to max_B sequences of up
 * to block_size tokens, from `pool`. recompute: keep only each block's input and recompute the
 * block in backward (same results, less memory). */
int colo_gpt_create(const colo_gpt_config_t *cfg, int max_B, int recompute,
                    const colo_backend_t *be, colo_pool_t *pool, colo_gpt_t **out, char *err,
                    size_t errlen);
/* The same with tensor parallelism over the group tp (NULL or a group of one: none). This rank
 * holds its shard of every split tensor; n_head and vocab_size must divide by the group size.
 * Activations stay replicated across the group; the three collectives of Megatron's layers
 * (after the row-parallel products, before the column-parallel backward, and the vocab-parallel
 * loss) go through tp. */
int colo_gpt_create_tp(const colo_gpt_config_t *cfg, int max_B, int recompute,
                       const colo_backend_t *be, colo_comm_t *tp, colo_pool_t *pool,
                       colo_gpt_t **out, char *err, size_t errlen);
/* Megatron sequence parallelism on top of tensor parallelism: each rank of the group keeps
 * N/tp rows of the residual stream (B·T must divide by tp) and runs the LayerNorms and residual
 * adds on them; the LayerNorm outputs are all-gathered before the column-parallel products (again
 * in the backward, for their weight gradients) and the row-parallel products' outputs
 * reduce-scattered where plain tensor parallelism all-reduces them. The activations kept per
 * block for the backward that are not split by tensor parallelism (the LayerNorms' outputs and
 * statistics, the residual stream) shrink to those rows. Call after create, before use: it
 * allocates them again at their new size (COLO_ENOMEM, COLO_EINVAL with the reason in err). */
int colo_gpt_set_sequence_parallel(colo_gpt_t *m, int on, char *err, size_t errlen);
int colo_gpt_sequence_parallel(const colo_gpt_t *m);
/* Parameters of the whole (unsplit) model, and its table (full shapes and offsets). */
size_t colo_gpt_full_numel(const colo_gpt_t *m);
const colo_param_t *colo_gpt_full_table(const colo_gpt_t *m, size_t *n);
/* The tensor-parallel rank and group size. */
int colo_gpt_tp_rank(const colo_gpt_t *m);
int colo_gpt_tp_size(const colo_gpt_t *m);
/* The context-parallel group's size (1: none): every forward's T must divide by it. */
int colo_gpt_cp_size(const colo_gpt_t *m);
void colo_gpt_destroy(colo_gpt_t *m);

const colo_gpt_config_t *colo_gpt_config(const colo_gpt_t *m);
/* The parameter table, in buffer order. */
const colo_param_t *colo_gpt_params_table(const colo_gpt_t *m, size_t *n);
/* the operation table the model runs on */
const colo_backend_t *colo_gpt_backend(const colo_gpt_t *m);
float *colo_gpt_params(colo_gpt_t *m);
/* The gradients, made with the first colo_gpt_zero_grad or backward (NULL before, and always
 * for a frozen model or one under hooks). */
float *colo_gpt_grads(colo_gpt_t *m);
size_t colo_gpt_num_params(const colo_gpt_t *m);

/* GPT-2 initialisation: N(0, 0.02) for weights and embeddings, residual projections
 * (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2·n_layer)), biases 0, LayerNorm 1 and 0. */
void colo_gpt_init(colo_gpt_t *m, uint64_t seed);
/* The same values, a tensor at a time: put(ctx, off, v, n) gets this rank's n floats of the
 * tensor at offset off of the table's layout, in host memory (for a model made without a
 * parameter buffer, where colo_gpt_init does nothing). */
typedef void (*colo_gpt_put_fn)(void *ctx, size_t off, const float *v, size_t n);
void colo_gpt_init_each(colo_gpt_t *m, uint64_t seed, colo_gpt_put_fn put, void *ctx);

/* Forward over inputs[B][T]; with targets returns the cross-entropy's sum divided by B·T, else 0. B
 * ≤ max_B, T ≤ block_size. A target of -1 does not count: it adds nothing to the loss nor to the
 * gradients (the mean over those that count is the caller's: it knows how many count in the
 * whole batch). Without such targets the result is the mean cross-entropy. */
float colo_gpt_forward(colo_gpt_t *m, const int *inputs, const int *targets, int B, int T);
/* A training step's forward: colo_gpt_forward with targets, computing the loss's gradient for
 * colo_gpt_backward(m, loss_scale) with the loss, in one pass over the logits instead of two
 * (crossentropy_fused). The backward that follows must get the same loss_scale. Gradients are
 * those of colo_gpt_forward and colo_gpt_backward: the same bit for bit in fp32; in 16-bit
 * storage the probabilities are no longer rounded before the gradient is taken from them. */
float colo_gpt_forward_train(colo_gpt_t *m, const int *inputs, const int *targets, int B, int T,
                             float loss_scale);
/* Row `row` (= b·T + t) of the last forward's logits (without targets; probabilities after one
 * with targets, the loss's gradient after colo_gpt_forward_train) as V fp32 values in host
 * memory. */
void colo_gpt_read_logits(const colo_gpt_t *m, size_t row, float *dst);

/* Documents: with a document token (≥ 0), a token of the inputs equal to it begins a document
 * (GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>), and so does each row's first token. Each
 * forward then numbers the tokens by their place in their document, and a token attends only to
 * its document's tokens up to itself, at those positions (the learned position embedding's row,
 * or the rotary angle): each document in a window computes what it would alone, as Megatron's
 * reset_attention_mask and reset_position_ids together give. A pipeline stage needs the inputs
 * for that, whether first or not. -1 turns it off (the default). COLO_EINVAL for a token outside
 * the vocabulary, COLO_ENOMEM when the positions ([max_B][block_size] ints) do not fit the pool;
 * reason in err. */
int colo_gpt_set_documents(colo_gpt_t *m, int token, char *err, size_t errlen);
int colo_gpt_document_token(const colo_gpt_t *m);

/* Gradient hooks, for ZeRO stage 2: with them set, the model holds no gradient buffer of its
 * own. Before the backward writes a tensor's gradients it calls grads_begin for it, which must
 * return where they go (zeroed, valid until grads_ready); once they are final for this backward
 * it calls grads_ready. Each is called once per tensor per backward, in an order that is the same
 * on every rank: the LM head and final LayerNorm, the blocks from last to first, the
 * embeddings. A negative return stops the backward and is kept in colo_gpt_hook_error. */
typedef struct {
  float *(*grads_begin)(void *ctx, size_t tensor);
  int (*grads_ready)(void *ctx, size_t tensor);
  /* ZeRO stage 3 (may be NULL): the model holds no parameters of its own either; it fetches a
   * tensor's values before it uses them (forward, and again in backward) and releases them
   * after, also in an order the same on every rank. A frozen model (colo_gpt_set_lora) computes
   * no gradients of its tensors: its hooks may have fetch and release alone (grads_* NULL). */
  const float *(*params_fetch)(void *ctx, size_t tensor);
  void (*params_release)(void *ctx, size_t tensor);
} colo_gpt_hooks_t;

/* Installs hooks and frees the model's own gradient buffer (and, with params_fetch, its
 * parameter buffer: initialise and copy parameters out before); colo_gpt_grads (and
 * colo_gpt_params) then return NULL. */
void colo_gpt_set_hooks(colo_gpt_t *m, const colo_gpt_hooks_t *hooks, void *ctx);
int colo_gpt_hook_error(const colo_gpt_t *m);
/* Bytes of activations and scratch the model allocated (everything but parameters and
 * gradients). */
size_t colo_gpt_activation_bytes(const colo_gpt_t *m);

/* A pipeline stage: blocks [lo, hi), with the embedding when first and the final LayerNorm,
 * head and loss when last. A stage's model holds only its own tensors (the last stage also a
 * copy of the tied token embedding). */
typedef struct {
  int lo, hi, first, last;
  /* ZeRO-3 (no_params): the model makes no parameter buffer of its own (colo_gpt_params is
   * NULL): its values are initialised or loaded elsewhere (colo_gpt_init_each, a host buffer)
   * and fetched through hooks set before the first forward (colo_zero_attach_from), so that
   * set-up never holds the whole model in the backend's memory. */
  int no_params;
  /* Context parallelism (DeepSpeed-Ulysses; NULL or a group of one: none): the group's ranks
   * hold the same parameters and split every sequence, member c keeping tokens [c·T/cp,
   * (c + 1)·T/cp) of each row, and only those rows' activations. Attention exchanges them
   * (all-to-all) for a cp-th of the heads over every token, and back. The forward takes the whole
   * rows' inputs and targets (the same on every member) and returns the mean over all of them;
   * the gradients are each member's share of the mean's, for the caller to sum over the group
   * (with the data-parallel ranks'). block_size and the heads of each tensor-parallel rank must
   * divide by cp; T must, at each forward. colo_gpt_read_logits then reads this rank's rows
   * (b·T/cp + t), colo_gpt_read_losses the whole rows'; decoding needs a model without. */
  colo_comm_t *cp;
} colo_gpt_stage_t;

/* colo_gpt_create_tp for one pipeline stage (stage NULL: the whole model). */
int colo_gpt_create_stage(const colo_gpt_config_t *cfg, int max_B, int recompute,
                          const colo_backend_t *be, colo_comm_t *tp, const colo_gpt_stage_t *stage,
                          colo_pool_t *pool, colo_gpt_t **out, char *err, size_t errlen);
/* The blocks the model holds: [lo, hi) (all of them but for a pipeline stage). */
void colo_gpt_stage_layers(const colo_gpt_t *m, int *lo, int *hi);
/* The index in the parameter table of the stage's token embedding (-1: none), and whether it is
 * the last stage's tied copy (its gradient must be added to the first stage's; never with an
 * untied head). */
int colo_gpt_wte_index(const colo_gpt_t *m, int *tied_copy);
/* A stage's forward: from tokens (first stage) or from x_in, the previous stage's output (this
 * rank's rows under sequence parallelism, see colo_gpt_stage_rows). Returns the mean loss on the
 * last stage with targets, else 0; the output for the next stage is colo_gpt_stage_output. */
float colo_gpt_forward_stage(colo_gpt_t *m, const int *inputs, const float *x_in,
                             const int *targets, int B, int T);
const float *colo_gpt_stage_output(colo_gpt_t *m);
/* A stage's forward before its backward with loss_scale: on the last stage, the loss's gradient
 * computed with the loss, as colo_gpt_forward_train does (elsewhere colo_gpt_forward_stage). */
float colo_gpt_forward_stage_train(colo_gpt_t *m, const int *inputs, const float *x_in,
                                   const int *targets, int B, int T, float loss_scale);
/* A stage's backward: from the loss (last stage) or from d_out, the next stage's input gradient.
 * The gradient for the previous stage is colo_gpt_stage_input_grad. */
void colo_gpt_backward_stage(colo_gpt_t *m, float loss_scale, const float *d_out);
const float *colo_gpt_stage_input_grad(colo_gpt_t *m);
/* The floats of a [B·T][C] boundary tensor this rank sends and receives: all of it, or under
 * sequence parallelism its rows (x_in, d_out, the stage output and input gradient hold them). */
size_t colo_gpt_stage_rows(const colo_gpt_t *m, int B, int T);

/* Incremental decoding, for sampling: runs position pos of one sequence, token `token`, reading
 * the keys and values of positions [0, pos) that earlier calls cached (pos 0 starts a new
 * sequence), and writes its V logits to host memory. The same function as colo_gpt_forward's
 * last row, in a step's worth of a token's work instead of the whole prefix again: the products
 * run on one row, and attention is a row of scores against the cache (lmhead_fwd), its softmax
 * (crossentropy_fwd) and their product with the cached values (matmul_fwd), head by head. Needs
 * the whole model on one rank (no tensor parallelism, stages or hooks), fp32 storage, and
 * 0 ≤ pos < block_size; COLO_EINVAL otherwise (reason in err), COLO_ENOMEM when the cache
 * (2·L·T·C floats, allocated on the first call) does not fit the pool. */
int colo_gpt_decode(colo_gpt_t *m, int token, int pos, float *logits, char *err, size_t errlen);

/* The most rows (max_B · block_size) a forward takes. */
int colo_gpt_max_rows(const colo_gpt_t *m);
/* Whether the model keeps only each block's input and recomputes the rest (its recompute). */
int colo_gpt_recomputes(const colo_gpt_t *m);

/* LoRA (model/lora.h): with adapters set, the model's own tensors are frozen: it frees its
 * gradient buffer (colo_gpt_grads then returns NULL), its backward computes the input gradients
 * only, down to the first block (a later pipeline stage's: down to its input), and the adapters'
 * gradients, and the adapted products add their update forward and backward. Needs no tensor
 * parallelism and no hooks yet (ZeRO-3's fetch and release alone may be set after: the frozen
 * model sharded); NULL takes them off (the tensors stay frozen). COLO_EINVAL with the reason
 * otherwise. */
struct colo_lora_s;
int colo_gpt_set_lora(colo_gpt_t *m, struct colo_lora_s *lora, char *err, size_t errlen);
struct colo_lora_s *colo_gpt_lora(const colo_gpt_t *m);
/* A frozen model (colo_gpt_set_lora) with 16-bit activations keeps the blocks' four matrices
 * only as the compute copies its products read (2 bytes a value instead of the fp32 parameter
 * and, per block or shared, its copy), made once here from its parameters, which must be
 * loaded: the same computation, bit for bit; so is an untied head. colo_gpt_params then returns
 * NULL (the other tensors move to a buffer of their own). COLO_EINVAL for any other model (reason
 * in err), COLO_ENOMEM. */
int colo_gpt_freeze_matrices(colo_gpt_t *m, char *err, size_t errlen);

/* NEFTune (Jain et al. 2023; Transformers' neftune_noise_alpha): until set again with mag 0, each
 * forward adds uniform noise in [−mag, mag) to the embeddings (after the positions, before the
 * first block; the first stage's), element (row, col) of the batch's rows numbered from row0 and
 * keyed by key (core/rng.h's colo_noise_unit), so that a row has its noise on whichever rank runs
 * it. The noise is a constant in the backward; recomputation keeps the block inputs it made. */
void colo_gpt_set_noise(colo_gpt_t *m, float mag, uint64_t key, uint64_t row0);

/* QLoRA: a frozen model (colo_gpt_set_lora, no hooks) keeps the blocks' four matrices in NF4
 * alone (core/nf4.h: 4 bits a value and an fp32 absmax per 64), and its products read them
 * dequantized into one block's compute copies (act_dtype), by each block's forward and again by
 * its backward; an untied head with 16-bit activations is kept only as the compute copy its
 * product reads (rounded once); the other tensors stay fp32 in a buffer of their own. Values
 * already in the model are quantized now (through host memory, a tensor at a time; colo_gpt_params
 * then returns NULL); a model made without parameters (colo_gpt_stage_t.no_params) takes its values
 * after, through colo_gpt_put. The same training as the frozen model made from the dequantized
 * values (in 16-bit activations as colo_gpt_freeze_matrices keeps them), bit for bit. With
 * `pieces`, a model made without parameters leaves its values to ZeRO-3 (colo_zero_init, before
 * its hooks): it keeps nothing of them itself, and its storage (colo_gpt_storage_table) holds each
 * NF4 matrix packed into words (core/nf4.h), which the loop's loader packs (colo_gpt_pack_nf4) and
 * ZeRO shards, gathers and caches as it does any tensor. COLO_EINVAL for any other model,
 * COLO_ENOMEM. With dq, double quantization (core/nf4.h): each matrix's absmax values kept as
 * bytes and made again (dequant_scales) before each dequantization. colo_gpt_nf4: whether m
 * keeps its matrices in NF4. */
int colo_gpt_quantize_nf4(colo_gpt_t *m, int pieces, int dq, char *err, size_t errlen);
int colo_gpt_nf4(const colo_gpt_t *m);
/* The table of what the model's storage holds, which ZeRO plans over: colo_gpt_params_table's,
 * or with NF4 in pieces its packed matrices' sizes and the offsets that follow from them. */
const colo_param_t *colo_gpt_storage_table(const colo_gpt_t *m, size_t *n);
/* Parameter offset off (the params table's) in the storage: the offset there, its tensor, and
 * whether that tensor is a packed NF4 matrix (it comes whole, through colo_gpt_pack_nf4). */
size_t colo_gpt_storage_at(const colo_gpt_t *m, size_t off, size_t *tensor, int *packed);
/* Tensor i's fp32 values (host) as its packed storage (host, the storage table's numel words).
 * −1 when a value is not finite, −2 when out of memory. */
int colo_gpt_pack_nf4(const colo_gpt_t *m, size_t i, const float *v, float *packed);
/* how many values the blocks' four matrices hold on this rank (what NF4 quantizes) */
size_t colo_gpt_block_matrix_numel(const colo_gpt_t *m);
/* the bytes those take in NF4 (codes and scales, unpadded), with double quantization when dq */
size_t colo_gpt_nf4_bytes(const colo_gpt_t *m, int dq);
/* The values an NF4 model computes with, in fp32: the block matrices of params (host memory, the
 * model's layout) quantized and dequantized in place (for merging a QLoRA run's adapters into
 * the model they learnt against), with double quantization when dq. COLO_EINVAL for a value that
 * is not finite, COLO_ENOMEM. */
int colo_gpt_nf4_round(const colo_gpt_t *m, float *params, int dq, char *err, size_t errlen);
/* Puts n fp32 values from host memory at parameter offset off (colo_gpt_params_table's), into the
 * tensors where the model keeps them; an NF4 matrix must come whole, and is quantized. COLO_EINVAL
 * (reason in err) for a range the model does not keep, or an NF4 matrix in parts or not finite. */
int colo_gpt_put(colo_gpt_t *m, size_t off, const float *v, size_t n, char *err, size_t errlen);

void colo_gpt_zero_grad(colo_gpt_t *m);
/* Accumulates into the gradients d(loss · loss_scale)/dparams for the last forward, which must
 * have had targets. */
void colo_gpt_backward(colo_gpt_t *m, float loss_scale);
/* The last forward's (colo_gpt_forward with targets, not _train) losses, B·T of them in host
 * memory, row by row (0 where the target does not count). Under context parallelism the whole
 * rows', gathered from the group's pieces: a collective of the group (a failure stops the model:
 * colo_gpt_hook_error). */
void colo_gpt_read_losses(colo_gpt_t *m, float *dst);
/* Accumulates the gradients of Σ_n w[n]·loss_n for that forward: each row's loss weighted on
 * its own (w: B·T floats in host memory, of either sign), as DPO weighs its sequences' tokens.
 * Under context parallelism w is the whole rows', as read_losses gives them. */
void colo_gpt_backward_weighted(colo_gpt_t *m, const float *w);
/* Forwards use adapters l (NULL: none, the frozen model alone) in place of those set, until
 * swapped back; returns those. DPO's reference. Forwards only: a backward needs the forward of
 * the adapters set. */
struct colo_lora_s *colo_gpt_swap_lora(colo_gpt_t *m, struct colo_lora_s *l);

#endif
