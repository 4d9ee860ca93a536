#!/usr/bin/env bash
# bench/control_plane: concurrent clients against a colod holding 1,000 jobs (Release build, no
# sanitizers, clients and colod on the same machine). Prints JSON lines and writes
# bench/results/control_plane.md.
#   bash bench/control_plane/run.sh [THREADS] [SECONDS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
THREADS=${1:-8}
SECONDS_EACH=${2:-10}
BUILD="$SRC/build-bench"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target colod control_plane_load >/dev/null
TMP=$(mktemp -d /tmp/colo-bench-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
"$BUILD/bin/colod" --listen 127.0.0.1:0 --state-dir "$TMP/state" --log-level warn >"$TMP/out" 2>"$TMP/log" &
PID=$!
for _ in $(seq 1 100); do grep -q listening "$TMP/out" && break; sleep 0.1; done
ADDR=$(sed -n 's/^colod listening on //p' "$TMP/out")
CPU0=$(awk '{print $14 + $15}' /proc/$PID/stat)
T0=$(date +%s.%N)
"$BUILD/bin/control_plane_load" --server "$ADDR" --job "$SRC/examples/tinyshakespeare.yaml" \
  --preload 1000 --threads "$THREADS" --seconds "$SECONDS_EACH" | tee "$TMP/results.jsonl"
CPU1=$(awk '{print $14 + $15}' /proc/$PID/stat)
T1=$(date +%s.%N)
TICKS=$(getconf CLK_TCK)
CPU_PCT=$(python3 -c "print(round(100*($CPU1-$CPU0)/$TICKS/($T1-$T0)))")
kill -TERM $PID
wait $PID
echo "colod CPU over the run: ${CPU_PCT}% of one core"
python3 - "$TMP/results.jsonl" "$THREADS" "$CPU_PCT" "$SRC/bench/results/control_plane.md" <<'PY'
import json, platform, subprocess, sys, datetime
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, cpu, out = sys.argv[2], sys.argv[3], sys.argv[4]
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
get = next(r for r in rows if r["method"] == "GetJob")
with open(out, "w") as f:
    f.write("# bench/control_plane\n\n")
    f.write("Measured %s on %s cores (%s), colod Release build, %s client threads, "
            "clients and colod on the same machine; colod holds 1,000 jobs before the runs "
            "(plus those the SubmitJob run adds). SQLite in WAL mode with synchronous=FULL: every "
            "SubmitJob is fsync'd before it is acknowledged.\n\n"
            % (datetime.date.today(), nproc, cpu_model, threads))
    f.write("Command: `bash bench/control_plane/run.sh %s`\n\n" % threads)
    f.write("| method | requests/s | p50 ms | p99 ms | p99.9 ms | max ms | requests | errors |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        f.write("| %s | %.0f | %.3f | %.3f | %.3f | %.3f | %d | %d |\n" % (
            r["method"], r["rps"], r["p50_ms"], r["p99_ms"], r["p999_ms"], r["max_ms"],
            r["requests"], r["errors"]))
    f.write("\ncolod CPU over both runs: %s%% of one core.\n\n" % cpu)
    met = get["rps"] >= 5000 and get["p99_ms"] < 5
    f.write("Target (issue 2): at least 5,000 GetJob/s with p99 under 5 ms on a 2-core machine: "
            "**%s** (%.0f/s, p99 %.3f ms).\n" % ("met" if met else "not met", get["rps"], get["p99_ms"]))
print("wrote", out)
PY
