/* colod configuration: defaults, the YAML file, overrides, exact error messages, reload rules. */
#include <stdlib.h>

#include "common/error.h"
#include "common/log.h"
#include "daemon/config.h"
#include "test.h"

static const char *write_file(const char *text) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/colo-test-config-XXXXXX");
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  ASSERT_EQ_INT(write(fd, text, strlen(text)), (long long)strlen(text));
  close(fd);
  return path;
}

TEST(defaults) {
  colod_config_t c;
  colod_config_defaults(&c);
  ASSERT_EQ_STR(c.listen, "127.0.0.1:7070");
  ASSERT_EQ_STR(c.state_dir, "/var/lib/colo");
  ASSERT_EQ_INT(c.host_timeout_ms, 10000);
  ASSERT_EQ_INT(c.heartbeat_ms, 1000);
  ASSERT_EQ_INT(c.log_level, COLO_LOG_INFO);
  ASSERT_EQ_INT(c.max_message_kib, 4096);
}

TEST(file_and_units) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[512];
  const char *p = write_file("# a comment\nlisten: 0.0.0.0:9000\nhost_timeout: 30s\n"
                             "heartbeat_interval: 500ms\ndrain_timeout: 2m\nlog_level: debug\n");
  int rc = colod_config_load(&c, p, err, sizeof err);
  unlink(p);
  if (rc)
    FAIL_AT("%s", err);
  ASSERT_EQ_STR(c.listen, "0.0.0.0:9000");
  ASSERT_EQ_INT(c.host_timeout_ms, 30000);
  ASSERT_EQ_INT(c.heartbeat_ms, 500);
  ASSERT_EQ_INT(c.drain_timeout_ms, 120000);
  ASSERT_EQ_INT(c.log_level, COLO_LOG_DEBUG);
  ASSERT_EQ_STR(c.state_dir, "/var/lib/colo"); /* untouched */
}

TEST(empty_file_is_valid) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  const char *p = write_file("");
  ASSERT_EQ_INT(colod_config_load(&c, p, err, sizeof err), 0);
  unlink(p);
  ASSERT_EQ_INT(c.host_timeout_ms, 10000);
}

static const struct {
  const char *file;
  const char *msg; /* after "PATH:" */
} FILE_ERRORS[] = {
    {"listn: 1.2.3.4:5\n", "1: unknown setting \"listn\""},
    {"listen: a:1\nhost_timeout: soon\n",
     "2: host_timeout \"soon\" is not a duration (like 10s, 500ms, 2m)"},
    {"host_timeout: 5ms\n", "1: host_timeout=5ms must be between 1s and 10m"},
    {"heartbeat_interval: 2m\n", "1: heartbeat_interval=2m must be between 100ms and 1m"},
    {"max_message_kib: -3\n", "1: max_message_kib \"-3\" is not a non-negative integer"},
    {"max_message_kib: 1\n", "1: max_message_kib=1 must be between 4 and 65536"},
    {"log_level: loud\n", "1: log_level \"loud\" must be error, warn, info or debug"},
    {"listen: \"\"\n", "1: listen must not be empty"},
    {"- listen\n", "1: expected a mapping of settings"},
    {"listen: [a, b]\n", "1: settings must be name: value"},
    {"listen: 'unclosed\n", "2: found unexpected end of stream"},
};

TEST(file_errors_are_exact_and_atomic) {
  for (size_t i = 0; i < sizeof FILE_ERRORS / sizeof FILE_ERRORS[0]; i++) {
    colod_config_t c, before;
    colod_config_defaults(&c);
    before = c;
    char err[512], want[600];
    const char *p = write_file(FILE_ERRORS[i].file);
    int rc = colod_config_load(&c, p, err, sizeof err);
    snprintf(want, sizeof want, "%s:%s", p, FILE_ERRORS[i].msg);
    unlink(p);
    if (rc >= 0)
      FAIL_AT("case %zu loaded but should not", i);
    ASSERT_EQ_STR(err, want);
    /* nothing of a bad file is applied, not even its good lines */
    ASSERT(memcmp(&c, &before, sizeof c) == 0);
  }
}

