#!/usr/bin/env bash
# Slurm's array and dependency rules through real daemons (issue #43): an array spec written as a
# Slurm user writes it ("3,1,1,2%0": {1,2,3}, no throttle) runs each index once, every element
# seeing the array's MUSTER_ARRAY_COUNT/_MIN/_MAX/_STEP; the array's reason counts running
# elements as they start; "notok" on it runs once all ended and one failed, while "ok" is
# cancelled; "started" (Slurm's "after") on a job cancelled before it started runs; alternatives
# (musterctl --after 'A?B', Slurm's "?") run once one is met.  No timing is asserted: every wait
# is on a state or a file.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# ---- an array as Slurm reads it; afternotok and afterok on it -----------------------------------
mkdir -p "$T/env"
arr=$(submit_json "{\"array\":\"3,1,1,2%0\",\"max_retries\":0,\"command\":\"echo \$MUSTER_ARRAY_COUNT \$MUSTER_ARRAY_MIN \$MUSTER_ARRAY_MAX \$MUSTER_ARRAY_STEP > $T/env/\$MUSTER_ARRAY_INDEX; while [ ! -e $T/arr-go ]; do sleep 0.1; done; [ \$MUSTER_ARRAY_INDEX != 2 ]\"}")
notok=$(submit_json "{\"after\":[{\"job\":\"$arr\",\"when\":\"notok\"}],\"command\":[\"true\"]}")
okjob=$(submit_json "{\"after\":[\"$arr\"],\"command\":[\"true\"]}")
wait_for "three elements running" 20 \
    'job_state_is '"${arr}_1"' RUNNING && job_state_is '"${arr}_2"' RUNNING && job_state_is '"${arr}_3"' RUNNING'
wait_for "the array's reason counts them" 10 \
    "job_field $arr reason | grep -qF 'elements: 0 done (0 not succeeded), 3 running, 0 pending of 3'"
expect_job_field "$arr" array "3,1,1,2%0"
[ "$(job_state "$notok")" = PENDING ] || fail "notok dependent is $(job_state "$notok")"
: >"$T/arr-go"
wait_for "array $arr failed" 30 job_state_is "$arr" FAILED
wait_for "the notok dependent succeeded" 20 job_state_is "$notok" SUCCEEDED
wait_for "the ok dependent cancelled" 10 job_state_is "$okjob" CANCELLED
expect_job_field "$okjob" error "after $arr succeeds, but 1 of its 3 elements did not succeed"
[ "$(ls "$T/env" | tr '\n' ' ')" = "1 2 3 " ] || fail "elements ran: $(ls "$T/env")"
for i in 1 2 3; do
    [ "$(cat "$T/env/$i")" = "3 1 3 1" ] || fail "element $i saw count/min/max/step '$(cat "$T/env/$i")'"
done
[ -z "$(job_state "${arr}_0")" ] || fail "an element 0 was made"
ok "array 3,1,1,2%0: indices 1,2,3 once each with count 3, min 1, max 3, step 1; reason followed the starts; notok ran, ok cancelled"

# ---- "after" (started) on a job cancelled before it started; alternatives ---------------------
gate=$(submit_json "{\"name\":\"gate\",\"command\":$(await_file_json "$T/gate-open")}")
parent=$(submit_json "{\"after\":[\"$gate\"],\"command\":[\"true\"]}")
child=$(ctl submit --after "$parent:started" -- true)
either=$(ctl submit --after "$parent?$gate:any" -- true)
wait_for "the gate running" 20 job_state_is "$gate" RUNNING
wait_for "the child stored" 10 '[ "$(job_state '"$either"')" = PENDING ]'
expect_job_field "$child" reason "after $parent starts"
expect_job_field "$either" after "$parent:ok?$gate:any"
expect_job_field "$either" reason "after $parent succeeds (or 1 more condition)"
ctl cancel "$parent" >/dev/null
wait_for "the parent cancelled" 10 job_state_is "$parent" CANCELLED
wait_for "the child of a parent cancelled before it started succeeded" 20 job_state_is "$child" SUCCEEDED
# The parent can never succeed: the alternative waits for the gate alone.
wait_for "the alternative's reason names the gate" 10 \
    "job_field $either reason | grep -qF 'after $gate ends'"
[ "$(job_state "$either")" = PENDING ] || fail "alternatives job is $(job_state "$either")"
: >"$T/gate-open"
wait_for "the alternatives job succeeded" 20 job_state_is "$either" SUCCEEDED
kill -0 "$MUSTERD_PID" || fail "musterd died"
ok "after (started) met by a cancel before the start; 'A?B' ran once the one left was met"
