/* Checkpoint save, verify and load: safetensors files, a manifest with sha256 sums, atomic
 * rename. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "../../../common/error.h"
#include "safetensors.h"

#define MANIFEST "manifest.json"
#define FORMAT   "colo-checkpoint"

int colo_sha256_file(const char *path, char hex[65], uint64_t *bytes) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return COLO_EIO;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  unsigned char buf[1 << 16];
  size_t n;
  uint64_t total = 0;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    EVP_DigestUpdate(ctx, buf, n);
    total += n;
  }
  int rerr = ferror(f);
  fclose(f);
  unsigned char md[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (rerr)
    return COLO_EIO;
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
  *bytes = total;
  return 0;
}

static int fsync_path(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* ---- manifest ---- */

static int parse_manifest(const char *dir, colo_ckpt_meta_t *meta, cJSON **files_out,
                          cJSON **root_out, char *err, size_t errlen) {
  char path[1200];
  snprintf(path, sizeof path, "%s/" MANIFEST, dir);
  FILE *f = fopen(path, "rb");
  if (!f)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO,
                     "checkpoint %s has no " MANIFEST ": it is incomplete", dir);
  char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  cJSON *root = cJSON_Parse(buf);
  cJSON *fmt = root ? cJSON_GetObjectItem(root, "format") : NULL;
  if (!root || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) != 0) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: not a colo checkpoint manifest", path);
  }
  cJSON *m = cJSON_GetObjectItem(root, "model"), *mesh = cJSON_GetObjectItem(root, "mesh");
  cJSON *files = cJSON_GetObjectItem(root, "files");
  /* every field must be a non-negative integer below 2^53 before it is converted */
  const struct {
    cJSON *obj;
    const char *key;
    double min;
  } want[] = {{root, "step", 0},
              {cJSON_GetObjectItem(root, "data"), "seed", 0},
              {cJSON_GetObjectItem(root, "optimizer"), "t", 0},
              {m, "n_layer", 1},
              {m, "n_head", 1},
              {m, "n_embd", 1},
              {m, "block_size", 1},
              {m, "vocab_size", 1},
              {mesh, "dp", 1},
              {mesh, "tp", 1},
              {mesh, "pp", 1},
              {mesh, "world", 1}};
  double v[sizeof want / sizeof want[0]];
  int bad = !cJSON_IsArray(files);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    cJSON *x = want[i].obj ? cJSON_GetObjectItem(want[i].obj, want[i].key) : NULL;
    v[i] = cJSON_IsNumber(x) ? x->valuedouble : -1;
    if (!(v[i] >= want[i].min && v[i] < 9007199254740992.0) || v[i] != (double)(uint64_t)v[i])
      bad = 1;
  }
  cJSON *ls = cJSON_GetObjectItem(root, "loss_scale");
  if (!cJSON_IsNumber(ls) || !(ls->valuedouble > 0))
    bad = 1;
  colo_ckpt_meta_t t = {0};
  if (!bad) {
    t.step = (uint64_t)v[0];
    t.seed = (uint64_t)v[1];
    t.adam_t = (int)v[2];
    t.model.n_layer = (int)v[3];
    t.model.n_head = (int)v[4];
    t.model.n_embd = (int)v[5];
    t.model.block_size = (int)v[6];
    t.model.vocab_size = (int)v[7];
    t.dp = (int)v[8];
    t.tp = (int)v[9];
    t.pp = (int)v[10];
    t.world = (int)v[11];
    t.loss_scale = (float)ls->valuedouble;
    cJSON *lg = cJSON_GetObjectItem(root, "loss_scale_good_steps"); /* absent in older manifests */
    t.loss_scale_good = cJSON_IsNumber(lg) && lg->valuedouble >= 0 && lg->valuedouble < 1e9
                            ? (int)lg->valuedouble
                            : 0;
  }
  if (bad) {
    cJSON_Delete(root);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: a required field is missing or malformed",
                     path);
  }
  *meta = t;
  *files_out = files;
  *root_out = root;
  return 0;
}

