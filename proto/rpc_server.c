/* gRPC server on the gRPC C core, bridged into a libuv loop.
 *
 * One thread blocks in grpc_completion_queue_next and appends each completion to a mutex-guarded
 * array, then wakes the loop with uv_async_send (which coalesces). The loop callback swaps the
 * array out and dispatches every completion in it. All call state is owned by the loop thread;
 * gRPC batches are started from there too.
 *
 * A call holds one reference per outstanding gRPC tag plus one for its owner until finished;
 * it is freed when the count reaches zero.
 */
#include "rpc.h"
#include "../common/pbcodec.h"
#include "rpc_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "../common/error.h"
#include "../common/log.h"

typedef struct rpc_tag_s rpc_tag_t;
typedef void (*rpc_tag_fn)(rpc_tag_t *tag, int ok);
struct rpc_tag_s {
  rpc_tag_fn fn;
};

typedef struct {
  void *tag; /* NULL marks the queue's shutdown */
  int ok;
} rpc_event_t;

struct colo_rpc_call_s {
  colo_rpc_server_t *srv;
  const colo_rpc_method_t *method;
  void *registered;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_byte_buffer *payload;
  grpc_call_details details; /* generic accepts only: calls to methods not in the table */
  int generic;
  rpc_tag_t t_request, t_send, t_close;
  int refs;
  int accepted;        /* handed to the handler */
  int finished;        /* owner has finished it */
  int closed;          /* RECV_CLOSE_ON_SERVER completed */
  int cancelled;       /* the client went away */
  int close_cancelled; /* written by gRPC for RECV_CLOSE_ON_SERVER */
  int md_sent;
  int send_inflight;
  int status_queued, status_started;
  grpc_status_code status_code;
  char *status_msg;
  grpc_byte_buffer **queue;
  size_t q_head, q_len, q_cap;
  colo_rpc_cancel_cb on_cancel;
  void *cancel_data;
  char *peer;
  colo_rpc_call_t *prev, *next; /* live list */
};

struct colo_rpc_server_s {
  uv_loop_t *loop;
  grpc_server *server;
  grpc_completion_queue *cq;
  uv_thread_t thread;
  int thread_started;
  uv_async_t async;
  uv_timer_t grace_timer;
  uv_mutex_t mu;
  rpc_event_t *events, *spare;
  size_t n_events, cap_events, cap_spare;
  const colo_rpc_method_t *methods;
  void **registered;
  size_t n_methods;
  void *data;
  int port;
  size_t max_message_bytes;
  size_t max_stream_queue;
  colo_rpc_call_t *live;
  size_t n_live;
  int shutting_down;
  rpc_tag_t t_shutdown;
  int queue_done;
  int handles_open;
  colo_rpc_closed_cb closed_cb;
  void *closed_data;
  colo_rpc_tls_reload_t *tls_reload; /* TLS: where reloaded files go; NULL without TLS */
};

static void call_unref(colo_rpc_call_t *c);
static int post_request(colo_rpc_server_t *srv, size_t method_idx);
static int post_generic(colo_rpc_server_t *srv);
static void start_next_send(colo_rpc_call_t *c);

/* ---- status mapping ---- */

int colo_rpc_status_to_err(grpc_status_code code) {
  switch (code) {
  case GRPC_STATUS_OK:
    return 0;
  case GRPC_STATUS_INVALID_ARGUMENT:
  case GRPC_STATUS_OUT_OF_RANGE:
    return COLO_EINVAL;
  case GRPC_STATUS_NOT_FOUND:
    return COLO_ENOENT;
  case GRPC_STATUS_ALREADY_EXISTS:
    return COLO_EEXIST;
  case GRPC_STATUS_FAILED_PRECONDITION:
    return COLO_ESTATE;
  case GRPC_STATUS_DEADLINE_EXCEEDED:
    return COLO_ETIMEDOUT;
  case GRPC_STATUS_UNAVAILABLE:
    return COLO_EUNAVAIL;
  case GRPC_STATUS_CANCELLED:
    return COLO_ECANCELED;
  case GRPC_STATUS_RESOURCE_EXHAUSTED:
    return COLO_ETOOBIG;
  case GRPC_STATUS_UNIMPLEMENTED:
    return COLO_ENOSYS;
  case GRPC_STATUS_ABORTED:
    return COLO_EBUSY;
  default:
    return COLO_EINTERNAL;
  }
}

