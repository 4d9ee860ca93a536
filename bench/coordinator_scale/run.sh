#!/usr/bin/env bash
# bench/coordinator_scale: 1,000 simulated hosts of 8 devices heartbeat colod at 1 Hz (worker RPCs
# from a load tool, Release build, on the same machine as colod); one 512-rank job (dp=64 x tp=8)
# is placed halfway. Reports colod's CPU use, heartbeat latency percentiles and the time from
# SubmitJob to RUNNING, and writes bench/results/coordinator_scale.md.
#   bash bench/coordinator_scale/run.sh [HOSTS] [SECONDS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HOSTS=${1:-1000}
SECS=${2:-30}
BUILD="$SRC/build-bench"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target colod coordinator_scale_load >/dev/null
TMP=$(mktemp -d /tmp/colo-bench-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
"$BUILD/bin/colod" --listen 127.0.0.1:0 --state-dir "$TMP/state" --set host_timeout=10s \
  >"$TMP/out" 2>"$TMP/log" &
PID=$!
for _ in $(seq 1 100); do grep -q listening "$TMP/out" && break; sleep 0.1; done
ADDR=$(sed -n 's/^colod listening on //p' "$TMP/out")
# colod's CPU is sampled over the heartbeat phase only (after the registrations)
"$BUILD/bin/coordinator_scale_load" --server "$ADDR" --hosts "$HOSTS" --devices 8 --threads 16 \
  --seconds "$SECS" --dp 64 --tp 8 >"$TMP/result.json" &
LOAD=$!
for _ in $(seq 1 600); do
  [ "$(grep -c 'registered' "$TMP/log")" -ge "$HOSTS" ] && break
  sleep 0.1
done
sleep 1
CPU0=$(awk '{print $14 + $15}' /proc/$PID/stat)
T0=$(date +%s.%N)
sleep $((SECS - 3))
CPU1=$(awk '{print $14 + $15}' /proc/$PID/stat)
T1=$(date +%s.%N)
wait $LOAD
cat "$TMP/result.json"
PLACED=$(sed -n 's/.*ranks placed in \([0-9.]*\) ms.*/\1/p' "$TMP/log" | head -1)
TICKS=$(getconf CLK_TCK)
CPU_PCT=$(python3 -c "print(round(100*($CPU1-$CPU0)/$TICKS/($T1-$T0), 1))")
RSS=$(awk '/VmRSS/ {print $2}' /proc/$PID/status)
kill -TERM $PID
wait $PID
echo "colod: ${CPU_PCT}% of one core during the heartbeats, RSS ${RSS} KiB; placement itself ${PLACED} ms"
python3 - "$TMP/result.json" "$CPU_PCT" "$PLACED" "$RSS" "$SRC/bench/results/coordinator_scale.md" <<'PY'
import json, subprocess, sys, datetime
r = json.load(open(sys.argv[1]))
cpu, placed, rss, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
with open(out, "w") as f:
    f.write("# bench/coordinator_scale\n\n")
    f.write("Measured %s on %s cores (%s): colod (Release build) and the load tool on the same "
            "machine. The tool registers %d simulated hosts of %d devices, then heartbeats each "
            "once a second from %d threads for %d s, reporting the ranks colod places on it as "
            "RUNNING; %.0f%% into the run it submits one %d-rank job (dp=64 x tp=8).\n\n"
            % (datetime.date.today(), nproc, cpu_model, r["hosts"], r["devices_per_host"],
               r["threads"], r["seconds"], 40, r["job_ranks"]))
    f.write("Command: `bash bench/coordinator_scale/run.sh %d %d`\n\n" % (r["hosts"], r["seconds"]))
    f.write("| measure | value |\n|---|---|\n")
    f.write("| heartbeats | %d (%.1f/s), %d errors |\n" % (r["heartbeats"], r["heartbeats_per_s"], r["errors"]))
    f.write("| heartbeat latency p50 / p99 / p99.9 / max | %.3f / %.3f / %.3f / %.3f ms |\n"
            % (r["p50_ms"], r["p99_ms"], r["p999_ms"], r["max_ms"]))
    f.write("| colod CPU during the heartbeats | %s%% of one core |\n" % cpu)
    f.write("| colod resident memory | %.1f MiB |\n" % (rss / 1024))
    f.write("| %d-rank job: placement and its stored attempt (colod's log) | %s ms |\n" % (r["job_ranks"], placed))
    f.write("| %d-rank job: SubmitJob to RUNNING, seen by a client | %.1f ms |\n" % (r["job_ranks"], r["submit_to_running_ms"]))
    f.write("| ranks the simulated hosts were told to start | %d |\n" % r["ranks_launched"])
    f.write("| registering %d hosts | %.2f s |\n\n" % (r["hosts"], r["register_s"]))
    p99_ok = r["p99_ms"] < 20 and r["errors"] == 0
    place_ok = 0 <= r["submit_to_running_ms"] < 1000
    f.write("Targets (issue 5): p99 heartbeat latency under 20 ms: **%s**; placing a 512-rank job "
            "under 1 s: **%s**. colod places a job as soon as it is submitted.\n" % ("met" if p99_ok else "not met", "met" if place_ok else "not met"))
print("wrote", out)
PY