int colo_ckpt_read_meta(const char *dir, colo_ckpt_meta_t *meta, char *err, size_t errlen) {
  cJSON *files, *root;
  int rc = parse_manifest(dir, meta, &files, &root, err, errlen);
  if (rc == 0)
    cJSON_Delete(root);
  return rc;
}

/* A file entry of the manifest is well formed: a plain name, a size and a sha256. */
static int check_entry(const char *dir, cJSON *it, char *err, size_t errlen) {
  cJSON *name = cJSON_GetObjectItem(it, "name"), *sha = cJSON_GetObjectItem(it, "sha256"),
        *bytes = cJSON_GetObjectItem(it, "bytes");
  if (!cJSON_IsString(name) || !cJSON_IsString(sha) || !cJSON_IsNumber(bytes) ||
      strchr(name->valuestring, '/') || !strcmp(name->valuestring, "..") ||
      !(bytes->valuedouble >= 0))
    return colo_fail(err, errlen, COLO_EPARSE, "checkpoint %s: malformed file entry in " MANIFEST,
                     dir);
  return 0;
}

/* The file of entry `it` has its recorded size and sha256. */
static int verify_file(const char *dir, const char *name, double bytes, const char *sha, char *err,
                       size_t errlen) {
  char path[1400], hex[65];
  uint64_t got;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (colo_sha256_file(path, hex, &got) < 0)
    return colo_fail(err, errlen, COLO_EIO, "checkpoint %s: %s is missing or unreadable", dir,
                     name);
  if (got != (uint64_t)bytes)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "checkpoint %s: %s is %llu bytes but the manifest says %.0f: truncated or "
                     "altered",
                     dir, name, (unsigned long long)got, bytes);
  if (strcmp(hex, sha) != 0)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "checkpoint %s: %s does not match its sha256 in the manifest: altered", dir,
                     name);
  return 0;
}

/* Every file in the manifest has its recorded size and sha256. */
static int verify(const char *dir, cJSON *files, char *err, size_t errlen) {
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    int rc = check_entry(dir, it, err, errlen);
    if (rc == 0)
      rc = verify_file(dir, cJSON_GetObjectItem(it, "name")->valuestring,
                       cJSON_GetObjectItem(it, "bytes")->valuedouble,
                       cJSON_GetObjectItem(it, "sha256")->valuestring, err, errlen);
    if (rc < 0)
      return rc;
  }
  return 0;
}

/* ---- save ---- */

/* Removes a checkpoint directory and the plain files in it. */
static void remove_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    char p[1600];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(path);
}

static void tmp_dir(const char *root, uint64_t step, char *out, size_t len) {
  snprintf(out, len, "%s/.step_%08llu.tmp", root, (unsigned long long)step);
}

int colo_ckpt_begin(const char *root, uint64_t step, char *err, size_t errlen) {
  if (mkdir(root, 0755) != 0 && errno != EEXIST)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", root, strerror(errno));
  char tmp[1200];
  tmp_dir(root, step, tmp, sizeof tmp);
  remove_dir(tmp); /* a dead attempt's */
  if (mkdir(tmp, 0755) != 0)
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", tmp, strerror(errno));
  return 0;
}

int colo_ckpt_write_tensors(const char *path, colo_gpt_t *model, const float *params,
                            const float *m, const float *v, char *err, size_t errlen) {
  size_t nt;
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  int tied, iw = colo_gpt_wte_index(model, &tied);
  size_t n = (m ? 3 : 1) * nt, k = 0;
  colo_st_tensor_t *ts = calloc(n, sizeof *ts);
  char(*names)[96] = calloc(n, sizeof *names);
  if (!ts || !names) {
    free(ts);
    free(names);
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  }
  if (!params)
    params = colo_gpt_params(model);
  for (int j = 0; j < (m ? 3 : 1); j++)
    for (size_t i = 0; i < nt; i++) {
      if (tied && (int)i == iw)
        continue; /* the last stage's copy of the embedding: the first stage's is written */
      static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
      const float *base = j == 0 ? params : j == 1 ? m : v;
      snprintf(names[k], sizeof names[0], "%s%s", prefix[j], table[i].name);
      ts[k] = (colo_st_tensor_t){names[k],
                                 base + table[i].offset,
                                 table[i].ndim,
                                 {table[i].shape[0], table[i].shape[1]},
                                 table[i].numel};
      k++;
    }
  int rc = colo_safetensors_write(path, ts, k, err, errlen);
  free(ts);
  free(names);
  return rc;
}

