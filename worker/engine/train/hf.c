/* HuggingFace layouts for export (hf.h). */
#include "hf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../../../common/error.h"
#include "checkpoint.h"
#include "data.h"
#include "safetensors.h"

/* the full table's tensor of this name, or NULL */
static const colo_param_t *find(const colo_param_t *t, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name))
      return &t[i];
  return NULL;
}

/* x as a JSON number of its shortest decimal that reads back as the same float (1e-06, not
 * 9.99999997e-07): what a config.json written by PyTorch holds */
static cJSON *float_number(float x) {
  char v[32];
  for (int d = 6; d <= 9; d++) {
    snprintf(v, sizeof v, "%.*g", d, (double)x);
    if (strtof(v, NULL) == x)
      break;
  }
  return cJSON_CreateNumber(strtod(v, NULL));
}

/* dst[o][i] = src[i][col0 + o] for o < rows, i < cols: columns [col0, col0 + rows) of an
 * [cols][ld] Conv1D matrix as an nn.Linear [rows][cols] one */
static void transpose_cols(float *dst, const float *src, int cols, int ld, int col0, int rows) {
  for (int o = 0; o < rows; o++)
    for (int i = 0; i < cols; i++)
      dst[(size_t)o * cols + i] = src[(size_t)i * ld + col0 + o];
}

/* LlamaForCausalLM's tensors, made from colo's llama table: 9 per layer (with Qwen2's 3 biases
 * or Qwen3's 2 norms), then the norm. */
static int write_llama(const colo_gpt_t *m, const float *params, const char *path, char *err,
                       size_t errlen) {
  const colo_gpt_config_t *c = colo_gpt_config(m);
  int C = c->n_embd, L = c->n_layer, H = colo_gpt_mlp_hidden(c), Q = colo_gpt_q_width(c);
  int KV = colo_gpt_kv_heads(c) * colo_gpt_head_size(c); /* key (value) rows */
  size_t nt;
  const colo_param_t *t = colo_gpt_full_table(m, &nt);
  size_t n = 3 + 14 * (size_t)L, total = 0;
  colo_st_tensor_t *ts = calloc(n, sizeof *ts);
  char(*names)[96] = calloc(n, sizeof *names);
  /* the transposed matrices: q and o Q·C, k and v KV·C, the MLP's 3CH floats a layer */
  size_t cc = (size_t)Q * C, kc = (size_t)KV * C;
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
              {"self_attn.q_proj.weight", b, Q, C},
              {"self_attn.k_proj.weight", b + cc, KV, C},
              {"self_attn.v_proj.weight", b + cc + kc, KV, C},
              {"self_attn.o_proj.weight", b + cc + 2 * kc, C, Q},
              {"post_attention_layernorm.weight", params + p[3]->full_offset, C, 0},
              {"mlp.gate_proj.weight", b + 2 * cc + 2 * kc, H, C},
              {"mlp.up_proj.weight", b + 2 * cc + 2 * kc + (size_t)H * C, H, C},
              {"mlp.down_proj.weight", b + 2 * cc + 2 * kc + 2 * (size_t)H * C, C, H}};
    if (c->hf_phi3) { /* Phi-3's: q, k, v as one [Q + 2·KV][C], gate and up as one [2H][C] */
      e[1].name = "self_attn.qkv_proj.weight", e[1].rows = Q + 2 * KV;
      e[6].name = "mlp.gate_up_proj.weight", e[6].rows = 2 * H;
      e[2].name = e[3].name = e[7].name = NULL; /* in those */
      transpose_cols((float *)e[1].data, qkv, C, Q + 2 * KV, 0, Q + 2 * KV);
      transpose_cols((float *)e[6].data, fc, C, 2 * H, 0, 2 * H);
    } else { /* q, k and v: column blocks of c_attn [C][Q + 2·KV] */
      transpose_cols((float *)e[1].data, qkv, C, Q + 2 * KV, 0, Q);
      transpose_cols((float *)e[2].data, qkv, C, Q + 2 * KV, Q, KV);
      transpose_cols((float *)e[3].data, qkv, C, Q + 2 * KV, Q + KV, KV);
      transpose_cols((float *)e[6].data, fc, C, 2 * H, 0, H); /* gate, then up */
      transpose_cols((float *)e[7].data, fc, C, 2 * H, H, H);
    }
    transpose_cols((float *)e[4].data, o, Q, C, 0, C);    /* c_proj [Q][C] */
    transpose_cols((float *)e[8].data, down, H, C, 0, C); /* [H][C] -> [C][H] */
    for (int j = 0; j < 9; j++) {
      if (!e[j].name)
        continue;
      snprintf(names[k], sizeof names[k], "model.layers.%d.%s", l, e[j].name);
      ts[k] = (colo_st_tensor_t){names[k],
                                 e[j].data,
                                 e[j].cols ? 2 : 1,
                                 {e[j].rows, e[j].cols},
                                 (size_t)e[j].rows * (e[j].cols ? (size_t)e[j].cols : 1)};
      k++;
    }
    snprintf(tn, sizeof tn, "transformer.h.%d.attn.c_attn.bias", l);
    const colo_param_t *qb = find(t, nt, tn);
    for (int j = 0; qb && j < 3; j++, k++) { /* Qwen2's q, k and v biases: c_attn.bias's parts */
      static const char *const bn[3] = {"q_proj", "k_proj", "v_proj"};
      snprintf(names[k], sizeof names[k], "model.layers.%d.self_attn.%s.bias", l, bn[j]);
      int rows = j ? KV : Q;
      ts[k] = (colo_st_tensor_t){names[k],
                                 params + qb->full_offset + (j ? Q + (j - 1) * KV : 0),
                                 1,
                                 {rows, 0},
                                 (size_t)rows};
    }
    for (int j = 0; j < 2; j++) { /* Qwen3's QK-norm scales */
      snprintf(tn, sizeof tn, "transformer.h.%d.attn.%c_norm.weight", l, j ? 'k' : 'q');
      const colo_param_t *qn = find(t, nt, tn);
      if (!qn)
        continue;
      snprintf(names[k], sizeof names[k], "model.layers.%d.self_attn.%c_norm.weight", l,
               j ? 'k' : 'q');
      ts[k++] = (colo_st_tensor_t){
          names[k - 1], params + qn->full_offset, 1, {qn->full_shape[0], 0}, qn->full_numel};
    }
  }
  ts[k++] =
      (colo_st_tensor_t){"model.norm.weight", params + lnf->full_offset, 1, {C, 0}, (size_t)C};
  const colo_param_t *head = find(t, nt, "lm_head.weight"); /* an untied head */
  if (head)
    ts[k++] = (colo_st_tensor_t){"lm_head.weight",
                                 params + head->full_offset,
                                 2,
                                 {head->full_shape[0], C},
                                 head->full_numel};
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

