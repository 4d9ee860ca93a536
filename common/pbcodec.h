/* Protobuf-c messages to and from documents, driven by the message descriptors: YAML (and so
 * JSON, which YAML 1.2 reads) into a message, a message into a cJSON tree. Field names are the
 * .proto names; enum values are written lower-case without their type prefix
 * (PRECISION_BF16 -> "bf16"), and the full upper-case name is accepted too.
 *
 * Supports scalar, string, enum, nested-message and repeated fields.
 */
#ifndef COLO_PBCODEC_H
#define COLO_PBCODEC_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <protobuf-c/protobuf-c.h>

/* Parses a YAML or JSON document into a new message of type `desc`. On failure returns a
 * negative colo code with "FILE:LINE: why" in err (for example
 * `job.yaml:7: unknown field "parallel.tpp"`) and leaves *out untouched. Free the message with
 * protobuf_c_message_free_unpacked(msg, NULL). */
int colo_pb_from_yaml(const char *text, size_t len, const char *source,
                      const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, char *err,
                      size_t errlen);
int colo_pb_from_yaml_file(const char *path, const ProtobufCMessageDescriptor *desc,
                           ProtobufCMessage **out, char *err, size_t errlen);

/* Applies "a.b.c=value" onto *msg (a message of type desc): the value is read as YAML into
 * that field (as a string that the field's type then reads, or for a field of messages as YAML:
 * `data.sources=[{path: a.bin, weight: 3}]`), and the result merged as protobuf merges
 * (scalars replace, repeated fields append; an empty string clears a string's value). *msg is
 * replaced by the merged message. On failure returns a negative colo code with err set ("--set
 * train.stepz=3: unknown field ...") and leaves *msg as it was. */
int colo_pb_set(ProtobufCMessage **msg, const ProtobufCMessageDescriptor *desc,
                const char *assignment, char *err, size_t errlen);

/* Fills every optional field that is not present with its default and allocates every missing
 * nested message, recursively, so readers never meet NULL or an unset field. */
int colo_pb_fill_defaults(ProtobufCMessage *msg);

/* Whether msg, or a message inside it, holds a field its descriptor does not know (a newer
 * client's, or bytes that are no message: field number 0 among them, which protobuf-c reads but
 * cannot write back). 1 with where ("train", "parallel" or "" for msg itself) and the field's
 * number in *field; 0 when there is none. */
int colo_pb_find_unknown(const ProtobufCMessage *msg, char *where, size_t len, uint32_t *field);

/* Whether a string field of msg, at any depth, is not valid UTF-8 (protobuf's strings must be;
 * other languages' clients refuse to read them): 1 with its path in where ("spec.name",
 * "ranks[2].message"); 0 when every one is. */
int colo_pb_find_bad_utf8(const ProtobufCMessage *msg, char *where, size_t len);

/* A cJSON object with every present field of msg (enums as names, 64-bit integers as numbers). */
cJSON *colo_pb_to_json(const ProtobufCMessage *msg);

/* Lower-case short name of an enum value ("bf16") into buf; "?" when unknown. Returns buf. */
const char *colo_pb_enum_short(const ProtobufCEnumDescriptor *desc, int value, char *buf,
                               size_t len);

#endif
