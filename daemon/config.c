/* The config table and its YAML reader (libyaml). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "../common/error.h"
#include "../common/jobspec.h"
#include "../common/log.h"

typedef enum { T_STRING, T_DURATION, T_UINT, T_LOGLEVEL, T_BOOL } ctype_t;

typedef struct {
  const char *name;
  ctype_t type;
  size_t offset;
  size_t size; /* for strings */
  uint64_t min, max;
  const char *def;
  int reloadable;
  const char *help;
} centry_t;

#define F(field) offsetof(colod_config_t, field), sizeof(((colod_config_t *)0)->field)

static const centry_t TABLE[] = {
    {"listen", T_STRING, F(listen), 1, 0, "127.0.0.1:7070", 0,
     "gRPC listen address, host:port (port 0 picks a free one)"},
    {"state_dir", T_STRING, F(state_dir), 1, 0, "/var/lib/colo", 0,
     "directory for colod.db (SQLite, WAL)"},
    {"log_level", T_LOGLEVEL, F(log_level), 0, 3, "info", 1, "error, warn, info or debug"},
    {"host_timeout", T_DURATION, F(host_timeout_ms), 1000, 600000, "10s", 1,
     "a host whose heartbeats stop this long is DOWN"},
    {"heartbeat_interval", T_DURATION, F(heartbeat_ms), 100, 60000, "1s", 1,
     "how often workers heartbeat"},
    {"drain_timeout", T_DURATION, F(drain_timeout_ms), 0, 300000, "10s", 1,
     "on SIGTERM, how long in-flight calls may take before they are cancelled"},
    {"max_message_kib", T_UINT, F(max_message_kib), 4, 65536, "4096", 0,
     "largest request accepted, KiB"},
    {"max_watchers", T_UINT, F(max_watchers), 1, 100000, "1024", 1, "concurrent WatchJob streams"},
    {"restart_backoff", T_DURATION, F(restart_backoff_ms), 0, 600000, "1s", 1,
     "wait before a failed job's next attempt; doubles with each restart, at most 60 times it"},
    {"elastic_grow_after", T_DURATION, F(elastic_grow_after_ms), 0, 86400000, "60s", 1,
     "an elastic job (parallel.min_dp) running with fewer data-parallel groups than it asks for "
     "goes back to them, stopping at a step with a checkpoint, once there is room for them and "
     "its attempt has run this long"},
    {"fair_share_half_life", T_DURATION, F(fair_share_half_life_ms), 0, 2592000000u, "7d", 1,
     "fair share: among waiting jobs of the same priority, those whose owners used the fewest "
     "device hours lately start first; an hour used this long ago counts half. 0: oldest first"},
    {"fair_share_by", T_STRING, F(fair_share_by), 1, 0, "owner", 1,
     "fair share: whose recent device hours order the waiting jobs of one priority: owner (who "
     "submitted it), or account (JobSpec.account, a team's project; a job without one counts "
     "as the account \"\"); fair_share_weights then name accounts"},
    {"fair_share_weights", T_STRING, F(fair_share_weights), 0, 0, "", 1,
     "fair share: OWNER=WEIGHT,... (a team's allocation, say alice=2,bob=0.5): an owner's recent "
     "device hours count 1/WEIGHT in the wait order; *=WEIGHT for every owner not named, who "
     "otherwise weighs 1"},
    {"owner_max_jobs", T_STRING, F(owner_max_jobs), 0, 0, "", 1,
     "OWNER=JOBS,... (say *=1000): the most jobs an owner may have that have not ended; a submit "
     "or resume past it is refused (RESOURCE_EXHAUSTED). *: every owner not named. Empty: no "
     "limit"},
    {"owner_max_devices", T_STRING, F(owner_max_devices), 0, 0, "", 1,
     "OWNER=DEVICES,... (say alice=8,*=16): the most devices an owner's running jobs hold at "
     "once; a job that would pass it waits, and one that needs more is refused. *: every owner "
     "not named. Without mutual TLS every job has the same owner, \"\". Empty: no limit"},
    {"account_max_devices", T_STRING, F(account_max_devices), 0, 0, "", 1,
     "ACCOUNT=DEVICES,... (say nlp=32,*=8): the most devices the running jobs charged to an "
     "account (JobSpec.account; \"\" for none) hold at once; a job that would pass it waits, and "
     "one that needs more is refused. *: every account not named. Empty: no limit"},
    {"account_max_jobs", T_STRING, F(account_max_jobs), 0, 0, "", 1,
     "ACCOUNT=JOBS,... (say nlp=500,*=100): the most jobs charged to an account (JobSpec.account; "
     "\"\" for none) that have not ended; a submit or resume past it is refused "
     "(RESOURCE_EXHAUSTED). *: every account not named. Empty: no limit"},
    {"reservations", T_UINT, F(reservations), 0, 1000, "16", 1,
     "backfill: how many waiting jobs that cannot start, in line order, hold room in each "
     "scheduling pass where they can start soonest (by the time limits of the jobs before them), "
     "so the jobs behind take only room they give back before then; the first may hold room "
     "whose start is not known. 0: none hold room, and a large job may wait behind small ones "
     "for ever"},
    {"default_time_limit", T_DURATION, F(default_time_limit_ms), 0, 31536000000ull, "0", 1,
     "a job submitted without resources.time_limit_s gets this one (whole seconds; Slurm's "
     "DefaultTime), so every job's end has a bound and reservations can count on it. 0: "
     "max_time_limit where that is set, else none"},
    {"max_time_limit", T_DURATION, F(max_time_limit_ms), 0, 31536000000ull, "0", 1,
     "the longest resources.time_limit_s a job may have (whole seconds; Slurm's MaxTime): a "
     "submit or update past it is refused (INVALID_ARGUMENT). 0: a year"},
    {"rendezvous", T_STRING, F(rdzv_mode), 1, 0, "colod", 0,
     "who serves an attempt's rendezvous store: colod, or rank0 (on its host, at a port from "
     "rendezvous_port_base)"},
    {"rendezvous_port_base", T_UINT, F(rdzv_port_base), 1024, 64535, "29500", 0,
     "with rendezvous: rank0, ports from this one to +999"},
    {"job_retention", T_DURATION, F(job_retention_ms), 0, 3650ull * 86400000, "0", 1,
     "an ended job (SUCCEEDED, FAILED, CANCELLED, TIMED_OUT) is deleted this long after it ended: "
     "its record, events, attempts, curve, checkpoint records and rank logs (its checkpoint "
     "files stay where they are, and a job that a job not yet ended runs after is kept). Its "
     "device hours leave coloctl usage and fair share with it. 0: kept for ever"},
    {"rank_log_max_mib", T_UINT, F(log_max_mib), 1, 1048576, "64", 1,
     "largest rank log colod keeps, MiB; output past it is dropped and counted"},
    {"tls_cert", T_STRING, F(tls_cert), 0, 0, "", 0,
     "TLS: colod's certificate, PEM (deploy/tls-certs.sh makes one); empty: no TLS. SIGHUP "
     "reads the TLS files again, for a certificate rotated at the same path"},
    {"tls_key", T_STRING, F(tls_key), 0, 0, "", 0, "TLS: the key of tls_cert, PEM"},
    {"tls_client_ca", T_STRING, F(tls_client_ca), 0, 0, "", 0,
     "mutual TLS: every caller (workers, ranks, coloctl) needs a certificate from this CA, PEM; "
     "empty: callers are not asked for one"},
    {"tls_roles", T_BOOL, F(tls_roles), 0, 1, "true", 0,
     "with tls_client_ca: a certificate's OU is its role: user (jobs, hosts), admin (also "
     "cordons) or worker (a node, registered only under its certificate's name, and its ranks); "
     "false lets every certificate from the CA call everything"},
    {"logs_private", T_BOOL, F(logs_private), 0, 1, "true", 0,
     "with tls_roles: a user reads the logs of its own jobs only, an admin every job's; false: "
     "every user reads every job's logs"},
    {"metrics_listen", T_STRING, F(metrics_listen), 0, 0, "", 0,
     "host:port of an HTTP endpoint serving Prometheus metrics at /metrics and a health check at "
     "/healthz (port 0 picks a free one); empty: none. Plain HTTP without authentication: keep "
     "it on loopback or a private network"},
    {"notify_url", T_STRING, F(notify_url), 0, 0, "", 1,
     "http:// or https:// URL colod POSTs a JSON record to when a job ends (SUCCEEDED, FAILED, "
     "CANCELLED, TIMED_OUT) or is to restart after a failure: {\"text\": \"colo job 7 ... "
     "FAILED: ...\", \"job\", \"name\", \"owner\", \"account\", \"state\", \"message\", "
     "\"attempt\", \"restarts\", \"time_ms\"}, which a chat's incoming webhook takes as is. One "
     "try of 5 s each; failures are logged and counted. Empty: none"},
    {"notify_allow", T_STRING, F(notify_allow), 0, 0, "", 1,
     "comma-separated http:// or https:// URL prefixes a job's own notify.url must start with "
     "(the match ends at a '/', '?' or '#': https://hooks.example admits https://hooks.example/T1, "
     "not https://hooks.example.evil); such a job gets the same records at its URL for the "
     "changes it names in notify.on. Empty: jobs may not set notify.url"},
};
#define N_TABLE (sizeof TABLE / sizeof TABLE[0])

