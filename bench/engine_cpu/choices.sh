#!/usr/bin/env bash
# Multiple-choice evaluation as training goes (data.choice_sets): HellaSwag-shaped questions made
# from tiny-shakespeare's held-out text, scored at each evaluation of learn.sh's model (4 layers,
# 4 heads, 128 wide, block 64) over 1,500 steps. Each question is a held-out line cut after its
# first half of words: the context, and four endings, one the rest of the line. Two sets:
#   - "other-lines": the wrong endings are the ends of three other held-out lines, cut to the
#     right one's number of words (which line follows: topic and style);
#   - "shuffled": the wrong endings are the right one's words in three other orders (word order
#     alone: every ending has the same words and characters).
# Then `colo-train eval --choices` scores the last checkpoint on both, timed. Writes
# bench/results/engine_cpu_choices.md: acc, acc_norm and acc_token at each evaluation against
# chance, the run's wall time, and eval's.
#   bash bench/engine_cpu/choices.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
start=$(date +%s)
python3 - "$TMP/text/tinyshakespeare.txt" "$TMP" <<'PY'
import json, random, sys
text = open(sys.argv[1]).read()
split = len(text) - int(len(text) * 0.1)  # prepare's: the last 10% of bytes validate
held = [l for l in text[split:].split("\n") if len(l.split()) >= 6]
rnd = random.Random(1)
for name in ("other-lines", "shuffled"):
    with open("%s/%s.jsonl" % (sys.argv[2], name), "w") as f:
        for line in held:
            w = line.split()
            cut = len(w) // 2
            right = w[cut:]
            if name == "other-lines":
                others = [o for o in held if o != line]
                wrong = [" ".join(rnd.choice(others).split()[-len(right):]) for _ in range(3)]
            else:
                if len(set(right)) < 2:
                    continue
                wrong = []
                for _ in range(200):  # up to three other orders (two words have one)
                    x = right[:]
                    rnd.shuffle(x)
                    if x != right and " ".join(x) not in wrong:
                        wrong.append(" ".join(x))
                    if len(wrong) == 3:
                        break
            ends = wrong[:]
            label = rnd.randrange(len(ends) + 1)
            ends.insert(label, " ".join(right))
            f.write(json.dumps({"ctx": " ".join(w[:cut]), "endings": ends, "label": label}) + "\n")
PY
for s in other-lines shuffled; do
  "$CT" prepare --input "$TMP/$s.jsonl" --out "$TMP/data/$s" --endings-field endings --json \
    >"$TMP/$s.prepared.json"
done
# learn.sh's model and training, with both sets scored at each evaluation, then without
R=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 4 --n-head 4
  --n-embd 128 --block-size 64 --threads "$THREADS" --quiet --batch-size 12 --steps 1500
  --lr 1e-3 --min-lr 1e-4 --warmup 100 --beta2 0.99 --weight-decay 0.1 --grad-clip 1.0
  --eval-interval 250 --eval-batches 20)
t0=$(date +%s.%N)
"$CT" train "${R[@]}" --ckpt-dir "$TMP/ck" --progress "$TMP/run.jsonl" \
  --choice-set other-lines=other-lines/choices.bin --choice-set shuffled=shuffled/choices.bin
t1=$(date +%s.%N)
"$CT" train "${R[@]}" --progress "$TMP/plain.jsonl"
t2=$(date +%s.%N)
for s in other-lines shuffled; do
  a=$(date +%s.%N)
  "$CT" eval --checkpoint "$TMP/ck" --choices "$TMP/data/$s/choices.bin" --threads "$THREADS" \
    --json 2>/dev/null >"$TMP/$s.eval.json"
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$a" \
    "$(date +%s.%N)" >"$TMP/$s.eval.secs"
done
# the batches' width: a block-512 model (one step: its scores do not matter here) scoring the
# first 200 other-lines questions with each batch as wide as its longest window (the default)
# and as wide as the block (COLO_CHOICE_FULL_WIDTH=1), one after the other
"$CT" train "${R[@]}" --block-size 512 --steps 1 --warmup 0 --eval-interval 0 --ckpt-dir "$TMP/ck512" \
  >/dev/null
for how in narrow full; do
  a=$(date +%s.%N)
  COLO_CHOICE_FULL_WIDTH=$([ $how = full ] && echo 1 || echo 0) "$CT" eval --checkpoint \
    "$TMP/ck512" --choices "$TMP/data/other-lines/choices.bin" --limit 200 \
    --threads "$THREADS" --samples "$TMP/w-$how.jsonl" --json 2>/dev/null >"$TMP/w-$how.json"
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$a" \
    "$(date +%s.%N)" >"$TMP/w-$how.secs"
