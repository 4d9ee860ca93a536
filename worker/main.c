/* colo-workerd: one per node. It registers the node's devices (CPU slots) with colod,
 * heartbeats at the interval colod sets with the actual state of its ranks, and reconciles them
 * with the desired state in each reply (ranks.c). It registers again when colod does not know
 * its session (a colod that lost it, or a first contact after colod was away); its ranks keep
 * running meanwhile. It talks to systemd (READY, WATCHDOG, STOPPING). On SIGTERM it stops its
 * ranks (SIGTERM, then SIGKILL after stop_grace_ms): they save a checkpoint at the step they
 * stop at and exit 75. It keeps heartbeating meanwhile, starting nothing, sends a last beat
 * with how they ended and what they saved, and exits.
 *
 * Exit codes: 0 after SIGTERM/SIGINT, 1 when it cannot start, 2 for bad usage.
 */
#include <ctype.h>
#include <errno.h>
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
#include "common/jobspec.h"
#include "common/log.h"
#include "common/pbcodec.h"
#include "proto/rpc.h"
#include "devices.h"
#include "ranks.h"
#include "watch.h"

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
  uint32_t slots;
  colo_devices_t devs;
  colo_ranks_t ranks;
  int stopping;
  colo_watch_t *watch;   /* colod's nudges; NULL: beats at the interval only */
  colo_health_t *health; /* the GPUs' health through NVML; NULL: CPU slots */
  int n_sick;            /* unhealthy devices in the last check */
  int n_slow;            /* devices at lowered clocks in the last check */
} workerd_t;

static void usage(FILE *out) {
  fprintf(out, "usage: colo-workerd [options]\n"
               "\n"
               "The colo worker daemon: registers this node's devices with colod, heartbeats, and\n"
               "starts and stops the ranks colod places here.\n"
               "\n"
               "options:\n"
               "  -c, --config FILE        YAML config (every field of WorkerConfig in\n"
               "                           proto/colo/v1/worker_config.proto)\n"
               "  -C, --coordinator ADDR   colod's address (default 127.0.0.1:7070)\n"
               "  -n, --name NAME          this node's name (default: the hostname)\n"
               "  -a, --address ADDR       where other nodes reach this one (default 127.0.0.1)\n"
               "      --devices auto|gpu|cpu  GPUs through NVML, else CPU slots (default auto)\n"
               "      --cpu-slots N        rank slots on a CPU node (default: the core count)\n"
               "      --label L            what this node offers, for jobs' resources.host_labels\n"
               "                           (a100, ib, ...); repeat it for more\n"
               "      --run-dir DIR        rank files and logs (default /var/lib/colo-worker)\n"
               "      --data-root DIR      where job data paths are resolved\n"
               "      --checkpoint-root DIR  where job checkpoint directories are made\n"
               "      --nvme-root DIR      where a job's memory.nvme_dir is resolved (local disk)\n"
               "      --colo-train PATH    the engine binary (default: colo-train in PATH)\n"
               "      --tls-ca FILE        TLS to colod: the CA its certificate chains to (PEM)\n"
               "      --tls-cert FILE      this node's certificate, for mutual TLS (PEM)\n"
               "      --tls-key FILE       and its key (PEM)\n"
               "      --tls-server-name NAME  the name in colod's certificate, where it is not\n"
               "                           the coordinator's host\n"
               "      --log-level LEVEL    error, warn, info or debug\n"
               "  -h, --help               this help\n"
               "      --version            print the version\n"
               "\n"
               "Ranks run in RUN_DIR/job-J/attempt-A/ with their job file, log and progress\n"
               "records; their output is also shipped to colod ('coloctl logs').\n");
}

static Colo__V1__Device **make_devices(const colo_devices_t *devs) {
  Colo__V1__Device **d = calloc(devs->n ? devs->n : 1, sizeof *d);
  for (size_t i = 0; i < devs->n; i++) {
    const colo_device_info_t *x = &devs->dev[i];
    d[i] = malloc(sizeof **d);
    colo__v1__device__init(d[i]);
    d[i]->has_index = d[i]->has_kind = 1;
    d[i]->index = x->index;
    d[i]->kind = (Colo__V1__DeviceKind)x->kind;
    d[i]->name = (char *)x->name;
    if (x->uuid[0])
      d[i]->uuid = (char *)x->uuid;
    d[i]->has_memory_bytes = x->memory_bytes > 0;
    d[i]->memory_bytes = x->memory_bytes;
  }
  return d;
}

