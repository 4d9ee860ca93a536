/* A scheduling pass's plan of the devices' future (plan.h). */
#include "plan.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/grow.h"

#define NEVER INT64_MAX

struct colo_plan_order_s {
  size_t idx;    /* a host of the snapshot */
  uint32_t free; /* its devices free now */
};

int colo_plan_init(colo_plan_t *p, colo_sched_host_t *hosts, size_t n, const uint8_t *busy,
                   size_t total, int64_t now, size_t max_holds) {
  *p = (colo_plan_t){
      .hosts = hosts, .n = n, .busy = busy, .total = total, .now = now, .max_holds = max_holds};
  size_t t = total ? total : 1, m = n ? n : 1;
  p->free_at = malloc(t * sizeof *p->free_at);
  p->expect_at = malloc(t * sizeof *p->expect_at);
  p->hold = calloc(t, sizeof *p->hold);
  p->host_of = malloc(t * sizeof *p->host_of);
  p->held = malloc(t * sizeof *p->held);
  p->unfit = malloc(t);
  p->mem_total = malloc(m * sizeof *p->mem_total);
  p->holds = calloc(max_holds + m, sizeof *p->holds); /* and a maintenance per host */
  p->copy = calloc(m, sizeof *p->copy);
  p->order = malloc(m * sizeof *p->order);
  p->tb = malloc(t);
  p->hmark = calloc(m, sizeof *p->hmark);
  p->kmark = calloc(max_holds + m, 1);
  if (!p->free_at || !p->expect_at || !p->hold || !p->host_of || !p->held || !p->unfit ||
      !p->mem_total || !p->holds || !p->copy || !p->order || !p->tb || !p->hmark || !p->kmark) {
    colo_plan_free(p);
    return COLO_ENOMEM;
  }
  for (size_t d = 0; d < total; d++) {
    p->unfit[d] = busy[d] != 0;
    p->free_at[d] = p->expect_at[d] = busy[d] ? NEVER : now;
    p->host_of[d] = UINT32_MAX; /* a device of a host outside the snapshot */
  }
  for (size_t h = 0; h < n; h++) {
    size_t off = (size_t)(hosts[h].busy - busy);
    for (uint32_t k = 0; k < hosts[h].n_devices; k++)
      p->host_of[off + k] = (uint32_t)h;
    p->mem_total[h] = hosts[h].mem_free;
  }
  return 0;
}

void colo_plan_free(colo_plan_t *p) {
  free(p->free_at);
  free(p->expect_at);
  free(p->hold);
  free(p->host_of);
  free(p->held);
  free(p->unfit);
  free(p->mem_total);
  free(p->claims);
  free(p->holds);
  free(p->copy);
  free(p->order);
  free(p->tb);
  free(p->hmark);
  free(p->kmark);
  *p = (colo_plan_t){0};
}

/* memory of host h claimed until `until` (by estimate `expect`); ranks of one job come host by
 * host, so a claim like the last one adds to it */
static int claim_mem(colo_plan_t *p, uint32_t h, int64_t until, int64_t expect, uint64_t mem) {
  if (!mem || p->mem_total[h] == UINT64_MAX)
    return 0;
  colo_plan_claim_t *last = p->n_claims ? &p->claims[p->n_claims - 1] : NULL;
  if (last && last->host == h && last->until == until && last->expect == expect) {
    last->mem += mem;
    return 0;
  }
  if (COLO_GROW(p->claims, p->n_claims, p->cap_claims) < 0)
    return COLO_ENOMEM;
  p->claims[p->n_claims++] = (colo_plan_claim_t){h, until, expect, mem};
  return 0;
}

/* the device index (into busy) of a rank's place, or total when it is not in the snapshot */
static size_t device_of(const colo_plan_t *p, const colo_rank_place_t *r, uint32_t *host) {
  size_t h = colo_sched_find(p->hosts, p->n, r->host_id);
  if (h == p->n || r->device_index >= p->hosts[h].n_devices)
    return p->total;
  *host = (uint32_t)h;
  return (size_t)(p->hosts[h].busy - p->busy) + r->device_index;
}

