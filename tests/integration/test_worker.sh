#!/usr/bin/env bash
# colo-workerd against a real colod: it registers its CPU slots and heartbeats; its host goes
# DOWN within host_timeout after a kill -9 and UP again when it comes back; a restarted colod
# keeps it UP without a new registration; a job claiming more host memory per rank than the host
# has waits with the reason; a cordoned host gets no ranks, across restarts, until uncordoned;
# SIGTERM exits 0; bad configuration exits 2; its labels reach colod and survive its restart. A GPU job (emulated)
# trains from given weights; one whose weights are missing fails at once with the reason.
source "$(dirname "$0")/lib.sh"
WD="$COLO_BIN/colo-workerd"
start_colod "$TMP/state" --set host_timeout=2s

start_worker() {
  "$WD" --coordinator "$COLO_SERVER" --name w1 --devices cpu --cpu-slots 3 --run-dir "$TMP/run" --label ib --label fast-disk >>"$TMP/worker.log" 2>&1 &
  WPID=$!
}
host_state() {
  "$COLOCTL" hosts --json | python3 -c 'import json,sys; h=[x for x in json.load(sys.stdin) if x["name"]=="w1"]; print(h[0]["state"] if h else "none", len(h[0]["devices"]) if h else 0)'
}
wait_state() { # want, seconds
  for _ in $(seq 1 $(($2 * 10))); do
    [ "$(host_state | cut -d' ' -f1)" = "$1" ] && return 0
    sleep 0.1
  done
  fail "host w1 did not become $1 within $2 s (now $(host_state)); worker log: $(cat "$TMP/worker.log")"
}

# status_says JOB TEXT: coloctl status JOB, into OUT, once it says TEXT (3 s at most)
status_says() {
  for _ in $(seq 1 30); do
    grep -q "$2" <<<"$("$COLOCTL" status "$1")" && break
    sleep 0.1
  done
  expect_rc 0 "$COLOCTL" status "$1"
}

start_worker
wait_state up 5
expect_eq "$(host_state)" "up 3"

# kill -9: DOWN within host_timeout (2 s) and one tick
kill -KILL $WPID
wait $WPID 2>/dev/null || true
t0=$(date +%s%N)
wait_state down 5
down_ms=$((($(date +%s%N) - t0) / 1000000))

# back: UP again, as a new session
start_worker
wait_state up 5
expect_contains "$(cat "$TMP/worker.log")" "session 2"

