# Shared by the engine benchmarks: a Release build without sanitizers in build-bench/, a
# temporary folder removed on exit, and tiny-shakespeare prepared into $TMP/data.
# Source it after setting SRC; it sets BIN (the programs' folder), TMP and CT (colo-train).
# COLO_BENCH_BIN names a folder of programs built elsewhere (deploy/gpu-pack.sh's), for a
# machine that cannot build: nothing is built then.
bench_setup() { # targets...
  if [ -n "${COLO_BENCH_BIN:-}" ]; then
    BIN=$COLO_BENCH_BIN
  else
    BIN="$SRC/build-bench/bin"
    cmake -S "$SRC" -B "$SRC/build-bench" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF >/dev/null
    cmake --build "$SRC/build-bench" -j"$(nproc)" --target "$@" >/dev/null
  fi
  TMP=$(mktemp -d /tmp/colo-bench-XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  CT="$BIN/colo-train"
}

# GPT-2 124M's blocks (12 layers, 12 heads, 768 wide; block 256, vocabulary 256) on bench_data's
# text, quiet, without evaluations: their flags and those given, in M
bench_gpt2_blocks() { # flags...
  M=(--data-root "$TMP/data" --train-data train.bin --n-layer 12 --n-head 12 --n-embd 768
    --block-size 256 --vocab-size 256 --eval-interval 0 --quiet "$@")
}

# Random token shards over GPT-2's 50,257 tokens in DIR, train.bin (8 Mi tokens) and val.bin
# (1 Mi), with python $1 (numpy): for throughput, which does not depend on the text
bench_random_tokens() { # python dir
  "$1" - "$2" <<'PY'
import os, sys, numpy as np
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
for name, n in (("train.bin", 8 << 20), ("val.bin", 1 << 20)):
    hdr = np.zeros(256, dtype=np.int32); hdr[0], hdr[1], hdr[2] = 20240520, 1, n
    with open(os.path.join(d, name), "wb") as f:
        f.write(hdr.tobytes()); f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
}

bench_data() {
  bash "$SRC/deploy/fetch-data.sh" "$TMP/text" >/dev/null
  "$CT" prepare --input "$TMP/text/tinyshakespeare.txt" --out "$TMP/data" >/dev/null
}

# A JSON row (a line) of a colo-train run: the median step of its progress file after `warm`
# steps, the tokens a second at `tokens` a step, and the fields given as name=value (a whole
# number stays one)
bench_colo_row() { # progress warm tokens name=value...
  python3 - "$@" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l]
ms = sorted(r["ms"] for r in rows[int(sys.argv[2]):])
med = ms[len(ms) // 2]
out = {"impl": "colo", "median_ms": med, "tokens_per_s": int(sys.argv[3]) / (med / 1e3)}
for kv in sys.argv[4:]:
    k, v = kv.split("=", 1)
    out[k] = int(v) if v.lstrip("-").isdigit() else v
print(json.dumps(out))
PY
}

# The JSON row on stdin (a reference's: torch_train.py's), with the fields given as bench_colo_row
# takes them
bench_tag() { # name=value...
  python3 -c '
import json, sys
r = json.load(sys.stdin)
for kv in sys.argv[1:]:
    k, v = kv.split("=", 1)
    r[k] = int(v) if v.lstrip("-").isdigit() else v
print(json.dumps(r))' "$@"
}

# torch_train.py's row (bench/engine_cpu) on bench_data's shard and $THREADS threads, tagged:
# bench_torch_row name=value... -- its flags...
bench_torch_row() {
  local tags=()
  while [ "$1" != "--" ]; do
    tags+=("$1")
    shift
  done
  shift
  /usr/bin/python3 "$SRC/bench/engine_cpu/torch_train.py" --threads "$THREADS" \
    --data "$TMP/data/train.bin" "$@" | bench_tag "${tags[@]}"
}
