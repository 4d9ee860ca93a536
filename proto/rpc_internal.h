/* Shared by the RPC server and client; not part of the public API. */
#ifndef COLO_RPC_INTERNAL_H
#define COLO_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <protobuf-c/protobuf-c.h>

#include "rpc.h"

/* Serialises msg into a new byte buffer (caller destroys it). */
grpc_byte_buffer *colo_rpc_pack(const ProtobufCMessage *msg);
/* Decodes a received buffer; NULL when it is not a valid `desc` message. */
ProtobufCMessage *colo_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc);

/* gRPC's log lines go through colo_log (called before grpc_init by the server and client). */
void colo_rpc_route_logs(void);

/* TLS credentials from the PEM files in t (rpc_tls.c). The server's need cert and key, and come
 * with *reload, through which colo_rpc_tls_reload hands the next handshakes files read again
 * (free it after the server is destroyed). On failure a negative colo code, with err naming the
 * file and why. */
typedef struct colo_rpc_tls_reload_s colo_rpc_tls_reload_t;
int colo_rpc_tls_server_creds(const colo_rpc_tls_t *t, grpc_server_credentials **out,
                              colo_rpc_tls_reload_t **reload, char *err, size_t errlen);
int colo_rpc_tls_reload(colo_rpc_tls_reload_t *r, const colo_rpc_tls_t *t, char *err,
                        size_t errlen);
void colo_rpc_tls_reload_free(colo_rpc_tls_reload_t *r);
int colo_rpc_tls_channel_creds(const colo_rpc_tls_t *t, grpc_channel_credentials **out, char *err,
                               size_t errlen);

#endif
