/* All-to-all over any communicator, as pairwise exchanges: in round k = 1 … size − 1 each member
 * sends to the member k after it and receives from the member k before it, so every member's
 * send in a round meets its peer's receive in the same round (sendrecv does both at once, so
 * tensors larger than the transport's buffers pass). Context parallelism's exchange of heads for
 * sequence pieces (model/gpt.c) is its user. */
#include "comm.h"

int colo_comm_all_to_all(colo_comm_t *c, const float *sbuf, float *rbuf, size_t n) {
  int size = c->size, me = c->rank;
  for (int k = 1; k < size; k++) {
    int to = (me + k) % size, from = (me - k + size) % size;
    int rc = c->ops->sendrecv(c, sbuf + (size_t)to * n, n, to, rbuf + (size_t)from * n, n, from);
    if (rc < 0)
      return rc;
  }
  return 0;
}
