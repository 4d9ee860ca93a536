/* colo error codes: negative ints from one list, as libuv does. 0 is success. */
#ifndef COLO_ERROR_H
#define COLO_ERROR_H

#include <stddef.h>

#define COLO_ERRNO_MAP(XX)                                                                         \
  XX(EINVAL, -1, "invalid argument")                                                               \
  XX(ENOMEM, -2, "out of memory")                                                                  \
  XX(ENOENT, -3, "not found")                                                                      \
  XX(EEXIST, -4, "already exists")                                                                 \
  XX(ESTATE, -5, "not allowed in the current state")                                               \
  XX(EIO, -6, "input/output error")                                                                \
  XX(EDB, -7, "database error")                                                                    \
  XX(ETIMEDOUT, -8, "timed out")                                                                   \
  XX(EUNAVAIL, -9, "service unavailable")                                                          \
  XX(ECANCELED, -10, "cancelled")                                                                  \
  XX(ETOOBIG, -11, "too large")                                                                    \
  XX(ENOSYS, -12, "not supported")                                                                 \
  XX(EPROTO, -13, "protocol error")                                                                \
  XX(EINTERNAL, -14, "internal error")                                                             \
  XX(EPARSE, -15, "parse error")                                                                   \
  XX(EBUSY, -16, "busy")                                                                           \
  XX(ESTOPPED, -17, "stopped as asked")

typedef enum {
#define XX(name, code, text) COLO_##name = code,
  COLO_ERRNO_MAP(XX)
#undef XX
} colo_errno_t;

/* The exit status of a rank whose error another attempt would meet again: a job it cannot run
 * as written (a missing or malformed data file or weights, a model that does not fit them, a
 * layout the model does not allow). sysexits.h's EX_CONFIG; colod does not restart the job. */
#define COLO_EXIT_CONFIG 78

/* The exit status of a rank that stopped because it was asked to (SIGTERM, or SIGINT): it
 * finished its step, agreed the stop with every other rank, and saved a checkpoint there. A cancel
 * or a worker's shutdown, not a failure. sysexits.h's EX_TEMPFAIL; colod restarts the job from
 * that checkpoint without counting a restart. */
#define COLO_EXIT_STOPPED 75

/* Human text for an error code; "unknown error" for codes not in the list. Never NULL. */
const char *colo_strerror(int err);
/* The code's name ("EINVAL"); "UNKNOWN" for codes not in the list. Never NULL. */
const char *colo_err_name(int err);

/* Writes the reason into err (errlen bytes) and returns rc: `return colo_fail(err, errlen,
 * COLO_EIO, "%s: %s", path, strerror(errno));`. */
int colo_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Jump to `label` with `rc` set when `call` returns a negative code. */
#define CHECK_GOTO(call, rc, label)                                                                \
  do {                                                                                             \
    (rc) = (call);                                                                                 \
    if ((rc) < 0)                                                                                  \
      goto label;                                                                                  \
  } while (0)

#endif