int colo_ckpt_write_shard(const char *root, uint64_t step, colo_gpt_t *model, const float *params,
                          const float *m, const float *v, int rank, char *err, size_t errlen) {
  char tmp[1200], file[1300];
  tmp_dir(root, step, tmp, sizeof tmp);
  snprintf(file, sizeof file, "%s/rank_%05d.safetensors", tmp, rank);
  return colo_ckpt_write_tensors(file, model, params, m, v, err, errlen);
}

/* the world rank that writes the shard of pipeline stage s, tensor-parallel rank t */
static int shard_writer(const colo_ckpt_meta_t *meta, int s, int t) {
  return (s * meta->dp) * meta->tp + t;
}

int colo_ckpt_commit(const char *root, const colo_ckpt_meta_t *meta, char *path_out,
                     size_t path_len, char *err, size_t errlen) {
  char final[1100], tmp[1200], file[1300];
  snprintf(final, sizeof final, "%s/step_%08llu", root, (unsigned long long)meta->step);
  tmp_dir(root, meta->step, tmp, sizeof tmp);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", FORMAT);
  cJSON_AddNumberToObject(m, "version", 2);
  cJSON_AddNumberToObject(m, "step", (double)meta->step);
  cJSON *mo = cJSON_AddObjectToObject(m, "model");
  cJSON_AddStringToObject(mo, "architecture", "gpt2");
  cJSON_AddNumberToObject(mo, "n_layer", meta->model.n_layer);
  cJSON_AddNumberToObject(mo, "n_head", meta->model.n_head);
  cJSON_AddNumberToObject(mo, "n_embd", meta->model.n_embd);
  cJSON_AddNumberToObject(mo, "block_size", meta->model.block_size);
  cJSON_AddNumberToObject(mo, "vocab_size", meta->model.vocab_size);
  cJSON *mesh = cJSON_AddObjectToObject(m, "mesh");
  cJSON_AddNumberToObject(mesh, "dp", meta->dp);
  cJSON_AddNumberToObject(mesh, "tp", meta->tp);
  cJSON_AddNumberToObject(mesh, "pp", meta->pp);
  cJSON_AddNumberToObject(mesh, "world", meta->world);
  /* sampling is a function of (seed, step): the data position is the step */
  cJSON *data = cJSON_AddObjectToObject(m, "data");
  cJSON_AddNumberToObject(data, "seed", (double)meta->seed);
  cJSON_AddNumberToObject(data, "next_step", (double)meta->step);
  cJSON *rng = cJSON_AddObjectToObject(m, "rng");
  cJSON_AddStringToObject(rng, "kind", "stateless: hash(seed, step, sequence)");
  cJSON *o = cJSON_AddObjectToObject(m, "optimizer");
  cJSON_AddStringToObject(o, "kind", "adamw");
  cJSON_AddNumberToObject(o, "t", meta->adam_t);
  cJSON_AddNumberToObject(m, "loss_scale", meta->loss_scale);
  cJSON_AddNumberToObject(m, "loss_scale_good_steps", meta->loss_scale_good);
  cJSON *files = cJSON_AddArrayToObject(m, "files");
  int rc = 0;
  for (int st = 0; st < meta->pp && rc == 0; st++)
    for (int t = 0; t < meta->tp && rc == 0; t++) {
      char fname[64], hex[65];
      uint64_t bytes = 0;
      snprintf(fname, sizeof fname, "rank_%05d.safetensors", shard_writer(meta, st, t));
      snprintf(file, sizeof file, "%s/%s", tmp, fname);
      if (colo_sha256_file(file, hex, &bytes) < 0 || fsync_path(file, 0) != 0) {
        rc = colo_fail(err, errlen, COLO_EIO, "%s: missing or unreadable", file);
        break;
      }
      cJSON *fe = cJSON_CreateObject();
      cJSON_AddStringToObject(fe, "name", fname);
      cJSON_AddNumberToObject(fe, "bytes", (double)bytes);
      cJSON_AddStringToObject(fe, "sha256", hex);
      cJSON_AddNumberToObject(fe, "pp", st);
      cJSON_AddNumberToObject(fe, "tp", t);
      cJSON_AddItemToArray(files, fe);
    }
  char *txt = rc == 0 ? cJSON_Print(m) : NULL;
  cJSON_Delete(m);
  if (rc == 0) {
    snprintf(file, sizeof file, "%s/" MANIFEST, tmp);
    FILE *f = fopen(file, "wb");
    int ok =
        f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f)
      fclose(f);
    if (!ok)
      rc = colo_fail(err, errlen, COLO_EIO, "%s: %s", file, strerror(errno));
  }
  cJSON_free(txt);
  if (rc == 0 && fsync_path(tmp, 1) != 0)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: fsync: %s", tmp, strerror(errno));
  if (rc == 0) {
    /* a directory of the same step left by an earlier run is replaced */
    remove_dir(final);
    if (rename(tmp, final) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, final, strerror(errno));
    else if (fsync_path(root, 1) != 0)
      rc = colo_fail(err, errlen, COLO_EIO, "%s: fsync: %s", root, strerror(errno));
  }
  if (rc < 0) {
    remove_dir(tmp);
    return rc;
  }
  snprintf(path_out, path_len, "%s", final);
  return 0;
}

