#!/usr/bin/env bash
# bench/engine_gpu: colo-train on one GPU. Needs a GPU; run it where one is at hand:
#   bash bench/engine_gpu/run.sh [STEPS]
# Writes bench/results/engine_gpu.md (with the GPU named) and engine_gpu_tests.log:
#   1. the CUDA test suite (test_cuda: every operation against the CPU one, the whole model);
#   2. GPT-2 124M (12L/12H/768, T=1024, vocab padded to 50304) training steps in bf16: tokens/s
#      and MFU (6N + 6·L·C·T FLOPs per token against 989 TFLOP/s), and PyTorch on the same GPU,
#      same model (torch_train_gpu.py), bf16 autocast, side by side in this run, as a ratio;
#      at B=8, 32 and 64; colo's own attention (COLO_CUDA_ATTENTION=flash-async), cuDNN's
#      backward that adds dQ with atomics (COLO_CUDA_ATTENTION=cudnn) and the MLP's GELU as a
#      pass of its own (COLO_CUDA_GELU_FUSION=0) beside the defaults (cuDNN's attention forward
#      and its deterministic backward, GELU in cuBLASLt's epilogues); the bf16 step's GPU time per
#      operation (COLO_CUDA_PROFILE=1); and each operation alone at the same shapes, colo's
#      (engine_ops, ops.c) and PyTorch's kernels for it (ops_torch.py), side by side;
#   3. correctness: 1,000 steps on tinyshakespeare on the GPU (bf16, its default) and on the CPU
#      (fp32), validation losses;
#   4. a 350M model (24L/16H/1024, T=1024) in bf16 with recomputation: peak pool memory next to
#      16Φ + activations;
#   5. the 124M step with attention as batched products and without cuBLASLt's bias epilogues,
#      and in fp32 with TF32 and with fp32 products (PyTorch TF32 beside them);
#   6. the 350M model under ZeRO-3 with everything on the GPU, with static placement (half the
#      parameters and all optimizer state in host memory) and with automatic placement under
#      60% of the first's peak (75% in the dry run): peak GPU memory, host memory and tokens/s.
# COLO_BENCH_BUDGET_S caps the whole run (later runs are reported as skipped) and
# COLO_BENCH_RUN_LIMIT_S each run (240 s).
# Token data for 2, 4 and 5 is random over GPT-2's 50257 tokens: throughput does not depend on it.
# COLO_BENCH_DRY=1 runs the whole script on the CPU with small shapes and writes its report into
# the temporary folder: a check of the script itself where there is no GPU.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${1:-30}
source "$SRC/bench/lib.sh"
bench_setup colo-train test_cuda engine_ops
# a Python with numpy and PyTorch: the GPU machine's python3 (whose PyTorch has CUDA), else
# Debian's /usr/bin/python3
PY=python3
"$PY" -c "import numpy, torch" 2>/dev/null || PY=/usr/bin/python3
RES="$SRC/bench/results"
if [ "${COLO_BENCH_DRY:-0}" = 1 ]; then
  DEV=cpu M124=(2 2 64 64 2) M350=(2 4 64 64 2) TS_STEPS=30 TF32=() SELF=(--self) B32=4 B64=8
  RES="$TMP/results"
  mkdir -p "$RES"
else
  DEV=gpu M124=(12 12 768 1024 8) M350=(24 16 1024 1024 8) TS_STEPS=1000 TF32=(--tf32 true) SELF=() B32=32 B64=64
fi
GPU=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
[ -n "$GPU" ] || GPU="unknown GPU (nvidia-smi did not answer)"
export ASAN_OPTIONS=protect_shadow_gap=0
# what the programs were built from: the pack's record (device.sh), else this checkout; "-dirty"
# where the working tree differed from the commit
COMMIT=${COLO_BENCH_COMMIT:-$(git -C "$SRC" describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)}

echo "== 1. CUDA tests on $GPU"
{
  echo "# test_cuda on $GPU, $(date -u +%Y-%m-%dT%H:%MZ), commit $COMMIT"
  "$BIN/test_cuda" "${SELF[@]}"
} 2>&1 | tee "$RES/engine_gpu_tests.log" || # under pipefail: a failure is reported, and the runs go on
  echo "test_cuda failed: see $RES/engine_gpu_tests.log"

bench_random_tokens "$PY" "$TMP/gpt2"

