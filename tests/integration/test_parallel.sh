#!/usr/bin/env bash
# Data parallelism on the CPU over TCP, launched with colo-train --nproc:
#   - equivalence: dp=2 with ZeRO 0-3 (ZeRO-3 also in one chunk of memory.chunk_mib), dp=4 with
#     ZeRO 1-3, ZeRO 2 and 3 on one rank, tp=2 with and without sequence parallelism,
#     dp=2 x tp=2 at ZeRO 1-3, pp=2 with 4 micro-batches
#     (1F1B), pp=2 x tp=2 (also sequence parallel) and pp=2 x dp=2 x tp=2 (8 ranks), and
#     model.arch=llama at tp=2 with sp, ZeRO-3 and pp=2 x tp=2 (and with grouped-query attention
#     at tp=2 with sp and pp=2 x tp=2; with an untied head at pp=2 x tp=2 and ZeRO-3; Qwen2's
#     biases at tp=2 sp and ZeRO-3; Qwen3's QK-norm with heads wider than n_embd/n_head at tp=2 sp, ZeRO-3, cp=2 and
#     tp=2 x cp=2; Mistral's sliding window at cp=2 (also within documents) and pp=2 x tp=2), with a
#     loss mask and with documents (attention within each) at several layouts, against
#     one process with the
#     same global batch: over 10 steps the losses within 1e-5 relative, final weights within 1e-4;
#     and Muon (optimizer.name: muon) at dp=2 with ZeRO 0-3, dp=4 ZeRO-1, pp=2 x dp=2, tp=2
#     (sequence parallel), dp=2 x tp=2 ZeRO-3, pp=2 x tp=2, llama GQA at ZeRO-3 and tp=2, cp=2
#     and dp=2 x cp=2 ZeRO-3;
#     and pp=2 with boundary tensors larger than the transport's buffers (2 steps; the
#     shared-memory rings at 1 MiB, and a size out of range refused);
#   - the weights' moving average (train.ema_decay) at dp=2, ZeRO-1, ZeRO-3, pp=2 x tp=2, cp=2 and
#     dp=2 x cp=2 ZeRO-1 as one process's, evaluated in the weights' place at each evaluation
#     (which trains on as without it), and resumed from ZeRO-3's pieces at dp=1;
#   - context parallelism (cp=2 alone, recomputing, with NEFTune and a loss mask, dp=2 x cp=2 at
#     ZeRO-1 and 3, pp=2 x cp=2, cp=4, llama GQA with documents at cp=2 x tp=2 sp, and at cp=2
#     with and without documents, its key heads moving unrepeated) as one process,
#     resumed at dp=1, with each rank's activations below 0.6x, and its refusals;
#   - reshard: a checkpoint saved at dp=2 (ZeRO-1) resumes at dp=1, one saved at dp=1 resumes at
#     dp=2, one saved under ZeRO-3 resumes under ZeRO-1 (and Muon's, without its matrices'
#     second moments, under other layouts, tp=2's among them), and ones saved at tp=2 and at
#     pp=2 x tp=2 resume at dp=4, with the losses of a run that never stopped; under ZeRO each
#     data-parallel rank writes its own pieces, whose slices tile every tensor once;
#   - fault: kill -9 of one rank mid-training; every other rank exits non-zero within the
#     communicator timeout (5 s here), naming the dead rank;
#   - memory: ZeRO-1 holds 1/dp of the AdamW moments; sequence parallelism halves the activations
#     tensor parallelism does not split (by the bytes the row buffers save).
source "$(dirname "$0")/lib.sh"
export CT="$COLO_BIN/colo-train"
PY=/usr/bin/python3
training_text
"$CT" prepare --input "$TEXT" --out "$TMP/data" >/dev/null
M=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 2 --n-head 2
  --n-embd 64 --block-size 32 --steps 10 --eval-interval 5 --eval-batches 2 --warmup 2 --lr 3e-3
  --quiet --threads 1)
GLOBAL_B=8

compare() { # reference-dir other-dir label [final step, 10]; fails the test when they differ
  $PY - "$1" "$2" "$3" "${4:-10}" <<'PYEOF' || fail "$3 differs"
import json, os, struct, subprocess, sys
import numpy as np
def losses(d):
    out, seen = [], set()
    for r in map(json.loads, open(d + "/progress.jsonl")):
        # a resumed run evaluates again at the step it resumed from: keep the first
        if r["event"] in ("step", "eval") and (r["event"], r["step"]) not in seen:
            seen.add((r["event"], r["step"]))
            out.append((r["event"], r["step"], r.get("loss", r.get("val_loss"))))
    return out
def weights(d, step): # whole tensors, whatever the layout's shards: colo-train export
    out = "%s/export-%d.safetensors" % (d, step)
    subprocess.run([os.environ["CT"], "export", "--checkpoint", "%s/ckpt/step_%08d" % (d, step),
                    "--out", out] + os.environ.get("EXPORT_ARGS", "").split(), check=True)
    b = open(out, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); data = b[8 + n:]
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np.float32)
            for k, v in h.items() if k != "__metadata__" and not k.startswith("optimizer.")}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert [x[:2] for x in a] == [x[:2] for x in b], "different events"
worst = max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(a, b))
wa, wb = weights(sys.argv[1], int(sys.argv[4])), weights(sys.argv[2], int(sys.argv[4]))
wworst = max(float(np.abs(wa[k] - wb[k]).max()) for k in wa)
print("%-28s %d losses, worst rel diff %.2e; final weights, worst abs diff %.2e" % (sys.argv[3], len(a), worst, wworst))
sys.exit(0 if worst <= 1e-5 and wworst <= 1e-4 else 1)
PYEOF
}

# two runs that must not train alike: their step-10 losses differ by more than `by`
# (reference-dir other-dir label by)
differs() {
  $PY - "$1/progress.jsonl" "$2/progress.jsonl" "$3" "$4" <<'PYEOF' || fail "$3: the same losses"
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(f)) if r["event"] == "step"] for f in sys.argv[1:3])
print("%s: step-10 loss %.4f and %.4f" % (sys.argv[3], a[-1], b[-1]))
sys.exit(0 if abs(a[-1] - b[-1]) > float(sys.argv[4]) else 1)
PYEOF
}

run() { # dir then args
  local d=$1
  shift
  mkdir -p "$d"
  "$CT" train "${M[@]}" --ckpt-dir "$d/ckpt" --progress "$d/progress.jsonl" "$@" 2>"$d/err" ||
    fail "colo-train $* failed: $(cat "$d/err")"
}

