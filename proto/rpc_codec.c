/* protobuf-c messages to and from gRPC byte buffers, and gRPC's own log lines into colo's. */
#include "rpc_internal.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>

#include "../common/log.h"

/* gRPC's errors are mostly a peer's (a TLS handshake a caller failed): warnings here, with the
 * process's prefix and time, at colo's level. Its info lines are debug. */
static void grpc_log(gpr_log_func_args *a) {
  colo_log_level_t lvl = a->severity == GPR_LOG_SEVERITY_ERROR  ? COLO_LOG_WARN
                         : a->severity == GPR_LOG_SEVERITY_INFO ? COLO_LOG_DEBUG
                                                                : COLO_LOG_DEBUG;
  if ((int)lvl <= colo_log_level_current)
    colo_log_write(lvl, "grpc", a->file, a->line, "%s", a->message);
}

void colo_rpc_route_logs(void) {
  gpr_set_log_function(grpc_log);
}

grpc_byte_buffer *colo_rpc_pack(const ProtobufCMessage *msg) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  grpc_slice s = grpc_slice_malloc(len);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

ProtobufCMessage *colo_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc) {
  grpc_byte_buffer_reader r;
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  ProtobufCMessage *m =
      protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  return m;
}