# colo: median step over the steps after a warm-up of 5; the model line and peak memory
# A time budget for the whole run (COLO_BENCH_BUDGET_S seconds; device.sh sets one under the
# GPU machine's per-command limit) and a limit for each run: what does not fit is reported as
# skipped, and the report is written whatever happened. The runs go in order of importance.
BUDGET=${COLO_BENCH_BUDGET_S:-0}
RUN_LIMIT=${COLO_BENCH_RUN_LIMIT_S:-240}
# COLO_BENCH_QUICK=1: the CUDA tests and section 2 alone (124M, colo and PyTorch, compiled only:
# the faster), into engine_gpu_quick.md; the rest is reported as not asked for
QUICK=${COLO_BENCH_QUICK:-0} REPORT=engine_gpu.md SKIP_WHY="skipped: over the time budget"
[ "$QUICK" = 1 ] && REPORT=engine_gpu_quick.md
over_budget() {
  [ "$QUICK" = 1 ] && [ "$SECTION" -gt 2 ] && SKIP_WHY="not run (COLO_BENCH_QUICK=1)" && return 0
  [ "$BUDGET" -gt 0 ] && [ "$SECONDS" -ge "$BUDGET" ]
}
SECTION=1
colo_run() { # name L H C T B extra...
  local name=$1 L=$2 H=$3 C=$4 T=$5 B=$6
  shift 6
  if over_budget; then
    echo "{\"event\":\"error\",\"name\":\"$name\",\"why\":\"$SKIP_WHY\"}" >>"$TMP/$name.jsonl"
    return
  fi
  timeout "$RUN_LIMIT" "$CT" train --data-root "$TMP/gpt2" --train-data train.bin --eval-interval 0 \
    --n-layer "$L" --n-head "$H" --n-embd "$C" --block-size "$T" --vocab-size 50304 \
    --batch-size "$B" --steps "$STEPS" --lr 1e-4 --device "$DEV" --quiet \
    --progress "$TMP/$name.jsonl" "$@" ||
    echo "{\"event\":\"error\",\"name\":\"$name\"}" >>"$TMP/$name.jsonl"
}
torch_run() { # name dtype extra... (--compile, --batch-size N)
  local name=$1 dt=$2
  shift 2
  if over_budget; then
    echo "{\"impl\":\"pytorch\",\"error\":\"$SKIP_WHY\"}" >"$TMP/torch-$name.json"
    return
  fi
  if [ "$QUICK" = 1 ] && [[ " $* " != *" --compile "* ]]; then # the ratios take the fastest
    echo '{"impl":"pytorch","error":"not run (COLO_BENCH_QUICK=1: compiled only)"}' >"$TMP/torch-$name.json"
    return
  fi
  timeout "$RUN_LIMIT" "$PY" "$SRC/bench/engine_gpu/torch_train_gpu.py" --n-layer "${M124[0]}" \
    --n-head "${M124[1]}" --n-embd "${M124[2]}" --block-size "${M124[3]}" \
    --batch-size "${M124[4]}" --vocab-size 50304 --steps "$STEPS" --warmup-steps 5 \
    --data "$TMP/gpt2/train.bin" --dtype "$dt" "$@" >"$TMP/torch-$name.json" 2>"$TMP/torch-$name.err" ||
    echo "{\"impl\":\"pytorch\",\"error\":\"$(tail -1 "$TMP/torch-$name.err" | tr -d '"')\"}" >"$TMP/torch-$name.json"
}
SECTION=2
echo "== 2. GPT-2 124M in bf16, colo and PyTorch"
colo_run c124bf16 "${M124[@]}" --precision bf16
torch_run bf16 bf16
torch_run bf16c bf16 --compile
# and at a batch of 32 sequences (B4 in the dry run), both sides
colo_run c124b32 "${M124[@]:0:4}" "$B32" --precision bf16
torch_run bf16b32 bf16 --batch-size "$B32"
torch_run bf16cb32 bf16 --batch-size "$B32" --compile
# and at 64 (llm.c's batch for GPT-2 124M on one GPU), compiled PyTorch beside it
colo_run c124b64 "${M124[@]:0:4}" "$B64" --precision bf16
torch_run bf16cb64 bf16 --batch-size "$B64" --compile
# the alternatives to the defaults, both batches: colo's own attention kernels, forward and
# backward; cuDNN's backward adding dQ with atomics; the MLP's GELU as a pass of its own
COLO_CUDA_ATTENTION=flash-async colo_run c124bf16a "${M124[@]}" --precision bf16
COLO_CUDA_ATTENTION=flash-async colo_run c124b32a "${M124[@]:0:4}" "$B32" --precision bf16
COLO_CUDA_ATTENTION=cudnn colo_run c124bf16d "${M124[@]}" --precision bf16
COLO_CUDA_ATTENTION=cudnn colo_run c124b32d "${M124[@]:0:4}" "$B32" --precision bf16
COLO_CUDA_GELU_FUSION=0 colo_run c124bf16f "${M124[@]}" --precision bf16
COLO_CUDA_GELU_FUSION=0 colo_run c124b32f "${M124[@]:0:4}" "$B32" --precision bf16
# where the bf16 step's time goes: GPU time per operation (a run of its own: the events cost a
# little)
COLO_CUDA_PROFILE=1 colo_run c124prof "${M124[@]}" --precision bf16 2>"$TMP/profile.txt"
cat "$TMP/profile.txt"
# each operation of the step alone at the 124M shapes (ops.c), with the defaults and with the
# alternatives above, and PyTorch's kernels for the same (ops_torch.py)
OPS_SHAPE=(--n-layer "${M124[0]}" --n-head "${M124[1]}" --n-embd "${M124[2]}" --block-size "${M124[3]}"
  --batch-size "${M124[4]}" --vocab-size 50304)