run "$TMP/single" --batch-size $GLOBAL_B
run "$TMP/dp2z0" --nproc 2 --dp 2 --zero 0 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp2z1" --nproc 2 --dp 2 --zero 1 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp4z1" --nproc 4 --dp 4 --zero 1 --batch-size $((GLOBAL_B / 4))
# more ranks x threads than cores: the launcher has OpenMP's idle threads wait passively (it sets
# OMP_WAIT_POLICY=passive and executes itself again), unless the user chose a policy
CORES=$(getconf _NPROCESSORS_ONLN)
if [ "$CORES" -ge 2 ]; then
  W=(train "${M[@]}" --nproc 2 --dp 2 --batch-size $((GLOBAL_B / 2)) --steps 2 --eval-interval 0)
  expect_rc 0 "$CT" "${W[@]}" --threads "$CORES"
  expect_eq "$(grep -c "OpenMP threads wait" <<<"$OUT")" 1
  expect_contains "$OUT" "colo-train: 2 ranks x $CORES threads on $CORES cores: OpenMP threads wait passively (OMP_WAIT_POLICY=passive)"
  OMP_WAIT_POLICY=active expect_rc 0 "$CT" "${W[@]}" --threads "$CORES"
  [[ "$OUT" != *"OpenMP threads wait"* ]] || fail "OMP_WAIT_POLICY=active was overridden: $OUT"
fi
run "$TMP/dp2z2" --nproc 2 --dp 2 --zero 2 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp4z2" --nproc 4 --dp 4 --zero 2 --batch-size $((GLOBAL_B / 4))
run "$TMP/dp1z2" --zero 2 --batch-size $GLOBAL_B
run "$TMP/dp2z3" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp4z3" --nproc 4 --dp 4 --zero 3 --batch-size $((GLOBAL_B / 4))
run "$TMP/dp1z3" --zero 3 --batch-size $GLOBAL_B
run "$TMP/dp2z3c" --nproc 2 --dp 2 --zero 3 --chunk-mib 1 --batch-size $((GLOBAL_B / 2))
run "$TMP/tp2" --nproc 2 --tp 2 --batch-size $GLOBAL_B
run "$TMP/tp2sp" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/single_acc" --batch-size $GLOBAL_B --grad-accum 2
run "$TMP/tp2sp_acc" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B --grad-accum 2
run "$TMP/dp2tp2" --nproc 4 --dp 2 --tp 2 --zero 1 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp2tp2z2" --nproc 4 --dp 2 --tp 2 --zero 2 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp2tp2z3" --nproc 4 --dp 2 --tp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/pp2" --nproc 2 --pp 2 --micro-batches 4 --batch-size $GLOBAL_B
run "$TMP/pp2tp2" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size $GLOBAL_B
run "$TMP/pp2tp2sp" --nproc 4 --pp 2 --tp 2 --sp true --micro-batches 2 --batch-size $GLOBAL_B
run "$TMP/pp2dp2tp2" --nproc 8 --pp 2 --dp 2 --tp 2 --zero 1 --micro-batches 2 --batch-size $((GLOBAL_B / 2))
compare "$TMP/single" "$TMP/dp2z0" "dp=2 ZeRO-0"
compare "$TMP/single" "$TMP/dp2z1" "dp=2 ZeRO-1"
compare "$TMP/single" "$TMP/dp4z1" "dp=4 ZeRO-1"
compare "$TMP/single" "$TMP/dp2z2" "dp=2 ZeRO-2"
compare "$TMP/single" "$TMP/dp4z2" "dp=4 ZeRO-2"
compare "$TMP/single" "$TMP/dp1z2" "dp=1 ZeRO-2 (hooks alone)"
compare "$TMP/single" "$TMP/dp2z3" "dp=2 ZeRO-3"
compare "$TMP/single" "$TMP/dp4z3" "dp=4 ZeRO-3"
compare "$TMP/single" "$TMP/dp1z3" "dp=1 ZeRO-3 (hooks alone)"
compare "$TMP/single" "$TMP/dp2z3c" "dp=2 ZeRO-3 in chunks of memory.chunk_mib=1"
compare "$TMP/single" "$TMP/tp2" "tp=2"
compare "$TMP/single" "$TMP/tp2sp" "tp=2 sequence parallel"
compare "$TMP/single_acc" "$TMP/tp2sp_acc" "tp=2 sp, grad accum 2"
# the run says which layout it used (printed without --quiet)
loud=()
for a in "${M[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
"$CT" train "${loud[@]}" --steps 2 --eval-interval 0 --nproc 2 --tp 2 --sp true \
  --batch-size $GLOBAL_B >"$TMP/mesh.out" 2>&1 || fail "the sp run failed: $(cat "$TMP/mesh.out")"
expect_contains "$(head -1 "$TMP/mesh.out")" "tp=2 with sequence parallelism"
"$CT" train "${loud[@]}" --steps 2 --eval-interval 0 --nproc 2 --dp 2 --zero 3 --chunk-mib 1 \
  --batch-size 4 >"$TMP/mesh.out" 2>&1 || fail "the chunk-mib run failed: $(cat "$TMP/mesh.out")"
