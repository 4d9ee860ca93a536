#!/usr/bin/env bash
# A cluster of three hosts on one machine: colod and two colo-workerd, each in its own network
# namespace, joined by a bridge. A 4-rank job (dp=2 x tp=2) is placed with each tensor-parallel
# group inside one host, trains to completion on tinyshakespeare over TCP between the hosts, and
# its final loss matches the same job run standalone with `colo-train --nproc 4`.
# Needs root (ip netns); without it the test is skipped (exit 77) with the reason.
source "$(dirname "$0")/lib.sh"
CT="$COLO_BIN/colo-train"
WD="$COLO_BIN/colo-workerd"
TAG=$$
NS_BR=colo-br-$TAG NS_C=colo-c-$TAG NS_A=colo-a-$TAG NS_B=colo-b-$TAG
IP_C=192.168.214.1 IP_A=192.168.214.2 IP_B=192.168.214.3
if ! ip netns add "$NS_BR" 2>"$TMP/ns.err"; then
  echo "SKIP: cannot create network namespaces here: $(cat "$TMP/ns.err")"
  exit 77
fi
netns_cleanup() {
  for ns in "$NS_C" "$NS_A" "$NS_B"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip netns del "$NS_BR" 2>/dev/null || true
  cleanup
}
trap netns_cleanup EXIT
ip -n "$NS_BR" link add br0 type bridge
ip -n "$NS_BR" link set br0 up
for h in C A B; do
  eval "ns=\$NS_$h ip=\$IP_$h"
  ip netns add "$ns"
  ip link add "v$h$TAG" netns "$ns" type veth peer name "p$h$TAG" netns "$NS_BR"
  ip -n "$NS_BR" link set "p$h$TAG" master br0 up
  ip -n "$ns" addr add "$ip/24" dev "v$h$TAG"
  ip -n "$ns" link set "v$h$TAG" up
  ip -n "$ns" link set lo up
done

TEXT="$COLO_SRC/../shared/data/tinyshakespeare.txt"
[ -f "$TEXT" ] || fail "no training text at $TEXT"
mkdir -p "$TMP/data" "$TMP/ckpt" # one filesystem: the cluster's shared storage
"$CT" prepare --input "$TEXT" --out "$TMP/data/ts" >/dev/null
STEPS=300
cat >"$TMP/job.yaml" <<EOF
name: dp2-tp2
model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin, val_path: ts/val.bin}
parallel: {dp: 2, tp: 2}
train: {steps: $STEPS, batch_size: 4, eval_interval: 100, eval_batches: 2}
checkpoint: {interval: 100, export_format: gguf, export_type: f32}
resources: {device: cpu, devices_per_node: 2}
EOF
# the reference: the same job, standalone, one process per rank
"$CT" train --job "$TMP/job.yaml" --data-root "$TMP/data" --nproc 4 >"$TMP/ref.txt" 2>&1 ||
  fail "standalone run failed: $(tail -5 "$TMP/ref.txt")"
loss_of() { grep -E "^step +$STEPS/$STEPS " | sed 's/.*| loss \([0-9.]*\) |.*/\1/'; }
REF=$(loss_of <"$TMP/ref.txt")

# colod on host C
ip netns exec "$NS_C" "$COLOD" --listen "$IP_C:7070" --state-dir "$TMP/state" \
  >"$TMP/colod.out" 2>"$TMP/colod.log" &
COLOD_PID=$!
for _ in $(seq 1 100); do grep -q listening "$TMP/colod.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$TMP/colod.out" || fail "colod did not start"
ctl() { ip netns exec "$NS_C" "$COLOCTL" --server "$IP_C:7070" "$@"; }
# a worker on each of hosts A and B; the hosts share a kernel, so ranks talk TCP (no shm)
for h in A B; do
  eval "ns=\$NS_$h ip=\$IP_$h"
  ip netns exec "$ns" env COLO_COMM_SHM=0 "$WD" --coordinator "$IP_C:7070" --name "host-$h" \
    --address "$ip" --devices cpu --cpu-slots 2 --run-dir "$TMP/run-$h" --data-root "$TMP/data" \
    --checkpoint-root "$TMP/ckpt" --colo-train "$CT" >"$TMP/worker-$h.log" 2>&1 &
done
for _ in $(seq 1 100); do [ "$(ctl hosts | grep -c ' UP ')" = 2 ] && break; sleep 0.1; done
[ "$(ctl hosts | grep -c ' UP ')" = 2 ] || fail "the workers did not register: $(ctl hosts)"

J=$(ctl submit "$TMP/job.yaml")
for _ in $(seq 1 1200); do
  st=$(ctl status "$J" --json | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
  case $st in succeeded | failed | cancelled) break ;; esac
  sleep 0.1
done
[ "$st" = succeeded ] || fail "job $J ended $st: $(ctl status "$J"); $(tail -n 20 "$TMP"/worker-*.log)"
# placement: each tensor-parallel group (ranks 0-1, 2-3) on one host, the two groups apart
for r in 0 1 2 3; do
  eval "H$r=$(grep -l "job $J attempt 1 rank $r/4 started" "$TMP"/worker-*.log | sed 's/.*worker-\(.\).log/\1/')"
done
[ "$H0" = "$H1" ] && [ "$H2" = "$H3" ] && [ "$H0" != "$H2" ] ||
  fail "ranks placed on hosts $H0 $H1 $H2 $H3: a tensor-parallel group is split"
GOT=$(ctl logs "$J" | loss_of)
[ -n "$GOT" ] && [ -n "$REF" ] || fail "no final loss (cluster [$GOT], standalone [$REF])"
/usr/bin/python3 - "$GOT" "$REF" <<'EOF' || fail "final loss $GOT differs from standalone $REF"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
rel = abs(a - b) / abs(b)
print("figure: dp=2 x tp=2 over two hosts: final loss %s, standalone --nproc 4 %s, rel diff %.1e" % (sys.argv[1], sys.argv[2], rel))
sys.exit(0 if rel <= 1e-6 else 1)
EOF
echo "figure: ranks 0,1 on host $H0 and ranks 2,3 on host $H2; $(ctl checkpoints "$J" | tail -n +2 | wc -l) checkpoints"
# checkpoint.export_format: rank 0 wrote the last checkpoint as GGUF beside the checkpoints
GGUF="$TMP/ckpt/job-$J/model.gguf"
[ "$(head -c 4 "$GGUF" 2>/dev/null)" = GGUF ] || fail "no GGUF file at $GGUF: $(ls "$TMP/ckpt/job-$J")"
expect_contains "$(ctl logs "$J" --rank 0)" "exported $TMP/ckpt/job-$J/$(printf step_%08d $STEPS) as $GGUF"
echo "figure: the job exported $(stat -c %s "$GGUF") bytes of GGUF"
# the workers remove the job's run directories once its ranks ended and their logs reached colod
for _ in $(seq 1 50); do
  [ ! -e "$TMP/run-A/job-$J" ] && [ ! -e "$TMP/run-B/job-$J" ] && break
  sleep 0.1
done
[ ! -e "$TMP/run-A/job-$J" ] && [ ! -e "$TMP/run-B/job-$J" ] ||
  fail "run directories left behind: $(ls -R "$TMP"/run-*/job-* 2>&1 | head)"
echo "PASS"
