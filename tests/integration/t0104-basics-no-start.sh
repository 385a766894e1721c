#!/usr/bin/env bash
# A gang whose tasks cannot start (issue #10 item 2): however many of its tasks fail to start,
# and in whatever order the failures and the other tasks' acknowledgements arrive, the attempt
# ends once, its GPUs are given back exactly once, and the job ends FAILED after its retries
# (musterctl submit --wait returns 1) instead of sitting PENDING with its GPUs held.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 10, "bind_timeout_s": 10, "kill_grace_s": 2,
  "retry_backoff_s": 1, "retry_backoff_max_s": 2
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# all_free: every node has all 8 GPUs free and runs no job (musterd rewrites the status at once).
all_free() {
    ctl -o json nodes | jq -e 'length == 2 and all(.gpus_free == 8 and (.jobs | length) == 0)' >/dev/null
}

for n in 2 3 8; do
    id=$(submit_json "{\"tasks\":$n,\"gpus_per_task\":1,\"max_retries\":1,\"command\":[\"/nonexistent/prog\"]}")
    wait_for "the $n-task gang failed" 30 job_state_is "$id" FAILED
    rcli HGET "muster:job:$id" error | has "cannot run '/nonexistent/prog'" ||
        fail "error: $(rcli HGET "muster:job:$id" error)"
    [ "$(rcli HGET "muster:job:$id" attempt)" = 2 ] || fail "attempt $(rcli HGET "muster:job:$id" attempt)"
    wait_for "every GPU free after the $n-task gang" 10 all_free
    ok "$n tasks that cannot start: FAILED after its retry, every GPU given back"
done

# Some tasks start and some do not: ./prog exists in n1's state dir (the default workdir) only.
# Two tasks of 8 GPUs each, one per node: n1's starts and is stopped, n2's cannot start.
printf '#!/bin/sh\nexec sleep 30\n' >"$T/w/n1/prog"
chmod +x "$T/w/n1/prog"
id=$(submit_json '{"tasks":2,"gpus_per_task":8,"max_retries":1,"command":["./prog"]}')
wait_for "the half-starting gang failed" 30 job_state_is "$id" FAILED
rcli HGET "muster:job:$id" error | has "cannot run './prog'" || fail "error: $(rcli HGET "muster:job:$id" error)"
wait_for "every GPU free after the half-starting gang" 15 all_free
grep -q "job=$id task=[01] attempt=1 started" "$T/worker-n1.log" || fail "n1's task never started"
ok "one task started and one could not: the started one was stopped, FAILED, every GPU given back"

# The user's command from the issue: returns, exit 1, FAILED.
rc=0
ctl submit --tasks 2 --gpus-per-task 1 --max-retries 1 --wait -- /nonexistent/prog >"$T/submit.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "submit --wait exited $rc: $(cat "$T/submit.out")"
has FAILED "$T/submit.out" || fail "submit --wait output: $(cat "$T/submit.out")"
wait_for "every GPU free after submit --wait" 10 all_free
ok "musterctl submit --wait of an unrunnable 2-task gang returns 1 with FAILED"

# After a restart nothing is held either.
stop_musterd
start_musterd "$CONFIG"
wait_for "nodes back" 15 '[ "$(ctl -o json nodes | jq "map(select(.state == \"ready\")) | length")" = 2 ]'
wait_for "every GPU free after the restart" 10 all_free
ok "after a restart every GPU is free"
