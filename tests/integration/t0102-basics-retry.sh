#!/usr/bin/env bash
# A failing task fails its attempt and the whole gang is retried; past max_retries the job FAILs.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# Rank 1 fails on the first attempt only; every task logs its attempt.
id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":8,\"max_retries\":2,\"command\":\"echo \$MUSTER_ATTEMPT >> $T/ran.\$RANK; if [ \$RANK = 1 ] && [ \$MUSTER_ATTEMPT = 1 ]; then exit 3; fi; sleep 0.5\"}")
wait_for "job $id succeeded" 30 job_state_is "$id" SUCCEEDED
[ "$(rcli HGET "muster:job:$id" attempt)" = 2 ] || fail "expected attempt 2, got $(rcli HGET "muster:job:$id" attempt)"
[ "$(cat "$T/ran.0" | tr '\n' ' ')" = "1 2 " ] || fail "rank 0 attempts: $(cat "$T/ran.0")"
[ "$(cat "$T/ran.1" | tr '\n' ' ')" = "1 2 " ] || fail "rank 1 attempts: $(cat "$T/ran.1")"
rcli XRANGE muster:events - + | grep -q "exited with code 3" || fail "no event names the failure"
ok "a task failure retried the whole gang, which then succeeded"

# Always failing, max_retries 1: two attempts, then FAILED with the exit code and a message.
id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":4,\"max_retries\":1,\"command\":\"echo x >> $T/fail.\$RANK; [ \$RANK = 0 ] || exit 7; sleep 30\"}")
wait_for "job $id failed" 30 job_state_is "$id" FAILED
[ "$(rcli HGET "muster:job:$id" exit_code)" = 7 ] || fail "exit_code $(rcli HGET "muster:job:$id" exit_code)"
rcli HGET "muster:job:$id" error | grep -q "exited with code 7" || fail "error: $(rcli HGET "muster:job:$id" error)"
[ "$(wc -l <"$T/fail.0")" = 2 ] || fail "rank 0 ran $(wc -l <"$T/fail.0") times, expected 2"
ok "past max_retries the job FAILED with exit code and reason"

# A command that cannot run fails at bind time with the worker's reason.
id=$(submit_json '{"tasks":1,"gpus_per_task":1,"max_retries":0,"command":["/nonexistent/cmd"]}')
wait_for "job $id failed" 20 job_state_is "$id" FAILED
rcli HGET "muster:job:$id" error | grep -q "nonexistent" || fail "error: $(rcli HGET "muster:job:$id" error)"
ok "an unrunnable command fails with a clear error"