grpc_status_code colo_rpc_err_to_status(int err) {
  switch (err) {
  case 0:
    return GRPC_STATUS_OK;
  case COLO_EINVAL:
  case COLO_EPARSE:
    return GRPC_STATUS_INVALID_ARGUMENT;
  case COLO_ENOENT:
    return GRPC_STATUS_NOT_FOUND;
  case COLO_EEXIST:
    return GRPC_STATUS_ALREADY_EXISTS;
  case COLO_ESTATE:
    return GRPC_STATUS_FAILED_PRECONDITION;
  case COLO_ETIMEDOUT:
    return GRPC_STATUS_DEADLINE_EXCEEDED;
  case COLO_EUNAVAIL:
    return GRPC_STATUS_UNAVAILABLE;
  case COLO_ECANCELED:
    return GRPC_STATUS_CANCELLED;
  case COLO_ETOOBIG:
    return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case COLO_ENOSYS:
    return GRPC_STATUS_UNIMPLEMENTED;
  case COLO_EBUSY:
    return GRPC_STATUS_ABORTED;
  default:
    return GRPC_STATUS_INTERNAL;
  }
}

const char *colo_rpc_status_name(grpc_status_code code) {
  static const char *names[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  if ((int)code >= 0 && (size_t)code < sizeof names / sizeof names[0])
    return names[code];
  return "UNKNOWN";
}

/* ---- completion-queue thread and the loop bridge ---- */

static void cq_thread(void *arg) {
  colo_rpc_server_t *srv = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    int done = ev.type == GRPC_QUEUE_SHUTDOWN;
    uv_mutex_lock(&srv->mu);
    if (srv->n_events == srv->cap_events) {
      size_t cap = srv->cap_events ? srv->cap_events * 2 : 64;
      rpc_event_t *ne = realloc(srv->events, cap * sizeof *ne);
      if (!ne)
        abort(); /* the completion cannot be dropped: the call would leak forever */
      srv->events = ne;
      srv->cap_events = cap;
    }
    srv->events[srv->n_events++] = (rpc_event_t){done ? NULL : ev.tag, ev.success};
    uv_mutex_unlock(&srv->mu);
    uv_async_send(&srv->async);
    if (done)
      return;
  }
}

static void handle_closed(uv_handle_t *h) {
  colo_rpc_server_t *srv = h->data;
  if (--srv->handles_open > 0)
    return;
  colo_rpc_closed_cb cb = srv->closed_cb;
  void *data = srv->closed_data;
  uv_mutex_destroy(&srv->mu);
  colo_rpc_tls_reload_free(srv->tls_reload);
  free(srv->events);
  free(srv->spare);
  free(srv->registered);
  free(srv);
  if (cb)
    cb(NULL, data);
}

static void finish_shutdown(colo_rpc_server_t *srv) {
  uv_thread_join(&srv->thread);
  srv->thread_started = 0;
  grpc_server_destroy(srv->server);
  grpc_completion_queue_destroy(srv->cq);
  grpc_shutdown();
  srv->handles_open = 2;
  uv_close((uv_handle_t *)&srv->async, handle_closed);
  uv_close((uv_handle_t *)&srv->grace_timer, handle_closed);
}

static void on_async(uv_async_t *a) {
  colo_rpc_server_t *srv = a->data;
  for (;;) {
    uv_mutex_lock(&srv->mu);
    rpc_event_t *evs = srv->events;
    size_t n = srv->n_events, cap = srv->cap_events;
    srv->events = srv->spare;
    srv->cap_events = srv->cap_spare;
    srv->n_events = 0;
    srv->spare = NULL;
    srv->cap_spare = 0;
    uv_mutex_unlock(&srv->mu);
    if (n == 0) {
      /* put the buffer back for reuse */
      uv_mutex_lock(&srv->mu);
      if (!srv->spare) {
        srv->spare = evs;
        srv->cap_spare = cap;
        evs = NULL;
      }
      uv_mutex_unlock(&srv->mu);
      free(evs);
      return;
    }
    int queue_done = 0;
    for (size_t i = 0; i < n; i++) {
      if (evs[i].tag == NULL) {
        queue_done = 1;
        continue;
      }
      rpc_tag_t *t = evs[i].tag;
      t->fn(t, evs[i].ok);
    }
    uv_mutex_lock(&srv->mu);
    if (!srv->spare) {
      srv->spare = evs;
      srv->cap_spare = cap;
      evs = NULL;
    }
    uv_mutex_unlock(&srv->mu);
    free(evs);
    if (queue_done) {
      finish_shutdown(srv);
      return;
    }
  }
}

