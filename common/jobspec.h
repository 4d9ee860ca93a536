/* The job specification: defaults, validation with exact messages, and the path rules that keep
 * request paths inside their configured roots. Shared by colod (the authority) and coloctl
 * (early feedback). */
#ifndef COLO_JOBSPEC_H
#define COLO_JOBSPEC_H

#include <stddef.h>

#include "colo/v1/cluster.pb-c.h"

/* Largest world (dp × cp × tp × pp) a job may ask for. */
#define COLO_MAX_WORLD    65536
#define COLO_MAX_RESTARTS 100
#define COLO_MAX_PRIORITY 1000
/* resources.time_limit_s at most: a year */
#define COLO_MAX_TIME_LIMIT_S 31536000u
#define COLO_MAX_NAME         64
#define COLO_MAX_AFTER        64 /* jobs a job may wait for (JobSpec.after) */
#define COLO_MAX_PATH         1024
#define COLO_MAX_LABELS       16 /* a host's labels, a job's resources.host_labels */
#define COLO_MAX_LABEL        31
#define COLO_MAX_SOURCES      64 /* training sets of a blend (data.sources) */
/* A blend's sources share each period of this many sequences in whole slots, so each weight
 * must be at least 1/COLO_BLEND_SLOTS of their sum (the sampler: worker/engine/train/data.h) */
#define COLO_BLEND_SLOTS 4096

/* Fills every unset field with its default (see cluster.proto). */
int colo_jobspec_fill_defaults(Colo__V1__JobSpec *spec);

/* 1 when n is a valid job name: 1 to COLO_MAX_NAME letters, digits, '-', '_' and '.'. */
int colo_jobspec_name_ok(const char *n);

/* Checks a list of host labels (what `what` names in the message: "labels",
 * "resources.host_labels"): at most COLO_MAX_LABELS, each 1 to COLO_MAX_LABEL letters, digits,
 * '.', '_' or '-', none twice. 0, or COLO_EINVAL with why. */
int colo_labels_check(const char *what, char *const *labels, size_t n, char *err, size_t errlen);

/* notify.url, and the prefixes colod's notify_allow lists, at most this long */
#define COLO_MAX_URL 1000

/* Checks a URL colod may POST to (`what` names it in the message): http:// or https://, a host
 * after it, at most COLO_MAX_URL characters, printable ASCII without spaces. 0, or COLO_EINVAL
 * with why. */
int colo_url_check(const char *what, const char *url, char *err, size_t errlen);

/* 1 when url starts with one of the comma-separated prefixes, the match ending at a '/' (the
 * prefix's last character, or the url's next one), a '?', a '#' or the url's end: the prefix
 * https://hooks.example admits https://hooks.example/T1 but not https://hooks.example.evil or
 * https://hooks.example@evil. */
int colo_url_allowed(const char *url, const char *prefixes);

/* Checks a spec whose defaults are filled. Returns 0, or COLO_EINVAL with the first problem in
 * err, worded as `parallel.tp=3 does not divide model.n_head=8`. */
int colo_jobspec_validate(const Colo__V1__JobSpec *spec, char *err, size_t errlen);
/* A validation set's name in reports: its name, or else its path. */
const char *colo_val_source_name(const Colo__V1__DataSource *src);
/* What train.best_metric names: *set 0, the validation loss; k + 1, data.choice_sets[k]'s score
 * *kind (0 acc, 1 acc_norm, 2 acc_token; a score ranks higher-better). Returns 0, or COLO_EINVAL
 * when it names none of them. */
int colo_best_metric(const Colo__V1__JobSpec *spec, int *set, int *kind);
/* The steps of a wsd schedule's decay: optimizer.decay_steps, or 0 there: a fifth of the steps. */
unsigned colo_decay_steps(const Colo__V1__JobSpec *spec);

/* 1 when p is a non-empty relative path without ".." components, control characters or a
 * leading "/", at most COLO_MAX_PATH bytes: safe to join under a configured root. */
int colo_path_is_contained(const char *p);

/* dp × tp × pp of a filled spec. */
unsigned long long colo_jobspec_world(const Colo__V1__JobSpec *spec);

#endif
