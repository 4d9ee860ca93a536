/* colo-workerd's rank launcher against real processes: exit codes, the log file, the exact
 * environment, SIGTERM then SIGKILL after the grace period, the whole process group, and a
 * clean failure for a program that does not exist. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "test.h"
#include "worker/launch.h"

typedef struct {
  int calls;
  int64_t status;
  int sig;
  double t_exit;
} result_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_exit_cb(colo_rank_proc_t *p, int64_t status, int sig) {
  result_t *r = p->data;
  r->calls++;
  r->status = status;
  r->sig = sig;
  r->t_exit = now_s();
}

static void tmp_log(char *path, size_t n) {
  snprintf(path, n, "/tmp/colo-test-launch-%d.log", (int)getpid());
  unlink(path);
}

static void read_file(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  ASSERT(f != NULL);
  size_t got = fread(buf, 1, n - 1, f);
  buf[got] = 0;
  fclose(f);
}

static result_t run_sh(const char *script, char *const *env, char *log, size_t loglen,
                       int64_t stop_after_ms, uint64_t grace_ms) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  result_t r = {0};
  colo_rank_proc_t p = {.data = &r};
  char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
  char why[256] = "";
  tmp_log(log, loglen);
  int rc = colo_rank_start(&loop, &p, argv, env, NULL, log, on_exit_cb, why, sizeof why);
  if (rc != 0)
    FAIL_AT("start: %s", why);
  ASSERT(p.running);
  ASSERT(p.pid > 0);
  if (stop_after_ms > 0) {
    double t_end = now_s() + (double)stop_after_ms / 1e3;
    while (now_s() < t_end)
      uv_run(&loop, UV_RUN_NOWAIT), usleep(1000);
    colo_rank_stop(&p, grace_ms);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ_INT(r.calls, 1);
  ASSERT(!p.running);
  ASSERT_EQ_INT(uv_loop_close(&loop), 0);
  return r;
}

TEST(exit_code_and_both_streams_in_the_log) {
  char log[128], buf[256];
  char *env[] = {NULL};
  result_t r = run_sh("echo out-line; echo err-line >&2; exit 3", env, log, sizeof log, 0, 0);
  ASSERT_EQ_INT(r.status, 3);
  ASSERT_EQ_INT(r.sig, 0);
  read_file(log, buf, sizeof buf);
  ASSERT_EQ_STR(buf, "out-line\nerr-line\n");
  unlink(log);
}

TEST(exactly_the_given_environment) {
  char log[128], buf[256];
  char *env[] = {"COLO_RANK=5", "COLO_WORLD=8", NULL};
  setenv("COLO_LEAK", "from-the-worker", 1);
  result_t r =
      run_sh("echo \"$COLO_RANK/$COLO_WORLD/${COLO_LEAK:-none}\"", env, log, sizeof log, 0, 0);
  ASSERT_EQ_INT(r.status, 0);
  read_file(log, buf, sizeof buf);
  ASSERT_EQ_STR(buf, "5/8/none\n");
  unlink(log);
}

TEST(stop_sends_sigterm) {
  char log[128];
  char *env[] = {NULL};
  double t0 = now_s();
  result_t r = run_sh("exec sleep 30", env, log, sizeof log, 100, 5000);
  ASSERT_EQ_INT(r.sig, SIGTERM);
  ASSERT(r.t_exit - t0 < 3.0);
  unlink(log);
}

/* the worker asks again at each reconcile while a rank stops: one SIGTERM all the same */
TEST(a_stop_asked_again_sends_one_sigterm) {
  char log[128], buf[256];
  char *env[] = {NULL};
  uv_loop_t loop;
  uv_loop_init(&loop);
  result_t r = {0};
  colo_rank_proc_t p = {.data = &r};
  char *argv[] = {"/bin/sh", "-c",
                  "trap 'echo term' TERM; i=0; while [ $i -lt 10 ]; do sleep 0.1; i=$((i+1)); "
                  "done; exit 75",
                  NULL};
  char why[256] = "";
  tmp_log(log, sizeof log);
  ASSERT_EQ_INT(colo_rank_start(&loop, &p, argv, env, NULL, log, on_exit_cb, why, sizeof why), 0);
  for (int stop = 0; stop < 3; stop++) {
    double t_end = now_s() + 0.15;
    while (now_s() < t_end)
      uv_run(&loop, UV_RUN_NOWAIT), usleep(1000);
    colo_rank_stop(&p, 5000);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ_INT(r.calls, 1);
  ASSERT_EQ_INT(r.status, 75);     /* it finished as it chose, not killed by a second signal */
  read_file(log, buf, sizeof buf); /* the trap's lines, and the shell's for its killed sleeps */
  int traps = 0;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
    traps += !strcmp(line, "term");
  ASSERT_EQ_INT(traps, 1);
  ASSERT_EQ_INT(uv_loop_close(&loop), 0);
  unlink(log);
}

TEST(sigkill_after_the_grace_period) {
  char log[128];
  char *env[] = {NULL};
  /* The shell ignores SIGTERM; its sleeping child would die of it, so the shell loops. */
  double t_stop = now_s() + 0.2;
  result_t r = run_sh("trap '' TERM; while :; do sleep 1; done", env, log, sizeof log, 200, 300);
  ASSERT_EQ_INT(r.sig, SIGKILL);
  double waited = r.t_exit - t_stop;
  printf("  SIGKILL came %.0f ms after the stop (grace 300 ms)\n", waited * 1e3);
  ASSERT(waited >= 0.29);
  ASSERT(waited < 2.0);
  unlink(log);
}

static int pid_alive(int pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *rp = strrchr(buf, ')');
  return rp && rp[1] == ' ' && rp[2] != 'Z'; /* a zombie is dead */
}

TEST(the_whole_process_group_goes) {
  char log[128], buf[256];
  char *env[] = {NULL};
  /* The leader exits at once, leaving a child that ignores SIGTERM behind in its group. */
  result_t r = run_sh("sh -c 'trap \"\" TERM; echo $$; exec sleep 30' & sleep 0.2; exit 0", env,
                      log, sizeof log, 0, 0);
  ASSERT_EQ_INT(r.status, 0);
  read_file(log, buf, sizeof buf);
  int child = atoi(buf);
  ASSERT(child > 1);
  for (int i = 0; i < 100 && pid_alive(child); i++)
    usleep(10000);
  ASSERT(!pid_alive(child));
  unlink(log);
}

TEST(a_missing_program_fails_cleanly) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  result_t r = {0};
  colo_rank_proc_t p = {.data = &r};
  char *argv[] = {"/nonexistent/colo-train", NULL};
  char *env[] = {NULL};
  char log[128], why[256] = "";
  tmp_log(log, sizeof log);
  int rc = colo_rank_start(&loop, &p, argv, env, NULL, log, on_exit_cb, why, sizeof why);
  ASSERT_EQ_INT(rc, COLO_EIO);
  ASSERT_EQ_STR(why, "cannot start /nonexistent/colo-train: no such file or directory");
  ASSERT(!p.running);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_EQ_INT(r.calls, 0);
  ASSERT_EQ_INT(uv_loop_close(&loop), 0);
  colo_rank_stop(&p, 100); /* a no-op, not a crash */
  unlink(log);
}

TEST(an_unwritable_log_fails_before_spawning) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  colo_rank_proc_t p = {0};
  char *argv[] = {"/bin/true", NULL};
  char *env[] = {NULL};
  char why[256] = "";
  int rc = colo_rank_start(&loop, &p, argv, env, NULL, "/nonexistent-dir/rank.log", on_exit_cb, why,
                           sizeof why);
  ASSERT_EQ_INT(rc, COLO_EIO);
  ASSERT_EQ_STR(why, "cannot open rank log /nonexistent-dir/rank.log: No such file or directory");
  ASSERT_EQ_INT(uv_run(&loop, UV_RUN_DEFAULT), 0);
  ASSERT_EQ_INT(uv_loop_close(&loop), 0);
}

TEST_MAIN()
