/* Fuzz targets (tests/fuzz/fuzz_*.c): each defines libFuzzer's entry point and its seeds, and
 * runs under libFuzzer (clang -fsanitize=fuzzer, `cmake -DCOLO_FUZZ=ON`) or under driver.c, the
 * deterministic mutator CI runs with AddressSanitizer and UBSan. */
#ifndef COLO_FUZZ_H
#define COLO_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The target's seeds, passed to emit: made from each file of its corpus (file, size), and once
 * from nothing (NULL, 0) for seeds a target makes itself. */
typedef void (*colo_fuzz_emit_fn)(const uint8_t *data, size_t size);
void colo_fuzz_seeds(const uint8_t *file, size_t size, colo_fuzz_emit_fn emit);

/* scratch.c: a directory of this process's, made on first use, and a file written into it (its
 * path, valid until the next call) */
const char *colo_fuzz_dir(void);
const char *colo_fuzz_put(const char *name, const uint8_t *data, size_t size);

#endif