static const centry_t *find(const char *name) {
  for (size_t i = 0; i < N_TABLE; i++)
    if (strcmp(TABLE[i].name, name) == 0)
      return &TABLE[i];
  return NULL;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return COLO_EINVAL;
}

/* notify_allow: each comma-separated prefix a URL colod may POST to (colo_url_check) */
static int allow_list_check(const char *value, char *err, size_t errlen) {
  const char *p = value;
  while (*p) {
    char one[COLO_MAX_URL + 2];
    size_t n = strcspn(p, ",");
    if (n == 0 || n > COLO_MAX_URL)
      return fail(err, errlen, "notify_allow: entry %s", n ? "too long" : "empty (two commas?)");
    memcpy(one, p, n);
    one[n] = '\0';
    if (colo_url_check("notify_allow entry", one, err, errlen) < 0)
      return COLO_EINVAL;
    p += n;
    if (*p == ',' && !*++p)
      return fail(err, errlen, "notify_allow ends with a comma");
  }
  return 0;
}

/* "10s", "500ms", "2m", "1h", "7d" or a plain number of milliseconds */
static int parse_duration(const char *s, uint64_t *ms) {
  char *end;
  errno = 0;
  if (!*s || *s == '-')
    return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s)
    return -1;
  uint64_t mul;
  if (!*end || !strcmp(end, "ms"))
    mul = 1;
  else if (!strcmp(end, "s"))
    mul = 1000;
  else if (!strcmp(end, "m"))
    mul = 60000;
  else if (!strcmp(end, "h"))
    mul = 3600000;
  else if (!strcmp(end, "d"))
    mul = 86400000;
  else
    return -1;
  if (v > UINT64_MAX / mul)
    return -1;
  *ms = v * mul;
  return 0;
}

