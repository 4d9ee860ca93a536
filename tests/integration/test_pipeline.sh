#!/usr/bin/env bash
# A two-stage pipeline on a real colod, colo-workerd and colo-train: stage 2 is submitted while
# stage 1 trains, with --after 1 and train.init_from_job=1. It waits, saying for what, until
# stage 1 has SUCCEEDED, then starts from stage 1's newest checkpoint: its log names it, and its
# first loss is stage 1's trained loss, not a random model's. colod's /metrics, scraped meanwhile,
# shows stage 1's steps as it trains, the worker's WatchHost stream, and both stages' success.
# Then the same kind of pipeline from one pipeline file: three stages in one submit.
source "$(dirname "$0")/lib.sh"
WD="$COLO_BIN/colo-workerd"
start_colod "$TMP/state" --set metrics_listen=127.0.0.1:0
[ -n "$COLO_METRICS" ] || fail "colod did not say where its metrics are: $(cat "$TMP/colod.out")"
# metric NAME{LABELS}: its value in a scrape, or nothing
metric() { curl -sf "$COLO_METRICS" | awk -v k="$1" '$1 == k { print $2 }'; }
training_text
mkdir -p "$TMP/data"
"$COLO_BIN/colo-train" prepare --input "$TEXT" --out "$TMP/data/ts" >/dev/null

cat >"$TMP/stage.yaml" <<JOB
name: stage-1
model: {n_layer: 1, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin}
train: {steps: 1000, batch_size: 8, eval_interval: 0}
optimizer: {lr: 0.01, warmup_steps: 5}
JOB
jstate() { "$COLOCTL" status "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
ended() { # job: waits up to a minute for it to end, in any state
  for _ in $(seq 1 600); do
    case "$(jstate "$1")" in succeeded | failed | cancelled) return ;; esac
    sleep 0.1
  done
}
# both stages are submitted before the worker starts: stage 1 waits for room, stage 2 for stage 1
S1=$("$COLOCTL" submit "$TMP/stage.yaml")
# a weights' job that does not exist, and weights from two places, are refused
expect_rc 1 "$COLOCTL" submit "$TMP/stage.yaml" --set train.init_from_job=99
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: train.init_from_job: there is no job 99"
expect_rc 1 "$COLOCTL" submit "$TMP/stage.yaml" --set train.init_from_job=1 --set train.init_from=w.safetensors
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: train.init_from and train.init_from_job are exclusive: set one"
S2=$("$COLOCTL" submit "$TMP/stage.yaml" --set name=stage-2 --set train.steps=10 --after "$S1" \
  --set train.init_from_job="$S1")
for _ in $(seq 1 100); do
  grep -q "waits for job $S1 to succeed" <<<"$("$COLOCTL" status "$S2")" && break
  sleep 0.1
done
expect_rc 0 "$COLOCTL" status "$S2"
expect_contains "$OUT" "waiting    waits for job $S1 to succeed (it is "
expect_contains "$OUT" "after      job $S1 (each must succeed first)"
expect_contains "$OUT" "weights    from job $S1's newest checkpoint"
expect_eq "$(metric "colo_job_waiting{job=\"$S2\"}")" 1
"$WD" --coordinator "$COLO_SERVER" --name q1 --devices cpu --cpu-slots 2 --run-dir "$TMP/run" \
  --data-root "$TMP/data" --checkpoint-root "$TMP/ckpt" --colo-train "$COLO_BIN/colo-train" \
  >>"$TMP/worker.log" 2>&1 &
WPID=$!
step=""
for _ in $(seq 1 300); do
  step=$(metric "colo_job_step{job=\"$S1\"}")
  [ -n "$step" ] && break
  sleep 0.1
done
[ -n "$step" ] && [ "$step" -ge 1 ] && [ "$step" -le 1000 ] ||
  fail "no step of job $S1 in /metrics while it trains: [$step]"
for _ in $(seq 1 600); do
  [ "$(jstate "$S2")" = succeeded ] && break
  case "$(jstate "$S2")" in failed | cancelled) break ;; esac
  sleep 0.1
