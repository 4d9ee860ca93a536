/* Fuzz target: a job specification as SubmitJob carries it (protobuf) and as a job file holds it
 * (YAML or JSON), through what colod and coloctl do with one: decode, fill defaults, validate,
 * and write it out as JSON (what colod stores). The first byte picks the form; the rest is the
 * document. Nothing may crash, leak or read out of bounds, whatever the bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jobspec.h"
#include "common/pbcodec.h"
#include "fuzz.h"

static void check(Colo__V1__JobSpec *spec) {
  char err[1024];
  if (colo_jobspec_fill_defaults(spec) == 0 && colo_jobspec_validate(spec, err, sizeof err) == 0)
    (void)colo_jobspec_world(spec);
  cJSON *j = colo_pb_to_json(&spec->base);
  char *s = j ? cJSON_PrintUnformatted(j) : NULL;
  free(s);
  cJSON_Delete(j);
  /* what colod answers with: the spec packed again */
  size_t n = protobuf_c_message_get_packed_size(&spec->base);
  uint8_t *buf = malloc(n ? n : 1);
  if (buf) {
    protobuf_c_message_pack(&spec->base, buf);
    Colo__V1__JobSpec *again = colo__v1__job_spec__unpack(NULL, n, buf);
    if (!again)
      abort(); /* what protobuf-c packed it must read back */
    colo__v1__job_spec__free_unpacked(again, NULL);
    free(buf);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  int form = data[0] & 1;
  data++, size--;
  if (form == 0) { /* a job file */
    ProtobufCMessage *m = NULL;
    char err[1024];
    if (colo_pb_from_yaml((const char *)data, size, "fuzz.yaml", &colo__v1__job_spec__descriptor,
                          &m, err, sizeof err) == 0) {
      check((Colo__V1__JobSpec *)m);
      protobuf_c_message_free_unpacked(m, NULL);
    } else if (!err[0]) {
      abort(); /* a refusal always says why */
    }
    return 0;
  }
  Colo__V1__JobSpec *spec = colo__v1__job_spec__unpack(NULL, size, data); /* SubmitJob's */
  char where[256];
  uint32_t field;
  /* colod refuses fields it does not know before anything else (daemon/api.c) */
  if (spec && !colo_pb_find_unknown(&spec->base, where, sizeof where, &field))
    check(spec);
  if (spec)
    colo__v1__job_spec__free_unpacked(spec, NULL);
  return 0;
}

/* seeds: each job file of the corpus as a file (form 0) and packed as SubmitJob sends it (1) */
void colo_fuzz_seeds(const uint8_t *file, size_t size, colo_fuzz_emit_fn emit) {
  if (!file)
    return;
  uint8_t *in = malloc(size + 1);
  if (!in)
    return;
  in[0] = 0;
  memcpy(in + 1, file, size);
  emit(in, size + 1);
  free(in);
  ProtobufCMessage *m = NULL;
  char err[1024];
  if (colo_pb_from_yaml((const char *)file, size, "seed.yaml", &colo__v1__job_spec__descriptor, &m,
                        err, sizeof err) < 0)
    return;
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *pb = malloc(n + 1);
  if (pb) {
    pb[0] = 1;
    protobuf_c_message_pack(m, pb + 1);
    emit(pb, n + 1);
    free(pb);
  }
  protobuf_c_message_free_unpacked(m, NULL);
}