/* A model's files: one safetensors file, or the shards a model.safetensors.index.json names
 * (the Hub's layout for large models), each mapped once. */
enum { MAX_SHARDS = 256 };
typedef struct {
  colo_st_file_t f[MAX_SHARDS];
  int n;
} files_t;

static void files_close(files_t *fs) {
  for (int i = 0; i < fs->n; i++)
    colo_st_close(&fs->f[i]);
  fs->n = 0;
}

/* Opens path: a safetensors file, or an index (*.json) whose weight_map's files lie beside it
 * (plain names, no directories). */
static int files_open(const char *path, files_t *fs, char *err, size_t errlen) {
  fs->n = 0;
  size_t pl = strlen(path);
  if (pl < 5 || strcmp(path + pl - 5, ".json") != 0) {
    int rc = colo_st_open(path, &fs->f[0], err, errlen);
    fs->n = rc == 0;
    return rc;
  }
  char *text = NULL;
  size_t len = 0;
  int rrc = colo_read_file(path, &text, &len, err, errlen);
  if (rrc < 0)
    return rrc;
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
  if (!cJSON_IsObject(map)) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_EPARSE,
                     "%s: not a safetensors index (a JSON object with a weight_map)", path);
  }
  const char *slash = strrchr(path, '/');
  int dl = slash ? (int)(slash - path + 1) : 0, rc = 0;
  for (cJSON *it = map->child; it && rc == 0; it = it->next) {
    const char *file = cJSON_IsString(it) ? it->valuestring : NULL;
    if (!file || !*file || strchr(file, '/') || !strcmp(file, "..") || !strcmp(file, ".")) {
      rc = colo_fail(err, errlen, COLO_EPARSE,
                     "%s: tensor %s maps to \"%s\", not a file beside the index", path, it->string,
                     file ? file : "");
      break;
    }
    char fp[1400];
    snprintf(fp, sizeof fp, "%.*s%s", dl, path, file);
    int seen = 0;
    for (int i = 0; i < fs->n && !seen; i++)
      seen = !strcmp(fs->f[i].path, fp);
    if (seen)
      continue;
    if (fs->n == MAX_SHARDS)
      rc = colo_fail(err, errlen, COLO_EINVAL, "%s names more than %d files", path, MAX_SHARDS);
    else if ((rc = colo_st_open(fp, &fs->f[fs->n], err, errlen)) == 0)
      fs->n++;
  }
  cJSON_Delete(root);
  if (rc == 0 && fs->n == 0)
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: its weight_map names no file", path);
  if (rc < 0)
    files_close(fs);
  return rc;
}

/* the file holding tensor `name`, or NULL */
static const colo_st_file_t *files_find(const files_t *fs, const char *name) {
  for (int i = 0; i < fs->n; i++)
    if (cJSON_GetObjectItemCaseSensitive(fs->f[i].hdr, name))
      return &fs->f[i];
  return NULL;
}

/* colo_st_entry in whichever file holds the tensor */
static int files_entry(const files_t *fs, const char *name, const char **dtype, int *ndim,
                       long shape[2], const char **data, size_t *bytes) {
  const colo_st_file_t *f = files_find(fs, name);
  return f ? colo_st_entry(f, name, dtype, ndim, shape, data, bytes) : -1;
}

/* the HF tensor (pre + name) as fp32 [rows][cols] (cols 0: a vector) into dst */
static int get(const files_t *fs, const char *pre, const char *name, int rows, int cols, float *dst,
               char *err, size_t errlen) {
  char full[160];
  snprintf(full, sizeof full, "%s%s", pre, name);
  const colo_st_file_t *f = files_find(fs, full);
  if (!f)
    return colo_fail(err, errlen, COLO_EPARSE, "%s: no tensor %s", fs->f[0].path, full);
  int shape[2] = {rows, cols};
  return colo_st_get(f, full, cols ? 2 : 1, shape, dst, 1, err, errlen);
}

/* A layer's HF tensor suffix: 0..8 (the order of write_llama's), 9 the rotary buffer, 10..12
 * Qwen2's q, k and v biases, 13..14 Qwen3's QK-norm scales, 15..16 Phi-3's fused q, k, v and
 * gate, up; -1 none */
enum { PART_QKV_BIAS = 10, PART_QK_NORM = 13, PART_PHI3 = 15 };
static int layer_part(const char *rest) {
  static const char *const parts[] = {
      "input_layernorm.weight",        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
      "self_attn.v_proj.weight",       "self_attn.o_proj.weight", "post_attention_layernorm.weight",
      "mlp.gate_proj.weight",          "mlp.up_proj.weight",      "mlp.down_proj.weight",
      "self_attn.rotary_emb.inv_freq", "self_attn.q_proj.bias",   "self_attn.k_proj.bias",
      "self_attn.v_proj.bias",         "self_attn.q_norm.weight", "self_attn.k_norm.weight",
      "self_attn.qkv_proj.weight",     "mlp.gate_up_proj.weight"};
  for (int i = 0; i < (int)(sizeof parts / sizeof *parts); i++)
    if (!strcmp(rest, parts[i]))
      return i;
  return -1;
}