done
expect_eq "$(jstate "$S1")" "succeeded"
expect_eq "$(jstate "$S2")" "succeeded" "(stage 2: $("$COLOCTL" status "$S2"))"
L1=$("$COLOCTL" logs "$S1")
L2=$("$COLOCTL" logs "$S2")
expect_contains "$L2" "initial weights from $TMP/ckpt/job-$S1/step_00001000"
# the status names the step "newest" was, as the ranks loaded it (Progress.model_step)
expect_contains "$("$COLOCTL" status "$S2")" "weights    from job $S1's newest checkpoint (step 1000)"
first_loss() { python3 -c 'import re,sys; print(re.search(r"step\s+1/\d+ \| loss ([0-9.]+)", sys.stdin.read()).group(1))'; }
l1_first=$(first_loss <<<"$L1")
l1_last=$(python3 -c 'import re,sys; print(re.findall(r"step\s+1000/1000 \| loss ([0-9.]+)", sys.stdin.read())[-1])' <<<"$L1")
l2_first=$(first_loss <<<"$L2")
python3 - "$l1_first" "$l1_last" "$l2_first" <<'PY' || fail "stage 2 did not start from stage 1's weights: losses $l1_first -> $l1_last, then $l2_first"
import sys
first, last, second = map(float, sys.argv[1:])
# a random model starts near ln(256) = 5.55; stage 2 starts where stage 1 ended
assert second < first - 1.0 and abs(second - last) < 0.5, (first, last, second)
PY
expect_eq "$(metric 'colo_jobs{state="succeeded"}')" 2
expect_eq "$(metric 'colo_job_state_changes_total{state="succeeded"}')" 2
expect_eq "$(metric 'colo_host_watching{host="q1",id="1"}')" 1
expect_eq "$(metric 'colo_host_devices{host="q1",id="1"}')" 2
expect_eq "$(metric 'colo_host_devices_used{host="q1",id="1"}')" 0
[ "$(metric colo_nudges_total)" -ge 2 ] || fail "no nudges counted: $(metric colo_nudges_total)"
[ -z "$(curl -sf "$COLO_METRICS" | grep '^colo_job_info')" ] || fail "finished jobs still in colo_job_info"

# the same as a pipeline file: three stages in one submit, each after the one before it, the
# second and third from the checkpoint of the one before
mkdir -p "$TMP/pipe"
cat >"$TMP/pipe/p.yaml" <<'PIPE'
name: tiny
stages:
  - name: pretrain
    job: ../stage.yaml
    set: [train.steps=200]
  - name: finetune
    job: ../stage.yaml
    set: [train.steps=20, optimizer.lr=0.001]
    init_from: pretrain
  - name: eval
    job: ../stage.yaml
    set: [train.steps=0, data.val_path=ts/val.bin, train.eval_batches=2]
    after: [pretrain]
    init_from: finetune
PIPE
# every stage is checked before any is sent: a bad one submits none
sed 's/init_from: pretrain/init_from: eval/' "$TMP/pipe/p.yaml" >"$TMP/pipe/bad.yaml"
before=$("$COLOCTL" list --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
expect_rc 1 "$COLOCTL" submit "$TMP/pipe/bad.yaml"
expect_eq "$ERR" "coloctl: $TMP/pipe/bad.yaml: stage finetune: init_from \"eval\" is not an earlier stage: list each stage after the ones it depends on"
sed 's/after: \[pretrain\]/after: [pretrain, nope]/' "$TMP/pipe/p.yaml" >"$TMP/pipe/bad.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/pipe/bad.yaml"
expect_eq "$ERR" "coloctl: $TMP/pipe/bad.yaml: stage eval: after \"nope\": there is no such stage"
sed 's/train.eval_batches=2]/train.eval_batches=2, parallel.tp=3]/' "$TMP/pipe/p.yaml" >"$TMP/pipe/bad.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/pipe/bad.yaml"
expect_eq "$ERR" "coloctl: $TMP/pipe/bad.yaml: stage eval ($TMP/pipe/../stage.yaml): parallel.tp=3 does not divide model.n_head=2"
expect_rc 2 "$COLOCTL" submit "$TMP/pipe/p.yaml" --after "$S1"
expect_eq "$("$COLOCTL" list --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" "$before"
expect_rc 0 "$COLOCTL" submit "$TMP/pipe/p.yaml" --dry-run
expect_eq "$OUT" "$TMP/pipe/p.yaml: a pipeline of 3 stages, valid: pretrain (world 1), finetune (world 1), eval (world 1)"
expect_rc 0 "$COLOCTL" submit "$TMP/pipe/p.yaml" --token tiny-1
P1=$(sed -n 1p <<<"$OUT" | cut -d' ' -f1)
P2=$(sed -n 2p <<<"$OUT" | cut -d' ' -f1)
P3=$(sed -n 3p <<<"$OUT" | cut -d' ' -f1)
expect_eq "$OUT" "$P1 tiny.pretrain
$P2 tiny.finetune (after pretrain; weights from pretrain)
$P3 tiny.eval (after pretrain, finetune; weights from finetune)"
# its stages by name: NAME.STAGE
expect_rc 0 "$COLOCTL" list --name tiny. --json
expect_eq "$(python3 -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin)))' <<<"$OUT")" "$P1 $P2 $P3"
# submitted again with its token (a retry): the same jobs, none new
expect_rc 0 "$COLOCTL" submit "$TMP/pipe/p.yaml" --token tiny-1 --json
expect_eq "$(python3 -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin)))' <<<"$OUT")" "$P1 $P2 $P3"
for _ in $(seq 1 600); do
  [ "$(jstate "$P3")" = succeeded ] && break
  case "$(jstate "$P3")" in failed | cancelled) break ;; esac
  sleep 0.1