# colod restarts: the worker keeps heartbeating its session; the host stays UP, no new session
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
COLOD_PID=""
sed -i "s|^.*colod listening.*$||" "$TMP/colod.out"
port=${COLO_SERVER##*:}
start_colod "$TMP/state" --set host_timeout=2s --listen "127.0.0.1:$port"
sleep 3
expect_eq "$(host_state)" "up 3"
[ "$(grep -c 'registered with' "$TMP/worker.log")" = 2 ] || fail "the worker registered again after the colod restart"
# its labels came back from the store too
expect_eq "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["labels"])')" "['ib', 'fast-disk']"

# a job whose ranks each claim more host memory than the host registered waits, saying why
# (the host's memory came back from the store with the restarted colod)
printf 'name: big\ndata: {train_path: x.bin}\ntrain: {eval_interval: 0}\nresources: {host_memory_mib: 1073741824}\n' >"$TMP/big.yaml"
BJ=$("$COLOCTL" submit "$TMP/big.yaml")
status_says "$BJ" "no room"
expect_contains "$OUT" "state      PENDING (submitted)"
expect_contains "$OUT" "waiting    no room: 0 of 1 tensor-parallel groups of 1 devices placed; 0 devices free in all, 1 needed (counting only the devices whose hosts have resources.host_memory_mib=1073741824 free for each)"
expect_contains "$OUT" "in line    1 of 1 (priority first, then the owner with the fewest recent device hours, then the oldest)"
expect_contains "$(grep "^$BJ " <<<"$("$COLOCTL" list)")" " 1 of 1 in line: no room: 0 of 1 tensor-parallel groups"
expect_rc 0 "$COLOCTL" cancel "$BJ"

# cordon: an operator takes a host out; it gets no new ranks, the waiting job says why, and it
# stays cordoned across a colod restart and the worker registering again; uncordon places the job
expect_rc 2 "$COLOCTL" cordon
expect_contains "$ERR" "cordon needs a host name"
expect_rc 1 "$COLOCTL" cordon nosuch
expect_eq "$ERR" "coloctl: NOT_FOUND: no host is named 'nosuch'"
expect_rc 0 "$COLOCTL" cordon w1 --reason "disk replacement"
expect_eq "$OUT" "host w1 cordoned: no new ranks go there; the 0 running stay"
expect_rc 0 "$COLOCTL" hosts
expect_contains "$OUT" "UP,CORDONED"
expect_contains "$OUT" "w1 is cordoned: disk replacement"
expect_rc 0 "$COLOCTL" status
expect_contains "$OUT" "hosts       1 up, 0 down (1 cordoned)"
printf 'name: small\ndata: {train_path: x.bin}\ntrain: {eval_interval: 0}\n' >"$TMP/small.yaml"
SJ=$("$COLOCTL" submit "$TMP/small.yaml")
status_says "$SJ" "cordoned host"
expect_contains "$OUT" "state      PENDING (submitted)"
expect_contains "$OUT" "0 devices free in all, 1 needed (1 cordoned host not counted)"
cordoned() {
  "$COLOCTL" hosts --json | python3 -c 'import json,sys; h=[x for x in json.load(sys.stdin) if x["name"]=="w1"][0]; print(h.get("cordoned"), h.get("cordon_reason"))'
}
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
COLOD_PID=""
start_colod "$TMP/state" --set host_timeout=2s --listen "127.0.0.1:$port"
expect_eq "$(cordoned)" "True disk replacement"
kill -KILL $WPID
wait $WPID 2>/dev/null || true
start_worker
for _ in $(seq 1 50); do
  [ "$(grep -c 'registered with' "$TMP/worker.log")" = 3 ] && break
  sleep 0.1
done
expect_eq "$(grep -c 'registered with' "$TMP/worker.log")" "3"
wait_state up 5
expect_eq "$(cordoned)" "True disk replacement"
expect_rc 0 "$COLOCTL" --json status "$SJ"
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" "pending"
expect_rc 0 "$COLOCTL" uncordon w1
expect_eq "$OUT" "host w1 uncordoned"
expect_eq "$(cordoned)" "False None"
for _ in $(seq 1 50); do
  [ "$("$COLOCTL" --json status "$SJ" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("attempt", 0))')" -ge 1 ] && break
  sleep 0.1
done
expect_rc 0 "$COLOCTL" --json status "$SJ"
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("attempt", 0) >= 1)')" "True"
"$COLOCTL" cancel "$SJ" >/dev/null 2>&1 || true
# a maintenance to come (cordon --at): said in the hosts listing, and kept across a colod restart
expect_rc 2 "$COLOCTL" cordon w1 --at 5x
expect_eq "$ERR" "coloctl: cordon: --at takes 30m, 12h, 2d (from now), a UTC date and time (2026-11-25T02:00:00Z) or Unix ms, not '5x'; try 'coloctl --help'"
expect_rc 0 "$COLOCTL" cordon w1 --at 2h --evict --reason firmware
expect_contains "$OUT" "host w1 to be cordoned at "
expect_contains "$OUT" " UTC, its running jobs then stopped to restart elsewhere; until then it takes only jobs whose time limits end by then"
kill -KILL "$COLOD_PID"
wait "$COLOD_PID" 2>/dev/null || true
COLOD_PID=""
start_colod "$TMP/state" --set host_timeout=2s --listen "127.0.0.1:$port"
expect_rc 0 "$COLOCTL" hosts
expect_contains "$OUT" "w1 is to be cordoned at "
expect_contains "$OUT" " UTC, its running jobs stopped: firmware; until then it takes only jobs whose time limits end by then"
expect_contains "$(grep "^w1 " <<<"$OUT")" " UP "
expect_rc 0 "$COLOCTL" uncordon w1
[[ "$("$COLOCTL" hosts)" != *"to be cordoned"* ]] || fail "the uncordon left the maintenance"

# SIGTERM: exit 0
kill -TERM $WPID
rc=0
wait $WPID || rc=$?
expect_eq "$rc" "0"

# GPU discovery through NVML: a stand-in library with two GPUs. The worker's ranks train on the
# emulated GPU (COLO_CUDA_EMULATE=1, which the worker passes on to them)
training_text
mkdir -p "$TMP/gdata" "$TMP/gckpt"
"$COLO_BIN/colo-train" prepare --input "$TEXT" --out "$TMP/gdata/ts" >/dev/null
# two threads a rank: on fewer than 4 cores, more than the cores (see the ranks' environment below)
printf 'nvml_library: %s\ndevices: gpu\nrank_threads: 2\nrank_env: [NCCL_IB_HCA=mlx5_0, NCCL_DEBUG=INFO]\n' \
  "$COLO_BIN/libfake_nvml.so" >"$TMP/gpu.yaml"
