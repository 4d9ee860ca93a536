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
#include "../core/dtype.h"

#define MANIFEST   "manifest.json"
#define FORMAT     "colo-checkpoint"
#define MAX_HEADER (64u << 20)

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

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

/* ---- safetensors ---- */

int colo_safetensors_write(const char *path, const colo_st_tensor_t *t, size_t n, char *err,
                           size_t errlen) {
  cJSON *hdr = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(hdr, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "pt");
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    cJSON *o = cJSON_AddObjectToObject(hdr, t[i].name);
    cJSON_AddStringToObject(o, "dtype", "F32");
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; d < t[i].ndim; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber(t[i].shape[d]));
    cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    off += t[i].numel * sizeof(float);
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
  }
  char *json = cJSON_PrintUnformatted(hdr);
  cJSON_Delete(hdr);
  size_t jl = strlen(json), padded = (jl + 7) / 8 * 8; /* data starts 8-byte aligned */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    cJSON_free(json);
    return fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(errno));
  }
  FILE *f = fdopen(fd, "wb");
  uint64_t hl = padded; /* little-endian on every machine colo runs on */
  int ok = f && fwrite(&hl, 8, 1, f) == 1 && fwrite(json, 1, jl, f) == jl;
  for (size_t i = jl; ok && i < padded; i++)
    ok = fputc(' ', f) != EOF;
  for (size_t i = 0; ok && i < n; i++)
    ok = fwrite(t[i].data, sizeof(float), t[i].numel, f) == t[i].numel;
  ok = ok && fflush(f) == 0 && fsync(fd) == 0;
  cJSON_free(json);
  if (f)
    fclose(f);
  else
    close(fd);
  return ok ? 0 : fail(err, errlen, COLO_EIO, "%s: write failed: %s", path, strerror(errno));
}

typedef struct {
  char *buf; /* whole file */
  size_t len, data_start;
  cJSON *hdr;
} st_file_t;

static int read_safetensors(const char *path, st_file_t *out, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(errno));
  struct stat sb;
  fstat(fileno(f), &sb);
  size_t len = (size_t)sb.st_size;
  char *buf = malloc(len ? len : 1);
  if (!buf || fread(buf, 1, len, f) != len) {
    fclose(f);
    free(buf);
    return fail(err, errlen, COLO_EIO, "%s: read failed", path);
  }
  fclose(f);
  uint64_t hl;
  if (len < 8 || (memcpy(&hl, buf, 8), hl > MAX_HEADER) || 8 + hl > len) {
    free(buf);
    return fail(err, errlen, COLO_EPARSE, "%s: not a safetensors file (bad header length)", path);
  }
  cJSON *hdr = cJSON_ParseWithLength(buf + 8, (size_t)hl);
  if (!hdr || !cJSON_IsObject(hdr)) {
    cJSON_Delete(hdr);
    free(buf);
    return fail(err, errlen, COLO_EPARSE, "%s: the safetensors header is not valid JSON", path);
  }
  out->buf = buf;
  out->len = len;
  out->data_start = 8 + (size_t)hl;
  out->hdr = hdr;
  return 0;
}

/* The dtype, shape (ndim ≤ 2) and bytes of tensor `name`; -1 when it is not a well-formed
 * entry of f. */
static int st_entry(const st_file_t *f, const char *name, const char **dtype, int *ndim,
                    long shape[2], const char **data, size_t *bytes) {
  cJSON *o = cJSON_GetObjectItemCaseSensitive(f->hdr, name);
  if (!o)
    return -1;
  cJSON *dt = cJSON_GetObjectItem(o, "dtype"), *sh = cJSON_GetObjectItem(o, "shape"),
        *off = cJSON_GetObjectItem(o, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 2 ||
      !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
    return -1;
  *dtype = dt->valuestring;
  *ndim = cJSON_GetArraySize(sh);
  for (int d = 0; d < *ndim; d++) {
    cJSON *x = cJSON_GetArrayItem(sh, d);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1e12)
      return -1;
    shape[d] = (long)x->valuedouble;
  }
  double b = cJSON_GetArrayItem(off, 0)->valuedouble, e = cJSON_GetArrayItem(off, 1)->valuedouble;
  if (!(b >= 0 && e >= b && f->data_start + (size_t)e <= f->len))
    return -1;
  *data = f->buf + f->data_start + (size_t)b;
  *bytes = (size_t)(e - b);
  return 0;
}

