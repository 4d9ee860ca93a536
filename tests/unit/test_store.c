/* colo_store: migrations (from empty and from schema 1), the job state machine (every allowed
 * edge, every forbidden one), attempts and ranks, events, hosts, checkpoints, idempotent
 * submits, and crash safety of committed writes. */
#include <sqlite3.h>
#include <stdint.h>

#include "common/error.h"
#include "storage/store.h"
#include "test.h"

static char dir[256];

static const char *db_path(void) {
  static char p[300];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/colo-test-store-XXXXXX");
    if (!mkdtemp(dir))
      FAIL_AT("mkdtemp failed");
  }
  snprintf(p, sizeof p, "%s/colod.db", dir);
  return p;
}

static colo_store_t *open_fresh(void) {
  colo_store_t *st;
  char err[512];
  int rc = colo_store_open(db_path(), &st, err, sizeof err);
  if (rc != 0)
    FAIL_AT("open: %s", err);
  return st;
}

static uint64_t submit_as(colo_store_t *st, const char *name, const char *owner) {
  colo_job_t j;
  const uint8_t spec[] = {0x0a, 0x03, 'a', 'b', 'c'};
  ASSERT_EQ_INT(colo_store_job_insert(st, name, spec, sizeof spec, 3, NULL,
                                      &(colo_job_room_t){owner, UINT32_MAX, "", UINT32_MAX}, 1000,
                                      &j),
                0);
  uint64_t id = j.id;
  colo_job_clear(&j);
  return id;
}

static uint64_t submit(colo_store_t *st, const char *name) {
  return submit_as(st, name, NULL);
}

static int job_state(colo_store_t *st, uint64_t id) {
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_get(st, id, &j), 0);
  int s = j.state;
  colo_job_clear(&j);
  return s;
}

static int count_events(colo_store_t *st, uint64_t id);

static int count_cb(const colo_job_event_t *ev, void *data) {
  (void)ev;
  (*(int *)data)++;
  return 0;
}

static int count_events(colo_store_t *st, uint64_t id) {
  int n = 0;
  ASSERT_EQ_INT(colo_store_job_events(st, id, 0, count_cb, &n), 0);
  return n;
}

static void run_sql(const char *sql) {
  sqlite3 *db;
  ASSERT_EQ_INT(sqlite3_open(db_path(), &db), SQLITE_OK);
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
    FAIL_AT("sql failed: %s", msg);
  sqlite3_close(db);
}

/* a statement SQLite must refuse with a CHECK constraint */
static void run_sql_expect_fail(const char *sql) {
  sqlite3 *db;
  ASSERT_EQ_INT(sqlite3_open(db_path(), &db), SQLITE_OK);
  ASSERT_EQ_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_CONSTRAINT);
  sqlite3_close(db);
}

static long long sql_int(const char *sql) {
  sqlite3 *db;
  sqlite3_stmt *s;
  ASSERT_EQ_INT(sqlite3_open(db_path(), &db), SQLITE_OK);
  ASSERT_EQ_INT(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  ASSERT_EQ_INT(sqlite3_step(s), SQLITE_ROW);
  long long v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

/* an attempt's stop mark, or the error reading it */
static int stop_of(colo_store_t *st, uint64_t job, uint32_t attempt) {
  int stop = -1;
  int64_t started;
  uint32_t seq;
  int rc = colo_store_attempt_get(st, job, attempt, &stop, &started, &seq);
  return rc < 0 ? rc : stop;
}

TEST(migrate_from_empty) {
  colo_store_t *st = open_fresh();
  ASSERT_EQ_INT(colo_store_schema_version(st), COLO_STORE_SCHEMA_VERSION);
  ASSERT_EQ_INT(colo_store_integrity_check(st), 0);
  colo_store_close(st);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN "
                        "('hosts','jobs','job_events','job_attempts','ranks','checkpoints')"),
                6);
  /* WAL and foreign keys are on */
  ASSERT_EQ_INT(sql_int("SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
  /* reopening an up-to-date database changes nothing */
  st = open_fresh();
  ASSERT_EQ_INT(colo_store_schema_version(st), COLO_STORE_SCHEMA_VERSION);
  colo_store_close(st);
}

TEST(migrate_from_v1_keeps_data) {
  colo_store_t *st;
  char err[512];
  ASSERT_EQ_INT(colo_store_open_at(db_path(), 1, &st, err, sizeof err), 0);
  ASSERT_EQ_INT(colo_store_schema_version(st), 1);
  colo_store_close(st);
  /* rows as a version-1 colod wrote them */
  run_sql("INSERT INTO jobs (name, state, spec, max_restarts, created_ms, updated_ms, message) "
          "VALUES ('old-job', 5, x'0a0161', 2, 10, 20, 'rank 3 exited 1');"
          "INSERT INTO job_events (job_id, seq, state, message, time_ms) VALUES "
          "(1, 1, 1, 'submitted', 10), (1, 2, 5, 'rank 3 exited 1', 20);"
          "INSERT INTO hosts (name, address, state, registered_ms, last_seen_ms) "
          "VALUES ('node-a', '10.0.0.1:7071', 1, 5, 6);");
  st = open_fresh();
  ASSERT_EQ_INT(colo_store_schema_version(st), COLO_STORE_SCHEMA_VERSION);
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_get(st, 1, &j), 0);
  ASSERT_EQ_STR(j.name, "old-job");
  ASSERT_EQ_INT(j.state, COLO_JOB_FAILED);
  ASSERT_EQ_INT(j.max_restarts, 2);
  ASSERT_EQ_INT(j.resume_step, 0);       /* new column, default */
  ASSERT_EQ_STR(j.client_token, "");     /* new column, NULL */
  ASSERT(j.progress == NULL);            /* v3 column, NULL */
  ASSERT_EQ_STR(j.owner, "");            /* v7 column, default */
  ASSERT_EQ_INT(j.hold, COLO_HOLD_NONE); /* v10 columns, defaults */
  ASSERT_EQ_STR(j.hold_reason, "");
  ASSERT_EQ_INT(j.spec_len, 3);
  colo_job_clear(&j);
  ASSERT_EQ_INT(count_events(st, 1), 2);
  /* the migrated job can go on through the v2 state machine */
  ASSERT_EQ_INT(colo_store_job_transition(st, 1, COLO_JOB_PENDING, "resumed", 200, 30, &j), 0);
  ASSERT_EQ_INT(j.resume_step, 200);
  colo_job_clear(&j);
  colo_rank_place_t r = {0, 1, 0, 0, 0, 0};
  ASSERT_EQ_INT(colo_store_attempt_begin(st, 1, &r, 1, 200, 40, NULL), 0);
  /* and keep a progress record (v3) */
  const uint8_t rec[] = {0x08, 0x2a};
  ASSERT_EQ_INT(colo_store_job_set_progress(st, 1, rec, sizeof rec), 0);
  ASSERT_EQ_INT(colo_store_job_get(st, 1, &j), 0);
  ASSERT_EQ_INT(j.progress_len, 2);
  ASSERT(j.progress && j.progress[1] == 0x2a);
  colo_job_clear(&j);
  /* and a training curve (v4) */
  colo_progress_sample_t smp = {.job_id = 1, .attempt = 1, .step = 7, .has_loss = 1, .loss = 2.5f};
  ASSERT_EQ_INT(colo_store_sample_add(st, &smp), 0);
  /* and an eviction mark on its attempt (v6) */
  ASSERT_EQ_INT(stop_of(st, 1, 1), 0);
  ASSERT_EQ_INT(colo_store_attempt_stop(st, 1, 1, COLO_STOP_MOVE), 0);
  ASSERT_EQ_INT(stop_of(st, 1, 1), COLO_STOP_MOVE);
  /* and end TIMED_OUT (v8), a state the old table's CHECK refused; the CHECK still refuses 8 */
  ASSERT_EQ_INT(colo_store_job_transition(st, 1, COLO_JOB_TIMED_OUT, "time limit", 0, 50, NULL), 0);
  ASSERT_EQ_INT(job_state(st, 1), COLO_JOB_TIMED_OUT);
  ASSERT_EQ_INT(colo_store_integrity_check(st), 0);
  colo_store_close(st);
  ASSERT(sql_int("SELECT count(*) FROM sqlite_master WHERE name = 'jobs' AND "
                 "sql LIKE '%CHECK (state BETWEEN 1 AND 7)%'") == 1);
  run_sql_expect_fail("UPDATE jobs SET state = 8 WHERE id = 1");
}

static int collect_samples(const colo_progress_sample_t *p, void *data) {
  colo_progress_sample_t *out = data;
  for (int i = 0; i < 8; i++)
    if (out[i].step == 0 && out[i].attempt == 0) {
      out[i] = *p;
      return 0;
    }
  return 1;
}

TEST(progress_samples_merge_and_order) {
  colo_store_t *st = open_fresh();
  submit(st, "curve");
  colo_progress_sample_t
      a = {.job_id = 1,
           .attempt = 2,
           .step = 10,
           .has_loss = 1,
           .loss = 3.0f,
           .lr = 1e-3f,
           .tokens_per_s = 500.0f,
           .time_ms = 5},
      b = {.job_id = 1, .attempt = 1, .step = 50, .has_loss = 1, .loss = 4.0f, .time_ms = 4},
      v = {.job_id = 1, .attempt = 2, .step = 10, .has_val = 1, .val_loss = 3.25f, .time_ms = 6};
  ASSERT_EQ_INT(colo_store_sample_add(st, &a), 0);
  ASSERT_EQ_INT(colo_store_sample_add(st, &b), 0);
  ASSERT_EQ_INT(colo_store_sample_add(st, &v), 0); /* an evaluation at the same step: merged */
  colo_progress_sample_t got[8] = {0};
  ASSERT_EQ_INT(colo_store_sample_list(st, 1, collect_samples, got), 0);
  ASSERT_EQ_INT(got[0].attempt, 1); /* by attempt, then step */
  ASSERT_EQ_INT(got[0].step, 50);
  ASSERT(got[0].has_loss && !got[0].has_val && got[0].loss == 4.0f);
  ASSERT_EQ_INT(got[1].attempt, 2);
  ASSERT(got[1].has_loss && got[1].loss == 3.0f && got[1].lr == 1e-3f);
  ASSERT(got[1].tokens_per_s == 500.0f);
  ASSERT(got[1].has_val && got[1].val_loss == 3.25f);
  ASSERT_EQ_INT(got[2].step, 0); /* nothing more */
  ASSERT_EQ_INT(got[2].attempt, 0);
  colo_store_close(st);
}

TEST(refuses_newer_schema) {
  colo_store_t *st = open_fresh();
  colo_store_close(st);
  run_sql("PRAGMA user_version = 99");
  char err[512];
  ASSERT_EQ_INT(colo_store_open(db_path(), &st, err, sizeof err), COLO_ESTATE);
  char want[96];
  snprintf(want, sizeof want, "schema version 99 is newer than this build supports (%d)",
           COLO_STORE_SCHEMA_VERSION);
  ASSERT(strstr(err, want) != NULL);
}

TEST(insert_get_list) {
  colo_store_t *st = open_fresh();
  for (int i = 0; i < 5; i++)
    submit(st, "job");
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_get(st, 3, &j), 0);
  ASSERT_EQ_INT(j.id, 3);
  ASSERT_EQ_INT(j.state, COLO_JOB_PENDING);
  ASSERT_EQ_INT(j.spec_len, 5);
  ASSERT(memcmp(j.spec,
                "\x0a\x03"
                "abc",
                5) == 0);
  ASSERT_EQ_INT(j.created_ms, 1000);
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_job_get(st, 99, &j), COLO_ENOENT);
  ASSERT_EQ_STR(colo_store_errmsg(st), "job 99 not found");
  ASSERT_EQ_INT(count_events(st, 3), 1);
  uint32_t counts[COLO_JOB_STATE_MAX + 1];
  ASSERT_EQ_INT(colo_store_job_counts(st, counts), 0);
  ASSERT_EQ_INT(counts[COLO_JOB_PENDING], 5);
  colo_store_close(st);
}

