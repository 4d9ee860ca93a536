#!/usr/bin/env bash
# coloctl against a real colod on loopback: submit, get, list, cancel, resume, watch, hosts;
# bad requests get INVALID_ARGUMENT with their message and leave no row; exit codes.
source "$(dirname "$0")/lib.sh"
EX="$COLO_SRC/examples/tinyshakespeare.yaml"
STATE="$TMP/state"
start_colod "$STATE"

# --help on every program
for p in colod coloctl colo-workerd; do
  expect_rc 0 "$COLO_BIN/$p" --help
  expect_contains "$OUT" "usage: $p"
done
# and the quick start's: --help says what it does, an unknown argument is refused; neither starts
# anything
expect_rc 0 bash "$COLO_SRC/deploy/quickstart.sh" --help
expect_contains "$OUT" "  bash deploy/quickstart.sh stop   stop them"
expect_rc 2 bash "$COLO_SRC/deploy/quickstart.sh" bogus
expect_eq "$ERR" "quickstart: unknown argument 'bogus' (none: start; stop: stop them; --help)"

# submit prints the id; status and list show it
expect_rc 0 "$COLOCTL" submit "$EX"
expect_eq "$OUT" "1"
expect_rc 0 "$COLOCTL" status 1
expect_contains "$OUT" 'job 1 "tiny-shakespeare"'
expect_contains "$OUT" "state      PENDING (submitted)"
expect_contains "$OUT" "layout     dp=2 tp=1 pp=1 (world 2), zero 1"
expect_rc 0 "$COLOCTL" --json status 1
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["state"], j["spec"]["parallel"]["dp"], j["spec"]["optimizer"]["beta2"])')" "pending 2 0.95"
expect_rc 0 "$COLOCTL" submit "$EX" --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')" "2"
expect_rc 0 "$COLOCTL" list
expect_eq "$(echo "$OUT" | head -1 | tr -s ' ')" "ID NAME STATE ATTEMPT WORLD STEP LOSS TOK/S ETA CKPT AGE MESSAGE"
expect_eq "$(echo "$OUT" | wc -l)" "3"
expect_rc 0 "$COLOCTL" status
expect_contains "$OUT" "jobs        2 pending, 0 running"
expect_rc 0 "$COLOCTL" list --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" "2"

# a JSON job file works the same
python3 - "$EX" >"$TMP/job.json" <<'PY'
import json, sys
print(json.dumps({"name": "from-json", "data": {"train_path": "d/t.bin"}, "train": {"eval_interval": 0, "steps": 10}}))
PY
expect_rc 0 "$COLOCTL" submit "$TMP/job.json"
expect_eq "$OUT" "3"

# bad specs: INVALID_ARGUMENT with the exact message, and no row written
before=$(db_count "$STATE")
bad() { # yaml, expected message
  printf '%s\n' "$1" >"$TMP/bad.yaml"
  expect_rc 1 "$COLOCTL" submit "$TMP/bad.yaml"
  expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: $2"
}
bad $'name: t\ndata: {train_path: a, val_path: b}\nparallel: {tp: 3}\nmodel: {n_head: 8}' \
  "parallel.tp=3 does not divide model.n_head=8"
bad $'name: t\ndata: {train_path: ../../etc/shadow}\ntrain: {eval_interval: 0}' \
  'data.train_path "../../etc/shadow" must be a path relative to the data root, without ".."'
bad $'name: t\ndata: {train_path: a}\ntrain: {eval_interval: 0, tf32: true}' \
  "train.tf32 needs resources.device=gpu: TF32 is a GPU's tensor-core mode"
