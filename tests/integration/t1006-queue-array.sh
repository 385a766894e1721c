#!/usr/bin/env bash
# Job arrays (spec "array", issue #12) through real daemons: each element a gang with
# MUSTER_ARRAY_JOB_ID and MUSTER_ARRAY_INDEX, ids <array id>_<index>; "%2" never runs more than
# two elements at once (checked from the timestamps the tasks write); Slurm's index syntax;
# the array ends FAILED when an element failed; dependencies on an array (every element must meet
# the condition) and on one element;
# cancelling one element (made or not yet) and the whole array; holding the array holds its
# pending elements; bad arrays are REJECTED.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# ---- a throttled array: never more than 2 elements at once -------------------------------------
mkdir -p "$T/thr"
thr=$(submit_json "{\"name\":\"sweep\",\"array\":\"0-7%2\",\"command\":\"d=$T/thr/\$MUSTER_ARRAY_INDEX; date +%s%N > \$d.start; echo \$MUSTER_ARRAY_JOB_ID > \$d.id; sleep 0.3; date +%s%N > \$d.end\"}")
wait_for "array $thr succeeded" 60 job_state_is "$thr" SUCCEEDED
[ "$(ls "$T/thr"/*.end | wc -l)" = 8 ] || fail "elements that ran: $(ls "$T/thr")"
for i in 0 1 2 3 4 5 6 7; do
    [ "$(cat "$T/thr/$i.id")" = "$thr" ] || fail "element $i saw MUSTER_ARRAY_JOB_ID $(cat "$T/thr/$i.id")"
    [ "$(job_state "${thr}_$i")" = SUCCEEDED ] || fail "element ${thr}_$i is $(job_state "${thr}_$i")"
done
# At each element's start, how many elements had started and not yet ended (itself included).
most=$(for i in 0 1 2 3 4 5 6 7; do echo "$(cat "$T/thr/$i.start") $(cat "$T/thr/$i.end")"; done |
    awk '{ s[NR] = $1; e[NR] = $2 } END { m = 0; for (i = 1; i <= NR; i++) { n = 0;
        for (k = 1; k <= NR; k++) if (s[k] <= s[i] && e[k] > s[i]) n++; if (n > m) m = n }; print m }')
[ "$most" -le 2 ] || fail "$most elements ran at once under %2"
expect_job_field "$thr" array "0-7%2"
expect_job_field "$thr" array_done 8
ok "array 0-7%2: 8 elements, each with MUSTER_ARRAY_JOB_ID, at most $most running at once (task timestamps)"

# ---- index syntax, a failing element ------------------------------------------------------------
mkdir -p "$T/idx"
idx=$(submit_json "{\"array\":\"1,3,5-7,20-40:10\",\"command\":\"touch $T/idx/\$MUSTER_ARRAY_INDEX\"}")
bad=$(submit_json "{\"array\":\"0-2\",\"max_retries\":0,\"command\":\"[ \$MUSTER_ARRAY_INDEX != 1 ] || exit 3\"}")
wait_for "array $idx succeeded" 30 job_state_is "$idx" SUCCEEDED
[ "$(ls "$T/idx" | sort -n | tr '\n' ' ')" = "1 3 5 6 7 20 30 40 " ] || fail "indices run: $(ls "$T/idx")"
wait_for "array $bad failed" 30 job_state_is "$bad" FAILED
expect_job_field "$bad" error "1 of 3 elements did not succeed"
[ "$(job_state "${bad}_1")" = FAILED ] || fail "element 1 is $(job_state "${bad}_1")"
[ "$(job_state "${bad}_2")" = SUCCEEDED ] || fail "element 2 is $(job_state "${bad}_2")"
ok "indices 1,3,5-7,20-40:10 ran exactly; an array with a failed element ended FAILED"

