#!/usr/bin/env bash
# Dependencies between jobs (spec "after", issue #12) through real daemons: a 3-step chain whose
# step 2 fails cancels step 3 with a reason; notok, any and started run; a job waits PENDING with
# a reason naming what it waits for; a pipeline submitted in one go names its steps by
# idempotency key; a cancel cascades down a chain; bad conditions are REJECTED and disturb
# nothing.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# ---- a chain whose middle step fails ----------------------------------------------------------
s1=$(submit_json "{\"name\":\"prep\",\"command\":\"echo prep >> $T/chain\"}")
s2=$(submit_json "{\"name\":\"train\",\"max_retries\":0,\"after\":[\"$s1\"],\"command\":\"echo train >> $T/chain; exit 3\"}")
s3=$(submit_json "{\"name\":\"eval\",\"after\":[{\"job\":\"$s2\"}],\"command\":\"echo eval >> $T/chain\"}")
notok=$(submit_json "{\"after\":[{\"job\":\"$s2\",\"when\":\"notok\"}],\"command\":\"echo notok >> $T/others\"}")
any=$(submit_json "{\"after\":[{\"job\":\"$s2\",\"when\":\"any\"}],\"command\":\"echo any >> $T/others\"}")
okjob=$(submit_json "{\"after\":[{\"job\":\"$s1\",\"when\":\"ok\"}],\"command\":\"echo ok >> $T/others\"}")
started=$(submit_json "{\"after\":[{\"job\":\"$s2\",\"when\":\"started\"}],\"command\":[\"true\"]}")
wait_for "step 2 failed" 20 job_state_is "$s2" FAILED
wait_for "step 3 cancelled" 10 job_state_is "$s3" CANCELLED
[ "$(job_state "$s1")" = SUCCEEDED ] || fail "step 1 is $(job_state "$s1")"
expect_job_field "$s3" error "after $s2 succeeds, but it ended FAILED"
[ "$(cat "$T/chain")" = "$(printf 'prep\ntrain')" ] || fail "chain ran: $(cat "$T/chain")"
ctl -o json events --job "$s3" | jq -e --arg s2 "$s2" \
    '[.[] | select(.state == "CANCELLED" and (.reason | contains($s2)))] | length == 1' >/dev/null ||
    fail "no CANCELLED event naming step 2: $(ctl -o json events --job "$s3")"
ok "3-step chain: step 2 FAILED, step 3 CANCELLED with the reason, never ran"

for id in "$notok" "$any" "$okjob" "$started"; do
    wait_for "job $id succeeded" 20 job_state_is "$id" SUCCEEDED
done
[ "$(sort "$T/others" | tr '\n' ' ')" = "any notok ok " ] || fail "ran: $(cat "$T/others")"
ok "notok, any, ok and started ran once their conditions were met"

# ---- waiting: PENDING with a reason, off the queue ---------------------------------------------
gate=$(submit_json "{\"name\":\"gate\",\"command\":$(await_file_json "$T/open")}")
wait_for "gate running" 20 job_state_is "$gate" RUNNING
w1=$(submit_json "{\"name\":\"w1\",\"after\":[\"$gate\"],\"command\":\"echo w1 >> $T/waited\"}")
w2=$(submit_json "{\"name\":\"w2\",\"after\":[\"$w1\"],\"command\":\"echo w2 >> $T/waited\"}")
wait_for "w2 stored" 10 '[ -n "$(job_field '"$w2"' reason)" ]'
[ "$(job_state "$w1")" = PENDING ] || fail "w1 is $(job_state "$w1")"
expect_job_field "$w1" reason "after $gate succeeds"
expect_job_field "$w2" reason "after $w1 succeeds"
expect_job_field "$w1" after "$gate:ok"
ctl -o json show "$w1" | jq -e --arg g "$gate" '.reason == "after \($g) succeeds"' >/dev/null ||
    fail "musterctl show: $(ctl -o json show "$w1")"
