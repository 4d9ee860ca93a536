/* HuggingFace's layouts of colo's models, for export: GPT-2's is colo's own (GPT2LMHeadModel's
 * names and Conv1D [in][out] matrices), so it needs only a config; a llama model is written as
 * LlamaForCausalLM holds it: separate q, k, v, o, gate, up and down projections as nn.Linear
 * [out][in] matrices, under model.layers.N.* names, the head tied to model.embed_tokens (or an
 * lm_head.weight of its own, model.tie_embeddings=false). */
#ifndef COLO_HF_H
#define COLO_HF_H

#include <stddef.h>

#include "../model/gpt.h"

/* Writes the whole (unsplit, one-rank) model's parameters `params` in HuggingFace's layout of
 * its architecture as a safetensors file at path (written whole or not at all). */
int colo_hf_write(const colo_gpt_t *m, const float *params, const char *path, char *err,
                  size_t errlen);

/* Reads a LlamaForCausalLM (or LlamaModel: names without "model.") safetensors file, F32, F16 or
 * BF16, or the shards a model.safetensors.index.json (path ending in .json) names beside it, into
 * this rank's parameters `params` (its table's layout: its pipeline stage's tensors, its
 * tensor-parallel shards), for a llama model of the same shape: layers, width, vocab, MLP width and
 * key heads (the query head count is not in the file; the rotation's base and the norms' eps
 * neither: colo's are 1e-5 and model.rope_theta). A tied model's file must be tied too (no
 * lm_head.weight, or one equal to the embedding); an untied model takes the file's lm_head.weight.
 * Older files' rotary_emb.inv_freq buffers are skipped; any other tensor is an error naming it. */
int colo_hf_read_llama(const char *path, colo_gpt_t *m, float *params, char *err, size_t errlen);

/* Writes a transformers config.json for cfg (GPT2Config or LlamaConfig, tied embeddings) at
 * path. */
int colo_hf_write_config(const colo_gpt_config_t *cfg, const char *path, char *err, size_t errlen);

/* Reads a transformers config.json (path, or path/config.json) of a LlamaForCausalLM or a
 * GPT2LMHeadModel into *cfg: the architecture and shape (block_size: max_position_embeddings or
 * n_positions, the longest the model knows), rope_theta, Llama 3's rope_scaling and whether the
 * head is tied. What colo's block cannot be is refused naming the field: another model_type,
 * biases, another activation or norm eps, a head_dim other than hidden_size / heads, another
 * rope_scaling type. */
int colo_hf_read_config(const char *path, colo_gpt_config_t *cfg, char *err, size_t errlen);

#endif
