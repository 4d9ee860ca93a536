/* Gang placement: the mesh coordinates, tensor-parallel groups inside one host, busy devices,
 * the per-node limit, all-or-nothing failure with its reason, and the time to place a 512-rank
 * job on 1,000 hosts of 8 devices. The plan of a pass (plan.h): holds where jobs start soonest,
 * several in turn, the room a hold keeps from the jobs behind it, unknown starts, unfit devices
 * and host memory. */
#include <time.h>

#include "common/error.h"
#include "daemon/plan.h"
#include "daemon/sched.h"
#include "test.h"

static colo_sched_host_t host(uint64_t id, uint32_t n, const uint8_t *busy) {
  return (colo_sched_host_t){id, n, busy, UINT64_MAX};
}

TEST(mesh_and_tp_groups_inside_hosts) {
  uint8_t free4[4] = {0};
  colo_sched_host_t h[2] = {host(10, 4, free4), host(20, 4, free4)};
  colo_rank_place_t p[8];
  char why[256];
  /* pp=2 × dp=2 × tp=2: 4 groups of 2 */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 2, 2, 2, 0, 0, p, why, sizeof why), 0);
  for (uint32_t r = 0; r < 8; r++) {
    ASSERT_EQ_INT(p[r].rank, r);
    ASSERT_EQ_INT(p[r].tp_idx, r % 2);
    ASSERT_EQ_INT(p[r].dp_idx, (r / 2) % 2);
    ASSERT_EQ_INT(p[r].pp_idx, r / 4);
    /* the two ranks of a tensor-parallel group share a host */
    ASSERT_EQ_INT(p[r].host_id, p[r ^ 1].host_id);
  }
  /* consecutive groups fill a host first: ranks 0-3 on host 10, 4-7 on host 20 */
  ASSERT_EQ_INT(p[0].host_id, 10);
  ASSERT_EQ_INT(p[3].host_id, 10);
  ASSERT_EQ_INT(p[3].device_index, 3);
  ASSERT_EQ_INT(p[4].host_id, 20);
  ASSERT_EQ_INT(p[4].device_index, 0);
}

TEST(busy_devices_are_skipped_and_fullest_free_first) {
  uint8_t a[4] = {1, 0, 1, 0}, b[4] = {0, 0, 0, 0};
  colo_sched_host_t h[2] = {host(1, 4, a), host(2, 4, b)};
  colo_rank_place_t p[6];
  char why[256];
  /* host 2 has more free devices: it is filled first; then host 1's free devices 1 and 3 */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 3, 2, 0, 0, p, why, sizeof why), 0);
  ASSERT_EQ_INT(p[0].host_id, 2);
  ASSERT_EQ_INT(p[3].host_id, 2);
  ASSERT_EQ_INT(p[4].host_id, 1);
  ASSERT_EQ_INT(p[4].device_index, 1);
  ASSERT_EQ_INT(p[5].device_index, 3);
}

TEST(a_tp_group_never_straddles_hosts) {
  uint8_t a[3] = {0}, b[1] = {0};
  colo_sched_host_t h[2] = {host(1, 3, a), host(2, 1, b)};
  colo_rank_place_t p[4], before[4];
  memset(p, 0x5a, sizeof p);
  memcpy(before, p, sizeof p);
  char why[256];
  /* 4 devices are free, but the second group of 2 would need host 1's last and host 2's only */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 2, 2, 0, 0, p, why, sizeof why), COLO_EBUSY);
  ASSERT_EQ_STR(why, "no room: 1 of 2 tensor-parallel groups of 2 devices placed; 4 devices "
                     "free in all, but a group must fit in one host");
  ASSERT(memcmp(p, before, sizeof p) == 0); /* all or nothing */
}

TEST(per_node_limit) {
  uint8_t f8[8] = {0};
  colo_sched_host_t h[2] = {host(1, 8, f8), host(2, 8, f8)};
  colo_rank_place_t p[8];
  char why[256];
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 4, 2, 4, 0, p, why, sizeof why), 0);
  ASSERT_EQ_INT(p[3].host_id, 1);
  ASSERT_EQ_INT(p[4].host_id, 2); /* at most 4 on host 1 */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 1, 8, 4, 0, p, why, sizeof why), COLO_EBUSY);
}