expect_contains "$(head -1 "$TMP/mesh.out")" "ZeRO stage 3 over 1 chunks of 262144 floats"
compare "$TMP/single" "$TMP/dp2tp2" "dp=2 x tp=2 ZeRO-1"
compare "$TMP/single" "$TMP/dp2tp2z2" "dp=2 x tp=2 ZeRO-2"
compare "$TMP/single" "$TMP/dp2tp2z3" "dp=2 x tp=2 ZeRO-3"
compare "$TMP/single" "$TMP/pp2" "pp=2, 4 micro-batches"
compare "$TMP/single" "$TMP/pp2tp2" "pp=2 x tp=2"
compare "$TMP/single" "$TMP/pp2tp2sp" "pp=2 x tp=2 sequence parallel"
compare "$TMP/single" "$TMP/pp2dp2tp2" "pp=2 x dp=2 x tp=2 (8 ranks)"
# model.arch=llama (RMSNorm, rotary positions, SwiGLU, no biases) in the layouts that split it
# differently: tensor parallel (its c_fc split within gate and up) with sequence parallelism,
# ZeRO-3, pipeline x tensor parallel; the final weights are read back whole (export), so each
# layout's checkpoint is resharded too
LL=(--arch llama --mlp-hidden 96)
run "$TMP/llama" "${LL[@]}" --batch-size $GLOBAL_B
run "$TMP/llama_tp2sp" "${LL[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/llama_dp2z3" "${LL[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/llama_pp2tp2" "${LL[@]}" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size $GLOBAL_B
compare "$TMP/llama" "$TMP/llama_tp2sp" "llama tp=2 sequence parallel"
compare "$TMP/llama" "$TMP/llama_dp2z3" "llama dp=2 ZeRO-3"
compare "$TMP/llama" "$TMP/llama_pp2tp2" "llama pp=2 x tp=2"
# grouped-query attention: 2 key and value heads for 4 query heads, a key head per tp rank
GQ=("${LL[@]}" --n-head 4 --n-kv-head 2)
run "$TMP/gqa" "${GQ[@]}" --batch-size $GLOBAL_B
run "$TMP/gqa_tp2sp" "${GQ[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/gqa_pp2tp2" "${GQ[@]}" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size $GLOBAL_B
compare "$TMP/gqa" "$TMP/gqa_tp2sp" "llama GQA tp=2 sequence parallel"
compare "$TMP/gqa" "$TMP/gqa_pp2tp2" "llama GQA pp=2 x tp=2"
# an untied head (lm_head.weight, vocab-parallel, on the last stage: no tied copy to sum)
UT=("${LL[@]}" --tie-embeddings false)
run "$TMP/untied" "${UT[@]}" --batch-size $GLOBAL_B
run "$TMP/untied_pp2tp2" "${UT[@]}" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size $GLOBAL_B
run "$TMP/untied_dp2z3" "${UT[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
compare "$TMP/untied" "$TMP/untied_pp2tp2" "llama untied head pp=2 x tp=2"
compare "$TMP/untied" "$TMP/untied_dp2z3" "llama untied head dp=2 ZeRO-3"
# Muon (optimizer.name: muon) in every layout it takes: data parallel at each ZeRO stage (its
# input gathered a chunk at a time, each rank orthogonalizing the matrices its pieces touch),
# dp=4 (pieces that cut through matrices), pipeline x data parallel, and Llama with grouped-query
# attention (q, k, v and gate, up orthogonalized each) at ZeRO-3
MU=(--optimizer muon)
run "$TMP/mu" "${MU[@]}" --batch-size $GLOBAL_B
for z in 0 1 2 3; do
  run "$TMP/mu_dp2z$z" "${MU[@]}" --nproc 2 --dp 2 --zero "$z" --batch-size $((GLOBAL_B / 2))
  compare "$TMP/mu" "$TMP/mu_dp2z$z" "muon dp=2 ZeRO-$z"
done
run "$TMP/mu_dp4z1" "${MU[@]}" --nproc 4 --dp 4 --zero 1 --batch-size $((GLOBAL_B / 4))
run "$TMP/mu_pp2dp2z1" "${MU[@]}" --nproc 4 --pp 2 --dp 2 --zero 1 --micro-batches 2 --batch-size $((GLOBAL_B / 2))
compare "$TMP/mu" "$TMP/mu_dp4z1" "muon dp=4 ZeRO-1"
compare "$TMP/mu" "$TMP/mu_pp2dp2z1" "muon pp=2 x dp=2 ZeRO-1"
run "$TMP/mu_gqa" "${GQ[@]}" "${MU[@]}" --batch-size $GLOBAL_B
run "$TMP/mu_gqa_dp2z3" "${GQ[@]}" "${MU[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
compare "$TMP/mu_gqa" "$TMP/mu_gqa_dp2z3" "muon llama GQA dp=2 ZeRO-3"
# tensor parallelism: each matrix's shares gathered over the group and orthogonalized whole (q, k
# and v each, the narrower k and v of grouped-query attention, gate and up each, the row-split
# projections), alone, under ZeRO-3 and across pipeline stages
run "$TMP/mu_tp2sp" "${MU[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/mu_dp2tp2z3" "${MU[@]}" --nproc 4 --dp 2 --tp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/mu_pp2tp2" "${MU[@]}" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size $GLOBAL_B
run "$TMP/mu_gqa_tp2sp" "${GQ[@]}" "${MU[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
compare "$TMP/mu" "$TMP/mu_tp2sp" "muon tp=2 sequence parallel"
compare "$TMP/mu" "$TMP/mu_dp2tp2z3" "muon dp=2 x tp=2 ZeRO-3"
compare "$TMP/mu" "$TMP/mu_pp2tp2" "muon pp=2 x tp=2"
compare "$TMP/mu_gqa" "$TMP/mu_gqa_tp2sp" "muon llama GQA tp=2 sp"
# context parallelism: its ranks hold ZeRO's pieces as data-parallel ones do
run "$TMP/mu_cp2" "${MU[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
run "$TMP/mu_dp2cp2z3" "${MU[@]}" --nproc 4 --dp 2 --cp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
compare "$TMP/mu" "$TMP/mu_cp2" "muon cp=2"
compare "$TMP/mu" "$TMP/mu_dp2cp2z3" "muon dp=2 x cp=2 ZeRO-3"
# and it is another optimizer: not AdamW's losses
differs "$TMP/single" "$TMP/mu" "adamw and muon" 1e-3
# and it is another model: not GPT-2's losses
differs "$TMP/single" "$TMP/llama" "gpt2 and llama" 1e-3

# a loss mask (prompts and completions, `prepare --prompt-field`): the loss is the mean over the
# targets of the whole batch that count, so every layout takes the same mean as one process,
# whatever share of them a rank's or a micro-batch's sequences hold; evaluation too, of fixed
# batches (--eval-batches 2) and of the whole set (0)
$PY - "$TMP/qa.jsonl" <<'PYEOF'
import json, random, sys
r = random.Random(11)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        a, b = r.randint(0, 999), r.randint(0, 999)
        f.write(json.dumps({"q": "Q: %d+%d=?\n" % (a, b) + "x" * r.randint(0, 40),
                            "a": "A: %d\n" % (a + b)}) + "\n")
PYEOF
"$CT" prepare --input "$TMP/qa.jsonl" --out "$TMP/qa" --prompt-field q --completion-field a \
  >"$TMP/qa.out" || fail "prepare of prompts and completions failed"
expect_contains "$(cat "$TMP/qa.out")" "of them targets of the loss"
QA=(--data-root "$TMP/qa")
run "$TMP/qa1" "${QA[@]}" --batch-size $GLOBAL_B
run "$TMP/qa_acc" "${QA[@]}" --batch-size $((GLOBAL_B / 2)) --grad-accum 2 --eval-batches 4
run "$TMP/qa_dp2z3" "${QA[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/qa_dp4z1" "${QA[@]}" --nproc 4 --dp 4 --zero 1 --batch-size $((GLOBAL_B / 4))
run "$TMP/qa_tp2sp" "${QA[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/qa_pp2dp2tp2" "${QA[@]}" --nproc 8 --pp 2 --dp 2 --tp 2 --zero 1 --micro-batches 2 \
  --batch-size $((GLOBAL_B / 2))
