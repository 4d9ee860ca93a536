#!/usr/bin/env bash
# A short look at one change, for a GPU session with little device time (device.sh probe):
#   1. test_cuda in the attention modes named (COLO_PROBE_MODES, "auto cudnn-det cudnn"): its
#      summary, its failures and what it tells (INFO lines);
#   2. engine_ops at GPT-2 124M's shapes (B=8) in those modes: the attention's, the loss's and
#      the optimizer's rows;
#   3. GPT-2 124M in bf16 (T=1024, vocab 50304), 20 steps at each batch of COLO_PROBE_BATCHES
#      ("8 32 64") in each mode: the median step after 5 and its MFU (6N + 6·L·C·T FLOPs a token
#      against 989 TFLOP/s, as run.sh counts), with PyTorch compiled beside them where
#      COLO_PROBE_TORCH=1.
# Its figures are a probe's: run.sh's report is the record.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/bench/lib.sh"
bench_setup colo-train test_cuda engine_ops
OUT=${OUT:-$TMP}
MODES=${COLO_PROBE_MODES:-auto cudnn-det cudnn}
BATCHES=${COLO_PROBE_BATCHES:-8 32 64}
PY=python3
"$PY" -c "import numpy, torch" 2>/dev/null || PY=/usr/bin/python3
export ASAN_OPTIONS=protect_shadow_gap=0

echo "== 1. test_cuda"
for mode in $MODES; do
  rc=0
  COLO_CUDA_ATTENTION=$mode "$BIN/test_cuda" >"$OUT/test_cuda_$mode.log" 2>&1 || rc=$?
  echo "test_cuda (COLO_CUDA_ATTENTION=$mode): rc $rc, $(tail -1 "$OUT/test_cuda_$mode.log")"
  grep -E "^FAIL|^INFO|twice|adamw aligned|rows of 120003" "$OUT/test_cuda_$mode.log" | head -20 || true
done

echo "== 2. engine_ops"
OPS=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 8 --vocab-size 50304)
for mode in $MODES; do
  COLO_CUDA_ATTENTION=$mode timeout 120 "$BIN/engine_ops" --device gpu "${OPS[@]}" \
    >"$OUT/ops_$mode.jsonl" 2>"$OUT/ops_$mode.err" || echo "engine_ops ($mode): rc $?"
  python3 - "$OUT/ops_$mode.jsonl" "$mode" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    name = r.get("op", r.get("name", ""))
    if any(k in name for k in ("attention", "crossentropy", "adamw", "encoder_bwd", "to_act")):
        print("%-10s %-28s %s" % (sys.argv[2], name, {k: v for k, v in r.items() if k not in ("op", "name")}))
PY
done

echo "== 3. GPT-2 124M, bf16"
bench_random_tokens "$PY" "$TMP/gpt2"
row() { # progress-file label
  python3 - "$1" "$2" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
st = [x for x in r if x.get("event") == "step"][5:]
if not st:
    print("%-34s no steps: %s" % (sys.argv[2], [x for x in r if x.get("event") == "error"][-1:])); sys.exit()
ms = sorted(x["ms"] for x in st)[len(st) // 2]
L, C, T, V = 12, 768, 1024, 50304
N = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
tok = st[0]["tokens_per_s"] * st[0]["ms"] / ms
print("%-34s %8.2f ms  %9.0f tok/s  MFU %5.1f%%  peak %.2f GiB" % (sys.argv[2], ms, tok,
      100 * tok * (6 * N + 6 * L * C * T) / 989e12, max(x["memory_bytes"] for x in st) / 2**30))
PY
}
for B in $BATCHES; do
  for mode in $MODES; do
    [ "$mode" = cudnn ] && continue # the atomic backward: its speed is engine_ops' row
    f="$OUT/c124_${mode}_b$B.jsonl"
    COLO_CUDA_ATTENTION=$mode timeout 150 "$BIN/colo-train" train --data-root "$TMP/gpt2" \
      --train-data train.bin --eval-interval 0 --n-layer 12 --n-head 12 --n-embd 768 \
      --block-size 1024 --vocab-size 50304 --batch-size "$B" --steps 20 --lr 1e-4 --device gpu \
      --precision bf16 --quiet --progress "$f" || echo '{"event":"error"}' >>"$f"
    row "$f" "colo $mode B=$B"
  done
  if [ "${COLO_PROBE_TORCH:-0}" = 1 ]; then
    timeout 200 "$PY" "$SRC/bench/engine_gpu/torch_train_gpu.py" --n-layer 12 --n-head 12 \
      --n-embd 768 --block-size 1024 --batch-size "$B" --vocab-size 50304 --steps 20 \
      --warmup-steps 5 --data "$TMP/gpt2/train.bin" --dtype bf16 --compile \
      >"$OUT/torch_b$B.json" 2>"$OUT/torch_b$B.err" || echo "torch B=$B: rc $?"
    cat "$OUT/torch_b$B.json" 2>/dev/null || true
  fi
done