/* a device taken until `until`, and by estimate until `expect` */
static void take(colo_plan_t *p, size_t d, int64_t until, int64_t expect) {
  if (p->free_at[d] < until)
    p->free_at[d] = until;
  if (p->expect_at[d] < expect)
    p->expect_at[d] = expect;
}

int colo_plan_claim(colo_plan_t *p, const colo_rank_place_t *place, uint32_t world,
                    uint64_t rank_mem, int64_t until, int64_t expect) {
  if (until < p->now)
    until = p->now; /* past its limit, and stopping */
  if (expect > until)
    expect = until;
  if (expect < p->now)
    expect = p->now; /* overdue: it should end any moment */
  for (uint32_t r = 0; r < world; r++) {
    uint32_t h;
    size_t d = device_of(p, &place[r], &h);
    if (d == p->total)
      continue;
    take(p, d, until, expect);
    if (claim_mem(p, h, until, expect, rank_mem) < 0)
      return COLO_ENOMEM;
  }
  return 0;
}

/* device d in hold h (index + 1: k): counted if free now, held by h unless a hold has it */
static void hold_device(colo_plan_t *p, colo_hold_t *h, uint32_t k, size_t d) {
  if (!p->busy[d]) {
    h->n_free++;
    if (!p->hold[d])
      p->held[p->n_held++] = d;
  }
  if (!p->hold[d])
    p->hold[d] = k;
}

int colo_plan_block(colo_plan_t *p, size_t host, int64_t from) {
  colo_hold_t *h = &p->holds[p->n_holds++];
  *h = (colo_hold_t){0, (uint32_t)host, from < p->now ? p->now : from, NEVER, 0};
  p->n_blocks++;
  uint32_t k = (uint32_t)p->n_holds;
  size_t off = (size_t)(p->hosts[host].busy - p->busy);
  for (uint32_t i = 0; i < p->hosts[host].n_devices; i++) {
    size_t d = off + i;
    hold_device(p, h, k, d);
    p->free_at[d] = p->expect_at[d] = NEVER;
    p->unfit[d] = 1; /* no hold counts on it, even one whose start is not known */
  }
  return 0;
}

colo_plan_taken_t colo_plan_view(colo_plan_t *p, int64_t until, const size_t *idx, size_t nf,
                                 uint8_t *view) {
  colo_plan_taken_t t = {0, 0, 0};
  if (!p->n_held)
    return t; /* view untouched: place against busy itself */
  memcpy(view, p->busy, p->total);
  for (size_t i = 0; i < nf; i++)
    p->hmark[idx[i]] = 1;
  for (size_t i = 0; i < p->n_held; i++) {
    size_t d = p->held[i];
    uint32_t k = p->hold[d] - 1;
    int64_t start = p->holds[k].start;
    if (view[d] || (start != NEVER && until <= start))
      continue; /* taken since (a job that ends before the hold), or it ends before the hold */
    view[d] = 1;
    if (!p->hmark[p->host_of[d]])
      continue;
    t.devices++;
    if (!p->kmark[k]) {
      p->kmark[k] = 1;
      if (!t.holders++ || k < t.first)
        t.first = k;
    }
  }
  for (size_t i = 0; i < nf; i++)
    p->hmark[idx[i]] = 0;
  memset(p->kmark, 0, p->n_holds);
  return t;
}

/* Fills p->copy with the hosts in p->order as they will be at time t: a device free once its
 * free_at (with est, its expect_at) has passed (at NEVER, every device but the unfit), a host's
 * memory back as its claims end. */
