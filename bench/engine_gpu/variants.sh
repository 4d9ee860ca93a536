#!/usr/bin/env bash
# Kernel variants side by side on one GPU, in one device call: the CUDA backend
# (libcolo_cuda.so) built from several revisions of worker/engine, each loaded in turn through
# COLO_CUDA_LIBRARY by the same test_cuda and engine_ops. Session 12 chose the attention
# kernels this way (bench/results/engine_gpu_attention.md).
#
#   here:    bash deploy/gpu-pack.sh
#            bash bench/engine_gpu/variants.sh build base=HEAD~1 new=.   # '.': the working tree
#   device:  bash bench/engine_gpu/variants.sh run [OPS_REGEX]          # carry .gpu-pack
#
# build compiles each revision's backend for sm_90 (nvcc, as CMake does) into
# .gpu-pack/variants/NAME.so. run unpacks the pack, and for each variant runs test_cuda (its
# last line and any FAIL) and engine_ops at the 124M shapes, B=8 and B=32, keeping the
# operations OPS_REGEX matches (default: attention). It prints a table and writes it to
# $OUT/variants.md where OUT is set (the device tool's), else to bench/results/variants.md.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
VDIR="$SRC/.gpu-pack/variants"
what=${1:-}
[ $# -gt 0 ] && shift
case "$what" in
build)
  [ $# -gt 0 ] || { echo "variants.sh build: give NAME=REV pairs (REV '.' is the working tree)" >&2; exit 2; }
  NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
  [ -x "$NVCC" ] || { echo "variants.sh: no nvcc at $NVCC" >&2; exit 1; }
  mkdir -p "$VDIR"
  : >"$VDIR/list"
  for pair in "$@"; do
    name=${pair%%=*} rev=${pair#*=}
    [[ "$name" =~ ^[A-Za-z0-9_-]+$ && "$pair" == *=* ]] ||
      { echo "variants.sh build: '$pair' is not NAME=REV (NAME: letters, digits, - and _)" >&2; exit 2; }
    tree=$(mktemp -d /tmp/colo-variant-XXXXXX)
    if [ "$rev" = . ]; then
      cp -r "$SRC/worker/engine" "$tree/engine"
    else
      git -C "$SRC" archive "$rev" worker/engine | tar -x -C "$tree" ||
        { echo "variants.sh build: no revision '$rev'" >&2; rm -rf "$tree"; exit 1; }
      mv "$tree/worker/engine" "$tree/engine"
    fi
    objs=()
    for cu in "$tree"/engine/backend/*.cu; do
      "$NVCC" -O3 -DNDEBUG -std=c++17 -DCOLO_VERSION='"variant"' -Xcompiler=-fPIC \
        -Xcompiler=-fvisibility=hidden --generate-code=arch=compute_90,code=sm_90 \
        -I"$tree/engine" -c "$cu" -o "${cu%.cu}.o"
      objs+=("${cu%.cu}.o")
    done
    g++ -shared -fPIC -Wl,-soname,libcolo_cuda.so -o "$VDIR/$name.so" "${objs[@]}" \
      -L/usr/local/cuda/lib64 -L/usr/local/cuda/lib -lcublasLt -lcublas -lcudart
    desc=$([ "$rev" = . ] && echo "working tree on $(git -C "$SRC" describe --always --dirty --abbrev=7)" ||
      git -C "$SRC" log -1 --format='%h %s' "$rev" | cut -c1-100)
    printf '%s\t%s\n' "$name" "$desc" >>"$VDIR/list"
    rm -rf "$tree"
    echo "variants.sh: built $name ($desc)"
  done
  echo "variants.sh: carry .gpu-pack; on the device: bash bench/engine_gpu/variants.sh run"
  ;;
run)
  ops=${1:-attention}
  [ -f "$SRC/.gpu-pack/colo-gpu.tar.xz" ] && [ -s "$VDIR/list" ] ||
    { echo "variants.sh run: no pack or no variants: run deploy/gpu-pack.sh and variants.sh build here, and carry .gpu-pack" >&2; exit 1; }
  RUN=$(mktemp -d /tmp/colo-variants-XXXXXX)
  tar -xJf "$SRC/.gpu-pack/colo-gpu.tar.xz" -C "$RUN"
  BIN="$RUN/colo-gpu/bin"
  SHAPE=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --vocab-size 50304)
  REPORT=${OUT:-$SRC/bench/results}/variants.md
  mkdir -p "$(dirname "$REPORT")"
  {
    echo "# Kernel variants: engine_ops at the 124M shapes (ms a call), test_cuda"
    echo
    echo "On $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'an unknown GPU'), $(date -u +%Y-%m-%d), \`bash bench/engine_gpu/variants.sh run '$ops'\`."
    echo
    echo "| variant | built from | test_cuda | operation | B=8 ms | B=32 ms |"
    echo "|---|---|---|---|---|---|"
  } >"$REPORT"
  while IFS=$'\t' read -r name desc; do
    lib="$VDIR/$name.so"
    rc=0
    COLO_CUDA_LIBRARY="$lib" timeout 120 "$BIN/test_cuda" >"$RUN/$name.test.log" 2>&1 || rc=$?
    tests="$(tail -1 "$RUN/$name.test.log") (rc $rc)"
    grep FAIL "$RUN/$name.test.log" | head -3 || true
    for b in 8 32; do
      COLO_CUDA_LIBRARY="$lib" timeout 120 "$BIN/engine_ops" --device gpu "${SHAPE[@]}" --batch-size $b \
        >"$RUN/$name.b$b.jsonl" 2>"$RUN/$name.b$b.err" || echo "$name B=$b: engine_ops failed: $(tail -1 "$RUN/$name.b$b.err")"
    done
    python3 - "$RUN/$name.b8.jsonl" "$RUN/$name.b32.jsonl" "$ops" "$name" "$desc" "$tests" >>"$REPORT" <<'PY'
import json, re, sys
def ops(path):
    try:
        return {r["op"]: r["ms"] for r in map(json.loads, open(path)) if "op" in r}
    except (OSError, ValueError):
        return {}
b8, b32 = ops(sys.argv[1]), ops(sys.argv[2])
name, desc, tests = sys.argv[4:7]
for op in [o for o in b8 if re.search(sys.argv[3], o)] or ["(none matched)"]:
    f = lambda d: "%.3f" % d[op] if op in d else ""
    print("| %s | %s | %s | %s | %s | %s |" % (name, desc.replace("|", "/"), tests, op, f(b8), f(b32)))
PY
    echo "variants.sh: $name done ($tests)"
  done <"$VDIR/list"
  cat "$REPORT"
  ;;
*)
  echo "usage: variants.sh build NAME=REV [NAME=REV ...] | run [OPS_REGEX]" >&2
  exit 2
  ;;
esac