# two NVLinks a GPU, up, without errors, as the worker starts
printf '0 0 1 0 0\n0 1 1 0 0\n1 0 1 0 0\n1 1 1 0 0\n' >"$TMP/nvlink"
NCCL_DEBUG=WARN COLO_CUDA_GELU_FUSION=0 UNRELATED_VAR=1 \
  COLO_CUDA_EMULATE=1 FAKE_NVML_ECC_FILE="$TMP/ecc" FAKE_NVML_XID_FILE="$TMP/xid" \
  FAKE_NVML_REMAP_FILE="$TMP/remap" FAKE_NVML_LOST_FILE="$TMP/lost" \
  FAKE_NVML_CLOCKS_FILE="$TMP/clocks" FAKE_NVML_NVLINK_FILE="$TMP/nvlink" "$WD" -c "$TMP/gpu.yaml" --coordinator "$COLO_SERVER" --name g1 \
  --run-dir "$TMP/run-g" --data-root "$TMP/gdata" --checkpoint-root "$TMP/gckpt" \
  --nvme-root "$TMP/gnvme" --colo-train "$COLO_BIN/colo-train" >>"$TMP/gpu.log" 2>&1 &
GPID=$!
gpus() {
  "$COLOCTL" hosts --json | python3 -c 'import json,sys; h=[x for x in json.load(sys.stdin) if x["name"]=="g1"]; print(" ".join("%s/%s/%s/%d" % (d["kind"], d["name"].replace(" ", "_"), d.get("uuid",""), d.get("memory_bytes",0) >> 30) for d in h[0]["devices"]) if h else "none")'
}
for _ in $(seq 1 50); do [ "$(gpus)" != none ] && break; sleep 0.1; done
expect_eq "$(gpus)" "gpu/Fake_H100_0/GPU-fake-0/80 gpu/Fake_H100_1/GPU-fake-1/80"
# a GPU job end to end: two data-parallel ranks placed on g1's two GPUs, trained through
# colo-train's GPU paths (gradients through the host) under ZeRO-3 with static placement (half
# the parameter pieces in host memory, half the optimizer state in a file under the worker's
# NVMe root, unlinked as soon as it is made), from weights under the data root
# (train.init_from), checkpointed, SUCCEEDED
"$COLO_BIN/colo-train" train --data-root "$TMP/gdata" --train-data ts/train.bin --n-layer 1 \
  --n-head 2 --n-embd 32 --block-size 32 --steps 5 --eval-interval 0 --quiet --threads 1 \
  --ckpt-dir "$TMP/pre" || fail "training the initial weights failed"
mkdir -p "$TMP/gdata/pre"
cp "$TMP/pre/step_00000005/rank_00000.safetensors" "$TMP/gdata/pre/gpt.safetensors"
# a multiple-choice set for data.choice_sets (HellaSwag's fields)
cat >"$TMP/q.jsonl" <<'Q'
{"ctx": "First Citizen: Before we proceed any", "endings": ["further, hear me speak.", "qqq zzz", "xx"], "label": 0}
{"ctx": "All: Speak,", "endings": ["zzzz", "speak."], "label": 1}
Q
"$COLO_BIN/colo-train" prepare --input "$TMP/q.jsonl" --out "$TMP/gdata/hs" --endings-field endings >/dev/null ||
  fail "preparing the multiple-choice set failed"
