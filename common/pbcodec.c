/* Descriptor-driven conversion between protobuf-c messages and YAML/JSON documents. */
#include "pbcodec.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "error.h"

#define MAX_DOC_BYTES (1u << 20)
#define MAX_DEPTH     16

typedef struct {
  yaml_document_t *doc;
  const char *source;
  char *err;
  size_t errlen;
} yctx_t;

static int fail_at(yctx_t *y, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(yctx_t *y, const yaml_node_t *n, const char *fmt, ...) {
  int k = snprintf(y->err, y->errlen, "%s:%zu: ", y->source, n ? n->start_mark.line + 1 : 0);
  if (k < 0 || (size_t)k >= y->errlen)
    return COLO_EPARSE;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(y->err + k, y->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return COLO_EPARSE;
}

/* ---- enums ---- */

/* "JobState" -> "JOB_STATE_" */
static void enum_prefix(const ProtobufCEnumDescriptor *d, char *buf, size_t len) {
  size_t k = 0;
  for (const char *p = d->short_name; *p && k + 2 < len; p++) {
    if (isupper((unsigned char)*p) && p != d->short_name)
      buf[k++] = '_';
    buf[k++] = (char)toupper((unsigned char)*p);
  }
  buf[k++] = '_';
  buf[k] = '\0';
}

const char *colo_pb_enum_short(const ProtobufCEnumDescriptor *desc, int value, char *buf,
                               size_t len) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(desc, value);
  if (!v) {
    snprintf(buf, len, "?");
    return buf;
  }
  char prefix[64];
  enum_prefix(desc, prefix, sizeof prefix);
  const char *name = v->name;
  size_t pl = strlen(prefix);
  if (strncmp(name, prefix, pl) == 0)
    name += pl;
  size_t k = 0;
  for (; name[k] && k + 1 < len; k++)
    buf[k] = (char)tolower((unsigned char)name[k]);
  buf[k] = '\0';
  return buf;
}

static int enum_lookup(const ProtobufCEnumDescriptor *d, const char *s, int *out) {
  char prefix[64], full[128];
  enum_prefix(d, prefix, sizeof prefix);
  snprintf(full, sizeof full, "%s", s);
  for (char *p = full; *p; p++)
    *p = (char)toupper((unsigned char)*p);
  for (unsigned i = 0; i < d->n_values; i++) {
    const char *name = d->values[i].name;
    if (strcmp(name, full) == 0 ||
        (strncmp(name, prefix, strlen(prefix)) == 0 && strcmp(name + strlen(prefix), full) == 0)) {
      if (d->values[i].value == 0)
        return COLO_EINVAL; /* *_UNSPECIFIED is never a valid choice */
      *out = d->values[i].value;
      return 0;
    }
  }
  return COLO_EINVAL;
}

static void enum_choices(const ProtobufCEnumDescriptor *d, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = '\0';
  for (unsigned i = 0; i < d->n_values; i++) {
    if (d->values[i].value == 0)
      continue;
    char s[64];
    colo_pb_enum_short(d, d->values[i].value, s, sizeof s);
    int w = snprintf(buf + k, len - k, "%s%s", k ? ", " : "", s);
    if (w < 0 || (size_t)w >= len - k)
      break;
    k += (size_t)w;
  }
}

/* ---- scalars ---- */

static size_t elem_size(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_ENUM:
  case PROTOBUF_C_TYPE_FLOAT:
    return 4;
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_DOUBLE:
    return 8;
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  }
  return 0;
}

static int parse_into(yctx_t *y, const ProtobufCMessageDescriptor *desc, ProtobufCMessage *msg,
                      yaml_node_t *map, const char *path, int depth);

