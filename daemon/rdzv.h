/* colod's rendezvous store (see rdzv.c). */
#ifndef COLOD_RDZV_H
#define COLOD_RDZV_H

#include "../proto/rpc.h"
#include "colo/v1/cluster.pb-c.h"

struct colod_s;
typedef struct colod_rdzv_s colod_rdzv_t;

void colod_rdzv_put(struct colod_s *d, colo_rpc_call_t *call,
                    const Colo__V1__RendezvousPutRequest *req);
/* Answers at once when the key is set, waits up to wait_ms for it otherwise. */
void colod_rdzv_get(struct colod_s *d, colo_rpc_call_t *call,
                    const Colo__V1__RendezvousGetRequest *req);
/* Ends waits that timed out or whose attempt ended; drops the keys of ended attempts. */
void colod_rdzv_tick(struct colod_s *d);
void colod_rdzv_close_all(struct colod_s *d, const char *why);

#endif