static int do_register(workerd_t *w) {
  uint32_t slots = (uint32_t)w->devs.n;
  Colo__V1__RegisterHostRequest req = COLO__V1__REGISTER_HOST_REQUEST__INIT;
  req.name = w->name;
  req.address = w->cfg->address;
  req.n_devices = slots;
  req.devices = make_devices(&w->devs);
  req.has_cpu_count = 1;
  req.cpu_count = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  req.has_memory_bytes = pages > 0 && psize > 0;
  req.memory_bytes = (uint64_t)pages * (uint64_t)psize;
  req.version = COLO_VERSION;
  req.n_labels = w->cfg->n_labels;
  req.labels = w->cfg->labels;
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
  if (w->watch)
    colo_watch_session(w->watch, w->host_id, w->session);
  w->was_unreachable = 0;
  colo_log(COLO_LOG_INFO, "worker", "registered with %s as %s (host %llu, session %llu), %u %s",
           w->cfg->coordinator, w->name, (unsigned long long)w->host_id,
           (unsigned long long)w->session, slots,
           slots && w->devs.dev[0].kind == COLO_DEVICE_GPU ? "GPUs" : "slots");
  if (!w->ready_sent) {
    sd_notify(0, "READY=1");
    w->ready_sent = 1;
  }
  return 0;
}

/* Devices and their reasons as HeartbeatRequest entries (msgs and ptrs hold n each): n. */
static size_t health_msgs(const colo_device_health_t *v, size_t n, Colo__V1__DeviceHealth *msgs,
                          Colo__V1__DeviceHealth **ptrs) {
  for (size_t i = 0; i < n; i++) {
    colo__v1__device_health__init(&msgs[i]);
    msgs[i].has_index = 1;
    msgs[i].index = v[i].index;
    msgs[i].reason = (char *)v[i].reason;
    ptrs[i] = &msgs[i];
  }
  return n;
}

static void on_tick(uv_timer_t *t) {
  workerd_t *w = t->data;
  if (w->watchdog_usec)
    sd_notify(0, "WATCHDOG=1");
  if (w->stopping && !w->registered)
    return;
  if (!w->registered) {
    do_register(w);
    return;
  }
  Colo__V1__HeartbeatRequest req = COLO__V1__HEARTBEAT_REQUEST__INIT;
  req.has_host_id = req.has_session = 1;
  req.host_id = w->host_id;
  req.session = w->session;
  req.n_ranks = colo_ranks_status(&w->ranks, &req.ranks);
  req.has_stopping = w->stopping;
  req.stopping = w->stopping != 0;
  /* devices unfit to run ranks, checked at every beat */
  colo_device_health_t sick[COLO_MAX_NODE_DEVICES];
  Colo__V1__DeviceHealth dh[COLO_MAX_NODE_DEVICES], *dhp[COLO_MAX_NODE_DEVICES];
  size_t n_sick = colo_health_check(w->health, sick, COLO_MAX_NODE_DEVICES);
  req.n_unhealthy = health_msgs(sick, n_sick, dh, dhp);
  req.unhealthy = dhp;
  /* and those running at lowered clocks (a thermal slowdown, a power brake) */
  colo_device_health_t slow[COLO_MAX_NODE_DEVICES];
  Colo__V1__DeviceHealth sh[COLO_MAX_NODE_DEVICES], *shp[COLO_MAX_NODE_DEVICES];
  size_t n_slow = colo_health_slowed(w->health, slow, COLO_MAX_NODE_DEVICES);
  req.n_slowed = health_msgs(slow, n_slow, sh, shp);
  req.slowed = shp;
  if ((int)n_slow != w->n_slow)
    colo_log(n_slow ? COLO_LOG_WARN : COLO_LOG_INFO, "worker", "%zu slowed device%s%s%s%s", n_slow,
             n_slow == 1 ? "" : "s", n_slow ? " (the first: " : "", n_slow ? slow[0].reason : "",
             n_slow ? ")" : "");
  w->n_slow = (int)n_slow;
  if ((int)n_sick != w->n_sick)
    colo_log(n_sick ? COLO_LOG_WARN : COLO_LOG_INFO, "worker", "%zu unhealthy device%s%s%s%s",
             n_sick, n_sick == 1 ? "" : "s", n_sick ? " (the first: " : "",
             n_sick ? sick[0].reason : "", n_sick ? ")" : "");
  w->n_sick = (int)n_sick;
  Colo__V1__HeartbeatResponse *resp = NULL;
  colo_rpc_status_t st;
  int rc = colo_rpc_call(w->cli, "/colo.v1.Cluster/Heartbeat", &req.base,
                         &colo__v1__heartbeat_response__descriptor, w->cfg->call_timeout_ms,
                         (ProtobufCMessage **)&resp, &st);
  colo_ranks_status_done(&w->ranks, rc == 0);
  if (rc < 0) {
    /* colod away: the ranks keep running; the next heartbeat that gets through converges */
    if (!w->was_unreachable)
      colo_log(COLO_LOG_WARN, "worker", "heartbeat to %s failed: %s: %s (retrying)",
               w->cfg->coordinator, colo_rpc_status_name(st.code), st.message);
    w->was_unreachable = 1;
    return;
  }
  if (w->was_unreachable)
    colo_log(COLO_LOG_INFO, "worker", "%s answers again", w->cfg->coordinator);
  w->was_unreachable = 0;
  /* stopping: the beats only report the ranks' ends and last checkpoints; nothing new starts */
  int again = !w->stopping && resp->has_reregister && resp->reregister;
  if (resp->has_heartbeat_interval_ms && resp->heartbeat_interval_ms >= 100 &&
      resp->heartbeat_interval_ms != w->interval_ms) {
    w->interval_ms = resp->heartbeat_interval_ms;
    uv_timer_set_repeat(&w->tick, w->interval_ms);
  }
  if (!again && !w->stopping)
    colo_ranks_reconcile(&w->ranks, resp->desired, resp->n_desired);
  /* colod expects to place a restarting job soon: beat again then, once */
  if (!again && resp->has_next_beat_ms && resp->next_beat_ms < w->interval_ms)
    uv_timer_start(&w->tick, on_tick, resp->next_beat_ms, w->interval_ms);
  colo__v1__heartbeat_response__free_unpacked(resp, NULL);
  if (again) { /* colod does not know this session: level-triggered, just register again */
    colo_log(COLO_LOG_INFO, "worker", "%s asks to register again", w->cfg->coordinator);
    w->registered = 0;
    do_register(w);
  }
}