expect_eq "$(db_count "$STATE")" "$before" "(rejected jobs must leave no row)"
# a file that does not parse never reaches the server
printf 'name: t\nparalel: {}\n' >"$TMP/typo.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/typo.yaml"
expect_eq "$ERR" "coloctl: $TMP/typo.yaml:2: unknown field \"paralel\""
# --dry-run checks locally and sends nothing
expect_rc 0 "$COLOCTL" submit --dry-run "$EX"
expect_eq "$OUT" "$EX: valid (world 2)"
expect_eq "$(db_count "$STATE")" "$before"
# the long-context example: dp=2 x cp=4 is a world of 8
expect_rc 0 "$COLOCTL" submit --dry-run "$COLO_SRC/examples/llama-long-context.yaml"
expect_eq "$OUT" "$COLO_SRC/examples/llama-long-context.yaml: valid (world 8)"
# the example pipeline file: both stages checked, nothing sent; a pipeline's own errors are its
expect_rc 0 "$COLOCTL" submit --dry-run "$COLO_SRC/examples/tinyshakespeare-pipeline.yaml"
expect_eq "$OUT" "$COLO_SRC/examples/tinyshakespeare-pipeline.yaml: a pipeline of 4 stages, valid: pretrain (world 2), finetune (world 2), adapt (world 2), evaluate (world 2)"
printf 'stages:\n  - name: a\n    jbo: x.yaml\n' >"$TMP/pipe.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/pipe.yaml"
expect_eq "$ERR" "coloctl: $TMP/pipe.yaml:3: unknown field \"stages[0].jbo\""
printf 'stages:\n  - name: a\n    job: missing.yaml\n' >"$TMP/pipe.yaml"
expect_rc 1 "$COLOCTL" submit "$TMP/pipe.yaml"
expect_contains "$ERR" "coloctl: $TMP/pipe.yaml: stage a: $TMP/missing.yaml: "
expect_eq "$(db_count "$STATE")" "$before"

# get: not found
expect_rc 1 "$COLOCTL" status 99
expect_eq "$ERR" "coloctl: NOT_FOUND: job 99 not found"

# watch: follows state changes and ends when the job does
"$COLOCTL" watch 2 >"$TMP/watch.out" 2>"$TMP/watch.err" &
WATCH=$!
for _ in $(seq 1 50); do grep -q PENDING "$TMP/watch.out" 2>/dev/null && break; sleep 0.1; done
expect_rc 0 "$COLOCTL" cancel 2 --reason "integration test"
expect_eq "$OUT" "job 2 CANCELLED"
for _ in $(seq 1 50); do kill -0 $WATCH 2>/dev/null || break; sleep 0.1; done
kill -0 $WATCH 2>/dev/null && fail "watch did not end after the job was cancelled"
rc=0
wait $WATCH || rc=$?
expect_eq "$rc" "3" "(watch: the job ended, but did not succeed)"
expect_eq "$(cat "$TMP/watch.err")" ""
expect_eq "$(wc -l <"$TMP/watch.out")" "2"
expect_contains "$(sed -n 1p "$TMP/watch.out")" "job 2  PENDING     submitted"
expect_contains "$(sed -n 2p "$TMP/watch.out")" "job 2  CANCELLED   cancelled: integration test"
# watching a finished job prints its state and returns at once
expect_rc 3 "$COLOCTL" --json watch 2
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" "cancelled"

# cancel twice, resume, resume from a step without a checkpoint
expect_rc 1 "$COLOCTL" cancel 2
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job 2 is already CANCELLED"
expect_rc 0 "$COLOCTL" resume 2
expect_eq "$OUT" "job 2 PENDING (resumed from the newest checkpoint)"
expect_rc 1 "$COLOCTL" resume 1
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job 1 is PENDING; only a FAILED, CANCELLED or TIMED_OUT job can be resumed"
expect_rc 0 "$COLOCTL" cancel 1
expect_rc 1 "$COLOCTL" resume 1 --from-step 200
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job 1 has no complete checkpoint at step 200"
expect_rc 0 "$COLOCTL" list --state cancelled --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)])')" "[1]"

