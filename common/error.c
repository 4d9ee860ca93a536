/* colo_strerror and colo_err_name, generated from COLO_ERRNO_MAP. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

int colo_fail(char *err, size_t errlen, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

const char *colo_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define XX(name, code, text)                                                                       \
  case code:                                                                                       \
    return text;
    COLO_ERRNO_MAP(XX)
#undef XX
  }
  return "unknown error";
}

const char *colo_err_name(int err) {
  switch (err) {
  case 0:
    return "OK";
#define XX(name, code, text)                                                                       \
  case code:                                                                                       \
    return #name;
    COLO_ERRNO_MAP(XX)
#undef XX
  }
  return "UNKNOWN";
}