/* Writes one scalar (or nested message) value from node into slot. */
static int set_value(yctx_t *y, const ProtobufCFieldDescriptor *f, yaml_node_t *n, void *slot,
                     const char *path, int depth) {
  if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    if (n->type != YAML_MAPPING_NODE)
      return fail_at(y, n, "%s: expected a mapping", path);
    const ProtobufCMessageDescriptor *md = f->descriptor;
    ProtobufCMessage **pm = slot;
    if (!*pm) {
      *pm = malloc(md->sizeof_message);
      if (!*pm)
        return COLO_ENOMEM;
      md->message_init(*pm);
    }
    return parse_into(y, md, *pm, n, path, depth + 1);
  }
  if (n->type != YAML_SCALAR_NODE)
    return fail_at(y, n, "%s: expected a single value", path);
  const char *s = (const char *)n->data.scalar.value;
  char *end = NULL;
  errno = 0;
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64: {
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno)
      return fail_at(y, n, "%s: \"%s\" is not an integer", path, s);
    int is32 = elem_size(f->type) == 4;
    if (is32 && (v < INT32_MIN || v > INT32_MAX))
      return fail_at(y, n, "%s: %s is out of range", path, s);
    if (is32)
      *(int32_t *)slot = (int32_t)v;
    else
      *(int64_t *)slot = (int64_t)v;
    return 0;
  }
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    if (*s == '-')
      return fail_at(y, n, "%s: %s must not be negative", path, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno)
      return fail_at(y, n, "%s: \"%s\" is not an integer", path, s);
    if (elem_size(f->type) == 4) {
      if (v > UINT32_MAX)
        return fail_at(y, n, "%s: %s is out of range", path, s);
      *(uint32_t *)slot = (uint32_t)v;
    } else {
      *(uint64_t *)slot = (uint64_t)v;
    }
    return 0;
  }
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE: {
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v))
      return fail_at(y, n, "%s: \"%s\" is not a finite number", path, s);
    if (f->type == PROTOBUF_C_TYPE_FLOAT)
      *(float *)slot = (float)v;
    else
      *(double *)slot = v;
    return 0;
  }
  case PROTOBUF_C_TYPE_BOOL:
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
      *(protobuf_c_boolean *)slot = 1;
    else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
      *(protobuf_c_boolean *)slot = 0;
    else
      return fail_at(y, n, "%s: \"%s\" is not true or false", path, s);
    return 0;
  case PROTOBUF_C_TYPE_ENUM: {
    int v;
    if (enum_lookup(f->descriptor, s, &v) < 0) {
      char choices[256];
      enum_choices(f->descriptor, choices, sizeof choices);
      return fail_at(y, n, "%s: \"%s\" must be one of %s", path, s, choices);
    }
    *(int *)slot = v;
    return 0;
  }
  case PROTOBUF_C_TYPE_STRING: {
    char **ps = slot;
    char *d = strdup(s);
    if (!d)
      return COLO_ENOMEM;
    if (*ps && *ps != (const char *)f->default_value)
      free(*ps);
    *ps = d;
    return 0;
  }
  default:
    return fail_at(y, n, "%s: this field cannot be set from a document", path);
  }
}

static int parse_into(yctx_t *y, const ProtobufCMessageDescriptor *desc, ProtobufCMessage *msg,
                      yaml_node_t *map, const char *path, int depth) {
  if (depth > MAX_DEPTH)
    return fail_at(y, map, "%s: nested too deeply", path);
  if (map->type != YAML_MAPPING_NODE)
    return fail_at(y, map, "%s: expected a mapping", path[0] ? path : "document");
  unsigned char seen[256] = {0};
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(y->doc, p->key);
    yaml_node_t *v = yaml_document_get_node(y->doc, p->value);
    if (!k || !v)
      return fail_at(y, map, "malformed document");
    if (k->type != YAML_SCALAR_NODE)
      return fail_at(y, k, "%s: keys must be plain names", path[0] ? path : "document");
    const char *key = (const char *)k->data.scalar.value;
    char sub[256];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(desc, key);
    if (!f)
      return fail_at(y, k, "unknown field \"%s\"", sub);
    size_t fi = (size_t)(f - desc->fields);
    if (fi < sizeof seen && seen[fi]++)
      return fail_at(y, k, "field \"%s\" given twice", sub);
    /* an empty value (`key:` or `~`) leaves the field unset */
    if (v->type == YAML_SCALAR_NODE && v->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
        (v->data.scalar.length == 0 || !strcmp((char *)v->data.scalar.value, "~") ||
         !strcmp((char *)v->data.scalar.value, "null")))
      continue;
    char *base = (char *)msg;
    int rc;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      /* a scalar is a list of one: `after: 7`, and `--set resources.host_labels=ib` appends;
       * so is a mapping for a list of messages (`--set 'data.sources={path: c.bin}'`) */
      int one = v->type == YAML_SCALAR_NODE ||
                (v->type == YAML_MAPPING_NODE && f->type == PROTOBUF_C_TYPE_MESSAGE);
      if (v->type != YAML_SEQUENCE_NODE && !one)
        return fail_at(y, v, "%s: expected a list", sub);
      size_t count = one ? 1 : (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
      size_t es = elem_size(f->type);
      size_t *pn = (size_t *)(base + f->quantifier_offset);
      void **parr = (void **)(base + f->offset);
      if (*pn)
        return fail_at(y, v, "%s: list given twice", sub);
      char *arr = calloc(count ? count : 1, es);
      if (!arr)
        return COLO_ENOMEM;
      *parr = arr;
      for (size_t i = 0; i < count; i++) {
        yaml_node_t *item =
            one ? v : yaml_document_get_node(y->doc, v->data.sequence.items.start[i]);
        char ipath[300];
        snprintf(ipath, sizeof ipath, "%s[%zu]", sub, i);
        if (!item)
          return fail_at(y, v, "malformed document");
        rc = set_value(y, f, item, arr + i * es, ipath, depth);
        *pn = i + 1; /* count what is owned, so free_unpacked frees exactly that */
        if (rc < 0)
          return rc;
      }
      continue;
    }
    rc = set_value(y, f, v, base + f->offset, sub, depth);
    if (rc < 0)
      return rc;
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
        f->type != PROTOBUF_C_TYPE_STRING)
      *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
  }
  return 0;
}

