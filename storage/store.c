/* colo_store: SQLite schema, migrations and the typed store API. Every statement is prepared
 * once (the STMTS table below) and reset after use. */
#include "store.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "../common/error.h"
#include "../common/grow.h"

/* ---- schema: one entry per version, applied in order inside one transaction each ---- */

static const char *const MIGRATIONS[] = {
    /* 1: hosts, jobs and their events */
    "CREATE TABLE hosts ("
    "  id INTEGER PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  address TEXT NOT NULL,"
    "  state INTEGER NOT NULL,"
    "  session INTEGER NOT NULL DEFAULT 0,"
    "  devices BLOB NOT NULL DEFAULT x'',"
    "  memory_bytes INTEGER NOT NULL DEFAULT 0,"
    "  cpu_count INTEGER NOT NULL DEFAULT 0,"
    "  registered_ms INTEGER NOT NULL,"
    "  last_seen_ms INTEGER NOT NULL);"
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT NOT NULL,"
    "  state INTEGER NOT NULL CHECK (state BETWEEN 1 AND 6)," /* 1..7 from v8 */
    "  spec BLOB NOT NULL,"
    "  attempt INTEGER NOT NULL DEFAULT 0,"
    "  restarts INTEGER NOT NULL DEFAULT 0,"
    "  max_restarts INTEGER NOT NULL,"
    "  message TEXT NOT NULL DEFAULT '',"
    "  created_ms INTEGER NOT NULL,"
    "  updated_ms INTEGER NOT NULL);"
    "CREATE INDEX jobs_state ON jobs(state);"
    "CREATE TABLE job_events ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  state INTEGER NOT NULL,"
    "  message TEXT NOT NULL,"
    "  time_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, seq));",

    /* 2: attempts with their ranks, checkpoints, idempotent submits, chosen resume step */
    "ALTER TABLE jobs ADD COLUMN client_token TEXT;"
    "CREATE UNIQUE INDEX jobs_client_token ON jobs(client_token) WHERE client_token IS NOT NULL;"
    "ALTER TABLE jobs ADD COLUMN resume_step INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE job_attempts ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  attempt INTEGER NOT NULL,"
    "  state INTEGER NOT NULL,"
    "  resume_step INTEGER NOT NULL DEFAULT 0,"
    "  started_ms INTEGER NOT NULL,"
    "  ended_ms INTEGER,"
    "  end_message TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (job_id, attempt));"
    "CREATE TABLE ranks ("
    "  job_id INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  rank INTEGER NOT NULL,"
    "  host_id INTEGER NOT NULL REFERENCES hosts(id),"
    "  device_index INTEGER NOT NULL,"
    "  dp_idx INTEGER NOT NULL,"
    "  tp_idx INTEGER NOT NULL,"
    "  pp_idx INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, attempt, rank),"
    "  FOREIGN KEY (job_id, attempt) REFERENCES job_attempts(job_id, attempt) ON DELETE CASCADE);"
    "CREATE INDEX ranks_host ON ranks(host_id);"
    "CREATE TABLE checkpoints ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  step INTEGER NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  path TEXT NOT NULL,"
    "  manifest_sha256 TEXT NOT NULL,"
    "  bytes INTEGER NOT NULL,"
    "  created_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, step));",

    /* 3: the newest progress record of a job (packed colo.v1.Progress), kept when it ends */
    "ALTER TABLE jobs ADD COLUMN progress BLOB;",

    /* 4: sampled training curves */
    "CREATE TABLE progress_samples ("
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,"
    "  attempt INTEGER NOT NULL,"
    "  step INTEGER NOT NULL,"
    "  loss REAL,"
    "  lr REAL,"
    "  tokens_per_s REAL,"
    "  val_loss REAL,"
    "  time_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (job_id, attempt, step));",

    /* 5: hosts an operator cordoned: no new ranks are placed there */
    "ALTER TABLE hosts ADD COLUMN cordoned INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE hosts ADD COLUMN cordon_reason TEXT NOT NULL DEFAULT '';",

    /* 6: attempts whose ranks an eviction is stopping (desired nowhere), kept across restarts */
    "ALTER TABLE job_attempts ADD COLUMN evicting INTEGER NOT NULL DEFAULT 0;",

    /* 7: who submitted a job (the CN of a user's certificate under mutual TLS; '' otherwise);
     * a client_token is its owner's */
    "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "DROP INDEX jobs_client_token;"
    "CREATE UNIQUE INDEX jobs_owner_token ON jobs(owner, client_token) "
    "WHERE client_token IS NOT NULL;",

    /* 8: TIMED_OUT (7), a state the jobs table's CHECK must admit. A looser CHECK that every row
     * meets changes nothing on disk, so the table's definition is edited in place, as SQLite's
     * ALTER TABLE documentation describes for CHECK constraints, and the schema reloaded;
     * job_attempts.evicting holds why the attempt is stopping (COLO_STOP_*), 2 the time limit */
    "PRAGMA writable_schema = ON;"
    "UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (state BETWEEN 1 AND 6)', "
    "'CHECK (state BETWEEN 1 AND 7)') WHERE type = 'table' AND name = 'jobs';"
    "PRAGMA writable_schema = RESET;",

    /* 9: accounting (colo_store_usage) reads the attempts still running or ended after a
     * window's start: an index on their end, not a scan of every attempt ever; the checkpoints
     * asked of an attempt's ranks (CheckpointJob), counted */
    "CREATE INDEX job_attempts_ended ON job_attempts(ended_ms);"
    "ALTER TABLE job_attempts ADD COLUMN checkpoint_seq INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE checkpoints ADD COLUMN request INTEGER NOT NULL DEFAULT 0;",

    /* 10: held jobs (UpdateJob): not placed until released; by whom (COLO_HOLD_*) and why */
    "ALTER TABLE jobs ADD COLUMN hold INTEGER NOT NULL DEFAULT 0 CHECK (hold BETWEEN 0 AND 2);"
    "ALTER TABLE jobs ADD COLUMN hold_reason TEXT NOT NULL DEFAULT '';",

    /* 11: ended jobs by when they ended (an ended job's updated_ms), for job_retention */
    "CREATE INDEX jobs_ended ON jobs(updated_ms) WHERE state >= 4;",

    /* 12: the device time of deleted jobs, by the hour it was used in, the owner, the account and
     * the kind of device: accounting and fair share outlive the jobs they count */
    "CREATE TABLE usage_hours ("
    "  hour_ms INTEGER NOT NULL,"
    "  owner TEXT NOT NULL,"
    "  account TEXT NOT NULL,"
    "  device INTEGER NOT NULL,"
    "  device_ms INTEGER NOT NULL,"
    "  from_ms INTEGER NOT NULL," /* the first and last moment of it used in the hour */
    "  to_ms INTEGER NOT NULL,"
    "  jobs INTEGER NOT NULL,"
    "  attempts INTEGER NOT NULL,"
    "  PRIMARY KEY (hour_ms, owner, account, device)) WITHOUT ROWID;",

    /* 13: the account a job is charged to (JobSpec.account), for lists by account; NULL until
     * read from the spec (colo_store_set_usage_key reads those of older rows) */
    "ALTER TABLE jobs ADD COLUMN account TEXT;"
    "CREATE INDEX jobs_account_unread ON jobs(id) WHERE account IS NULL;",

    /* 14: a cordon to come (a maintenance window): when, and whether its jobs are stopped then */
    "ALTER TABLE hosts ADD COLUMN cordon_at_ms INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE hosts ADD COLUMN cordon_evict INTEGER NOT NULL DEFAULT 0;",

    /* 15: the validation loss measured at a checkpoint's step (NULL: none was), for
     * checkpoint.keep_best */
    "ALTER TABLE checkpoints ADD COLUMN val_loss REAL;",

    /* 16: the per-set validation losses of a curve's evaluations (data.val_sources) */
    "ALTER TABLE progress_samples ADD COLUMN val_sets BLOB;",

    /* 17: train.best_metric's score at a checkpoint's step (NULL: none; it then ranks by
     * val_loss), for checkpoint.keep_best */
    "ALTER TABLE checkpoints ADD COLUMN score REAL;",
};
#define N_MIGRATIONS ((int)(sizeof MIGRATIONS / sizeof MIGRATIONS[0]))
_Static_assert(N_MIGRATIONS == COLO_STORE_SCHEMA_VERSION, "one migration per schema version");

/* ---- prepared statements ---- */

#define JOB_COLS                                                                                   \
  "id, name, state, attempt, restarts, max_restarts, created_ms, updated_ms, message, "            \
  "resume_step, coalesce(client_token, ''), spec, progress, owner, hold, hold_reason"

#define HOST_COLS                                                                                  \
  "id, name, address, state, session, memory_bytes, cpu_count, registered_ms, last_seen_ms, "      \
  "devices, cordoned, cordon_reason, cordon_at_ms, cordon_evict"

