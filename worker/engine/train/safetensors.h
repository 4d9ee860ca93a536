/* safetensors files: writing fp32 tensors, and reading any file's tensors (F32, or F16 and BF16
 * converted to fp32) through a read-only mapping, so that many ranks reading one large file
 * share its pages. */
#ifndef COLO_SAFETENSORS_H
#define COLO_SAFETENSORS_H

#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

/* One F32 tensor for colo_safetensors_write. */
typedef struct {
  const char *name;
  const float *data;
  int ndim;
  int shape[2];
  size_t numel;
} colo_st_tensor_t;

/* Writes tensors as a safetensors file (F32, data 8-byte aligned) and fsyncs it. */
int colo_safetensors_write(const char *path, const colo_st_tensor_t *t, size_t n, char *err,
                           size_t errlen);

/* A file written tensor by tensor, so that its data can come in pieces from anywhere (a GPU's
 * memory through a small host buffer, a file): colo_st_begin writes the header of the tensors
 * (their data pointers unused), colo_st_put appends the next floats in the header's order, and
 * colo_st_finish checks that every one came, flushes and fsyncs. Any failure, or colo_st_abort,
 * removes the file. */
typedef struct {
  FILE *f;
  size_t left; /* floats the header lists that are not written yet */
  char path[1400];
} colo_st_writer_t;
int colo_st_begin(colo_st_writer_t *w, const char *path, const colo_st_tensor_t *t, size_t n,
                  char *err, size_t errlen);
int colo_st_put(colo_st_writer_t *w, const float *data, size_t numel, char *err, size_t errlen);
int colo_st_finish(colo_st_writer_t *w, char *err, size_t errlen);
void colo_st_abort(colo_st_writer_t *w);

/* An open file: its mapping and parsed header. */
typedef struct {
  const char *buf; /* the whole file, mapped */
  size_t len, data_start;
  cJSON *hdr;
  char path[1400];
} colo_st_file_t;

/* Maps path and parses its header (COLO_EIO, COLO_ENOENT or COLO_EPARSE with the reason). */
int colo_st_open(const char *path, colo_st_file_t *f, char *err, size_t errlen);
void colo_st_close(colo_st_file_t *f);

/* The dtype, shape (ndim ≤ 2) and bytes of tensor `name`; -1 when f has no well-formed entry
 * of that name. */
int colo_st_entry(const colo_st_file_t *f, const char *name, const char **dtype, int *ndim,
                  long shape[2], const char **data, size_t *bytes);

/* Copies tensor `name`, which must have shape (ndim, shape), into dst as fp32: F32 only, or
 * also F16 and BF16 (converted) when any_float. Errors name the file and the tensor. */
int colo_st_get(const colo_st_file_t *f, const char *name, int ndim, const int *shape, float *dst,
                int any_float, char *err, size_t errlen);
/* The same for elements [lo, hi) of the tensor (flattened), into dst[0, hi - lo): only their
 * pages of the mapping are read. */
int colo_st_get_part(const colo_st_file_t *f, const char *name, int ndim, const int *shape,
                     size_t lo, size_t hi, float *dst, int any_float, char *err, size_t errlen);

#endif
