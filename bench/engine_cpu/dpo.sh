#!/usr/bin/env bash
# DPO's learning check: a preference that needs learning, on tiny-shakespeare. The base is the
# 4-layer, 4-head, 128-wide model of learn.sh (block 64) trained 1,500 steps; each pair's prompt is
# the first 16 characters of a line, its chosen answer the rest of the line, its rejected one the
# same words in reverse order (the words a base model finds likely, in an order it should not).
# Pairs from the text's first 90% of lines train, the last 10% validate. Beta 0.1, 300 steps of
# 8 pairs (batch 16 rows): LoRA rank 8 on every product at lr 1e-3 cosine, with the reference's
# forward at every step and with it precomputed, then the whole model at lr 1e-4 with DPO, SimPO
# (beta 2, gamma 0.5) and ORPO (lambda 0.1), the last two without a reference. Writes
# bench/results/engine_cpu_dpo.md: for each run the validation DPO loss, reward accuracy, margin
# and the chosen and rejected answers' mean rewards over every held-out pair as training goes,
# and the median step times side by side.
#   bash bench/engine_cpu/dpo.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
start=$(date +%s)
M=(--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --threads "$THREADS" --quiet)
"$CT" train --data-root "$TMP/data" --train-data train.bin --val-data val.bin "${M[@]}" \
  --batch-size 12 --steps 1500 --lr 1e-3 --min-lr 1e-4 --warmup 100 --beta2 0.99 \
  --weight-decay 0.1 --grad-clip 1.0 --eval-interval 0 --ckpt-dir "$TMP/data/base"
python3 - "$TMP/text/tinyshakespeare.txt" "$TMP/pairs.jsonl" <<'PY'
import json, sys
lines = [x for x in open(sys.argv[1]).read().split("\n") if len(x) >= 32 and len(x.split()) >= 5]
with open(sys.argv[2], "w") as f:
    for x in lines:
        p, rest = x[:16], x[16:]
        words = rest.split(" ")
        if words[::-1] == words:
            continue
        f.write(json.dumps({"prompt": p, "chosen": rest, "rejected": " ".join(words[::-1])}) + "\n")
PY
"$CT" prepare --input "$TMP/pairs.jsonl" --out "$TMP/data/pairs" --prompt-field prompt \
  --chosen-field chosen --rejected-field rejected --json >"$TMP/prepared.json"
# three runs side by side, the same pairs and steps: LoRA with the reference's forward at every
# step; LoRA with it precomputed (train.dpo_precompute: a forward over every pair first, then
# one forward and one backward a step); the whole model (always precomputed), at a lower rate
D=(--data-root "$TMP/data" --train-data pairs/train.bin --val-data pairs/val.bin "${M[@]}"
  --init-from base/step_00001500 --dpo-beta 0.1 --batch-size 16 --steps 300 --min-lr 1e-4
  --warmup 20 --weight-decay 0 --grad-clip 1.0 --eval-interval 50 --eval-batches 0)
run() { # name, settings...: its progress records and wall seconds
  local name=$1 t0
  shift
  t0=$(date +%s.%N)
  "$CT" train "${D[@]}" --progress "$TMP/$name.jsonl" --ckpt-dir "$TMP/$name" "$@"
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" \
    "$(date +%s.%N)" >"$TMP/$name.secs"
}
run lora --lora-rank 8 --lora-alpha 16 --lr 1e-3
run lora-pre --lora-rank 8 --lora-alpha 16 --lr 1e-3 --dpo-precompute true
run whole --lr 1e-4 --min-lr 1e-5
# the reference-free losses on the whole model: SimPO (beta 2, gamma 0.5) and ORPO (lambda 0.1)
run simpo --lr 1e-4 --min-lr 1e-5 --dpo-loss simpo --dpo-beta 2 --dpo-simpo-gamma 0.5
run orpo --lr 1e-4 --min-lr 1e-5 --dpo-loss orpo --dpo-beta 0.1
secs=$(($(date +%s) - start))
python3 - "$TMP" "$secs" "$THREADS" "$SRC/bench/results/engine_cpu_dpo.md" <<'PY'
import json, sys, datetime, statistics
tmp, secs, threads, out = sys.argv[1:5]
prep = json.load(open(tmp + "/prepared.json"))
runs = {}
for name in ("lora", "lora-pre", "whole", "simpo", "orpo"):
    rows = [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name))]
    runs[name] = (rows, float(open("%s/%s.secs" % (tmp, name)).read()))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