static void fmt_duration(uint64_t ms, char *buf, size_t n) {
  if (ms % 86400000 == 0 && ms)
    snprintf(buf, n, "%llud", (unsigned long long)(ms / 86400000));
  else if (ms % 3600000 == 0 && ms)
    snprintf(buf, n, "%lluh", (unsigned long long)(ms / 3600000));
  else if (ms % 60000 == 0 && ms)
    snprintf(buf, n, "%llum", (unsigned long long)(ms / 60000));
  else if (ms % 1000 == 0 && ms)
    snprintf(buf, n, "%llus", (unsigned long long)(ms / 1000));
  else
    snprintf(buf, n, "%llums", (unsigned long long)ms);
}

/* "host:port" or "[v6]:port", port 0..65535 */
static int host_port(const char *s) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s || !colon[1] || strlen(colon + 1) > 5)
    return 0;
  for (const char *p = colon + 1; *p; p++)
    if (*p < '0' || *p > '9')
      return 0;
  if (atoi(colon + 1) > 65535)
    return 0;
  if (s[0] == '[')
    return colon[-1] == ']' && colon - s > 2;
  return memchr(s, ':', (size_t)(colon - s)) == NULL; /* a bare IPv6 address needs brackets */
}

#define MAX_OWNER_VALUE 1e6

/* Reads a per-owner setting, "owner=value,owner=value" (spaces around either ignored; empty:
 * none; "*": every owner not named), checking every entry: a weight above 0 (fair_share_weights)
 * or, with whole, a whole number from 0 (owner_max_devices, _jobs), at most 1000000. Where owner is
 * not NULL, *v gets its value: returns 1 when it is named, 0 when not; COLO_EINVAL with why. */
