#!/usr/bin/env bash
# The weights' moving average (train.ema_decay) against the weights themselves, side by side in
# one invocation: learn.sh's model (4 layers, 128 wide, block 64, batch 12) on tiny-shakespeare
# for 1,000 steps at a constant learning rate (1e-3 after 100 warm-up steps: DeepSeek-V3 kept its
# average to see early what a decay would give), once with --ema-decay 0.99 and once without.
# Every 250 steps the run evaluates on the same 100 validation batches the weights and, in their
# place, their average; the two runs' checkpoints must hold the same weights bit for bit (the
# average only reads them, and its evaluations put them back), the last evaluation of the
# average must be eval --ema's of the last checkpoint, and the step times say what keeping it
# costs.
# Writes bench/results/engine_cpu_ema.md.
#   bash bench/engine_cpu/ema.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
start=$(date +%s)
for run in ema plain; do
  "$CT" train --data-root "$TMP/data" --train-data train.bin --val-data val.bin \
    --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps 1000 \
    --lr 1e-3 --warmup 100 --schedule constant --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 \
    --eval-interval 250 --eval-batches 100 --threads "$THREADS" --ckpt-dir "$TMP/$run" \
    --ckpt-interval 250 \
    --ckpt-keep 4 $([ "$run" = ema ] && echo --ema-decay 0.99) --quiet \
    --progress "$TMP/$run.jsonl"
done
"$CT" eval --checkpoint "$TMP/ema/step_00001000" --data "$TMP/data/val.bin" --batches 100 \
  --batch-size 12 --json --ema >"$TMP/eval-ema.json"
for s in 250 500 750 1000; do
  d=$(printf 'step_%08d' "$s")
  "$CT" export --checkpoint "$TMP/ema/$d" --out "$TMP/ema-$s.safetensors" >/dev/null
  "$CT" export --checkpoint "$TMP/plain/$d" --out "$TMP/plain-$s.safetensors" >/dev/null
  cmp -s "$TMP/ema-$s.safetensors" "$TMP/plain-$s.safetensors" && echo same >"$TMP/same-$s" ||
    echo differ >"$TMP/same-$s"
done
secs=$(($(date +%s) - start))
python3 - "$TMP" "$secs" "$THREADS" "$SRC/bench/results/engine_cpu_ema.md" <<'PY'
import json, sys, datetime, statistics
tmp, secs, threads, out = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
ms = {r: statistics.median(x["ms"] for x in map(json.loads, open("%s/%s.jsonl" % (tmp, r)))
                           if x["event"] == "step" and x["step"] > 10) for r in ("ema", "plain")}
with open(out, "w") as f:
    f.write("# The weights' moving average (train.ema_decay 0.99) against the weights, tiny-shakespeare\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/ema.sh`, %s s in all, both runs "
            "in one invocation. The 4-layer, 128-wide model of `learn.sh` (block 64, batch 12), "
            "1,000 steps at a constant learning rate of 1e-3 after 100 warm-up steps; each "
            "evaluation (every 250 steps) of the weights and, in their place, of the average on the same 100 validation batches.\n\n" % (datetime.date.today(), cpu, threads, secs))
    f.write("| step | val loss, the weights | val loss, their moving average | "
            "average / weights | weights equal to the run without the average |\n|---|---|---|---|---|\n")
    ev = {r["step"]: r for r in map(json.loads, open("%s/ema.jsonl" % tmp)) if r["event"] == "eval"}
    for s in (250, 500, 750, 1000):
        w, e = ev[s]["val_loss"], ev[s]["ema_val_loss"]
        f.write("| %d | %.4f | %.4f | %.3f | %s |\n" % (s, w, e, e / w, open("%s/same-%d" % (tmp, s)).read().strip()))
    f.write("\n- `colo-train eval --ema` of the step-1000 checkpoint on the same batches: %.4f.\n"
            % json.load(open("%s/eval-ema.json" % tmp))["loss"])
    f.write("- Median step time over steps 11 to 1000: %.2f ms with the average kept, %.2f ms "
            "without (%.3fx): the average is one pass over the parameters in host memory a step.\n"
            % (ms["ema"], ms["plain"], ms["ema"] / ms["plain"]))
print(open(out).read())
PY
