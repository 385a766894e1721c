#!/usr/bin/env bash
# A worker cut off from a live leader (issue #40): the relay between them is frozen, so the
# worker hears nothing while its witness finds the leader key held.  Its tasks stop within the
# lease (checkpoint signal, grace, SIGTERM), the scheduler judges the node lost and starts the
# next attempt elsewhere, and that attempt starts only after the last one's task ended.
source "$(dirname "$0")/lib.sh"

start_redis
make_config --with '{"leader_lease_s": 2, "node_lost_after_s": 6}' >/dev/null
start_musterd "$CONFIG"
RELAY_PORT=$(free_port)
# shellcheck disable=SC2154 # _mu_python is lib.sh's
"$_mu_python" "$MUSTER_SRC/tests/tools/relay.py" "$RELAY_PORT" "$SCHED_PORT" >>"$T/relay.log" 2>&1 &
RELAY_PID=$!
_mu_pids+=("$RELAY_PID")
wait_for "the relay listening" 10 _mu_port_open "$RELAY_PORT"
SCHED_ENDPOINTS="tcp://127.0.0.1:$RELAY_PORT" start_worker n1 spot-a 8
wait_for "n1 registered" 15 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# Each attempt notes when it started and when it ended (on SIGTERM), by this machine's clock.
task='echo "$MUSTER_ATTEMPT $MUSTER_NODE $(date +%s%N)" >> '"$T"'/started; trap "echo \"\$MUSTER_ATTEMPT \$(date +%s%N)\" >> '"$T"'/ended; exit 0" TERM; trap "echo \$MUSTER_ATTEMPT >> '"$T"'/ckpt" USR1; while [ ! -e '"$T"'/release ]; do sleep 0.1; done'
job=$(submit_json "$(jq -cn --arg c "$task" '{name: "train", command: $c, tasks: 1, gpus_per_task: 8,
    checkpoint: {signal: "SIGUSR1", grace_s: 2}}')")
wait_for "attempt 1 running on n1" 15 'job_state_is '"$job"' RUNNING && grep -q "^1 n1 " "$T/started"'
start_worker n2 spot-a 8 # the capacity for the next attempt, straight to musterd
wait_for "n2 registered" 15 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

kill -STOP "$RELAY_PID"
wait_for "n1 fenced its task" 60 'grep -q "SELF-FENCING" "$T/worker-n1.log"' || { kill -CONT "$RELAY_PID"; fail "no fencing"; }
grep -q "leads (redis) but has not answered" "$T/worker-n1.log" || { kill -CONT "$RELAY_PID"; fail "n1 did not say that a leader is alive"; }
wait_for "attempt 2 running on n2" 60 'grep -q "^2 n2 " "$T/started"' || { kill -CONT "$RELAY_PID"; fail "no attempt 2"; }
kill -CONT "$RELAY_PID"
grep -q "node=n1 lost" "$T/musterd.log" || fail "musterd did not judge n1 lost"
[ "$(cat "$T/ckpt")" = 1 ] || fail "attempt 1 did not get its checkpoint signal first: $(cat "$T/ckpt" 2>/dev/null)"
ended1=$(awk '$1 == 1 { print $2 }' "$T/ended")
started2=$(awk '$1 == 2 { print $3 }' "$T/started")
[ -n "$ended1" ] || fail "attempt 1 never ended"
[ "$ended1" -lt "$started2" ] || fail "attempt 2 started at $started2, before attempt 1 ended at $ended1"
ok "cut off from a live leader: the task stopped within the lease, attempt 2 started $(((started2 - ended1) / 1000000)) ms after it ended"

: >"$T/release"
wait_for "the job succeeded" 30 job_state_is "$job" SUCCEEDED
[ "$(rcli HGET "muster:job:$job" failures)" = 0 ] || fail "the fenced attempt counted as a failure"
[ "$(wc -l <"$T/started")" = 2 ] || fail "attempts started: $(cat "$T/started")"
ok "the job succeeded as attempt 2, the fenced attempt not counted"