static int collect_ids(const colo_job_t *j, void *data) {
  uint64_t *ids = data;
  ids[++ids[0]] = j->id;
  return 0;
}

TEST(list_pages_and_filters) {
  colo_store_t *st = open_fresh();
  for (int i = 0; i < 6; i++)
    submit(st, "job");
  ASSERT_EQ_INT(colo_store_job_transition(st, 2, COLO_JOB_CANCELLED, "x", 0, 2000, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, 5, COLO_JOB_CANCELLED, "x", 0, 2000, NULL), 0);
  uint64_t ids[16] = {0};
  colo_job_filter_t all = {0};
  ASSERT_EQ_INT(colo_store_job_list(st, &all, 4, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 4);
  ASSERT_EQ_INT(ids[4], 4);
  memset(ids, 0, sizeof ids);
  colo_job_filter_t after4 = {.after_id = 4};
  ASSERT_EQ_INT(colo_store_job_list(st, &after4, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 2);
  ASSERT_EQ_INT(ids[1], 5);
  memset(ids, 0, sizeof ids);
  colo_job_filter_t cancelled = {.state_mask = 1u << COLO_JOB_CANCELLED};
  ASSERT_EQ_INT(colo_store_job_list(st, &cancelled, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 2);
  ASSERT_EQ_INT(ids[1], 2);
  ASSERT_EQ_INT(ids[2], 5);
  colo_store_close(st);
}

TEST(list_by_name_prefix_and_owner) {
  colo_store_t *st = open_fresh();
  submit_as(st, "gpt2.pretrain", "alice"); /* 1 */
  submit_as(st, "gpt2.finetune", "bob");   /* 2 */
  submit_as(st, "gpt2_other", "alice");    /* 3 */
  submit_as(st, "gpt2.eval", "alice");     /* 4 */
  submit_as(st, "GPT2.loud", "alice");     /* 5: names are case-sensitive */
  submit_as(st, "g%t2.like", "alice");     /* 6: no LIKE wildcards */
  uint64_t ids[16] = {0};
  colo_job_filter_t f = {.name_prefix = "gpt2."};
  ASSERT_EQ_INT(colo_store_job_list(st, &f, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 3);
  ASSERT_EQ_INT(ids[1], 1);
  ASSERT_EQ_INT(ids[2], 2);
  ASSERT_EQ_INT(ids[3], 4);
  memset(ids, 0, sizeof ids);
  f.owner = "alice";
  ASSERT_EQ_INT(colo_store_job_list(st, &f, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 2);
  ASSERT_EQ_INT(ids[1], 1);
  ASSERT_EQ_INT(ids[2], 4);
  memset(ids, 0, sizeof ids);
  colo_job_filter_t g = {.name_prefix = "g%t2"};
  ASSERT_EQ_INT(colo_store_job_list(st, &g, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 1); /* not gpt2.*: % is no wildcard */
  ASSERT_EQ_INT(ids[1], 6);
  /* a filter does not stay with the statement: the next list takes every job */
  memset(ids, 0, sizeof ids);
  colo_job_filter_t all = {0};
  ASSERT_EQ_INT(colo_store_job_list(st, &all, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 6);
  colo_store_close(st);
}

/* Drives a job into `state` through allowed edges. */
static uint64_t job_in_state(colo_store_t *st, int state) {
  uint64_t id = submit(st, "j");
  colo_rank_place_t r = {0, 1, 0, 0, 0, 0};
  switch (state) {
  case COLO_JOB_PENDING:
    break;
  case COLO_JOB_RUNNING:
    ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 2000, NULL), 0);
    break;
  case COLO_JOB_RESTARTING:
  case COLO_JOB_SUCCEEDED:
  case COLO_JOB_FAILED:
  case COLO_JOB_TIMED_OUT:
    ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 2000, NULL), 0);
    ASSERT_EQ_INT(colo_store_job_transition(st, id, state, "t", 0, 3000, NULL), 0);
    break;
  case COLO_JOB_CANCELLED:
    ASSERT_EQ_INT(colo_store_job_transition(st, id, state, "t", 0, 3000, NULL), 0);
    break;
  }
  ASSERT_EQ_INT(job_state(st, id), state);
  return id;
}

static void ensure_host(colo_store_t *st) {
  colo_host_t h;
  ASSERT_EQ_INT(colo_store_host_register(st, "h1", "127.0.0.1:1", NULL, 0, 0, 1, 1, &h), 0);
  colo_host_clear(&h);
}

/* A list of jobs that have not ended reads them by state; every mix of those states, with paging
 * and the other filters, gives what the list of all jobs filtered by hand gives. */
TEST(list_live_states_matches_the_full_list) {
  colo_store_t *st = open_fresh();
  int states[] = {COLO_JOB_SUCCEEDED,  COLO_JOB_PENDING,    COLO_JOB_RUNNING, COLO_JOB_CANCELLED,
                  COLO_JOB_RESTARTING, COLO_JOB_PENDING,    COLO_JOB_FAILED,  COLO_JOB_RUNNING,
                  COLO_JOB_TIMED_OUT,  COLO_JOB_RESTARTING, COLO_JOB_PENDING};
  size_t n = sizeof states / sizeof states[0];
  ensure_host(st);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ_INT(job_in_state(st, states[i]), i + 1);
  for (uint32_t mask = 1; mask < 8; mask++) {
    colo_job_filter_t f = {.state_mask = mask << COLO_JOB_PENDING};
    for (uint64_t after = 0; after <= n; after += 3) {
      f.after_id = after;
      uint64_t ids[16] = {0}, want[16] = {0};
      ASSERT_EQ_INT(colo_store_job_list(st, &f, 2, collect_ids, ids), 0);
      for (size_t i = after; i < n && want[0] < 2; i++)
        if (f.state_mask & (1u << states[i]))
          want[++want[0]] = i + 1;
      ASSERT_EQ_INT(ids[0], want[0]);
      for (uint64_t k = 1; k <= want[0]; k++)
        ASSERT_EQ_INT(ids[k], want[k]);
    }
  }
  /* with an owner: submit's jobs have none, so none match */
  uint64_t ids[16] = {0};
  colo_job_filter_t mine = {.state_mask = 1u << COLO_JOB_PENDING, .owner = "alice"};
  ASSERT_EQ_INT(colo_store_job_list(st, &mine, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 0);
  /* a mask with an ended state among them takes the general list */
  colo_job_filter_t mixed = {.state_mask = (1u << COLO_JOB_PENDING) | (1u << COLO_JOB_FAILED)};
  ASSERT_EQ_INT(colo_store_job_list(st, &mixed, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 4);
  ASSERT_EQ_INT(ids[1], 2);
  ASSERT_EQ_INT(ids[2], 6);
  ASSERT_EQ_INT(ids[3], 7);
  ASSERT_EQ_INT(ids[4], 11);
  colo_store_close(st);
}

TEST(every_transition) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  int allowed_seen = 0, refused_seen = 0;
  for (int from = 1; from <= COLO_JOB_STATE_MAX; from++) {
    for (int to = 1; to <= COLO_JOB_STATE_MAX; to++) {
      uint64_t id = job_in_state(st, from);
      int events_before = count_events(st, id);
      int rc;
      if (to == COLO_JOB_RUNNING) {
        colo_rank_place_t r[2] = {{0, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0}};
        rc = colo_store_attempt_begin(st, id, r, 2, 0, 5000, NULL);
      } else {
        rc = colo_store_job_transition(st, id, to, "edge", 0, 5000, NULL);
      }
      int expect = colo_job_transition_allowed(from, to);
      if (expect) {
        if (rc != 0)
          FAIL_AT("%s -> %s should be allowed, got %d (%s)", colo_job_state_name(from),
                  colo_job_state_name(to), rc, colo_store_errmsg(st));
        ASSERT_EQ_INT(job_state(st, id), to);
        ASSERT_EQ_INT(count_events(st, id), events_before + 1);
        allowed_seen++;
      } else {
        if (rc != COLO_ESTATE)
          FAIL_AT("%s -> %s should be refused with ESTATE, got %d", colo_job_state_name(from),
                  colo_job_state_name(to), rc);
        ASSERT_EQ_INT(job_state(st, id), from);             /* unchanged */
        ASSERT_EQ_INT(count_events(st, id), events_before); /* no event */
        refused_seen++;
      }
    }
  }
  /* the state machine of docs/architecture.md: 14 edges */
  ASSERT_EQ_INT(allowed_seen, 14);
  ASSERT_EQ_INT(refused_seen, 49 - 14);
  colo_store_close(st);
}

TEST(transition_messages) {
  colo_store_t *st = open_fresh();
  uint64_t id = job_in_state(st, COLO_JOB_CANCELLED);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_CANCELLED, "x", 0, 1, NULL),
                COLO_ESTATE);
  ASSERT_EQ_STR(colo_store_errmsg(st), "job 1 is already CANCELLED");
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_SUCCEEDED, "x", 0, 1, NULL),
                COLO_ESTATE);
  ASSERT_EQ_STR(colo_store_errmsg(st), "job 1 is CANCELLED; it cannot become SUCCEEDED");
  ASSERT_EQ_INT(colo_store_job_transition(st, 42, COLO_JOB_CANCELLED, "x", 0, 1, NULL),
                COLO_ENOENT);
  colo_store_close(st);
}