static int owner_values(const char *name, int whole, const char *s, const char *owner, double *v,
                        char *err, size_t errlen) {
  const char *what = whole ? "limit" : "weight";
  char seen[64][129];
  size_t n_seen = 0;
  int found = 0;
  while (*s) {
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    const char *eq = memchr(s, '=', len);
    const char *a = s, *b = eq ? eq : s;
    while (a < b && *a == ' ')
      a++;
    while (b > a && b[-1] == ' ')
      b--;
    if (!eq || b == a)
      return fail(err, errlen, "%s entry \"%.*s\" must be %s=%s", name, (int)len, s,
                  name[0] == 'a' ? "ACCOUNT" : "OWNER",
                  !whole                 ? "WEIGHT"
                  : strstr(name, "jobs") ? "JOBS"
                                         : "DEVICES");
    size_t on = (size_t)(b - a);
    if (on > 128)
      return fail(err, errlen, "%s: %s \"%.*s...\" is longer than 128 bytes", name,
                  name[0] == 'a' ? "account" : "owner", 20, a);
    char num[64];
    size_t vn = len - (size_t)(eq + 1 - s);
    snprintf(num, sizeof num, "%.*s", (int)(vn < sizeof num ? vn : sizeof num - 1), eq + 1);
    char *e;
    errno = 0;
    double x = whole ? (double)strtoll(num, &e, 10) : strtod(num, &e);
    while (*e == ' ')
      e++;
    if (vn >= sizeof num || e == num || *e || errno || x > MAX_OWNER_VALUE ||
        (whole ? x < 0 : !(x > 0)))
      return fail(err, errlen, "%s: the %s of %.*s, \"%.*s\", must be %s and at most 1000000", name,
                  what, (int)on, a, (int)vn, eq + 1,
                  whole ? "a whole number from 0" : "a number above 0");
    for (size_t i = 0; i < n_seen; i++)
      if (strlen(seen[i]) == on && !memcmp(seen[i], a, on))
        return fail(err, errlen, "%s names %.*s twice", name, (int)on, a);
    if (n_seen == sizeof seen / sizeof seen[0])
      return fail(err, errlen, "%s names more than 64 %s", name,
                  name[0] == 'a' ? "accounts" : "owners");
    snprintf(seen[n_seen++], sizeof seen[0], "%.*s", (int)on, a);
    if (owner && strlen(owner) == on && !memcmp(owner, a, on)) {
      *v = x;
      found = 1;
    }
    s = end ? end + 1 : s + len;
  }
  return found;
}

/* The value a per-owner setting gives owner: its own, else "*"'s; 0 when neither is named. */
static int owner_value(const char *name, int whole, const char *s, const char *owner, double *v) {
  char err[8];
  /* checked when set: neither call fails */
  return owner_values(name, whole, s, owner, v, err, sizeof err) > 0 ||
         owner_values(name, whole, s, "*", v, err, sizeof err) > 0;
}

double colod_config_weight(const colod_config_t *cfg, const char *owner) {
  double w = 1;
  owner_value("fair_share_weights", 0, cfg->fair_share_weights, owner, &w);
  return w;
}

uint32_t colod_config_owner_max_devices(const colod_config_t *cfg, const char *owner) {
  double n;
  return owner_value("owner_max_devices", 1, cfg->owner_max_devices, owner, &n) ? (uint32_t)n
                                                                                : UINT32_MAX;
}

uint32_t colod_config_account_max_devices(const colod_config_t *cfg, const char *account) {
  double n;
  return owner_value("account_max_devices", 1, cfg->account_max_devices, account, &n) ? (uint32_t)n
                                                                                      : UINT32_MAX;
}

uint32_t colod_config_account_max_jobs(const colod_config_t *cfg, const char *account) {
  double n;
  return owner_value("account_max_jobs", 1, cfg->account_max_jobs, account, &n) ? (uint32_t)n
                                                                                : UINT32_MAX;
}

uint32_t colod_config_owner_max_jobs(const colod_config_t *cfg, const char *owner) {
  double n;
  return owner_value("owner_max_jobs", 1, cfg->owner_max_jobs, owner, &n) ? (uint32_t)n
                                                                          : UINT32_MAX;
}

