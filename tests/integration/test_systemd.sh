#!/usr/bin/env bash
# The systemd units pass systemd-analyze verify with no complaint at all (it exits 0 on some
# warnings, so any output fails the test), and colod speaks sd_notify: READY=1 once listening,
# WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM.
source "$(dirname "$0")/lib.sh"
command -v systemd-analyze >/dev/null || fail "systemd-analyze is missing (deploy/install-deps.sh installs systemd)"

# the units name installed paths; point them at this build
for unit in colod colo-workerd; do
  sed "s|/usr/local/bin/|$COLO_BIN/|g" "$COLO_SRC/deploy/$unit.service" >"$TMP/$unit.service"
  out=$(systemd-analyze verify "$TMP/$unit.service" 2>&1) || fail "verify $unit: $out"
  [ -z "$out" ] || fail "systemd-analyze verify $unit.service complained: $out"
  grep -q '^Type=notify$' "$TMP/$unit.service" || fail "$unit is not Type=notify"
  grep -q '^WatchdogSec=' "$TMP/$unit.service" || fail "$unit has no WatchdogSec"
  grep -q '^Restart=on-failure$' "$TMP/$unit.service" || fail "$unit has no Restart=on-failure"
  grep -q '^User=colo$' "$TMP/$unit.service" || fail "$unit has no dedicated user"
  grep -q '^StateDirectory=' "$TMP/$unit.service" || fail "$unit has no StateDirectory"
done
# the example config is one colod accepts
"$COLOD" -c "$COLO_SRC/deploy/colod.yaml" --print-config >/dev/null || fail "deploy/colod.yaml rejected"

# sd_notify over a real notification socket
/usr/bin/python3 - "$COLOD" "$TMP" <<'PY' || fail "sd_notify check failed"
import os, signal, socket, subprocess, sys, time
colod, tmp = sys.argv[1], sys.argv[2]
path = os.path.join(tmp, "notify.sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(0.2)
env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
p = subprocess.Popen([colod, "--listen", "127.0.0.1:0", "--state-dir", os.path.join(tmp, "st")],
                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
msgs = []
def pump(seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            msgs.append(s.recv(4096).decode())
        except socket.timeout:
            pass
pump(1.5)
ready = [m for m in msgs if "READY=1" in m]
dogs = [m for m in msgs if m.strip() == "WATCHDOG=1"]
p.send_signal(signal.SIGTERM)
pump(1.0)
rc = p.wait(timeout=10)
stopping = [m for m in msgs if "STOPPING=1" in m]
print("notify messages:", msgs)
assert len(ready) == 1 and "STATUS=listening on 127.0.0.1:" in ready[0], ready
assert len(dogs) >= 3, "expected a WATCHDOG=1 every 200 ms, got %d in 1.5 s" % len(dogs)
assert len(stopping) == 1, stopping
assert rc == 0, rc
print("READY=1 once, %d WATCHDOG=1 in 1.5 s, STOPPING=1 on SIGTERM, exit 0" % len(dogs))
PY
echo "integration_systemd: units verify clean; sd_notify READY, WATCHDOG and STOPPING seen"
