/* colo-workerd's WatchHost stream (see watch.c): colod's nudges to beat now. */
#ifndef COLO_WORKER_WATCH_H
#define COLO_WORKER_WATCH_H

#include <stdint.h>

#include <uv.h>

#include "proto/rpc.h"

typedef struct colo_watch_s colo_watch_t;

/* Starts the stream's thread, with a client of its own to `target`; it waits for a session.
 * `nudge` runs on the loop for each nudge (several that arrive together may run it once). */
int colo_watch_start(uv_loop_t *loop, const char *target, const colo_rpc_client_opts_t *opts,
                     void (*nudge)(void *data), void *data, colo_watch_t **out, char *err,
                     size_t errlen);
/* The host and session RegisterHost gave: the stream is (re)opened for them. */
void colo_watch_session(colo_watch_t *w, uint64_t host_id, uint64_t session);
/* Cancels the stream, joins the thread and frees everything once the loop has closed its
 * handle. NULL is allowed. */
void colo_watch_stop(colo_watch_t *w);

#endif
