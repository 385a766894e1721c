#!/usr/bin/env bash
# Running work survives the scheduler (issue #40).  Workers read Redis's leader key while the
# scheduler is silent (--redis; here MUSTER_REDIS_URL, which lib.sh exports): while no musterd
# leads, their lease is held and the tasks run on, however long.  Three outages, each three
# times node_lost_after_s:
#   1. kill -9 musterd, start it again: the gang is adopted in its attempt, no task signalled;
#   2. kill -9 it again and start a standby elsewhere only afterwards: the same;
#   3. Redis frozen and musterd killed: nothing shows that no scheduler leads, so the tasks stop
#      when the lease runs out (checkpoint signal first), and the gang is requeued, not failed,
#      once both are back.
# The outages' lengths are the scenario (sleep), never a bound a slow machine could miss: every
# check waits for what it checks.  MUSTER_OUTAGE_S, MUSTER_LOST_S and MUSTER_LEADER_LEASE_S set
# the first two outages' length, node_lost_after_s and leader_lease_s (600, 30 and 5 for the
# ten minutes at the defaults that docs/deploy.md quotes; CI runs the short default).
source "$(dirname "$0")/lib.sh"

LOST_S=${MUSTER_LOST_S:-8}
LEADER_S=${MUSTER_LEADER_LEASE_S:-2}
OUTAGE_S=${MUSTER_OUTAGE_S:-$((3 * LOST_S))}
start_redis
# leader_lease_s 2: the key is free 2 s after a kill; the workers' lease, 8 s, is well above it.
make_config --with "{\"leader_lease_s\": $LEADER_S, \"node_lost_after_s\": $LOST_S}" >/dev/null
start_musterd "$CONFIG"
STANDBY_PORT=$(free_port)
SCHED_ENDPOINTS="tcp://127.0.0.1:$SCHED_PORT,tcp://127.0.0.1:$STANDBY_PORT"
export SCHED_ENDPOINTS
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 15 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
grep -q "the lease's witness reads muster:leader" "$T/worker-n1.log" || fail "the worker names no witness"

# Each task notes every signal it gets and its attempt, and runs until the test releases it.
task='echo $MUSTER_ATTEMPT >> '"$T"'/attempts.$RANK; for s in TERM INT HUP USR1 USR2; do trap "echo $s >> '"$T"'/signalled.$RANK" $s; done; while [ ! -e '"$T"'/release ]; do sleep 0.1; done; echo $MUSTER_ATTEMPT >> '"$T"'/ended.$RANK'
job=$(submit_json "$(jq -cn --arg c "$task" '{name: "train", command: $c, tasks: 2, gpus_per_task: 8,
    checkpoint: {signal: "SIGUSR1", grace_s: 2}}')")
wait_for "the gang running" 15 job_state_is "$job" RUNNING
pids=$(pgrep -f "$T/release" | sort | tr '\n' ' ')
[ -n "$pids" ] || fail "no task process found"

# outage: kill -9 the leader (pid $1), wait until the key is free, stay down 3x the lease.
outage() {
    kill -9 "$1"
    wait "$1" 2>/dev/null || true
    wait_for "the leader key free" 10 '[ -z "$(rcli GET muster:leader)" ]'
    sleep "$OUTAGE_S"
}

# adopted WHAT LOG: after an outage the gang is adopted unsignalled, on the same processes.
adopted() {
    wait_for "$1: the gang adopted" 30 'job_state_is '"$job"' RUNNING && grep -q "adopted after the restart" "'"$2"'"'
    [ "$(rcli HGET "muster:job:$job" attempt)" = 1 ] || fail "$1: the gang was restarted (attempt $(rcli HGET "muster:job:$job" attempt))"
    [ "$(pgrep -f "$T/release" | sort | tr '\n' ' ')" = "$pids" ] || fail "$1: the gang's processes changed"
    ! ls "$T"/signalled.* >/dev/null 2>&1 || fail "$1: a task was signalled: $(cat "$T"/signalled.*)"
    ! grep -h "SELF-FENCING" "$T"/worker-*.log || fail "$1: a worker fenced its tasks"
    ! grep -h "lost: no heartbeat" "$2" || fail "$1: a node was judged lost"
}

outage "$MUSTERD_PID"
for n in n1 n2; do
    grep -q "no scheduler leads" "$T/worker-$n.log" || fail "$n did not say that no scheduler leads"
done
start_musterd "$CONFIG"
adopted "musterd down $OUTAGE_S s" "$T/musterd.log"
ok "musterd down $OUTAGE_S s (node_lost_after_s $LOST_S): the gang adopted as attempt 1, no task signalled"

outage "$MUSTERD_PID"
"$MUSTER_BIN/musterd" --config "$CONFIG" --redis "$MUSTER_REDIS_URL" \
    --bind "tcp://127.0.0.1:$STANDBY_PORT" >>"$T/musterd-b.log" 2>&1 &
STANDBY_PID=$!
_mu_pids+=("$STANDBY_PID")
wait_for "the late standby leads" 15 '[ "$(leader_pid)" = "$STANDBY_PID" ]'
adopted "a standby that took over late" "$T/musterd-b.log"
ok "leader killed, a standby started $OUTAGE_S s later: the gang adopted, no task signalled"

# 3. Redis frozen and the scheduler killed: the worker cannot tell whether one leads.
kill -STOP "$REDIS_PID"
kill -9 "$STANDBY_PID"
wait "$STANDBY_PID" 2>/dev/null || true
wait_for "the tasks fenced" 60 'grep -q "SELF-FENCING" "$T/worker-n1.log" && ls "$T"/signalled.0 "$T"/signalled.1' \
    || { kill -CONT "$REDIS_PID"; fail "no fencing"; }
grep -q "neither the scheduler nor redis answers" "$T/worker-n1.log" || { kill -CONT "$REDIS_PID"; fail "n1 did not say why"; }
kill -CONT "$REDIS_PID"
[ "$(head -1 "$T/signalled.0")" = USR1 ] || fail "the first signal was $(head -1 "$T/signalled.0"), not the checkpoint signal"
start_musterd "$CONFIG"
wait_for "attempt 2 running" 60 '[ "$(rcli HGET "muster:job:$job" attempt)" = 2 ] && job_state_is '"$job"' RUNNING'
[ "$(rcli HGET "muster:job:$job" failures)" = 0 ] || fail "the fenced attempt counted as a failure: $(rcli HGET "muster:job:$job" failures)"
ok "redis and musterd both down past the lease: the tasks fenced (checkpoint signal first), the gang requeued uncounted"

: >"$T/release"
wait_for "the gang succeeded" 30 job_state_is "$job" SUCCEEDED
ok "the gang ran to the end as attempt 2"
