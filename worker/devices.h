/* The devices a worker offers: GPUs found through NVML (dlopen'd, so one binary runs on nodes
 * without a driver), or CPU slots. */
#ifndef COLO_WORKER_DEVICES_H
#define COLO_WORKER_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#define COLO_MAX_NODE_DEVICES 256
enum { COLO_DEVICE_CPU = 1, COLO_DEVICE_GPU = 2 }; /* colo.v1.DeviceKind */

typedef struct {
  uint32_t index, kind;
  char name[96], uuid[96];
  uint64_t memory_bytes;
} colo_device_info_t;

typedef struct {
  colo_device_info_t dev[COLO_MAX_NODE_DEVICES];
  size_t n;
} colo_devices_t;

/* A GPU's health, from NVML kept open while the worker runs. */
typedef struct colo_health_s colo_health_t;
typedef struct {
  uint32_t index;
  char reason[160];
} colo_device_health_t;

/* NVML opened for the GPUs in devs; NULL where they are CPU slots or NVML cannot be loaded. */
colo_health_t *colo_health_open(const char *nvml_lib, const colo_devices_t *devs);
/* The GPUs unfit to run ranks now, each with the first reason that holds of:
 *   - lost: NVML answers NVML_ERROR_GPU_IS_LOST (fallen off the bus);
 *   - a hardware XID event since the worker started (ECC, NVLink, GSP, off the bus; a program's
 *     own faults are not counted);
 *   - row remapping failed, or one is pending (the GPU needs service, or a reset);
 *   - uncorrected ECC errors since the driver loaded;
 *   - an NVLink that was up when the worker started is down (NCCL's rings over it fail or fall
 *     back to PCIe).
 * What NVML cannot tell (no ECC, no row remapping, no events) counts as fit. Returns how many, up
 * to cap. */
size_t colo_health_check(colo_health_t *h, colo_device_health_t *out, size_t cap);
/* The GPUs that run slower now: with clocks NVML says are lowered for a reason that slows a job
 * (a thermal slowdown, hardware or software, a hardware slowdown, or a power brake:
 * nvmlDeviceGetCurrentClocksEventReasons; not the software power cap, which any busy GPU meets,
 * nor idling or application clocks), or whose NVLinks resent data (DL replays) or retrained
 * (DL recoveries) within the last minute (nvmlDeviceGetNvLinkErrorCounter). reason names each,
 * "clocks lowered: thermal slowdown (hardware), power brake; NVLink errors: 12 replays, 1
 * recovery on link 2, the newest under a minute ago". Returns how many, up to cap; 0 where
 * NVML cannot tell. */
size_t colo_health_slowed(colo_health_t *h, colo_device_health_t *out, size_t cap);
void colo_health_close(colo_health_t *h);

/* mode "auto": the GPUs NVML reports, or cpu_slots CPU slots when there are none; "gpu": GPUs
 * or an error; "cpu": CPU slots. nvml_lib: the library to dlopen ("libnvidia-ml.so.1").
 * Returns 0 with `why` saying what was found, or -1 with `why` saying what is wrong. */
int colo_devices_discover(const char *mode, const char *nvml_lib, uint32_t cpu_slots,
                          colo_devices_t *out, char *why, size_t whylen);

#endif