compare "$TMP/qa1" "$TMP/qa_acc" "masked: grad accum 2"
compare "$TMP/qa1" "$TMP/qa_dp2z3" "masked: dp=2 ZeRO-3"
compare "$TMP/qa1" "$TMP/qa_dp4z1" "masked: dp=4 ZeRO-1"
compare "$TMP/qa1" "$TMP/qa_tp2sp" "masked: tp=2 sequence parallel"
compare "$TMP/qa1" "$TMP/qa_pp2dp2tp2" "masked: pp=2 x dp=2 x tp=2"
run "$TMP/qaw1" "${QA[@]}" --batch-size $GLOBAL_B --eval-batches 0
run "$TMP/qaw_dp2" "${QA[@]}" --nproc 2 --dp 2 --batch-size $((GLOBAL_B / 2)) --eval-batches 0
compare "$TMP/qaw1" "$TMP/qaw_dp2" "masked: dp=2, the whole val set"
# and the mask is used: the same tokens without it give another loss
$PY - "$TMP/qa/train.bin" "$TMP/qa_nomask" <<'PYEOF'
import os, struct, sys
d = open(sys.argv[1], "rb").read()
h = list(struct.unpack("<256i", d[:1024]))
assert h[0] == 20261125 and h[3] == 2, h[:4]
os.makedirs(sys.argv[2], exist_ok=True)
for name in ("train.bin", "val.bin"):
    d = open(os.path.join(os.path.dirname(sys.argv[1]), name), "rb").read()
    n = struct.unpack("<256i", d[:1024])[2]
    with open(os.path.join(sys.argv[2], name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)) + d[1024:1024 + 2 * n])
PYEOF
run "$TMP/qa_nomask" --data-root "$TMP/qa_nomask" --batch-size $GLOBAL_B
$PY - "$TMP/qa1/progress.jsonl" "$TMP/qa_nomask/progress.jsonl" <<'PYEOF' || fail "the loss mask changed nothing"
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(f)) if r["event"] == "step"] for f in sys.argv[1:])
print("first loss with the mask %.4f, of the same tokens without it %.4f" % (a[0], b[0]))
sys.exit(0 if abs(a[0] - b[0]) > 1e-2 else 1)
PYEOF
# documents (--document-token, a word to a document here): every rank numbers the positions and
# masks attention from the tokens alike, so every layout matches one process, GPT-2's learned
# positions and Llama's rotary ones; and the documents are used: another loss without them
D=(--document-token 32)
run "$TMP/doc1" "${D[@]}" --batch-size $GLOBAL_B
run "$TMP/doc_dp2z3" "${D[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/doc_tp2sp" "${D[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/doc_pp2dp2tp2" "${D[@]}" --nproc 8 --pp 2 --dp 2 --tp 2 --zero 1 --micro-batches 2 \
  --batch-size $((GLOBAL_B / 2))
run "$TMP/ldoc1" "${D[@]}" --arch llama --batch-size $GLOBAL_B
run "$TMP/ldoc_pp2tp2" "${D[@]}" --arch llama --nproc 4 --pp 2 --tp 2 --sp true --micro-batches 2 \
  --batch-size $GLOBAL_B
compare "$TMP/doc1" "$TMP/doc_dp2z3" "documents: dp=2 ZeRO-3"
compare "$TMP/doc1" "$TMP/doc_tp2sp" "documents: tp=2 sequence parallel"
compare "$TMP/doc1" "$TMP/doc_pp2dp2tp2" "documents: pp=2 x dp=2 x tp=2"
compare "$TMP/ldoc1" "$TMP/ldoc_pp2tp2" "documents: llama pp=2 x tp=2 sp"
# Qwen2's block (llama with q, k and v biases, RMSNorm eps 1e-6): the biases split with the
# queries, keys and values under tensor parallelism, and sharded under ZeRO-3
Q=(--arch llama --qkv-bias true --rms-norm-eps 1e-6)
run "$TMP/qwen1" "${Q[@]}" --batch-size $GLOBAL_B
run "$TMP/qwen_tp2sp" "${Q[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/qwen_dp2z3" "${Q[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
compare "$TMP/qwen1" "$TMP/qwen_tp2sp" "qwen2 block: tp=2 sequence parallel"
compare "$TMP/qwen1" "$TMP/qwen_dp2z3" "qwen2 block: dp=2 ZeRO-3"
# Qwen3's block (QK-norm: RMSNorm over each query and key head, 4 heads, 2 key heads), its heads
# 24 wide on the 64-wide stream (model.head_dim, as Qwen3 0.6B's 128 on 1024): the norm's two
# scales are shared by the heads that tensor parallelism splits (their gradients summed over
# the group), sharded under ZeRO-3, and applied before context parallelism's exchange, the keys
# moving unrepeated (cp=2) or repeated (tp=2 x cp=2)
Q3=(--arch llama --qk-norm true --n-head 4 --n-kv-head 2 --head-dim 24 --rms-norm-eps 1e-6)
run "$TMP/qwen3" "${Q3[@]}" --batch-size $GLOBAL_B
run "$TMP/qwen3_tp2sp" "${Q3[@]}" --nproc 2 --tp 2 --sp true --batch-size $GLOBAL_B
run "$TMP/qwen3_dp2z3" "${Q3[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/qwen3_cp2" "${Q3[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
run "$TMP/qwen3_tp2cp2" "${Q3[@]}" --nproc 4 --tp 2 --sp true --cp 2 --batch-size $GLOBAL_B
compare "$TMP/qwen3" "$TMP/qwen3_tp2sp" "qwen3 block: tp=2 sequence parallel"
compare "$TMP/qwen3" "$TMP/qwen3_dp2z3" "qwen3 block: dp=2 ZeRO-3"
compare "$TMP/qwen3" "$TMP/qwen3_cp2" "qwen3 block: cp=2"
compare "$TMP/qwen3" "$TMP/qwen3_tp2cp2" "qwen3 block: tp=2 sp x cp=2"
# Mistral 7B v0.1's sliding window (12 of the 32 positions; 4 heads, 2 key heads): under cp=2
# each rank's queries attend by their places in the whole row, the window reaching into the
# other rank's tokens; pp=2 x tp=2 recomputes each stage's forward before its backward; with
# documents (a space begins each) the window and the document both cut a query's keys
MW=(--arch llama --n-head 4 --n-kv-head 2 --sliding-window 12)
run "$TMP/mistral" "${MW[@]}" --batch-size $GLOBAL_B
run "$TMP/mistral_cp2" "${MW[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
run "$TMP/mistral_pp2tp2" "${MW[@]}" --nproc 4 --pp 2 --tp 2 --sp true --micro-batches 2 \
  --batch-size $GLOBAL_B
