/* colod's rendezvous store for colo-train (see rdzv_colod.c). */
#ifndef COLO_RDZV_COLOD_H
#define COLO_RDZV_COLOD_H

/* Makes colo_rdzv_set/get reach colod for "colod://HOST:PORT/JOB/ATTEMPT" addresses. */
void colo_rdzv_colod_register(void);

#endif