if over_budget; then
  echo "{\"error\":\"$SKIP_WHY\"}" >"$TMP/ops.jsonl"
else
  timeout "$RUN_LIMIT" "$BIN/engine_ops" --device "$DEV" "${OPS_SHAPE[@]}" >"$TMP/ops.jsonl" ||
    echo '{"error":"engine_ops failed: see the output"}' >>"$TMP/ops.jsonl"
  COLO_CUDA_ATTENTION=flash-async COLO_CUDA_GELU_FUSION=0 timeout "$RUN_LIMIT" "$BIN/engine_ops" \
    --device "$DEV" "${OPS_SHAPE[@]}" >"$TMP/ops_cand.jsonl" ||
    echo '{"error":"engine_ops failed: see the output"}' >>"$TMP/ops_cand.jsonl"
  COLO_CUDA_ATTENTION=cudnn timeout "$RUN_LIMIT" "$BIN/engine_ops" --device "$DEV" "${OPS_SHAPE[@]}" \
    >"$TMP/ops_cudnn.jsonl" || echo '{"error":"engine_ops (cuDNN attention) failed: see the output"}' >>"$TMP/ops_cudnn.jsonl"
  timeout "$RUN_LIMIT" "$PY" "$SRC/bench/engine_gpu/ops_torch.py" --device "$([ "$DEV" = gpu ] && echo cuda || echo cpu)" \
    "${OPS_SHAPE[@]}" >"$TMP/ops_torch.jsonl" 2>"$TMP/ops_torch.err" ||
    echo "{\"error\":\"$(tail -1 "$TMP/ops_torch.err" | tr -d '"')\"}" >>"$TMP/ops_torch.jsonl"
fi

SECTION=3
echo "== 3. $TS_STEPS steps on tinyshakespeare, GPU and CPU"
bench_data
for side in run ref; do # the GPU in bf16, its default; the CPU engine in fp32
  if [ "$side" = run ]; then dev=$DEV p=bf16; else dev=cpu p=fp32; fi
  if over_budget; then
    echo "{\"event\":\"error\",\"why\":\"$SKIP_WHY\"}" >>"$TMP/ts-$side.jsonl"
    continue
  fi
  timeout "$RUN_LIMIT" "$CT" train --data-root "$TMP/data" --train-data train.bin --val-data val.bin \
    --n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --steps "$TS_STEPS" \
    --lr 1e-3 --warmup $((TS_STEPS / 10)) --eval-interval "$TS_STEPS" --eval-batches 20 \
    --device "$dev" --precision "$p" --quiet --progress "$TMP/ts-$side.jsonl" ||
    echo '{"event":"error"}' >>"$TMP/ts-$side.jsonl"
done

echo "== 4. 350M with recomputation"
colo_run c350 "${M350[@]}" --precision bf16 --recompute

