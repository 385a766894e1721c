#!/usr/bin/env bash
# A node's life after it leaves (issue #40).  A worker stopped with SIGTERM stops its tasks,
# reports them and says BYE: its node turns "down" at once (not "lost" node_lost_after_s later),
# and the gang that ran there is requeued without counting a failure and runs on the other node.
# node_lost_after_s is 120 in the first part, so the only way the gang can move within the
# waits below is the goodbye.  musterctl node forget is refused while the node is registered
# and for a name with no record, and removes a down node's record (and the cordon kept for it),
# for good: a restarted musterd does not wait for it.  A worker whose GPU count does not match its pool's
# gpus_per_node registers, with a WARN line and a warning in its node record.  After the
# restart (node_lost_after_s 3) a lost node is forgotten too, and forgotten nodes whose workers
# come back register as usual.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || fail "jq not found"

# config LOST_AFTER_S: the default cluster plus a 4-GPU pool of another GPU type (no job here
# asks for it, so nothing is placed on its node).
config() {
    make_config --with '{"node_lost_after_s": '"$1"', "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3},
    {"name": "small", "capacity": "on-demand", "instance_type": "g6.12xlarge",
     "gpu_type": "L4", "gpus_per_node": 4, "price_per_hour": 5}]}' >/dev/null
}

node_state() {
    ctl -o json nodes | jq -r ".[] | select(.name == \"$1\") | .state"
}

node_absent() {
    [ "$(rcli HEXISTS muster:nodes "$1")" = 0 ] \
        && ctl -o json nodes | jq -e "all(.[]; .name != \"$1\")" >/dev/null
}

start_redis
config 120
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
start_worker n3 small 8 # 8 GPUs in a pool of 4-GPU nodes
wait_for "3 nodes ready" 15 \
    '[ "$(ctl -o json nodes | jq "[.[] | select(.state == \"ready\")] | length")" = 3 ]'

# ---- a GPU count that does not match the pool: registered, and said ----
ctl -o json nodes | jq -e '.[] | select(.name == "n3")
    | .gpus == 8 and (.warning | test("reports 8 GPU\\(s\\), but pool small has gpus_per_node 4"))' \
    >/dev/null || fail "n3's record: $(rcli HGET muster:nodes n3)"
has -E 'WARN.*node=n3 reports 8 GPU\(s\), but pool small has gpus_per_node 4' "$T/musterd.log" \
    || fail "no WARN line for n3 in musterd's log"
COLUMNS=400 ctl nodes | has -E '^n3 .*reports 8 GPU\(s\)' || fail "musterctl nodes: $(COLUMNS=400 ctl nodes)"
for n in n1 n2; do
    ctl -o json nodes | jq -e ".[] | select(.name == \"$n\") | has(\"warning\") | not" >/dev/null \
        || fail "$n has a warning: $(rcli HGET muster:nodes $n)"
done
ok "a worker with 8 GPUs in a gpus_per_node 4 pool registered, with a WARN line and a warning"

# ---- SIGTERM: the node is down at once, its gang requeued and run on the other node ----
id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":4,\"gpu_type\":\"A100\",\"max_retries\":0,\"command\":\"[ \$MUSTER_ATTEMPT = 1 ] && exec sleep 300; exit 0\"}")
wait_for "job $id running" 15 job_state_is "$id" RUNNING
victim=$(job_field "$id" nodes)
[ "$victim" = n1 ] || [ "$victim" = n2 ] || fail "expected both tasks on n1 or n2 (best fit), got '$victim'"
other=n1
[ "$victim" = n1 ] && other=n2

expect_rc 1 ctl node forget "$victim"
has -F "node '$victim' is registered (ready)" "$T/err" || fail "forget of a ready node: $(cat "$T/err")"
expect_rc 1 ctl node forget nosuchnode
has -F "node 'nosuchnode' not found" "$T/err" || fail "forget of an unknown node: $(cat "$T/err")"
[ "$(node_state "$victim")" = ready ] || fail "$victim is $(node_state "$victim") after a refused forget"
ok "node forget refused for a ready node and for an unknown one"

