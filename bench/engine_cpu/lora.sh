#!/usr/bin/env bash
# LoRA against full fine-tuning, side by side in one run: the same model (GPT-2 124M's blocks: 12
# layers, 12 heads, 768 wide; block 256, vocabulary 256), started from the same weights (one
# step of training, which is all this needs), trained STEPS steps of batch 4 each way: fp32 with
# and without recomputation, and bf16 activations (emulated on the CPU: its memory, not its
# speed, is the GPU's) with recomputation, where LoRA keeps the frozen blocks' matrices in bf16
# alone. Reported per run: the memory pool's peak (parameters, gradients,
# optimizer state, activations, scratch), the parameters that train, the last checkpoint's size
# and the median step time; and LoRA's ratio to the full run for each. Then LoRA over 2 ranks
# (fp32, bf16) and 4 (bf16), the batch split between them, with recomputation: the frozen model
# whole on each rank against sharded over them by ZeRO-3, rank 0's peak; and again from the model
# rounded to bf16, whose pieces are then kept in bf16. Writes bench/results/engine_cpu_lora.md.
#   bash bench/engine_cpu/lora.sh [STEPS] [RANK] [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${1:-4}
RANK=${2:-16}
THREADS=${3:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
bench_gpt2_blocks --batch-size 4 --threads "$THREADS"
"$CT" train "${M[@]}" --steps 1 --ckpt-dir "$TMP/data/base"
for run in fp32 fp32-recompute bf16-recompute; do
  for kind in full lora; do
    extra=(--precision "${run%%-*}")
    [ "$run" != fp32 ] && extra+=(--recompute)
    [ "$kind" = lora ] && extra+=(--lora-rank "$RANK" --lora-alpha $((2 * RANK)))
    "$CT" train "${M[@]}" --steps "$STEPS" --init-from base/step_00000001 "${extra[@]}" \
      --ckpt-dir "$TMP/$kind-$run" --progress "$TMP/$kind-$run.jsonl" | grep "^lora:" || true
  done
done
# the same model rounded to bf16 (as the Hub's BF16 files are): its ZeRO-3 pieces are then kept
# in bf16
"$CT" export --checkpoint "$TMP/data/base/step_00000001" --out "$TMP/base.safetensors" >/dev/null
/usr/bin/python3 "$SRC/tests/engine/to_bf16.py" "$TMP/base.safetensors" "$TMP/data/base16.safetensors"
for np in 2:fp32 2:bf16 4:bf16 2:bf16x 4:bf16x; do
  n=${np%:*} p=${np#*:} from=base/step_00000001
  [ "$p" = bf16x ] && from=base16.safetensors
  for z in 0 3; do
    "$CT" train "${M[@]}" --batch-size $((4 / n)) --nproc "$n" --dp "$n" --threads 1 \
      --steps "$STEPS" --init-from "$from" --precision "${p%x}" --recompute --zero "$z" \
      --lora-rank "$RANK" --lora-alpha $((2 * RANK)) --ckpt-dir "$TMP/dp$n-$p-z$z" \
      --progress "$TMP/dp$n-$p-z$z.jsonl"
  done
done
python3 - "$TMP" "$STEPS" "$RANK" "$THREADS" "$SRC/bench/results/engine_cpu_lora.md" <<'PY'
import json, os, statistics, sys, datetime
tmp, steps, rank, threads, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def run(name):
    recs = [json.loads(l) for l in open(os.path.join(tmp, name + ".jsonl"))]
    st = [r for r in recs if r["event"] == "step"]
    d = os.path.join(tmp, name, "step_%08d" % steps)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    return {"peak": max(r["memory_bytes"] for r in st), "ms": statistics.median(r["ms"] for r in st[1:]),
            "ckpt": size, "loss": st[-1]["loss"]}
mib = lambda b: b / 2**20
lines = ["# LoRA against full fine-tuning (CPU engine)", "",
         "`bash bench/engine_cpu/lora.sh %d %s %s`, %s UTC: GPT-2 124M's blocks (12 layers, 12 heads, "
         "768 wide), block 256, vocabulary 256, batch 4, %d steps each from the same weights, "
         "%s threads; LoRA of rank %s (alpha %d) on every product. Peak: the memory pool's "
         "(`memory_bytes` in the progress records); time: the median step after the first (bf16 "
         "is emulated on the CPU: its times are not a GPU's)." %
         (steps, rank, threads, datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), steps, threads,
          rank, 2 * int(rank)), "",
         "| run | peak MiB | LoRA / full | checkpoint MiB | LoRA / full | ms a step | LoRA / full |",
         "|---|---|---|---|---|---|---|"]
for rc, what in (("-fp32", ""), ("-fp32-recompute", ", recomputation"),
                 ("-bf16-recompute", ", recomputation, bf16")):
    f, l = run("full" + rc), run("lora" + rc)
    for name, r in (("full fine-tuning" + what, f), ("LoRA" + what, l)):
        ratio = lambda k: "" if r is f else "%.2f" % (r[k] / f[k])
        lines.append("| %s | %.1f | %s | %.1f | %s | %.0f | %s |" %
                     (name, mib(r["peak"]), ratio("peak"), mib(r["ckpt"]), ratio("ckpt"), r["ms"], ratio("ms")))
lines += ["", "LoRA over N ranks (the same batch of 4 split between them, recomputation, a thread "
          "each), the frozen model whole on each rank (`--zero 0`) or sharded over them "
          "(`--zero 3`): rank 0's peak; the same losses both ways (checked).", "",
          "| run | peak MiB | ZeRO-3 / whole | ms a step | ZeRO-3 / whole |", "|---|---|---|---|---|"]
for n, p in ((2, "fp32"), (2, "bf16"), (4, "bf16"), (2, "bf16x"), (4, "bf16x")):
    w, z = run("dp%d-%s-z0" % (n, p)), run("dp%d-%s-z3" % (n, p))
    if w["loss"] != z["loss"]:
        sys.exit("ZeRO-3 changed the training: last loss %r against %r" % (z["loss"], w["loss"]))
    what = "bf16, a bf16 model" if p == "bf16x" else p
    pieces = "bf16 pieces" if p == "bf16x" else "fp32 pieces"
    lines.append("| LoRA, %d ranks, %s, the model whole on each | %.1f |  | %.0f |  |" % (n, what, mib(w["peak"]), w["ms"]))
    lines.append("| LoRA, %d ranks, %s, the model sharded (ZeRO-3, %s) | %.1f | %.2f | %.0f | %.2f |" %
                 (n, what, pieces, mib(z["peak"]), z["peak"] / w["peak"], z["ms"], z["ms"] / w["ms"]))
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
