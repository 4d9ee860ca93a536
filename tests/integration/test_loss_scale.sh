#!/usr/bin/env bash
# Dynamic loss scaling (fp16's scheme) on the CPU engine:
#   - without an overflow a scaled run is bit-identical to an unscaled one (the scales are
#     powers of two, so scaling and unscaling are exact);
#   - an overflow planted on the last rank only is seen by every rank: under data parallelism
#     (ZeRO 2), tensor parallelism and a pipeline, rank 0 skips exactly the planted steps and the
#     run matches its layout's single-process counterpart;
#   - a checkpoint carries the scale and its window: stop and resume equals the straight run;
#   - bad values and an overflow at the smallest scale end with exact messages.
# The same scheme against PyTorch is in tests/engine/test_torch_reference.py.
source "$(dirname "$0")/lib.sh"
CT="$COLO_BIN/colo-train"
export OMP_NUM_THREADS=1

python3 -c 'import random; random.seed(7); w=["the","king","and","queen","of","night","shall","speak","to","my","lord","good"]; print("\n".join(" ".join(random.choice(w) for _ in range(12)) for _ in range(4000)))' >"$TMP/text.txt"
expect_rc 0 "$CT" prepare --input "$TMP/text.txt" --out "$TMP/data"
M=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --eval-interval 0 --n-layer 2
  --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --steps 12 --warmup 2 --lr 3e-3
  --threads 1 --quiet)
LS=(--loss-scaling dynamic --loss-scale-window 3)

# 1. no overflow: bit-identical weights
expect_rc 0 "$CT" train "${M[@]}" --ckpt-dir "$TMP/none"
expect_rc 0 "$CT" train "${M[@]}" "${LS[@]}" --ckpt-dir "$TMP/dyn" --progress "$TMP/dyn.jsonl"
cmp "$TMP/none/step_00000012/rank_00000.safetensors" "$TMP/dyn/step_00000012/rank_00000.safetensors" ||
  fail "a scaled run without overflow differs from the unscaled run"
# 65536 doubled after every 3 clean steps: 4 doublings in 12 steps
expect_eq "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["loss_scale"])' \
  "$TMP/dyn/step_00000012/manifest.json")" 1048576

# 2. planted on the last rank, seen by all: the steps rank 0 skipped, and the last loss
steps_skipped() {
  python3 - "$1" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"]
print(",".join(str(r["step"]) for r in recs if r["skipped"]), "%.6f" % recs[-1]["loss"])
PY
}
PL=(--plant-overflow 2,3,9)
expect_rc 0 "$CT" train "${M[@]}" "${LS[@]}" "${PL[@]}" --progress "$TMP/p1.jsonl"
read -r skip1 loss1 < <(steps_skipped "$TMP/p1.jsonl")
expect_eq "$skip1" "2,3,9" "(skipped steps, one process)"
n=0
dpref=""
for layout in "--dp 2 --zero 0" "--dp 2 --zero 2" "--tp 2" "--pp 2 --micro-batches 2"; do
  n=$((n + 1)) # progress files are appended to: one per run
  # shellcheck disable=SC2086
  expect_rc 0 "$CT" train "${M[@]}" "${LS[@]}" "${PL[@]}" $layout --nproc 2 --progress "$TMP/p2.$n.jsonl"
  read -r skip2 loss2 < <(steps_skipped "$TMP/p2.$n.jsonl")
  expect_eq "$skip2" "2,3,9" "(skipped steps seen by rank 0 with $layout, planted on rank 1)"
  # data parallelism doubles the batch: its runs compare with the first (ZeRO 0); tp and pp
  # split the same batch, so they compare with one process, up to summation order
  ref=$loss1
  case "$layout" in --dp*) ref=${dpref:-$loss2} dpref=$ref ;; esac
  python3 - "$ref" "$loss2" "$layout" <<'PY' || fail "planted run with $layout differs from its reference"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
assert abs(a - b) <= 1e-5 * abs(a), (a, b)
print("%s: skipped 2,3,9 on rank 0; last loss %.6f (reference %.6f)" % (sys.argv[3], b, a))
PY
done

# 3. resume carries the scale: 5 + 7 steps equal 12. At step 5: 65536 halved at 2 and 3, two
# clean steps since, and 3 AdamW updates (steps 1, 4, 5)
expect_rc 0 "$CT" train "${M[@]}" "${LS[@]}" "${PL[@]}" --ckpt-dir "$TMP/s" --progress "$TMP/s.jsonl"
expect_rc 0 "$CT" train "${M[@]}" "${LS[@]}" "${PL[@]}" --ckpt-dir "$TMP/r" --stop-at 5 --progress "$TMP/r1.jsonl"
python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); assert (m["loss_scale"], m["loss_scale_good_steps"], m["optimizer"]["t"]) == (16384, 2, 3), m' \
  "$TMP/r/step_00000005/manifest.json" || fail "the manifest at step 5 has the wrong scale"
expect_rc 0 "$CT" train "${M[@]}" "${LS[@]}" "${PL[@]}" --ckpt-dir "$TMP/r" --resume auto --progress "$TMP/r2.jsonl"
cmp "$TMP/s/step_00000012/rank_00000.safetensors" "$TMP/r/step_00000012/rank_00000.safetensors" ||
  fail "stop at 5 and resume differs from the straight run"

# 4. bad input and overflows that cannot be scaled away
expect_rc 78 "$CT" train "${M[@]}" --loss-scale-init 0.5
expect_eq "$ERR" "colo-train train: train.loss_scale_init=0.5 must be in [1, 16777216]"
expect_rc 78 "$CT" train "${M[@]}" --loss-scale-window 0
expect_eq "$ERR" "colo-train train: train.loss_scale_window=0 must be at least 1"
expect_rc 2 "$CT" train "${M[@]}" --plant-overflow 3,x
expect_contains "$ERR" "--plant-overflow wants up to 64 step numbers, like 3,7"
expect_rc 2 "$CT" train "${M[@]}" --loss-scaling sometimes
expect_contains "$ERR" "sometimes"
expect_rc 1 "$CT" train "${M[@]}" "${LS[@]}" --loss-scale-init 2 --plant-overflow 2,3
expect_eq "$ERR" "colo-train train: the gradients overflowed at step 3 at the smallest loss scale (1): they are not finite at any scale"
expect_rc 1 "$CT" train "${M[@]}" --plant-overflow 4
expect_contains "$ERR" "colo-train train: the gradient norm became"
expect_contains "$ERR" "at step 4"
echo "integration_loss_scale: bit-identical without overflow; skips 2,3,9 planted on rank 1 seen by rank 0 under dp+ZeRO-2, tp and pp (one process: last loss $loss1); exact resume; errors"