#define STMTS(XX)                                                                                  \
  XX(BEGIN, "BEGIN IMMEDIATE")                                                                     \
  XX(COMMIT, "COMMIT")                                                                             \
  XX(ROLLBACK, "ROLLBACK")                                                                         \
  XX(JOB_INSERT, "INSERT INTO jobs (name, state, spec, max_restarts, created_ms, updated_ms, "     \
                 "message, client_token, owner, account) VALUES (?1, 1, ?2, ?3, ?4, ?4, "          \
                 "'submitted', ?5, ?6, ?7)")                                                       \
  XX(JOB_GET, "SELECT " JOB_COLS " FROM jobs WHERE id = ?1")                                       \
  XX(JOB_BY_TOKEN, "SELECT " JOB_COLS " FROM jobs WHERE client_token = ?1 AND owner = ?2")         \
  XX(JOB_LIST, "SELECT " JOB_COLS " FROM jobs WHERE id > ?1 AND (?2 = 0 OR ((?2 >> state) & 1)) "  \
               "AND (?4 IS NULL OR substr(name, 1, length(?4)) = ?4) "                             \
               "AND (?5 IS NULL OR owner = ?5) AND (?9 IS NULL OR account = ?9) "                  \
               "ORDER BY id LIMIT ?3")                                                             \
  XX(JOB_LIST_LIVE, "SELECT " JOB_COLS " FROM jobs WHERE id > ?1 AND state IN (?6, ?7, ?8) "       \
                    "AND (?4 IS NULL OR substr(name, 1, length(?4)) = ?4) "                        \
                    "AND (?5 IS NULL OR owner = ?5) AND (?9 IS NULL OR account = ?9) "             \
                    "ORDER BY id LIMIT ?3")                                                        \
  XX(JOB_COUNTS, "SELECT state, count(*) FROM jobs GROUP BY state")                                \
  XX(JOB_UNFINISHED, "SELECT count(*) FROM jobs WHERE state IN (1, 2, 3) AND owner = ?1")          \
  XX(JOB_UNFINISHED_ACCOUNT,                                                                       \
     "SELECT count(*) FROM jobs WHERE state IN (1, 2, 3) AND account = ?1")                        \
  XX(JOB_UPDATE, "UPDATE jobs SET state = ?2, attempt = ?3, restarts = ?4, message = ?5, "         \
                 "updated_ms = ?6, resume_step = ?7, hold = ?8, hold_reason = ?9 WHERE id = ?1")   \
  XX(JOB_ENDED_BEFORE, "SELECT id, updated_ms FROM jobs INDEXED BY jobs_ended WHERE state >= 4 "   \
                       "AND updated_ms < ?1 AND (updated_ms, id) > (?3, ?4) "                      \
                       "ORDER BY updated_ms, id LIMIT ?2")                                         \
  XX(JOB_DELETE, "DELETE FROM jobs WHERE id = ?1 AND state >= 4 AND (?2 = 0 OR updated_ms < ?2)")  \
  XX(JOB_ROLLUP, "SELECT owner, spec, updated_ms FROM jobs WHERE id = ?1 AND state >= 4 "          \
                 "AND (?2 = 0 OR updated_ms < ?2)")                                                \
  XX(ATTEMPT_SPANS,                                                                                \
     "SELECT a.started_ms, coalesce(a.ended_ms, ?2), (SELECT count(*) FROM ranks r "               \
     "WHERE r.job_id = a.job_id AND r.attempt = a.attempt) FROM job_attempts a "                   \
     "WHERE a.job_id = ?1 ORDER BY a.attempt")                                                     \
  XX(HOUR_ADD,                                                                                     \
     "INSERT INTO usage_hours (hour_ms, owner, account, device, device_ms, from_ms, "              \
     "to_ms, jobs, attempts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO "          \
     "UPDATE SET device_ms = device_ms + excluded.device_ms, "                                     \
     "from_ms = min(from_ms, excluded.from_ms), to_ms = max(to_ms, excluded.to_ms), "              \
     "jobs = jobs + excluded.jobs, attempts = attempts + excluded.attempts")                       \
  XX(HOUR_LIST, "SELECT hour_ms, owner, account, device, device_ms, from_ms, to_ms, jobs, "        \
                "attempts FROM usage_hours WHERE hour_ms > ?1 - 3600000 AND hour_ms < ?2 "         \
                "AND to_ms > ?1 AND from_ms < ?2 ORDER BY hour_ms, owner, account, device")        \
  XX(JOB_RESPEC, "UPDATE jobs SET spec = ?2, max_restarts = ?3, account = ?4 WHERE id = ?1")       \
  XX(ACCOUNT_UNREAD, "SELECT id, spec FROM jobs INDEXED BY jobs_account_unread "                   \
                     "WHERE account IS NULL ORDER BY id LIMIT 1000")                               \
  XX(ACCOUNT_SET, "UPDATE jobs SET account = ?2 WHERE id = ?1")                                    \
  XX(EVENT_INSERT, "INSERT INTO job_events (job_id, seq, state, message, time_ms) "                \
                   "VALUES (?1, (SELECT coalesce(max(seq), 0) + 1 FROM job_events "                \
                   "WHERE job_id = ?1), ?2, ?3, ?4)")                                              \
  XX(EVENT_LIST, "SELECT job_id, seq, state, message, time_ms FROM job_events "                    \
                 "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq")                                    \
  XX(EVENT_TAIL, "SELECT job_id, seq, state, message, time_ms FROM job_events "                    \
                 "WHERE job_id = ?1 AND seq > (SELECT coalesce(max(seq), 0) FROM job_events "      \
                 "WHERE job_id = ?1) - ?2 ORDER BY seq")                                           \
  XX(ATTEMPT_INSERT, "INSERT INTO job_attempts (job_id, attempt, state, resume_step, started_ms) " \
                     "VALUES (?1, ?2, 2, ?3, ?4)")                                                 \
  XX(ATTEMPT_END, "UPDATE job_attempts SET state = ?3, ended_ms = ?4, end_message = ?5 "           \
                  "WHERE job_id = ?1 AND attempt = ?2 AND ended_ms IS NULL")                       \
  XX(ATTEMPT_EVICT, "UPDATE job_attempts SET evicting = ?3 "                                       \
                    "WHERE job_id = ?1 AND attempt = ?2 AND ended_ms IS NULL")                     \
  XX(ATTEMPT_EVICTING, "SELECT evicting, started_ms, checkpoint_seq FROM job_attempts "            \
                       "WHERE job_id = ?1 AND attempt = ?2")                                       \
  XX(ATTEMPT_CKPT, "UPDATE job_attempts SET checkpoint_seq = checkpoint_seq + 1 "                  \
                   "WHERE job_id = ?1 AND attempt = ?2 AND ended_ms IS NULL "                      \
                   "RETURNING checkpoint_seq")                                                     \
  XX(RANK_INSERT, "INSERT INTO ranks (job_id, attempt, rank, host_id, device_index, dp_idx, "      \
                  "tp_idx, pp_idx) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")                       \
  XX(RANK_LIST, "SELECT rank, host_id, device_index, dp_idx, tp_idx, pp_idx FROM ranks "           \
                "WHERE job_id = ?1 AND attempt = ?2 ORDER BY rank")                                \
  XX(HOST_UPSERT, "INSERT INTO hosts (name, address, state, session, devices, memory_bytes, "      \
                  "cpu_count, registered_ms, last_seen_ms) VALUES (?1, ?2, 1, 1, ?3, ?4, ?5, ?6, " \
                  "?6) ON CONFLICT(name) DO UPDATE SET address = excluded.address, state = 1, "    \
                  "session = session + 1, devices = excluded.devices, "                            \
                  "memory_bytes = excluded.memory_bytes, cpu_count = excluded.cpu_count, "         \
                  "registered_ms = excluded.registered_ms, last_seen_ms = excluded.last_seen_ms")  \
  XX(HOST_BY_NAME, "SELECT " HOST_COLS " FROM hosts WHERE name = ?1")                              \
  XX(HOST_GET, "SELECT " HOST_COLS " FROM hosts WHERE id = ?1")                                    \
  XX(HOST_LIST, "SELECT " HOST_COLS " FROM hosts ORDER BY name")                                   \
  XX(HOST_STATE,                                                                                   \
     "UPDATE hosts SET state = ?2, last_seen_ms = max(last_seen_ms, ?3) WHERE id = ?1")            \
  XX(HOST_TOUCH, "UPDATE hosts SET last_seen_ms = ?2 WHERE id = ?1")                               \
  XX(HOST_CORDON, "UPDATE hosts SET cordoned = ?2, cordon_reason = ?3, cordon_at_ms = ?4, "        \
                  "cordon_evict = ?5 WHERE id = ?1")                                               \
  XX(SAMPLE_INSERT,                                                                                \
     "INSERT INTO progress_samples (job_id, attempt, step, loss, lr, tokens_per_s, val_loss, "     \
     "time_ms, val_sets) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "                             \
     "ON CONFLICT(job_id, attempt, step) DO "                                                      \
     "UPDATE SET loss = coalesce(excluded.loss, loss), lr = coalesce(excluded.lr, lr), "           \
     "tokens_per_s = coalesce(excluded.tokens_per_s, tokens_per_s), "                              \
     "val_loss = coalesce(excluded.val_loss, val_loss), "                                          \
     "val_sets = coalesce(excluded.val_sets, val_sets)")                                           \
  XX(SAMPLE_LIST, "SELECT attempt, step, loss, lr, tokens_per_s, val_loss, time_ms, val_sets "     \
                  "FROM progress_samples WHERE job_id = ?1 ORDER BY attempt, step")                \
  XX(CKPT_INSERT,                                                                                  \
     "INSERT OR REPLACE INTO checkpoints (job_id, step, attempt, path, manifest_sha256, bytes, "   \
     "created_ms, request, val_loss, score) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)")     \
  XX(CKPT_PRUNE, "DELETE FROM checkpoints WHERE job_id = ?1 AND request = 0 AND step NOT IN "      \
                 "(SELECT step FROM checkpoints WHERE job_id = ?1 AND request = 0 "                \
                 "ORDER BY step DESC LIMIT ?2) AND (?3 = 0 OR step IS NOT "                        \
                 "(SELECT step FROM checkpoints WHERE job_id = ?1 AND request = 0 AND "            \
                 "coalesce(-score, val_loss) IS NOT NULL ORDER BY coalesce(-score, val_loss), "    \
                 "step DESC LIMIT 1))")                                                            \
  XX(JOB_PROGRESS, "UPDATE jobs SET progress = ?2 WHERE id = ?1")                                  \
  XX(CKPT_DROP_AFTER, "DELETE FROM checkpoints WHERE job_id = ?1 AND step > ?2")                   \
  XX(CKPT_LIST,                                                                                    \
     "SELECT job_id, step, attempt, path, manifest_sha256, bytes, created_ms, request, "           \
     "val_loss, score FROM checkpoints WHERE job_id = ?1 ORDER BY step DESC")                      \
  XX(USAGE, "SELECT a.job_id, a.attempt, j.owner, j.name, j.spec, a.started_ms, "                  \
            "coalesce(a.ended_ms, 0), (SELECT count(*) FROM ranks r WHERE r.job_id = a.job_id "    \
            "AND r.attempt = a.attempt) FROM job_attempts a INDEXED BY job_attempts_ended "        \
            "JOIN jobs j ON j.id = a.job_id "                                                      \
            "WHERE a.started_ms < ?2 AND (a.ended_ms IS NULL OR a.ended_ms > ?1) "                 \
            "ORDER BY a.job_id, a.attempt")

