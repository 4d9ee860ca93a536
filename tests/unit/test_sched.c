/* Gang placement: the mesh coordinates, tensor-parallel groups inside one host, busy devices,
 * the per-node limit, all-or-nothing failure with its reason, and the time to place a 512-rank
 * job on 1,000 hosts of 8 devices. */
#include <time.h>

#include "common/error.h"
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

TEST_MAIN()