done
expect_eq "$(jstate "$P1") $(jstate "$P2") $(jstate "$P3")" "succeeded succeeded succeeded" "(eval: $("$COLOCTL" status "$P3"))"
expect_contains "$("$COLOCTL" logs "$P2")" "initial weights from $TMP/ckpt/job-$P1/step_00000200"
expect_contains "$("$COLOCTL" logs "$P3")" "initial weights from $TMP/ckpt/job-$P2/step_00000020"
# the last stage an evaluation (train.steps 0): the fine-tuned model's loss, nothing trained
expect_contains "$("$COLOCTL" logs "$P3")" "train.steps=0: the model is evaluated, not trained, and no checkpoint is written"
expect_contains "$("$COLOCTL" status "$P3")" "  eval       val loss "

# accounting: the five jobs, one CPU slot each for one attempt
expect_rc 0 "$COLOCTL" usage
expect_contains "$OUT" "OWNER  DEVICE  JOBS  ATTEMPTS  DEVICE-HOURS"
expect_contains "$OUT" "-      cpu     5     5         "
expect_contains "$OUT" " CPU-slot hours from the first job to "
expect_contains "$OUT" "fair share now (an hour used 7d ago counts half; hours count 1/WEIGHT); among waiting jobs of one priority, those of the first owner start first:"
expect_contains "$OUT" "OWNER  DEVICE  WEIGHED-HOURS"
expect_rc 0 "$COLOCTL" usage --by job --since 1d --json
python3 - "$OUT" "$S1 $S2 $P1 $P2 $P3" <<'PY' || fail "usage by job: $OUT"
import json, sys
u = json.loads(sys.argv[1])
rows = {int(r["job_id"]): r for r in u["rows"]}
assert sorted(rows) == sorted(int(i) for i in sys.argv[2].split()), rows
assert all(r["attempts"] == 1 and r["device"] == "cpu" for r in rows.values()), rows
total = sum(r["device_hours"] for r in rows.values())
assert abs(total - u["cpu_hours"]) < 1e-9 and u.get("gpu_hours", 0) == 0, u
# stage 1 trained 1,000 steps: the longest
assert max(rows.values(), key=lambda r: r["device_hours"])["job_name"] == "stage-1", rows
# the fair share: one owner (none, without mutual TLS), its hours of minutes ago weighed by a
# half-life of 7 days: a little less than they were
fs = u["fair_share"]
assert int(u["fair_share_half_life_ms"]) == 7 * 86400000 and len(fs) == 1, u
assert fs[0]["device"] == "cpu" and 0.999 * total < fs[0]["device_hours"] < total, (fs, total)
assert fs[0]["weight"] == 1, fs  # no fair_share_weights
PY
expect_rc 2 "$COLOCTL" usage --since yesterday
expect_eq "$ERR" "coloctl: usage: --since takes 7d, 12h, 30m, a UTC date (2026-11-01 or 2026-11-01T12:00:00Z) or Unix ms, not 'yesterday'; try 'coloctl --help'"
expect_rc 1 "$COLOCTL" usage --since 2026-11-02 --until 2026-11-01
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: since_ms (1793577600000) must be before until_ms (1793491200000)"

