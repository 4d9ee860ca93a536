#include "devices.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
#define NVML_ERROR_TIMEOUT                 10
#define NVML_ERROR_GPU_IS_LOST             15
#define NVML_EVENT_XID_CRITICAL            0x8ULL /* nvmlEventTypeXidCriticalError */

typedef struct nvml_event_set_s *nvml_event_set_t;
typedef struct {
  nvml_device_t device;
  unsigned long long type, data; /* data: the XID */
  unsigned int gpu_instance, compute_instance;
} nvml_event_data_t;

/* The XIDs that say the GPU itself is at fault (NVIDIA's XID catalogue), not the program on it
 * (13, 31, 43, 45: faults of the program, or its ending). A device that reported one stays unfit
 * until its worker restarts, which an operator does after resetting or replacing the GPU. */
static const struct {
  unsigned xid;
  const char *what;
} HW_XIDS[] = {
    {48, "double-bit ECC error"},
    {64, "row remapping failure"},
    {74, "NVLink error"},
    {79, "the GPU has fallen off the bus"},
    {95, "uncontained ECC error"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
    {140, "unrecovered ECC error"},
};

static const char *hw_xid(unsigned long long xid) {
  for (size_t i = 0; i < sizeof HW_XIDS / sizeof HW_XIDS[0]; i++)
    if (HW_XIDS[i].xid == xid)
      return HW_XIDS[i].what;
  return NULL;
}

/* NVLinks (nvml.h): links per GPU, and the error counters that say a link is retraining or
 * resending (nvmlNvLinkErrorCounter_t: DL replay, DL recovery) */
#define NVLINK_MAX_LINKS       18
#define NVLINK_ERROR_REPLAY    0
#define NVLINK_ERROR_RECOVERY  1
#define NVLINK_ERROR_WINDOW_MS 60000 /* errors this recent slow a device */
typedef struct {
  uint32_t up;                                  /* links active when the worker started */
  unsigned long long seen[NVLINK_MAX_LINKS][2]; /* replay and recovery counts at the last check */
  unsigned long long replays, recoveries;       /* since since_ms, and links they came on */
  uint32_t erring;
  uint64_t since_ms, last_ms; /* monotonic: the first and the newest errors of the window */
} nvlinks_t;

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct colo_health_s {
  void *lib;
  nvml_return_t (*shutdown)(void);
  nvml_return_t (*ecc)(nvml_device_t, int, int, unsigned long long *);
  /* optional: NULL where the driver's NVML lacks them */
  nvml_return_t (*remapped)(nvml_device_t, unsigned *, unsigned *, unsigned *, unsigned *);
  nvml_return_t (*event_wait)(nvml_event_set_t, nvml_event_data_t *, unsigned);
  nvml_return_t (*event_free)(nvml_event_set_t);
  nvml_return_t (*clocks)(nvml_device_t, unsigned long long *); /* why clocks are lowered */
  nvml_return_t (*link_state)(nvml_device_t, unsigned, int *);  /* an NVLink is active */
  nvml_return_t (*link_errors)(nvml_device_t, unsigned, int, unsigned long long *);
  nvml_event_set_t events; /* XID events of every device; NULL: none */
  nvlinks_t *links;        /* NVLink state and errors of every device; NULL: none */
  nvml_device_t dev[COLO_MAX_NODE_DEVICES];
  uint32_t index[COLO_MAX_NODE_DEVICES];
  unsigned long long xid[COLO_MAX_NODE_DEVICES]; /* the first hardware XID seen; 0: none */
  size_t n;
};

/* XID events: a set with every device's critical errors, where NVML offers them */
static void open_events(colo_health_t *h) {
  nvml_return_t (*create)(nvml_event_set_t *);
  nvml_return_t (*reg)(nvml_device_t, unsigned long long, nvml_event_set_t);
  *(void **)&create = dlsym(h->lib, "nvmlEventSetCreate");
  *(void **)&reg = dlsym(h->lib, "nvmlDeviceRegisterEvents");
  *(void **)&h->event_wait = dlsym(h->lib, "nvmlEventSetWait_v2");
  *(void **)&h->event_free = dlsym(h->lib, "nvmlEventSetFree");
  if (!create || !reg || !h->event_wait || !h->event_free || create(&h->events) != 0) {
    h->events = NULL;
    return;
  }
  size_t registered = 0;
  for (size_t i = 0; i < h->n; i++) /* not every GPU has events (NVML_ERROR_NOT_SUPPORTED) */
    registered += reg(h->dev[i], NVML_EVENT_XID_CRITICAL, h->events) == 0;
  if (!registered) {
    h->event_free(h->events);
    h->events = NULL;
  }
}

/* NVLinks: the links each GPU has active now, and their error counts, where NVML offers them */
static void open_links(colo_health_t *h) {
  *(void **)&h->link_state = dlsym(h->lib, "nvmlDeviceGetNvLinkState");
  *(void **)&h->link_errors = dlsym(h->lib, "nvmlDeviceGetNvLinkErrorCounter");
  if (!h->link_state || !h->link_errors || !(h->links = calloc(h->n, sizeof *h->links)))
    return;
  size_t any = 0;
  for (size_t i = 0; i < h->n; i++)
    for (unsigned l = 0; l < NVLINK_MAX_LINKS; l++) {
      int active = 0;
      if (h->link_state(h->dev[i], l, &active) != 0 || !active)
        continue; /* no such link (NVML_ERROR_INVALID_ARGUMENT), or not in use */
      h->links[i].up |= 1u << l;
      any++;
      for (int c = 0; c < 2; c++)
        if (h->link_errors(h->dev[i], l, c, &h->links[i].seen[l][c]) != 0)
          h->links[i].seen[l][c] = 0;
    }
  if (!any) { /* a GPU without NVLink (PCIe only): nothing to watch */
    free(h->links);
    h->links = NULL;
  }
}

/* "3" or "3, 5": the links set in mask */
static void link_list(uint32_t mask, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (unsigned l = 0; l < NVLINK_MAX_LINKS && at < len; l++)
    if (mask >> l & 1)
      at += (size_t)snprintf(buf + at, len - at, "%s%u", at ? ", " : "", l);
}

/* the links of device i active at the start that are not now */
static uint32_t links_down(colo_health_t *h, size_t i) {
  uint32_t down = 0;
  for (unsigned l = 0; h->links && l < NVLINK_MAX_LINKS; l++) {
    int active = 0;
    if (h->links[i].up >> l & 1 && (h->link_state(h->dev[i], l, &active) != 0 || !active))
      down |= 1u << l;
  }
  return down;
}

/* Takes device i's new NVLink replays and recoveries into its window; 1 while the window holds
 * errors no older than NVLINK_ERROR_WINDOW_MS, with what it holds in why (the same words from
 * beat to beat until more come, so colod logs a change only). */
static int links_erring(colo_health_t *h, size_t i, char *why, size_t len) {
  nvlinks_t *k = &h->links[i];
  uint64_t now = mono_ms();
  for (unsigned l = 0; l < NVLINK_MAX_LINKS; l++) {
    if (!(k->up >> l & 1))
      continue;
    for (int c = 0; c < 2; c++) {
      unsigned long long v;
      if (h->link_errors(h->dev[i], l, c, &v) != 0)
        continue;
      if (v <= k->seen[l][c]) {
        k->seen[l][c] = v; /* none new, or a counter the driver reset, counting again */
        continue;
      }
      if (!k->last_ms || now - k->last_ms > NVLINK_ERROR_WINDOW_MS) {
        k->replays = k->recoveries = 0; /* a new window */
        k->erring = 0;
        k->since_ms = now;
      }
      *(c == NVLINK_ERROR_REPLAY ? &k->replays : &k->recoveries) += v - k->seen[l][c];
      k->seen[l][c] = v;
      k->erring |= 1u << l;
      k->last_ms = now;
    }
  }
  if (!k->last_ms || now - k->last_ms > NVLINK_ERROR_WINDOW_MS)
    return 0;
  char links[64];
  link_list(k->erring, links, sizeof links);
  snprintf(why, len,
           "NVLink errors: %llu replay%s, %llu recover%s on link%s %s, the newest under a "
           "minute ago",
           k->replays, k->replays == 1 ? "" : "s", k->recoveries, k->recoveries == 1 ? "y" : "ies",
           k->erring & (k->erring - 1) ? "s" : "", links);
  return 1;
}

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
    *(void **)&h->remapped = dlsym(lib, "nvmlDeviceGetRemappedRows");
    *(void **)&h->clocks = dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!h->clocks) /* its name before driver 535 */
      *(void **)&h->clocks = dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
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
  open_events(h);
  open_links(h);
  return h;
}