TEST(host_memory_per_rank_limits_a_host) {
  uint8_t f4[4] = {0};
  colo_sched_host_t h[2] = {host(1, 4, f4), host(2, 4, f4)};
  h[0].mem_free = 5ull << 30; /* room for two ranks of 2 GiB, with four devices free */
  h[1].mem_free = 8ull << 30;
  colo_rank_place_t p[8];
  char why[512];
  /* host 2 can feed all four devices, host 1 only two: it fills host 2 first */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 6, 1, 0, 2ull << 30, p, why, sizeof why), 0);
  for (int r = 0; r < 4; r++)
    ASSERT_EQ_INT(p[r].host_id, 2);
  ASSERT_EQ_INT(p[4].host_id, 1);
  ASSERT_EQ_INT(p[5].host_id, 1);
  /* a seventh rank does not fit, though a device is free: the reason says why */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 7, 1, 0, 2ull << 30, p, why, sizeof why), COLO_EBUSY);
  ASSERT_EQ_STR(why, "no room: 6 of 7 tensor-parallel groups of 1 devices placed; 6 devices free "
                     "in all, 7 needed (counting only the devices whose hosts have "
                     "resources.host_memory_mib=2048 free for each)");
  /* no claim: every device */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 8, 1, 0, 0, p, why, sizeof why), 0);
}

/* Devices whose clocks are lowered are taken only where the job cannot be placed without them,
 * and then after the others of their host; the reason for no room counts them. */
TEST(slowed_devices_are_taken_last) {
  uint8_t a[4] = {0}, b[2] = {0};
  uint64_t slow_a = 0x3; /* host 1's devices 0 and 1 */
  colo_sched_host_t h[2] = {host(1, 4, a), host(2, 2, b)};
  h[0].slow = &slow_a;
  colo_rank_place_t p[8];
  char why[256];
  /* one rank: host 1 has the most free devices, but its lowest at full clocks is 2 */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 1, 1, 0, 0, p, why, sizeof why), 0);
  ASSERT_EQ_INT(p[0].host_id, 1);
  ASSERT_EQ_INT(p[0].device_index, 2);
  /* four: the four at full clocks, on both hosts; two groups of two the same */
  for (uint32_t tp = 1; tp <= 2; tp++) {
    ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 4 / tp, tp, 0, 0, p, why, sizeof why), 0);
    for (int r = 0; r < 4; r++)
      ASSERT(!(p[r].host_id == 1 && p[r].device_index < 2));
  }
  /* five: no way without one; host 1 first (as many at full clocks, more free), its devices at
   * full clocks before its slowed ones */
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 5, 1, 0, 0, p, why, sizeof why), 0);
  uint32_t want[5][2] = {{1, 2}, {1, 3}, {1, 0}, {1, 1}, {2, 0}};
  for (int r = 0; r < 5; r++) {
    ASSERT_EQ_INT(p[r].host_id, want[r][0]);
    ASSERT_EQ_INT(p[r].device_index, want[r][1]);
  }
  /* a busy slowed device is skipped as any busy one */
  a[2] = 1;
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 5, 1, 0, 0, p, why, sizeof why), 0);
  ASSERT_EQ_INT(p[0].host_id, 2); /* 2 at full clocks there, 1 on host 1 */
  ASSERT_EQ_INT(p[2].host_id, 1);
  ASSERT_EQ_INT(p[2].device_index, 3);
  ASSERT_EQ_INT(p[3].device_index, 0);
  ASSERT_EQ_INT(p[4].device_index, 1);
  ASSERT_EQ_INT(colo_sched_place(h, 2, 1, 6, 1, 0, 0, p, why, sizeof why), COLO_EBUSY);
  ASSERT_EQ_STR(why, "no room: 5 of 6 tensor-parallel groups of 1 devices placed; 5 devices free "
                     "in all, 6 needed");
}