int colo_pb_from_yaml(const char *text, size_t len, const char *source,
                      const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out, char *err,
                      size_t errlen) {
  if (len > MAX_DOC_BYTES) {
    snprintf(err, errlen, "%s: document of %zu bytes exceeds the limit of %u", source, len,
             MAX_DOC_BYTES);
    return COLO_ETOOBIG;
  }
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    snprintf(err, errlen, "%s:%zu: %s", source, parser.problem_mark.line + 1,
             parser.problem ? parser.problem : "invalid YAML");
    yaml_parser_delete(&parser);
    return COLO_EPARSE;
  }
  yaml_parser_delete(&parser);
  yctx_t y = {&doc, source, err, errlen};
  int rc;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  ProtobufCMessage *msg = malloc(desc->sizeof_message);
  if (!msg) {
    yaml_document_delete(&doc);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  desc->message_init(msg);
  if (!root)
    rc = fail_at(&y, NULL, "the document is empty");
  else
    rc = parse_into(&y, desc, msg, root, "", 0);
  yaml_document_delete(&doc);
  if (rc < 0) {
    if (rc == COLO_ENOMEM)
      snprintf(err, errlen, "out of memory");
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  *out = msg;
  return 0;
}

int colo_pb_from_yaml_file(const char *path, const ProtobufCMessageDescriptor *desc,
                           ProtobufCMessage **out, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return COLO_EIO;
  }
  char *buf = malloc(MAX_DOC_BYTES + 1);
  if (!buf) {
    fclose(f);
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  size_t n = fread(buf, 1, MAX_DOC_BYTES + 1, f);
  int rerr = ferror(f);
  fclose(f);
  int rc;
  if (rerr) {
    snprintf(err, errlen, "%s: read error", path);
    rc = COLO_EIO;
  } else {
    rc = colo_pb_from_yaml(buf, n, path, desc, out, err, errlen);
  }
  free(buf);
  return rc;
}

/* ---- defaults ---- */

int colo_pb_fill_defaults(ProtobufCMessage *msg) {
  const ProtobufCMessageDescriptor *d = msg->descriptor;
  char *base = (char *)msg;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        size_t n = *(size_t *)(base + f->quantifier_offset);
        ProtobufCMessage **arr = *(ProtobufCMessage ***)(base + f->offset);
        for (size_t k = 0; k < n; k++)
          if (colo_pb_fill_defaults(arr[k]) < 0)
            return COLO_ENOMEM;
      }
      continue;
    }
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
      ProtobufCMessage **pm = (ProtobufCMessage **)(base + f->offset);
      if (!*pm) {
        const ProtobufCMessageDescriptor *md = f->descriptor;
        *pm = malloc(md->sizeof_message);
        if (!*pm)
          return COLO_ENOMEM;
        md->message_init(*pm);
      }
      if (colo_pb_fill_defaults(*pm) < 0)
        return COLO_ENOMEM;
      continue;
    }
    if (f->type == PROTOBUF_C_TYPE_STRING)
      continue; /* NULL stays "absent" */
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset)
      *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
  }
  return 0;
}

/* ---- to JSON ---- */