: >"$T/open"
wait_for "w2 succeeded" 20 job_state_is "$w2" SUCCEEDED
[ "$(cat "$T/waited")" = "$(printf 'w1\nw2')" ] || fail "ran: $(cat "$T/waited")"
ok "waiting jobs PENDING with 'after ... succeeds', run in order once the gate succeeded"

# ---- a pipeline submitted in one go, by idempotency key ----------------------------------------
p="pipe-$RANDOM"
{
    printf 'XADD muster:submit * spec %s\n' \
        "'{\"idempotency_key\":\"$p-1\",\"command\":\"echo 1 >> $T/pipe\"}'"
    printf 'XADD muster:submit * spec %s\n' \
        "'{\"idempotency_key\":\"$p-2\",\"after\":[{\"key\":\"$p-1\"}],\"command\":\"echo 2 >> $T/pipe\"}'"
    printf 'XADD muster:submit * spec %s\n' \
        "'{\"idempotency_key\":\"$p-3\",\"after\":[{\"key\":\"$p-2\",\"when\":\"ok\"}],\"command\":\"echo 3 >> $T/pipe\"}'"
} | rcli >"$T/pipe.ids"
mapfile -t pids <"$T/pipe.ids"
[ "${#pids[@]}" = 3 ] || fail "pipeline submit printed: $(cat "$T/pipe.ids")"
wait_for "step 3 of the pipeline succeeded" 30 job_state_is "${pids[2]}" SUCCEEDED
[ "$(cat "$T/pipe")" = "$(printf '1\n2\n3')" ] || fail "pipeline ran: $(cat "$T/pipe")"
expect_job_field "${pids[2]}" after "${pids[1]}:ok"
ok "a 3-step pipeline submitted in one go by idempotency keys ran in order"

# ---- a cancel cascades -------------------------------------------------------------------------
gate2=$(submit_json "{\"name\":\"gate2\",\"command\":$(await_file_json "$T/never")}")
c1=$(submit_json "{\"after\":[\"$gate2\"],\"command\":[\"true\"]}")
c2=$(submit_json "{\"after\":[\"$c1\"],\"command\":[\"true\"]}")
c3=$(submit_json "{\"after\":[{\"job\":\"$c1\",\"when\":\"notok\"}],\"command\":[\"true\"]}")
wait_for "gate2 running" 20 job_state_is "$gate2" RUNNING
wait_for "c3 stored" 10 '[ "$(job_state '"$c3"')" = PENDING ]'
ctl cancel "$gate2" >/dev/null
wait_for "c2 cancelled" 20 job_state_is "$c2" CANCELLED
[ "$(job_state "$c1")" = CANCELLED ] || fail "c1 is $(job_state "$c1")"
expect_job_field "$c1" error "after $gate2 succeeds, but it ended CANCELLED"
expect_job_field "$c2" error "after $c1 succeeds, but it was cancelled before it started"
wait_for "c3 (notok of a cancelled job) succeeded" 20 job_state_is "$c3" SUCCEEDED
ok "cancelling a running job cancelled its chain with reasons; notok ran"

# ---- bad conditions are REJECTED and disturb nothing -------------------------------------------
unknown=$(submit_json '{"after":["1000-0"],"command":["true"]}')
unkey=$(submit_json '{"after":[{"key":"no-such-key"}],"command":["true"]}')
self=$(rcli XADD muster:submit 99999999999990-7 spec '{"after":["99999999999990-7"],"command":["true"]}')
selfkey=$(submit_json '{"idempotency_key":"me","after":[{"key":"me"}],"command":["true"]}')
badwhen=$(submit_json "{\"after\":[{\"job\":\"$s1\",\"when\":\"later\"}],\"command\":[\"true\"]}")
notid=$(submit_json '{"after":["step-one"],"command":["true"]}')
# A 1 MB "after" list of valid-looking ids (under the 1 MiB spec cap, so the list is judged).
python3 -c '
import json, sys
ids, size = [], 0
while size < 1000000:
    ids.append("%d-0" % (1700000000000 + len(ids)))
    size += len(ids[-1]) + 4