# a pipeline cancelled by its name: each unfinished stage, and then none is left
sed 's/^name: tiny$/name: tiny2/' "$TMP/pipe/p.yaml" >"$TMP/pipe/p2.yaml"
expect_rc 0 "$COLOCTL" submit "$TMP/pipe/p2.yaml"
Q=$(cut -d' ' -f1 <<<"$OUT" | tr '\n' ' ')
expect_rc 0 "$COLOCTL" cancel --name tiny2. --reason "wrong data"
expect_eq "$(cut -d' ' -f2 <<<"$OUT" | tr '\n' ' ')" "$Q"
expect_eq "$(grep -c ' CANCELLED$' <<<"$OUT")" 3
expect_rc 0 "$COLOCTL" cancel --name tiny2.
expect_eq "$OUT" "no unfinished job's name starts with 'tiny2.': nothing cancelled"
expect_rc 0 "$COLOCTL" list --name tiny --state cancelled --json
expect_eq "$(python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' <<<"$OUT")" 3
# submits three-stage pipeline file $1 (jobs R1 R2 R3), cancels its first stage, and waits up to
# 10 s for stage $2 to be cancelled after it
cancel_first_stage() {
  expect_rc 0 "$COLOCTL" submit "$1"
  read -r R1 R2 R3 <<<"$(cut -d' ' -f1 <<<"$OUT" | tr '\n' ' ')"
  expect_rc 0 "$COLOCTL" cancel "$R1"
  local last="R$2"
  for _ in $(seq 1 100); do
    [ "$(jstate "${!last}")" = cancelled ] && break
    sleep 0.1
  done
}
# a pipeline file with cancel_on_dependency_failure: its first stage cancelled, the others end
# with it
sed 's/^name: tiny$/name: tiny3\ncancel_on_dependency_failure: true/' "$TMP/pipe/p.yaml" >"$TMP/pipe/p3.yaml"
cancel_first_stage "$TMP/pipe/p3.yaml" 3
expect_eq "$(jstate "$R1") $(jstate "$R2") $(jstate "$R3")" "cancelled cancelled cancelled"
expect_rc 0 "$COLOCTL" status "$R3"
expect_contains "$OUT" "cancelled (cancel_on_dependency_failure): job $R1, which it waited for to succeed, ended CANCELLED"
# a stage's own set overrides the file's: that stage keeps waiting, saying why
sed -e 's/^name: tiny3$/name: tiny4/' -e 's/train.eval_batches=2]/train.eval_batches=2, cancel_on_dependency_failure=false]/' \
  "$TMP/pipe/p3.yaml" >"$TMP/pipe/p4.yaml"
cancel_first_stage "$TMP/pipe/p4.yaml" 2
expect_rc 0 "$COLOCTL" status "$R3"
expect_eq "$(jstate "$R1") $(jstate "$R2") $(jstate "$R3")" "cancelled cancelled pending" "$OUT"
expect_contains "$OUT" "it ended CANCELLED, and starts only if that job is resumed"
expect_rc 0 "$COLOCTL" cancel "$R3"
expect_rc 2 "$COLOCTL" cancel 7 --name tiny2.
expect_eq "$ERR" "coloctl: cancel: give job ids, or --name PREFIX [--owner O] [--account A], not both; try 'coloctl --help'"
expect_rc 2 "$COLOCTL" cancel --owner alice
expect_eq "$ERR" "coloctl: cancel: --owner needs --name PREFIX too (each of an owner's jobs by name); try 'coloctl --help'"

# model.arch=llama through colod, the worker and colo-train: the example job, trained briefly,
# then a next stage from its checkpoint (the architecture travels in the manifest); a GPT-2 stage
# from the same checkpoint fails, naming both architectures
LL=("$COLO_SRC/examples/llama-tinyshakespeare.yaml" --set data.train_path=ts/train.bin
  --set data.val_path=ts/val.bin --set parallel.dp=1 --set model.n_layer=1 --set model.n_embd=32
  --set train.batch_size=4 --set train.eval_interval=20 --set train.eval_batches=2
  --set optimizer.warmup_steps=1 --set checkpoint.interval=0 --set checkpoint.keep_best=false)
expect_rc 0 "$COLOCTL" submit --dry-run "$COLO_SRC/examples/llama-tinyshakespeare.yaml"
L1=$("$COLOCTL" submit "${LL[@]}" --set train.steps=40 --set checkpoint.interval=20)
L2=$("$COLOCTL" submit "${LL[@]}" --set name=llama-next --set train.steps=2 --after "$L1" \
  --set train.init_from_job="$L1")
L3=$("$COLOCTL" submit "${LL[@]}" --set name=gpt2-next --set model.arch=gpt2 --set train.steps=2 \
  --after "$L1" --set train.init_from_job="$L1" --set max_restarts=0)
# after the stage that fails: one cancelled with it (cancel_on_dependency_failure), one that keeps
# waiting for it to be resumed (the default)
L3C=$("$COLOCTL" submit "${LL[@]}" --set name=after-gpt2-c --set train.steps=2 --after "$L3" \
  --set cancel_on_dependency_failure=true)