/* takes the XID events queued since the last check (at most 256 a check: a storm of them waits
 * for the next), keeping each device's first hardware XID */
static void take_events(colo_health_t *h) {
  nvml_event_data_t e;
  for (int k = 0; h->events && k < 256 && h->event_wait(h->events, &e, 0) == 0; k++) {
    if (!(e.type & NVML_EVENT_XID_CRITICAL) || !hw_xid(e.data))
      continue;
    for (size_t i = 0; i < h->n; i++)
      if (h->dev[i] == e.device && !h->xid[i])
        h->xid[i] = e.data;
  }
}

size_t colo_health_check(colo_health_t *h, colo_device_health_t *out, size_t cap) {
  if (!h)
    return 0;
  take_events(h);
  size_t n = 0;
  for (size_t i = 0; i < h->n && n < cap; i++) {
    char *why = out[n].reason;
    size_t len = sizeof out[n].reason;
    unsigned long long errors = 0;
    unsigned corr = 0, unc = 0, pending = 0, failed = 0;
    uint32_t down;
    nvml_return_t rc =
        h->ecc(h->dev[i], NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors);
    if (rc == NVML_ERROR_GPU_IS_LOST)
      snprintf(why, len, "the GPU is lost: it has fallen off the bus or stopped answering");
    else if (h->xid[i])
      snprintf(why, len, "XID %llu (%s) since the worker started", h->xid[i], hw_xid(h->xid[i]));
    else if (h->remapped && h->remapped(h->dev[i], &corr, &unc, &pending, &failed) == 0 &&
             (failed || pending))
      snprintf(why, len,
               failed ? "row remapping failed: the GPU needs service"
                      : "a row remapping is pending: the GPU needs a reset");
    else if (rc == 0 && errors)
      snprintf(why, len, "%llu uncorrected ECC error%s since the driver loaded", errors,
               errors == 1 ? "" : "s");
    else if ((down = links_down(h, i)) != 0) {
      char links[64];
      link_list(down, links, sizeof links);
      snprintf(why, len, "NVLink%s %s down (up when the worker started)",
               down & (down - 1) ? "s" : "", links);
    } else
      continue; /* healthy, or nothing to ask (NVML_ERROR_NOT_SUPPORTED) */
    out[n++].index = h->index[i];
  }
  return n;
}

