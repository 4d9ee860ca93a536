/* The rendezvous store: a small key-value server that rank 0 runs (as torchrun's TCP store) and
 * every rank uses to publish and find addresses and ids. get waits until the key is set. Keys
 * and values are at most 4 KiB. */
#ifndef COLO_STORE_RDZV_H
#define COLO_STORE_RDZV_H

#include <stddef.h>

typedef struct colo_rdzv_server_s colo_rdzv_server_t;

/* Serves on addr ("host:port") from a thread of its own until stopped. */
int colo_rdzv_server_start(const char *addr, colo_rdzv_server_t **out, char *err, size_t errlen);
void colo_rdzv_server_stop(colo_rdzv_server_t *s);

/* The second implementation: a store that colod serves, named "colod://HOST:PORT/JOB/ATTEMPT".
 * The engine does not speak gRPC; colo-train registers these calls (worker/engine/rdzv_colod.c)
 * and colo_rdzv_set/get hand such addresses to them. */
typedef struct {
  int (*set)(const char *addr, const char *key, const char *value, int timeout_ms, char *err,
             size_t errlen);
  int (*get)(const char *addr, const char *key, char *value, size_t cap, int timeout_ms, char *err,
             size_t errlen);
} colo_rdzv_remote_t;
void colo_rdzv_set_remote(const colo_rdzv_remote_t *remote);
/* 1 when rank 0 must serve the store at addr itself (a "host:port"), 0 for colod's. */
int colo_rdzv_served_by_rank0(const char *addr);

/* Client calls: connect (retrying until timeout_ms), set, get-with-wait. */
int colo_rdzv_set(const char *addr, const char *key, const char *value, int timeout_ms, char *err,
                  size_t errlen);
int colo_rdzv_get(const char *addr, const char *key, char *value, size_t cap, int timeout_ms,
                  char *err, size_t errlen);

/* "host:port" -> a connected, blocking TCP socket, retrying refused connections until the
 * deadline; -1 with err set otherwise. */
int colo_tcp_connect(const char *addr, int timeout_ms, char *err, size_t errlen);
/* Listens on host:port (port 0: any); returns the fd and writes the bound port. */
int colo_tcp_listen(const char *host, int port, int *bound_port, char *err, size_t errlen);

#endif