/* The files' names: all known, its layer count; the head tied (or, for an untied model, there). */
static int check_llama_names(const files_t *fs, const char *pre, const colo_gpt_config_t *c,
                             int *layers, char *err, size_t errlen) {
  int untied = c->untied_head;
  size_t pl = strlen(pre);
  *layers = 0;
  for (int k = 0; k < fs->n; k++)
    for (cJSON *it = fs->f[k].hdr->child; it; it = it->next) {
      const colo_st_file_t *f = &fs->f[k];
      const char *n = it->string;
      int l, used = 0;
      if (!strcmp(n, "__metadata__") || !strcmp(n, "lm_head.weight"))
        continue;
      if (strncmp(n, pre, pl) == 0 &&
          (!strcmp(n + pl, "embed_tokens.weight") || !strcmp(n + pl, "norm.weight")))
        continue;
      int part = -1;
      if (strncmp(n, pre, pl) == 0 && sscanf(n + pl, "layers.%d.%n", &l, &used) == 1 && used &&
          l >= 0 && l < 100000 && (part = layer_part(n + pl + used)) >= 0) {
        if (part >= PART_QKV_BIAS && part < PART_QK_NORM && !c->qkv_bias)
          return colo_fail(err, errlen, COLO_EINVAL,
                           "%s: tensor %s: the file's queries, keys and values have biases "
                           "(Qwen2's); this run's model has none (model.qkv_bias)",
                           f->path, n);
        if (part >= PART_QK_NORM && part < PART_PHI3 && !c->qk_norm)
          return colo_fail(err, errlen, COLO_EINVAL,
                           "%s: tensor %s: the file's query and key heads are normalized "
                           "(Qwen3's QK-norm); this run's model is not (model.qk_norm)",
                           f->path, n);
        *layers = l + 1 > *layers ? l + 1 : *layers;
        continue;
      }
      return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s is not part of a Llama model",
                       f->path, n);
    }
  const char *dt, *hd, *edata, *hdata;
  int nd;
  long es[2], hs[2];
  size_t eb, hb;
  char name[96];
  snprintf(name, sizeof name, "%sembed_tokens.weight", pre);
  int has_head = files_entry(fs, "lm_head.weight", &hd, &nd, hs, &hdata, &hb) == 0;
  if (untied && !has_head)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s has no lm_head.weight: its head is tied to the embedding, and this run's "
                     "model is not (model.tie_embeddings=false)",
                     fs->f[0].path);
  if (untied)
    return 0;
  if (has_head && (files_entry(fs, name, &dt, &nd, es, &edata, &eb) < 0 || strcmp(dt, hd) ||
                   eb != hb || memcmp(edata, hdata, eb) != 0))
    return colo_fail(
        err, errlen, COLO_EINVAL,
        "%s: lm_head.weight differs from %s, and this run's model ties its head to the "
        "embedding (model.tie_embeddings=false takes the file's head)",
        fs->f[0].path, name);
  return 0;
}

