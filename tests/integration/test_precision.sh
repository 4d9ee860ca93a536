#!/usr/bin/env bash
# Reduced-precision storage on the CPU backend (bf16 and fp16 activations, emulated: computed in
# fp32 and rounded when stored, as the GPU's kernels do):
#   - 200 steps of a small model on tinyshakespeare in fp32, bf16 and fp16 (fp16 with dynamic
#     loss scaling, on by default): the validation losses within 1% of fp32, and not all equal;
#   - bf16: stop at 100 and resume equals the straight run, bit for bit;
#   - bf16 under ZeRO-3 data parallelism, tensor parallelism with sequence parallelism, and a
#     two-stage pipeline: 30 steps end within 1e-3 of one process in bf16; the pipeline with one
#     micro-batch ends with the same model, bit for bit;
#   - the refusal of TF32 on the CPU.
source "$(dirname "$0")/lib.sh"
CT="$COLO_BIN/colo-train"
export OMP_NUM_THREADS=2

training_text
expect_rc 0 "$CT" prepare --input "$TEXT" --out "$TMP/data"
M=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 2 --n-head 4
  --n-embd 64 --block-size 32 --batch-size 8 --eval-batches 8 --lr 1e-3 --warmup 20 --threads 2
  --steps 200 --eval-interval 200)

expect_rc 78 "$CT" train "${M[@]}" --tf32 true
expect_eq "$ERR" "colo-train train: train.tf32 needs resources.device=gpu: TF32 is a GPU's tensor-core mode"

for p in fp32 bf16 fp16; do
  expect_rc 0 "$CT" train "${M[@]}" --precision "$p" --ckpt-dir "$TMP/$p" --progress "$TMP/$p.jsonl"
done
expect_contains "$OUT" "2 threads, fp16 activations (emulated)"
python3 - "$TMP" <<'PY' || fail "reduced-precision training differs from fp32"
import json, sys
def run(p):
    return list(map(json.loads, open("%s/%s.jsonl" % (sys.argv[1], p))))
val = {p: [r for r in run(p) if r["event"] == "eval"][-1]["val_loss"] for p in ("fp32", "bf16", "fp16")}
scales = {r["loss_scale"] for r in run("fp16") if r["event"] == "step"}
for p in ("bf16", "fp16"):
    rel = abs(val[p] - val["fp32"]) / val["fp32"]
    print("%s activations: val loss %.6f against fp32 %.6f (%.2e relative)" % (p, val[p], val["fp32"], rel))
    assert rel <= 0.01
assert len(set(val.values())) > 1, "no rounding happened"
print("fp16 loss scales seen: %s" % sorted(scales))
assert scales and min(scales) >= 1
PY
grep -q '"loss_scale"' "$TMP/bf16.jsonl" && fail "bf16 should not scale the loss"

# bf16: stop at 100, resume, and the same weights as the straight run
expect_rc 0 "$CT" train "${M[@]}" --precision bf16 --ckpt-dir "$TMP/r" --stop-at 100 --quiet
expect_rc 0 "$CT" train "${M[@]}" --precision bf16 --ckpt-dir "$TMP/r" --resume auto --quiet
cmp "$TMP/bf16/step_00000200/rank_00000.safetensors" "$TMP/r/step_00000200/rank_00000.safetensors" ||
  fail "bf16: stop at 100 and resume differs from the straight run"
# bf16 in the parallel layouts, against one process (the same global batch of 8)
P=("${M[@]}" --precision bf16 --steps 30 --eval-interval 30 --quiet)
expect_rc 0 "$CT" train "${P[@]}" --progress "$TMP/one.jsonl"
expect_rc 0 "$CT" train "${P[@]}" --nproc 2 --dp 2 --zero 3 --batch-size 4 --progress "$TMP/dp.jsonl"
expect_rc 0 "$CT" train "${P[@]}" --nproc 2 --tp 2 --sp true --progress "$TMP/tp.jsonl"
expect_rc 0 "$CT" train "${P[@]}" --nproc 2 --pp 2 --micro-batches 2 --progress "$TMP/pp.jsonl"
python3 - "$TMP" <<'PY' || fail "bf16 in a parallel layout differs from one process"
import json, sys
val = lambda n: [r for r in map(json.loads, open("%s/%s.jsonl" % (sys.argv[1], n))) if r["event"] == "eval"][-1]["val_loss"]
one = val("one")
for n, what in (("dp", "dp=2, ZeRO-3"), ("tp", "tp=2 with sequence parallelism"), ("pp", "pp=2, 2 micro-batches")):
    rel = abs(val(n) - one) / one
    print("bf16, %s: val loss %.6f against one process %.6f (%.2e)" % (what, val(n), one, rel))
    assert rel <= 1e-3
PY
# a two-stage pipeline with one micro-batch computes what one process does: its last stage takes
# the loss's gradient with the loss (crossentropy_fused), as one process does, so in bf16 too the
# gradients are the same bit for bit, and without clipping (whose norm the stages sum in another
# order) and a tied embedding (whose two gradients they add in another order) so is the model
U=("${P[@]}" --arch llama --tie-embeddings false --grad-clip 0)
expect_rc 0 "$CT" train "${U[@]}" --ckpt-dir "$TMP/one1"
expect_rc 0 "$CT" train "${U[@]}" --nproc 2 --pp 2 --micro-batches 1 --ckpt-dir "$TMP/pp1"
expect_rc 0 "$CT" export --checkpoint "$TMP/one1/step_00000030" --out "$TMP/one1.safetensors"
expect_rc 0 "$CT" export --checkpoint "$TMP/pp1/step_00000030" --out "$TMP/pp1.safetensors"
cmp "$TMP/one1.safetensors" "$TMP/pp1.safetensors" ||
  fail "bf16: pp=2 with one micro-batch ends with another model than one process"
echo "integration_precision: bf16 and fp16 activations train within 1% of fp32; bf16 resumes exactly and runs in every parallel layout"
