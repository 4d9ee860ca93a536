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
/* uncorrected volatile ECC errors: "INDEX COUNT" lines in the file $FAKE_NVML_ECC_FILE, read at
 * each call (absent: none) */
int nvmlDeviceGetTotalEccErrors(nvml_device_t d, int type, int counter, unsigned long long *n) {
  *n = 0;
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
