#!/usr/bin/env bash
# Elastic data parallelism (parallel.min_dp): a job that asks for dp=4 and accepts 2 runs with 2
# data-parallel groups where only two slots are up, each with train.grad_accum doubled; when a
# second worker comes up it goes back to 4 (a stop at a step with a checkpoint, not counted as a
# restart); when that worker dies it restarts with 2 again. A colod killed and restarted while the
# job runs with 2 finds it so. Through all of it the job trains on
# the same global batch and the same sequences: its final loss is the standalone dp=4 run's.
# Then a job of higher priority preempts the elastic job, which goes on with 2 groups beside it
# and back to 4 after it, to the same final loss.
# Figures go to stdout as "figure: ..." lines.
source "$(dirname "$0")/lib.sh"
WD="$COLO_BIN/colo-workerd"
TRAIN="$COLO_BIN/colo-train"
DATA_SRC="$COLO_SRC/../shared/data/tinyshakespeare.txt"
[ -f "$DATA_SRC" ] || fail "no training text at $DATA_SRC"
mkdir -p "$TMP/data" "$TMP/run1" "$TMP/run2" "$TMP/ckpt"
"$TRAIN" prepare --input "$DATA_SRC" --out "$TMP/data/ts" >/dev/null
STEPS=300
cat >"$TMP/job.yaml" <<EOF
name: elastic
model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin, val_path: ts/val.bin}
parallel: {dp: 4, min_dp: 2, zero_stage: 1}
train: {steps: $STEPS, batch_size: 4, eval_interval: 100, eval_batches: 2}
checkpoint: {interval: 25, keep: 3}
resources: {device: cpu}
max_restarts: 3
EOF

# the spec's checks
expect_rc 1 "$COLOCTL" submit "$TMP/job.yaml" --set parallel.min_dp=5 --dry-run
expect_contains "$ERR" "parallel.min_dp=5 must be at most parallel.dp=4"

# the reference: one process that accumulates the four groups' batches in turn, and evaluates
# their four groups' evaluation batches (data-parallel groups and accumulation take the same
# sequences, so this is the dp=4 run; a dp=4 run of four processes on CI's two cores takes ten
# times as long)
sed 's/^parallel: .*/parallel: {dp: 1}/; s/batch_size: 4,/batch_size: 4, grad_accum: 4,/; s/eval_batches: 2/eval_batches: 8/' \
  "$TMP/job.yaml" >"$TMP/ref.yaml"
"$TRAIN" train --job "$TMP/ref.yaml" --data-root "$TMP/data" --threads 1 >"$TMP/ref.txt" 2>&1 ||
  fail "standalone reference run failed: $(tail -5 "$TMP/ref.txt")"
loss_at() { grep -E "^step +$STEPS/$STEPS " | sed 's/.*| loss \([0-9.]*\) |.*/\1/'; }
val_at() { grep -E "^step +$STEPS \| val loss " | sed 's/.* val loss \([0-9.]*\).*/\1/'; }
REF=$(loss_at <"$TMP/ref.txt")
REFVAL=$(val_at <"$TMP/ref.txt")
[ -n "$REF" ] && [ -n "$REFVAL" ] || fail "no final loss in the reference run"
echo "figure: reference (one process, grad_accum 4: the dp=4 run's batches): final loss $REF, val loss $REFVAL"
# a job's final losses against the reference's: the same sequences, summed in another order
# across ranks, so within 1e-5
expect_reference() { # job, what happened to it
  local got val
  got=$("$COLOCTL" logs "$1" | loss_at)
  val=$("$COLOCTL" logs "$1" | val_at)
  echo "figure: job $1: final loss $got, val loss $val after $2; the reference $REF, $REFVAL; attempts $(jf "$1" 'j["attempt"]'), restarts $(jf "$1" 'j.get("restarts", 0)')"
  python3 -c "import sys; a, b, c, d = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * b or abs(c - d) > 1e-5 * d)" \
    "$got" "$REF" "$val" "$REFVAL" || fail "job $1: final loss $got (val $val), the reference's $REF ($REFVAL)"
}

start_colod "$TMP/state" --set host_timeout=3s --set restart_backoff=200ms \
  --set elastic_grow_after=1s
