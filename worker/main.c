/* colo-workerd: one per node. This build registers the node's devices (CPU slots) with colod,
 * heartbeats at the interval colod sets, registers again when colod does not know its session
 * (a colod that lost it, or a first contact after colod was away), and talks to systemd
 * (READY, WATCHDOG, STOPPING). Starting and stopping ranks (the reconcile half of the
 * heartbeat) comes with the scheduler: colod sends no desired ranks yet.
 *
 * Exit codes: 0 after SIGTERM/SIGINT, 1 when it cannot start, 2 for bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>
#include <uv.h>

#include "colo/v1/cluster.pb-c.h"
#include "colo/v1/worker_config.pb-c.h"
#include "common/error.h"
#include "common/log.h"
#include "common/pbcodec.h"
#include "proto/rpc.h"

typedef struct {
  uv_loop_t *loop;
  uv_timer_t tick;
  uv_signal_t sig_term, sig_int;
  Colo__V1__WorkerConfig *cfg;
  char name[65];
  colo_rpc_client_t *cli;
  uint64_t host_id, session;
  uint32_t interval_ms;
  int registered, ready_sent, was_unreachable;
  uint64_t watchdog_usec;
} workerd_t;

static void usage(FILE *out) {
  fprintf(out, "usage: colo-workerd [options]\n"
               "\n"
               "The colo worker daemon: registers this node's devices with colod and heartbeats.\n"
               "\n"
               "options:\n"
               "  -c, --config FILE        YAML config (coordinator, name, address, cpu_slots,\n"
               "                           log_level, call_timeout_ms)\n"
               "  -C, --coordinator ADDR   colod's address (default 127.0.0.1:7070)\n"
               "  -n, --name NAME          this node's name (default: the hostname)\n"
               "  -a, --address ADDR       where other nodes reach this one (default 127.0.0.1)\n"
               "      --cpu-slots N        rank slots on a CPU node (default: the core count)\n"
               "      --log-level LEVEL    error, warn, info or debug\n"
               "  -h, --help               this help\n"
               "      --version            print the version\n"
               "\n"
               "This build registers and heartbeats; it does not start ranks yet (colod has no\n"
               "scheduler in this build).\n");
}

static Colo__V1__Device **make_devices(uint32_t n) {
  Colo__V1__Device **d = calloc(n ? n : 1, sizeof *d);
  for (uint32_t i = 0; i < n; i++) {
    d[i] = malloc(sizeof **d);
    colo__v1__device__init(d[i]);
    d[i]->has_index = d[i]->has_kind = 1;
    d[i]->index = i;
    d[i]->kind = COLO__V1__DEVICE_KIND__DEVICE_KIND_CPU;
    d[i]->name = "cpu";
  }
  return d;
}

static int do_register(workerd_t *w) {
  uint32_t slots = w->cfg->cpu_slots;
  if (slots == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    slots = n > 0 ? (uint32_t)n : 1;
  }
  Colo__V1__RegisterHostRequest req = COLO__V1__REGISTER_HOST_REQUEST__INIT;
  req.name = w->name;
  req.address = w->cfg->address;
  req.n_devices = slots;
  req.devices = make_devices(slots);
  req.has_cpu_count = 1;
  req.cpu_count = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  req.has_memory_bytes = pages > 0 && psize > 0;
  req.memory_bytes = (uint64_t)pages * (uint64_t)psize;
  req.version = COLO_VERSION;
  Colo__V1__RegisterHostResponse *resp = NULL;
  colo_rpc_status_t st;
  int rc = colo_rpc_call(w->cli, "/colo.v1.Cluster/RegisterHost", &req.base,
                         &colo__v1__register_host_response__descriptor, w->cfg->call_timeout_ms,
                         (ProtobufCMessage **)&resp, &st);
  for (uint32_t i = 0; i < slots; i++)
    free(req.devices[i]);
  free(req.devices);
  if (rc < 0) {
    if (!w->was_unreachable)
      colo_log(COLO_LOG_WARN, "worker", "cannot register with %s: %s: %s (retrying)",
               w->cfg->coordinator, colo_rpc_status_name(st.code), st.message);
    w->was_unreachable = 1;
    return rc;
  }
  w->host_id = resp->host_id;
  w->session = resp->session;
  if (resp->heartbeat_interval_ms >= 100) {
    w->interval_ms = resp->heartbeat_interval_ms;
    uv_timer_set_repeat(&w->tick, w->interval_ms);
  }
  colo__v1__register_host_response__free_unpacked(resp, NULL);
  w->registered = 1;
  w->was_unreachable = 0;
  colo_log(COLO_LOG_INFO, "worker", "registered with %s as %s (host %llu, session %llu), %u slots",
           w->cfg->coordinator, w->name, (unsigned long long)w->host_id,
           (unsigned long long)w->session, slots);
  if (!w->ready_sent) {
    sd_notify(0, "READY=1");
    w->ready_sent = 1;
  }
  return 0;
}

static void on_tick(uv_timer_t *t) {
  workerd_t *w = t->data;
  if (w->watchdog_usec)
    sd_notify(0, "WATCHDOG=1");
  if (!w->registered) {
    do_register(w);
    return;
  }
  Colo__V1__HeartbeatRequest req = COLO__V1__HEARTBEAT_REQUEST__INIT;
  req.has_host_id = req.has_session = 1;
  req.host_id = w->host_id;
  req.session = w->session;
  Colo__V1__HeartbeatResponse *resp = NULL;
  colo_rpc_status_t st;
  if (colo_rpc_call(w->cli, "/colo.v1.Cluster/Heartbeat", &req.base,
                    &colo__v1__heartbeat_response__descriptor, w->cfg->call_timeout_ms,
                    (ProtobufCMessage **)&resp, &st) < 0) {
    if (!w->was_unreachable)
      colo_log(COLO_LOG_WARN, "worker", "heartbeat to %s failed: %s: %s (retrying)",
               w->cfg->coordinator, colo_rpc_status_name(st.code), st.message);
    w->was_unreachable = 1;
    return;
  }
  if (w->was_unreachable)
    colo_log(COLO_LOG_INFO, "worker", "%s answers again", w->cfg->coordinator);
  w->was_unreachable = 0;
  int again = resp->has_reregister && resp->reregister;
  if (resp->has_heartbeat_interval_ms && resp->heartbeat_interval_ms >= 100 &&
      resp->heartbeat_interval_ms != w->interval_ms) {
    w->interval_ms = resp->heartbeat_interval_ms;
    uv_timer_set_repeat(&w->tick, w->interval_ms);
  }
  colo__v1__heartbeat_response__free_unpacked(resp, NULL);
  if (again) { /* colod does not know this session: level-triggered, just register again */
    colo_log(COLO_LOG_INFO, "worker", "%s asks to register again", w->cfg->coordinator);
    w->registered = 0;
    do_register(w);
  }
}

