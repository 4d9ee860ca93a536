#!/usr/bin/env bash
# colod's nudges to a real colo-workerd, with heartbeats 30 s apart: a job's rank starts at once
# after its submit and stops at once after its cancel, where beats alone would take up to 30 s.
# After a colod restart the worker's stream comes back by itself and nudges it again.
source "$(dirname "$0")/lib.sh"
WD="$COLO_BIN/colo-workerd"
SETTINGS=(--set heartbeat_interval=30s --set host_timeout=120s)
start_colod "$TMP/state" "${SETTINGS[@]}"

training_text
mkdir -p "$TMP/data"
"$COLO_BIN/colo-train" prepare --input "$TEXT" --out "$TMP/data/ts" >/dev/null
"$WD" --coordinator "$COLO_SERVER" --name p1 --devices cpu --cpu-slots 1 --run-dir "$TMP/run" \
  --data-root "$TMP/data" --checkpoint-root "$TMP/ckpt" --colo-train "$COLO_BIN/colo-train" \
  --log-level debug >>"$TMP/worker.log" 2>&1 &
WPID=$!

# wait_log TEXT SECONDS: until the worker's log holds TEXT; the ms it took
wait_log() {
  local t0
  t0=$(date +%s%N)
  for _ in $(seq 1 $(($2 * 20))); do
    if grep -qE "$1" "$TMP/worker.log"; then
      echo $((($(date +%s%N) - t0) / 1000000))
      return 0
    fi
    sleep 0.05
  done
  fail "the worker did not log [$1] within $2 s; its log: $(tail -20 "$TMP/worker.log")"
}
wait_log "colod nudges this worker" 10 >/dev/null
expect_eq "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["watching"])')" "True"
expect_rc 0 "$COLOCTL" hosts
[[ "$OUT" != *"hears of new or stopped ranks only at its heartbeats"* ]] || fail "p1 watches: $OUT"

cat >"$TMP/job.yaml" <<JOB
name: pushed
model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin}
train: {steps: 100000, batch_size: 4, eval_interval: 0}
checkpoint: {interval: 0}
JOB
# submit -> started, and cancel -> stopped (it saves a checkpoint and exits 75, or, still starting,
# ends on the SIGTERM): each well inside the 30 s between beats
J=$("$COLOCTL" submit "$TMP/job.yaml")
start_ms=$(wait_log "job $J attempt 1 rank 0/1 started" 5)
sleep 1
expect_rc 0 "$COLOCTL" cancel "$J"
stop_ms=$(wait_log "job $J attempt 1 rank 0 \(pid [0-9]+\) (exited with code 75|ended by signal 15)" 10)

# a restarted colod: the worker's stream comes back (its back-off is at most 5 s) and it is
# nudged again
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
sed -i "s|^.*colod listening.*$||" "$TMP/colod.out"
start_colod "$TMP/state" "${SETTINGS[@]}" --listen "127.0.0.1:${COLO_SERVER##*:}"
for _ in $(seq 1 200); do
  [ "$(grep -c "colod nudges this worker" "$TMP/worker.log")" -ge 2 ] && break
  sleep 0.05
done
[ "$(grep -c "colod nudges this worker" "$TMP/worker.log")" -ge 2 ] ||
  fail "the worker's stream did not come back after the colod restart: $(tail -20 "$TMP/worker.log")"
J2=$("$COLOCTL" submit "$TMP/job.yaml")
again_ms=$(wait_log "job $J2 attempt 1 rank 0/1 started" 5)
expect_rc 0 "$COLOCTL" cancel "$J2"
wait_log "job $J2 attempt 1 rank 0 \(pid [0-9]+\) (exited with code 75|ended by signal 15)" 10 >/dev/null

kill -TERM $WPID
wait $WPID || fail "the worker did not exit 0 after SIGTERM"
# a host UP without a stream (its worker gone, within host_timeout) is pointed out
for _ in $(seq 1 40); do
  [ "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0].get("watching"))')" = False ] && break
  sleep 0.05
done
expect_rc 0 "$COLOCTL" hosts
expect_contains "$OUT" "p1 hears of new or stopped ranks only at its heartbeats: its worker has no WatchHost stream open (an older worker, or the stream is down)"
stop_colod
echo "integration_push: heartbeats 30 s apart; rank started ${start_ms} ms after submit, ended ${stop_ms} ms after cancel; after a colod restart, started ${again_ms} ms after submit"
