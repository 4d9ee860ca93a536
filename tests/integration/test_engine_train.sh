#!/usr/bin/env bash
# colo-train end to end on the CPU: prepare, exact resume (40 steps = 20 + 20, losses and final
# weights identical), corrupted checkpoints refused with the file named, resume auto skipping a
# corrupted newest checkpoint, a short run whose loss falls, eval, sample, usage errors,
# documents (attention within them, kept through checkpoints), and llm.c's uint32 token shards.
source "$(dirname "$0")/lib.sh"
CT="$COLO_BIN/colo-train"
export OMP_NUM_THREADS=2

training_text
expect_rc 0 "$CT" prepare --input "$TEXT" --out "$TMP/data"
expect_contains "$OUT" "$TMP/data/train.bin:"

MODEL=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 2 --n-head 2
  --n-embd 64 --block-size 32 --batch-size 4 --eval-batches 4 --threads 2 --quiet)

# exact resume
run40=("${MODEL[@]}" --steps 40 --eval-interval 10 --warmup 5 --lr 3e-3 --ckpt-interval 10)
expect_rc 0 "$CT" train "${run40[@]}" --ckpt-dir "$TMP/a" --progress "$TMP/a.jsonl"
expect_rc 0 "$CT" train "${run40[@]}" --ckpt-dir "$TMP/b" --progress "$TMP/b1.jsonl" --stop-at 20
[ -f "$TMP/b/step_00000020/manifest.json" ] || fail "no checkpoint at the stop"
[ ! -e "$TMP/b/step_00000030" ] || fail "the first half ran past --stop-at"
expect_rc 0 "$CT" train "${run40[@]}" --ckpt-dir "$TMP/b" --progress "$TMP/b2.jsonl" --resume auto
python3 - "$TMP/a.jsonl" "$TMP/b1.jsonl" "$TMP/b2.jsonl" <<'PY' || fail "resumed run differs"
import json, sys
def seq(*files):
    out = []
    for f in files:
        for r in map(json.loads, open(f)):
            if r["event"] in ("step", "eval"):
                k = (r["event"], r["step"], r.get("loss", r.get("val_loss")))
                if k not in out:  # the evaluation at the stop step is run by both halves
                    out.append(k)
    return out
a, b = seq(sys.argv[1]), seq(sys.argv[2], sys.argv[3])
assert len(a) == 45, len(a)
assert a == b, [(x, y) for x, y in zip(a, b) if x != y][:3]
print("exact resume: %d losses identical" % len(a))
PY
cmp "$TMP/a/step_00000040/rank_00000.safetensors" "$TMP/b/step_00000040/rank_00000.safetensors" ||
  fail "final weights differ after resume"

# A stop asked with SIGTERM: the run stops at the next step, every rank at the same one, saves a
# checkpoint there and exits 75; resumed from it, it matches an uninterrupted run loss for loss
# and weight for weight (both to 3 steps past the stop: --stop-at keeps the schedule). On one
# process; on two sent to the launcher alone (it passes the signal on); and on two sent to the
# whole process group, as Ctrl-C does (each rank gets it twice and takes it once).
long=("${MODEL[@]}" --steps 100000 --eval-interval 0 --warmup 5 --lr 3e-3 --ckpt-interval 1000)
for how in one launcher group; do
  extra=()
  [ "$how" != one ] && extra=(--nproc 2 --dp 2 --threads 1)
  d="$TMP/sig-$how"
  setsid "$CT" train "${long[@]}" "${extra[@]}" --ckpt-dir "$d" --progress "$d.jsonl" 2>"$d.err" &
  P=$!
  for _ in $(seq 1 300); do
    grep -q '"event":"step","step":3,' "$d.jsonl" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '"event":"step","step":3,' "$d.jsonl" || fail "($how) no third step within 30 s: $(cat "$d.err")"
  if [ "$how" = group ]; then kill -TERM -- "-$P"; else kill -TERM "$P"; fi
  rc=0
  wait "$P" || rc=$?
  expect_eq "$rc" 75 "($how: exit status after SIGTERM; stderr: $(cat "$d.err"))"
  S=$(python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "stopped"][-1]["step"])' "$d.jsonl") ||
    fail "($how) no stopped record: $(tail -2 "$d.jsonl")"
  SD="$d/$(printf step_%08d "$S")"
  [ -f "$SD/manifest.json" ] || fail "($how) no checkpoint at the stop step $S: $(ls "$d")"
  [ "$how" = one ] && expect_eq "$(cat "$d.err")" "colo-train train: stopped as asked at step $S, with its checkpoint $SD"
  [ "$how" != one ] && for r in 0 1; do
    expect_contains "$(cat "$d.err")" "colo-train train: rank $r: stopped as asked at step $S, with its checkpoint $SD"
  done
  expect_rc 0 "$CT" train "${long[@]}" "${extra[@]}" --ckpt-dir "$d" --progress "$d.2.jsonl" --resume auto --stop-at $((S + 3))
  expect_rc 0 "$CT" train "${long[@]}" "${extra[@]}" --ckpt-dir "$d.ref" --progress "$d.ref.jsonl" --stop-at $((S + 3))
  python3 - "$d.ref.jsonl" "$d.jsonl" "$d.2.jsonl" "$S" <<'PY' || fail "($how) the run resumed after SIGTERM differs"
import json, sys
def losses(*files):
    return [(r["step"], r["loss"]) for f in files for r in map(json.loads, open(f)) if r["event"] == "step"]
ref, got, s = losses(sys.argv[1]), losses(sys.argv[2], sys.argv[3]), int(sys.argv[4])
assert len(ref) == s + 3, (len(ref), s)
assert ref == got, [(x, y) for x, y in zip(ref, got) if x != y][:3]
PY
  cmp "$d/$(printf step_%08d $((S + 3)))/rank_00000.safetensors" "$d.ref/$(printf step_%08d $((S + 3)))/rank_00000.safetensors" ||
    fail "($how) final weights differ after the stop and resume"
  echo "graceful stop ($how): SIGTERM, stopped at step $S with a checkpoint, exit 75; resumed to step $((S + 3)) as an uninterrupted run"
done

