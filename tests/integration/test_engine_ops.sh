#!/usr/bin/env bash
# bench/engine_gpu's operation benchmark, on the CPU and on the emulated GPU at small shapes: every
# operation of the step is timed, a step's counts are GPT-2's (148 tensors in 98 AdamW calls at
# 12 layers), bad arguments are refused, and PyTorch's side (ops_torch.py) names the same
# operations, which run.sh pairs by name.
set -euo pipefail
BIN=${COLO_BIN:?COLO_BIN names the folder of the programs}
SRC=${COLO_SRC:?COLO_SRC names the checkout}
TMP=$(mktemp -d /tmp/colo-ops-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
SHAPE=(--n-layer 12 --n-head 2 --n-embd 32 --block-size 32 --batch-size 2 --vocab-size 96 --iters 2)
"$BIN/engine_ops" --device cpu "${SHAPE[@]}" >"$TMP/cpu.jsonl"
COLO_CUDA_EMULATE=1 "$BIN/engine_ops" --device gpu "${SHAPE[@]}" >"$TMP/emu.jsonl"
python3 - "$TMP/cpu.jsonl" "$TMP/emu.jsonl" <<'PY'
import json, sys
for path in sys.argv[1:]:
    recs = [json.loads(l) for l in open(path)]
    head, ops = recs[0], [r for r in recs[1:] if r["op"] != "sum of the parts"]
    total = recs[-1]
    assert total["op"] == "sum of the parts", total
    assert len(ops) == 23, (path, len(ops))
    # GELU's recomputation is timed but not in the step (its output is kept unless recomputing)
    assert all(r["ms"] > 0 and r["per_step"] >= (r["op"] != "gelu_fwd (recomputation only)") for r in ops), ops
    assert any(r["op"] == "adamw (148 tensors in 98 calls)" for r in ops), [r["op"] for r in ops]
    per = {r["op"]: r["per_step"] for r in ops}
    assert per["layernorm_fwd"] == 25 and per["attention_bwd"] == 12 and per["lmhead_fwd"] == 1, per
    assert per["gelu_fwd (recomputation only)"] == 0, per
    s = sum(r["per_step"] * r["ms"] for r in ops)
    assert abs(s - total["ms"]) <= 1e-3 * s + 1e-3, (s, total)
    print("%s (%s): %d operations, a step's sum %.2f ms" % (path.split("/")[-1], head["backend"], len(ops), total["ms"]))
PY
rc=0
"$BIN/engine_ops" --iters 0 2>"$TMP/err" || rc=$?
[ "$rc" = 2 ] && grep -q "engine_ops: --iters needs a positive integer, not '0'" "$TMP/err" || fail "--iters 0: rc $rc, $(cat "$TMP/err")"
rc=0
"$BIN/engine_ops" --n-embd 30 --n-head 4 2>"$TMP/err" || rc=$?
[ "$rc" = 2 ] && grep -q "engine_ops: --n-embd 30 is not a multiple of --n-head 4" "$TMP/err" || fail "--n-embd 30: rc $rc"
PY=/usr/bin/python3
if "$PY" -c "import torch" 2>/dev/null; then
  "$PY" "$SRC/bench/engine_gpu/ops_torch.py" --device cpu "${SHAPE[@]}" >"$TMP/torch.jsonl"
  python3 - "$TMP/cpu.jsonl" "$TMP/torch.jsonl" <<'PY'
import json, sys
key = lambda o: "adamw" if o.startswith("adamw") else o
ours = {key(json.loads(l)["op"]) for l in open(sys.argv[1]) if '"op"' in l} - {"sum of the parts"}
theirs = {key(json.loads(l)["op"]) for l in open(sys.argv[2]) if '"op"' in l}
assert ours == theirs, ("named by one side only", ours ^ theirs)
print("ops_torch.py names the same %d operations" % len(theirs))
PY
else
  echo "no PyTorch for $PY: ops_torch.py not checked"
fi
echo "PASS engine_ops"
