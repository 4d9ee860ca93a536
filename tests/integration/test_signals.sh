#!/usr/bin/env bash
# SIGHUP reloads what can change at run time and keeps the running config on a bad file;
# SIGTERM ends open watch streams, drains and exits 0.
source "$(dirname "$0")/lib.sh"
EX="$COLO_SRC/examples/tinyshakespeare.yaml"
CONF="$TMP/colod.yaml"
printf 'host_timeout: 10s\nlog_level: info\n' >"$CONF"
start_colod "$TMP/state" -c "$CONF"

wait_log() { # text
  for _ in $(seq 1 50); do grep -qF "$1" "$TMP/colod.log" && return 0; sleep 0.1; done
  fail "colod log never said: $1"
}

printf 'host_timeout: 3s\nlog_level: info\nmax_message_kib: 8\n' >"$CONF"
kill -HUP "$COLOD_PID"
wait_log "reloaded host_timeout = 3s"
wait_log "max_message_kib changed to 8; restart colod to apply it"
wait_log "settings changed"

printf 'host_timeout: never\n' >"$CONF"
kill -HUP "$COLOD_PID"
wait_log "reload failed, keeping the running config: $CONF:1: host_timeout \"never\" is not a duration"
kill -0 "$COLOD_PID" || fail "colod died on a bad reload"
expect_rc 0 "$COLOCTL" status

# SIGTERM with a watch open: the watcher is told, colod exits 0
expect_rc 0 "$COLOCTL" submit "$EX"
"$COLOCTL" watch "$OUT" >"$TMP/watch.out" 2>"$TMP/watch.err" &
WATCH=$!
for _ in $(seq 1 50); do grep -q PENDING "$TMP/watch.out" 2>/dev/null && break; sleep 0.1; done
start=$(date +%s%N)
stop_colod
ms=$((($(date +%s%N) - start) / 1000000))
rc=0
wait $WATCH || rc=$?
expect_eq "$rc" "1"
expect_eq "$(cat "$TMP/watch.err")" "coloctl: cannot reach the coordinator at $COLO_SERVER: colod is shutting down"
wait_log "SIGTERM: draining"
wait_log "stopped"
echo "integration_signals: reload applied 1 setting and refused 1; SIGTERM with an open watch exited 0 in ${ms} ms"
