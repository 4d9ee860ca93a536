#!/usr/bin/env bash
# Sampling speed: `colo-train sample` with its cache of keys and values (the default) against
# the whole window run again for each token (--full-forward), side by side in one run, on
# GPT-2 124M's shape (12 layers, 12 heads, 768 wide, block 1024, vocab 50257; weights from one
# training step, which is all timing needs) generating TOKENS tokens greedily from a short
# prompt. Both texts must be the same. Writes bench/results/sample_cpu.md.
#   bash bench/engine_cpu/sample.sh [TOKENS] [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TOKENS=${1:-128}
THREADS=${2:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
"$CT" train --data-root "$TMP/data" --train-data train.bin --n-layer 12 --n-head 12 --n-embd 768 \
  --block-size 1024 --vocab-size 50257 --batch-size 1 --steps 1 --eval-interval 0 \
  --threads "$THREADS" --ckpt-dir "$TMP/ckpt" --quiet
now() { date +%s.%N; }
t0=$(now)
"$CT" sample --checkpoint "$TMP/ckpt/step_00000001" --tokens "$TOKENS" --temperature 0 \
  --prompt "ROMEO:" --threads "$THREADS" >"$TMP/cached.txt"
t1=$(now)
"$CT" sample --checkpoint "$TMP/ckpt/step_00000001" --tokens "$TOKENS" --temperature 0 \
  --prompt "ROMEO:" --threads "$THREADS" --full-forward >"$TMP/full.txt"
t2=$(now)
cmp -s "$TMP/cached.txt" "$TMP/full.txt" && same=yes || same=no
python3 - "$t0" "$t1" "$t2" "$TOKENS" "$THREADS" "$same" "$SRC/bench/results/sample_cpu.md" <<'PY'
import sys, datetime
t0, t1, t2 = map(float, sys.argv[1:4])
tokens, threads, same, out = int(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
cached, full = t1 - t0, t2 - t1
with open(out, "w") as f:
    f.write("# Sampling on the CPU: the cache of keys and values against the whole window\n\n")
    f.write("Measured %s on %s (%s threads); `bash bench/engine_cpu/sample.sh %d %s`.\n\n"
            % (datetime.date.today(), cpu, threads, tokens, threads))
    f.write("GPT-2 124M's shape (12 layers, 12 heads, 768 wide, block 1024, vocab 50257), %d tokens "
            "generated greedily after the 6-byte prompt `ROMEO:`; each time includes loading the "
            "checkpoint (0.5 GB).\n\n" % tokens)
    f.write("| run | seconds | tokens/s |\n|---|---|---|\n")
    f.write("| cached (default) | %.1f | %.1f |\n| `--full-forward` | %.1f | %.1f |\n"
            % (cached, tokens / cached, full, tokens / full))
    f.write("\nThe cache is **%.1f×** as fast. The same text from both: **%s**.\n" % (full / cached, same))
print(open(out).read())
sys.exit(0 if same == "yes" else 1)
PY