run "$TMP/mistral_doc" "${MW[@]}" "${D[@]}" --batch-size $GLOBAL_B
run "$TMP/mistral_doc_cp2" "${MW[@]}" "${D[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
compare "$TMP/mistral" "$TMP/mistral_cp2" "sliding window: cp=2"
compare "$TMP/mistral" "$TMP/mistral_pp2tp2" "sliding window: pp=2 x tp=2 sp"
compare "$TMP/mistral_doc" "$TMP/mistral_doc_cp2" "sliding window in documents: cp=2"
run "$TMP/mistral_whole" --arch llama --n-head 4 --n-kv-head 2 --batch-size $GLOBAL_B
differs "$TMP/mistral_whole" "$TMP/mistral" "attending whole windows and a sliding window of 12" 1e-3
differs "$TMP/single" "$TMP/doc1" "attending whole windows and within documents" 1e-2
# a stage holds only its parameters: model states (pool peak less activations) of stage 0
read -r s1 s2 <<<"$($PY -c '
import json, sys
def states(d):
    r = [x for x in map(json.loads, open(d + "/progress.jsonl")) if x["event"] == "step"][-1]
    return r["memory_bytes"] - r["activation_bytes"]
print(states(sys.argv[1]), states(sys.argv[2]))' "$TMP/single" "$TMP/pp2")"
echo "model states: one process $s1 bytes, pipeline stage 0 of 2 $s2 bytes"
[ "$s2" -lt $((s1 * 3 / 4)) ] || fail "stage 0 holds $s2 bytes of model states, not much less than $s1"

# boundary tensors larger than the shared-memory ring (1 MiB here: COLO_COMM_SHM_MIB; 4 by
# default): 75 sequences x 128 x 32 floats = 1.2 MB a micro-batch, where two stages each sending
# theirs would wait for the other forever
BIG=(--n-layer 2 --n-head 2 --n-embd 32 --block-size 128 --steps 2 --eval-interval 0 --batch-size 150)
run "$TMP/big1" "${BIG[@]}"
COLO_COMM_SHM_MIB=1 run "$TMP/bigpp2" "${BIG[@]}" --nproc 2 --pp 2 --micro-batches 2 --comm-timeout 30000
compare "$TMP/big1" "$TMP/bigpp2" "pp=2, 1.2 MB boundaries, 1 MiB rings" 2
COLO_COMM_SHM_MIB=0 expect_rc 78 "$CT" train "${M[@]}" --steps 2 --nproc 2 --dp 2
expect_contains "$ERR" "colo-train train: rank 0: COLO_COMM_SHM_MIB=0 must be 1 to 1024 (MiB of ring a direction, for each pair of ranks on one machine)"

# context parallelism (--cp, DeepSpeed-Ulysses): each sequence split over the group's ranks,
# which exchange their tokens for a share of the heads around attention and count as
# data-parallel ranks for the gradients: as one process alone, with data parallelism at ZeRO-1 and
# ZeRO-3, with a pipeline, recomputing, in 4 pieces, with tensor and sequence parallelism on
# Llama's grouped-query attention within documents (rotary positions of the row's pieces), with a
# loss mask, with NEFTune's noise (numbered as the whole rows'), and resumed at dp=1
run "$TMP/cp2" --nproc 2 --cp 2 --batch-size $GLOBAL_B
run "$TMP/dp2cp2z1" --nproc 4 --dp 2 --cp 2 --zero 1 --batch-size $((GLOBAL_B / 2))
run "$TMP/dp2cp2z3" --nproc 4 --dp 2 --cp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/pp2cp2" --nproc 4 --pp 2 --cp 2 --micro-batches 2 --batch-size $GLOBAL_B
run "$TMP/cp2rc" --nproc 2 --cp 2 --recompute --batch-size $GLOBAL_B
compare "$TMP/single" "$TMP/cp2" "cp=2"
compare "$TMP/single" "$TMP/dp2cp2z1" "dp=2 x cp=2 ZeRO-1"
compare "$TMP/single" "$TMP/dp2cp2z3" "dp=2 x cp=2 ZeRO-3"
compare "$TMP/single" "$TMP/pp2cp2" "pp=2 x cp=2"
compare "$TMP/single" "$TMP/cp2rc" "cp=2 recomputing"
run "$TMP/h4" --n-head 4 --batch-size $GLOBAL_B
run "$TMP/h4cp4" --n-head 4 --nproc 4 --cp 4 --batch-size $GLOBAL_B
compare "$TMP/h4" "$TMP/h4cp4" "cp=4"
run "$TMP/gqadoc" "${GQ[@]}" "${D[@]}" --batch-size $GLOBAL_B
run "$TMP/gqadoc_tp2cp2" "${GQ[@]}" "${D[@]}" --nproc 4 --tp 2 --sp true --cp 2 --batch-size $GLOBAL_B
compare "$TMP/gqadoc" "$TMP/gqadoc_tp2cp2" "documents: llama GQA cp=2 x tp=2 sp"
# where the key heads divide by cp (2 here, 1 a rank under tp=2 above) they move unrepeated and
# are repeated and rotated where attention runs
run "$TMP/gqa_cp2" "${GQ[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
run "$TMP/gqadoc_cp2" "${GQ[@]}" "${D[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
compare "$TMP/gqa" "$TMP/gqa_cp2" "llama GQA cp=2 (keys unrepeated)"
compare "$TMP/gqadoc" "$TMP/gqadoc_cp2" "documents: llama GQA cp=2 (keys unrepeated)"
run "$TMP/qa_cp2" "${QA[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
compare "$TMP/qa1" "$TMP/qa_cp2" "masked: cp=2"
run "$TMP/nef1" --neftune-alpha 5 --batch-size $GLOBAL_B
run "$TMP/nef_cp2" --neftune-alpha 5 --nproc 2 --cp 2 --batch-size $GLOBAL_B
compare "$TMP/nef1" "$TMP/nef_cp2" "NEFTune: cp=2"
differs "$TMP/single" "$TMP/nef1" "NEFTune's noise and none" 1e-4
run "$TMP/cpre" --nproc 2 --cp 2 --batch-size $GLOBAL_B --ckpt-interval 5 --stop-at 5
run "$TMP/cpre" --batch-size $GLOBAL_B --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/cpre" "cp=2 -> dp=1 resume"
# each rank keeps the activations of its piece of the rows alone
read -r a1 a2 <<<"$($PY -c '
import json, sys
def acts(d):
    return [x for x in map(json.loads, open(d + "/progress.jsonl")) if x["event"] == "step"][-1]["activation_bytes"]
