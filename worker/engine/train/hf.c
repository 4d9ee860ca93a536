/* HuggingFace layouts for export (hf.h). */
#include "hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../../common/error.h"
#include "checkpoint.h"
#include "safetensors.h"

/* the full table's tensor of this name, or NULL */
static const colo_param_t *find(const colo_param_t *t, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name))
      return &t[i];
  return NULL;
}

/* dst[o][i] = src[i][col0 + o] for o < rows, i < cols: columns [col0, col0 + rows) of an
 * [cols][ld] Conv1D matrix as an nn.Linear [rows][cols] one */
static void transpose_cols(float *dst, const float *src, int cols, int ld, int col0, int rows) {
  for (int o = 0; o < rows; o++)
    for (int i = 0; i < cols; i++)
      dst[(size_t)o * cols + i] = src[(size_t)i * ld + col0 + o];
}

/* LlamaForCausalLM's tensors, made from colo's llama table: 9 per layer, then the norm. */
static int write_llama(const colo_gpt_t *m, const float *params, const char *path, char *err,
                       size_t errlen) {
  const colo_gpt_config_t *c = colo_gpt_config(m);
  int C = c->n_embd, L = c->n_layer, H = colo_gpt_mlp_hidden(c);
  int KV = colo_gpt_kv_heads(c) * (C / c->n_head); /* key (value) rows */
  size_t nt;
  const colo_param_t *t = colo_gpt_full_table(m, &nt);
  size_t n = 2 + 9 * (size_t)L, total = 0;
  colo_st_tensor_t *ts = calloc(n, sizeof *ts);
  char(*names)[96] = calloc(n, sizeof *names);
  /* the transposed matrices: q and o C², k and v KV·C, the MLP's 3CH floats a layer */
  size_t cc = (size_t)C * C, kc = (size_t)KV * C;
  size_t per = 2 * cc + 2 * kc + 3 * (size_t)C * H;
  float *buf = malloc(per * (size_t)L * sizeof *buf);
  if (!ts || !names || !buf) {
    free(ts), free(names), free(buf);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu floats", per * (size_t)L);
  }
  size_t k = 0;
  const colo_param_t *wte = find(t, nt, "transformer.wte.weight");
  const colo_param_t *lnf = find(t, nt, "transformer.ln_f.weight");
  ts[k++] = (colo_st_tensor_t){"model.embed_tokens.weight",
                               params + wte->full_offset,
                               2,
                               {wte->full_shape[0], C},
                               wte->full_numel};
  char tn[96];
  for (int l = 0; l < L; l++) {
    const colo_param_t *p[6];
    static const char *const which[6] = {"ln_1.weight", "attn.c_attn.weight", "attn.c_proj.weight",
                                         "ln_2.weight", "mlp.c_fc.weight",    "mlp.c_proj.weight"};
    for (int i = 0; i < 6; i++) {
      snprintf(tn, sizeof tn, "transformer.h.%d.%s", l, which[i]);
      if (!(p[i] = find(t, nt, tn))) {
        free(ts), free(names), free(buf);
        return colo_fail(err, errlen, COLO_EINVAL, "the model has no tensor %s", tn);
      }
    }
    const float *qkv = params + p[1]->full_offset, *o = params + p[2]->full_offset;
    const float *fc = params + p[4]->full_offset, *down = params + p[5]->full_offset;
    float *b = buf + (size_t)l * per;
    struct {
      const char *name;
      const float *data;
      int rows, cols;
    } e[9] = {{"input_layernorm.weight", params + p[0]->full_offset, C, 0},
              {"self_attn.q_proj.weight", b, C, C},
              {"self_attn.k_proj.weight", b + cc, KV, C},
              {"self_attn.v_proj.weight", b + cc + kc, KV, C},
              {"self_attn.o_proj.weight", b + cc + 2 * kc, C, C},
              {"post_attention_layernorm.weight", params + p[3]->full_offset, C, 0},
              {"mlp.gate_proj.weight", b + 2 * cc + 2 * kc, H, C},
              {"mlp.up_proj.weight", b + 2 * cc + 2 * kc + (size_t)H * C, H, C},
              {"mlp.down_proj.weight", b + 2 * cc + 2 * kc + 2 * (size_t)H * C, C, H}};
    /* q, k and v: column blocks of c_attn [C][C + 2·KV] */
    transpose_cols((float *)e[1].data, qkv, C, C + 2 * KV, 0, C);
    transpose_cols((float *)e[2].data, qkv, C, C + 2 * KV, C, KV);
    transpose_cols((float *)e[3].data, qkv, C, C + 2 * KV, C + KV, KV);
    transpose_cols((float *)e[4].data, o, C, C, 0, C);
    transpose_cols((float *)e[6].data, fc, C, 2 * H, 0, H); /* gate, then up */
    transpose_cols((float *)e[7].data, fc, C, 2 * H, H, H);
    transpose_cols((float *)e[8].data, down, H, C, 0, C); /* [H][C] -> [C][H] */
    for (int j = 0; j < 9; j++, k++) {
      snprintf(names[k], sizeof names[k], "model.layers.%d.%s", l, e[j].name);
      ts[k] = (colo_st_tensor_t){names[k],
                                 e[j].data,
                                 e[j].cols ? 2 : 1,
                                 {e[j].rows, e[j].cols},
                                 (size_t)e[j].rows * (e[j].cols ? (size_t)e[j].cols : 1)};
    }
  }
  ts[k++] =
      (colo_st_tensor_t){"model.norm.weight", params + lnf->full_offset, 1, {C, 0}, (size_t)C};
  for (size_t i = 0; i < k; i++)
    total += ts[i].numel;
  int rc = total == colo_gpt_full_numel(m)
               ? colo_safetensors_write(path, ts, k, err, errlen)
               : colo_fail(err, errlen, COLO_EINVAL,
                           "the LlamaForCausalLM layout holds %zu of the model's %zu parameters",
                           total, colo_gpt_full_numel(m));
  free(ts), free(names), free(buf);
  return rc;
}

