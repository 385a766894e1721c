#!/usr/bin/env bash
# musterctl logs from a machine without the workers' disks (issue #18): every read goes through
# Redis, musterd and the worker that ran the task (LOG_READ / LOG_DATA), never through a path.
# musterctl runs as a user that cannot read the workers' state dirs when the test runs as root
# (as nobody, with $T mode 0700), and is never told where they are otherwise.
#  - logs -f on a running job prints what the task writes as it writes it: the task writes a
#    line and waits for a file the test creates before it writes the next (no timing);
#  - a log of several MB written by a finished job is paged: byte-identical (cmp), at least one
#    request per 64 KiB, and a request that asks for more than 64 KiB gets 64 KiB at most;
#    nothing is left in Redis afterwards (requests deleted, answers popped);
#  - -o json; --attempt of a retried job (its placement gone: every node is asked);
#  - clear errors, exit 1: a bad task index, a missing log file, a rejected job, a node whose
#    worker is gone.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
P=$MUSTER_KEY_PREFIX
CHUNK=65536

start_redis
make_config - >/dev/null <<'EOF'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "od-a", "capacity": "on-demand", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 10}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "retry_backoff_s": 0
}
EOF
start_musterd "$CONFIG"
start_worker n1 od-a 8
start_worker n2 od-a 8
wait_for "two nodes registered" 15 '[ "$(rcli HLEN "${P}nodes")" = 2 ]'

# far ARGS...: musterctl as a process that cannot read the workers' state dirs.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    far() { as_nobody "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" "$@"; }
    ! as_nobody ls "$T/w/n1" >/dev/null 2>&1 || fail "nobody can read $T/w/n1; the test proves nothing"
    echo "# musterctl runs as nobody, who cannot read $T/w"
else
    far() { env -u MUSTER_STATE_ROOT "$MUSTER_BIN/musterctl" --redis "$MUSTER_REDIS_URL" "$@"; }
    echo "# not root: musterctl is not told where the state dirs are"
fi

# on_node ID: the node of the job's task 0.
on_node() {
    ctl -o json show "$1" | jq -r '.placement[0].node'
}

# ---- -f on a running job: each line as the task writes it -------------------------------------
script="echo 'line 1'; while [ ! -e '$T/go2' ]; do sleep 0.05; done; echo 'line 2'"
script+="; while [ ! -e '$T/go3' ]; do sleep 0.05; done; printf 'line 3 without newline'"
expect_rc 0 ctl submit --capacity on-demand -- sh -c "$script"
fid=$(cat "$T/out")
wait_for "job $fid running" 20 job_state_is "$fid" RUNNING
far logs -f "$fid" >"$T/follow.out" 2>"$T/follow.err" &
follow_pid=$!
_mu_pids+=("$follow_pid")
wait_for "logs -f prints line 1" 20 grep -qx "line 1" "$T/follow.out"
! grep -q "line 2" "$T/follow.out" || fail "line 2 before the task wrote it: $(cat "$T/follow.out")"
touch "$T/go2"
wait_for "logs -f prints line 2" 20 grep -qx "line 2" "$T/follow.out"
_mu_alive "$follow_pid" || fail "logs -f ended while the job runs: $(cat "$T/follow.err")"
touch "$T/go3"
wait_for "job $fid succeeded" 20 job_state_is "$fid" SUCCEEDED
wait_for "logs -f ends after the job" 20 '! _mu_alive '"$follow_pid"
rc=0
wait "$follow_pid" || rc=$?
[ "$rc" = 0 ] || fail "logs -f exited $rc: $(cat "$T/follow.err")"
[ "$(cat "$T/follow.out")" = "$(printf 'line 1\nline 2\nline 3 without newline')" ] ||
    fail "logs -f printed: $(cat -A "$T/follow.out")"
ok "logs -f on a running job prints each line as the task writes it, and ends with the job"

# ---- several MB, paged ------------------------------------------------------------------------
head -c $((5 * 1024 * 1024 + 12345)) /dev/urandom >"$T/big.bin" # binary: NULs, no newlines
chmod 644 "$T/big.bin"
expect_rc 0 ctl submit --capacity on-demand --wait -- cat "$T/big.bin"
bid=$(head -1 "$T/out")
bnode=$(on_node "$bid")
cmp -s "$T/big.bin" "$T/w/$bnode/logs/$bid.1.0.out" || fail "the worker's log differs from what the task wrote"
added() { rcli XINFO STREAM "${P}logreq" | awk 'prev == "entries-added" { print; exit } { prev = $0 }'; }
before=$(added)
far logs "$bid" >"$T/big.out" 2>"$T/big.err" || fail "logs of a finished job: $(cat "$T/big.err")"
cmp "$T/big.bin" "$T/big.out" || fail "logs of a $(stat -c %s "$T/big.bin")-byte log is not byte-identical"
requests=$(($(added) - before))
size=$(stat -c %s "$T/big.bin")
[ "$requests" -ge $(((size + CHUNK - 1) / CHUNK)) ] ||
    fail "a $size-byte log came in $requests request(s): more than $CHUNK bytes per answer"
