#!/usr/bin/env bash
# Mutual TLS end to end, with certificates from deploy/tls-certs.sh: colod asks every caller for
# a certificate from the cluster CA; a worker with one registers, and its 2-rank job trains to
# the end, the ranks meeting through colod's rendezvous store over TLS; coloctl with one (flags
# or COLO_TLS_*) is answered. Refused: coloctl and a worker without a certificate, one from
# another CA, a wrong server name. Roles (the certificate's OU): a user may not cordon, an admin
# may; a worker's certificate may not submit, nor register under another name; a user's may not
# register a host; a certificate without a role is refused; a job belongs to the user who
# submitted it: another user may not cancel or resume it, nor read its logs; an admin may. A
# certificate rotated at its path is read again on SIGHUP. Bad TLS settings stop colod with an exact message.
source "$(dirname "$0")/lib.sh"
WD="$COLO_BIN/colo-workerd"
TRAIN="$COLO_BIN/colo-train"
CERTS="$TMP/certs"
CA="$CERTS/ca.crt"
DATA_SRC="$COLO_SRC/../shared/data/tinyshakespeare.txt"
[ -f "$DATA_SRC" ] || fail "no training text at $DATA_SRC"

# ---- certificates: the cluster's CA, colod's, one for the worker and one for a user; and a
# second CA with a certificate that must not pass ----
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" ca "$CERTS"
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" server "$CERTS" colod DNS:localhost IP:127.0.0.1
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" worker "$CERTS" w1
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" user "$CERTS" alice
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" admin "$CERTS" bob
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" user "$CERTS" carol
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" ca "$TMP/other"
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" admin "$TMP/other" mallory
expect_eq "$(stat -c %a "$CERTS/w1.key")" "600" "(a key's mode)"
expect_rc 1 bash "$COLO_SRC/deploy/tls-certs.sh" user "$CERTS" w1
expect_contains "$ERR" "w1.crt exists already; not overwritten"
expect_contains "$(openssl x509 -in "$CERTS/w1.crt" -noout -subject)" "OU = worker"
# one from the CA without a role, as another tool would make it
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$TMP/norole.key" 2>/dev/null
openssl req -new -key "$TMP/norole.key" -subj "/CN=norole" 2>/dev/null |
  openssl x509 -req -CA "$CA" -CAkey "$CERTS/ca.key" -CAcreateserial -days 1 -out "$TMP/norole.crt" 2>/dev/null

# ---- bad settings: exit 2 (or 1 for a file that cannot be read), with the reason ----
expect_rc 2 "$COLOD" --state-dir "$TMP/bad" --set "tls_cert=$CERTS/colod.crt"
expect_eq "$ERR" "colod: tls_cert and tls_key go together: tls_cert is set without tls_key"
expect_rc 2 "$COLOD" --state-dir "$TMP/bad" --set "tls_client_ca=$CA"
expect_eq "$ERR" "colod: tls_client_ca needs tls_cert and tls_key: client certificates are asked for only over TLS"
expect_rc 1 "$COLOD" --listen 127.0.0.1:0 --state-dir "$TMP/bad" --set "tls_cert=$TMP/none.crt" \
  --set "tls_key=$CERTS/colod.key"
expect_contains "$ERR" "cannot read the TLS certificate $TMP/none.crt: No such file or directory"
expect_rc 1 "$COLOD" --listen 127.0.0.1:0 --state-dir "$TMP/bad" --set "tls_cert=$CERTS/colod.crt" \
  --set "tls_key=$CERTS/w1.key"
expect_contains "$ERR" "the TLS key $CERTS/w1.key is not the key of the certificate $CERTS/colod.crt"
expect_rc 1 "$COLOD" --listen 127.0.0.1:0 --state-dir "$TMP/bad" --set "tls_cert=$CERTS/ca.key" \
  --set "tls_key=$CERTS/colod.key"
expect_contains "$ERR" "the TLS certificate $CERTS/ca.key holds no certificate"

start_colod "$TMP/state" --set "tls_cert=$CERTS/colod.crt" --set "tls_key=$CERTS/colod.key" \
  --set "tls_client_ca=$CA" --set host_timeout=3s
