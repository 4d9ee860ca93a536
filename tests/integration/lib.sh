# Helpers for integration tests: start the real colod on a free loopback port, run coloctl
# against it, clean up whatever happens. Source it; COLO_BIN points at build/bin.
set -euo pipefail
: "${COLO_BIN:?COLO_BIN must point at build/bin}"
COLOD="$COLO_BIN/colod"
COLOCTL="$COLO_BIN/coloctl"
TMP=$(mktemp -d /tmp/colo-it-XXXXXX)
COLOD_PID=""
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"

# Debian's python3 (what deploy/install-deps.sh installs: numpy, grpcio, torch), not whichever
# comes first on PATH: the tests call it in polling loops, and a python3 of a version manager
# (pyenv's, say) can take 0.4 s to start where Debian's takes 0.05 s, which on two cores slows
# the ranks under test by half
if [ -x /usr/bin/python3 ]; then
  python3() { /usr/bin/python3 "$@"; }
  export -f python3
fi

cleanup() {
  if [ -n "$COLOD_PID" ] && kill -0 "$COLOD_PID" 2>/dev/null; then
    kill -KILL "$COLOD_PID" 2>/dev/null || true
  fi
  jobs -p | xargs -r kill -KILL 2>/dev/null || true
  pkill -KILL -f "$TMP" 2>/dev/null || true # anything still running on this test's files
  [ -n "${COLO_KEEP_TMP:-}" ] || rm -rf "$TMP" # COLO_KEEP_TMP=1 keeps it, to look into
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [ -f "$TMP/colod.log" ]; then
    echo "--- colod log (last 30 lines) ---" >&2
    tail -30 "$TMP/colod.log" >&2
  fi
  exit 1
}

# valgrind_wrap ARRAY_NAME: with COLO_VALGRIND=1 (use a build without sanitizers), fills the
# array with a valgrind command line to put before a daemon's: any memory error or definite leak
# makes the daemon exit 99, which the tests report. Children (ranks) are not traced.
valgrind_wrap() {
  local -n _w=$1
  _w=()
  if [ "${COLO_VALGRIND:-0}" = 1 ]; then
    _w=(valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
      --log-file="$TMP/valgrind.%p.log")
  fi
}

# start_colod STATE_DIR [extra args...]: starts colod on 127.0.0.1:0, sets COLOD_PID and
# COLO_SERVER from the "colod listening on" line (and COLO_METRICS, the URL of its /metrics, when
# it serves one: --set metrics_listen=...).
start_colod() {
  local state=$1
  shift
  : >"$TMP/colod.out"
  local wrap=()
  valgrind_wrap wrap
  "${wrap[@]}" "$COLOD" --listen 127.0.0.1:0 --state-dir "$state" "$@" >"$TMP/colod.out" 2>>"$TMP/colod.log" &
  COLOD_PID=$!
  for _ in $(seq 1 300); do
    if grep -q "colod listening on" "$TMP/colod.out" 2>/dev/null; then
      COLO_SERVER=$(sed -n 's/^colod listening on //p' "$TMP/colod.out" | head -1)
      COLO_METRICS=$(sed -n 's/^colod metrics on //p' "$TMP/colod.out" | head -1)
      export COLO_SERVER
      return 0
    fi
    kill -0 "$COLOD_PID" 2>/dev/null || fail "colod exited during start-up"
    sleep 0.1
  done
  fail "colod did not start within 30 s"
}

# stop_colod: SIGTERM, expect exit 0 within 15 s
stop_colod() {
  kill -TERM "$COLOD_PID"
  local rc=0
  for _ in $(seq 1 150); do
    kill -0 "$COLOD_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$COLOD_PID" 2>/dev/null && fail "colod did not exit within 15 s of SIGTERM"
  wait "$COLOD_PID" || rc=$?
  if [ "$rc" -ne 0 ]; then
    cat "$TMP"/valgrind.*.log >&2 2>/dev/null || true
    fail "colod exited $rc after SIGTERM"
  fi
  COLOD_PID=""
}

# expect_rc WANT CMD...: runs CMD, captures stdout/stderr in $OUT/$ERR, checks the exit code
expect_rc() {
  local want=$1
  shift
  local rc=0
  "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
  [ "$rc" -eq "$want" ] || fail "'$*' exited $rc, expected $want; stdout: $OUT; stderr: $ERR"
}

expect_eq() {
  [ "$1" = "$2" ] || fail "expected [$2], got [$1] ${3:-}"
}

expect_contains() {
  case "$1" in
  *"$2"*) ;;
  *) fail "expected output to contain [$2], got [$1]" ;;
  esac
}

db_count() {
  sqlite3 "$1/colod.db" "SELECT count(*) FROM jobs"
}

# training_text: sets TEXT to the real text where this checkout has it (../shared/data, or the
# quick start's copy), else to a generated one in $TMP
training_text() {
  TEXT="$COLO_SRC/../shared/data/tinyshakespeare.txt"
  [ -f "$TEXT" ] || TEXT="$COLO_SRC/.colo-quickstart/data/tinyshakespeare.txt"
  if [ ! -f "$TEXT" ]; then
    TEXT="$TMP/text.txt"
    python3 -c 'import random; random.seed(3); w=["the","king","and","queen","of","night","shall","speak","to","my","lord","good"]; print("\n".join(" ".join(random.choice(w) for _ in range(12)) for _ in range(20000)))' >"$TEXT"
  fi
}

# ---- jobs ----
jf() { # job id, python expression over the job object j
  "$COLOCTL" status "$1" --json | python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"
}
# Each try starts coloctl (and often python3): 0.1-0.2 s of CPU under ASan, which on CI's two
# cores is taken from the ranks under test. So the pause between tries grows from 0.1 s to
# POLL_MAX (0.5 s); a wait whose length is a figure sets POLL_MAX=0.1.
wait_until() { # seconds (of wall time, however slow each try), description, command...
  local secs=$1 what=$2 pause=1 max=${POLL_MAX:-0.5}
  shift 2
  local end=$((SECONDS + secs))
  max=${max#0.}
  while :; do
    "$@" && return 0
    [ "$SECONDS" -lt "$end" ] || break
    sleep "0.$pause"
    [ "$pause" -ge "$max" ] || pause=$((pause + 1))
  done
  fail "$what did not happen within $secs s; worker log: $(tail -20 "$TMP/worker.log" 2>/dev/null)"
}
is_state() { [ "$(jf "$1" 'j["state"]')" = "$2" ]; }
# a complete checkpoint of job $1 at step $2 or later under $TMP/ckpt (the workers'
# checkpoint root): seen at once, where colod hears of it with the next heartbeat (a build
# without sanitizers can nearly finish a job in between)
ckpt_on_disk() {
  local d
  for d in "$TMP/ckpt/job-$1"/step_*; do
    [ -f "$d/manifest.json" ] && [ "$((10#${d##*step_}))" -ge "$2" ] && return 0
  done
  return 1
}
