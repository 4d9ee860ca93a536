/* coloctl compare (compare.h): specs flattened through their JSON form, the fields that differ
 * found, the rows sorted by how well each job did. */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../common/pbcodec.h"
#include "output.h"

/* One job's spec as "path" = "value" pairs, in field order. */
typedef struct {
  char **path, **value;
  size_t n, cap;
} flat_t;

static int flat_add(flat_t *f, const char *path, const char *value) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 64;
    char **p = realloc(f->path, cap * sizeof *p),
         **v = p ? realloc(f->value, cap * sizeof *v) : NULL;
    if (p)
      f->path = p;
    if (!p || !v)
      return -1;
    f->value = v;
    f->cap = cap;
  }
  f->path[f->n] = strdup(path);
  f->value[f->n] = strdup(value);
  if (!f->path[f->n] || !f->value[f->n]) {
    free(f->path[f->n]);
    free(f->value[f->n]);
    return -1;
  }
  f->n++;
  return 0;
}

static void flat_free(flat_t *f) {
  for (size_t i = 0; i < f->n; i++) {
    free(f->path[i]);
    free(f->value[i]);
  }
  free(f->path);
  free(f->value);
}

/* a JSON value as a cell: strings bare, whole numbers exactly, others in 6 digits (a float
 * field's 0.003 reads 0.003, not its double), lists and objects as JSON */
static int cell(const cJSON *v, char *buf, size_t n) {
  if (cJSON_IsString(v)) {
    snprintf(buf, n, "%s", v->valuestring);
  } else if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (d == floor(d) && fabs(d) < 9007199254740992.0)
      snprintf(buf, n, "%.0f", d);
    else
      snprintf(buf, n, "%.6g", d);
  } else if (cJSON_IsBool(v)) {
    snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
  } else {
    char *s = cJSON_PrintUnformatted(v);
    if (!s)
      return -1;
    snprintf(buf, n, "%s", s);
    cJSON_free(s);
  }
  return 0;
}

static int flatten(const cJSON *obj, const char *prefix, flat_t *f) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    char path[256], value[512];
    snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", it->string);
    if (cJSON_IsObject(it)) {
      if (flatten(it, path, f) < 0)
        return -1;
      continue;
    }
    if (cell(it, value, sizeof value) < 0 || flat_add(f, path, value) < 0)
      return -1;
  }
  return 0;
}

static const char *lookup(const flat_t *f, const char *path) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->path[i], path))
      return f->value[i];
  return NULL;
}

/* appends s to the list *arr of *n: 0, or -1 out of memory */
static int push(const char ***arr, size_t *n, const char *s) {
  const char **grown = realloc(*arr, (*n + 1) * sizeof *grown);
  if (!grown)
    return -1;
  *arr = grown;
  grown[(*n)++] = s;
  return 0;
}

typedef struct {
  const Colo__V1__Job *job;
  size_t flat;
} row_t;

static int has_val(const Colo__V1__Job *j) {
  return j->progress && j->progress->has_val_loss && isfinite(j->progress->val_loss);
}

static int has_loss(const Colo__V1__Job *j) {
  return j->progress && j->progress->has_loss && j->progress->has_step && j->progress->step > 0;
}