static void shape_str(char *out, size_t len, int ndim, const long *shape) {
  if (ndim == 1)
    snprintf(out, len, "[%ld]", shape[0]);
  else if (ndim == 2)
    snprintf(out, len, "[%ld, %ld]", shape[0], shape[1]);
  else
    snprintf(out, len, "[]");
}

/* Copies tensor `name` of shape (ndim, shape) into dst as fp32: F32 only, or also F16 and BF16
 * (converted) when any_float. */
static int st_get(const st_file_t *f, const char *path, const char *name, int ndim,
                  const int *shape, float *dst, int any_float, char *err, size_t errlen) {
  const char *dtype, *data;
  int nd;
  long sh[2];
  size_t bytes;
  if (!cJSON_GetObjectItemCaseSensitive(f->hdr, name))
    return fail(err, errlen, COLO_EPARSE, "%s: tensor %s is missing", path, name);
  if (st_entry(f, name, &dtype, &nd, sh, &data, &bytes) < 0)
    return fail(err, errlen, COLO_EPARSE, "%s: tensor %s has a malformed entry", path, name);
  colo_dtype_t t = COLO_DTYPE_F32;
  if (!strcmp(dtype, "F32"))
    t = COLO_DTYPE_F32;
  else if (any_float && !strcmp(dtype, "F16"))
    t = COLO_DTYPE_F16;
  else if (any_float && !strcmp(dtype, "BF16"))
    t = COLO_DTYPE_BF16;
  else
    return fail(err, errlen, COLO_EPARSE, "%s: tensor %s is %s, not %s", path, name, dtype,
                any_float ? "F32, F16 or BF16" : "F32");
  int ok = nd == ndim;
  size_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    ok = ok && sh[d] == shape[d];
    numel *= (size_t)shape[d];
  }
  if (!ok) {
    char got[48], want[48];
    long w[2] = {shape[0], ndim > 1 ? shape[1] : 0};
    shape_str(got, sizeof got, nd, sh);
    shape_str(want, sizeof want, ndim, w);
    return fail(err, errlen, COLO_EPARSE, "%s: tensor %s is %s; this model's is %s", path, name,
                got, want);
  }
  if (bytes != numel * colo_dtype_size(t))
    return fail(err, errlen, COLO_EPARSE, "%s: tensor %s has bad data offsets", path, name);
  if (t == COLO_DTYPE_F32 || ((uintptr_t)data & 1) == 0) {
    if (t == COLO_DTYPE_F32)
      memcpy(dst, data, bytes);
    else
      colo_dtype_to_float(dst, data, numel, t);
    return 0;
  }
  void *aligned = malloc(bytes); /* 16-bit data at an odd address */
  if (!aligned)
    return fail(err, errlen, COLO_ENOMEM, "out of memory reading %s", path);
  memcpy(aligned, data, bytes);
  colo_dtype_to_float(dst, aligned, numel, t);
  free(aligned);
  return 0;
}

/* ---- manifest ---- */

