/* Job notifications (notify_url, a job's notify.url): when a job ends (SUCCEEDED, FAILED,
 * CANCELLED, TIMED_OUT) or is to restart after a failure (RESTARTING), colod POSTs a JSON record
 * of it to the operator's URL, a chat's incoming webhook say, and to the job's own URL (within the
 * operator's notify_allow) for the changes it asked for, starts included: {"text": "colo job 7
 * \"gpt2\" FAILED: ...", "job": 7, "name", "owner", "account", "state", "message", "attempt",
 * "restarts", "time_ms"}. One try each, off the loop (libuv's thread pool, libcurl), at most
 * NOTIFY_IN_FLIGHT at once: a slow or dead endpoint costs colod nothing but the records it drops,
 * each counted and logged. */
#ifndef COLOD_NOTIFY_H
#define COLOD_NOTIFY_H

#include "../storage/store.h"

struct colod_s;

/* Once, before any thread starts (curl_global_init); 0 or -1. */
int colod_notify_init(void);
void colod_notify_cleanup(void);

/* A job's state changed: its record is sent to the operator's notify_url (ends and restarts), and
 * to the job's own notify.url for the changes its notify.on names (by default the same) while
 * that URL is within notify_allow. */
void colod_notify_job(struct colod_s *d, const colo_job_t *job);

#endif
