#!/usr/bin/env bash
# bench/placement: ZeRO-3 on one GPU with automatic placement under a memory limit that keeps
# about half the parameters off the GPU, with the chunk cache (memory.chunk_cache) on and off,
# side by side in one run: step time and tokens/s (their ratio), and per step the chunks filled
# and the bytes copied up from host memory. The limit is auto's warm-up peak (everything that
# may leave the GPU off it, measured first) plus half the parameters' fp32 bytes, over the 95%
# auto fills. Writes bench/results/placement.md (placement_dry.md for a rehearsal).
#   bash bench/placement/run.sh                # on a GPU: GPT-2 124M's shape, T=1024, B=8, bf16
#   COLO_BENCH_DRY=1 bash bench/placement/run.sh   # rehearsal on the CPU dressed as a GPU
# COLO_BENCH_BIN: programs built elsewhere (bench/lib.sh); device.sh placement runs it so.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
DRY=${COLO_BENCH_DRY:-0}
if [ "$DRY" = 1 ]; then
  export COLO_CUDA_EMULATE=1
  M=(--n-layer 4 --n-head 4 --n-embd 256 --block-size 64 --batch-size 4 --threads "$(nproc)")
  S=8
else
  M=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 8)
  S=30
fi
A=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin "${M[@]}" --device gpu
  --precision bf16 --zero 3 --lr 1e-4 --warmup 2 --eval-interval 0 --quiet)
# the two peaks: everything on the GPU; auto's warm-up step with everything that may leave it off
"$CT" train "${A[@]}" --steps 2 --progress "$TMP/dev.jsonl"
"$CT" train "${A[@]}" --steps 2 --placement auto --progress "$TMP/warm.jsonl"
read -r P_DEV P_WARM LIM < <(python3 - "$TMP/dev.jsonl" "$TMP/warm.jsonl" "${M[*]}" <<'PY'
import json, sys
dev = max(r["memory_bytes"] for r in map(json.loads, open(sys.argv[1])) if r["event"] == "step")
warm = [r for r in map(json.loads, open(sys.argv[2])) if r["event"] == "placement"][0]["warmup_peak_bytes"]
a = sys.argv[3].split()
L, C, T, V = int(a[a.index("--n-layer") + 1]), int(a[a.index("--n-embd") + 1]), int(a[a.index("--block-size") + 1]), 256
phi = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
print(dev, warm, int((warm + 2 * phi) / 0.95) >> 20)
PY
)
for c in true false true false; do # twice each, interleaved, so that drift falls on both
  "$CT" train "${A[@]}" --steps "$S" --placement auto --memory-limit "$LIM" --chunk-cache "$c" \
    --progress "$TMP/cache-$c-$SECONDS.jsonl"
done
mkdir -p "$SRC/bench/results"
OUTF="$SRC/bench/results/placement$([ "$DRY" = 1 ] && echo _dry).md"
python3 - "$TMP" "$OUTF" "$P_DEV" "$P_WARM" "$LIM" "$DRY" "${M[*]}" "$S" \
  "$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')" \
  "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)" <<'PY'
import glob, json, statistics, sys, datetime
tmp, out, p_dev, p_warm, lim, dry, model, steps, rev, gpu = sys.argv[1:11]
rows = {}
for c in ("true", "false"):
    recs = []
    for f in sorted(glob.glob("%s/cache-%s-*.jsonl" % (tmp, c))):
        recs += [r for r in map(json.loads, open(f)) if r["event"] == "step" and r["step"] > 2]
    place = [r for r in map(json.loads, open(glob.glob("%s/cache-%s-*.jsonl" % (tmp, c))[0]))
             if r["event"] == "placement"][0]
    rows[c] = dict(ms=statistics.median(r["ms"] for r in recs),
                   tok=statistics.median(r["tokens_per_s"] for r in recs),
                   fills=statistics.mean(r["param_fills"] for r in recs),
                   up=statistics.mean(r["param_up_bytes"] for r in recs),
                   hits=statistics.mean(r["cache_hits"] for r in recs),
                   peak=max(r["memory_bytes"] for r in recs), place=place, n=len(recs))
on, off = rows["true"], rows["false"]
with open(out, "w") as f:
    f.write("# bench/placement: the chunk cache under automatic placement%s\n\n"
            % (" — DRY RUN on the CPU dressed as a GPU (COLO_BENCH_DRY=1): not a result" if dry == "1" else ""))
    f.write("Measured %s at %s on %s. Model: `%s`, ZeRO-3, one rank, bf16, automatic placement "
            "under `--memory-limit %s` (MiB): auto's warm-up peak with everything that may leave the "
            "GPU off it (%d bytes) plus half the parameters, over 95%%; everything on the GPU "
            "peaks at %d. "
            "%s of %s chunks' parameters went onto the GPU. Steps 3-%s of two runs each, "
            "interleaved.\n\nCommand: `%sbash bench/placement/run.sh`\n\n"
            % (datetime.date.today(), rev, gpu or "the CPU (emulated GPU)", model, lim, int(p_warm),
               int(p_dev), on["place"]["param_chunks_on_device"], on["place"]["chunks"], steps,
               "COLO_BENCH_DRY=1 " if dry == "1" else ""))
    f.write("| measure | chunk cache on | off | on / off |\n|---|---|---|---|\n")
    f.write("| step, ms (median) | %.2f | %.2f | %.3f |\n" % (on["ms"], off["ms"], on["ms"] / off["ms"]))
    f.write("| tokens/s (median) | %.0f | %.0f | %.3f |\n" % (on["tok"], off["tok"], on["tok"] / off["tok"]))
    f.write("| chunks filled a step | %.1f | %.1f | %.3f |\n" % (on["fills"], off["fills"], on["fills"] / off["fills"]))
    f.write("| bytes copied up from host memory a step | %.0f | %.0f | %.3f |\n"
            % (on["up"], off["up"], on["up"] / off["up"] if off["up"] else float("nan")))
    f.write("| cache hits a step | %.1f | %.1f | |\n" % (on["hits"], off["hits"]))
    f.write("| peak GPU memory (the pool), bytes | %d | %d | %.3f |\n" % (on["peak"], off["peak"], on["peak"] / off["peak"]))
print(open(out).read())
PY
