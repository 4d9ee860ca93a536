/* Fair share: the order in which waiting jobs of the same priority are offered room. Each owner's
 * device hours by device kind, an hour weighed 2^(-age / fair_share_half_life) by how long ago it
 * was used; the jobs of the owner with the fewest go first (jobs.c: wait_order). Read from the
 * store's attempts, as GetUsage reads them (usage.c): once whole, then at each refresh only the
 * attempts that ended since the last one (the sums so far are weighed down to the new time); the
 * running attempts from the job manager's live jobs. Deleted jobs' hours are read whole, from the
 * store's usage_hours, each hour's device time spread evenly over the part of it in use. */
#ifndef COLOD_FAIRSHARE_H
#define COLOD_FAIRSHARE_H

#include <stddef.h>
#include <stdint.h>

struct colod_s;

typedef struct {
  char owner[129]; /* the owner, or with fair_share_by account, the account */
  int device;      /* colo.v1.DeviceKind */
  double hours;    /* weighed device hours */
  double weight;   /* colod_fair_list: the owner's fair_share_weights entry (1: none) */
} colod_share_t;

typedef struct {
  colod_share_t *ended;   /* of the attempts that ended before read_to_ms, at at_ms; sorted */
  colod_share_t *running; /* of those running at at_ms, and those that ended in its ms; sorted */
  size_t n_ended, cap_ended, n_running, cap_running;
  int64_t at_ms;         /* Unix ms; 0: never read */
  int64_t read_to_ms;    /* attempts that ended before it are in `ended` */
  uint32_t half_life_ms; /* what they were weighed with */
  int by_account;        /* and whose hours they are: fair_share_by account (1) or owner */
} colod_fair_t;

/* 1 when fair_share_by is account: the shares are accounts' (JobSpec.account), not owners' */
int colod_fair_by_account(const struct colod_s *d);

/* ranks devices held from from_ms to to_ms, seen at now_ms: hours, each weighed
 * 2^(-(now_ms - t) / half_life_ms) at the time t it was used (its integral; no weighing when
 * half_life_ms is 0) */
double colod_fair_weighed_hours(int64_t from_ms, int64_t to_ms, int64_t now_ms, uint32_t ranks,
                                uint32_t half_life_ms);

/* Brings the shares to now (a half-life changed by a reload: read whole again). 0, or -1
 * (logged; the shares are then as they were). */
int colod_fair_refresh(struct colod_s *d);

/* The owner's weighed device hours on devices of that kind as of the last refresh (0: none). */
double colod_fair_share(const struct colod_s *d, const char *owner, int device);
/* What orders the waiting jobs of one priority, fewest first: colod_fair_share divided by the
 * owner's weight (fair_share_weights). */
double colod_fair_key(const struct colod_s *d, const char *owner, int device);

/* Every (owner, device) with its hours as colod_fair_share gives them, by owner then device, in
 * *out (the caller frees it). 0, or -1 out of memory. */
int colod_fair_list(const struct colod_s *d, colod_share_t **out, size_t *n);

/* Jobs that ended before ended_before_ms were deleted: their attempts' hours went to the store's
 * usage_hours. Those that ended since the last read were in neither sum: read whole next time. */
void colod_fair_deleted(struct colod_s *d, int64_t ended_before_ms);

void colod_fair_free(struct colod_s *d);

#endif
