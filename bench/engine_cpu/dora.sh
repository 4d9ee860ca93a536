#!/usr/bin/env bash
# What DoRA costs over LoRA, side by side in one run: the same model (GPT-2 124M's blocks: 12
# layers, 12 heads, 768 wide; block 256, vocabulary 256), from the same weights (one step of
# training), STEPS steps of a batch of 4 with bf16 activations (emulated on the CPU: its memory,
# not its speed, is the GPU's), rank RANK on every product, with recomputation and without, LoRA
# and DoRA (--lora-dora true). Reported per run: the memory-pool peak (the progress records'
# `memory_bytes`), the median step time after the first, and DoRA's ratio to LoRA's for each.
# Writes bench/results/engine_cpu_dora.md.
#   bash bench/engine_cpu/dora.sh [STEPS] [RANK]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${1:-4}
RANK=${2:-16}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
bench_gpt2_blocks --threads "$(nproc)"
"$CT" train "${M[@]}" --batch-size 4 --steps 1 --ckpt-dir "$TMP/data/base"
L=(--batch-size 4 --steps "$STEPS" --init-from base/step_00000001 --precision bf16
  --lora-rank "$RANK" --lora-alpha $((2 * RANK)))
for r in "" --recompute; do
  for d in false true; do
    "$CT" train "${M[@]}" "${L[@]}" $r --lora-dora $d --progress "$TMP/${r:-plain}-$d.jsonl"
  done
done
python3 - "$TMP" "$STEPS" "$RANK" "$(nproc)" "$SRC/bench/results/engine_cpu_dora.md" <<'PY'
import datetime, json, os, statistics, sys
tmp, steps, rank, cores, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def run(name):
    st = [r for r in map(json.loads, open(os.path.join(tmp, name + ".jsonl"))) if r["event"] == "step"]
    return max(r["memory_bytes"] for r in st) / 2**20, statistics.median(r["ms"] for r in st[1:])
lines = ["# DoRA against LoRA (CPU engine)", "",
         "`bash bench/engine_cpu/dora.sh %d %s`, %s UTC, on %s cores: GPT-2 124M's blocks (12 layers, "
         "12 heads, 768 wide), block 256, vocabulary 256, a batch of 4, %d steps from the same weights, "
         "bf16 activations (emulated), rank %s on every product. Peak: the memory pool "
         "(`memory_bytes`); time: the median step after the first (the CPU's: not a GPU's)." %
         (steps, rank, datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), cores, steps, rank), "",
         "| activations | LoRA peak MiB | DoRA peak MiB | DoRA / LoRA | LoRA ms a step | DoRA ms a step | DoRA / LoRA |",
         "|---|---|---|---|---|---|---|"]
for r, what in (("plain", "all kept"), ("--recompute", "recomputed")):
    (lp, lt), (dp, dt) = run(r + "-false"), run(r + "-true")
    lines.append("| %s | %.1f | %.1f | %.2f | %.0f | %.0f | %.2f |" % (what, lp, dp, dp / lp, lt, dt, dt / lt))
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