int colo_hf_read_llama(const char *path, colo_gpt_t *m, const colo_ckpt_sink_t *sink, char *err,
                       size_t errlen) {
  const colo_gpt_config_t *c = colo_gpt_config(m);
  int C = c->n_embd, H = colo_gpt_mlp_hidden(c), V = c->vocab_size, Q = colo_gpt_q_width(c);
  int hs = colo_gpt_head_size(c), KV = colo_gpt_kv_heads(c) * hs, W = Q + 2 * KV;
  if (c->arch != COLO_ARCH_LLAMA)
    return colo_fail(err, errlen, COLO_EINVAL, "%s: a Llama file initialises llama models only",
                     path);
  files_t *fs = calloc(1, sizeof *fs);
  if (!fs)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int rc = files_open(path, fs, err, errlen);
  if (rc < 0) {
    free(fs);
    return rc;
  }
  const char *pre = files_find(fs, "model.embed_tokens.weight") ? "model." : "";
  int layers = 0;
  rc = check_llama_names(fs, pre, c, &layers, err, errlen);
  if (rc == 0 && layers != c->n_layer)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s holds a Llama of %d layers; this run's model has %d (model.n_layer)", path,
                   layers, c->n_layer);
  /* the widths the names do not say: the queries', the key heads' and the MLP's */
  const char *dt, *data;
  int nd;
  long ks[2] = {0, 0}, gs[2] = {0, 0}, qs[2] = {0, 0};
  size_t bytes;
  char name[96];
  /* Phi-3 stores q, k and v as one matrix, [Q + 2·KV][C], and gate and up as one, [2H][C] */
  snprintf(name, sizeof name, "%slayers.0.self_attn.qkv_proj.weight", pre);
  int phi3 = files_find(fs, name) != NULL;
  if (phi3) {
    long fq[2] = {0, 0}, fg[2] = {0, 0};
    files_entry(fs, name, &dt, &nd, fq, &data, &bytes);
    snprintf(name, sizeof name, "%slayers.0.mlp.gate_up_proj.weight", pre);
    files_entry(fs, name, &dt, &nd, fg, &data, &bytes);
    if (rc == 0 && (fq[0] != W || fg[0] != 2 * H))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s has %ld rows of queries, keys and values (Phi-3's qkv_proj) and %ld of "
                     "gate and up (gate_up_proj); this run's model has %d (%d query heads and %d "
                     "key heads of %d: model.n_kv_head, head_dim) and %d (2 x mlp_hidden)",
                     path, fq[0], fg[0], W, c->n_head, colo_gpt_kv_heads(c), hs, 2 * H);
  }
  snprintf(name, sizeof name, "%slayers.0.self_attn.q_proj.weight", pre);
  files_entry(fs, name, &dt, &nd, qs, &data, &bytes);
  if (rc == 0 && qs[0] && qs[0] != Q)
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s has %ld rows of queries; this run's model has %d (n_head %d heads of %d: "
                   "model.head_dim)",
                   path, qs[0], Q, c->n_head, hs);
  snprintf(name, sizeof name, "%slayers.0.self_attn.k_proj.weight", pre);
  files_entry(fs, name, &dt, &nd, ks, &data, &bytes);
  snprintf(name, sizeof name, "%slayers.0.mlp.gate_proj.weight", pre);
  files_entry(fs, name, &dt, &nd, gs, &data, &bytes);
  if (rc == 0 && !phi3 && (ks[0] != KV || gs[0] != H))
    rc =
        colo_fail(err, errlen, COLO_EINVAL,
                  "%s has %ld rows of keys and an MLP %ld wide; this run's model has %d (n_kv_head "
                  "%d of n_head %d) and %d (model.n_kv_head, mlp_hidden)",
                  path, ks[0], gs[0], KV, colo_gpt_kv_heads(c), c->n_head, H);
  size_t nt, nf;
  const colo_param_t *t = colo_gpt_params_table(m, &nt), *full = colo_gpt_full_table(m, &nf);
  size_t biggest = 0;
  for (size_t i = 0; i < nf; i++)
    biggest = full[i].full_numel > biggest ? full[i].full_numel : biggest;
  /* one whole tensor in colo's layout, an HF matrix on its way there, and the part of this
   * rank's shard the sink takes: host memory for three tensors, never the whole model */
  float *whole = malloc(biggest * sizeof *whole), *hf = malloc(biggest * sizeof *hf);
  float *cut = malloc(biggest * sizeof *cut);
  if (rc == 0 && (!whole || !hf || !cut))
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for %zu floats", 3 * biggest);
  int tpr = colo_gpt_tp_rank(m), tp = colo_gpt_tp_size(m);
  for (size_t i = 0; rc == 0 && i < nt; i++) {
    const colo_param_t *p = &t[i];
    size_t lo = 0, hi = p->numel;
    if (sink->want)
      sink->want(sink->ctx, 0, p->offset, p->numel, &lo, &hi);
    if (lo >= hi) /* none of it is this rank's (a ZeRO-3 piece elsewhere) */
      continue;
    int l = -1, used = 0;
    const char *n = p->name;
    char hn[96];
    if (sscanf(n, "transformer.h.%d.%n", &l, &used) == 1 && used)
      n += used;
    if (l >= 0)
      snprintf(hn, sizeof hn, "layers.%d.", l);
    else
      hn[0] = '\0';
    size_t hl = strlen(hn);
#define HF(suffix) (snprintf(hn + hl, sizeof hn - hl, "%s", suffix), hn)
    if (!strcmp(n, "transformer.wte.weight")) {
      rc = get(fs, pre, "embed_tokens.weight", V, C, whole, err, errlen);
    } else if (!strcmp(n, "lm_head.weight")) {
      rc = get(fs, "", "lm_head.weight", V, C, whole, err, errlen);
    } else if (!strcmp(n, "transformer.ln_f.weight")) {
      rc = get(fs, pre, "norm.weight", C, 0, whole, err, errlen);
    } else if (!strcmp(n, "ln_1.weight") || !strcmp(n, "ln_2.weight")) {
      rc = get(fs, pre,
               HF(n[3] == '1' ? "input_layernorm.weight" : "post_attention_layernorm.weight"), C, 0,
               whole, err, errlen);
    } else if (!strcmp(n, "attn.c_attn.weight")) { /* q, k, v [out][C] -> [C][Q + 2·KV] */
      static const char *const qkv[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                         "self_attn.v_proj.weight"};
      for (int j = 0, col = 0; j < (phi3 ? 1 : 3) && rc == 0; j++) { /* Phi-3's: one [W][C] */
        int rows = phi3 ? W : j ? KV : Q;
        rc =
            get(fs, pre, HF(phi3 ? "self_attn.qkv_proj.weight" : qkv[j]), rows, C, hf, err, errlen);
        for (int o = 0; rc == 0 && o < rows; o++)
          for (int r = 0; r < C; r++)
            whole[(size_t)r * W + col + o] = hf[(size_t)o * C + r];
        col += rows;
      }
    } else if (!strcmp(n, "attn.c_attn.bias")) { /* Qwen2's q, k, v biases, one after another */
      static const char *const qkv[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias",
                                         "self_attn.v_proj.bias"};
      for (int j = 0, col = 0; j < 3 && rc == 0; j++) {
        int rows = j ? KV : Q;
        rc = get(fs, pre, HF(qkv[j]), rows, 0, whole + col, err, errlen);
        col += rows;
      }
    } else if (!strcmp(n, "attn.q_norm.weight") || !strcmp(n, "attn.k_norm.weight")) {
      rc = get(fs, pre, HF(n[5] == 'q' ? "self_attn.q_norm.weight" : "self_attn.k_norm.weight"), hs,
               0, whole, err, errlen);
    } else if (!strcmp(n, "attn.c_proj.weight")) { /* o [C][Q] -> [Q][C] */
      rc = get(fs, pre, HF("self_attn.o_proj.weight"), C, Q, hf, err, errlen);
      for (int o = 0; rc == 0 && o < C; o++)
        for (int r = 0; r < Q; r++)
          whole[(size_t)r * C + o] = hf[(size_t)o * Q + r];
    } else if (!strcmp(n, "mlp.c_fc.weight")) {             /* gate, up [H][C] -> [C][2H] */
      for (int j = 0; j < (phi3 ? 1 : 2) && rc == 0; j++) { /* Phi-3's: one [2H][C] */
        int rows = phi3 ? 2 * H : H;
        rc = get(fs, pre,
                 HF(phi3 ? "mlp.gate_up_proj.weight"
                    : j  ? "mlp.up_proj.weight"
                         : "mlp.gate_proj.weight"),
                 rows, C, hf, err, errlen);
        for (int o = 0; rc == 0 && o < rows; o++)
          for (int r = 0; r < C; r++)
            whole[(size_t)r * 2 * H + (size_t)j * H + o] = hf[(size_t)o * C + r];
      }
    } else if (!strcmp(n, "mlp.c_proj.weight")) { /* down [C][H] -> [H][C] */
      rc = get(fs, pre, HF("mlp.down_proj.weight"), C, H, hf, err, errlen);
      for (int o = 0; rc == 0 && o < C; o++)
        for (int r = 0; r < H; r++)
          whole[(size_t)r * C + o] = hf[(size_t)o * H + r];
    } else {
      rc = colo_fail(err, errlen, COLO_EINVAL, "no Llama tensor for %s", p->name);
    }
#undef HF
    for (size_t k = lo; rc == 0 && k < hi; k++) /* this rank's shard, the part it takes */
      cut[k - lo] = whole[colo_param_full_index(p, tpr, tp, k)];
    if (rc == 0)
      sink->put(sink->ctx, 0, p->offset + lo, cut, hi - lo);
  }
  free(whole);
  free(hf);
  free(cut);
  files_close(fs);
  free(fs);
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

