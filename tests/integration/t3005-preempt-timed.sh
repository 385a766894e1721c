#!/usr/bin/env bash
# Decisions that become right with time alone (issue #10 item 3): nothing else happens in this
# test once the jobs are submitted, and still
#  1. a high-priority gang preempts a victim the moment it reaches min_runtime_s;
#  2. a pending reason with a time in it ("est. start in 30s") stays current;
#  3. a failed gang is retried when its backoff is over.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 10, "bind_timeout_s": 10, "kill_grace_s": 2,
  "min_runtime_s": 4, "retry_backoff_s": 3, "retry_backoff_max_s": 3
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# ---- 1: preemption once the victim is old enough ----
low=$(submit_json "{\"name\":\"low\",\"priority\":1,\"gpus_per_task\":8,\"command\":\"[ \$MUSTER_ATTEMPT = 1 ] || exit 0; exec sleep 120\"}")
wait_for "low running" 15 job_state_is "$low" RUNNING
high=$(submit_json "{\"name\":\"high\",\"priority\":10,\"gpus_per_task\":8,\"command\":\"sleep 1\"}")
wait_for "high pending while low is younger than min_runtime_s" 10 job_state_is "$high" PENDING
wait_for "high preempted low once it came of age, and ran" 40 job_state_is "$high" SUCCEEDED
[ "$(rcli HGET "muster:job:$low" attempt)" -ge 2 ] || fail "low was not preempted"
rcli XRANGE muster:events - + | has "preempted by job $high" || fail "no preemption event"
wait_for "low ran again" 20 job_state_is "$low" SUCCEEDED
ok "a victim was preempted when it reached min_runtime_s, with nothing else happening"

# ---- 2: a reason with a time in it stays current ----
# A job that may not be preempted and ends at its 40 s limit; the one behind it waits for it.
busy=$(submit_json '{"name":"busy","preemptible":false,"gpus_per_task":8,"time_limit_s":40,"command":"exec sleep 120"}')
wait_for "busy running" 15 job_state_is "$busy" RUNNING
next=$(submit_json '{"name":"next","priority":5,"gpus_per_task":8,"command":"true"}')
wait_for "next has an estimated start" 15 'rcli HGET "muster:job:'"$next"'" reason | grep -q "est. start in"'
first=$(rcli HGET "muster:job:$next" reason)
wait_for "the estimate moves on by itself" 30 '[ "$(rcli HGET "muster:job:'"$next"'" reason)" != "$first" ]'
rcli HGET "muster:job:$next" reason | has "est. start in" || fail "reason: $(rcli HGET "muster:job:$next" reason)"
ok "the reason '$first' became '$(rcli HGET "muster:job:$next" reason)' with nothing else happening"
ctl cancel "$busy" "$next" >/dev/null
wait_for "busy cancelled" 15 job_state_is "$busy" CANCELLED

# ---- 3: a retry after its backoff ----
flaky=$(submit_json "{\"name\":\"flaky\",\"gpus_per_task\":8,\"max_retries\":1,\"command\":\"date +%s%N >> $T/flaky.\$MUSTER_ATTEMPT; [ \$MUSTER_ATTEMPT = 2 ] || exit 3\"}")
wait_for "flaky waits out its backoff" 15 'rcli HGET "muster:job:'"$flaky"'" reason | grep -q "retrying in"'
rcli HGET "muster:job:$flaky" reason | has -E "retrying in [0-9]+s after attempt 1 failed: task 0 on node n1 exited with code 3" ||
    fail "reason: $(rcli HGET "muster:job:$flaky" reason)"
wait_for "flaky retried by itself and succeeded" 30 job_state_is "$flaky" SUCCEEDED
gap_ms=$((($(cat "$T/flaky.2") - $(cat "$T/flaky.1")) / 1000000))
[ "$gap_ms" -ge 3000 ] || fail "attempt 2 started ${gap_ms} ms after attempt 1, inside the 3 s backoff"
ok "a failed gang waited its 3 s backoff (attempt 2 came ${gap_ms} ms later) and was retried"
