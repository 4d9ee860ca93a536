/* The TCP communicator: ranks are forked processes on loopback. Every collective against the
 * values it must produce, groups, odd sizes, large buffers, and a peer that dies mid-collective:
 * the others fail within the timeout with a message naming it. */
#include <signal.h>
#include <time.h>

#include "common/error.h"
#include "comm/comm.h"
#include "comm/store.h"
#include "comm_test.h"

typedef int (*rank_fn)(colo_comm_t *c, int rank, int world);

/* Runs fn on `world` forked ranks; returns how many exited 0. */
static int run_world(int world, int timeout_ms, rank_fn fn) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  pid_t pids[16];
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      colo_comm_t *c;
      char err[256];
      if (colo_comm_tcp_create(addr, r, world, "127.0.0.1", timeout_ms, &c, err, sizeof err) < 0) {
        fprintf(stderr, "rank %d: %s\n", r, err);
        _exit(3);
      }
      int rc = fn(c, r, world);
      c->ops->destroy(c);
      _exit(rc);
    }
  }
  int ok = 0;
  for (int r = 0; r < world; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok;
}

static int expect_shm = 1;

static int collectives(colo_comm_t *c, int rank, int world) {
  /* on one host every peer is reached through shared memory, unless COLO_COMM_SHM=0 */
  CHECKR(c->shm_peers == (expect_shm ? world - 1 : 0));
  /* allreduce of sizes that do and do not split evenly, including fewer elements than ranks */
  size_t sizes[] = {1, 3, 1000, 12345, 1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    float *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++)
      b[i] = (float)(rank + 1) * (float)(i % 97);
    CHECKR(c->ops->allreduce_sum(c, b, n) == 0);
    float tri = (float)(world * (world + 1) / 2);
    for (size_t i = 0; i < n; i++)
      CHECKR(b[i] == tri * (float)(i % 97));
    free(b);
  }
  /* reduce-scatter and all-gather */
  size_t n = 777;
  float *b = malloc(n * (size_t)world * sizeof *b);
  for (size_t i = 0; i < n * (size_t)world; i++)
    b[i] = (float)rank + (float)i;
  CHECKR(c->ops->reduce_scatter_sum(c, b, n) == 0);
  for (size_t i = 0; i < n; i++) {
    size_t g = (size_t)rank * n + i;
    CHECKR(b[g] == (float)(world * (world - 1) / 2) + (float)world * (float)g);
  }
  for (size_t i = 0; i < n; i++)
    b[(size_t)rank * n + i] = (float)(rank * 10000) + (float)i;
  CHECKR(c->ops->all_gather(c, b, n) == 0);
  for (int r = 0; r < world; r++)
    for (size_t i = 0; i < n; i++)
      CHECKR(b[(size_t)r * n + i] == (float)(r * 10000) + (float)i);
  free(b);
  /* broadcast from every root */
  for (int root = 0; root < world; root++) {
    float v[5] = {0};
    if (rank == root)
      for (int i = 0; i < 5; i++)
        v[i] = (float)(root * 5 + i);
    CHECKR(c->ops->broadcast(c, v, 5, root) == 0);
    for (int i = 0; i < 5; i++)
      CHECKR(v[i] == (float)(root * 5 + i));
  }
  /* point to point around the ring */
  float out = (float)rank, in = -1;
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  if (rank % 2 == 0) {
    CHECKR(c->ops->send(c, &out, 1, next) == 0);
    CHECKR(c->ops->recv(c, &in, 1, prev) == 0);
  } else {
    CHECKR(c->ops->recv(c, &in, 1, prev) == 0);
    CHECKR(c->ops->send(c, &out, 1, next) == 0);
  }
  CHECKR(in == (float)prev);
  CHECKR(c->ops->barrier(c) == 0);
  /* groups: even and odd ranks, each reducing on its own */
  int members[8], m = 0;
  for (int r = rank % 2; r < world; r += 2)
    members[m++] = r;
  colo_comm_t *g;
  char err[128];
  CHECKR(colo_comm_group(c, members, m, &g, err, sizeof err) == 0);
  CHECKR(colo_comm_rank(g) == rank / 2 && colo_comm_size(g) == m);
  float s = (float)rank;
  CHECKR(g->ops->allreduce_sum(g, &s, 1) == 0);
  float want = 0;
  for (int i = 0; i < m; i++)
    want += (float)members[i];
  CHECKR(s == want);
  g->ops->destroy(g);
  return 0;
}

TEST(collectives_on_2_3_and_4_ranks) {
  ASSERT_EQ_INT(run_world(2, 10000, collectives), 2);
  ASSERT_EQ_INT(run_world(3, 10000, collectives), 3);
  ASSERT_EQ_INT(run_world(4, 10000, collectives), 4);
}

TEST(collectives_over_tcp_only) {
  setenv("COLO_COMM_SHM", "0", 1);
  expect_shm = 0;
  ASSERT_EQ_INT(run_world(3, 10000, collectives), 3);
}

/* Neighbours exchanging tensors far larger than the 4 MiB shared-memory ring and the socket
 * buffers, both ways at once, as pipeline stages do: a send on each side would wait for the
 * other forever; sendrecv moves both. Then one-sided calls (a peer of -1), and a ring shift
 * where every rank sends to one peer and receives from another. */