[ "$(rcli XLEN "${P}logreq")" = 0 ] || fail "requests left on ${P}logreq: $(rcli XLEN "${P}logreq")"
[ -z "$(rcli --scan --pattern "${P}logreply:*")" ] || fail "answers left: $(rcli --scan --pattern "${P}logreply:*")"
ok "a ${size}-byte log comes out byte-identical in $requests requests, and nothing stays in Redis"

# A request for 10 MB at once gets one chunk of 64 KiB at most (the header line, then the data).
rid=$(rcli XADD "${P}logreq" '*' node "$bnode" job "$bid" task 0 attempt 1 stream out \
    offset 1000 max 10000000)
rcli --raw BLPOP "${P}logreply:$rid" 10 | tail -n +2 >"$T/answer" # drops the key's name
head -1 "$T/answer" | jq -e ".ok == true and .len == $CHUNK and .offset == 1000 and .size == $size" >/dev/null ||
    fail "answer to a 10 MB request: $(head -c 300 "$T/answer")"
dlen=$(($(stat -c %s "$T/answer") - $(head -1 "$T/answer" | wc -c) - 1)) # redis-cli adds a newline
[ "$dlen" = "$CHUNK" ] || fail "a 10 MB request was answered with $dlen bytes of data"
cmp -s <(tail -c +$(($(head -1 "$T/answer" | wc -c) + 1)) "$T/answer" | head -c $CHUNK) \
    <(tail -c +1001 "$T/big.bin" | head -c $CHUNK) || fail "the chunk at offset 1000 is not the log's"
ok "a request for more than 64 KiB is answered with one 64 KiB chunk"

# ---- -o json, --task, --stderr ----------------------------------------------------------------
expect_rc 0 ctl submit --tasks 2 --capacity on-demand --wait -- \
    sh -c 'echo "out of rank $RANK"; echo "err of rank $RANK" >&2'
lid=$(head -1 "$T/out")
far -o json logs "$lid" --task 1 --stderr >"$T/json.out" || fail "logs -o json"
jq -e ".job == \"$lid\" and .task == 1 and .attempt == 1 and .stream == \"stderr\" and .text == \"err of rank 1\\n\" and (.path | endswith(\"/logs/$lid.1.1.err\"))" \
    "$T/json.out" >/dev/null || fail "logs -o json: $(cat "$T/json.out")"
ok "logs -o json --task 1 --stderr"

# An earlier attempt, whose placement is gone: every registered node is asked.
expect_rc 0 ctl submit --capacity on-demand --max-retries 1 --wait -- \
    sh -c 'echo "attempt $MUSTER_ATTEMPT"; [ "$MUSTER_ATTEMPT" -ge 2 ]'
rid=$(head -1 "$T/out")
[ "$(far logs "$rid")" = "attempt 2" ] || fail "logs of the current attempt: $(far logs "$rid" 2>&1)"
[ "$(far logs "$rid" --attempt 1)" = "attempt 1" ] || fail "logs --attempt 1: $(far logs "$rid" --attempt 1 2>&1)"
ok "logs --attempt 1 of a retried job finds the node that ran it"

# ---- errors -----------------------------------------------------------------------------------
rc=0
far logs "$lid" --task 5 >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "logs --task 5 of a 2-task job exited $rc"
grep -q "job '$lid' has 2 task(s); --task 5 does not exist" "$T/err" || fail "bad task: $(cat "$T/err")"
lnode=$(on_node "$lid")
rm "$T/w/$lnode/logs/$lid.1.0.out"
rc=0
far logs "$lid" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "logs of a deleted log file exited $rc"
grep -q "job $lid task 0 attempt 1 has no stdout log on node $lnode" "$T/err" || fail "no file: $(cat "$T/err")"
xid=$(submit_json '{"queue":"no-such-queue","command":["true"]}')
wait_for "job $xid rejected" 20 job_state_is "$xid" REJECTED
rc=0
far logs "$xid" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "logs of a rejected job exited $rc"
grep -q "job $xid was REJECTED: it never ran" "$T/err" || fail "rejected: $(cat "$T/err")"
ok "a bad task index, a missing log file, a rejected job: clear errors, exit 1"

# The worker of the big job's node dies; once musterd has judged the node lost, its logs are gone.
stop_worker "$bnode" KILL
wait_for "node $bnode lost" 30 '[ "$(ctl -o json nodes | jq -r ".[] | select(.name == \"'"$bnode"'\") | .state")" = lost ]'
rc=0
far logs "$bid" >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "logs from a node whose worker is gone exited $rc"
grep -q "node '$bnode' is not connected" "$T/err" || fail "node gone: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "logs from a gone node printed: $(head -c 200 "$T/out")"
ok "a job whose node's worker is gone: 'not connected', exit 1"