/* A rank exited, or started training: heartbeat now, so that colod can end its attempt, or
 * count it as training, without waiting for the interval. colod's nudges (watch.c) come here
 * too: what this host should run changed, and the beat's reply says how. */
static void on_rank_news(void *data) {
  workerd_t *w = data;
  if (w->registered && !uv_is_closing((uv_handle_t *)&w->tick))
    uv_timer_start(&w->tick, on_tick, 0, w->interval_ms);
}

static void on_closed(uv_handle_t *h) {
  (void)h;
}

static void on_ranks_stopped(void *data) {
  workerd_t *w = data;
  /* a last beat with how the ranks ended and the checkpoints they saved as they stopped, so
   * that colod restarts their jobs from those */
  if (w->registered)
    on_tick(&w->tick);
  uv_close((uv_handle_t *)&w->tick, on_closed);
  uv_close((uv_handle_t *)&w->sig_term, on_closed);
  uv_close((uv_handle_t *)&w->sig_int, on_closed);
}

static void on_signal(uv_signal_t *s, int signum) {
  workerd_t *w = s->data;
  if (w->stopping)
    return;
  w->stopping = 1;
  colo_log(COLO_LOG_INFO, "worker", "%s: stopping %zu ranks",
           signum == SIGTERM ? "SIGTERM" : "SIGINT", colo_ranks_count(&w->ranks));
  sd_notify(0, "STOPPING=1");
  colo_watch_stop(w->watch); /* nothing new starts: the beats at the interval report the ends */
  w->watch = NULL;
  colo_ranks_stop_all(&w->ranks, on_ranks_stopped, w);
}