enum {
#define XX(name, sql) S_##name,
  STMTS(XX)
#undef XX
      N_STMTS
};

static const char *const STMT_SQL[] = {
#define XX(name, sql) sql,
    STMTS(XX)
#undef XX
};

/* A deleting transaction's device hours, summed by key before they are written (hours_flush) */
typedef struct {
  int64_t hour_ms;
  char owner[129];
  colo_usage_key_t key;
  int64_t device_ms, from_ms, to_ms;
  int jobs, attempts;
} hour_row_t;

struct colo_store_s {
  sqlite3 *db;
  sqlite3_stmt *stmt[N_STMTS];
  colo_store_usage_key_cb usage_key;
  hour_row_t *hours;
  size_t n_hours, cap_hours;
  char errmsg[512];
};

/* ---- small helpers ---- */

static int db_fail(colo_store_t *st, int rc, const char *what) {
  snprintf(st->errmsg, sizeof st->errmsg, "%s: %s", what, sqlite3_errmsg(st->db));
  if (rc == SQLITE_CONSTRAINT)
    return COLO_EEXIST;
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
    return COLO_EBUSY;
  return COLO_EDB;
}

static sqlite3_stmt *stmt(colo_store_t *st, int which) {
  sqlite3_stmt *s = st->stmt[which];
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return s;
}

static void copy_text(char *dst, size_t cap, sqlite3_stmt *s, int col) {
  const unsigned char *t = sqlite3_column_text(s, col);
  snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

static int step_done(colo_store_t *st, sqlite3_stmt *s, const char *what) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return db_fail(st, rc, what);
  return 0;
}

static int begin(colo_store_t *st) {
  return step_done(st, stmt(st, S_BEGIN), "begin");
}

static int commit(colo_store_t *st) {
  return step_done(st, stmt(st, S_COMMIT), "commit");
}

static void rollback(colo_store_t *st) {
  if (!sqlite3_get_autocommit(st->db)) {
    sqlite3_step(stmt(st, S_ROLLBACK));
    sqlite3_reset(st->stmt[S_ROLLBACK]);
  }
}

static void *dup_blob(const void *p, size_t n) {
  void *d = malloc(n ? n : 1);
  if (d && n)
    memcpy(d, p, n);
  return d;
}

/* ---- states ---- */

const char *colo_job_state_name(int state) {
  static const char *names[] = {"UNKNOWN",   "PENDING", "RUNNING",   "RESTARTING",
                                "SUCCEEDED", "FAILED",  "CANCELLED", "TIMED_OUT"};
  return (state >= 1 && state <= COLO_JOB_STATE_MAX) ? names[state] : names[0];
}

int colo_job_state_terminal(int state) {
  return state == COLO_JOB_SUCCEEDED || state == COLO_JOB_FAILED || state == COLO_JOB_CANCELLED ||
         state == COLO_JOB_TIMED_OUT;
}

int colo_job_transition_allowed(int from, int to) {
  /* allowed[from] is a bit set of target states */
#define B(s) (1u << (s))
  static const unsigned allowed[COLO_JOB_STATE_MAX + 1] = {
      [COLO_JOB_PENDING] = B(COLO_JOB_RUNNING) | B(COLO_JOB_CANCELLED) | B(COLO_JOB_FAILED),
      [COLO_JOB_RUNNING] = B(COLO_JOB_SUCCEEDED) | B(COLO_JOB_FAILED) | B(COLO_JOB_RESTARTING) |
                           B(COLO_JOB_CANCELLED) | B(COLO_JOB_TIMED_OUT),
      [COLO_JOB_RESTARTING] = B(COLO_JOB_RUNNING) | B(COLO_JOB_FAILED) | B(COLO_JOB_CANCELLED),
      [COLO_JOB_FAILED] = B(COLO_JOB_PENDING),
      [COLO_JOB_CANCELLED] = B(COLO_JOB_PENDING),
      [COLO_JOB_TIMED_OUT] = B(COLO_JOB_PENDING),
  };
#undef B
  if (from < 1 || from > COLO_JOB_STATE_MAX || to < 1 || to > COLO_JOB_STATE_MAX)
    return 0;
  return (allowed[from] >> to) & 1u;
}

/* ---- open, migrate, close ---- */

static int exec(colo_store_t *st, const char *sql, const char *what) {
  char *msg = NULL;
  int rc = sqlite3_exec(st->db, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK) {
    snprintf(st->errmsg, sizeof st->errmsg, "%s: %s", what, msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return COLO_EDB;
  }
  return 0;
}

static int user_version(colo_store_t *st) {
  sqlite3_stmt *s;
  int v = -1;
  if (sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK) {
    if (sqlite3_step(s) == SQLITE_ROW)
      v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
  }
  return v;
}

static int migrate(colo_store_t *st, int target) {
  int v = user_version(st);
  if (v < 0) {
    snprintf(st->errmsg, sizeof st->errmsg, "cannot read the schema version: %s",
             sqlite3_errmsg(st->db));
    return COLO_EDB;
  }
  if (v > N_MIGRATIONS) {
    snprintf(st->errmsg, sizeof st->errmsg,
             "database schema version %d is newer than this build supports (%d)", v, N_MIGRATIONS);
    return COLO_ESTATE;
  }
  for (; v < target; v++) {
    char what[64], bump[64];
    snprintf(what, sizeof what, "migration to schema version %d", v + 1);
    snprintf(bump, sizeof bump, "PRAGMA user_version = %d", v + 1);
    int rc = exec(st, "BEGIN IMMEDIATE", what);
    if (rc == 0)
      rc = exec(st, MIGRATIONS[v], what);
    if (rc == 0)
      rc = exec(st, bump, what);
    if (rc == 0)
      rc = exec(st, "COMMIT", what);
    if (rc < 0) {
      char keep[512];
      snprintf(keep, sizeof keep, "%s", st->errmsg);
      exec(st, "ROLLBACK", "rollback");
      snprintf(st->errmsg, sizeof st->errmsg, "%s", keep);
      return rc;
    }
  }
  return 0;
}

int colo_store_open_at(const char *path, int version, colo_store_t **out, char *err,
                       size_t errlen) {
  colo_store_t *st = calloc(1, sizeof *st);
  if (!st) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  int rc = sqlite3_open_v2(path, &st->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    snprintf(err, errlen, "cannot open database %s: %s", path,
             st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
    sqlite3_close(st->db);
    free(st);
    return COLO_EDB;
  }
  sqlite3_busy_timeout(st->db, 5000);
  int err_rc = exec(st, "PRAGMA journal_mode = WAL", "enable WAL");
  if (err_rc == 0)
    err_rc = exec(st, "PRAGMA synchronous = FULL", "set synchronous");
  if (err_rc == 0)
    err_rc = exec(st, "PRAGMA foreign_keys = ON", "enable foreign keys");
  if (err_rc == 0)
    err_rc = migrate(st, version);
  if (err_rc == 0 && version == N_MIGRATIONS) {
    for (int i = 0; i < N_STMTS; i++) {
      if (sqlite3_prepare_v3(st->db, STMT_SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &st->stmt[i],
                             NULL) != SQLITE_OK) {
        snprintf(st->errmsg, sizeof st->errmsg, "prepare statement %d: %s", i,
                 sqlite3_errmsg(st->db));
        err_rc = COLO_EDB;
        break;
      }
    }
  }
  if (err_rc < 0) {
    snprintf(err, errlen, "%s: %s", path, st->errmsg);
    colo_store_close(st);
    return err_rc;
  }
  *out = st;
  return 0;
}

int colo_store_open(const char *path, colo_store_t **out, char *err, size_t errlen) {
  return colo_store_open_at(path, COLO_STORE_SCHEMA_VERSION, out, err, errlen);
}

void colo_store_close(colo_store_t *st) {
  if (!st)
    return;
  for (int i = 0; i < N_STMTS; i++)
    sqlite3_finalize(st->stmt[i]);
  sqlite3_close(st->db);
  free(st->hours);
  free(st);
}

const char *colo_store_errmsg(const colo_store_t *st) {
  return st->errmsg;
}

int colo_store_schema_version(colo_store_t *st) {
  return user_version(st);
}

int colo_store_integrity_check(colo_store_t *st) {
  sqlite3_stmt *s;
  int rc = COLO_EDB;
  if (sqlite3_prepare_v2(st->db, "PRAGMA integrity_check", -1, &s, NULL) != SQLITE_OK)
    return db_fail(st, SQLITE_ERROR, "integrity_check");
  if (sqlite3_step(s) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(s, 0);
    if (t && strcmp((const char *)t, "ok") == 0)
      rc = 0;
    else
      snprintf(st->errmsg, sizeof st->errmsg, "integrity_check: %s", t ? (const char *)t : "?");
  }
  sqlite3_finalize(s);
  return rc;
}

/* ---- jobs ---- */

void colo_job_clear(colo_job_t *job) {
  free(job->spec);
  free(job->progress);
  memset(job, 0, sizeof *job);
}

static int read_job(sqlite3_stmt *s, colo_job_t *j) {
  memset(j, 0, sizeof *j);
  j->id = (uint64_t)sqlite3_column_int64(s, 0);
  copy_text(j->name, sizeof j->name, s, 1);
  j->state = sqlite3_column_int(s, 2);
  j->attempt = (uint32_t)sqlite3_column_int64(s, 3);
  j->restarts = (uint32_t)sqlite3_column_int64(s, 4);
  j->max_restarts = (uint32_t)sqlite3_column_int64(s, 5);
  j->created_ms = sqlite3_column_int64(s, 6);
  j->updated_ms = sqlite3_column_int64(s, 7);
  copy_text(j->message, sizeof j->message, s, 8);
  j->resume_step = (uint64_t)sqlite3_column_int64(s, 9);
  copy_text(j->client_token, sizeof j->client_token, s, 10);
  j->spec_len = (size_t)sqlite3_column_bytes(s, 11);
  j->spec = dup_blob(sqlite3_column_blob(s, 11), j->spec_len);
  copy_text(j->owner, sizeof j->owner, s, 13);
  j->hold = sqlite3_column_int(s, 14);
  copy_text(j->hold_reason, sizeof j->hold_reason, s, 15);
  j->progress_len = (size_t)sqlite3_column_bytes(s, 12);
  j->progress = j->progress_len ? dup_blob(sqlite3_column_blob(s, 12), j->progress_len) : NULL;
  if (j->progress_len && !j->progress) {
    free(j->spec);
    j->spec = NULL;
  }
  return j->spec ? 0 : COLO_ENOMEM;
}

static int job_get_in(colo_store_t *st, uint64_t id, colo_job_t *out) {
  sqlite3_stmt *s = stmt(st, S_JOB_GET);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    rc = read_job(s, out);
    sqlite3_reset(s);
    return rc;
  }
  sqlite3_reset(s);
  if (rc == SQLITE_DONE) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu not found", (unsigned long long)id);
    return COLO_ENOENT;
  }
  return db_fail(st, rc, "get job");
}

