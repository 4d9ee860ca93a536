/* Gang placement with tensor-parallel groups inside one host. */
#include "sched.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"

typedef struct {
  size_t idx;    /* into hosts */
  uint32_t fast; /* of its free devices, those at full clocks */
  uint32_t free; /* devices this placement may still use */
} slot_t;

static int by_free_desc(const void *a, const void *b) {
  const slot_t *x = a, *y = b;
  if (x->fast != y->fast)
    return x->fast > y->fast ? -1 : 1;
  if (x->free != y->free)
    return x->free > y->free ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx; /* stable: the order given */
}

static int is_slow(const colo_sched_host_t *h, uint32_t d) {
  return h->slow && (h->slow[d / 64] >> (d % 64)) & 1;
}

/* colo_sched_place, with skip_slow: on devices at full clocks alone */
static int place_on(const colo_sched_host_t *hosts, size_t n_hosts, uint32_t pp, uint32_t dp,
                    uint32_t tp, uint32_t per_node, uint64_t rank_mem, int skip_slow,
                    colo_rank_place_t *out, char *why, size_t whylen) {
  uint64_t world = (uint64_t)pp * dp * tp, groups = (uint64_t)pp * dp;
  slot_t *slots = calloc(n_hosts ? n_hosts : 1, sizeof *slots);
  colo_rank_place_t *tmp = calloc(world, sizeof *tmp);
  /* per host, the lowest device not yet tried at full clocks, then among the slowed */
  uint32_t *next = calloc(n_hosts ? 2 * n_hosts : 1, sizeof *next);
  if (!slots || !tmp || !next) {
    free(slots);
    free(tmp);
    free(next);
    snprintf(why, whylen, "out of memory");
    return COLO_ENOMEM;
  }
  uint64_t total_free = 0;
  int mem_bound = 0; /* some host has devices its memory cannot feed */
  for (size_t h = 0; h < n_hosts; h++) {
    uint32_t f = 0, fast = 0;
    for (uint32_t d = 0; d < hosts[h].n_devices; d++) {
      int slow = is_slow(&hosts[h], d);
      f += !hosts[h].busy[d] && !(skip_slow && slow);
      fast += !hosts[h].busy[d] && !slow;
    }
    if (per_node && f > per_node)
      f = per_node;
    if (rank_mem && hosts[h].mem_free / rank_mem < f) {
      f = (uint32_t)(hosts[h].mem_free / rank_mem);
      mem_bound = 1;
    }
    slots[h] = (slot_t){h, fast < f ? fast : f, f};
    total_free += f;
  }
  qsort(slots, n_hosts, sizeof *slots, by_free_desc);
  size_t cur = 0;
  int rc = 0;
  for (uint64_t g = 0; g < groups && rc == 0; g++) {
    /* the current host while it fits a whole group, else the next that does */
    while (cur < n_hosts && slots[cur].free < tp)
      cur++;
    if (cur == n_hosts) {
      int n = total_free < world
                  ? snprintf(why, whylen,
                             "no room: %llu of %llu tensor-parallel groups of %u devices placed; "
                             "%llu devices free in all, %llu needed",
                             (unsigned long long)g, (unsigned long long)groups, tp,
                             (unsigned long long)total_free, (unsigned long long)world)
                  : snprintf(why, whylen,
                             "no room: %llu of %llu tensor-parallel groups of %u devices placed; "
                             "%llu devices free in all, but a group must fit in one host",
                             (unsigned long long)g, (unsigned long long)groups, tp,
                             (unsigned long long)total_free);
      if (mem_bound && n > 0 && (size_t)n < whylen)
        snprintf(why + n, whylen - (size_t)n,
                 " (counting only the devices whose hosts have resources.host_memory_mib=%llu "
                 "free for each)",
                 (unsigned long long)(rank_mem >> 20));
      rc = COLO_EBUSY;
      break;
    }
    slot_t *s = &slots[cur];
    const colo_sched_host_t *h = &hosts[s->idx];
    uint32_t pp_idx = (uint32_t)(g / dp), dp_idx = (uint32_t)(g % dp);
    for (uint32_t t = 0; t < tp; t++) {
      uint32_t *f = &next[2 * s->idx], *sl = &next[2 * s->idx + 1], dev;
      while (*f < h->n_devices && (h->busy[*f] || is_slow(h, *f)))
        ++*f;
      if (*f < h->n_devices) {
        dev = (*f)++;
      } else { /* free counts them: there is one */
        while (*sl < h->n_devices && (h->busy[*sl] || !is_slow(h, *sl)))
          ++*sl;
        dev = (*sl)++;
      }
      uint32_t rank = (uint32_t)(g * tp + t);
      tmp[rank] = (colo_rank_place_t){rank, h->host_id, dev, dp_idx, t, pp_idx};
    }
    s->free -= tp;
    s->fast -= s->fast < tp ? s->fast : tp;
  }
  if (rc == 0)
    memcpy(out, tmp, world * sizeof *tmp);
  free(slots);
  free(tmp);
  free(next);
  return rc;
}

int colo_sched_place(const colo_sched_host_t *hosts, size_t n_hosts, uint32_t pp, uint32_t dp,
                     uint32_t tp, uint32_t per_node, uint64_t rank_mem, colo_rank_place_t *out,
                     char *why, size_t whylen) {
  if (pp < 1 || dp < 1 || tp < 1) {
    snprintf(why, whylen, "bad mesh pp=%u dp=%u tp=%u", pp, dp, tp);
    return COLO_EINVAL;
  }
  int any_slow = 0;
  for (size_t h = 0; h < n_hosts && !any_slow; h++)
    for (uint32_t d = 0; hosts[h].slow && d < hosts[h].n_devices && !any_slow; d++)
      any_slow = !hosts[h].busy[d] && is_slow(&hosts[h], d);
  /* where slowed devices are free, first without them: the reason to give is the second try's */
  if (any_slow &&
      place_on(hosts, n_hosts, pp, dp, tp, per_node, rank_mem, 1, out, why, whylen) == 0)
    return 0;
  return place_on(hosts, n_hosts, pp, dp, tp, per_node, rank_mem, 0, out, why, whylen);
}

size_t colo_sched_find(const colo_sched_host_t *hosts, size_t n_hosts, uint64_t id) {
  size_t lo = 0, hi = n_hosts;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (hosts[mid].host_id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n_hosts && hosts[lo].host_id == id ? lo : n_hosts;
}