/* one "--flag value" onto the config, through the same YAML codec as the file */
static int set_flag(Colo__V1__WorkerConfig **cfg, const char *field, const char *value) {
  char doc[600], err[300];
  if (strchr(value, '\'') || strchr(value, '\n') || strlen(value) > 400) {
    fprintf(stderr, "colo-workerd: --%s: bad value\n", field);
    return -1;
  }
  if (strcmp(field, "labels") != 0)
    snprintf(doc, sizeof doc, "%s: '%s'", field, value);
  else /* a repeated field: a list of one */
    snprintf(doc, sizeof doc, "%s: ['%s']", field, value);
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

/* A relative path in the config is taken from the current directory. The field's string is
 * replaced by one the message owns (freed with it, as any string that is not the default). */
static int absolute(Colo__V1__WorkerConfig *cfg, const char *field) {
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field_by_name(&colo__v1__worker_config__descriptor, field);
  char **path = (char **)((char *)cfg + fd->offset);
  if (!*path || !(*path)[0] || (*path)[0] == '/')
    return 0;
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd))
    return -1;
  size_t n = strlen(cwd) + strlen(*path) + 2;
  char *abs = malloc(n);
  if (!abs)
    return -1;
  snprintf(abs, n, "%s/%s", cwd, *path);
  if (*path != fd->default_value)
    free(*path);
  *path = abs;
  return 0;
}

/* rank_env: at most 64 NAME=VALUE entries, NAME of letters, digits and '_' (not first a digit),
 * none of the variables the worker sets for each rank (COLO_* other than the engine's
 * COLO_CUDA_*, COLO_CUDNN_* and COLO_COMM_* settings, and CUDA_VISIBLE_DEVICES) */