TEST(missing_file) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_INT(colod_config_load(&c, "/nonexistent/colod.yaml", err, sizeof err), COLO_EIO);
  ASSERT_EQ_STR(err, "/nonexistent/colod.yaml: No such file or directory");
}

TEST(overrides) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_INT(colod_config_set(&c, "state_dir=/tmp/x", NULL, err, sizeof err), 0);
  ASSERT_EQ_STR(c.state_dir, "/tmp/x");
  ASSERT_EQ_INT(colod_config_set(&c, "host_timeout", "20s", err, sizeof err), 0);
  ASSERT_EQ_INT(c.host_timeout_ms, 20000);
  ASSERT_EQ_INT(colod_config_set(&c, "nope=1", NULL, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "unknown setting \"nope\"");
  ASSERT_EQ_INT(colod_config_set(&c, "novalue", NULL, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "setting \"novalue\" must look like name=value");
  ASSERT_EQ_INT(colod_config_set(&c, "host_timeout=0", NULL, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "host_timeout=0 must be between 1s and 10m");
  ASSERT_EQ_INT(c.host_timeout_ms, 20000);
}

TEST(metrics_listen_is_host_port_or_empty) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_STR(c.metrics_listen, ""); /* off by default */
  const char *good[] = {"127.0.0.1:9470", "0.0.0.0:0", "[::1]:9470", "localhost:65535", ""};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    ASSERT_EQ_INT(colod_config_set(&c, "metrics_listen", good[i], err, sizeof err), 0);
    ASSERT_EQ_STR(c.metrics_listen, good[i]);
  }
  const char *bad[] = {"9470",           "127.0.0.1:", ":9470",     "127.0.0.1:65536",
                       "127.0.0.1:94x0", "::1:9470",   "[::1]9470", "[]:1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ASSERT_EQ_INT(colod_config_set(&c, "metrics_listen", bad[i], err, sizeof err), COLO_EINVAL);
    ASSERT_EQ_STR(c.metrics_listen, ""); /* untouched */
  }
  ASSERT_EQ_INT(colod_config_set(&c, "metrics_listen=9470", NULL, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "metrics_listen \"9470\" must be HOST:PORT (PORT 0 to 65535; [ADDR]:PORT for "
                     "IPv6), or empty for none");
}

TEST(notify_url_is_http_or_empty) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_STR(c.notify_url, ""); /* off by default */
  ASSERT_EQ_INT(colod_config_set(&c, "notify_url", "https://hooks.example/T0/B0", err, sizeof err),
                0);
  ASSERT_EQ_STR(c.notify_url, "https://hooks.example/T0/B0");
  ASSERT_EQ_INT(colod_config_set(&c, "notify_url", "file:///etc/passwd", err, sizeof err),
                COLO_EINVAL);
  ASSERT_EQ_STR(err, "notify_url \"file:///etc/passwd\" must start with http:// or https://, or "
                     "be empty for none");
  ASSERT_EQ_STR(c.notify_url, "https://hooks.example/T0/B0"); /* untouched */
  ASSERT_EQ_INT(colod_config_set(&c, "notify_url", "", err, sizeof err), 0);
}

TEST(notify_allow_lists_url_prefixes) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_STR(c.notify_allow, ""); /* no job may set notify.url by default */
  ASSERT_EQ_INT(colod_config_set(&c, "notify_allow",
                                 "https://hooks.slack.com/services/,http://10.0.0.5:8080", err,
                                 sizeof err),
                0);
  ASSERT_EQ_STR(c.notify_allow, "https://hooks.slack.com/services/,http://10.0.0.5:8080");
  const struct {
    const char *value, *msg;
  } bad[] = {
      {"https://a.example/,,https://b.example/", "notify_allow: entry empty (two commas?)"},
      {"https://a.example/,", "notify_allow ends with a comma"},
      {"https://a.example/,gopher://b.example/",
       "notify_allow entry \"gopher://b.example/\" must start with http:// or https://"},
      {"https://", "notify_allow entry \"https://\" names no host"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ASSERT_EQ_INT(colod_config_set(&c, "notify_allow", bad[i].value, err, sizeof err), COLO_EINVAL);
    ASSERT_EQ_STR(err, bad[i].msg);
  }
  ASSERT_EQ_STR(c.notify_allow, "https://hooks.slack.com/services/,http://10.0.0.5:8080");
}