# the same run on 1 and on 2 threads gives the same weights, bit for bit: matrix products are
# split into fixed blocks and reductions sum fixed blocks in order
for t in 1 2; do
  OMP_NUM_THREADS=$t expect_rc 0 "$CT" train "${MODEL[@]}" --steps 6 --eval-interval 0 --threads $t \
    --ckpt-dir "$TMP/threads$t"
done
cmp "$TMP/threads1/step_00000006/rank_00000.safetensors" "$TMP/threads2/step_00000006/rank_00000.safetensors" ||
  fail "1 and 2 threads gave different weights"

# corrupted checkpoints are refused, naming the file
cp -r "$TMP/a" "$TMP/c"
F="$TMP/c/step_00000040/rank_00000.safetensors"
printf '\x01' | dd of="$F" bs=1 seek=5000 conv=notrunc status=none
expect_rc 78 "$CT" train "${run40[@]}" --ckpt-dir "$TMP/c" --resume "$TMP/c/step_00000040"
expect_eq "$ERR" "colo-train train: checkpoint $TMP/c/step_00000040: rank_00000.safetensors does not match its sha256 in the manifest: altered"
truncate -s 4000 "$F"
expect_rc 1 "$CT" eval --checkpoint "$TMP/c/step_00000040" --data "$TMP/data/val.bin"
expect_contains "$ERR" "rank_00000.safetensors is 4000 bytes but the manifest says"
rm "$TMP/c/step_00000030/manifest.json"
expect_rc 1 "$CT" sample --checkpoint "$TMP/c/step_00000030"
expect_eq "$ERR" "colo-train sample: checkpoint $TMP/c/step_00000030 has no manifest.json: it is incomplete"
# resume auto passes over the two broken ones and takes step 20
expect_rc 0 "$CT" train "${run40[@]}" --ckpt-dir "$TMP/c" --resume auto --progress "$TMP/c.jsonl"
expect_contains "$ERR" "skipped unusable checkpoints"
first=$(head -1 "$TMP/c.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')
expect_eq "$first" "20"

# a short run learns: the loss falls well below the uniform guess ln(256) = 5.55
expect_rc 0 "$CT" train "${MODEL[@]}" --steps 150 --lr 3e-3 --warmup 10 --eval-interval 150 \
  --ckpt-dir "$TMP/learn" --progress "$TMP/learn.jsonl"
read -r first_loss last_val < <(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r["loss"] for r in rows if r["event"] == "step"]
vals = [r["val_loss"] for r in rows if r["event"] == "eval"]
print(steps[0], vals[-1])' "$TMP/learn.jsonl")
python3 -c "import sys; f, v = $first_loss, $last_val; sys.exit(0 if f > 5.0 and v < 3.2 else 1)" ||
  fail "the loss did not fall enough: first train loss $first_loss, final val loss $last_val"

# eval and sample from the checkpoint
expect_rc 0 "$CT" eval --checkpoint "$TMP/learn/step_00000150" --data "$TMP/data/val.bin" --batches 4 --batch-size 4
expect_contains "$OUT" "val loss "
expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --tokens 50 --seed 3 --prompt "KING"
s1=$OUT
expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --tokens 50 --seed 3 --prompt "KING"
expect_eq "$OUT" "$s1" "(sampling with one seed must repeat)"
expect_eq "${#s1}" "54"
# nucleus sampling: --top-p 1 changes nothing; a top-p small enough keeps only the most likely
# token each time, which is greedy decoding; bad values are refused
expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --tokens 50 --seed 3 --prompt "KING" --top-p 1
expect_eq "$OUT" "$s1" "(--top-p 1 must not change the text)"
expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --tokens 25 --temperature 0 --prompt "KING"
greedy=$OUT
expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --tokens 25 --seed 5 --prompt "KING" --top-p 1e-6
expect_eq "$OUT" "$greedy" "(--top-p 1e-6 must be greedy)"
expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --tokens 25 --seed 5 --prompt "KING" --top-p 0.9 --top-k 5
expect_rc 2 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --top-p 0
expect_eq "$ERR" "colo-train sample: --top-p must be a number in (0, 1]; try 'colo-train sample --help'"
expect_rc 2 "$CT" sample --checkpoint "$TMP/learn/step_00000150" --temperature -1
expect_eq "$ERR" "colo-train sample: --temperature must be a number of 0 or more (0: greedy); try 'colo-train sample --help'"
# the cache of keys and values gives the text the whole window gives, run again for each token:
# greedy within the block of 32, and sampled past it (where both run the window)
for args in "--tokens 25 --temperature 0" "--tokens 50 --seed 3"; do
  expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" $args --prompt "KING"
  cached=$OUT
  expect_rc 0 "$CT" sample --checkpoint "$TMP/learn/step_00000150" $args --prompt "KING" --full-forward
  expect_eq "$cached" "$OUT" "(sample $args: the cache's text against the whole window's)"
done

# usage and bad input
expect_rc 0 "$CT" --help
expect_rc 2 "$CT"
expect_rc 2 "$CT" frobnicate
expect_rc 2 "$CT" train --no-such-flag 1
expect_eq "$ERR" "colo-train train: unknown option '--no-such-flag'; try 'colo-train train --help'"
expect_rc 2 "$CT" train --recompute true
expect_eq "$ERR" "colo-train train: unexpected argument 'true' (after --recompute); try 'colo-train train --help'"
expect_rc 78 "$CT" train "${MODEL[@]}" --n-head 3
expect_eq "$ERR" "colo-train train: model.n_head=3 does not divide model.n_embd=64"
expect_rc 2 "$CT" train "${MODEL[@]}" --steps many
expect_eq "$ERR" "colo-train train: --steps:1: train.steps: \"many\" is not an integer"
expect_rc 78 "$CT" train --data-root "$TMP/data" --train-data nope.bin --eval-interval 0
expect_eq "$ERR" "colo-train train: $TMP/data/nope.bin: No such file or directory"
# a data set of several shards (llm.c's train_000001.bin, ...) by a pattern: the prepared text
# cut into three files trains; a token past the vocabulary in one of them is refused, named
mkdir -p "$TMP/split"
python3 - "$TMP/data/train.bin" "$TMP/split" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
toks = b[1024:]
n = len(toks) // 2
cut = [0, n // 3, 2 * n // 3, n]
for i in range(3):
    part = toks[2 * cut[i]:2 * cut[i + 1]]
    head = struct.pack("<3i", 20240520, 1, len(part) // 2) + b"\0" * (1024 - 12)
    open("%s/train_%06d.bin" % (sys.argv[2], i + 1), "wb").write(head + part)
PY
cp "$TMP/data/val.bin" "$TMP/split/"
expect_rc 0 "$CT" train "${MODEL[@]}" --data-root "$TMP/split" --train-data 'train_*.bin' \
  --steps 30 --eval-interval 30 --lr 3e-3 --progress "$TMP/split.jsonl"
python3 - "$TMP/split.jsonl" <<'PY' || fail "training on three shards did not learn"
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if x["event"] == "step"]
assert r[-1]["loss"] < 0.8 * r[0]["loss"], (r[0]["loss"], r[-1]["loss"])
print("figure: three shards by pattern: loss %.4f -> %.4f in 30 steps" % (r[0]["loss"], r[-1]["loss"]))
PY
# warmup-stable-decay: lr held after the warm-up, then linear to min_lr over the last 5 steps
expect_rc 0 "$CT" train "${MODEL[@]}" --steps 20 --eval-interval 0 --lr 3e-3 --min-lr 1e-4 \
  --warmup 2 --schedule wsd --decay-steps 5 --progress "$TMP/wsd.jsonl"
python3 - "$TMP/wsd.jsonl" <<'PY' || fail "the wsd schedule's learning rates"
import json, sys
lr = [r["lr"] for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"]
want = [3e-3 * (s + 1) / 3 if s < 2 else 3e-3 if s < 15 else 1e-4 + (1 - (s - 15) / 5) * 2.9e-3
        for s in range(20)]
assert all(abs(a - b) < 1e-9 for a, b in zip(lr, want)), list(zip(lr, want))
print("wsd: lr %s" % " ".join("%.2e" % x for x in lr[13:]))
PY
# a blend in shuffled epochs (data.sources, data.order): the first file three times the share of
# the other two; one process accumulating two micro-steps, two data-parallel processes, and a
# stop at step 10 resumed, all draw the same sequences
BLEND=("${MODEL[@]}" --data-root "$TMP/split" --data-source train_000001.bin=3
  --data-source 'train_00000[23].bin=1' --data-order shuffle --steps 20 --eval-interval 20 --lr 3e-3)
expect_rc 0 "$CT" train "${BLEND[@]}" --grad-accum 2 --progress "$TMP/blend1.jsonl"
expect_rc 0 "$CT" train "${BLEND[@]}" --nproc 2 --dp 2 --progress "$TMP/blend2.jsonl"
expect_rc 0 "$CT" train "${BLEND[@]}" --grad-accum 2 --ckpt-dir "$TMP/blend" --stop-at 10 \
  --progress "$TMP/blend3a.jsonl"
expect_rc 0 "$CT" train "${BLEND[@]}" --grad-accum 2 --ckpt-dir "$TMP/blend" --resume auto \
  --progress "$TMP/blend3b.jsonl"
python3 - "$TMP"/blend1.jsonl "$TMP"/blend2.jsonl "$TMP"/blend3[ab].jsonl <<'PY' || fail "blend runs differ"
import json, sys
def losses(*files):
    out = {}
    for f in files:
        for r in map(json.loads, open(f)):
            if r["event"] == "step":
                out[r["step"]] = r["loss"]
    return [out[k] for k in sorted(out)]
one, dp2, resumed = losses(sys.argv[1]), losses(sys.argv[2]), losses(sys.argv[3], sys.argv[4])
assert len(one) == 20 and one == resumed, (one, resumed)
worst = max(abs(a - b) / a for a, b in zip(one, dp2))
assert worst < 1e-5, worst
assert one[-1] < 0.8 * one[0], one
print("figure: blend, shuffled: loss %.4f -> %.4f in 20 steps; dp=2 within %.1e; resumed identical" % (one[0], one[-1], worst))
PY
# the whole validation set (eval_batches 0): every window at multiples of T once, the same on
# one process and on two data-parallel ones, and as colo-train eval --batches 0 computes it
# from the final checkpoint
WHOLE=("${MODEL[@]}" --steps 6 --eval-interval 6 --eval-batches 0 --lr 3e-3)
expect_rc 0 "$CT" train "${WHOLE[@]}" --ckpt-dir "$TMP/whole" --progress "$TMP/whole1.jsonl"
expect_rc 0 "$CT" train "${WHOLE[@]}" --nproc 2 --dp 2 --batch-size 2 --progress "$TMP/whole2.jsonl"
expect_rc 0 "$CT" eval --checkpoint "$TMP/whole/step_00000006" --data "$TMP/data/val.bin" --batches 0 --batch-size 7
EVAL_WHOLE=$(sed -n 's/.*val loss \([0-9.]*\).*/\1/p' <<<"$OUT")
python3 - "$TMP/whole1.jsonl" "$TMP/whole2.jsonl" "$EVAL_WHOLE" <<'PY' || fail "whole-set evaluation"
import json, sys
ev = lambda f: [r["val_loss"] for r in map(json.loads, open(f)) if r["event"] == "eval"]
one, two, ev_cli = ev(sys.argv[1]), ev(sys.argv[2]), float(sys.argv[3])
assert len(one) == len(two) == 2, (one, two)
assert all(abs(a - b) < 1e-5 * a for a, b in zip(one, two)), (one, two)
assert abs(one[-1] - ev_cli) < 1e-4, (one, ev_cli)
print("whole validation set: %.6f on one process, %.6f on two, %.4f by colo-train eval" % (one[-1], two[-1], ev_cli))
PY
# documents (--document-token, a line of the text to a document): the checkpoint's manifest
# records the token, so colo-train eval of it attends within documents as the training's own
# evaluation did, and a resumed run goes on with them
DOCS=("${MODEL[@]}" --steps 6 --eval-interval 6 --eval-batches 0 --lr 3e-3 --document-token 10)
expect_rc 0 "$CT" train "${DOCS[@]}" --ckpt-dir "$TMP/docs" --ckpt-interval 3 --progress "$TMP/docs1.jsonl"
grep -Eq '"document_token":[[:space:]]*10' "$TMP/docs/step_00000006/manifest.json" ||
  fail "the manifest does not record the document token"
expect_rc 0 "$CT" train "${DOCS[@]}" --ckpt-dir "$TMP/docs" --resume "$TMP/docs/step_00000003" \
  --progress "$TMP/docs2.jsonl"
expect_rc 0 "$CT" eval --checkpoint "$TMP/docs/step_00000006" --data "$TMP/data/val.bin" --batches 0 --batch-size 7
EVAL_DOCS=$(sed -n 's/.*val loss \([0-9.]*\).*/\1/p' <<<"$OUT")
python3 - "$TMP/docs1.jsonl" "$TMP/docs2.jsonl" "$TMP/whole1.jsonl" "$EVAL_DOCS" <<'PY' || fail "documents"
import json, sys
ev = lambda f: [r["val_loss"] for r in map(json.loads, open(f)) if r["event"] == "eval"]
st = lambda f: {r["step"]: r["loss"] for r in map(json.loads, open(f)) if r["event"] == "step"}
docs, resumed, whole, ev_cli = ev(sys.argv[1]), ev(sys.argv[2]), ev(sys.argv[3]), float(sys.argv[4])
a, b = st(sys.argv[1]), st(sys.argv[2])
assert all(a[k] == b[k] for k in b) and len(b) == 3, (a, b)
assert abs(docs[-1] - ev_cli) < 1e-4, (docs, ev_cli)
assert abs(docs[-1] - whole[-1]) > 1e-3, (docs, whole)
print("documents: whole validation set %.6f, colo-train eval of the checkpoint %.4f (without documents %.6f); resumed steps identical" % (docs[-1], ev_cli, whole[-1]))
PY
# eval --document-token: the checkpoint's own token gives the same loss as trained; -1 evaluates
# whole windows, another loss; a token the shard never holds is refused
expect_rc 0 "$CT" eval --checkpoint "$TMP/docs/step_00000006" --data "$TMP/data/val.bin" --batches 0 --batch-size 7 --document-token 10
expect_eq "$(sed -n 's/.*val loss \([0-9.]*\).*/\1/p' <<<"$OUT")" "$EVAL_DOCS"
expect_rc 0 "$CT" eval --checkpoint "$TMP/docs/step_00000006" --data "$TMP/data/val.bin" --batches 0 --batch-size 7 --document-token -1
EVAL_WHOLE=$(sed -n 's/.*val loss \([0-9.]*\).*/\1/p' <<<"$OUT")
[ -n "$EVAL_WHOLE" ] && [ "$EVAL_WHOLE" != "$EVAL_DOCS" ] || fail "eval --document-token -1 gave $EVAL_WHOLE, as trained $EVAL_DOCS"
echo "eval of the documents' checkpoint: as trained $EVAL_DOCS, --document-token 10 the same, -1 (whole windows) $EVAL_WHOLE"
expect_rc 1 "$CT" eval --checkpoint "$TMP/docs/step_00000006" --data "$TMP/data/val.bin" --document-token 200
expect_eq "$ERR" "colo-train eval: --document-token 200: $TMP/data/val.bin holds no such token, so no document begins with it"
expect_rc 2 "$CT" eval --checkpoint "$TMP/docs/step_00000006" --data "$TMP/data/val.bin" --document-token x
# a document token the data never holds: refused, not trained as whole windows
expect_rc 78 "$CT" train "${DOCS[@]}" --document-token 200
expect_eq "$ERR" "colo-train train: data.document_token=200: $TMP/data/train.bin holds no such token, so no document begins with it (colo-train prepare prints the token it puts before each document)"
# validation sets (data.val_sources): each evaluated as it would be alone, the validation loss
# their weighted mean
expect_rc 0 "$CT" train "${BLEND[@]}" --steps 4 --eval-interval 4 --progress "$TMP/val1.jsonl"
expect_rc 0 "$CT" train "${BLEND[@]}" --steps 4 --eval-interval 4 --val-source val.bin=3 \
  --val-source train_000001.bin --progress "$TMP/val2.jsonl"
python3 - "$TMP/val1.jsonl" "$TMP/val2.jsonl" <<'PY' || fail "validation sets"
import json, sys
ev = lambda f: [r for r in map(json.loads, open(f)) if r["event"] == "eval"]
one, two = ev(sys.argv[1]), ev(sys.argv[2])
assert len(one) == len(two) == 2 and "val_sets" not in one[0], (one, two)
for a, b in zip(one, two):
    sets = b["val_sets"]
    assert list(sets) == ["val.bin", "train_000001.bin"], sets
    assert sets["val.bin"] == a["val_loss"], (sets, a)
    assert abs(b["val_loss"] - (3 * sets["val.bin"] + sets["train_000001.bin"]) / 4) < 2e-6, b
print("validation sets: val.bin %.4f (as alone), train_000001.bin %.4f, mean %.4f" %
      (sets["val.bin"], sets["train_000001.bin"], b["val_loss"]))
PY
# checkpoint.keep_best: each checkpoint is evaluated (eval interval 0), its manifest records the
# loss, and pruning keeps the newest and the lowest-loss one. The rate warms up over the whole
# run to 1.0, which first trains and then wrecks the model, so the best is an older checkpoint
# (step 30 of 60: 3.43 against 3.86 before and 4.1 to 7.7 after, on both builds).
best=("${MODEL[@]}" --steps 60 --eval-interval 0 --warmup 60 --lr 1 --schedule constant
  --ckpt-interval 10 --ckpt-keep 1 --ckpt-keep-best true)
expect_rc 0 "$CT" train "${best[@]}" --ckpt-dir "$TMP/best" --progress "$TMP/best.jsonl"
python3 - "$TMP/best.jsonl" "$TMP/best" <<'PY' || fail "keep_best"
import json, os, struct, sys
recs = list(map(json.loads, open(sys.argv[1])))
evals = {r["step"]: r["val_loss"] for r in recs if r["event"] == "eval"}
cks = {r["step"]: r.get("val_loss") for r in recs if r["event"] == "checkpoint"}
assert sorted(evals) == [10, 20, 30, 40, 50, 60], evals
assert all(abs(cks[s] - evals[s]) < 1e-6 for s in cks), (cks, evals)
best = min(sorted(evals, reverse=True), key=lambda s: evals[s])
kept = sorted(int(d[5:]) for d in os.listdir(sys.argv[2]) if d.startswith("step_"))
assert kept == sorted({60, best}), (kept, best, evals)
assert best != 60, ("the newest is the best: the test does not show keep_best", evals)
m = json.load(open(os.path.join(sys.argv[2], "step_%08d" % best, "manifest.json")))
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]  # both the same float
assert f32(m["val_loss"]) == f32(cks[best]), (m["val_loss"], cks[best])
print("keep_best: kept steps %s, the best %d at %.4f (the newest %.4f)" %
      (kept, best, evals[best], evals[60]))
PY
# train.init_pick=best: a next stage starts from that checkpoint (as the worker runs it for
# train.init_from_job), so its evaluation before a first step is the best's loss
for pick in best newest; do
  printf 'name: next\ntrain: {init_from_job: 1, init_pick: %s}\n' "$pick" >"$TMP/next.yaml"
  expect_rc 0 "$CT" train --job "$TMP/next.yaml" "${MODEL[@]}" --steps 1 --eval-interval 1 \
    --init-from-checkpoints "$TMP/best" --progress "$TMP/next-$pick.jsonl"
done
python3 - "$TMP/best.jsonl" "$TMP/next-best.jsonl" "$TMP/next-newest.jsonl" <<'PY' || fail "init_pick"
import json, sys
ev = lambda f: {r["step"]: r["val_loss"] for r in map(json.loads, open(f)) if r["event"] == "eval"}
run, best, newest = ev(sys.argv[1]), ev(sys.argv[2])[0], ev(sys.argv[3])[0]
b = min(sorted(run, reverse=True), key=lambda s: run[s])
assert abs(best - run[b]) < 1e-6 and abs(newest - run[60]) < 1e-6, (best, newest, run)
print("init_pick: best starts at %.4f (step %d's), newest at %.4f (step 60's)" % (best, b, newest))
PY
# eval, sample and export take a directory of checkpoints too: its newest, or with --best the
# lowest recorded loss's, which eval measures again as the run did (its batches and seed)
read -r BESTSTEP BESTVAL < <(python3 -c 'import json,sys; e = {r["step"]: r["val_loss"] for r in map(json.loads, open(sys.argv[1])) if r["event"] == "eval"}; b = min(sorted(e, reverse=True), key=lambda s: e[s]); print(b, "%.4f" % e[b])' "$TMP/best.jsonl")
expect_rc 0 "$CT" eval --checkpoint "$TMP/best" --best --data "$TMP/data/val.bin" --batches 4 --batch-size 4
expect_eq "$OUT" "val loss $BESTVAL (4 batches of 4)"
expect_eq "$ERR" "colo-train eval: $TMP/best/$(printf step_%08d "$BESTSTEP")"
expect_rc 0 "$CT" sample --checkpoint "$TMP/best" --tokens 5
expect_eq "$ERR" "colo-train sample: $TMP/best/step_00000060"
expect_rc 0 "$CT" export --checkpoint "$TMP/best" --best --out "$TMP/best.safetensors"
expect_rc 1 "$CT" sample --checkpoint "$TMP/best/step_00000060" --best
expect_eq "$ERR" "colo-train sample: $TMP/best/step_00000060 is one checkpoint; --best picks among a directory of them"
expect_rc 1 "$CT" export --checkpoint "$TMP/sig-one" --best --out "$TMP/none.safetensors"
expect_eq "$ERR" "colo-train export: $TMP/sig-one is not a checkpoint, nor a directory with a complete one that records a validation loss or a score"
printf 'name: next\ntrain: {init_from_job: 1, init_pick: best}\n' >"$TMP/next.yaml"
expect_rc 78 "$CT" train --job "$TMP/next.yaml" "${MODEL[@]}" --steps 1 --init-from-checkpoints "$TMP/sig-one"
expect_eq "$ERR" "colo-train train: no complete checkpoint under $TMP/sig-one that records a validation loss or a score (train.init_pick=best; the job's checkpoint.keep_best evaluates each) to take the initial weights from"
expect_rc 78 "$CT" train "${best[@]}" --val-data "" --ckpt-dir "$TMP/best2"
expect_eq "$ERR" "colo-train train: checkpoint.keep_best needs data.val_path or data.val_sources: the best checkpoint is the one with the lowest validation loss (or train.best_metric: a data.choice_sets score)"

# train.early_stop_patience: the same wrecking rate over 200 steps, evaluated every 10; the run
# ends (exit 0, with a checkpoint) at the third evaluation in a row without a new lowest. Stopped
# at step 50 and resumed, it ends at the same step with the same weights (the count is in the
# manifest); on two ranks every rank ends at one step (they agree).
early=("${MODEL[@]}" --steps 200 --eval-interval 10 --warmup 200 --lr 1 --schedule constant
  --ckpt-interval 10 --early-stop 3)
expect_rc 0 "$CT" train "${early[@]}" --ckpt-dir "$TMP/es" --progress "$TMP/es.jsonl"
expect_rc 0 "$CT" train "${early[@]}" --ckpt-dir "$TMP/es2" --progress "$TMP/es2a.jsonl" --stop-at 50
expect_rc 0 "$CT" train "${early[@]}" --ckpt-dir "$TMP/es2" --progress "$TMP/es2b.jsonl" --resume auto
expect_rc 0 "$CT" train "${early[@]}" --nproc 2 --dp 2 --threads 1 --ckpt-dir "$TMP/es3" \
  --progress "$TMP/es3.jsonl"
python3 - "$TMP/es.jsonl" "$TMP/es2b.jsonl" "$TMP/es3.jsonl" <<'PY' || fail "early stop"
import json, sys
def run(f):
    recs = list(map(json.loads, open(f)))
    evals = [(r["step"], r["val_loss"]) for r in recs if r["event"] == "eval"]
    # each evaluation's record carries the count as of it, by the rule below (a run from the
    # start: a resumed one's count comes from its checkpoint)
    best, since = float("inf"), 0
    for r in recs:
        if r["event"] != "eval" or not any(x["event"] == "eval" and x["step"] == 0 for x in recs):
            continue
        if r["val_loss"] < best:
            best, best_step, since = r["val_loss"], r["step"], 0
        else:
            since += 1
        assert (r["best_step"], r["evals_since_best"]) == (best_step, since) and \
            abs(r["best_val_loss"] - best) < 1e-6, (r, best, best_step, since)
    stop = [r for r in recs if r["event"] == "early_stop"]
    last = max(r["step"] for r in recs if r["event"] == "step")
    return evals, stop, last
evals, stop, last = run(sys.argv[1])
assert len(stop) == 1, stop
s = stop[0]
# the rule, from the evaluations: the lowest so far, and the count since it
best, best_step, since = float("inf"), -1, 0
for step, v in evals:
    if v < best:
        best, best_step, since = v, step, 0
    else:
        since += 1
    if since == 3:
        break
assert (s["step"], s["best_step"]) == (step, best_step) and abs(s["best_val_loss"] - best) < 1e-6, (s, evals)
assert last == s["step"] and s["step"] < 200, (last, s)
assert s["message"] == ("stopped early at step %d of 200: the validation loss has not fallen "
                        "below %.4f (step %d) in 3 evaluations" % (s["step"], best, best_step)), s
_, stop2, last2 = run(sys.argv[2])
assert [(x["step"], x["best_step"], x["best_val_loss"]) for x in stop2] == [(s["step"], s["best_step"], s["best_val_loss"])], (stop2, s)
_, stop3, last3 = run(sys.argv[3])
assert len(stop3) == 1 and last3 == stop3[0]["step"] < 200, (stop3, last3)
print("early stop: at step %d, the lowest %.4f at step %d; resumed from step 50: the same; "
      "two ranks: step %d" % (s["step"], best, best_step, stop3[0]["step"]))
PY
S=$(python3 -c 'import json,sys; print([r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "early_stop"][0]["step"])' "$TMP/es.jsonl")
cmp "$TMP/es/step_$(printf %08d "$S")/rank_00000.safetensors" "$TMP/es2/step_$(printf %08d "$S")/rank_00000.safetensors" ||
  fail "early stop: the resumed run's weights differ at step $S"
expect_rc 78 "$CT" train "${MODEL[@]}" --eval-interval 0 --early-stop 3
expect_eq "$ERR" "colo-train train: train.early_stop_patience=3 needs evaluations: train.eval_interval > 0, or checkpoint.keep_best with a checkpoint.interval"

# skipping spikes (optimizer.skip_spike_sigma, OLMo-core's SkipStepAdamW): a step whose loss or
# gradient norm is above the last 8 steps' mean + 1 sd is not applied. Each record's verdict and
# limits follow from the values before it, replayed here; the skipped steps are not optimizer
# steps (the manifest's AdamW t); a run stopped at 30 and resumed judges as the whole one did (the
# history is in the manifest), to the last weight; two data-parallel ranks agree on each skip.
spk=("${MODEL[@]}" --steps 60 --eval-interval 0 --lr 3e-3 --ckpt-interval 10 --skip-spike-sigma 1
  --skip-spike-window 8)
expect_rc 0 "$CT" train "${spk[@]}" --ckpt-dir "$TMP/sp" --progress "$TMP/sp.jsonl"
expect_rc 0 "$CT" train "${spk[@]}" --ckpt-dir "$TMP/sp2" --progress "$TMP/sp2a.jsonl" --stop-at 30
expect_rc 0 "$CT" train "${spk[@]}" --ckpt-dir "$TMP/sp2" --progress "$TMP/sp2b.jsonl" --resume auto
expect_rc 0 "$CT" train "${spk[@]}" --nproc 2 --dp 2 --threads 1 --ckpt-dir "$TMP/sp3" --progress "$TMP/sp3.jsonl"
python3 - "$TMP/sp.jsonl" "$TMP/sp2b.jsonl" "$TMP/sp/step_00000060/manifest.json" "$TMP/sp3.jsonl" <<'PY' || fail "skipping spikes"
import json, math, sys
import numpy as np
f32 = np.float32
recs = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"]
hist, skipped, bad = [], 0, []
for r in recs:
    sp = r["spike"]
    x32 = lambda k: None if sp[k] is None else float(f32(sp[k]))  # the engine's floats, exactly
    lim = [None, None]
    if len(hist) >= 4:
        for j in range(2):
            xs = [h[j] for h in hist if math.isfinite(h[j])]
            s = 0.0
            for x in xs:
                s += x
            mean = s / len(xs)
            q = 0.0
            for x in xs:
                q += (x - mean) * (x - mean)
            lim[j] = float(f32(mean + 1.0 * math.sqrt(q / (len(xs) - 1))))
    skip = lim[0] is not None and (x32("loss") > lim[0] or x32("norm") > lim[1])
    skipped += skip
    if (x32("loss_limit"), x32("norm_limit")) != tuple(lim) or sp["skipped"] != skip or \
            sp["skipped_total"] != skipped:
        bad.append((r["step"], sp, lim, skip))
    hist = (hist + [(x32("loss"), x32("norm"))])[-8:]
assert not bad, bad[:3]
assert 0 < skipped < 30, ("the rule skips too little or too much to show anything", skipped)
m = json.load(open(sys.argv[3]))
assert m["optimizer"]["t"] == 60 - skipped and m["skip_spike"]["skipped"] == skipped, (m["optimizer"], skipped)
assert [x for x, _ in hist] == [float(f32(v)) for v in m["skip_spike"]["loss"]], (hist, m["skip_spike"])
res = [r for r in map(json.loads, open(sys.argv[2])) if r["event"] == "step"]
assert [(r["step"], r["loss"], r["spike"]) for r in res] == [(r["step"], r["loss"], r["spike"]) for r in recs[30:]], "resumed"
two = [r for r in map(json.loads, open(sys.argv[4])) if r["event"] == "step"]
assert any(r["spike"]["skipped"] for r in two), "two ranks: none skipped"
print("skip spikes: %d of 60 steps skipped (steps %s), each as the replayed rule says; AdamW t %d; "
      "resumed at 30: the same; two ranks: %d skipped" % (skipped, [r["step"] for r in recs if r["spike"]["skipped"]],
      m["optimizer"]["t"], sum(r["spike"]["skipped"] for r in two)))
PY
cmp "$TMP/sp/step_00000060/rank_00000.safetensors" "$TMP/sp2/step_00000060/rank_00000.safetensors" ||
  fail "skipping spikes: the resumed run's weights differ at step 60"
expect_rc 78 "$CT" train "${MODEL[@]}" --skip-spike-sigma -1
expect_eq "$ERR" "colo-train train: optimizer.skip_spike_sigma=-1 must be in [0, 100] (0: never skip)"
expect_rc 78 "$CT" train "${MODEL[@]}" --skip-spike-sigma 3 --skip-spike-window 2
expect_eq "$ERR" "colo-train train: optimizer.skip_spike_window=2 must be 4 to 1024 steps"

# Muon (optimizer.name: muon): the run says which matrices it takes; its checkpoints say "muon"
# with the momentum, hold Muon's momentum as the matrices' first moments and no second moments
# for them; a run stopped at 15 and resumed ends on the whole run's weights, bit for bit; two
# pipeline stages give the single process's losses; a muon checkpoint is not resumed by AdamW.
mu=("${MODEL[@]:0:${#MODEL[@]}-1}" --steps 30 --eval-interval 10 --lr 3e-3 --ckpt-interval 10
  --optimizer muon)
expect_rc 0 "$CT" train "${mu[@]}" --ckpt-dir "$TMP/mu" --progress "$TMP/mu.jsonl"
expect_contains "$OUT" "optimizer: muon (momentum 0.95, Nesterov, 5 Newton-Schulz steps, the update's RMS matched to AdamW's) for 12 matrices, 98304 parameters; adamw for the other 20224"
mu+=(--quiet)
# Muon keeps no second moments for its matrices: the peak is AdamW's less their 98304 floats,
# plus Muon's scratch (the largest tensor's input and the Newton-Schulz work of the largest matrix)
for o in adamw muon; do
  expect_rc 0 "$CT" train "${MODEL[@]}" --steps 2 --eval-interval 0 --optimizer $o --progress "$TMP/mem-$o.jsonl"
done
python3 - "$TMP/mem-adamw.jsonl" "$TMP/mem-muon.jsonl" <<'PY' || fail "muon: memory"
import json, sys
peak = lambda f: max(r["memory_bytes"] for r in map(json.loads, open(f)) if r["event"] == "step")
a, m = peak(sys.argv[1]), peak(sys.argv[2])
C = 64  # q, k, v, c_proj C x C; c_fc C x 4C; mlp.c_proj 4C x C; 2 layers
blocks = [(C, C)] * 4 + [(C, 4 * C), (4 * C, C)]
numel = 2 * (4 * C * C + 2 * 4 * C * C)
work = 4 * C * C + max(2 * r * c + 2 * min(r, c) ** 2 for r, c in blocks)
assert numel == 98304 and a - m == 4 * (numel - work), (a, m, numel, work)
print("muon: peak %d bytes, AdamW's %d: %d floats of second moments not kept, %d of scratch" % (m, a, numel, work))
PY
expect_rc 0 "$CT" train "${mu[@]}" --ckpt-dir "$TMP/mu2" --progress "$TMP/mu2a.jsonl" --stop-at 15
expect_rc 0 "$CT" train "${mu[@]}" --ckpt-dir "$TMP/mu2" --progress "$TMP/mu2b.jsonl" --resume auto
expect_rc 0 "$CT" train "${mu[@]}" --nproc 2 --pp 2 --threads 1 --ckpt-dir "$TMP/mu3" --progress "$TMP/mu3.jsonl"
cmp "$TMP/mu/step_00000030/rank_00000.safetensors" "$TMP/mu2/step_00000030/rank_00000.safetensors" ||
  fail "muon: the resumed run's weights differ at step 30"
python3 - "$TMP/mu" "$TMP/mu.jsonl" "$TMP/mu2b.jsonl" "$TMP/mu3.jsonl" <<'PY' || fail "muon"
import json, struct, sys
import numpy as np
d = sys.argv[1] + "/step_00000030/"
m = json.load(open(d + "manifest.json"))
assert m["optimizer"] == {"kind": "muon", "momentum": 0.95, "t": 30}, m["optimizer"]
with open(d + "rank_00000.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr, data = json.loads(f.read(n)), f.read()
def t(name):
    b, e = hdr[name]["data_offsets"]
    return np.frombuffer(data[b:e], dtype=np.float32)
mats = [k[len("optimizer.exp_avg."):] for k in hdr if k.startswith("optimizer.exp_avg.transformer.h.") and len(hdr[k]["shape"]) == 2]
assert len(mats) == 8, mats
for k in mats:  # Muon's: momentum, and no second moment written
    assert np.abs(t("optimizer.exp_avg." + k)).max() > 0 and "optimizer.exp_avg_sq." + k not in hdr, k
for k in ("transformer.wte.weight", "transformer.h.0.ln_1.weight"):  # AdamW's: both
    assert t("optimizer.exp_avg_sq." + k).any(), k
steps = lambda f: [(r["step"], r["loss"]) for r in map(json.loads, open(f)) if r["event"] == "step"]
a, b, p = steps(sys.argv[2]), steps(sys.argv[3]), steps(sys.argv[4])
assert b == a[15:], "resumed"
worst = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, p))
assert len(p) == 30 and worst <= 1e-5, ("two stages", worst)
print("muon: %d matrices with momentum alone (a file of %d bytes); loss %.4f -> %.4f; resumed at 15: the same; two "
      "stages: losses within %.1e" % (len(mats), len(data) + 8 + n, a[0][1], a[-1][1], worst))
PY
expect_rc 78 "$CT" train "${MODEL[@]}" --steps 30 --eval-interval 10 --lr 3e-3 --ckpt-interval 10 --ckpt-dir "$TMP/mu" --resume auto
expect_eq "$ERR" "colo-train train: checkpoint $TMP/mu/step_00000030 was trained with optimizer muon, this run has adamw: its moments do not carry over (train.init_from takes its weights alone)"
# tensor parallelism: rank 0 says its shares are gathered (integration_parallel checks the losses)
expect_rc 0 "$CT" train "${MODEL[@]:0:${#MODEL[@]}-1}" --optimizer muon --tp 2 --nproc 2 --threads 1 \
  --steps 2 --eval-interval 0
expect_contains "$OUT" "for 12 matrices, 49152 parameters (this rank's shares: each gathered whole over the tensor-parallel group); adamw for the other 11584"

# The checkpoint directory must be one for every rank. Two ranks started by hand, as the workers
# of two hosts without a shared checkpoint root would start them, each with a directory of its
# own: both stop before a first step (exit 78), rank 1 naming its host and what it did not see.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
  COLO_RANK=$r COLO_WORLD=2 COLO_STORE=127.0.0.1:$PORT "$CT" train "${MODEL[@]}" --dp 2 --threads 1 \
    --steps 5 --eval-interval 0 --ckpt-dir "$TMP/own-$r" >"$TMP/own-$r.out" 2>&1 &
  eval "P$r=\$!"
done
rc0=0 && wait "$P0" || rc0=$?
rc1=0 && wait "$P1" || rc1=$?
[ "$rc0 $rc1" = "78 78" ] || fail "ranks with checkpoint directories of their own exited $rc0 $rc1: $(cat "$TMP"/own-*.out)"
grep -q "colo-train train: rank 1: the checkpoint directory $TMP/own-1 is not the one rank 0 writes into: rank 1 on $(hostname) does not find $TMP/own-1/.colo-shared-[0-9a-f]\{16\}, which rank 0 has just written into its own" "$TMP/own-1.out" ||
  fail "rank 1 did not say why: $(cat "$TMP/own-1.out")"
expect_contains "$(cat "$TMP/own-0.out")" "colo-train train: rank 0: the checkpoint directory $TMP/own-0 is not shared: 1 of the other ranks do not see it (each names its host)"
[ -z "$(ls -A "$TMP/own-0")" ] || fail "rank 0 left files behind: $(ls -A "$TMP/own-0")"
grep -q "^step " "$TMP/own-0.out" && fail "ranks trained with checkpoint directories of their own"

LOUD=()
for a in "${BLEND[@]}"; do [ "$a" = --quiet ] || LOUD+=("$a"); done
expect_rc 0 "$CT" train "${LOUD[@]}" --steps 1 --eval-interval 0
expect_contains "$OUT" "data: $TMP/split/train_000001.bin: "
expect_contains "$OUT" " in 1 file, 75.0% of the sequences, shuffled order, "
expect_contains "$OUT" "data: $TMP/split/train_00000[23].bin: "
expect_contains "$OUT" " in 2 files, 25.0% of the sequences, shuffled order, "
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(1024 + 2 * 100); f.write(bytes([0x2c, 0x01]))' "$TMP/split/train_000002.bin"
expect_rc 78 "$CT" train "${MODEL[@]}" --data-root "$TMP/split" --train-data 'train_*.bin' --eval-interval 0
expect_eq "$ERR" "colo-train train: $TMP/split/train_000002.bin: token 300 at 100 is outside model.vocab_size=256"
expect_rc 78 "$CT" train "${MODEL[@]}" --data-root "$TMP/split" --train-data 'val_*.bin' --eval-interval 0
expect_eq "$ERR" "colo-train train: $TMP/split/val_*.bin: no file matches"
printf 'not a shard' >"$TMP/bad.bin"
expect_rc 1 "$CT" eval --checkpoint "$TMP/learn/step_00000150" --data "$TMP/bad.bin"
expect_eq "$ERR" "colo-train eval: $TMP/bad.bin: shorter than the 1024-byte shard header"

# llm.c's uint32 shards (Llama 3's format: magic 20240801, version 7): the same tokens as the
# uint16 shard train bit for bit alike; shifted past 65,535 they train a 70,400-token vocabulary,
# and a model whose vocabulary they overflow is refused
python3 - "$TMP/data" <<'PY' || fail "could not write uint32 shards"
import sys
import numpy as np
for k in ("train", "val"):
    tok = np.fromfile("%s/%s.bin" % (sys.argv[1], k), dtype=np.uint16, offset=1024).astype(np.uint32)
    for name, t in (("%s32" % k, tok), ("%s32hi" % k, tok + 70000)):
        hdr = np.zeros(256, np.int32)
        hdr[:3] = (20240801, 7, len(t))
        with open("%s/%s.bin" % (sys.argv[1], name), "wb") as f:
            f.write(hdr.tobytes() + t.tobytes())
PY
U=(--data-root "$TMP/data" --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --batch-size 4
  --steps 20 --eval-interval 20 --eval-batches 2 --threads 2 --quiet --lr 3e-3)
expect_rc 0 "$CT" train "${U[@]}" --train-data train.bin --val-data val.bin --progress "$TMP/u16.jsonl"
expect_rc 0 "$CT" train "${U[@]}" --train-data train32.bin --val-data val32.bin --progress "$TMP/u32.jsonl"
expect_eq "$(grep -v '"ms"' "$TMP/u32.jsonl" | grep -c loss)" "$(grep -v '"ms"' "$TMP/u16.jsonl" | grep -c loss)"
u16=$(grep '"event":"eval"' "$TMP/u16.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
u32=$(grep '"event":"eval"' "$TMP/u32.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.]*\).*/\1/')
[ -n "$u16" ] && [ "$u16" = "$u32" ] || fail "uint32 shard's val loss $u32, the uint16 one's $u16"
expect_rc 0 "$CT" train "${U[@]}" --train-data train32hi.bin --val-data val32hi.bin --vocab-size 70400 \
  --arch llama --progress "$TMP/u32hi.jsonl"
hi=$(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; e=[x["val_loss"] for x in r if x["event"]=="eval"]; print("%.4f %.4f" % (e[0], e[-1]))' "$TMP/u32hi.jsonl")
python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if b < a - 1 else 1)' $hi ||
  fail "tokens past 65,535 did not train: val loss $hi"
expect_rc 78 "$CT" train "${U[@]}" --train-data train32hi.bin --val-data val32hi.bin --vocab-size 65536
expect_eq "$ERR" "colo-train train: $TMP/data/train32hi.bin: token 70070 at 0 is outside model.vocab_size=65536"
echo "figure: uint32 shards: val loss $u32 as from uint16 ($u16); tokens 70000+ with vocab 70400: val loss $hi (first, last)"

echo "integration_engine_train: exact resume, corruption refusals, learning (first loss $first_loss, val $last_val), eval, sample, usage"