int colo_hf_write(const colo_gpt_t *m, const float *params, const char *path, char *err,
                  size_t errlen) {
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int rc =
      colo_gpt_config(m)->arch == COLO_ARCH_LLAMA
          ? write_llama(m, params, tmp, err, errlen)
          : colo_ckpt_write_tensors(tmp, (colo_gpt_t *)m, params, NULL, NULL, NULL, err, errlen);
  if (rc == 0 && rename(tmp, path) != 0)
    rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, path, strerror(errno));
  if (rc < 0)
    unlink(tmp);
  return rc;
}

int colo_hf_write_config(const colo_gpt_config_t *c, const char *path, char *err, size_t errlen) {
  cJSON *j = cJSON_CreateObject();
  int llama = c->arch == COLO_ARCH_LLAMA;
  cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(llama ? "LlamaForCausalLM" : "GPT2LMHeadModel"));
  cJSON_AddStringToObject(j, "model_type", llama ? "llama" : "gpt2");
  cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
  if (llama) {
    cJSON_AddNumberToObject(j, "hidden_size", c->n_embd);
    cJSON_AddNumberToObject(j, "intermediate_size", colo_gpt_mlp_hidden(c));
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(j, "num_key_value_heads", colo_gpt_kv_heads(c));
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->block_size);
    cJSON_AddNumberToObject(j, "rms_norm_eps", 1e-5);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta > 0 ? c->rope_theta : 10000.0);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddBoolToObject(j, "mlp_bias", 0);
  } else {
    cJSON_AddNumberToObject(j, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNumberToObject(j, "n_positions", c->block_size);
    cJSON_AddNumberToObject(j, "n_inner", colo_gpt_mlp_hidden(c));
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
  }
  cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
  cJSON_AddStringToObject(j, "torch_dtype", "float32");
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  if (!text)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  int rc = 0;
  if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0) {
    rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(errno));
    unlink(tmp);
  } else if (rename(tmp, path) != 0) {
    rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
  }
  free(text);
  return rc;
}
