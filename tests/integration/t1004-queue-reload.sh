#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Quotas change without a restart (issue #11): musterctl reload and SIGHUP read the config again.
#  1. research's quota of 8 GPUs holds its second job back; raised to 16 by `musterctl reload`,
#     the job starts at once.
#  2. A file with a bad value, and one that changes a pool, are refused (exit 1, the key path or
#     the part that needs a restart) and the running config stays in force.
#  3. SIGHUP with the quota back at 8: both running gangs keep running (a reload never stops
#     work), a third job waits at quota (16/8) until they end; a queue taken out of the file
#     leaves musterctl queues.
#  4. Cohort limits, changed by reload: research (8 GPUs) in cohort ml with prod (8, idle); with
#     borrow_limit 0 its second job waits though prod lends 8; without it, prod's lend_limit 0
#     keeps it waiting; with lend_limit 8 it starts, on borrowed quota.
# Standalone: tests/integration/t1004-queue-reload.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl

write_queues() { # QUEUES_JSON [GPUS_PER_NODE]: the config with these queues
    cat >"$T/config.json" <<JSON
{
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100",
             "gpus_per_node": ${2:-8}, "price_per_hour": 3}],
  "queues": [$1],
  "heartbeat_s": 1, "node_lost_after_s": 10, "kill_grace_s": 2
}
JSON
}
write_config() { # QUOTA [EXTRA_QUEUE_JSON] [GPUS_PER_NODE]: research with a spot quota first
    write_queues "{\"name\": \"research\", \"quota\": {\"spot\": $1}}${2:+, $2}" "${3:-8}"
}

start_redis
write_config 8 '{"name": "batch"}'
CONFIG=$T/config.json
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = 2 ]'
gated='"tasks":1,"gpus_per_task":8,"command":'"$(await_file_json "$T/gate")"''

# ---- 1 ----
a=$(submit_json '{"name":"a","queue":"research",'"$gated"'}')
wait_for "a running" 15 job_state_is "$a" RUNNING
b=$(submit_json '{"name":"b","queue":"research",'"$gated"'}')
wait_for "b waits at quota" 15 \
    "rcli HGET \"${MUSTER_KEY_PREFIX}job:$b\" reason | grep -q 'queue research at quota (8/8 spot GPUs'"
write_config 16 '{"name": "batch"}'
expect_rc 0 ctl reload
grep -q "^ok: .*2 queue(s) in force" "$T/out" || fail "reload answer: $(cat "$T/out")"
wait_for "b running after the reload" 15 job_state_is "$b" RUNNING
wait_for "the queues status shows the new quota" 15 "[ \"\$(queue_field research quota.spot)\" = 16 ]"
ok "musterctl reload raised research's quota from 8 to 16 GPUs and its waiting job started"

# ---- 2 ----
write_config -8 '{"name": "batch"}'
expect_rc 1 ctl reload
grep -q "refused: .*queues\[0\].quota.spot: expected an integer 0..1000000, got -8" "$T/err" ||
    fail "bad quota not refused with its key path: $(cat "$T/out" "$T/err")"
write_config 16 '{"name": "batch"}' 4
expect_rc 1 ctl reload
grep -q "refused: .*pools changed; only queues and access change without a restart" "$T/err" ||
    fail "a pool change was not refused: $(cat "$T/out" "$T/err")"
[ "$(queue_field research quota.spot)" = 16 ] || fail "the running config changed: $(queue_field research quota)"
job_state_is "$a" RUNNING && job_state_is "$b" RUNNING || fail "a reload that was refused touched running work"
ok "a bad value and a pool change were refused with the reason; the running config stayed"

# ---- 3 ----
write_config 8
kill -HUP "$MUSTERD_PID"
wait_for "the SIGHUP reload answered" 15 \
    "[ \"\$(rcli HGET \"${MUSTER_KEY_PREFIX}reload\" id)\" = SIGHUP ]"
rcli HGET "${MUSTER_KEY_PREFIX}reload" result | grep -q "^ok: .*1 queue(s) in force" ||
    fail "SIGHUP reload: $(rcli HGET "${MUSTER_KEY_PREFIX}reload" result)"
c=$(submit_json '{"name":"c","queue":"research","tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "c waits at the smaller quota" 15 \
    "rcli HGET \"${MUSTER_KEY_PREFIX}job:$c\" reason | grep -q 'queue research at quota (16/8 spot GPUs'"
job_state_is "$a" RUNNING && job_state_is "$b" RUNNING || fail "shrinking the quota stopped running work"
[ "$(ctl -o json queues | jq -r '.[].name' | tr '\n' ' ')" = "research " ] ||
    fail "queues after batch was taken out: $(ctl -o json queues | jq -r '.[].name')"
ok "SIGHUP shrank the quota below the queue's use: running gangs kept running, a new job waits; batch is gone"
touch "$T/gate"
wait_for "c done once the others ended" 30 job_state_is "$c" SUCCEEDED
ok "the queue drained by attrition and the waiting job then ran"

# ---- 4 ----
gated2='"tasks":1,"gpus_per_task":8,"command":'"$(await_file_json "$T/gate2")"''
write_queues '{"name": "research", "quota": {"spot": 8}, "cohort": "ml", "borrow_limit": 0},
              {"name": "prod", "quota": {"spot": 8}, "cohort": "ml"}'
expect_rc 0 ctl reload
d=$(submit_json '{"name":"d","queue":"research",'"$gated2"'}')
wait_for "d running" 15 job_state_is "$d" RUNNING
e=$(submit_json '{"name":"e","queue":"research",'"$gated2"'}')
wait_for "e waits at its borrow limit" 15 \
    "rcli HGET \"${MUSTER_KEY_PREFIX}job:$e\" reason | grep -q 'cohort ml has 8 idle spot.*(borrow limit 0)'"
write_queues '{"name": "research", "quota": {"spot": 8}, "cohort": "ml"},
              {"name": "prod", "quota": {"spot": 8}, "cohort": "ml", "lend_limit": 0}'
expect_rc 0 ctl reload
wait_for "e waits: prod lends nothing" 15 \
    "rcli HGET \"${MUSTER_KEY_PREFIX}job:$e\" reason | grep -q 'cohort ml has 0 idle spot'"
job_state_is "$e" PENDING || fail "e is $(job_state "$e") though prod's lend_limit is 0"
write_queues '{"name": "research", "quota": {"spot": 8}, "cohort": "ml"},
              {"name": "prod", "quota": {"spot": 8}, "cohort": "ml", "lend_limit": 8}'
expect_rc 0 ctl reload
wait_for "e running on borrowed quota" 15 job_state_is "$e" RUNNING
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$e" borrowed)" = 1 ] || fail "e is not marked borrowed"
ok "borrow_limit 0 and lend_limit 0 each kept research from borrowing; lend_limit 8 let it borrow"
touch "$T/gate2"
wait_for "d and e done" 30 "job_state_is $d SUCCEEDED && job_state_is $e SUCCEEDED"