cat >"$TMP/gjob.yaml" <<JOB
name: on-gpus
model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin, val_sources: [{path: ts/val.bin, name: held-out}, {path: ts/train.bin, name: seen}], choice_sets: [{path: hs/choices.bin, name: hs}]}
parallel: {dp: 2, zero_stage: 3}
train: {steps: 20, batch_size: 4, eval_interval: 20, eval_batches: 2, init_from: pre/gpt.safetensors, ema_decay: 0.9}
checkpoint: {interval: 10}
resources: {device: gpu}
memory: {placement: static, param_device_fraction: 0.5, optim_device_fraction: 0.25, optim_nvme_fraction: 0.5, nvme_dir: scratch/on-gpus}
JOB
# submit --wait: the id, then the job's changes until it ends; exit 0 as it succeeded
rc=0
timeout 120 "$COLOCTL" submit "$TMP/gjob.yaml" --wait >"$TMP/gwait.out" 2>&1 || rc=$?
expect_eq "$rc" "0"
GJ=$(head -1 "$TMP/gwait.out")
expect_contains "$(tail -1 "$TMP/gwait.out")" "job $GJ  SUCCEEDED   all 2 ranks exited 0"
grep -q "job $GJ  step 20/20" "$TMP/gwait.out" || fail "submit --wait showed no progress: $(cat "$TMP/gwait.out")"
gstate_of() { "$COLOCTL" status "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
gstate() { gstate_of "$GJ"; }
expect_eq "$(gstate)" "succeeded"
expect_eq "$("$COLOCTL" status "$GJ" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["message"])')" "all 2 ranks exited 0"
GLOG=$("$COLOCTL" logs "$GJ")
expect_contains "$GLOG" "GPU 0 emulated on the CPU (bf16 activations, bf16 products)"
expect_contains "$GLOG" "step     20 | val loss"
expect_contains "$GLOG" "in $TMP/gnvme/scratch/on-gpus"
expect_contains "$GLOG" "initial weights from $TMP/gdata/pre/gpt.safetensors"
# the status shows rank 0's memory: its GPU pool's peak and the pieces placed in host memory
expect_rc 0 "$COLOCTL" status "$GJ"
expect_contains "$OUT" "  memory     rank 0: peak "
expect_contains "$OUT" " of GPU memory, and "
expect_contains "$OUT" " of pieces placed in host memory"
expect_contains "$OUT" "  weights    from pre/gpt.safetensors"
# and its two validation sets' losses (data.val_sources), from rank 0's record through the worker
expect_contains "$OUT" "
             held-out "
expect_contains "$OUT" "
             seen "
expect_contains "$GLOG" "step     20 | val loss "
expect_contains "$GLOG" " (held-out "
# and its multiple-choice set's scores (data.choice_sets), in the status
expect_contains "$OUT" "
             hs acc "
expect_contains "$OUT" " over 2 questions"
expect_contains "$GLOG" " | hs acc "
# and in the training curve: each evaluation's per-set losses, as rank 0 printed them
"$COLOCTL" history "$GJ" --json >"$TMP/ghist.json"
"$COLOCTL" logs "$GJ" >"$TMP/glog.txt"
python3 - "$TMP/ghist.json" "$TMP/glog.txt" "$GJ" <<'PY' || fail "per-set losses in job $GJ's history: $(cat "$TMP/ghist.json")"
import json, re, sys
evals = [s for s in json.load(open(sys.argv[1]))["samples"] if "val_loss" in s]
printed = {int(m[0]): (float(m[1]), float(m[2])) for m in re.findall(
    r"step +(\d+) \| val loss [0-9.]+ \(held-out ([0-9.]+), seen ([0-9.]+)\)", open(sys.argv[2]).read())}
assert [int(s["step"]) for s in evals] == [0, 20] == sorted(printed), (evals, printed)
for s in evals:
    sets = {x["name"]: x["loss"] for x in s["val_sets"]}
    assert list(sets) == ["held-out", "seen"], sets
    assert all(abs(sets[k] - v) < 6e-5 for k, v in zip(("held-out", "seen"), printed[int(s["step"])])), (sets, printed)
# each evaluation's multiple-choice scores, as rank 0 printed them
scores = {int(m[0]): (float(m[1]), float(m[2])) for m in re.findall(
    r"step +(\d+) \|.*\| hs acc ([0-9.]+), acc_norm ([0-9.]+) over 2 questions", open(sys.argv[2]).read())}
assert sorted(scores) == [0, 20], scores
for s in evals:
    c = s["choice_scores"]
    assert [x["name"] for x in c] == ["hs"] and c[0]["questions"] == 2, c
    assert abs(c[0].get("acc", 0) - scores[int(s["step"])][0]) < 1e-4, (c, scores)
    assert abs(c[0].get("acc_norm", 0) - scores[int(s["step"])][1]) < 1e-4, (c, scores)
# and the weights' moving average's (train.ema_decay), evaluated in their place after step 0
ema = [float(m) for m in re.findall(r"moving average's val loss ([0-9.]+)", open(sys.argv[2]).read())]
assert "ema_val_loss" not in evals[0] and len(ema) == 1, (evals, ema)
assert abs(evals[1]["ema_val_loss"] - ema[0]) < 6e-5, (evals, ema)
print("figure: job %s's moving average at step 20: val loss %.4f (the weights': %.4f)" % (sys.argv[3], evals[1]["ema_val_loss"], evals[1]["val_loss"]))
PY
expect_rc 0 "$COLOCTL" status "$GJ"
expect_contains "$OUT" "
             the weights' moving average "
expect_rc 0 "$COLOCTL" history "$GJ"
expect_contains "$(sed -n 2p <<<"$OUT")" "hs ACC_NORM  EMA VAL LOSS"
expect_contains "$(sed -n 2p <<<"$OUT")" "VAL LOSS  held-out  seen    hs ACC_NORM"
# coloctl compare: a column for each validation set, with the job's latest per-set losses
expect_rc 0 "$COLOCTL" compare "$GJ"
expect_contains "$(head -1 <<<"$OUT")" "VAL LOSS  held-out  seen    hs ACC_NORM  EMA VAL LOSS"
expect_rc 0 "$COLOCTL" --json compare "$GJ"
python3 - "$OUT" "$("$COLOCTL" status "$GJ" --json)" <<'PY' || fail "compare's per-set losses: $OUT"
import json, sys
row, job = json.loads(sys.argv[1])[0], json.loads(sys.argv[2])
want = {x["name"]: x["loss"] for x in job["progress"]["val_sets"]}
assert list(row["val_sets"]) == ["held-out", "seen"], row
assert all(abs(row["val_sets"][k] - want[k]) < 1e-6 for k in want), (row, want)
sc = {x["name"]: x for x in job["progress"]["choice_scores"]}
assert list(row["choice_scores"]) == ["hs"], row
assert abs(row["choice_scores"]["hs"]["acc_norm"] - sc["hs"].get("acc_norm", 0)) < 1e-6, (row, sc)
assert abs(row["ema_val_loss"] - job["progress"]["ema_val_loss"]) < 1e-6, (row, job["progress"])
print("figure: compare of job %d: val loss %.4f, held-out %.4f, seen %.4f" % (row["id"], row["val_loss"], want["held-out"], want["seen"]))
PY
[ -d "$TMP/gnvme/scratch/on-gpus" ] && [ -z "$(ls -A "$TMP/gnvme/scratch/on-gpus")" ] ||
  fail "the NVMe directory should exist and hold nothing once the ranks are gone"
[ "$("$COLOCTL" checkpoints "$GJ" --json | python3 -c 'import json,sys; print(max(c["step"] for c in json.load(sys.stdin)["checkpoints"]))')" = 20 ] ||
  fail "the GPU job's checkpoints: $("$COLOCTL" checkpoints "$GJ")"
# an evaluation job (train.steps=0): the model of the GPU job's newest checkpoint
# (train.init_from_job), evaluated on its validation sets and its multiple-choice set and not
# trained, with no training data named: SUCCEEDED with no checkpoint, its scores those the GPU
# job's own last evaluation reported
cat >"$TMP/ejob.yaml" <<JOB
name: eval-on-gpus
model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {val_sources: [{path: ts/val.bin, name: held-out}, {path: ts/train.bin, name: seen}], choice_sets: [{path: hs/choices.bin, name: hs}]}
parallel: {dp: 2, zero_stage: 3}
train: {steps: 0, batch_size: 4, eval_batches: 2, init_from_job: $GJ}
resources: {device: gpu}
JOB
rc=0
timeout 120 "$COLOCTL" submit "$TMP/ejob.yaml" --wait >"$TMP/ewait.out" 2>&1 || rc=$?
expect_eq "$rc" "0"
EJ=$(head -1 "$TMP/ewait.out")
expect_contains "$(tail -1 "$TMP/ewait.out")" "job $EJ  SUCCEEDED   all 2 ranks exited 0"
expect_contains "$(cat "$TMP/ewait.out")" "job $EJ  evaluated at step 0  val loss "
expect_contains "$(cat "$TMP/ewait.out")" "  hs acc_norm "
expect_contains "$("$COLOCTL" status "$EJ")" "  training   none: the model is evaluated (train.steps 0), batch 4, bf16"
expect_contains "$("$COLOCTL" status "$EJ")" "  weights    from job $GJ's newest checkpoint (step 20)"
expect_contains "$("$COLOCTL" logs "$EJ")" "train.steps=0: the model is evaluated, not trained, and no checkpoint is written"
expect_eq "$("$COLOCTL" checkpoints "$EJ" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["checkpoints"]))')" "0"
python3 - "$("$COLOCTL" status "$GJ" --json)" "$("$COLOCTL" status "$EJ" --json)" <<'PY' || fail "the evaluation job's scores"
import json, sys
g, e = (json.loads(a)["progress"] for a in sys.argv[1:3])
sets = lambda p: {x["name"]: x["loss"] for x in p["val_sets"]}
score = lambda p: {x["name"]: (x.get("acc", 0), x.get("acc_norm", 0), x["questions"]) for x in p["choice_scores"]}
print("figure: evaluation job: val loss %.6f (held-out %.6f, seen %.6f), hs %s; the GPU job's last "
      "evaluation %.6f (held-out %.6f, seen %.6f), hs %s" % (e["val_loss"], sets(e)["held-out"],
      sets(e)["seen"], score(e)["hs"], g["val_loss"], sets(g)["held-out"], sets(g)["seen"], score(g)["hs"]))
assert int(e.get("val_step", 0)) == 0 and int(g["val_step"]) == 20, (e, g)
assert abs(e["val_loss"] - g["val_loss"]) <= 1e-5 * g["val_loss"], (e, g)
assert list(sets(e)) == ["held-out", "seen"] and all(abs(sets(e)[k] - v) <= 1e-5 * v for k, v in sets(g).items())
assert score(e) == score(g), (score(e), score(g))
PY
# each of the GPU job's checkpoints evaluated in turn: a sweep over train.init_step picks the
# checkpoint at each step in place of the newest; the one at step 20 gives the figures above, the
# one at step 10 others; a step with no checkpoint fails the job at once, saying so
expect_rc 0 "$COLOCTL" submit "$TMP/ejob.yaml" --sweep train.init_step=10,20,15
expect_eq "$(echo "$OUT" | cut -d' ' -f2-)" "eval-on-gpus-1 train.init_step=10
eval-on-gpus-2 train.init_step=20
eval-on-gpus-3 train.init_step=15"
read -r E10 E20 E15 <<<"$(echo "$OUT" | cut -d' ' -f1 | tr '\n' ' ')"
wait_until 60 "evaluation job $E10" is_state "$E10" succeeded
wait_until 60 "evaluation job $E20" is_state "$E20" succeeded
wait_until 60 "evaluation job $E15 to fail" is_state "$E15" failed
expect_contains "$("$COLOCTL" status "$E10")" "  weights    from job $GJ's checkpoint at step 10"
expect_contains "$("$COLOCTL" status "$E15")" "train.init_step=15: no complete checkpoint at step 15 under "
python3 - "$("$COLOCTL" status "$EJ" --json)" "$("$COLOCTL" status "$E20" --json)" \
  "$("$COLOCTL" status "$E10" --json)" <<'PY' || fail "the evaluation jobs of each checkpoint"
import json, sys
newest, at20, at10 = (json.loads(a)["progress"] for a in sys.argv[1:4])
print("figure: job's checkpoints evaluated by train.init_step: step 10 val loss %.6f, step 20 "
      "%.6f (its newest: %.6f)" % (at10["val_loss"], at20["val_loss"], newest["val_loss"]))
assert at20["val_loss"] == newest["val_loss"] and at20["val_sets"] == newest["val_sets"]
assert at10["val_loss"] != at20["val_loss"]
PY
expect_rc 0 "$COLOCTL" compare --name eval-on-gpus-
expect_contains "$(head -1 <<<"$OUT" | tr -s ' ')" "train.init_step"
# refused at submission, saying why: no model to evaluate, nothing to evaluate it on
sed -e "s|, init_from_job: $GJ||" "$TMP/ejob.yaml" >"$TMP/ejob-bad.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/ejob-bad.yaml"
expect_contains "$ERR" "train.steps=0 evaluates a model without training it: it needs a model: train.init_from or train.init_from_job"
sed -e 's|^data: .*|data: {train_path: ts/train.bin}|' "$TMP/ejob.yaml" >"$TMP/ejob-bad.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/ejob-bad.yaml"
expect_contains "$ERR" "train.steps=0 evaluates a model without training it: it needs something to evaluate on: data.val_path, data.val_sources or data.choice_sets"

# a job that cannot run as written (its weights are not there) fails at once, saying why in its
# status, and spends none of its restarts: another attempt would fail the same way
sed -e 's|name: on-gpus|name: no-weights|' -e 's|init_from: pre/gpt.safetensors|init_from: pre/none.safetensors|' \
  "$TMP/gjob.yaml" >"$TMP/nojob.yaml"
# (submit --wait exits 3: the job did not succeed)
rc=0
timeout 60 "$COLOCTL" submit "$TMP/nojob.yaml" --wait >"$TMP/nwait.out" 2>&1 || rc=$?
expect_eq "$rc" "3"
NJ=$(head -1 "$TMP/nwait.out")
expect_contains "$(tail -1 "$TMP/nwait.out")" "job $NJ  FAILED      rank "
njstate() { "$COLOCTL" status "$NJ" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], j.get("restarts", 0), j.get("attempt", 0))'; }
expect_eq "$(njstate)" "failed 0 1"
expect_rc 0 "$COLOCTL" status "$NJ"
expect_contains "$OUT" "exited with code 78: $TMP/gdata/pre/none.safetensors: No such file or directory; not restarted: the job cannot run as written"