TEST(attempts_restarts_and_resume) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  uint64_t id = submit(st, "j");
  colo_rank_place_t r[4];
  for (uint32_t i = 0; i < 4; i++)
    r[i] = (colo_rank_place_t){i, 1, i, i / 2, i % 2, 0};
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, r, 4, 0, 10, &j), 0);
  ASSERT_EQ_INT(j.attempt, 1);
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_RESTARTING, "rank 2 died", 0, 20, &j),
                0);
  ASSERT_EQ_INT(j.restarts, 1);
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, r, 2, 100, 30, &j), 0);
  ASSERT_EQ_INT(j.attempt, 2);
  ASSERT_EQ_INT(j.resume_step, 100);
  colo_job_clear(&j);
  colo_rank_place_t got[8];
  size_t n;
  ASSERT_EQ_INT(colo_store_attempt_ranks(st, id, 1, got, 8, &n), 0);
  ASSERT_EQ_INT(n, 4);
  ASSERT_EQ_INT(got[3].dp_idx, 1);
  ASSERT_EQ_INT(got[3].tp_idx, 1);
  ASSERT_EQ_INT(colo_store_attempt_ranks(st, id, 2, got, 8, &n), 0);
  ASSERT_EQ_INT(n, 2);
  /* attempt 1 is closed as FAILED, attempt 2 still open */
  ASSERT_EQ_INT(sql_int("SELECT state FROM job_attempts WHERE attempt = 1"), COLO_JOB_FAILED);
  ASSERT_EQ_INT(sql_int("SELECT ended_ms IS NULL FROM job_attempts WHERE attempt = 2"), 1);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_FAILED, "out of restarts", 0, 40, NULL),
                0);
  ASSERT_EQ_INT(sql_int("SELECT ended_ms FROM job_attempts WHERE attempt = 2"), 40);
  /* a resume clears the restart count and records the chosen step */
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_PENDING, "resumed", 400, 50, &j), 0);
  ASSERT_EQ_INT(j.restarts, 0);
  ASSERT_EQ_INT(j.resume_step, 400);
  ASSERT_EQ_INT(j.attempt, 2);
  colo_job_clear(&j);
  /* a rank on an unknown host violates the foreign key and nothing of the attempt is kept */
  colo_rank_place_t bad = {0, 999, 0, 0, 0, 0};
  ASSERT(colo_store_attempt_begin(st, id, &bad, 1, 0, 60, NULL) < 0);
  ASSERT_EQ_INT(job_state(st, id), COLO_JOB_PENDING);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM job_attempts"), 2);
  colo_store_close(st);
}

/* ranks that stopped as asked: the attempt ends CANCELLED, the job restarts, nothing counted;
 * only a RUNNING job has an attempt to interrupt */
TEST(interrupted_attempt_is_not_a_restart) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  uint64_t id = submit(st, "j");
  colo_rank_place_t r = {0, 1, 0, 0, 0, 0};
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_interrupted(st, id, "early", 5, NULL), COLO_ESTATE);
  ASSERT_EQ_INT(job_state(st, id), COLO_JOB_PENDING);
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 10, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_interrupted(st, id, "rank 0 stopped as asked at step 7", 20, &j), 0);
  ASSERT_EQ_INT(j.state, COLO_JOB_RESTARTING);
  ASSERT_EQ_INT(j.restarts, 0);
  ASSERT_EQ_STR(j.message, "rank 0 stopped as asked at step 7");
  colo_job_clear(&j);
  ASSERT_EQ_INT(sql_int("SELECT state FROM job_attempts WHERE attempt = 1"), COLO_JOB_CANCELLED);
  ASSERT_EQ_INT(sql_int("SELECT ended_ms FROM job_attempts WHERE attempt = 1"), 20);
  /* a failure after it counts as ever */
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 30, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_RESTARTING, "rank 0 died", 0, 40, &j),
                0);
  ASSERT_EQ_INT(j.restarts, 1);
  colo_job_clear(&j);
  ASSERT_EQ_INT(sql_int("SELECT state FROM job_attempts WHERE attempt = 2"), COLO_JOB_FAILED);
  colo_store_close(st);
}

/* a stop's mark: on an open attempt only, with its reason, read back after a reopen (a colod
 * restart), and not carried to the next attempt; and the attempt's start time */
