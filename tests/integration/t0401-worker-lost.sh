#!/usr/bin/env bash
# A node that stops answering is declared lost after node_lost_after_s: its gang is requeued
# (a new attempt, not counted as a failure), the gang's task on the healthy node is stopped first,
# and the new attempt runs on the nodes that are left.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":4,\"max_retries\":0,\"command\":\"echo \$\$ > $T/pid.\$MUSTER_NODE.\$MUSTER_ATTEMPT.\$RANK; [ \$MUSTER_ATTEMPT = 1 ] && exec sleep 300; exit 0\"}")
wait_for "job $id running" 10 job_state_is "$id" RUNNING
nodes=$(rcli HGET "muster:job:$id" nodes)
[ "$nodes" = n1 ] || [ "$nodes" = n2 ] || fail "expected both tasks on one node (best fit), got $nodes"
victim=$nodes
other=n1
[ "$victim" = n1 ] && other=n2

# Freeze the node's worker (a hung machine) rather than kill it: no heartbeats, tasks untouched.
kill -STOP "${WORKER_PID[$victim]}"
wait_for "node $victim lost" 15 '[ "$(rcli HGET muster:nodes '"$victim"' | jq -r .state)" = lost ]'
wait_for "job $id succeeded on $other" 20 job_state_is "$id" SUCCEEDED
[ "$(rcli HGET "muster:job:$id" attempt)" = 2 ] || fail "attempt $(rcli HGET "muster:job:$id" attempt)"
[ "$(rcli HGET "muster:job:$id" nodes)" = "$other" ] || fail "attempt 2 ran on $(rcli HGET "muster:job:$id" nodes)"
rcli XRANGE muster:events - + | has "node $victim lost" || fail "no event names the lost node"
ok "the gang was requeued without counting a failure and ran on $other"

# The frozen node comes back: it must stop the tasks of the superseded attempt at once.
kill -CONT "${WORKER_PID[$victim]}"
old_pids=$(cat "$T"/pid."$victim".1.* )
gone() {
    local p
    for p in $old_pids; do ! kill -0 "$p" 2>/dev/null || return 1; done
}
wait_for "tasks of the old attempt on $victim stopped" 20 gone
wait_for "node $victim ready again" 10 '[ "$(rcli HGET muster:nodes '"$victim"' | jq -r .state)" = ready ]'
ok "the returning node's stale tasks were stopped"