static int parse_manifest(const char *dir, colo_ckpt_meta_t *meta, cJSON **files_out,
                          cJSON **root_out, char *err, size_t errlen) {
  char path[1200];
  snprintf(path, sizeof path, "%s/" MANIFEST, dir);
  FILE *f = fopen(path, "rb");
  if (!f)
    return fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO,
                "checkpoint %s has no " MANIFEST ": it is incomplete", dir);
  char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  cJSON *root = cJSON_Parse(buf);
  cJSON *fmt = root ? cJSON_GetObjectItem(root, "format") : NULL;
  if (!root || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) != 0) {
    cJSON_Delete(root);
    return fail(err, errlen, COLO_EPARSE, "%s: not a colo checkpoint manifest", path);
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
    return fail(err, errlen, COLO_EPARSE, "%s: a required field is missing or malformed", path);
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

/* Every file in the manifest has its recorded size and sha256. */
static int verify(const char *dir, cJSON *files, char *err, size_t errlen) {
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    cJSON *name = cJSON_GetObjectItem(it, "name"), *sha = cJSON_GetObjectItem(it, "sha256"),
          *bytes = cJSON_GetObjectItem(it, "bytes");
    if (!cJSON_IsString(name) || !cJSON_IsString(sha) || !cJSON_IsNumber(bytes) ||
        strchr(name->valuestring, '/'))
      return fail(err, errlen, COLO_EPARSE, "checkpoint %s: malformed file entry in " MANIFEST,
                  dir);
    char path[1400], hex[65];
    uint64_t got;
    snprintf(path, sizeof path, "%s/%s", dir, name->valuestring);
    if (colo_sha256_file(path, hex, &got) < 0)
      return fail(err, errlen, COLO_EIO, "checkpoint %s: %s is missing or unreadable", dir,
                  name->valuestring);
    if (got != (uint64_t)bytes->valuedouble)
      return fail(err, errlen, COLO_EPARSE,
                  "checkpoint %s: %s is %llu bytes but the manifest says %.0f: truncated or "
                  "altered",
                  dir, name->valuestring, (unsigned long long)got, bytes->valuedouble);
    if (strcmp(hex, sha->valuestring) != 0)
      return fail(err, errlen, COLO_EPARSE,
                  "checkpoint %s: %s does not match its sha256 in the manifest: altered", dir,
                  name->valuestring);
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

int colo_ckpt_save(const char *root, const colo_ckpt_meta_t *meta, colo_gpt_t *model,
                   const float *params_in, const colo_adamw_t *opt, int rank, char *path_out,
                   size_t path_len, char *err, size_t errlen) {
  if (mkdir(root, 0755) != 0 && errno != EEXIST)
    return fail(err, errlen, COLO_EIO, "%s: %s", root, strerror(errno));
  char final[1100], tmp[1200], file[1300], fname[64];
  snprintf(final, sizeof final, "%s/step_%08llu", root, (unsigned long long)meta->step);
  snprintf(tmp, sizeof tmp, "%s/.step_%08llu.tmp-%d", root, (unsigned long long)meta->step,
           (int)getpid());
  if (mkdir(tmp, 0755) != 0)
    return fail(err, errlen, COLO_EIO, "%s: %s", tmp, strerror(errno));
  size_t nt;
  const colo_param_t *table = colo_gpt_full_table(model, &nt);
  size_t n = opt ? 3 * nt : nt;
  colo_st_tensor_t *ts = calloc(n, sizeof *ts);
  char(*names)[96] = calloc(n, sizeof *names);
  const float *params = params_in ? params_in : colo_gpt_params(model);
  for (size_t i = 0; i < nt; i++) {
    for (int k = 0; k < (opt ? 3 : 1); k++) {
      colo_st_tensor_t *t = &ts[k * nt + i];
      static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
      snprintf(names[k * nt + i], sizeof names[0], "%s%s", prefix[k], table[i].name);
      t->name = names[k * nt + i];
      const float *base = k == 0 ? params : k == 1 ? opt->m : opt->v;
      t->data = base + table[i].offset;
      t->ndim = table[i].ndim;
      t->shape[0] = table[i].shape[0];
      t->shape[1] = table[i].shape[1];
      t->numel = table[i].numel;
    }
  }
  snprintf(fname, sizeof fname, "rank_%05d.safetensors", rank);
  snprintf(file, sizeof file, "%s/%s", tmp, fname);
  int rc = colo_safetensors_write(file, ts, n, err, errlen);
  free(ts);
  free(names);
  char hex[65];
  uint64_t bytes = 0;
  if (rc == 0 && colo_sha256_file(file, hex, &bytes) < 0)
    rc = fail(err, errlen, COLO_EIO, "%s: cannot read back", file);
  if (rc == 0) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "format", FORMAT);
    cJSON_AddNumberToObject(m, "version", 1);
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
    cJSON *fe = cJSON_CreateObject();
    cJSON_AddStringToObject(fe, "name", fname);
    cJSON_AddNumberToObject(fe, "bytes", (double)bytes);
    cJSON_AddStringToObject(fe, "sha256", hex);
    cJSON_AddItemToArray(files, fe);
    char *txt = cJSON_Print(m);
    cJSON_Delete(m);
    snprintf(file, sizeof file, "%s/" MANIFEST, tmp);
    FILE *f = fopen(file, "wb");
    int ok =
        f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f)
      fclose(f);
    cJSON_free(txt);
    if (!ok)
      rc = fail(err, errlen, COLO_EIO, "%s: %s", file, strerror(errno));
  }
  if (rc == 0 && fsync_path(tmp, 1) != 0)
    rc = fail(err, errlen, COLO_EIO, "%s: fsync: %s", tmp, strerror(errno));
  if (rc == 0) {
    /* a directory of the same step left by an earlier run is replaced */
    remove_dir(final);
    if (rename(tmp, final) != 0)
      rc = fail(err, errlen, COLO_EIO, "rename %s -> %s: %s", tmp, final, strerror(errno));
    else if (fsync_path(root, 1) != 0)
      rc = fail(err, errlen, COLO_EIO, "%s: fsync: %s", root, strerror(errno));
  }
  if (rc < 0) {
    snprintf(file, sizeof file, "%s/rank_%05d.safetensors", tmp, rank);
    unlink(file);
    snprintf(file, sizeof file, "%s/" MANIFEST, tmp);
    unlink(file);
    rmdir(tmp);
    return rc;
  }
  snprintf(path_out, path_len, "%s", final);
  return 0;
}

