/* Blocking gRPC client calls on the gRPC C core: one channel and one pluck queue per client. */
#include "rpc.h"
#include "rpc_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "../common/error.h"

struct colo_rpc_client_s {
  grpc_channel *channel;
  grpc_completion_queue *cq;
  size_t max_message_bytes;
  char *target;
  grpc_channel_credentials *creds; /* TLS (owned), or NULL: insecure */
  char *server_name;               /* TLS: the name the server's certificate holds, or NULL */
  /* colo_rpc_client_cancel, from another thread */
  pthread_mutex_t mu;
  grpc_call *live; /* the call in progress */
  int cancelled;
};

/* The call in progress, for colo_rpc_client_cancel; NULL when it ends. 0, or COLO_ECANCELED when
 * the client was cancelled (the call is cancelled at once). */
static int set_live(colo_rpc_client_t *cli, grpc_call *call) {
  pthread_mutex_lock(&cli->mu);
  cli->live = call;
  int cancelled = cli->cancelled;
  if (call && cancelled)
    grpc_call_cancel(call, NULL);
  pthread_mutex_unlock(&cli->mu);
  return cancelled ? COLO_ECANCELED : 0;
}

void colo_rpc_client_cancel(colo_rpc_client_t *cli) {
  pthread_mutex_lock(&cli->mu);
  cli->cancelled = 1;
  if (cli->live)
    grpc_call_cancel(cli->live, NULL);
  pthread_mutex_unlock(&cli->mu);
}

