/* Fuzz target: the files colo-train reads and did not write in this run, which may be truncated,
 * corrupt or someone else's: a safetensors file (a checkpoint shard, or weights from elsewhere:
 * its JSON header, dtypes, shapes and offsets), a checkpoint's manifest.json, a token shard in
 * llm.c's format, a HuggingFace tokenizer.json (then a text through it and back), and a chat
 * template (Jinja, which comes with a tokenizer from anywhere; rendered on a conversation). The
 * first byte picks which; the rest is the file. Reading may refuse, with
 * a reason, but never crash, leak or read outside the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "worker/engine/train/bpe.h"
#include "worker/engine/train/checkpoint.h"
#include "worker/engine/train/data.h"
#include "worker/engine/train/jinja.h"
#include "worker/engine/train/safetensors.h"

static void safetensors(const uint8_t *data, size_t size) {
  colo_st_file_t f;
  char err[2048];
  if (colo_st_open(colo_fuzz_put("t.safetensors", data, size), &f, err, sizeof err) < 0) {
    if (!err[0])
      abort(); /* a refusal says why */
    return;
  }
  for (const cJSON *e = f.hdr ? f.hdr->child : NULL; e; e = e->next) {
    const char *dtype, *bytes_at;
    int ndim;
    long shape[2];
    size_t bytes;
    if (!e->string || colo_st_entry(&f, e->string, &dtype, &ndim, shape, &bytes_at, &bytes) < 0)
      continue;
    if (bytes_at < f.buf || bytes_at + bytes > f.buf + f.len)
      abort(); /* an entry's data lies inside the file */
    long numel = ndim == 0 ? 1 : ndim == 1 ? shape[0] : shape[0] * shape[1];
    if (numel <= 0 || numel > (1 << 20) || shape[0] > (1 << 20) ||
        (ndim == 2 && shape[1] > (1 << 20)))
      continue;
    int sh[2] = {(int)shape[0], ndim == 2 ? (int)shape[1] : 0};
    float *dst = malloc((size_t)numel * sizeof(float));
    if (!dst)
      abort();
    if (colo_st_get(&f, e->string, ndim, sh, dst, 1, err, sizeof err) < 0 && !err[0])
      abort();
    if (colo_st_get_part(&f, e->string, ndim, sh, (size_t)numel / 3, (size_t)numel, dst, 1, err,
                         sizeof err) < 0 &&
        !err[0])
      abort();
    free(dst);
  }
  colo_st_close(&f);
}

static void manifest(const uint8_t *data, size_t size) {
  colo_fuzz_put("manifest.json", data, size);
  colo_ckpt_meta_t meta;
  char err[2048];
  if (colo_ckpt_read_meta(colo_fuzz_dir(), &meta, err, sizeof err) < 0 && !err[0])
    abort();
}

static void shard(const uint8_t *data, size_t size) {
  colo_shard_t s;
  char err[2048];
  if (colo_shard_load(colo_fuzz_put("s.bin", data, size), &s, err, sizeof err) < 0) {
    if (!err[0])
      abort();
    return;
  }
  for (int T = 1; T <= 64; T *= 4) {
    if (colo_shard_windows(&s, T, err, sizeof err) < 0) {
      if (!err[0])
        abort();
      continue;
    }
    /* windows and their targets, -1 where a loss mask leaves one out, and the count of those
     * that count: no more than there are */
    int in[2 * 64], tg[2 * 64], counted = 0;
    colo_sample_batch(&s, 1, 0, 0, 0, 1, 2, T, in, tg);
    for (int i = 0; i < 2 * T; i++)
      counted += tg[i] >= 0;
    if (!s.masked && counted != 2 * T)
      abort();
    if (colo_eval_counted(&s, 1, 0, 1, 2, T) > (uint64_t)s.blocks[s.n_files] * (uint64_t)T ||
        colo_eval_counted(&s, 1, 3, 1, 2, T) > (uint64_t)6 * T)
      abort();
  }
  /* preference pairs: rows from each sequence's start, within it; a pair whose answer a shorter
   * block cuts off counts nothing */
  for (int T = 1; s.pairs && s.n_pairs && T <= 64; T *= 4) {
    int in[4 * 64], tg[4 * 64];
    size_t cut, lost;
    colo_pairs_batch(&s, 1, 3, 2, 1, 0, 1, 2, T, in, tg, NULL);
    colo_pairs_eval_batch(&s, 5, 0, 1, 2, T, in, tg, NULL);
    for (int i = 0; i < 4 * T; i++)
      if (tg[i] >= 0 && (tg[i] > 65535 || in[i] < 0))
        abort();
    colo_pairs_cut(&s, T, &cut, &lost);
    if (lost > cut || cut > 2 * s.n_pairs)
      abort();
  }
  const char *file;
  size_t at;
  unsigned token;
  colo_shard_find_above(&s, 256, &file, &at, &token);
  colo_shard_free(&s);
}

