/* Pipeline files for `coloctl submit` (proto/colo/v1/pipeline.proto): each stage's job built
 * from its job file and settings, checked with the coordinator's rules, and its dependencies on
 * earlier stages resolved to job ids as the stages are submitted in order. */
#ifndef COLO_CLIENT_PIPELINE_H
#define COLO_CLIENT_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/jobspec.h"
#include "colo/v1/cluster.pb-c.h"

typedef struct {
  char name[COLO_MAX_NAME + 1];
  char file[COLO_MAX_PATH + 1]; /* its job file, as opened */
  Colo__V1__JobSpec *spec;      /* ready but for the ids of the stages it depends on */
  size_t n_own_after;           /* the job file's own `after` (job ids), before the stages' */
  size_t after[COLO_MAX_AFTER]; /* earlier stages it runs after, by index (init_from's too) */
  size_t n_after;
  int init_from; /* the earlier stage whose checkpoint starts it, or -1 */
} colo_stage_t;

typedef struct {
  colo_stage_t *stages;
  size_t n;
} colo_pipeline_t;

#define COLO_MAX_STAGES 64

/* Reads `file` as a pipeline and checks every stage: 1 when it is one (*p filled; free it with
 * colo_pipeline_free), 0 when the file is not a pipeline (no `stages`: a job file), or a
 * negative colo code with an exact message in err ("FILE: stage finetune: after \"eval\": ...").
 * `sets` (FIELD=VALUE) apply to every stage's job, before the stage's own `set`. */
int colo_pipeline_load(const char *file, const char *const *sets, int n_sets, colo_pipeline_t *p,
                       char *err, size_t errlen);

/* Stage k's job, with the ids of the stages before it (ids[i] for stage i < k) in its `after`
 * and train.init_from_job. Valid until the next call or colo_pipeline_free. */
Colo__V1__JobSpec *colo_pipeline_bind(colo_pipeline_t *p, size_t k, const uint64_t *ids);

void colo_pipeline_free(colo_pipeline_t *p);

#endif