TEST(place_512_ranks_on_1000_hosts_quickly) {
  size_t n = 1000;
  colo_sched_host_t *h = malloc(n * sizeof *h);
  uint8_t *busy = calloc(n * 8, 1);
  for (size_t i = 0; i < n; i++) {
    if (i % 3 == 0) /* a third of the hosts half busy */
      memset(busy + i * 8, 1, 4);
    h[i] = host(i + 1, 8, busy + i * 8);
  }
  colo_rank_place_t *p = malloc(512 * sizeof *p);
  char why[256];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ASSERT_EQ_INT(colo_sched_place(h, n, 4, 16, 8, 0, 0, p, why, sizeof why), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("  512 ranks (pp=4 dp=16 tp=8) on 1000 hosts of 8 devices: %.3f ms\n", ms);
  ASSERT(ms < 1000.0);
  for (uint32_t r = 0; r < 512; r++) {
    ASSERT_EQ_INT(p[r].host_id, p[r - r % 8].host_id); /* each tp=8 group: one whole host */
    ASSERT(!busy[(p[r].host_id - 1) * 8 + p[r].device_index]);
  }
  free(h);
  free(busy);
  free(p);
}

#define NOW    1000000
#define MIN_MS 60000

/* a job's ranks on host `host`'s devices from `dev`, marked busy in the snapshot and told to the
 * plan as running until `until` */
static void run_on(colo_plan_t *p, uint8_t *busy, uint64_t host, uint32_t dev, uint32_t n,
                   uint64_t mem, int64_t until, int64_t expect) {
  colo_rank_place_t r[8];
  for (uint32_t i = 0; i < n; i++) {
    r[i] = (colo_rank_place_t){i, host, dev + i, i, 0, 0};
    busy[(host - 1) * 2 + dev + i] = 1; /* hosts of 2 devices, ids from 1 */
  }
  ASSERT_EQ_INT(colo_plan_claim(p, r, n, mem, until, expect), 0);
}

TEST(plan_holds_room_where_each_job_starts_soonest) {
  uint8_t busy[4] = {0};
  colo_sched_host_t h[2] = {host(1, 2, busy), host(2, 2, busy + 2)};
  size_t idx[2] = {0, 1};
  colo_plan_t p;
  ASSERT_EQ_INT(colo_plan_init(&p, h, 2, busy, 4, NOW, 8), 0);
  run_on(&p, busy, 1, 0, 2, 0, NOW + 10 * MIN_MS,
         NOW + 10 * MIN_MS); /* host 1: both, 10 minutes left */
  run_on(&p, busy, 2, 0, 1, 0, NOW + 20 * MIN_MS,
         NOW + 20 * MIN_MS); /* host 2: one, 20 minutes left */
  colo_rank_place_t out[4];
  /* w1 (2 devices, an hour): host 1 in 10 minutes, none of it free now */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 101, idx, 2, 1, 2, 1, 0, 0, 60 * MIN_MS, 1, out), 1);
  ASSERT_EQ_INT(p.holds[0].start, NOW + 10 * MIN_MS);
  ASSERT_EQ_INT(p.holds[0].n_free, 0);
  ASSERT_EQ_INT(out[0].host_id, 1);
  ASSERT_EQ_INT(out[1].host_id, 1);
  /* w2 (2 devices, no limit): host 1 is w1's for 70 minutes; host 2 in 20, one free now */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 102, idx, 2, 1, 2, 1, 0, 0, 0, 0, out), 1);
  ASSERT_EQ_INT(p.holds[1].start, NOW + 20 * MIN_MS);
  ASSERT_EQ_INT(p.holds[1].n_free, 1);
  ASSERT_EQ_INT(out[0].host_id, 2);
  /* a job starting now takes host 2's free device only if it ends within 20 minutes */
  uint8_t view[4];
  colo_plan_taken_t t = colo_plan_view(&p, INT64_MAX, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 1);
  ASSERT_EQ_INT(t.holders, 1);
  ASSERT_EQ_INT(p.holds[t.first].job_id, 102);
  ASSERT_EQ_INT(view[3], 1);
  t = colo_plan_view(&p, NOW + 20 * MIN_MS, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 0);
  ASSERT_EQ_INT(view[3], 0);
  t = colo_plan_view(&p, NOW + 20 * MIN_MS + 1, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 1);
  /* on host 1 alone it is not counted: the job could not use host 2 anyway */
  t = colo_plan_view(&p, INT64_MAX, idx, 1, view);
  ASSERT_EQ_INT(t.devices, 0);
  ASSERT_EQ_INT(view[3], 1);
  /* w3 (1 device): after w1's hour on host 1 (host 2 is w2's for ever) */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 103, idx, 2, 1, 1, 1, 0, 0, MIN_MS, 0, out), 1);
  ASSERT_EQ_INT(p.holds[2].start, NOW + 70 * MIN_MS);
  ASSERT_EQ_INT(out[0].host_id, 1);
  /* w4 (4 devices) starts at a time not known: only the first may hold room so */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 104, idx, 2, 1, 4, 1, 0, 0, 0, 0, out), 0);
  ASSERT_EQ_INT(p.n_holds, 3);
  colo_plan_free(&p);
}

