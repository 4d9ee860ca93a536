/* Bytes over a communicator whose calls move floats: each byte travels as a float of its value
 * (exact), for the small things set-up exchanges, such as an NCCL id or a device's UUID. Host
 * memory only. */
#include <stdlib.h>
#include <string.h>

#include "../../../common/error.h"
#include "comm.h"

int colo_comm_broadcast_bytes(colo_comm_t *c, void *bytes, size_t n, int root) {
  float *f = malloc((n ? n : 1) * sizeof *f);
  if (!f)
    return COLO_ENOMEM;
  unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++)
    f[i] = c->rank == root ? (float)b[i] : 0.0f;
  int rc = c->ops->broadcast(c, f, n, root);
  for (size_t i = 0; rc == 0 && i < n; i++)
    b[i] = (unsigned char)f[i];
  free(f);
  return rc;
}

int colo_comm_find_shared(colo_comm_t *c, const void *id, size_t n, int *a, int *b) {
  size_t size = (size_t)c->size;
  float *f = calloc(size * n + 1, sizeof *f);
  if (!f)
    return COLO_ENOMEM;
  const unsigned char *mine = id;
  for (size_t i = 0; i < n; i++)
    f[(size_t)c->rank * n + i] = (float)mine[i];
  int rc = c->ops->all_gather(c, f, n);
  for (size_t i = 0; rc == 0 && i < size; i++)
    for (size_t j = i + 1; j < size; j++)
      if (!memcmp(f + i * n, f + j * n, n * sizeof *f)) {
        *a = (int)i, *b = (int)j;
        free(f);
        return 1;
      }
  free(f);
  return rc;
}