echo "== 5. the alternatives"
# the fused attention (the default) against batched products over L2-sized groups of heads
COLO_CUDA_ATTENTION=gemm colo_run c124bf16g "${M124[@]}" --precision bf16
# and without cuBLASLt's bias epilogues (a pass of their own over each product's output)
COLO_CUDA_EPILOGUES=0 colo_run c124bf16e "${M124[@]}" --precision bf16
colo_run c124 "${M124[@]}" --precision fp32 "${TF32[@]}"
torch_run tf32 tf32
colo_run c124fp32 "${M124[@]}" --precision fp32

echo "== 6. 350M under ZeRO-3 with Gemini-style placement"
# everything on the GPU; static (half the parameter pieces and all optimizer state in host
# memory, updated by the CPU's AdamW); auto under 60% of the first run's peak. The dry run puts
# them on the emulated GPU, whose small model has two chunks, the embedding's most of it: its
# gathered copy leaves less to move, so auto gets 75% there.
PL=(--device gpu --precision bf16 --recompute --zero 3)
PCT=60
[ "${COLO_BENCH_DRY:-0}" = 1 ] && export COLO_CUDA_EMULATE=1 && PCT=75
colo_run c350z3 "${M350[@]}" "${PL[@]}"
colo_run c350st "${M350[@]}" "${PL[@]}" --placement static --param-device-fraction 0.5 \
  --optim-device-fraction 0
LIM=$(python3 -c 'import json,sys
s=[r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step"]
print(max(1, int(max(r["memory_bytes"] for r in s) * int(sys.argv[2]) / 100) >> 20) if s else "")' \
  "$TMP/c350z3.jsonl" "$PCT" 2>/dev/null || true)
if over_budget; then
  echo "{\"event\":\"error\",\"why\":\"$SKIP_WHY\"}" >>"$TMP/c350au.jsonl"
elif [ -n "$LIM" ]; then
  colo_run c350au "${M350[@]}" "${PL[@]}" --placement auto --memory-limit "$LIM"
else
  echo '{"event":"error","why":"skipped: the all-GPU run gave no peak to take a share of"}' >>"$TMP/c350au.jsonl"
fi
unset COLO_CUDA_EMULATE

python3 - "$TMP" "$GPU" "$STEPS" "$RES/$REPORT" "$COMMIT" \
  "${M124[*]}" "${M350[*]}" "$TS_STEPS" "${COLO_BENCH_DRY:-0}" "${PCT:-60}" "$B32" "$B64" <<'PY'
import json, sys, datetime
tmp, gpu, steps, out, commit = sys.argv[1:6]
m124, m350 = [list(map(int, a.split())) for a in sys.argv[6:8]]
ts_steps, dry, pct, b32n = int(sys.argv[8]), sys.argv[9] == "1", sys.argv[10], int(sys.argv[11])
b64n = int(sys.argv[12])
def recs(name):
    try:
        return [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name))]
    except OSError:
        return [{"event": "error", "why": "not run"}]
