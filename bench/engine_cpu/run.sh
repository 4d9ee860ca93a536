#!/usr/bin/env bash
# bench/engine_cpu: colo-train against the same GPT-2 (and Llama block) in PyTorch (Debian's python3-torch), side
# by side in one run, same thread count, full training steps (forward, backward, clipping,
# AdamW) on tiny-shakespeare. Reports the median step's tokens/s of each and their ratio, and
# writes bench/results/engine_cpu.md.
#   bash bench/engine_cpu/run.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
export OMP_NUM_THREADS=$THREADS
: >"$TMP/results.jsonl"
# name layers heads width block batch steps warm-up architecture
for cfg in "tiny 4 4 128 64 12 60 10 gpt2" "small 6 6 384 256 8 12 2 gpt2" \
  "tiny-llama 4 4 128 64 12 60 10 llama" "small-llama 6 6 384 256 8 12 2 llama"; do
  read -r name L H C T Bs steps warm arch <<<"$cfg"
  "$CT" train --data-root "$TMP/data" --train-data train.bin --eval-interval 0 --arch "$arch" \
    --n-layer "$L" --n-head "$H" --n-embd "$C" --block-size "$T" --batch-size "$Bs" \
    --steps "$steps" --threads "$THREADS" --quiet --progress "$TMP/colo-$name.jsonl"
  python3 - "$TMP/colo-$name.jsonl" "$warm" "$Bs" "$T" "$name" >>"$TMP/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
ms = sorted(r["ms"] for r in rows[int(sys.argv[2]):])
med = ms[len(ms) // 2]
print(json.dumps({"config": sys.argv[5], "impl": "colo", "median_ms": med,
                  "tokens_per_s": int(sys.argv[3]) * int(sys.argv[4]) / (med / 1e3)}))
PY
  /usr/bin/python3 "$SRC/bench/engine_cpu/torch_train.py" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --block-size "$T" --batch-size "$Bs" --steps "$steps" --warmup-steps "$warm" --threads "$THREADS" \
    --data "$TMP/data/train.bin" --arch "$arch" | python3 -c "import json,sys; r=json.load(sys.stdin); r['config']='$name'; print(json.dumps(r))" >>"$TMP/results.jsonl"
  tail -2 "$TMP/results.jsonl"
done
python3 - "$TMP/results.jsonl" "$THREADS" "$SRC/bench/results/engine_cpu.md" <<'PY'
import json, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, out = sys.argv[2], sys.argv[3]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
torch_v = next(r["torch"] for r in rows if r["impl"] == "pytorch")
shapes = {"tiny": "4 layers, 4 heads, 128 wide, T=64, B=12", "small": "6 layers, 6 heads, 384 wide, T=256, B=8"}
shapes.update({k + "-llama": v + ", llama (MLP %d)" % (384 if k == "tiny" else 1024) for k, v in list(shapes.items())})
targets = {"tiny": 2.0, "small": 1.2, "tiny-llama": 2.0, "small-llama": 1.2}
with open(out, "w") as f:
    f.write("# bench/engine_cpu: colo-train against PyTorch on the CPU\n\n")
    f.write("Measured %s on %s, %s threads for both, fp32, full training steps (forward, backward, "
            "clipping, AdamW), median step after warm-up. PyTorch %s from Debian (eager mode, "
            "the models in tests/engine/torch_gpt2.py: GPT2, and Llama for the -llama rows, "
            "model.arch=llama in colo). Command: `bash bench/engine_cpu/run.sh %s`.\n\n"
            % (datetime.date.today(), cpu, threads, torch_v, threads))
    f.write("| config | shape | colo tokens/s | PyTorch tokens/s | colo ms/step | PyTorch ms/step | ratio | target |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for name in ("tiny", "small", "tiny-llama", "small-llama"):
        c = next(r for r in rows if r["config"] == name and r["impl"] == "colo")
        t = next(r for r in rows if r["config"] == name and r["impl"] == "pytorch")
        ratio = c["tokens_per_s"] / t["tokens_per_s"]
        f.write("| %s | %s | %.0f | %.0f | %.1f | %.1f | **%.2f×** | ≥ %.1f× %s |\n" % (
            name, shapes[name], c["tokens_per_s"], t["tokens_per_s"], c["median_ms"], t["median_ms"],
            ratio, targets[name], "met" if ratio >= targets[name] else "not met"))
        print("%s: colo %.0f tok/s, pytorch %.0f tok/s, ratio %.2f" % (name, c["tokens_per_s"], t["tokens_per_s"], ratio))
print("wrote", out)
PY
