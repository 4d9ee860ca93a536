/* Job specification defaults and validation. Each rule produces one exact message naming the
 * fields involved with their values, so a user can fix the job file without reading code. */
#include "jobspec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "loratarget.h"
#include "pbcodec.h"

int colo_jobspec_fill_defaults(Colo__V1__JobSpec *spec) {
  /* a GPU job's precision defaults to bf16, unless it asks for TF32 (an fp32 mode); any other's
   * to the proto's fp32 */
  int gpu = spec->resources && spec->resources->has_device &&
            spec->resources->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU;
  int unset = !spec->train ||
              (!spec->train->has_precision && !(spec->train->has_tf32 && spec->train->tf32));
  int rc = colo_pb_fill_defaults(&spec->base);
  if (rc == 0 && gpu && unset)
    spec->train->precision = COLO__V1__PRECISION__PRECISION_BF16;
  return rc;
}

unsigned long long colo_jobspec_world(const Colo__V1__JobSpec *s) {
  return (unsigned long long)s->parallel->dp * s->parallel->cp * s->parallel->tp * s->parallel->pp;
}

int colo_path_is_contained(const char *p) {
  if (!p || !*p || p[0] == '/' || strlen(p) > COLO_MAX_PATH)
    return 0;
  for (const char *c = p; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '\\')
      return 0;
  const char *seg = p;
  for (;;) {
    const char *end = strchr(seg, '/');
    size_t n = end ? (size_t)(end - seg) : strlen(seg);
    if (n == 2 && seg[0] == '.' && seg[1] == '.')
      return 0;
    if (!end)
      return 1;
    seg = end + 1;
  }
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return COLO_EINVAL;
}

int colo_jobspec_name_ok(const char *n) {
  size_t len = strlen(n);
  if (len == 0 || len > COLO_MAX_NAME)
    return 0;
  for (const char *c = n; *c; c++) {
    int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
             *c == '-' || *c == '_' || *c == '.';
    if (!ok)
      return 0;
  }
  return 1;
}

/* %g without trailing noise, for floats in messages */
static const char *fmt_float(float v, char *buf, size_t n) {
  snprintf(buf, n, "%g", (double)v);
  return buf;
}

int colo_labels_check(const char *what, char *const *labels, size_t n, char *err, size_t errlen) {
  if (n > COLO_MAX_LABELS)
    return bad(err, errlen, "%s has %zu labels; at most %d", what, n, COLO_MAX_LABELS);
  for (size_t i = 0; i < n; i++) {
    const char *l = labels[i];
    size_t len = strlen(l), ok = strspn(l, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                           "0123456789._-");
    if (len == 0 || len > COLO_MAX_LABEL || ok != len)
      return bad(err, errlen,
                 "%s: label \"%.40s\" must be 1 to %d letters, digits, '.', '_' or '-'", what, l,
                 COLO_MAX_LABEL);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(labels[k], l))
        return bad(err, errlen, "%s names %s twice", what, l);
  }
  return 0;
}

static const char *const NOTIFY_EVENT_NAME[] = {"", "started", "restarting", "ended", "failed"};

int colo_url_check(const char *what, const char *url, char *err, size_t errlen) {
  size_t len = strlen(url), scheme = !strncmp(url, "https://", 8)  ? 8
                                     : !strncmp(url, "http://", 7) ? 7
                                                                   : 0;
  if (!scheme)
    return bad(err, errlen, "%s \"%.80s\" must start with http:// or https://", what, url);
  if (len > COLO_MAX_URL)
    return bad(err, errlen, "%s is %zu characters long; at most %d", what, len, COLO_MAX_URL);
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)url[i] <= ' ' || (unsigned char)url[i] >= 0x7f)
      return bad(err, errlen, "%s \"%.80s\" has a space or a character outside printable ASCII",
                 what, url);
  if (!url[scheme] || url[scheme] == '/')
    return bad(err, errlen, "%s \"%.80s\" names no host", what, url);
  return 0;
}

int colo_url_allowed(const char *url, const char *prefixes) {
  const char *p = prefixes;
  while (*p) {
    size_t n = strcspn(p, ",");
    if (n > 0 && !strncmp(url, p, n)) {
      char next = url[n];
      if (p[n - 1] == '/' || next == '\0' || next == '/' || next == '?' || next == '#')
        return 1;
    }
    p += n;
    if (*p == ',')
      p++;
  }
  return 0;
}

/* the MLP's width as the engine takes it (colo_gpt_mlp_hidden) */
static unsigned mlp_width(const Colo__V1__ModelSpec *m) {
  return m->mlp_hidden                           ? m->mlp_hidden
         : m->arch == COLO__V1__ARCH__ARCH_LLAMA ? (8 * m->n_embd / 3 + 63) / 64 * 64
                                                 : 4 * m->n_embd;
}

/* data.sources or data.val_sources (`field`, sets of `what`): at most COLO_MAX_SOURCES, each
 * with a path under the data root and a positive weight */
static int check_sources(const char *field, const char *what, Colo__V1__DataSource *const *src,
                         size_t n, char *err, size_t errlen) {
  if (n > COLO_MAX_SOURCES)
    return bad(err, errlen, "data.%s names %zu %s sets; at most %d", field, n, what,
               COLO_MAX_SOURCES);
  for (size_t i = 0; i < n; i++) {
    if (!src[i]->path || !src[i]->path[0])
      return bad(err, errlen, "data.%s[%zu].path must be set", field, i);
    if (!colo_path_is_contained(src[i]->path))
      return bad(err, errlen,
                 "data.%s[%zu].path \"%.200s\" must be a path relative to the data root, "
                 "without \"..\"",
                 field, i, src[i]->path);
    if (!(src[i]->weight > 0) || !isfinite(src[i]->weight))
      return bad(err, errlen, "data.%s[%zu].weight=%g must be a positive number", field, i,
                 (double)src[i]->weight);
  }
  return 0;
}

const char *colo_val_source_name(const Colo__V1__DataSource *src) {
  return src->name && src->name[0] ? src->name : src->path;
}

/* data.val_sources' or data.choice_sets' (`field`) names: each well formed, none twice (a set
 * without one goes by its path) */
static int check_names(const char *field, Colo__V1__DataSource *const *src, size_t n, char *err,
                       size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    if (src[i]->name && src[i]->name[0] && !colo_jobspec_name_ok(src[i]->name))
      return bad(err, errlen,
                 "data.%s[%zu].name \"%.80s\" must be 1 to 64 characters of letters, digits, "
                 "'-', '_' and '.'",
                 field, i, src[i]->name);
    for (size_t k = 0; k < i; k++)
      if (!strcmp(colo_val_source_name(src[k]), colo_val_source_name(src[i])))
        return bad(err, errlen, "data.%s[%zu] and [%zu] are both named \"%.200s\"", field, k, i,
                   colo_val_source_name(src[i]));
  }
  return 0;
}