/* ---- calls ---- */

#define CALL_OF(tagptr, member)                                                                    \
  ((colo_rpc_call_t *)((char *)(tagptr)-offsetof(colo_rpc_call_t, member)))

static void live_remove(colo_rpc_call_t *c) {
  colo_rpc_server_t *srv = c->srv;
  if (c->prev)
    c->prev->next = c->next;
  else if (srv->live == c)
    srv->live = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

static void call_free(colo_rpc_call_t *c) {
  if (c->accepted) {
    live_remove(c);
    c->srv->n_live--;
  }
  for (size_t i = 0; i < c->q_len; i++)
    grpc_byte_buffer_destroy(c->queue[(c->q_head + i) % c->q_cap]);
  free(c->queue);
  if (c->payload)
    grpc_byte_buffer_destroy(c->payload);
  grpc_metadata_array_destroy(&c->md);
  if (c->generic)
    grpc_call_details_destroy(&c->details);
  if (c->call)
    grpc_call_unref(c->call);
  if (c->peer)
    gpr_free(c->peer);
  free(c->status_msg);
  free(c);
}

static void call_unref(colo_rpc_call_t *c) {
  if (--c->refs == 0)
    call_free(c);
}

static void on_send_done(rpc_tag_t *t, int ok) {
  colo_rpc_call_t *c = CALL_OF(t, t_send);
  c->send_inflight = 0;
  if (!ok) {
    /* the stream is broken: drop what is queued, the close tag will report the cancel */
    for (size_t i = 0; i < c->q_len; i++)
      grpc_byte_buffer_destroy(c->queue[(c->q_head + i) % c->q_cap]);
    c->q_len = 0;
    c->cancelled = 1;
  }
  if (!c->status_started)
    start_next_send(c);
  call_unref(c);
}

/* Starts the next queued message, or the final status when nothing is queued. */
static void start_next_send(colo_rpc_call_t *c) {
  if (c->send_inflight || c->status_started)
    return;
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!c->md_sent) {
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    n++;
  }
  grpc_byte_buffer *bb = NULL;
  grpc_slice details;
  if (c->q_len > 0 && !c->cancelled) {
    bb = c->queue[c->q_head];
    c->q_head = (c->q_head + 1) % c->q_cap;
    c->q_len--;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = bb;
    n++;
  } else if (c->status_queued) {
    details = grpc_slice_from_copied_string(c->status_msg ? c->status_msg : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->status_code;
    ops[n].data.send_status_from_server.status_details = &details;
    n++;
    c->status_started = 1;
  } else {
    return;
  }
  c->md_sent = 1;
  c->send_inflight = 1;
  c->refs++;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_send, NULL);
  if (c->status_started)
    grpc_slice_unref(details);
  if (bb)
    grpc_byte_buffer_destroy(bb); /* gRPC took its own reference to the slices */
  if (e != GRPC_CALL_OK) {
    colo_log(COLO_LOG_WARN, "rpc", "start_batch failed: %d", (int)e);
    c->send_inflight = 0;
    c->refs--;
  }
}

/* The call is over on the wire. If the owner has not finished it, the client went away. */
static void on_close_done(rpc_tag_t *t, int ok) {
  colo_rpc_call_t *c = CALL_OF(t, t_close);
  (void)ok;
  c->closed = 1;
  if (!c->finished)
    c->cancelled = 1;
  if (c->cancelled && !c->finished && c->on_cancel) {
    colo_rpc_cancel_cb cb = c->on_cancel;
    c->on_cancel = NULL;
    cb(c, c->cancel_data);
  }
  call_unref(c);
}

