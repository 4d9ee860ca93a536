/* safetensors: fp32 writing, mapped reading with F16/BF16 conversion. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../common/error.h"
#include "../core/dtype.h"

#define MAX_HEADER (64u << 20)

int colo_st_begin(colo_st_writer_t *w, const char *path, const colo_st_tensor_t *t, size_t n,
                  char *err, size_t errlen) {
  memset(w, 0, sizeof *w);
  snprintf(w->path, sizeof w->path, "%s", path);
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
  w->left = off / sizeof(float);
  char *json = cJSON_PrintUnformatted(hdr);
  cJSON_Delete(hdr);
  if (!json)
    return colo_fail(err, errlen, COLO_ENOMEM, "%s: out of memory for the header", path);
  size_t jl = strlen(json), padded = (jl + 7) / 8 * 8; /* data starts 8-byte aligned */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0 && !(w->f = fdopen(fd, "wb")))
    close(fd);
  uint64_t hl = padded; /* little-endian on every machine colo runs on */
  int ok = w->f && fwrite(&hl, 8, 1, w->f) == 1 && fwrite(json, 1, jl, w->f) == jl;
  for (size_t i = jl; ok && i < padded; i++)
    ok = fputc(' ', w->f) != EOF;
  cJSON_free(json);
  if (!ok) {
    int e = errno;
    colo_st_abort(w);
    return colo_fail(err, errlen, COLO_EIO, "%s: %s", path, strerror(e));
  }
  return 0;
}

int colo_st_put(colo_st_writer_t *w, const float *data, size_t numel, char *err, size_t errlen) {
  int rc = 0;
  if (!w->f)
    rc = colo_fail(err, errlen, COLO_EINVAL, "%s: not being written", w->path);
  else if (numel > w->left)
    rc = colo_fail(err, errlen, COLO_EINVAL, "%s: %zu floats more than its header lists", w->path,
                   numel - w->left);
  else if (fwrite(data, sizeof(float), numel, w->f) != numel)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: write failed: %s", w->path, strerror(errno));
  if (rc < 0) {
    colo_st_abort(w);
    return rc;
  }
  w->left -= numel;
  return 0;
}

int colo_st_finish(colo_st_writer_t *w, char *err, size_t errlen) {
  int rc = 0;
  if (!w->f)
    return colo_fail(err, errlen, COLO_EINVAL, "%s: not being written", w->path);
  if (w->left)
    rc = colo_fail(err, errlen, COLO_EINVAL, "%s: %zu floats of its header never written", w->path,
                   w->left);
  else if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: write failed: %s", w->path, strerror(errno));
  if (rc < 0) {
    colo_st_abort(w);
    return rc;
  }
  if (fclose(w->f) != 0)
    rc = colo_fail(err, errlen, COLO_EIO, "%s: write failed: %s", w->path, strerror(errno));
  w->f = NULL;
  return rc;
}

void colo_st_abort(colo_st_writer_t *w) {
  if (w->f) {
    fclose(w->f);
    unlink(w->path);
  }
  w->f = NULL;
}

int colo_safetensors_write(const char *path, const colo_st_tensor_t *t, size_t n, char *err,
                           size_t errlen) {
  colo_st_writer_t w;
  int rc = colo_st_begin(&w, path, t, n, err, errlen);
  for (size_t i = 0; rc == 0 && i < n; i++)
    rc = colo_st_put(&w, t[i].data, t[i].numel, err, errlen);
  return rc == 0 ? colo_st_finish(&w, err, errlen) : rc;
}