void colo_ckpt_abandon(const char *root, uint64_t step) {
  char tmp[1200];
  tmp_dir(root, step, tmp, sizeof tmp);
  remove_dir(tmp);
}

/* ---- load: any layout's shards into any other's ---- */

/* Where a model's tensors come from: the shard files of a pipeline of `pp` stages of `tp`
 * tensor-parallel ranks each (pp = tp = 1: one file of whole tensors), opened when first
 * needed. Names in the files are the model's, or without "transformer." (strip). */
typedef struct {
  int pp, tp, n_layer;
  int strip, any_float;
  char (*paths)[1400]; /* [pp·tp], by stage then tensor-parallel rank */
  colo_st_file_t *files;
  int *open;
  /* a checkpoint's: each file is checked against its manifest entry when first opened, so a
   * rank reads (and hashes) only the shards it needs */
  const char *dir;
  char (*sha)[65];
  double *bytes;
} source_t;

static void source_close(source_t *s) {
  for (int i = 0; s->open && i < s->pp * s->tp; i++)
    if (s->open[i])
      colo_st_close(&s->files[i]);
  free(s->paths);
  free(s->files);
  free(s->open);
  free(s->sha);
  free(s->bytes);
  memset(s, 0, sizeof *s);
}

static int source_init(source_t *s, int pp, int tp, int n_layer) {
  memset(s, 0, sizeof *s);
  s->pp = pp;
  s->tp = tp;
  s->n_layer = n_layer;
  s->paths = calloc((size_t)pp * tp, sizeof *s->paths);
  s->files = calloc((size_t)pp * tp, sizeof *s->files);
  s->open = calloc((size_t)pp * tp, sizeof *s->open);
  s->sha = calloc((size_t)pp * tp, sizeof *s->sha);
  s->bytes = calloc((size_t)pp * tp, sizeof *s->bytes);
  return s->paths && s->files && s->open && s->sha && s->bytes ? 0 : COLO_ENOMEM;
}

/* the stage of the source's pipeline that holds full tensor `name` */
static int source_stage(const source_t *s, const char *name) {
  int layer;
  if (sscanf(name, "transformer.h.%d.", &layer) == 1) {
    for (int st = 0; st < s->pp; st++)
      if (layer < (st + 1) * s->n_layer / s->pp)
        return st;
    return s->pp - 1;
  }
  return strstr(name, "ln_f.") ? s->pp - 1 : 0; /* the embeddings: the first stage */
}