static void on_request_done(rpc_tag_t *t, int ok) {
  colo_rpc_call_t *c = CALL_OF(t, t_request);
  colo_rpc_server_t *srv = c->srv;
  if (!ok) { /* the server is shutting down: this accept will never be used */
    call_unref(c);
    return;
  }
  if (!srv->shutting_down) {
    if (c->generic)
      post_generic(srv);
    else
      post_request(srv, (size_t)(c->method - srv->methods));
  }

  c->accepted = 1;
  c->prev = NULL;
  c->next = srv->live;
  if (srv->live)
    srv->live->prev = c;
  srv->live = c;
  srv->n_live++;

  /* learn about cancellation as early as possible */
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->close_cancelled;
  c->refs++; /* the close tag */
  if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK)
    c->refs--;
  /* The request tag's reference becomes the owner's reference. */

  ProtobufCMessage *req = NULL;
  if (c->generic) {
    colo_rpc_fail(c, GRPC_STATUS_UNIMPLEMENTED, "method %.*s is not served here",
                  (int)GRPC_SLICE_LENGTH(c->details.method),
                  (const char *)GRPC_SLICE_START_PTR(c->details.method));
    return;
  }
  if (!c->payload) {
    colo_rpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "missing request message");
    return;
  }
  if (grpc_byte_buffer_length(c->payload) > srv->max_message_bytes) {
    colo_rpc_fail(c, GRPC_STATUS_RESOURCE_EXHAUSTED,
                  "request of %zu bytes exceeds the limit of %zu",
                  grpc_byte_buffer_length(c->payload), srv->max_message_bytes);
    return;
  }
  req = colo_rpc_unpack(c->payload, c->method->request);
  grpc_byte_buffer_destroy(c->payload);
  c->payload = NULL;
  if (!req) {
    colo_rpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "request is not a valid %s message",
                  c->method->request->name);
    return;
  }
  /* protobuf's strings are UTF-8: one that is not would be stored and served to clients that
   * refuse to read it */
  char where[256];
  if (colo_pb_find_bad_utf8(req, where, sizeof where)) {
    colo_rpc_fail(c, GRPC_STATUS_INVALID_ARGUMENT, "%s is not valid UTF-8", where);
    protobuf_c_message_free_unpacked(req, NULL);
    return;
  }
  c->method->handler(c, req, srv->data);
  protobuf_c_message_free_unpacked(req, NULL);
}

static int post_request(colo_rpc_server_t *srv, size_t idx) {
  colo_rpc_call_t *c = calloc(1, sizeof *c);
  if (!c)
    return COLO_ENOMEM;
  c->srv = srv;
  c->method = &srv->methods[idx];
  c->registered = srv->registered[idx];
  c->t_request.fn = on_request_done;
  c->t_send.fn = on_send_done;
  c->t_close.fn = on_close_done;
  c->refs = 1;
  grpc_metadata_array_init(&c->md);
  grpc_call_error e =
      grpc_server_request_registered_call(srv->server, c->registered, &c->call, &c->deadline,
                                          &c->md, &c->payload, srv->cq, srv->cq, &c->t_request);
  if (e != GRPC_CALL_OK) {
    grpc_metadata_array_destroy(&c->md);
    free(c);
    return COLO_EINTERNAL;
  }
  return 0;
}

/* Accepts a call to any method not in the table, to answer it UNIMPLEMENTED at once rather
 * than leave the client waiting for its deadline. */
static int post_generic(colo_rpc_server_t *srv) {
  colo_rpc_call_t *c = calloc(1, sizeof *c);
  if (!c)
    return COLO_ENOMEM;
  c->srv = srv;
  c->generic = 1;
  c->t_request.fn = on_request_done;
  c->t_send.fn = on_send_done;
  c->t_close.fn = on_close_done;
  c->refs = 1;
  grpc_metadata_array_init(&c->md);
  grpc_call_details_init(&c->details);
  grpc_call_error e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md, srv->cq,
                                               srv->cq, &c->t_request);
  if (e != GRPC_CALL_OK) {
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    free(c);
    return COLO_EINTERNAL;
  }
  return 0;
}

/* ---- public call API ---- */

static int finish(colo_rpc_call_t *c, grpc_status_code code, const char *msg) {
  if (c->finished)
    return COLO_ESTATE;
  c->finished = 1;
  c->status_queued = 1;
  c->status_code = code;
  c->status_msg = strdup(msg ? msg : "");
  start_next_send(c);
  call_unref(c); /* the owner's reference */
  return 0;
}

int colo_rpc_reply(colo_rpc_call_t *c, const ProtobufCMessage *resp) {
  if (c->finished)
    return COLO_ESTATE;
  int rc = colo_rpc_stream_send(c, resp);
  if (rc < 0 && rc != COLO_ECANCELED)
    return rc;
  return finish(c, GRPC_STATUS_OK, NULL);
}

int colo_rpc_fail(colo_rpc_call_t *c, grpc_status_code code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return finish(c, code, msg);
}