static void snapshot_at(colo_plan_t *p, size_t nf, int64_t t, int est) {
  const int64_t *at = est ? p->expect_at : p->free_at;
  for (size_t i = 0; i < nf; i++) {
    size_t h = p->order[i].idx;
    size_t off = (size_t)(p->hosts[h].busy - p->busy);
    colo_sched_host_t *c = &p->copy[i];
    *c = p->hosts[h];
    c->busy = p->tb + off;
    for (uint32_t k = 0; k < c->n_devices; k++)
      p->tb[off + k] = t == NEVER ? p->unfit[off + k] : at[off + k] > t;
    c->mem_free = p->mem_total[h];
  }
  if (!p->n_claims)
    return;
  for (size_t i = 0; i < nf; i++)
    p->hmark[p->order[i].idx] = (uint32_t)i + 1; /* its index in copy, + 1 */
  for (size_t c = 0; c < p->n_claims; c++) {
    const colo_plan_claim_t *cl = &p->claims[c];
    if ((est ? cl->expect : cl->until) <= t || !p->hmark[cl->host])
      continue;
    size_t i = p->hmark[cl->host] - 1;
    colo_sched_host_t *h = &p->copy[i];
    h->mem_free -= h->mem_free < cl->mem ? h->mem_free : cl->mem;
  }
  for (size_t i = 0; i < nf; i++)
    p->hmark[p->order[i].idx] = 0;
}

typedef struct {
  colo_plan_t *p;
  size_t nf;
  uint32_t pp, dp, tp, per_node;
  uint64_t rank_mem;
  colo_rank_place_t *out;
  int est;    /* by the estimates */
  int64_t at; /* the last trial's time: out is its placement where it fitted */
} trial_t;

static int fits_at(trial_t *t, int64_t at) {
  char why[256];
  t->at = at;
  snapshot_at(t->p, t->nf, at, t->est);
  return colo_sched_place(t->p->copy, t->nf, t->pp, t->dp, t->tp, t->per_node, t->rank_mem, t->out,
                          why, sizeof why) == 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* the k-th smallest of v[0..n) (from 0), v reordered around it (Hoare's selection) */
static int64_t kth(int64_t *v, size_t n, size_t k) {
  ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, want = (ptrdiff_t)k;
  while (lo < hi) {
    int64_t pivot = v[lo + (hi - lo) / 2];
    ptrdiff_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot)
        i++;
      while (v[j] > pivot)
        j--;
      if (i <= j) {
        int64_t x = v[i];
        v[i++] = v[j];
        v[j--] = x;
      }
    }
    if (want <= j)
      hi = j;
    else if (want >= i)
      lo = i;
    else
      return v[want]; /* between the two parts: equal to the pivot */
  }
  return v[want];
}

/* hosts in the order of most free devices now, then the order given */
static int free_now_order(const void *a, const void *b) {
  const struct colo_plan_order_s *x = a, *y = b;
  if (x->free != y->free)
    return x->free > y->free ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The earliest time the trial's job fits on the hosts idx[0..nf), by free_at (with t->est, by
 * expect_at): 1 with it in *start and t->out its placement there; 0 when only at NEVER, if ever.
 * No time before the world-th device there is free can do: that one is tried first, and most
 * often fits. Later, the times the room changes (each end of a job, a hold or a claim there);
 * the earliest that fits by bisection, since later never holds less room (a device once free
 * stays free in the plan, a claim once ended stays ended). */