/* j (consumed) as path's text, written whole or not at all */
static int write_json(cJSON *j, const char *path, char *err, size_t errlen) {
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  if (!text)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  char tmp[1500];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  int rc = 0, ok = f && fprintf(f, "%s\n", text) >= 0;
  if (f && fclose(f) != 0)
    ok = 0;
  if (!ok) {
    rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(errno));
    unlink(tmp);
  } else if (rename(tmp, path) != 0) {
    rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
  }
  free(text);
  return rc;
}

int colo_hf_write_config(const colo_gpt_config_t *c, const char *path, char *err, size_t errlen) {
  cJSON *j = cJSON_CreateObject();
  int llama = c->arch == COLO_ARCH_LLAMA;
  cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
  int qwen2 = llama && c->qkv_bias; /* Qwen2: Llama's block with q, k and v biases */
  int qwen3 = llama && c->qk_norm;  /* Qwen3: with its queries' and keys' heads normalized */
  /* Mistral (v0.1): Llama's block, attention in a sliding window (transformers' Llama has none) */
  int phi3 = llama && c->hf_phi3; /* Phi-3: Llama's block, its matrices fused (model.hf_layout) */
  int mistral = llama && !qwen2 && !qwen3 && !phi3 && c->sliding_window;
  cJSON_AddItemToArray(arch, cJSON_CreateString(phi3      ? "Phi3ForCausalLM"
                                                : qwen3   ? "Qwen3ForCausalLM"
                                                : qwen2   ? "Qwen2ForCausalLM"
                                                : mistral ? "MistralForCausalLM"
                                                : llama   ? "LlamaForCausalLM"
                                                          : "GPT2LMHeadModel"));
  cJSON_AddStringToObject(j, "model_type",
                          phi3      ? "phi3"
                          : qwen3   ? "qwen3"
                          : qwen2   ? "qwen2"
                          : mistral ? "mistral"
                          : llama   ? "llama"
                                    : "gpt2");
  cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
  if (llama) {
    cJSON_AddNumberToObject(j, "hidden_size", c->n_embd);
    cJSON_AddNumberToObject(j, "intermediate_size", colo_gpt_mlp_hidden(c));
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(j, "num_key_value_heads", colo_gpt_kv_heads(c));
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->block_size);
    cJSON_AddItemToObject(j, "rms_norm_eps", float_number(c->norm_eps > 0 ? c->norm_eps : 1e-5f));
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta > 0 ? c->rope_theta : 10000.0);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    if (qwen3 || c->head_dim) /* transformers' Llama reads it too (C/n_head without it) */
      cJSON_AddNumberToObject(j, "head_dim", colo_gpt_head_size(c));
    if (qwen2 || qwen3) { /* the window on every layer: from layer 0 on */
      cJSON_AddBoolToObject(j, "use_sliding_window", c->sliding_window > 0);
      if (c->sliding_window) {
        cJSON_AddNumberToObject(j, "sliding_window", c->sliding_window);
        cJSON_AddNumberToObject(j, "max_window_layers", 0);
      }
    } else if (mistral || (phi3 && c->sliding_window)) {
      cJSON_AddNumberToObject(j, "sliding_window", c->sliding_window);
    } else if (phi3) {
      cJSON_AddNullToObject(j, "sliding_window");
    }
    if (!qwen2) {
      cJSON_AddBoolToObject(j, "attention_bias", 0);
      cJSON_AddBoolToObject(j, "mlp_bias", 0);
    }
    if (c->rope_ext) { /* LongRoPE: transformers' rope_type longrope, its attention factor given,
                          the original context where its code reads it, at the top */
      cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
      /* Phi3Config takes three fields alone (type, short_factor, long_factor) and makes the
       * attention factor from max_position_embeddings / original: the positions that give it */
      cJSON_AddStringToObject(rs, phi3 ? "type" : "rope_type", "longrope");
      for (int k = 0; k < 2; k++) {
        cJSON *a = cJSON_AddArrayToObject(rs, k ? "long_factor" : "short_factor");
        for (int i = 0; i < c->rope_ext; i++)
          cJSON_AddItemToArray(a, float_number((k ? c->rope_long : c->rope_short)[i]));
      }
      double af = c->rope_attn > 0 ? c->rope_attn : 1.0;
      if (phi3) {
        double mp = af > 1 ? round(c->rope_orig * exp((af * af - 1) * log(c->rope_orig)))
                           : c->rope_orig,
               back = mp > c->rope_orig ? sqrt(1 + log(mp / c->rope_orig) / log(c->rope_orig)) : 1;
        if (fabs(back - af) > 1e-6 * af) {
          cJSON_Delete(j);
          return colo_fail(err, errlen, COLO_EINVAL,
                           "Phi-3's config gives LongRoPE's attention factor only through "
                           "max_position_embeddings (sqrt(1 + ln(max/original)/ln(original))); "
                           "the nearest, %.0f, gives %.6g, not this model's %.6g: export it "
                           "without model.hf_layout",
                           mp, back, af);
        }
        cJSON_ReplaceItemInObject(j, "max_position_embeddings", cJSON_CreateNumber(mp));
      } else {
        cJSON_AddNumberToObject(rs, "attention_factor", af);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_orig);
      }
      cJSON_AddNumberToObject(j, "original_max_position_embeddings", c->rope_orig);
    }
    if (c->rope_factor > 0.0f) { /* Llama 3.1's rescaling */
      cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
      cJSON_AddStringToObject(rs, "rope_type", "llama3");
      cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
      cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_low > 0 ? c->rope_low : 1.0);
      cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_high > 0 ? c->rope_high : 4.0);
      cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                              c->rope_orig > 0 ? c->rope_orig : 8192);
    }
  } else {
    cJSON_AddNumberToObject(j, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(j, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(j, "n_head", c->n_head);
    cJSON_AddNumberToObject(j, "n_positions", c->block_size);
    cJSON_AddNumberToObject(j, "n_inner", colo_gpt_mlp_hidden(c));
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
  }
  cJSON_AddBoolToObject(j, "tie_word_embeddings", !c->untied_head);
  cJSON_AddStringToObject(j, "torch_dtype", "float32");
  return write_json(j, path, err, errlen);
}

/* The HF modules a LoRA target's adapter is written as: colo_lora_parts', or for Phi-3's layout
 * the fused ones whole (qkv_proj takes c_attn's, gate_up_proj c_fc's) */
static int peft_parts(const colo_gpt_config_t *c, int target, colo_lora_part_t p[3]) {
  int np = colo_lora_parts(c, target, p);
  if (c->arch == COLO_ARCH_LLAMA && c->hf_phi3 && np > 1) {
    int rows = 0;
    for (int q = 0; q < np; q++)
      rows += p[q].rows;
    p[0].hf = target == 0 ? "self_attn.qkv_proj" : "mlp.gate_up_proj";
    p[0].rows = rows;
    np = 1;
  }
  return np;
}

int colo_hf_write_peft(const colo_lora_t *l, const colo_gpt_config_t *c, const float *adapters,
                       const char *base_model, const char *dir, char *err, size_t errlen) {
  const colo_lora_config_t *lc = colo_lora_config(l);
  int llama = c->arch == COLO_ARCH_LLAMA, r = lc->rank;
  size_t nt;
  const colo_param_t *tab = colo_lora_table(l, &nt);
  int ps = lc->dora ? 3 : 2;
  size_t cap = nt / (size_t)ps * 3 * 3; /* at most 3 parts of an A, a B and a magnitude */
  colo_st_tensor_t *t = calloc(cap, sizeof *t);
  char(*names)[160] = calloc(cap, sizeof *names);
  if (!t || !names) {
    free(t);
    free(names);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    free(t);
    free(names);
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", dir, strerror(errno));
  }
  size_t n = 0;
  for (size_t i = 0; i + 1 < nt; i += (size_t)ps) {
    const colo_param_t *a = &tab[i], *b = &tab[i + 1];
    int layer, k;
    colo_lora_site(l, i, &layer, &k);
    colo_lora_part_t parts[3];
    int np = peft_parts(c, k, parts);
    for (int q = 0; q < np; q++) {
      if (lc->dora) { /* PEFT's name for it: no ".weight" (its state dict drops it) */
        snprintf(names[n], sizeof names[n], "base_model.model.%s%d.%s.lora_magnitude_vector",
                 llama ? "model.layers." : "transformer.h.", layer, parts[q].hf);
        t[n] = (colo_st_tensor_t){names[n],
                                  adapters + tab[i + 2].offset + parts[q].row0,
                                  1,
                                  {parts[q].rows, 0},
                                  (size_t)parts[q].rows};
        n++;
      }
      snprintf(names[n], sizeof names[n], "base_model.model.%s%d.%s.lora_A.weight",
               llama ? "model.layers." : "transformer.h.", layer, parts[q].hf);
      t[n] = (colo_st_tensor_t){
          names[n], adapters + a->offset, 2, {a->shape[0], a->shape[1]}, a->numel};
      n++;
      snprintf(names[n], sizeof names[n], "base_model.model.%s%d.%s.lora_B.weight",
               llama ? "model.layers." : "transformer.h.", layer, parts[q].hf);
      t[n] = (colo_st_tensor_t){names[n],
                                adapters + b->offset + (size_t)parts[q].row0 * r,
                                2,
                                {parts[q].rows, r},
                                (size_t)parts[q].rows * r};
      n++;
    }
  }
  char path[1400], tmp[1500];
  snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int rc = colo_safetensors_write(tmp, t, n, err, errlen);
  if (rc == 0 && rename(tmp, path) != 0)
    rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, path, strerror(errno));
  if (rc < 0)
    unlink(tmp);
  free(t);
  free(names);
  if (rc < 0)
    return rc;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "peft_type", "LORA");
  cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
  if (base_model && base_model[0])
    cJSON_AddStringToObject(j, "base_model_name_or_path", base_model);
  else
    cJSON_AddNullToObject(j, "base_model_name_or_path");
  cJSON_AddNumberToObject(j, "r", r);
  cJSON_AddNumberToObject(j, "lora_alpha", lc->alpha);
  cJSON_AddNumberToObject(j, "lora_dropout", colo_lora_dropout_decimal(lc));
  cJSON_AddStringToObject(j, "bias", "none");
  cJSON_AddBoolToObject(j, "fan_in_fan_out", !llama); /* GPT-2's Conv1D: W is [in][out] */
  cJSON_AddBoolToObject(j, "use_rslora", lc->rslora != 0);
  cJSON_AddBoolToObject(j, "use_dora", lc->dora != 0);
  cJSON_AddBoolToObject(j, "inference_mode", 1);
  cJSON *tm = cJSON_AddArrayToObject(j, "target_modules");
  for (int k = 0; k < COLO_LORA_TARGETS; k++) {
    if (!(lc->targets & (1u << k)))
      continue;
    colo_lora_part_t parts[3];
    int np = peft_parts(c, k, parts);
    for (int q = 0; q < np; q++) /* PEFT matches a module by the end of its name */
      cJSON_AddItemToArray(tm,
                           cJSON_CreateString(llama ? strchr(parts[q].hf, '.') + 1 : parts[q].hf));
  }
  snprintf(path, sizeof path, "%s/adapter_config.json", dir);
  return write_json(j, path, err, errlen);
}