L3W=$("$COLOCTL" submit "${LL[@]}" --set name=after-gpt2-w --set train.steps=2 --after "$L3")
expect_rc 0 "$COLOCTL" status "$L3C"
expect_contains "$OUT" "after      job $L3 (each must succeed first; cancelled if one ends otherwise)"
for _ in $(seq 1 600); do
  case "$(jstate "$L2")$(jstate "$L3")$(jstate "$L3C")" in succeededfailedcancelled) break ;; esac
  sleep 0.1
done
expect_eq "$(jstate "$L1") $(jstate "$L2") $(jstate "$L3") $(jstate "$L3C") $(jstate "$L3W")" \
  "succeeded succeeded failed cancelled pending"
expect_rc 0 "$COLOCTL" status "$L3C"
expect_contains "$OUT" "cancelled (cancel_on_dependency_failure): job $L3, which it waited for to succeed, ended FAILED"
expect_rc 0 "$COLOCTL" status "$L3W"
expect_contains "$OUT" "waits for job $L3 to succeed: it ended FAILED, and starts only if that job is resumed and succeeds (or cancel this one)"
expect_rc 0 "$COLOCTL" cancel "$L3W"
expect_contains "$("$COLOCTL" logs "$L1")" "model: llama, 1 layers, 4 heads, 32 wide"
expect_rc 0 "$COLOCTL" status "$L1"
expect_contains "$OUT" "  model      llama, 1 layers, 4 heads, 32 wide, block 64, vocab 256"
expect_rc 0 "$COLOCTL" submit --dry-run "${LL[@]}" --set model.n_kv_head=2 --set model.tie_embeddings=false --json
expect_contains "$OUT" '"n_kv_head":2,"tie_embeddings":false'
expect_contains "$("$COLOCTL" logs "$L2")" "initial weights from $TMP/ckpt/job-$L1/step_00000040"
expect_contains "$("$COLOCTL" logs "$L3")" "is of a llama model with MLP width 128 and 4 key heads; this run's is gpt2 with 128 and 4 (model.arch"
ll_last=$("$COLOCTL" logs "$L1" | grep -E "^step +40 \| val loss" | sed 's/.*val loss //')
ll_next=$("$COLOCTL" logs "$L2" | grep -E "^step +0 \| val loss" | sed 's/.*val loss //')
[ -n "$ll_last" ] && [ "$ll_last" = "$ll_next" ] ||
  fail "the llama stage did not start from its predecessor: val loss '$ll_last' then '$ll_next'"
echo "figure: llama job $L1 trained 40 steps to val loss $ll_last; job $L2 started there ($ll_next); a gpt2 stage from it failed, naming both"

# LoRA through colod: adapters on the llama job's model, which stays frozen, kept as ZeRO-3
# pieces (one rank here: engine_lora shards it over two); the job exports the model with them
# merged. A QLoRA job whose tensor-parallel parts would split NF4's blocks, or a LoRA job with
# ZeRO-1, is refused at submit.
expect_rc 1 "$COLOCTL" submit "${LL[@]}" --set train.lora_rank=4 --set train.lora_quant=nf4 \
  --set parallel.tp=2 --set parallel.zero_stage=3
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: train.lora_quant=nf4 with parallel.tp=2 needs model.n_embd/tp (16) and the MLP's width/tp (64) to be multiples of 64: each rank's part of a matrix must hold whole NF4 blocks, as the model whole does"
expect_rc 1 "$COLOCTL" submit "${LL[@]}" --set train.lora_rank=4
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: train.lora_rank=4 with parallel.zero_stage=1: stages 1 and 2 shard gradients and optimizer state, and the frozen model has none; zero_stage=3 shards its parameters, 0 keeps it whole"
# a LoRA job of the llama job's settings and these: it succeeds, and `coloctl status` shows its
# lora line; LJ: its id, LG: its logs
lora_job() { # the status line's lora text, submit's settings...
  local line=$1
  shift
  LJ=$("$COLOCTL" submit "${LL[@]}" --set train.init_from_job="$L1" --set optimizer.lr=0.01 "$@")
  ended "$LJ"
  expect_eq "$(jstate "$LJ")" "succeeded" "(job $LJ: $("$COLOCTL" status "$LJ"))"
  expect_rc 0 "$COLOCTL" status "$LJ"
  expect_contains "$OUT" "  lora       $line"
  LG=$("$COLOCTL" logs "$LJ")
}
lora_job "rank 4, alpha 16 on attn.c_attn,mlp.c_proj: the model frozen" --set name=llama-lora \
  --set train.steps=20 --after "$L1" --set train.lora_rank=4 \
  --set train.lora_targets=attn.c_attn,mlp.c_proj --set parallel.zero_stage=3 \
  --set checkpoint.export_format=gguf