why = {}  # a run that gave no figures: why
def colo(name, L, C, T, V=50304):
    r = recs(name)
    errs = [x for x in r if x["event"] == "error"]
    st = [x for x in r if x["event"] == "step"][5:]
    if errs or not st:
        why[name] = errs[-1].get("why", "failed: see the run's output") if errs else "no steps"
        return None
    ms = sorted(x["ms"] for x in st)[len(st) // 2]
    N = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    tok = st[0]["tokens_per_s"] * st[0]["ms"] / ms  # tokens per step / median time
    return {"ms": ms, "tok_s": tok, "N": N, "mfu": tok * (6 * N + 6 * L * C * T) / 989e12,
            "peak": max(x["memory_bytes"] for x in st), "act": st[0]["activation_bytes"]}
def torch(dt):
    try:
        return json.load(open("%s/torch-%s.json" % (tmp, dt)))
    except (OSError, ValueError):
        return {"error": "not run"}
b16, b16g, b16e, a, f32 = (colo(n, m124[0], m124[2], m124[3]) for n in ("c124bf16", "c124bf16g", "c124bf16e", "c124", "c124fp32"))
b32 = colo("c124b32", m124[0], m124[2], m124[3])
b64 = colo("c124b64", m124[0], m124[2], m124[3])
b16a, b32a = colo("c124bf16a", m124[0], m124[2], m124[3]), colo("c124b32a", m124[0], m124[2], m124[3])
b16f, b32f = colo("c124bf16f", m124[0], m124[2], m124[3]), colo("c124b32f", m124[0], m124[2], m124[3])
b16d, b32d = colo("c124bf16d", m124[0], m124[2], m124[3]), colo("c124b32d", m124[0], m124[2], m124[3])
big = colo("c350", m350[0], m350[2], m350[3])
tb, tt = torch("bf16"), torch("tf32")
tbc, tb32, tbc32 = torch("bf16c"), torch("bf16b32"), torch("bf16cb32")
tbc64 = torch("bf16cb64")
L = []
L.append("# bench/engine_gpu: colo-train on one GPU%s\n"
         % (" — DRY RUN on the CPU with small shapes (COLO_BENCH_DRY=1): not a result" if dry else ""))
L.append("Measured %s on **%s**, commit %s, command `bash bench/engine_gpu/run.sh %s`. Median step "
         "after 5 warm-up steps; full training steps (forward, backward, clipping, AdamW).\n"
         % (datetime.date.today(), gpu, commit, steps))
L.append("## GPT-2 124M (12L/12H/768, T=1024, B=8 unless named, vocab 50304)\n")
L.append("| run | ms/step | tokens/s | MFU (989 TFLOP/s) |")
L.append("|---|---|---|---|")
for name, run, r in (("colo, bf16 activations and products, fused attention (cuDNN's forward and deterministic backward)", "c124bf16", b16),
                     ("colo, bf16, B=%d" % b32n, "c124b32", b32),
                     ("colo, bf16, B=%d" % b64n, "c124b64", b64),
                     ("colo, bf16, colo's own attention kernels (COLO_CUDA_ATTENTION=flash-async)", "c124bf16a", b16a),
                     ("colo, bf16, B=%d, colo's own attention kernels" % b32n, "c124b32a", b32a),
                     ("colo, bf16, cuDNN's backward adding dQ with atomics (COLO_CUDA_ATTENTION=cudnn)", "c124bf16d", b16d),
                     ("colo, bf16, B=%d, cuDNN's backward adding dQ with atomics" % b32n, "c124b32d", b32d),
                     ("colo, bf16, GELU as a pass of its own (COLO_CUDA_GELU_FUSION=0)", "c124bf16f", b16f),
                     ("colo, bf16, B=%d, GELU as a pass of its own" % b32n, "c124b32f", b32f),
                     ("colo, bf16, attention as batched products (COLO_CUDA_ATTENTION=gemm)", "c124bf16g", b16g),
                     ("colo, bf16, biases without cuBLASLt epilogues (COLO_CUDA_EPILOGUES=0)", "c124bf16e", b16e),
                     ("colo, fp32, TF32 products", "c124", a),
                     ("colo, fp32", "c124fp32", f32)):
    L.append("| %s | %s |" % (name, why.get(run, "") + " | | " if r is None else "%.1f | %.0f | %.1f%%" % (r["ms"], r["tok_s"], 100 * r["mfu"])))
for name, t in (("PyTorch %s, bf16 autocast" % (tb.get("torch") or tbc.get("torch", "")), tb),
                ("PyTorch, bf16 autocast, torch.compile", tbc),
                ("PyTorch, bf16 autocast, B=%d" % b32n, tb32),
                ("PyTorch, bf16 autocast, torch.compile, B=%d" % b32n, tbc32),
                ("PyTorch, bf16 autocast, torch.compile, B=%d" % b64n, tbc64),
                ("PyTorch %s, TF32" % tt.get("torch", ""), tt)):
    if "error" in t:
        L.append("| %s | %s | | |" % (name, t["error"]))
    else:
        N = (b16 or a or f32 or {"N": 1})["N"]
        name += ", attention: %s" % t.get("attention", "explicit")
        L.append("| %s | %.1f | %.0f | %.1f%% |" % (name, t["median_ms"], t["tokens_per_s"],
                 100 * t["tokens_per_s"] * (6 * N + 6 * m124[0] * m124[2] * m124[3]) / 989e12))
try:
    prof = [l for l in open("%s/profile.txt" % tmp).read().splitlines() if l.startswith(" ") or l.startswith("colo cuda profile")]
except OSError:
    prof = []
if prof:
    L.append("\nWhere the bf16 step's time goes (`COLO_CUDA_PROFILE=1`, %d steps including warm-up; "
             "a run of its own):\n\n```\n%s\n```\n" % (int(steps), "\n".join(prof)))
def ops(name):  # {op: record}, errors, the first line (what ran)
    try:
        r = [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, name))]
    except (OSError, ValueError):
        r = [{"error": "not run"}]
    key = lambda o: "adamw" if o.startswith("adamw") else o  # the two name their calls differently
    return ({key(x["op"]): x for x in r if "op" in x}, [x["error"] for x in r if "error" in x],
            r[0] if r and "op" not in r[0] else {})
