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

bench_data() {
  bash "$SRC/deploy/fetch-data.sh" "$TMP/text" >/dev/null
  "$CT" prepare --input "$TMP/text/tinyshakespeare.txt" --out "$TMP/data" >/dev/null
}
