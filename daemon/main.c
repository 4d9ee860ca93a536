/* colod: the coordinator. Parses flags and the config file, opens the store, serves the gRPC
 * API on a libuv loop, talks to systemd (READY, WATCHDOG, STOPPING), drains on SIGTERM and
 * reloads its config on SIGHUP. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "../common/error.h"
#include "../common/log.h"
#include "colod.h"
#include "jobs.h"
#include "logs.h"
#include "metrics.h"
#include "notify.h"
#include "rdzv.h"
#include "usage.h"

#define TICK_MS 250

int64_t colod_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void colod_fmt_utc(int64_t ms, char *buf, size_t len) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

uint64_t colod_mono_ms(colod_t *d) {
  uv_update_time(d->loop);
  return uv_now(d->loop);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: colod [options]\n"
          "\n"
          "The colo coordinator: tracks hosts and jobs in SQLite and serves the colo.v1.Cluster\n"
          "gRPC API.\n"
          "\n"
          "options:\n"
          "  -c, --config FILE      YAML config file (see --print-config for every setting)\n"
          "  -l, --listen ADDR      listen address (default 127.0.0.1:7070)\n"
          "  -s, --state-dir DIR    state directory holding colod.db (default /var/lib/colo)\n"
          "      --log-level LEVEL  error, warn, info or debug (default info)\n"
          "      --set NAME=VALUE   override any setting\n"
          "      --print-config     print the effective configuration and exit\n"
          "  -h, --help             this help\n"
          "      --version          print the version\n"
          "\n"
          "signals: SIGTERM/SIGINT drain in-flight calls and exit 0; SIGHUP reloads the config\n"
          "file (settings marked reloadable in --print-config).\n");
}

/* The effective config: defaults, then the file, then overrides in order. */
static int build_config(colod_t *d, colod_config_t *cfg, char *err, size_t errlen) {
  colod_config_defaults(cfg);
  if (d->config_path) {
    int rc = colod_config_load(cfg, d->config_path, err, errlen);
    if (rc < 0)
      return rc;
  }
  for (int i = 0; i < d->n_overrides; i++) {
    int rc = colod_config_set(cfg, d->overrides[i], NULL, err, errlen);
    if (rc < 0)
      return rc;
  }
  return 0;
}

static void on_closed_handle(uv_handle_t *h) {
  (void)h;
}

static void on_rpc_closed(colo_rpc_server_t *srv, void *data) {
  colod_t *d = data;
  (void)srv;
  d->rpc = NULL;
  colod_metrics_stop(d); /* /healthz answered 503 while the calls drained */
  uv_close((uv_handle_t *)&d->tick, on_closed_handle);
  uv_close((uv_handle_t *)&d->kick, on_closed_handle);
  uv_close((uv_handle_t *)&d->restart, on_closed_handle);
  uv_close((uv_handle_t *)&d->host_deadline, on_closed_handle);
  uv_close((uv_handle_t *)&d->push_flush, on_closed_handle);
  colod_retention_close(d);
  uv_close((uv_handle_t *)&d->sig_term, on_closed_handle);
  uv_close((uv_handle_t *)&d->sig_int, on_closed_handle);
  uv_close((uv_handle_t *)&d->sig_hup, on_closed_handle);
  colo_log(COLO_LOG_INFO, "main", "stopped");
}

static void begin_drain(colod_t *d, const char *why) {
  if (d->draining)
    return;
  d->draining = 1;
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
  colo_log(COLO_LOG_INFO, "main", "%s: draining %zu in-flight calls (up to %u ms)", why,
           colo_rpc_server_live_calls(d->rpc), d->cfg.drain_timeout_ms);
  colod_watch_close_all(d, "colod is shutting down");
  colod_logs_close_all(d, "colod is shutting down");
  colod_rdzv_close_all(d, "colod is shutting down");
  colod_push_close_all(d, "colod is shutting down");
  colo_rpc_server_shutdown(d->rpc, d->cfg.drain_timeout_ms, on_rpc_closed, d);
}