oc, oc_err, _ = ops("ops")
oa, _, _ = ops("ops_cand")
od, od_err, _ = ops("ops_cudnn")
ot, ot_err, th = ops("ops_torch")
if oc:
    L.append("\nEach operation alone at these shapes (`engine_ops`: 20 calls in a row after 2, the wall "
             "time a call; *alternatives*: `COLO_CUDA_ATTENTION=flash-async COLO_CUDA_GELU_FUSION=0`, "
             "colo's own attention; *cuDNN*: `COLO_CUDA_ATTENTION=cudnn`, dQ added with atomics, "
             "the attention's rows), "
             "and PyTorch %s's kernels for the same (`ops_torch.py`: bf16, %s attention, AdamW fused on a GPU). "
             "Speed is colo's rate; the ratio is PyTorch's time over colo's (above 1: colo is "
             "faster).\n" % (th.get("torch", "?"), th.get("attention", "?")))
    L.append("| operation | a step | colo ms | colo speed | alternatives ms | cuDNN ms | PyTorch ms | ratio |")
    L.append("|---|---|---|---|---|---|---|---|")
    for k, x in oc.items():
        if k == "sum of the parts":
            continue
        sp = ("%.3g TFLOP/s" % (x["flops"] / x["ms"] / 1e9) if x["flops"] else
              "%.3g GB/s" % (x["bytes"] / x["ms"] / 1e6) if x["bytes"] else "")
        t, c = ot.get(k), oa.get(k)
        dn = od.get(k) if k.startswith("attention") else None
        L.append("| %s | %d | %.3f | %s | %s | %s | %s | %s |" % (
            x["op"], x["per_step"], x["ms"], sp, "%.3f" % c["ms"] if c else "",
            "%.3f" % dn["ms"] if dn else "",
            "%.3f" % t["ms"] if t else "", "%.2f×" % (t["ms"] / x["ms"]) if t else ""))
    torch_sum = sum(v["per_step"] * ot[k]["ms"] for k, v in oc.items() if k in ot and "per_step" in v)
    for label, d, step in (("colo", oc, b16), ("alternatives", oa, None)):
        s = d.get("sum of the parts")
        if s:
            L.append("\nSum of the parts, a step (%s): %.2f ms%s." % (label, s["ms"],
                     ", against the step's median %.2f ms: %.2f ms between operations"
                     % (step["ms"], step["ms"] - s["ms"]) if step else ""))
    if ot:
        L.append("\nPyTorch's kernels for the same calls: %.2f ms a step." % torch_sum)
if oc_err or ot_err or od_err:
    L.append("\nOperations alone: %s" % "; ".join(oc_err + ot_err + od_err))
if a and "error" not in tt:
    L.append("\nRatio colo (TF32) / PyTorch (TF32): **%.2f×**." % (a["tok_s"] / tt["tokens_per_s"]))
def best(*ts):  # PyTorch's fastest run of those that ran: eager or compiled
    ok = [t for t in ts if "error" not in t]
    return max(ok, key=lambda t: t["tokens_per_s"]) if ok else None
for r, n, t, how in ((b16, m124[4], best(tb, tbc), ""), (b32, b32n, best(tb32, tbc32), ""),
                     (b64, b64n, best(tbc64), ""),
                     (b16a, m124[4], best(tb, tbc), ", colo's own attention kernels"),
                     (b32a, b32n, best(tb32, tbc32), ", colo's own attention kernels"),
                     (b16d, m124[4], best(tb, tbc), ", cuDNN's backward with atomics"),
                     (b32d, b32n, best(tb32, tbc32), ", cuDNN's backward with atomics"),
                     (b16f, m124[4], best(tb, tbc), ", GELU as a pass of its own"),
                     (b32f, b32n, best(tb32, tbc32), ", GELU as a pass of its own")):
    if r and t:
        L.append("Ratio colo (bf16%s) / PyTorch's fastest (bf16 autocast%s), B=%d: **%.2f×** (target ≥ 1.0×; "
                 "MFU target ≥ 45%%: colo's is %.1f%%)." % (how, ", torch.compile" if t.get("compile") else "",
                 n, r["tok_s"] / t["tokens_per_s"], 100 * r["mfu"]))
