/* Rank logs at colod: append from heartbeats, serve with ReadLogs. */
#include "logs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fs.h"
#include "../common/jobspec.h"
#include "../common/log.h"
#include "colod.h"
#include "jobs.h"

#define CHUNK         65536
#define CHUNKS_A_TICK 16

struct colod_log_reader_s {
  colod_log_reader_t *next;
  colo_rpc_call_t *call;
  uint64_t job_id;
  uint32_t attempt, rank;
  uint64_t offset;
  int follow;
  int gone;
  uint64_t over_since_mono_ms; /* when its attempt was first seen over; 0: running */
};

void colod_logs_path(colod_t *d, uint64_t job_id, uint32_t attempt, uint32_t rank, char *out,
                     size_t n) {
  snprintf(out, n, "%s/logs/job-%llu/attempt-%u/rank-%u.log", d->cfg.state_dir,
           (unsigned long long)job_id, attempt, rank);
}

/* Creates the directory a file goes in. */
static int mkdirs_for(const char *file) {
  char dir[1200];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir)
    return 0;
  *slash = '\0';
  return colo_mkdirs(dir, 0750);
}

void colod_logs_append(colod_t *d, uint64_t job_id, uint32_t attempt, uint32_t rank,
                       uint64_t offset, const uint8_t *data, size_t len, int known) {
  if (!known) { /* only jobs that exist get files */
    colo_job_t j;
    if (colo_store_job_get(d->store, job_id, &j) < 0)
      return;
    int ok = attempt >= 1 && attempt <= j.attempt;
    colo_job_clear(&j);
    if (!ok)
      return;
  }
  if (attempt == 0 || rank >= COLO_MAX_WORLD)
    return;
  char path[1200];
  colod_logs_path(d, job_id, attempt, rank, path, sizeof path);
  struct stat sb;
  uint64_t size = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
  if (offset < size) { /* sent before, by a heartbeat whose reply was lost */
    if (offset + len <= size)
      return;
    data += size - offset;
    len -= (size_t)(size - offset);
  } else if (offset > size) {
    colo_log(COLO_LOG_WARN, "logs", "job %llu attempt %u rank %u: %llu bytes of output lost",
             (unsigned long long)job_id, attempt, rank, (unsigned long long)(offset - size));
  }
  uint64_t cap = (uint64_t)d->cfg.log_max_mib << 20;
  if (size >= cap)
    return;
  if (size + len > cap)
    len = (size_t)(cap - size);
  if (mkdirs_for(path) < 0)
    return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    colo_log(COLO_LOG_ERROR, "logs", "cannot open %s: %s", path, strerror(errno));
    return;
  }
  while (len > 0) {
    ssize_t w = write(fd, data, len);
    if (w <= 0)
      break;
    data += w;
    len -= (size_t)w;
  }
  close(fd);
}

static void reader_cancelled(colo_rpc_call_t *call, void *data) {
  colod_log_reader_t *r = data;
  (void)call;
  r->gone = 1; /* ended and freed by the next tick */
}

void colod_logs_start(colod_t *d, colo_rpc_call_t *call, uint64_t job_id, uint32_t attempt,
                      uint32_t rank, uint64_t offset, uint32_t tail, int follow) {
  colod_log_reader_t *r = calloc(1, sizeof *r);
  if (!r) {
    colo_rpc_fail(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  r->call = call;
  r->job_id = job_id;
  r->attempt = attempt;
  r->rank = rank;
  r->offset = offset;
  r->follow = follow;
  if (offset == 0 && tail > 0) {
    char path[1200];
    struct stat sb;
    colod_logs_path(d, job_id, attempt, rank, path, sizeof path);
    if (stat(path, &sb) == 0 && (uint64_t)sb.st_size > tail)
      r->offset = (uint64_t)sb.st_size - tail;
  }
  r->next = d->log_readers;
  d->log_readers = r;
  colo_rpc_call_on_cancel(call, reader_cancelled, r);
  colod_logs_tick(d); /* what is there now goes out at once */
}

/* 1 when the reader is finished (stream ended). */
static int reader_step(colod_t *d, colod_log_reader_t *r) {
  if (r->gone) {
    colo_rpc_stream_end(r->call, GRPC_STATUS_CANCELLED, "reader went away");
    return 1;
  }
  char path[1200];
  colod_logs_path(d, r->job_id, r->attempt, r->rank, path, sizeof path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t *buf = malloc(CHUNK);
  int at_end = 1;
  for (int i = 0; fd >= 0 && buf && i < CHUNKS_A_TICK; i++) {
    ssize_t got = pread(fd, buf, CHUNK, (off_t)r->offset);
    if (got <= 0)
      break;
    Colo__V1__LogChunk c = COLO__V1__LOG_CHUNK__INIT;
    c.has_attempt = c.has_rank = c.has_offset = c.has_data = 1;
    c.attempt = r->attempt;
    c.rank = r->rank;
    c.offset = r->offset;
    c.data.data = buf;
    c.data.len = (size_t)got;
    if (colo_rpc_stream_send(r->call, &c.base) < 0) {
      free(buf);
      close(fd);
      return 1; /* the stream is over (client gone, or too slow: ended by the library) */
    }
    r->offset += (uint64_t)got;
    if (got < CHUNK)
      break;
    if (i == CHUNKS_A_TICK - 1)
      at_end = 0;
  }
  free(buf);
  if (fd >= 0)
    close(fd);
  if (!at_end)
    return 0;
  uint32_t attempt, world;
  int live = colod_jobs_attempt(d, r->job_id, &attempt, &world) && attempt == r->attempt;
  if (!live && r->follow && !r->over_since_mono_ms)
    r->over_since_mono_ms = colod_mono_ms(d);
  /* an attempt's last output can come a heartbeat or two after its ranks' exit: a follower
   * stays for two intervals more */
  if (!r->follow ||
      (!live && colod_mono_ms(d) - r->over_since_mono_ms >= 2ull * d->cfg.heartbeat_ms)) {
    colo_rpc_stream_end(r->call, GRPC_STATUS_OK, NULL);
    return 1;
  }
  return 0;
}

void colod_logs_tick(colod_t *d) {
  for (colod_log_reader_t **pp = &d->log_readers; *pp;) {
    colod_log_reader_t *r = *pp;
    if (reader_step(d, r)) {
      *pp = r->next;
      free(r);
    } else {
      pp = &r->next;
    }
  }
}

void colod_logs_close_all(colod_t *d, const char *why) {
  while (d->log_readers) {
    colod_log_reader_t *r = d->log_readers;
    d->log_readers = r->next;
    colo_rpc_stream_end(r->call, GRPC_STATUS_UNAVAILABLE, why);
    free(r);
  }
}