done
secs=$(($(date +%s) - start))
python3 - "$TMP" "$secs" "$THREADS" "$t0" "$t1" "$t2" "$SRC/bench/results/engine_cpu_choices.md" <<'PY'
import json, sys, datetime
tmp, secs, threads, t0, t1, t2, out = sys.argv[1:8]
sets = ("other-lines", "shuffled")
prep = {s: json.load(open("%s/%s.prepared.json" % (tmp, s))) for s in sets}
chance = {}
for s in sets:
    qs = [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, s))]
    chance[s] = sum(1 / len(q["endings"]) for q in qs) / len(qs)
rows = [json.loads(l) for l in open(tmp + "/run.jsonl") if '"event":"eval"' in l]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
with open(out, "w") as f:
    f.write("# Multiple-choice evaluation as training goes: tiny-shakespeare, a 4-layer 128-wide model\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/choices.sh`, %s s in all.\n\n" % (
        datetime.date.today(), cpu, threads, secs))
    f.write("Model and training: learn.sh's (4 layers, 4 heads, 128 wide, block 64, bytes as tokens, 1,500 steps "
            "of batch 12, AdamW lr 1e-3 cosine to 1e-4), evaluated every 250 steps (20 batches of validation text, "
            "and both sets whole). Questions: each held-out line (the last 10%% of the text) of 6 words or more, its "
            "first half of words the context, the rest the right ending; `other-lines`: %d questions, the wrong "
            "endings the last words of three other held-out lines (as many as the right one); `shuffled`: %d "
            "questions, the wrong endings the right one's words in other orders (the same characters, so acc_norm "
            "and acc pick alike). Each ending follows its context after a space (`prepare --endings-field`), "
            "bytes as tokens; acc picks the ending of the highest log-probability, acc_norm the highest per "
            "character (lm-evaluation-harness's), acc_token per token (llm.c's).\n\n" % (
                prep["other-lines"]["questions"], prep["shuffled"]["questions"]))
    f.write("| step | val loss | other-lines acc | acc_norm | acc_token | shuffled acc | acc_norm | acc_token |\n"
            "|---|---|---|---|---|---|---|---|\n")
    for e in rows:
        c = e["choices"]
        f.write("| %d | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n" % (
            e["step"], e["val_loss"], c["other-lines"]["acc"], c["other-lines"]["acc_norm"],
            c["other-lines"]["acc_token"], c["shuffled"]["acc"], c["shuffled"]["acc_norm"],
            c["shuffled"]["acc_token"]))
    f.write("| chance | | %.4f | | | %.4f | | |\n\n" % (chance["other-lines"], chance["shuffled"]))
    run, plain = float(t1) - float(t0), float(t2) - float(t1)
    f.write("Wall time of the run: %.1f s with both sets scored at its 7 evaluations, %.1f s for the same run "
            "without them, in the same invocation (%.1f s more, %.1f s an evaluation).\n\n" % (
                run, plain, run - plain, (run - plain) / 7))
    f.write("| `colo-train eval --choices` on the last checkpoint | questions | sequences | tokens | acc | acc_norm | "
            "acc_token | wall (s) |\n|---|---|---|---|---|---|---|---|\n")
    for s in sets:
        g = json.load(open("%s/%s.eval.json" % (tmp, s)))
        f.write("| %s | %d | %d | %d | %.4f | %.4f | %.4f | %s |\n" % (
            s, g["questions"], prep[s]["sequences"], prep[s]["tokens"], g["acc"], g["acc_norm"],
            g["acc_token"], open("%s/%s.eval.secs" % (tmp, s)).read().strip()))
    f.write("\nThe run's last scores and eval's on its checkpoint are the same questions under the same model; "
            "eval batches rows as wide as their longest window rather than the block, so its log-probabilities "
            "may differ from the run's in the last float digits.\n\n")
    w = {h: (json.load(open("%s/w-%s.json" % (tmp, h))), float(open("%s/w-%s.secs" % (tmp, h)).read()),
             [json.loads(l) for l in open("%s/w-%s.jsonl" % (tmp, h))]) for h in ("narrow", "full")}
    worst = max(abs(a - b) / max(1.0, abs(b)) for x, y in zip(w["narrow"][2], w["full"][2])
                for a, b in zip(x["logprobs"], y["logprobs"]))
    f.write("## The batches' width\n\nThe same model at block 512 (one training step), `eval --choices --limit 200` "
            "on other-lines (800 endings of at most 74 tokens): each batch as wide as its longest window rounded up "
            "to 32 (the default, in runs too but under sequence parallelism) against the whole block "
            "(`COLO_CHOICE_FULL_WIDTH=1`), one after the other.\n\n| batches | wall (s) | acc_norm |\n|---|---|---|\n")
    for h in ("narrow", "full"):
        f.write("| %s | %.2f | %.4f |\n" % ("as wide as their windows" if h == "narrow" else "the block (512)",
                                            w[h][1], w[h][0]["acc_norm"]))
    f.write("\n%.1fx faster; the largest difference between the two's log-probabilities, relative: %.1e.\n" % (
        w["full"][1] / w["narrow"][1], worst))
PY
cat "$SRC/bench/results/engine_cpu_choices.md"