L.append("\n## 350M (24L/16H/1024, T=1024, B=8), bf16, with recomputation\n")
def act_bytes(L_, C, T, B, V, NH, a):
    """what a recomputing model must hold besides 16Φ, from the architecture: each block's input
    (L+1 of them), one block's activations (16C a token) and its gradient scratch (12C), the final
    LayerNorm's output and the logits, the matrices' compute copies (one block's 12C², the
    embedding's VC), in a bytes an element; LayerNorm statistics, losses, the loss's row scratch
    and the attention log-sum-exp in fp32"""
    N = B * T
    return (a * ((L_ + 1) * N * C + 16 * N * C + 12 * N * C + N * C + N * V + 12 * C * C + V * C)
            + 4 * (13 * N + B * NH * T + 2 * C))  # and the token ids, 2N ints
if big:
    phi = big["N"]
    arith = act_bytes(m350[0], m350[2], m350[3], m350[4], 50304, m350[1], 2)
    L.append("Φ = %d parameters. Peak pool memory **%.2f GiB**, against the arithmetic 16Φ (fp32 "
             "parameters, gradients, two moments) = %.2f GiB plus activations = %.2f GiB, sum %.2f "
             "GiB. The model's own count of its activations: %.2f GiB. Tokens/s %.0f, MFU %.1f%%. "
             "(Outside the pool: the backend's scratch, of which the fused attention's is B·NH·T "
             "floats = %.2f MiB.)" % (phi, big["peak"] / 2**30, 16 * phi / 2**30, arith / 2**30,
             (16 * phi + arith) / 2**30, big["act"] / 2**30, big["tok_s"], 100 * big["mfu"],
             m350[4] * m350[1] * m350[3] * 4 / 2**20))
else:
    L.append(why.get("c350", "failed: see the run's output"))
L.append("\n## 350M under ZeRO-3 with placement (bf16, recomputation)\n")
L.append("| run | peak GPU pool memory | host memory for pieces | tokens/s | vs everything on the GPU |")
L.append("|---|---|---|---|---|")
base = colo("c350z3", m350[0], m350[2], m350[3])
for name, what in (("c350z3", "everything on the GPU"),
                   ("c350st", "static: half the parameters, all optimizer state in host memory"),
                   ("c350au", "auto, under %s%% of the first run's peak" % pct)):
    r = colo(name, m350[0], m350[2], m350[3])
    if not r:
        L.append("| %s | %s | | | |" % (what, why.get(name, "failed")))
        continue
    host = [x.get("host_bytes", 0) for x in recs(name) if x["event"] == "step"]
    L.append("| %s | %.2f GiB | %.2f GiB | %.0f | %s |"
             % (what, r["peak"] / 2**30, (host[-1] if host else 0) / 2**30, r["tok_s"],
                "%.2f×" % (r["tok_s"] / base["tok_s"]) if base else "—"))
L.append("\n## Correctness: %d steps on tinyshakespeare (4L/4H/128, T=64, B=12)\n" % ts_steps)
v = {}
for side in ("run", "ref"):
    r = recs("ts-" + side)
    ev = [x for x in r if x["event"] == "eval"]
    if not ev:
        why["ts-" + side] = ([x.get("why") for x in r if x["event"] == "error"] or ["no evaluation"])[-1] or "failed"
    v[side] = ev[-1]["val_loss"] if ev else float("nan")
if v["run"] != v["run"] or v["ref"] != v["ref"]:  # NaN: a side gave no evaluation
    L.append("Not run, or a side gave no validation loss: %s, %s."
             % tuple(why.get("ts-" + x, "see the run's output") for x in ("run", "ref")))
else:
    rel = abs(v["run"] - v["ref"]) / v["ref"]
    L.append("Validation loss at step %d: GPU (bf16, its default) %.4f, CPU (fp32) %.4f, relative "
             "difference %.2e (target: within 1%%: %s)."
             % (ts_steps, v["run"], v["ref"], rel, "met" if rel <= 0.01 else "NOT met"))
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
print("wrote", out)
PY
