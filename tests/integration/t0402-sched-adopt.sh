#!/usr/bin/env bash
# kill -9 musterd while gangs run: after the restart the running gangs are adopted, not
# restarted (same attempt, their processes untouched), and an exit that happened while no
# scheduler ran is counted with its true exit code.  A job submitted during the outage is taken
# in exactly once.
source "$(dirname "$0")/lib.sh"

start_redis
# A lease far longer than the outage below: this test is about adoption, not fencing (t0405).
make_config --with '{"node_lost_after_s": 30}' >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# "long" runs until the test releases it (not for a fixed time, which a slow machine could
# outlast before the checks below); its shells are found by the release file's name.
ok_job=$(submit_json "{\"name\":\"long\",\"tasks\":2,\"gpus_per_task\":4,\"command\":\"echo \$MUSTER_ATTEMPT >> $T/long.\$RANK; while [ ! -e $T/release-long ]; do sleep 0.1; done\"}")
bad_job=$(submit_json "{\"name\":\"bad\",\"tasks\":1,\"gpus_per_task\":4,\"max_retries\":0,\"command\":\"echo \$MUSTER_ATTEMPT >> $T/bad; sleep 2; exit 5\"}")
wait_for "both running" 10 'job_state_is '"$ok_job"' RUNNING && job_state_is '"$bad_job"' RUNNING'
pids_before=$(pgrep -f "$T/release-long" | sort | tr '\n' ' ')
[ -n "$pids_before" ] || fail "no process of the long gang found"

kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
sleep 3 # "bad" exits with 5 while no scheduler runs
during=$(submit_json '{"name":"during","tasks":1,"gpus_per_task":1,"command":["true"]}')
start_musterd "$CONFIG"

wait_for "bad FAILED with its true exit code" 15 job_state_is "$bad_job" FAILED
[ "$(rcli HGET "muster:job:$bad_job" exit_code)" = 5 ] || fail "bad exit_code $(rcli HGET "muster:job:$bad_job" exit_code)"
[ "$(job_state "$ok_job")" = RUNNING ] || fail "long is $(job_state "$ok_job") after the restart"
[ "$(rcli HGET "muster:job:$ok_job" attempt)" = 1 ] || fail "long was restarted (attempt $(rcli HGET "muster:job:$ok_job" attempt))"
[ "$(pgrep -f "$T/release-long" | sort | tr '\n' ' ')" = "$pids_before" ] || fail "the long gang's processes changed"
grep -q "adopted after the restart" "$T/musterd.log" || fail "no adoption logged"
ok "running gang adopted (same attempt, same processes); an exit during the outage counted (code 5)"

: >"$T/release-long"
wait_for "long succeeded" 20 job_state_is "$ok_job" SUCCEEDED
[ "$(cat "$T"/long.* | sort -u | tr '\n' ' ')" = "1 " ] || fail "long ran attempts: $(cat "$T"/long.*)"
wait_for "during succeeded" 10 job_state_is "$during" SUCCEEDED
[ "$(rcli ZCARD muster:jobs)" = 3 ] || fail "expected 3 jobs, have $(rcli ZCARD muster:jobs)"
[ "$(rcli XPENDING muster:submit muster-scheduler | head -1)" = 0 ] || fail "submissions left unacknowledged"
ok "the adopted gang finished as attempt 1; the submission made during the outage ran once"