/* a number field of j into *out, or `def` when it is absent (or null); COLO_EPARSE when it is
 * something else */
static int opt_num(const cJSON *j, const char *key, double def, double *out, const char *path,
                   char *err, size_t errlen) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  *out = def;
  if (!v || cJSON_IsNull(v))
    return 0;
  if (!cJSON_IsNumber(v))
    return colo_fail(err, errlen, COLO_EPARSE, "%s: %s is not a number", path, key);
  *out = v->valuedouble;
  return 0;
}

/* an integer field in [1, max] that must be there */
static int int_field(const cJSON *j, const char *key, int max, int *out, const char *path,
                     char *err, size_t errlen) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, key);
  double v = 0;
  if (!f || cJSON_IsNull(f))
    return colo_fail(err, errlen, COLO_EPARSE, "%s: no %s", path, key);
  int rc = opt_num(j, key, 0, &v, path, err, errlen);
  if (rc < 0)
    return rc;
  if (!(v >= 1 && v <= max) || v != (int)v)
    return colo_fail(err, errlen, COLO_EINVAL, "%s: %s %g is not a whole number in [1, %d]", path,
                     key, v, max);
  *out = (int)v;
  return 0;
}

/* A sliding window (cfg->sliding_window) after the shape's fields: Mistral v0.1's sliding_window
 * on every layer (null from v0.2 on), and Phi-3's (2047 of Phi-3 mini's 4096); Qwen's, where
 * use_sliding_window, on the layers from max_window_layers on (transformers' default 28). A window
 * no shorter than the positions changes nothing and is left out. */