/* Full tensor f of the whole model (prefix: "" or a moment's) into full, from the source's
 * shards of it; piece is scratch of f's size. */
static int assemble(source_t *s, const colo_param_t *f, const char *prefix, float *full,
                    float *piece, char *err, size_t errlen) {
  int st = source_stage(s, f->name);
  char name[160];
  const char *n = s->strip && !strncmp(f->name, "transformer.", 12) ? f->name + 12 : f->name;
  snprintf(name, sizeof name, "%s%s", prefix, n);
  for (int t = 0; t < s->tp; t++) {
    int i = st * s->tp + t;
    if (!s->open[i]) {
      int rc = 0;
      if (s->dir) {
        const char *slash = strrchr(s->paths[i], '/');
        rc = verify_file(s->dir, slash ? slash + 1 : s->paths[i], s->bytes[i], s->sha[i], err,
                         errlen);
      }
      if (rc == 0)
        rc = colo_st_open(s->paths[i], &s->files[i], err, errlen);
      if (rc < 0)
        return rc;
      s->open[i] = 1;
    }
    colo_param_t p;
    colo_param_shard(f, s->tp, &p);
    float *dst = s->tp == 1 ? full : piece;
    int rc = colo_st_get(&s->files[i], name, p.ndim, p.shape, dst, s->any_float, err, errlen);
    if (rc < 0)
      return rc;
    for (size_t li = 0; s->tp > 1 && li < p.numel; li++)
      full[colo_param_full_index(&p, t, s->tp, li)] = piece[li];
  }
  return 0;
}

/* This rank's tensors (its stage's, its tensor-parallel shard) of the parameters, and with m and
 * v of the moments, into the model's local layout, from the source; a failure leaves them as
 * they were. */
static int source_load(source_t *s, colo_gpt_t *model, float *params, float *m, float *v, char *err,
                       size_t errlen) {
  size_t nt, nf, biggest = 0, np = colo_gpt_num_params(model);
  const colo_param_t *table = colo_gpt_params_table(model, &nt);
  const colo_param_t *full = colo_gpt_full_table(model, &nf);
  for (size_t i = 0; i < nf; i++)
    biggest = full[i].numel > biggest ? full[i].numel : biggest;
  int k = m ? 3 : 1, tp = colo_gpt_tp_size(model), me = colo_gpt_tp_rank(model);
  float *whole = malloc(biggest * sizeof(float)), *piece = malloc(biggest * sizeof(float));
  float *out = malloc(np * (size_t)k * sizeof(float)); /* all or nothing */
  int rc = whole && piece && out ? 0 : colo_fail(err, errlen, COLO_ENOMEM, "out of memory loading");
  for (size_t i = 0; rc == 0 && i < nt; i++) {
    const colo_param_t *q = &table[i], *f = NULL;
    for (size_t j = 0; j < nf && !f; j++)
      f = full[j].full_offset == q->full_offset ? &full[j] : NULL;
    static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
    for (int j = 0; rc == 0 && j < k; j++) {
      rc = assemble(s, f, prefix[j], whole, piece, err, errlen);
      for (size_t li = 0; rc == 0 && li < q->numel; li++)
        out[(size_t)j * np + q->offset + li] = whole[colo_param_full_index(q, me, tp, li)];
    }
  }
  if (rc == 0) {
    memcpy(params ? params : colo_gpt_params(model), out, np * sizeof(float));
    if (m) {
      memcpy(m, out + np, np * sizeof(float));
      memcpy(v, out + 2 * np, np * sizeof(float));
    }
  }
  free(whole);
  free(piece);
  free(out);
  return rc;
}