int colo_rpc_fail_err(colo_rpc_call_t *c, int err, const char *msg) {
  return finish(c, colo_rpc_err_to_status(err), msg ? msg : colo_strerror(err));
}

int colo_rpc_stream_send(colo_rpc_call_t *c, const ProtobufCMessage *msg) {
  if (c->finished)
    return COLO_ESTATE;
  if (c->cancelled)
    return COLO_ECANCELED;
  if (c->q_len >= c->srv->max_stream_queue) {
    finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "client reads too slowly: stream queue full");
    return COLO_ETOOBIG;
  }
  if (c->q_len == c->q_cap) {
    size_t cap = c->q_cap ? c->q_cap * 2 : 4;
    grpc_byte_buffer **nq = malloc(cap * sizeof *nq);
    if (!nq)
      return COLO_ENOMEM;
    for (size_t i = 0; i < c->q_len; i++)
      nq[i] = c->queue[(c->q_head + i) % c->q_cap];
    free(c->queue);
    c->queue = nq;
    c->q_cap = cap;
    c->q_head = 0;
  }
  c->queue[(c->q_head + c->q_len) % c->q_cap] = colo_rpc_pack(msg);
  c->q_len++;
  start_next_send(c);
  return 0;
}

int colo_rpc_stream_end(colo_rpc_call_t *c, grpc_status_code code, const char *msg) {
  return finish(c, code, msg);
}

void colo_rpc_call_on_cancel(colo_rpc_call_t *c, colo_rpc_cancel_cb cb, void *data) {
  c->on_cancel = cb;
  c->cancel_data = data;
}

const char *colo_rpc_call_peer(colo_rpc_call_t *c) {
  if (!c->peer)
    c->peer = grpc_call_get_peer(c->call);
  return c->peer;
}

const colo_rpc_method_t *colo_rpc_call_method(const colo_rpc_call_t *c) {
  return c->method;
}

static void copy_value(char *out, size_t n, const char *v, size_t len) {
  if (len >= n)
    len = n - 1;
  memcpy(out, v, len);
  out[len] = '\0';
}

/* OU from an RFC 2253 subject ("OU=worker,O=colo,CN=w1"): the first, unescaped */
static void subject_ou(const char *v, size_t len, char *ou, size_t n) {
  size_t i = 0;
  while (i < len) {
    size_t end = i;
    while (end < len && !(v[end] == ',' && (end == i || v[end - 1] != '\\')))
      end++;
    if (end - i > 3 && !memcmp(v + i, "OU=", 3)) {
      copy_value(ou, n, v + i + 3, end - i - 3);
      return;
    }
    i = end + 1;
  }
}

int colo_rpc_call_peer_cert(colo_rpc_call_t *c, char *cn, size_t cn_len, char *ou, size_t ou_len) {
  cn[0] = ou[0] = '\0';
  grpc_auth_context *ctx = grpc_call_auth_context(c->call);
  if (!ctx)
    return 0;
  int ok = grpc_auth_context_peer_is_authenticated(ctx);
  if (ok) {
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_CN_PROPERTY_NAME);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p)
      copy_value(cn, cn_len, p->value, p->value_length);
    it = grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_SUBJECT_PROPERTY_NAME);
    if ((p = grpc_auth_property_iterator_next(&it)))
      subject_ou(p->value, p->value_length, ou, ou_len);
  }
  grpc_auth_context_release(ctx);
  return ok;
}

/* ---- server lifecycle ---- */

