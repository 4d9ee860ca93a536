/* The training loop: sample, forward, backward (with gradient accumulation), all-reduce (a
 * world of one here), clip, AdamW, evaluate, checkpoint, report. */
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../common/error.h"
#include "../backend/backend.h"
#include "../comm/comm.h"
#include "../core/pool.h"
#include "../core/rng.h"
#include "checkpoint.h"
#include "data.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the reference dump: what the PyTorch test compares against ---- */

typedef struct {
  colo_st_tensor_t *t;
  char **names;
  float **bufs;
  size_t n, cap;
} dump_t;

static void dump_add(dump_t *d, const char *name, const float *data, int d0, int d1) {
  if (d->n == d->cap) {
    d->cap = d->cap ? d->cap * 2 : 64;
    d->t = realloc(d->t, d->cap * sizeof *d->t);
    d->names = realloc(d->names, d->cap * sizeof *d->names);
    d->bufs = realloc(d->bufs, d->cap * sizeof *d->bufs);
  }
  size_t numel = (size_t)d0 * (d1 ? (size_t)d1 : 1);
  d->names[d->n] = strdup(name);
  d->bufs[d->n] = malloc(numel * sizeof(float));
  memcpy(d->bufs[d->n], data, numel * sizeof(float));
  d->t[d->n] = (colo_st_tensor_t){d->names[d->n], d->bufs[d->n], d1 ? 2 : 1, {d0, d1}, numel};
  d->n++;
}

static void dump_model(dump_t *d, const char *prefix, colo_gpt_t *m, const float *base) {
  size_t nt;
  const colo_param_t *tab = colo_gpt_params_table(m, &nt);
  for (size_t i = 0; i < nt; i++) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", prefix, tab[i].name);
    dump_add(d, name, base + tab[i].offset, tab[i].shape[0], tab[i].shape[1]);
  }
}

static void dump_free(dump_t *d) {
  for (size_t i = 0; i < d->n; i++) {
    free(d->names[i]);
    free(d->bufs[i]);
  }
  free(d->t);
  free(d->names);
  free(d->bufs);
}

/* ---- evaluation ---- */

static float evaluate(colo_gpt_t *m, const colo_shard_t *val, uint64_t seed, int batches, int B,
                      int T, int *in, int *tg) {
  double s = 0.0;
  for (int i = 0; i < batches; i++) {
    colo_sample_eval_batch(val, seed, i, B, T, in, tg);
    s += colo_gpt_forward(m, in, tg, B, T);
  }
  return (float)(s / batches);
}