sys.stdout.write(json.dumps({"after": ids, "command": ["true"]}))
' >"$T/huge.json"
huge=$(rcli -x XADD muster:submit '*' spec <"$T/huge.json")
many=$(python3 -c 'import json; print(json.dumps({"after": ["%d-0" % (1700000000000 + i) for i in range(65)], "command": ["true"]}))')
many=$(submit_json "$many")
good=$(submit_json "{\"after\":[\"$s1\"],\"command\":[\"true\"]}")
expect_job_rejected "$unknown" "after[0]: unknown job '1000-0'"
expect_job_rejected "$unkey" "after[0].key: no job has idempotency key 'no-such-key'"
expect_job_rejected "$self" "after[0].job: '$self' is this job itself"
expect_job_rejected "$selfkey" "after[0].key: 'me' is this job's own idempotency key"
expect_job_rejected "$badwhen" 'after[0].when: expected "ok", "notok", "any" or "started"'
expect_job_rejected "$notid" "after[0]: expected a job id"
expect_job_rejected "$huge" "conditions, at most 64"
expect_job_rejected "$many" "after: 65 conditions, at most 64"
wait_for "the good job after them succeeded" 20 job_state_is "$good" SUCCEEDED
[ "$(rcli XPENDING muster:submit muster-scheduler | head -1)" = 0 ] || fail "submissions left unacknowledged"
kill -0 "$MUSTERD_PID" || fail "musterd died"
ok "unknown id, unknown key, itself (by id and key), bad when, not an id, 1 MB and 65 conditions: REJECTED; the next job ran"

# ---- musterctl --after and --singleton ---------------------------------------------------------
x1=$(ctl submit --after "$s2:notok" --after "key=$p-3" -- true)
x2=$(ctl submit --after "$x1:any" -- true)
wait_for "x2 succeeded" 20 job_state_is "$x2" SUCCEEDED
expect_job_field "$x1" after "$s2:notok,${pids[2]}:ok"
solo1=$(ctl submit --name solo --user u1 --singleton -- sh -c "while [ ! -e $T/solo-go ]; do sleep 0.1; done; date +%s%N > $T/solo1.end")
wait_for "solo1 running" 20 job_state_is "$solo1" RUNNING
solo2=$(ctl submit --name solo --user u1 --singleton -- sh -c "date +%s%N > $T/solo2.start")
other=$(ctl submit --name solo --user u2 --singleton -- true)
wait_for "the other user's solo succeeded" 20 job_state_is "$other" SUCCEEDED
[ "$(job_state "$solo2")" = PENDING ] || fail "solo2 is $(job_state "$solo2") while solo1 runs"
expect_job_field "$solo2" reason "after $solo1 ends"
: >"$T/solo-go"
wait_for "solo2 succeeded" 20 job_state_is "$solo2" SUCCEEDED
[ "$(cat "$T/solo2.start")" -ge "$(cat "$T/solo1.end")" ] || fail "solo2 started before solo1 ended"
# A nameless singleton: musterctl refuses it at submit (exit 1, nothing written); the same spec
# by XADD (bypassing clients) is REJECTED by musterd with the same message.
n0=$(rcli XLEN muster:submit)
rc=0
ctl submit --singleton -- true >"$T/out" 2>"$T/err" || rc=$?
[ "$rc" = 1 ] || fail "submit --singleton without --name exited $rc"
grep -qF "musterctl: submit: singleton: needs a 'name'" "$T/err" || fail "stderr: $(cat "$T/err")"
[ "$(rcli XLEN muster:submit)" = "$n0" ] || fail "a refused singleton was written"
noname=$(submit_json '{"singleton":true,"command":["true"]}')
wait_for "a nameless singleton rejected" 10 job_state_is "$noname" REJECTED
expect_job_field "$noname" error "singleton: needs a 'name'"
ok "musterctl --after ID:when and key=KEY; --singleton ran one solo of u1 at a time (task timestamps), u2's beside it"
