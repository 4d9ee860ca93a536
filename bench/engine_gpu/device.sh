#!/usr/bin/env bash
# The GPU session's runs, on the GPU machine (the device tool), from the pack that
# deploy/gpu-pack.sh made here (carry: [".gpu-pack", ".colo-quickstart/data"]):
#   bash bench/engine_gpu/device.sh tests   # test_cuda (four times: the defaults, the attention
#                                           # with synchronous loads, GELU as a pass of its own
#                                           # with colo's whole attention, cuDNN's whole
#                                           # attention), test_cudnn_plan, test_nccl,
#                                           # then integration_gpu_train
#   bash bench/engine_gpu/device.sh bench   # bench/engine_gpu/run.sh
#   bash bench/engine_gpu/device.sh e2e     # bench/engine_gpu/e2e.sh: colod, colo-workerd, a GPU job
#   bash bench/engine_gpu/device.sh placement  # bench/placement/run.sh: the chunk cache on and off
#   bash bench/engine_gpu/device.sh qlora   # bench/engine_cpu/qlora.sh on the GPU: QLoRA against
#                                           # LoRA, memory and step time
#   bash bench/engine_gpu/device.sh probe   # bench/engine_gpu/probe.sh: a short look at the
#                                           # attention modes, in the tests, alone and in the step
# Each writes its logs and results into $OUT (the device tool brings them back), with
# nvidia-smi's view of the machine.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$SRC/bench/results}
what=${1:-}
case "$what" in tests | bench | e2e | placement | qlora | probe) ;; *) echo "usage: device.sh tests|bench|e2e|placement|qlora|probe" >&2 && exit 2 ;; esac
[ -f "$SRC/.gpu-pack/colo-gpu.tar.xz" ] || { echo "device.sh: no .gpu-pack/colo-gpu.tar.xz: run deploy/gpu-pack.sh and carry .gpu-pack" >&2; exit 1; }
RUN=$(mktemp -d /tmp/colo-gpu-run-XXXXXX)
tar -xJf "$SRC/.gpu-pack/colo-gpu.tar.xz" -C "$RUN"
BIN="$RUN/colo-gpu/bin"
echo "pack built from commit $(cat "$RUN/colo-gpu/COMMIT"); checkout at $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')"
mkdir -p "$OUT"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
# cuDNN for COLO_CUDA_ATTENTION=cudnn: the machine's own, else a Python wheel's (nvidia-cudnn)
if [ -z "${COLO_CUDNN_LIBRARY:-}" ] && ! ldconfig -p | grep -q 'libcudnn.so.9 ' &&
  [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ] && [ ! -e /usr/local/cuda/lib/libcudnn.so.9 ]; then
  wheel=$(python3 -c 'import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], "lib", "libcudnn.so.9"))' 2>/dev/null || true)
  [ -n "$wheel" ] && [ -e "$wheel" ] && export COLO_CUDNN_LIBRARY="$wheel"
fi
echo "cuDNN: ${COLO_CUDNN_LIBRARY:-libcudnn.so.9 from the library path}"
if [ "$what" = probe ]; then
  rc=0
  COLO_BENCH_BIN="$BIN" bash "$SRC/bench/engine_gpu/probe.sh" 2>&1 | tee "$OUT/probe.log" || rc=$?
  echo "probe: rc $rc"
elif [ "$what" = qlora ]; then
  rc=0
  COLO_BENCH_DEVICE=gpu COLO_BENCH_BIN="$BIN" bash "$SRC/bench/engine_cpu/qlora.sh" 5 2>&1 |
    tee "$OUT/qlora.log" | tail -12 || rc=$?
  cp "$SRC/bench/results/engine_gpu_qlora.md" "$OUT/" 2>/dev/null || true
  echo "qlora: rc $rc"
elif [ "$what" = placement ]; then
  rc=0
  COLO_BENCH_BIN="$BIN" bash "$SRC/bench/placement/run.sh" 2>&1 | tee "$OUT/placement.log" | tail -15 || rc=$?
  cp "$SRC/bench/results/placement.md" "$OUT/" 2>/dev/null || true
  echo "placement: rc $rc"
