#!/usr/bin/env bash
# Muon against AdamW, side by side in one run: learn.sh's model and settings (tiny-shakespeare, 4
# layers, 4 heads, 128 wide, block 64, batch 12, 2,000 steps, cosine from lr to a tenth after 100
# warm-up steps, weight decay 0.1, clip 1.0, beta2 0.99) with optimizer.name adamw and muon at
# the same lr (Muon's update RMS is matched to AdamW's, so the same lr is the fair comparison),
# and both at twice it (AdamW's at 2e-3 too, so that Muon's gain is not a learning rate AdamW
# could have had). Reports each run's validation losses, and the step time of Muon over
# AdamW's from 3 rounds of 100 steps each, alternating (one machine's speed drifts over minutes).
# Writes bench/results/engine_cpu_muon.md.
#   bash bench/engine_cpu/muon.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
start=$(date +%s)
run() { # name lr optimizer steps eval-interval
  "$CT" train --data-root "$TMP/data" --train-data train.bin --val-data val.bin \
    --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps "$4" \
    --lr "$2" --min-lr "$(python3 -c "print($2 / 10)")" --warmup 100 --beta2 0.99 \
    --weight-decay 0.1 --grad-clip 1.0 --eval-interval "$5" --eval-batches 100 \
    --threads "$THREADS" --optimizer "$3" --quiet --progress "$TMP/$1.jsonl"
}
run adamw 1e-3 adamw 2000 250
run muon 1e-3 muon 2000 250
run adamw2 2e-3 adamw 2000 250
run muon2 2e-3 muon 2000 250
for r in 1 2 3; do
  run "t-adamw-$r" 1e-3 adamw 100 0
  run "t-muon-$r" 1e-3 muon 100 0
done
secs=$(($(date +%s) - start))
python3 - "$TMP" "$secs" "$THREADS" "$SRC/bench/results/engine_cpu_muon.md" <<'PY'
import json, sys, datetime, statistics
tmp, secs, threads, out = sys.argv[1:]
runs = [("adamw", "AdamW, lr 1e-3"), ("muon", "Muon, lr 1e-3"), ("adamw2", "AdamW, lr 2e-3"),
        ("muon2", "Muon, lr 2e-3")]
ev, last = {}, {}
for k, _ in runs:
    rows = [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, k))]
    ev[k] = {r["step"]: r["val_loss"] for r in rows if r["event"] == "eval"}
    last[k] = [r for r in rows if r["event"] == "step"][-1]["loss"]
# the timing rounds: each run's median step after 10, then the median over the rounds
ms = {o: statistics.median(statistics.median(r["ms"] for r in map(json.loads, open("%s/t-%s-%d.jsonl" % (tmp, o, i)))
                                             if r["event"] == "step" and r["step"] > 10) for i in (1, 2, 3))
      for o in ("adamw", "muon")}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
with open(out, "w") as f:
    f.write("# Muon against AdamW: tiny-shakespeare, 4 layers, 4 heads, 128 wide, block 64, batch 12\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/muon.sh`, %s s in all, the runs one "
            "after another in one invocation.\n\n" % (datetime.date.today(), cpu, threads, secs))
    f.write("Settings as `learn.sh`: 2,000 steps, cosine from lr to lr/10 after 100 warm-up steps, "
            "weight decay 0.1, clip 1.0, AdamW betas (0.9, 0.99), fp32. `optimizer.name: muon` takes "
            "the blocks' 24 matrices (q, k, v, attention's output, the MLP's two; momentum 0.95, "
            "Nesterov, 5 Newton-Schulz steps, update RMS matched to AdamW's); the embeddings, "
            "positions and norms stay with AdamW. Validation: 100 fixed batches.\n\n")
    f.write("| step | " + " | ".join(n for _, n in runs) + " |\n|---|" + "---|" * len(runs) + "\n")
    for s in sorted(ev["adamw"]):
        f.write("| %d | " % s + " | ".join("%.4f" % ev[k][s] for k, _ in runs) + " |\n")
    f.write("| final train loss | " + " | ".join("%.4f" % last[k] for k, _ in runs) + " |\n\n")
    for k, n, base in (("muon", "Muon, lr 1e-3", "adamw"), ("muon2", "Muon, lr 2e-3", "adamw2")):
        a = ev[base][2000]
        hit = next((s for s in sorted(ev[k]) if ev[k][s] <= a), None)
        f.write("- %s: final validation loss %.4f against AdamW's %.4f at the same lr (%+.2f%%); it reaches "
                "AdamW's final loss %s.\n" % (n, ev[k][2000], a, 100 * (ev[k][2000] - a) / a,
                                              "at step %d" % hit if hit else "at no evaluation"))
    best_a = min(ev[k][2000] for k in ("adamw", "adamw2"))
    best_m = min(ev[k][2000] for k in ("muon", "muon2"))
    f.write("- The better of each: Muon %.4f, AdamW %.4f (%+.2f%%).\n" % (best_m, best_a, 100 * (best_m - best_a) / best_a))
    f.write("- Step time (3 alternating rounds of 100 steps, the median step of each, the median of the rounds): "
            "AdamW %.2f ms, Muon %.2f ms: Muon's step takes %.2fx AdamW's.\n" % (ms["adamw"], ms["muon"], ms["muon"] / ms["adamw"]))
    hit = next((s for s in sorted(ev["muon"]) if ev["muon"][s] <= ev["adamw"][2000]), None)
    if hit:
        f.write("- At those step times, lr 1e-3: AdamW's 2,000 steps take %.0f s, Muon's %d steps to the same "
                "validation loss %.0f s (%.2fx). Newton-Schulz's cost does not grow with the batch: this "
                "model's batch is 768 tokens.\n" % (2000 * ms["adamw"] / 1e3, hit, hit * ms["muon"] / 1e3,
                                                     hit * ms["muon"] / (2000 * ms["adamw"])))
print(open(out).read())
PY
