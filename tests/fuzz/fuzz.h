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

#endif