static int earliest(trial_t *t, const size_t *idx, size_t nf, int64_t *start) {
  colo_plan_t *p = t->p;
  const int64_t *at = t->est ? p->expect_at : p->free_at;
  size_t nd = 0, cap = p->n_claims;
  for (size_t i = 0; i < nf; i++)
    cap += p->hosts[idx[i]].n_devices;
  int64_t *v = malloc((cap ? cap : 1) * sizeof *v);
  if (!v)
    return COLO_ENOMEM;
  for (size_t i = 0; i < nf; i++) {
    size_t off = (size_t)(p->hosts[idx[i]].busy - p->busy);
    for (uint32_t k = 0; k < p->hosts[idx[i]].n_devices; k++)
      if (!p->unfit[off + k])
        v[nd++] = at[off + k];
  }
  uint64_t world = (uint64_t)t->pp * t->dp * t->tp;
  int64_t bound = nd >= world ? kth(v, nd, world - 1) : NEVER;
  int found = 0;
  if (bound != NEVER && fits_at(t, bound)) {
    found = 1;
    *start = bound;
  } else if (bound != NEVER) {
    size_t nt = 0;
    for (size_t i = 0; i < nf; i++) {
      size_t off = (size_t)(p->hosts[idx[i]].busy - p->busy);
      for (uint32_t k = 0; k < p->hosts[idx[i]].n_devices; k++)
        if (at[off + k] > bound && at[off + k] != NEVER)
          v[nt++] = at[off + k];
    }
    for (size_t c = 0; c < p->n_claims; c++) {
      int64_t e = t->est ? p->claims[c].expect : p->claims[c].until;
      if (e > bound && e != NEVER)
        v[nt++] = e;
    }
    qsort(v, nt, sizeof *v, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < nt; i++)
      if (!u || v[i] != v[u - 1])
        v[u++] = v[i];
    if (u && fits_at(t, v[u - 1])) {
      size_t lo = 0, hi = u - 1;
      while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (fits_at(t, v[mid]))
          hi = mid;
        else
          lo = mid + 1;
      }
      found = 1;
      *start = v[lo];
    }
  }
  free(v);
  if (found && t->at != *start && !fits_at(t, *start)) /* out: the placement at the start */
    return 0;
  return found;
}

int colo_plan_reserve(colo_plan_t *p, uint64_t job_id, const size_t *idx, size_t nf, uint32_t pp,
                      uint32_t dp, uint32_t tp, uint32_t per_node, uint64_t rank_mem,
                      int64_t duration_ms, int unknown_ok, colo_rank_place_t *out) {
  if (colo_plan_job_holds(p) >= p->max_holds || !nf)
    return 0;
  for (size_t i = 0; i < nf; i++) {
    const colo_sched_host_t *h = &p->hosts[idx[i]];
    p->order[i] = (struct colo_plan_order_s){idx[i], 0};
    for (uint32_t k = 0; k < h->n_devices; k++)
      p->order[i].free += !h->busy[k];
  }
  qsort(p->order, nf, sizeof *p->order, free_now_order);
  trial_t t = {p, nf, pp, dp, tp, per_node, rank_mem, out, 0, INT64_MIN};
  int64_t start = NEVER, expect = NEVER;
  int found = earliest(&t, idx, nf, &start);
  if (found < 0)
    return found;
  if (found) {
    expect = start;
  } else if (unknown_ok) {
    /* its start is not known: the room where the estimates say it starts soonest, if they do */
    t.est = 1;
    found = earliest(&t, idx, nf, &expect);
    if (found < 0)
      return found;
    if (!found && !fits_at(&t, NEVER))
      return 0;
  } else {
    return 0;
  }
  colo_hold_t *h = &p->holds[p->n_holds++];
  *h = (colo_hold_t){job_id, UINT32_MAX, start, expect, 0};
  int64_t until = start == NEVER || !duration_ms ? NEVER : start + duration_ms;
  int64_t expect_until = expect == NEVER || !duration_ms ? NEVER : expect + duration_ms;
  uint32_t k = (uint32_t)p->n_holds; /* its index + 1 */
  for (uint32_t r = 0; r < pp * dp * tp; r++) {
    uint32_t host;
    size_t d = device_of(p, &out[r], &host);
    if (d == p->total)
      continue;
    hold_device(p, h, k, d);
    take(p, d, until, expect_until);
    colo_sched_host_t *sh = &p->hosts[host];
    if (sh->mem_free != UINT64_MAX)
      sh->mem_free -= sh->mem_free < rank_mem ? sh->mem_free : rank_mem;
    if (claim_mem(p, host, until, expect_until, rank_mem) < 0)
      return COLO_ENOMEM;
  }
  return 1;
}