L4=$LJ LG4=$LG
expect_contains "$LG4" "initial weights from $TMP/ckpt/job-$L1/step_00000040"
expect_contains "$LG4" "lora: rank 4, alpha 16 on attn.c_attn,mlp.c_proj: 1152 parameters train, the model's "
expect_contains "$LG4" "), sharded over the data-parallel ranks (ZeRO-3)"
lo_first=$(grep -E "^step +0 \| val loss" <<<"$LG4" | sed 's/.*val loss //')
lo_last=$(grep -E "^step +20 \| val loss" <<<"$LG4" | sed 's/.*val loss //')
[ "$lo_first" = "$ll_last" ] || fail "the adapters did not start as the model: val loss $lo_first, the model's $ll_last"
python3 - "$TMP/ckpt/job-$L4/step_00000020/manifest.json" "$(realpath "$TMP/ckpt/job-$L1/step_00000040")" <<'PY' ||
import json, sys
lo = json.load(open(sys.argv[1]))["lora"]
assert lo == {"rank": 4, "alpha": 16, "targets": "attn.c_attn,mlp.c_proj", "base": sys.argv[2]}, lo
PY
  fail "the LoRA checkpoint's manifest: $(cat "$TMP/ckpt/job-$L4/step_00000020/manifest.json")"
[ -s "$TMP/ckpt/job-$L4/model.gguf" ] || fail "the LoRA job wrote no model.gguf: $(ls "$TMP/ckpt/job-$L4")"
echo "figure: LoRA job $L4 on job $L1's model: val loss $lo_first -> $lo_last in 20 steps; model.gguf $(stat -c %s "$TMP/ckpt/job-$L4/model.gguf") bytes, merged"

# a LoRA stage after a LoRA stage (init_from_job of a LoRA job): its adapters go on training, on
# the model they adapted, and start where they ended
L4C=$("$COLOCTL" submit "${LL[@]}" --set name=llama-lora-more --set train.init_from_job="$L4" \
  --set optimizer.lr=0.01 --set train.steps=10 --set train.lora_rank=4 \
  --set train.lora_targets=attn.c_attn,mlp.c_proj --set parallel.zero_stage=0)
ended "$L4C"
expect_eq "$(jstate "$L4C")" "succeeded" "(job $L4C: $("$COLOCTL" status "$L4C"))"
LG4C=$("$COLOCTL" logs "$L4C")
expect_contains "$LG4C" "initial weights from $(realpath "$TMP/ckpt/job-$L1/step_00000040"), which checkpoint $TMP/ckpt/job-$L4/step_00000020"
expect_contains "$LG4C" "adapters from $TMP/ckpt/job-$L4/step_00000020 (step 20 of its run)"
lc_first=$(grep -E "^step +0 \| val loss" <<<"$LG4C" | sed 's/.*val loss //')
lc_last=$(grep -E "^step +10 \| val loss" <<<"$LG4C" | sed 's/.*val loss //')
[ "$lc_first" = "$lo_last" ] || fail "the continued adapters did not start where job $L4's ended: val loss $lc_first, its $lo_last"
echo "figure: LoRA job $L4C from job $L4's adapters: val loss $lc_first (job $L4's last) -> $lc_last in 10 steps"

# DPO after the LoRA stage: preference pairs made from the text (a line's own end preferred to
# another line's), prepared into the data root; job L4's adapters go on training against the
# model as the job starts (those adapters in it) as the reference, so its val loss starts at log 2
python3 - "$TEXT" "$TMP/pairs.jsonl" <<'PY'
import json, random, sys
lines = [x for x in open(sys.argv[1]).read().split("\n") if len(x) >= 30]
rnd = random.Random(3)
with open(sys.argv[2], "w") as f:
    for a in lines[:1500]:
        other = lines[rnd.randrange(len(lines))]
        f.write(json.dumps({"prompt": a[:20], "chosen": a[20:], "rejected": other[20:]}) + "\n")
PY
"$COLO_BIN/colo-train" prepare --input "$TMP/pairs.jsonl" --out "$TMP/data/pairs" --prompt-field prompt \
  --chosen-field chosen --rejected-field rejected >/dev/null