static int read_window(const cJSON *j, const char *type, colo_gpt_config_t *c, const char *file,
                       char *err, size_t errlen) {
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(j, "sliding_window");
  int qwen = !strncmp(type, "qwen", 4), w = 0, rc = 0;
  if (qwen ? !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "use_sliding_window"))
           : (strcmp(type, "mistral") && strcmp(type, "phi3")) || !sw || cJSON_IsNull(sw))
    return 0;
  rc = int_field(j, "sliding_window", 1 << 24, &w, file, err, errlen);
  double from = 0;
  if (rc == 0 && qwen)
    rc = opt_num(j, "max_window_layers", 28, &from, file, err, errlen);
  if (rc < 0 || w >= c->block_size || (qwen && from >= c->n_layer))
    return rc;
  if (from != 0)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "%s: use_sliding_window from layer %g of %d (max_window_layers): the layers "
                     "below it attend every earlier key, the rest %d; colo's window is every "
                     "layer's",
                     file, from, c->n_layer, w);
  c->sliding_window = w;
  return 0;
}

static const char *str_field(const cJSON *j, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* LongRoPE (rope_scaling of type longrope, or su as the first 128k Phi-3s wrote it), after the
 * shape's fields: short_factor and long_factor, a divisor for each rotated pair of a head; the
 * original context (the top-level original_max_position_embeddings, as Phi-3 and transformers'
 * code read it, else rope_scaling's, else max_position_embeddings); and the attention factor
 * (rope_scaling's, else transformers' default: sqrt(1 + ln s / ln original) for s =
 * max_position_embeddings / original above 1, else 1). */
static int read_longrope(const cJSON *j, const cJSON *rs, colo_gpt_config_t *c, const char *file,
                         char *err, size_t errlen) {
  int half = colo_gpt_head_size(c) / 2, rc = 0;
  for (int k = 0; k < 2 && rc == 0; k++) {
    const char *name = k ? "long_factor" : "short_factor";
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(rs, name);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != half || half > COLO_ROPE_EXT_MAX)
      return colo_fail(err, errlen, COLO_EINVAL,
                       "%s: rope_scaling's %s has %d values; LongRoPE wants one for each of the "
                       "%d rotated pairs of a head of %d",
                       file, name, cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0, half, 2 * half);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
      if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1e6))
        return colo_fail(err, errlen, COLO_EINVAL,
                         "%s: rope_scaling's %s[%d] is not a number above 0, at most 1e6", file,
                         name, i);
      (k ? c->rope_long : c->rope_short)[i++] = (float)v->valuedouble;
    }
  }
  double orig = 0, af = 0;
  rc = opt_num(j, "original_max_position_embeddings", 0, &orig, file, err, errlen);
  if (rc == 0 && orig == 0)
    rc = opt_num(rs, "original_max_position_embeddings", c->block_size, &orig, file, err, errlen);
  if (rc == 0)
    rc = opt_num(rs, "attention_factor", 0, &af, file, err, errlen);
  if (rc == 0 && !(orig >= 1 && orig <= (1 << 24) && orig == (int)orig && af >= 0 && af <= 100))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: LongRoPE's original context %g (a whole number of tokens) or attention "
                   "factor %g (0 to 100) is out of range",
                   file, orig, af);
  if (rc < 0)
    return rc;
  double s = c->block_size / orig; /* block_size is max_position_embeddings here */
  if (af == 0)
    af = s > 1 ? sqrt(1 + log(s) / log(orig)) : 1;
  c->rope_ext = half;
  c->rope_orig = (int)orig;
  c->rope_attn = (float)af;
  return 0;
}

