/* cuDNN's fused attention (backend/cuda_cudnn.cu) planned without a GPU: for each shape and
 * storage type, the forward's and the backward's operation graphs are handed to cuDNN for an
 * H100 described by its properties (tests/data/cudnn_devprop_h100.json), and an engine must take
 * each graph and compile its kernels. A graph cuDNN's engines do not recognise as attention (an
 * operation missing, a transposed view wrong, a tensor of the wrong type) fails here, with
 * cuDNN's own words, on any machine with cuDNN installed; CI included. What only a GPU can show,
 * that the kernels compute the attention, is test_cuda's under COLO_CUDA_ATTENTION=cudnn.
 *
 * The properties are an H100 SXM5 80GB's published figures in the form cuDNN 9.19 reads (132
 * SMs, 50 MiB of L2, 227 KiB of shared memory a block may opt into, 1980 MHz, PCI id 0x2330;
 * deviceVer 900 is cuDNN's name for sm_90). `test_cudnn_plan --write-devprop FILE`, run on a GPU,
 * writes cuDNN's own description of that GPU, to check them against or replace them.
 *
 * Where no NVIDIA driver is installed cuDNN still needs libcuda.so.1 to be loadable: the
 * toolkit's stub (which answers every call with "this is a stub") is loaded in its place, so
 * that every step runs but the last, loading the compiled kernels onto a device. Exit 77
 * (skipped, one line why) where cuDNN or the stub is missing. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda_common.cuh"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = (char *)malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s)
    s[n] = 0;
  fclose(f);
  return s;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write-devprop")) {
    static char json[16384];
    char err[256];
    if (!cudnn_devprop_json(json, sizeof json, err, sizeof err)) {
      fprintf(stderr, "test_cudnn_plan: %s\n", err);
      return 1;
    }
    FILE *f = fopen(argv[2], "w");
    if (!f || fputs(json, f) < 0 || fclose(f)) {
      perror(argv[2]);
      return 1;
    }
    printf("wrote %s\n", argv[2]);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: test_cudnn_plan [--write-devprop FILE]\n");
    return 2;
  }
  if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) &&
      !dlopen(COLO_CUDA_STUB, RTLD_NOW | RTLD_GLOBAL)) {
    printf("SKIP: no libcuda.so.1 and no stub at %s\n", COLO_CUDA_STUB);
    return 77;
  }
  void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  const char *env = getenv("COLO_CUDNN_LIBRARY");
  if (!lib && !(env && *env)) {
    printf("SKIP: cuDNN 9 is not installed (no libcudnn.so.9; COLO_CUDNN_LIBRARY may name one)\n");
    return 77;
  }
  char *devprop = slurp(COLO_SOURCE_DIR "/tests/data/cudnn_devprop_h100.json");
  if (!devprop) {
    perror(COLO_SOURCE_DIR "/tests/data/cudnn_devprop_h100.json");
    return 1;
  }
  struct {
    colo_dtype_t t;
    int B, T, C, NH;
  } cases[] = {
      {COLO_DTYPE_BF16, 8, 1024, 768, 12}, /* GPT-2 124M at bench/engine_gpu's batch */
      {COLO_DTYPE_BF16, 2, 100, 128, 2},   /* test_cuda's shapes: head sizes 64, 32, 128, 24 */
      {COLO_DTYPE_BF16, 3, 64, 64, 2},     /* with sequences that end inside a tile */
      {COLO_DTYPE_BF16, 1, 130, 256, 2},   {COLO_DTYPE_BF16, 4, 64, 96, 4},
      {COLO_DTYPE_F16, 8, 1024, 768, 12},  {COLO_DTYPE_F16, 2, 100, 128, 2},
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char why[640];
    int ok = cudnn_attention_plan_offline(devprop, cases[i].t, cases[i].B, cases[i].T, cases[i].C,
                                          cases[i].NH, why, sizeof why);
    printf("%s %s B %d T %d, %d heads of %d: %s\n", ok ? "PASS" : "FAIL",
           cases[i].t == COLO_DTYPE_BF16 ? "bf16" : "fp16", cases[i].B, cases[i].T, cases[i].NH,
           cases[i].C / cases[i].NH, why);
    failures += !ok;
  }
  /* a case that is not cuDNN's (a head size its kernels do not take) is refused, not planned */
  char why[640];
  int ok = cudnn_attention_plan_offline(devprop, COLO_DTYPE_BF16, 2, 64, 40, 4, why, sizeof why);
  printf("%s head size 10 refused: %s\n", ok ? "FAIL" : "PASS", why);
  failures += ok;
  free(devprop);
  printf("%d failed\n", failures);
  return failures ? 1 : 0;
}