int colo_train_run(const colo_train_config_t *cfg, float *final_loss, float *final_val, char *err,
                   size_t errlen) {
  const colo_backend_t *be = colo_backend_cpu();
  int B = cfg->batch_size, T = cfg->model.block_size, rc = 0;
  colo_shard_t train = {0}, val = {0};
  colo_pool_t *pool = NULL;
  colo_gpt_t *model = NULL;
  colo_adamw_t opt = {0};
  colo_comm_t *comm = colo_comm_single();
  dump_t dump = {0};
  int *in = NULL, *tg = NULL;
  float last_loss = NAN, last_val = NAN;

  if (cfg->seed >= (1ull << 53)) {
    snprintf(err, errlen,
             "train.seed=%llu must be below 2^53 (checkpoints store it as a JSON "
             "number)",
             (unsigned long long)cfg->seed);
    rc = COLO_EINVAL;
    goto out;
  }
  CHECK_GOTO(colo_shard_load(cfg->train_path, &train, err, errlen), rc, out);
  if (train.n <= (size_t)T + 1) {
    snprintf(err, errlen, "%s: %zu tokens are too few for block_size %d", train.path, train.n, T);
    rc = COLO_EINVAL;
    goto out;
  }
  for (size_t i = 0; i < train.n; i++)
    if (train.tokens[i] >= cfg->model.vocab_size) {
      snprintf(err, errlen, "%s: token %u at %zu is outside model.vocab_size=%d", train.path,
               train.tokens[i], i, cfg->model.vocab_size);
      rc = COLO_EINVAL;
      goto out;
    }
  if (cfg->eval_interval > 0) {
    CHECK_GOTO(colo_shard_load(cfg->val_path, &val, err, errlen), rc, out);
    if (val.n <= (size_t)T + 1) {
      snprintf(err, errlen, "%s: %zu tokens are too few for block_size %d", val.path, val.n, T);
      rc = COLO_EINVAL;
      goto out;
    }
  }
  pool = colo_pool_create("cpu", cfg->memory_limit);
  CHECK_GOTO(colo_gpt_create(&cfg->model, B, cfg->recompute, be, pool, &model, err, errlen), rc,
             out);
  CHECK_GOTO(colo_adamw_init(&opt, &cfg->optim, colo_gpt_num_params(model), pool, err, errlen), rc,
             out);
  in = malloc((size_t)B * T * sizeof *in);
  tg = malloc((size_t)B * T * sizeof *tg);

  int start = 0;
  char ckpt_path[1200] = "";
  if (cfg->resume) {
    char dir[1200], skipped[2048] = "";
    if (!strcmp(cfg->resume, "auto")) {
      if (!cfg->ckpt_dir ||
          colo_ckpt_find_latest(cfg->ckpt_dir, dir, sizeof dir, skipped, sizeof skipped) < 0)
        dir[0] = '\0'; /* nothing to resume from: start fresh */
      if (skipped[0])
        fprintf(stderr, "colo-train: skipped unusable checkpoints: %s\n", skipped);
    } else {
      snprintf(dir, sizeof dir, "%s", cfg->resume);
    }
    if (dir[0]) {
      colo_ckpt_meta_t meta;
      CHECK_GOTO(colo_ckpt_load(dir, &meta, model, &opt, 0, err, errlen), rc, out);
      if (meta.seed != cfg->seed) {
        snprintf(err, errlen, "checkpoint %s was trained with seed %llu, this run has %llu", dir,
                 (unsigned long long)meta.seed, (unsigned long long)cfg->seed);
        rc = COLO_EINVAL;
        goto out;
      }
      start = (int)meta.step;
      snprintf(ckpt_path, sizeof ckpt_path, "%s", dir);
      if (!cfg->quiet)
        printf("resumed from %s at step %d\n", dir, start);
    }
  }
  if (!ckpt_path[0])
    colo_gpt_init(model, cfg->seed);

  size_t n_params = colo_gpt_num_params(model);
  if (!cfg->quiet)
    printf("model: %d layers, %d heads, %d wide, block %d, vocab %d: %zu parameters; batch %d x "
           "accum %d x %d tokens; %d threads; memory %.1f MiB\n",
           cfg->model.n_layer, cfg->model.n_head, cfg->model.n_embd, T, cfg->model.vocab_size,
           n_params, B, cfg->grad_accum, T, colo_backend_cpu_threads(),
           (double)colo_pool_used(pool) / (1 << 20));
  if (cfg->dump_path)
    dump_model(&dump, "init.", model, colo_gpt_params(model));
  float *dump_losses = cfg->dump_path ? calloc((size_t)cfg->steps + 1, sizeof(float)) : NULL;
  float *dump_norms = cfg->dump_path ? calloc((size_t)cfg->steps + 1, sizeof(float)) : NULL;

  colo_ckpt_meta_t meta = {.seed = cfg->seed,
                           .loss_scale = 1.0f,
                           .model = cfg->model,
                           .dp = 1,
                           .tp = 1,
                           .pp = 1,
                           .world = 1};
  int step = start;
  for (; step < cfg->steps; step++) {
    if (cfg->eval_interval > 0 && step % cfg->eval_interval == 0) {
      last_val = evaluate(model, &val, cfg->seed, cfg->eval_batches, B, T, in, tg);
      if (!cfg->quiet)
        printf("step %6d | val loss %.4f\n", step, (double)last_val);
      if (cfg->progress)
        fprintf(cfg->progress,
                "{\"event\":\"eval\",\"step\":%d,\"val_loss\":%.6f,\"time_ms\":%lld}\n", step,
                (double)last_val, (long long)wall_ms());
    }
    if (cfg->ckpt_dir && cfg->ckpt_interval > 0 && step > start && step % cfg->ckpt_interval == 0) {
      meta.step = (uint64_t)step;
      meta.adam_t = opt.t;
      CHECK_GOTO(colo_ckpt_save(cfg->ckpt_dir, &meta, model, &opt, 0, ckpt_path, sizeof ckpt_path,
                                err, errlen),
                 rc, out);
      if (cfg->progress)
        fprintf(cfg->progress, "{\"event\":\"checkpoint\",\"step\":%d,\"path\":\"%s\"}\n", step,
                ckpt_path);
    }
    if (cfg->stop_at > 0 && step == cfg->stop_at)
      break;
    double t0 = now_s();
    colo_gpt_zero_grad(model);
    double loss = 0.0;
    for (int micro = 0; micro < cfg->grad_accum; micro++) {
      colo_sample_batch(&train, cfg->seed, (uint64_t)step, micro, colo_comm_rank(comm),
                        colo_comm_size(comm), B, T, in, tg);
      if (cfg->dump_path) {
        float *fb = malloc((size_t)B * T * 2 * sizeof(float));
        for (int i = 0; i < B * T; i++) {
          fb[i] = (float)in[i];
          fb[B * T + i] = (float)tg[i];
        }
        char name[64];
        snprintf(name, sizeof name, "batch.%d.%d", step, micro);
        dump_add(&dump, name, fb, 2 * B, T);
        free(fb);
      }
      loss += colo_gpt_forward(model, in, tg, B, T);
      colo_gpt_backward(model, 1.0f / (float)cfg->grad_accum);
    }
    loss /= cfg->grad_accum;
    CHECK_GOTO(comm->ops->allreduce_sum(comm, colo_gpt_grads(model), n_params), rc, out);
    if (cfg->dump_path && step == start)
      dump_model(&dump, "grad.", model, colo_gpt_grads(model));
    float gscale;
    float norm = colo_grad_norm(be, colo_gpt_grads(model), n_params, cfg->optim.grad_clip, &gscale);
    float lr = colo_lr_at(&cfg->optim, step);
    colo_adamw_step(&opt, be, model, lr, gscale);
    double dt = now_s() - t0;
    last_loss = (float)loss;
    if (!isfinite(last_loss)) {
      snprintf(err, errlen, "the loss became %f at step %d", (double)last_loss, step);
      rc = COLO_EINTERNAL;
      goto out;
    }
    if (dump_losses) {
      dump_losses[step] = last_loss;
      dump_norms[step] = norm;
    }
    double tok_s = (double)B * T * cfg->grad_accum / dt;
    if (!cfg->quiet)
      printf("step %6d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s\n", step + 1,
             cfg->steps, loss, (double)lr, (double)norm, dt * 1e3, tok_s);
    if (cfg->progress) {
      fprintf(cfg->progress,
              "{\"event\":\"step\",\"step\":%d,\"total_steps\":%d,\"loss\":%.6f,\"lr\":%.6e,"
              "\"grad_norm\":%.6f,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"memory_bytes\":%zu,"
              "\"time_ms\":%lld}\n",
              step + 1, cfg->steps, loss, (double)lr, (double)norm, dt * 1e3, tok_s,
              colo_pool_peak(pool), (long long)wall_ms());
      fflush(cfg->progress);
    }
  }
  if (step == cfg->steps && cfg->eval_interval > 0) {
    last_val = evaluate(model, &val, cfg->seed, cfg->eval_batches, B, T, in, tg);
    if (!cfg->quiet)
      printf("step %6d | val loss %.4f\n", step, (double)last_val);
    if (cfg->progress)
      fprintf(cfg->progress,
              "{\"event\":\"eval\",\"step\":%d,\"val_loss\":%.6f,\"time_ms\":%lld}\n", step,
              (double)last_val, (long long)wall_ms());
  }
  /* the last checkpoint: at the end, or where the run was told to stop */
  if (cfg->ckpt_dir && step > start) {
    meta.step = (uint64_t)step;
    meta.adam_t = opt.t;
    CHECK_GOTO(colo_ckpt_save(cfg->ckpt_dir, &meta, model, &opt, 0, ckpt_path, sizeof ckpt_path,
                              err, errlen),
               rc, out);
    if (!cfg->quiet)
      printf("checkpoint %s\n", ckpt_path);
    if (cfg->progress)
      fprintf(cfg->progress, "{\"event\":\"checkpoint\",\"step\":%d,\"path\":\"%s\"}\n", step,
              ckpt_path);
  }
  if (cfg->dump_path) {
    dump_model(&dump, "final.", model, colo_gpt_params(model));
    dump_add(&dump, "losses", dump_losses, cfg->steps, 0);
    dump_add(&dump, "grad_norms", dump_norms, cfg->steps, 0);
    CHECK_GOTO(colo_safetensors_write(cfg->dump_path, dump.t, dump.n, err, errlen), rc, out);
  }
  free(dump_losses);
  free(dump_norms);
  if (cfg->progress)
    fflush(cfg->progress);
  if (final_loss)
    *final_loss = last_loss;
  if (final_val)
    *final_val = last_val;
out:
  dump_free(&dump);
  free(in);
  free(tg);
  if (opt.m)
    colo_adamw_free(&opt);
  colo_gpt_destroy(model);
  colo_pool_destroy(pool);
  colo_shard_free(&train);
  colo_shard_free(&val);
  comm->ops->destroy(comm);
  return rc;
}