print(acts(sys.argv[1]), acts(sys.argv[2]))' "$TMP/single" "$TMP/cp2")"
echo "activations: one process $a1 bytes, a rank of cp=2 $a2 bytes"
[ "$a2" -lt $((a1 * 6 / 10)) ] || fail "a rank of cp=2 holds $a2 bytes of activations, not 0.6x of $a1"
# the layout it ran, and what it refuses
"$CT" train "${loud[@]}" --steps 2 --eval-interval 0 --nproc 2 --cp 2 --batch-size $GLOBAL_B \
  >"$TMP/mesh.out" 2>&1 || fail "the cp run failed: $(cat "$TMP/mesh.out")"
expect_contains "$(head -1 "$TMP/mesh.out")" "x dp=1 x cp=2 x tp=1"
expect_rc 78 "$CT" train "${M[@]}" --nproc 3 --cp 3 --batch-size $GLOBAL_B
expect_contains "$ERR" "parallel.cp=3 does not divide the heads of each tensor-parallel rank (model.n_head/tp = 2): attention splits them over the sequence's pieces"
expect_rc 78 "$CT" train "${M[@]}" --nproc 2 --cp 2 --block-size 33 --batch-size $GLOBAL_B
expect_contains "$ERR" "parallel.cp=2 does not divide model.block_size=33: each rank holds an equal piece of every sequence"

# reshard: stop at 5 under one layout, resume under the other
run "$TMP/re1" --nproc 2 --dp 2 --zero 1 --batch-size 4 --ckpt-interval 5 --stop-at 5
run "$TMP/re1" --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re1" "dp=2 -> dp=1 resume"
run "$TMP/re3" --nproc 2 --dp 2 --zero 3 --batch-size 4 --ckpt-interval 5 --stop-at 5
run "$TMP/re3" --nproc 2 --dp 2 --zero 1 --batch-size 4 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re3" "ZeRO-3 -> ZeRO-1 resume"
run "$TMP/re4" --nproc 2 --tp 2 --batch-size 8 --ckpt-interval 5 --stop-at 5
run "$TMP/re4" --nproc 4 --dp 4 --zero 1 --batch-size 2 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re4" "tp=2 -> dp=4 resume"
run "$TMP/re5" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size 8 --ckpt-interval 5 --stop-at 5
run "$TMP/re5" --nproc 4 --dp 4 --zero 1 --batch-size 2 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re5" "pp=2 x tp=2 -> dp=4 resume"
# Muon's checkpoints leave out its matrices' second moments (zero): saved under ZeRO-3 (slices)
# and at one stage of two, resumed at dp=1 and under ZeRO-1, as the run that never stopped
run "$TMP/mure1" "${MU[@]}" --nproc 2 --dp 2 --zero 3 --batch-size 4 --ckpt-interval 5 --stop-at 5
run "$TMP/mure1" "${MU[@]}" --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/mu" "$TMP/mure1" "muon ZeRO-3 dp=2 -> dp=1 resume"
run "$TMP/mure2" "${MU[@]}" --nproc 2 --pp 2 --micro-batches 2 --batch-size 8 --ckpt-interval 5 --stop-at 5
run "$TMP/mure2" "${MU[@]}" --nproc 2 --dp 2 --zero 1 --batch-size 4 --ckpt-interval 5 --resume auto
compare "$TMP/mu" "$TMP/mure2" "muon pp=2 -> dp=2 ZeRO-1 resume"
run "$TMP/mure3" "${MU[@]}" --nproc 2 --tp 2 --batch-size 8 --ckpt-interval 5 --stop-at 5
run "$TMP/mure3" "${MU[@]}" --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/mu" "$TMP/mure3" "muon tp=2 -> dp=1 resume"
# the weights' moving average (train.ema_decay), each rank's share of it in host memory: at
# dp=2 the first rank's whole, under ZeRO-3 each rank's pieces, on stages and tensor-parallel
# ranks each its own; exported (--ema) as one process's, and resumed from ZeRO-3's pieces at dp=1
EM=(--ema-decay 0.8)
run "$TMP/em" "${EM[@]}" --batch-size $GLOBAL_B --export-format hf --export-ema true
run "$TMP/em_dp2z0" "${EM[@]}" --nproc 2 --dp 2 --zero 0 --batch-size $((GLOBAL_B / 2))
run "$TMP/em_dp2z1" "${EM[@]}" --nproc 2 --dp 2 --zero 1 --batch-size $((GLOBAL_B / 2))
run "$TMP/em_dp2z3" "${EM[@]}" --nproc 2 --dp 2 --zero 3 --batch-size $((GLOBAL_B / 2))
run "$TMP/em_pp2tp2" "${EM[@]}" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size $GLOBAL_B
run "$TMP/em_cp2" "${EM[@]}" --nproc 2 --cp 2 --batch-size $GLOBAL_B
run "$TMP/em_dp2cp2z1" "${EM[@]}" --nproc 4 --dp 2 --cp 2 --zero 1 --batch-size $((GLOBAL_B / 2))
run "$TMP/emre" "${EM[@]}" --nproc 2 --dp 2 --zero 3 --batch-size 4 --ckpt-interval 5 --stop-at 5
run "$TMP/emre" "${EM[@]}" --batch-size 8 --ckpt-interval 5 --resume auto
for l in dp2z0:"dp=2" dp2z1:"dp=2 ZeRO-1" dp2z3:"dp=2 ZeRO-3" pp2tp2:"pp=2 x tp=2" cp2:"cp=2" \
  dp2cp2z1:"dp=2 x cp=2 ZeRO-1"; do
  EXPORT_ARGS=--ema compare "$TMP/em" "$TMP/em_${l%%:*}" "ema ${l#*:}"
done
EXPORT_ARGS=--ema compare "$TMP/em" "$TMP/emre" "ema ZeRO-3 dp=2 -> dp=1 resume"
# checkpoint.export_ema: the run's own export of its last checkpoint is the average's
cmp "$TMP/em/ckpt/model.safetensors" "$TMP/em/export-10.safetensors" ||
  fail "checkpoint.export_ema: the run's export is not its moving average"
# evaluations also evaluate the average in the weights' place, then train on as without it; the
# last one's is eval --ema's on the same batches
compare "$TMP/single" "$TMP/em" "ema kept vs none"
expect_rc 0 "$CT" eval --checkpoint "$TMP/em/ckpt/step_00000010" --ema --data "$TMP/data/val.bin" \
  --batches 2 --batch-size $GLOBAL_B --json