static int exchange(colo_comm_t *c, int rank, int world) {
  size_t n = 6u << 20; /* 24 MiB */
  float *out = malloc(n * sizeof *out), *in = malloc(n * sizeof *in);
  CHECKR(out && in);
  for (size_t i = 0; i < n; i++)
    out[i] = (float)(rank * 7 + (int)(i % 1013));
  int peer = rank ^ 1;
  if (peer < world) {
    CHECKR(c->ops->sendrecv(c, out, n, peer, in, n, peer) == 0);
    for (size_t i = 0; i < n; i++)
      CHECKR(in[i] == (float)(peer * 7 + (int)(i % 1013)));
    /* one way: the even rank sends, the odd one receives */
    memset(in, 0, n * sizeof *in);
    if (rank % 2 == 0)
      CHECKR(c->ops->sendrecv(c, out, n, peer, NULL, 0, -1) == 0);
    else
      CHECKR(c->ops->sendrecv(c, NULL, 0, -1, in, n, peer) == 0);
    for (size_t i = 0; rank % 2 == 1 && i < n; i++)
      CHECKR(in[i] == (float)(peer * 7 + (int)(i % 1013)));
  }
  int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  CHECKR(c->ops->sendrecv(c, out, n, next, in, n, prev) == 0);
  for (size_t i = 0; i < n; i++)
    CHECKR(in[i] == (float)(prev * 7 + (int)(i % 1013)));
  CHECKR(c->ops->sendrecv(c, out, 1, rank, in, 1, prev) == COLO_EINVAL);
  free(out);
  free(in);
  return 0;
}

TEST(sendrecv_moves_tensors_larger_than_the_buffers_both_ways) {
  ASSERT_EQ_INT(run_world(2, 10000, exchange), 2);
  ASSERT_EQ_INT(run_world(3, 10000, exchange), 3);
  setenv("COLO_COMM_SHM", "0", 1); /* each test runs in its own process */
  ASSERT_EQ_INT(run_world(2, 10000, exchange), 2);
}

/* rank 1 dies (SIGKILL) in the middle of a large all-reduce loop; the others must fail fast
 * with a message naming it */
static int victim(colo_comm_t *c, int rank, int world) {
  (void)world;
  size_t n = 1 << 20;
  float *b = calloc(n, sizeof *b);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 1000; i++) {
    if (rank == 1 && i == 3)
      raise(SIGKILL);
    int rc = c->ops->allreduce_sum(c, b, n);
    if (rc < 0) {
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
      const char *e = colo_comm_error(c);
      /* the rank next to the dead one names it; the others may name the rank that aborted */
      fprintf(stderr, "rank %d after %.2f s: %s\n", rank, s, e);
      free(b);
      if (!strstr(e, "closed its connection") && !strstr(e, "timed out"))
        return 1;
      if (s > 5.0)
        return 1;
      /* every later call fails at once */
      return c->ops->barrier(c) < 0 ? 7 : 1;
    }
  }
  free(b);
  return 1;
}

static void dead_peer(void);
TEST(dead_peer_ends_collectives_with_an_error) {
  dead_peer(); /* through shared memory */
}
TEST(dead_peer_over_tcp) {
  setenv("COLO_COMM_SHM", "0", 1);
  dead_peer();
}
static void dead_peer(void) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  int world = 3;
  pid_t pids[3];
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      colo_comm_t *c;
      char err[256];
      if (colo_comm_tcp_create(addr, r, world, "127.0.0.1", 5000, &c, err, sizeof err) < 0)
        _exit(3);
      int rc = victim(c, r, world);
      c->ops->destroy(c);
      _exit(rc);
    }
  }
  int st;
  waitpid(pids[1], &st, 0);
  ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  for (int r = 0; r < world; r += 2) {
    waitpid(pids[r], &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 7))
      FAIL_AT("rank %d ended with status %d, expected a failed call and exit 7", r, st);
  }
}

TEST(setup_times_out_when_a_rank_never_comes) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  colo_comm_t *c = NULL;
  char err[256];
  time_t t0 = time(NULL);
  /* rank 0 of a world of 2, alone */
  ASSERT(colo_comm_tcp_create(addr, 0, 2, "127.0.0.1", 1000, &c, err, sizeof err) < 0);
  ASSERT(c == NULL);
  ASSERT(time(NULL) - t0 <= 3);
  ASSERT_EQ_STR(err, "timed out after 1000 ms waiting for 1 higher ranks to connect");
}

TEST(store_set_get_wait) {
  char addr[64], err[256], val[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
  colo_rdzv_server_t *s;
  ASSERT_EQ_INT(colo_rdzv_server_start(addr, &s, err, sizeof err), 0);
  pid_t pid = fork();
  if (pid == 0) {
    usleep(200000);
    _exit(colo_rdzv_set(addr, "late", "here", 1000, err, sizeof err) == 0 ? 0 : 1);
  }
  ASSERT_EQ_INT(colo_rdzv_get(addr, "late", val, sizeof val, 3000, err, sizeof err), 0);
  ASSERT_EQ_STR(val, "here");
  ASSERT_EQ_INT(colo_rdzv_get(addr, "never", val, sizeof val, 300, err, sizeof err), -8);
  ASSERT(strstr(err, "no value for \"never\" within 300 ms") != NULL);
  int st;
  waitpid(pid, &st, 0);
  ASSERT_EQ_INT(WEXITSTATUS(st), 0);
  colo_rdzv_server_stop(s);
}

TEST_MAIN()
