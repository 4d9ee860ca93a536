/* Shared by the communicator tests: a free loopback port for the rendezvous store, and a check
 * that reports the failing rank and returns 1 from a rank's function. */
#ifndef COLO_COMM_TEST_H
#define COLO_COMM_TEST_H

#include "comm/store.h"
#include "test.h"

static inline int free_port(void) {
  char err[128];
  int port;
  int fd = colo_tcp_listen("127.0.0.1", 0, &port, err, sizeof err);
  ASSERT(fd >= 0);
  close(fd);
  return port;
}

#define CHECKR(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__, #cond);                    \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

#endif
