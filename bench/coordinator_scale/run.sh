#!/usr/bin/env bash
# bench/coordinator_scale: HOSTS simulated hosts of 8 devices heartbeat colod at 1 Hz (worker RPCs
# from a load tool, Release build, on the same machine as colod), in two scenarios:
#   place:   an idle cluster; one 512-rank job (dp=64 x tp=8) is submitted 40% into the run;
#   preempt: every host first runs a one-host job of priority -1; the 512-rank job comes at
#            priority 1 and stops 64 of them (their ranks report exit 75 as they are withdrawn),
#            which then wait behind it.
# Each scenario runs twice against the current colod: "current", where every simulated host keeps
# a WatchHost stream open and beats when colod nudges it, as colo-workerd does; and "beats-only",
# where the hosts learn of changes only at their next 1 Hz beat.
# In "current" colod also serves /metrics, scraped every 5 s during the heartbeats (Prometheus'
# default interval is 15 s to 1 min), with each scrape's time and size reported.
# Reports colod's CPU use, heartbeat latency percentiles, the time from SubmitJob to RUNNING and
# to every rank started on its host, and from colod's log the placement, the preemption's choice
# and the scheduling passes. With BASELINE (a git revision), that revision's colod runs the same
# scenarios (beats only) in the same run, for ratios. Writes bench/results/coordinator_scale.md.
#   bash bench/coordinator_scale/run.sh [HOSTS] [SECONDS] [BASELINE]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HOSTS=${1:-1000}
SECS=${2:-30}
BASE=${3:-}
BUILD="$SRC/build-bench"
TMP=$(mktemp -d /tmp/colo-bench-XXXXXX)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  [ -z "$BASE" ] || git -C "$SRC" worktree remove --force "$TMP/base-src" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF -DCOLO_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target colod coordinator_scale_load >/dev/null
LABELS=(current beats-only)
declare -A COLOD=([current]="$BUILD/bin/colod" [beats-only]="$BUILD/bin/colod")
if [ -n "$BASE" ]; then
  REV=$(git -C "$SRC" rev-parse --short "$BASE")
  git -C "$SRC" worktree add --detach "$TMP/base-src" "$REV" >/dev/null 2>&1
  cmake -S "$TMP/base-src" -B "$TMP/base-build" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF \
    -DCOLO_CUDA=OFF >/dev/null
  cmake --build "$TMP/base-build" -j"$(nproc)" --target colod >/dev/null
  LABELS+=("$REV")
  COLOD[$REV]="$TMP/base-build/bin/colod"
fi

