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

/* ---- health ---- */

#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC                  0

struct colo_health_s {
  void *lib;
  nvml_return_t (*shutdown)(void);
  nvml_return_t (*ecc)(nvml_device_t, int, int, unsigned long long *);
  nvml_device_t dev[COLO_MAX_NODE_DEVICES];
  uint32_t index[COLO_MAX_NODE_DEVICES];
  size_t n;
};

colo_health_t *colo_health_open(const char *nvml_lib, const colo_devices_t *devs) {
  if (!devs->n || devs->dev[0].kind != COLO_DEVICE_GPU)
    return NULL;
  void *lib = dlopen(nvml_lib, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return NULL;
  colo_health_t *h = calloc(1, sizeof *h);
  nvml_return_t (*init)(void), (*handle)(unsigned int, nvml_device_t *);
  *(void **)&init = dlsym(lib, "nvmlInit_v2");
  *(void **)&handle = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  if (h) {
    *(void **)&h->shutdown = dlsym(lib, "nvmlShutdown");
    *(void **)&h->ecc = dlsym(lib, "nvmlDeviceGetTotalEccErrors");
  }
  if (!h || !init || !handle || !h->shutdown || !h->ecc || init() != 0) {
    free(h);
    dlclose(lib);
    return NULL;
  }
  h->lib = lib;
  for (size_t i = 0; i < devs->n; i++)
    if (handle(devs->dev[i].index, &h->dev[h->n]) == 0)
      h->index[h->n++] = devs->dev[i].index;
  return h;
}

size_t colo_health_check(colo_health_t *h, colo_device_health_t *out, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; h && i < h->n && n < cap; i++) {
    unsigned long long errors = 0;
    if (h->ecc(h->dev[i], NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors) != 0 ||
        errors == 0)
      continue; /* healthy, or no ECC to ask (NVML_ERROR_NOT_SUPPORTED) */
    out[n].index = h->index[i];
    snprintf(out[n].reason, sizeof out[n].reason,
             "%llu uncorrected ECC error%s since the driver loaded", errors,
             errors == 1 ? "" : "s");
    n++;
  }
  return n;
}

void colo_health_close(colo_health_t *h) {
  if (!h)
    return;
  h->shutdown();
  dlclose(h->lib);
  free(h);
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