# An element's log through musterd and its worker, by the element's id; the array has none.
echoer=$(submit_json "{\"array\":\"0-1\",\"command\":\"echo element \$MUSTER_ARRAY_INDEX\"}")
wait_for "array $echoer succeeded" 30 job_state_is "$echoer" SUCCEEDED
[ "$(ctl logs "${echoer}_1")" = "element 1" ] || fail "logs of element 1: $(ctl logs "${echoer}_1" 2>&1)"
expect_rc 1 ctl logs "$echoer"
has -F "is an array: its elements ran, each with its own log" <"$T/err" || fail "logs of the array: $(cat "$T/err")"
ok "musterctl logs reads an element's log; the array itself points to its elements"

# ---- dependencies on an array and on one element -------------------------------------------------
gated=$(submit_json "{\"array\":\"0-3\",\"command\":\"while [ ! -e $T/arr-go ]; do sleep 0.1; done; echo \$MUSTER_ARRAY_INDEX >> $T/arr-ran\"}")
all=$(submit_json "{\"after\":[\"$gated\"],\"command\":\"cat $T/arr-ran | wc -l > $T/after-all\"}")
one=$(submit_json "{\"after\":[{\"job\":\"${gated}_2\",\"when\":\"any\"}],\"command\":[\"true\"]}")
wait_for "dependents stored" 10 '[ "$(job_state '"$one"')" = PENDING ]'
expect_job_field "$all" reason "after $gated succeeds"
: >"$T/arr-go"
wait_for "the job after the array succeeded" 30 job_state_is "$all" SUCCEEDED
[ "$(tr -d ' ' <"$T/after-all")" = 4 ] || fail "ran after $(cat "$T/after-all") of 4 elements"
wait_for "the job after element 2 succeeded" 10 job_state_is "$one" SUCCEEDED
ok "a job after an array ran once every element succeeded; one after an element ran"

# ---- a condition on an array holds for every element ---------------------------------------------
# Element 1 fails at once; elements 0 and 2 wait for a gate and then succeed.
mixed=$(submit_json "{\"array\":\"0-2\",\"max_retries\":0,\"command\":\"[ \$MUSTER_ARRAY_INDEX != 1 ] || exit 3; while [ ! -e $T/mix-go ]; do sleep 0.1; done\"}")
m_ok=$(submit_json "{\"after\":[\"$mixed\"],\"command\":[\"true\"]}")
m_notok=$(submit_json "{\"after\":[{\"job\":\"$mixed\",\"when\":\"notok\"}],\"command\":[\"true\"]}")
m_any=$(submit_json "{\"after\":[{\"job\":\"$mixed\",\"when\":\"any\"}],\"command\":[\"true\"]}")
m_started=$(submit_json "{\"after\":[{\"job\":\"$mixed\",\"when\":\"started\"}],\"command\":[\"true\"]}")
# "ok" can never hold once one element failed: cancelled then, while the others still run.
wait_for "the job after the array (ok) cancelled" 30 job_state_is "$m_ok" CANCELLED
expect_job_field "$m_ok" error \
    "dependency never met: after $mixed succeeds, but 1 of its 3 elements did not succeed"
[ "$(job_state "$mixed")" = RUNNING ] || fail "array $mixed is $(job_state "$mixed"), want RUNNING"
wait_for "the job after every element started" 30 job_state_is "$m_started" SUCCEEDED
# "notok" waits for every element to end (Slurm), though one has failed already.
[ "$(job_state "$m_notok")" = PENDING ] || fail "notok dependent is $(job_state "$m_notok")"
[ "$(job_state "$m_any")" = PENDING ] || fail "any dependent is $(job_state "$m_any")"
: >"$T/mix-go"
wait_for "array $mixed failed" 30 job_state_is "$mixed" FAILED
# Slurm's afternotok on an array (issue #43): every element ended and one failed, so it runs
# (muster used to cancel it unless every element failed).
wait_for "the job after the array (notok) succeeded" 30 job_state_is "$m_notok" SUCCEEDED
wait_for "the job after the array (any) succeeded" 30 job_state_is "$m_any" SUCCEEDED
# Judged from the stored array once it is gone from memory: a new "notok" job runs too.
late=$(submit_json "{\"after\":[{\"job\":\"$mixed\",\"when\":\"notok\"}],\"command\":[\"true\"]}")
wait_for "a later notok dependent succeeded" 10 job_state_is "$late" SUCCEEDED
ok "after an array: ok cancelled at its first failure, started once all started, notok once all ended and one failed, any all ended"