# a DPO job (beta 0.1) on those pairs, of the llama job's settings and these: it succeeds,
# `coloctl status` says so, and its validation starts at log 2; DJ: its id, DG: its logs
dpo_job() { # the status line's text after "on preference pairs", submit's settings...
  local line=$1
  shift
  DJ=$("$COLOCTL" submit "${LL[@]}" --set train.dpo_beta=0.1 --set data.train_path=pairs/train.bin \
    --set data.val_path=pairs/val.bin "$@")
  ended "$DJ"
  expect_eq "$(jstate "$DJ")" "succeeded" "(job $DJ: $("$COLOCTL" status "$DJ"))"
  expect_rc 0 "$COLOCTL" status "$DJ"
  expect_contains "$OUT" ", DPO beta 0.1 on preference pairs$line"
  DG=$("$COLOCTL" logs "$DJ")
  expect_contains "$DG" "step      0 | val loss 0.6931 | reward accuracy 0.0000, margin 0.0000 over 4 pairs"
}
dpo_job "" --set name=llama-dpo --set train.init_from_job="$L4" --set optimizer.lr=0.01 \
  --set train.steps=20 --set train.lora_rank=4 --set train.lora_targets=attn.c_attn,mlp.c_proj \
  --set parallel.zero_stage=3
LD=$DJ LGD=$DG
expect_contains "$LGD" "dpo: beta 0.1, reference the model as the run starts (with the adapters of $TMP/ckpt/job-$L4/step_00000020); "
dpo_last=$(grep -E "^step +20 \| val loss" <<<"$LGD")
[ -n "$dpo_last" ] || fail "the DPO job evaluated nothing at step 20: $LGD"
echo "figure: DPO job $LD from job $L4's adapters on $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train"]["pairs"])' <("$COLO_BIN/colo-train" prepare --input "$TMP/pairs.jsonl" --out "$TMP/pairs-again" --prompt-field prompt --chosen-field chosen --rejected-field rejected --json)) pairs: ${dpo_last#step     20 | }"

# DPO of the whole model through colod, from job L1's weights: its reference precomputed once
# (the pairs' log-probabilities under L1's model), the table in each checkpoint, so a resume of
# the job would read it; val loss log 2 at step 0
dpo_job " (reference precomputed)" --set name=llama-dpo-whole --set train.init_from_job="$L1" \
  --set optimizer.lr=0.001 --set train.steps=10 --set train.eval_interval=10 \
  --set checkpoint.interval=5
LW=$DJ LGW=$DG
expect_contains "$LGW" "dpo: beta 0.1, reference the model as the run starts (precomputed: a forward over every pair before the first step); "
dpo_pre=$(grep -E "^dpo: the reference's log-probabilities of [0-9]+ pairs" <<<"$LGW")
[ -n "$dpo_pre" ] || fail "the whole-model DPO job did not say it precomputed its reference: $LGW"
python3 - "$TMP/ckpt/job-$LW/step_00000005/manifest.json" "$TMP/ckpt/job-$LW/step_00000010/manifest.json" <<'PY' ||
import json, sys
for m in sys.argv[1:]:
    kinds = [f.get("kind") for f in json.load(open(m))["files"]]
    assert kinds == [None, "dpo_reference"], (m, kinds)
PY
  fail "the whole-model DPO job's checkpoints do not list their reference table"
echo "figure: whole-model DPO job $LW from job $L1: ${dpo_pre#dpo: }"

# QLoRA through colod: the same model's matrices in NF4, rsLoRA's scale, dropout and LoRA+'s
# rate for B; the checkpoint's manifest says all four
lora_job "rank 4, alpha 16 (rsLoRA) on all: the model frozen, its matrices in NF4 (QLoRA); dropout 0.05; LoRA+: B learns at 4 x lr" \
  --set name=llama-qlora --set train.steps=10 --set train.lora_rank=4 \
  --set train.lora_quant=nf4 --set train.lora_rslora=true --set train.lora_dropout=0.05 \
  --set train.lora_plus_ratio=4 --set parallel.zero_stage=0
L5=$LJ LG5=$LG
expect_contains "$LG5" "lora: rank 4, alpha 16 (rsLoRA: scale alpha/sqrt(r)), dropout 0.05, LoRA+ (B at 4 x lr) on attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj: "
expect_contains "$LG5" "its blocks' matrices in NF4 (QLoRA): "
python3 - "$TMP/ckpt/job-$L5/step_00000010/manifest.json" <<'PY' ||
import json, sys
lo = json.load(open(sys.argv[1]))["lora"]
assert (lo["quant"], lo["rslora"], lo["dropout"], lo["plus_ratio"]) == ("nf4", True, 0.05, 4), lo
PY
  fail "the QLoRA checkpoint's manifest: $(cat "$TMP/ckpt/job-$L5/step_00000010/manifest.json")"
