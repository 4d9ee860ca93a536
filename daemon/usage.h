/* colod's accounting (see usage.c): GetUsage. */
#ifndef COLOD_USAGE_H
#define COLOD_USAGE_H

#include "../proto/rpc.h"
#include "colo/v1/cluster.pb-c.h"

struct colod_s;

/* Answers a GetUsage call: device hours by owner or by job over the request's window. */
void colod_usage_get(struct colod_s *d, colo_rpc_call_t *call,
                     const Colo__V1__GetUsageRequest *req);

#endif