static cJSON *value_json(const ProtobufCFieldDescriptor *f, const void *slot) {
  char buf[64];
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return cJSON_CreateNumber(*(const int32_t *)slot);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return cJSON_CreateNumber(*(const uint32_t *)slot);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return cJSON_CreateNumber((double)*(const int64_t *)slot);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return cJSON_CreateNumber((double)*(const uint64_t *)slot);
  case PROTOBUF_C_TYPE_FLOAT: {
    /* print the float's shortest round-trip decimal, not the widened double's */
    for (int p = 1; p <= 9; p++) {
      snprintf(buf, sizeof buf, "%.*g", p, (double)*(const float *)slot);
      if (strtof(buf, NULL) == *(const float *)slot)
        break;
    }
    return cJSON_CreateRaw(buf);
  }
  case PROTOBUF_C_TYPE_DOUBLE:
    return cJSON_CreateNumber(*(const double *)slot);
  case PROTOBUF_C_TYPE_BOOL:
    return cJSON_CreateBool(*(const protobuf_c_boolean *)slot);
  case PROTOBUF_C_TYPE_ENUM:
    return cJSON_CreateString(
        colo_pb_enum_short(f->descriptor, *(const int *)slot, buf, sizeof buf));
  case PROTOBUF_C_TYPE_STRING:
    return cJSON_CreateString(*(char *const *)slot);
  case PROTOBUF_C_TYPE_MESSAGE:
    return colo_pb_to_json(*(ProtobufCMessage *const *)slot);
  case PROTOBUF_C_TYPE_BYTES:
    return cJSON_CreateNumber((double)((const ProtobufCBinaryData *)slot)->len);
  }
  return cJSON_CreateNull();
}

/* 1 when s is valid UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF */
static int utf8_ok(const unsigned char *s) {
  while (*s) {
    unsigned c = *s, n = c < 0x80             ? 0
                         : (c & 0xe0) == 0xc0 ? 1
                         : (c & 0xf0) == 0xe0 ? 2
                         : (c & 0xf8) == 0xf0 ? 3
                                              : 9;
    if (n == 9 || (n == 1 && c < 0xc2) || (n == 3 && c > 0xf4))
      return 0;
    unsigned cp = n ? c & (0x3f >> n) : c;
    for (unsigned k = 1; k <= n; k++) {
      if ((s[k] & 0xc0) != 0x80)
        return 0;
      cp = cp << 6 | (s[k] & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
      return 0;
    s += n + 1;
  }
  return 1;
}

enum { FIND_UNKNOWN, FIND_BAD_UTF8 };

/* the first field of msg (at any depth) that `what` looks for: 1 with its path in where */
static int find(const ProtobufCMessage *msg, int what, char *where, size_t len, uint32_t *field) {
  if (!msg)
    return 0;
  if (what == FIND_UNKNOWN && msg->n_unknown_fields > 0) {
    if (len)
      where[0] = '\0';
    *field = msg->unknown_fields[0].tag;
    return 1;
  }
  const ProtobufCMessageDescriptor *d = msg->descriptor;
  const char *base = (const char *)msg;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    int rep = f->label == PROTOBUF_C_LABEL_REPEATED;
    if (f->type != PROTOBUF_C_TYPE_MESSAGE &&
        !(what == FIND_BAD_UTF8 && f->type == PROTOBUF_C_TYPE_STRING))
      continue;
    const void *slot = base + f->offset;
    size_t n = rep ? *(const size_t *)(base + f->quantifier_offset) : 1;
    void *const *arr = rep ? *(void **const *)slot : (void *const *)slot;
    for (size_t k = 0; k < n; k++) {
      char inner[256] = "";
      if (f->type == PROTOBUF_C_TYPE_STRING ? !arr[k] || utf8_ok(arr[k])
                                            : !find(arr[k], what, inner, sizeof inner, field))
        continue;
      char idx[32] = "";
      if (rep)
        snprintf(idx, sizeof idx, "[%zu]", k);
      snprintf(where, len, "%s%s%s%s", f->name, idx, inner[0] ? "." : "", inner);
      return 1;
    }
  }
  return 0;
}

int colo_pb_find_unknown(const ProtobufCMessage *msg, char *where, size_t len, uint32_t *field) {
  return find(msg, FIND_UNKNOWN, where, len, field);
}

int colo_pb_find_bad_utf8(const ProtobufCMessage *msg, char *where, size_t len) {
  uint32_t unused;
  return find(msg, FIND_BAD_UTF8, where, len, &unused);
}

cJSON *colo_pb_to_json(const ProtobufCMessage *msg) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !msg)
    return o;
  const ProtobufCMessageDescriptor *d = msg->descriptor;
  const char *base = (const char *)msg;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const void *slot = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + f->quantifier_offset);
      const char *arr = *(char *const *)slot;
      cJSON *a = cJSON_AddArrayToObject(o, f->name);
      for (size_t k = 0; k < n; k++)
        cJSON_AddItemToArray(a, value_json(f, arr + k * elem_size(f->type)));
      continue;
    }
    if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING) {
      if (!*(void *const *)slot)
        continue;
    } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
               !*(const protobuf_c_boolean *)(base + f->quantifier_offset)) {
      continue;
    }
    cJSON_AddItemToObject(o, f->name, value_json(f, slot));
  }
  return o;
}

