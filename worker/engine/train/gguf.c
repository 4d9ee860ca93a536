/* GGUF export (gguf.h). */
#include "gguf.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "../backend/backend.h"
#include "../core/dtype.h"

#define ALIGN    32 /* general.alignment's default */
#define Q8_BLOCK 32 /* values a Q8_0 block holds */

/* GGUF's value types */
enum { V_U32 = 4, V_I32 = 5, V_F32 = 6, V_BOOL = 7, V_STRING = 8, V_ARRAY = 9 };
/* llama.cpp's token kinds */
enum { T_NORMAL = 1, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5 };

int colo_gguf_type_parse(const char *name) {
  return !strcmp(name, "f32")    ? COLO_GGUF_F32
         : !strcmp(name, "f16")  ? COLO_GGUF_F16
         : !strcmp(name, "bf16") ? COLO_GGUF_BF16
         : !strcmp(name, "q8_0") ? COLO_GGUF_Q8_0
         : !strcmp(name, "q4_0") ? COLO_GGUF_Q4_0
                                 : -1;
}

/* ---- the metadata, built in memory ---- */

typedef struct {
  char *p;
  size_t n, cap;
  int oom;
  uint64_t kvs; /* key-value pairs written */
} mem_t;

static void put(mem_t *b, const void *v, size_t n) {
  if (b->oom)
    return;
  if (b->n + n > b->cap) {
    size_t c = b->cap ? b->cap : 4096;
    while (c < b->n + n)
      c *= 2;
    char *p = realloc(b->p, c);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = c;
  }
  memcpy(b->p + b->n, v, n);
  b->n += n;
}

static void put_u32(mem_t *b, uint32_t v) {
  put(b, &v, 4);
}
static void put_u64(mem_t *b, uint64_t v) {
  put(b, &v, 8);
}
static void put_strn(mem_t *b, const char *s, size_t n) {
  put_u64(b, n);
  put(b, s, n);
}
static void put_str(mem_t *b, const char *s) {
  put_strn(b, s, strlen(s));
}

static void key(mem_t *b, const char *arch, const char *k, uint32_t type) {
  char full[160];
  snprintf(full, sizeof full, "%s%s%s", arch ? arch : "", arch ? "." : "", k);
  put_str(b, full);
  put_u32(b, type);
  b->kvs++;
}
static void kv_u32(mem_t *b, const char *arch, const char *k, uint32_t v) {
  key(b, arch, k, V_U32);
  put_u32(b, v);
}
static void kv_f32(mem_t *b, const char *arch, const char *k, float v) {
  key(b, arch, k, V_F32);
  put(b, &v, 4);
}
static void kv_bool(mem_t *b, const char *k, int v) {
  key(b, NULL, k, V_BOOL);
  unsigned char c = v != 0;
  put(b, &c, 1);
}
static void kv_str(mem_t *b, const char *arch, const char *k, const char *v) {
  key(b, arch, k, V_STRING);
  put_str(b, v);
}
static void array_head(mem_t *b, const char *k, uint32_t type, uint64_t n) {
  key(b, NULL, k, V_ARRAY);
  put_u32(b, type);
  put_u64(b, n);
}

/* The tokenizer's keys for a model of V tokens (tok NULL: its 256 bytes). */
int colo_gguf_check(const colo_bpe_t *tok, int V, const char *how, char *err, size_t errlen) {
  if (!tok && V != 256)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "the model has %d tokens, so its tokens are not bytes: name its tokenizer "
                     "with %s (a tokenizer.json, or a folder of one or of vocab.json and "
                     "merges.txt)",
                     V, how);
  if (tok && colo_bpe_vocab_size(tok) > V)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "the tokenizer has %d tokens, more than the model's vocabulary of %d",
                     colo_bpe_vocab_size(tok), V);
  if (tok && colo_bpe_sentencepiece(tok))
    return colo_fail(err, errlen, COLO_EINVAL,
                     "the tokenizer is SentencePiece's kind (byte_fallback: Llama 2's, "
                     "Mistral's); colo writes GGUF's byte-level BPE vocabularies (GPT-2's, Llama "
                     "3's, Qwen2's) only");
  if (tok && !colo_bpe_pre_name(tok))
    return colo_fail(err, errlen, COLO_EINVAL,
                     "the tokenizer's pre-tokenizer is none that llama.cpp knows (GGUF names "
                     "GPT-2's, Llama 3's and Qwen2's)");
  return 0;
}