TEST(plan_unknown_starts_unfit_devices_and_the_cap) {
  uint8_t busy[4] = {2, 0, 0, 0}; /* host 1's device 0 is unfit */
  colo_sched_host_t h[2] = {host(1, 2, busy), host(2, 2, busy + 2)};
  size_t idx[2] = {0, 1};
  colo_plan_t p;
  ASSERT_EQ_INT(colo_plan_init(&p, h, 2, busy, 4, NOW, 2), 0);
  run_on(&p, busy, 2, 0, 1, 0, INT64_MAX, INT64_MAX); /* host 2: one device, no limit */
  colo_rank_place_t out[4];
  /* 2 devices on one host (tp=2): host 1 never has two, host 2 once its job ends, if ever */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 201, idx, 2, 1, 1, 2, 0, 0, MIN_MS, 0, out), 0);
  ASSERT_EQ_INT(colo_plan_reserve(&p, 201, idx, 2, 1, 1, 2, 0, 0, MIN_MS, 1, out), 1);
  ASSERT_EQ_INT(p.holds[0].start, INT64_MAX);
  ASSERT_EQ_INT(out[0].host_id, 2);
  ASSERT_EQ_INT(p.holds[0].n_free, 1);
  /* a hold whose start is not known loses its room to no job, however short */
  uint8_t view[4];
  colo_plan_taken_t t = colo_plan_view(&p, NOW + 1, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 1);
  ASSERT_EQ_INT(view[3], 1);
  ASSERT_EQ_INT(view[1], 0);
  /* 4 devices on 2 hosts: never, with one of the four unfit */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 202, idx, 2, 1, 4, 1, 0, 0, MIN_MS, 1, out), 0);
  /* a 1-device job holds host 1's other device from now; then the cap of 2 is reached */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 203, idx, 2, 1, 1, 1, 0, 0, MIN_MS, 0, out), 1);
  ASSERT_EQ_INT(p.holds[1].start, NOW);
  ASSERT_EQ_INT(out[0].host_id, 1);
  ASSERT_EQ_INT(out[0].device_index, 1);
  t = colo_plan_view(&p, INT64_MAX, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 2);
  ASSERT_EQ_INT(t.holders, 2);
  ASSERT_EQ_INT(p.holds[t.first].job_id, 201);
  ASSERT_EQ_INT(colo_plan_reserve(&p, 204, idx, 2, 1, 1, 1, 0, 0, MIN_MS, 0, out), 0);
  colo_plan_free(&p);
}

TEST(plan_host_memory_comes_back_as_jobs_end) {
  uint8_t busy[4] = {0};
  colo_sched_host_t h[2] = {host(1, 2, busy), host(2, 2, busy + 2)};
  uint64_t gib = 1ull << 30;
  h[0].mem_free = h[1].mem_free = 10 * gib;
  size_t idx[2] = {0, 1};
  colo_plan_t p;
  ASSERT_EQ_INT(colo_plan_init(&p, h, 2, busy, 4, NOW, 8), 0);
  /* each host: one device taken with 8 GiB, host 1's for 5 minutes, host 2's for 9 */
  run_on(&p, busy, 1, 0, 1, 8 * gib, NOW + 5 * MIN_MS, NOW + 5 * MIN_MS);
  h[0].mem_free -= 8 * gib;
  run_on(&p, busy, 2, 0, 1, 8 * gib, NOW + 9 * MIN_MS, NOW + 9 * MIN_MS);
  h[1].mem_free -= 8 * gib;
  colo_rank_place_t out[2];
  /* a 6 GiB rank: a device is free on each host now, the memory on host 1 in 5 minutes (with
   * its device 0, the lowest free then) */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 301, idx, 2, 1, 1, 1, 0, 6 * gib, MIN_MS, 0, out), 1);
  ASSERT_EQ_INT(p.holds[0].start, NOW + 5 * MIN_MS);
  ASSERT_EQ_INT(out[0].host_id, 1);
  ASSERT_EQ_INT(out[0].device_index, 0);
  ASSERT_EQ_INT(p.holds[0].n_free, 0);
  ASSERT_EQ_INT(h[0].mem_free, 0); /* claimed in the snapshot from now */
  /* a second: host 1's memory is the first's until its minute ends (6 minutes), host 2's comes
   * back at 9 */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 302, idx, 2, 1, 1, 1, 0, 6 * gib, MIN_MS, 0, out), 1);
  ASSERT_EQ_INT(p.holds[1].start, NOW + 6 * MIN_MS);
  ASSERT_EQ_INT(out[0].host_id, 1);
  ASSERT_EQ_INT(out[0].device_index, 0); /* both free by then: the lowest */
  colo_plan_free(&p);
}