static int by_outcome(const void *a, const void *b) {
  const Colo__V1__Job *x = ((const row_t *)a)->job, *y = ((const row_t *)b)->job;
  if (has_val(x) != has_val(y))
    return has_val(x) ? -1 : 1;
  if (has_val(x) && x->progress->val_loss != y->progress->val_loss)
    return x->progress->val_loss < y->progress->val_loss ? -1 : 1;
  if (has_loss(x) != has_loss(y))
    return has_loss(x) ? -1 : 1;
  if (has_loss(x) && x->progress->loss != y->progress->loss)
    return x->progress->loss < y->progress->loss ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int has_ema(const Colo__V1__Job *j) { /* train.ema_decay's moving average's */
  return has_val(j) && j->progress->has_ema_val_loss && isfinite(j->progress->ema_val_loss);
}

/* job j's loss on the validation set named name (data.val_sources), or NULL */
static const Colo__V1__SetLoss *set_loss(const Colo__V1__Job *j, const char *name) {
  for (size_t i = 0; j->progress && i < j->progress->n_val_sets; i++) {
    const Colo__V1__SetLoss *v = j->progress->val_sets[i];
    if (v->name && !strcmp(v->name, name) && v->has_loss && isfinite(v->loss))
      return v;
  }
  return NULL;
}

/* job j's scores on the multiple-choice set named name (data.choice_sets), or NULL */
static const Colo__V1__SetScore *set_score(const Colo__V1__Job *j, const char *name) {
  for (size_t i = 0; j->progress && i < j->progress->n_choice_scores; i++) {
    const Colo__V1__SetScore *v = j->progress->choice_scores[i];
    if (v->name && !strcmp(v->name, name))
      return v;
  }
  return NULL;
}

/* name into names (*n of them) unless it is there already (or NULL) */
static int push_new(const char ***names, size_t *n, const char *name) {
  for (size_t k = 0; name && k < *n; k++)
    if (!strcmp((*names)[k], name))
      return 0;
  return name ? push(names, n, name) : 0;
}

int compare_print(const Colo__V1__Job *const *jobs, size_t n, int json, FILE *out) {
  flat_t *flat = calloc(n ? n : 1, sizeof *flat);
  row_t *rows = calloc(n ? n : 1, sizeof *rows);
  const char **diff = NULL, **sets = NULL, **chs = NULL;
  size_t n_diff = 0, n_sets = 0, n_chs = 0;
  int rc = flat && rows ? 0 : -1, ema = 0;
  for (size_t j = 0; j < n; j++)
    ema |= has_ema(jobs[j]); /* a column of it, when any job has one */
  /* the validation sets' and the multiple-choice sets' names, of any job and in the order met */
  for (size_t j = 0; j < n && rc == 0; j++) {
    const Colo__V1__Progress *p = jobs[j]->progress;
    for (size_t i = 0; p && i < p->n_val_sets && rc == 0; i++)
      rc = push_new(&sets, &n_sets, p->val_sets[i]->name);
    for (size_t i = 0; p && i < p->n_choice_scores && rc == 0; i++)
      rc = push_new(&chs, &n_chs, p->choice_scores[i]->name);
  }
  for (size_t j = 0; j < n && rc == 0; j++) {
    cJSON *spec = jobs[j]->spec ? colo_pb_to_json(&jobs[j]->spec->base) : cJSON_CreateObject();
    rc = spec ? flatten(spec, "", &flat[j]) : -1;
    cJSON_Delete(spec);
    rows[j] = (row_t){jobs[j], j};
  }
  /* the paths, of any job and in the order met, whose values are not all the same */
  const char **checked = calloc(1, sizeof *checked);
  size_t n_checked = 0;
  for (size_t j = 0; j < n && rc == 0 && checked; j++)
    for (size_t i = 0; i < flat[j].n && rc == 0; i++) {
      const char *path = flat[j].path[i];
      int seen = !strcmp(path, "name");
      for (size_t k = 0; k < n_checked && !seen; k++)
        seen = !strcmp(checked[k], path);
      if (seen)
        continue;
      int differs = 0;
      for (size_t o = 0; o < n && !differs; o++) {
        const char *v = lookup(&flat[o], path);
        differs = !v || strcmp(v, flat[j].value[i]) != 0;
      }
      rc = push(&checked, &n_checked, path);
      if (rc == 0 && differs)
        rc = push(&diff, &n_diff, path);
    }
  if (!checked)
    rc = -1;
  free(checked);
  if (rc == 0)
    qsort(rows, n, sizeof *rows, by_outcome);
  if (rc == 0 && json) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t r = 0; r < n && arr; r++) {
      const Colo__V1__Job *j = rows[r].job;
      cJSON *o = cJSON_CreateObject(), *fields = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "id", (double)j->id);
      cJSON_AddStringToObject(o, "name", j->name ? j->name : "");
      cJSON_AddStringToObject(o, "state", state_name(j->state));
      for (size_t k = 0; k < n_diff; k++) {
        const char *path = diff[k], *v = lookup(&flat[rows[r].flat], path);
        if (v)
          cJSON_AddStringToObject(fields, path, v);
        else
          cJSON_AddNullToObject(fields, path);
      }
      cJSON_AddItemToObject(o, "fields", fields);
      if (j->progress && j->progress->has_step)
        cJSON_AddNumberToObject(o, "step", (double)j->progress->step);
      if (has_loss(j))
        cJSON_AddNumberToObject(o, "loss", j->progress->loss);
      if (has_val(j))
        cJSON_AddNumberToObject(o, "val_loss", j->progress->val_loss);
      if (has_ema(j))
        cJSON_AddNumberToObject(o, "ema_val_loss", j->progress->ema_val_loss);
      cJSON *vs = n_sets ? cJSON_AddObjectToObject(o, "val_sets") : NULL;
      for (size_t k = 0; vs && k < n_sets; k++) {
        const Colo__V1__SetLoss *v = set_loss(j, sets[k]);
        if (v)
          cJSON_AddNumberToObject(vs, sets[k], v->loss);
      }
      cJSON *cs = n_chs ? cJSON_AddObjectToObject(o, "choice_scores") : NULL;
      for (size_t k = 0; cs && k < n_chs; k++) {
        const Colo__V1__SetScore *v = set_score(j, chs[k]);
        cJSON *x = v ? cJSON_AddObjectToObject(cs, chs[k]) : NULL;
        if (x) {
          cJSON_AddNumberToObject(x, "acc", v->acc);
          cJSON_AddNumberToObject(x, "acc_norm", v->acc_norm);
          cJSON_AddNumberToObject(x, "acc_token", v->acc_token);
        }
      }
      cJSON_AddItemToArray(arr, o);
    }
    char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
    if (s)
      fprintf(out, "%s\n", s);
    else
      rc = -1;
    cJSON_free(s);
    cJSON_Delete(arr);
  } else if (rc == 0) {
    size_t nc = n_sets + n_chs; /* a column each: its loss, or its acc_norm */
    const char **head = calloc(n_diff + nc + 8, sizeof *head),
               **cells = calloc(n_diff + nc + 7, sizeof *cells);
    char(*setv)[24] = calloc(nc ? nc : 1, sizeof *setv);
    char(*chead)[160] = calloc(n_chs ? n_chs : 1, sizeof *chead);
    table_t *t = NULL;
    if (head && cells && setv && chead) {
      size_t h = 0;
      head[h++] = "ID";
      head[h++] = "NAME";
      head[h++] = "STATE";
      for (size_t k = 0; k < n_diff; k++)
        head[h++] = diff[k];
      head[h++] = "STEP";
      head[h++] = "LOSS";
      head[h++] = "VAL LOSS";
      for (size_t k = 0; k < n_sets; k++)
        head[h++] = sets[k];
      for (size_t k = 0; k < n_chs; k++) {
        snprintf(chead[k], sizeof chead[k], "%.140s ACC_NORM", chs[k]);
        head[h++] = chead[k];
      }
      if (ema)
        head[h++] = "EMA VAL LOSS";
      t = table_new(head);
    }
    for (size_t r = 0; t && r < n; r++) {
      const Colo__V1__Job *j = rows[r].job;
      char id[24], step[24] = "-", loss[24] = "-", val[24] = "-", ev[24] = "-";
      snprintf(id, sizeof id, "%llu", (unsigned long long)j->id);
      if (j->progress && j->progress->has_step)
        snprintf(step, sizeof step, "%llu", (unsigned long long)j->progress->step);
      if (has_loss(j))
        snprintf(loss, sizeof loss, "%.4f", (double)j->progress->loss);
      if (has_val(j))
        snprintf(val, sizeof val, "%.4f", (double)j->progress->val_loss);
      size_t c = 0;
      cells[c++] = id;
      cells[c++] = j->name ? j->name : "";
      cells[c++] = state_name(j->state);
      for (size_t k = 0; k < n_diff; k++) {
        const char *v = lookup(&flat[rows[r].flat], diff[k]);
        cells[c++] = v ? v : "-";
      }
      cells[c++] = step;
      cells[c++] = loss;
      cells[c++] = val;
      for (size_t k = 0; k < n_sets; k++) {
        const Colo__V1__SetLoss *v = set_loss(j, sets[k]);
        if (v)
          snprintf(setv[k], sizeof setv[k], "%.4f", (double)v->loss);
        else
          snprintf(setv[k], sizeof setv[k], "-");
        cells[c++] = setv[k];
      }
      for (size_t k = 0; k < n_chs; k++) {
        const Colo__V1__SetScore *v = set_score(j, chs[k]);
        snprintf(setv[n_sets + k], sizeof setv[0], v ? "%.4f" : "-", v ? (double)v->acc_norm : 0.0);
        cells[c++] = setv[n_sets + k];
      }
      if (ema) {
        if (has_ema(j))
          snprintf(ev, sizeof ev, "%.4f", (double)j->progress->ema_val_loss);
        cells[c++] = ev;
      }
      table_row_cells(t, cells);
    }
    if (t) {
      table_print(t, out);
      table_free(t);
    } else {
      rc = -1;
    }
    free(head);
    free(cells);
    free(setv);
    free(chead);
  }
  for (size_t j = 0; flat && j < n; j++)
    flat_free(&flat[j]);
  free(flat);
  free(rows);
  free(diff);
  free(sets);
  free(chs);
  return rc;
}