$PY - "$OUT" "$TMP"/em{,_dp2z0,_dp2z1,_dp2z3,_pp2tp2,_cp2,_dp2cp2z1}/progress.jsonl <<'PYEOF' || fail "the moving average's evaluation"
import json, sys
want = json.loads(sys.argv[1])["loss"]
got = [[r.get("ema_val_loss") for r in map(json.loads, open(f)) if r["event"] == "eval"] for f in sys.argv[2:]]
print("the moving average's val loss at steps 0, 5, 10:", got, "; eval --ema:", want)
assert all(g[0] is None and g[1] is not None and abs(g[2] - want) <= 1e-5 * want for g in got)
PYEOF
$PY - "$TMP/em" <<'PYEOF' || fail "the moving average is the weights"
import json, os, struct, subprocess, sys
import numpy as np
def read(d, *extra):
    out = "%s/x%d.safetensors" % (d, len(extra))
    subprocess.run([os.environ["CT"], "export", "--checkpoint", d + "/ckpt/step_00000010", "--out", out] + list(extra), check=True)
    b = open(out, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32) for k, v in h.items() if k != "__metadata__"}
w, e = read(sys.argv[1]), read(sys.argv[1], "--ema")
apart = max(float(np.abs(w[k] - e[k]).max()) for k in w)
m = json.load(open(sys.argv[1] + "/ckpt/step_00000010/manifest.json"))["ema"]
print("ema: decay %g over %d updates, %.2e from the weights" % (m["decay"], m["updates"], apart))
sys.exit(0 if apart > 1e-3 and m == {"decay": 0.8, "updates": 10} else 1)
PYEOF
expect_rc 1 "$CT" eval --checkpoint "$TMP/single/ckpt/step_00000010" --ema --data "$TMP/data/val.bin"
expect_contains "$ERR" "colo-train eval: --ema: $TMP/single/ckpt/step_00000010 holds no moving average of its weights (its run had no train.ema_decay)"
# sharded checkpoints: a shard per stage and tensor-parallel rank, resumed under other splits
python3 - "$TMP/re5/ckpt/step_00000005/manifest.json" <<'PYEOF' || fail "pp=2 x tp=2 should write 4 shards"
import json, sys
m = json.load(open(sys.argv[1]))
got = sorted((f["name"], f["pp"], f["tp"], f["dp"]) for f in m["files"])
want = [("rank_00000.safetensors", 0, 0, 0), ("rank_00001.safetensors", 0, 1, 0),
        ("rank_00002.safetensors", 1, 0, 0), ("rank_00003.safetensors", 1, 1, 0)]
print("pp=2 x tp=2 checkpoint:", got)
sys.exit(0 if m["version"] == 3 and got == want else 1)
PYEOF
# a shard of stage 1 altered: the ranks of stage 1, which read it, refuse it by name (each rank
# hashes only the shards it reads); --resume auto, which rank 0 checks whole, skips it
mkdir -p "$TMP/bad/ckpt"
cp -r "$TMP/re5/ckpt/step_00000005" "$TMP/bad/ckpt/"
printf 'X' | dd of="$TMP/bad/ckpt/step_00000005/rank_00002.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
PP22=(--nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size 8)
expect_rc 78 "$CT" train "${M[@]}" "${PP22[@]}" --resume "$TMP/bad/ckpt/step_00000005"
expect_contains "$ERR" "checkpoint $TMP/bad/ckpt/step_00000005: rank_00002.safetensors does not match its sha256 in the manifest: altered"
expect_rc 0 "$CT" train "${M[@]}" "${PP22[@]}" --ckpt-dir "$TMP/bad/ckpt" --resume auto
expect_contains "$ERR" "colo-train: skipped unusable checkpoints: checkpoint $TMP/bad/ckpt/step_00000005: rank_00002.safetensors does not match its sha256"
[ -d "$TMP/bad/ckpt/step_00000010" ] || fail "the run that skipped the altered checkpoint did not train from the start"