TEST(attempt_stop_is_stored) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  uint64_t id = submit(st, "j");
  colo_rank_place_t r = {0, 1, 0, 0, 0, 0};
  ASSERT_EQ_INT(colo_store_attempt_stop(st, id, 1, COLO_STOP_MOVE), COLO_ENOENT); /* none yet */
  ASSERT_EQ_INT(stop_of(st, id, 1), COLO_ENOENT);
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 10, NULL), 0);
  int stop = -1;
  int64_t started = 0;
  uint32_t seq = 9;
  ASSERT_EQ_INT(colo_store_attempt_get(st, id, 1, &stop, &started, &seq), 0);
  ASSERT_EQ_INT(seq, 0);
  ASSERT_EQ_INT(stop, 0);
  ASSERT_EQ_INT(started, 10);
  ASSERT_EQ_INT(colo_store_attempt_stop(st, id, 1, 3), COLO_EINVAL);
  ASSERT_EQ_INT(colo_store_attempt_stop(st, id, 1, COLO_STOP_MOVE), 0);
  ASSERT_EQ_INT(colo_store_attempt_stop(st, id, 1, COLO_STOP_MOVE), 0); /* again: the same */
  colo_store_close(st);
  st = open_fresh();
  ASSERT_EQ_INT(stop_of(st, id, 1), COLO_STOP_MOVE);
  ASSERT_EQ_INT(colo_store_job_interrupted(st, id, "rank 0 stopped as asked at step 3", 20, NULL),
                0);
  ASSERT_EQ_INT(colo_store_attempt_stop(st, id, 1, COLO_STOP_MOVE), COLO_ENOENT); /* ended */
  ASSERT_EQ_INT(stop_of(st, id, 1), COLO_STOP_MOVE); /* its history stays */
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 3, 30, NULL), 0);
  ASSERT_EQ_INT(stop_of(st, id, 2), 0);
  /* a time limit's stop ends the job TIMED_OUT, which a resume takes back to PENDING */
  ASSERT_EQ_INT(colo_store_attempt_stop(st, id, 2, COLO_STOP_TIME_LIMIT), 0);
  ASSERT_EQ_INT(stop_of(st, id, 2), COLO_STOP_TIME_LIMIT);
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_TIMED_OUT, "time limit", 0, 40, &j), 0);
  ASSERT_EQ_INT(j.state, COLO_JOB_TIMED_OUT);
  ASSERT(colo_job_state_terminal(j.state));
  ASSERT_EQ_STR(colo_job_state_name(j.state), "TIMED_OUT");
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_RUNNING, "", 0, 50, NULL), COLO_EINVAL);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_PENDING, "resumed", 3, 50, NULL), 0);
  colo_store_close(st);
}

TEST(client_token_is_idempotent) {
  colo_store_t *st = open_fresh();
  colo_job_t a, b;
  const uint8_t spec[] = {1, 2, 3};
  ASSERT_EQ_INT(colo_store_job_insert(st, "x", spec, 3, 1, "tok-1",
                                      &(colo_job_room_t){"alice", UINT32_MAX, "", UINT32_MAX}, 5,
                                      &a),
                0);
  ASSERT_EQ_INT(colo_store_job_insert(st, "x", spec, 3, 1, "tok-1",
                                      &(colo_job_room_t){"alice", 1, "", UINT32_MAX}, 6, &b),
                COLO_EEXIST);
  ASSERT_EQ_INT(a.id, b.id);
  ASSERT_EQ_INT(b.created_ms, 5);
  ASSERT_EQ_STR(b.owner, "alice");
  colo_job_clear(&b);
  /* a token is its owner's: another user's same token is a job of its own */
  ASSERT_EQ_INT(colo_store_job_insert(st, "x", spec, 3, 1, "tok-1",
                                      &(colo_job_room_t){"bob", UINT32_MAX, "", UINT32_MAX}, 7, &b),
                0);
  ASSERT(a.id != b.id);
  ASSERT_EQ_STR(b.owner, "bob");
  colo_job_clear(&a);
  colo_job_clear(&b);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM jobs"), 2);
  /* alice has 1 job that has not ended: with at most 1, a new token's job is refused, and a
   * retry of the first still answered (above, with max_unfinished 1) */
  ASSERT_EQ_INT(colo_store_job_insert(st, "y", spec, 3, 1, "tok-2",
                                      &(colo_job_room_t){"alice", 1, "", UINT32_MAX}, 8, &b),
                COLO_ETOOBIG);
  ASSERT_EQ_STR(colo_store_errmsg(st), "\"alice\" has 1 jobs that have not ended, as many as "
                                       "owner_max_jobs allows: cancel one, or wait for one to end");
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM jobs"), 2);
  uint64_t n = 9;
  ASSERT_EQ_INT(colo_store_job_unfinished(st, "alice", &n), 0);
  ASSERT_EQ_INT(n, 1);
  ASSERT_EQ_INT(colo_store_job_transition(st, 1, COLO_JOB_CANCELLED, "", 0, 9, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_unfinished(st, "alice", &n), 0);
  ASSERT_EQ_INT(n, 0); /* an ended job does not count */
  ASSERT_EQ_INT(colo_store_job_insert(st, "y", spec, 3, 1, "tok-2",
                                      &(colo_job_room_t){"alice", 1, "", UINT32_MAX}, 10, &b),
                0);
  colo_job_clear(&b);
  colo_store_close(st);
}

TEST(hosts_register_and_state) {
  colo_store_t *st = open_fresh();
  colo_host_t h;
  const uint8_t dev[] = {0x2a, 0x00};
  ASSERT_EQ_INT(
      colo_store_host_register(st, "node-a", "10.1.1.1:7071", dev, 2, 1 << 30, 16, 100, &h), 0);
  ASSERT_EQ_INT(h.session, 1);
  ASSERT_EQ_INT(h.state, COLO_HOST_UP);
  uint64_t id = h.id;
  colo_host_clear(&h);
  ASSERT_EQ_INT(colo_store_host_set_state(st, id, COLO_HOST_DOWN, 200), 0);
  ASSERT_EQ_INT(colo_store_host_get(st, id, &h), 0);
  ASSERT_EQ_INT(h.state, COLO_HOST_DOWN);
  colo_host_clear(&h);
  /* registering again keeps the id, bumps the session, marks it UP */
  ASSERT_EQ_INT(colo_store_host_register(st, "node-a", "10.1.1.2:7071", NULL, 0, 0, 8, 300, &h), 0);
  ASSERT_EQ_INT(h.id, id);
  ASSERT_EQ_INT(h.session, 2);
  ASSERT_EQ_INT(h.state, COLO_HOST_UP);
  ASSERT_EQ_STR(h.address, "10.1.1.2:7071");
  colo_host_clear(&h);
  ASSERT_EQ_INT(colo_store_host_set_state(st, 77, COLO_HOST_DOWN, 1), COLO_ENOENT);
  ASSERT_EQ_INT(colo_store_host_set_state(st, id, 9, 1), COLO_EINVAL);
  colo_store_close(st);
}

static int cordon_cb(const colo_host_t *h, void *data) {
  *(int *)data = h->cordoned && !strcmp(h->cordon_reason, "disk replacement");
  return 0;
}

TEST(hosts_cordon_survives_register) {
  colo_store_t *st = open_fresh();
  colo_host_t h;
  ASSERT_EQ_INT(colo_store_host_register(st, "node-b", "10.1.1.3:7071", NULL, 0, 0, 4, 100, &h), 0);
  uint64_t id = h.id;
  ASSERT_EQ_INT(h.cordoned, 0);
  ASSERT_EQ_STR(h.cordon_reason, "");
  colo_host_clear(&h);
  ASSERT_EQ_INT(colo_store_host_cordon(st, id, 1, "disk replacement", 0, 0), 0);
  int listed = 0;
  ASSERT_EQ_INT(colo_store_host_list(st, cordon_cb, &listed), 0);
  ASSERT_EQ_INT(listed, 1);
  /* a worker that registers again (a restart) finds its host as the operator left it */
  ASSERT_EQ_INT(colo_store_host_register(st, "node-b", "10.1.1.3:7071", NULL, 0, 0, 4, 200, &h), 0);
  ASSERT_EQ_INT(h.cordoned, 1);
  ASSERT_EQ_STR(h.cordon_reason, "disk replacement");
  colo_host_clear(&h);
  ASSERT_EQ_INT(colo_store_host_cordon(st, id, 0, "ignored", 0, 0), 0);
  ASSERT_EQ_INT(colo_store_host_get(st, id, &h), 0);
  ASSERT_EQ_INT(h.cordoned, 0);
  ASSERT_EQ_STR(h.cordon_reason, "");
  colo_host_clear(&h);
  ASSERT_EQ_INT(colo_store_host_cordon(st, 77, 1, "x", 0, 0), COLO_ENOENT);
  /* a cordon to come (a maintenance) is kept, with its eviction, until one at once replaces it */
  ASSERT_EQ_INT(colo_store_host_cordon(st, id, 0, "firmware", 5000, 1), 0);
  ASSERT_EQ_INT(colo_store_host_register(st, "node-b", "10.1.1.3:7071", NULL, 0, 0, 4, 300, &h), 0);
  ASSERT_EQ_INT(h.cordoned, 0);
  ASSERT_EQ_INT(h.cordon_at_ms, 5000);
  ASSERT_EQ_INT(h.cordon_evict, 1);
  ASSERT_EQ_STR(h.cordon_reason, "firmware");
  colo_host_clear(&h);
  ASSERT_EQ_INT(colo_store_host_cordon(st, id, 1, "firmware", 0, 0), 0);
  ASSERT_EQ_INT(colo_store_host_get(st, id, &h), 0);
  ASSERT_EQ_INT(h.cordoned, 1);
  ASSERT_EQ_INT(h.cordon_at_ms, 0);
  ASSERT_EQ_INT(h.cordon_evict, 0);
  colo_host_clear(&h);
  colo_store_close(st);
}

static int ck_cb(const colo_checkpoint_t *ck, void *data) {
  uint64_t *steps = data;
  steps[++steps[0]] = ck->step;
  return 0;
}

TEST(checkpoints_newest_first) {
  colo_store_t *st = open_fresh();
  uint64_t id = submit(st, "j");
  for (uint64_t s = 100; s <= 300; s += 100) {
    colo_checkpoint_t ck = {
        .job_id = id, .step = s, .attempt = 1, .bytes = s * 10, .created_ms = 1};
    snprintf(ck.path, sizeof ck.path, "1/step_%08llu", (unsigned long long)s);
    snprintf(ck.manifest_sha256, sizeof ck.manifest_sha256, "%064d", 0);
    ASSERT_EQ_INT(colo_store_checkpoint_add(st, &ck), 0);
  }
  /* a later attempt that writes the same step again (it resumed from an earlier one) replaces
   * the row: one row per step, the newest files */
  colo_checkpoint_t dup = {.job_id = id, .step = 200, .attempt = 2, .bytes = 7, .created_ms = 2};
  snprintf(dup.path, sizeof dup.path, "1/step_00000200");
  snprintf(dup.manifest_sha256, sizeof dup.manifest_sha256, "%064d", 1);
  ASSERT_EQ_INT(colo_store_checkpoint_add(st, &dup), 0);
  uint64_t steps[8] = {0};
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 3);
  ASSERT_EQ_INT(steps[1], 300);
  ASSERT_EQ_INT(steps[3], 100);
  /* keep 2: the oldest row goes; keep 0 keeps everything */
  ASSERT_EQ_INT(colo_store_checkpoint_prune(st, id, 0, 0), 0);
  memset(steps, 0, sizeof steps);
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 3);
  ASSERT_EQ_INT(colo_store_checkpoint_prune(st, id, 2, 0), 0);
  memset(steps, 0, sizeof steps);
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 2);
  ASSERT_EQ_INT(steps[1], 300);
  ASSERT_EQ_INT(steps[2], 200);
  /* one written as asked (request 1) is kept besides the `keep` newest, and not counted */
  colo_checkpoint_t asked = {
      .job_id = id, .step = 250, .attempt = 2, .bytes = 7, .created_ms = 3, .request = 1};
  snprintf(asked.path, sizeof asked.path, "1/step_00000250");
  snprintf(asked.manifest_sha256, sizeof asked.manifest_sha256, "%064d", 2);
  ASSERT_EQ_INT(colo_store_checkpoint_add(st, &asked), 0);
  for (uint64_t s = 400; s <= 500; s += 100) {
    colo_checkpoint_t ck = {.job_id = id, .step = s, .attempt = 2, .created_ms = 4};
    snprintf(ck.path, sizeof ck.path, "1/step_%08llu", (unsigned long long)s);
    snprintf(ck.manifest_sha256, sizeof ck.manifest_sha256, "%064d", 0);
    ASSERT_EQ_INT(colo_store_checkpoint_add(st, &ck), 0);
    ASSERT_EQ_INT(colo_store_checkpoint_prune(st, id, 2, 0), 0);
  }
  memset(steps, 0, sizeof steps);
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 3); /* 500, 400 and the asked 250 */
  ASSERT_EQ_INT(steps[1], 500);
  ASSERT_EQ_INT(steps[2], 400);
  ASSERT_EQ_INT(steps[3], 250);
  colo_store_close(st);
}