# run LABEL SCENARIO: one colod and one load run; writes $TMP/LABEL-SCENARIO.json
run() {
  local label=$1 scenario=$2 dir="$TMP/$1-$2" extra=()
  [ "$scenario" = preempt ] && extra=(--fill "$HOSTS" --priority 1)
  local metrics=()
  [ "$label" = current ] && extra+=(--push) && metrics=(--set metrics_listen=127.0.0.1:0)
  mkdir -p "$dir"
  "${COLOD[$label]}" --listen 127.0.0.1:0 --state-dir "$dir/state" --set host_timeout=10s \
    --set log_level=debug "${metrics[@]}" >"$dir/out" 2>"$dir/log" &
  local pid=$!
  for _ in $(seq 1 100); do grep -q listening "$dir/out" && break; sleep 0.1; done
  local addr
  addr=$(sed -n 's/^colod listening on //p' "$dir/out")
  "$BUILD/bin/coordinator_scale_load" --server "$addr" --hosts "$HOSTS" --devices 8 --threads 16 \
    --seconds "$SECS" --dp 64 --tp 8 "${extra[@]}" >"$dir/result.json" &
  local load=$!
  # colod's CPU is sampled over the heartbeat phase only (after registering and filling)
  for _ in $(seq 1 1200); do
    [ "$(grep -c 'registered' "$dir/log")" -ge "$HOSTS" ] &&
      { [ "$scenario" = place ] || [ "$(grep -c 'ranks placed' "$dir/log")" -ge "$HOSTS" ]; } &&
      break
    sleep 0.1
  done
  sleep 1
  local cpu0 t0 cpu1 t1
  cpu0=$(awk '{print $14 + $15}' /proc/$pid/stat)
  t0=$(date +%s.%N)
  local end=$(($(date +%s) + SECS - 3)) url
  url=$(sed -n 's/^colod metrics on //p' "$dir/out")
  : >"$dir/scrapes"
  while [ -n "$url" ] && [ $(($(date +%s) + 5)) -le "$end" ]; do
    sleep 5
    curl -s -o /dev/null -w '%{http_code} %{time_total} %{size_download}\n' "$url" >>"$dir/scrapes"
  done
  while [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
  cpu1=$(awk '{print $14 + $15}' /proc/$pid/stat)
  t1=$(date +%s.%N)
  wait $load
  local rss
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  kill -TERM $pid
  wait $pid
  python3 - "$dir" "$cpu0" "$cpu1" "$t0" "$t1" "$rss" "$(getconf CLK_TCK)" "$label" "$scenario" \
    >"$TMP/$label-$scenario.json" <<'PY'
import json, re, statistics, sys
d, cpu0, cpu1, t0, t1, rss, tck, label, scenario = sys.argv[1:]
r = json.load(open(d + "/result.json"))
log = open(d + "/log").read()
m = re.findall(r"job \d+ attempt 1: %d ranks placed in ([0-9.]+) ms" % r["job_ranks"], log)
r["placed_ms"] = float(m[0]) if m else None
m = re.search(r"preempts (\d+) jobs?: chosen among (\d+) of lower priority in (\d+) trials, "
              r"([0-9.]+) ms", log)
r["preempt"] = [int(m[1]), int(m[2]), int(m[3]), float(m[4])] if m else None
# the passes from the job's first line on (ids start at 1 in a new state) that had jobs waiting:
# the job's own, and in preempt those of its victims waiting behind it
first = re.search(r"job %d " % (r["fill_jobs"] + 1), log)
busy = [float(ms) for n, ms in
        re.findall(r"scheduling pass: (\d+) waiting jobs, \d+ hosts, ([0-9.]+) ms",
                   log[first.start():] if first else "") if int(n) > 0]
r["pass_busy"] = [len(busy), statistics.median(busy), max(busy)] if busy else None
r["cpu_pct"] = round(100 * (float(cpu1) - float(cpu0)) / int(tck) / (float(t1) - float(t0)), 1)
r["rss_mib"] = int(rss) / 1024
sc = [l.split() for l in open(d + "/scrapes")]
ok = [(float(t) * 1000, int(b)) for c, t, b in sc if c == "200"]
r["scrapes"] = [len(ok), len(sc) - len(ok), statistics.median(t for t, _ in ok),
                max(t for t, _ in ok), max(b for _, b in ok)] if ok else None
r["label"], r["scenario"] = label, scenario
print(json.dumps(r))
PY
  echo "$label $scenario: $(cat "$TMP/$label-$scenario.json")"
}

for scenario in place preempt; do
  for label in "${LABELS[@]}"; do
    run "$label" "$scenario"
  done
done

python3 - "$TMP" "$SRC/bench/results/coordinator_scale.md" "$HOSTS" "$SECS" "$BASE" \
  "$(git -C "$SRC" rev-parse --short HEAD)" "${LABELS[@]}" <<'PY'
import datetime, json, subprocess, sys
tmp, out, hosts, secs, base, head = sys.argv[1:7]
labels = sys.argv[7:]
R = {(l, s): json.load(open("%s/%s-%s.json" % (tmp, l, s))) for l in labels
     for s in ("place", "preempt")}
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                  if l.startswith("model name")), "?")
nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()


def f(v, fmt="%.1f"):
    return "n/a" if v is None else fmt % v