run "$TMP/re6" --nproc 2 --tp 2 --batch-size 8 --ckpt-interval 5 --stop-at 5
run "$TMP/re6" --nproc 4 --pp 2 --tp 2 --micro-batches 2 --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re6" "tp=2 -> pp=2 x tp=2 resume"
run "$TMP/re7" --nproc 8 --pp 2 --dp 2 --tp 2 --zero 1 --micro-batches 2 --batch-size 4 --ckpt-interval 5 --stop-at 5
run "$TMP/re7" --nproc 2 --pp 2 --micro-batches 2 --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re7" "pp=2 x dp=2 x tp=2 -> pp=2 resume"
# under ZeRO every data-parallel rank writes its own pieces, nothing gathered: a file per rank;
# the first of each place also the parameters whole (ZeRO-1), or each its pieces of them (ZeRO-3);
# the slices of a place's files tile each of its tensors exactly once
run "$TMP/re3b" --nproc 2 --dp 2 --zero 3 --batch-size 4 --ckpt-interval 5 --stop-at 5
$PY - "$TMP/re7/ckpt/step_00000005" "$TMP/re3b/ckpt/step_00000005" <<'PYEOF' || fail "ZeRO checkpoints should hold each rank's pieces"
import json, re, struct, sys
def header(path):
    b = open(path, "rb").read(); h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
    h.pop("__metadata__", None)
    return {k: (v["data_offsets"][1] - v["data_offsets"][0]) // 4 for k, v in h.items()}
for d, zero, places, dp in ((sys.argv[1], 1, 4, 2), (sys.argv[2], 3, 1, 2)):
    m = json.load(open(d + "/manifest.json"))
    assert m["version"] == 3 and m["mesh"]["zero_stage"] == zero, m["mesh"]
    files = m["files"]
    assert len(files) == places * dp, files
    for f in files:
        rank = (f["pp"] * dp + f["dp"]) * m["mesh"]["tp"] + f["tp"]
        assert f["name"] == "rank_%05d.safetensors" % rank, f
    for place in {(f["pp"], f["tp"]) for f in files}:
        hs = [header(d + "/" + f["name"]) for f in sorted(files, key=lambda f: f["dp"]) if (f["pp"], f["tp"]) == place]
        cover = {}  # tensor -> [(start, n)]
        for h in hs:
            for k, n in h.items():
                base, _, start = k.partition("@")
                cover.setdefault(base, []).append((int(start or 0), n))
        params = {k for k in cover if not k.startswith("optimizer.")}
        for k, parts in cover.items():
            parts.sort()
            at = 0
            for start, n in parts:
                assert start == at, (d, place, k, parts)
                at += n
        size = lambda k: sum(n for _, n in cover[k])
        for p in params:  # each moment has its tensor's size, once
            assert size("optimizer.exp_avg." + p) == size(p) == size("optimizer.exp_avg_sq." + p), p
        total = sum(size(p) for p in params)
        mom = [sum(n for k, n in h.items() if k.startswith("optimizer.exp_avg.")) for h in hs]
        par = [sum(n for k, n in h.items() if not k.startswith("optimizer.")) for h in hs]
        if zero == 1:
            assert par == [total] + [0] * (dp - 1), (place, par, total)
        else:
            assert all(0 < x < total for x in par) and sum(par) == total, (place, par, total)
        assert all(0.4 * total < x < 0.6 * total for x in mom) and sum(mom) == total, (place, mom, total)
        print("ZeRO-%d checkpoint, place %s: %d parameters; per data-parallel rank, moments %s, parameters %s"
              % (zero, place, total, mom, par))
PYEOF
# one rank's file of them gone (and out of the manifest): refused, naming what is missing
mkdir -p "$TMP/miss/ckpt"
cp -r "$TMP/re3b/ckpt/step_00000005" "$TMP/miss/ckpt/"
$PY - "$TMP/miss/ckpt/step_00000005" <<'PYEOF'
import json, os, sys
m = json.load(open(sys.argv[1] + "/manifest.json"))
m["files"] = [f for f in m["files"] if f["dp"] == 0]
json.dump(m, open(sys.argv[1] + "/manifest.json", "w"))
os.unlink(sys.argv[1] + "/rank_00001.safetensors")
PYEOF
expect_rc 78 "$CT" train "${M[@]}" --batch-size 8 --resume "$TMP/miss/ckpt/step_00000005"
grep -qE "rank_00000.safetensors: (tensor \S+ is missing|the slices of tensor \S+ hold [0-9]+ of its [0-9]+ elements)" <<<"$ERR" ||
  fail "a ZeRO checkpoint without one rank's pieces should be refused naming a tensor: $ERR"
echo "figure: a ZeRO-3 checkpoint without rank 1's file: $(grep -o 'rank_00000.safetensors: .*' <<<"$ERR" | head -1)"
run "$TMP/re3b" --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re3b" "dp=2 ZeRO-3 pieces -> dp=1 resume"
# a checkpoint of the first format (version 1: one file of whole tensors, no mesh places) resumes
run "$TMP/re8" --batch-size 8 --ckpt-interval 5 --stop-at 5
python3 - "$TMP/re8/ckpt/step_00000005/manifest.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["version"] = 1
for f in m["files"]:
    f.pop("pp", None)
    f.pop("tp", None)
json.dump(m, open(sys.argv[1], "w"))
PYEOF
run "$TMP/re8" --nproc 2 --tp 2 --batch-size 8 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re8" "version-1 checkpoint -> tp=2 resume"

run "$TMP/re2" --batch-size 8 --ckpt-interval 5 --stop-at 5
run "$TMP/re2" --nproc 2 --dp 2 --zero 1 --batch-size 4 --ckpt-interval 5 --resume auto
compare "$TMP/single" "$TMP/re2" "dp=1 -> dp=2 resume"

# memory: the pool peak of rank 0 at ZeRO-0 and ZeRO-1 for the same run
read -r m0 m1 np <<<"$($PY -c '
import json, sys
peak = lambda d: max(r.get("memory_bytes", 0) for r in map(json.loads, open(d + "/progress.jsonl")))
print(peak(sys.argv[1]), peak(sys.argv[2]), 0)' "$TMP/dp2z0" "$TMP/dp2z1")"
nparams=$($PY -c '
import json, struct, sys
b = open(sys.argv[1], "rb").read(); h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
print(sum((v["data_offsets"][1] - v["data_offsets"][0]) // 4 for k, v in h.items() if k != "__metadata__" and not k.startswith("optimizer.")))' "$TMP/single/ckpt/step_00000010/rank_00000.safetensors")
saved=$((m0 - m1))
echo "peak memory of rank 0 at dp=2: ZeRO-0 $m0 bytes, ZeRO-1 $m1 bytes: saved $saved bytes;" \
  "half of the fp32 moments is 4 x $nparams = $((4 * nparams)) (the difference is chunk padding)"
# half the moments, less the padding of the chunks (which the shards carry), within 1%
[ "$saved" -le $((4 * nparams)) ] && [ "$saved" -ge $((4 * nparams * 99 / 100)) ] ||
  fail "ZeRO-1 should save half of the fp32 moments: saved $saved, expected about $((4 * nparams))"

# sequence parallelism keeps the activations not split by tensor parallelism by rows: each block's
# two LayerNorm outputs and statistics and its residual, and the stage's residual stream, at half
# their size on each of tp=2 ranks, for one full-size buffer the LayerNorm outputs are gathered in
read -r a_tp a_sp <<<"$($PY -c '
import json, sys
act = lambda d: [r for r in map(json.loads, open(d + "/progress.jsonl")) if r["event"] == "step"][-1]["activation_bytes"]
print(act(sys.argv[1]), act(sys.argv[2]))' "$TMP/tp2" "$TMP/tp2sp")"
NC4=$((GLOBAL_B * 32 * 64 * 4)) # N x C fp32 bytes (block 32, width 64), N = B x T
want=$((2 * (3 * NC4 / 2 + 2 * GLOBAL_B * 32 * 4) + 3 * NC4 / 2 - NC4))
echo "activations of rank 0 at tp=2: $a_tp bytes; with sequence parallelism $a_sp bytes: saved" \
  "$((a_tp - a_sp)), the row buffers' halves less the gather buffer are $want"
expect_eq "$((a_tp - a_sp))" "$want"

# fault: kill -9 rank 1 of 3 after a few steps
mkdir -p "$TMP/fault"
"$CT" train "${M[@]}" --steps 100000 --eval-interval 0 --nproc 3 --dp 3 --batch-size 2 \
  --comm-timeout 5000 --progress "$TMP/fault/progress.jsonl" 2>"$TMP/fault/err" &
LAUNCHER=$!
for _ in $(seq 1 300); do
  n=$(grep -c '"step"' "$TMP/fault/progress.jsonl" 2>/dev/null || true)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.1
done
victim=$(pgrep -P $LAUNCHER -x colo-rank1 || true)
[ -n "$victim" ] || fail "could not find rank 1 (colo-rank1)"
t0=$(date +%s%N)
kill -KILL "$victim"
rc=0
wait $LAUNCHER || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
expect_eq "$rc" "1"
errs=$(cat "$TMP/fault/err")
expect_contains "$errs" "colo-train train: rank 1 was killed by signal 9; the run stopped"
for r in 0 2; do
  line=$(grep "^colo-train train: rank $r: " "$TMP/fault/err" || true)
  [ -n "$line" ] || fail "rank $r left no message: $errs"
  case "$line" in
  *"rank 1 closed its connection"*) ;;
  *) fail "rank $r does not name rank 1: $line" ;;
  esac
done
[ "$ms" -lt 5000 ] || fail "the ranks took $ms ms to stop, more than the 5 s timeout"
echo "fault: rank 1 killed; ranks 0 and 2 stopped, naming it, within $ms ms"
echo "integration_parallel: all checks passed"
