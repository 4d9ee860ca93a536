/* A scheduling pass's plan of the devices' future: conservative backfill, as Slurm's backfill
 * scheduler does it. For every device of the pass's snapshot (sched.h), the plan knows when it is
 * free of the jobs running or placed on it, by their time limits, and of the room held for
 * waiting jobs. A waiting job that cannot start now holds room where it can start soonest; the
 * jobs after it may use a held device now only when their own time limit ends before that hold
 * begins, so no hold is delayed by the jobs behind it. Several jobs hold room in one pass, each
 * after the ones before it.
 *
 * Pure functions over the snapshot, with no clock and no store: jobs.c drives it, test_sched
 * tests it. Times are Unix ms; INT64_MAX is "not known" (a job without a time limit).
 *
 * Beside those bounds the plan keeps estimates (when a job should reach its last step, at its
 * speed so far): they choose where a job whose start is not known holds room, and say when it
 * should start, but never let a job behind it take a held device. */
#ifndef COLOD_PLAN_H
#define COLOD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "sched.h"

typedef struct {
  uint64_t job_id; /* 0: a host's maintenance (colo_plan_block) */
  uint32_t host;   /* the maintenance's host, by index in the snapshot */
  int64_t start;   /* when it starts at the latest; INT64_MAX: not known */
  int64_t expect;  /* when it should start, by the estimates; INT64_MAX: not known */
  uint32_t n_free; /* devices of its room free now */
} colo_hold_t;

typedef struct {
  uint32_t host;  /* index in the snapshot */
  int64_t until;  /* the claim ends */
  int64_t expect; /* by the estimates */
  uint64_t mem;   /* host memory, bytes */
} colo_plan_claim_t;

typedef struct {
  colo_sched_host_t *hosts; /* the snapshot: each host's busy points into `busy` */
  size_t n;
  const uint8_t *busy;
  size_t total;
  int64_t now;
  int64_t *free_at;   /* total: when the device is free of its jobs and holds; now: free now */
  int64_t *expect_at; /* total: the same by the estimates of when its jobs end */
  uint32_t *hold;     /* total: the first hold on the device, index + 1; 0: none */
  uint32_t *host_of;  /* total: the device's host index */
  uint32_t *held;     /* devices free now that a hold took, in the order of the holds */
  size_t n_held;
  uint64_t *mem_total;       /* n: each host's memory before any job (UINT64_MAX: no limit) */
  colo_plan_claim_t *claims; /* memory claimed on hosts with a limit */
  size_t n_claims, cap_claims;
  colo_hold_t *holds; /* the jobs' and the maintenances' */
  size_t n_holds, max_holds;
  size_t n_blocks; /* of n_holds, maintenances: not counted against max_holds */
  uint8_t *unfit;  /* total: never free (the snapshot's flags at colo_plan_init) */
  /* scratch */
  colo_sched_host_t *copy;         /* n: the hosts as a trial sees them */
  struct colo_plan_order_s *order; /* n: the hosts a trial offers, in order */
  uint32_t *hmark;                 /* n */
  uint8_t *tb;                     /* total: a trial's busy flags */
  uint8_t *kmark;                  /* max_holds */
} colo_plan_t;

/* A plan over a snapshot whose busy flags mark only the devices that are never free (unfit:
 * any non-zero flag); the jobs that run are told with colo_plan_claim after. At most max_holds
 * jobs hold room. Returns 0 or COLO_ENOMEM. */
int colo_plan_init(colo_plan_t *p, colo_sched_host_t *hosts, size_t n, const uint8_t *busy,
                   size_t total, int64_t now, size_t max_holds);
void colo_plan_free(colo_plan_t *p);

/* A job's ranks run (or were placed now) on these devices until `until` (its time limit's end;
 * INT64_MAX: no limit; now: it is stopping), and should end by `expect` (an estimate, from its
 * progress: INT64_MAX where there is none; never past until), each claiming rank_mem bytes of its
 * host's memory. Returns 0 or COLO_ENOMEM. */
int colo_plan_claim(colo_plan_t *p, const colo_rank_place_t *place, uint32_t world,
                    uint64_t rank_mem, int64_t until, int64_t expect);

/* The holds of waiting jobs so far (maintenances not counted). */
static inline size_t colo_plan_job_holds(const colo_plan_t *p) {
  return p->n_holds - p->n_blocks;
}

/* A host's maintenance from `from` (a cordon to come): its devices held from then, for ever, so
 * that a job placed there now must end by then and no hold counts on the host after it. Returns
 * 0 (not counted against max_holds). */
int colo_plan_block(colo_plan_t *p, size_t host, int64_t from);

/* What the holds take from a job that would start now and end by `until`, on the hosts
 * idx[0..nf) of the snapshot. */
typedef struct {
  uint32_t devices; /* free devices it may not use */
  uint32_t holders; /* how many holds they belong to */
  uint32_t first;   /* the first of those holds (index in p->holds) */
} colo_plan_taken_t;

/* Fills view (laid out as busy) with the snapshot's busy flags, and 1 for each free device that a
 * hold would lose to the job: one whose hold starts before `until`, or at a time not known. With
 * no device held (p->n_held 0) view is left as it is: the busy flags themselves are the view. */
colo_plan_taken_t colo_plan_view(colo_plan_t *p, int64_t until, const size_t *idx, size_t nf,
                                 uint8_t *view);

/* Holds room for a waiting job that cannot start now (at most max_holds of them): the earliest time
 * its pp × dp × tp ranks (per_node, rank_mem as colo_sched_place takes them) fit on the hosts
 * idx[0..nf), with each device free from its free_at and each host's memory back as the claims on
 * it end; hosts tried in the order of most free devices now. Where it fits only once jobs without a
 * time limit are gone, it holds only with unknown_ok (start INT64_MAX), on the room where the
 * estimates say it starts soonest (expect), or where they do not, on the hosts with the most free
 * devices now (expect INT64_MAX). Its devices are then held from that start, for duration_ms (0: no
 * limit), and its memory claimed from now, in the snapshot's mem_free too. Returns 1 with the hold
 * in p->holds[p->n_holds - 1] and its ranks' places in out (pp × dp × tp); 0 when it holds nothing
 * (max_holds reached, or it cannot fit); COLO_ENOMEM. */
int colo_plan_reserve(colo_plan_t *p, uint64_t job_id, const size_t *idx, size_t nf, uint32_t pp,
                      uint32_t dp, uint32_t tp, uint32_t per_node, uint64_t rank_mem,
                      int64_t duration_ms, int unknown_ok, colo_rank_place_t *out);

#endif