typedef struct {
  int n, has[10];
  float val[10];
} ck_vals_t;

static int ck_val_cb(const colo_checkpoint_t *ck, void *data) {
  ck_vals_t *v = data;
  v->has[v->n] = ck->has_val_loss;
  v->val[v->n++] = ck->val_loss;
  return v->n == 10;
}

static int ck_score_cb(const colo_checkpoint_t *ck, void *data) {
  float *got = data;
  int i = 0;
  while (i < 3 && got[i] != 0.0f)
    i++;
  ASSERT(ck->has_score);
  if (i < 3)
    got[i] = ck->score;
  return i >= 2;
}

/* keep_best: besides the `keep` newest, the row with the lowest validation loss stays (the
 * newest of equals; rows without a loss and those asked for are not candidates), and the loss
 * reads back as written; without keep_best it goes like any other. */
TEST(checkpoints_keep_the_best) {
  colo_store_t *st = open_fresh();
  uint64_t id = submit(st, "j");
  const float val[6] = {3.0f, 2.5f, 2.25f, 2.25f, 1.0f, 2.75f}; /* step 500 asked for */
  for (int i = 0; i < 7; i++) {
    colo_checkpoint_t ck = {.job_id = id,
                            .step = 100 * (uint64_t)(i + 1),
                            .attempt = 1,
                            .created_ms = 1,
                            .request = i == 4,
                            .has_val_loss = i < 6, /* 700: a stop's, not evaluated */
                            .val_loss = i < 6 ? val[i] : 0};
    snprintf(ck.path, sizeof ck.path, "1/step_%08llu", (unsigned long long)ck.step);
    snprintf(ck.manifest_sha256, sizeof ck.manifest_sha256, "%064d", 0);
    ASSERT_EQ_INT(colo_store_checkpoint_add(st, &ck), 0);
    ASSERT_EQ_INT(colo_store_checkpoint_prune(st, id, 2, 1), 0);
  }
  uint64_t steps[10] = {0};
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 4); /* 700, 600, the asked 500, and 400 the best */
  ASSERT_EQ_INT(steps[1], 700);
  ASSERT_EQ_INT(steps[2], 600);
  ASSERT_EQ_INT(steps[3], 500);
  ASSERT_EQ_INT(steps[4], 400);
  ck_vals_t got = {0};
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_val_cb, &got), 0);
  ASSERT_EQ_INT(got.n, 4);
  ASSERT(!got.has[0] && got.has[1] && got.val[1] == 2.75f && got.val[3] == 2.25f);
  /* without keep_best the best goes */
  ASSERT_EQ_INT(colo_store_checkpoint_prune(st, id, 2, 0), 0);
  memset(steps, 0, sizeof steps);
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 3);
  ASSERT_EQ_INT(steps[3], 500);
  colo_store_close(st);
}

/* With train.best_metric a score, the rows that record one are ranked by it, higher better (the
 * newest of equals), not by their loss; it reads back as written. */
TEST(checkpoints_keep_the_best_score) {
  colo_store_t *st = open_fresh();
  uint64_t id = submit(st, "j");
  const float val[6] = {3.0f, 2.0f, 2.5f, 2.6f, 2.7f, 2.8f};   /* the lowest loss at 200 */
  const float score[6] = {0.2f, 0.3f, 0.5f, 0.5f, 0.4f, 0.1f}; /* the highest at 300 and 400 */
  for (int i = 0; i < 6; i++) {
    colo_checkpoint_t ck = {.job_id = id,
                            .step = 100 * (uint64_t)(i + 1),
                            .attempt = 1,
                            .created_ms = 1,
                            .has_val_loss = 1,
                            .val_loss = val[i],
                            .has_score = 1,
                            .score = score[i]};
    snprintf(ck.path, sizeof ck.path, "1/step_%08llu", (unsigned long long)ck.step);
    snprintf(ck.manifest_sha256, sizeof ck.manifest_sha256, "%064d", 0);
    ASSERT_EQ_INT(colo_store_checkpoint_add(st, &ck), 0);
    ASSERT_EQ_INT(colo_store_checkpoint_prune(st, id, 2, 1), 0);
  }
  uint64_t steps[10] = {0};
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_cb, steps), 0);
  ASSERT_EQ_INT(steps[0], 3); /* 600, 500, and 400 the best score */
  ASSERT_EQ_INT(steps[1], 600);
  ASSERT_EQ_INT(steps[2], 500);
  ASSERT_EQ_INT(steps[3], 400);
  float got[3] = {0};
  ASSERT_EQ_INT(colo_store_checkpoint_list(st, id, ck_score_cb, got), 0);
  ASSERT(got[0] == 0.1f && got[1] == 0.4f && got[2] == 0.5f);
  colo_store_close(st);
}

