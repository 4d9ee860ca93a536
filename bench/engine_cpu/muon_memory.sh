#!/usr/bin/env bash
# Muon's memory against AdamW's, side by side in one run: GPT-2 124M's shape (12 layers, 12
# heads, 768 wide, vocabulary 50,304) at a short block (64) and batch 1, so that the model's
# states dominate, one step each with optimizer.name adamw and muon, fp32 on the CPU. Reports
# each run's peak of the engine's memory pool (progress records' memory_bytes) and what the
# difference should be: Muon keeps no second moments for the blocks' 84,934,656 matrix
# parameters, and adds its scratch (the largest tensor's input, 2,359,296 floats, and the
# Newton-Schulz work of a 768 x 3072 matrix, 2·rows·cols + 2·min², 5,898,240 floats).
# Then the same model on the emulated GPU (COLO_CUDA_EMULATE=1: the CPU dressed as a GPU, whose
# pool counts its memory as a GPU's) under ZeRO-3 on one rank, AdamW and Muon, everything on the
# GPU against static placement with every parameter and optimizer-state piece in host memory:
# the GPU's peak each way, and what Muon's placement keeps off it.
# Writes bench/results/engine_cpu_muon_memory.md.
#   bash bench/engine_cpu/muon_memory.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
start=$(date +%s)
for o in adamw muon; do
  "$CT" train --data-root "$TMP/data" --train-data train.bin --n-layer 12 --n-head 12 \
    --n-embd 768 --block-size 64 --vocab-size 50304 --batch-size 1 --steps 1 --eval-interval 0 \
    --threads "$THREADS" --optimizer "$o" --quiet --progress "$TMP/$o.jsonl"
done
for o in adamw muon; do
  for pl in device host; do
    # shellcheck disable=SC2046 # the placement's flags, split on purpose
    COLO_CUDA_EMULATE=1 "$CT" train --data-root "$TMP/data" --train-data train.bin --n-layer 12 \
      --n-head 12 --n-embd 768 --block-size 64 --vocab-size 50304 --batch-size 1 --steps 1 \
      --eval-interval 0 --threads "$THREADS" --optimizer "$o" --device gpu --precision fp32 \
      --zero 3 $([ "$pl" = host ] && echo --placement static --param-device-fraction 0 \
        --optim-device-fraction 0) --quiet --progress "$TMP/$o-$pl.jsonl"
  done
done
secs=$(($(date +%s) - start))
python3 - "$TMP" "$secs" "$THREADS" "$SRC/bench/results/engine_cpu_muon_memory.md" <<'PY'
import json, sys, datetime
tmp, secs, threads, out = sys.argv[1:]
peak = {o: max(r["memory_bytes"] for r in map(json.loads, open("%s/%s.jsonl" % (tmp, o)))
               if r["event"] == "step") for o in ("adamw", "muon")}
act = {o: max(r["activation_bytes"] for r in map(json.loads, open("%s/%s.jsonl" % (tmp, o)))
              if r["event"] == "step") for o in ("adamw", "muon")}
C, L, V, T = 768, 12, 50304, 64
mats = L * (C * 3 * C + C * C + 2 * C * 4 * C)
params = V * C + T * C + mats + L * (2 * C + 3 * C + C + 2 * C + 4 * C + C) + 2 * C  # ln_1, biases, ln_2; ln_f
scratch = 4 * C * C + 2 * C * 4 * C + 2 * C * C
want = 4 * (mats - scratch)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mb = lambda b: b / 1e6
with open(out, "w") as f:
    f.write("# Muon's memory against AdamW's: GPT-2 124M's shape, block 64, batch 1, fp32\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/muon_memory.sh`, %s s in all, the "
            "runs one after the other in one invocation.\n\n" % (datetime.date.today(), cpu, threads, secs))
    f.write("| optimizer | peak of the engine's pool | of which activations |\n|---|---|---|\n")
    for o, n in (("adamw", "AdamW"), ("muon", "Muon (the blocks' matrices), AdamW (the rest)")):
        f.write("| %s | %d bytes (%.1f MB) | %.1f MB |\n" % (n, peak[o], mb(peak[o]), mb(act[o])))
    f.write("\n- Muon's peak is %.3fx AdamW's: %.1f MB less. Expected: the second moments of the "
            "%d matrix parameters (%.1f MB) less Muon's scratch of %d floats (%.1f MB), %.1f MB: %s.\n"
            % (peak["muon"] / peak["adamw"], mb(peak["adamw"] - peak["muon"]), mats, mb(4 * mats),
               scratch, mb(4 * scratch), mb(want),
               "exactly" if peak["adamw"] - peak["muon"] == want else "off by %d bytes" % (peak["adamw"] - peak["muon"] - want)))
    f.write("- The optimizer's state alone (AdamW's two moments of the %d parameters, 4 bytes each) is "
            "%.1f MB; Muon's, its scratch included, %.1f MB (%.2fx).\n" % (
                params, mb(8 * params), mb(8 * params - want), (8 * params - want) / (8 * params)))
    step = lambda n: [r for r in map(json.loads, open("%s/%s.jsonl" % (tmp, n))) if r["event"] == "step"][-1]
    g = {(o, pl): step("%s-%s" % (o, pl)) for o in ("adamw", "muon") for pl in ("device", "host")}
    f.write("\nOn the emulated GPU (the CPU dressed as one; its pool counts a GPU's memory), ZeRO-3 on one "
            "rank, the same model and step: the GPU's peak with everything on it, and with every "
            "parameter and optimizer-state piece in host memory (`memory.placement: static`, "
            "`param_device_fraction: 0`, `optim_device_fraction: 0`):\n\n")
    f.write("| optimizer | GPU peak, all on the GPU | GPU peak, placed | host memory, placed | loss, all on the GPU / placed |\n|---|---|---|---|---|\n")
    for o, n in (("adamw", "AdamW"), ("muon", "Muon")):
        d, h = g[(o, "device")], g[(o, "host")]
        f.write("| %s | %.1f MB | %.1f MB (%.2fx) | %.1f MB | %.6f / %.6f |\n" % (
            n, mb(d["memory_bytes"]), mb(h["memory_bytes"]), h["memory_bytes"] / d["memory_bytes"],
            mb(h["host_bytes"]), d["loss"], h["loss"]))
    f.write("\n- Placed, Muon's GPU peak is %.3fx AdamW's placed (%.1f MB against %.1f MB): Muon's "
            "chunk buffer and scratch stay on the GPU, where it orthogonalizes; its state in host "
            "memory is the placement's, v kept whole there (zeros for the matrices).\n" % (
                g[("muon", "host")]["memory_bytes"] / g[("adamw", "host")]["memory_bytes"],
                mb(g[("muon", "host")]["memory_bytes"]), mb(g[("adamw", "host")]["memory_bytes"])))
print(open(out).read())
PY
