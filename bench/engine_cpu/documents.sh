#!/usr/bin/env bash
# bench/engine_cpu/documents.sh: what keeping attention within documents (data.document_token)
# costs, in colo and in PyTorch, side by side in one run: GPT-2 training steps on tiny-shakespeare
# with each line a document (token 10, newline; 28 tokens a line), with and without
# documents, at T = 256 and T = 1024. PyTorch takes the masks and positions torch_gpt2.documents
# builds (its explicit attention, as the correctness tests use; no fused kernel takes such a mask
# on the CPU). Writes bench/results/documents_cpu.md.
#   bash bench/engine_cpu/documents.sh [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
bench_data
export OMP_NUM_THREADS=$THREADS
: >"$TMP/results.jsonl"
# name layers heads width block batch steps warm-up
for cfg in "T256 6 6 384 256 8 12 2" "T1024 6 6 384 1024 2 12 2"; do
  read -r name L H C T Bs steps warm <<<"$cfg"
  for docs in 0 1; do
    extra=()
    [ "$docs" = 1 ] && extra=(--document-token 10)
    "$CT" train --data-root "$TMP/data" --train-data train.bin --eval-interval 0 \
      --n-layer "$L" --n-head "$H" --n-embd "$C" --block-size "$T" --batch-size "$Bs" \
      --steps "$steps" --threads "$THREADS" --quiet --progress "$TMP/colo-$name-$docs.jsonl" "${extra[@]}"
    bench_colo_row "$TMP/colo-$name-$docs.jsonl" "$warm" $((Bs * T)) config="$name" docs="$docs" \
      >>"$TMP/results.jsonl"
    bench_torch_row config="$name" docs="$docs" -- --n-layer "$L" --n-head "$H" --n-embd "$C" \
      --block-size "$T" --batch-size "$Bs" --steps "$steps" --warmup-steps "$warm" "${extra[@]}" \
      >>"$TMP/results.jsonl"
    tail -2 "$TMP/results.jsonl"
  done
done
python3 - "$TMP/results.jsonl" "$THREADS" "$SRC/bench/results/documents_cpu.md" "$TMP/data/train.bin" <<'PY'
import array, json, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, out = sys.argv[2], sys.argv[3]
tok = array.array("H")
tok.frombytes(open(sys.argv[4], "rb").read()[1024:])
mean_doc = len(tok) / max(1, tok.count(10))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
torch_v = next(r["torch"] for r in rows if r["impl"] == "pytorch")
shapes = {"T256": "6 layers, 6 heads, 384 wide, T=256, B=8", "T1024": "6 layers, 6 heads, 384 wide, T=1024, B=2"}
get = lambda n, impl, d: next(r for r in rows if r["config"] == n and r["impl"] == impl and r["docs"] == d)
with open(out, "w") as f:
    f.write("# bench/engine_cpu/documents.sh: attention within documents on the CPU\n\n")
    f.write("Measured %s on %s, %s threads for both, fp32 GPT-2 training steps on tiny-shakespeare, "
            "median step after warm-up. Documents: each line (token 10 begins one; %.1f tokens a "
            "line on average). PyTorch %s from Debian (eager; tests/engine/torch_gpt2.py, its "
            "explicit attention with the mask torch_gpt2.documents builds). Command: `bash "
            "bench/engine_cpu/documents.sh %s`.\n\n" % (datetime.date.today(), cpu, threads, mean_doc,
                                                         torch_v, threads))
    f.write("| config | shape | colo tokens/s, windows | colo, documents | colo documents / windows "
            "| PyTorch tokens/s, windows | PyTorch, documents | colo / PyTorch, documents |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for n in ("T256", "T1024"):
        c0, c1, t0, t1 = get(n, "colo", 0), get(n, "colo", 1), get(n, "pytorch", 0), get(n, "pytorch", 1)
        f.write("| %s | %s | %.0f | %.0f | %.2f× | %.0f | %.0f | **%.2f×** |\n" % (
            n, shapes[n], c0["tokens_per_s"], c1["tokens_per_s"], c1["tokens_per_s"] / c0["tokens_per_s"],
            t0["tokens_per_s"], t1["tokens_per_s"], c1["tokens_per_s"] / t1["tokens_per_s"]))
        print("%s: colo %.0f -> %.0f tok/s with documents; pytorch %.0f -> %.0f; colo/pytorch with documents %.2f" % (
            n, c0["tokens_per_s"], c1["tokens_per_s"], t0["tokens_per_s"], t1["tokens_per_s"],
            c1["tokens_per_s"] / t1["tokens_per_s"]))
print("wrote", out)
PY