static int apply(const centry_t *e, colod_config_t *cfg, const char *value, char *err,
                 size_t errlen) {
  char *field = (char *)cfg + e->offset;
  char a[32], b[32];
  switch (e->type) {
  case T_STRING:
    if (strlen(value) < e->min)
      return fail(err, errlen, "%s must not be empty", e->name);
    if (strlen(value) >= e->size)
      return fail(err, errlen, "%s is longer than %zu characters", e->name, e->size - 1);
    if (!strcmp(e->name, "rendezvous") && strcmp(value, "colod") && strcmp(value, "rank0"))
      return fail(err, errlen, "rendezvous \"%s\" must be colod or rank0", value);
    if (!strcmp(e->name, "fair_share_by") && strcmp(value, "owner") && strcmp(value, "account"))
      return fail(err, errlen, "fair_share_by \"%s\" must be owner or account", value);
    if ((!strcmp(e->name, "fair_share_weights") || strstr(e->name, "_max_")) &&
        owner_values(e->name, e->name[0] != 'f', value, NULL, NULL, err, errlen) < 0)
      return COLO_EINVAL;
    if (!strcmp(e->name, "notify_url") && value[0] && strncmp(value, "http://", 7) != 0 &&
        strncmp(value, "https://", 8) != 0)
      return fail(err, errlen,
                  "notify_url \"%s\" must start with http:// or https://, or be "
                  "empty for none",
                  value);
    if (!strcmp(e->name, "notify_allow") && allow_list_check(value, err, errlen) < 0)
      return COLO_EINVAL;
    if (!strcmp(e->name, "metrics_listen") && value[0] && !host_port(value))
      return fail(err, errlen,
                  "metrics_listen \"%s\" must be HOST:PORT (PORT 0 to 65535; [ADDR]:PORT for "
                  "IPv6), or empty for none",
                  value);
    memcpy(field, value, strlen(value) + 1);
    return 0;
  case T_LOGLEVEL: {
    int lvl = colo_log_level_parse(value);
    if (lvl < 0)
      return fail(err, errlen, "log_level \"%s\" must be error, warn, info or debug", value);
    *(int *)field = lvl;
    return 0;
  }
  case T_DURATION: {
    uint64_t ms;
    if (parse_duration(value, &ms) < 0)
      return fail(err, errlen, "%s \"%s\" is not a duration (like 10s, 500ms, 2m)", e->name, value);
    if (ms < e->min || ms > e->max) {
      fmt_duration(e->min, a, sizeof a);
      fmt_duration(e->max, b, sizeof b);
      return fail(err, errlen, "%s=%s must be between %s and %s", e->name, value, a, b);
    }
    if (e->size == sizeof(uint64_t))
      *(uint64_t *)field = ms;
    else
      *(uint32_t *)field = (uint32_t)ms;
    return 0;
  }
  case T_BOOL:
    if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "1"))
      *(uint32_t *)field = 1;
    else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "0"))
      *(uint32_t *)field = 0;
    else
      return fail(err, errlen, "%s \"%s\" must be true or false", e->name, value);
    return 0;
  case T_UINT: {
    char *end;
    errno = 0;
    unsigned long long v = *value == '-' ? 0 : strtoull(value, &end, 10);
    if (*value == '-' || errno || !*value || *end)
      return fail(err, errlen, "%s \"%s\" is not a non-negative integer", e->name, value);
    if (v < e->min || v > e->max)
      return fail(err, errlen, "%s=%llu must be between %llu and %llu", e->name, v,
                  (unsigned long long)e->min, (unsigned long long)e->max);
    *(uint32_t *)field = (uint32_t)v;
    return 0;
  }
  }
  return COLO_EINTERNAL;
}

void colod_config_defaults(colod_config_t *cfg) {
  char err[256];
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < N_TABLE; i++)
    if (apply(&TABLE[i], cfg, TABLE[i].def, err, sizeof err) < 0)
      abort(); /* a bad default is a programming error caught by every test */
}

int colod_config_set(colod_config_t *cfg, const char *name, const char *value, char *err,
                     size_t errlen) {
  char namebuf[64];
  if (!value) {
    const char *eq = strchr(name, '=');
    if (!eq || (size_t)(eq - name) >= sizeof namebuf)
      return fail(err, errlen, "setting \"%s\" must look like name=value", name);
    memcpy(namebuf, name, (size_t)(eq - name));
    namebuf[eq - name] = '\0';
    name = namebuf;
    value = eq + 1;
  }
  const centry_t *e = find(name);
  if (!e)
    return fail(err, errlen, "unknown setting \"%s\"", name);
  colod_config_t tmp = *cfg;
  int rc = apply(e, &tmp, value, err, errlen);
  if (rc == 0)
    *cfg = tmp;
  return rc;
}