int colo_ckpt_load(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                   colo_adamw_t *opt, char *err, size_t errlen) {
  cJSON *files, *root;
  colo_ckpt_meta_t t;
  int rc = parse_manifest(dir, &t, &files, &root, err, errlen);
  if (rc < 0)
    return rc;
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    if (rc == 0)
      rc = check_entry(dir, it, err, errlen);
  }
  const colo_gpt_config_t *c = colo_gpt_config(model);
  if (rc == 0 && (c->n_layer != t.model.n_layer || c->n_head != t.model.n_head ||
                  c->n_embd != t.model.n_embd || c->block_size != t.model.block_size ||
                  c->vocab_size != t.model.vocab_size))
    rc = colo_fail(err, errlen, COLO_EINVAL,
                   "checkpoint %s is of a %d-layer, %d-head, %d-wide model with block %d and vocab "
                   "%d; this run's model differs",
                   dir, t.model.n_layer, t.model.n_head, t.model.n_embd, t.model.block_size,
                   t.model.vocab_size);
  /* version 1 wrote one file of whole tensors whatever the mesh; version 2 a shard per stage
   * and tensor-parallel rank, each file naming its place */
  cJSON *ver = cJSON_GetObjectItem(root, "version");
  int v2 = cJSON_IsNumber(ver) && ver->valuedouble >= 2;
  source_t s = {0};
  if (rc == 0 && source_init(&s, v2 ? t.pp : 1, v2 ? t.tp : 1, t.model.n_layer) < 0)
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  s.dir = dir;
  int found = 0;
  cJSON_ArrayForEach(it, files) {
    if (rc < 0)
      break;
    cJSON *name = cJSON_GetObjectItem(it, "name"), *pp = cJSON_GetObjectItem(it, "pp"),
          *tp = cJSON_GetObjectItem(it, "tp");
    int st = v2 && cJSON_IsNumber(pp) ? (int)pp->valuedouble : 0;
    int tr = v2 && cJSON_IsNumber(tp) ? (int)tp->valuedouble : 0;
    if ((v2 && (!cJSON_IsNumber(pp) || !cJSON_IsNumber(tp))) || st < 0 || st >= s.pp || tr < 0 ||
        tr >= s.tp || s.paths[st * s.tp + tr][0]) {
      rc = colo_fail(err, errlen, COLO_EPARSE, "checkpoint %s: a file's place in the mesh is wrong",
                     dir);
      break;
    }
    snprintf(s.paths[st * s.tp + tr], sizeof s.paths[0], "%s/%s", dir, name->valuestring);
    snprintf(s.sha[st * s.tp + tr], sizeof s.sha[0], "%s",
             cJSON_GetObjectItem(it, "sha256")->valuestring);
    s.bytes[st * s.tp + tr] = cJSON_GetObjectItem(it, "bytes")->valuedouble;
    found++;
  }
  if (rc == 0 && found != s.pp * s.tp)
    rc = colo_fail(err, errlen, COLO_EPARSE, "checkpoint %s: %d of its %d shard files are listed",
                   dir, found, s.pp * s.tp);
  cJSON_Delete(root);
  if (rc == 0)
    rc = source_load(&s, model, params, opt ? opt->m : NULL, opt ? opt->v : NULL, err, errlen);
  source_close(&s);
  if (rc == 0) {
    if (opt)
      opt->t = t.adam_t;
    *meta = t;
  }
  return rc;
}

/* ---- initial weights (train.init_from) ---- */