TEST(plan_16_holds_of_64_ranks_on_1000_hosts) {
  size_t n = 1000;
  colo_sched_host_t *h = malloc(n * sizeof *h);
  uint8_t *busy = calloc(n * 8, 1);
  size_t *idx = malloc(n * sizeof *idx);
  colo_rank_place_t *r = malloc(64 * sizeof *r);
  for (size_t i = 0; i < n; i++) {
    h[i] = host(i + 1, 8, busy + i * 8);
    idx[i] = i;
  }
  colo_plan_t p;
  ASSERT_EQ_INT(colo_plan_init(&p, h, n, busy, n * 8, NOW, 16), 0);
  /* every host runs a one-host job; host i's ends i + 1 minutes from now */
  for (size_t i = 0; i < n; i++) {
    for (uint32_t k = 0; k < 8; k++)
      r[k] = (colo_rank_place_t){k, i + 1, k, 0, k, 0};
    memset(busy + i * 8, 1, 8);
    int64_t end = NOW + (int64_t)(i + 1) * MIN_MS;
    ASSERT_EQ_INT(colo_plan_claim(&p, r, 8, 0, end, end), 0);
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int j = 0; j < 16; j++) /* dp=8 × tp=8, no time limit: each takes its 8 hosts for ever */
    ASSERT_EQ_INT(colo_plan_reserve(&p, 400 + j, idx, n, 1, 8, 8, 0, 0, 0, j == 0, r), 1);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("  16 holds of 64 ranks (dp=8 tp=8) on 1000 busy hosts of 8 devices: %.3f ms\n", ms);
  ASSERT(ms < 1000.0);
  /* the k-th starts when the k-th eight hosts' jobs have ended */
  for (int j = 0; j < 16; j++)
    ASSERT_EQ_INT(p.holds[j].start, NOW + (int64_t)(8 * j + 8) * MIN_MS);
  ASSERT_EQ_INT(p.n_holds, 16);
  ASSERT_EQ_INT(colo_plan_reserve(&p, 500, idx, n, 1, 1, 1, 0, 0, 0, 0, r), 0); /* the cap */
  colo_plan_free(&p);
  free(h);
  free(busy);
  free(idx);
  free(r);
}