/* ---- load ---- */

int colo_ckpt_load(const char *dir, colo_ckpt_meta_t *meta, colo_gpt_t *model, float *params,
                   colo_adamw_t *opt, int rank, char *err, size_t errlen) {
  cJSON *files, *root;
  colo_ckpt_meta_t t;
  int rc = parse_manifest(dir, &t, &files, &root, err, errlen);
  if (rc < 0)
    return rc;
  rc = verify(dir, files, err, errlen);
  cJSON_Delete(root);
  if (rc < 0)
    return rc;
  const colo_gpt_config_t *c = colo_gpt_config(model);
  if (c->n_layer != t.model.n_layer || c->n_head != t.model.n_head || c->n_embd != t.model.n_embd ||
      c->block_size != t.model.block_size || c->vocab_size != t.model.vocab_size)
    return fail(err, errlen, COLO_EINVAL,
                "checkpoint %s is of a %d-layer, %d-head, %d-wide model with block %d and vocab "
                "%d; this run's model differs",
                dir, t.model.n_layer, t.model.n_head, t.model.n_embd, t.model.block_size,
                t.model.vocab_size);
  char path[1300];
  snprintf(path, sizeof path, "%s/rank_%05d.safetensors", dir, rank);
  st_file_t f = {0};
  if ((rc = read_safetensors(path, &f, err, errlen)) < 0)
    return rc;
  size_t nt;
  const colo_param_t *table = colo_gpt_full_table(model, &nt);
  /* load into scratch first: a failure halfway leaves the model and optimizer untouched */
  size_t np = colo_gpt_full_numel(model);
  float *scratch = malloc(np * sizeof(float) * (opt ? 3 : 1));
  if (!scratch)
    rc = fail(err, errlen, COLO_ENOMEM, "out of memory loading %s", path);
  for (int k = 0; rc == 0 && k < (opt ? 3 : 1); k++)
    for (size_t i = 0; rc == 0 && i < nt; i++) {
      static const char *prefix[] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."};
      char name[128];
      snprintf(name, sizeof name, "%s%s", prefix[k], table[i].name);
      rc = st_get(&f, path, name, table[i].ndim, table[i].shape,
                  scratch + (size_t)k * np + table[i].offset, 0, err, errlen);
    }
  if (rc == 0) {
    memcpy(params ? params : colo_gpt_params(model), scratch, np * sizeof(float));
    if (opt) {
      memcpy(opt->m, scratch + np, np * sizeof(float));
      memcpy(opt->v, scratch + 2 * np, np * sizeof(float));
      opt->t = t.adam_t;
    }
    *meta = t;
  }
  free(scratch);
  cJSON_Delete(f.hdr);
  free(f.buf);
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
 * [vocab, width] and the positions' rows. */
static int gpt2_check_shape(const st_file_t *f, const char *path, const char *pre,
                            const colo_gpt_config_t *c, char *err, size_t errlen) {
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
      return fail(err, errlen, COLO_EPARSE, "%s: tensor %s is not part of a GPT-2 model", path, n);
    layers = layer + 1 > layers ? layer + 1 : layers;
  }
  char name[96];
  const char *dt, *data;
  int nd;
  long wte[2] = {0, 0}, wpe[2] = {0, 0};
  size_t bytes;
  snprintf(name, sizeof name, "%swte.weight", pre);
  int ok = st_entry(f, name, &dt, &nd, wte, &data, &bytes) == 0 && nd == 2;
  snprintf(name, sizeof name, "%swpe.weight", pre);
  ok = ok && st_entry(f, name, &dt, &nd, wpe, &data, &bytes) == 0 && nd == 2;
  if (!ok)
    return fail(err, errlen, COLO_EPARSE, "%s: wte.weight or wpe.weight is missing or malformed",
                path);
  if (layers != c->n_layer || wte[0] != c->vocab_size || wte[1] != c->n_embd ||
      wpe[0] != c->block_size)
    return fail(err, errlen, COLO_EINVAL,
                "%s holds a GPT-2 of %ld layers, width %ld, vocab %ld and block %ld; this run's "
                "model has %d, %d, %d and %d (model.n_layer, n_embd, vocab_size, block_size)",
                path, layers, wte[1], wte[0], wpe[0], c->n_layer, c->n_embd, c->vocab_size,
                c->block_size);
  if (has_lm_head) { /* GPT-2 ties the head to the token embedding: a file must too */
    const char *hd, *hdata, *edata;
    long hs[2];
    size_t hbytes, ebytes;
    snprintf(name, sizeof name, "%swte.weight", pre);
    st_entry(f, name, &dt, &nd, wte, &edata, &ebytes);
    if (st_entry(f, "lm_head.weight", &hd, &nd, hs, &hdata, &hbytes) < 0 || strcmp(hd, dt) ||
        hbytes != ebytes || memcmp(hdata, edata, ebytes) != 0)
      return fail(err, errlen, COLO_EINVAL,
                  "%s: lm_head.weight differs from wte.weight; colo's GPT-2 ties the two", path);
  }
  return 0;
}

