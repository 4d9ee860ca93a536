#include "devices.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few NVML entry points used, declared here so that the worker builds and runs on nodes
 * without the CUDA toolkit or driver: the library is dlopen'd. Signatures as in nvml.h. */
typedef int nvml_return_t; /* NVML_SUCCESS = 0 */
typedef struct nvml_device_s *nvml_device_t;
typedef struct {
  unsigned long long total, free, used;
} nvml_memory_t;

typedef struct {
  nvml_return_t (*init)(void);
  nvml_return_t (*shutdown)(void);
  nvml_return_t (*count)(unsigned int *);
  nvml_return_t (*handle)(unsigned int, nvml_device_t *);
  nvml_return_t (*name)(nvml_device_t, char *, unsigned int);
  nvml_return_t (*uuid)(nvml_device_t, char *, unsigned int);
  nvml_return_t (*memory)(nvml_device_t, nvml_memory_t *);
} nvml_t;

static void add(colo_devices_t *out, uint32_t kind, const char *name, const char *uuid,
                uint64_t mem) {
  if (out->n == COLO_MAX_NODE_DEVICES)
    return;
  colo_device_info_t *d = &out->dev[out->n];
  d->index = (uint32_t)out->n;
  d->kind = kind;
  snprintf(d->name, sizeof d->name, "%s", name);
  snprintf(d->uuid, sizeof d->uuid, "%s", uuid);
  d->memory_bytes = mem;
  out->n++;
}

/* GPUs through NVML; 0 with none found (no library, no driver, no device). */
static int find_gpus(const char *lib, colo_devices_t *out, char *why, size_t whylen) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, whylen, "no GPUs: cannot load %s", lib);
    return 0;
  }
  nvml_t n;
  *(void **)&n.init = dlsym(h, "nvmlInit_v2");
  *(void **)&n.shutdown = dlsym(h, "nvmlShutdown");
  *(void **)&n.count = dlsym(h, "nvmlDeviceGetCount_v2");
  *(void **)&n.handle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&n.name = dlsym(h, "nvmlDeviceGetName");
  *(void **)&n.uuid = dlsym(h, "nvmlDeviceGetUUID");
  *(void **)&n.memory = dlsym(h, "nvmlDeviceGetMemoryInfo");
  unsigned int count = 0;
  if (!n.init || !n.shutdown || !n.count || !n.handle || !n.name || !n.uuid || !n.memory) {
    snprintf(why, whylen, "no GPUs: %s lacks the NVML calls needed", lib);
  } else if (n.init() != 0) {
    snprintf(why, whylen, "no GPUs: nvmlInit failed (no driver?)");
  } else {
    if (n.count(&count) != 0)
      count = 0;
    for (unsigned int i = 0; i < count; i++) {
      nvml_device_t dev;
      char name[96] = "gpu", uuid[96] = "";
      nvml_memory_t mem = {0, 0, 0};
      if (n.handle(i, &dev) != 0)
        continue;
      n.name(dev, name, sizeof name);
      n.uuid(dev, uuid, sizeof uuid);
      n.memory(dev, &mem);
      add(out, COLO_DEVICE_GPU, name, uuid, mem.total);
    }
    n.shutdown();
    snprintf(why, whylen, "%u GPUs found through %s", count, lib);
  }
  dlclose(h);
  return (int)out->n;
}

int colo_devices_discover(const char *mode, const char *nvml_lib, uint32_t cpu_slots,
                          colo_devices_t *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  if (!strcmp(mode, "auto") || !strcmp(mode, "gpu")) {
    if (find_gpus(nvml_lib, out, why, whylen) > 0)
      return 0;
    if (!strcmp(mode, "gpu"))
      return -1; /* asked for GPUs, found none: why says so */
  } else if (strcmp(mode, "cpu") != 0) {
    snprintf(why, whylen, "devices \"%s\" must be auto, gpu or cpu", mode);
    return -1;
  } else {
    snprintf(why, whylen, "devices: cpu");
  }
  for (uint32_t i = 0; i < cpu_slots; i++)
    add(out, COLO_DEVICE_CPU, "cpu", "", 0);
  size_t len = strlen(why);
  snprintf(why + len, whylen - len, "; %u CPU slots", cpu_slots);
  return 0;
}