# hold, release, update: job 2 waits (no hosts); held, it is out of line and says why
expect_rc 0 "$COLOCTL" hold 2 --reason "data not ready"
expect_eq "$OUT" "job 2 PENDING: held by its owner: data not ready; it is placed once released (coloctl release 2)"
expect_rc 0 "$COLOCTL" status 2
expect_contains "$OUT" "state      PENDING (held: data not ready)"
expect_rc 0 "$COLOCTL" status
expect_contains "$OUT" "jobs        2 pending (1 held), 0 running, 0 restarting"
expect_rc 0 "$COLOCTL" list --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print([(j["id"], j.get("held", False), j.get("hold_reason", "")) for j in json.load(sys.stdin)])')" "[(1, False, ''), (2, True, 'data not ready'), (3, False, '')]"
expect_rc 0 "$COLOCTL" update 2 3 --priority 7 --time-limit 90m --max-restarts 5
expect_eq "$(sed -n 2p <<<"$OUT")" "job 3 PENDING, priority 7, max_restarts 5, time limit 1h30m: no room: 0 of 1 tensor-parallel groups of 1 devices placed; 0 devices free in all, 1 needed"
expect_rc 0 "$COLOCTL" --json status 3
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; s=json.load(sys.stdin)["spec"]; print(s["priority"], s["max_restarts"], s["resources"]["time_limit_s"])')" "7 5 5400"
expect_rc 0 "$COLOCTL" release 2
expect_eq "$OUT" "job 2 PENDING, released"
expect_rc 1 "$COLOCTL" release 2
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job 2 is not held"
expect_rc 1 "$COLOCTL" update 1 --priority 1
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job 1 is CANCELLED; a job that ended cannot be changed"
expect_rc 1 "$COLOCTL" update 3 --priority 1001
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: priority=1001 must be between -1000 and 1000"
expect_rc 2 "$COLOCTL" update 3
expect_eq "$ERR" "coloctl: update: nothing to change: give --priority, --max-restarts or --time-limit; try 'coloctl --help'"
expect_rc 2 "$COLOCTL" update 3 --time-limit 5x
expect_rc 2 "$COLOCTL" hold
expect_rc 2 "$COLOCTL" release 2 --reason x
expect_rc 1 "$COLOCTL" requeue 3 --hold
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job 3 is PENDING; only a RUNNING job can be requeued"
expect_rc 2 "$COLOCTL" requeue 3 --reason x
expect_eq "$ERR" "coloctl: requeue: --reason goes with --hold; try 'coloctl --help'"
# the history of those changes
expect_rc 0 "$COLOCTL" events 2
expect_eq "$(sed -E '2,$ s/  [0-9]{4}-[0-9-]+ [0-9:]+  /  TIME  /' <<<"$OUT" | tr -s ' ')" "SEQ TIME (UTC) STATE MESSAGE
1 TIME PENDING submitted
2 TIME CANCELLED cancelled: integration test
3 TIME PENDING resumed from the newest checkpoint
4 TIME PENDING held: data not ready
5 TIME PENDING priority 0 -> 7, max_restarts 3 -> 5, time limit 0 -> 5400 s
6 TIME PENDING released"
expect_rc 0 "$COLOCTL" events 2 --last 1 --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print([(e["seq"], e["message"]) for e in json.load(sys.stdin)])')" "[(6, 'released')]"
expect_rc 0 "$COLOCTL" status 2
expect_contains "$OUT" "events     the newest 5 of 6 (coloctl events 2: all)"
expect_rc 1 "$COLOCTL" events 99
expect_eq "$ERR" "coloctl: NOT_FOUND: job 99 not found"
expect_rc 2 "$COLOCTL" events 2 --last 1001

# hosts
expect_rc 0 "$COLOCTL" hosts
expect_eq "$OUT" "no hosts have registered"
expect_rc 0 "$COLOCTL" hosts --json
expect_eq "$OUT" "[]"

# usage errors exit 2; an unreachable coordinator exits 1 with one line
expect_rc 2 "$COLOCTL"
expect_rc 2 "$COLOCTL" frobnicate
expect_eq "$ERR" "coloctl: unknown command 'frobnicate'; try 'coloctl --help'"
expect_rc 2 "$COLOCTL" status abc
expect_rc 2 "$COLOCTL" submit
expect_rc 2 "$COLOCTL" cancel
expect_rc 1 "$COLOCTL" --server 127.0.0.1:1 status
expect_eq "$(echo "$ERR" | wc -l)" "1"
expect_contains "$ERR" "coloctl: cannot reach the coordinator at 127.0.0.1:1:"
expect_rc 1 env COLO_SERVER=127.0.0.1:1 "$COLOCTL" list
expect_contains "$ERR" "cannot reach the coordinator at 127.0.0.1:1"

# job_line_says JOB TEXT: coloctl list's line of JOB once it says TEXT (3 s at most) contains it
job_line_says() {
  for _ in $(seq 1 30); do
    grep -q "$2" <<<"$(grep "^$1 " <<<"$("$COLOCTL" list)")" && break
    sleep 0.1
  done
  expect_rc 0 "$COLOCTL" list
  expect_contains "$(grep "^$1 " <<<"$OUT")" "$2"
}