elif [ "$what" = e2e ]; then
  rc=0
  bash "$SRC/bench/engine_gpu/e2e.sh" "$BIN" "$OUT" 2>&1 | tee "$OUT/e2e.log" || rc=$?
  echo "e2e: rc $rc"
elif [ "$what" = tests ]; then
  rc=0
  "$BIN/test_cuda" >"$OUT/test_cuda.log" 2>&1 || rc=$?
  tail -3 "$OUT/test_cuda.log"
  grep FAIL "$OUT/test_cuda.log" | head -20 || true
  echo "test_cuda: rc $rc"
  rc=0 # again with the fused attention loading each tile before it works on it
  COLO_CUDA_ATTENTION=flash "$BIN/test_cuda" >"$OUT/test_cuda_flash_sync.log" 2>&1 || rc=$?
  tail -1 "$OUT/test_cuda_flash_sync.log"
  grep FAIL "$OUT/test_cuda_flash_sync.log" | head -20 || true
  echo "test_cuda (COLO_CUDA_ATTENTION=flash): rc $rc"
  rc=0 # and with the MLP's GELU as a pass of its own, and colo's attention forward everywhere
  COLO_CUDA_GELU_FUSION=0 COLO_CUDA_ATTENTION=flash-async "$BIN/test_cuda" >"$OUT/test_cuda_gelu_pair.log" 2>&1 || rc=$?
  tail -1 "$OUT/test_cuda_gelu_pair.log"
  grep FAIL "$OUT/test_cuda_gelu_pair.log" | head -20 || true
  echo "test_cuda (COLO_CUDA_GELU_FUSION=0 COLO_CUDA_ATTENTION=flash-async): rc $rc"
  rc=0 # and with cuDNN's fused attention, after its plans offline and cuDNN's view of this GPU
  "$BIN/test_cudnn_plan" >"$OUT/test_cudnn_plan.log" 2>&1 || rc=$?
  tail -1 "$OUT/test_cudnn_plan.log"
  echo "test_cudnn_plan: rc $rc"
  "$BIN/test_cudnn_plan" --write-devprop "$OUT/cudnn_devprop_gpu.json" || true
  rc=0
  COLO_CUDA_ATTENTION=cudnn "$BIN/test_cuda" >"$OUT/test_cuda_cudnn.log" 2>&1 || rc=$?
  tail -1 "$OUT/test_cuda_cudnn.log"
  grep -E "FAIL|cuDNN" "$OUT/test_cuda_cudnn.log" | head -20 || true
  echo "test_cuda (COLO_CUDA_ATTENTION=cudnn): rc $rc"
  rc=0
  "$BIN/test_nccl" >"$OUT/test_nccl.log" 2>&1 || rc=$?
  tail -3 "$OUT/test_nccl.log"
  echo "test_nccl: rc $rc"
  rc=0
  COLO_BIN="$BIN" COLO_SRC="$SRC" bash "$SRC/tests/integration/test_gpu_train.sh" >"$OUT/gpu_train.log" 2>&1 || rc=$?
  grep -v '^step\|^checkpoint' "$OUT/gpu_train.log" | tail -15
  echo "integration_gpu_train: rc $rc"
else
  # under the device's 600 s a command: a report comes back whatever did not fit
  COLO_BENCH_BUDGET_S=${COLO_BENCH_BUDGET_S:-480} COLO_BENCH_BIN="$BIN" \
    COLO_BENCH_COMMIT="$(cat "$RUN/colo-gpu/COMMIT")" \
    bash "$SRC/bench/engine_gpu/run.sh" 2>&1 | tee "$OUT/bench.log" | tail -40 || echo "run.sh: rc $?"
  cp "$SRC/bench/results/engine_gpu.md" "$SRC/bench/results/engine_gpu_quick.md" \
    "$SRC/bench/results/engine_gpu_tests.log" "$OUT/" 2>/dev/null || true
fi
