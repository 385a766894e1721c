#!/usr/bin/env bash
# Two attempts of one gang never run at once (issue #10 item 1a): a worker frozen with SIGSTOP
# while its BIND is in flight.  The scheduler times the bind out and gives attempt 1 up, but
# does not start attempt 2 on the frozen node's GPUs until that node answers for the task or is
# judged lost; the worker, once it wakes, refuses the stale BIND (past its expires_ms, or after
# its lease ran out) instead of starting it.
#  1. frozen across the bind timeout, woken before the node is judged lost;
#  2. frozen until the node is judged lost and attempt 2 runs elsewhere, then woken.
# Every task records its own start and end (ns) and the node it ran on; the test asserts from
# those that attempt 1 never started on the frozen node and that no two attempts overlapped.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 12, "bind_timeout_s": 1, "kill_grace_s": 2,
  "retry_backoff_s": 0
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
mkdir -p "$T/run"
at_exit 'for n in "${!WORKER_PID[@]}"; do kill -CONT "${WORKER_PID[$n]}" 2>/dev/null; done'

# TAG.ATTEMPT.RANK.start holds "ns node"; .end the ns it ended.  Attempt 1 runs until stopped;
# later attempts run a moment and succeed.
cmd() {
    printf '%s' 'f='"$T"'/run/'"$1"'.$MUSTER_ATTEMPT.$RANK
echo "$(date +%s%N) $MUSTER_NODE" > $f.start
trap "date +%s%N > $f.end; exit 143" TERM
if [ $MUSTER_ATTEMPT -gt 1 ]; then sleep 1; date +%s%N > $f.end; exit 0; fi
while :; do sleep 0.1; done'
}
submit_gang() { # TAG
    submit_json "$(jq -cn --arg c "$(cmd "$1")" --arg n "$1" '{name: $n, tasks: 2, gpus_per_task: 8, command: $c}')"
}

# check_no_overlap TAG FROZEN_NODE: attempt 1 never started on FROZEN_NODE, and every task of
# a later attempt started after every task of an earlier attempt had ended.
check_no_overlap() {
    local tag=$1 frozen=$2 f a b
    for f in "$T"/run/"$tag".1.*.start; do
        [ "$(cut -d' ' -f2 "$f")" != "$frozen" ] || fail "$tag: attempt 1 started on the frozen node $frozen ($f)"
    done
    for f in "$T"/run/"$tag".*.start; do
        a=$(basename "$f" | cut -d. -f2)
        for b in "$T"/run/"$tag".*.end; do
            [ "$(basename "$b" | cut -d. -f2)" -lt "$a" ] || continue
            [ "$(cut -d' ' -f1 "$f")" -gt "$(cat "$b")" ] ||
                fail "$tag: $(basename "$f") started before $(basename "$b") ended"
        done
    done
    for f in "$T"/run/"$tag".*.start; do
        [ -s "${f%.start}.end" ] || fail "$tag: $(basename "$f") never recorded its end"
    done
}

# ---- 1: frozen across the bind timeout, woken before the node is judged lost ----
kill -STOP "${WORKER_PID[n2]}"
one=$(submit_gang one)
wait_for "the bind timed out" 15 'grep -q "job='"$one"' attempt=1 ended, requeued: task . on node n2 did not start" "$T/musterd.log"'
wait_for "attempt 1 still stopping: no answer from n2" 15 'grep -q "job='"$one"' attempt=1 still stopping" "$T/musterd.log"'
ls "$T"/run/one.2.* >/dev/null 2>&1 && fail "attempt 2 started while n2 was frozen"
[ "$(ctl -o json nodes | jq -r '.[] | select(.name == "n2") | .state')" = ready ] ||
    fail "n2 was judged lost: the freeze was meant to be shorter than the lease"
kill -CONT "${WORKER_PID[n2]}"
wait_for "one succeeded" 30 job_state_is "$one" SUCCEEDED
grep -q "job=$one task=[01] attempt=1 .*stale BIND\|job=$one task=[01] attempt=1 .*KILL for this task arrived first" "$T/worker-n2.log" ||
    fail "n2 did not refuse the stale BIND: $(grep "job=$one" "$T/worker-n2.log")"
[ "$(rcli HGET "muster:job:$one" attempt)" = 2 ] || fail "one: attempt $(rcli HGET "muster:job:$one" attempt)"
check_no_overlap one n2
ok "frozen across the bind timeout: attempt 2 waited for n2's answer; n2 refused the stale BIND"

# ---- 2: frozen until the node is judged lost; attempt 2 runs elsewhere ----
kill -STOP "${WORKER_PID[n2]}"
two=$(submit_gang two)
wait_for "the bind timed out" 15 'grep -q "job='"$two"' attempt=1 ended, requeued" "$T/musterd.log"'
start_worker n3 spot-a 8
wait_for "n2 judged lost" 30 '[ "$(ctl -o json nodes | jq -r '"'"'.[] | select(.name == "n2") | .state'"'"')" = lost ]'
wait_for "two succeeded on n1 and n3" 60 job_state_is "$two" SUCCEEDED
kill -CONT "${WORKER_PID[n2]}"
wait_for "n2 back" 30 '[ "$(ctl -o json nodes | jq -r '"'"'.[] | select(.name == "n2") | .state'"'"')" = ready ]'
grep -q "job=$two task=[01] attempt=1 " "$T/worker-n2.log" || fail "n2 never saw two's BIND"
grep "job=$two task=[01] attempt=1 " "$T/worker-n2.log" | has "started" &&
    fail "n2 started the stale BIND: $(grep "job=$two" "$T/worker-n2.log")"
check_no_overlap two n2
ok "frozen until judged lost: attempt 2 ran on n1 and n3; n2 woke and started nothing"