q_first=$(grep -E "^step +0 \| val loss" <<<"$LG5" | sed 's/.*val loss //')
q_last=$(grep -E "^step +10 \| val loss" <<<"$LG5" | sed 's/.*val loss //')
echo "figure: QLoRA job $L5 on job $L1's model (its val loss $ll_last): val loss $q_first with the matrices in NF4 -> $q_last in 10 steps"

# LoRA on two tensor-parallel ranks with sequence parallelism through colod: the job's two ranks
# each hold their part of the adapters, and rank 0 writes them whole; `colo-train eval` reads that
# checkpoint on one rank
lora_job "rank 4, alpha 16 on all: the model frozen; dropout 0.05" --set name=llama-lora-tp \
  --set train.steps=10 --set train.lora_rank=4 --set train.lora_dropout=0.05 \
  --set parallel.tp=2 --set parallel.sequence_parallel=true --set parallel.zero_stage=0
L6=$LJ LG6=$LG
expect_contains "$LG6" "mesh: pp=1 (1 micro-batches) x dp=1 x tp=2"
expect_contains "$LG6" "parameters train (1536 on this rank, of pp=1 x tp=2), the rank's "
expect_rc 0 "$COLO_BIN/colo-train" eval --checkpoint "$TMP/ckpt/job-$L6/step_00000010" \
  --data "$TMP/data/ts/val.bin" --batches 2 --batch-size 4 --json
t_eval=$(python3 -c 'import json,sys; print("%.4f" % json.loads(sys.argv[1].splitlines()[-1])["loss"])' "$OUT")
t_last=$(grep -E "^step +10 \| val loss" <<<"$LG6" | sed 's/.*val loss //')
echo "figure: LoRA job $L6 on 2 tensor-parallel ranks: val loss $t_last at step 10; colo-train eval of its checkpoint on one rank $t_eval"

# QDoRA through colod: the NF4 model (its scales double-quantized) with DoRA's magnitudes,
# exported for PEFT at the end
lora_job "rank 4, alpha 16 on all: the model frozen, its matrices in NF4 (QLoRA), double-quantized; DoRA: a magnitude per output" \
  --set name=llama-qdora --set train.steps=10 --set train.lora_rank=4 --set train.lora_quant=nf4 \
  --set train.lora_double_quant=true --set train.lora_dora=true --set checkpoint.export_format=peft \
  --set parallel.zero_stage=0 --set train.neftune_alpha=5
L7=$LJ LG7=$LG
expect_rc 0 "$COLOCTL" status "$L7"
expect_contains "$OUT" ", NEFTune noise alpha 5"
expect_contains "$LG7" "neftune: uniform noise in +-0.1105 (alpha 5 / sqrt(64 x 32)) on the embeddings in training"
expect_contains "$LG7" "lora: rank 4, alpha 16, DoRA (a magnitude per output) on attn.c_attn,attn.c_proj,mlp.c_fc,mlp.c_proj: "
expect_contains "$LG7" "its blocks' matrices in NF4 (QLoRA, double quantization): "
python3 - "$TMP/ckpt/job-$L7" <<'PY' || fail "the QDoRA job's checkpoint or PEFT export: $(ls "$TMP/ckpt/job-$L7")"
import json, os, sys
lo = json.load(open(os.path.join(sys.argv[1], "step_00000010", "manifest.json")))["lora"]
assert (lo["quant"], lo["dora"], lo["double_quant"]) == ("nf4", True, True), lo
cfg = json.load(open(os.path.join(sys.argv[1], "adapter", "adapter_config.json")))
assert cfg["use_dora"] is True, cfg
PY
d_first=$(grep -E "^step +0 \| val loss" <<<"$LG7" | sed 's/.*val loss //')
d_last=$(grep -E "^step +10 \| val loss" <<<"$LG7" | sed 's/.*val loss //')
echo "figure: QDoRA job $L7 on job $L1's model: val loss $d_first -> $d_last in 10 steps, exported for PEFT (use_dora)"

kill -TERM $WPID
wait $WPID || fail "the worker did not exit 0"
stop_colod
echo "integration_pipeline: stage 2 waited for stage 1, then started from its step-1000 checkpoint: stage 1's loss ${l1_first} -> ${l1_last}, stage 2's first ${l2_first}; /metrics showed stage 1 at step $step; a 3-stage pipeline file ran as jobs $P1 $P2 $P3, each from the one before"