static void tokenizer(const uint8_t *data, size_t size) {
  colo_bpe_t *t;
  char err[2048];
  if (colo_bpe_load(colo_fuzz_put("tokenizer.json", data, size), &t, err, sizeof err) < 0) {
    if (!err[0])
      abort();
    return;
  }
  static const char text[] = "Hello, wörld! It's 2026\n\n  naïve 東京 🎉 ab ab\r\n";
  int *ids = NULL, bos;
  size_t n = 0, cap = 0, back = 0;
  if (colo_bpe_encode(t, text, sizeof text - 1, 0, &ids, &n, &cap, err, sizeof err) < 0)
    abort(); /* a loaded tokenizer encodes any UTF-8 */
  for (size_t i = 0; i < n; i++) {
    size_t len;
    if (!colo_bpe_token(t, ids[i], &len))
      abort(); /* every id it gives is one of its tokens */
    back += len;
  }
  if (back != sizeof text - 1)
    abort(); /* and they are the text's bytes */
  int doc = colo_bpe_doc_token(t, &bos);
  if (doc >= colo_bpe_vocab_size(t))
    abort();
  free(ids);
  colo_bpe_free(t);
}

/* a conversation for templates: a system message, a user's, an assistant's with a tool call */
static cJSON *template_vars(void) {
  cJSON *v = cJSON_Parse(
      "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", "
      "\"content\": \"hi \u00e9\"}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": "
      "[{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null]}}}]}], "
      "\"bos_token\": \"<s>\", \"add_generation_prompt\": true}");
  if (!v)
    abort();
  return v;
}

static void chat_template(const uint8_t *data, size_t size) {
  char *src = malloc(size + 1), err[2048];
  if (!src)
    abort();
  memcpy(src, data, size);
  src[size] = 0;
  colo_jinja_t *t;
  if (colo_jinja_parse(src, "t.jinja", &t, err, sizeof err) < 0) {
    free(src);
    if (!err[0])
      abort();
    return;
  }
  cJSON *vars = template_vars();
  char *out = NULL;
  size_t len = 0, ns = 0;
  colo_jinja_span_t *spans = NULL;
  int rc = colo_jinja_render(t, vars, &out, &len, &spans, &ns, err, sizeof err);
  if (rc < 0 && !err[0])
    abort();
  for (size_t i = 0; rc == 0 && i < ns; i++)
    if (spans[i].from > spans[i].to || spans[i].to > len)
      abort(); /* a span lies in the text */
  free(out);
  free(spans);
  cJSON_Delete(vars);
  colo_jinja_free(t);
  free(src);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  switch (data[0] % 5) {
  case 0:
    safetensors(data + 1, size - 1);
    break;
  case 1:
    manifest(data + 1, size - 1);
    break;
  case 2:
    shard(data + 1, size - 1);
    break;
  case 3:
    tokenizer(data + 1, size - 1);
    break;
  default:
    chat_template(data + 1, size - 1);
  }
  return 0;
}

/* a file written by colo-train's own writer, emitted with its form byte */
static void emit_file(const char *name, uint8_t form, colo_fuzz_emit_fn emit) {
  uint8_t buf[4096];
  char path[128];
  snprintf(path, sizeof path, "%s/%s", colo_fuzz_dir(), name);
  FILE *f = fopen(path, "rb");
  if (!f)
    abort();
  size_t n = fread(buf + 1, 1, sizeof buf - 1, f);
  fclose(f);
  buf[0] = form;
  emit(buf, n + 1);
}