int colo_store_job_get(colo_store_t *st, uint64_t id, colo_job_t *out) {
  return job_get_in(st, id, out);
}

static int add_event(colo_store_t *st, uint64_t job_id, int state, const char *msg, int64_t now) {
  sqlite3_stmt *s = stmt(st, S_EVENT_INSERT);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int(s, 2, state);
  sqlite3_bind_text(s, 3, msg ? msg : "", -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 4, now);
  return step_done(st, s, "insert job event");
}

int colo_store_job_insert(colo_store_t *st, const char *name, const uint8_t *spec, size_t spec_len,
                          uint32_t max_restarts, const char *client_token,
                          const colo_job_room_t *room, int64_t now_ms, colo_job_t *out) {
  const char *owner = room->owner;
  int rc;
  colo_job_t tmp;
  CHECK_GOTO(begin(st), rc, fail);
  if (client_token && client_token[0]) {
    sqlite3_stmt *s = stmt(st, S_JOB_BY_TOKEN);
    sqlite3_bind_text(s, 1, client_token, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, owner ? owner : "", -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW) {
      rc = read_job(s, &tmp);
      sqlite3_reset(s);
      rollback(st);
      if (rc == 0) {
        *out = tmp;
        rc = COLO_EEXIST;
        snprintf(st->errmsg, sizeof st->errmsg, "client_token already used by job %llu",
                 (unsigned long long)tmp.id);
      }
      return rc;
    }
    sqlite3_reset(s);
    if (r != SQLITE_DONE) {
      rc = db_fail(st, r, "look up client_token");
      goto fail;
    }
  }
  CHECK_GOTO(colo_store_job_room(st, room), rc, fail);
  sqlite3_stmt *s = stmt(st, S_JOB_INSERT);
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_blob(s, 2, spec, (int)spec_len, SQLITE_STATIC);
  sqlite3_bind_int64(s, 3, max_restarts);
  sqlite3_bind_int64(s, 4, now_ms);
  if (client_token && client_token[0])
    sqlite3_bind_text(s, 5, client_token, -1, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 5);
  sqlite3_bind_text(s, 6, owner ? owner : "", -1, SQLITE_STATIC);
  colo_usage_key_t key;
  if (st->usage_key) {
    st->usage_key(spec, spec_len, &key);
    sqlite3_bind_text(s, 7, key.account, -1, SQLITE_TRANSIENT);
  } else {
    sqlite3_bind_null(s, 7); /* read when a key callback is set */
  }
  CHECK_GOTO(step_done(st, s, "insert job"), rc, fail);
  uint64_t id = (uint64_t)sqlite3_last_insert_rowid(st->db);
  CHECK_GOTO(add_event(st, id, COLO_JOB_PENDING, "submitted", now_ms), rc, fail);
  CHECK_GOTO(job_get_in(st, id, &tmp), rc, fail);
  rc = commit(st);
  if (rc < 0) {
    colo_job_clear(&tmp);
    goto fail;
  }
  *out = tmp;
  return 0;
fail:
  rollback(st);
  return rc;
}

int colo_store_job_list(colo_store_t *st, const colo_job_filter_t *f, uint32_t limit,
                        colo_store_job_cb cb, void *data) {
  /* Jobs that have not ended are few beside those that have: asked for only them, the list
   * reads them through jobs_state rather than every row past after_id (a full scan of the
   * history each scheduling pass otherwise). */
  const uint32_t live =
      (1u << COLO_JOB_PENDING) | (1u << COLO_JOB_RUNNING) | (1u << COLO_JOB_RESTARTING);
  int only_live = f->state_mask && !(f->state_mask & ~live);
  sqlite3_stmt *s = stmt(st, only_live ? S_JOB_LIST_LIVE : S_JOB_LIST);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)f->after_id);
  if (only_live) {
    int k = 6; /* unused places stay 0, a state no job has */
    for (int state = COLO_JOB_PENDING; state <= COLO_JOB_RESTARTING; state++)
      if (f->state_mask & (1u << state))
        sqlite3_bind_int(s, k++, state);
    for (; k <= 8; k++)
      sqlite3_bind_int(s, k, 0);
  } else {
    sqlite3_bind_int64(s, 2, f->state_mask);
  }
  sqlite3_bind_int64(s, 3, limit);
  if (f->name_prefix) /* unbound parameters are NULL: any */
    sqlite3_bind_text(s, 4, f->name_prefix, -1, SQLITE_STATIC);
  if (f->owner)
    sqlite3_bind_text(s, 5, f->owner, -1, SQLITE_STATIC);
  if (f->account)
    sqlite3_bind_text(s, 9, f->account, -1, SQLITE_STATIC);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_job_t j;
    if (read_job(s, &j) < 0) {
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
      return COLO_ENOMEM;
    }
    int stop = cb(&j, data);
    colo_job_clear(&j);
    if (stop)
      break;
  }
  sqlite3_reset(s);
  sqlite3_clear_bindings(s); /* the next list may take any name or owner */
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "list jobs");
  return 0;
}

int colo_store_job_unfinished(colo_store_t *st, const char *owner, uint64_t *n) {
  sqlite3_stmt *s = stmt(st, S_JOB_UNFINISHED);
  sqlite3_bind_text(s, 1, owner, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW)
    *n = (uint64_t)sqlite3_column_int64(s, 0);
  sqlite3_reset(s);
  return rc == SQLITE_ROW ? 0 : db_fail(st, rc, "count unfinished jobs");
}

int colo_store_job_room(colo_store_t *st, const colo_job_room_t *room) {
  const char *owner = room->owner ? room->owner : "";
  const char *account = room->account ? room->account : "";
  uint64_t n = 0;
  int rc = 0, by_account = 0, over = 0;
  if (room->owner_max != UINT32_MAX && (rc = colo_store_job_unfinished(st, owner, &n)) == 0)
    over = n >= room->owner_max;
  if (rc == 0 && !over && room->account_max != UINT32_MAX) {
    sqlite3_stmt *s = stmt(st, S_JOB_UNFINISHED_ACCOUNT);
    sqlite3_bind_text(s, 1, account, -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW)
      n = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    rc = r == SQLITE_ROW ? 0 : db_fail(st, r, "count an account's unfinished jobs");
    by_account = 1;
    over = rc == 0 && n >= room->account_max;
  }
  if (rc < 0 || !over)
    return rc;
  const char *who = by_account ? account : owner;
  if (by_account && !who[0])
    snprintf(st->errmsg, sizeof st->errmsg,
             "%llu jobs without an account have not ended, as many as account_max_jobs allows: "
             "cancel one, or wait for one to end",
             (unsigned long long)n);
  else
    snprintf(st->errmsg, sizeof st->errmsg,
             "%s%s%s%s has %llu jobs that have not ended, as many as %s allows: cancel one, or "
             "wait for one to end",
             by_account ? "account " : "", who[0] ? "\"" : "", who[0] ? who : "their owner",
             who[0] ? "\"" : "", (unsigned long long)n,
             by_account ? "account_max_jobs" : "owner_max_jobs");
  return COLO_ETOOBIG;
}

