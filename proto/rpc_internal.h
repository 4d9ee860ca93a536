/* Shared by the RPC server and client; not part of the public API. */
#ifndef COLO_RPC_INTERNAL_H
#define COLO_RPC_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <protobuf-c/protobuf-c.h>

/* Serialises msg into a new byte buffer (caller destroys it). */
grpc_byte_buffer *colo_rpc_pack(const ProtobufCMessage *msg);
/* Decodes a received buffer; NULL when it is not a valid `desc` message. */
ProtobufCMessage *colo_rpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc);

#endif