start_worker() { # name run-dir
  local vg
  valgrind_wrap vg
  "${vg[@]}" "$WD" --coordinator "$COLO_SERVER" --name "$1" --devices cpu --cpu-slots 2 \
    --run-dir "$2" --data-root "$TMP/data" --checkpoint-root "$TMP/ckpt" --colo-train "$TRAIN" \
    >>"$TMP/worker-$1.log" 2>&1 &
}
start_worker w1 "$TMP/run1"
W1=$!
host_up() { "$COLOCTL" hosts --json | python3 -c 'import json,sys; sys.exit(not [h for h in json.load(sys.stdin) if h["name"] == sys.argv[1] and h["state"] == "up"])' "$1"; }
wait_until 20 "w1 registered" host_up w1

ranks() { jf "$1" 'j.get("running_dp", 0)'; }
attempt_is() { [ "$(jf "$1" 'j["attempt"]')" = "$2" ]; }

rank_pids() { # job attempt -> the pids of its ranks on w1, from the worker's pid files
  local f
  for f in "$TMP"/run1/pids/*; do
    [ "$(cut -d. -f1,2 <"$f" 2>/dev/null)" = "$1.$2" ] && basename "$f"
  done
}
two_ranks() { [ "$(rank_pids "$@" | wc -l)" = 2 ]; }

# ---- one worker, two slots: dp=2, each rank accumulating two micro-steps ----
expect_rc 0 "$COLOCTL" submit "$TMP/job.yaml"
J=$OUT
POLL_MAX=0.1 wait_until 30 "job $J's ranks on w1" two_ranks "$J" 1
P=$(rank_pids "$J" 1)
# held once they have a checkpoint (so that the way back to dp=4 resumes from one), and so that
# even a fast build is still at its first steps below
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $J" ckpt_on_disk "$J" 25
kill -STOP $P
[ "$(ranks "$J")" = 2 ] || fail "job $J: running with dp=$(ranks "$J"), expected 2 of 4"
expect_contains "$("$COLOCTL" status "$J")" "  elastic    dp from 2 to 4: running with dp=2, each rank accumulating 2× (the same global batch)"
expect_contains "$(cat "$TMP/colod.log")" \
  "job $J attempt 1: elastic: 2 of its 4 data-parallel groups fit, each with train.grad_accum=2 (the same global batch)"
echo "figure: job $J attempt 1 on w1 alone: dp=2 of 4, grad_accum 2"

# ---- colod killed and restarted meanwhile: it reads the attempt's dp back from its ranks ----
PORT=${COLO_SERVER##*:}
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
COLOD_PID=""
start_colod "$TMP/state" --set host_timeout=3s --set restart_backoff=200ms \
  --set elastic_grow_after=1s --listen "127.0.0.1:$PORT"
[ "$(jf "$J" '"%s %s %s" % (j["state"], j["attempt"], j.get("running_dp", 0))')" = "running 1 2" ] ||
  fail "job $J after the colod restart: $("$COLOCTL" status "$J")"
echo "figure: colod killed and restarted: job $J still in attempt 1 with dp=2"

# ---- a second worker: back to dp=4, at a step with a checkpoint ----
start_worker w2 "$TMP/run2"
W2=$!
grown() { grep -q "job $J attempt 1: stopping its ranks (elastic: room for all 4 data-parallel groups again, from 2)" "$TMP/colod.log"; }
wait_until 30 "colod to grow job $J back to dp=4" grown
kill -CONT $P
wait_until 30 "job $J attempt 2" attempt_is "$J" 2
wait_until 30 "job $J running again" is_state "$J" running
[ "$(ranks "$J")" = 4 ] || fail "job $J attempt 2: running with dp=$(ranks "$J"), expected 4"
[ "$(jf "$J" 'j.get("restarts", 0)')" = 0 ] || fail "job $J: growing back counted as a restart"
resumed_at() { "$COLOCTL" logs "$J" --attempt 2 | sed -n 's/^resumed from .*step_0*\([0-9]*\) at step.*/\1/p'; }
says_resumed() { [ -n "$(resumed_at)" ]; } # rank 0's line reaches colod with its worker's beat
wait_until 30 "attempt 2 of job $J to say where it resumed" says_resumed
GROW=$(resumed_at)
[ -n "$GROW" ] || fail "attempt 2 of job $J did not resume: $("$COLOCTL" logs "$J" --attempt 2 | head -5)"
echo "figure: job $J attempt 2: 4 ranks on w1 and w2, resumed from step $GROW"

# ---- w2 dies: the job restarts with dp=2 on w1 ----
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $J after step $GROW" ckpt_on_disk "$J" $((GROW + 1))
kill -KILL "$W2"
# its ranks there end with it, and the job may restart onto w2 once more before w2 is DOWN
running_dp() { [ "$(jf "$1" '"%s %s" % (j["state"], j.get("running_dp", 0))')" = "running $2" ]; }
wait_until 60 "job $J running with dp=2 after w2 died" running_dp "$J" 2
wait_until 120 "job $J success" is_state "$J" succeeded
expect_reference "$J" "dp 2 -> 4 -> 2"

# ---- preemption: a job of priority 5 that needs two slots, while the elastic job holds all
# four. The elastic job stops at a step with a checkpoint, goes on with dp=2 beside the new one,
# and back to 4 once that one is cancelled and its ranks are gone; its final loss is still the
# reference's ----
start_worker w2 "$TMP/run2b"
W2=$!
wait_until 20 "w2 up again" host_up w2
sed 's/^name: elastic/name: elastic-preempted/' "$TMP/job.yaml" >"$TMP/job2.yaml"
expect_rc 0 "$COLOCTL" submit "$TMP/job2.yaml"
E=$OUT
wait_until 60 "job $E running with dp=4" running_dp "$E" 4
POLL_MAX=0.1 wait_until 60 "a checkpoint of job $E" ckpt_on_disk "$E" 25
# held, so that it is still training when the urgent job comes (as in integration_jobs (h))
EP=$(for f in "$TMP"/run1/pids/* "$TMP"/run2b/pids/*; do
  [ "$(cut -d. -f1 <"$f" 2>/dev/null)" = "$E" ] && basename "$f"; done)
[ "$(echo "$EP" | wc -w)" = 4 ] || fail "job $E: expected 4 rank pids, found: $EP"
kill -STOP $EP
sed -e 's/^name: elastic/name: urgent/' -e 's/^parallel: .*/parallel: {dp: 2}/' \
  -e 's/steps: [0-9]*/steps: 100000/' "$TMP/job.yaml" >"$TMP/urgent.yaml"
echo "priority: 5" >>"$TMP/urgent.yaml"
expect_rc 0 "$COLOCTL" submit "$TMP/urgent.yaml"
U=$OUT
preempting() { grep -q "job $E attempt [0-9]*: stopping its ranks (preempted by job $U, priority 5 over 0)" "$TMP/colod.log"; }
wait_until 30 "colod to preempt job $E for job $U" preempting
kill -CONT $EP
# the urgent job runs (until cancelled below) beside the elastic one at dp=2
both() { is_state "$U" running && running_dp "$E" 2; }
wait_until 60 "job $U running and job $E at dp=2 beside it" both
[ "$(jf "$E" 'j.get("restarts", 0)')" = 0 ] || fail "job $E: the preemption counted as a restart"
echo "figure: job $U (priority 5, 2 slots) preempted job $E, which went on with dp=2 beside it (attempt $(jf "$E" 'j["attempt"]'))"
expect_rc 0 "$COLOCTL" cancel "$U"
wait_until 60 "job $E back to dp=4" running_dp "$E" 4
wait_until 120 "job $E success" is_state "$E" succeeded
expect_reference "$E" "dp 4 -> 2 (preempted) -> 4"
# three attempts: the preemption's stop and the one to grow back, none for room that the
# cancelled job's ranks still held as they stopped
[ "$(jf "$E" 'j["attempt"]')" = 3 ] || fail "job $E took $(jf "$E" 'j["attempt"]') attempts, expected 3: $(grep "job $E attempt" "$TMP/colod.log" | cut -c1-200)"

kill -TERM "$W2"
wait "$W2" || fail "w2 did not exit 0 on SIGTERM$(cat "$TMP"/valgrind.*.log 2>/dev/null)"
kill -TERM "$W1"
wait "$W1" || fail "w1 did not exit 0 on SIGTERM$(cat "$TMP"/valgrind.*.log 2>/dev/null)"
stop_colod
echo "PASS"
