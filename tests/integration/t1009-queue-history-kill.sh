#!/usr/bin/env bash
# kill -9 of musterd mid-archive loses nothing and doubles nothing (issue #47).  First at the
# worst moment, made certain by MUSTERD_TEST_ARCHIVE_KILL=after-commit: the archiver kills its
# own process right after a batch's COMMIT, before Redis heard of it, so the rows are in the
# history and the jobs still wait in muster:finished; the next musterd archives them again
# (INSERT OR REPLACE) and every job has one row.  Then an outside kill -9 at whatever moment the
# archiver is at.  Counts only: never how long anything took.
source "$(dirname "$0")/lib.sh"

N=20
start_redis
make_config --with "{\"keep_finished_s\": 1, \"history\": {\"sqlite\": \"$T/history.db\"}}" >/dev/null
MUSTERD_TEST_ARCHIVE_KILL=after-commit start_musterd "$CONFIG"
first=$MUSTERD_PID
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

ids=()
for ((i = 0; i < N; i++)); do
    ids+=("$(submit_json "{\"name\":\"k-$i\",\"command\":[\"true\"]}")")
done
wait_for "musterd killed itself after a commit" 60 '! kill -0 '"$first"' 2>/dev/null'
H=(--history "$T/history.db")
rows=$(ctl history "${H[@]}" -o json | jq length)
waiting=$(rcli ZCARD muster:finished)
[ "$rows" -ge 1 ] || fail "no row committed before the kill"
[ "$waiting" -ge "$rows" ] || fail "$rows rows committed but only $waiting jobs wait in muster:finished"
ok "killed between COMMIT and Redis: $rows row(s) in the history, $waiting job(s) still in muster:finished"

start_musterd "$CONFIG"
wait_for "all $N jobs archived" 60 '[ "$(ctl history "${H[@]}" --name "k-*" -o json | jq length)" = '"$N"' ]'
wait_for "all $N jobs gone from redis" 60 '[ "$(rcli ZCARD muster:jobs)" = 0 ]'
ctl history "${H[@]}" -o json >"$T/h.json"
[ "$(jq length "$T/h.json")" = "$N" ] || fail "$(jq length "$T/h.json") rows for $N jobs"
[ "$(jq '[.[].id] | unique | length' "$T/h.json")" = "$N" ] || fail "a job twice: $(jq -c '[.[].id]' "$T/h.json")"
for id in "${ids[@]}"; do
    [ "$(jq -r ".[] | select(.id == \"$id\") | .state" "$T/h.json")" = SUCCEEDED ] || fail "job $id: $(jq -c ".[] | select(.id == \"$id\")" "$T/h.json")"
done
[ "$(rcli ZCARD muster:finished)" = 0 ] || fail "muster:finished keeps $(rcli ZCARD muster:finished)"
ok "after the restart: $N rows for $N jobs, none twice, none left in redis"

# An outside kill -9 at an arbitrary point of the archiving of a second round.
more=()
for ((i = 0; i < N; i++)); do
    more+=("$(submit_json "{\"name\":\"m-$i\",\"command\":[\"true\"]}")")
done
wait_for "some of the second round archived" 60 '[ "$(ctl history "${H[@]}" --name "m-*" -o json | jq length)" -ge 1 ]'
kill -9 "$MUSTERD_PID"
wait_for "musterd gone" 10 '! kill -0 '"$MUSTERD_PID"' 2>/dev/null'
start_musterd "$CONFIG"
wait_for "the second round archived" 60 '[ "$(ctl history "${H[@]}" --name "m-*" -o json | jq length)" = '"$N"' ]'
wait_for "the second round gone from redis" 60 '[ "$(rcli ZCARD muster:jobs)" = 0 ]'
total=$(ctl history "${H[@]}" -o json | jq length)
[ "$total" = $((2 * N)) ] || fail "$total rows for $((2 * N)) jobs"
[ "$(ctl history "${H[@]}" -o json | jq '[.[].id] | unique | length')" = $((2 * N)) ] || fail "a job twice"
[ "$(sqlite3 "$T/history.db" 'PRAGMA integrity_check')" = ok ] || fail "history file damaged"
ok "kill -9 from outside mid-archive: $total rows for $((2 * N)) jobs, none twice; the file is intact"