expect_contains "$(cat "$TMP/colod.log")" "with mutual TLS (callers need a certificate)"

# ---- coloctl ----
TLS_ALICE=(--tls-ca "$CA" --tls-cert "$CERTS/alice.crt" --tls-key "$CERTS/alice.key")
expect_rc 0 "$COLOCTL" "${TLS_ALICE[@]}" hosts
expect_eq "$OUT" "no hosts have registered"
expect_rc 1 "$COLOCTL" -t 3000 hosts
expect_contains "$ERR" "cannot reach the coordinator at $COLO_SERVER"
expect_contains "$ERR" "(if colod uses TLS: --tls-ca, and --tls-cert and --tls-key where it asks for a certificate"
expect_rc 1 "$COLOCTL" -t 3000 --tls-ca "$CA" hosts
expect_contains "$ERR" "(if colod asks for a certificate: --tls-cert and --tls-key"
expect_rc 1 "$COLOCTL" -t 3000 --tls-ca "$CA" --tls-cert "$TMP/other/mallory.crt" \
  --tls-key "$TMP/other/mallory.key" hosts
expect_rc 1 "$COLOCTL" -t 3000 "${TLS_ALICE[@]}" --tls-server-name colod.example hosts
expect_contains "$ERR" "Peer name colod.example is not in peer certificate"
expect_rc 0 "$COLOCTL" "${TLS_ALICE[@]}" --tls-server-name localhost hosts
expect_rc 1 "$COLOCTL" --tls-cert "$CERTS/alice.crt" hosts
expect_eq "$ERR" "coloctl: a TLS certificate and its key go together: the certificate is set without the key"
expect_rc 1 "$COLOCTL" --tls-ca "$TMP/nothing.pem" hosts
expect_eq "$ERR" "coloctl: cannot read the TLS CA certificate $TMP/nothing.pem: No such file or directory"
echo "not a certificate" >"$TMP/not.pem"
expect_rc 1 "$COLOCTL" --tls-ca "$TMP/not.pem" hosts
expect_eq "$ERR" "coloctl: the TLS CA certificate $TMP/not.pem is not a PEM file"
expect_rc 1 "$COLOCTL" --tls-ca "$DATA_SRC" hosts
expect_eq "$ERR" "coloctl: the TLS CA certificate $DATA_SRC is larger than 1 MiB"
# roles
expect_rc 1 "$COLOCTL" "${TLS_ALICE[@]}" cordon w1
expect_eq "$ERR" 'coloctl: PERMISSION_DENIED: certificate "alice" (user) may not call CordonHost: it needs an admin'"'"'s certificate'
expect_rc 1 "$COLOCTL" --tls-ca "$CA" --tls-cert "$CERTS/w1.crt" --tls-key "$CERTS/w1.key" hosts
expect_eq "$ERR" 'coloctl: PERMISSION_DENIED: certificate "w1" (worker) may not call ListHosts: it needs a user'"'"'s or an admin'"'"'s certificate'
expect_rc 1 "$COLOCTL" --tls-ca "$CA" --tls-cert "$TMP/norole.crt" --tls-key "$TMP/norole.key" hosts
expect_eq "$ERR" 'coloctl: PERMISSION_DENIED: certificate "norole" has no colo role: its OU must be user, admin or worker (deploy/tls-certs.sh)'
# the environment, as a user would set it once
export COLO_TLS_CA="$CA" COLO_TLS_CERT="$CERTS/alice.crt" COLO_TLS_KEY="$CERTS/alice.key"

# ---- workers: one without a certificate is refused, one with the CA's registers ----
mkdir -p "$TMP/data" "$TMP/ckpt"
"$TRAIN" prepare --input "$DATA_SRC" --out "$TMP/data/ts" >/dev/null
WARGS=(--coordinator "$COLO_SERVER" --devices cpu --cpu-slots 2 --data-root "$TMP/data"
  --checkpoint-root "$TMP/ckpt" --colo-train "$TRAIN")
env -u COLO_TLS_CA -u COLO_TLS_CERT -u COLO_TLS_KEY "$WD" "${WARGS[@]}" --name w0 \
  --run-dir "$TMP/run0" --tls-ca "$CA" >"$TMP/worker0.log" 2>&1 &