int colo_store_job_counts(colo_store_t *st, uint32_t *counts) {
  sqlite3_stmt *s = stmt(st, S_JOB_COUNTS);
  uint32_t tmp[COLO_JOB_STATE_MAX + 1] = {0};
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int state = sqlite3_column_int(s, 0);
    if (state >= 1 && state <= COLO_JOB_STATE_MAX)
      tmp[state] = (uint32_t)sqlite3_column_int64(s, 1);
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return db_fail(st, rc, "count jobs");
  memcpy(counts, tmp, sizeof tmp);
  return 0;
}

static int update_job(colo_store_t *st, const colo_job_t *j) {
  sqlite3_stmt *s = stmt(st, S_JOB_UPDATE);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)j->id);
  sqlite3_bind_int(s, 2, j->state);
  sqlite3_bind_int64(s, 3, j->attempt);
  sqlite3_bind_int64(s, 4, j->restarts);
  sqlite3_bind_text(s, 5, j->message, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 6, j->updated_ms);
  sqlite3_bind_int64(s, 7, (sqlite3_int64)j->resume_step);
  sqlite3_bind_int(s, 8, j->hold);
  sqlite3_bind_text(s, 9, j->hold_reason, -1, SQLITE_STATIC);
  return step_done(st, s, "update job");
}

/* Ends a job's transaction: writes its row and an event (in `state`, saying `msg`), commits, and
 * hands the row to *out (or clears it where out is NULL); on a failure, rolls back and clears it.
 */
static int job_tx_done(colo_store_t *st, colo_job_t *j, int state, const char *msg, int64_t now_ms,
                       colo_job_t *out) {
  int rc = update_job(st, j);
  if (rc == 0)
    rc = add_event(st, j->id, state, msg, now_ms);
  if (rc == 0)
    rc = commit(st);
  if (rc < 0) {
    colo_job_clear(j);
    rollback(st);
    return rc;
  }
  if (out)
    *out = *j;
  else
    colo_job_clear(j);
  return 0;
}

/* interrupted: RESTARTING without a restart counted, the attempt ended CANCELLED */
static int transition_in(colo_store_t *st, uint64_t id, int to, const char *message,
                         uint64_t resume_step, int interrupted, int64_t now_ms, colo_job_t *out) {
  colo_job_t j;
  int rc;
  if (to == COLO_JOB_RUNNING) {
    snprintf(st->errmsg, sizeof st->errmsg, "entering RUNNING needs colo_store_attempt_begin");
    return COLO_EINVAL;
  }
  CHECK_GOTO(begin(st), rc, fail_nojob);
  CHECK_GOTO(job_get_in(st, id, &j), rc, fail_nojob);
  if (j.state == to) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu is already %s", (unsigned long long)id,
             colo_job_state_name(to));
    rc = COLO_ESTATE;
    goto fail;
  }
  if (interrupted && j.state != COLO_JOB_RUNNING) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu is %s: no attempt to interrupt",
             (unsigned long long)id, colo_job_state_name(j.state));
    rc = COLO_ESTATE;
    goto fail;
  }
  if (!colo_job_transition_allowed(j.state, to)) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu is %s; it cannot become %s",
             (unsigned long long)id, colo_job_state_name(j.state), colo_job_state_name(to));
    rc = COLO_ESTATE;
    goto fail;
  }
  if (j.state == COLO_JOB_RUNNING && j.attempt > 0) {
    sqlite3_stmt *s = stmt(st, S_ATTEMPT_END);
    int attempt_state = to != COLO_JOB_RESTARTING ? to
                        : interrupted             ? COLO_JOB_CANCELLED
                                                  : COLO_JOB_FAILED;
    sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
    sqlite3_bind_int64(s, 2, j.attempt);
    sqlite3_bind_int(s, 3, attempt_state);
    sqlite3_bind_int64(s, 4, now_ms);
    sqlite3_bind_text(s, 5, message ? message : "", -1, SQLITE_STATIC);
    CHECK_GOTO(step_done(st, s, "end attempt"), rc, fail);
  }
  if (to == COLO_JOB_RESTARTING && !interrupted)
    j.restarts++;
  if (to == COLO_JOB_PENDING) { /* a resume */
    j.restarts = 0;
    j.resume_step = resume_step;
  }
  j.state = to;
  snprintf(j.message, sizeof j.message, "%s", message ? message : "");
  j.updated_ms = now_ms;
  if (colo_job_state_terminal(to)) { /* an ended job is not held: resumed, it is placed */
    j.hold = COLO_HOLD_NONE;
    j.hold_reason[0] = '\0';
  }
  return job_tx_done(st, &j, to, j.message, now_ms, out);
fail:
  colo_job_clear(&j);
fail_nojob:
  rollback(st);
  return rc;
}

int colo_store_job_transition(colo_store_t *st, uint64_t id, int to, const char *message,
                              uint64_t resume_step, int64_t now_ms, colo_job_t *out) {
  return transition_in(st, id, to, message, resume_step, 0, now_ms, out);
}

int colo_store_job_update(colo_store_t *st, uint64_t id, const colo_job_update_t *u, int64_t now_ms,
                          colo_job_t *out) {
  colo_job_t j;
  int rc;
  CHECK_GOTO(begin(st), rc, fail_nojob);
  CHECK_GOTO(job_get_in(st, id, &j), rc, fail_nojob);
  if (colo_job_state_terminal(j.state)) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu is %s; a job that ended cannot be changed",
             (unsigned long long)id, colo_job_state_name(j.state));
    rc = COLO_ESTATE;
    goto fail;
  }
  if (u->requeue && j.state != COLO_JOB_RUNNING) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu is %s; only a RUNNING job can be requeued",
             (unsigned long long)id, colo_job_state_name(j.state));
    rc = COLO_ESTATE;
    goto fail;
  }
  if (u->hold > COLO_HOLD_NONE && j.state != COLO_JOB_PENDING && j.state != COLO_JOB_RESTARTING &&
      !u->requeue) {
    snprintf(st->errmsg, sizeof st->errmsg,
             "job %llu is %s; only a job waiting to be placed (PENDING or RESTARTING) can be held "
             "(a RUNNING one with requeue)",
             (unsigned long long)id, colo_job_state_name(j.state));
    rc = COLO_ESTATE;
    goto fail;
  }
  if (u->spec) {
    sqlite3_stmt *s = stmt(st, S_JOB_RESPEC);
    sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
    sqlite3_bind_blob(s, 2, u->spec, (int)u->spec_len, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, u->max_restarts);
    colo_usage_key_t key;
    if (st->usage_key) {
      st->usage_key(u->spec, u->spec_len, &key);
      sqlite3_bind_text(s, 4, key.account, -1, SQLITE_TRANSIENT);
    } else {
      sqlite3_bind_null(s, 4);
    }
    CHECK_GOTO(step_done(st, s, "update job spec"), rc, fail);
    uint8_t *spec = dup_blob(u->spec, u->spec_len);
    if (!spec) {
      rc = COLO_ENOMEM;
      goto fail;
    }
    free(j.spec);
    j.spec = spec;
    j.spec_len = u->spec_len;
    j.max_restarts = u->max_restarts;
  }
  if (u->hold >= COLO_HOLD_NONE) {
    j.hold = u->hold;
    snprintf(j.hold_reason, sizeof j.hold_reason, "%s",
             u->hold && u->hold_reason ? u->hold_reason : "");
    snprintf(j.message, sizeof j.message, "%s", u->message ? u->message : "");
  }
  j.updated_ms = now_ms;
  return job_tx_done(st, &j, j.state, u->message, now_ms, out);
fail:
  colo_job_clear(&j);
fail_nojob:
  rollback(st);
  return rc;
}

int colo_store_job_interrupted(colo_store_t *st, uint64_t id, const char *message, int64_t now_ms,
                               colo_job_t *out) {
  return transition_in(st, id, COLO_JOB_RESTARTING, message, 0, 1, now_ms, out);
}

int colo_store_attempt_begin(colo_store_t *st, uint64_t job_id, const colo_rank_place_t *ranks,
                             size_t n_ranks, uint64_t resume_step, int64_t now_ms,
                             colo_job_t *out) {
  colo_job_t j;
  int rc;
  CHECK_GOTO(begin(st), rc, fail_nojob);
  CHECK_GOTO(job_get_in(st, job_id, &j), rc, fail_nojob);
  if (!colo_job_transition_allowed(j.state, COLO_JOB_RUNNING)) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu is %s; it cannot become RUNNING",
             (unsigned long long)job_id, colo_job_state_name(j.state));
    rc = COLO_ESTATE;
    goto fail;
  }
  j.attempt++;
  sqlite3_stmt *s = stmt(st, S_ATTEMPT_INSERT);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, j.attempt);
  sqlite3_bind_int64(s, 3, (sqlite3_int64)resume_step);
  sqlite3_bind_int64(s, 4, now_ms);
  CHECK_GOTO(step_done(st, s, "insert attempt"), rc, fail);
  for (size_t i = 0; i < n_ranks; i++) {
    s = stmt(st, S_RANK_INSERT);
    sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
    sqlite3_bind_int64(s, 2, j.attempt);
    sqlite3_bind_int64(s, 3, ranks[i].rank);
    sqlite3_bind_int64(s, 4, (sqlite3_int64)ranks[i].host_id);
    sqlite3_bind_int64(s, 5, ranks[i].device_index);
    sqlite3_bind_int64(s, 6, ranks[i].dp_idx);
    sqlite3_bind_int64(s, 7, ranks[i].tp_idx);
    sqlite3_bind_int64(s, 8, ranks[i].pp_idx);
    CHECK_GOTO(step_done(st, s, "insert rank"), rc, fail);
  }
  j.state = COLO_JOB_RUNNING;
  snprintf(j.message, sizeof j.message, "attempt %u started", j.attempt);
  j.updated_ms = now_ms;
  j.resume_step = resume_step;
  return job_tx_done(st, &j, COLO_JOB_RUNNING, j.message, now_ms, out);
