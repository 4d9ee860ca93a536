/* Logging: one formatted line per call, written with a single write(2). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int colo_log_level_current = COLO_LOG_INFO;
static char log_prefix[32] = "colo";

static const char *level_names[] = {"error", "warn", "info", "debug"};

void colo_log_set_level(colo_log_level_t level) {
  colo_log_level_current = (int)level;
}

int colo_log_level_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, level_names[i]) == 0)
      return i;
  return -1;
}

const char *colo_log_level_name(colo_log_level_t level) {
  return (level >= 0 && level <= COLO_LOG_DEBUG) ? level_names[level] : "?";
}

void colo_log_set_prefix(const char *prefix) {
  snprintf(log_prefix, sizeof log_prefix, "%s", prefix);
}

void colo_log_write(colo_log_level_t level, const char *subsys, const char *file, int line,
                    const char *fmt, ...) {
  char buf[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(buf, sizeof buf,
                   "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %-5s %s: ", tm.tm_year + 1900,
                   tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000, log_prefix, colo_log_level_name(level), subsys);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof buf)
    n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof buf - 64)
    n = (int)sizeof buf - 64;
  if (level <= COLO_LOG_WARN) {
    const char *base = strrchr(file, '/');
    n += snprintf(buf + n, sizeof buf - (size_t)n, " (%s:%d)", base ? base + 1 : file, line);
  }
  buf[n++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
  (void)w;
}
