#!/usr/bin/env bash
# LoRA in the parallel layouts, side by side in one run: the same model (GPT-2 124M's blocks: 12
# layers, 12 heads, 768 wide; block 256, vocabulary 256), from the same weights (one step of
# training), STEPS steps of a batch of 4 with bf16 activations (emulated on the CPU: its memory,
# not its speed, is the GPU's) and recomputation, rank RANK on every product, on one rank, on 2
# data-parallel ranks (the frozen model whole on each, half the batch each), on 2 tensor-parallel
# ranks with sequence parallelism, on 2 pipeline stages (2 micro-batches), and on tp=2 × pp=2.
# Reported per run: rank 0's memory-pool peak (the progress records' `memory_bytes`) and its
# ratio to one rank's, the median step time after the first, and the last loss (the layouts
# train the same adapters: checked within 1e-3). Writes bench/results/engine_cpu_lora_layouts.md.
#   bash bench/engine_cpu/lora_layouts.sh [STEPS] [RANK]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${1:-3}
RANK=${2:-16}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
bench_gpt2_blocks
"$CT" train "${M[@]}" --batch-size 4 --threads "$(nproc)" --steps 1 --ckpt-dir "$TMP/data/base"
L=(--steps "$STEPS" --init-from base/step_00000001 --precision bf16 --recompute
  --lora-rank "$RANK" --lora-alpha $((2 * RANK)))
run() { # name, flags...
  local name=$1
  shift
  "$CT" train "${M[@]}" "${L[@]}" "$@" --progress "$TMP/$name.jsonl"
}
run one --batch-size 4 --threads "$(nproc)"
run dp2 --batch-size 2 --nproc 2 --dp 2 --threads 1
run tp2 --batch-size 4 --nproc 2 --tp 2 --sp true --threads 1
run pp2 --batch-size 4 --nproc 2 --pp 2 --micro-batches 2 --threads 1
run tp2pp2 --batch-size 4 --nproc 4 --tp 2 --pp 2 --micro-batches 2 --threads 1
python3 - "$TMP" "$STEPS" "$RANK" "$(nproc)" "$SRC/bench/results/engine_cpu_lora_layouts.md" <<'PY'
import datetime, json, os, statistics, sys
tmp, steps, rank, cores, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def run(name):
    st = [r for r in map(json.loads, open(os.path.join(tmp, name + ".jsonl"))) if r["event"] == "step"]
    return {"peak": max(r["memory_bytes"] for r in st), "ms": statistics.median(r["ms"] for r in st[1:]),
            "loss": st[-1]["loss"]}
runs = [("one", "1 rank"), ("dp2", "2 data-parallel ranks, the model whole on each"),
        ("tp2", "2 tensor-parallel ranks, sequence parallel"), ("pp2", "2 pipeline stages, 2 micro-batches"),
        ("tp2pp2", "tp=2 x pp=2 (4 ranks)")]
r = {k: run(k) for k, _ in runs}
for k, _ in runs:
    rel = abs(r[k]["loss"] - r["one"]["loss"]) / r["one"]["loss"]
    if rel > 1e-3:
        sys.exit("%s trained otherwise: last loss %r against %r" % (k, r[k]["loss"], r["one"]["loss"]))
mib = lambda b: b / 2**20
lines = ["# LoRA in the parallel layouts (CPU engine)", "",
         "`bash bench/engine_cpu/lora_layouts.sh %d %s`, %s UTC, on %s cores: GPT-2 124M's blocks (12 "
         "layers, 12 heads, 768 wide), block 256, vocabulary 256, a batch of 4, %d steps from the same "
         "weights, bf16 activations (emulated) with recomputation, LoRA of rank %s on every product. "
         "Peak: rank 0's memory pool (`memory_bytes`); time: the median step after the first (the "
         "CPU's, with more ranks than cores for 4: not a GPU's). Each layout's last loss is one rank's "
         "within 1e-3 (checked)." %
         (steps, rank, datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), cores, steps, rank), "",
         "| layout | rank 0's peak MiB | / 1 rank | ms a step | last loss |", "|---|---|---|---|---|"]
for k, what in runs:
    lines.append("| %s | %.1f | %s | %.0f | %.6f |" % (what, mib(r[k]["peak"]),
                 "" if k == "one" else "%.2f" % (r[k]["peak"] / r["one"]["peak"]), r[k]["ms"], r[k]["loss"]))
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