fail:
  colo_job_clear(&j);
fail_nojob:
  rollback(st);
  return rc;
}

int colo_store_attempt_ranks(colo_store_t *st, uint64_t job_id, uint32_t attempt,
                             colo_rank_place_t *ranks, size_t cap, size_t *n) {
  sqlite3_stmt *s = stmt(st, S_RANK_LIST);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, attempt);
  size_t k = 0;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (k < cap) {
      ranks[k].rank = (uint32_t)sqlite3_column_int64(s, 0);
      ranks[k].host_id = (uint64_t)sqlite3_column_int64(s, 1);
      ranks[k].device_index = (uint32_t)sqlite3_column_int64(s, 2);
      ranks[k].dp_idx = (uint32_t)sqlite3_column_int64(s, 3);
      ranks[k].tp_idx = (uint32_t)sqlite3_column_int64(s, 4);
      ranks[k].pp_idx = (uint32_t)sqlite3_column_int64(s, 5);
    }
    k++;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return db_fail(st, rc, "list ranks");
  *n = k;
  return k > cap ? COLO_ETOOBIG : 0;
}

int colo_store_attempt_checkpoint(colo_store_t *st, uint64_t job_id, uint32_t attempt,
                                  uint32_t *seq) {
  sqlite3_stmt *s = stmt(st, S_ATTEMPT_CKPT);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, attempt);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW)
    *seq = (uint32_t)sqlite3_column_int64(s, 0);
  int done = rc == SQLITE_ROW ? sqlite3_step(s) : rc; /* RETURNING: the change is made at DONE */
  sqlite3_reset(s);
  if (rc == SQLITE_DONE) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu has no open attempt %u",
             (unsigned long long)job_id, attempt);
    return COLO_ENOENT;
  }
  if (rc != SQLITE_ROW || done != SQLITE_DONE)
    return db_fail(st, rc != SQLITE_ROW ? rc : done, "count a checkpoint request");
  return 0;
}

int colo_store_attempt_stop(colo_store_t *st, uint64_t job_id, uint32_t attempt, int why) {
  if (why != COLO_STOP_MOVE && why != COLO_STOP_TIME_LIMIT) {
    snprintf(st->errmsg, sizeof st->errmsg, "no such reason to stop an attempt: %d", why);
    return COLO_EINVAL;
  }
  sqlite3_stmt *s = stmt(st, S_ATTEMPT_EVICT);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, attempt);
  sqlite3_bind_int(s, 3, why);
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return db_fail(st, rc, "mark an attempt evicting");
  if (sqlite3_changes(st->db) == 0) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu has no open attempt %u",
             (unsigned long long)job_id, attempt);
    return COLO_ENOENT;
  }
  return 0;
}

int colo_store_attempt_get(colo_store_t *st, uint64_t job_id, uint32_t attempt, int *stop,
                           int64_t *started_ms, uint32_t *checkpoint_seq) {
  sqlite3_stmt *s = stmt(st, S_ATTEMPT_EVICTING);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, attempt);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    *stop = sqlite3_column_int(s, 0);
    *started_ms = sqlite3_column_int64(s, 1);
    *checkpoint_seq = (uint32_t)sqlite3_column_int64(s, 2);
  }
  sqlite3_reset(s);
  if (rc == SQLITE_DONE) {
    snprintf(st->errmsg, sizeof st->errmsg, "job %llu has no attempt %u",
             (unsigned long long)job_id, attempt);
    return COLO_ENOENT;
  }
  if (rc != SQLITE_ROW)
    return db_fail(st, rc, "read an attempt");
  return 0;
}

static int list_events(colo_store_t *st, sqlite3_stmt *s, colo_store_event_cb cb, void *data) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_job_event_t ev;
    ev.job_id = (uint64_t)sqlite3_column_int64(s, 0);
    ev.seq = (uint64_t)sqlite3_column_int64(s, 1);
    ev.state = sqlite3_column_int(s, 2);
    copy_text(ev.message, sizeof ev.message, s, 3);
    ev.time_ms = sqlite3_column_int64(s, 4);
    if (cb(&ev, data))
      break;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "list events");
  return 0;
}

int colo_store_job_events(colo_store_t *st, uint64_t job_id, uint64_t after_seq,
                          colo_store_event_cb cb, void *data) {
  sqlite3_stmt *s = stmt(st, S_EVENT_LIST);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)after_seq);
  return list_events(st, s, cb, data);
}

int colo_store_job_events_last(colo_store_t *st, uint64_t job_id, uint32_t n,
                               colo_store_event_cb cb, void *data) {
  sqlite3_stmt *s = stmt(st, S_EVENT_TAIL);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, n);
  return list_events(st, s, cb, data);
}

/* ---- hosts ---- */

void colo_host_clear(colo_host_t *host) {
  free(host->devices);
  memset(host, 0, sizeof *host);
}

static int read_host(sqlite3_stmt *s, colo_host_t *h) {
  memset(h, 0, sizeof *h);
  h->id = (uint64_t)sqlite3_column_int64(s, 0);
  copy_text(h->name, sizeof h->name, s, 1);
  copy_text(h->address, sizeof h->address, s, 2);
  h->state = sqlite3_column_int(s, 3);
  h->session = (uint64_t)sqlite3_column_int64(s, 4);
  h->memory_bytes = (uint64_t)sqlite3_column_int64(s, 5);
  h->cpu_count = (uint32_t)sqlite3_column_int64(s, 6);
  h->registered_ms = sqlite3_column_int64(s, 7);
  h->last_seen_ms = sqlite3_column_int64(s, 8);
  h->devices_len = (size_t)sqlite3_column_bytes(s, 9);
  h->devices = dup_blob(sqlite3_column_blob(s, 9), h->devices_len);
  h->cordoned = sqlite3_column_int(s, 10) != 0;
  copy_text(h->cordon_reason, sizeof h->cordon_reason, s, 11);
  h->cordon_at_ms = sqlite3_column_int64(s, 12);
  h->cordon_evict = sqlite3_column_int(s, 13) != 0;
  return h->devices ? 0 : COLO_ENOMEM;
}

static int host_fetch(colo_store_t *st, sqlite3_stmt *s, colo_host_t *out, const char *what) {
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    rc = read_host(s, out);
    sqlite3_reset(s);
    return rc;
  }
  sqlite3_reset(s);
  if (rc == SQLITE_DONE) {
    snprintf(st->errmsg, sizeof st->errmsg, "%s: host not found", what);
    return COLO_ENOENT;
  }
  return db_fail(st, rc, what);
}

int colo_store_host_register(colo_store_t *st, const char *name, const char *address,
                             const uint8_t *devices, size_t devices_len, uint64_t memory_bytes,
                             uint32_t cpu_count, int64_t now_ms, colo_host_t *out) {
  int rc;
  colo_host_t h;
  CHECK_GOTO(begin(st), rc, fail);
  sqlite3_stmt *s = stmt(st, S_HOST_UPSERT);
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, address, -1, SQLITE_STATIC);
  sqlite3_bind_blob(s, 3, devices ? (const void *)devices : "", (int)devices_len, SQLITE_STATIC);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)memory_bytes);
  sqlite3_bind_int64(s, 5, cpu_count);
  sqlite3_bind_int64(s, 6, now_ms);
  CHECK_GOTO(step_done(st, s, "register host"), rc, fail);
  s = stmt(st, S_HOST_BY_NAME);
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  CHECK_GOTO(host_fetch(st, s, &h, "register host"), rc, fail);
  rc = commit(st);
  if (rc < 0) {
    colo_host_clear(&h);
    goto fail;
  }
  if (out)
    *out = h;
  else
    colo_host_clear(&h);
  return 0;
fail:
  rollback(st);
  return rc;
}

int colo_store_host_get(colo_store_t *st, uint64_t id, colo_host_t *out) {
  sqlite3_stmt *s = stmt(st, S_HOST_GET);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  return host_fetch(st, s, out, "get host");
}

int colo_store_host_by_name(colo_store_t *st, const char *name, colo_host_t *out) {
  sqlite3_stmt *s = stmt(st, S_HOST_BY_NAME);
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  int rc = host_fetch(st, s, out, "get host");
  if (rc == COLO_ENOENT)
    snprintf(st->errmsg, sizeof st->errmsg, "no host is named '%s'", name);
  return rc;
}

static int host_update(colo_store_t *st, sqlite3_stmt *s, uint64_t id, const char *what) {
  int rc = step_done(st, s, what);
  if (rc == 0 && sqlite3_changes(st->db) == 0) {
    snprintf(st->errmsg, sizeof st->errmsg, "%s: host %llu not found", what,
             (unsigned long long)id);
    return COLO_ENOENT;
  }
  return rc;
}

int colo_store_host_set_state(colo_store_t *st, uint64_t id, int state, int64_t now_ms) {
  if (state != COLO_HOST_UP && state != COLO_HOST_DOWN) {
    snprintf(st->errmsg, sizeof st->errmsg, "bad host state %d", state);
    return COLO_EINVAL;
  }
  sqlite3_stmt *s = stmt(st, S_HOST_STATE);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_int(s, 2, state);
  sqlite3_bind_int64(s, 3, now_ms);
  return host_update(st, s, id, "set host state");
}

