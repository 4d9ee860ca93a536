#!/usr/bin/env bash
# Packs colo-train, test_cuda, test_cudnn_plan, test_nccl, colod, colo-workerd, coloctl, engine_ops (bench/engine_gpu)
# and the CUDA backend, built here, with the shared libraries they
# need that a bare GPU machine may lack (gRPC, protobuf-c, libuv, OpenBLAS, OpenSSL, …), into
# .gpu-pack/colo-gpu.tar.xz inside the checkout (ignored by git), for a machine that can build
# nothing and fetch nothing: the device tool carries it (carry: [".gpu-pack"]). glibc, libstdc++,
# libgcc and CUDA's own libraries are left to that machine.
#
# It also puts tinyshakespeare.txt into .colo-quickstart/data (ignored), where fetch-data.sh and
# the tests find it on a machine without ../shared: carry that too.
# There:  tar -xJf .gpu-pack/colo-gpu.tar.xz -C /tmp && export COLO_BIN=/tmp/colo-gpu/bin
#         COLO_BENCH_BIN=/tmp/colo-gpu/bin bash bench/engine_gpu/run.sh
# bin/ holds small wrappers that put the packed libraries first on LD_LIBRARY_PATH for colo's
# programs only (the machine's Python and PyTorch keep their own), and CUDA's after them.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$SRC/build-bench"
PROGS="colo-train test_cuda test_cudnn_plan test_nccl colod colo-workerd coloctl engine_ops"
OUT="$SRC/.gpu-pack"
# -march=x86-64-v3 (AVX2, FMA), not the building machine's -march=native: the GPU machine's
# processor is not known here, and every x86-64 host of an H100 has those
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF -DCOLO_NATIVE=OFF \
  -DCMAKE_C_FLAGS=-march=x86-64-v3 >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target $PROGS colo_cuda >/dev/null
[ -f "$BUILD/bin/libcolo_cuda.so" ] || { echo "gpu-pack: no CUDA backend was built (is nvcc there?)" >&2; exit 1; }
STAGE=$(mktemp -d /tmp/colo-gpu-pack-XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
P="$STAGE/colo-gpu"
mkdir -p "$P/bin" "$P/libexec" "$P/lib"
for prog in $PROGS libcolo_cuda.so; do cp "$BUILD/bin/$prog" "$P/libexec/"; done
# every library the three resolve to, but the C runtime, the C++ runtime and CUDA's
ldd "$P"/libexec/* |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so|/cuda' |
  while read -r lib; do cp -L "$lib" "$P/lib/"; done
for prog in $PROGS; do
  cat >"$P/bin/$prog" <<WRAP
#!/bin/sh
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH="\$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:\${LD_LIBRARY_PATH:-}" exec "\$here/libexec/$prog" "\$@"
WRAP
  chmod +x "$P/bin/$prog"
done
# the commit, and "-dirty" where the working tree differed from it: what a result was measured on
(cd "$SRC" && git describe --always --dirty --abbrev=7) >"$P/COMMIT"
mkdir -p "$OUT"
tar -C "$STAGE" -cJf "$OUT/colo-gpu.tar.xz" colo-gpu
echo "gpu-pack: $OUT/colo-gpu.tar.xz ($(du -k "$OUT/colo-gpu.tar.xz" | cut -f1) KiB; $(ls "$P/lib" | wc -l) libraries; commit $(cat "$P/COMMIT"))"
# the training text too, where fetch-data and the tests look for it on a machine without ../shared
bash "$SRC/deploy/fetch-data.sh" >/dev/null
echo "gpu-pack: carry .gpu-pack and .colo-quickstart/data"
