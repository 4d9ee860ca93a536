#!/usr/bin/env bash
# The quick start: install dependencies, build, start a local coordinator and a worker with two
# CPU slots, submit a 2-rank data-parallel job on tinyshakespeare, show its live status, and
# print a sample of generated text when it ends.
#   bash deploy/quickstart.sh        start (or reuse) the local coordinator and worker, run a job
#   bash deploy/quickstart.sh stop   stop them
# COLO_QUICKSTART_STEPS sets the job's steps (default 600, about a minute on two cores).
# Everything it writes stays under .colo-quickstart/ in this checkout.
set -euo pipefail
case "${1:-}" in
"" | stop) ;;
-h | --help)
  sed -n '2,8s/^# \{0,1\}//p' "$0"
  exit 0
  ;;
*)
  echo "quickstart: unknown argument '$1' (none: start; stop: stop them; --help)" >&2
  exit 2
  ;;
esac
SRC=$(cd "$(dirname "$0")/.." && pwd)
QS="$SRC/.colo-quickstart"
PORT=${COLO_QUICKSTART_PORT:-7070}
STEPS=${COLO_QUICKSTART_STEPS:-600}
export COLO_SERVER="127.0.0.1:$PORT"
mkdir -p "$QS"

if [ "${1:-}" = "stop" ]; then
  for d in workerd colod; do
    if [ -f "$QS/$d.pid" ] && kill -0 "$(cat "$QS/$d.pid")" 2>/dev/null; then
      kill -TERM "$(cat "$QS/$d.pid")"
      echo "quickstart: $d stopped"
    else
      echo "quickstart: $d is not running"
    fi
    rm -f "$QS/$d.pid"
  done
  exit 0
fi

echo "== 1/6 dependencies"
bash "$SRC/deploy/install-deps.sh"
echo "== 2/6 build"
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLO_SANITIZE=OFF >/dev/null
cmake --build "$SRC/build" -j"$(nproc)" >/dev/null
BIN="$SRC/build/bin"
echo "== 3/6 data"
if ! bash "$SRC/deploy/fetch-data.sh" "$QS/data"; then
  echo "quickstart: cannot get tinyshakespeare.txt (see deploy/fetch-data.sh); the job needs it" >&2
  exit 1
fi
if [ ! -f "$QS/data/tinyshakespeare/val.bin" ]; then
  "$BIN/colo-train" prepare --input "$QS/data/tinyshakespeare.txt" --out "$QS/data/tinyshakespeare"
fi
echo "== 4/6 coordinator and worker"
if [ -f "$QS/colod.pid" ] && kill -0 "$(cat "$QS/colod.pid")" 2>/dev/null; then
  echo "quickstart: colod already running (pid $(cat "$QS/colod.pid")) on $COLO_SERVER"
else
  nohup "$BIN/colod" --listen "$COLO_SERVER" --state-dir "$QS/state" \
    --set metrics_listen=127.0.0.1:0 >"$QS/colod.out" 2>"$QS/colod.log" &
  echo $! >"$QS/colod.pid"
  for _ in $(seq 1 50); do
    grep -q "listening" "$QS/colod.out" 2>/dev/null && break
    if ! kill -0 "$(cat "$QS/colod.pid")" 2>/dev/null; then
      echo "quickstart: colod failed to start:" >&2
      cat "$QS/colod.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "quickstart: colod (pid $(cat "$QS/colod.pid")) listening on $COLO_SERVER, log in $QS/colod.log"
fi
METRICS=$(sed -n 's/^colod metrics on //p' "$QS/colod.out" 2>/dev/null | head -1)
if [ -f "$QS/workerd.pid" ] && kill -0 "$(cat "$QS/workerd.pid")" 2>/dev/null; then
  echo "quickstart: colo-workerd already running (pid $(cat "$QS/workerd.pid"))"
else
  nohup "$BIN/colo-workerd" --coordinator "$COLO_SERVER" --name quickstart-node --devices cpu --cpu-slots 2 \
    --run-dir "$QS/run" --data-root "$QS/data" --checkpoint-root "$QS/ckpt" \
    --colo-train "$BIN/colo-train" >"$QS/workerd.log" 2>&1 &
  echo $! >"$QS/workerd.pid"
  for _ in $(seq 1 50); do grep -q "registered" "$QS/workerd.log" 2>/dev/null && break; sleep 0.1; done
  echo "quickstart: colo-workerd (pid $(cat "$QS/workerd.pid")) registered this node with 2 CPU slots"
fi
"$BIN/coloctl" hosts
echo "== 5/6 submit a 2-rank data-parallel job ($STEPS steps)"
ID=$("$BIN/coloctl" submit "$SRC/examples/tinyshakespeare.yaml" --set "train.steps=$STEPS" \
  --set optimizer.warmup_steps=$((STEPS / 10)) --set train.eval_interval=$((STEPS / 3)) \
  --set checkpoint.interval=$((STEPS / 3)))
echo "quickstart: submitted job $ID"
echo "== 6/6 its live status, until it ends"
if [ -t 1 ]; then
  "$BIN/coloctl" status "$ID" --watch --interval 1000
else
  "$BIN/coloctl" watch "$ID" || true # exit 3 when it did not succeed: said below
fi
"$BIN/coloctl" status "$ID"
STATE=$("$BIN/coloctl" status "$ID" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
if [ "$STATE" != succeeded ]; then
  echo "quickstart: job $ID ended $STATE; its log: coloctl logs $ID (COLO_SERVER=$COLO_SERVER)" >&2
  exit 1
fi
echo "-- its training curve, as colod sampled it:"
"$BIN/coloctl" history "$ID" --rows 6
echo "-- the last lines of rank 0's log:"
"$BIN/coloctl" logs "$ID" | tail -4
echo "-- a sample from its last checkpoint:"
"$BIN/colo-train" sample --checkpoint "$QS/ckpt/job-$ID/$(printf 'step_%08d' "$STEPS")" --tokens 200 \
  --top-k 40 --temperature 0.8 --prompt "ROMEO:"
cat <<MSG

Job $ID trained on this machine's two CPU slots, placed by colod and run by colo-workerd. Try:
  export COLO_SERVER=$COLO_SERVER
  $BIN/coloctl status                     # the cluster and its jobs
  $BIN/coloctl checkpoints $ID             # its complete checkpoints
  $BIN/coloctl history $ID                 # its loss curve
  $BIN/coloctl logs $ID --rank 1           # a rank's output
  curl -s ${METRICS:-http://127.0.0.1:PORT/metrics} | grep '^colo_'   # Prometheus metrics
  $BIN/coloctl submit examples/tinyshakespeare.yaml      # the full 2000 steps
  $BIN/coloctl logs <JOB> -f                # in one terminal, and in another:
  $BIN/coloctl cancel <JOB>
  $BIN/colo-train export --checkpoint $QS/ckpt/job-$ID --out shakespeare.gguf   # for llama.cpp
  bash deploy/quickstart.sh stop
MSG
