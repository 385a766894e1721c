#!/usr/bin/env bash
# The job history and bounded Redis (issue #47): finished jobs (plain, an array with its
# elements, a rejected one) are copied into the SQLite history, leave Redis keep_finished_s after
# they ended (hash, muster:jobs entry; an array's elements with it), and `musterctl history`
# still finds them, with its filters and its three outputs; `show` of a job gone from Redis
# points to the history; the submit stream is trimmed to what musterd still has to read; an
# idempotency key expires.  Only counts and states are asserted, never times.
source "$(dirname "$0")/lib.sh"

start_redis
make_config --with "{\"keep_finished_s\": 2, \"history\": {\"sqlite\": \"$T/history.db\"}}" >/dev/null
"$MUSTER_BIN/musterd" --config "$CONFIG" --check-config >"$T/check" || fail "check-config: $(cat "$T/check")"
has -F "history: $T/history.db; finished jobs leave redis 2 s after they ended" <"$T/check" ||
    fail "check-config says: $(cat "$T/check")"
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
has -F "removed from redis 2 s after they ended" <"$T/musterd.log" || fail "no history line in the log"

ids=()
for i in 1 2 3 4 5; do
    ids+=("$(submit_json "{\"name\":\"h-$i\",\"user\":\"alice\",\"command\":[\"true\"]}")")
done
bad=$(submit_json "{\"name\":\"h-bad\",\"user\":\"bob\",\"max_retries\":0,\"command\":[\"false\"]}")
arr=$(submit_json "{\"name\":\"h-arr\",\"user\":\"bob\",\"array\":\"0-2\",\"command\":[\"true\"]}")
rej=$(submit_json '{"tasks":0,"command":["true"]}')
idem=$(ctl submit --idempotency-key hist-key -- true) || fail "submit with a key"

H=(--history "$T/history.db")
# 5 + 1 + the array and its 3 elements + the rejected one + the idempotent one.
wait_for "12 jobs in the history" 60 '[ "$(ctl history "${H[@]}" -o json | jq length)" = 12 ]'
wait_for "finished jobs gone from redis" 60 '[ "$(rcli ZCARD muster:jobs)" = 0 ]'
for id in "${ids[@]}" "$bad" "$arr" "${arr}_0" "${arr}_2" "$rej" "$idem"; do
    [ "$(rcli EXISTS "muster:job:$id")" = 0 ] || fail "job $id still in redis"
done
[ "$(rcli ZCARD muster:finished)" = 0 ] || fail "muster:finished keeps $(rcli ZCARD muster:finished)"
wait_for "archived set empty" 30 '[ "$(rcli ZCARD muster:archived)" = 0 ]'
[ "$(rcli EXISTS "muster:archived:$arr")" = 0 ] || fail "the array's element set stayed"
[ "$(rcli SCARD muster:active)" = 0 ] || fail "active set: $(rcli SMEMBERS muster:active)"
ok "12 finished jobs archived, then gone from redis (hashes, jobs index, finished/archived sets)"

ctl history "${H[@]}" -o json >"$T/h.json"
[ "$(jq '[.[].id] | unique | length' "$T/h.json")" = 12 ] || fail "ids twice: $(jq -c '[.[].id]' "$T/h.json")"
[ "$(jq -r ".[] | select(.id == \"$bad\") | .state" "$T/h.json")" = FAILED ] || fail "$bad not FAILED"
[ "$(jq -r ".[] | select(.id == \"$rej\") | .state" "$T/h.json")" = REJECTED ] || fail "$rej not REJECTED"
[ "$(jq -r ".[] | select(.id == \"${ids[0]}\") | .gpus" "$T/h.json")" = 1 ] || fail "gpus of ${ids[0]}"
jq -e ".[] | select(.id == \"${ids[0]}\") | .started_ms > 0 and .ended_ms >= .started_ms and .exit_code == 0 and .user == \"alice\"" \
    "$T/h.json" >/dev/null || fail "row of ${ids[0]}: $(jq -c ".[] | select(.id == \"${ids[0]}\")" "$T/h.json")"
[ "$(ctl history "${H[@]}" --user alice -o json | jq length)" = 5 ] || fail "--user alice"
[ "$(ctl history "${H[@]}" --state FAILED -o json | jq length)" = 1 ] || fail "--state FAILED"
[ "$(ctl history "${H[@]}" --name 'h-*' -o json | jq length)" = 10 ] || fail "--name h-*"
[ "$(ctl history "${H[@]}" --array "$arr" -o json | jq length)" = 3 ] || fail "--array"
[ "$(ctl history "${H[@]}" --id "$arr" -o json | jq length)" = 4 ] || fail "--id of an array"
[ "$(ctl history "${H[@]}" --since 1h -o json | jq length)" = 12 ] || fail "--since 1h"
[ "$(ctl history "${H[@]}" --until 2000-01-01 -o json | jq length)" = 0 ] || fail "--until 2000-01-01"
[ "$(ctl history "${H[@]}" -n 2 -o json | jq length)" = 2 ] || fail "-n 2"
[ "$(ctl history "${H[@]}" -o csv --user alice | wc -l)" = 6 ] || fail "csv: $(ctl history "${H[@]}" -o csv)"
ctl history "${H[@]}" --user alice | has "${ids[2]}.*alice.*SUCCEEDED" || fail "table lacks ${ids[2]}"
MUSTER_HISTORY=$T/history.db ctl history --id "$bad" -o json | jq -e 'length == 1' >/dev/null ||
    fail "MUSTER_HISTORY"
ctl --config "$CONFIG" history --id "$bad" -o json | jq -e 'length == 1' >/dev/null || fail "--config"
expect_rc 2 ctl history
expect_rc 2 ctl history "${H[@]}" --since yesterday
expect_rc 1 ctl history --history "$T/none.db"
ok "musterctl history: --user --state --name --array --id --since --until -n, json, csv, table"

expect_rc 1 ctl show "${ids[0]}"
has -F "musterctl history --id ${ids[0]}" <"$T/err" || fail "show of an archived job: $(cat "$T/err")"
ok "show of a job gone from redis points to musterctl history"

wait_for "submit stream trimmed" 30 '[ "$(rcli XLEN muster:submit)" -le 1 ]'
ttl=$(rcli TTL muster:idem:hist-key)
[ "$ttl" -gt 600000 ] && [ "$ttl" -le 604800 ] || fail "idempotency key TTL $ttl"
ok "submit stream trimmed to $(rcli XLEN muster:submit) entry; the idempotency key expires in ${ttl}s"

# A restart reads the active jobs only, and jobs after it go the same way.
stop_musterd
start_musterd "$CONFIG"
# shellcheck disable=SC2034 # read by wait_for's conditions
late=$(submit_json '{"name":"h-late","command":["true"]}')
wait_for "late job archived" 60 '[ "$(ctl history "${H[@]}" --id "$late" -o json | jq length)" = 1 ]'
wait_for "late job gone from redis" 60 '[ "$(rcli EXISTS "muster:job:$late")" = 0 ]'
ok "after a restart a new job is archived and leaves redis too"
