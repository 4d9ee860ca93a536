/* HuggingFace's layouts of colo's models, for export: GPT-2's is colo's own (GPT2LMHeadModel's
 * names and Conv1D [in][out] matrices), so it needs only a config; a llama model is written as
 * LlamaForCausalLM holds it: separate q, k, v, o, gate, up and down projections as nn.Linear
 * [out][in] matrices, under model.layers.N.* names, the head tied to model.embed_tokens (or an
 * lm_head.weight of its own, model.tie_embeddings=false). */
#ifndef COLO_HF_H
#define COLO_HF_H

#include <stddef.h>

#include "../model/gpt.h"
#include "../model/lora.h"
#include "checkpoint.h"

/* Writes the whole (unsplit, one-rank) model's parameters `params` in HuggingFace's layout of
 * its architecture as a safetensors file at path (written whole or not at all). */
int colo_hf_write(const colo_gpt_t *m, const float *params, const char *path, char *err,
                  size_t errlen);

/* Reads a LlamaForCausalLM (or LlamaModel: names without "model.") safetensors file, F32, F16 or
 * BF16, or the shards a model.safetensors.index.json (path ending in .json) names beside it, into
 * this rank's parameters, put into `sink` as kind 0 a tensor at a time (its table's layout: its
 * pipeline stage's tensors, its tensor-parallel shards; the part sink->want narrows to), for a
 * llama model of the same shape: layers, width, vocab, MLP width and key heads (the query head
 * count is not in the file; the rotation's base and the norms' eps neither: colo's are 1e-5 and
 * model.rope_theta). A tied model's file must be tied too (no lm_head.weight, or one equal to the
 * embedding); an untied model takes the file's lm_head.weight. Older files' rotary_emb.inv_freq
 * buffers are skipped; any other tensor is an error naming it. */
int colo_hf_read_llama(const char *path, colo_gpt_t *m, const colo_ckpt_sink_t *sink, char *err,
                       size_t errlen);

/* Writes a transformers config.json for cfg (GPT2Config or LlamaConfig, tied embeddings) at
 * path. */
int colo_hf_write_config(const colo_gpt_config_t *cfg, const char *path, char *err, size_t errlen);

/* Writes LoRA adapters as HuggingFace PEFT saves them, into directory dir (made if missing):
 * adapter_model.safetensors (base_model.model.<module>.lora_A.weight [r][in] and lora_B.weight
 * [out][r]) and adapter_config.json (peft_type LORA, r, lora_alpha, target_modules; base_model
 * the adapted model's path, or null). adapters: host floats in l's table layout; cfg: the model's.
 * GPT-2's modules are colo's own (Conv1D: fan_in_fan_out); a llama model's are LlamaForCausalLM's,
 * the fused products split as the model's export splits them: attn.c_attn into q_proj, k_proj and
 * v_proj, mlp.c_fc into gate_proj and up_proj, each with the same A and its rows of B (the same
 * update), attn.c_proj as o_proj and mlp.c_proj as down_proj. */
int colo_hf_write_peft(const colo_lora_t *l, const colo_gpt_config_t *cfg, const float *adapters,
                       const char *base_model, const char *dir, char *err, size_t errlen);

/* Reads a transformers config.json (path, or path/config.json) of a LlamaForCausalLM or a
 * GPT2LMHeadModel into *cfg: the architecture and shape (block_size: max_position_embeddings or
 * n_positions, the longest the model knows), rope_theta, Llama 3's rope_scaling and whether the
 * head is tied. What colo's block cannot be is refused naming the field: another model_type,
 * biases, another activation or norm eps, a head_dim other than hidden_size / heads, another
 * rope_scaling type. */
int colo_hf_read_config(const char *path, colo_gpt_config_t *cfg, char *err, size_t errlen);

#endif