static const char *const BLOCK_TENSORS[] = {
    "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
    "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

/* What a GPT-2 file's tensor `n` (its "transformer." prefix removed) is: 1 a parameter (of
 * block *layer, or -1 outside the blocks), 2 an attention-mask buffer that older files carry
 * (skipped), 0 not part of GPT-2. */
static int gpt2_kind(const char *n, long *layer) {
  *layer = -1;
  if (!strcmp(n, "wte.weight") || !strcmp(n, "wpe.weight") || !strcmp(n, "ln_f.weight") ||
      !strcmp(n, "ln_f.bias"))
    return 1;
  if (strncmp(n, "h.", 2) != 0 || n[2] < '0' || n[2] > '9')
    return 0;
  char *end;
  *layer = strtol(n + 2, &end, 10);
  if (*end != '.' || *layer > 100000)
    return 0;
  const char *t = end + 1;
  if (!strcmp(t, "attn.bias") || !strcmp(t, "attn.masked_bias"))
    return 2;
  for (size_t i = 0; i < sizeof BLOCK_TENSORS / sizeof BLOCK_TENSORS[0]; i++)
    if (!strcmp(t, BLOCK_TENSORS[i]))
      return 1;
  return 0;
}

/* The file's model against this one: its layers (one past the highest block), the embedding's
 * [vocab, width] and the positions' rows; and lm_head.weight, if there, equal to the embedding. */
static int gpt2_check_shape(const colo_st_file_t *f, const char *pre, const colo_gpt_config_t *c,
                            char *err, size_t errlen) {
  const char *path = f->path;
  long layers = 0;
  int has_lm_head = 0;
  for (cJSON *it = f->hdr->child; it; it = it->next) {
    const char *n = it->string;
    if (!strcmp(n, "__metadata__") || !strncmp(n, "optimizer.", 10))
      continue; /* colo's own checkpoints carry the moments: not taken */
    if (!strcmp(n, "lm_head.weight")) {
      has_lm_head = 1;
      continue;
    }
    size_t pl = strlen(pre);
    long layer;
    if (strncmp(n, pre, pl) != 0 || !gpt2_kind(n + pl, &layer))
      return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s is not part of a GPT-2 model", path,
                       n);
    layers = layer + 1 > layers ? layer + 1 : layers;
  }
  char name[96];
  const char *dt, *data;
  int nd;
  long wte[2] = {0, 0}, wpe[2] = {0, 0};
  size_t bytes;
  snprintf(name, sizeof name, "%swte.weight", pre);
  int ok = colo_st_entry(f, name, &dt, &nd, wte, &data, &bytes) == 0 && nd == 2;
  snprintf(name, sizeof name, "%swpe.weight", pre);
  ok = ok && colo_st_entry(f, name, &dt, &nd, wpe, &data, &bytes) == 0 && nd == 2;
  if (!ok)
    return colo_fail(err, errlen, COLO_EPARSE,
                     "%s: wte.weight or wpe.weight is missing or malformed", path);
  if (layers != c->n_layer || wte[0] != c->vocab_size || wte[1] != c->n_embd ||
      wpe[0] != c->block_size)
    return colo_fail(
        err, errlen, COLO_EINVAL,
        "%s holds a GPT-2 of %ld layers, width %ld, vocab %ld and block %ld; this run's "
        "model has %d, %d, %d and %d (model.n_layer, n_embd, vocab_size, block_size)",
        path, layers, wte[1], wte[0], wpe[0], c->n_layer, c->n_embd, c->vocab_size, c->block_size);
  if (has_lm_head) { /* GPT-2 ties the head to the token embedding: a file must too */
    const char *hd, *hdata, *edata;
    long hs[2];
    size_t hbytes, ebytes;
    snprintf(name, sizeof name, "%swte.weight", pre);
    colo_st_entry(f, name, &dt, &nd, wte, &edata, &ebytes);
    if (colo_st_entry(f, "lm_head.weight", &hd, &nd, hs, &hdata, &hbytes) < 0 || strcmp(hd, dt) ||
        hbytes != ebytes || memcmp(hdata, edata, ebytes) != 0)
      return colo_fail(err, errlen, COLO_EINVAL,
                       "%s: lm_head.weight differs from wte.weight; colo's GPT-2 ties the two",
                       path);
  }
  return 0;
}

int colo_ckpt_load_weights(const char *path, colo_gpt_t *model, float *params, char *err,
                           size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) < 0)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  if (S_ISDIR(sb.st_mode)) { /* a checkpoint: verified, its parameters only */
    colo_ckpt_meta_t meta;
    return colo_ckpt_load(path, &meta, model, params, NULL, err, errlen);
  }
  source_t s;
  if (source_init(&s, 1, 1, colo_gpt_config(model)->n_layer) < 0)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  int rc = colo_st_open(path, &s.files[0], err, errlen);
  if (rc == 0) {
    s.open[0] = 1;
    snprintf(s.paths[0], sizeof s.paths[0], "%s", path);
    s.strip = !cJSON_GetObjectItemCaseSensitive(s.files[0].hdr, "transformer.wte.weight");
    s.any_float = 1;
    rc = gpt2_check_shape(&s.files[0], s.strip ? "" : "transformer.", colo_gpt_config(model), err,
                          errlen);
  }
  if (rc == 0)
    rc = source_load(&s, model, params, NULL, NULL, err, errlen);
  source_close(&s);
  return rc;
}