int colo_hf_read_config(const char *path, colo_gpt_config_t *c, char *err, size_t errlen) {
  char *text = NULL, file[1200];
  size_t len = 0;
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(file, sizeof file, "%s/config.json", path);
  else
    snprintf(file, sizeof file, "%s", path);
  int rc = colo_read_file(file, &text, &len, err, errlen);
  if (rc < 0)
    return rc;
  cJSON *j = cJSON_ParseWithLength(text, len);
  free(text);
  const char *type = str_field(j, "model_type");
  memset(c, 0, sizeof *c);
  if (!cJSON_IsObject(j))
    rc = colo_fail(err, errlen, COLO_EPARSE, "%s: not a JSON object", file);
  else if (!type || (strcmp(type, "llama") && strcmp(type, "gpt2") && strcmp(type, "qwen2") &&
                     strcmp(type, "qwen3") && strcmp(type, "mistral") && strcmp(type, "phi3")))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "%s: model_type %s; colo reads llama's, mistral's, qwen2's, qwen3's, phi3's and "
                   "gpt2's (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                   "Qwen3ForCausalLM, Phi3ForCausalLM, GPT2LMHeadModel)",
                   file, type ? type : "(none)");
  if (rc < 0) {
    cJSON_Delete(j);
    return rc;
  }
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
  int qwen2 = !strcmp(type, "qwen2"), qwen3 = !strcmp(type, "qwen3");
  /* Phi-3's block is Llama's: its fused q, k, v and gate, up are read as they are
   * (colo_hf_read_llama) */
  int llama =
      qwen2 || qwen3 || !strcmp(type, "llama") || !strcmp(type, "mistral") || !strcmp(type, "phi3");
  c->arch = llama ? COLO_ARCH_LLAMA : COLO_ARCH_GPT2;
  c->qkv_bias = qwen2; /* Qwen2's q, k and v have biases; its o_proj and MLP none */
  c->qk_norm = qwen3;  /* Qwen3's none (attention_bias false), but its heads normalized */
  c->hf_phi3 = !strcmp(type, "phi3"); /* and exported in its layout again */
  rc = int_field(j, "vocab_size", 1 << 20, &c->vocab_size, file, err, errlen);
  if (rc == 0 && llama) {
    const char *act = str_field(j, "hidden_act");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    const char *rt =
        str_field(rs, "rope_type") ? str_field(rs, "rope_type") : str_field(rs, "type");
    int head_dim = 0;
    rc = int_field(j, "hidden_size", 1 << 16, &c->n_embd, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "num_hidden_layers", 1 << 10, &c->n_layer, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "num_attention_heads", 1 << 10, &c->n_head, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "intermediate_size", 1 << 20, &c->mlp_hidden, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "max_position_embeddings", 1 << 24, &c->block_size, file, err, errlen);
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(j, "num_key_value_heads"))
      rc = int_field(j, "num_key_value_heads", c->n_head, &c->n_kv_head, file, err, errlen);
    if (rc == 0 && cJSON_GetObjectItemCaseSensitive(j, "head_dim"))
      rc = int_field(j, "head_dim", 1 << 16, &head_dim, file, err, errlen);
    double theta = 10000, eps = 1e-5;
    if (rc == 0)
      rc = opt_num(j, "rope_theta", 10000, &theta, file, err, errlen);
    if (rc == 0 && !(theta > 0))
      rc = colo_fail(err, errlen, COLO_EINVAL, "%s: rope_theta %g is not positive", file, theta);
    c->rope_theta = (float)theta;
    if (rc == 0)
      rc = opt_num(j, "rms_norm_eps", 1e-5, &eps, file, err, errlen);
    if (rc == 0 && !(eps > 0 && eps <= 1e-2))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: rms_norm_eps %g; colo's is above 0, at most 0.01", file, eps);
    c->norm_eps = (float)eps;
    if (rc == 0 && act && strcmp(act, "silu"))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: hidden_act %s; colo's llama MLP is SwiGLU (silu)", file, act);
    if (rc == 0 && (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "attention_bias")) ||
                    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "mlp_bias"))))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: biases (attention_bias or mlp_bias); colo's llama has none", file);
    if (rc == 0 && !head_dim && c->n_embd % c->n_head)
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: hidden_size %d is not a multiple of num_attention_heads %d, and no "
                     "head_dim says the heads' width",
                     file, c->n_embd, c->n_head);
    double rotary = 1;
    if (rc == 0)
      rc = opt_num(j, "partial_rotary_factor", 1, &rotary, file, err, errlen);
    if (rc == 0 && rotary != 1)
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: partial_rotary_factor %g (Phi-4 mini's): colo rotates each head whole",
                     file, rotary);
    if (rc == 0 && head_dim && (c->n_embd % c->n_head || head_dim != c->n_embd / c->n_head))
      c->head_dim = head_dim; /* Qwen3 0.6B's 128 on 1024 (16 heads): queries 2048 wide */
    if (rc == 0)
      rc = read_window(j, type, c, file, err, errlen);
    if (rc == 0 && c->n_kv_head && c->n_head % c->n_kv_head)
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", file,
                     c->n_head, c->n_kv_head);
    if (rc == 0 && rs && !cJSON_IsNull(rs) && rt &&
        (!strcmp(rt, "longrope") || !strcmp(rt, "su"))) {
      rc = read_longrope(j, rs, c, file, err, errlen);
    } else if (rc == 0 && rs && !cJSON_IsNull(rs)) {
      if (!rt || strcmp(rt, "llama3"))
        rc = colo_fail(err, errlen, COLO_EINVAL,
                       "%s: rope_scaling of type %s; colo reads Llama 3's (llama3) and LongRoPE's "
                       "(longrope)",
                       file, rt ? rt : "(none)");
      double f = 0, lo = 1, hi = 4, orig = 8192;
      if (rc == 0)
        rc = opt_num(rs, "factor", 0, &f, file, err, errlen);
      if (rc == 0)
        rc = opt_num(rs, "low_freq_factor", 1, &lo, file, err, errlen);
      if (rc == 0)
        rc = opt_num(rs, "high_freq_factor", 4, &hi, file, err, errlen);
      if (rc == 0)
        rc = opt_num(rs, "original_max_position_embeddings", 8192, &orig, file, err, errlen);
      if (rc == 0 && !(f > 0 && lo > 0 && hi > lo && orig >= 1 && orig == (int)orig))
        rc = colo_fail(
            err, errlen, COLO_EINVAL,
            "%s: rope_scaling factor %g, low %g, high %g, original %g: not a Llama 3 rescaling",
            file, f, lo, hi, orig);
      c->rope_factor = (float)f;
      c->rope_low = (float)lo;
      c->rope_high = (float)hi;
      c->rope_orig = (int)orig;
    }
    c->untied_head = tie && cJSON_IsFalse(tie); /* transformers' default: tied */
  } else if (rc == 0) {
    const char *act = str_field(j, "activation_function");
    rc = int_field(j, "n_embd", 1 << 16, &c->n_embd, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "n_layer", 1 << 10, &c->n_layer, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "n_head", 1 << 10, &c->n_head, file, err, errlen);
    if (rc == 0)
      rc = int_field(j, "n_positions", 1 << 24, &c->block_size, file, err, errlen);
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(j, "n_inner");
    double eps = 1e-5;
    if (rc == 0 && inner && !cJSON_IsNull(inner))
      rc = int_field(j, "n_inner", 1 << 20, &c->mlp_hidden, file, err, errlen);
    if (rc == 0)
      rc = opt_num(j, "layer_norm_epsilon", 1e-5, &eps, file, err, errlen);
    if (rc == 0 && eps != 1e-5)
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: layer_norm_epsilon %g; colo's LayerNorm has 1e-5", file, eps);
    if (rc == 0 && act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: activation_function %s; colo's GPT-2 MLP is GELU's tanh form (gelu_new)",
                     file, act);
    if (rc == 0 && tie && cJSON_IsFalse(tie))
      rc = colo_fail(err, errlen, COLO_EINVAL,
                     "%s: tie_word_embeddings false; colo's gpt2 head is tied", file);
    if (rc == 0 && c->n_embd % c->n_head)
      rc = colo_fail(err, errlen, COLO_EINVAL, "%s: n_embd %d is not a multiple of n_head %d", file,
                     c->n_embd, c->n_head);
  }
  cJSON_Delete(j);
  return rc;
}