int colod_config_load(colod_config_t *cfg, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fail(err, errlen, "%s: %s", path, strerror(errno));
    return COLO_EIO;
  }
  yaml_parser_t parser;
  yaml_document_t doc;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_file(&parser, f);
  if (!yaml_parser_load(&parser, &doc)) {
    fail(err, errlen, "%s:%zu: %s", path, parser.problem_mark.line + 1,
         parser.problem ? parser.problem : "invalid YAML");
    yaml_parser_delete(&parser);
    fclose(f);
    return COLO_EPARSE;
  }
  yaml_parser_delete(&parser);
  fclose(f);
  colod_config_t tmp = *cfg;
  int rc = 0;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root) {
    /* an empty file is a valid, empty configuration */
  } else if (root->type != YAML_MAPPING_NODE) {
    rc = fail(err, errlen, "%s:%zu: expected a mapping of settings", path,
              root->start_mark.line + 1);
  } else {
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
         rc == 0 && p < root->data.mapping.pairs.top; p++) {
      yaml_node_t *k = yaml_document_get_node(&doc, p->key);
      yaml_node_t *v = yaml_document_get_node(&doc, p->value);
      if (!k || !v || k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE) {
        rc = fail(err, errlen, "%s:%zu: settings must be name: value", path,
                  (k ? k->start_mark.line : 0) + 1);
        break;
      }
      char why[512];
      const char *name = (const char *)k->data.scalar.value;
      const centry_t *e = find(name);
      if (!e)
        rc =
            fail(err, errlen, "%s:%zu: unknown setting \"%s\"", path, k->start_mark.line + 1, name);
      else if (apply(e, &tmp, (const char *)v->data.scalar.value, why, sizeof why) < 0)
        rc = fail(err, errlen, "%s:%zu: %s", path, v->start_mark.line + 1, why);
    }
  }
  yaml_document_delete(&doc);
  if (rc == 0)
    *cfg = tmp;
  return rc;
}

static void value_str(const centry_t *e, const colod_config_t *cfg, char *buf, size_t n) {
  const char *field = (const char *)cfg + e->offset;
  switch (e->type) {
  case T_STRING:
    snprintf(buf, n, "%s", field);
    break;
  case T_LOGLEVEL:
    snprintf(buf, n, "%s", colo_log_level_name((colo_log_level_t) * (const int *)field));
    break;
  case T_DURATION:
    fmt_duration(e->size == sizeof(uint64_t) ? *(const uint64_t *)field : *(const uint32_t *)field,
                 buf, n);
    break;
  case T_UINT:
    snprintf(buf, n, "%u", *(const uint32_t *)field);
    break;
  case T_BOOL:
    snprintf(buf, n, "%s", *(const uint32_t *)field ? "true" : "false");
    break;
  }
}

void colod_config_print(const colod_config_t *cfg, FILE *out) {
  for (size_t i = 0; i < N_TABLE; i++) {
    char v[1100];
    value_str(&TABLE[i], cfg, v, sizeof v);
    fprintf(out, "# %s (default %s%s)\n%s: \"%s\"\n", TABLE[i].help,
            TABLE[i].def[0] ? TABLE[i].def : "empty",
            TABLE[i].reloadable ? "; SIGHUP reloads it" : "; needs a restart", TABLE[i].name, v);
  }
}

int colod_config_reload(colod_config_t *cur, const colod_config_t *next) {
  int applied = 0;
  for (size_t i = 0; i < N_TABLE; i++) {
    const centry_t *e = &TABLE[i];
    char *a = (char *)cur + e->offset;
    const char *b = (const char *)next + e->offset;
    size_t sz = e->size; /* every field's own size, from F() */
    if (memcmp(a, b, sz) == 0)
      continue;
    char v[1100];
    value_str(e, next, v, sizeof v);
    if (e->reloadable) {
      memcpy(a, b, sz);
      applied++;
      colo_log(COLO_LOG_INFO, "config", "reloaded %s = %s", e->name, v);
    } else {
      colo_log(COLO_LOG_WARN, "config", "%s changed to %s; restart colod to apply it", e->name, v);
    }
  }
  return applied;
}