pid=${WORKER_PID[$victim]}
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 0 ] || fail "the worker of $victim exited $rc after SIGTERM, expected 0"
has -F "node=$victim BYE" "$T/worker-$victim.log" || fail "the worker of $victim logged no BYE"
wait_for "node $victim down" 10 '[ "$(node_state '"$victim"')" = down ]'
has -F "node=$victim down: its worker stopped cleanly" "$T/musterd.log" || fail "musterd logged no down"
wait_for "job $id succeeded on $other" 30 job_state_is "$id" SUCCEEDED
[ "$(job_field "$id" attempt)" = 2 ] || fail "attempt $(job_field "$id" attempt), expected 2"
[ "$(job_field "$id" nodes)" = "$other" ] || fail "attempt 2 ran on $(job_field "$id" nodes)"
[ "$(job_field "$id" failures)" = 0 ] || fail "failures $(job_field "$id" failures): the stop counted"
rcli XRANGE muster:events - + | has -F "stopped by its worker's stop" || fail "no event says why"
[ "$(node_state "$victim")" = down ] || fail "$victim is $(node_state "$victim"), expected down"
COLUMNS=400 ctl nodes | has -E "^$victim +spot-a +spot +down " || fail "musterctl nodes: $(COLUMNS=400 ctl nodes)"
ok "SIGTERM: $victim down at once, the gang requeued without a failure and run on $other"

# ---- forget the down node: gone from the nodes hash and musterctl nodes, its cordon too ----
expect_rc 0 ctl cordon "$victim" # kept in node:wanted for when it registers
[ "$(rcli HEXISTS muster:node:wanted "$victim")" = 1 ] || fail "the cordon of $victim was not kept"
expect_rc 0 ctl node forget "$victim"
has -F "ok: node $victim forgotten" "$T/out" || fail "forget said: $(cat "$T/out")"
node_absent "$victim" || fail "$victim is still listed: $(rcli HGET muster:nodes "$victim")"
[ "$(rcli HEXISTS muster:node:wanted "$victim")" = 0 ] || fail "the cordon of $victim outlived its record"
expect_rc 1 ctl node forget "$victim"
has -F "node '$victim' not found" "$T/err" || fail "a second forget: $(cat "$T/err")"
ok "node forget removed the down node's record"

# ---- a restart: the forgotten node is not expected back; a lost node is forgotten too ----
stop_musterd
node_absent "$victim" || fail "$victim's record came back when musterd stopped"
config 3
start_musterd "$CONFIG"
wait_for "musterd sees every node of the last run back" 20 \
    has -F "every node of the last run is back" "$T/musterd.log"
has -E "waiting up to 3 s for the 2 node\(s\) of the last run" "$T/musterd.log" \
    || fail "musterd waited for other than n3 and $other: $(grep -F 'waiting up to' "$T/musterd.log")"
node_absent "$victim" || fail "$victim is listed after the restart"
ok "a restarted musterd did not wait for the forgotten node"

kill -STOP "${WORKER_PID[n3]}"
at_exit "kill -CONT ${WORKER_PID[n3]} 2>/dev/null"
wait_for "node n3 lost" 20 '[ "$(node_state n3)" = lost ]'
expect_rc 0 ctl -o json node forget n3
jq -e '.ok == true and (.result | test("forgotten"))' "$T/out" >/dev/null || fail "forget n3: $(cat "$T/out")"
node_absent n3 || fail "n3 is still listed"
ok "node forget removed the lost node's record"

# ---- forgotten nodes that come back register as usual ----
kill -CONT "${WORKER_PID[n3]}"
start_worker "$victim" spot-a 8
wait_for "n3 and $victim registered again, ready (the forgotten cordon not applied)" 20 \
    '[ "$(node_state n3)" = ready ] && [ "$(node_state '"$victim"')" = ready ]'
ok "forgotten nodes whose workers came back registered again"
