#!/usr/bin/env bash
# Time limits (issue #10 item 4): a gang that reaches its time_limit_s (or the config's
# default_time_limit_s) gets its checkpoint signal (when it has one), its grace, SIGTERM and
# SIGKILL, and ends TIMEOUT with a message that names the limit.  A spec over max_time_limit_s
# is REJECTED naming both numbers.  A scheduler restart does not reset the clock: it counts from
# the attempt's start (started_at), which the restarted scheduler reads back.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 30, "bind_timeout_s": 10, "kill_grace_s": 2,
  "default_time_limit_s": 3, "max_time_limit_s": 3600
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

# ---- a plain job: SIGTERM at the limit, TIMEOUT ----
plain=$(submit_json "{\"gpus_per_task\":1,\"time_limit_s\":2,\"max_retries\":3,\"command\":\"date +%s%N > $T/plain.start; trap 'date +%s%N > $T/plain.term; exit 143' TERM; sleep 30 & wait\"}")
wait_for "plain timed out" 30 job_state_is "$plain" TIMEOUT
[ -s "$T/plain.term" ] || fail "the plain task never got SIGTERM"
# Never early: the limit counts from started_at (wall ms), so SIGTERM comes 2 s after it or later.
ran_ms=$(($(cat "$T/plain.term") / 1000000 - $(rcli HGET "muster:job:$plain" started_at)))
[ "$ran_ms" -ge 2000 ] || fail "SIGTERM ${ran_ms} ms after started_at, before the 2 s limit"
rcli HGET "muster:job:$plain" error | has "time limit of 2s reached (time_limit_s)" ||
    fail "error: $(rcli HGET "muster:job:$plain" error)"
[ "$(rcli HGET "muster:job:$plain" exit_code)" = 143 ] || fail "exit_code $(rcli HGET "muster:job:$plain" exit_code)"
[ "$(rcli HGET "muster:job:$plain" attempt)" = 1 ] || fail "a timed-out job was retried"
ctl -o json show "$plain" | jq -e '.state == "TIMEOUT"' >/dev/null || fail "musterctl show: not TIMEOUT"
rcli XRANGE muster:events - + | has "STOPPING" || fail "no STOPPING event"
ok "a job past its time_limit_s got SIGTERM and ended TIMEOUT (not retried)"

# ---- a checkpointing job: checkpoint signal first, then the grace, then SIGTERM ----
ck=$(submit_json "{\"gpus_per_task\":1,\"time_limit_s\":2,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":3},\"command\":\"trap 'date +%s%N > $T/ck.usr1; : > $T/ck.data; echo $T/ck.data > \$MUSTER_CHECKPOINT_FILE.tmp; mv \$MUSTER_CHECKPOINT_FILE.tmp \$MUSTER_CHECKPOINT_FILE' USR1; trap 'date +%s%N > $T/ck.term; exit 143' TERM; while :; do sleep 0.1; done\"}")
wait_for "ck timed out" 30 job_state_is "$ck" TIMEOUT
[ -s "$T/ck.usr1" ] && [ -s "$T/ck.term" ] || fail "ck: usr1 $(ls "$T"/ck.* 2>/dev/null)"
[ "$(cat "$T/ck.usr1")" -lt "$(cat "$T/ck.term")" ] || fail "SIGTERM came before the checkpoint signal"
[ "$(rcli HGET "muster:job:$ck" last_checkpoint)" = "$T/ck.data" ] ||
    fail "last_checkpoint '$(rcli HGET "muster:job:$ck" last_checkpoint)'"
ok "a checkpointing job got its checkpoint signal at the limit, then SIGTERM, and its checkpoint was kept"

# ---- the config's default limit applies to a job that gives none ----
dflt=$(submit_json '{"gpus_per_task":1,"command":"exec sleep 30"}')
wait_for "the default limit stopped it" 30 job_state_is "$dflt" TIMEOUT
rcli HGET "muster:job:$dflt" error | has "time limit of 3s reached (default_time_limit_s)" ||
    fail "error: $(rcli HGET "muster:job:$dflt" error)"
ok "default_time_limit_s limits a job without time_limit_s"

# ---- over the maximum: rejected, naming both numbers ----
big=$(submit_json '{"gpus_per_task":1,"time_limit_s":7200,"command":"true"}')
wait_for "the job over the maximum is rejected" 10 job_state_is "$big" REJECTED
rcli HGET "muster:job:$big" error |
    has "time_limit_s: 7200 is over the cluster's max_time_limit_s (3600)" ||
    fail "error: $(rcli HGET "muster:job:$big" error)"
ok "a time_limit_s over max_time_limit_s is rejected with both numbers"

# ---- a restart does not reset the clock ----
# musterd dies early in an 8 s job and stays down past the limit; the restarted musterd adopts
# the gang with its stored start and stops it at once instead of giving it 8 s more.
slow=$(submit_json "{\"gpus_per_task\":1,\"time_limit_s\":8,\"command\":\"date +%s%N > $T/slow.start; exec sleep 60\"}")
wait_for "slow running" 15 job_state_is "$slow" RUNNING
started=$(rcli HGET "muster:job:$slow" started_at)
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
[ "$(job_state "$slow")" = RUNNING ] || fail "slow is $(job_state "$slow") before musterd was killed"
wait_for "the limit passes while musterd is down" 20 "[ \$(( \$(date +%s%3N) - $started )) -gt 9000 ]"
start_musterd "$CONFIG"
wait_for "slow timed out after the restart" 30 job_state_is "$slow" TIMEOUT
[ "$(rcli HGET "muster:job:$slow" started_at)" = "$started" ] || fail "started_at changed across the restart"
grep -q "job=$slow attempt=1 adopted after the restart" "$T/musterd.log" || fail "slow was not adopted"
adopted=$(grep -n "job=$slow attempt=1 adopted after the restart" "$T/musterd.log" | tail -1 | cut -d: -f1)
stopped=$(grep -n "job=$slow attempt=1 time limit of 8s reached" "$T/musterd.log" | tail -1 | cut -d: -f1)
[ -n "$stopped" ] && [ "$stopped" -gt "$adopted" ] || fail "no time-limit stop logged after the adoption"
[ "$(rcli HGET "muster:job:$slow" attempt)" = 1 ] || fail "slow was rerun"
ok "an adopted gang keeps its clock: stopped at its limit counted from started_at"