TEST(committed_write_survives_crash) {
  /* a child commits and dies without closing; the parent finds the row and a sound database */
  colo_store_t *st = open_fresh();
  colo_store_close(st);
  pid_t pid = fork();
  if (pid == 0) {
    colo_store_t *c = open_fresh();
    submit(c, "survivor");
    _exit(0); /* no close, no checkpoint of the WAL */
  }
  int status;
  waitpid(pid, &status, 0);
  ASSERT_EQ_INT(WEXITSTATUS(status), 0);
  st = open_fresh();
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_get(st, 1, &j), 0);
  ASSERT_EQ_STR(j.name, "survivor");
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_integrity_check(st), 0);
  colo_store_close(st);
}

TEST(checkpoint_requests_are_counted_per_open_attempt) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  uint64_t id = submit(st, "j");
  colo_rank_place_t r = {0, 1, 0, 0, 0, 0};
  uint32_t seq = 99;
  ASSERT_EQ_INT(colo_store_attempt_checkpoint(st, id, 1, &seq), COLO_ENOENT); /* no attempt */
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 10, NULL), 0);
  ASSERT_EQ_INT(colo_store_attempt_checkpoint(st, id, 1, &seq), 0);
  ASSERT_EQ_INT(seq, 1);
  ASSERT_EQ_INT(colo_store_attempt_checkpoint(st, id, 1, &seq), 0);
  ASSERT_EQ_INT(seq, 2);
  colo_store_close(st);
  st = open_fresh(); /* kept across a restart */
  int stop;
  int64_t started;
  ASSERT_EQ_INT(colo_store_attempt_get(st, id, 1, &stop, &started, &seq), 0);
  ASSERT_EQ_INT(seq, 2);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_CANCELLED, "", 0, 20, NULL), 0);
  ASSERT_EQ_INT(colo_store_attempt_checkpoint(st, id, 1, &seq), COLO_ENOENT); /* ended */
  colo_store_close(st);
}

TEST(update_holds_and_respecs_a_live_job) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  uint64_t id = submit(st, "j");
  int events = count_events(st, id);
  colo_job_t j;
  colo_job_update_t u = {
      .hold = COLO_HOLD_ADMIN, .hold_reason = "maintenance", .message = "held by ops: maintenance"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 2000, &j), 0);
  ASSERT_EQ_INT(j.hold, COLO_HOLD_ADMIN);
  ASSERT_EQ_STR(j.hold_reason, "maintenance");
  ASSERT_EQ_STR(j.message, "held by ops: maintenance");
  ASSERT_EQ_INT(j.state, COLO_JOB_PENDING);
  ASSERT_EQ_INT(j.updated_ms, 2000);
  colo_job_clear(&j);
  ASSERT_EQ_INT(count_events(st, id), events + 1);
  /* kept across a restart */
  colo_store_close(st);
  st = open_fresh();
  ASSERT_EQ_INT(colo_store_job_get(st, id, &j), 0);
  ASSERT_EQ_INT(j.hold, COLO_HOLD_ADMIN);
  ASSERT_EQ_STR(j.hold_reason, "maintenance");
  colo_job_clear(&j);
  /* a new spec and max_restarts, the hold as it is */
  const uint8_t spec[] = {0x0a, 0x01, 'z', 0x50, 0x07};
  u = (colo_job_update_t){.spec = spec,
                          .spec_len = sizeof spec,
                          .max_restarts = 7,
                          .hold = -1,
                          .message = "max_restarts 3 -> 7"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 3000, &j), 0);
  ASSERT_EQ_INT(j.max_restarts, 7);
  ASSERT_EQ_INT(j.spec_len, sizeof spec);
  ASSERT(memcmp(j.spec, spec, sizeof spec) == 0);
  ASSERT_EQ_INT(j.hold, COLO_HOLD_ADMIN);
  ASSERT_EQ_STR(j.message, "held by ops: maintenance"); /* only a hold changes the message */
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_job_get(st, id, &j), 0);
  ASSERT_EQ_INT(j.max_restarts, 7);
  ASSERT(j.spec_len == sizeof spec && memcmp(j.spec, spec, sizeof spec) == 0);
  colo_job_clear(&j);
  /* released */
  u = (colo_job_update_t){.hold = COLO_HOLD_NONE, .hold_reason = "ignored", .message = "released"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 4000, &j), 0);
  ASSERT_EQ_INT(j.hold, COLO_HOLD_NONE);
  ASSERT_EQ_STR(j.hold_reason, "");
  colo_job_clear(&j);
  /* a running job can be changed but not held, and stays as it was */
  colo_rank_place_t r = {0, 1, 0, 0, 0, 0};
  ASSERT_EQ_INT(colo_store_attempt_begin(st, id, &r, 1, 0, 5000, NULL), 0);
  events = count_events(st, id);
  u = (colo_job_update_t){.hold = COLO_HOLD_OWNER, .message = "held"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 6000, NULL), COLO_ESTATE);
  ASSERT_EQ_STR(colo_store_errmsg(st), "job 1 is RUNNING; only a job waiting to be placed "
                                       "(PENDING or RESTARTING) can be held (a RUNNING one with "
                                       "requeue)");
  ASSERT_EQ_INT(count_events(st, id), events);
  /* held as it is requeued, though: it is stopping to wait again */
  u = (colo_job_update_t){.hold = COLO_HOLD_OWNER, .message = "requeued and held", .requeue = 1};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 6000, &j), 0);
  ASSERT_EQ_INT(j.hold, COLO_HOLD_OWNER);
  ASSERT_EQ_INT(j.state, COLO_JOB_RUNNING);
  colo_job_clear(&j);
  u = (colo_job_update_t){.hold = COLO_HOLD_NONE, .message = "released"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 6000, NULL), 0);
  u = (colo_job_update_t){.spec = spec,
                          .spec_len = sizeof spec,
                          .max_restarts = 2,
                          .hold = -1,
                          .message = "max_restarts 7 -> 2"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 6000, NULL), 0);
  ASSERT_EQ_INT(job_state(st, id), COLO_JOB_RUNNING);
  /* held again while restarting, then cancelled: an ended job is not held, and not changed */
  ASSERT_EQ_INT(
      colo_store_job_transition(st, id, COLO_JOB_RESTARTING, "rank 0 exited 1", 0, 7000, NULL), 0);
  u = (colo_job_update_t){.hold = -1, .message = "requeued", .requeue = 1};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 7400, NULL), COLO_ESTATE);
  ASSERT_EQ_STR(colo_store_errmsg(st), "job 1 is RESTARTING; only a RUNNING job can be requeued");
  u = (colo_job_update_t){.hold = COLO_HOLD_OWNER, .hold_reason = "look first", .message = "held"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 7500, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_CANCELLED, "cancelled", 0, 8000, &j), 0);
  ASSERT_EQ_INT(j.hold, COLO_HOLD_NONE);
  ASSERT_EQ_STR(j.hold_reason, "");
  colo_job_clear(&j);
  u = (colo_job_update_t){
      .spec = spec, .spec_len = sizeof spec, .max_restarts = 1, .hold = -1, .message = "x"};
  ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 9000, NULL), COLO_ESTATE);
  ASSERT_EQ_STR(colo_store_errmsg(st), "job 1 is CANCELLED; a job that ended cannot be changed");
  ASSERT_EQ_INT(colo_store_job_get(st, id, &j), 0);
  ASSERT_EQ_INT(j.max_restarts, 2);
  colo_job_clear(&j);
  ASSERT_EQ_INT(colo_store_job_update(st, 42, &u, 9000, NULL), COLO_ENOENT);
  /* the column's CHECK refuses a hold that is not one */
  colo_store_close(st);
  run_sql_expect_fail("UPDATE jobs SET hold = 3 WHERE id = 1");
}

static int collect_seqs(const colo_job_event_t *ev, void *data) {
  uint64_t *seqs = data;
  seqs[++seqs[0]] = ev->seq;
  return seqs[0] == 7;
}

/* job_retention and DeleteJob: ended jobs listed oldest end first; a delete takes every row of
 * the job (events, attempts, ranks, checkpoints, curve) and nothing of another job; a job not
 * ended, or resumed since it was listed, stays */