TEST(plan_estimates_choose_where_an_unknown_start_holds) {
  uint8_t busy[6] = {0};
  colo_sched_host_t h[3] = {host(1, 2, busy), host(2, 2, busy + 2), host(3, 2, busy + 4)};
  size_t idx[3] = {0, 1, 2};
  colo_plan_t p;
  ASSERT_EQ_INT(colo_plan_init(&p, h, 3, busy, 6, NOW, 8), 0);
  /* no time limits; by their progress host 1's job ends in 30 minutes, host 2's in 5, and host
   * 3's one-device job has said nothing yet */
  run_on(&p, busy, 1, 0, 2, 0, INT64_MAX, NOW + 30 * MIN_MS);
  run_on(&p, busy, 2, 0, 2, 0, INT64_MAX, NOW + 5 * MIN_MS);
  run_on(&p, busy, 3, 0, 1, 0, INT64_MAX, INT64_MAX);
  colo_rank_place_t out[2];
  /* a 2-device group: its start is not known, but it should be host 2's, in 5 minutes (not host
   * 3, which has the most free devices now) */
  ASSERT_EQ_INT(colo_plan_reserve(&p, 601, idx, 3, 1, 1, 2, 0, 0, 0, 0, out), 0);
  ASSERT_EQ_INT(colo_plan_reserve(&p, 601, idx, 3, 1, 1, 2, 0, 0, 0, 1, out), 1);
  ASSERT_EQ_INT(p.holds[0].start, INT64_MAX);
  ASSERT_EQ_INT(p.holds[0].expect, NOW + 5 * MIN_MS);
  ASSERT_EQ_INT(out[0].host_id, 2);
  ASSERT_EQ_INT(p.holds[0].n_free, 0);
  /* so host 3's free device stays free for the jobs behind: nothing free is held */
  uint8_t view[6] = {0};
  colo_plan_taken_t t = colo_plan_view(&p, INT64_MAX, idx, 3, view);
  ASSERT_EQ_INT(t.devices, 0);
  ASSERT_EQ_INT(p.n_held, 0);
  ASSERT_EQ_INT(busy[5], 0);
  /* an estimate is never later than the limit: a job that must end in 2 minutes goes first */
  colo_plan_free(&p);
  memset(busy, 0, sizeof busy);
  ASSERT_EQ_INT(colo_plan_init(&p, h, 3, busy, 6, NOW, 8), 0);
  run_on(&p, busy, 1, 0, 2, 0, NOW + 2 * MIN_MS, NOW + 30 * MIN_MS);
  run_on(&p, busy, 2, 0, 2, 0, INT64_MAX, NOW + 5 * MIN_MS);
  run_on(&p, busy, 3, 0, 2, 0, INT64_MAX, INT64_MAX);
  ASSERT_EQ_INT(colo_plan_reserve(&p, 602, idx, 3, 1, 1, 2, 0, 0, 0, 1, out), 1);
  ASSERT_EQ_INT(p.holds[0].start, NOW + 2 * MIN_MS);
  ASSERT_EQ_INT(p.holds[0].expect, NOW + 2 * MIN_MS);
  ASSERT_EQ_INT(out[0].host_id, 1);
  /* before any estimate, the hosts with the most free devices now */
  colo_plan_free(&p);
  memset(busy, 0, sizeof busy);
  ASSERT_EQ_INT(colo_plan_init(&p, h, 3, busy, 6, NOW, 8), 0);
  run_on(&p, busy, 1, 0, 2, 0, INT64_MAX, INT64_MAX);
  run_on(&p, busy, 2, 0, 2, 0, INT64_MAX, INT64_MAX);
  run_on(&p, busy, 3, 0, 1, 0, INT64_MAX, INT64_MAX);
  ASSERT_EQ_INT(colo_plan_reserve(&p, 603, idx, 3, 1, 1, 2, 0, 0, 0, 1, out), 1);
  ASSERT_EQ_INT(p.holds[0].expect, INT64_MAX);
  ASSERT_EQ_INT(out[0].host_id, 3); /* one free there now */
  colo_plan_free(&p);
}

TEST(plan_a_maintenance_holds_its_host_from_then) {
  uint8_t busy[4] = {0};
  colo_sched_host_t h[2] = {host(1, 2, busy), host(2, 2, busy + 2)};
  size_t idx[2] = {0, 1};
  colo_plan_t p;
  ASSERT_EQ_INT(colo_plan_init(&p, h, 2, busy, 4, NOW, 1), 0);
  run_on(&p, busy, 2, 0, 2, 0, INT64_MAX, INT64_MAX);          /* host 2: busy, no limit */
  ASSERT_EQ_INT(colo_plan_block(&p, 0, NOW + 60 * MIN_MS), 0); /* host 1: a maintenance in 1h */
  /* a job that ends within the hour may take host 1 now; one that may not, or has no limit,
   * may not */
  uint8_t view[4];
  colo_plan_taken_t t = colo_plan_view(&p, NOW + 60 * MIN_MS, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 0);
  ASSERT_EQ_INT(view[0] | view[1], 0);
  t = colo_plan_view(&p, NOW + 61 * MIN_MS, idx, 2, view);
  ASSERT_EQ_INT(t.devices, 2);
  ASSERT_EQ_INT(p.holds[t.first].job_id, 0); /* the maintenance's */
  ASSERT_EQ_INT(p.holds[t.first].host, 0);
  /* no hold counts on host 1, not even the first's, whose start is not known: it holds host 2;
   * and the maintenance does not count against the one hold allowed */
  colo_rank_place_t out[2];
  ASSERT_EQ_INT(colo_plan_reserve(&p, 701, idx, 2, 1, 2, 1, 0, 0, 0, 1, out), 1);
  ASSERT_EQ_INT(out[0].host_id, 2);
  ASSERT_EQ_INT(out[1].host_id, 2);
  ASSERT_EQ_INT(colo_plan_job_holds(&p), 1);
  colo_plan_free(&p);
}

TEST_MAIN()
