/* colo RPC: gRPC C core with protobuf-c messages.
 *
 * Server: a table of methods (unary or server-streaming), each with a handler that runs on the
 * libuv loop thread. One completion-queue thread waits on gRPC and hands every completion to the
 * loop with uv_async_send; the loop drains all queued completions per wake-up. Every piece of
 * call state is touched only on the loop thread.
 *
 * Client: blocking calls with deadlines, for coloctl, workers and tests. One client per thread;
 * only colo_rpc_client_cancel may come from another.
 * A call that finds the server unavailable gives the client a new channel for the next one, so
 * a server that restarts is reached again at once rather than after gRPC's reconnect back-off.
 *
 * Messages are size-bounded (max_message_bytes) and decoded before a handler sees them; handlers
 * validate fields. Transport is insecure by default, or TLS from PEM files (colo_rpc_tls_t):
 * server-only, or mutual, where the server refuses every caller without a certificate from its
 * CA.
 */
#ifndef COLO_RPC_H
#define COLO_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <uv.h>

typedef struct colo_rpc_server_s colo_rpc_server_t;
typedef struct colo_rpc_call_s colo_rpc_call_t;
typedef struct colo_rpc_client_s colo_rpc_client_t;

/* Runs on the loop thread. `req` is valid only during the call; the handler must eventually
 * finish `call` exactly once: colo_rpc_reply / colo_rpc_fail for unary methods,
 * colo_rpc_stream_end (or colo_rpc_fail) for streaming ones. */
typedef void (*colo_rpc_handler_cb)(colo_rpc_call_t *call, const ProtobufCMessage *req, void *data);

/* The client went away (cancelled, deadline, connection lost) before the call was finished.
 * Runs on the loop thread, at most once, never after the call was finished. The owner must still
 * finish the call; sends after this are dropped. */
typedef void (*colo_rpc_cancel_cb)(colo_rpc_call_t *call, void *data);

/* The server has stopped: every call is finished and all gRPC resources are released. `srv` is
 * NULL: the server is already freed. */
typedef void (*colo_rpc_closed_cb)(colo_rpc_server_t *srv, void *data);

typedef struct {
  const char *path; /* "/colo.v1.Cluster/SubmitJob" */
  const ProtobufCMessageDescriptor *request;
  int server_streaming;
  colo_rpc_handler_cb handler;
} colo_rpc_method_t;

/* TLS from PEM files (paths; NULL or "" for none). A server needs cert and key; with ca it also
 * asks every client for a certificate that chains to ca, and refuses a call without one (mutual
 * TLS). A client needs ca, the roots that the server's certificate must chain to (none: the
 * system's), and cert and key where the server asks for a certificate. server_name (client
 * only): the name the server's certificate must hold, where it is not the target's host. */
typedef struct {
  const char *ca, *cert, *key, *server_name;
} colo_rpc_tls_t;

/* 1 when any of ca, cert or key is set: the transport is TLS. */
int colo_rpc_tls_enabled(const colo_rpc_tls_t *t);
/* Fills what is unset in t from COLO_TLS_CA, COLO_TLS_CERT, COLO_TLS_KEY and
 * COLO_TLS_SERVER_NAME (the strings stay the environment's). Returns colo_rpc_tls_enabled(t). */
int colo_rpc_tls_from_env(colo_rpc_tls_t *t);

typedef struct {
  const char *listen;        /* "127.0.0.1:7070"; port 0 picks a free one */
  size_t max_message_bytes;  /* requests larger than this are refused; 0: 4 MiB */
  int requests_per_method;   /* outstanding accepts per method; 0: 16 */
  size_t max_stream_queue;   /* queued messages per stream before it is ended; 0: 1024 */
  const colo_rpc_tls_t *tls; /* NULL, or nothing set: insecure. Read at start. */
} colo_rpc_server_opts_t;

/* Creates, binds and starts a server. On failure returns a negative colo code, writes why into
 * err and leaves *out untouched. `methods` must outlive the server. */
int colo_rpc_server_start(uv_loop_t *loop, const colo_rpc_server_opts_t *opts,
                          const colo_rpc_method_t *methods, size_t n_methods, void *data,
                          colo_rpc_server_t **out, char *err, size_t errlen);

/* Reads the TLS files again (a certificate, key or client CA rotated at its path): the next
 * connections' handshakes use them, those open keep theirs. A client CA can be neither added nor
 * removed. COLO_ESTATE for a server started without TLS. */
int colo_rpc_server_reload_tls(colo_rpc_server_t *srv, const colo_rpc_tls_t *tls, char *err,
                               size_t errlen);

