/* Levelled logging to stderr: colo_log(level, subsys, fmt, ...). The level is checked before
 * formatting; warnings and errors carry the file and line. Thread-safe (one write per line). */
#ifndef COLO_LOG_H
#define COLO_LOG_H

typedef enum {
  COLO_LOG_ERROR = 0,
  COLO_LOG_WARN = 1,
  COLO_LOG_INFO = 2,
  COLO_LOG_DEBUG = 3,
} colo_log_level_t;

extern int colo_log_level_current;

void colo_log_set_level(colo_log_level_t level);
/* "error", "warn", "info", "debug" -> level; -1 for anything else. */
int colo_log_level_parse(const char *name);
const char *colo_log_level_name(colo_log_level_t level);
/* A prefix for every line of this process ("colod", "rank 3"); copied. */
void colo_log_set_prefix(const char *prefix);

void colo_log_write(colo_log_level_t level, const char *subsys, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define colo_log(level, subsys, ...)                                                               \
  do {                                                                                             \
    if ((int)(level) <= colo_log_level_current)                                                    \
      colo_log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);                          \
  } while (0)

#endif