/* The tokenizer's keys for a model of V tokens (tok NULL: its 256 bytes); colo_gguf_check
 * passed. */
static int tokenizer_keys(mem_t *b, const colo_bpe_t *tok, int V, char *err, size_t errlen) {
  const char *pre = tok ? colo_bpe_pre_name(tok) : "gpt-2";
  kv_str(b, NULL, "tokenizer.ggml.model", "gpt2");
  kv_str(b, NULL, "tokenizer.ggml.pre", pre);
  int doc_bos = 0, doc = tok ? colo_bpe_doc_token(tok, &doc_bos) : -1;
  array_head(b, "tokenizer.ggml.tokens", V_STRING, (uint64_t)V);
  char s[1024];
  for (int id = 0; id < V; id++) {
    int kind = tok ? colo_bpe_token_kind(tok, id) : id < 256 ? COLO_BPE_NORMAL : COLO_BPE_NONE;
    size_t len = 0;
    const char *raw =
        kind == COLO_BPE_SPECIAL || kind == COLO_BPE_ADDED ? colo_bpe_token(tok, id, &len) : NULL;
    if (raw) {
      put_strn(b, raw, len);
    } else if (kind == COLO_BPE_NORMAL && tok) {
      int k = colo_bpe_byte_level(tok, id, s, sizeof s);
      if (k < 0)
        return colo_fail(err, errlen, COLO_EINVAL, "token %d is longer than %zu bytes", id,
                         sizeof s / 2);
      put_strn(b, s, (size_t)k);
    } else if (kind == COLO_BPE_NORMAL) { /* byte id, in its byte-level character */
      put_strn(b, s, (size_t)colo_bpe_byte_char(id, s));
    } else {
      int k = snprintf(s, sizeof s, "[PAD%d]", id);
      put_strn(b, s, (size_t)k);
    }
  }
  array_head(b, "tokenizer.ggml.token_type", V_I32, (uint64_t)V);
  for (int id = 0; id < V; id++) {
    int kind = tok ? colo_bpe_token_kind(tok, id) : id < 256 ? COLO_BPE_NORMAL : COLO_BPE_NONE;
    /* GPT-2's vocab.json has no added tokens: its delimiter, <|endoftext|>, is one */
    int32_t t =
        kind == COLO_BPE_SPECIAL || (tok && kind == COLO_BPE_NORMAL && id == doc && !doc_bos)
            ? T_CONTROL
        : kind == COLO_BPE_ADDED  ? T_USER
        : kind == COLO_BPE_NORMAL ? T_NORMAL
                                  : T_UNUSED;
    put(b, &t, 4);
  }
  int *pairs = NULL;
  size_t nm = 0;
  if (tok && colo_bpe_merges(tok, &pairs, &nm) < 0)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the merges");
  array_head(b, "tokenizer.ggml.merges", V_STRING, (uint64_t)nm);
  for (size_t i = 0; i < nm; i++) {
    int ka = colo_bpe_byte_level(tok, pairs[2 * i], s, sizeof s);
    int kb =
        ka < 0 ? -1
               : colo_bpe_byte_level(tok, pairs[2 * i + 1], s + ka + 1, sizeof s - (size_t)ka - 1);
    if (kb < 0) {
      free(pairs);
      return colo_fail(err, errlen, COLO_EINVAL, "merge %zu is longer than %zu bytes", i,
                       sizeof s / 2);
    }
    s[ka] = ' ';
    put_strn(b, s, (size_t)(ka + 1 + kb));
  }
  free(pairs);
  int eos = tok ? colo_bpe_eos(tok) : -1;
  if (eos < 0 && doc >= 0 && !doc_bos)
    eos = doc; /* a delimiter between documents ends each (GPT-2's <|endoftext|>) */
  if (doc >= 0)
    kv_u32(b, NULL, "tokenizer.ggml.bos_token_id", (uint32_t)doc);
  if (eos >= 0)
    kv_u32(b, NULL, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
  kv_bool(b, "tokenizer.ggml.add_bos_token", doc >= 0 && doc_bos);
  kv_bool(b, "tokenizer.ggml.add_eos_token", 0);
  const char *tmpl = tok ? colo_bpe_chat_template(tok) : NULL;
  if (tmpl)
    kv_str(b, NULL, "tokenizer.chat_template", tmpl);
  return 0;
}

/* ---- tensors ---- */

enum { OP_COPY = 0, OP_COLS, OP_ROWS };

typedef struct {
  char name[96];
  int ndim;
  uint64_t ne[2]; /* ne[0]: the contiguous dimension */
  int type;
  const float *src;
  /* OP_COLS: columns [col0, col0 + ne[1]) of src, a [ne[0]][ld] matrix (colo's, as Conv1D's:
   * [in][out]), as rows: out[o][i] = src[i][col0 + o]; with pairs > 0 the rows of each head of
   * `pairs` rows reordered from rotated halves to neighbouring pairs (out's row 2j + s of a head
   * is its row s·pairs/2 + j). OP_ROWS: rows [col0, col0 + ne[1]) of src, a matrix of rows of
   * ld = ne[0] values, reordered by `pairs` likewise. */
  int op;
  size_t ld, col0;
  int pairs;
  uint64_t offset;
  float *own; /* data made here (rope_freqs), freed with the table */
} tensor_t;

typedef struct {
  tensor_t *v;
  size_t n, cap;
} tensors_t;

static tensor_t *add(tensors_t *t, const char *name, int ndim, uint64_t ne0, uint64_t ne1, int type,
                     const float *src) {
  if (t->n == t->cap) {
    size_t c = t->cap ? 2 * t->cap : 64;
    tensor_t *v = realloc(t->v, c * sizeof *v);
    if (!v)
      return NULL;
    t->v = v;
    t->cap = c;
  }
  tensor_t *x = &t->v[t->n++];
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", name);
  x->ndim = ndim;
  x->ne[0] = ne0;
  x->ne[1] = ndim > 1 ? ne1 : 1;
  /* vectors stay F32, as llama.cpp's converter has them; Q8_0 and Q4_0 take rows of whole
   * blocks; under Q4_0 the token embedding and the head stay at 8 bits (llama.cpp's quantizer
   * too keeps the head above the rest) */
  if (type == COLO_GGUF_Q4_0 &&
      (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")))
    type = COLO_GGUF_Q8_0;
  x->type = ndim == 1 ? COLO_GGUF_F32
            : (type == COLO_GGUF_Q8_0 || type == COLO_GGUF_Q4_0) && ne0 % Q8_BLOCK != 0
                ? COLO_GGUF_F16
                : type;
  x->src = src;
  return x;
}

/* columns [col0, col0 + rows) of src [in][ld] as a [rows][in] matrix (cols()'s comment) */
static tensor_t *add_cols(tensors_t *t, const char *name, int in, int rows, int type,
                          const float *src, size_t ld, size_t col0, int pairs) {
  tensor_t *x = add(t, name, 2, (uint64_t)in, (uint64_t)rows, type, src);
  if (x) {
    x->op = OP_COLS;
    x->ld = ld;
    x->col0 = col0;
    x->pairs = pairs;
  }
  return x;
}

static size_t numel(const tensor_t *x) {
  return (size_t)(x->ne[0] * x->ne[1]);
}

/* bytes of n values of a type */
static size_t type_bytes(int type, size_t n) {
  return type == COLO_GGUF_F32    ? 4 * n
         : type == COLO_GGUF_Q8_0 ? n / Q8_BLOCK * (2 + Q8_BLOCK)
         : type == COLO_GGUF_Q4_0 ? n / Q8_BLOCK * (2 + Q8_BLOCK / 2)
                                  : 2 * n;
}

/* ggml's Q8_0 (its reference quantizer): per block of 32 values the scale d = max |x| / 127 as
 * an F16, then each value as round(x / d), an int8 */
static void q8_0(unsigned char *out, const float *x, size_t n) {
  for (size_t b = 0; b < n / Q8_BLOCK; b++, x += Q8_BLOCK, out += 2 + Q8_BLOCK) {
    float amax = 0.0f;
    for (int i = 0; i < Q8_BLOCK; i++)
      amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    colo_dtype_from_float(out, &d, 1, COLO_DTYPE_F16);
    for (int i = 0; i < Q8_BLOCK; i++)
      out[2 + i] = (unsigned char)(signed char)roundf(x[i] * id);
  }
}

/* ggml's Q4_0 (its reference quantizer): per block of 32 values the scale d = m / −8, m the value
 * of the largest magnitude, as an F16, then each value as min(15, trunc(x / d + 8.5)) in 4 bits,
 * value j in the low half of byte j and value 16 + j in its high half */
static void q4_0(unsigned char *out, const float *x, size_t n) {
  for (size_t b = 0; b < n / Q8_BLOCK; b++, x += Q8_BLOCK, out += 2 + Q8_BLOCK / 2) {
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < Q8_BLOCK; i++)
      if (fabsf(x[i]) > amax)
        amax = fabsf(x[i]), m = x[i];
    float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    colo_dtype_from_float(out, &d, 1, COLO_DTYPE_F16);
    for (int i = 0; i < Q8_BLOCK / 2; i++) {
      int lo = (int)(signed char)(x[i] * id + 8.5f), hi = (int)(signed char)(x[16 + i] * id + 8.5f);
      out[2 + i] = (unsigned char)((lo < 15 ? lo : 15) | (hi < 15 ? hi : 15) << 4);
    }
  }
}

/* x's data as floats, in GGUF's order, into out[numel] */
static void materialize(const tensor_t *x, float *out) {
  size_t n0 = (size_t)x->ne[0], n1 = (size_t)x->ne[1];
  size_t d = (size_t)x->pairs;
  if (x->op == OP_COLS) {
    for (size_t o = 0; o < n1; o++) {
      size_t r = d ? o / d * d + o % d % 2 * (d / 2) + o % d / 2 : o; /* its row of src */
      const float *col = x->src + x->col0 + r;
      for (size_t i = 0; i < n0; i++)
        out[o * n0 + i] = col[i * x->ld];
    }
  } else if (x->op == OP_ROWS) {
    for (size_t o = 0; o < n1; o++) {
      size_t r = d ? o / d * d + o % d % 2 * (d / 2) + o % d / 2 : o;
      memcpy(out + o * n0, x->src + (x->col0 + r) * n0, n0 * sizeof *out);
    }
  } else {
    memcpy(out, x->src, n0 * n1 * sizeof *out);
  }
}

static const colo_param_t *find(const colo_param_t *t, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name))
      return &t[i];
  return NULL;
}