/* seeds, made here: files as colo-train writes them */
void colo_fuzz_seeds(const uint8_t *file, size_t size, colo_fuzz_emit_fn emit) {
  (void)size;
  if (file)
    return;
  char err[2048], path[128];
  /* a safetensors file of three tensors */
  float a[6] = {1, -2, 3.5f, 0, 1e-3f, 7}, b[4] = {0.25f, 0.5f, 0.75f, 1};
  colo_st_tensor_t t[3] = {{"wte.weight", a, 2, {2, 3}, 6},
                           {"ln.bias", b, 1, {4, 0}, 4},
                           {"h.0.attn.c_attn.weight@3", a, 1, {3, 0}, 3}};
  snprintf(path, sizeof path, "%s/seed.safetensors", colo_fuzz_dir());
  if (colo_safetensors_write(path, t, 3, err, sizeof err) < 0)
    abort();
  emit_file("seed.safetensors", 0, emit);
  /* a manifest as colo_ckpt_commit writes it (format version 3) */
  static const char man[] =
      "\x01{\"format\":\"colo-checkpoint\",\"version\":3,\"step\":6,\"model\":{\"architecture\":"
      "\"gpt2\",\"n_layer\":4,\"n_head\":4,\"n_embd\":256,\"block_size\":64,\"vocab_size\":256},"
      "\"mesh\":{\"dp\":2,\"tp\":1,\"pp\":1,\"world\":2,\"zero_stage\":3},\"data\":{\"seed\":1337,"
      "\"next_step\":6},\"optimizer\":{\"kind\":\"adamw\",\"t\":6},\"loss_scale\":1,"
      "\"loss_scale_good_steps\":0,\"asked\":true,\"val_loss\":2.25,\"early_stop\":{\"best\":2.125,"
      "\"best_step\":4,\"since\":1},\"files\":[{\"name\":\"rank_00000.safetensors\","
      "\"bytes\":38915072,\"sha256\":"
      "\"735ef6201819d6e6e74987062e2ff484249a1e472894046d72a00859280bd"
      "d6c\",\"pp\":0,\"tp\":0,\"dp\":0}]}";
  emit((const uint8_t *)man, sizeof man - 1);
  /* a token shard of 40 tokens */
  snprintf(path, sizeof path, "%s/seed.bin", colo_fuzz_dir());
  uint16_t tok[40];
  for (int i = 0; i < 40; i++)
    tok[i] = (uint16_t)(i * 7 % 256);
  if (colo_shard_write(path, tok, 40, err, sizeof err) < 0)
    abort();
  emit_file("seed.bin", 2, emit);
  /* the same with a loss mask (colo's shards of prompts and completions) */
  snprintf(path, sizeof path, "%s/seedm.bin", colo_fuzz_dir());
  int32_t mh[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC_MASKED, COLO_SHARD_VERSION_MASKED, 40, 2};
  uint8_t bits[5] = {0xf0, 0x0f, 0x3c, 0xff, 0x01};
  FILE *mf = fopen(path, "wb");
  if (!mf || fwrite(mh, sizeof mh, 1, mf) != 1 || fwrite(tok, sizeof tok, 1, mf) != 1 ||
      fwrite(bits, sizeof bits, 1, mf) != 1 || fclose(mf) != 0)
    abort();
  emit_file("seedm.bin", 2, emit);
  /* the same as preference pairs: 4 sequences (two pairs), the table after the mask at 8 bytes */
  snprintf(path, sizeof path, "%s/seedp.bin", colo_fuzz_dir());
  int32_t ph[COLO_SHARD_HEADER_INTS] = {COLO_SHARD_MAGIC_PAIRS, COLO_SHARD_VERSION_PAIRS, 40, 2, 4};
  uint64_t seq[4] = {0, 9, 20, 31};
  uint8_t pad[3] = {0};
  mf = fopen(path, "wb");
  if (!mf || fwrite(ph, sizeof ph, 1, mf) != 1 || fwrite(tok, sizeof tok, 1, mf) != 1 ||
      fwrite(bits, sizeof bits, 1, mf) != 1 || fwrite(pad, sizeof pad, 1, mf) != 1 ||
      fwrite(seq, sizeof seq, 1, mf) != 1 || fclose(mf) != 0)
    abort();
  emit_file("seedp.bin", 2, emit);
  /* a tokenizer.json of the 256 bytes (GPT-2's characters for them), two merges, Llama 3's kind
   * of pre-tokenizer, an added token and a template */
  static char tj[16384];
  size_t k = (size_t)snprintf(tj, sizeof tj,
                              "\x03{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,"
                              "\"vocab\":{");
  for (int b = 0, extra = 0; b < 256; b++) {
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = keep ? b : 256 + extra++;
    char u[4] = {(char)cp, 0};
    if (cp >= 0x80)
      u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), u[2] = 0;
    k += (size_t)snprintf(tj + k, sizeof tj - k, "%s\"%s%s\":%d", b ? "," : "",
                          cp == '"' || cp == '\\' ? "\\" : "", u, b);
  }
  k += (size_t)snprintf(
      tj + k, sizeof tj - k,
      ",\"ab\":256,\"abab\":257},\"merges\":[\"a b\",[\"ab\",\"ab\"]]},\"pre_tokenizer\":{"
      "\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
      "\"\\\\s+|\\\\p{L}+|[^\\\\s\\\\p{L}]+\"},\"behavior\":\"Isolated\",\"invert\":false},{"
      "\"type\":"
      "\"ByteLevel\",\"use_regex\":false}]},\"added_tokens\":[{\"id\":258,\"content\":"
      "\"<|begin_of_text|>\",\"special\":true}],\"post_processor\":{\"type\":"
      "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\"}},"
      "{\"Sequence\":{\"id\":\"A\"}}]}}");
  colo_bpe_t *tk;
  if (colo_bpe_load(colo_fuzz_put("tokenizer.json", (const uint8_t *)tj + 1, k - 1), &tk, err,
                    sizeof err) < 0)
    abort(); /* the seed is a tokenizer */
  colo_bpe_free(tk);
  emit((const uint8_t *)tj, k);
  /* chat templates: ChatML's with a default system message, tools and generation blocks; and one
   * of each construct colo's Jinja reads */
  static const char *const tpl[] = {
      "\x04{%- if tools %}{{- tools | tojson(indent=2) }}{%- endif %}\n"
      "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nhi<|im_end|>\\n' }}"
      "{%- endif %}\n{%- for m in messages %}\n  {{- '<|im_start|>' + m.role + '\\n' }}"
      "{%- if m.role == 'assistant' %}{% generation %}{{ m.content | trim }}"
      "{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}"
      "<|im_end|>{% endgeneration %}{%- else %}{{ m['content'] ~ '<|im_end|>' }}{%- endif %}\n"
      "{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "\x04{% set ns = namespace(n=0) %}{% macro f(a, b=2) %}{{ a * b }}{% endmacro %}"
      "{% for k, v in {'a': 1, 'b': [1, 2]}.items() if k != 'z' %}{% set ns.n = ns.n + 1 %}"
      "{{ loop.index }}{{ k|upper }}={{ v|string|length }}{% if loop.last %}{% break %}{% endif %}"
      "{% else %}none{% endfor %}{{ f(3) }}{{ 'a,b'.split(',')|join('-') }}{{ messages[-1:][0]"
      ".role if messages is defined else 'x' }}{{ range(3)|list|sum }}{{ ns.n is odd }}"
      "{{ (1, 2)[1:] }}{{ 7 // 2 }}{{ '%s' ~ 1.5 }}{{ raise_exception('no') if false }}"};
  cJSON *vars = template_vars();
  for (size_t i = 0; i < sizeof tpl / sizeof tpl[0]; i++) {
    colo_jinja_t *jt;
    char *out;
    size_t len;
    if (colo_jinja_parse(tpl[i] + 1, "seed", &jt, err, sizeof err) < 0 ||
        colo_jinja_render(jt, vars, &out, &len, NULL, NULL, err, sizeof err) < 0) {
      fprintf(stderr, "seed template %zu: %s\n", i, err);
      abort(); /* the seeds are templates that render */
    }
    free(out);
    colo_jinja_free(jt);
    emit((const uint8_t *)tpl[i], strlen(tpl[i]));
  }
  cJSON_Delete(vars);
}