W0PID=$!
# w1's certificate under another name, and a user's certificate on a worker
"$WD" "${WARGS[@]}" --name w2 --run-dir "$TMP/run2" --tls-ca "$CA" --tls-cert "$CERTS/w1.crt" \
  --tls-key "$CERTS/w1.key" >"$TMP/worker2.log" 2>&1 &
W2PID=$!
"$WD" "${WARGS[@]}" --name alice --run-dir "$TMP/run3" --tls-ca "$CA" \
  --tls-cert "$CERTS/alice.crt" --tls-key "$CERTS/alice.key" >"$TMP/worker3.log" 2>&1 &
W3PID=$!
vg=()
valgrind_wrap vg
"${vg[@]}" "$WD" "${WARGS[@]}" --name w1 --run-dir "$TMP/run" --tls-ca "$CA" \
  --tls-cert "$CERTS/w1.crt" --tls-key "$CERTS/w1.key" >"$TMP/worker.log" 2>&1 &
WPID=$!
up() { "$COLOCTL" hosts --json | python3 -c 'import json,sys; sys.exit(not [h for h in json.load(sys.stdin) if h["name"] == "w1" and h["state"] == "up"])'; }
for _ in $(seq 1 300); do up && break; sleep 0.1; done
up || fail "w1 did not register over TLS: $(cat "$TMP/worker.log")"
sleep 2 # w0 has tried for 2 s more
expect_eq "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print(" ".join(h["name"] for h in json.load(sys.stdin)))')" "w1" "(hosts: w0 has no certificate, w2 and alice the wrong one)"
# its WatchHost stream runs over mutual TLS too
expect_eq "$("$COLOCTL" hosts --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0].get("watching"))')" "True" "(w1's stream: $(grep -i nudge "$TMP/worker.log"))"
expect_contains "$(cat "$TMP/worker0.log")" "cannot register with $COLO_SERVER: UNAVAILABLE"
expect_contains "$(cat "$TMP/worker2.log")" 'PERMISSION_DENIED: worker certificate "w1" may register only host "w1"'
expect_contains "$(cat "$TMP/worker3.log")" 'PERMISSION_DENIED: certificate "alice" (user) may not call RegisterHost: it needs a worker'"'"'s certificate'
kill -TERM "$W0PID" "$W2PID" "$W3PID"
wait "$W0PID" "$W2PID" "$W3PID" || true
# an admin cordons and uncordons
expect_rc 0 "$COLOCTL" --tls-cert "$CERTS/bob.crt" --tls-key "$CERTS/bob.key" cordon w1
expect_rc 0 "$COLOCTL" --tls-cert "$CERTS/bob.crt" --tls-key "$CERTS/bob.key" uncordon w1

# ---- a 2-rank job: the ranks meet through colod's rendezvous store, over TLS ----
cat >"$TMP/job.yaml" <<EOF
name: tls
model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, vocab_size: 256}
data: {train_path: ts/train.bin, val_path: ts/val.bin}
parallel: {dp: 2}
train: {steps: 60, batch_size: 4, eval_interval: 30, eval_batches: 2}
checkpoint: {interval: 30}
resources: {device: cpu}
EOF
expect_rc 0 "$COLOCTL" submit "$TMP/job.yaml"
J=$OUT
# a job belongs to who submitted it (alice): carol may read it, not cancel it
TLS_CAROL=(--tls-cert "$CERTS/carol.crt" --tls-key "$CERTS/carol.key")
expect_rc 0 "$COLOCTL" "${TLS_CAROL[@]}" status "$J"
expect_contains "$OUT" "owner      alice"
expect_rc 1 "$COLOCTL" "${TLS_CAROL[@]}" cancel "$J"
expect_eq "$ERR" "coloctl: PERMISSION_DENIED: job $J belongs to \"alice\"; only its owner or an admin may cancel it"
# an admin may: bob cancels a job of carol's, and resumes it; carol may not resume alice's
expect_rc 0 "$COLOCTL" "${TLS_CAROL[@]}" submit "$TMP/job.yaml" --set train.steps=100000
K=$OUT
expect_rc 0 "$COLOCTL" --tls-cert "$CERTS/bob.crt" --tls-key "$CERTS/bob.key" cancel "$K"
expect_rc 1 "$COLOCTL" resume "$K"
expect_eq "$ERR" "coloctl: PERMISSION_DENIED: job $K belongs to \"carol\"; only its owner or an admin may resume it"
expect_rc 0 "$COLOCTL" --tls-cert "$CERTS/bob.crt" --tls-key "$CERTS/bob.key" resume "$K"
expect_rc 0 "$COLOCTL" "${TLS_CAROL[@]}" cancel "$K"
state() { "$COLOCTL" status "$J" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
for _ in $(seq 1 600); do
  case "$(state)" in succeeded | failed | cancelled) break ;; esac
  sleep 0.1
