/* Chunk packing and the capacity search. */
#include "chunks.h"

#include <stdlib.h>

#include "../../../common/error.h"

static size_t round_up(size_t x, size_t m) {
  return (x + m - 1) / m * m;
}

/* Greedy packing at capacity cs; returns the number of chunks and the waste. */
static size_t pack(const colo_param_t *t, size_t nt, size_t cs, int dp, colo_chunk_t *out,
                   size_t *waste) {
  size_t n = 0, used = 0, total = 0;
  size_t lo = t[0].offset;
  for (size_t i = 0; i < nt; i++) {
    if (used > 0 && used + t[i].numel > cs) { /* close the current chunk */
      if (out)
        out[n] = (colo_chunk_t){lo, t[i].offset, round_up(cs, (size_t)dp)};
      total += round_up(cs, (size_t)dp);
      n++;
      lo = t[i].offset;
      used = 0;
    }
    used += t[i].numel;
  }
  size_t cap = round_up(used > cs ? used : cs, (size_t)dp);
  if (out)
    out[n] = (colo_chunk_t){lo, t[nt - 1].offset + t[nt - 1].numel, cap};
  total += cap;
  n++;
  /* a chunk over capacity (one big tensor) was counted at cs above: fix its true size */
  if (out)
    for (size_t k = 0; k < n; k++)
      if (out[k].hi - out[k].lo > out[k].capacity) {
        total += round_up(out[k].hi - out[k].lo, (size_t)dp) - out[k].capacity;
        out[k].capacity = round_up(out[k].hi - out[k].lo, (size_t)dp);
      }
  size_t params = t[nt - 1].offset + t[nt - 1].numel - t[0].offset;
  *waste = total - params;
  return n;
}

int colo_chunks_plan(const colo_param_t *table, size_t nt, int dp, size_t capacity,
                     colo_chunks_t *out) {
  if (nt == 0 || dp < 1)
    return COLO_EINVAL;
  size_t biggest = 0;
  for (size_t i = 0; i < nt; i++)
    if (table[i].numel > biggest)
      biggest = table[i].numel;
  size_t best_cs = biggest, best_waste = (size_t)-1;
  size_t step = biggest / 64 ? biggest / 64 : 1;
  colo_chunk_t *tmp = malloc((nt + 1) * sizeof *tmp);
  if (!tmp)
    return COLO_ENOMEM;
  if (capacity) /* given: no search */
    best_cs = capacity;
  for (size_t cs = biggest; !capacity && cs >= step && cs >= biggest / 64; cs -= step) {
    size_t waste;
    pack(table, nt, cs, dp, tmp, &waste); /* with out: big tensors counted exactly */
    if (waste < best_waste) {
      best_waste = waste;
      best_cs = cs;
    }
    if (cs < step)
      break;
  }
  out->n = pack(table, nt, best_cs, dp, tmp, &out->waste);
  out->chunks = tmp;
  out->capacity = round_up(best_cs, (size_t)dp);
  out->dp = dp;
  return 0;
}

void colo_chunks_free(colo_chunks_t *c) {
  free(c->chunks);
  c->chunks = NULL;
  c->n = 0;
}

void colo_chunk_piece(const colo_chunks_t *c, size_t k, int rank, size_t *lo, size_t *hi,
                      size_t *piece) {
  const colo_chunk_t *ch = &c->chunks[k];
  size_t p = ch->capacity / (size_t)c->dp;
  size_t a = ch->lo + (size_t)rank * p, b = a + p;
  if (a > ch->hi)
    a = ch->hi;
  if (b > ch->hi)
    b = ch->hi;
  *lo = a;
  *hi = b;
  *piece = p;
}