# GPU health: GPU 1 reports uncorrected ECC errors (NVML, at each beat); nothing new goes there,
# and a 2-GPU job waits, saying so, until it is fit again
health_says() { # the hosts listing's line for g1's unhealthy devices, once it says $1
  for _ in $(seq 1 50); do
    grep -qF "$1" <<<"$("$COLOCTL" hosts)" && break
    sleep 0.1
  done
  expect_rc 0 "$COLOCTL" hosts
  expect_contains "$OUT" "$1"
}
echo "1 2" >"$TMP/ecc"
health_says "g1: device 1 unhealthy (2 uncorrected ECC errors since the driver loaded): no new ranks go there"
expect_eq "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print([h.get("unhealthy_devices") for h in json.load(sys.stdin) if h["name"] == "g1"][0])')" "[1]"
sed -e 's|name: on-gpus|name: on-two-gpus|' -e 's|steps: 20|steps: 100000|' "$TMP/gjob.yaml" >"$TMP/two.yaml"
TJ=$("$COLOCTL" submit "$TMP/two.yaml")
status_says "$TJ" "unhealthy device"
expect_contains "$OUT" "(1 unhealthy device not counted)"
rm "$TMP/ecc"
for _ in $(seq 1 50); do
  [ "$(gstate_of "$TJ")" = running ] && break
  sleep 0.1
