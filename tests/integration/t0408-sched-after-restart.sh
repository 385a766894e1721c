#!/usr/bin/env bash
# Dependencies survive kill -9 of musterd (issue #12): jobs waiting for a running gate, named by
# id and by idempotency key, still wait after the restart (PENDING, same reason), and run or are
# cancelled as their conditions say once the gate ends.  A job whose dependency ended while no
# scheduler ran is judged at the restart.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

gate=$(submit_json "{\"name\":\"gate\",\"idempotency_key\":\"gate-k\",\"command\":$(await_file_json "$T/open")}")
quick=$(submit_json "{\"name\":\"quick\",\"max_retries\":0,\"command\":\"while [ ! -e $T/quick-go ]; do sleep 0.1; done; exit 4\"}")
wait_for "gate and quick running" 20 'job_state_is '"$gate"' RUNNING && job_state_is '"$quick"' RUNNING'
d1=$(submit_json "{\"name\":\"d1\",\"after\":[{\"key\":\"gate-k\"}],\"command\":\"echo d1 >> $T/ran\"}")
d2=$(submit_json "{\"name\":\"d2\",\"after\":[\"$d1\"],\"command\":\"echo d2 >> $T/ran\"}")
d3=$(submit_json "{\"name\":\"d3\",\"after\":[{\"job\":\"$gate\",\"when\":\"notok\"}],\"command\":\"echo d3 >> $T/ran\"}")
q1=$(submit_json "{\"name\":\"q1\",\"after\":[\"$quick\"],\"command\":\"echo q1 >> $T/ran\"}")
q2=$(submit_json "{\"name\":\"q2\",\"after\":[{\"job\":\"$quick\",\"when\":\"notok\"}],\"command\":\"echo q2 >> $T/ran\"}")
wait_for "q2 stored" 10 '[ "$(job_field '"$q2"' reason)" = "after '"$quick"' fails" ]'
reason_before=$(job_field "$d2" reason)
[ "$reason_before" = "after $d1 succeeds" ] || fail "d2 reason '$reason_before'"

kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
: >"$T/quick-go" # quick fails (exit 4) while no scheduler runs
wait_for "quick's task exited" 10 '! pgrep -f "$T/quick-go" >/dev/null'
start_musterd "$CONFIG"

wait_for "quick FAILED after the restart" 20 job_state_is "$quick" FAILED
wait_for "q1 cancelled" 10 job_state_is "$q1" CANCELLED
job_field "$q1" error | has -F "after $quick succeeds, but it ended FAILED" || fail "q1 error '$(job_field "$q1" error)'"
wait_for "q2 succeeded" 20 job_state_is "$q2" SUCCEEDED
for id in "$d1" "$d2" "$d3"; do
    [ "$(job_state "$id")" = PENDING ] || fail "job $id is $(job_state "$id") after the restart"
done
[ "$(job_field "$d2" reason)" = "$reason_before" ] || fail "d2 reason after the restart '$(job_field "$d2" reason)'"
[ ! -e "$T/ran" ] || [ "$(cat "$T/ran")" = q2 ] || fail "ran before the gate opened: $(cat "$T/ran")"
grep -q "job(s) wait for other jobs" "$T/musterd.log" || fail "no waiting jobs recovered"
ok "after kill -9: the waiting jobs still wait; a dependency that failed meanwhile was judged"

: >"$T/open"
wait_for "d2 succeeded" 30 job_state_is "$d2" SUCCEEDED
wait_for "d3 cancelled" 10 job_state_is "$d3" CANCELLED
[ "$(grep -c . "$T/ran")" = 3 ] || fail "ran: $(cat "$T/ran")"
[ "$(grep -v q2 "$T/ran" | tr '\n' ' ')" = "d1 d2 " ] || fail "ran: $(cat "$T/ran")"
ok "once the gate succeeded the chain ran in order and the notok job was cancelled"
