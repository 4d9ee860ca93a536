#!/usr/bin/env bash
# Jobs end to end on one machine: colod and colo-workerd place, run and watch a 2-rank
# data-parallel job on tinyshakespeare, and every fault below ends with the job SUCCEEDED and a
# final loss bit-identical to the same job run standalone with `colo-train --nproc 2`:
#   (a) kill -9 of a rank mid-training: a new attempt resumes from the newest checkpoint; the
#       time from the kill to training again is measured; (a') the same of a LoRA job on two
#       tensor-parallel ranks, from the first job's model; (a'') and of a job whose sequences
#       are split over two context-parallel ranks (parallel.cp=2);
#   (b) kill -9 of the worker: its host goes DOWN within host_timeout, the job goes RESTARTING;
#       when the worker comes back it ends the ranks the dead one left, and the job resumes;
#   (c) kill -9 of colod: the restarted colod picks the job up, its ranks are not restarted;
#   (d) the newest checkpoint is corrupted before a rank dies: the resume uses the one before;
#   (e) coloctl cancel: every rank is gone within 5 s; then coloctl resume --from-step N
#       finishes it from that checkpoint;
#   (f) SIGTERM to the worker: the ranks stop at a step they agree on with a checkpoint there,
#       the job restarts without counting a restart, and resumes from that step;
#   (g) coloctl cordon --evict of the job's host, then kill -9 of colod before the worker hears
#       of it: the restarted colod goes on with the eviction, the ranks stop as in (f), and the
#       job goes on on another host from that step.
#   (h) a job of higher priority submitted while the host is full: the running job's ranks stop
#       as in (f), the new job runs to its end, and the first goes on from its stop;
#   (i) a time limit of 3 s an attempt: the ranks stop as in (f) and the job ends TIMED_OUT;
#       resumed until it succeeds.
# Also: coloctl logs (whole, -f across attempts), checkpoints, status --watch, history.
# Figures go to stdout as "figure: ..." lines.
source "$(dirname "$0")/lib.sh"
WD="$COLO_BIN/colo-workerd"
TRAIN="$COLO_BIN/colo-train"
DATA_SRC="$COLO_SRC/../shared/data/tinyshakespeare.txt"
[ -f "$DATA_SRC" ] || fail "no training text at $DATA_SRC"
mkdir -p "$TMP/data" "$TMP/run" "$TMP/ckpt"
"$TRAIN" prepare --input "$DATA_SRC" --out "$TMP/data/ts" >/dev/null
STEPS=600
cat >"$TMP/job.yaml" <<EOF
name: faults
model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin, val_path: ts/val.bin}
parallel: {dp: 2}
train: {steps: $STEPS, batch_size: 4, eval_interval: 100, eval_batches: 2}
checkpoint: {interval: 100, keep: 3}
resources: {device: cpu}
max_restarts: 3
EOF

# the reference: the same job, standalone
"$TRAIN" train --job "$TMP/job.yaml" --data-root "$TMP/data" --nproc 2 >"$TMP/ref.txt" 2>&1 ||
  fail "standalone reference run failed: $(tail -5 "$TMP/ref.txt")"
REF=$(grep -E "^step +$STEPS/$STEPS " "$TMP/ref.txt" | sed 's/.*| loss \([0-9.]*\) |.*/\1/')
[ -n "$REF" ] || fail "no final loss in the reference run"
echo "figure: reference final loss (colo-train --nproc 2) $REF"

