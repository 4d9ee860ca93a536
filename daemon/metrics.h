/* colod's metrics endpoint (see metrics.c): Prometheus' text format over plain HTTP. */
#ifndef COLOD_METRICS_H
#define COLOD_METRICS_H

#include <stdio.h>

struct colod_s;

/* Serves cfg.metrics_listen (HOST:PORT) on d's loop: GET /metrics and GET /healthz. Returns 0 or
 * an error with an exact message in err (nothing left open). */
int colod_metrics_start(struct colod_s *d, char *err, size_t errlen);
/* The port it is bound to (after port 0, the one the system chose). */
int colod_metrics_port(const struct colod_s *d);
/* Stops serving: closes the listening socket and every connection. */
void colod_metrics_stop(struct colod_s *d);

/* Writes every metric, as /metrics serves them, to out. Returns 0, or -1 when a store read
 * failed (what could be read is written). */
int colod_metrics_write(struct colod_s *d, FILE *out);

#endif
