#!/usr/bin/env bash
# bench/control_plane/purge.sh: job_retention's purge of a large backlog, and what it costs the
# callers colod serves meanwhile. A colod holding 1,000 live jobs gets N ended jobs (default
# 100,000), each with the rows a real one leaves (4 events, an attempt of 2 ranks, 3 checkpoint
# records, 20 points of its curve) and a rank log of 4 KiB. Then, in one run:
#   1. reference: colod without job_retention, GetJob load on the live jobs for S seconds;
#   2. the same colod restarted with job_retention=1d (every ended job 2 days old), the same load
#      while it deletes them: the purge's time from colod's log, the latency of the same calls.
# Prints JSON lines and writes bench/results/control_plane_purge.md.
#   bash bench/control_plane/purge.sh [N] [SECONDS] [THREADS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-100000}
SECS=${2:-10}
THREADS=${3:-2}
BUILD="$SRC/build-bench"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCOLO_SANITIZE=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target colod control_plane_load >/dev/null
TMP=$(mktemp -d /tmp/colo-bench-purge-XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$TMP"' EXIT
JOB="$SRC/examples/tinyshakespeare.yaml"

start() { # start LOG [--set ...]: colod on the bench's state, its address in $ADDR
  local log=$1
  shift
  : >"$TMP/out"
  "$BUILD/bin/colod" --listen 127.0.0.1:0 --state-dir "$TMP/state" "$@" >"$TMP/out" 2>"$TMP/$log" &
  PID=$!
  for _ in $(seq 1 300); do grep -q listening "$TMP/out" && break; sleep 0.1; done
  ADDR=$(sed -n 's/^colod listening on //p' "$TMP/out")
  [ -n "$ADDR" ] || { echo "colod did not start:" >&2; cat "$TMP/$log" >&2; exit 1; }
}
stop() {
  kill -TERM "$PID"
  wait "$PID"
  PID=
}

# the live jobs (PENDING: no hosts), then the backlog written straight into the database
start setup.log --log-level warn
"$BUILD/bin/control_plane_load" --server "$ADDR" --job "$JOB" --preload 1000 --threads 1 \
  --seconds 0.1 --method get >/dev/null
stop
python3 - "$TMP/state" "$N" <<'PY'
import os, sqlite3, sys, time
state, n = sys.argv[1], int(sys.argv[2])
db = sqlite3.connect(os.path.join(state, "colod.db"))
spec = db.execute("SELECT spec FROM jobs WHERE id = 1").fetchone()[0]
end = int(time.time() * 1000) - 2 * 86400000
db.execute("INSERT INTO hosts (name, address, state, registered_ms, last_seen_ms) "
           "VALUES ('bench', '127.0.0.1', 2, 0, 0)")
host = db.execute("SELECT id FROM hosts WHERE name = 'bench'").fetchone()[0]
first = db.execute("SELECT max(id) FROM jobs").fetchone()[0] + 1
ids = range(first, first + n)
db.executemany("INSERT INTO jobs (id, name, state, spec, attempt, max_restarts, created_ms, "
               "updated_ms, message) VALUES (?, 'old', 4, ?, 1, 3, ?, ?, 'done')",
               ((i, spec, end - 3600000, end) for i in ids))
db.executemany("INSERT INTO job_events (job_id, seq, state, message, time_ms) "
               "VALUES (?, ?, ?, 'e', ?)",
               ((i, s, s, end) for i in ids for s in (1, 2, 3, 4)))
db.executemany("INSERT INTO job_attempts (job_id, attempt, state, started_ms, ended_ms) "
               "VALUES (?, 1, 4, ?, ?)", ((i, end - 3600000, end) for i in ids))
db.executemany("INSERT INTO ranks (job_id, attempt, rank, host_id, device_index, dp_idx, "
               "tp_idx, pp_idx) VALUES (?, 1, ?, ?, ?, ?, 0, 0)",
               ((i, r, host, r, r) for i in ids for r in (0, 1)))
db.executemany("INSERT INTO checkpoints (job_id, step, attempt, path, manifest_sha256, bytes, "
               "created_ms) VALUES (?, ?, 1, 'p', 'x', 1, ?)",
               ((i, s, end) for i in ids for s in (100, 200, 300)))
db.executemany("INSERT INTO progress_samples (job_id, attempt, step, loss, lr, tokens_per_s, "
               "time_ms) VALUES (?, 1, ?, 2.5, 0.001, 1000, ?)",
               ((i, s, end) for i in ids for s in range(0, 400, 20)))
db.commit()
db.close()
log = b"step 1 | loss 2.5\n" * 228  # 4 KiB
for i in ids:
    d = os.path.join(state, "logs", "job-%d" % i, "attempt-1")
    os.makedirs(d)
    with open(os.path.join(d, "rank-0.log"), "wb") as f:
        f.write(log)
print("backlog: %d ended jobs, database %.0f MiB" %
      (n, os.path.getsize(os.path.join(state, "colod.db")) / 2**20), file=sys.stderr)
PY

load() {
  "$BUILD/bin/control_plane_load" --server "$ADDR" --job "$JOB" --preload 0 --ids 1000 \
    --threads "$THREADS" --seconds "$SECS" --method get 2>/dev/null
}
start ref.log --log-level info
load | sed 's/^{/{"run": "reference", /' | tee "$TMP/results.jsonl"
stop
start purge.log --log-level info --set job_retention=1d
load | sed 's/^{/{"run": "purging", /' | tee -a "$TMP/results.jsonl"
# the purge may outlast the load: its round ends with one line
for _ in $(seq 1 600); do grep -q 'that ended more than job_retention ago' "$TMP/purge.log" && break; sleep 0.5; done
stop
LEFT_ROWS=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM jobs').fetchone()[0])" "$TMP/state/colod.db")
LEFT_DIRS=$(find "$TMP/state/logs" -mindepth 1 -maxdepth 1 | wc -l)
python3 - "$TMP" "$N" "$SECS" "$THREADS" "$LEFT_ROWS" "$LEFT_DIRS" "$SRC/bench/results/control_plane_purge.md" <<'PY'
import datetime, json, re, subprocess, sys
tmp, n, secs, threads, left_rows, left_dirs, out = sys.argv[1:]
rows = {r["run"]: r for r in map(json.loads, open(tmp + "/results.jsonl"))}
log = open(tmp + "/purge.log").read()
def t(line_re):
    m = re.search(r"^(\S+)Z colod \S+\s+.*" + line_re, log, re.M)
    return datetime.datetime.fromisoformat(m.group(1)) if m else None
t0, t1 = t("listening on"), t("that ended more than job_retention ago")
done = re.search(r"deleted (\d+) jobs that ended", log)
purge_s = (t1 - t0).total_seconds() if t0 and t1 else float("nan")
deleted = int(done.group(1)) if done else 0
res = {"deleted": deleted, "purge_s": round(purge_s, 2), "jobs_per_s": round(deleted / purge_s),
       "jobs_left": int(left_rows), "log_dirs_left": int(left_dirs)}
print(json.dumps(res))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
ref, pur = rows["reference"], rows["purging"]
with open(out, "w") as f:
    f.write("# bench/control_plane/purge.sh\n\n")
    f.write("Measured %s on %s cores (%s), colod Release build. colod holds 1,000 live jobs and "
            "a backlog of %s ended jobs, each with 4 events, an attempt of 2 ranks, 3 checkpoint "
            "records, 20 curve points and a 4 KiB rank log. GetJob load on the live jobs, %s "
            "client threads for %s s: first with no job_retention (reference), then, in the same "
            "run, with colod restarted with job_retention=1d (every ended job is 2 days old) "
            "while it deletes the backlog.\n\n" % (datetime.date.today(), nproc, cpu,
                                                   format(int(n), ","), threads, secs))
    f.write("Command: `bash bench/control_plane/purge.sh %s %s %s`\n\n" % (n, secs, threads))
    f.write("| run | GetJob/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |\n|---|---|---|---|---|---|---|\n")
    for name, r in (("reference", ref), ("purging", pur)):
        f.write("| %s | %.0f | %.3f | %.3f | %.3f | %.3f | %d |\n" % (
            name, r["rps"], r["p50_ms"], r["p99_ms"], r["p999_ms"], r["max_ms"], r["errors"]))
    f.write("\nPurging against the reference: %.2f× the GetJob rate, %.2f× its p99.\n\n" % (
        pur["rps"] / ref["rps"], pur["p99_ms"] / ref["p99_ms"]))
    f.write("The purge deleted %s jobs in %.1f s (%s jobs/s, from colod's start to its log line "
            "that the round ended), under that load; %s ended jobs and %s log directories were "
            "left.\n" % (format(deleted, ","), purge_s, format(res["jobs_per_s"], ","),
                         int(left_rows) - 1000, left_dirs))
print("wrote", out)
PY
