/* colod's accounting (see usage.c): GetUsage. */
#ifndef COLOD_USAGE_H
#define COLOD_USAGE_H

#include "../proto/rpc.h"
#include "../storage/store.h"
#include "colo/v1/cluster.pb-c.h"

struct colod_s;

/* Answers a GetUsage call: device hours by owner or by job over the request's window. */
void colod_usage_get(struct colod_s *d, colo_rpc_call_t *call,
                     const Colo__V1__GetUsageRequest *req);

/* The kind of device (colo.v1.DeviceKind) an accounting row's job asked for, from its spec;
 * *job and *device hold the last job's (*job 0 at first), so that a job's attempts unpack it once.
 */
int colod_usage_device(const colo_usage_row_t *a, uint64_t *job, int *device);
/* The same, with the job's account (JobSpec.account, "" for none) in account (len bytes; NULL: not
 * wanted), kept from the same unpacking. */
int colod_usage_spec(const colo_usage_row_t *a, uint64_t *job, int *device, char *account,
                     size_t len);
/* The store's usage key (colo_store_set_usage_key): the account and the device kind of a packed
 * colo.v1.JobSpec, as the two above read them (CPU when the spec does not say or cannot be read).
 */
void colod_usage_key(const uint8_t *spec, size_t len, colo_usage_key_t *key);
/* The part of a usage hour's device time that [from, to) covers, the time used spread evenly over
 * its [from_ms, to_ms) (0 to 1). */
double colod_usage_hour_part(const colo_usage_hour_t *h, int64_t from, int64_t to);

#endif
