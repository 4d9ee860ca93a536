#!/usr/bin/env bash
# Context parallelism (parallel.cp, DeepSpeed-Ulysses) against one process, side by side in one
# invocation: a 4-layer, 256-wide model with 8 heads on tiny-shakespeare (bytes), one sequence a
# step, at block sizes 1024, 2048 and 4096; each at cp=1 (one process of THREADS threads) and
# cp=2 (two of THREADS/2), and 4096 at cp=4 too. For rank 0 of each: the activations it keeps,
# the peak of its memory pool (parameters, gradients, AdamW's moments, activations, scratch) and
# its median step time after the first; their ratios to one process. Then the point of it: under
# a memory limit halfway between the two peaks at 4096, one process stops (out of memory) and
# two ranks of cp=2 train.
# Writes bench/results/engine_cpu_context_parallel.md.
#   bash bench/engine_cpu/context_parallel.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
M=(--data-root "$TMP/data" --train-data train.bin --n-layer 4 --n-head 8 --n-embd 256
  --vocab-size 256 --batch-size 1 --steps 4 --warmup 1 --eval-interval 0 --quiet)
half=$((THREADS / 2 > 0 ? THREADS / 2 : 1))
start=$(date +%s)
runs=()
for T in 1024 2048 4096; do
  for cp in 1 2 4; do
    [ "$cp" = 4 ] && [ "$T" != 4096 ] && continue
    if [ "$cp" = 1 ]; then
      layout=(--threads "$THREADS")
    else
      layout=(--nproc "$cp" --cp "$cp" --threads $((THREADS / cp > 0 ? THREADS / cp : 1)))
    fi
    "$CT" train "${M[@]}" --block-size "$T" "${layout[@]}" --progress "$TMP/T$T-cp$cp.jsonl"
    runs+=("T$T-cp$cp")
  done
done
# the limit: halfway between one process's peak and a cp=2 rank's, at 4096
limit=$(python3 - "$TMP" <<'PY'
import json, sys
peak = lambda n: [r for r in map(json.loads, open("%s/%s.jsonl" % (sys.argv[1], n)))
                  if r["event"] == "step"][-1]["memory_bytes"]
print((peak("T4096-cp1") + peak("T4096-cp2")) // 2 >> 20)
PY
)
one_rc=0
"$CT" train "${M[@]}" --block-size 4096 --threads "$THREADS" --steps 1 --memory-limit "$limit" \
  >"$TMP/limit-cp1.out" 2>&1 || one_rc=$?
two_rc=0
"$CT" train "${M[@]}" --block-size 4096 --nproc 2 --cp 2 --threads "$half" --steps 1 \
  --memory-limit "$limit" --progress "$TMP/limit-cp2.jsonl" >"$TMP/limit-cp2.out" 2>&1 || two_rc=$?
secs=$(($(date +%s) - start))
python3 - "$TMP" "$secs" "$THREADS" "$limit" "$one_rc" "$two_rc" \
  "$SRC/bench/results/engine_cpu_context_parallel.md" <<'PY'
import datetime, json, statistics, sys
tmp, secs, threads, limit, one_rc, two_rc, out = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def steps(n):
    return [r for r in map(json.loads, open("%s/%s.jsonl" % (tmp, n))) if r["event"] == "step"]
def row(n):
    s = steps(n)
    return s[-1]["activation_bytes"], s[-1]["memory_bytes"], statistics.median(r["ms"] for r in s[1:])
with open(out, "w") as f:
    f.write("# Context parallelism (parallel.cp, DeepSpeed-Ulysses) against one process\n\n")
    f.write("Measured %s on %s; `bash bench/engine_cpu/context_parallel.sh %s`, %s s in all, every "
            "run in one invocation. A 4-layer, 256-wide model with 8 heads on tiny-shakespeare "
            "(bytes, vocabulary 256), one sequence a step, AdamW, fp32, 4 steps. cp=1 is one "
            "process of %s threads, cp=C is C ranks of %s/C threads (at least 1) on the same "
            "cores. Figures are rank 0's: the activations its model keeps, its memory pool's peak "
            "(parameters, gradients, moments, activations and scratch), its median step time "
            "after the first.\n\n" % (datetime.date.today(), cpu, threads, secs, threads, threads))
    f.write("| block size | cp | activations (MB) | / one process | pool peak (MB) | / one process | "
            "ms a step | / one process |\n|---|---|---|---|---|---|---|---|\n")
    for T in (1024, 2048, 4096):
        a1, p1, t1 = row("T%d-cp1" % T)
        for cp in (1, 2, 4):
            try:
                a, p, t = row("T%d-cp%d" % (T, cp))
            except FileNotFoundError:
                continue
            f.write("| %d | %d | %.1f | %.2fx | %.1f | %.2fx | %.0f | %.2fx |\n"
                    % (T, cp, a / 1e6, a / a1, p / 1e6, p / p1, t, t / t1))
    err = [l.strip() for l in open("%s/limit-cp1.out" % tmp) if l.strip()]
    ok2 = two_rc == "0" and steps("limit-cp2")
    f.write("\nUnder `--memory-limit %s` (MiB, halfway between the two peaks at block size 4096): "
            "one process exits %s (`%s`); two ranks of cp=2 exit %s%s.\n"
            % (limit, one_rc, err[-1] if err else "", two_rc,
               ", having trained (peak %.1f MB)" % (steps("limit-cp2")[-1]["memory_bytes"] / 1e6) if ok2 else ""))
    f.write("\nThe activations a rank keeps shrink nearly by cp; the pool's peak less, as every "
            "rank holds the whole model's parameters, gradients and moments (ZeRO shards those over "
            "the context-parallel ranks too: `parallel.zero_stage`). The step times on a CPU say "
            "what the exchanges and the processes cost here, not what they cost between GPUs.\n")
print(open(out).read())
PY