int colo_rpc_server_start(uv_loop_t *loop, const colo_rpc_server_opts_t *opts,
                          const colo_rpc_method_t *methods, size_t n_methods, void *data,
                          colo_rpc_server_t **out, char *err, size_t errlen) {
  colo_rpc_server_t *srv = calloc(1, sizeof *srv);
  if (!srv) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  srv->loop = loop;
  srv->methods = methods;
  srv->n_methods = n_methods;
  srv->data = data;
  srv->max_message_bytes = opts->max_message_bytes ? opts->max_message_bytes : 4u << 20;
  srv->max_stream_queue = opts->max_stream_queue ? opts->max_stream_queue : 1024;
  srv->t_shutdown.fn = NULL;
  srv->registered = calloc(n_methods, sizeof *srv->registered);
  if (!srv->registered) {
    free(srv);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }

  colo_rpc_route_logs();
  grpc_init();
  grpc_server_credentials *creds = NULL;
  if (colo_rpc_tls_enabled(opts->tls)) {
    int rc = colo_rpc_tls_server_creds(opts->tls, &creds, &srv->tls_reload, err, errlen);
    if (rc < 0) {
      grpc_shutdown();
      free(srv->registered);
      free(srv);
      return rc;
    }
  } else {
    creds = grpc_insecure_server_credentials_create();
  }
  grpc_arg args[2];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = (int)srv->max_message_bytes;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = 64 << 20;
  grpc_channel_args cargs = {2, args};
  srv->server = grpc_server_create(&cargs, NULL);
  srv->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(srv->server, srv->cq, NULL);
  for (size_t i = 0; i < n_methods; i++) {
    srv->registered[i] = grpc_server_register_method(srv->server, methods[i].path, NULL,
                                                     GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    if (!srv->registered[i]) {
      snprintf(err, errlen, "cannot register method %s", methods[i].path);
      goto fail;
    }
  }
  srv->port = grpc_server_add_http2_port(srv->server, opts->listen, creds);
  grpc_server_credentials_release(creds);
  creds = NULL;
  if (srv->port == 0) {
    if (colo_rpc_tls_enabled(opts->tls))
      snprintf(err, errlen,
               "cannot listen on %s with TLS (address in use or invalid, or a certificate and "
               "key that do not load or do not match)",
               opts->listen);
    else
      snprintf(err, errlen, "cannot listen on %s (address in use or invalid)", opts->listen);
    goto fail;
  }
  grpc_server_start(srv->server);

  uv_mutex_init(&srv->mu);
  uv_async_init(loop, &srv->async, on_async);
  srv->async.data = srv;
  uv_timer_init(loop, &srv->grace_timer);
  srv->grace_timer.data = srv;
  if (uv_thread_create(&srv->thread, cq_thread, srv) != 0) {
    snprintf(err, errlen, "cannot start the completion-queue thread");
    abort(); /* cannot unwind a started server cleanly without the thread */
  }
  srv->thread_started = 1;

  int per = opts->requests_per_method > 0 ? opts->requests_per_method : 16;
  for (size_t i = 0; i < n_methods; i++)
    for (int k = 0; k < per; k++)
      post_request(srv, i);
  for (int k = 0; k < 2; k++)
    post_generic(srv);
  *out = srv;
  return 0;

fail:
  if (creds)
    grpc_server_credentials_release(creds);
  grpc_server_destroy(srv->server);
  grpc_completion_queue_shutdown(srv->cq);
  while (grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(srv->cq);
  grpc_shutdown();
  colo_rpc_tls_reload_free(srv->tls_reload);
  free(srv->registered);
  free(srv);
  return COLO_EIO;
}

int colo_rpc_server_reload_tls(colo_rpc_server_t *srv, const colo_rpc_tls_t *tls, char *err,
                               size_t errlen) {
  if (!srv->tls_reload) {
    snprintf(err, errlen, "the server was started without TLS");
    return COLO_ESTATE;
  }
  return colo_rpc_tls_reload(srv->tls_reload, tls, err, errlen);
}

int colo_rpc_server_port(const colo_rpc_server_t *srv) {
  return srv->port;
}

size_t colo_rpc_server_live_calls(const colo_rpc_server_t *srv) {
  return srv->n_live;
}

static void on_server_shutdown(rpc_tag_t *t, int ok) {
  colo_rpc_server_t *srv =
      (colo_rpc_server_t *)((char *)t - offsetof(colo_rpc_server_t, t_shutdown));
  (void)ok;
  uv_timer_stop(&srv->grace_timer);
  grpc_completion_queue_shutdown(srv->cq);
}

static void on_grace_expired(uv_timer_t *tm) {
  colo_rpc_server_t *srv = tm->data;
  colo_log(COLO_LOG_WARN, "rpc", "cancelling %zu calls still running after the grace period",
           srv->n_live);
  grpc_server_cancel_all_calls(srv->server);
}

void colo_rpc_server_shutdown(colo_rpc_server_t *srv, uint64_t grace_ms, colo_rpc_closed_cb cb,
                              void *data) {
  if (srv->shutting_down)
    return;
  srv->shutting_down = 1;
  srv->closed_cb = cb;
  srv->closed_data = data;
  srv->t_shutdown.fn = on_server_shutdown;
  grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
  uv_timer_start(&srv->grace_timer, on_grace_expired, grace_ms, 0);
}
