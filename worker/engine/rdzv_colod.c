/* colod's rendezvous store as the engine's second rendezvous implementation: addresses
 * "colod://HOST:PORT/JOB/ATTEMPT" become RendezvousPut and RendezvousGet calls. A coordinator
 * that is briefly away (restarting) is retried until the caller's deadline. Over TLS when the
 * worker passes its TLS files in COLO_TLS_*. */
#include "rdzv_colod.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/error.h"
#include "../../proto/rpc.h"
#include "colo/v1/cluster.pb-c.h"
#include "comm/store.h"

typedef struct {
  char target[256];
  uint64_t job_id;
  uint32_t attempt;
} colod_addr_t;

/* one client per thread (the RPC client is not shared between threads), for its target */
static __thread colo_rpc_client_t *thread_cli;
static __thread char thread_target[256];

static int parse(const char *addr, colod_addr_t *a, char *err, size_t errlen) {
  const char *p = addr + strlen("colod://");
  const char *slash = strchr(p, '/');
  unsigned long long job;
  unsigned attempt;
  char tail;
  if (!slash || (size_t)(slash - p) >= sizeof a->target || slash == p ||
      sscanf(slash, "/%llu/%u%c", &job, &attempt, &tail) != 2 || !job || !attempt) {
    snprintf(err, errlen, "bad rendezvous address %s (want colod://HOST:PORT/JOB/ATTEMPT)", addr);
    return COLO_EINVAL;
  }
  memcpy(a->target, p, (size_t)(slash - p));
  a->target[slash - p] = '\0';
  a->job_id = job;
  a->attempt = attempt;
  return 0;
}

static colo_rpc_client_t *client(const char *target, char *err, size_t errlen) {
  if (thread_cli && !strcmp(thread_target, target))
    return thread_cli;
  if (thread_cli)
    colo_rpc_client_close(thread_cli);
  thread_cli = NULL;
  /* TLS with the files its worker passed (COLO_TLS_CA, _CERT, _KEY, _SERVER_NAME) */
  colo_rpc_tls_t tls = {0};
  colo_rpc_tls_from_env(&tls);
  colo_rpc_client_opts_t opts = {.tls = &tls};
  if (colo_rpc_client_open(target, &opts, &thread_cli, err, errlen) < 0)
    return NULL;
  snprintf(thread_target, sizeof thread_target, "%s", target);
  return thread_cli;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* One call, retried while colod is unreachable, until timeout_ms has passed. */
static int call(const colod_addr_t *a, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *resp_desc, int timeout_ms, uint32_t wait_ms,
                ProtobufCMessage **resp, char *err, size_t errlen) {
  int rc;
  colo_rpc_client_t *cli = client(a->target, err, errlen);
  if (!cli)
    return COLO_EUNAVAIL;
  char path[96];
  snprintf(path, sizeof path, "/colo.v1.Cluster/%s", method);
  int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 60000);
  for (;;) {
    colo_rpc_status_t st;
    int64_t left = deadline - mono_ms();
    rc = colo_rpc_call(cli, path, req, resp_desc,
                       (uint64_t)(left > 0 ? left : 1) + wait_ms / 10 + 1000, resp, &st);
    if (rc == 0)
      return 0;
    if (st.code == GRPC_STATUS_UNAVAILABLE && mono_ms() + 200 < deadline) {
      pause_ms(200); /* colod restarting: try again (the client renews its channel) */
      continue;
    }
    snprintf(err, errlen, "rendezvous at colod %s: %s %s: %s", a->target, method,
             colo_rpc_status_name(st.code), st.message);
    return st.code == GRPC_STATUS_DEADLINE_EXCEEDED ? COLO_ETIMEDOUT : rc;
  }
}

static int colod_set(const char *addr, const char *key, const char *value, int timeout_ms,
                     char *err, size_t errlen) {
  colod_addr_t a;
  int rc = parse(addr, &a, err, errlen);
  if (rc < 0)
    return rc;
  Colo__V1__RendezvousPutRequest req = COLO__V1__RENDEZVOUS_PUT_REQUEST__INIT;
  req.has_job_id = req.has_attempt = req.has_value = 1;
  req.job_id = a.job_id;
  req.attempt = a.attempt;
  req.key = (char *)key;
  req.value.data = (uint8_t *)value;
  req.value.len = strlen(value);
  ProtobufCMessage *resp = NULL;
  rc = call(&a, "RendezvousPut", &req.base, &colo__v1__rendezvous_put_response__descriptor,
            timeout_ms, 0, &resp, err, errlen);
  if (resp)
    protobuf_c_message_free_unpacked(resp, NULL);
  return rc;
}

static int colod_get(const char *addr, const char *key, char *value, size_t cap, int timeout_ms,
                     char *err, size_t errlen) {
  colod_addr_t a;
  int rc = parse(addr, &a, err, errlen);
  if (rc < 0)
    return rc;
  Colo__V1__RendezvousGetRequest req = COLO__V1__RENDEZVOUS_GET_REQUEST__INIT;
  req.has_job_id = req.has_attempt = req.has_wait_ms = 1;
  req.job_id = a.job_id;
  req.attempt = a.attempt;
  req.key = (char *)key;
  req.wait_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 60000;
  Colo__V1__RendezvousGetResponse *resp = NULL;
  rc = call(&a, "RendezvousGet", &req.base, &colo__v1__rendezvous_get_response__descriptor,
            timeout_ms, req.wait_ms, (ProtobufCMessage **)&resp, err, errlen);
  if (rc < 0)
    return rc;
  if (resp->value.len + 1 > cap) {
    snprintf(err, errlen, "rendezvous key %s: value of %zu bytes exceeds %zu", key, resp->value.len,
             cap - 1);
    colo__v1__rendezvous_get_response__free_unpacked(resp, NULL);
    return COLO_ETOOBIG;
  }
  memcpy(value, resp->value.data, resp->value.len);
  value[resp->value.len] = '\0';
  colo__v1__rendezvous_get_response__free_unpacked(resp, NULL);
  return 0;
}

void colo_rdzv_colod_register(void) {
  static const colo_rdzv_remote_t impl = {colod_set, colod_get};
  colo_rdzv_set_remote(&impl);
}
