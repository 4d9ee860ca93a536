/* Gang placement: where every rank of a job attempt runs, all or nothing. The mesh is DESIGN.md's
 * rank = (pp_idx × dp + dp_idx) × tp + tp_idx; each tensor-parallel group (tp consecutive ranks)
 * must sit on one host. A pure function over a snapshot of the hosts: the scheduler (next step)
 * calls it and commits the result with colo_store_attempt_begin. */
#ifndef COLOD_SCHED_H
#define COLOD_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "../storage/store.h"

typedef struct {
  uint64_t host_id;
  uint32_t n_devices;
  const uint8_t *busy;  /* n_devices flags: 1 = a rank runs there */
  uint64_t mem_free;    /* host memory bytes its ranks may still claim; UINT64_MAX: no limit */
  const uint64_t *slow; /* bitset of devices whose clocks are lowered, taken last; NULL: none */
} colo_sched_host_t;

/* Places pp × dp × tp ranks, at most per_node (0: no limit) on one host, and where each rank
 * claims rank_mem bytes of host memory (resources.host_memory_mib; 0: none), no more on a host
 * than its mem_free holds. Hosts are filled in order of most free devices at full clocks first,
 * then most free devices (ties: the order given), consecutive tensor-parallel groups on the same
 * host while it has room, each on the host's lowest free devices at full clocks, then its lowest
 * free slowed ones: a job takes a slowed device only where it has no other choice. Returns 0 with
 * out[rank] filled, or COLO_EBUSY with the reason in why and out untouched. */
int colo_sched_place(const colo_sched_host_t *hosts, size_t n_hosts, uint32_t pp, uint32_t dp,
                     uint32_t tp, uint32_t per_node, uint64_t rank_mem, colo_rank_place_t *out,
                     char *why, size_t whylen);

/* A host's index in a snapshot sorted by host_id (colod's order); n_hosts: not there. */
size_t colo_sched_find(const colo_sched_host_t *hosts, size_t n_hosts, uint64_t id);

#endif
