# Shared by the engine benchmarks: a Release build without sanitizers in build-bench/, a
# temporary folder removed on exit, and tiny-shakespeare prepared into $TMP/data.
# Source it after setting SRC; it sets BUILD, TMP and CT (the colo-train program).
bench_setup() { # targets...
  BUILD="$SRC/build-bench"
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target "$@" >/dev/null
  TMP=$(mktemp -d /tmp/colo-bench-XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  CT="$BUILD/bin/colo-train"
}

bench_data() {
  bash "$SRC/deploy/fetch-data.sh" "$TMP/text" >/dev/null
  "$CT" prepare --input "$TMP/text/tinyshakespeare.txt" --out "$TMP/data" >/dev/null
}