/* The bound port (useful with port 0). */
int colo_rpc_server_port(const colo_rpc_server_t *srv);

/* Number of calls handed to handlers and not yet finished. */
size_t colo_rpc_server_live_calls(const colo_rpc_server_t *srv);

/* Stops accepting calls, lets in-flight calls finish, cancels those still running after
 * `grace_ms`, then frees everything and calls `cb`. The caller ends its own streams first. */
void colo_rpc_server_shutdown(colo_rpc_server_t *srv, uint64_t grace_ms, colo_rpc_closed_cb cb,
                              void *data);

/* Unary success: sends `resp` with status OK and finishes the call. */
int colo_rpc_reply(colo_rpc_call_t *call, const ProtobufCMessage *resp);
/* Finishes the call with a non-OK status and a printf-style message. */
int colo_rpc_fail(colo_rpc_call_t *call, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Finishes the call with the status a colo error code maps to and `msg`. */
int colo_rpc_fail_err(colo_rpc_call_t *call, int err, const char *msg);

/* Streaming: queues one message. Returns COLO_ECANCELED once the client has gone, COLO_ETOOBIG
 * (and ends the stream with RESOURCE_EXHAUSTED) when the client reads too slowly. */
int colo_rpc_stream_send(colo_rpc_call_t *call, const ProtobufCMessage *msg);
/* Streaming: sends `code`/`msg` after every queued message and finishes the call. */
int colo_rpc_stream_end(colo_rpc_call_t *call, grpc_status_code code, const char *msg);

void colo_rpc_call_on_cancel(colo_rpc_call_t *call, colo_rpc_cancel_cb cb, void *data);
/* The peer's address ("ipv4:127.0.0.1:51234"); owned by the call. */
const char *colo_rpc_call_peer(colo_rpc_call_t *call);
const colo_rpc_method_t *colo_rpc_call_method(const colo_rpc_call_t *call);
/* Over mutual TLS: 1 when the caller presented a certificate the server verified, with its
 * common name and its first organisational unit (empty where it has none) copied out; 0
 * otherwise (no TLS, or no certificate). */
int colo_rpc_call_peer_cert(colo_rpc_call_t *call, char *cn, size_t cn_len, char *ou,
                            size_t ou_len);

/* Status code <-> colo error code. */
int colo_rpc_status_to_err(grpc_status_code code);
grpc_status_code colo_rpc_err_to_status(int err);
const char *colo_rpc_status_name(grpc_status_code code);

/* ---- client ---- */

typedef struct {
  size_t max_message_bytes;  /* 0: 64 MiB */
  const colo_rpc_tls_t *tls; /* NULL, or nothing set: insecure. Read at open. */
} colo_rpc_client_opts_t;

/* Calls grpc_init; pair with colo_rpc_client_close. opts may be NULL. A TLS file that cannot be
 * read fails here, with err naming it. */
int colo_rpc_client_open(const char *target, const colo_rpc_client_opts_t *opts,
                         colo_rpc_client_t **out, char *err, size_t errlen);
void colo_rpc_client_close(colo_rpc_client_t *cli);

typedef struct {
  grpc_status_code code; /* GRPC_STATUS_OK on success */
  char message[512];     /* the server's status message, or the transport's */
} colo_rpc_status_t;

/* Blocking unary call. On success *resp is a new message (free with
 * protobuf_c_message_free_unpacked(resp, NULL)) and 0 is returned; otherwise the mapped colo code,
 * with st filled in and *resp untouched. timeout_ms 0 means no deadline. */
int colo_rpc_call(colo_rpc_client_t *cli, const char *path, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc, uint64_t timeout_ms,
                  ProtobufCMessage **resp, colo_rpc_status_t *st);

/* Receives one streamed message; return non-zero to stop the stream early (cancels it). The
 * message is freed after the callback returns. */
typedef int (*colo_rpc_stream_cb)(const ProtobufCMessage *msg, void *data);

/* Blocking server-streaming call: returns when the server ends the stream, on error, or when the
 * callback asks to stop (0 in that case). */
int colo_rpc_call_stream(colo_rpc_client_t *cli, const char *path, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *resp_desc, uint64_t timeout_ms,
                         colo_rpc_stream_cb cb, void *data, colo_rpc_status_t *st);

/* Cancels the call the client is making (from any thread) and every later one, which return
 * COLO_ECANCELED: how another thread stops one blocked in colo_rpc_call_stream. */
void colo_rpc_client_cancel(colo_rpc_client_t *cli);

#endif