int colo_store_host_touch(colo_store_t *st, uint64_t id, int64_t now_ms) {
  sqlite3_stmt *s = stmt(st, S_HOST_TOUCH);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_int64(s, 2, now_ms);
  return host_update(st, s, id, "touch host");
}

int colo_store_host_cordon(colo_store_t *st, uint64_t id, int cordoned, const char *reason,
                           int64_t at_ms, int evict) {
  int to_come = !cordoned && at_ms > 0;
  sqlite3_stmt *s = stmt(st, S_HOST_CORDON);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_int(s, 2, cordoned != 0);
  sqlite3_bind_text(s, 3, (cordoned || to_come) && reason ? reason : "", -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 4, to_come ? at_ms : 0);
  sqlite3_bind_int(s, 5, to_come && evict);
  return host_update(st, s, id, "cordon host");
}

int colo_store_host_list(colo_store_t *st, colo_store_host_cb cb, void *data) {
  sqlite3_stmt *s = stmt(st, S_HOST_LIST);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_host_t h;
    if (read_host(s, &h) < 0) {
      sqlite3_reset(s);
      return COLO_ENOMEM;
    }
    int stop = cb(&h, data);
    colo_host_clear(&h);
    if (stop)
      break;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "list hosts");
  return 0;
}

/* ---- checkpoints ---- */

int colo_store_checkpoint_add(colo_store_t *st, const colo_checkpoint_t *ck) {
  sqlite3_stmt *s = stmt(st, S_CKPT_INSERT);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)ck->job_id);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)ck->step);
  sqlite3_bind_int64(s, 3, ck->attempt);
  sqlite3_bind_text(s, 4, ck->path, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 5, ck->manifest_sha256, -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 6, (sqlite3_int64)ck->bytes);
  sqlite3_bind_int64(s, 7, ck->created_ms);
  sqlite3_bind_int64(s, 8, ck->request);
  if (ck->has_val_loss && isfinite(ck->val_loss))
    sqlite3_bind_double(s, 9, ck->val_loss);
  else
    sqlite3_bind_null(s, 9);
  if (ck->has_score && isfinite(ck->score))
    sqlite3_bind_double(s, 10, ck->score);
  else
    sqlite3_bind_null(s, 10);
  return step_done(st, s, "add checkpoint");
}

int colo_store_checkpoint_prune(colo_store_t *st, uint64_t job_id, uint32_t keep, int keep_best) {
  if (keep == 0)
    return 0;
  sqlite3_stmt *s = stmt(st, S_CKPT_PRUNE);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, keep);
  sqlite3_bind_int(s, 3, keep_best != 0);
  return step_done(st, s, "prune checkpoints");
}

int colo_store_jobs_ended_before(colo_store_t *st, int64_t before_ms, colo_store_end_cursor_t *at,
                                 uint64_t *ids, size_t cap, size_t *n) {
  sqlite3_stmt *s = stmt(st, S_JOB_ENDED_BEFORE);
  sqlite3_bind_int64(s, 1, before_ms);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)cap);
  sqlite3_bind_int64(s, 3, at->ended_ms);
  sqlite3_bind_int64(s, 4, (sqlite3_int64)at->id);
  size_t got = 0;
  colo_store_end_cursor_t last = *at;
  int rc;
  while (got < cap && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    ids[got++] = last.id = (uint64_t)sqlite3_column_int64(s, 0);
    last.ended_ms = sqlite3_column_int64(s, 1);
  }
  if (got == cap)
    rc = SQLITE_DONE;
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return db_fail(st, rc, "list ended jobs");
  *at = last;
  *n = got;
  return 0;
}

/* one DELETE; the schema's ON DELETE CASCADE takes the job's events, attempts (and their ranks),
 * checkpoint records and curve with it */
int colo_store_set_usage_key(colo_store_t *st, colo_store_usage_key_cb cb) {
  st->usage_key = cb;
  /* jobs stored before the account had a column, or without a callback: read theirs now, a
   * thousand a transaction */
  typedef struct {
    uint64_t id;
    char account[sizeof((colo_usage_key_t *)0)->account];
  } unread_t;
  unread_t *v = malloc(1000 * sizeof *v);
  if (!v) {
    snprintf(st->errmsg, sizeof st->errmsg, "out of memory");
    return COLO_ENOMEM;
  }
  int rc;
  size_t n;
  do {
    n = 0;
    CHECK_GOTO(begin(st), rc, fail);
    sqlite3_stmt *s = stmt(st, S_ACCOUNT_UNREAD);
    int r;
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
      colo_usage_key_t key;
      cb(sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1), &key);
      v[n].id = (uint64_t)sqlite3_column_int64(s, 0);
      snprintf(v[n].account, sizeof v[n].account, "%s", key.account);
      n++;
    }
    sqlite3_reset(s);
    if (r != SQLITE_DONE) {
      rc = db_fail(st, r, "read the accounts of older jobs");
      goto fail;
    }
    for (size_t i = 0; i < n; i++) {
      s = stmt(st, S_ACCOUNT_SET);
      sqlite3_bind_int64(s, 1, (sqlite3_int64)v[i].id);
      sqlite3_bind_text(s, 2, v[i].account, -1, SQLITE_STATIC);
      CHECK_GOTO(step_done(st, s, "set a job's account"), rc, fail);
    }
    CHECK_GOTO(commit(st), rc, fail);
  } while (n == 1000);
  free(v);
  return 0;
fail:
  rollback(st);
  free(v);
  return rc;
}

/* Adds device time to the transaction's sum for its hour, owner, account and device kind. */
static int hour_add(colo_store_t *st, int64_t hour_ms, const char *owner,
                    const colo_usage_key_t *key, int64_t from, int64_t to, uint32_t ranks, int jobs,
                    int attempts) {
  hour_row_t *r = NULL;
  for (size_t i = st->n_hours; i-- > 0 && !r;) /* the newest first: a batch's jobs are alike */
    if (st->hours[i].hour_ms == hour_ms && st->hours[i].key.device == key->device &&
        !strcmp(st->hours[i].owner, owner) && !strcmp(st->hours[i].key.account, key->account))
      r = &st->hours[i];
  if (!r) {
    if (COLO_GROW(st->hours, st->n_hours, st->cap_hours) < 0) {
      snprintf(st->errmsg, sizeof st->errmsg, "out of memory");
      return COLO_ENOMEM;
    }
    r = &st->hours[st->n_hours++];
    *r = (hour_row_t){.hour_ms = hour_ms, .key = *key, .from_ms = from, .to_ms = to};
    snprintf(r->owner, sizeof r->owner, "%s", owner);
  }
  r->device_ms += (to - from) * (int64_t)ranks;
  r->from_ms = from < r->from_ms ? from : r->from_ms;
  r->to_ms = to > r->to_ms ? to : r->to_ms;
  r->jobs += jobs;
  r->attempts += attempts;
  return 0;
}

/* Writes the transaction's summed device hours to usage_hours, one upsert per key (a purge's
 * batch of 64 jobs that ran alike writes a few rows, not one per job and hour). */
static int hours_flush(colo_store_t *st) {
  int rc = 0;
  for (size_t i = 0; i < st->n_hours && rc == 0; i++) {
    const hour_row_t *r = &st->hours[i];
    sqlite3_stmt *s = stmt(st, S_HOUR_ADD);
    sqlite3_bind_int64(s, 1, r->hour_ms);
    sqlite3_bind_text(s, 2, r->owner, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, r->key.account, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 4, r->key.device);
    sqlite3_bind_int64(s, 5, r->device_ms);
    sqlite3_bind_int64(s, 6, r->from_ms);
    sqlite3_bind_int64(s, 7, r->to_ms);
    sqlite3_bind_int(s, 8, r->jobs);
    sqlite3_bind_int(s, 9, r->attempts);
    rc = step_done(st, s, "add to usage_hours");
  }
  st->n_hours = 0;
  return rc;
}

/* Adds the device time of job id's attempts to the transaction's hours (hours_flush writes them
 * to usage_hours), hour by hour, if the job is one that delete_in with the same before_ms deletes
 * (*taken then 1). An attempt counts in the hour it began, the job in the hour its first attempt
 * with ranks began. */
static int rollup_in(colo_store_t *st, uint64_t id, int64_t before_ms, int *taken) {
  sqlite3_stmt *s = stmt(st, S_JOB_ROLLUP);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_int64(s, 2, before_ms);
  int rc = sqlite3_step(s);
  *taken = rc == SQLITE_ROW;
  if (rc != SQLITE_ROW) {
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : db_fail(st, rc, "read a job to account for");
  }
  colo_usage_key_t key = {.account = "", .device = 0};
  char owner[129];
  copy_text(owner, sizeof owner, s, 0);
  if (st->usage_key)
    st->usage_key(sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1), &key);
  int64_t ended = sqlite3_column_int64(s, 2);
  sqlite3_reset(s);
  /* the spans first: the statement that adds to usage_hours is another */
  typedef struct {
    int64_t from, to;
    uint32_t ranks;
  } span_t;
  span_t *v = NULL;
  size_t n = 0, cap = 0;
  s = stmt(st, S_ATTEMPT_SPANS);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_int64(s, 2, ended);
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    span_t a = {sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
                (uint32_t)sqlite3_column_int64(s, 2)};
    if (!a.ranks || a.to <= a.from)
      continue; /* held no devices: accounting never counted it */
    if (n == cap) {
      cap = cap ? 2 * cap : 4;
      span_t *p = realloc(v, cap * sizeof *p);
      if (!p) {
        free(v);
        sqlite3_reset(s);
        snprintf(st->errmsg, sizeof st->errmsg, "out of memory");
        return COLO_ENOMEM;
      }
      v = p;
    }
    v[n++] = a;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) {
    free(v);
    return db_fail(st, rc, "read a job's attempts to account for");
  }
  rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const int64_t H = COLO_USAGE_HOUR_MS;
    for (int64_t h = v[i].from - v[i].from % H; h < v[i].to && rc == 0; h += H) {
      int64_t a = v[i].from > h ? v[i].from : h, b = v[i].to < h + H ? v[i].to : h + H;
      int first = a == v[i].from;
      rc = hour_add(st, h, owner, &key, a, b, v[i].ranks, first && i == 0, first);
    }
  }
  free(v);
  return rc;
}

