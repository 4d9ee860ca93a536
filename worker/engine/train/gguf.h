/* GGUF, llama.cpp's model file (version 3), for export: a model and its tokenizer in one file
 * that llama.cpp, and what is built on it (Ollama, LM Studio, node-llama-cpp), load as they load
 * a model converted by llama.cpp's convert_hf_to_gguf.py.
 *
 * Architectures: GPT-2's block as llama.cpp's "gpt2" (its fused q, k, v; the head tied: the
 * embedding is also written as output.weight); a llama model as "llama" (its q and k rows
 * reordered for llama.cpp's rotation of neighbouring pairs, as convert_hf_to_gguf.py does; Llama
 * 3's rope scaling as a rope_freqs tensor of per-frequency divisors) or, with Qwen2's q, k and v
 * biases, as "qwen2" (which rotates halves, as HF does, so nothing is reordered). Matrices and
 * embeddings in F32, F16, BF16 or Q8_0 (blocks of 32 values and their F16 scale, ggml's reference
 * quantizer; a matrix whose rows are not whole blocks is F16); norms, biases and rope_freqs in
 * F32.
 *
 * The tokenizer: a byte-level BPE (tokenizer.ggml.model "gpt2") with its tokens in GPT-2's
 * byte-level characters, their kinds (normal, control for special added tokens, user-defined for
 * the others, unused for ids the model has and the tokenizer does not), its merges and its
 * pre-tokenizer by llama.cpp's name for it; the beginning and end of text, and the chat template.
 * Without one (a model of bytes), the 256 bytes are its tokens and it has no merges. */
#ifndef COLO_GGUF_H
#define COLO_GGUF_H

#include <stddef.h>

#include "../model/gpt.h"
#include "../model/lora.h"
#include "bpe.h"

/* ggml's type numbers */
enum {
  COLO_GGUF_F32 = 0,
  COLO_GGUF_F16 = 1,
  COLO_GGUF_Q4_0 = 2,
  COLO_GGUF_Q8_0 = 8,
  COLO_GGUF_BF16 = 30
};

/* The type of a name ("f32", "f16", "bf16", "q8_0", "q4_0"); -1 for any other. */
int colo_gguf_type_parse(const char *name);

/* Whether tok (NULL: bytes) fits a model of V tokens in GGUF: a model of other than 256 tokens
 * needs one (named with `how` in the message), it may not have more tokens than the model, and
 * its pre-tokenizer must be one llama.cpp knows. 0, or COLO_EINVAL saying why. */
int colo_gguf_check(const colo_bpe_t *tok, int V, const char *how, char *err, size_t errlen);

/* llama.cpp's architecture a model is written as: gpt2, llama, qwen2 (model.qkv_bias) or qwen3
 * (model.qk_norm) */
const char *colo_gguf_arch(const colo_gpt_config_t *c);

/* Writes the whole (unsplit, one-rank) model's parameters as a GGUF file at path, its matrices
 * and embeddings of `type`, with tok's vocabulary (NULL: bytes), written whole or not at all.
 * name: general.name (NULL: none). COLO_EINVAL naming why when the model and tokenizer do not
 * fit GGUF or each other (a tokenizer of more tokens than the model's vocabulary, a
 * pre-tokenizer llama.cpp does not know). */
int colo_gguf_write(const colo_gpt_t *m, const float *params, const colo_bpe_t *tok, int type,
                    const char *name, const char *path, char *err, size_t errlen);

/* A LoRA run's adapters (adapters: host floats in l's table layout, for a model of shape c) as
 * llama.cpp's LoRA adapter file, for `llama-cli -m base.gguf --lora FILE` and what loads such
 * files: general.type "adapter", adapter.type "lora", adapter.lora.alpha, and for each adapted
 * matrix of the base's file (colo_gguf_write's names) <name>.lora_a (ne: in, r) and
 * <name>.lora_b (ne: r, out), F32. A fused product is split as the base's matrices are (Llama's
 * q, k, v and gate, up: the same A, each its rows of B), and B's rows of q and k reordered as
 * the base's are for the "llama" architecture. Written whole or not at all. */
int colo_gguf_write_lora(const colo_lora_t *l, const colo_gpt_config_t *c, const float *adapters,
                         const char *path, char *err, size_t errlen);

#endif
