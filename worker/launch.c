#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"

static void on_handle_closed(uv_handle_t *h) {
  colo_rank_proc_t *p = h->data;
  if (--p->open_handles > 0)
    return;
  p->running = 0;
  if (p->on_exit)
    p->on_exit(p, p->exit_status, p->term_signal);
}

static void on_proc_exit(uv_process_t *proc, int64_t exit_status, int term_signal) {
  colo_rank_proc_t *p = proc->data;
  p->exit_status = exit_status;
  p->term_signal = term_signal;
  /* Whatever the leader left behind in its group goes with it. */
  kill(-p->pid, SIGKILL);
  uv_timer_stop(&p->kill_timer);
  uv_close((uv_handle_t *)&p->kill_timer, on_handle_closed);
  uv_close((uv_handle_t *)&p->proc, on_handle_closed);
}

static void on_kill_timer(uv_timer_t *t) {
  colo_rank_proc_t *p = t->data;
  kill(-p->pid, SIGKILL);
}

int colo_rank_start(uv_loop_t *loop, colo_rank_proc_t *p, char *const *argv, char *const *env,
                    const char *cwd, const char *log_path, colo_rank_exit_cb on_exit, char *why,
                    size_t whylen) {
  if (!argv || !argv[0] || !log_path) {
    snprintf(why, whylen, "rank start: argv and log path are required");
    return COLO_EINVAL;
  }
  int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    snprintf(why, whylen, "cannot open rank log %s: %s", log_path, strerror(errno));
    return COLO_EIO;
  }
  void *data = p->data;
  memset(p, 0, sizeof *p);
  p->data = data;
  p->on_exit = on_exit;

  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = fd;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = fd;
  uv_process_options_t opt = {
      .exit_cb = on_proc_exit,
      .file = argv[0],
      .args = (char **)argv,
      .env = (char **)env,
      .cwd = cwd,
      .flags = UV_PROCESS_DETACHED, /* setsid: the rank leads its own process group */
      .stdio_count = 3,
      .stdio = stdio,
  };
  p->proc.data = p;
  int rc = uv_spawn(loop, &p->proc, &opt);
  close(fd);
  if (rc < 0) {
    snprintf(why, whylen, "cannot start %s: %s", argv[0], uv_strerror(rc));
    /* uv_spawn initialised the handle; it must still be closed, with no user callback. */
    p->on_exit = NULL;
    p->open_handles = 1;
    uv_close((uv_handle_t *)&p->proc, on_handle_closed);
    return COLO_EIO;
  }
  p->pid = p->proc.pid;
  p->running = 1;
  p->open_handles = 2;
  uv_timer_init(loop, &p->kill_timer);
  p->kill_timer.data = p;
  return 0;
}

void colo_rank_stop(colo_rank_proc_t *p, uint64_t grace_ms) {
  if (!p->running || uv_is_closing((uv_handle_t *)&p->proc) || p->term_sent)
    return; /* every reconcile asks again while the rank saves its checkpoint */
  p->term_sent = 1;
  kill(-p->pid, SIGTERM);
  uv_timer_start(&p->kill_timer, on_kill_timer, grace_ms, 0);
}