static int rank_env_check(const Colo__V1__WorkerConfig *cfg, char *err, size_t errlen) {
  if (cfg->n_rank_env > 64) {
    snprintf(err, errlen, "rank_env has %zu entries; at most 64", cfg->n_rank_env);
    return -1;
  }
  for (size_t i = 0; i < cfg->n_rank_env; i++) {
    const char *e = cfg->rank_env[i], *eq = strchr(e, '=');
    size_t n = eq ? (size_t)(eq - e) : 0, k = 0;
    while (k < n && (isalnum((unsigned char)e[k]) || e[k] == '_') &&
           !(k == 0 && isdigit((unsigned char)e[0])))
      k++;
    int ours = (!strncmp(e, "COLO_", 5) && strncmp(e, "COLO_CUDA_", 10) != 0 &&
                strncmp(e, "COLO_CUDNN_", 11) != 0 && strncmp(e, "COLO_COMM_", 10) != 0) ||
               !strncmp(e, "CUDA_VISIBLE_DEVICES=", 21);
    if (!eq || n == 0 || k < n || strlen(e) > 1000 || ours) {
      snprintf(err, errlen,
               "rank_env[%zu] \"%.80s\" must be NAME=VALUE (NAME of letters, digits and '_', "
               "not one the worker sets: COLO_* or CUDA_VISIBLE_DEVICES; at most 1000 "
               "characters)",
               i, e);
      return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  enum {
    OPT_SLOTS = 256,
    OPT_LOG,
    OPT_VERSION,
    OPT_RUN,
    OPT_DATA,
    OPT_CKPT,
    OPT_NVME,
    OPT_TRAIN,
    OPT_DEV,
    OPT_TLS_CA,
    OPT_TLS_CERT,
    OPT_TLS_KEY,
    OPT_TLS_NAME,
    OPT_LABEL
  };
  static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                       {"coordinator", required_argument, 0, 'C'},
                                       {"name", required_argument, 0, 'n'},
                                       {"address", required_argument, 0, 'a'},
                                       {"cpu-slots", required_argument, 0, OPT_SLOTS},
                                       {"devices", required_argument, 0, OPT_DEV},
                                       {"log-level", required_argument, 0, OPT_LOG},
                                       {"run-dir", required_argument, 0, OPT_RUN},
                                       {"data-root", required_argument, 0, OPT_DATA},
                                       {"checkpoint-root", required_argument, 0, OPT_CKPT},
                                       {"nvme-root", required_argument, 0, OPT_NVME},
                                       {"colo-train", required_argument, 0, OPT_TRAIN},
                                       {"tls-ca", required_argument, 0, OPT_TLS_CA},
                                       {"tls-cert", required_argument, 0, OPT_TLS_CERT},
                                       {"tls-key", required_argument, 0, OPT_TLS_KEY},
                                       {"tls-server-name", required_argument, 0, OPT_TLS_NAME},
                                       {"label", required_argument, 0, OPT_LABEL},
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
    case OPT_DEV:
      rc = set_flag(&cfg, "devices", optarg);
      break;
    case OPT_LOG:
      rc = set_flag(&cfg, "log_level", optarg);
      break;
    case OPT_RUN:
      rc = set_flag(&cfg, "run_dir", optarg);
      break;
    case OPT_DATA:
      rc = set_flag(&cfg, "data_root", optarg);
      break;
    case OPT_CKPT:
      rc = set_flag(&cfg, "checkpoint_root", optarg);
      break;
    case OPT_NVME:
      rc = set_flag(&cfg, "nvme_root", optarg);
      break;
    case OPT_TRAIN:
      rc = set_flag(&cfg, "colo_train", optarg);
      break;
    case OPT_TLS_CA:
      rc = set_flag(&cfg, "tls_ca", optarg);
      break;
    case OPT_TLS_CERT:
      rc = set_flag(&cfg, "tls_cert", optarg);
      break;
    case OPT_TLS_KEY:
      rc = set_flag(&cfg, "tls_key", optarg);
      break;
    case OPT_TLS_NAME:
      rc = set_flag(&cfg, "tls_server_name", optarg);
      break;
    case OPT_LABEL: /* one more: the messages merged append it */
      rc = set_flag(&cfg, "labels", optarg);
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
  /* ranks run in their own directory: every configured path becomes absolute */
  if (absolute(cfg, "run_dir") < 0 || absolute(cfg, "data_root") < 0 ||
      absolute(cfg, "checkpoint_root") < 0 || absolute(cfg, "nvme_root") < 0 ||
      absolute(cfg, "tls_ca") < 0 || absolute(cfg, "tls_cert") < 0 ||
      absolute(cfg, "tls_key") < 0 ||
      (strchr(cfg->colo_train, '/') && absolute(cfg, "colo_train") < 0)) {
    fprintf(stderr, "colo-workerd: cannot resolve the configured paths: %s\n", strerror(errno));
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 2;
  }
  int lvl = colo_log_level_parse(cfg->log_level);
  if (lvl < 0) {
    fprintf(stderr, "colo-workerd: log_level \"%s\" must be error, warn, info or debug\n",
            cfg->log_level);
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 2;
  }
  if (colo_labels_check("labels", cfg->labels, cfg->n_labels, err, sizeof err) < 0 ||
      rank_env_check(cfg, err, sizeof err) < 0) {
    fprintf(stderr, "colo-workerd: %s\n", err);
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
  colo_rpc_tls_t tls = {cfg->tls_ca, cfg->tls_cert, cfg->tls_key, cfg->tls_server_name};
  colo_rpc_client_opts_t co = {.tls = &tls};
  if (colo_rpc_client_open(cfg->coordinator, &co, &w.cli, err, sizeof err) < 0) {
    fprintf(stderr, "colo-workerd: %s\n", err);
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 1;
  }
  w.loop = uv_default_loop();
  w.interval_ms = 1000;
  w.slots = cfg->cpu_slots;
  if (w.slots == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    w.slots = n > 0 ? (uint32_t)n : 1;
  }
  char why[256];
  if (colo_devices_discover(cfg->devices, cfg->nvml_library, w.slots, &w.devs, why, sizeof why) <
      0) {
    fprintf(stderr, "colo-workerd: %s\n", why);
    colo_rpc_client_close(w.cli);
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 1;
  }
  colo_log(COLO_LOG_INFO, "worker", "devices: %s", why);
  w.slots = (uint32_t)w.devs.n;
  if (colo_ranks_init(&w.ranks, w.loop, cfg, w.slots, err, sizeof err) < 0) {
    fprintf(stderr, "colo-workerd: %s\n", err);
    colo_rpc_client_close(w.cli);
    colo__v1__worker_config__free_unpacked(cfg, NULL);
    return 1;
  }
  colo_ranks_reap_orphans(&w.ranks);
  w.health = colo_health_open(cfg->nvml_library, &w.devs);
  w.ranks.on_exit = on_rank_news;
  w.ranks.on_started = on_rank_news;
  w.ranks.on_exit_data = &w;
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
  if (colo_watch_start(w.loop, cfg->coordinator, &co, on_rank_news, &w, &w.watch, err, sizeof err) <
      0)
    colo_log(COLO_LOG_WARN, "worker", "no nudges from colod, beats at the interval only: %s", err);
  do_register(&w);
  uv_timer_start(&w.tick, on_tick, w.interval_ms, w.interval_ms);
  uv_run(w.loop, UV_RUN_DEFAULT);
  colo_ranks_free(&w.ranks);
  colo_health_close(w.health);
  uv_loop_close(w.loop);
  colo_rpc_client_close(w.cli);
  colo__v1__worker_config__free_unpacked(cfg, NULL);
  return 0;
}
