#!/usr/bin/env bash
# bench/engine_cpu/sliding_window.sh: what a sliding window of attention (model.sliding_window,
# Mistral 7B v0.1's) saves, in colo and in PyTorch, side by side in one run: Llama training steps
# on tiny-shakespeare (6 layers, 6 heads, 384 wide) at T = 1024 and T = 2048, attending every
# earlier key and then a window of 128. PyTorch runs the same block (tests/engine/torch_gpt2.py)
# with the window as an explicit mask (torch_gpt2.slide), as the correctness tests do: no fused
# kernel takes such a mask on the CPU. Writes bench/results/engine_cpu_sliding_window.md.
#   bash bench/engine_cpu/sliding_window.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
export OMP_NUM_THREADS=$THREADS
W=128
: >"$TMP/results.jsonl"
# name block batch steps warm-up
for cfg in "T1024 1024 2 8 2" "T2048 2048 1 8 2"; do
  read -r name T Bs steps warm <<<"$cfg"
  for win in 0 $W; do
    extra=()
    [ "$win" != 0 ] && extra=(--sliding-window "$win")
    "$CT" train --data-root "$TMP/data" --train-data train.bin --eval-interval 0 --arch llama \
      --n-layer 6 --n-head 6 --n-embd 384 --block-size "$T" --batch-size "$Bs" \
      --steps "$steps" --threads "$THREADS" --quiet --progress "$TMP/colo-$name-$win.jsonl" "${extra[@]}"
    bench_colo_row "$TMP/colo-$name-$win.jsonl" "$warm" $((Bs * T)) config="$name" window="$win" \
      >>"$TMP/results.jsonl"
    bench_torch_row config="$name" window="$win" -- --arch llama --n-layer 6 --n-head 6 \
      --n-embd 384 --block-size "$T" --batch-size "$Bs" --steps "$steps" --warmup-steps "$warm" \
      "${extra[@]}" >>"$TMP/results.jsonl"
    tail -2 "$TMP/results.jsonl"
  done
done
python3 - "$TMP/results.jsonl" "$THREADS" "$SRC/bench/results/engine_cpu_sliding_window.md" "$W" <<'PY'
import json, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, out, W = sys.argv[2], sys.argv[3], int(sys.argv[4])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
torch_v = next(r["torch"] for r in rows if r["impl"] == "pytorch")
shapes = {"T1024": "T=1024, B=2", "T2048": "T=2048, B=1"}
get = lambda n, impl, w: next(r for r in rows if r["config"] == n and r["impl"] == impl and r["window"] == w)
with open(out, "w") as f:
    f.write("# bench/engine_cpu/sliding_window.sh: attention in a sliding window on the CPU\n\n")
    f.write("Measured %s on %s, %s threads for both, fp32 Llama training steps (6 layers, 6 heads, "
            "384 wide, vocabulary 256) on tiny-shakespeare, median step after warm-up; the window "
            "is %d keys (model.sliding_window). PyTorch %s from Debian (eager; tests/engine/torch_gpt2.py's "
            "Llama, the window an explicit mask). Command: `bash bench/engine_cpu/sliding_window.sh "
            "%s`.\n\n" % (datetime.date.today(), cpu, threads, W, torch_v, threads))
    f.write("| config | colo tokens/s, every key | colo, window %d | colo window / every key "
            "| PyTorch tokens/s, every key | PyTorch, window | colo / PyTorch, window |\n" % W)
    f.write("|---|---|---|---|---|---|---|\n")
    for n in ("T1024", "T2048"):
        c0, c1, t0, t1 = get(n, "colo", 0), get(n, "colo", W), get(n, "pytorch", 0), get(n, "pytorch", W)
        f.write("| %s | %.0f | %.0f | %.2f× | %.0f | %.0f | **%.2f×** |\n" % (
            shapes[n], c0["tokens_per_s"], c1["tokens_per_s"], c1["tokens_per_s"] / c0["tokens_per_s"],
            t0["tokens_per_s"], t1["tokens_per_s"], c1["tokens_per_s"] / t1["tokens_per_s"]))
        print("%s: colo %.0f -> %.0f tok/s in the window; pytorch %.0f -> %.0f; colo/pytorch in the window %.2f" % (
            n, c0["tokens_per_s"], c1["tokens_per_s"], t0["tokens_per_s"], t1["tokens_per_s"],
            c1["tokens_per_s"] / t1["tokens_per_s"]))
print("wrote", out)
PY
