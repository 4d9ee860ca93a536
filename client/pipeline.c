/* Pipeline files: see pipeline.h and proto/colo/v1/pipeline.proto. */
#include "pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/pbcodec.h"
#include "colo/v1/pipeline.pb-c.h"

#define fail(err, errlen, ...) colo_fail(err, errlen, COLO_EINVAL, __VA_ARGS__)

/* the index of the stage named `name` among the first n, or -1 */
static int stage_at(const Colo__V1__Pipeline *pl, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (pl->stages[i]->name && !strcmp(pl->stages[i]->name, name))
      return (int)i;
  return -1;
}

/* an earlier stage's index from a name in stage k's `field`, or an error */
static int earlier(const Colo__V1__Pipeline *pl, size_t k, const char *field, const char *name,
                   const char *file, char *err, size_t errlen) {
  int i = stage_at(pl, k, name);
  if (i >= 0)
    return i;
  if (stage_at(pl, pl->n_stages, name) >= 0)
    return fail(err, errlen,
                "%s: stage %s: %s \"%s\" is not an earlier stage: list each stage after the ones "
                "it depends on",
                file, pl->stages[k]->name, field, name);
  return fail(err, errlen, "%s: stage %s: %s \"%s\": there is no such stage", file,
              pl->stages[k]->name, field, name);
}

Colo__V1__JobSpec *colo_pipeline_bind(colo_pipeline_t *p, size_t k, const uint64_t *ids) {
  colo_stage_t *s = &p->stages[k];
  s->spec->n_after = s->n_own_after + s->n_after;
  for (size_t i = 0; i < s->n_after; i++)
    s->spec->after[s->n_own_after + i] = ids[s->after[i]];
  if (s->init_from >= 0) {
    s->spec->train->has_init_from_job = 1;
    s->spec->train->init_from_job = ids[s->init_from];
  }
  return s->spec;
}

/* stage k of pl into p->stages[k]: its job file, name, settings and dependencies, checked */
static int load_stage(const Colo__V1__Pipeline *pl, size_t k, const char *file, const char *dir,
                      const char *const *sets, int n_sets, colo_pipeline_t *p, char *err,
                      size_t errlen) {
  const Colo__V1__PipelineStage *st = pl->stages[k];
  colo_stage_t *s = &p->stages[k];
  s->init_from = -1;
  if (!st->name || !colo_jobspec_name_ok(st->name))
    return fail(err, errlen,
                "%s: stages[%zu]: name \"%s\" must be 1 to %d characters of letters, digits, "
                "'-', '_' and '.'",
                file, k, st->name ? st->name : "", COLO_MAX_NAME);
  if (stage_at(pl, k, st->name) >= 0)
    return fail(err, errlen, "%s: stage %s is named twice", file, st->name);
  snprintf(s->name, sizeof s->name, "%s", st->name);
  if (!st->job || !st->job[0])
    return fail(err, errlen, "%s: stage %s: job (its job file) must be set", file, st->name);
  if (st->job[0] == '/' || !dir[0])
    snprintf(s->file, sizeof s->file, "%s", st->job);
  else
    snprintf(s->file, sizeof s->file, "%s/%s", dir, st->job);
  char why[1024];
  if (colo_pb_from_yaml_file(s->file, &colo__v1__job_spec__descriptor,
                             (ProtobufCMessage **)&s->spec, why, sizeof why) < 0) {
    s->spec = NULL;
    return fail(err, errlen, "%s: stage %s: %s", file, st->name, why);
  }
  /* its job's name: the stage's, after the pipeline's; a `set` of name may still change it */
  char name[2 * COLO_MAX_NAME + 2];
  snprintf(name, sizeof name, "%s%s%s", pl->name && pl->name[0] ? pl->name : "",
           pl->name && pl->name[0] ? "." : "", st->name);
  if (strlen(name) > COLO_MAX_NAME)
    return fail(err, errlen, "%s: stage %s: its job's name %s is longer than %d characters", file,
                st->name, name, COLO_MAX_NAME);
  free(s->spec->name);
  s->spec->name = strdup(name);
  if (pl->has_cancel_on_dependency_failure) { /* the pipeline's, over the job file's */
    s->spec->has_cancel_on_dependency_failure = 1;
    s->spec->cancel_on_dependency_failure = pl->cancel_on_dependency_failure;
  }
  for (int i = 0; i < n_sets + (int)st->n_set; i++) {
    const char *set = i < n_sets ? sets[i] : st->set[i - n_sets];
    if (colo_pb_set((ProtobufCMessage **)&s->spec, &colo__v1__job_spec__descriptor, set, why,
                    sizeof why) < 0)
      return fail(err, errlen, "%s: stage %s: %s", file, st->name, why);
  }
  for (size_t i = 0; i < st->n_after; i++) {
    int j = earlier(pl, k, "after", st->after[i], file, err, errlen);
    if (j < 0)
      return j;
    for (size_t m = 0; m < s->n_after; m++)
      if (s->after[m] == (size_t)j)
        return fail(err, errlen, "%s: stage %s: after names %s twice", file, st->name,
                    st->after[i]);
    s->after[s->n_after++] = (size_t)j;
  }
  if (st->init_from && st->init_from[0]) {
    int j = earlier(pl, k, "init_from", st->init_from, file, err, errlen);
    if (j < 0)
      return j;
    s->init_from = j;
    size_t m = 0;
    while (m < s->n_after && s->after[m] != (size_t)j)
      m++;
    if (m == s->n_after)
      s->after[s->n_after++] = (size_t)j;
    if (s->spec->train && s->spec->train->has_init_from_job)
      return fail(err, errlen,
                  "%s: stage %s: init_from and its job's train.init_from_job are exclusive: set "
                  "one",
                  file, st->name);
  }
  s->n_own_after = s->spec->n_after;
  if (s->n_own_after + s->n_after > COLO_MAX_AFTER)
    return fail(err, errlen, "%s: stage %s: runs after %zu jobs; at most %d", file, st->name,
                s->n_own_after + s->n_after, COLO_MAX_AFTER);
  uint64_t *after = realloc(s->spec->after, (s->n_own_after + s->n_after + 1) * sizeof *after);
  if (!after)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  s->spec->after = after;
  if (colo_jobspec_fill_defaults(s->spec) < 0)
    return colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
  /* checked with stand-ins for the ids of the stages before it, none of them a real job's */
  uint64_t stand_in[COLO_MAX_STAGES];
  for (size_t i = 0; i < COLO_MAX_STAGES; i++)
    stand_in[i] = UINT64_MAX - i;
  colo_pipeline_bind(p, k, stand_in);
  if (colo_jobspec_validate(s->spec, why, sizeof why) < 0)
    return fail(err, errlen, "%s: stage %s (%s): %s", file, st->name, s->file, why);
  return 0;
}

