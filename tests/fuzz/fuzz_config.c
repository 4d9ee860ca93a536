#define _GNU_SOURCE /* memmem */
/* Fuzz target: what people write for colo besides job specs: colod's config file (a YAML
 * mapping of settings), coloctl's pipeline files (stages naming job files, with `set` lines),
 * and `--set FIELD=VALUE` assignments. The first byte picks which; the rest is the text. Each
 * must be read or refused with an exact message, never crash or leak. (Under driver.c only: the
 * pipeline's job files are the seeds' copies in a scratch directory.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/pipeline.h"
#include "common/jobspec.h"
#include "common/pbcodec.h"
#include "daemon/config.h"
#include "fuzz.h"

static void config(const uint8_t *data, size_t size) {
  colod_config_t cfg;
  char err[2048];
  colod_config_defaults(&cfg);
  if (colod_config_load(&cfg, colo_fuzz_put("colod.yaml", data, size), err, sizeof err) < 0 &&
      !err[0])
    abort(); /* a refusal says why */
}

static void pipeline(const uint8_t *data, size_t size) {
  colo_pipeline_t p;
  char err[2048];
  const char *sets[1] = {"train.seed=7"};
  int rc =
      colo_pipeline_load(colo_fuzz_put("pipeline.yaml", data, size), sets, 1, &p, err, sizeof err);
  if (rc < 0 && !err[0])
    abort();
  if (rc == 1) {
    uint64_t ids[COLO_MAX_STAGES];
    for (size_t k = 0; k < p.n; k++) {
      ids[k] = 100 + k;
      Colo__V1__JobSpec *s = colo_pipeline_bind(&p, k, ids);
      if (!s || colo_jobspec_validate(s, err, sizeof err) < 0)
        continue;
    }
    colo_pipeline_free(&p);
  }
}

/* lines of FIELD=VALUE onto a job spec, then its defaults and validation */
static void sets(const uint8_t *data, size_t size) {
  ProtobufCMessage *m = (ProtobufCMessage *)calloc(1, sizeof(Colo__V1__JobSpec));
  if (!m)
    abort();
  colo__v1__job_spec__init((Colo__V1__JobSpec *)m);
  char *text = malloc(size + 1), err[2048];
  if (!text)
    abort();
  memcpy(text, data, size);
  text[size] = '\0';
  for (char *line = text, *nl; line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    if (colo_pb_set(&m, &colo__v1__job_spec__descriptor, line, err, sizeof err) < 0 && !err[0])
      abort();
  }
  free(text);
  Colo__V1__JobSpec *spec = (Colo__V1__JobSpec *)m;
  if (colo_jobspec_fill_defaults(spec) == 0)
    colo_jobspec_validate(spec, err, sizeof err);
  protobuf_c_message_free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  switch (data[0] % 3) {
  case 0:
    config(data + 1, size - 1);
    break;
  case 1:
    pipeline(data + 1, size - 1);
    break;
  default:
    sets(data + 1, size - 1);
  }
  return 0;
}

/* seeds: a corpus file is a colod config (colod.yaml), a pipeline (one with `stages:`) or a job
 * file, kept in the scratch directory under its own name for pipelines to name; and a few
 * --set lines */
void colo_fuzz_seeds(const uint8_t *file, size_t size, colo_fuzz_emit_fn emit) {
  static int n;
  uint8_t *in = malloc(size + 1);
  if (!in)
    abort();
  if (!file) {
    static const char set[] = "\x02train.steps=600\nparallel.dp=2\noptimizer.lr=3e-4\n"
                              "resources.device=gpu\nmemory.placement=auto\nparallel.zero_stage=3\n"
                              "notify.on=[started, failed]\nafter=[3, 4]";
    emit((const uint8_t *)set, sizeof set - 1);
    free(in);
    return;
  }
  memcpy(in + 1, file, size);
  int is_pipeline = memmem(file, size, "stages:", 7) != NULL;
  int is_config = memmem(file, size, "listen:", 7) != NULL;
  in[0] = is_pipeline ? 1 : 0;
  if (is_pipeline || is_config)
    emit(in, size + 1);
  else { /* a job file: pipelines' stages name it (tinyshakespeare.yaml) */
    char name[32];
    snprintf(name, sizeof name, "job%d.yaml", n++);
    colo_fuzz_put(name, file, size);
    if (n == 1)
      colo_fuzz_put("tinyshakespeare.yaml", file, size);
  }
  free(in);
}