done
[ "$(state)" = succeeded ] || fail "job $J is $(state): $("$COLOCTL" status "$J"); worker: $(tail -20 "$TMP/worker.log")"
LAST=$("$COLOCTL" logs "$J" | grep -E "^step +60/60 ")
[ -n "$LAST" ] || fail "no step 60 in job $J's log"
# logs are private (logs_private): carol may not read alice's, bob (an admin) may
expect_rc 1 "$COLOCTL" "${TLS_CAROL[@]}" logs "$J"
expect_eq "$ERR" "coloctl: PERMISSION_DENIED: job $J belongs to \"alice\"; only its owner or an admin may read its logs"
expect_rc 0 "$COLOCTL" --tls-cert "$CERTS/bob.crt" --tls-key "$CERTS/bob.key" logs "$J"
expect_contains "$OUT" "$LAST"
expect_contains "$("$COLOCTL" checkpoints "$J")" "60"
echo "figure: job $J trained over mutual TLS: $LAST"

# a rotated certificate: written over colod's files, read again on SIGHUP, used by the next
# connections; a key that does not match is refused and the running files are kept
expect_rc 1 "$COLOCTL" -t 3000 --tls-server-name rotated.example hosts
expect_contains "$ERR" "Peer name rotated.example is not in peer certificate"
expect_rc 0 bash "$COLO_SRC/deploy/tls-certs.sh" server "$CERTS" colod2 DNS:rotated.example \
  IP:127.0.0.1
cp "$CERTS/colod2.crt" "$CERTS/colod.crt"
cp "$CERTS/colod2.key" "$CERTS/colod.key"
kill -HUP "$COLOD_PID"
for _ in $(seq 1 50); do grep -q "read again: new connections use them" "$TMP/colod.log" && break; sleep 0.1; done
expect_rc 0 "$COLOCTL" --tls-server-name rotated.example hosts
expect_rc 0 "$COLOCTL" hosts
# a key that is not the certificate's: refused, the files in use kept
cp "$CERTS/w1.key" "$CERTS/colod.key"
kill -HUP "$COLOD_PID"
for _ in $(seq 1 50); do grep -q "TLS files not reloaded" "$TMP/colod.log" && break; sleep 0.1; done
expect_contains "$(cat "$TMP/colod.log")" "TLS files not reloaded, keeping those in use: the TLS key $CERTS/colod.key is not the key of the certificate $CERTS/colod.crt"
expect_rc 0 "$COLOCTL" --tls-server-name rotated.example hosts
cp "$CERTS/colod2.key" "$CERTS/colod.key"
echo "figure: colod's certificate rotated on SIGHUP: new connections see rotated.example"

kill -TERM "$WPID"
wait "$WPID" || fail "the worker did not exit 0 on SIGTERM"
stop_colod

# tls_roles: false: any certificate from the CA may call anything, one without a role too
start_colod "$TMP/state2" --set "tls_cert=$CERTS/colod.crt" --set "tls_key=$CERTS/colod.key" \
  --set "tls_client_ca=$CA" --set tls_roles=false
expect_rc 0 "$COLOCTL" --tls-cert "$TMP/norole.crt" --tls-key "$TMP/norole.key" hosts
expect_rc 0 "$COLOCTL" --tls-cert "$CERTS/w1.crt" --tls-key "$CERTS/w1.key" hosts
stop_colod
echo "PASS"