rows = [
    ("heartbeats (errors)", lambda r: "%d (%d)" % (r["heartbeats"], r["errors"])),
    ("heartbeat latency p50 / p99 / max, ms",
     lambda r: "%.2f / %.2f / %.1f" % (r["p50_ms"], r["p99_ms"], r["max_ms"])),
    ("colod CPU during the heartbeats, % of one core", lambda r: "%.1f" % r["cpu_pct"]),
    ("colod resident memory, MiB", lambda r: "%.1f" % r["rss_mib"]),
    ("512-rank job: SubmitJob to RUNNING, ms", lambda r: f(r["submit_to_running_ms"])),
    ("512-rank job: SubmitJob to every rank started on its host, ms",
     lambda r: f(r.get("submit_to_started_ms"))),
    ("512-rank job: placement with its stored attempt, ms", lambda r: f(r["placed_ms"], "%.2f")),
    ("preemption: jobs stopped / candidates / trials / ms",
     lambda r: "%d / %d / %d / %.1f" % tuple(r["preempt"]) if r["preempt"] else "n/a"),
    ("scheduling passes with jobs waiting: count / median / max, ms",
     lambda r: "%d / %.2f / %.1f" % tuple(r["pass_busy"]) if r["pass_busy"] else "n/a"),
    ("ranks started / stopped by the simulated hosts",
     lambda r: "%d / %d" % (r["ranks_launched"], r["ranks_stopped"])),
    ("nudges received / beats they caused",
     lambda r: "%d / %d" % (r["nudges"], r["nudged_beats"]) if r.get("push") else "none"),
    ("GET /metrics: scrapes (failed) / median / max, ms / size, KiB",
     lambda r: "%d (%d) / %.1f / %.1f / %.0f" % (r["scrapes"][0], r["scrapes"][1], r["scrapes"][2],
                                                 r["scrapes"][3], r["scrapes"][4] / 1024)
     if r.get("scrapes") else "n/a"),
    ("registering the hosts / filling them with jobs, s",
     lambda r: "%.2f / %.2f" % (r["register_s"], r["fill_s"])),
]
with open(out, "w") as fo:
    fo.write("# bench/coordinator_scale\n\n")
    fo.write("Measured %s on %s cores (%s), at %s: colod (Release build) and the load tool on the "
             "same machine. The tool registers %s simulated hosts of 8 devices, then heartbeats "
             "each once a second from 16 threads for %s s, reporting the ranks colod places on "
             "it as RUNNING and those it withdraws as exited with 75; 40%% into the run it "
             "submits one 512-rank job (dp=64 x tp=8). In the *current* columns each host "
             "also keeps a WatchHost stream open and beats at once when colod nudges it, as "
             "colo-workerd does, and colod serves /metrics, scraped every 5 s; in *beats-only* "
             "neither.\n\n"
             % (datetime.date.today(), nproc, cpu_model, head, hosts, secs))
    fo.write("- **place**: an idle cluster, the job at priority 0.\n"
             "- **preempt**: first every host gets a one-host job (tp=8) of priority -1; the job "
             "comes at priority 1 and stops 64 of them, which then wait behind it.\n\n")
    fo.write("Command: `bash bench/coordinator_scale/run.sh %s %s%s`\n\n"
             % (hosts, secs, " " + base if base else ""))
    cols = ["%s, %s" % (s, l) for s in ("place", "preempt") for l in labels]
    fo.write("| measure | " + " | ".join(cols) + " |\n")
    fo.write("|---|" + "---|" * len(cols) + "\n")
    for name, fn in rows:
        fo.write("| %s | %s |\n" % (name, " | ".join(fn(R[(l, s)]) for s in ("place", "preempt")
                                                   for l in labels)))
    r = R[(labels[0], "place")]
    p99_ok = r["p99_ms"] < 20 and r["errors"] == 0
    place_ok = r["submit_to_running_ms"] is not None and 0 <= r["submit_to_running_ms"] < 1000
    fo.write("\nTargets (issue 5), current colod, place: p99 heartbeat latency under 20 ms: "
             "**%s**; placing a 512-rank job under 1 s: **%s**.\n"
             % ("met" if p99_ok else "not met", "met" if place_ok else "not met"))
    if len(labels) > 2:
        fo.write("\nThe %s column is the baseline revision's colod under the same load tool "
                 "(beats only); n/a: that revision does not log the measure.\n" % labels[2])
print("wrote", out)
PY