int colo_st_open(const char *path, colo_st_file_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return colo_fail(err, errlen, errno == ENOENT ? COLO_ENOENT : COLO_EIO, "%s: %s", path,
                     strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return colo_fail(err, errlen, COLO_EIO, "%s: not a regular file", path);
  }
  size_t len = (size_t)sb.st_size;
  void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED)
    return colo_fail(err, errlen, len ? COLO_EIO : COLO_EPARSE, "%s: %s", path,
                     len ? strerror(errno) : "empty, not a safetensors file");
  const char *buf = map;
  uint64_t hl;
  if (len < 8 || (memcpy(&hl, buf, 8), hl > MAX_HEADER) || 8 + hl > len) {
    munmap(map, len);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: not a safetensors file (bad header length)",
                     path);
  }
  cJSON *hdr = cJSON_ParseWithLength(buf + 8, (size_t)hl);
  if (!hdr || !cJSON_IsObject(hdr)) {
    cJSON_Delete(hdr);
    munmap(map, len);
    return colo_fail(err, errlen, COLO_EPARSE, "%s: the safetensors header is not valid JSON",
                     path);
  }
  out->buf = buf;
  out->len = len;
  out->data_start = 8 + (size_t)hl;
  out->hdr = hdr;
  snprintf(out->path, sizeof out->path, "%s", path);
  return 0;
}

void colo_st_close(colo_st_file_t *f) {
  if (f->buf)
    munmap((void *)f->buf, f->len);
  cJSON_Delete(f->hdr);
  memset(f, 0, sizeof *f);
}

/* The dtype, shape (ndim ≤ 2) and bytes of tensor `name`; -1 when it is not a well-formed
 * entry of f. */
int colo_st_entry(const colo_st_file_t *f, const char *name, const char **dtype, int *ndim,
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
int colo_st_get(const colo_st_file_t *f, const char *name, int ndim, const int *shape, float *dst,
                int any_float, char *err, size_t errlen) {
  size_t numel = 1;
  for (int d = 0; d < ndim; d++)
    numel *= (size_t)shape[d];
  return colo_st_get_part(f, name, ndim, shape, 0, numel, dst, any_float, err, errlen);
}

int colo_st_get_part(const colo_st_file_t *f, const char *name, int ndim, const int *shape,
                     size_t lo, size_t hi, float *dst, int any_float, char *err, size_t errlen) {
  const char *path = f->path;
  const char *dtype, *data;
  int nd;
  long sh[2];
  size_t bytes;
  if (!cJSON_GetObjectItemCaseSensitive(f->hdr, name))
    return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s is missing", path, name);
  if (colo_st_entry(f, name, &dtype, &nd, sh, &data, &bytes) < 0)
    return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s has a malformed entry", path, name);
  colo_dtype_t t = COLO_DTYPE_F32;
  if (!strcmp(dtype, "F32"))
    t = COLO_DTYPE_F32;
  else if (any_float && !strcmp(dtype, "F16"))
    t = COLO_DTYPE_F16;
  else if (any_float && !strcmp(dtype, "BF16"))
    t = COLO_DTYPE_BF16;
  else
    return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s is %s, not %s", path, name, dtype,
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
    return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s is %s; this model's is %s", path,
                     name, got, want);
  }
  if (bytes != numel * colo_dtype_size(t))
    return colo_fail(err, errlen, COLO_EPARSE, "%s: tensor %s has bad data offsets", path, name);
  if (lo > hi || hi > numel)
    return colo_fail(err, errlen, COLO_EINVAL, "%s: elements [%zu, %zu) of tensor %s's %zu", path,
                     lo, hi, name, numel);
  data += lo * colo_dtype_size(t); /* only the part asked for: only its pages are read */
  numel = hi - lo;
  bytes = numel * colo_dtype_size(t);
  if (t == COLO_DTYPE_F32 || ((uintptr_t)data & 1) == 0) {
    if (t == COLO_DTYPE_F32)
      memcpy(dst, data, bytes);
    else
      colo_dtype_to_float(dst, data, numel, t);
    return 0;
  }
  void *aligned = malloc(bytes ? bytes : 1); /* 16-bit data at an odd address */
  if (!aligned)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory reading %s", path);
  memcpy(aligned, data, bytes);
  colo_dtype_to_float(dst, aligned, numel, t);
  free(aligned);
  return 0;
}
