#!/usr/bin/env bash
# Exits around a scheduler crash (issue #5): a worker keeps a task's exit until the scheduler
# has stored the attempt's outcome, and repeats it until then.
#  1. One task of a gang exits, the scheduler hears it, then dies before the gang ends: after
#     the restart the gang is adopted with that exit (it is not "vanished", not rerun) and
#     succeeds as attempt 1.
#  2. A task exits while the restarted scheduler still waits for the gang's other node: the
#     exit is counted, and the gang succeeds once the other node is back (it does not stay
#     RUNNING for ever).
# The tasks end when the test releases them (files), not after fixed sleeps that a slow machine
# could outlast before the step they are meant for.
source "$(dirname "$0")/lib.sh"

start_redis
# A lease well above the time n2 is frozen below, so that its task is not fenced meanwhile
# however slow the machine is (the scenario is an exit while the gang waits, not a lost node).
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone", "rack"],
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 30,
  "bind_timeout_s": 10
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# ---- 1: an exit the old scheduler had heard ----
# 2x4 fits one node; rank 0 ends at once, rank 1 a while later.
cmd1="echo \$MUSTER_ATTEMPT >> $T/one.\$RANK; [ \$RANK = 0 ] || while [ ! -e $T/release-one ]; do sleep 0.1; done; touch $T/one.done.\$RANK"
one=$(submit_json "$(jq -cn --arg c "$cmd1" '{name: "one", tasks: 2, gpus_per_task: 4, command: $c}')")
wait_for "rank 0 of one ended" 10 '[ -e '"$T"'/one.done.0 ]'
sleep 1.5 # the scheduler hears the exit
[ "$(job_state "$one")" = RUNNING ] || fail "one is $(job_state "$one") while rank 1 runs"
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
: >"$T/release-one"
wait_for "rank 1 of one ended" 10 '[ -e '"$T"'/one.done.1 ]'
start_musterd "$CONFIG"
wait_for "one succeeded" 15 job_state_is "$one" SUCCEEDED
[ "$(rcli HGET "muster:job:$one" attempt)" = 1 ] || fail "one was requeued: attempt $(rcli HGET "muster:job:$one" attempt)"
[ "$(cat "$T"/one.0 "$T"/one.1 | tr '\n' ' ')" = "1 1 " ] || fail "one's ranks ran: $(cat "$T"/one.*)"
kill -0 "$MUSTERD_PID" 2>/dev/null || fail "musterd died adopting the gang"
ok "an exit heard before the crash is kept by the worker and counted after it: attempt 1 succeeded"

# ---- 2: an exit while the gang waits for its other node ----
# 2x8: one rank per node.  The n1 rank ends while n2 is frozen, the n2 rank after n2 is back.
cmd2="echo \$MUSTER_ATTEMPT >> $T/two.\$MUSTER_NODE; while [ ! -e $T/release-two.\$MUSTER_NODE ]; do sleep 0.1; done; [ \$MUSTER_NODE = n2 ] || touch $T/two.done.n1"
two=$(submit_json "$(jq -cn --arg c "$cmd2" '{name: "two", tasks: 2, gpus_per_task: 8, command: $c}')")
wait_for "two running" 10 job_state_is "$two" RUNNING
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
kill -STOP "${WORKER_PID[n2]}"
regs=$(grep -c "node=n1 registered" "$T/musterd.log")
start_musterd "$CONFIG"
wait_for "n1 registered again" 10 '[ "$(grep -c "node=n1 registered" "$T/musterd.log")" -gt '"$regs"' ]'
: >"$T/release-two.n1"
wait_for "two's n1 rank ended" 10 '[ -e '"$T"'/two.done.n1 ]'
sleep 0.5 # its exit reaches the scheduler while the gang waits for n2
kill -CONT "${WORKER_PID[n2]}"
: >"$T/release-two.n2"
wait_for "two succeeded" 20 job_state_is "$two" SUCCEEDED
[ "$(rcli HGET "muster:job:$two" attempt)" = 1 ] || fail "two was requeued: attempt $(rcli HGET "muster:job:$two" attempt)"
[ "$(cat "$T"/two.n1 "$T"/two.n2 | tr '\n' ' ')" = "1 1 " ] || fail "two's ranks ran: $(cat "$T"/two.*)"
ok "an exit that came while the gang waited for its other node was counted: attempt 1 succeeded"

# Every exit was acknowledged in the end: the workers keep no task records.
wait_for "task records acknowledged" 10 '[ -z "$(ls "$T"/w/*/tasks/ 2>/dev/null | grep -v : | grep .)" ]'
ok "the workers forgot every exit once the outcome was stored"