# --after: a job that starts once others succeeded
expect_rc 0 "$COLOCTL" submit "$TMP/job.json" --after 1,3
AJ=$OUT
expect_rc 0 "$COLOCTL" status "$AJ"
expect_contains "$OUT" "after      jobs 1, 3 (each must succeed first)"
job_line_says "$AJ" "waits for job 1 to succeed: it ended CANCELLED, and starts only if that job is resumed and succeeds (or cancel this one); 1 more in its after not checked yet"
expect_rc 2 "$COLOCTL" submit "$TMP/job.json" --after one
expect_eq "$ERR" "coloctl: submit: --after takes job ids separated by commas, not 'one'; try 'coloctl --help'"
expect_rc 1 "$COLOCTL" submit "$TMP/job.json" --after 1,77
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: after: there is no job 77"
expect_rc 0 "$COLOCTL" cancel "$AJ"
# --after-ended: once they ended, in any state (job 1 was cancelled; job 3 waits)
expect_rc 0 "$COLOCTL" submit "$TMP/job.json" --after-ended 1,3 --set account=team-a
AJ=$OUT
expect_rc 0 "$COLOCTL" status "$AJ"
expect_contains "$OUT" "after      jobs 1, 3 (each must end first, in any state)"
expect_contains "$OUT" "account    team-a"
expect_rc 0 "$COLOCTL" list --account team-a --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)])')" "[$AJ]"
expect_rc 0 "$COLOCTL" usage --by account
expect_contains "$OUT" "0.000 GPU hours and 0.000 CPU-slot hours from the first job to "
expect_rc 2 "$COLOCTL" usage --by team
expect_rc 0 "$COLOCTL" usage --account team-a --owner "" --json
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("rows", []))')" "[]"
expect_rc 1 "$COLOCTL" usage --account "$(printf 'a%.0s' $(seq 65))"
expect_eq "$ERR" "coloctl: INVALID_ARGUMENT: account is longer than 64 bytes"
job_line_says "$AJ" "waits for job 3 to end (it is PENDING)"
expect_rc 2 "$COLOCTL" submit "$TMP/job.json" --after 1 --after-ended 3
expect_eq "$ERR" "coloctl: submit: give --after or --after-ended, not both; try 'coloctl --help'"
expect_rc 0 "$COLOCTL" cancel "$AJ"

# --sweep: a job per combination, the first field varying slowest; all checked before any is
# sent; a token makes a retried sweep submit each job once
expect_rc 0 "$COLOCTL" submit "$TMP/job.json" --sweep optimizer.lr=1e-3,3e-3 --sweep train.seed=1,2,3 --token sw
expect_eq "$(echo "$OUT" | cut -d' ' -f2-)" "from-json-1 optimizer.lr=1e-3 train.seed=1
from-json-2 optimizer.lr=1e-3 train.seed=2
from-json-3 optimizer.lr=1e-3 train.seed=3
from-json-4 optimizer.lr=3e-3 train.seed=1
from-json-5 optimizer.lr=3e-3 train.seed=2
from-json-6 optimizer.lr=3e-3 train.seed=3"
SW=$(echo "$OUT" | cut -d' ' -f1 | tr '\n' ' ')
expect_rc 0 "$COLOCTL" status "$(echo "$SW" | cut -d' ' -f5)"
expect_contains "$OUT" "lr 0.003 ("
expect_rc 0 "$COLOCTL" --json submit "$TMP/job.json" --sweep optimizer.lr=1e-3,3e-3 --sweep train.seed=1,2,3 --token sw
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin)) + " ")')" "$SW"
# compare: the sweep side by side, by the two fields that differ (none has a loss yet: by id)
expect_rc 0 "$COLOCTL" compare --name from-json-
expect_eq "$(head -1 <<<"$OUT" | tr -s ' ')" "ID NAME STATE optimizer.lr train.seed STEP LOSS VAL LOSS"
expect_eq "$(sed -n 6p <<<"$OUT" | tr -s ' ' | cut -d' ' -f2-)" "from-json-5 PENDING 0.003 2 - - -"
expect_rc 0 "$COLOCTL" --json compare $(echo "$SW" | cut -d' ' -f1,4)
expect_eq "$(python3 -c 'import json,sys; print([(j["name"], j["fields"]) for j in json.load(sys.stdin)])' <<<"$OUT")" \
  "[('from-json-1', {'optimizer.lr': '0.001'}), ('from-json-4', {'optimizer.lr': '0.003'})]"