done
expect_eq "$(gstate_of "$TJ")" "running" "(once GPU 1 is fit again)"
# row remapping: one pending (the GPU needs a reset), then failed (it needs service), as NVML
# reports them at each beat
echo "0 1 0" >"$TMP/remap"
health_says "g1: device 0 unhealthy (a row remapping is pending: the GPU needs a reset)"
echo "0 0 1" >"$TMP/remap"
health_says "g1: device 0 unhealthy (row remapping failed: the GPU needs service)"
rm "$TMP/remap"
# a GPU that stopped answering NVML
echo 0 >"$TMP/lost"
health_says "g1: device 0 unhealthy (the GPU is lost: it has fallen off the bus or stopped answering)"
rm "$TMP/lost"
# lowered clocks: GPU 0 in a hardware thermal slowdown and a power brake (0xc0) is reported, and
# keeps its rank; GPU 1 at the software power cap (0x4), as any busy GPU, is not
printf '0 c0\n1 4\n' >"$TMP/clocks"
health_says "g1: device 0 slowed (clocks lowered: thermal slowdown (hardware), power brake): ranks there run slower"
expect_eq "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print([h.get("slowed_devices") for h in json.load(sys.stdin) if h["name"] == "g1"][0])')" "[0]"
expect_eq "$(gstate_of "$TJ")" "running"
# the job running there says which of its ranks the slowed GPU holds back
expect_rc 0 "$COLOCTL" status "$TJ"
expect_contains "$OUT" "slowed     1 of 2 ranks on a device with lowered clocks: rank "
expect_contains "$OUT" " (g1 device 0; clocks lowered: thermal slowdown (hardware), power brake); each step waits for the slowest rank"
rm "$TMP/clocks"
for _ in $(seq 1 50); do
  grep -q slowed <<<"$("$COLOCTL" hosts)" || break
  sleep 0.1