int colo_pb_set(ProtobufCMessage **msg, const ProtobufCMessageDescriptor *desc,
                const char *assignment, char *err, size_t errlen) {
  const char *eq = strchr(assignment, '=');
  size_t klen = eq ? (size_t)(eq - assignment) : 0;
  if (!eq || klen == 0 || klen > 200 || strlen(eq + 1) > 1000 || strchr(eq + 1, '\n')) {
    snprintf(err, errlen, "--set %.200s: expected FIELD=VALUE, e.g. train.steps=600", assignment);
    return COLO_EINVAL;
  }
  /* "a.b.c=v" -> "a: {b: {c: 'v'}}"; the quotes keep the value a string until the field's
   * type reads it */
  char doc[1600], src[256];
  size_t n = 0, depth = 0;
  for (size_t i = 0; i < klen && n < 600; i++) {
    char ch = assignment[i];
    if (ch == '.') {
      n += (size_t)snprintf(doc + n, sizeof doc - n, ": {");
      depth++;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_') {
      doc[n++] = ch;
    } else {
      snprintf(err, errlen, "--set %.200s: bad field name", assignment);
      return COLO_EINVAL;
    }
  }
  /* a field of messages (data.sources) takes YAML as written: a mapping, or a list of them */
  const ProtobufCMessageDescriptor *d = desc;
  const ProtobufCFieldDescriptor *f = NULL;
  for (const char *k = assignment; d && k < eq;) {
    const char *dot = memchr(k, '.', (size_t)(eq - k));
    size_t kl = (size_t)((dot ? dot : eq) - k);
    char name[201];
    snprintf(name, sizeof name, "%.*s", (int)kl, k);
    f = protobuf_c_message_descriptor_get_field_by_name(d, name);
    d = f && f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
    k += kl + 1;
  }
  int raw = f && f->type == PROTOBUF_C_TYPE_MESSAGE;
  if (!raw && strchr(eq + 1, '\'')) {
    snprintf(err, errlen, "--set %.200s: expected FIELD=VALUE, e.g. train.steps=600", assignment);
    return COLO_EINVAL;
  }
  n += (size_t)snprintf(doc + n, sizeof doc - n, raw ? ": %s" : ": '%s'", eq + 1);
  for (size_t i = 0; i < depth; i++)
    n += (size_t)snprintf(doc + n, sizeof doc - n, "}");
  snprintf(src, sizeof src, "--set %.*s", (int)klen, assignment);
  ProtobufCMessage *one;
  int rc = colo_pb_from_yaml(doc, n, src, desc, &one, err, errlen);
  if (rc < 0)
    return rc;
  size_t la = protobuf_c_message_get_packed_size(*msg),
         lb = protobuf_c_message_get_packed_size(one);
  uint8_t *buf = malloc(la + lb + 1);
  if (!buf) {
    protobuf_c_message_free_unpacked(one, NULL);
    return COLO_ENOMEM;
  }
  protobuf_c_message_pack(*msg, buf);
  protobuf_c_message_pack(one, buf + la);
  protobuf_c_message_free_unpacked(one, NULL);
  ProtobufCMessage *merged = protobuf_c_message_unpack(desc, NULL, la + lb, buf);
  free(buf);
  if (!merged) {
    snprintf(err, errlen, "%s: cannot merge", src);
    return COLO_EINTERNAL;
  }
  protobuf_c_message_free_unpacked(*msg, NULL);
  *msg = merged;
  return 0;
}
