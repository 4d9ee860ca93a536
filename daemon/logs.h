/* Rank logs at colod: workers ship each rank's output in their heartbeats; colod appends it to
 * state_dir/logs/job-J/attempt-A/rank-R.log (up to rank_log_max_mib) and serves it with ReadLogs,
 * from an offset or the tail, and with follow, as it grows until the attempt ends. Logs outlive
 * the node that wrote them. */
#ifndef COLOD_LOGS_H
#define COLOD_LOGS_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/rpc.h"

struct colod_s;

void colod_logs_path(struct colod_s *d, uint64_t job_id, uint32_t attempt, uint32_t rank, char *out,
                     size_t n);

/* Appends len bytes that start at byte `offset` of the rank's output (an overlap with what is
 * already there is skipped). known: the job is one colod tracks (otherwise it is checked). */
void colod_logs_append(struct colod_s *d, uint64_t job_id, uint32_t attempt, uint32_t rank,
                       uint64_t offset, const uint8_t *data, size_t len, int known);

/* Starts a ReadLogs stream on call. */
void colod_logs_start(struct colod_s *d, colo_rpc_call_t *call, uint64_t job_id, uint32_t attempt,
                      uint32_t rank, uint64_t offset, uint32_t tail, int follow);

/* Sends what is new to every stream; ends those that are done. */
void colod_logs_tick(struct colod_s *d);
void colod_logs_close_all(struct colod_s *d, const char *why);

#endif