done
[[ "$("$COLOCTL" hosts)" != *slowed* ]] || fail "g1 still slowed once its clocks were back"
# NVLink: GPU 1's link 0 resends and retrains (replays and recoveries counted since the last
# beat): it is slowed while such errors are under a minute old, and keeps its rank
printf '0 0 1 0 0\n0 1 1 0 0\n1 0 1 12 1\n1 1 1 0 0\n' >"$TMP/nvlink"
health_says "g1: device 1 slowed (NVLink errors: 12 replays, 1 recovery on link 0, the newest under a minute ago)"
expect_eq "$(gstate_of "$TJ")" "running"
# GPU 0's link 1 goes down: no new ranks there, until it is up again
printf '0 0 1 0 0\n0 1 0 0 0\n1 0 1 12 1\n1 1 1 0 0\n' >"$TMP/nvlink"
health_says "g1: device 0 unhealthy (NVLink 1 down (up when the worker started)): no new ranks go there"
printf '0 0 1 0 0\n0 1 1 0 0\n1 0 1 12 1\n1 1 1 0 0\n' >"$TMP/nvlink"
for _ in $(seq 1 50); do
  grep -q unhealthy <<<"$("$COLOCTL" hosts)" || break
  sleep 0.1
done
[[ "$("$COLOCTL" hosts)" != *unhealthy* ]] || fail "g1 still unhealthy once its NVLink was up"
# XID events: 13 is a program's fault, not the GPU's, and is not counted; 79 is (fallen off the
# bus), and stays counted until the worker restarts. The rank on GPU 1 then dies, as the driver's
# ranks do at such an error: the attempt's end names the device and what its worker said.
printf '1 13\n1 79\n' >>"$TMP/xid"
health_says "g1: device 1 unhealthy (XID 79 (the GPU has fallen off the bus) since the worker started)"
P1=""
for f in "$TMP"/run-g/pids/*; do
  p=$(basename "$f")
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "CUDA_VISIBLE_DEVICES=1" && P1=$p
done
[ -n "$P1" ] || fail "no rank of job $TJ on GPU 1"
# its environment: the threads the worker gives a rank, and, where 2 ranks x 2 threads exceed the
# cores, idle OpenMP threads that sleep rather than spin on the other rank's cores
ENVF=$(tr '\0' '\n' <"/proc/$P1/environ")
expect_contains "$ENVF" "OMP_NUM_THREADS=2"
# NCCL's and the CUDA backend's variables pass from the worker's environment, nothing else
# does, and the worker config's rank_env wins over them
expect_eq "$(grep -E '^(NCCL_|COLO_CUDA_GELU|UNRELATED)' <<<"$ENVF" | sort | tr '\n' ' ')" \
  "COLO_CUDA_GELU_FUSION=0 NCCL_DEBUG=INFO NCCL_IB_HCA=mlx5_0 "
if [ "$(getconf _NPROCESSORS_ONLN)" -lt 4 ]; then
  expect_contains "$ENVF" "OMP_WAIT_POLICY=passive"
else
  [[ "$ENVF" != *OMP_WAIT_POLICY* ]] || fail "OMP_WAIT_POLICY set with enough cores: $ENVF"
fi
kill -KILL "$P1"
for _ in $(seq 1 50); do
  [ "$(gstate_of "$TJ")" != running ] && break
  sleep 0.1
done
expect_rc 0 "$COLOCTL" status "$TJ" --json
TJMSG=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["message"])' <<<"$OUT")
expect_contains "$TJMSG" "was killed by signal 9 on device 1 of host g1, which its worker reports unhealthy: XID 79 (the GPU has fallen off the bus) since the worker started; restart 1 of 3"
# and the next attempt waits: one healthy GPU left for two ranks
status_says "$TJ" "unhealthy device"
expect_rc 0 "$COLOCTL" cancel "$TJ"
kill -TERM $GPID
wait $GPID || fail "the GPU worker did not exit 0"
# asked for GPUs where there is no NVML: refuses to start, saying why
printf 'nvml_library: /nonexistent/libnvidia-ml.so.1\n' >"$TMP/nogpu.yaml"
expect_rc 1 "$WD" -c "$TMP/nogpu.yaml" --devices gpu --coordinator "$COLO_SERVER" --run-dir "$TMP/run-n"
expect_eq "$ERR" "colo-workerd: no GPUs: cannot load /nonexistent/libnvidia-ml.so.1"

# bad configuration
printf 'coordinator: 127.0.0.1:1\ncpu_slot: 4\n' >"$TMP/w.yaml"
expect_rc 2 "$WD" -c "$TMP/w.yaml"
expect_eq "$ERR" "colo-workerd: $TMP/w.yaml:2: unknown field \"cpu_slot\""
expect_rc 2 "$WD" --cpu-slots many
expect_eq "$ERR" "colo-workerd: flag:1: cpu_slots: \"many\" is not an integer
colo-workerd: try 'colo-workerd --help'"
expect_rc 2 "$WD" --label ib --label "two words"
expect_eq "$ERR" "colo-workerd: labels: label \"two words\" must be 1 to 31 letters, digits, '.', '_' or '-'"
printf 'labels: [ib, ib]\n' >"$TMP/w.yaml"
expect_rc 2 "$WD" -c "$TMP/w.yaml"
expect_eq "$ERR" "colo-workerd: labels names ib twice"
printf 'rank_env: [NCCL_DEBUG=INFO, COLO_RANK=3]\n' >"$TMP/w.yaml"
expect_rc 2 "$WD" -c "$TMP/w.yaml"
expect_eq "$ERR" "colo-workerd: rank_env[1] \"COLO_RANK=3\" must be NAME=VALUE (NAME of letters, digits and '_', not one the worker sets: COLO_* or CUDA_VISIBLE_DEVICES; at most 1000 characters)"
printf 'rank_env: [1X=2]\n' >"$TMP/w.yaml"
expect_rc 2 "$WD" -c "$TMP/w.yaml"
expect_contains "$ERR" "colo-workerd: rank_env[0] \"1X=2\" must be NAME=VALUE"
stop_colod
echo "integration_worker: a 2-GPU data-parallel job SUCCEEDED on emulated GPUs; GPU health from ECC, row remapping, a lost GPU, lowered clocks and XID 79; registered with 3 slots; DOWN ${down_ms} ms after kill -9 (host_timeout 2 s); UP again as session 2; survived a colod restart without re-registering"