# ---- hold of an array holds its pending elements; release lets them run ------------------------
# Each element takes the node's 8 GPUs, so one runs at a time and the rest wait, made, pending.
mkdir -p "$T/hold"
held=$(submit_json "{\"array\":\"0-2\",\"tasks\":1,\"gpus_per_task\":8,\"command\":\"while [ ! -e $T/hold-go ]; do sleep 0.1; done; touch $T/hold/\$MUSTER_ARRAY_INDEX\"}")
wait_for "element 0 running" 20 job_state_is "${held}_0" RUNNING
wait_for "element 1 made, pending" 10 job_state_is "${held}_1" PENDING
expect_rc 0 ctl hold "$held"
wait_for "element 1 held" 10 '[ "$(job_field '"${held}_1"' held)" = 1 ]'
: >"$T/hold-go"
wait_for "element 0 done" 20 job_state_is "${held}_0" SUCCEEDED
wait_for "element 1 waits as held" 10 "job_field ${held}_1 reason | grep -q 'held by operator'"
[ "$(job_state "${held}_1")" = PENDING ] || fail "held element 1 is $(job_state "${held}_1")"
[ ! -e "$T/hold/1" ] && [ ! -e "$T/hold/2" ] || fail "a held element ran: $(ls "$T/hold")"
expect_rc 0 ctl release "$held"
wait_for "array $held succeeded after release" 30 job_state_is "$held" SUCCEEDED
ok "hold of an array holds its pending elements (reason says so); release runs them all"

# ---- cancelling an element and the array ---------------------------------------------------------
big=$(submit_json "{\"array\":\"0-99%1\",\"command\":$(await_file_json "$T/never")}")
wait_for "element 0 running" 20 job_state_is "${big}_0" RUNNING
ctl -o json show "${big}_70" | jq -e --arg a "$big" '.state == "PENDING" and .array_job == $a and .array_index == 70' >/dev/null ||
    fail "show of an element not made yet: $(ctl -o json show "${big}_70")"
expect_rc 1 ctl show "${big}_100"
has -F "not found" <"$T/err" || fail "show of no such element: $(cat "$T/err")"
ctl cancel "${big}_50" >/dev/null
wait_for "element 50 cancelled before it was made" 10 job_state_is "${big}_50" CANCELLED
ctl jobs >"$T/jobs.txt"
grep -qE "^${big}_\[1-49,51-99\] +[^ ]* +default +PENDING" "$T/jobs.txt" || fail "no collapsed row: $(cat "$T/jobs.txt")"
grep -qE "^${big}_0 .* RUNNING" "$T/jobs.txt" || fail "no running element row: $(cat "$T/jobs.txt")"
[ "$(grep -c "^${big}" "$T/jobs.txt")" = 2 ] || fail "more rows than the running element and the rest: $(cat "$T/jobs.txt")"
ctl -o json show "${big}_0" | jq -e --arg a "$big" '.array_job == $a and .state == "RUNNING"' >/dev/null ||
    fail "show of element 0: $(ctl -o json show "${big}_0")"
