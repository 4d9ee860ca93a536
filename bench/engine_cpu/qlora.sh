#!/usr/bin/env bash
# QLoRA (the frozen model's block matrices in NF4) against LoRA with them in bf16, side by side in
# one run, bf16 activations (emulated on the CPU: its memory, not its speed, is the GPU's) with
# recomputation, rank-16 adapters on every product, started from the same weights (one step of
# training, which is all this needs); and QLoRA with its scales double-quantized
# (--lora-double-quant true: a byte per 64 values, bitsandbytes' bnb_4bit_use_double_quant):
#   - GPT-2 124M's blocks (12 layers, 12 heads, 768 wide; block 256, batch 4), as lora.sh;
#   - a Llama-shaped model whose weights outweigh its activations: 16 layers, 1024 wide, 16 heads
#     over 4 key/value heads, SwiGLU of 4096; block 256, batch 1.
# Vocabulary 256 for both (bytes). Reported per run: the memory pool's peak, the process's
# maximum resident set (set-up included: QLoRA's model goes from the host into NF4 a tensor at a
# time, LoRA's is made whole in fp32 first), the frozen matrices' bytes as colo-train states them,
# the median step time and the first step's loss (before any update: the model as NF4 leaves
# it); and QLoRA's ratio to LoRA for each.
# Writes bench/results/engine_cpu_qlora.md. With COLO_BENCH_DEVICE=gpu (bench/engine_gpu/device.sh
# qlora) it runs on the GPU instead, with larger shapes (GPT-2 124M's blocks at batch 8 of 1024;
# a Llama-3.2-1B-shaped model, 16 layers, 2048 wide, GQA 32/8, SwiGLU of 8192, at batch 4 of
# 1024), and writes bench/results/engine_gpu_qlora.md, the GPU named.
#   bash bench/engine_cpu/qlora.sh [STEPS] [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
STEPS=${1:-3}
THREADS=${2:-$(nproc)}
DEVICE=${COLO_BENCH_DEVICE:-cpu}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
if [ "$DEVICE" = gpu ]; then
  COMMON=(--data-root "$TMP/data" --train-data train.bin --vocab-size 256 --block-size 1024
    --eval-interval 0 --device gpu --quiet)
  declare -A SHAPE=(
    [gpt2]="--n-layer 12 --n-head 12 --n-embd 768 --batch-size 8"
    [llama]="--arch llama --n-layer 16 --n-head 32 --n-kv-head 8 --n-embd 2048 --mlp-hidden 8192 --batch-size 4"
  )
  RESULT="$SRC/bench/results/engine_gpu_qlora.md"
  WHERE="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), bf16"
else
  COMMON=(--data-root "$TMP/data" --train-data train.bin --vocab-size 256 --block-size 256
    --eval-interval 0 --threads "$THREADS" --quiet)
  declare -A SHAPE=(
    [gpt2]="--n-layer 12 --n-head 12 --n-embd 768 --batch-size 4"
    [llama]="--arch llama --n-layer 16 --n-head 16 --n-kv-head 4 --n-embd 1024 --mlp-hidden 4096 --batch-size 1"
  )
  RESULT="$SRC/bench/results/engine_cpu_qlora.md"
  WHERE="CPU, $THREADS threads, bf16 activations emulated (its memory, not its speed, is the GPU's)"
fi
for model in gpt2 llama; do
  read -r -a S <<<"${SHAPE[$model]}"
  "$CT" train "${COMMON[@]}" "${S[@]}" --steps 1 --ckpt-dir "$TMP/data/$model-base"
  for kind in lora qlora qlora-dq; do
    extra=(--precision bf16 --recompute --lora-rank 16 --lora-alpha 32)
    [ "$kind" != lora ] && extra+=(--lora-quant nf4)
    [ "$kind" = qlora-dq ] && extra+=(--lora-double-quant true)
    said=()
    for x in "${COMMON[@]}"; do [ "$x" = --quiet ] || said+=("$x"); done
    timed=() # the maximum resident set, where GNU time is installed
    [ -x /usr/bin/time ] && timed=(/usr/bin/time -f "%M" -o "$TMP/$model-$kind.rss")
    "${timed[@]}" "$CT" train "${said[@]}" "${S[@]}" \
      --steps "$STEPS" --init-from "$model-base/step_00000001" "${extra[@]}" \
      --progress "$TMP/$model-$kind.jsonl" | grep "^lora:" | tee "$TMP/$model-$kind.said"
  done
done
# QLoRA over 2 ranks (GPT-2's shape, the batch split between them): the NF4 model whole on each
# rank, or sharded over them by ZeRO-3 (its packed bytes in the pieces)
read -r -a S <<<"${SHAPE[gpt2]}"
for z in 0 3; do
  "$CT" train "${COMMON[@]}" "${S[@]}" --batch-size $((S[-1] / 2)) --nproc 2 --dp 2 --zero "$z" \
    --steps "$STEPS" --init-from gpt2-base/step_00000001 --precision bf16 --recompute \
    --lora-rank 16 --lora-alpha 32 --lora-quant nf4 --progress "$TMP/dp2-z$z.jsonl"
