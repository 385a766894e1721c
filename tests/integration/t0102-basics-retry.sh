#!/usr/bin/env bash
# A failing task fails its attempt and the whole gang is retried; past max_retries the job FAILs.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# Rank 1 fails on the first attempt only (once rank 0 is up); every task marks its attempt.
id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":8,\"max_retries\":2,\"command\":\"touch $T/ran.\$RANK.\$MUSTER_ATTEMPT; if [ \$RANK = 1 ] && [ \$MUSTER_ATTEMPT = 1 ]; then for i in 1 2 3 4 5 6 7 8 9 10; do [ -e $T/ran.0.1 ] && exit 3; sleep 0.5; done; exit 3; fi; sleep 0.5\"}")
wait_for "job $id succeeded" 30 job_state_is "$id" SUCCEEDED
[ "$(rcli HGET "muster:job:$id" attempt)" = 2 ] || fail "expected attempt 2, got $(rcli HGET "muster:job:$id" attempt)"
for f in ran.0.1 ran.1.1 ran.0.2 ran.1.2; do
    [ -e "$T/$f" ] || fail "$f missing: every rank runs in every attempt ($(ls "$T"))"
done
rcli XRANGE muster:events - + | has "exited with code 3" || fail "no event names the failure"
ok "a task failure retried the whole gang, which then succeeded"

# Always failing, max_retries 1: two attempts, then FAILED with the exit code and a message.
# Rank 1 fails only once rank 0 of the same attempt is up, so both ranks run in both attempts.
id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":4,\"max_retries\":1,\"command\":\"touch $T/fail.\$RANK.\$MUSTER_ATTEMPT; [ \$RANK = 0 ] && exec sleep 30; for i in 1 2 3 4 5 6 7 8 9 10; do [ -e $T/fail.0.\$MUSTER_ATTEMPT ] && exit 7; sleep 0.5; done; exit 7\"}")
wait_for "job $id failed" 30 job_state_is "$id" FAILED
[ "$(rcli HGET "muster:job:$id" exit_code)" = 7 ] || fail "exit_code $(rcli HGET "muster:job:$id" exit_code)"
rcli HGET "muster:job:$id" error | has "exited with code 7" || fail "error: $(rcli HGET "muster:job:$id" error)"
[ -e "$T/fail.0.1" ] && [ -e "$T/fail.0.2" ] && [ -e "$T/fail.1.2" ] || fail "not every rank ran in both attempts: $(ls "$T")"
[ ! -e "$T/fail.0.3" ] || fail "a third attempt ran although max_retries is 1"
ok "past max_retries the job FAILED with exit code and reason"

# A command that cannot run fails at bind time with the worker's reason.
id=$(submit_json '{"tasks":1,"gpus_per_task":1,"max_retries":0,"command":["/nonexistent/cmd"]}')
wait_for "job $id failed" 20 job_state_is "$id" FAILED
rcli HGET "muster:job:$id" error | has "nonexistent" || fail "error: $(rcli HGET "muster:job:$id" error)"
ok "an unrunnable command fails with a clear error"

# The next attempt prefers another node than the one its task failed on (issue #10 item 5).
id=$(submit_json "{\"tasks\":1,\"gpus_per_task\":8,\"max_retries\":1,\"command\":\"echo \$MUSTER_NODE > $T/where.\$MUSTER_ATTEMPT; [ \$MUSTER_ATTEMPT = 2 ] || exit 3\"}")
wait_for "job $id succeeded on its second attempt" 60 job_state_is "$id" SUCCEEDED
[ "$(cat "$T/where.1")" != "$(cat "$T/where.2")" ] ||
    fail "attempt 2 ran on $(cat "$T/where.2") again, where attempt 1 failed"
ok "attempt 1 failed on $(cat "$T/where.1"); attempt 2 ran on $(cat "$T/where.2")"