static int delete_in(colo_store_t *st, uint64_t id, int64_t before_ms, int *gone) {
  int taken = 0, rc = rollup_in(st, id, before_ms, &taken);
  if (rc < 0 || !taken) {
    *gone = 0;
    return rc;
  }
  sqlite3_stmt *s = stmt(st, S_JOB_DELETE);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_int64(s, 2, before_ms);
  rc = step_done(st, s, "delete job");
  if (rc == 0)
    *gone = sqlite3_changes(st->db) > 0;
  return rc;
}

int colo_store_job_delete(colo_store_t *st, uint64_t id) {
  colo_job_t j;
  int rc, gone = 0;
  CHECK_GOTO(begin(st), rc, fail);
  CHECK_GOTO(job_get_in(st, id, &j), rc, fail);
  int state = j.state;
  colo_job_clear(&j);
  if (!colo_job_state_terminal(state)) {
    snprintf(st->errmsg, sizeof st->errmsg,
             "job %llu is %s; only a job that has ended can be "
             "deleted (cancel it first)",
             (unsigned long long)id, colo_job_state_name(state));
    rc = COLO_ESTATE;
    goto fail;
  }
  CHECK_GOTO(delete_in(st, id, 0, &gone), rc, fail);
  CHECK_GOTO(hours_flush(st), rc, fail);
  CHECK_GOTO(commit(st), rc, fail);
  return 0;
fail:
  st->n_hours = 0;
  rollback(st);
  return rc;
}

int colo_store_jobs_purge(colo_store_t *st, uint64_t *ids, size_t n, int64_t before_ms,
                          size_t *deleted) {
  int rc;
  size_t count = 0;
  CHECK_GOTO(begin(st), rc, fail);
  for (size_t i = 0; i < n; i++) {
    int gone = 0;
    CHECK_GOTO(delete_in(st, ids[i], before_ms, &gone), rc, fail);
    if (gone)
      ids[count++] = ids[i];
  }
  CHECK_GOTO(hours_flush(st), rc, fail);
  CHECK_GOTO(commit(st), rc, fail);
  *deleted = count;
  return 0;
fail:
  st->n_hours = 0;
  rollback(st);
  return rc;
}

int colo_store_job_set_progress(colo_store_t *st, uint64_t id, const uint8_t *progress,
                                size_t len) {
  sqlite3_stmt *s = stmt(st, S_JOB_PROGRESS);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)id);
  sqlite3_bind_blob(s, 2, progress, (int)len, SQLITE_STATIC);
  return step_done(st, s, "set progress");
}

int colo_store_checkpoint_drop_after(colo_store_t *st, uint64_t job_id, uint64_t step) {
  sqlite3_stmt *s = stmt(st, S_CKPT_DROP_AFTER);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(s, 2, (sqlite3_int64)step);
  return step_done(st, s, "drop checkpoints");
}

int colo_store_checkpoint_list(colo_store_t *st, uint64_t job_id, colo_store_checkpoint_cb cb,
                               void *data) {
  sqlite3_stmt *s = stmt(st, S_CKPT_LIST);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_checkpoint_t ck;
    ck.job_id = (uint64_t)sqlite3_column_int64(s, 0);
    ck.step = (uint64_t)sqlite3_column_int64(s, 1);
    ck.attempt = (uint32_t)sqlite3_column_int64(s, 2);
    copy_text(ck.path, sizeof ck.path, s, 3);
    copy_text(ck.manifest_sha256, sizeof ck.manifest_sha256, s, 4);
    ck.bytes = (uint64_t)sqlite3_column_int64(s, 5);
    ck.created_ms = sqlite3_column_int64(s, 6);
    ck.request = (uint32_t)sqlite3_column_int64(s, 7);
    ck.has_val_loss = sqlite3_column_type(s, 8) != SQLITE_NULL;
    ck.val_loss = ck.has_val_loss ? (float)sqlite3_column_double(s, 8) : 0;
    ck.has_score = sqlite3_column_type(s, 9) != SQLITE_NULL;
    ck.score = ck.has_score ? (float)sqlite3_column_double(s, 9) : 0;
    if (cb(&ck, data))
      break;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "list checkpoints");
  return 0;
}

int colo_store_usage(colo_store_t *st, int64_t since_ms, int64_t until_ms, colo_store_usage_cb cb,
                     void *data) {
  sqlite3_stmt *s = stmt(st, S_USAGE);
  sqlite3_bind_int64(s, 1, since_ms);
  sqlite3_bind_int64(s, 2, until_ms);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_usage_row_t u;
    u.job_id = (uint64_t)sqlite3_column_int64(s, 0);
    u.attempt = (uint32_t)sqlite3_column_int64(s, 1);
    const unsigned char *owner = sqlite3_column_text(s, 2), *name = sqlite3_column_text(s, 3);
    u.owner = owner ? (const char *)owner : "";
    u.name = name ? (const char *)name : "";
    u.spec = sqlite3_column_blob(s, 4);
    u.spec_len = (size_t)sqlite3_column_bytes(s, 4);
    u.started_ms = sqlite3_column_int64(s, 5);
    u.ended_ms = sqlite3_column_int64(s, 6);
    u.ranks = (uint32_t)sqlite3_column_int64(s, 7);
    if (cb(&u, data))
      break;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "usage");
  return 0;
}

int colo_store_usage_hours(colo_store_t *st, int64_t since_ms, int64_t until_ms,
                           colo_store_usage_hour_cb cb, void *data) {
  sqlite3_stmt *s = stmt(st, S_HOUR_LIST);
  sqlite3_bind_int64(s, 1, since_ms);
  sqlite3_bind_int64(s, 2, until_ms);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_usage_hour_t u;
    u.hour_ms = sqlite3_column_int64(s, 0);
    const unsigned char *owner = sqlite3_column_text(s, 1), *account = sqlite3_column_text(s, 2);
    u.owner = owner ? (const char *)owner : "";
    u.account = account ? (const char *)account : "";
    u.device = sqlite3_column_int(s, 3);
    u.device_ms = sqlite3_column_int64(s, 4);
    u.from_ms = sqlite3_column_int64(s, 5);
    u.to_ms = sqlite3_column_int64(s, 6);
    u.jobs = (uint32_t)sqlite3_column_int64(s, 7);
    u.attempts = (uint32_t)sqlite3_column_int64(s, 8);
    if (cb(&u, data))
      break;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "usage hours");
  return 0;
}

int colo_store_sample_add(colo_store_t *st, const colo_progress_sample_t *p) {
  sqlite3_stmt *s = stmt(st, S_SAMPLE_INSERT);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)p->job_id);
  sqlite3_bind_int64(s, 2, p->attempt);
  sqlite3_bind_int64(s, 3, (sqlite3_int64)p->step);
  if (p->has_loss) {
    sqlite3_bind_double(s, 4, p->loss);
    sqlite3_bind_double(s, 5, p->lr);
    sqlite3_bind_double(s, 6, p->tokens_per_s);
  } else {
    for (int i = 4; i <= 6; i++)
      sqlite3_bind_null(s, i);
  }
  if (p->has_val)
    sqlite3_bind_double(s, 7, p->val_loss);
  else
    sqlite3_bind_null(s, 7);
  sqlite3_bind_int64(s, 8, p->time_ms);
  if (p->has_val && p->val_sets && p->val_sets_len)
    sqlite3_bind_blob(s, 9, p->val_sets, (int)p->val_sets_len, SQLITE_STATIC);
  else
    sqlite3_bind_null(s, 9);
  return step_done(st, s, "add a progress sample");
}

int colo_store_sample_list(colo_store_t *st, uint64_t job_id, colo_store_sample_cb cb, void *data) {
  sqlite3_stmt *s = stmt(st, S_SAMPLE_LIST);
  sqlite3_bind_int64(s, 1, (sqlite3_int64)job_id);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    colo_progress_sample_t p = {.job_id = job_id};
    p.attempt = (uint32_t)sqlite3_column_int64(s, 0);
    p.step = (uint64_t)sqlite3_column_int64(s, 1);
    p.has_loss = sqlite3_column_type(s, 2) != SQLITE_NULL;
    p.loss = (float)sqlite3_column_double(s, 2);
    p.lr = (float)sqlite3_column_double(s, 3);
    p.tokens_per_s = (float)sqlite3_column_double(s, 4);
    p.has_val = sqlite3_column_type(s, 5) != SQLITE_NULL;
    p.val_loss = (float)sqlite3_column_double(s, 5);
    p.time_ms = sqlite3_column_int64(s, 6);
    p.val_sets = sqlite3_column_blob(s, 7);
    p.val_sets_len = p.val_sets ? (size_t)sqlite3_column_bytes(s, 7) : 0;
    if (cb(&p, data))
      break;
  }
  sqlite3_reset(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return db_fail(st, rc, "list progress samples");
  return 0;
}