int colo_pipeline_load(const char *file, const char *const *sets, int n_sets, colo_pipeline_t *p,
                       char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  Colo__V1__Pipeline *pl = NULL;
  char why[1024];
  if (colo_pb_from_yaml_file(file, &colo__v1__pipeline__descriptor, (ProtobufCMessage **)&pl, why,
                             sizeof why) < 0) {
    /* a job file has fields a pipeline has not: it is one unless what failed is its stages */
    if (!strstr(why, "stages"))
      return 0;
    snprintf(err, errlen, "%s", why);
    return COLO_EINVAL;
  }
  int rc = 0;
  if (!pl->n_stages)
    goto done;
  if (pl->n_stages > COLO_MAX_STAGES) {
    rc = fail(err, errlen, "%s: %zu stages; at most %d", file, pl->n_stages, COLO_MAX_STAGES);
    goto done;
  }
  if (pl->name && pl->name[0] && !colo_jobspec_name_ok(pl->name)) {
    rc = fail(err, errlen,
              "%s: name \"%s\" must be 1 to %d characters of letters, digits, '-', '_' and '.'",
              file, pl->name, COLO_MAX_NAME);
    goto done;
  }
  p->stages = calloc(pl->n_stages, sizeof *p->stages);
  if (!p->stages) {
    rc = colo_fail(err, errlen, COLO_ENOMEM, "out of memory");
    goto done;
  }
  p->n = pl->n_stages;
  char dir[COLO_MAX_PATH + 1];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  if (slash)
    *(slash == dir ? slash + 1 : slash) = '\0';
  else
    dir[0] = '\0';
  for (size_t k = 0; k < p->n && rc == 0; k++)
    rc = load_stage(pl, k, file, dir, sets, n_sets, p, err, errlen);
  if (rc == 0)
    rc = 1;
done:
  colo__v1__pipeline__free_unpacked(pl, NULL);
  if (rc <= 0)
    colo_pipeline_free(p);
  return rc;
}

void colo_pipeline_free(colo_pipeline_t *p) {
  for (size_t k = 0; p->stages && k < p->n; k++)
    if (p->stages[k].spec)
      colo__v1__job_spec__free_unpacked(p->stages[k].spec, NULL);
  free(p->stages);
  memset(p, 0, sizeof *p);
}
