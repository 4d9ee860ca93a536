#!/usr/bin/env bash
# Two ranks on two "hosts": network namespaces joined by a veth pair, each rank bound to its own
# address, train together over TCP, and compute what one process with their global batch does.
# Needs root (ip netns); without it the test is skipped (exit 77) with the reason. The two
# namespaces share one kernel, which colo would otherwise use for shared memory: COLO_COMM_SHM=0
# makes them talk TCP as two machines do.
source "$(dirname "$0")/lib.sh"
CT="$COLO_BIN/colo-train"
PY=/usr/bin/python3
NS_A=colo-it-a-$$
NS_B=colo-it-b-$$
# addresses that exist only inside these namespaces
IP_A=192.168.213.1
IP_B=192.168.213.2
if ! ip netns add "$NS_A" 2>"$TMP/ns.err"; then
  echo "SKIP: cannot create network namespaces here: $(cat "$TMP/ns.err")"
  exit 77
fi
netns_cleanup() {
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  cleanup
}
trap netns_cleanup EXIT
ip netns add "$NS_B"
ip link add "va$$" netns "$NS_A" type veth peer name "vb$$" netns "$NS_B"
ip -n "$NS_A" addr add $IP_A/24 dev "va$$"
ip -n "$NS_B" addr add $IP_B/24 dev "vb$$"
for ns in "$NS_A" "$NS_B"; do
  ip -n "$ns" link set lo up
done
ip -n "$NS_A" link set "va$$" up
ip -n "$NS_B" link set "vb$$" up

TEXT="$COLO_SRC/../shared/data/tinyshakespeare.txt"
[ -f "$TEXT" ] || { TEXT="$TMP/text.txt"; $PY -c 'print("to be or not to be that is the question " * 3000)' >"$TEXT"; }
"$CT" prepare --input "$TEXT" --out "$TMP/data" >/dev/null
M=(--data-root "$TMP/data" --train-data train.bin --val-data val.bin --n-layer 2 --n-head 2
  --n-embd 64 --block-size 32 --steps 8 --eval-interval 4 --eval-batches 2 --quiet --threads 1
  --comm-timeout 10000)

# the reference: one process, global batch 8
"$CT" train "${M[@]}" --batch-size 8 --progress "$TMP/single.jsonl"

# rank 0 in host A (it serves the store there), rank 1 in host B
for r in 0 1; do
  ns=$NS_A ip=$IP_A
  [ $r = 1 ] && ns=$NS_B ip=$IP_B
  ip netns exec "$ns" env COLO_RANK=$r COLO_WORLD=2 COLO_STORE=$IP_A:29555 COLO_BIND=$ip \
    "$CT" train "${M[@]}" --batch-size 4 --dp 2 --progress "$TMP/mh$r.jsonl" 2>"$TMP/mh$r.err" &
  eval "PID$r=$!"
done
rc0=0 rc1=0
wait "$PID0" || rc0=$?
wait "$PID1" || rc1=$?
[ $rc0 = 0 ] && [ $rc1 = 0 ] || fail "ranks exited $rc0 and $rc1: $(cat "$TMP"/mh*.err)"
$PY - "$TMP/single.jsonl" "$TMP/mh0.jsonl" <<'PYEOF' || fail "the two-host run differs from one process"
import json, sys
L = lambda f: [(r["event"], r["step"], r.get("loss", r.get("val_loss"))) for r in map(json.loads, open(f)) if r["event"] in ("step", "eval")]
a, b = L(sys.argv[1]), L(sys.argv[2])
assert [x[:2] for x in a] == [x[:2] for x in b]
worst = max(abs(x[2] - y[2]) / abs(x[2]) for x, y in zip(a, b))
print("two hosts over veth: %d losses, worst rel diff from one process %.2e" % (len(a), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PYEOF
echo "integration_multihost: passed"