said = {"lora": "LoRA r8, the reference's forward at every step",
        "lora-pre": "LoRA r8, reference precomputed (`--dpo-precompute true`)",
        "whole": "whole model, reference precomputed (lr 1e-4)",
        "simpo": "whole model, SimPO (beta 2, gamma 0.5; no reference; lr 1e-4)",
        "orpo": "whole model, ORPO (lambda 0.1; no reference; lr 1e-4)"}
with open(out, "w") as f:
    f.write("# DPO: reversed word order rejected, tiny-shakespeare, a 4-layer 128-wide model\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/dpo.sh`, %s s in all.\n\n" % (
        datetime.date.today(), cpu, threads, secs))
    f.write("Base: 4 layers, 4 heads, 128 wide, block 64, 1,500 steps of batch 12 on the text (learn.sh's settings). "
            "Pairs: a line's first 16 characters as the prompt, the rest of the line chosen, the same words in "
            "reverse order rejected; %d pairs train, %d held out (the last lines). DPO: beta 0.1, AdamW cosine "
            "after 20 warm-up steps, no weight decay, clip 1.0, 300 steps of 8 pairs; LoRA rank 8, alpha 16 on every "
            "product at lr 1e-3 (to 1e-4), or the whole model at lr 1e-4 (to 1e-5). The reference is the base, so "
            "the DPO runs start at log 2 with no margin; SimPO and ORPO have none, their rewards being beta times the "
            "answers' mean log-probabilities per token (ORPO's loss adds the chosen answer's NLL per token). "
            "Validation: every held-out pair once. The runs go one after the other in one invocation, on the same "
            "pairs.\n\n" % (prep["train"]["pairs"], prep["val"]["pairs"]))
    for name, (rows, wall) in runs.items():
        f.write("## %s\n\n" % said[name])
        f.write("| step | val loss (the run's) | reward accuracy | mean margin | chosen reward | rejected reward |\n"
                "|---|---|---|---|---|---|\n")
        for e in (r for r in rows if r["event"] == "eval"):
            d = e["dpo"]
            f.write("| %d | %.4f | %.4f | %.4f | %.4f | %.4f |\n" % (e["step"], e["val_loss"], d["accuracy"],
                                                                  d["margin"], d["chosen"], d["rejected"]))
        steps = [r for r in rows if r["event"] == "step"]
        f.write("\nLast training step: loss %.4f, accuracy %.3f on its batch.\n\n" %
                (steps[-1]["loss"], steps[-1]["dpo"]["accuracy"]))
    f.write("## Time\n\n| run | median step (ms) | step time vs LoRA with the live reference | wall, evaluations and "
            "set-up included (s) |\n|---|---|---|---|\n")
    med = {n: statistics.median(r["ms"] for r in rows if r["event"] == "step") for n, (rows, _) in runs.items()}
    for name, (rows, wall) in runs.items():
        f.write("| %s | %.1f | %.2fx | %.1f |\n" % (said[name], med[name], med["lora"] / med[name], wall))
    f.write("\nReward accuracy counts the held-out pairs whose chosen answer gained more log-probability over the "
            "reference than the rejected one (z > 0); for SimPO and ORPO, which have no reference, the pairs whose "
            "chosen answer has the higher mean log-probability per token, which the base already gives most pairs "
            "(reversed word order is unlikely text): their accuracy is not the DPO runs' measure of what was "
            "learned, and the margin is the change to watch. A precomputed run's wall time includes its forward over "
            "every pair before the first step: here %d training and %d held-out pairs, while 300 steps of 8 pairs "
            "read %d (%.2f epochs), so the precomputation costs more than its faster steps save; it pays in a run "
            "over most of its pairs.\n" % (prep["train"]["pairs"], prep["val"]["pairs"], 300 * 8,
                                           300 * 8 / prep["train"]["pairs"]))
PY
cat "$SRC/bench/results/engine_cpu_dpo.md"
