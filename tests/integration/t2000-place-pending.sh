#!/usr/bin/env bash
# A gang that does not fit stays PENDING with no task started and a reason, and starts once
# capacity joins (all-or-nothing: never a part of the gang).
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":8,\"capacity\":[\"spot\"],\"command\":\"touch $T/started.\$RANK\"}")
wait_for "reason recorded" 10 '[ -n "$(rcli HGET "muster:job:$id" reason | grep "needs")" ]'
sleep 1
[ "$(job_state "$id")" = PENDING ] || fail "state $(job_state "$id"), expected PENDING"
ls "$T"/started.* >/dev/null 2>&1 && fail "a task started although the gang does not fit"
ctl -o json jobs | jq -e --arg id "$id" '.[] | select(.id == $id) | .state == "PENDING" and (.reason | test("needs"))' >/dev/null \
    || fail "musterctl jobs: $(ctl -o json jobs)"
ok "2x8 on one 8-GPU node: PENDING, nothing started, reason: $(rcli HGET "muster:job:$id" reason)"

start_worker n2 spot-a 8
wait_for "job $id succeeded once n2 joined" 20 job_state_is "$id" SUCCEEDED
[ -f "$T/started.0" ] && [ -f "$T/started.1" ] || fail "not every task ran"
ok "the gang ran when capacity joined"