/* ---- eval and sample ---- */

static int open_checkpoint(const char *ckpt, int B, colo_pool_t **pool, colo_gpt_t **model,
                           colo_ckpt_meta_t *meta, char *err, size_t errlen) {
  int rc = colo_ckpt_read_meta(ckpt, meta, err, errlen);
  if (rc < 0)
    return rc;
  *pool = colo_pool_create("cpu", 0);
  rc = colo_gpt_create(&meta->model, B, 0, colo_backend_cpu(), *pool, model, err, errlen);
  if (rc == 0)
    rc = colo_ckpt_load(ckpt, meta, *model, NULL, 0, err, errlen);
  if (rc < 0) {
    colo_gpt_destroy(*model);
    *model = NULL;
    colo_pool_destroy(*pool);
  }
  return rc;
}

int colo_eval_checkpoint(const char *ckpt, const char *data, int batches, int batch_size,
                         uint64_t seed, float *loss, char *err, size_t errlen) {
  colo_pool_t *pool;
  colo_gpt_t *model = NULL;
  colo_ckpt_meta_t meta;
  colo_shard_t val;
  int rc = colo_shard_load(data, &val, err, errlen);
  if (rc < 0)
    return rc;
  rc = open_checkpoint(ckpt, batch_size, &pool, &model, &meta, err, errlen);
  if (rc == 0) {
    int T = meta.model.block_size;
    if (val.n <= (size_t)T + 1) {
      snprintf(err, errlen, "%s: %zu tokens are too few for block_size %d", data, val.n, T);
      rc = COLO_EINVAL;
    } else {
      int *in = malloc((size_t)batch_size * T * sizeof *in),
          *tg = malloc((size_t)batch_size * T * sizeof *tg);
      *loss = evaluate(model, &val, seed, batches, batch_size, T, in, tg);
      free(in);
      free(tg);
    }
    colo_gpt_destroy(model);
    colo_pool_destroy(pool);
  }
  colo_shard_free(&val);
  return rc;
}