static grpc_channel *new_channel(const colo_rpc_client_t *cli) {
  grpc_arg arg[2];
  arg[0].type = GRPC_ARG_INTEGER;
  arg[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  arg[0].value.integer = (int)cli->max_message_bytes;
  arg[1].type = GRPC_ARG_STRING;
  arg[1].key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
  arg[1].value.string = cli->server_name;
  grpc_channel_args cargs = {cli->server_name ? 2 : 1, arg};
  grpc_channel_credentials *creds = cli->creds, *own = NULL;
  if (!creds)
    creds = own = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(cli->target, creds, &cargs);
  if (own)
    grpc_channel_credentials_release(own);
  return ch;
}

/* A call that found the server unreachable leaves its channel backing off for seconds before
 * it tries to connect again, whatever the back-off arguments say; a server that restarted
 * (a coordinator that must hear from its workers within host_timeout) would then wait for
 * nothing. The next call gets a new channel, which connects at once. */
static void renew_channel_after(colo_rpc_client_t *cli, int rc) {
  if (rc != COLO_EUNAVAIL)
    return;
  grpc_channel *ch = new_channel(cli);
  if (!ch)
    return; /* keep the old one */
  grpc_channel_destroy(cli->channel);
  cli->channel = ch;
}

int colo_rpc_client_open(const char *target, const colo_rpc_client_opts_t *opts,
                         colo_rpc_client_t **out, char *err, size_t errlen) {
  colo_rpc_client_t *cli = calloc(1, sizeof *cli);
  if (!cli || !(cli->target = strdup(target))) {
    free(cli);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  colo_rpc_route_logs();
  grpc_init();
  cli->max_message_bytes = opts && opts->max_message_bytes ? opts->max_message_bytes : 64u << 20;
  const colo_rpc_tls_t *tls = opts ? opts->tls : NULL;
  int rc = 0;
  if (colo_rpc_tls_enabled(tls)) {
    rc = colo_rpc_tls_channel_creds(tls, &cli->creds, err, errlen);
    if (rc == 0 && tls->server_name && tls->server_name[0] &&
        !(cli->server_name = strdup(tls->server_name))) {
      snprintf(err, errlen, "out of memory");
      rc = COLO_ENOMEM;
    }
  }
  if (rc == 0 && !(cli->channel = new_channel(cli))) {
    snprintf(err, errlen, "cannot create a channel to %s", target);
    rc = COLO_EINVAL;
  }
  if (rc < 0) {
    if (cli->creds)
      grpc_channel_credentials_release(cli->creds);
    free(cli->server_name);
    free(cli->target);
    free(cli);
    grpc_shutdown();
    return rc;
  }
  cli->cq = grpc_completion_queue_create_for_pluck(NULL);
  pthread_mutex_init(&cli->mu, NULL);
  *out = cli;
  return 0;
}

void colo_rpc_client_close(colo_rpc_client_t *cli) {
  if (!cli)
    return;
  grpc_channel_destroy(cli->channel);
  grpc_completion_queue_shutdown(cli->cq);
  grpc_completion_queue_destroy(cli->cq);
  if (cli->creds)
    grpc_channel_credentials_release(cli->creds);
  free(cli->server_name);
  free(cli->target);
  pthread_mutex_destroy(&cli->mu);
  free(cli);
  grpc_shutdown();
}

static gpr_timespec deadline_of(uint64_t timeout_ms) {
  if (timeout_ms == 0)
    return gpr_inf_future(GPR_CLOCK_REALTIME);
  return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                      gpr_time_from_millis((int64_t)timeout_ms, GPR_TIMESPAN));
}

static void set_status(colo_rpc_status_t *st, grpc_status_code code, grpc_slice details) {
  if (!st)
    return;
  st->code = code;
  size_t n = GRPC_SLICE_LENGTH(details);
  if (n >= sizeof st->message)
    n = sizeof st->message - 1;
  memcpy(st->message, GRPC_SLICE_START_PTR(details), n);
  st->message[n] = '\0';
  if (n == 0 && code != GRPC_STATUS_OK)
    snprintf(st->message, sizeof st->message, "%s", colo_rpc_status_name(code));
}

static int run_batch(colo_rpc_client_t *cli, grpc_call *call, const grpc_op *ops, size_t n,
                     void *tag) {
  if (grpc_call_start_batch(call, ops, n, tag, NULL) != GRPC_CALL_OK)
    return COLO_EINTERNAL;
  grpc_event ev =
      grpc_completion_queue_pluck(cli->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  return ev.success ? 0 : COLO_EPROTO;
}

int colo_rpc_call(colo_rpc_client_t *cli, const char *path, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc, uint64_t timeout_ms,
                  ProtobufCMessage **resp, colo_rpc_status_t *st) {
  grpc_slice method = grpc_slice_from_static_string(path);
  grpc_call *call = grpc_channel_create_call(cli->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cli->cq,
                                             method, NULL, deadline_of(timeout_ms), NULL);
  grpc_byte_buffer *send = colo_rpc_pack(req), *recv = NULL;
  grpc_metadata_array md_init, md_trail;
  grpc_metadata_array_init(&md_init);
  grpc_metadata_array_init(&md_trail);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_init;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &details;
  set_live(cli, call);
  int rc = run_batch(cli, call, ops, 6, call);
  if (set_live(cli, NULL) < 0) {
    rc = COLO_ECANCELED;
    if (st) {
      st->code = GRPC_STATUS_CANCELLED;
      snprintf(st->message, sizeof st->message, "cancelled by the client");
    }
  } else if (rc == 0) {
    set_status(st, code, details);
    rc = colo_rpc_status_to_err(code);
    if (rc == 0) {
      ProtobufCMessage *m = recv ? colo_rpc_unpack(recv, resp_desc) : NULL;
      if (!m) {
        rc = COLO_EPROTO;
        if (st) {
          st->code = GRPC_STATUS_INTERNAL;
          snprintf(st->message, sizeof st->message, "reply is not a valid %s message",
                   resp_desc->name);
        }
      } else {
        *resp = m;
      }
    }
  } else if (st) {
    st->code = GRPC_STATUS_INTERNAL;
    snprintf(st->message, sizeof st->message, "call failed in the transport");
  }
  if (recv)
    grpc_byte_buffer_destroy(recv);
  grpc_byte_buffer_destroy(send);
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&md_init);
  grpc_metadata_array_destroy(&md_trail);
  grpc_call_unref(call);
  renew_channel_after(cli, rc);
  return rc;
}

int colo_rpc_call_stream(colo_rpc_client_t *cli, const char *path, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *resp_desc, uint64_t timeout_ms,
                         colo_rpc_stream_cb cb, void *data, colo_rpc_status_t *st) {
  grpc_slice method = grpc_slice_from_static_string(path);
  grpc_call *call = grpc_channel_create_call(cli->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cli->cq,
                                             method, NULL, deadline_of(timeout_ms), NULL);
  grpc_byte_buffer *send = colo_rpc_pack(req);
  grpc_metadata_array md_init, md_trail;
  grpc_metadata_array_init(&md_init);
  grpc_metadata_array_init(&md_trail);
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  int stopped = 0, rc;

  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_init;
  set_live(cli, call);
  run_batch(cli, call, ops, 4, call); /* failures show up in the status below */

  for (;;) {
    grpc_byte_buffer *recv = NULL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &recv;
    if (run_batch(cli, call, &op, 1, call) < 0 || !recv)
      break;
    ProtobufCMessage *m = colo_rpc_unpack(recv, resp_desc);
    grpc_byte_buffer_destroy(recv);
    if (!m) {
      grpc_call_cancel_with_status(call, GRPC_STATUS_INTERNAL, "bad message", NULL);
      break;
    }
    int stop = cb(m, data);
    protobuf_c_message_free_unpacked(m, NULL);
    if (stop) {
      stopped = 1;
      grpc_call_cancel(call, NULL);
      break;
    }
  }

  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[0].data.recv_status_on_client.trailing_metadata = &md_trail;
  ops[0].data.recv_status_on_client.status = &code;
  ops[0].data.recv_status_on_client.status_details = &details;
  rc = run_batch(cli, call, ops, 1, call);
  if (set_live(cli, NULL) < 0) {
    rc = COLO_ECANCELED;
    if (st) {
      st->code = GRPC_STATUS_CANCELLED;
      snprintf(st->message, sizeof st->message, "cancelled by the client");
    }
  } else if (stopped) {
    rc = 0;
    if (st) {
      st->code = GRPC_STATUS_OK;
      st->message[0] = '\0';
    }
  } else if (rc == 0) {
    set_status(st, code, details);
    rc = colo_rpc_status_to_err(code);
  }
  grpc_byte_buffer_destroy(send);
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&md_init);
  grpc_metadata_array_destroy(&md_trail);
  grpc_call_unref(call);
  renew_channel_after(cli, rc);
  return rc;
}
