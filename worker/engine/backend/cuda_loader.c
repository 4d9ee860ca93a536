/* colo_backend_cuda: loads the CUDA backend (libcolo_cuda.so) when a run asks for a GPU.
 *
 * The backend is a shared library of its own so that a CPU run never maps the CUDA runtime and
 * cuBLAS (over half a gigabyte, seconds of start-up under the sanitizers). It is looked for in
 * COLO_CUDA_LIBRARY, then beside the running program, then on the loader's path. */
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

#ifndef COLO_HAVE_CUDA
#define COLO_HAVE_CUDA 0
#endif

typedef const colo_backend_t *(*open_fn)(int ordinal, int math, char *err, size_t errlen);

int colo_backend_cuda_built(void) {
  return COLO_HAVE_CUDA;
}

int colo_backend_cuda_emulated(void) {
  const char *e = getenv("COLO_CUDA_EMULATE");
  return e && !strcmp(e, "1");
}

static void *load(char *why, size_t whylen) {
  const char *env = getenv("COLO_CUDA_LIBRARY");
  if (env && env[0]) {
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!h)
      snprintf(why, whylen, "COLO_CUDA_LIBRARY=%s: %s", env, dlerror());
    return h;
  }
  char exe[PATH_MAX], path[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(path, sizeof path, "%s/libcolo_cuda.so", exe);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h)
        return h;
      if (access(path, F_OK) == 0) { /* there, but it did not load: that is the reason */
        snprintf(why, whylen, "%s", dlerror());
        return NULL;
      }
    }
  }
  void *h = dlopen("libcolo_cuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    snprintf(why, whylen, "%s", dlerror());
  return h;
}

const colo_backend_t *colo_backend_cuda(int ordinal, int math, char *err, size_t errlen) {
  static open_fn open_backend;
  if (colo_backend_cuda_emulated()) { /* the CPU dressed as a GPU: for tests (cpu_device.c) */
    if (ordinal < 0) {
      snprintf(err, errlen, "CUDA device %d does not exist", ordinal);
      return NULL;
    }
    return colo_backend_cpu_device(colo_math_dtype(math)); /* as many GPUs as asked for */
  }
  if (!COLO_HAVE_CUDA) {
    snprintf(err, errlen,
             "this colo-train was built without the CUDA backend (no nvcc was found, or it was "
             "configured with -DCOLO_CUDA=OFF)");
    return NULL;
  }
  if (!open_backend) {
    char why[512] = "";
    void *h = load(why, sizeof why);
    if (!h) {
      snprintf(err, errlen, "the CUDA backend library did not load: %s", why);
      return NULL;
    }
    open_backend = (open_fn)(uintptr_t)dlsym(h, "colo_backend_cuda_open");
    if (!open_backend) {
      snprintf(err, errlen, "the CUDA backend library has no colo_backend_cuda_open: %s",
               dlerror());
      dlclose(h);
      return NULL;
    }
  }
  return open_backend(ordinal, math, err, errlen);
}
