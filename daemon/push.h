/* colod's push to workers (see push.c): a WatchHost stream per worker that nudges it to beat. */
#ifndef COLOD_PUSH_H
#define COLOD_PUSH_H

#include <stdint.h>

#include "../proto/rpc.h"
#include "colo/v1/cluster.pb-c.h"

struct colod_s;
typedef struct colod_push_s colod_push_t;

/* The WatchHost handler: for a registered host and its current session only. */
void colod_push_watch(struct colod_s *d, colo_rpc_call_t *call,
                      const Colo__V1__WatchHostRequest *req);
/* What the host should run has changed: its worker is nudged once the loop turn ends (several
 * nudges in one turn are one). Nothing for a host without a stream. */
void colod_push_nudge(struct colod_s *d, uint64_t host_id);
/* Number of open WatchHost streams. */
uint32_t colod_push_streams(const struct colod_s *d);
void colod_push_close_all(struct colod_s *d, const char *why);

#endif
