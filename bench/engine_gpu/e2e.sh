#!/usr/bin/env bash
# The whole system on a GPU machine: colod, colo-workerd finding the GPU through NVML (the real
# library, not the tests' stand-in), and examples/gpt-300m-one-gpu.yaml (ZeRO-3 with automatic
# placement, bf16, recomputation) submitted with coloctl, cut to a few steps; it must succeed
# with checkpoints. From the pack (deploy/gpu-pack.sh), through device.sh:
#   bash bench/engine_gpu/device.sh e2e
# or with programs built here: bash bench/engine_gpu/e2e.sh BIN_DIR OUT_DIR [STEPS].
# COLO_E2E_DRY=1 runs it with two CPU slots and the tinyshakespeare job instead: a check of the
# script where there is no GPU (ctest bench_gpu_e2e_dry).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:?usage: e2e.sh BIN_DIR OUT_DIR [STEPS]}
OUT=${2:?usage: e2e.sh BIN_DIR OUT_DIR [STEPS]}
STEPS=${3:-40}
W=$(mktemp -d /tmp/colo-e2e-XXXXXX)
PORT=${COLO_E2E_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
export COLO_SERVER=127.0.0.1:$PORT
CTL="$BIN/coloctl"
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$W"' EXIT
mkdir -p "$OUT"
if [ "${COLO_E2E_DRY:-0}" = 1 ]; then
  DEV=(--devices cpu --cpu-slots 2) JOB="$SRC/examples/tinyshakespeare.yaml"
else
  DEV=(--devices gpu) JOB="$SRC/examples/gpt-300m-one-gpu.yaml"
fi
bash "$SRC/deploy/fetch-data.sh" "$W/data" >/dev/null
"$BIN/colo-train" prepare --input "$W/data/tinyshakespeare.txt" --out "$W/data/tinyshakespeare" >/dev/null

"$BIN/colod" --listen "$COLO_SERVER" --state-dir "$W/state" >"$W/colod.out" 2>"$OUT/colod.log" &
pids+=($!)
for _ in $(seq 1 100); do grep -q listening "$W/colod.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$W/colod.out" || { echo "e2e: colod did not start" >&2; cat "$OUT/colod.log" >&2; exit 1; }
"$BIN/colo-workerd" --coordinator "$COLO_SERVER" --name e2e-node "${DEV[@]}" --run-dir "$W/run" \
  --data-root "$W/data" --checkpoint-root "$W/ckpt" --colo-train "$BIN/colo-train" \
  >"$OUT/workerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q registered "$OUT/workerd.log" 2>/dev/null && break; sleep 0.1; done
grep -q registered "$OUT/workerd.log" || { echo "e2e: colo-workerd did not register" >&2; cat "$OUT/workerd.log" >&2; exit 1; }
echo "== hosts"
"$CTL" hosts
I=$((STEPS / 2))
ID=$("$CTL" submit "$JOB" --set "train.steps=$STEPS" --set "optimizer.warmup_steps=$((STEPS / 10))" \
  --set "train.eval_interval=$I" --set "checkpoint.interval=$I")
echo "== job $ID: $(basename "$JOB"), $STEPS steps"
"$CTL" watch "$ID"
"$CTL" status "$ID"
STATE=$("$CTL" status "$ID" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
echo "== its curve, checkpoints and the end of rank 0's log"
"$CTL" history "$ID" --rows 4 || true
"$CTL" checkpoints "$ID" || true
"$CTL" logs "$ID" >"$OUT/rank0.log" || true
tail -6 "$OUT/rank0.log"
[ "$STATE" = succeeded ] || { echo "e2e: job $ID ended $STATE" >&2; exit 1; }
echo "e2e: job $ID succeeded"