done
python3 - "$TMP" "$STEPS" "$WHERE" "$RESULT" "$DEVICE" <<'PY'
import json, os, re, statistics, sys, datetime
tmp, steps, where, out, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def run(name):
    st = [r for r in map(json.loads, open(os.path.join(tmp, name + ".jsonl"))) if r["event"] == "step"]
    said = open(os.path.join(tmp, name + ".said")).read()
    m = re.search(r"NF4 \(QLoRA(?:, double quantization)?\): ([0-9.]+) MiB for ([0-9]+) values, "
                  r"([0-9.]+) bytes each \(([0-9.]+) MiB in 16 bits\)", said)
    return {"peak": max(r["memory_bytes"] for r in st) / 2**20,
            "rss": (int(open(os.path.join(tmp, name + ".rss")).read().split()[-1]) / 1024
                    if os.path.exists(os.path.join(tmp, name + ".rss")) else float("nan")),
            "ms": statistics.median(r["ms"] for r in st[1:]) if len(st) > 1 else st[0]["ms"],
            "loss": st[0]["loss"], "nf4": m}
lines = ["# QLoRA against LoRA (%s engine)" % device.upper(), "",
         "`%sbash bench/engine_cpu/qlora.sh %d`, %s UTC, %s: recomputation, LoRA of rank 16 (alpha "
         "32) on every product, %d steps from the same weights; LoRA keeps the frozen blocks' "
         "matrices in bf16, QLoRA (`--lora-quant nf4`) in NF4, and with `--lora-double-quant "
         "true` with its scales double-quantized (a byte per 64 values, an fp32 per 16,384). Peak: the memory pool's "
         "(`memory_bytes`); RSS: the process's maximum resident set, set-up included; time: the "
         "median step after the first; loss: the first step's, before any update (the adapters "
         "start as nothing), what NF4 changes in the model." %
         ("COLO_BENCH_DEVICE=gpu " if device == "gpu" else "", steps,
          datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), where, steps), "",
         "| model | run | frozen matrices MiB | peak MiB | QLoRA / LoRA | max RSS MiB | QLoRA / LoRA | ms a step | QLoRA / LoRA | first loss |",
         "|---|---|---|---|---|---|---|---|---|---|"]
names = ({"gpt2": "GPT-2 124M's blocks, batch 8 x 1024", "llama": "Llama-3.2-1B-shaped, 16 x 2048, GQA 32/8, batch 4 x 1024"}
         if device == "gpu" else
         {"gpt2": "GPT-2 124M's blocks, batch 4", "llama": "Llama-shaped, 16 x 1024, GQA 16/4, batch 1"})
for model in ("gpt2", "llama"):
    l, q, d = run(model + "-lora"), run(model + "-qlora"), run(model + "-qlora-dq")
    if not q["nf4"] or not d["nf4"]:
        sys.exit("colo-train did not say the matrices are in NF4")
    vals = int(q["nf4"].group(2))
    for name, r in (("LoRA (bf16 matrices)", l), ("QLoRA (NF4 matrices)", q),
                    ("QLoRA, scales double-quantized", d)):
        mat = float(q["nf4"].group(4)) if r is l else float(r["nf4"].group(1))
        ratio = lambda k: "" if r is l else "%.2f" % (r[k] / l[k])
        lines.append("| %s | %s | %.1f | %.1f | %s | %.0f | %s | %.0f | %s | %.4f |" %
                     (names[model] if r is l else "", name, mat, r["peak"], ratio("peak"), r["rss"],
                      ratio("rss"), r["ms"], ratio("ms"), r["loss"]))
    lines.append("| | (%d values in the blocks' matrices; %s and %s bytes each in NF4) | | | | | | | | |"
                 % (vals, q["nf4"].group(3), d["nf4"].group(3)))
st = lambda f: [r for r in map(json.loads, open(os.path.join(tmp, f))) if r["event"] == "step"]
w, z = st("dp2-z0.jsonl"), st("dp2-z3.jsonl")
if [r["loss"] for r in w] != [r["loss"] for r in z]:
    sys.exit("ZeRO-3 changed the QLoRA training")
pw, pz = (max(r["memory_bytes"] for r in x) / 2**20 for x in (w, z))
lines += ["", "QLoRA over 2 ranks (GPT-2's shape, the batch split between them): rank 0's peak with "
          "the NF4 model whole on each rank (`--zero 0`) and sharded over them (`--zero 3`, its "
          "packed bytes in the pieces); the same losses both ways (checked).", "",
          "| run | peak MiB | ZeRO-3 / whole |", "|---|---|---|",
          "| QLoRA, 2 ranks, the NF4 model whole on each | %.1f |  |" % pw,
          "| QLoRA, 2 ranks, the NF4 model sharded (ZeRO-3) | %.1f | %.2f |" % (pz, pz / pw)]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
