/* A stand-in for libnvidia-ml.so.1 with two GPUs, so that the worker's NVML discovery is tested
 * on machines without a GPU or driver. Only the calls the worker makes; NVML's signatures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fake_dev {
  int index;
} * nvml_device_t;
typedef struct {
  unsigned long long total, free, used;
} nvml_memory_t;

static struct fake_dev devs[2] = {{0}, {1}};
static int inited;

int nvmlInit_v2(void) {
  inited = 1;
  return 0;
}
int nvmlShutdown(void) {
  inited = 0;
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int *n) {
  *n = 2;
  return inited ? 0 : 1;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvml_device_t *d) {
  if (!inited || i >= 2)
    return 2;
  *d = &devs[i];
  return 0;
}
int nvmlDeviceGetName(nvml_device_t d, char *name, unsigned int len) {
  snprintf(name, len, "Fake H100 %d", d->index);
  return 0;
}
int nvmlDeviceGetUUID(nvml_device_t d, char *uuid, unsigned int len) {
  snprintf(uuid, len, "GPU-fake-%d", d->index);
  return 0;
}
/* 1 when "INDEX" is a line of the file $FAKE_NVML_LOST_FILE: every health call on the device
 * then answers NVML_ERROR_GPU_IS_LOST (15) */
static int lost(nvml_device_t d) {
  const char *path = getenv("FAKE_NVML_LOST_FILE");
  FILE *f = path ? fopen(path, "r") : NULL;
  int index, found = 0;
  while (f && !found && fscanf(f, "%d", &index) == 1)
    found = index == d->index;
  if (f)
    fclose(f);
  return found;
}

/* uncorrected volatile ECC errors: "INDEX COUNT" lines in the file $FAKE_NVML_ECC_FILE, read at
 * each call (absent: none) */
int nvmlDeviceGetTotalEccErrors(nvml_device_t d, int type, int counter, unsigned long long *n) {
  *n = 0;
  if (lost(d))
    return 15;
  const char *path = getenv("FAKE_NVML_ECC_FILE");
  FILE *f = path && type == 1 && counter == 0 ? fopen(path, "r") : NULL;
  int index;
  unsigned long long count;
  while (f && fscanf(f, "%d %llu", &index, &count) == 2)
    if (index == d->index)
      *n = count;
  if (f)
    fclose(f);
  return 0;
}
int nvmlDeviceGetMemoryInfo(nvml_device_t d, nvml_memory_t *m) {
  (void)d;
  m->total = 80ull << 30;
  m->free = m->total;
  m->used = 0;
  return 0;
}

/* row remapping: "INDEX PENDING FAILED" lines in $FAKE_NVML_REMAP_FILE (absent: none) */
int nvmlDeviceGetRemappedRows(nvml_device_t d, unsigned *corr, unsigned *unc, unsigned *pending,
                              unsigned *failed) {
  *corr = *unc = *pending = *failed = 0;
  if (lost(d))
    return 15;
  const char *path = getenv("FAKE_NVML_REMAP_FILE");
  FILE *f = path ? fopen(path, "r") : NULL;
  int index;
  unsigned p, x;
  while (f && fscanf(f, "%d %u %u", &index, &p, &x) == 3)
    if (index == d->index) {
      *pending = p;
      *failed = x;
    }
  if (f)
    fclose(f);
  return 0;
}

/* XID events: "INDEX XID" lines appended to $FAKE_NVML_XID_FILE, each delivered once, in order,
 * to a set its device was registered with */
typedef struct {
  nvml_device_t device;
  unsigned long long type, data;
  unsigned gpu_instance, compute_instance;
} nvml_event_data_t;
static struct fake_set {
  unsigned long long types[2];
  long delivered; /* lines of the file already delivered */
} the_set;

int nvmlEventSetCreate(struct fake_set **set) {
  memset(&the_set, 0, sizeof the_set);
  *set = &the_set;
  return 0;
}
int nvmlEventSetFree(struct fake_set *set) {
  (void)set;
  return 0;
}
int nvmlDeviceRegisterEvents(nvml_device_t d, unsigned long long types, struct fake_set *set) {
  set->types[d->index] |= types;
  return 0;
}
int nvmlEventSetWait_v2(struct fake_set *set, nvml_event_data_t *e, unsigned timeout_ms) {
  (void)timeout_ms;
  const char *path = getenv("FAKE_NVML_XID_FILE");
  FILE *f = path ? fopen(path, "r") : NULL;
  int index, found = 0;
  unsigned long long xid;
  for (long line = 0; f && !found && fscanf(f, "%d %llu", &index, &xid) == 2; line++) {
    if (line < set->delivered)
      continue;
    set->delivered = line + 1;
    if (index >= 0 && index < 2 && (set->types[index] & 0x8)) {
      memset(e, 0, sizeof *e);
      e->device = &devs[index];
      e->type = 0x8;
      e->data = xid;
      found = 1;
    }
  }
  if (f)
    fclose(f);
  return found ? 0 : 10; /* NVML_ERROR_TIMEOUT: none */
}

/* clocks lowered: "INDEX MASK" lines (MASK in hex, nvmlClocksEventReason bits) in
 * $FAKE_NVML_CLOCKS_FILE, read at every call (absent: none) */
int nvmlDeviceGetCurrentClocksEventReasons(nvml_device_t d, unsigned long long *reasons) {
  if (lost(d))
    return 15;
  *reasons = 0;
  const char *path = getenv("FAKE_NVML_CLOCKS_FILE");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f)
    return 0;
  int index;
  unsigned long long mask;
  while (fscanf(f, "%d %llx", &index, &mask) == 2)
    if (index == d->index)
      *reasons = mask;
  fclose(f);
  return 0;
}

/* NVLinks: "INDEX LINK ACTIVE REPLAYS RECOVERIES" lines in $FAKE_NVML_NVLINK_FILE, read at every
 * call; a link not listed does not exist (NVML_ERROR_INVALID_ARGUMENT, 2), and without the file
 * no GPU has NVLink (NVML_ERROR_NOT_SUPPORTED, 3) */
static int nvlink(nvml_device_t d, unsigned link, int *active, unsigned long long counts[2]) {
  const char *path = getenv("FAKE_NVML_NVLINK_FILE");
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f)
    return 3;
  int index, on, found = 0;
  unsigned l;
  unsigned long long replays, recoveries;
  while (fscanf(f, "%d %u %d %llu %llu", &index, &l, &on, &replays, &recoveries) == 5)
    if (index == d->index && l == link) {
      *active = on;
      counts[0] = replays;
      counts[1] = recoveries;
      found = 1;
    }
  fclose(f);
  return found ? 0 : 2;
}
int nvmlDeviceGetNvLinkState(nvml_device_t d, unsigned link, int *active) {
  unsigned long long counts[2];
  return lost(d) ? 15 : nvlink(d, link, active, counts);
}
int nvmlDeviceGetNvLinkErrorCounter(nvml_device_t d, unsigned link, int counter,
                                    unsigned long long *value) {
  int active;
  unsigned long long counts[2];
  int rc = lost(d) ? 15 : nvlink(d, link, &active, counts);
  if (rc == 0 && counter >= 0 && counter < 2)
    *value = counts[counter];
  return rc ? rc : counter >= 0 && counter < 2 ? 0 : 3;
}