static void on_closed(uv_handle_t *h) {
  (void)h;
}

static void on_signal(uv_signal_t *s, int signum) {
  workerd_t *w = s->data;
  colo_log(COLO_LOG_INFO, "worker", "%s: stopping", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  sd_notify(0, "STOPPING=1");
  uv_close((uv_handle_t *)&w->tick, on_closed);
  uv_close((uv_handle_t *)&w->sig_term, on_closed);
  uv_close((uv_handle_t *)&w->sig_int, on_closed);
}

/* one "--flag value" onto the config, through the same YAML codec as the file */
static int set_flag(Colo__V1__WorkerConfig **cfg, const char *field, const char *value) {
  char doc[600], err[300];
  if (strchr(value, '\'') || strchr(value, '\n') || strlen(value) > 400) {
    fprintf(stderr, "colo-workerd: --%s: bad value\n", field);
    return -1;
  }
  snprintf(doc, sizeof doc, "%s: '%s'", field, value);
  Colo__V1__WorkerConfig *one;
  if (colo_pb_from_yaml(doc, strlen(doc), "flag", &colo__v1__worker_config__descriptor,
                        (ProtobufCMessage **)&one, err, sizeof err) < 0) {
    fprintf(stderr, "colo-workerd: %s\n", err);
    return -1;
  }
  /* merge: concatenated protobuf messages merge field by field */
  size_t la = colo__v1__worker_config__get_packed_size(*cfg);
  size_t lb = colo__v1__worker_config__get_packed_size(one);
  uint8_t *buf = malloc(la + lb);
  colo__v1__worker_config__pack(*cfg, buf);
  colo__v1__worker_config__pack(one, buf + la);
  Colo__V1__WorkerConfig *merged = colo__v1__worker_config__unpack(NULL, la + lb, buf);
  free(buf);
  colo__v1__worker_config__free_unpacked(one, NULL);
  colo__v1__worker_config__free_unpacked(*cfg, NULL);
  *cfg = merged;
  return merged ? 0 : -1;
}

int main(int argc, char **argv) {
  enum { OPT_SLOTS = 256, OPT_LOG, OPT_VERSION };
  static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                       {"coordinator", required_argument, 0, 'C'},
                                       {"name", required_argument, 0, 'n'},
                                       {"address", required_argument, 0, 'a'},
                                       {"cpu-slots", required_argument, 0, OPT_SLOTS},
                                       {"log-level", required_argument, 0, OPT_LOG},
                                       {"help", no_argument, 0, 'h'},
                                       {"version", no_argument, 0, OPT_VERSION},
                                       {0, 0, 0, 0}};
  char err[512];
  const char *config = NULL;
  /* the file first, then flags on top, in any order on the command line */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--version")) {
      printf("colo-workerd %s\n", COLO_VERSION);
      return 0;
    }
    if ((!strcmp(argv[i], "--config") || !strcmp(argv[i], "-c")) && i + 1 < argc)
      config = argv[i + 1];
  }
  Colo__V1__WorkerConfig *cfg = NULL;
  if (config) {
    if (colo_pb_from_yaml_file(config, &colo__v1__worker_config__descriptor,
                               (ProtobufCMessage **)&cfg, err, sizeof err) < 0) {
      fprintf(stderr, "colo-workerd: %s\n", err);
      return 2;
    }
  } else {
    cfg = malloc(sizeof *cfg);
    colo__v1__worker_config__init(cfg);
  }
  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, "c:C:n:a:h", opts, NULL)) != -1) {
    switch (c) {
    case 'c':
      break;
    case 'C':
      rc = set_flag(&cfg, "coordinator", optarg);
      break;
    case 'n':
      rc = set_flag(&cfg, "name", optarg);
      break;
    case 'a':
      rc = set_flag(&cfg, "address", optarg);
      break;
    case OPT_SLOTS:
      rc = set_flag(&cfg, "cpu_slots", optarg);
      break;
    case OPT_LOG:
      rc = set_flag(&cfg, "log_level", optarg);
      break;
    default:
      rc = -1;
    }
  }
  if (rc < 0 || optind < argc) {
    if (optind < argc && rc == 0)
      fprintf(stderr, "colo-workerd: unexpected argument '%s'\n", argv[optind]);
    fprintf(stderr, "colo-workerd: try 'colo-workerd --help'\n");
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 2;
  }
  colo_pb_fill_defaults(&cfg->base);
  int lvl = colo_log_level_parse(cfg->log_level);
  if (lvl < 0) {
    fprintf(stderr, "colo-workerd: log_level \"%s\" must be error, warn, info or debug\n",
            cfg->log_level);
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 2;
  }
  colo_log_set_prefix("colo-workerd");
  colo_log_set_level((colo_log_level_t)lvl);

  workerd_t w;
  memset(&w, 0, sizeof w);
  w.cfg = cfg;
  if (cfg->name && cfg->name[0])
    snprintf(w.name, sizeof w.name, "%s", cfg->name);
  else if (gethostname(w.name, sizeof w.name - 1) != 0)
    snprintf(w.name, sizeof w.name, "localhost");
  if (colo_rpc_client_open(cfg->coordinator, NULL, &w.cli, err, sizeof err) < 0) {
    fprintf(stderr, "colo-workerd: %s\n", err);
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 1;
  }
  w.loop = uv_default_loop();
  w.interval_ms = 1000;
  uv_timer_init(w.loop, &w.tick);
  w.tick.data = &w;
  uv_signal_init(w.loop, &w.sig_term);
  uv_signal_init(w.loop, &w.sig_int);
  w.sig_term.data = w.sig_int.data = &w;
  uv_signal_start(&w.sig_term, on_signal, SIGTERM);
  uv_signal_start(&w.sig_int, on_signal, SIGINT);
  if (sd_watchdog_enabled(0, &w.watchdog_usec) <= 0)
    w.watchdog_usec = 0;
  colo_log(COLO_LOG_INFO, "worker", "colo-workerd %s: node %s, coordinator %s", COLO_VERSION,
           w.name, cfg->coordinator);
  do_register(&w);
  uv_timer_start(&w.tick, on_tick, w.interval_ms, w.interval_ms);
  uv_run(w.loop, UV_RUN_DEFAULT);
  uv_loop_close(w.loop);
  colo_rpc_client_close(w.cli);
  colo__v1__worker_config__free_unpacked(cfg, NULL);
  return 0;
}