/* The steps of the step_NNNNNNNN directories under root (at most cap), in directory order. */
static int list_steps(const char *root, unsigned long long *steps, size_t cap, size_t *n) {
  DIR *d = opendir(root);
  *n = 0;
  if (!d)
    return COLO_ENOENT;
  struct dirent *e;
  while ((e = readdir(d)) && *n < cap) {
    unsigned long long s;
    char tail;
    if (sscanf(e->d_name, "step_%llu%c", &s, &tail) == 1 && strlen(e->d_name) == 13)
      steps[(*n)++] = s;
  }
  closedir(d);
  return 0;
}

int colo_ckpt_find_latest(const char *root, char *out, size_t out_len, char *skipped,
                          size_t skipped_len) {
  unsigned long long steps[4096];
  size_t n;
  if (list_steps(root, steps, 4096, &n) < 0)
    return COLO_ENOENT;
  if (skipped && skipped_len)
    skipped[0] = '\0';
  /* newest first */
  for (;;) {
    size_t best = n;
    for (size_t i = 0; i < n; i++)
      if (steps[i] != (unsigned long long)-1 && (best == n || steps[i] > steps[best]))
        best = i;
    if (best == n)
      return COLO_ENOENT;
    char dir[1200], err[512];
    snprintf(dir, sizeof dir, "%s/step_%08llu", root, steps[best]);
    steps[best] = (unsigned long long)-1;
    cJSON *files, *rootj;
    colo_ckpt_meta_t meta;
    int rc = parse_manifest(dir, &meta, &files, &rootj, err, sizeof err);
    if (rc == 0) {
      rc = verify(dir, files, err, sizeof err);
      cJSON_Delete(rootj);
    }
    if (rc == 0) {
      snprintf(out, out_len, "%s", dir);
      return 0;
    }
    if (skipped && skipped_len) {
      size_t k = strlen(skipped);
      snprintf(skipped + k, skipped_len - k, "%s%s", k ? "; " : "", err);
    }
  }
}

static int cmp_desc(const void *a, const void *b) {
  unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
  return x > y ? -1 : x < y;
}

int colo_ckpt_prune(const char *root, int keep, int *removed) {
  *removed = 0;
  if (keep <= 0)
    return 0;
  unsigned long long steps[4096];
  size_t n;
  if (list_steps(root, steps, 4096, &n) < 0)
    return COLO_ENOENT;
  qsort(steps, n, sizeof steps[0], cmp_desc);
  int complete = 0;
  for (size_t i = 0; i < n; i++) {
    char dir[1200], err[256];
    snprintf(dir, sizeof dir, "%s/step_%08llu", root, steps[i]);
    if (complete < keep) {
      colo_ckpt_meta_t meta;
      cJSON *files, *rootj;
      if (parse_manifest(dir, &meta, &files, &rootj, err, sizeof err) == 0) {
        cJSON_Delete(rootj);
        complete++;
      }
      continue;
    }
    remove_dir(dir);
    struct stat sb;
    if (stat(dir, &sb) != 0)
      (*removed)++;
  }
  return 0;
}

int colo_ckpt_drop_after(const char *root, uint64_t step, char *removed, size_t removed_len) {
  unsigned long long steps[4096];
  size_t n;
  if (removed_len)
    removed[0] = '\0';
  if (list_steps(root, steps, 4096, &n) < 0)
    return 0;
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    if (steps[i] <= step)
      continue;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/step_%08llu", root, steps[i]);
    remove_dir(dir);
    size_t k = strlen(removed);
    if (k + 20 < removed_len)
      snprintf(removed + k, removed_len - k, "%sstep_%08llu", k ? ", " : "", steps[i]);
    count++;
  }
  return count;
}
