#!/usr/bin/env bash
# Redis stops answering while a gang runs: musterd keeps answering its workers, the tasks keep
# running, the gang's exit during the outage is held (nothing is decided that cannot be written),
# and once Redis is back everything is written and the job ends SUCCEEDED; new work then flows.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":4,\"command\":\"sleep 2; echo done > $T/done.\$RANK\"}")
wait_for "running" 10 job_state_is "$id" RUNNING
kill -STOP "$REDIS_PID"
# The tasks finish while Redis is frozen (a 2 s task: wait for it, however slow the machine).
for ((i = 0; i < 300; i++)); do
    [ -e "$T/done.0" ] && [ -e "$T/done.1" ] && break
    sleep 0.1
done
[ -e "$T/done.0" ] && [ -e "$T/done.1" ] || { kill -CONT "$REDIS_PID"; fail "the tasks did not run on during the outage"; }
# musterd must notice the outage (a write or reconnect times out after 2 s) with the exits in
# hand, and hold them: wait until it says Redis is unreachable, not for a fixed time.
for ((i = 0; i < 300; i++)); do
    grep -q "redis unreachable" "$T/musterd.log" && break
    sleep 0.1
done
grep -q "redis unreachable" "$T/musterd.log" || { kill -CONT "$REDIS_PID"; fail "musterd did not notice the outage"; }
kill -0 "$MUSTERD_PID" || { kill -CONT "$REDIS_PID"; fail "musterd died during the outage"; }
kill -CONT "$REDIS_PID"
wait_for "job succeeded after the outage" 20 job_state_is "$id" SUCCEEDED
grep -q "redis connection restored" "$T/musterd.log" || fail "no recovery logged"
[ "$(rcli HGET muster:nodes n1 | jq -r .state)" = ready ] || fail "n1 not ready after the outage"
ok "the gang finished during the outage and its end was written afterwards"

id2=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "new job after the outage" 10 job_state_is "$id2" SUCCEEDED
ok "work flows again"
