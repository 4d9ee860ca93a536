/* Rank processes of colo-workerd: start one with uv_spawn in its own session (so a stop reaches
 * the whole process group, e.g. the children of `colo-train --nproc`), its stdout and stderr
 * appended to one log file (the child writes to the file itself, so no line is lost when the
 * worker restarts), and stop it with SIGTERM, then SIGKILL after a grace period. */
#ifndef COLO_WORKER_LAUNCH_H
#define COLO_WORKER_LAUNCH_H

#include <stdint.h>

#include <uv.h>

typedef struct colo_rank_proc colo_rank_proc_t;

/* Called once, after the process exited and the handles are closed: p may be freed here.
 * term_signal is 0 for a normal exit. */
typedef void (*colo_rank_exit_cb)(colo_rank_proc_t *p, int64_t exit_status, int term_signal);

struct colo_rank_proc {
  void *data; /* the caller's */
  /* read-only after start */
  int pid;
  int running; /* 1 from a successful start until the exit callback */
  /* private */
  uv_process_t proc;
  uv_timer_t kill_timer;
  int open_handles;
  int64_t exit_status;
  int term_signal;
  int term_sent; /* a stop sent SIGTERM: a second would end colo-train at once (its rule for a
                    second Ctrl-C), mid-checkpoint */
  colo_rank_exit_cb on_exit;
};

/* Starts argv[0] (a path, or a name looked up in PATH) with exactly the environment env
 * (NULL-terminated "K=V" strings) in directory cwd (NULL: the worker's), appending stdout and
 * stderr to log_path (created 0640 when missing). Returns 0, or a negative COLO_ code with why
 * filled; on failure no callback comes and nothing is left running. */
int colo_rank_start(uv_loop_t *loop, colo_rank_proc_t *p, char *const *argv, char *const *env,
                    const char *cwd, const char *log_path, colo_rank_exit_cb on_exit, char *why,
                    size_t whylen);

/* Sends SIGTERM to the rank's process group, once however often it is called, and SIGKILL
 * grace_ms after the first call if it is still there. A no-op when the rank is not running. */
void colo_rank_stop(colo_rank_proc_t *p, uint64_t grace_ms);

#endif
