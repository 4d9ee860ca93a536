#!/usr/bin/env bash
# bench/memory_zero: the peak memory of one rank at each ZeRO stage, for a GPT-2 of about 52M
# parameters (12 layers, 600 wide) trained data-parallel on 2 ranks, next to the arithmetic of
# the ZeRO paper: model states of 16Φ bytes per rank without ZeRO (fp32 here: 4 parameters,
# 4 gradients, 8 AdamW moments), 8Φ + 8Φ/N at stage 1, 4Φ + 12Φ/N at stage 2, 16Φ/N at
# stage 3. Writes bench/results/memory_zero.md.   bash bench/memory_zero/run.sh
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
for z in 0 1 2 3; do
  "$CT" train --data-root "$TMP/data" --train-data train.bin --eval-interval 0 \
    --n-layer 12 --n-head 8 --n-embd 600 --block-size 64 --batch-size 1 --steps 2 \
    --nproc 2 --dp 2 --zero $z --threads 1 --quiet --progress "$TMP/z$z.jsonl"
done
python3 - "$TMP" "$SRC/bench/results/memory_zero.md" <<'PY'
import json, sys, datetime
tmp, out = sys.argv[1], sys.argv[2]
L, C, V, T, N = 12, 600, 256, 64, 2
phi = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
rows = []
for z in (0, 1, 2, 3):
    recs = [json.loads(l) for l in open("%s/z%d.jsonl" % (tmp, z)) if '"step"' in l]
    peak, act = max(r["memory_bytes"] for r in recs), recs[-1]["activation_bytes"]
    rows.append((z, peak, act, peak - act))
formula = {0: ("16Φ", 16 * phi), 1: ("8Φ + 8Φ/N", 8 * phi + 8 * phi / N), 2: ("4Φ + 12Φ/N", 4 * phi + 12 * phi / N),
           3: ("16Φ/N", 16 * phi / N)}
mib = lambda b: b / 2**20
with open(out, "w") as f:
    f.write("# bench/memory_zero: peak memory per rank at each ZeRO stage\n\n")
    f.write("Measured %s; `bash bench/memory_zero/run.sh`. GPT-2, 12 layers, 8 heads, 600 wide, block 64, "
            "vocab 256: Φ = %d parameters (%.1fM). Data parallel over N = 2 ranks on one host, batch 1 per "
            "rank, fp32 on the CPU, 2 training steps; the peak of rank 0's memory pool during training (every "
            "allocation of the engine goes through it; set-up, which initialises the full parameters once, "
            "is not counted). Model states = peak − activations (the activation and "
            "scratch buffers the model allocates, %.1f MiB, the same at every stage).\n\n" % (
                datetime.date.today(), phi, phi / 1e6, mib(rows[0][2])))
    f.write("| ZeRO stage | peak MiB | model states MiB | ZeRO arithmetic | arithmetic MiB | states / arithmetic |\n")
    f.write("|---|---|---|---|---|---|\n")
    for z, peak, act, states in rows:
        name, b = formula[z]
        f.write("| %d | %.1f | %.1f | %s | %.1f | %.3f |\n" % (z, mib(peak), mib(states), name, mib(b), states / b))
    f.write("\n")
    f.write("Stages 1 to 3 hold a little more than the arithmetic: chunk padding (each chunk's capacity is a "
            "multiple of N); at stages 2 and 3 the full gradient buffers of the chunks the backward is filling "
            "(the first chunk, holding the embeddings, stays open until the end of the backward); at stage 3 "
            "the gathered parameter chunks in use. At this size and N = 2 the chunks are large (about one "
            "MLP matrix, 5.5 MiB each), so these transients weigh more at stage 3; they do not grow with N.\n")
for z, peak, act, states in rows:
    print("ZeRO-%d: peak %.1f MiB, model states %.1f MiB, arithmetic %.1f MiB" % (z, mib(peak), mib(states), mib(formula[z][1])))
print("wrote", out)
PY