TEST(fair_share_half_life_takes_days) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_INT(c.fair_share_half_life_ms, 7u * 86400000u); /* Slurm's PriorityDecayHalfLife */
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_half_life=36h", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(c.fair_share_half_life_ms, 36u * 3600000u);
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_half_life=30d", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(c.fair_share_half_life_ms, 30u * 86400000u);
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_half_life=0", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(c.fair_share_half_life_ms, 0); /* off: oldest first */
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_half_life=31d", NULL, err, sizeof err),
                COLO_EINVAL);
  ASSERT_EQ_STR(err, "fair_share_half_life=31d must be between 0ms and 30d");
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_half_life=1w", NULL, err, sizeof err),
                COLO_EINVAL);
  ASSERT_EQ_STR(err, "fair_share_half_life \"1w\" is not a duration (like 10s, 500ms, 2m)");
  ASSERT_EQ_INT(c.fair_share_half_life_ms, 0); /* untouched */
}

TEST(account_max_devices) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_INT(colod_config_account_max_devices(&c, "nlp"), UINT32_MAX); /* no limit */
  ASSERT_EQ_INT(colod_config_set(&c, "account_max_devices=nlp=32, *=8", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(colod_config_account_max_devices(&c, "nlp"), 32);
  ASSERT_EQ_INT(colod_config_account_max_devices(&c, "vision"), 8);
  ASSERT_EQ_INT(colod_config_account_max_devices(&c, ""), 8); /* jobs without an account */
  ASSERT_EQ_INT(colod_config_owner_max_devices(&c, "nlp"), UINT32_MAX); /* owners apart */
  ASSERT_EQ_INT(colod_config_set(&c, "account_max_devices=nlp", NULL, err, sizeof err),
                COLO_EINVAL);
  ASSERT_EQ_STR(err, "account_max_devices entry \"nlp\" must be ACCOUNT=DEVICES");
  ASSERT_EQ_INT(colod_config_set(&c, "account_max_devices=nlp=1.5", NULL, err, sizeof err),
                COLO_EINVAL);
  ASSERT_EQ_STR(err, "account_max_devices: the limit of nlp, \"1.5\", must be a whole number "
                     "from 0 and at most 1000000");
  ASSERT_EQ_INT(colod_config_account_max_devices(&c, "nlp"), 32); /* untouched */
  /* account_max_jobs: the same form, its own values */
  ASSERT_EQ_INT(colod_config_account_max_jobs(&c, "nlp"), UINT32_MAX);
  ASSERT_EQ_INT(colod_config_set(&c, "account_max_jobs=nlp=500,*=100", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(colod_config_account_max_jobs(&c, "nlp"), 500);
  ASSERT_EQ_INT(colod_config_account_max_jobs(&c, ""), 100);
  ASSERT_EQ_INT(colod_config_account_max_devices(&c, "nlp"), 32);
  ASSERT_EQ_INT(colod_config_set(&c, "account_max_jobs=nlp", NULL, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "account_max_jobs entry \"nlp\" must be ACCOUNT=JOBS");
}

/* a duration past 49 days (2^32 ms) is kept whole: job_retention's field is 64-bit */
TEST(job_retention_takes_years) {
  colod_config_t c, next;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_INT(c.job_retention_ms, 0); /* kept for ever */
  ASSERT_EQ_INT(colod_config_set(&c, "job_retention=400d", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(c.job_retention_ms, 400ull * 86400000ull);
  ASSERT_EQ_INT(colod_config_set(&c, "job_retention=3651d", NULL, err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "job_retention=3651d must be between 0ms and 3650d");
  ASSERT_EQ_INT(c.job_retention_ms, 400ull * 86400000ull);
  next = c;
  ASSERT_EQ_INT(colod_config_set(&next, "job_retention=90d", NULL, err, sizeof err), 0);
  colo_log_set_level(COLO_LOG_ERROR);
  ASSERT_EQ_INT(colod_config_reload(&c, &next), 1); /* SIGHUP reloads it, all 64 bits */
  ASSERT_EQ_INT(c.job_retention_ms, 90ull * 86400000ull);
  char path[] = "/tmp/colo-test-retention-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  colod_config_print(&c, f);
  fclose(f);
  colod_config_defaults(&next);
  int rc = colod_config_load(&next, path, err, sizeof err);
  unlink(path);
  if (rc)
    FAIL_AT("%s", err);
  ASSERT_EQ_INT(next.job_retention_ms, 90ull * 86400000ull);
}

TEST(fair_share_weights) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT(colod_config_weight(&c, "alice") == 1); /* none set: everyone weighs 1 */
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_weights", " alice = 2 ,bob=0.5,", err, sizeof err),
                0);
  ASSERT(colod_config_weight(&c, "alice") == 2);
  ASSERT(colod_config_weight(&c, "bob") == 0.5);
  ASSERT(colod_config_weight(&c, "al") == 1); /* whole names only */
  ASSERT(colod_config_weight(&c, "") == 1);
  static const struct {
    const char *value, *msg;
  } BAD[] = {
      {"alice", "fair_share_weights entry \"alice\" must be OWNER=WEIGHT"},
      {"alice=2,,bob=1", "fair_share_weights entry \"\" must be OWNER=WEIGHT"},
      {"=2", "fair_share_weights entry \"=2\" must be OWNER=WEIGHT"},
      {"alice=0", "fair_share_weights: the weight of alice, \"0\", must be a number above 0 and "
                  "at most 1000000"},
      {"alice=-1", "fair_share_weights: the weight of alice, \"-1\", must be a number above 0 "
                   "and at most 1000000"},
      {"alice=2x", "fair_share_weights: the weight of alice, \"2x\", must be a number above 0 "
                   "and at most 1000000"},
      {"alice=nan", "fair_share_weights: the weight of alice, \"nan\", must be a number above 0 "
                    "and at most 1000000"},
      {"alice=1e7", "fair_share_weights: the weight of alice, \"1e7\", must be a number above 0 "
                    "and at most 1000000"},
      {"alice=1,alice=2", "fair_share_weights names alice twice"},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    ASSERT_EQ_INT(colod_config_set(&c, "fair_share_weights", BAD[i].value, err, sizeof err),
                  COLO_EINVAL);
    ASSERT_EQ_STR(err, BAD[i].msg);
    ASSERT(colod_config_weight(&c, "alice") == 2); /* untouched */
  }
}

TEST(owner_max_devices) {
  colod_config_t c;
  colod_config_defaults(&c);
  char err[256];
  ASSERT(colod_config_owner_max_devices(&c, "alice") == UINT32_MAX); /* none set: no limit */
  ASSERT_EQ_INT(colod_config_set(&c, "owner_max_devices", "alice=8, bob = 0,*=16", err, sizeof err),
                0);
  ASSERT_EQ_INT(colod_config_owner_max_devices(&c, "alice"), 8);
  ASSERT_EQ_INT(colod_config_owner_max_devices(&c, "bob"), 0);
  ASSERT_EQ_INT(colod_config_owner_max_devices(&c, "carol"), 16); /* "*": every other owner */
  ASSERT_EQ_INT(colod_config_owner_max_devices(&c, ""), 16);
  ASSERT_EQ_INT(colod_config_set(&c, "owner_max_devices", "alice=8", err, sizeof err), 0);
  ASSERT(colod_config_owner_max_devices(&c, "carol") == UINT32_MAX); /* no "*": no limit */
  static const struct {
    const char *value, *msg;
  } BAD[] = {
      {"alice", "owner_max_devices entry \"alice\" must be OWNER=DEVICES"},
      {"alice=-1", "owner_max_devices: the limit of alice, \"-1\", must be a whole number from 0 "
                   "and at most 1000000"},
      {"alice=2.5", "owner_max_devices: the limit of alice, \"2.5\", must be a whole number from "
                    "0 and at most 1000000"},
      {"*=1000001", "owner_max_devices: the limit of *, \"1000001\", must be a whole number from 0 "
                    "and at most 1000000"},
      {"*=99999999999999999999", "owner_max_devices: the limit of *, \"99999999999999999999\", "
                                 "must be a whole number from 0 and at most 1000000"},
      {"*=1,*=2", "owner_max_devices names * twice"},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    ASSERT_EQ_INT(colod_config_set(&c, "owner_max_devices", BAD[i].value, err, sizeof err),
                  COLO_EINVAL);
    ASSERT_EQ_STR(err, BAD[i].msg);
    ASSERT_EQ_INT(colod_config_owner_max_devices(&c, "alice"), 8); /* untouched */
  }
  /* owner_max_jobs reads the same way */
  ASSERT(colod_config_owner_max_jobs(&c, "alice") == UINT32_MAX);
  ASSERT_EQ_INT(colod_config_set(&c, "owner_max_jobs", "*=100,bob=5", err, sizeof err), 0);
  ASSERT_EQ_INT(colod_config_owner_max_jobs(&c, "alice"), 100);
  ASSERT_EQ_INT(colod_config_owner_max_jobs(&c, "bob"), 5);
  ASSERT_EQ_INT(colod_config_set(&c, "owner_max_jobs", "bob", err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "owner_max_jobs entry \"bob\" must be OWNER=JOBS");
  /* whose hours fair share weighs */
  ASSERT_EQ_STR(c.fair_share_by, "owner");
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_by", "account", err, sizeof err), 0);
  ASSERT_EQ_STR(c.fair_share_by, "account");
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_by", "team", err, sizeof err), COLO_EINVAL);
  ASSERT_EQ_STR(err, "fair_share_by \"team\" must be owner or account");
  /* a "*" weight is every other owner's */
  ASSERT_EQ_INT(colod_config_set(&c, "fair_share_weights", "alice=2,*=0.25", err, sizeof err), 0);
  ASSERT(colod_config_weight(&c, "alice") == 2);
  ASSERT(colod_config_weight(&c, "carol") == 0.25);
}

TEST(print_config_is_a_valid_file) {
  colod_config_t c, back;
  colod_config_defaults(&c);
  char err[256];
  ASSERT_EQ_INT(colod_config_set(&c, "host_timeout=45s", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(colod_config_set(&c, "listen=[::1]:7000", NULL, err, sizeof err), 0);
  char path[] = "/tmp/colo-test-print-XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  colod_config_print(&c, f);
  fclose(f);
  colod_config_defaults(&back);
  int rc = colod_config_load(&back, path, err, sizeof err);
  unlink(path);
  if (rc)
    FAIL_AT("%s", err);
  ASSERT(memcmp(&c, &back, sizeof c) == 0);
}

TEST(reload_applies_only_reloadable) {
  colod_config_t cur, next;
  colod_config_defaults(&cur);
  next = cur;
  char err[256];
  ASSERT_EQ_INT(colod_config_set(&next, "host_timeout=3s", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(colod_config_set(&next, "log_level=debug", NULL, err, sizeof err), 0);
  ASSERT_EQ_INT(colod_config_set(&next, "listen=127.0.0.1:9999", NULL, err, sizeof err), 0);
  colo_log_set_level(COLO_LOG_ERROR); /* keep the reload's log lines out of the test output */
  ASSERT_EQ_INT(colod_config_reload(&cur, &next), 2);
  ASSERT_EQ_INT(cur.host_timeout_ms, 3000);
  ASSERT_EQ_INT(cur.log_level, COLO_LOG_DEBUG);
  ASSERT_EQ_STR(cur.listen, "127.0.0.1:7070"); /* needs a restart */
}

TEST_MAIN()
