#!/usr/bin/env bash
# What the data order does to learning: the learning check's run (learn.sh: 4 layers, 128 wide,
# block 64, batch 12, 2,000 steps on tiny-shakespeare, about 1.5 epochs of its training text)
# with windows drawn at random (data.order random, the default) and in shuffled epochs
# (shuffle), for each of SEEDS seeds, side by side in one run. Writes
# bench/results/data_order.md.
#   bash bench/engine_cpu/data_order.sh [SEEDS] [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SEEDS=${1:-2}
THREADS=${2:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
for seed in $(seq 1 "$SEEDS"); do
  for order in random shuffle; do
    start=$(date +%s.%N)
    "$CT" train --data-root "$TMP/data" --train-data train.bin --val-data val.bin \
      --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps 2000 \
      --lr 1e-3 --min-lr 1e-4 --warmup 100 --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0 \
      --eval-interval 250 --eval-batches 100 --threads "$THREADS" --seed "$seed" \
      --data-order "$order" --quiet --progress "$TMP/$order.$seed.jsonl"
    echo "$order $seed $(echo "$(date +%s.%N) - $start" | bc)" >>"$TMP/times"
    echo "seed $seed, $order: done"
  done
done
python3 - "$TMP" "$SEEDS" "$THREADS" "$SRC/bench/results/data_order.md" <<'PY'
import json, sys, datetime, statistics
tmp, seeds, threads, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
times = {(o, int(s)): float(t) for o, s, t in (l.split() for l in open(tmp + "/times"))}
def evals(order, seed):
    rows = [json.loads(l) for l in open("%s/%s.%d.jsonl" % (tmp, order, seed))]
    return {r["step"]: r["val_loss"] for r in rows if r["event"] == "eval"}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
runs = {(o, s): evals(o, s) for o in ("random", "shuffle") for s in range(1, seeds + 1)}
steps = sorted(runs[("random", 1)])
with open(out, "w") as f:
    f.write("# Data order: random windows against shuffled epochs\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/data_order.sh %d %s`.\n\n"
            % (datetime.date.today(), cpu, threads, seeds, threads))
    f.write("The learning check's run (`learn.sh`: 4 layers, 4 heads, 128 wide, block 64, batch 12, "
            "2,000 steps, lr 1e-3 cosine to 1e-4, fp32) on tiny-shakespeare's 1,003,855 training "
            "tokens: 1.53 epochs. `random` draws each window at any offset with replacement; "
            "`shuffle` cuts the text into 15,685 windows that do not overlap and draws each once an "
            "epoch. Validation: the same 100 batches of 12 × 64 tokens for every run.\n\n")
    f.write("| step | " + " | ".join("%s, seed %d" % (o, s) for s in range(1, seeds + 1) for o in ("random", "shuffle")) + " |\n")
    f.write("|---|" + "---|" * (2 * seeds) + "\n")
    for st in steps:
        f.write("| %d | " % st + " | ".join("%.4f" % runs[(o, s)][st] for s in range(1, seeds + 1) for o in ("random", "shuffle")) + " |\n")
    fin = {o: [runs[(o, s)][steps[-1]] for s in range(1, seeds + 1)] for o in ("random", "shuffle")}
    f.write("\nFinal validation loss, mean of %d seeds: random **%.4f**, shuffle **%.4f** "
            "(shuffle − random: %+.4f). Seconds a run: %s.\n"
            % (seeds, statistics.mean(fin["random"]), statistics.mean(fin["shuffle"]),
               statistics.mean(fin["shuffle"]) - statistics.mean(fin["random"]),
               ", ".join("%s %.0f" % ("%s/%d" % k, v) for k, v in sorted(times.items()))))
print(open(out).read())
PY