int colo_best_metric(const Colo__V1__JobSpec *s, int *set, int *kind) {
  const char *m = s->train ? s->train->best_metric : NULL;
  *set = *kind = 0;
  if (!m || !m[0] || !strcmp(m, "val_loss"))
    return 0;
  const char *dot = strrchr(m, '.');
  if (!dot || !s->data)
    return COLO_EINVAL;
  if (!strcmp(dot, ".acc_norm"))
    *kind = 1;
  else if (!strcmp(dot, ".acc_token"))
    *kind = 2;
  else if (strcmp(dot, ".acc"))
    return COLO_EINVAL;
  for (size_t k = 0; k < s->data->n_choice_sets; k++) {
    const char *name = colo_val_source_name(s->data->choice_sets[k]);
    if (strlen(name) == (size_t)(dot - m) && !strncmp(name, m, (size_t)(dot - m))) {
      *set = (int)k + 1;
      return 0;
    }
  }
  return COLO_EINVAL;
}

unsigned colo_decay_steps(const Colo__V1__JobSpec *s) {
  return s->optimizer->decay_steps ? s->optimizer->decay_steps : s->train->steps / 5;
}

int colo_jobspec_validate(const Colo__V1__JobSpec *s, char *err, size_t errlen) {
  char a[32], b[32];
  if (!s->model || !s->data || !s->parallel || !s->memory || !s->optimizer || !s->train ||
      !s->checkpoint || !s->resources)
    return bad(err, errlen, "internal: validate needs a spec with defaults filled");
  const Colo__V1__ModelSpec *m = s->model;
  const Colo__V1__ParallelSpec *p = s->parallel;
  const Colo__V1__MemorySpec *mem = s->memory;
  const Colo__V1__OptimizerSpec *o = s->optimizer;
  const Colo__V1__TrainSpec *t = s->train;
  const Colo__V1__CheckpointSpec *ck = s->checkpoint;
  const Colo__V1__ResourceSpec *r = s->resources;

  /* name */
  if (!s->name || !s->name[0])
    return bad(err, errlen, "name must be set");
  if (!colo_jobspec_name_ok(s->name))
    return bad(err, errlen,
               "name \"%.80s\" must be 1 to %d characters of letters, digits, '-', '_' and '.'",
               s->name, COLO_MAX_NAME);

  /* model */
  if (m->n_layer < 1 || m->n_layer > 1024)
    return bad(err, errlen, "model.n_layer=%u must be between 1 and 1024", m->n_layer);
  if (m->n_head < 1 || m->n_head > 1024)
    return bad(err, errlen, "model.n_head=%u must be between 1 and 1024", m->n_head);
  if (m->n_embd < 1 || m->n_embd > 65536)
    return bad(err, errlen, "model.n_embd=%u must be between 1 and 65536", m->n_embd);
  if (m->head_dim > 4096)
    return bad(err, errlen, "model.head_dim=%u must be at most 4096", m->head_dim);
  if (!m->head_dim && m->n_embd % m->n_head)
    return bad(err, errlen, "model.n_head=%u does not divide model.n_embd=%u", m->n_head,
               m->n_embd);
  if (m->arch != COLO__V1__ARCH__ARCH_GPT2 && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen, "model.arch must be gpt2 or llama");
  if (m->head_dim && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen,
               "model.head_dim needs model.arch=llama (gpt2's heads are n_embd/n_head)");
  if (m->mlp_hidden > 1u << 20)
    return bad(err, errlen, "model.mlp_hidden=%u must be at most 1048576", m->mlp_hidden);
  unsigned hs = m->head_dim ? m->head_dim : m->n_embd / m->n_head;
  if (m->arch == COLO__V1__ARCH__ARCH_LLAMA && hs % 2)
    return bad(err, errlen,
               "model.arch=llama rotates pairs of each head's values: %s=%u must be even",
               m->head_dim ? "head_dim" : "n_embd/n_head", hs);
  if (m->n_kv_head && (m->n_head % m->n_kv_head || m->arch != COLO__V1__ARCH__ARCH_LLAMA))
    return bad(err, errlen,
               "model.n_kv_head=%u must divide model.n_head=%u, with model.arch=llama (grouped-"
               "query attention)",
               m->n_kv_head, m->n_head);
  if (!m->tie_embeddings && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen, "model.tie_embeddings=false needs model.arch=llama");
  if (m->qkv_bias && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen, "model.qkv_bias needs model.arch=llama (gpt2 has biases everywhere)");
  if (m->qk_norm && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen, "model.qk_norm needs model.arch=llama (Qwen3's block)");
  if (m->sliding_window && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen,
               "model.sliding_window needs model.arch=llama (Mistral's block; gpt2 attends every "
               "earlier token)");
  if (m->sliding_window > 1u << 24)
    return bad(err, errlen, "model.sliding_window=%u must be at most 16777216 tokens",
               m->sliding_window);
  if (m->qk_norm && m->qkv_bias)
    return bad(err, errlen,
               "model.qk_norm and model.qkv_bias together are no published block (Qwen2's has "
               "the biases, Qwen3's the norms) and have no HuggingFace layout to export to");
  if (!(m->rms_norm_eps > 0.0f && m->rms_norm_eps <= 1e-2f))
    return bad(err, errlen, "model.rms_norm_eps=%g must be above 0 and at most 0.01",
               (double)m->rms_norm_eps);
  if (m->rms_norm_eps != 1e-5f && m->arch != COLO__V1__ARCH__ARCH_LLAMA)
    return bad(err, errlen,
               "model.rms_norm_eps=%g needs model.arch=llama (gpt2's LayerNorm has eps 1e-5)",
               (double)m->rms_norm_eps);
  if (m->rope_scaling_factor != 0.0f &&
      (m->arch != COLO__V1__ARCH__ARCH_LLAMA || !(m->rope_scaling_factor >= 1.0f) ||
       !(m->rope_scaling_factor <= 1024.0f) || !(m->rope_low_freq_factor > 0.0f) ||
       !(m->rope_high_freq_factor > m->rope_low_freq_factor) ||
       !(m->rope_high_freq_factor <= 1e6f) || m->rope_original_context < 1))
    return bad(err, errlen,
               "model.rope_scaling_factor=%g needs model.arch=llama, a factor from 1 to 1024, "
               "0 < rope_low_freq_factor (%g) < rope_high_freq_factor (%g) and "
               "rope_original_context (%u) at least 1",
               (double)m->rope_scaling_factor, (double)m->rope_low_freq_factor,
               (double)m->rope_high_freq_factor, m->rope_original_context);
  if (m->hf_layout && m->hf_layout[0] &&
      (strcmp(m->hf_layout, "phi3") || m->arch != COLO__V1__ARCH__ARCH_LLAMA || m->qkv_bias ||
       m->qk_norm || m->head_dim))
    return bad(err, errlen,
               "model.hf_layout \"%.40s\" must be phi3 (Phi-3's layout), with model.arch=llama and "
               "without qkv_bias, qk_norm or head_dim, which Phi-3 has not",
               m->hf_layout);
  if (m->n_rope_short_factor || m->n_rope_long_factor || m->rope_attention_factor != 0.0f) {
    /* LongRoPE: a divisor for each of the head's rotated pairs, both lists */
    unsigned hs = m->head_dim ? m->head_dim : m->n_head ? m->n_embd / m->n_head : 0;
    if (m->arch != COLO__V1__ARCH__ARCH_LLAMA || m->n_rope_short_factor != hs / 2 ||
        m->n_rope_long_factor != hs / 2 || hs / 2 > 256 || m->rope_scaling_factor != 0.0f)
      return bad(err, errlen,
                 "model.rope_short_factor and rope_long_factor (LongRoPE) need model.arch=llama, "
                 "no rope_scaling_factor, and %u values each, one for each rotated pair of a head "
                 "of %u (they have %zu and %zu)",
                 hs / 2, hs, m->n_rope_short_factor, m->n_rope_long_factor);
    for (size_t i = 0; i < m->n_rope_short_factor; i++)
      if (!(m->rope_short_factor[i] > 0.0f && m->rope_short_factor[i] <= 1e6f) ||
          !(m->rope_long_factor[i] > 0.0f && m->rope_long_factor[i] <= 1e6f))
        return bad(err, errlen,
                   "model.rope_short_factor[%zu]=%g and rope_long_factor[%zu]=%g must be above 0 "
                   "and at most 1e6",
                   i, (double)m->rope_short_factor[i], i, (double)m->rope_long_factor[i]);
    if (!(m->rope_attention_factor >= 0.0f && m->rope_attention_factor <= 100.0f) ||
        m->rope_original_context < 1)
      return bad(err, errlen,
                 "model.rope_attention_factor=%g must be from 0 (none) to 100, and "
                 "rope_original_context (%u) at least 1",
                 (double)m->rope_attention_factor, m->rope_original_context);
  }
  if (!(m->rope_theta >= 1.0f && m->rope_theta <= 1e9f))
    return bad(err, errlen, "model.rope_theta=%g must be between 1 and 1e9", (double)m->rope_theta);
  if (m->block_size < 1 || m->block_size > (1u << 20))
    return bad(err, errlen, "model.block_size=%u must be between 1 and 1048576", m->block_size);
  if (m->vocab_size < 1)
    return bad(err, errlen, "model.vocab_size=%u must be at least 1", m->vocab_size);
  if (m->vocab_size > (1u << 20))
    return bad(err, errlen,
               "model.vocab_size=%u exceeds 1048576 (uint16 token shards address 65,536 tokens, "
               "uint32 ones more)",
               m->vocab_size);

  /* data */
  const Colo__V1__DataSpec *d = s->data;
  int have_train = d->train_path && d->train_path[0];
  /* train.steps=0: a model evaluated, not trained; its job needs no training data */
  if (!have_train && d->n_sources == 0 && s->train->steps > 0)
    return bad(err, errlen, "data.train_path must be set (or data.sources, a blend)");
  if (have_train && d->n_sources > 0)
    return bad(err, errlen,
               "data.train_path and data.sources do not go together: a blend names every "
               "training set in data.sources");
  int rc = check_sources("sources", "training", d->sources, d->n_sources, err, errlen);
  if (rc < 0)
    return rc;
  double wsum = 0;
  for (size_t i = 0; i < d->n_sources; i++)
    wsum += d->sources[i]->weight;
  for (size_t i = 0; i < d->n_sources; i++)
    if (d->sources[i]->weight / wsum * COLO_BLEND_SLOTS < 1.0)
      return bad(err, errlen,
                 "data.sources[%zu].weight=%g is less than 1/%d of the weights' sum (%g)", i,
                 (double)d->sources[i]->weight, COLO_BLEND_SLOTS, wsum);
  int have_val = d->val_path && d->val_path[0];
  if (have_val && d->n_val_sources > 0)
    return bad(err, errlen,
               "data.val_path and data.val_sources do not go together: name every validation "
               "set in data.val_sources");
  if ((rc = check_sources("val_sources", "validation", d->val_sources, d->n_val_sources, err,
                          errlen)) < 0)
    return rc;
  if ((rc = check_names("val_sources", d->val_sources, d->n_val_sources, err, errlen)) < 0)
    return rc;
  if ((rc = check_sources("choice_sets", "multiple-choice", d->choice_sets, d->n_choice_sets, err,
                          errlen)) < 0 ||
      (rc = check_names("choice_sets", d->choice_sets, d->n_choice_sets, err, errlen)) < 0)
    return rc;
  for (size_t i = 0; i < d->n_choice_sets; i++)
    if (d->choice_sets[i]->has_weight && d->choice_sets[i]->weight != 1.0f)
      return bad(err, errlen,
                 "data.choice_sets[%zu].weight=%g: a multiple-choice set has no weight (each "
                 "one's accuracy is reported alone)",
                 i, (double)d->choice_sets[i]->weight);
  if (d->order == COLO__V1__DATA_ORDER__DATA_ORDER_UNSPECIFIED)
    return bad(err, errlen, "data.order must be random or shuffle");
  if (d->document_token < -1 || (long long)d->document_token >= (long long)m->vocab_size)
    return bad(err, errlen,
               "data.document_token=%d must be -1 (none) or a token below model.vocab_size=%u",
               (int)d->document_token, m->vocab_size);
  if (have_train && !colo_path_is_contained(s->data->train_path))
    return bad(
        err, errlen,
        "data.train_path \"%.200s\" must be a path relative to the data root, without \"..\"",
        s->data->train_path);
  if (s->data->val_path && s->data->val_path[0] && !colo_path_is_contained(s->data->val_path))
    return bad(err, errlen,
               "data.val_path \"%.200s\" must be a path relative to the data root, without \"..\"",
               s->data->val_path);

  if (s->train->init_from && s->train->init_from[0] && !colo_path_is_contained(s->train->init_from))
    return bad(
        err, errlen,
        "train.init_from \"%.200s\" must be a path relative to the data root, without \"..\"",
        s->train->init_from);

  /* parallel layout */
  if (p->dp < 1)
    return bad(err, errlen, "parallel.dp=%u must be at least 1", p->dp);
  if (p->tp < 1)
    return bad(err, errlen, "parallel.tp=%u must be at least 1", p->tp);
  if (p->pp < 1)
    return bad(err, errlen, "parallel.pp=%u must be at least 1", p->pp);
  if (p->cp < 1)
    return bad(err, errlen, "parallel.cp=%u must be at least 1", p->cp);
  if (p->min_dp > p->dp)
    return bad(err, errlen, "parallel.min_dp=%u must be at most parallel.dp=%u", p->min_dp, p->dp);
  unsigned long long world = colo_jobspec_world(s);
  if (world > COLO_MAX_WORLD)
    return bad(err, errlen, "parallel.dp×cp×tp×pp=%llu exceeds the limit of %d ranks", world,
               COLO_MAX_WORLD);
  if (m->n_head % p->tp)
    return bad(err, errlen, "parallel.tp=%u does not divide model.n_head=%u", p->tp, m->n_head);
  if (m->n_kv_head % p->tp)
    return bad(err, errlen,
               "parallel.tp=%u does not divide model.n_kv_head=%u: each rank keeps whole key and "
               "value heads",
               p->tp, m->n_kv_head);
  unsigned mlp = mlp_width(m);
  if (mlp % p->tp)
    return bad(err, errlen, "parallel.tp=%u does not divide the MLP's width %u (model.mlp_hidden)",
               p->tp, mlp);
  if ((m->n_head / p->tp) % p->cp)
    return bad(err, errlen,
               "parallel.cp=%u does not divide the heads of each tensor-parallel rank "
               "(model.n_head/tp = %u): attention splits them over the sequence's pieces",
               p->cp, m->n_head / p->tp);
  if (m->block_size % p->cp)
    return bad(err, errlen,
               "parallel.cp=%u does not divide model.block_size=%u: each rank holds an equal piece "
               "of every sequence",
               p->cp, m->block_size);
  if (p->pp > m->n_layer)
    return bad(err, errlen, "parallel.pp=%u exceeds model.n_layer=%u: every stage needs a layer",
               p->pp, m->n_layer);
  if (p->zero_stage > 3)
    return bad(err, errlen, "parallel.zero_stage=%u must be 0, 1, 2 or 3", p->zero_stage);
  if (p->zero_stage >= 2 && p->pp > 1)
    return bad(err, errlen,
               "parallel.zero_stage=%u cannot be combined with parallel.pp=%u: use stage 0 or 1",
               p->zero_stage, p->pp);
  if (p->sequence_parallel && p->tp < 2)
    return bad(err, errlen, "parallel.sequence_parallel needs parallel.tp > 1 (it is %u)", p->tp);
  if (p->sequence_parallel && m->block_size % (p->tp * p->cp))
    return bad(
        err, errlen,
        "parallel.tp=%u does not divide model.block_size=%u%s, as sequence parallelism needs",
        p->tp, m->block_size, p->cp > 1 ? "/cp" : "");
  if (p->micro_batches < 1)
    return bad(err, errlen, "parallel.micro_batches=%u must be at least 1", p->micro_batches);

  /* memory */
  if (mem->placement == COLO__V1__PLACEMENT__PLACEMENT_UNSPECIFIED)
    return bad(err, errlen, "memory.placement must be device, static or auto");
  if (!(mem->param_device_fraction >= 0 && mem->param_device_fraction <= 1))
    return bad(err, errlen, "memory.param_device_fraction=%s must be between 0 and 1",
               fmt_float(mem->param_device_fraction, a, sizeof a));
  if (!(mem->optim_device_fraction >= 0 && mem->optim_device_fraction <= 1))
    return bad(err, errlen, "memory.optim_device_fraction=%s must be between 0 and 1",
               fmt_float(mem->optim_device_fraction, a, sizeof a));
  if (!(mem->optim_nvme_fraction >= 0 && mem->optim_nvme_fraction <= 1))
    return bad(err, errlen, "memory.optim_nvme_fraction=%s must be between 0 and 1",
               fmt_float(mem->optim_nvme_fraction, a, sizeof a));
  if (mem->optim_device_fraction + mem->optim_nvme_fraction > 1.0f + 1e-6f)
    return bad(err, errlen,
               "memory.optim_device_fraction=%s plus memory.optim_nvme_fraction=%s exceeds 1",
               fmt_float(mem->optim_device_fraction, a, sizeof a),
               fmt_float(mem->optim_nvme_fraction, b, sizeof b));
  if (mem->placement != COLO__V1__PLACEMENT__PLACEMENT_STATIC &&
      (mem->param_device_fraction != 1.0f || mem->optim_device_fraction != 1.0f ||
       mem->optim_nvme_fraction != 0.0f))
    return bad(err, errlen, "memory fractions need memory.placement=static");
  if (mem->optim_nvme_fraction > 0 && (!mem->nvme_dir || !mem->nvme_dir[0]))
    return bad(err, errlen, "memory.optim_nvme_fraction=%s needs memory.nvme_dir",
               fmt_float(mem->optim_nvme_fraction, a, sizeof a));
  if (mem->nvme_dir && mem->nvme_dir[0] && !colo_path_is_contained(mem->nvme_dir))
    return bad(
        err, errlen,
        "memory.nvme_dir \"%.200s\" must be a path relative to the NVMe root, without \"..\"",
        mem->nvme_dir);
  if (mem->chunk_mib > 4096)
    return bad(err, errlen, "memory.chunk_mib=%u exceeds 4096", mem->chunk_mib);
  if (mem->placement != COLO__V1__PLACEMENT__PLACEMENT_DEVICE &&
      r->device != COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU)
    return bad(err, errlen, "memory.placement=static or auto needs resources.device=gpu");
  if (mem->placement == COLO__V1__PLACEMENT__PLACEMENT_AUTO && p->zero_stage < 1)
    return bad(err, errlen,
               "memory.placement=auto needs parallel.zero_stage of 1 or more: pieces leave the "
               "device as ZeRO pieces");
  /* the chunks that leave the device are ZeRO's: parameters only as stage-3 pieces, optimizer
   * state as the pieces of stage 1 and up (as in Colossal-AI's Gemini and DeepSpeed's offload) */
  if (mem->param_device_fraction < 1.0f && p->zero_stage != 3)
    return bad(err, errlen,
               "memory.param_device_fraction=%s needs parallel.zero_stage=3 (it is %u): "
               "parameters leave the device as ZeRO-3 pieces",
               fmt_float(mem->param_device_fraction, a, sizeof a), p->zero_stage);
  if ((mem->optim_device_fraction < 1.0f || mem->optim_nvme_fraction > 0.0f) && p->zero_stage < 1)
    return bad(err, errlen,
               "memory.optim_device_fraction=%s and memory.optim_nvme_fraction=%s need "
               "parallel.zero_stage of 1 or more: optimizer state leaves the device as ZeRO pieces",
               fmt_float(mem->optim_device_fraction, a, sizeof a),
               fmt_float(mem->optim_nvme_fraction, b, sizeof b));

  /* optimizer and schedule */
  if (!(o->lr > 0) || !isfinite(o->lr))
    return bad(err, errlen, "optimizer.lr=%s must be positive", fmt_float(o->lr, a, sizeof a));
  if (!(o->min_lr >= 0) || o->min_lr > o->lr)
    return bad(err, errlen, "optimizer.min_lr=%s must be between 0 and optimizer.lr=%s",
               fmt_float(o->min_lr, a, sizeof a), fmt_float(o->lr, b, sizeof b));
  if (!(o->beta1 >= 0 && o->beta1 < 1))
    return bad(err, errlen, "optimizer.beta1=%s must be in [0, 1)",
               fmt_float(o->beta1, a, sizeof a));
  if (!(o->beta2 >= 0 && o->beta2 < 1))
    return bad(err, errlen, "optimizer.beta2=%s must be in [0, 1)",
               fmt_float(o->beta2, a, sizeof a));
  if (!(o->eps > 0))
    return bad(err, errlen, "optimizer.eps=%s must be positive", fmt_float(o->eps, a, sizeof a));
  if (!(o->weight_decay >= 0))
    return bad(err, errlen, "optimizer.weight_decay=%s must not be negative",
               fmt_float(o->weight_decay, a, sizeof a));
  if (!(o->grad_clip >= 0))
    return bad(err, errlen, "optimizer.grad_clip=%s must not be negative (0 disables clipping)",
               fmt_float(o->grad_clip, a, sizeof a));
  if (!(o->skip_spike_sigma >= 0.0f && o->skip_spike_sigma <= 100.0f))
    return bad(err, errlen, "optimizer.skip_spike_sigma=%s must be in [0, 100] (0: never skip)",
               fmt_float(o->skip_spike_sigma, a, sizeof a));
  if (o->skip_spike_window < 4 || o->skip_spike_window > 1024)
    return bad(err, errlen, "optimizer.skip_spike_window=%u must be 4 to 1024 steps",
               o->skip_spike_window);
  if (o->schedule == COLO__V1__SCHEDULE__SCHEDULE_UNSPECIFIED)
    return bad(err, errlen, "optimizer.schedule must be cosine, linear, constant or wsd");
  if (o->name == COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_UNSPECIFIED)
    return bad(err, errlen, "optimizer.name must be adamw or muon");
  if (!(o->muon_momentum >= 0.0f && o->muon_momentum < 1.0f))
    return bad(err, errlen, "optimizer.muon_momentum=%s must be in [0, 1)",
               fmt_float(o->muon_momentum, a, sizeof a));
  if (o->name == COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_MUON) {
    if (t->lora_rank > 0)
      return bad(err, errlen,
                 "optimizer.name=muon trains a whole model: train.lora_rank=%u's adapters take "
                 "adamw",
                 t->lora_rank);
  } else if (o->muon_momentum != 0.95f)
    return bad(err, errlen, "optimizer.muon_momentum=%s needs optimizer.name=muon",
               fmt_float(o->muon_momentum, a, sizeof a));
  if (!(o->muon_lr >= 0.0f && o->muon_lr <= 10.0f))
    return bad(err, errlen, "optimizer.muon_lr=%s must be 0 (lr) to 10",
               fmt_float(o->muon_lr, a, sizeof a));
  if (o->muon_adjust_lr == COLO__V1__MUON_ADJUST_LR__MUON_ADJUST_LR_UNSPECIFIED)
    return bad(err, errlen, "optimizer.muon_adjust_lr must be match_rms_adamw or original");
  if (o->name != COLO__V1__OPTIMIZER_NAME__OPTIMIZER_NAME_MUON &&
      (o->muon_lr != 0.0f ||
       o->muon_adjust_lr != COLO__V1__MUON_ADJUST_LR__MUON_ADJUST_LR_MATCH_RMS_ADAMW))
    return bad(err, errlen, "optimizer.%s needs optimizer.name=muon",
               o->muon_lr != 0.0f ? "muon_lr" : "muon_adjust_lr");
  if (o->decay_steps && o->schedule != COLO__V1__SCHEDULE__SCHEDULE_WSD)
    return bad(err, errlen,
               "optimizer.decay_steps=%u needs optimizer.schedule=wsd (the others decay from the "
               "warm-up's end)",
               o->decay_steps);

  /* training; or, at train.steps=0, a model's evaluation alone */
  int eval_only = t->steps == 0;
  int has_val = (s->data->val_path && s->data->val_path[0]) || s->data->n_val_sources > 0;
  if (eval_only) {
    const char *why = NULL;
    if (!(t->init_from && t->init_from[0]) && !(t->has_init_from_job && t->init_from_job))
      why = "it needs a model: train.init_from or train.init_from_job";
    else if (!has_val && s->data->n_choice_sets == 0)
      why = "it needs something to evaluate on: data.val_path, data.val_sources or "
            "data.choice_sets";
    else if (t->dpo_beta > 0.0f)
      why = "train.dpo_beta's evaluation compares the model with its reference as training "
            "starts: it needs training steps";
    else if (ck->keep_best || t->early_stop_patience > 0 || ck->interval > 0 ||
             (ck->export_format && ck->export_format[0]))
      why = "it writes no checkpoint, so checkpoint.keep_best, checkpoint.interval, "
            "checkpoint.export_format and train.early_stop_patience do not apply";
    if (why)
      return bad(err, errlen, "train.steps=0 evaluates a model without training it: %s", why);
  }
  if (!eval_only && o->warmup_steps > t->steps)
    return bad(err, errlen, "optimizer.warmup_steps=%u exceeds train.steps=%u", o->warmup_steps,
               t->steps);
  if (!eval_only && o->schedule == COLO__V1__SCHEDULE__SCHEDULE_WSD &&
      (unsigned long long)o->warmup_steps + colo_decay_steps(s) > t->steps)
    return bad(err, errlen,
               "optimizer.warmup_steps=%u and the decay's %u steps exceed train.steps=%u",
               o->warmup_steps, colo_decay_steps(s), t->steps);
  if (t->batch_size < 1)
    return bad(err, errlen, "train.batch_size=%u must be at least 1", t->batch_size);
  if (t->batch_size % p->micro_batches)
    return bad(err, errlen, "parallel.micro_batches=%u does not divide train.batch_size=%u",
               p->micro_batches, t->batch_size);
  if (t->grad_accum < 1)
    return bad(err, errlen, "train.grad_accum=%u must be at least 1", t->grad_accum);
  if (t->precision == COLO__V1__PRECISION__PRECISION_UNSPECIFIED)
    return bad(err, errlen, "train.precision must be fp32, bf16 or fp16");
  if (t->tf32 && r->device != COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU)
    return bad(err, errlen,
               "train.tf32 needs resources.device=gpu: TF32 is a GPU's tensor-core mode");
  if (t->tf32 && t->precision != COLO__V1__PRECISION__PRECISION_FP32)
    return bad(err, errlen, "train.tf32 applies to train.precision=fp32 only, not %s",
               t->precision == COLO__V1__PRECISION__PRECISION_BF16 ? "bf16" : "fp16");
  if (t->loss_scaling == COLO__V1__LOSS_SCALING__LOSS_SCALING_UNSPECIFIED)
    return bad(err, errlen, "train.loss_scaling must be auto, none or dynamic");
  if (!(t->loss_scale_init >= 1.0f && t->loss_scale_init <= 16777216.0f))
    return bad(err, errlen, "train.loss_scale_init=%s must be in [1, 16777216]",
               fmt_float(t->loss_scale_init, a, sizeof a));
  if (t->loss_scale_window < 1)
    return bad(err, errlen, "train.loss_scale_window=%u must be at least 1", t->loss_scale_window);
  int evaluates = t->eval_interval > 0 || ck->keep_best || eval_only;
  if (t->eval_batches == 0 && evaluates && p->pp > 1 && !(t->dpo_beta > 0.0f))
    return bad(err, errlen,
               "train.eval_batches=0 (every window of the validation set) needs parallel.pp=1: "
               "a pipeline evaluates whole batches"); /* DPO's, of pairs, are whole batches */
  if (t->choice_questions > 0 && s->data->n_choice_sets == 0)
    return bad(err, errlen,
               "train.choice_questions=%u limits the questions of data.choice_sets, and the job "
               "names none",
               t->choice_questions);
  if (s->data->n_choice_sets > 0 && !evaluates)
    return bad(err, errlen,
               "data.choice_sets are scored at each evaluation: they need train.eval_interval "
               "(or checkpoint.keep_best)");
  if (t->eval_interval > 0 && !has_val && !eval_only)
    return bad(err, errlen,
               "train.eval_interval=%u needs data.val_path or data.val_sources (0 disables "
               "evaluation)",
               t->eval_interval);

  /* checkpoints */
  if (ck->interval > t->steps)
    return bad(err, errlen, "checkpoint.interval=%u exceeds train.steps=%u", ck->interval,
               t->steps);
  if (ck->dir && ck->dir[0] && !colo_path_is_contained(ck->dir))
    return bad(err, errlen,
               "checkpoint.dir \"%.200s\" must be a path relative to the checkpoint root, "
               "without \"..\"",
               ck->dir);
  if (ck->keep < 1)
    return bad(err, errlen, "checkpoint.keep=%u must be at least 1", ck->keep);
  const char *ef = ck->export_format && ck->export_format[0] ? ck->export_format : NULL;
  if (ef && strcmp(ef, "gguf") && strcmp(ef, "hf") && strcmp(ef, "peft") && strcmp(ef, "gguf-lora"))
    return bad(err, errlen,
               "checkpoint.export_format \"%.40s\" must be gguf, hf, peft or gguf-lora", ef);
  if (ef && (!strcmp(ef, "peft") || !strcmp(ef, "gguf-lora")) && t->lora_rank == 0)
    return bad(err, errlen,
               "checkpoint.export_format=%s writes LoRA adapters: it needs train.lora_rank > 0",
               ef);
  if (ef && !strncmp(ef, "gguf", 4) && s->model && s->model->n_rope_short_factor)
    return bad(err, errlen,
               "checkpoint.export_format=%s with LongRoPE (model.rope_short_factor): llama.cpp's "
               "llama architecture does not scale the rotation; export hf",
               ef);
  if (ef && !strcmp(ef, "gguf-lora") && t->lora_dora)
    return bad(err, errlen,
               "checkpoint.export_format=gguf-lora with train.lora_dora: llama.cpp's LoRA "
               "adapters have no DoRA magnitudes; export gguf or hf (the adapters merged in) or "
               "peft");
  if (ck->export_tokenizer && ck->export_tokenizer[0] &&
      !colo_path_is_contained(ck->export_tokenizer))
    return bad(err, errlen,
               "checkpoint.export_tokenizer \"%.200s\" must be a path relative to the data root, "
               "without \"..\"",
               ck->export_tokenizer);
  const char *et = ck->export_type && ck->export_type[0] ? ck->export_type : NULL;
  if (et && strcmp(et, "f32") && strcmp(et, "f16") && strcmp(et, "bf16") && strcmp(et, "q8_0") &&
      strcmp(et, "q4_0"))
    return bad(err, errlen, "checkpoint.export_type \"%.40s\" must be f32, f16, bf16, q8_0 or q4_0",
               et);
  if ((et || (ck->export_tokenizer && ck->export_tokenizer[0])) && !(ef && !strcmp(ef, "gguf")))
    return bad(err, errlen,
               "checkpoint.export_tokenizer and export_type are for checkpoint.export_format=gguf");
  if (ck->export_ema && !(ef && (!strcmp(ef, "gguf") || !strcmp(ef, "hf")) && t->ema_decay > 0.0f))
    return bad(err, errlen,
               "checkpoint.export_ema exports the weights' moving average: it needs "
               "train.ema_decay > 0 and checkpoint.export_format gguf or hf");
  if (t->early_stop_patience > 0 && !(t->eval_interval > 0 || (ck->keep_best && ck->interval > 0)))
    return bad(err, errlen,
               "train.early_stop_patience=%u needs evaluations: train.eval_interval > 0, or "
               "checkpoint.keep_best with a checkpoint.interval",
               t->early_stop_patience);
  if (!(t->early_stop_min_delta >= 0.0f && isfinite(t->early_stop_min_delta)))
    return bad(err, errlen, "train.early_stop_min_delta=%g must be a number, at least 0",
               (double)t->early_stop_min_delta);
  const char *lq = t->lora_quant && t->lora_quant[0] ? t->lora_quant : NULL;
  if (lq && strcmp(lq, "nf4") && strcmp(lq, "none"))
    return bad(err, errlen, "train.lora_quant \"%.40s\" must be nf4 or none", lq);
  int nf4 = lq && !strcmp(lq, "nf4");
  if (t->lora_rslora && t->lora_rank == 0)
    return bad(err, errlen,
               "train.lora_rslora scales LoRA adapters' updates: it needs train.lora_rank > 0");
  if (t->lora_dropout != 0.0f && t->lora_rank == 0)
    return bad(err, errlen,
               "train.lora_dropout=%g drops the adapters' inputs: it needs train.lora_rank > 0",
               (double)t->lora_dropout);
  if (t->lora_plus_ratio != 0.0f && t->lora_rank == 0)
    return bad(err, errlen,
               "train.lora_plus_ratio=%g sets the adapters' B learning rate: it needs "
               "train.lora_rank > 0",
               (double)t->lora_plus_ratio);
  if (t->lora_dora && t->lora_rank == 0)
    return bad(err, errlen,
               "train.lora_dora rescales LoRA adapters' products: it needs train.lora_rank > 0");
  if (nf4 && t->lora_rank == 0)
    return bad(err, errlen,
               "train.lora_quant=nf4 quantizes the frozen model of a LoRA run: it needs "
               "train.lora_rank > 0");
  if (!(t->neftune_alpha >= 0.0f && t->neftune_alpha <= 1000.0f))
    return bad(err, errlen, "train.neftune_alpha=%g must be between 0 and 1000",
               (double)t->neftune_alpha);
  if (!(t->ema_decay >= 0.0f && t->ema_decay < 1.0f))
    return bad(err, errlen, "train.ema_decay=%s must be in [0, 1) (0: none)",
               fmt_float(t->ema_decay, a, sizeof a));
  if (t->ema_decay > 0.0f && t->lora_rank > 0)
    return bad(err, errlen,
               "train.ema_decay averages a whole model's weights, and train.lora_rank=%u "
               "trains adapters alone",
               t->lora_rank);
  if (t->lora_double_quant && !nf4)
    return bad(err, errlen,
               "train.lora_double_quant quantizes NF4's scales: it needs train.lora_quant=nf4");
  if (!(t->dpo_beta >= 0.0f && t->dpo_beta <= 100.0f))
    return bad(err, errlen, "train.dpo_beta=%g must be between 0 and 100", (double)t->dpo_beta);
  const char *dl = t->dpo_loss && t->dpo_loss[0] ? t->dpo_loss : NULL;
  int ref_free = dl && (!strcmp(dl, "simpo") || !strcmp(dl, "orpo"));
  if (dl && strcmp(dl, "sigmoid") && strcmp(dl, "hinge") && strcmp(dl, "ipo") && !ref_free)
    return bad(err, errlen, "train.dpo_loss \"%.40s\" must be sigmoid, hinge, ipo, simpo or orpo",
               dl);
  if (dl && !(t->dpo_beta > 0.0f))
    return bad(err, errlen, "train.dpo_loss=%s is DPO's loss: it needs train.dpo_beta > 0", dl);
  if (!(t->dpo_label_smoothing >= 0.0f && t->dpo_label_smoothing < 0.5f))
    return bad(err, errlen, "train.dpo_label_smoothing=%g must be at least 0 and below 0.5",
               (double)t->dpo_label_smoothing);
  if (t->dpo_label_smoothing > 0.0f &&
      (!(t->dpo_beta > 0.0f) || (dl && strcmp(dl, "sigmoid") && strcmp(dl, "simpo"))))
    return bad(err, errlen,
               "train.dpo_label_smoothing=%g smooths the sigmoid loss: it needs train.dpo_beta > 0 "
               "and train.dpo_loss sigmoid or simpo",
               (double)t->dpo_label_smoothing);
  if (!(t->dpo_simpo_gamma >= 0.0f && t->dpo_simpo_gamma <= 100.0f))
    return bad(err, errlen, "train.dpo_simpo_gamma=%g must be between 0 and 100",
               (double)t->dpo_simpo_gamma);
  if (t->dpo_simpo_gamma != 0.5f && !(dl && !strcmp(dl, "simpo"))) /* set, not the default */
    return bad(err, errlen,
               "train.dpo_simpo_gamma=%g is SimPO's margin: it needs train.dpo_loss simpo",
               (double)t->dpo_simpo_gamma);
  if (!(t->dpo_rpo_alpha >= 0.0f && t->dpo_rpo_alpha <= 100.0f))
    return bad(err, errlen, "train.dpo_rpo_alpha=%g must be between 0 and 100",
               (double)t->dpo_rpo_alpha);
  if (t->dpo_rpo_alpha > 0.0f && (!(t->dpo_beta > 0.0f) || (dl && !strcmp(dl, "orpo"))))
    return bad(err, errlen,
               "train.dpo_rpo_alpha=%g adds the chosen answer's NLL to DPO's loss: it needs "
               "train.dpo_beta > 0, and train.dpo_loss orpo has its own",
               (double)t->dpo_rpo_alpha);
  if (t->dpo_precompute && ref_free)
    return bad(err, errlen,
               "train.dpo_precompute computes DPO's reference, and train.dpo_loss=%s has none", dl);
  if (t->dpo_precompute && !(t->dpo_beta > 0.0f))
    return bad(err, errlen,
               "train.dpo_precompute computes DPO's reference once: it needs train.dpo_beta > 0");
  if (t->dpo_beta > 0.0f && t->batch_size % 2)
    return bad(err, errlen,
               "train.dpo_beta=%g needs an even train.batch_size (%u): a pair is two rows, its "
               "chosen and its rejected answer",
               (double)t->dpo_beta, t->batch_size);
  if (t->dpo_beta > 0.0f && s->parallel->pp > 1 && s->parallel->micro_batches > 0 &&
      (t->batch_size / s->parallel->micro_batches) % 2)
    return bad(err, errlen,
               "train.dpo_beta=%g with parallel.micro_batches=%u: each micro-batch of %u rows "
               "must hold whole pairs (an even number of rows)",
               (double)t->dpo_beta, s->parallel->micro_batches,
               t->batch_size / s->parallel->micro_batches);
  if (t->lora_rank > 0) {
    unsigned tg;
    char why[160];
    if (t->lora_rank > s->model->n_embd)
      return bad(err, errlen, "train.lora_rank=%u is above model.n_embd=%u", t->lora_rank,
                 s->model->n_embd);
    if (!(t->lora_alpha > 0.0f && isfinite(t->lora_alpha)))
      return bad(err, errlen, "train.lora_alpha=%g must be a number above 0",
                 (double)t->lora_alpha);
    if (!(t->lora_dropout >= 0.0f && t->lora_dropout < 1.0f))
      return bad(err, errlen, "train.lora_dropout=%g must be at least 0 and below 1",
                 (double)t->lora_dropout);
    if (!(t->lora_plus_ratio >= 0.0f && t->lora_plus_ratio <= 1024.0f))
      return bad(err, errlen, "train.lora_plus_ratio=%g must be between 0 and 1024",
                 (double)t->lora_plus_ratio);
    if (t->lora_targets && t->lora_targets[0] &&
        colo_lora_targets_parse(t->lora_targets, &tg, why, sizeof why) < 0)
      return bad(err, errlen, "train.lora_targets: %s", why);
    unsigned tp = s->parallel->tp ? s->parallel->tp : 1, cw = s->model->n_embd / tp,
             hw = mlp_width(s->model) / tp;
    if (tp > 1 && nf4 && (cw % 64 || hw % 64))
      return bad(err, errlen,
                 "train.lora_quant=nf4 with parallel.tp=%u needs model.n_embd/tp (%u) and the "
                 "MLP's width/tp (%u) to be multiples of 64: each rank's part of a matrix must "
                 "hold whole NF4 blocks, as the model whole does",
                 tp, cw, hw);
    unsigned qw = s->model->n_head * s->model->head_dim / tp; /* 0 without head_dim: C's above */
    if (tp > 1 && nf4 && qw % 64)
      return bad(err, errlen,
                 "train.lora_quant=nf4 with parallel.tp=%u needs the queries' "
                 "n_head·head_dim/tp (%u) to be a multiple of 64, as n_embd/tp",
                 tp, qw);
    if (s->parallel->zero_stage == 1 || s->parallel->zero_stage == 2)
      return bad(err, errlen,
                 "train.lora_rank=%u with parallel.zero_stage=%u: stages 1 and 2 shard gradients "
                 "and optimizer state, and the frozen model has none; zero_stage=3 shards its "
                 "parameters, 0 keeps it whole",
                 t->lora_rank, s->parallel->zero_stage);
    if (s->memory->optim_device_fraction < 1.0f || s->memory->optim_nvme_fraction > 0.0f)
      return bad(err, errlen,
                 "train.lora_rank=%u: memory.optim_device_fraction and optim_nvme_fraction place "
                 "the model's optimizer state, and the frozen model has none (the adapters' stays "
                 "on the device); memory.param_device_fraction places its ZeRO-3 pieces",
                 t->lora_rank);
  }
  int best_set, best_kind;
  if (colo_best_metric(s, &best_set, &best_kind) < 0)
    return bad(err, errlen,
               "train.best_metric \"%.80s\" must be val_loss, or NAME.acc, NAME.acc_norm or "
               "NAME.acc_token with NAME one of data.choice_sets",
               t->best_metric);
  if (ck->keep_best && !best_set && (!s->data->val_path || !s->data->val_path[0]) &&
      s->data->n_val_sources == 0)
    return bad(err, errlen,
               "checkpoint.keep_best needs data.val_path or data.val_sources: the best checkpoint "
               "is the one with the lowest validation loss (or train.best_metric: a "
               "data.choice_sets score)");

  /* resources and restarts */
  if (r->device == COLO__V1__DEVICE_KIND__DEVICE_KIND_UNSPECIFIED)
    return bad(err, errlen, "resources.device must be cpu or gpu");
  if (r->comm == COLO__V1__COMM_KIND__COMM_KIND_UNSPECIFIED)
    return bad(err, errlen, "resources.comm must be auto, nccl or host");
  if (r->comm == COLO__V1__COMM_KIND__COMM_KIND_NCCL &&
      r->device != COLO__V1__DEVICE_KIND__DEVICE_KIND_GPU)
    return bad(err, errlen,
               "resources.comm=nccl needs resources.device=gpu: NCCL moves GPU memory");
  if (r->host_memory_mib > (1ull << 30))
    return bad(err, errlen, "resources.host_memory_mib=%llu exceeds 1073741824 (1 PiB)",
               (unsigned long long)r->host_memory_mib);
  if (r->time_limit_s > COLO_MAX_TIME_LIMIT_S)
    return bad(err, errlen, "resources.time_limit_s=%u exceeds %u (a year)", r->time_limit_s,
               COLO_MAX_TIME_LIMIT_S);
  if (r->devices_per_node > 0 && p->tp > r->devices_per_node)
    return bad(err, errlen,
               "parallel.tp=%u exceeds resources.devices_per_node=%u: a tensor-parallel group "
               "must fit in one node",
               p->tp, r->devices_per_node);
  if (r->devices_per_node > 0 && r->devices_per_node % p->tp)
    return bad(err, errlen,
               "parallel.tp=%u does not divide resources.devices_per_node=%u: tensor-parallel "
               "groups would straddle nodes",
               p->tp, r->devices_per_node);
  if (colo_labels_check("resources.host_labels", r->host_labels, r->n_host_labels, err, errlen) < 0)
    return COLO_EINVAL;
  if (s->max_restarts > COLO_MAX_RESTARTS)
    return bad(err, errlen, "max_restarts=%u exceeds %d", s->max_restarts, COLO_MAX_RESTARTS);
  if (s->priority < -COLO_MAX_PRIORITY || s->priority > COLO_MAX_PRIORITY)
    return bad(err, errlen, "priority=%d must be between %d and %d", s->priority,
               -COLO_MAX_PRIORITY, COLO_MAX_PRIORITY);
  if (s->train->init_from && s->train->init_from[0] && s->train->has_init_from_job &&
      s->train->init_from_job)
    return bad(err, errlen, "train.init_from and train.init_from_job are exclusive: set one");
  if (s->train->init_pick == COLO__V1__INIT_PICK__INIT_PICK_UNSPECIFIED)
    return bad(err, errlen, "train.init_pick must be newest or best");
  if (s->train->init_pick == COLO__V1__INIT_PICK__INIT_PICK_BEST &&
      !(s->train->has_init_from_job && s->train->init_from_job))
    return bad(err, errlen,
               "train.init_pick=best needs train.init_from_job: it picks among that job's "
               "checkpoints");
  if (s->train->init_step > 0 && !(s->train->has_init_from_job && s->train->init_from_job))
    return bad(err, errlen,
               "train.init_step=%u needs train.init_from_job: it picks that job's checkpoint at "
               "that step",
               s->train->init_step);
  if (s->train->init_average == 1 || s->train->init_average > 64)
    return bad(err, errlen, "train.init_average=%u must be 2 to 64 checkpoints (0: none)",
               s->train->init_average);
  if (s->train->init_average > 0 && !(s->train->has_init_from_job && s->train->init_from_job))
    return bad(err, errlen,
               "train.init_average=%u needs train.init_from_job: it averages that job's newest "
               "checkpoints",
               s->train->init_average);
  if (s->train->init_average > 0 &&
      (s->train->init_step > 0 || s->train->init_pick == COLO__V1__INIT_PICK__INIT_PICK_BEST))
    return bad(err, errlen,
               "train.init_average=%u averages the newest checkpoints: not with train.init_step or "
               "train.init_pick=best",
               s->train->init_average);
  if (s->train->init_step > 0 && s->train->init_pick == COLO__V1__INIT_PICK__INIT_PICK_BEST)
    return bad(err, errlen,
               "train.init_step=%u and train.init_pick=best each pick a checkpoint: set one",
               s->train->init_step);
  if (s->account && s->account[0] && !colo_jobspec_name_ok(s->account))
    return bad(err, errlen,
               "account \"%.80s\" must be 1 to %d letters, digits, '-', '_' and '.', or empty",
               s->account, COLO_MAX_NAME);
  const Colo__V1__NotifySpec *nt = s->notify;
  if (nt && (!nt->url || !nt->url[0]) && nt->n_on)
    return bad(err, errlen, "notify.on needs notify.url: where to tell");
  if (nt && nt->url && nt->url[0]) {
    if (colo_url_check("notify.url", nt->url, err, errlen) < 0)
      return COLO_EINVAL;
    for (size_t i = 0; i < nt->n_on; i++) {
      if (nt->on[i] <= COLO__V1__NOTIFY_EVENT__NOTIFY_EVENT_UNSPECIFIED ||
          nt->on[i] > COLO__V1__NOTIFY_EVENT__NOTIFY_EVENT_FAILED)
        return bad(err, errlen, "notify.on[%zu] must be started, restarting, ended or failed", i);
      for (size_t k = 0; k < i; k++)
        if (nt->on[k] == nt->on[i])
          return bad(err, errlen, "notify.on names %s twice", NOTIFY_EVENT_NAME[nt->on[i]]);
    }
  }
  if (s->after_condition == COLO__V1__AFTER_CONDITION__AFTER_CONDITION_UNSPECIFIED)
    return bad(err, errlen, "after_condition must be succeeded or ended");
  if (s->n_after > COLO_MAX_AFTER)
    return bad(err, errlen, "after lists %zu jobs; at most %d", s->n_after, COLO_MAX_AFTER);
  for (size_t i = 0; i < s->n_after; i++) {
    if (s->after[i] == 0)
      return bad(err, errlen, "after[%zu]=0 is not a job id", i);
    for (size_t k = 0; k < i; k++)
      if (s->after[k] == s->after[i])
        return bad(err, errlen, "after lists job %llu twice", (unsigned long long)s->after[i]);
  }
  return 0;
}