expect_rc 2 "$COLOCTL" compare
expect_eq "$ERR" "coloctl: compare needs a job id, or --name PREFIX; try 'coloctl --help'"
before=$(db_count "$STATE")
expect_rc 1 "$COLOCTL" submit "$TMP/job.json" --sweep optimizer.lr=1e-3,-1
expect_eq "$ERR" "coloctl: $TMP/job.json (optimizer.lr=-1): optimizer.lr=-1 must be positive"
expect_eq "$(db_count "$STATE")" "$before" "(a sweep with a bad job submits none)"
expect_rc 2 "$COLOCTL" submit "$TMP/job.json" --sweep train.seed=
expect_eq "$ERR" "coloctl: submit: --sweep takes FIELD=VALUE,VALUE,..., not 'train.seed='; try 'coloctl --help'"
# a sweep's jobs cancelled in one call; one that is unknown fails alone, and the exit says so
expect_rc 1 "$COLOCTL" cancel $SW 999
expect_eq "$(echo "$OUT" | wc -l)" "6"
expect_eq "$(echo "$OUT" | sort -u | sed 's/^job [0-9]* //' | sort -u)" "CANCELLED"
expect_eq "$ERR" "coloctl: NOT_FOUND: job 999 not found"
# delete: the sweep's cancelled jobs by name, then nothing is left so named; a job not ended is
# refused with colod's reason; --account keeps to that account's (none of these has one)
expect_rc 0 "$COLOCTL" delete --name from-json- --account team-a
expect_eq "$OUT" "no ended job's name starts with 'from-json-' in account team-a: nothing deleted"
expect_rc 2 "$COLOCTL" delete --account team-a
expect_eq "$ERR" "coloctl: delete: --account needs --name PREFIX too (each of an account's jobs by name); try 'coloctl --help'"
expect_rc 0 "$COLOCTL" delete --name from-json-
expect_eq "$(echo "$OUT" | wc -l)" "6"
expect_eq "$(echo "$OUT" | head -1)" "job $(echo "$SW" | cut -d' ' -f1) (from-json-1, CANCELLED) deleted"
expect_rc 0 "$COLOCTL" list --name from-json-
expect_eq "$(grep -c from-json <<<"$OUT")" "0"
expect_rc 0 "$COLOCTL" delete --name from-json-
expect_eq "$OUT" "no ended job's name starts with 'from-json-': nothing deleted"
DJ=$(awk '{print $1}' <<<"$("$COLOCTL" submit "$TMP/job.json")")
expect_rc 1 "$COLOCTL" delete "$DJ"
expect_eq "$ERR" "coloctl: FAILED_PRECONDITION: job $DJ is PENDING; only a job that has ended can be deleted (cancel it first)"
expect_rc 0 "$COLOCTL" cancel "$DJ"
expect_rc 0 "$COLOCTL" --json delete "$DJ"
expect_eq "$(echo "$OUT" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["id"], j["state"])')" "$DJ cancelled"
expect_rc 1 "$COLOCTL" status "$DJ"
expect_rc 2 "$COLOCTL" delete
expect_eq "$ERR" "coloctl: delete needs a job id, or --name PREFIX; try 'coloctl --help'"
# submit --wait: the id first, then the job's changes; cancelled meanwhile, it exits 3
"$COLOCTL" submit "$TMP/job.json" --wait >"$TMP/wait.out" 2>"$TMP/wait.err" &
WAITER=$!
for _ in $(seq 1 50); do grep -q PENDING "$TMP/wait.out" 2>/dev/null && break; sleep 0.1; done
WJ=$(head -1 "$TMP/wait.out")
expect_rc 0 "$COLOCTL" cancel "$WJ"
rc=0
wait $WAITER || rc=$?
expect_eq "$rc" "3"
expect_contains "$(tail -1 "$TMP/wait.out")" "job $WJ  CANCELLED   cancelled"
expect_rc 2 "$COLOCTL" submit "$COLO_SRC/examples/tinyshakespeare-pipeline.yaml" --wait
expect_eq "$ERR" "coloctl: submit: --wait is for a job file; watch a pipeline's stages with coloctl watch; try 'coloctl --help'"

# colod refuses a bad config with the file's line, and bad flags
printf 'host_timeout: forever\n' >"$TMP/bad.conf"
expect_rc 2 "$COLOD" -c "$TMP/bad.conf"
expect_eq "$ERR" "colod: $TMP/bad.conf:1: host_timeout \"forever\" is not a duration (like 10s, 500ms, 2m)"
expect_rc 2 "$COLOD" --bogus

stop_colod
echo "integration_cli: all checks passed"