int colo_ckpt_load_weights(const char *path, colo_gpt_t *model, float *params, char *err,
                           size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) < 0)
    return fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                strerror(errno));
  if (S_ISDIR(sb.st_mode)) { /* a checkpoint: verified, its parameters only */
    colo_ckpt_meta_t meta;
    return colo_ckpt_load(path, &meta, model, params, NULL, 0, err, errlen);
  }
  st_file_t f = {0};
  int rc = read_safetensors(path, &f, err, errlen);
  if (rc < 0)
    return rc;
  const char *pre =
      cJSON_GetObjectItemCaseSensitive(f.hdr, "transformer.wte.weight") ? "transformer." : "";
  const colo_gpt_config_t *c = colo_gpt_config(model);
  rc = gpt2_check_shape(&f, path, pre, c, err, errlen);
  size_t nt, np = colo_gpt_full_numel(model);
  const colo_param_t *table = colo_gpt_full_table(model, &nt);
  float *scratch = rc == 0 ? malloc(np * sizeof(float)) : NULL;
  if (rc == 0 && !scratch)
    rc = fail(err, errlen, COLO_ENOMEM, "out of memory loading %s", path);
  for (size_t i = 0; rc == 0 && i < nt; i++) {
    const char *n = table[i].name;
    char name[128];
    if (!strncmp(n, "transformer.", 12))
      n += 12;
    snprintf(name, sizeof name, "%s%s", pre, n);
    rc = st_get(&f, path, name, table[i].ndim, table[i].shape, scratch + table[i].offset, 1, err,
                errlen);
  }
  if (rc == 0)
    memcpy(params ? params : colo_gpt_params(model), scratch, np * sizeof(float));
  free(scratch);
  cJSON_Delete(f.hdr);
  free(f.buf);
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