int colo_sample_checkpoint(const char *ckpt, const char *prompt, int n, float temperature,
                           int top_k, uint64_t seed, FILE *out, char *err, size_t errlen) {
  colo_pool_t *pool;
  colo_gpt_t *model = NULL;
  colo_ckpt_meta_t meta;
  int rc = open_checkpoint(ckpt, 1, &pool, &model, &meta, err, errlen);
  if (rc < 0)
    return rc;
  int T = meta.model.block_size, V = meta.model.vocab_size;
  size_t plen = strlen(prompt);
  int total = (int)plen + n;
  int *ctx = malloc((size_t)(total > 0 ? total : 1) * sizeof *ctx);
  float *p = malloc((size_t)V * sizeof *p);
  int *idx = malloc((size_t)V * sizeof *idx);
  int len = 0;
  for (size_t i = 0; i < plen; i++)
    ctx[len++] = (unsigned char)prompt[i] % V;
  if (len == 0)
    ctx[len++] = '\n' % V; /* start from a newline */
  colo_rng_t rng;
  colo_rng_seed(&rng, seed);
  for (int k = 0; k < n; k++) {
    int from = len > T ? len - T : 0, t = len - from;
    colo_gpt_forward(model, ctx + from, NULL, 1, t);
    const float *logits = colo_gpt_logits(model) + (size_t)(t - 1) * V;
    /* temperature, then top-k, then softmax */
    float maxv = -INFINITY;
    for (int v = 0; v < V; v++) {
      p[v] = logits[v] / (temperature > 0 ? temperature : 1.0f);
      idx[v] = v;
      if (p[v] > maxv)
        maxv = p[v];
    }
    int next;
    if (temperature <= 0) { /* greedy */
      next = 0;
      for (int v = 1; v < V; v++)
        if (p[v] > p[next])
          next = v;
    } else {
      int kk = top_k > 0 && top_k < V ? top_k : V;
      if (kk < V) { /* keep the k largest: partial selection sort, k is small */
        for (int i = 0; i < kk; i++)
          for (int j = i + 1; j < V; j++)
            if (p[idx[j]] > p[idx[i]]) {
              int tmp = idx[i];
              idx[i] = idx[j];
              idx[j] = tmp;
            }
      }
      double sum = 0.0;
      for (int i = 0; i < kk; i++)
        sum += exp((double)(p[idx[i]] - maxv));
      double r = (double)colo_rng_uniform(&rng) * sum, acc = 0.0;
      next = idx[kk - 1];
      for (int i = 0; i < kk; i++) {
        acc += exp((double)(p[idx[i]] - maxv));
        if (r < acc) {
          next = idx[i];
          break;
        }
      }
    }
    ctx[len++] = next;
    fputc(next & 0xff, out);
  }
  fflush(out);
  free(ctx);
  free(p);
  free(idx);
  colo_gpt_destroy(model);
  colo_pool_destroy(pool);
  return 0;
}