TEST(ended_jobs_are_listed_and_deleted_whole) {
  colo_store_t *st = open_fresh();
  ensure_host(st);
  uint64_t a = submit(st, "a"), b = submit(st, "b"), c = submit(st, "c"), live = submit(st, "d");
  colo_rank_place_t r[2] = {{0, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0}};
  for (uint64_t id = a; id <= c; id++) {
    ASSERT_EQ_INT(colo_store_attempt_begin(st, id, r, 2, 0, 100, NULL), 0);
    colo_checkpoint_t ck = {.job_id = id, .step = 10, .attempt = 1, .bytes = 1, .created_ms = 1};
    snprintf(ck.path, sizeof ck.path, "%llu/step_00000010", (unsigned long long)id);
    snprintf(ck.manifest_sha256, sizeof ck.manifest_sha256, "%064d", 0);
    ASSERT_EQ_INT(colo_store_checkpoint_add(st, &ck), 0);
    colo_progress_sample_t p = {
        .job_id = id, .attempt = 1, .step = 10, .has_loss = 1, .loss = 2.5f, .time_ms = 150};
    ASSERT_EQ_INT(colo_store_sample_add(st, &p), 0);
  }
  /* ends at 300 (c), 400 (a), 500 (b): oldest end first */
  ASSERT_EQ_INT(colo_store_job_transition(st, c, COLO_JOB_SUCCEEDED, "done", 0, 300, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, a, COLO_JOB_FAILED, "x", 0, 400, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, b, COLO_JOB_CANCELLED, "y", 0, 500, NULL), 0);
  uint64_t ids[8];
  size_t n = 99;
  colo_store_end_cursor_t at = {0, 0};
  ASSERT_EQ_INT(colo_store_jobs_ended_before(st, 450, &at, ids, 8, &n), 0);
  ASSERT_EQ_INT(n, 2);
  ASSERT_EQ_INT(ids[0], c);
  ASSERT_EQ_INT(ids[1], a);
  /* pages: at most cap, then on from the cursor */
  at = (colo_store_end_cursor_t){0, 0};
  ASSERT_EQ_INT(colo_store_jobs_ended_before(st, 10000, &at, ids, 1, &n), 0);
  ASSERT_EQ_INT(n, 1);
  ASSERT_EQ_INT(ids[0], c);
  ASSERT_EQ_INT(at.ended_ms, 300);
  ASSERT_EQ_INT(colo_store_jobs_ended_before(st, 10000, &at, ids, 8, &n), 0);
  ASSERT_EQ_INT(n, 2);
  ASSERT_EQ_INT(ids[0], a);
  ASSERT_EQ_INT(ids[1], b);
  ASSERT_EQ_INT(colo_store_jobs_ended_before(st, 10000, &at, ids, 8, &n), 0);
  ASSERT_EQ_INT(n, 0);
  at = (colo_store_end_cursor_t){0, 0};
  ASSERT_EQ_INT(colo_store_jobs_ended_before(st, 300, &at, ids, 8, &n), 0);
  ASSERT_EQ_INT(n, 0); /* strictly before */
  /* a is resumed after it was listed: the purge leaves it; c goes with all its rows */
  ASSERT_EQ_INT(colo_store_job_transition(st, a, COLO_JOB_PENDING, "resumed", 0, 600, NULL), 0);
  uint64_t batch[3] = {c, a, live};
  size_t deleted = 99;
  ASSERT_EQ_INT(colo_store_jobs_purge(st, batch, 3, 450, &deleted), 0);
  ASSERT_EQ_INT(deleted, 1);
  ASSERT_EQ_INT(batch[0], c);
  colo_job_t j;
  ASSERT_EQ_INT(colo_store_job_get(st, c, &j), COLO_ENOENT);
  ASSERT_EQ_INT(job_state(st, a), COLO_JOB_PENDING);
  ASSERT_EQ_INT(job_state(st, live), COLO_JOB_PENDING);
  char q[200];
  const char *tables[] = {"job_events", "job_attempts", "ranks", "checkpoints", "progress_samples"};
  for (size_t t = 0; t < 5; t++) {
    snprintf(q, sizeof q, "SELECT count(*) FROM %s WHERE job_id = %llu", tables[t],
             (unsigned long long)c);
    ASSERT_EQ_INT(sql_int(q), 0);
    snprintf(q, sizeof q, "SELECT count(*) > 0 FROM %s WHERE job_id = %llu", tables[t],
             (unsigned long long)b);
    ASSERT_EQ_INT(sql_int(q), 1); /* b's rows are all there */
  }
  /* a purge with a cut-off leaves a job that ended after it */
  batch[0] = b;
  ASSERT_EQ_INT(colo_store_jobs_purge(st, batch, 1, 450, &deleted), 0);
  ASSERT_EQ_INT(deleted, 0);
  /* one delete: an ended job whenever it ended; refused for a job not ended, or none */
  ASSERT_EQ_INT(colo_store_job_delete(st, live), COLO_ESTATE);
  ASSERT(strstr(colo_store_errmsg(st), "is PENDING; only a job that has ended"));
  ASSERT_EQ_INT(colo_store_job_delete(st, 9999), COLO_ENOENT);
  ASSERT_EQ_INT(colo_store_job_delete(st, b), 0);
  ASSERT_EQ_INT(colo_store_job_get(st, b, &j), COLO_ENOENT);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM ranks"), 2); /* a's attempt's */
  /* ids are never handed out again */
  ASSERT(submit(st, "e") > live);
  ASSERT_EQ_INT(colo_store_integrity_check(st), 0);
  colo_store_close(st);
}

TEST(job_events_after_and_newest) {
  colo_store_t *st = open_fresh();
  uint64_t id = submit(st, "j"), other = submit(st, "k");
  for (int i = 0; i < 4; i++) {
    colo_job_update_t u = {.hold = i % 2 ? COLO_HOLD_NONE : COLO_HOLD_OWNER, .message = "h"};
    ASSERT_EQ_INT(colo_store_job_update(st, id, &u, 2000 + i, NULL), 0);
  }
  uint64_t seqs[8] = {0};
  ASSERT_EQ_INT(colo_store_job_events(st, id, 0, collect_seqs, seqs), 0);
  ASSERT_EQ_INT(seqs[0], 5); /* submitted, then 4 */
  for (uint64_t i = 1; i <= 5; i++)
    ASSERT_EQ_INT(seqs[i], i);
  memset(seqs, 0, sizeof seqs);
  ASSERT_EQ_INT(colo_store_job_events(st, id, 3, collect_seqs, seqs), 0);
  ASSERT_EQ_INT(seqs[0], 2);
  ASSERT_EQ_INT(seqs[1], 4);
  memset(seqs, 0, sizeof seqs);
  ASSERT_EQ_INT(colo_store_job_events_last(st, id, 2, collect_seqs, seqs), 0);
  ASSERT_EQ_INT(seqs[0], 2); /* the newest two, oldest first */
  ASSERT_EQ_INT(seqs[1], 4);
  ASSERT_EQ_INT(seqs[2], 5);
  memset(seqs, 0, sizeof seqs);
  ASSERT_EQ_INT(colo_store_job_events_last(st, id, 100, collect_seqs, seqs), 0);
  ASSERT_EQ_INT(seqs[0], 5);
  memset(seqs, 0, sizeof seqs);
  ASSERT_EQ_INT(colo_store_job_events_last(st, other, 3, collect_seqs, seqs), 0);
  ASSERT_EQ_INT(seqs[0], 1); /* another job's are its own */
  memset(seqs, 0, sizeof seqs);
  ASSERT_EQ_INT(colo_store_job_events_last(st, 42, 3, collect_seqs, seqs), 0);
  ASSERT_EQ_INT(seqs[0], 0);
  colo_store_close(st);
}

static void test_usage_key(const uint8_t *spec, size_t len, colo_usage_key_t *key) {
  snprintf(key->account, sizeof key->account, "acct-%zu", len); /* submit_as's spec: 5 bytes */
  key->device = spec[0] == 0x0a ? 2 : 1;
}

static int collect_hours(const colo_usage_hour_t *u, void *data) {
  colo_usage_hour_t *v = data;
  size_t n = (size_t)v[0].device_ms++;
  v[n + 1] = *u;
  v[n + 1].owner = v[n + 1].account = NULL; /* valid in the callback only */
  return 0;
}

/* A deleted job's device time stays in usage_hours, split at the hours, counted with others of
 * the same owner, account and device in the same hour; a job the purge leaves adds nothing. */