static void on_signal(uv_signal_t *s, int signum) {
  colod_t *d = s->data;
  if (signum == SIGHUP) {
    colod_config_t next;
    char err[512];
    if (build_config(d, &next, err, sizeof err) < 0) {
      colo_log(COLO_LOG_ERROR, "config", "reload failed, keeping the running config: %s", err);
      return;
    }
    int n = colod_config_reload(&d->cfg, &next);
    colo_log_set_level((colo_log_level_t)d->cfg.log_level);
    colod_retention_reload(d); /* a new job_retention: a round now */
    colo_log(COLO_LOG_INFO, "config", "reloaded %s: %d settings changed",
             d->config_path ? d->config_path : "(no config file)", n);
    if (d->cfg.tls_cert[0]) { /* certificates rotated at their paths */
      colo_rpc_tls_t tls = {d->cfg.tls_client_ca, d->cfg.tls_cert, d->cfg.tls_key, NULL};
      if (colo_rpc_server_reload_tls(d->rpc, &tls, err, sizeof err) < 0)
        colo_log(COLO_LOG_ERROR, "config", "TLS files not reloaded, keeping those in use: %s", err);
      else
        colo_log(COLO_LOG_INFO, "config",
                 "TLS files %s, %s%s%s read again: new connections use them", d->cfg.tls_cert,
                 d->cfg.tls_key, d->cfg.tls_client_ca[0] ? ", " : "", d->cfg.tls_client_ca);
    }
    return;
  }
  begin_drain(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_tick(uv_timer_t *t) {
  colod_t *d = t->data;
  uint64_t now = colod_mono_ms(d);
  if (d->watchdog_usec && (now - d->last_watchdog_mono_ms) * 1000 >= d->watchdog_usec / 2) {
    sd_notify(0, "WATCHDOG=1");
    d->last_watchdog_mono_ms = now;
  }
  if (!d->draining) {
    colod_hosts_check(d);
    colod_hosts_cordons_due(d);
    colod_jobs_tick(d);
    colod_logs_tick(d);
    colod_rdzv_tick(d);
  }
}

static int ensure_dir(const char *path, char *err, size_t errlen) {
  struct stat sb;
  if (stat(path, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode)) {
      snprintf(err, errlen, "state_dir %s is not a directory", path);
      return COLO_EINVAL;
    }
    return 0;
  }
  if (mkdir(path, 0750) != 0) {
    snprintf(err, errlen, "cannot create state_dir %s: %s", path, strerror(errno));
    return COLO_EIO;
  }
  return 0;
}

static int run(int argc, char **argv, colod_t *dp, char (*flagbuf)[1200]) {
  colod_t d = *dp;
  int print_config = 0;
  enum { OPT_LOG = 256, OPT_SET, OPT_PRINT, OPT_VERSION };
  static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                       {"listen", required_argument, 0, 'l'},
                                       {"state-dir", required_argument, 0, 's'},
                                       {"log-level", required_argument, 0, OPT_LOG},
                                       {"set", required_argument, 0, OPT_SET},
                                       {"print-config", no_argument, 0, OPT_PRINT},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, OPT_VERSION},
                                       {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "c:l:s:h", opts, NULL)) != -1) {
    const char *name = NULL;
    switch (c) {
    case 'c':
      d.config_path = optarg;
      break;
    case 'l':
      name = "listen";
      break;
    case 's':
      name = "state_dir";
      break;
    case OPT_LOG:
      name = "log_level";
      break;
    case OPT_SET:
      d.overrides[d.n_overrides++] = optarg;
      break;
    case OPT_PRINT:
      print_config = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    case OPT_VERSION:
      printf("colod %s\n", COLO_VERSION);
      return 0;
    default:
      fprintf(stderr, "colod: try 'colod --help'\n");
      return 2;
    }
    if (name) {
      snprintf(flagbuf[d.n_overrides], sizeof flagbuf[0], "%s=%s", name, optarg);
      d.overrides[d.n_overrides] = flagbuf[d.n_overrides];
      d.n_overrides++;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "colod: unexpected argument '%s'; try 'colod --help'\n", argv[optind]);
    return 2;
  }

  char err[1024];
  if (build_config(&d, &d.cfg, err, sizeof err) < 0) {
    fprintf(stderr, "colod: %s\n", err);
    return 2;
  }
  if (print_config) {
    colod_config_print(&d.cfg, stdout);
    return 0;
  }
  if (!d.cfg.tls_cert[0] != !d.cfg.tls_key[0]) {
    fprintf(stderr, "colod: tls_cert and tls_key go together: %s is set without %s\n",
            d.cfg.tls_cert[0] ? "tls_cert" : "tls_key", d.cfg.tls_cert[0] ? "tls_key" : "tls_cert");
    return 2;
  }
  if (d.cfg.tls_client_ca[0] && !d.cfg.tls_cert[0]) {
    fprintf(stderr, "colod: tls_client_ca needs tls_cert and tls_key: client certificates are "
                    "asked for only over TLS\n");
    return 2;
  }
  colo_log_set_prefix("colod");
  colo_log_set_level((colo_log_level_t)d.cfg.log_level);

  if (ensure_dir(d.cfg.state_dir, err, sizeof err) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "%s", err);
    return 1;
  }
  char dbpath[1100];
  snprintf(dbpath, sizeof dbpath, "%s/colod.db", d.cfg.state_dir);
  if (colo_store_open(dbpath, &d.store, err, sizeof err) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "%s", err);
    return 1;
  }
  /* a deleted job's usage stays; a job's account is a column lists filter by */
  if (colo_store_set_usage_key(d.store, colod_usage_key) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "database %s: %s", dbpath, colo_store_errmsg(d.store));
    return 1;
  }
  if (colo_store_integrity_check(d.store) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "database %s fails its integrity check: %s", dbpath,
             colo_store_errmsg(d.store));
    colo_store_close(d.store);
    return 1;
  }

  d.loop = uv_default_loop();
  d.started_ms = colod_now_ms();
  if (colod_hosts_load(&d) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "cannot load hosts: %s", colo_store_errmsg(d.store));
    colo_store_close(d.store);
    return 1;
  }
  if (d.cfg.metrics_listen[0] && colod_metrics_start(&d, err, sizeof err) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "%s", err);
    colo_store_close(d.store);
    free(d.hosts);
    return 1;
  }
  colo_rpc_server_opts_t ro = {0};
  ro.listen = d.cfg.listen;
  ro.max_message_bytes = (size_t)d.cfg.max_message_kib * 1024;
  colo_rpc_tls_t tls = {.ca = d.cfg.tls_client_ca, .cert = d.cfg.tls_cert, .key = d.cfg.tls_key};
  ro.tls = &tls;
  if (colo_rpc_server_start(d.loop, &ro, colod_methods, colod_n_methods, &d, &d.rpc, err,
                            sizeof err) < 0) {
    colo_log(COLO_LOG_ERROR, "main", "%s", err);
    colod_metrics_stop(&d);
    uv_run(d.loop, UV_RUN_DEFAULT); /* its handles' close callbacks */
    colo_store_close(d.store);
    free(d.hosts);
    return 1;
  }

  uv_signal_init(d.loop, &d.sig_term);
  uv_signal_init(d.loop, &d.sig_int);
  uv_signal_init(d.loop, &d.sig_hup);
  d.sig_term.data = d.sig_int.data = d.sig_hup.data = &d;
  uv_signal_start(&d.sig_term, on_signal, SIGTERM);
  uv_signal_start(&d.sig_int, on_signal, SIGINT);
  uv_signal_start(&d.sig_hup, on_signal, SIGHUP);
  /* every host's full host_timeout starts now that colod answers, not when the store was read
   * (start-up can be slow: a large database, valgrind) */
  uv_update_time(d.loop);
  for (size_t i = 0; i < d.n_hosts; i++)
    d.hosts[i].last_seen_mono_ms = colod_mono_ms(&d);
  uv_timer_init(d.loop, &d.tick);
  d.tick.data = &d;
  uv_timer_init(d.loop, &d.kick);
  d.kick.data = &d;
  uv_timer_init(d.loop, &d.restart);
  d.restart.data = &d;
  uv_timer_init(d.loop, &d.host_deadline);
  d.host_deadline.data = &d;
  uv_timer_init(d.loop, &d.push_flush);
  d.push_flush.data = &d;
  /* the jobs and their placements before the first heartbeat is answered: a worker told that
   * nothing should run on its host would stop the ranks of running jobs */
  colod_jobs_tick(&d);
  uv_timer_start(&d.tick, on_tick, TICK_MS, TICK_MS);
  colod_retention_start(&d);
  if (sd_watchdog_enabled(0, &d.watchdog_usec) <= 0)
    d.watchdog_usec = 0;

  char host[300];
  snprintf(host, sizeof host, "%s", d.cfg.listen);
  char *colon = strrchr(host, ':');
  if (colon)
    *colon = '\0';
  const char *transport = !d.cfg.tls_cert[0]       ? "without TLS"
                          : d.cfg.tls_client_ca[0] ? "with mutual TLS (callers need a certificate)"
                                                   : "with TLS (callers are not asked for a "
                                                     "certificate)";
  colo_log(COLO_LOG_INFO, "main", "colod %s listening on %s:%d %s, state in %s", COLO_VERSION, host,
           colo_rpc_server_port(d.rpc), transport, dbpath);
  if (!d.cfg.tls_client_ca[0] && strcmp(host, "127.0.0.1") && strcmp(host, "localhost") &&
      strcmp(host, "[::1]"))
    colo_log(COLO_LOG_WARN, "main",
             "anyone who can reach %s:%d can submit and cancel jobs and pose as a worker: set "
             "tls_cert, tls_key and tls_client_ca for mutual TLS (deploy/tls-certs.sh)",
             host, colo_rpc_server_port(d.rpc));
  /* scripts read the bound port from this line when they ask for port 0 */
  printf("colod listening on %s:%d\n", host, colo_rpc_server_port(d.rpc));
  if (d.metrics) {
    char mh[300];
    snprintf(mh, sizeof mh, "%s", d.cfg.metrics_listen);
    char *mc = strrchr(mh, ':');
    if (mc)
      *mc = '\0';
    colo_log(COLO_LOG_INFO, "main", "metrics at http://%s:%d/metrics", mh, colod_metrics_port(&d));
    printf("colod metrics on http://%s:%d/metrics\n", mh, colod_metrics_port(&d));
  }
  fflush(stdout);
  sd_notifyf(0, "READY=1\nSTATUS=listening on %s:%d", host, colo_rpc_server_port(d.rpc));
  if (d.watchdog_usec) {
    sd_notify(0, "WATCHDOG=1");
    d.last_watchdog_mono_ms = colod_mono_ms(&d);
  }

  uv_run(d.loop, UV_RUN_DEFAULT);

  colo_store_close(d.store);
  uv_loop_close(d.loop);
  colod_jobs_free(&d); /* before the hosts: an attempt's end looks its hosts up */
  colod_fair_free(&d);
  free(d.hosts);
  return d.exit_code;
}

int main(int argc, char **argv) {
  colod_t d;
  memset(&d, 0, sizeof d);
  d.overrides = calloc((size_t)argc + 1, sizeof *d.overrides);
  char(*flagbuf)[1200] = calloc((size_t)argc + 1, sizeof *flagbuf);
  int rc = 1;
  if (!d.overrides || !flagbuf)
    fprintf(stderr, "colod: out of memory\n");
  else if (colod_notify_init() < 0) /* before any thread: libcurl's global state */
    fprintf(stderr, "colod: cannot set up libcurl\n");
  else {
    rc = run(argc, argv, &d, flagbuf);
    colod_notify_cleanup();
  }
  free(d.overrides);
  free(flagbuf);
  return rc;
}