/* GPT-2's tensors from colo's own table (HF's names, Conv1D [in][out] matrices) */
static int gpt2_tensors(const colo_gpt_t *m, const float *params, int type, tensors_t *ts,
                        char *err, size_t errlen) {
  const colo_gpt_config_t *c = colo_gpt_config(m);
  size_t nt;
  const colo_param_t *t = colo_gpt_full_table(m, &nt);
  static const struct {
    const char *hf, *gguf;
  } map[] = {{"ln_1.weight", "attn_norm.weight"},          {"ln_1.bias", "attn_norm.bias"},
             {"attn.c_attn.weight", "attn_qkv.weight"},    {"attn.c_attn.bias", "attn_qkv.bias"},
             {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
             {"ln_2.weight", "ffn_norm.weight"},           {"ln_2.bias", "ffn_norm.bias"},
             {"mlp.c_fc.weight", "ffn_up.weight"},         {"mlp.c_fc.bias", "ffn_up.bias"},
             {"mlp.c_proj.weight", "ffn_down.weight"},     {"mlp.c_proj.bias", "ffn_down.bias"}};
  const colo_param_t *wte = find(t, nt, "transformer.wte.weight");
  const colo_param_t *wpe = find(t, nt, "transformer.wpe.weight");
  const colo_param_t *lw = find(t, nt, "transformer.ln_f.weight");
  const colo_param_t *lb = find(t, nt, "transformer.ln_f.bias");
  if (!wte || !wpe || !lw || !lb)
    return colo_fail(err, errlen, COLO_EINVAL, "the model lacks GPT-2's embeddings or final norm");
  int C = c->n_embd;
  int ok =
      add(ts, "token_embd.weight", 2, C, wte->full_shape[0], type, params + wte->full_offset) &&
      add(ts, "position_embd.weight", 2, C, wpe->full_shape[0], type, params + wpe->full_offset);
  char hf[128], g[96];
  for (int l = 0; ok && l < c->n_layer; l++)
    for (size_t i = 0; ok && i < sizeof map / sizeof *map; i++) {
      snprintf(hf, sizeof hf, "transformer.h.%d.%s", l, map[i].hf);
      snprintf(g, sizeof g, "blk.%d.%s", l, map[i].gguf);
      const colo_param_t *p = find(t, nt, hf);
      if (!p)
        return colo_fail(err, errlen, COLO_EINVAL, "the model has no tensor %s", hf);
      /* a Conv1D [in][out] is GGUF's ne (in, out) once transposed to nn.Linear's [out][in] */
      int in = p->full_shape[0], out = p->full_shape[1];
      ok =
          (p->ndim == 2 ? add_cols(ts, g, in, out, type, params + p->full_offset, (size_t)out, 0, 0)
                        : add(ts, g, 1, (uint64_t)in, 1, type, params + p->full_offset)) != NULL;
    }
  ok = ok && add(ts, "output_norm.weight", 1, C, 1, type, params + lw->full_offset) &&
       add(ts, "output_norm.bias", 1, C, 1, type, params + lb->full_offset) &&
       /* the head is the embedding (llama.cpp's converter writes it twice too) */
       add(ts, "output.weight", 2, C, wte->full_shape[0], type, params + wte->full_offset);
  return ok ? 0 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
}

const char *colo_gguf_arch(const colo_gpt_config_t *c) {
  return c->arch != COLO_ARCH_LLAMA ? "gpt2"
         : c->qk_norm               ? "qwen3"
         : c->qkv_bias              ? "qwen2"
                                    : "llama";
}

/* colo_gguf_arch's: Qwen3's and Qwen2's blocks rotate halves of each head, as colo does; its
 * "llama" rotates pairs, so q's and k's rows are reordered for it (pairs) */
static const char *gguf_arch(const colo_gpt_config_t *c, int *pairs) {
  const char *a = colo_gguf_arch(c);
  *pairs = !strcmp(a, "llama");
  return a;
}

/* A llama model's tensors from colo's table, each matrix read as llama.cpp holds it when it is
 * written (nothing of the model's size is copied): c_attn's column blocks as q, k and v, with q's
 * and k's rows reordered for llama.cpp's "llama" (pairs), c_fc's as gate and up. */
static int llama_tensors(const colo_gpt_t *m, const float *params, int type, int pairs,
                         tensors_t *ts, char *err, size_t errlen) {
  const colo_gpt_config_t *c = colo_gpt_config(m);
  int C = c->n_embd, hd = colo_gpt_head_size(c), H = colo_gpt_mlp_hidden(c);
  int Q = colo_gpt_q_width(c), KV = colo_gpt_kv_heads(c) * hd; /* query, key (value) rows */
  size_t nt;
  const colo_param_t *t = colo_gpt_full_table(m, &nt);
  const colo_param_t *wte = find(t, nt, "transformer.wte.weight");
  const colo_param_t *lnf = find(t, nt, "transformer.ln_f.weight");
  const colo_param_t *head = find(t, nt, "lm_head.weight"); /* an untied head */
  if (!wte || !lnf)
    return colo_fail(err, errlen, COLO_EINVAL, "the model lacks its embedding or final norm");
  int ok = add(ts, "token_embd.weight", 2, (uint64_t)C, (uint64_t)wte->full_shape[0], type,
               params + wte->full_offset) != NULL;
  char tn[96], g[96];
  for (int l = 0; ok && l < c->n_layer; l++) {
    static const char *const which[7] = {
        "ln_1.weight",     "attn.c_attn.weight", "attn.c_proj.weight", "ln_2.weight",
        "mlp.c_fc.weight", "mlp.c_proj.weight",  "attn.c_attn.bias"};
    const float *p[7];
    for (int i = 0; i < 7; i++) {
      snprintf(tn, sizeof tn, "transformer.h.%d.%s", l, which[i]);
      const colo_param_t *x = find(t, nt, tn);
      if (!x && i < 6)
        return colo_fail(err, errlen, COLO_EINVAL, "the model has no tensor %s", tn);
      p[i] = x ? params + x->full_offset : NULL;
    }
    size_t qkv = (size_t)Q + 2 * (size_t)KV;
#define NAME(s) (snprintf(g, sizeof g, "blk.%d.%s", l, s), g)
    ok = add(ts, NAME("attn_norm.weight"), 1, (uint64_t)C, 1, type, p[0]) &&
         add_cols(ts, NAME("attn_q.weight"), C, Q, type, p[1], qkv, 0, pairs ? hd : 0) &&
         add_cols(ts, NAME("attn_k.weight"), C, KV, type, p[1], qkv, (size_t)Q, pairs ? hd : 0) &&
         add_cols(ts, NAME("attn_v.weight"), C, KV, type, p[1], qkv, (size_t)(Q + KV), 0) &&
         add_cols(ts, NAME("attn_output.weight"), Q, C, type, p[2], (size_t)C, 0, 0) &&
         add(ts, NAME("ffn_norm.weight"), 1, (uint64_t)C, 1, type, p[3]) &&
         add_cols(ts, NAME("ffn_gate.weight"), C, H, type, p[4], 2 * (size_t)H, 0, 0) &&
         add_cols(ts, NAME("ffn_up.weight"), C, H, type, p[4], 2 * (size_t)H, (size_t)H, 0) &&
         add_cols(ts, NAME("ffn_down.weight"), H, C, type, p[5], (size_t)C, 0, 0);
    for (int j = 0; ok && c->qk_norm && j < 2; j++) { /* Qwen3's QK-norm scales */
      snprintf(tn, sizeof tn, "transformer.h.%d.attn.%c_norm.weight", l, j ? 'k' : 'q');
      const colo_param_t *x = find(t, nt, tn);
      if (!x)
        return colo_fail(err, errlen, COLO_EINVAL, "the model has no tensor %s", tn);
      ok = add(ts, NAME(j ? "attn_k_norm.weight" : "attn_q_norm.weight"), 1, (uint64_t)hd, 1, type,
               params + x->full_offset) != NULL;
    }
    if (ok && p[6]) /* Qwen2's q, k and v biases: c_attn.bias's parts */
      ok = add(ts, NAME("attn_q.bias"), 1, (uint64_t)Q, 1, type, p[6]) &&
           add(ts, NAME("attn_k.bias"), 1, (uint64_t)KV, 1, type, p[6] + Q) &&
           add(ts, NAME("attn_v.bias"), 1, (uint64_t)KV, 1, type, p[6] + Q + KV);
#undef NAME
  }
  ok = ok && add(ts, "output_norm.weight", 1, (uint64_t)C, 1, type, params + lnf->full_offset) &&
       (!head || add(ts, "output.weight", 2, (uint64_t)C, (uint64_t)head->full_shape[0], type,
                     params + head->full_offset));
  if (!ok)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (c->rope_factor > 0) { /* Llama 3's scaling: each frequency's divisor */
    float *f = malloc((size_t)hd * sizeof *f);
    tensor_t *t =
        f ? add(ts, "rope_freqs.weight", 1, (uint64_t)(hd / 2), 1, COLO_GGUF_F32, f) : NULL;
    if (!t) {
      free(f);
      return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    }
    t->own = f;
    float theta = c->rope_theta > 0 ? c->rope_theta : 10000.0f;
    colo_rope_freqs(hd, theta, 0, 0, 0, 0, f + hd / 2);
    colo_rope_freqs(hd, theta, c->rope_factor, c->rope_low > 0 ? c->rope_low : 1.0f,
                    c->rope_high > 0 ? c->rope_high : 4.0f, c->rope_orig > 0 ? c->rope_orig : 8192,
                    f);
    for (int i = 0; i < hd / 2; i++)
      f[i] = f[hd / 2 + i] / f[i];
  }
  return 0;
}

/* ---- the file ---- */

static int write_all(FILE *f, const void *p, size_t n) {
  return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int pad(FILE *f, uint64_t at) {
  static const char zero[ALIGN];
  size_t k = (size_t)((ALIGN - at % ALIGN) % ALIGN);
  return write_all(f, zero, k);
}

/* The file at path (through path.tmp, renamed once whole): the header, kv's metadata, the
 * tensors' descriptions, then their data, each aligned */
static int write_file(const char *path, const mem_t *kv, const tensors_t *ts, char *err,
                      size_t errlen) {
  int rc = 0;
  if (kv->oom)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the metadata");
  /* the header, the metadata, the tensors' descriptions, then their data, each aligned */
  mem_t hd = {0};
  uint64_t off = 0;
  size_t most = 0;
  for (size_t i = 0; rc == 0 && i < ts->n; i++) {
    tensor_t *x = &ts->v[i];
    x->offset = off;
    off += type_bytes(x->type, numel(x));
    off += (ALIGN - off % ALIGN) % ALIGN;
    most = numel(x) > most ? numel(x) : most;
    put_str(&hd, x->name);
    put_u32(&hd, (uint32_t)x->ndim);
    for (int d = 0; d < x->ndim; d++)
      put_u64(&hd, x->ne[d]);
    put_u32(&hd, (uint32_t)x->type);
    put_u64(&hd, x->offset);
  }
  if (rc == 0 && hd.oom)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for the tensors' descriptions");
  char tmp[1200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = NULL;
  float *buf = NULL;
  uint16_t *half = NULL;
  if (rc == 0) {
    buf = malloc((most ? most : 1) * sizeof *buf);
    half = malloc((most ? most : 1) * sizeof *half);
    if (!buf || !half)
      rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory for a tensor of %zu floats", most);
  }
  if (rc == 0 && !(f = fopen(tmp, "wb")))
    rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", tmp, strerror(errno));
  if (rc == 0) {
    uint32_t magic_version[2] = {0x46554747u /* "GGUF" */, 3};
    uint64_t counts[2] = {(uint64_t)ts->n, kv->kvs};
    int bad = write_all(f, magic_version, sizeof magic_version) ||
              write_all(f, counts, sizeof counts) || write_all(f, kv->p, kv->n) ||
              write_all(f, hd.p, hd.n) || pad(f, 24 + kv->n + hd.n);
    for (size_t i = 0; !bad && i < ts->n; i++) {
      const tensor_t *x = &ts->v[i];
      size_t n = numel(x);
      materialize(x, buf);
      if (x->type == COLO_GGUF_F32)
        bad = write_all(f, buf, n * 4);
      else if (x->type == COLO_GGUF_Q8_0)
        q8_0((unsigned char *)half, buf, n), bad = write_all(f, half, type_bytes(x->type, n));
      else if (x->type == COLO_GGUF_Q4_0)
        q4_0((unsigned char *)half, buf, n), bad = write_all(f, half, type_bytes(x->type, n));
      else
        colo_dtype_from_float(half, buf, n,
                              x->type == COLO_GGUF_F16 ? COLO_DTYPE_F16 : COLO_DTYPE_BF16),
            bad = write_all(f, half, n * 2);
      bad = bad || pad(f, type_bytes(x->type, n));
    }
    if (bad || fflush(f) != 0 || fsync(fileno(f)) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "writing %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == 0)
      rc = colo_fail(err, errlen, COLO_EIO, "closing %s: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, path, strerror(errno));
    if (rc < 0)
      unlink(tmp);
  }
  free(hd.p);
  free(buf);
  free(half);
  return rc;
}

int colo_gguf_write(const colo_gpt_t *m, const float *params, const colo_bpe_t *tok, int type,
                    const char *name, const char *path, char *err, size_t errlen) {
  const colo_gpt_config_t *c = colo_gpt_config(m);
  if (type != COLO_GGUF_F32 && type != COLO_GGUF_F16 && type != COLO_GGUF_BF16 &&
      type != COLO_GGUF_Q8_0 && type != COLO_GGUF_Q4_0)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "GGUF type %d: colo writes f32, f16, bf16, q8_0 and q4_0", type);
  if (c->rope_ext) /* llama.cpp's llama and qwen architectures scale no rotation */
    return colo_fail(err, errlen, COLO_EINVAL,
                     "the model rotates by LongRoPE (model.rope_short_factor, its attention "
                     "factor), which llama.cpp's %s architecture does not; export it for "
                     "HuggingFace (--format hf) and convert that with llama.cpp's own script",
                     gguf_arch(c, &(int){0}));
  int llama = c->arch == COLO_ARCH_LLAMA, pairs;
  const char *arch = gguf_arch(c, &pairs);
  mem_t kv = {0};
  tensors_t ts = {0};
  int rc = colo_gguf_check(tok, c->vocab_size, "a tokenizer", err, errlen);
  if (rc == 0)
    rc = llama ? llama_tensors(m, params, type, pairs, &ts, err, errlen)
               : gpt2_tensors(m, params, type, &ts, err, errlen);
  if (rc == 0) {
    kv_str(&kv, NULL, "general.architecture", arch);
    if (name)
      kv_str(&kv, NULL, "general.name", name);
    kv_u32(&kv, NULL, "general.file_type",
           type == COLO_GGUF_F32    ? 0
           : type == COLO_GGUF_F16  ? 1
           : type == COLO_GGUF_Q8_0 ? 7
           : type == COLO_GGUF_Q4_0 ? 2
                                    : 32);
    kv_u32(&kv, arch, "context_length", (uint32_t)c->block_size);
    kv_u32(&kv, arch, "embedding_length", (uint32_t)c->n_embd);
    kv_u32(&kv, arch, "block_count", (uint32_t)c->n_layer);
    kv_u32(&kv, arch, "feed_forward_length", (uint32_t)colo_gpt_mlp_hidden(c));
    kv_u32(&kv, arch, "attention.head_count", (uint32_t)c->n_head);
    if (llama) {
      kv_u32(&kv, arch, "attention.head_count_kv", (uint32_t)colo_gpt_kv_heads(c));
      kv_f32(&kv, arch, "rope.freq_base", c->rope_theta > 0 ? c->rope_theta : 10000.0f);
      kv_u32(&kv, arch, "rope.dimension_count", (uint32_t)colo_gpt_head_size(c));
      if (c->head_dim) { /* heads wider or narrower than n_embd/n_head (llama.cpp's own keys) */
        kv_u32(&kv, arch, "attention.key_length", (uint32_t)c->head_dim);
        kv_u32(&kv, arch, "attention.value_length", (uint32_t)c->head_dim);
      }
      kv_f32(&kv, arch, "attention.layer_norm_rms_epsilon", c->norm_eps > 0 ? c->norm_eps : 1e-5f);
    } else {
      kv_f32(&kv, arch, "attention.layer_norm_epsilon", 1e-5f);
    }
    kv_u32(&kv, arch, "vocab_size", (uint32_t)c->vocab_size);
    rc = tokenizer_keys(&kv, tok, c->vocab_size, err, errlen);
  }
  if (rc == 0)
    rc = write_file(path, &kv, &ts, err, errlen);
  for (size_t i = 0; i < ts.n; i++)
    free(ts.v[i].own);
  free(ts.v);
  free(kv.p);
  return rc;
}

int colo_gguf_write_lora(const colo_lora_t *l, const colo_gpt_config_t *c, const float *adapters,
                         const char *path, char *err, size_t errlen) {
  int pairs, hd = colo_gpt_head_size(c), r = colo_lora_config(l)->rank;
  const char *arch = gguf_arch(c, &pairs);
  if (colo_lora_config(l)->dora)
    return colo_fail(err, errlen, COLO_EINVAL,
                     "llama.cpp's LoRA adapters have no DoRA magnitudes: export the model with "
                     "the adapters merged in (--format gguf or hf), or the adapters for PEFT "
                     "(--format peft)");
  size_t nt;
  const colo_param_t *tab = colo_lora_table(l, &nt);
  tensors_t ts = {0};
  mem_t kv = {0};
  int ok = 1;
  for (size_t i = 0; ok && i + 1 < nt; i += 2) {
    const colo_param_t *a = &tab[i], *b = &tab[i + 1];
    int layer, k;
    colo_lora_site(l, i, &layer, &k);
    colo_lora_part_t p[3]; /* the base file's matrices of this product */
    int np = colo_lora_parts(c, k, p);
    for (int q = 0; ok && q < np; q++) {
      char name[96];
      snprintf(name, sizeof name, "blk.%d.%s.weight.lora_a", layer, p[q].gguf);
      ok = add(&ts, name, 2, (uint64_t)a->shape[1], (uint64_t)r, COLO_GGUF_F32,
               adapters + a->offset) != NULL;
      snprintf(name, sizeof name, "blk.%d.%s.weight.lora_b", layer, p[q].gguf);
      tensor_t *x = ok ? add(&ts, name, 2, (uint64_t)r, (uint64_t)p[q].rows, COLO_GGUF_F32,
                             adapters + b->offset)
                       : NULL;
      if ((ok = x != NULL)) {
        x->op = OP_ROWS;
        x->col0 = (size_t)p[q].row0;
        x->pairs = pairs && p[q].rotated ? hd : 0;
      }
    }
  }
  int rc = ok ? 0 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  if (rc == 0) {
    kv_str(&kv, NULL, "general.architecture", arch);
    kv_str(&kv, NULL, "general.type", "adapter");
    kv_str(&kv, NULL, "adapter.type", "lora");
    /* llama.cpp scales by alpha / rank: rsLoRA's scale as such an alpha */
    kv_f32(&kv, NULL, "adapter.lora.alpha",
           colo_lora_config(l)->rslora ? colo_lora_scale(l) * (float)colo_lora_config(l)->rank
                                       : colo_lora_config(l)->alpha);
    rc = write_file(path, &kv, &ts, err, errlen);
  }
  free(ts.v);
  free(kv.p);
  return rc;
}