# under valgrind the daemons answer slowly: a longer host timeout keeps a slow heartbeat from
# counting as a dead host
HOST_TIMEOUT=3s
[ "${COLO_VALGRIND:-0}" = 1 ] && HOST_TIMEOUT=6s
COLOD_ARGS=(--set host_timeout=$HOST_TIMEOUT --set restart_backoff=200ms)
start_colod "$TMP/state" "${COLOD_ARGS[@]}"
PORT=${COLO_SERVER##*:}
WPID=""
# small rank logs, so that they rotate while colod gets every byte
# keep_run_dirs: the log checks below read the rotated files in the worker's run directory
printf 'log_max_bytes: 20000\nlog_keep: 2\nkeep_run_dirs: true\n' >"$TMP/worker.yaml"
start_worker() {
  local vg
  valgrind_wrap vg
  "${vg[@]}" "$WD" -c "$TMP/worker.yaml" --coordinator "$COLO_SERVER" --name w1 --devices cpu --cpu-slots 2 --run-dir "$TMP/run" \
    --data-root "$TMP/data" --checkpoint-root "$TMP/ckpt" --colo-train "$TRAIN" \
    >>"$TMP/worker.log" 2>&1 &
  WPID=$!
}
start_worker

ckpt_at_least() { [ "$(jf "$1" 'j.get("newest_checkpoint",{}).get("step",0)')" -ge "$2" ]; }
rank_pid() { # job attempt rank -> pid from the worker's pid files (which come and go)
  local f
  for f in "$TMP"/run/pids/*; do
    if [ "$(cat "$f" 2>/dev/null)" = "$1.$2.$3" ]; then
      basename "$f"
      return 0
    fi
  done
}
final_loss() { # the final loss in rank 0's log of the job's last attempt, as colod has it
  "$COLOCTL" logs "$1" | grep -E "^step +$STEPS/$STEPS " | sed 's/.*| loss \([0-9.]*\) |.*/\1/'
}
expect_same_loss() {
  local got
  got=$(final_loss "$1")
  [ "$got" = "$REF" ] || fail "job $1: final loss $got, standalone $REF"
  echo "figure: job $1 ($2): final loss $got = standalone $REF, attempts $(jf "$1" 'j["attempt"]')"
}
submit() { "$COLOCTL" submit "$TMP/job.yaml"; }

# ---- an uninterrupted job, watched with logs -f; a checkpoint asked of it while it trains ----
J=$(submit)
"$COLOCTL" logs "$J" -f >"$TMP/follow.txt" 2>"$TMP/follow.err" &
FOLLOW=$!
expect_rc 1 "$COLOCTL" checkpoint 999
expect_eq "$ERR" "coloctl: NOT_FOUND: job 999 not found"
progress_at_least() { [ "$(jf "$1" 'j.get("progress",{}).get("step",0)')" -ge "$2" ]; }
wait_until 60 "job $J training" progress_at_least "$J" 150
expect_rc 0 "$COLOCTL" checkpoint "$J" --wait
ASKED=$(sed -n 's/^job [0-9]*: checkpoint at step \([0-9]*\): .*/\1/p' <<<"$OUT")
[ -n "$ASKED" ] && [ "$ASKED" -ge 150 ] && [ "$ASKED" -lt "$STEPS" ] || fail "coloctl checkpoint --wait: $OUT"
expect_contains "$OUT" "job $J: checkpoint asked of attempt 1's ranks (request 1); they save it at their next step"
echo "figure: coloctl checkpoint --wait: job $J saved step $ASKED, asked at step >= 150"
wait_until 60 "job $J success" is_state "$J" succeeded
# rank 0 says so; the run is undisturbed (its final loss is checked below)
expect_contains "$("$COLOCTL" logs "$J")" "checkpoint at step $ASKED, as asked: $TMP/ckpt/job-$J/step_"
expect_rc 1 "$COLOCTL" checkpoint "$J"
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job $J is not running: only a running job's ranks save a checkpoint"
wait_until 10 "logs -f to end" bash -c "! kill -0 $FOLLOW 2>/dev/null"
expect_same_loss "$J" "no fault"
FIRST=$J # its model is the base of the LoRA job in (a')
grep -qE "^step +$STEPS/$STEPS " "$TMP/follow.txt" ||
  fail "logs -f did not show the last step: $(tail -c 300 "$TMP/follow.txt"); stderr: $(cat "$TMP/follow.err"); colod has: $(tail -c 200 "$TMP/state/logs/job-$J/attempt-1/rank-0.log")"
# the worker rotated rank 0's log (20 kB files, 2 kept); colod has the whole output. Copy and
# truncate may lose what the rank writes between the copy's end and the truncate: at most a line
# a rotation.
[ -f "$TMP/run/job-$J/attempt-1/rank-0.log.1" ] || fail "rank 0's log was not rotated"
[ ! -f "$TMP/run/job-$J/attempt-1/rank-0.log.3" ] || fail "more rotated logs than log_keep"
LINES=$("$COLOCTL" logs "$J" | grep -cE '^step +[0-9]+/')
LOCAL=$(cat "$TMP/run/job-$J/attempt-1/rank-0.log"* | wc -c)
echo "figure: rank 0 wrote $STEPS step lines; colod has $LINES of them; the worker keeps $LOCAL bytes in rank-0.log, .1, .2"
[ "$LINES" -ge $((STEPS - 8)) ] || fail "colod has $LINES of the $STEPS step lines"
# checkpoint.keep: 3 newest kept, on disk and in colod, and the one asked for besides
[ "$("$COLOCTL" checkpoints "$J" --json | python3 -c 'import json,sys; print(" ".join(str(s) for s in sorted((int(c["step"]) for c in json.load(sys.stdin)["checkpoints"]), reverse=True)))')" = "$(printf '%s\n' $STEPS $((STEPS - 100)) $((STEPS - 200)) "$ASKED" | sort -rn | tr '\n' ' ' | sed 's/ $//')" ] ||
  fail "expected the 3 newest checkpoints and the asked one ($ASKED): $("$COLOCTL" checkpoints "$J")"
[ "$(ls "$TMP/ckpt/job-$J" | grep -c '^step_')" = 4 ] || fail "expected 4 checkpoint directories: $(ls "$TMP/ckpt/job-$J")"
# each checkpoint at an evaluation's step shows that validation loss, the lowest marked
"$COLOCTL" checkpoints "$J" >"$TMP/cks.txt"
python3 - "$STEPS" "$TMP/cks.txt" <<'PY' || fail "coloctl checkpoints: $(cat "$TMP/cks.txt")"
import re, sys
steps, rows = int(sys.argv[1]), {}
for line in open(sys.argv[2]).read().splitlines()[1:]:
    cells = re.split(r"\s{2,}", line.strip())
    rows[int(cells[0])] = cells[4]
for s in (steps, steps - 100, steps - 200):
    assert re.fullmatch(r"\d\.\d{4}( \(lowest\))?", rows[s]), rows
assert sum("(lowest)" in v for v in rows.values()) == 1, rows
PY
"$COLOCTL" status --watch --interval 200 "$J" >"$TMP/watch.txt"
expect_contains "$(cat "$TMP/watch.txt")" "SUCCEEDED"
# how far through its data: rank 0's last progress record at colod against its own first line
PLAN=$("$COLOCTL" logs "$J" | sed -n 's/^data: .* order, \([0-9.]*\) epochs in [0-9]* steps$/\1/p')
EPOCHS=$(jf "$J" 'j["progress"]["epochs"]')
python3 -c "import sys; sys.exit(0 if abs($EPOCHS - $PLAN) < 0.006 else 1)" ||
  fail "job $J: progress says $EPOCHS epochs, rank 0 planned $PLAN"
echo "figure: job $J went through $EPOCHS epochs of its training text (rank 0 planned $PLAN)"
# the training curve colod sampled: steps rising, the last one the final loss, the evaluations
"$COLOCTL" history "$J" --json >"$TMP/history.json"
python3 - "$TMP/history.json" "$STEPS" "$REF" <<'PY' || fail "history of job $J: $(head -c 600 "$TMP/history.json")"
import json, sys
s = json.load(open(sys.argv[1]))["samples"]
steps, ref = int(sys.argv[2]), float(sys.argv[3])
train = [x for x in s if "loss" in x]
vals = [int(x["step"]) for x in s if "val_loss" in x]
assert all(x["attempt"] == 1 for x in s), s[:3]
st = [int(x["step"]) for x in s]
assert st == sorted(set(st)), st
assert 3 <= len(train) <= 505 and int(train[-1]["step"]) == steps, (len(train), train[-1])
assert abs(train[-1]["loss"] - ref) <= 1e-6 * ref, (train[-1], ref)
assert vals == list(range(0, steps + 1, 100)), vals  # every evaluation, several a heartbeat
print("figure: history: %d training points from step %s to %d, %d evaluations (every 100 steps)" % (len(train), train[0]["step"], steps, len(vals)))
PY
"$COLOCTL" history "$J" --rows 5 >"$TMP/history.txt"
expect_contains "$(cat "$TMP/history.txt")" "VAL LOSS"
expect_contains "$(head -1 "$TMP/history.txt")" "loss "

# ---- checkpoint.keep_best: a one-rank job whose rate warms up to 1.0 over its 60 steps, which
# first trains and then wrecks it. Every checkpoint is evaluated; colod keeps the rows the engine
# keeps the directories of: the newest and the lowest validation loss's, with that loss ----
cat >"$TMP/best.yaml" <<EOF
name: best
model: {n_layer: 2, n_head: 2, n_embd: 64, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin, val_path: ts/val.bin}
train: {steps: 60, batch_size: 4, eval_interval: 0, eval_batches: 4}
optimizer: {lr: 1, warmup_steps: 60, schedule: constant}
checkpoint: {interval: 10, keep: 1, keep_best: true}
resources: {device: cpu}
EOF
B=$("$COLOCTL" submit "$TMP/best.yaml")
wait_until 60 "job $B success" is_state "$B" succeeded
"$COLOCTL" checkpoints "$B" --json >"$TMP/best.json"
"$COLOCTL" history "$B" --json >"$TMP/best-history.json"
"$COLOCTL" checkpoints "$B" >"$TMP/best.txt"
cat >"$TMP/best.py" <<'PY'
import json, os, re, struct, sys
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
rows = {int(c["step"]): c for c in json.load(open(sys.argv[1]))["checkpoints"]}
vals = {int(x["step"]): x["val_loss"] for x in json.load(open(sys.argv[2]))["samples"]
        if "val_loss" in x}
assert sorted(vals) == [10, 20, 30, 40, 50, 60], vals
best = min(sorted(vals, reverse=True), key=lambda s: vals[s])
assert best != 60, ("the newest is the best: this does not show keep_best", vals)
disk = sorted(int(d[5:]) for d in os.listdir(sys.argv[4]) if d.startswith("step_"))
assert sorted(rows) == disk == sorted({best, 60}), (sorted(rows), disk, best)
for s, c in rows.items():
    m = json.load(open(os.path.join(sys.argv[4], "step_%08d" % s, "manifest.json")))
    assert f32(c["val_loss"]) == f32(m["val_loss"]), (c, m["val_loss"])
    assert abs(c["val_loss"] - vals[s]) < 1e-6, (c, vals[s])
table = {int(l.split()[0]): l for l in open(sys.argv[3]).read().splitlines()[1:]}
assert re.search(r"\s%.4f \(lowest\)\s" % vals[best], table[best]), table
print("figure: keep_best: steps %s kept of 6 checkpoints (colod's rows and the disk), the best "
      "%d at %.4f, the newest %.4f" % (disk, best, vals[best], vals[60]))
PY
python3 "$TMP/best.py" "$TMP/best.json" "$TMP/best-history.json" "$TMP/best.txt" "$TMP/ckpt/job-$B" ||
  fail "keep_best job $B: $(cat "$TMP/best.txt"); history: $(head -c 600 "$TMP/best-history.json")"
# coloctl checkpoints --best: that one's path, for scripts; a job whose checkpoints record no
# loss (no evaluation, no keep_best) has none
BEST=$(python3 -c 'import json,sys; c = json.load(open(sys.argv[1]))["checkpoints"]; print(min(c, key=lambda x: (x["val_loss"], -int(x["step"])))["path"])' "$TMP/best.json")
expect_rc 0 "$COLOCTL" checkpoints "$B" --best
expect_eq "$OUT" "$BEST"
sed -e 's/^name: best/name: no-best/' -e 's/keep_best: true/keep_best: false/' "$TMP/best.yaml" >"$TMP/nobest.yaml"
NB=$("$COLOCTL" submit "$TMP/nobest.yaml")
wait_until 60 "job $NB success" is_state "$NB" succeeded
expect_rc 1 "$COLOCTL" checkpoints "$NB" --best
expect_eq "$ERR" "coloctl: job $NB has no checkpoint that records a validation loss or a score (its checkpoint.keep_best evaluates each one)"
# train.best_metric: a multiple-choice set's acc_norm ranks the same run's checkpoints, higher
# better, in place of the loss: colod keeps the rows of the newest and the highest score's, the
# engine their directories, each row with its score; early stopping counts the score too
python3 - "$DATA_SRC" >"$TMP/q.jsonl" <<'PY'
import json, random, sys
lines = [l.strip() for l in open(sys.argv[1], encoding="utf-8") if len(l.strip()) > 40][:400]
rng = random.Random(5)
for i in range(0, 240, 10):  # the right ending its own line's; the others another line's
    h = len(lines[i]) // 2
    ends = [lines[i][h:], lines[i + 3][len(lines[i + 3]) // 2:], lines[i + 7][len(lines[i + 7]) // 2:]]
    label = rng.randrange(3)
    ends[0], ends[label] = ends[label], ends[0]
    print(json.dumps({"ctx": lines[i][:h], "endings": ends, "label": label}))
PY
"$TRAIN" prepare --input "$TMP/q.jsonl" --out "$TMP/data/hs" --endings-field endings >/dev/null ||
  fail "preparing the multiple-choice set"
sed -e 's/^name: best/name: best-score/' -e 's|^data: .*|data: {train_path: ts/train.bin, val_path: ts/val.bin, choice_sets: [{path: hs/choices.bin, name: hs}]}|' \
  -e 's/^train: .*/train: {steps: 60, batch_size: 4, eval_interval: 0, eval_batches: 4, best_metric: hs.acc_norm, early_stop_patience: 100}/' \
  "$TMP/best.yaml" >"$TMP/best-score.yaml"
BS=$("$COLOCTL" submit "$TMP/best-score.yaml")
wait_until 60 "job $BS success" is_state "$BS" succeeded
"$COLOCTL" checkpoints "$BS" --json >"$TMP/bs.json"
"$COLOCTL" history "$BS" --json >"$TMP/bs-history.json"
"$COLOCTL" checkpoints "$BS" >"$TMP/bs.txt"
"$COLOCTL" checkpoints "$BS" --best >"$TMP/bs-best.txt"
"$COLOCTL" status "$BS" >"$TMP/bs-status.txt"
python3 - "$TMP/bs.json" "$TMP/bs-history.json" "$TMP/bs.txt" "$TMP/ckpt/job-$BS" "$TMP/bs-best.txt" "$TMP/bs-status.txt" <<'PY' ||
import json, os, re, struct, sys
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
rows = {int(c["step"]): c for c in json.load(open(sys.argv[1]))["checkpoints"]}
smp = [x for x in json.load(open(sys.argv[2]))["samples"] if x.get("choice_scores")]
sc = {int(x["step"]): x["choice_scores"][0].get("acc_norm", 0) for x in smp}
vl = {int(x["step"]): x["val_loss"] for x in smp}
assert sorted(sc) == [10, 20, 30, 40, 50, 60], sc
best = max(sorted(sc), key=lambda s: (sc[s], s))  # the newest of equals
low = min(sorted(vl, reverse=True), key=lambda s: vl[s])
disk = sorted(int(d[5:]) for d in os.listdir(sys.argv[4]) if d.startswith("step_"))
assert sorted(rows) == disk == sorted({best, 60}), (sorted(rows), disk, best, sc)
assert best != low, ("the lowest loss's is the highest score's: this does not show the score ranks", sc, vl)
for s, c in rows.items():
    m = json.load(open(os.path.join(sys.argv[4], "step_%08d" % s, "manifest.json")))
    assert m["score"]["metric"] == "hs.acc_norm" and f32(c["score"]) == f32(m["score"]["value"]), (c, m)
    assert abs(c["score"] - sc[s]) < 1e-6, (c, sc[s])
table = {int(l.split()[0]): l for l in open(sys.argv[3]).read().splitlines()[1:]}
assert "VAL LOSS  HS.ACC_NORM  " in open(sys.argv[3]).readline(), open(sys.argv[3]).read()
assert re.search(r"\s%.4f \(highest\)\s" % sc[best], table[best]), table
assert open(sys.argv[5]).read().strip() == rows[best]["path"], open(sys.argv[5]).read()
hi = max(sc.values())
st = open(sys.argv[6]).read()
assert re.search(r"early stop highest hs.acc_norm %.4f at step \d+; \d+ evaluations? since without a "
                 r"new highest, of 100" % hi, st), st
print("figure: keep_best by hs.acc_norm: steps %s kept (colod's rows and the disk), the highest "
      "%d at %.4f (acc_norm by step %s); the lowest loss at step %d" % (disk, best, sc[best], sc, low))
PY
  fail "keep_best by a score, job $BS: $(cat "$TMP/bs.txt")"
# a next stage from its best checkpoint (train.init_pick: best): its evaluation before a first
# step is the best's loss
sed -e 's/^name: best/name: after-best/' -e '/^checkpoint:/d' -e '/^optimizer:/d' \
  -e "s/^train: .*/train: {steps: 1, batch_size: 4, eval_interval: 1, eval_batches: 4, init_from_job: $B, init_pick: best}/" \
  "$TMP/best.yaml" >"$TMP/next.yaml"
N=$("$COLOCTL" submit "$TMP/next.yaml")
wait_until 60 "job $N success" is_state "$N" succeeded
"$COLOCTL" history "$N" --json >"$TMP/next-history.json"
python3 - "$TMP/best-history.json" "$TMP/next-history.json" <<'PY' || fail "init_pick: best, job $N: $("$COLOCTL" logs "$N" | head -5)"
import json, sys
ev = lambda f: {int(x["step"]): x["val_loss"] for x in json.load(open(f))["samples"] if "val_loss" in x}
run, nxt = ev(sys.argv[1]), ev(sys.argv[2])
b = min(sorted(run, reverse=True), key=lambda s: run[s])
assert abs(nxt[0] - run[b]) < 1e-6, (nxt, run)
print("figure: init_pick best: the next stage starts at %.4f, step %d's of the job before" % (nxt[0], b))
PY
expect_contains "$("$COLOCTL" logs "$N")" "initial weights from $TMP/ckpt/job-$B/step_"
# train.init_average: a next stage from the mean of the job's 2 newest checkpoints (30 and 60):
# the weights it starts from are colo-train average's of them, bit for bit
sed -e 's/^name: best/name: after-average/' -e '/^checkpoint:/d' -e '/^optimizer:/d' \
  -e "s/^train: .*/train: {steps: 1, batch_size: 4, eval_interval: 1, eval_batches: 4, init_from_job: $B, init_average: 2}/" \
  "$TMP/best.yaml" >"$TMP/avg.yaml"
AV=$("$COLOCTL" submit "$TMP/avg.yaml")
wait_until 60 "job $AV success" is_state "$AV" succeeded
expect_contains "$("$COLOCTL" logs "$AV")" "initial weights: the mean of 2 checkpoints of $TMP/ckpt/job-$B, steps 30 to 60, in $TMP/ckpt/job-$AV/init_average.safetensors"
expect_contains "$("$COLOCTL" status "$AV")" "  weights    the mean of job $B's 2 newest checkpoints"
expect_rc 0 "$TRAIN" average --checkpoint "$TMP/ckpt/job-$B" --last 2 --out "$TMP/avg-ref.safetensors"
cmp "$TMP/ckpt/job-$AV/init_average.safetensors" "$TMP/avg-ref.safetensors" ||
  fail "init_average: job $AV's initial weights are not colo-train average's"
# more than the job has: FAILED at once, saying so; refusals at submit
AV3=$("$COLOCTL" submit "$TMP/avg.yaml" --set train.init_average=3)
wait_until 60 "job $AV3 to fail" is_state "$AV3" failed
expect_contains "$(jf "$AV3" 'j["message"]')" "train.init_average=3: $TMP/ckpt/job-$B holds 2 complete checkpoints to average"
expect_rc 1 "$COLOCTL" submit "$TMP/avg.yaml" --set train.init_average=1
expect_contains "$ERR" "train.init_average=1 must be 2 to 64 checkpoints (0: none)"
expect_rc 1 "$COLOCTL" submit "$TMP/avg.yaml" --set train.init_step=30
expect_contains "$ERR" "train.init_average=2 averages the newest checkpoints: not with train.init_step or train.init_pick=best"
echo "figure: init_average: job $AV started from the mean of job $B's steps 30 and 60 (colo-train average's bits)"
# early stopping: the same wrecking rate over 200 steps, evaluated every 10, patience 3; the job
# SUCCEEDS before its last step, and its status says why
sed -e 's/^name: best/name: early/' -e '/^checkpoint:/d' -e '/^optimizer:/d' \
  -e "s/^train: .*/train: {steps: 200, batch_size: 4, eval_interval: 10, eval_batches: 4, early_stop_patience: 3}/" \
  "$TMP/best.yaml" >"$TMP/early.yaml"
echo "optimizer: {lr: 1, warmup_steps: 200, schedule: constant}" >>"$TMP/early.yaml"
E=$("$COLOCTL" submit "$TMP/early.yaml")
wait_until 60 "job $E success" is_state "$E" succeeded
MSG=$(jf "$E" 'j["message"]')
echo "$MSG" | grep -qE "^its rank exited 0: stopped early at step [0-9]+ of 200: the validation loss has not fallen below [0-9.]+ \(step [0-9]+\) in 3 evaluations$" ||
  fail "early stop job $E: $MSG"
ESTEP=$(jf "$E" 'j["progress"]["step"]')
[ "$ESTEP" -lt 200 ] && [ "$(jf "$E" 'j["newest_checkpoint"]["step"]')" = "$ESTEP" ] ||
  fail "early stop job $E: at step $ESTEP, newest checkpoint $(jf "$E" 'j.get("newest_checkpoint")')"
# the count as of the last evaluation, in the job's progress and its status
[ "$(jf "$E" 'j["progress"]["evals_since_best"]')" = 3 ] &&
  [ "$(jf "$E" 'j["progress"]["best_val_step"]')" -lt "$ESTEP" ] ||
  fail "early stop job $E: progress $(jf "$E" 'j["progress"]')"
expect_contains "$("$COLOCTL" status "$E")" "early stop lowest val loss $(jf "$E" '"%.4f" % j["progress"]["best_val_loss"]') at step $(jf "$E" 'j["progress"]["best_val_step"]'); 3 evaluations since without a new lowest, of 3"
echo "figure: early stop: job $E SUCCEEDED at step $ESTEP of 200: $MSG"
# documents: data.document_token goes from the job file through colod and the worker to the
# ranks, and the status shows it; the same job has optimizer.name: muon, which the status and
# rank 0's log show
DJ=$("$COLOCTL" submit "$TMP/early.yaml" --set data.document_token=10 --set train.steps=20 \
  --set train.early_stop_patience=0 --set optimizer.warmup_steps=0 --set optimizer.lr=0.003 \
  --set optimizer.name=muon)
wait_until 60 "job $DJ success" is_state "$DJ" succeeded
expect_contains "$("$COLOCTL" status "$DJ")" ", attention within documents (token 10 begins each)"
expect_contains "$("$COLOCTL" logs "$DJ")" "documents: each begins at token 10; attention stays within it"
expect_contains "$("$COLOCTL" status "$DJ")" ", Muon (momentum 0.95) for the blocks' matrices, AdamW for the rest"
expect_contains "$("$COLOCTL" logs "$DJ")" "optimizer: muon (momentum 0.95, Nesterov, 5 Newton-Schulz steps"
# skipping spikes: optimizer.skip_spike_sigma from the job file to the ranks, and the count of
# skipped updates back through the worker and colod to the status, as rank 0's log has them
SJ=$("$COLOCTL" submit "$TMP/early.yaml" --set train.steps=40 --set train.early_stop_patience=0 \
  --set optimizer.warmup_steps=0 --set optimizer.lr=0.003 --set optimizer.skip_spike_sigma=1 \
  --set optimizer.skip_spike_window=8)
wait_until 60 "job $SJ success" is_state "$SJ" succeeded
NSK=$(jf "$SJ" 'int(j["progress"].get("spikes_skipped", -1))')
LSK=$("$COLOCTL" logs "$SJ" | grep -c "update skipped" || true)
[ "$NSK" -gt 0 ] && [ "$NSK" = "$LSK" ] || fail "skip spikes job $SJ: progress says $NSK, the log $LSK"
expect_contains "$("$COLOCTL" status "$SJ")" "  spikes     $NSK steps skipped: loss or gradient norm above the last 8 steps' mean + 1 sd"
echo "figure: skip spikes: job $SJ skipped $NSK of 40 updates"

# ---- (a) kill -9 of a rank ----
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint at step 300 of job $J" ckpt_on_disk "$J" 300
P=$(rank_pid "$J" 1 1)
[ -n "$P" ] || fail "no pid file for job $J rank 1"
t0=$(date +%s%N)
kill -KILL "$P"
POLL_MAX=0.1 wait_until 30 "attempt 2 of job $J training" \
  python3 -c "import json,subprocess,sys; j=json.loads(subprocess.check_output(['$COLOCTL','status','$J','--json'])); p=j.get('progress',{}); sys.exit(0 if j.get('attempt')==2 and int(p.get('time_ms',0))>$((t0 / 1000000)) else 1)"
recover_ms=$((($(date +%s%N) - t0) / 1000000))
echo "figure: (a) from kill -9 of rank 1 to attempt 2 training (its first progress record at colod): $recover_ms ms (restart_backoff 200 ms, heartbeat 1 s)"
wait_until 60 "job $J success after the rank kill" is_state "$J" succeeded
expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "resumed from"
expect_same_loss "$J" "(a) rank killed"
# the curve has both attempts, the second from where it resumed
[ "$("$COLOCTL" history "$J" --json | python3 -c 'import json,sys; print(sorted({x["attempt"] for x in json.load(sys.stdin)["samples"]}))')" = "[1, 2]" ] ||
  fail "history of job $J does not have both attempts"

# ---- (a') kill -9 of a rank of a LoRA job on two tensor-parallel ranks ----
# each rank holds its part of the adapters and rank 0 writes them whole: the new attempt resumes
# from that checkpoint, each rank taking its part again, and ends where the same job run
# standalone ends
cp -r "$TMP/ckpt/job-$FIRST/step_$(printf %08d $STEPS)" "$TMP/data/lora-base"
sed -e 's/^name: faults/name: lora-tp/' -e 's/^parallel: .*/parallel: {tp: 2}/' \
  -e "s/^train: .*/train: {steps: 300, batch_size: 4, eval_interval: 100, eval_batches: 2, init_from: lora-base, lora_rank: 4, lora_dropout: 0.1}/" \
  "$TMP/job.yaml" >"$TMP/lora.yaml"
loss300() { grep -E "^step +300/300 " | sed 's/.*| loss \([0-9.]*\) |.*/\1/'; }
# kill_rank1 YAML WHAT [STATUS]: the 300-step job run standalone on 2 ranks, then by colod (its
# status holding STATUS), rank 1 killed after the step-100 checkpoint: the job resumes and ends at
# the standalone run's loss
kill_rank1() {
  local yaml=$1 what=$2 want=${3:-} ref got
  "$TRAIN" train --job "$yaml" --data-root "$TMP/data" --nproc 2 >"$yaml.ref" 2>&1 ||
    fail "standalone $what run failed: $(tail -5 "$yaml.ref")"
  ref=$(loss300 <"$yaml.ref")
  J=$("$COLOCTL" submit "$yaml")
  [ -z "$want" ] || expect_contains "$("$COLOCTL" status "$J")" "$want"
  POLL_MAX=0.1 wait_until 60 "a checkpoint at step 100 of job $J" ckpt_on_disk "$J" 100
  P=$(rank_pid "$J" 1 1)
  [ -n "$P" ] || fail "no pid file for job $J rank 1"
  kill -KILL "$P"
  wait_until 60 "job $J success after the rank kill" is_state "$J" succeeded
  expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "resumed from"
  got=$("$COLOCTL" logs "$J" | loss300)
  [ -n "$ref" ] && [ "$got" = "$ref" ] || fail "$what job $J: final loss $got, standalone $ref"
  echo "figure: $what job $J, rank 1 killed: final loss $got = standalone $ref, attempts $(jf "$J" 'j["attempt"]')"
}
kill_rank1 "$TMP/lora.yaml" "(a') LoRA on tp=2"

# ---- (a'') kill -9 of a rank of a job whose sequences are split over two ranks (parallel.cp) ----
# colod runs it on dp × cp × tp × pp = 2 ranks; the new attempt resumes from the pieces both
# wrote (ZeRO-1 over the pair) and ends where the same job run standalone ends
sed -e 's/^name: faults/name: cp/' -e 's/^parallel: .*/parallel: {cp: 2, zero_stage: 1}/' \
  -e "s/^train: .*/train: {steps: 300, batch_size: 4, eval_interval: 100, eval_batches: 2}/" \
  "$TMP/job.yaml" >"$TMP/cp.yaml"
kill_rank1 "$TMP/cp.yaml" "(a'') cp=2" "dp=1 cp=2 tp=1 pp=1 (world 2)"

# ---- (d) the newest checkpoint corrupted, then a rank dies ----
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint at step 400 of job $J" ckpt_on_disk "$J" 400
# pause both ranks, so that the newest checkpoint on disk stays the newest while it is spoiled
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -STOP "$P0" "$P1"
CK=$(ls -d "$TMP/ckpt/job-$J"/step_* | sort | tail -1)
CKSTEP=$((10#${CK##*step_}))
python3 - "$CK/rank_00000.safetensors" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-64, 2)
    b = f.read(8)
    f.seek(-64, 2)
    f.write(bytes(x ^ 0xFF for x in b))
EOF
kill -KILL "$P0"
kill -CONT "$P1"
wait_until 60 "job $J success after the corrupted checkpoint" is_state "$J" succeeded
LOG2=$("$COLOCTL" logs "$J" --attempt 2)
RESUMED=$(echo "$LOG2" | sed -n 's/^resumed from .*step_0*\([0-9]*\) at step.*/\1/p' | head -1)
[ -n "$RESUMED" ] && [ "$RESUMED" -lt "$CKSTEP" ] ||
  fail "(d) attempt 2 resumed from [$RESUMED], expected before the corrupted step $CKSTEP: $(echo "$LOG2" | head -5)"
# a here-string, not a pipe: under pipefail, grep -q leaving at its match would fail an echo of a
# log longer than the pipe's buffer (SIGPIPE)
grep -q "removed checkpoints newer than step $RESUMED: .*$(printf step_%08d "$CKSTEP")" <<<"$LOG2" ||
  fail "(d) the corrupted step $CKSTEP was not removed at the resume; attempt 2's log: $(echo "$LOG2" | head -8); on disk: $(ls -a "$TMP/ckpt/job-$J" | tr '\n' ' ')"
echo "figure: (d) step $CKSTEP corrupted; attempt 2 resumed from step $RESUMED and removed it"
expect_same_loss "$J" "(d) corrupted newest checkpoint"

# ---- (c) kill -9 of colod ----
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint at step 200 of job $J" ckpt_on_disk "$J" 200
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
COLOD_PID=""
sleep 1
start_colod "$TMP/state" "${COLOD_ARGS[@]}" --listen "127.0.0.1:$PORT"
wait_until 60 "job $J success after the colod restart" is_state "$J" succeeded
[ "$(jf "$J" 'j["attempt"]')" = 1 ] || fail "(c) the job took a new attempt after colod restarted"
grep -q "job $J attempt 1 rank 0 (pid $P0) exited with code 0" "$TMP/worker.log" &&
  grep -q "job $J attempt 1 rank 1 (pid $P1) exited with code 0" "$TMP/worker.log" ||
  fail "(c) the ranks $P0 $P1 did not run on to the end: $(grep "job $J " "$TMP/worker.log")"
expect_same_loss "$J" "(c) colod killed"

# ---- (b) kill -9 of the worker ----
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint at step 200 of job $J" ckpt_on_disk "$J" 200
P0=$(rank_pid "$J" 1 0)
kill -KILL "$WPID"
wait "$WPID" 2>/dev/null || true
t0=$(date +%s%N)
POLL_MAX=0.1 wait_until 10 "host w1 DOWN" bash -c "'$COLOCTL' hosts | grep -q ' DOWN '"
down_ms=$((($(date +%s%N) - t0) / 1000000))
wait_until 10 "job $J RESTARTING" is_state "$J" restarting
echo "figure: (b) host DOWN $down_ms ms after kill -9 of its worker (host_timeout $HOST_TIMEOUT); job: $(jf "$J" 'j["message"]')"
start_worker
wait_until 60 "job $J success after the worker came back" is_state "$J" succeeded
kill -0 "$P0" 2>/dev/null && fail "(b) rank pid $P0 of the dead worker survived"
grep -q "left by an earlier worker" "$TMP/worker.log" || echo "note: (b) the old ranks had ended before the worker came back"
expect_same_loss "$J" "(b) worker killed"

# ---- (e) cancel ----
J=$(submit)
# the ranks are paused once a checkpoint from step 200 is on disk, so that a fast build cannot finish
# the job before colod has heard of it and the cancel comes; they go on as the cancel is sent
disk_ckpt() { # job: a complete checkpoint of step 200 to 500 on disk
  compgen -G "$TMP/ckpt/job-$1/step_00000[2-5]00/manifest.json" >/dev/null
}
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $J from step 200 on disk" disk_ckpt "$J"
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -STOP "$P0" "$P1"
wait_until 30 "colod to know job $J's checkpoint 200" ckpt_at_least "$J" 200
t0=$(date +%s%N)
"$COLOCTL" cancel "$J" >/dev/null
kill -CONT "$P0" "$P1"
gone() { ! kill -0 "$P0" 2>/dev/null && ! kill -0 "$P1" 2>/dev/null; }
POLL_MAX=0.1 wait_until 5 "every rank of job $J gone after cancel" gone
cancel_ms=$((($(date +%s%N) - t0) / 1000000))
echo "figure: (e) every rank gone $cancel_ms ms after coloctl cancel"
is_state "$J" cancelled || fail "job $J is $(jf "$J" 'j["state"]') after cancel"

# ---- ResumeJob: the cancelled job, from a chosen checkpoint (the newest but one) ----
# the stopping ranks may have written (and pruned for) checkpoints after the cancel; the worker
# reports them with the ranks' exit, and colod registers them: its rows match the disk
sleep 1
ROWS=$("$COLOCTL" checkpoints "$J" --json | python3 -c 'import json,sys; print(" ".join("step_%08d" % c["step"] for c in json.load(sys.stdin)["checkpoints"]))')
DISK=$(ls "$TMP/ckpt/job-$J" | grep '^step_' | sort -r | tr '\n' ' ' | sed 's/ $//')
expect_eq "$ROWS" "$DISK" "(colod's checkpoint rows against the directories after the cancel)"
FROM=$("$COLOCTL" checkpoints "$J" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoints"][1]["step"])')
ls -la "$TMP/ckpt/job-$J" >"$TMP/ckpt-before-resume.txt" 2>&1
"$COLOCTL" resume "$J" --from-step "$FROM" >/dev/null
wait_until 60 "job $J success after resume --from-step $FROM" is_state "$J" succeeded
[ "$(jf "$J" 'j["attempt"]')" = 2 ] || fail "the resume of job $J took $(jf "$J" 'j["attempt"]') attempts; checkpoints before it: $(cat "$TMP/ckpt-before-resume.txt"); attempt 2: $("$COLOCTL" logs "$J" --attempt 2 | head -3); worker: $(grep "job $J " "$TMP/worker.log" | cut -c12-200)"
expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "resumed from $TMP/ckpt/job-$J/$(printf step_%08d "$FROM") at step $FROM"
expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "removed checkpoints newer than step $FROM"
expect_same_loss "$J" "cancelled, then resumed from step $FROM"

# ---- (f) the worker stopped (systemctl stop, maintenance): its ranks finish their step, agree
# on stopping there, save a checkpoint and exit 75; the worker reports that before it exits;
# colod restarts the job without counting a restart, and it resumes from that very step ----
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $J from step 200 on disk" disk_ckpt "$J"
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -STOP "$P0" "$P1" # as in (e): the job must not end before the worker is stopped
t0=$(date +%s%N)
kill -TERM "$WPID"
kill -CONT "$P0" "$P1"
wait "$WPID" || fail "(f) the worker did not exit 0 on SIGTERM$(cat "$TMP"/valgrind.*.log 2>/dev/null)"
stop_ms=$((($(date +%s%N) - t0) / 1000000))
WPID=""
expect_contains "$(cat "$TMP/worker.log")" "job $J attempt 1 rank 0 (pid $P0) exited with code 75"
wait_until 10 "job $J restarting after its worker stopped" is_state "$J" restarting
MSG=$(jf "$J" 'j["message"]')
expect_contains "$MSG" "stopped as asked at step"
expect_contains "$MSG" "restarting from its checkpoint (not counted as a restart)"
expect_eq "$(jf "$J" 'j.get("restarts", 0)')" "0" "(restarts after a graceful stop)"
STOP=$(echo "$MSG" | sed -n 's/.*stopped as asked at step \([0-9]*\).*/\1/p')
SDIR="$TMP/ckpt/job-$J/$(printf step_%08d "$STOP")"
[ -f "$SDIR/manifest.json" ] || fail "(f) no checkpoint at the stop step $STOP: $(ls "$TMP/ckpt/job-$J")"
echo "figure: (f) worker stopped $stop_ms ms after SIGTERM; its ranks stopped at step $STOP with a checkpoint"
start_worker
wait_until 60 "job $J success after its worker came back" is_state "$J" succeeded
expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "resumed from $SDIR at step $STOP"
expect_same_loss "$J" "(f) worker stopped gracefully at step $STOP, then restarted"

# ---- (g) coloctl cordon --evict: the job's ranks on the evicted host (and its others) stop at a
# step with a checkpoint there, and the job restarts on the other host from that step, not
# counted as a restart. A second worker, w2, is cordoned at first so that the job starts on w1.
# colod is killed right after the eviction, with w1's worker paused so that it has not heard of
# it: only the eviction stored with the attempt can stop the ranks (a colod that forgot it would
# let the job run to its end on w1, in attempt 1) ----
mkdir -p "$TMP/run2"
vg=()
valgrind_wrap vg
"${vg[@]}" "$WD" -c "$TMP/worker.yaml" --coordinator "$COLO_SERVER" --name w2 --devices cpu --cpu-slots 2 \
  --run-dir "$TMP/run2" --data-root "$TMP/data" --checkpoint-root "$TMP/ckpt" --colo-train "$TRAIN" \
  >>"$TMP/worker2.log" 2>&1 &
W2PID=$!
w2_up() { "$COLOCTL" hosts --json | python3 -c 'import json,sys; sys.exit(not [h for h in json.load(sys.stdin) if h["name"] == "w2" and h["state"] == "up"])'; }
wait_until 10 "w2 registered" w2_up
expect_rc 0 "$COLOCTL" cordon w2
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $J from step 200 on disk" disk_ckpt "$J"
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -STOP "$P0" "$P1" # as in (e)
expect_rc 0 "$COLOCTL" uncordon w2
expect_rc 2 "$COLOCTL" uncordon w1 --evict
kill -STOP "$WPID"
expect_rc 0 "$COLOCTL" cordon w1 --reason "evict test" --evict
expect_eq "$OUT" "host w1 cordoned: no new ranks go there; 1 job stopping to restart elsewhere: $J"
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
COLOD_PID=""
start_colod "$TMP/state" "${COLOD_ARGS[@]}" --listen "127.0.0.1:$PORT"
kill -CONT "$WPID"
wait_until 10 "the restarted colod to go on with the eviction of job $J" \
  grep -q "job $J attempt 1: its ranks are still stopping (evicted)" "$TMP/colod.log"
# the ranks go on once their worker has asked them to stop: left to run, a fast build (or a
# worker slowed by valgrind) could let them finish the job before the worker's next beat
wait_until 30 "w1 to stop job $J's ranks" \
  grep -q "job $J attempt 1 rank 0 is no longer wanted: stopping" "$TMP/worker.log"
kill -CONT "$P0" "$P1"
attempt_is() { [ "$(jf "$1" 'j["attempt"]')" = "$2" ]; }
wait_until 30 "job $J's second attempt after the eviction of w1" attempt_is "$J" 2
wait_until 60 "job $J success after the eviction" is_state "$J" succeeded
MSGS=$(sqlite3 "$TMP/state/colod.db" "SELECT message FROM job_events WHERE job_id = $J")
expect_contains "$MSGS" "stopped as asked at step"
expect_contains "$MSGS" "restarting from its checkpoint (not counted as a restart)"
GSTOP=$(echo "$MSGS" | sed -n 's/.*stopped as asked at step \([0-9]*\).*/\1/p' | head -1)
expect_eq "$(jf "$J" 'j.get("restarts", 0)')" "0" "(restarts after an eviction)"
expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "resumed from $TMP/ckpt/job-$J/$(printf step_%08d "$GSTOP") at step $GSTOP"
expect_contains "$(cat "$TMP/worker.log")" "job $J attempt 1 rank 0 is no longer wanted: stopping"
expect_contains "$(cat "$TMP/worker2.log")" "job $J attempt 2 rank 0/2 started"
echo "figure: (g) w1 evicted, colod killed and restarted: job $J stopped at step $GSTOP and went on on w2"
expect_same_loss "$J" "(g) host evicted at step $GSTOP, restarted on another host"
expect_rc 0 "$COLOCTL" uncordon w1
kill -TERM "$W2PID"
wait "$W2PID" || fail "w2 did not exit 0 on SIGTERM$(cat "$TMP"/valgrind.*.log 2>/dev/null)"

# ---- (h) priority: a job of priority 5 finds w1's two slots taken by one of priority 0, which
# is preempted: its ranks stop at a step with a checkpoint, the new job runs to its end, and the
# first goes on from that step (attempt 2, no restart counted) to the standalone run's loss ----
J=$(submit)
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $J from step 200 on disk" disk_ckpt "$J"
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -STOP "$P0" "$P1" # as in (e)
expect_rc 0 "$COLOCTL" submit "$TMP/job.yaml" --set priority=5 --set train.steps=300
H=$OUT
expect_contains "$("$COLOCTL" status "$H")" "priority   5"
wait_until 30 "w1 to stop job $J's ranks for job $H" \
  grep -q "job $J attempt 1 rank 0 is no longer wanted: stopping" "$TMP/worker.log"
kill -CONT "$P0" "$P1"
wait_until 60 "job $H, of higher priority, to succeed" is_state "$H" succeeded
wait_until 60 "job $J success after its preemption" is_state "$J" succeeded
expect_contains "$(cat "$TMP/colod.log")" "job $J attempt 1: stopping its ranks (preempted by job $H, priority 5 over 0)"
MSGS=$(sqlite3 "$TMP/state/colod.db" "SELECT message FROM job_events WHERE job_id = $J")
HSTOP=$(echo "$MSGS" | sed -n 's/.*stopped as asked at step \([0-9]*\).*/\1/p' | head -1)
[ -n "$HSTOP" ] || fail "(h) job $J did not stop as asked: $MSGS"
expect_eq "$(jf "$J" 'j.get("restarts", 0)')" "0" "(restarts after a preemption)"
expect_contains "$("$COLOCTL" logs "$J" --attempt 2)" "resumed from $TMP/ckpt/job-$J/$(printf step_%08d "$HSTOP") at step $HSTOP"
echo "figure: (h) job $J preempted by job $H (priority 5) at step $HSTOP, went on after it"
expect_same_loss "$J" "(h) preempted at step $HSTOP, then went on"

# ---- (i) a time limit: each attempt of job J may run 3 s. The first is held (SIGSTOP) past it:
# its ranks stop at a step with a checkpoint and the job ends TIMED_OUT. Resumed as often as it
# takes, a few seconds at a time, it reaches the standalone run's loss ----
expect_rc 0 "$COLOCTL" submit "$TMP/job.yaml" --set resources.time_limit_s=3
J=$OUT
# held once training (its stop signal caught from then on), before its limit
training() { cat "$TMP/run/job-$J/attempt-1"/rank-0.log* 2>/dev/null | grep -qE "^step +[0-9]+/$STEPS "; }
wait_until 30 "job $J to train" training
P0=$(rank_pid "$J" 1 0)
P1=$(rank_pid "$J" 1 1)
kill -STOP "$P0" "$P1"
expect_contains "$("$COLOCTL" status "$J")" "time limit 3s an attempt, "
wait_until 30 "w1 to stop job $J's ranks for its time limit" \
  grep -q "job $J attempt 1 rank 0 is no longer wanted: stopping" "$TMP/worker.log"
kill -CONT "$P0" "$P1"
wait_until 60 "job $J to time out" is_state "$J" timed_out
MSG=$(jf "$J" 'j["message"]')
echo "$MSG" | grep -qE "^its time limit \(resources.time_limit_s=3\) was reached: rank [01] stopped as asked at step [0-9]+, with its checkpoint" ||
  fail "(i) job $J: $MSG"
expect_contains "$(cat "$TMP/colod.log")" "job $J attempt 1: stopping its ranks (its time limit of 3 s is reached)"
RESUMES=0
while ! is_state "$J" succeeded; do
  if is_state "$J" timed_out; then
    [ "$RESUMES" -lt 20 ] || fail "(i) job $J timed out $RESUMES times: $(jf "$J" 'j["message"]')"
    expect_rc 0 "$COLOCTL" resume "$J"
    RESUMES=$((RESUMES + 1))
  fi
  is_state "$J" failed && fail "(i) job $J failed: $(jf "$J" 'j["message"]')"
  sleep 0.2
done
echo "figure: (i) job $J timed out at its 3 s limit and was resumed $RESUMES times, $(jf "$J" 'j["attempt"]') attempts"
expect_same_loss "$J" "(i) cut into attempts of at most 3 s by its time limit"

# every job side by side: the succeeded ones trained to their end, rows by validation loss
expect_rc 0 "$COLOCTL" --json compare --name faults
echo "$OUT" >"$TMP/compare.json"
python3 - "$STEPS" "$TMP/compare.json" <<'PY' || fail "coloctl compare: $OUT"
import json, sys
rows, steps = json.load(open(sys.argv[2])), int(sys.argv[1])
done = [r for r in rows if r["state"] == "SUCCEEDED"]
# each to its own train.steps (a field that differs, or the test's)
assert len(done) >= 5 and all(r["step"] == int(r["fields"].get("train.steps", steps)) and
                              "val_loss" in r for r in done), rows
vals = [r["val_loss"] for r in rows if "val_loss" in r]
assert vals == sorted(vals) and rows[:len(vals)] == [r for r in rows if "val_loss" in r], rows
print("figure: coloctl compare: %d jobs, %d succeeded, validation losses %.4f to %.4f" % (len(rows), len(done), vals[0], vals[-1]))
PY

kill -TERM "$WPID"
wait "$WPID" || fail "the worker did not exit 0 on SIGTERM$(cat "$TMP"/valgrind.*.log 2>/dev/null)"
stop_colod
echo "PASS"
