#!/usr/bin/env bash
# The job counters add up (issue #40): every counter counts jobs that can run, plain jobs and
# job arrays' elements, never an array itself; so once every job has ended,
# jobs_submitted = succeeded + failed + cancelled + timeout, with rejected submissions counted
# apart.  A 10-element array used to count once in jobs_submitted and ten times in
# jobs_succeeded/failed.  Plain jobs (ok, failed), an array with a failing element, a rejected
# spec, a cancelled job, a dependent cancelled as its dependency failed, a timeout, and a
# throttled array cancelled with 2 of its 100 elements made; then the sum from /metrics, and
# nothing left in the gauges or musterctl queues.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
start_redis
make_config >/dev/null
MPORT=$(free_port)
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
scrape() { curl -sf "http://127.0.0.1:$MPORT/metrics"; }
value() { scrape | awk -v k="$1" '$1 == k { print $2 }'; }

ok1=$(submit_json '{"command":["true"]}')
ok2=$(submit_json '{"command":["true"]}')
bad=$(submit_json '{"command":["false"],"max_retries":0}')
arr=$(submit_json '{"array":"0-9","max_retries":0,"command":"[ \"$MUSTER_ARRAY_INDEX\" != 3 ]"}')
rej=$(submit_json '{"command":[]}')
sleeper=$(submit_json '{"command":["sleep","300"]}')
dep=$(submit_json "{\"after\":[\"$bad\"],\"command\":[\"true\"]}")
slow=$(submit_json '{"time_limit_s":1,"command":["sleep","300"]}')
big=$(submit_json '{"array":"0-99%2","command":["sleep","300"]}')

wait_for "job $sleeper running" 20 job_state_is "$sleeper" RUNNING
ctl cancel "$sleeper" >/dev/null || fail "cancel $sleeper failed"
wait_for "2 elements of array $big running" 20 \
    'job_state_is "${big}_0" RUNNING && job_state_is "${big}_1" RUNNING'
ctl cancel "$big" >/dev/null || fail "cancel $big failed"

for want in "$ok1 SUCCEEDED" "$ok2 SUCCEEDED" "$bad FAILED" "$arr FAILED" "$rej REJECTED" \
    "$sleeper CANCELLED" "$dep CANCELLED" "$slow TIMEOUT" "$big CANCELLED" \
    "${big}_0 CANCELLED" "${big}_1 CANCELLED"; do
    # shellcheck disable=SC2086 # split "ID STATE" into $1 and $2
    set -- $want
    wait_for "job $1 $2" 30 job_state_is "$1" "$2"
done
[ "$(job_field "$arr" array_failed)" = 1 ] || fail "array $arr: array_failed $(job_field "$arr" array_failed)"
ok "every job ended as meant"

declare -A n
for c in submitted succeeded failed cancelled timeout rejected; do
    n[$c]=$(value "muster_jobs_${c}_total")
done
summary="submitted ${n[submitted]}, succeeded ${n[succeeded]}, failed ${n[failed]}, cancelled ${n[cancelled]}, timeout ${n[timeout]}, rejected ${n[rejected]}"
# 2 ok + 1 failed + 10 elements + the cancelled one + the dependent + the timeout + 2 elements made
[ "${n[submitted]}" = 18 ] || fail "$summary; expected 18 submitted"
[ "${n[succeeded]}" = 11 ] && [ "${n[failed]}" = 2 ] && [ "${n[cancelled]}" = 4 ] &&
    [ "${n[timeout]}" = 1 ] && [ "${n[rejected]}" = 1 ] || fail "$summary"
[ $((n[succeeded] + n[failed] + n[cancelled] + n[timeout])) = "${n[submitted]}" ] ||
    fail "the final counters do not add up to submitted: $summary"
ok "counters add up: $summary"

scrape | awk '$1 ~ /^muster_jobs\{/ && $2 != 0 { print; bad = 1 } END { exit bad }' >"$T/gauges" ||
    fail "jobs left in the gauge at rest: $(cat "$T/gauges")"
wait_for "musterctl queues empty" 10 \
    '[ "$(ctl -o json queues | jq "[.[] | .pending_jobs + .running_jobs + .running_gpus] | add")" = 0 ]'
ok "at rest nothing is left in muster_jobs nor in musterctl queues"