/* nvmlClocksEventReason* bits that slow a job (nvml.h) */
static const struct {
  unsigned long long bit;
  const char *what;
} SLOWDOWNS[] = {
    {0x40ull, "thermal slowdown (hardware)"},
    {0x20ull, "thermal slowdown (software)"},
    {0x80ull, "power brake"},
    {0x08ull, "hardware slowdown"},
};

size_t colo_health_slowed(colo_health_t *h, colo_device_health_t *out, size_t cap) {
  if (!h || (!h->clocks && !h->links))
    return 0;
  size_t n = 0;
  for (size_t i = 0; i < h->n && n < cap; i++) {
    unsigned long long reasons = 0;
    char *why = out[n].reason;
    size_t len = sizeof out[n].reason, at = 0;
    if (h->clocks && h->clocks(h->dev[i], &reasons) != 0)
      reasons = 0; /* cannot tell: not slowed */
    for (size_t k = 0; k < sizeof SLOWDOWNS / sizeof SLOWDOWNS[0]; k++)
      if ((reasons & SLOWDOWNS[k].bit) && at < len)
        at += (size_t)snprintf(why + at, len - at, "%s%s",
                               at ? ", " : "clocks lowered: ", SLOWDOWNS[k].what);
    char links[160];
    if (h->links && links_erring(h, i, links, sizeof links) && at < len)
      at += (size_t)snprintf(why + at, len - at, "%s%s", at ? "; " : "", links);
    if (at)
      out[n++].index = h->index[i];
  }
  return n;
}

void colo_health_close(colo_health_t *h) {
  if (!h)
    return;
  if (h->events)
    h->event_free(h->events);
  free(h->links);
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