TEST(deleting_keeps_usage_by_the_hour) {
  colo_store_t *st = open_fresh();
  colo_store_set_usage_key(st, test_usage_key);
  ensure_host(st);
  const int64_t H = COLO_USAGE_HOUR_MS;
  colo_rank_place_t r[2] = {{0, 1, 0, 0, 0, 0}, {1, 1, 1, 1, 0, 0}};
  uint64_t a = submit_as(st, "a", "alice"), b = submit_as(st, "b", "alice");
  uint64_t c = submit_as(st, "c", "bob");
  /* a: 2 ranks from 0:50 to 1:06:40, restarted, 1 rank from 1:08:20 to 2:05 */
  ASSERT_EQ_INT(colo_store_attempt_begin(st, a, r, 2, 0, 3000000, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, a, COLO_JOB_RESTARTING, "x", 0, 4000000, NULL), 0);
  ASSERT_EQ_INT(colo_store_attempt_begin(st, a, r, 1, 0, 4100000, NULL), 0);
  ASSERT_EQ_INT(colo_store_job_transition(st, a, COLO_JOB_SUCCEEDED, "ok", 0, 7500000, NULL), 0);
  /* b: 2 ranks for 10 minutes in the second hour; c: bob's, the same time */
  for (uint64_t id = b; id <= c; id++) {
    ASSERT_EQ_INT(colo_store_attempt_begin(st, id, r, 2, 0, H + 60000, NULL), 0);
    ASSERT_EQ_INT(colo_store_job_transition(st, id, COLO_JOB_FAILED, "x", 0, H + 660000, NULL), 0);
  }
  ASSERT_EQ_INT(colo_store_job_delete(st, a), 0);
  uint64_t batch[2] = {b, c};
  size_t deleted = 0;
  ASSERT_EQ_INT(colo_store_jobs_purge(st, batch, 2, H + 600000, &deleted), 0);
  ASSERT_EQ_INT(deleted, 0); /* both ended after the cut-off: nothing is counted twice */
  ASSERT_EQ_INT(colo_store_jobs_purge(st, batch, 2, 0, &deleted), 0);
  ASSERT_EQ_INT(deleted, 2);
  colo_usage_hour_t v[16] = {0};
  ASSERT_EQ_INT(colo_store_usage_hours(st, 0, 10 * H, collect_hours, v), 0);
  ASSERT_EQ_INT(v[0].device_ms, 4);
  /* hour 0, alice: 2 ranks x 600 s; the job and its first attempt began then */
  ASSERT_EQ_INT(v[1].hour_ms, 0);
  ASSERT_EQ_INT(v[1].device_ms, 1200000);
  ASSERT_EQ_INT(v[1].jobs, 1);
  ASSERT_EQ_INT(v[1].attempts, 1);
  ASSERT_EQ_INT(v[1].device, 2);
  ASSERT_EQ_INT(v[1].from_ms, 3000000);
  ASSERT_EQ_INT(v[1].to_ms, H);
  /* hour 1, alice: a's 2 x 400 s and 1 x 3100 s, b's 2 x 600 s; b and a's second attempt */
  ASSERT_EQ_INT(v[2].hour_ms, H);
  ASSERT_EQ_INT(v[2].device_ms, 800000 + 3100000 + 1200000);
  ASSERT_EQ_INT(v[2].jobs, 1);
  ASSERT_EQ_INT(v[2].attempts, 2);
  ASSERT_EQ_INT(v[2].from_ms, H);
  ASSERT_EQ_INT(v[2].to_ms, 2 * H);
  /* hour 1, bob */
  ASSERT_EQ_INT(v[3].hour_ms, H);
  ASSERT_EQ_INT(v[3].device_ms, 1200000);
  ASSERT_EQ_INT(v[3].jobs, 1);
  ASSERT_EQ_INT(v[3].from_ms, H + 60000);
  ASSERT_EQ_INT(v[3].to_ms, H + 660000);
  /* hour 2, alice: a's last 300 s on 1 rank */
  ASSERT_EQ_INT(v[4].hour_ms, 2 * H);
  ASSERT_EQ_INT(v[4].device_ms, 300000);
  ASSERT_EQ_INT(v[4].jobs + v[4].attempts, 0);
  ASSERT_EQ_INT(v[4].to_ms, 7500000);
  ASSERT_EQ_INT(sql_int("SELECT count(DISTINCT owner || account) FROM usage_hours"), 2);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM usage_hours WHERE account = 'acct-5'"), 4);
  /* a window takes the hours it overlaps */
  memset(v, 0, sizeof v);
  ASSERT_EQ_INT(colo_store_usage_hours(st, H + 1, 2 * H, collect_hours, v), 0);
  ASSERT_EQ_INT(v[0].device_ms, 2);
  ASSERT_EQ_INT(v[1].hour_ms, H);
  ASSERT_EQ_INT(v[2].hour_ms, H);
  /* and only those whose time in use it overlaps: not bob's, over by H + 660000 */
  memset(v, 0, sizeof v);
  ASSERT_EQ_INT(colo_store_usage_hours(st, H + 700000, 2 * H - 1, collect_hours, v), 0);
  ASSERT_EQ_INT(v[0].device_ms, 1);
  ASSERT_EQ_INT(v[1].device_ms, 800000 + 3100000 + 1200000);
  memset(v, 0, sizeof v);
  ASSERT_EQ_INT(colo_store_usage_hours(st, 3 * H, 4 * H, collect_hours, v), 0);
  ASSERT_EQ_INT(v[0].device_ms, 0);
  colo_store_close(st);
}

/* jobs.account: NULL for jobs stored without a key callback, read from their specs once one is
 * set; written at insert and respec after that; lists filter by it */
TEST(accounts_are_a_column_lists_filter_by) {
  colo_store_t *st = open_fresh();
  uint64_t a = submit_as(st, "a", "alice"); /* before the callback */
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM jobs WHERE account IS NULL"), 1);
  ASSERT_EQ_INT(colo_store_set_usage_key(st, test_usage_key), 0);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM jobs WHERE account = 'acct-5'"), 1);
  uint64_t b = submit_as(st, "b", "bob");
  const uint8_t longer[] = {0x0a, 0x04, 'a', 'b', 'c', 'd'};
  colo_job_update_t u = {.spec = longer,
                         .spec_len = sizeof longer,
                         .max_restarts = 3,
                         .hold = -1,
                         .message = "respec"};
  ASSERT_EQ_INT(colo_store_job_update(st, b, &u, 2000, NULL), 0);
  uint64_t c = submit_as(st, "c", "carol");
  uint64_t ids[16] = {0};
  colo_job_filter_t f = {.account = "acct-5"};
  ASSERT_EQ_INT(colo_store_job_list(st, &f, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 2);
  ASSERT_EQ_INT(ids[1], a);
  ASSERT_EQ_INT(ids[2], c);
  memset(ids, 0, sizeof ids);
  f.account = "acct-6"; /* b's new spec */
  f.state_mask = 1u << COLO_JOB_PENDING;
  ASSERT_EQ_INT(colo_store_job_list(st, &f, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 1);
  ASSERT_EQ_INT(ids[1], b);
  memset(ids, 0, sizeof ids);
  f.account = "";
  ASSERT_EQ_INT(colo_store_job_list(st, &f, 100, collect_ids, ids), 0);
  ASSERT_EQ_INT(ids[0], 0);
  /* account_max_jobs: a and c are acct-5's, PENDING */
  colo_job_room_t room = {"x", UINT32_MAX, "acct-5", 2};
  ASSERT_EQ_INT(colo_store_job_room(st, &room), COLO_ETOOBIG);
  ASSERT_EQ_STR(colo_store_errmsg(st), "account \"acct-5\" has 2 jobs that have not ended, as many "
                                       "as account_max_jobs allows: cancel one, or wait for one "
                                       "to end");
  room.account_max = 3;
  ASSERT_EQ_INT(colo_store_job_room(st, &room), 0);
  room.owner = "alice"; /* the owner's limit is said first */
  room.owner_max = 1;
  ASSERT_EQ_INT(colo_store_job_room(st, &room), COLO_ETOOBIG);
  ASSERT(strstr(colo_store_errmsg(st), "\"alice\" has 1 jobs that have not ended, as many as "
                                       "owner_max_jobs allows"));
  colo_job_room_t none = {"", UINT32_MAX, "", 0}; /* none allowed without an account */
  ASSERT_EQ_INT(colo_store_job_room(st, &none), COLO_ETOOBIG);
  ASSERT_EQ_STR(colo_store_errmsg(st), "0 jobs without an account have not ended, as many as "
                                       "account_max_jobs allows: cancel one, or wait for one to "
                                       "end");
  /* an ended job no longer counts */
  ASSERT_EQ_INT(colo_store_job_transition(st, a, COLO_JOB_CANCELLED, "x", 0, 3000, NULL), 0);
  room = (colo_job_room_t){"x", UINT32_MAX, "acct-5", 2};
  ASSERT_EQ_INT(colo_store_job_room(st, &room), 0);
  colo_store_close(st);
  /* reopened, the callback set again: nothing left to read */
  st = open_fresh();
  ASSERT_EQ_INT(colo_store_set_usage_key(st, test_usage_key), 0);
  ASSERT_EQ_INT(sql_int("SELECT count(*) FROM jobs WHERE account IS NULL"), 0);
  colo_store_close(st);
}

TEST_MAIN()