ctl cancel "${big}_0" >/dev/null
wait_for "element 1 running after element 0 was cancelled" 20 job_state_is "${big}_1" RUNNING
[ "$(job_state "${big}_0")" = CANCELLED ] || fail "element 0 is $(job_state "${big}_0")"
[ "$(job_state "$big")" = RUNNING ] || fail "array is $(job_state "$big")"
ctl cancel "$big" >/dev/null
wait_for "array cancelled" 10 job_state_is "$big" CANCELLED
wait_for "element 1 cancelled" 10 job_state_is "${big}_1" CANCELLED
[ -z "$(job_state "${big}_2")" ] || fail "element 2 was made: $(job_state "${big}_2")"
wait_for "no task left" 10 '! pgrep -f "$T/never" >/dev/null'
ok "cancel of an element (made or not) goes on with the next; cancel of the array ends it all"

# ---- bad arrays are REJECTED ---------------------------------------------------------------------
r1=$(submit_json '{"array":"5-1","command":["true"]}')
r2=$(submit_json '{"array":"a-b","command":["true"]}')
r3=$(submit_json '{"array":"0-10000","command":["true"]}')
r4=$(submit_json '{"array":"0-9%x","command":["true"]}')
r5=$(submit_json '{"array":"1 ,2","command":["true"]}')
r6=$(submit_json '{"array":7,"command":["true"]}')
r7=$(submit_json '{"array":"0-3","singleton":true,"name":"x","command":["true"]}')
good=$(submit_json '{"array":"0-1","command":["true"]}')
expect_job_rejected "$r1" "array: a range ends before it starts in '5-1'"
expect_job_rejected "$r2" "array: an index (0..9999999) missing in 'a-b'"
expect_job_rejected "$r3" "array: '0-10000' has 10001 elements, over the cluster's max_array_size (10000)"
expect_job_rejected "$r4" "array: '%' takes a count of 0..1000000 (0: no limit)"
expect_job_rejected "$r5" "array: unexpected character in '1 ,2'"
expect_job_rejected "$r6" "array: expected a string"
expect_job_rejected "$r7" "singleton: not with an array"
wait_for "the good array after them succeeded" 20 job_state_is "$good" SUCCEEDED
kill -0 "$MUSTERD_PID" || fail "musterd died"
ok "bad syntax, reversed range, over max_array_size, %x, blank before a comma, not a string: REJECTED"

# ---- an array survives kill -9 of musterd --------------------------------------------------------
surv=$(submit_json "{\"array\":\"0-5%2\",\"command\":\"echo \$MUSTER_ARRAY_INDEX >> $T/surv; while [ ! -e $T/surv-go ]; do sleep 0.1; done\"}")
wait_for "two elements running" 20 'job_state_is '"${surv}_0"' RUNNING && job_state_is '"${surv}_1"' RUNNING'
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
start_musterd "$CONFIG"
wait_for "musterd took the array back" 10 'grep -q "recovered" "$T/musterd.log"'
[ "$(job_state "$surv")" = RUNNING ] || fail "array is $(job_state "$surv") after the restart"
[ -z "$(job_state "${surv}_2")" ] || fail "element 2 made while 0 and 1 run under %2"
: >"$T/surv-go"
wait_for "array succeeded after the restart" 40 job_state_is "$surv" SUCCEEDED
[ "$(sort -n "$T/surv" | tr '\n' ' ')" = "0 1 2 3 4 5 " ] || fail "elements ran: $(sort -n "$T/surv" | tr '\n' ' ')"
ok "after kill -9 the array went on: each element ran once, still at most 2 at a time"

# ---- musterctl submit --array --wait waits for every element -------------------------------------
expect_rc 0 ctl submit --array 0-3%2 --max-retries 0 --wait -- sh -c "touch $T/w.\$MUSTER_ARRAY_INDEX"
[ "$(ls "$T"/w.* | wc -l)" = 4 ] || fail "--wait returned before every element ran: $(ls "$T")"
expect_rc 1 ctl submit --array 0-1 --max-retries 0 --wait -- sh -c '[ "$MUSTER_ARRAY_INDEX" = 0 ]'
has -F "1 of 2 elements did not succeed" <"$T/err" || fail "--wait error: $(cat "$T/err")"
ok "musterctl submit --array --wait exits 0 once all succeeded, 1 when one failed"
