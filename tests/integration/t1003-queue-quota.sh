#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Quotas, borrowing and reclaim (issue #11, docs/quotas.md) through real musterd and workers.
# Two 8-GPU spot nodes; queues research and prod each own 8 spot GPUs in cohort "ml".
#  1. research floods 200 jobs: its first gang runs within its quota, its second on the 8 GPUs
#     prod lends while idle (marked borrowed; prod shows it as lent), the other 198 wait "at
#     quota", blocking nobody.
#  2. prod submits one job: it wants its own quota back, so the borrowed gang (and only it, not
#     research's gang within quota, though prod's job has no higher priority) is checkpointed and
#     requeued; prod's job runs.
#  3. When prod's job ends, research borrows again: the reclaimed gang comes back first and
#     resumes from its checkpoint.
#  4. kill -9 of musterd: both gangs are adopted, the borrowed mark survives, and the quota still
#     holds the flood back.
# Standalone: tests/integration/t1003-queue-quota.sh (MUSTER_BIN defaults to build/bin).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
FLOOD=198

start_redis
make_config - >/dev/null <<'JSON'
{
  "pools": [
    {"name": "spot-a", "capacity": "spot", "instance_type": "p4d.24xlarge",
     "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3.5}
  ],
  "queues": [
    {"name": "research", "quota": {"spot": 8}, "cohort": "ml"},
    {"name": "prod", "quota": {"spot": 8}, "cohort": "ml"}
  ],
  "heartbeat_s": 1, "node_lost_after_s": 10, "min_runtime_s": 0, "kill_grace_s": 2
}
JSON
MPORT=$(free_port)
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = 2 ]'

train="$MUSTER_SRC/tests/integration/tasks/train.sh"
mkdir -p "$T/r1" "$T/r2"
train_spec() { # QUEUE NAME OUTDIR
    echo "{\"name\":\"$2\",\"queue\":\"$1\",\"tasks\":1,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"USR1\",\"grace_s\":30},\"command\":[\"$train\",\"$T/$3\",\"100000\",\"5\"]}"
}

# ---- 1: a flood within quota and on borrowed quota ----
r1=$(submit_json "$(train_spec research r1 r1)")
wait_for "r1 running" 15 job_state_is "$r1" RUNNING
r2=$(submit_json "$(train_spec research r2 r2)")
wait_for "r2 running" 15 job_state_is "$r2" RUNNING
{
    for i in $(seq 1 "$FLOOD"); do
        printf 'XADD %ssubmit * spec "{\\"name\\":\\"f%d\\",\\"queue\\":\\"research\\",\\"tasks\\":1,\\"gpus_per_task\\":8,\\"command\\":[\\"true\\"]}"\n' \
            "$MUSTER_KEY_PREFIX" "$i"
    done
} | rcli >/dev/null || fail "flood XADD failed"
wait_for "the flood pending" 20 "[ \"\$(queue_field research pending_jobs)\" = $FLOOD ]"
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r1" borrowed)" = "" ] || fail "r1 (within quota) is marked borrowed"
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r2" borrowed)" = 1 ] || fail "r2 is not marked borrowed"
wait_for "research shows 8 borrowed GPUs" 15 "[ \"\$(queue_field research borrowed_gpus)\" = 8 ]"
[ "$(queue_field research quota.spot)" = 8 ] || fail "research quota: $(queue_field research quota)"
[ "$(queue_field research used_gpus.spot)" = 16 ] || fail "research used: $(queue_field research used_gpus)"
[ "$(queue_field prod lent_gpus)" = 8 ] || fail "prod lent: $(queue_field prod lent_gpus), want 8"
[ "$(queue_field research lent_gpus)" = 0 ] || fail "research lent: $(queue_field research lent_gpus)"
ctl queues | grep -E '^research .*spot 16/8 od 0/0 +8 +0$' >/dev/null ||
    fail "musterctl queues does not show research's quota use: $(ctl queues)"
ctl queues | grep -E '^prod .*spot 0/8 od 0/0 +0 +8$' >/dev/null ||
    fail "musterctl queues does not show what prod lends: $(ctl queues)"
command -v curl >/dev/null 2>&1 || fail "curl not found"
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$T/metrics" || fail "no /metrics"
for line in 'muster_queue_quota_gpus{queue="research",capacity="spot"} 8' \
    'muster_queue_used_gpus{queue="research",capacity="spot"} 16' \
    'muster_queue_borrowed_gpus{queue="research"} 8' 'muster_queue_lent_gpus{queue="prod"} 8' \
    'muster_queue_lent_gpus{queue="research"} 0'; do
    grep -qxF "$line" "$T/metrics" || fail "metrics lack '$line': $(grep muster_queue_ "$T/metrics")"
done
f1=$(rcli XREVRANGE "${MUSTER_KEY_PREFIX}submit" + - COUNT 1 | head -1)
wait_for "a flooded job says why it waits" 15 \
    "rcli HGET \"${MUSTER_KEY_PREFIX}job:$f1\" reason | grep -q 'queue research at quota (16/8 spot GPUs'"
rcli HGET "${MUSTER_KEY_PREFIX}job:$f1" reason | grep -q "cohort ml has 0 idle spot" ||
    fail "reason does not name the cohort: $(rcli HGET "${MUSTER_KEY_PREFIX}job:$f1" reason)"
ctl show "$r2" | grep -q "^borrowed .*yes" || fail "musterctl show does not say r2 is borrowed"
ok "research runs 8 GPUs within quota and 8 borrowed from prod; its $FLOOD other jobs wait at quota"

# ---- 2: prod takes its quota back ----
wait_for "r2 has a checkpoint" 30 "[ -n \"\$(rcli HGET \"${MUSTER_KEY_PREFIX}job:$r2\" last_checkpoint)\" ]"
p1=$(submit_json '{"name":"p1","queue":"prod","tasks":1,"gpus_per_task":8,
  "command":'"$(await_file_json "$T/gate")"'}')
wait_for "prod's job running" 60 job_state_is "$p1" RUNNING
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r2" attempt)" = 2 ] || fail "r2 (borrowed) was not reclaimed"
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r1" attempt)" = 1 ] || fail "r1 (within quota) was preempted"
job_state_is "$r1" RUNNING || fail "r1 is $(job_state "$r1")"
grep -q "on signal" "$T/r2/signal.0" || fail "r2 did not get its checkpoint signal"
ctl -o json events --job "$r2" | jq -r '.[].reason' | grep -q "queue prod reclaims the quota it lent" ||
    fail "r2's events do not say why it stopped: $(ctl -o json events --job "$r2" | jq -r '.[].reason')"
[ "$(queue_field research borrowed_gpus)" = 0 ] || wait_for "research borrows nothing" 15 \
    "[ \"\$(queue_field research borrowed_gpus)\" = 0 ]"
ok "prod reclaimed its quota: the borrowed gang checkpointed and was requeued, research's own kept running"

# ---- 3: prod done, research borrows again and the reclaimed gang resumes first ----
touch "$T/gate"
wait_for "prod's job done" 30 job_state_is "$p1" SUCCEEDED
wait_for "r2 running again" 30 job_state_is "$r2" RUNNING
wait_for "r2 resumed from its checkpoint" 30 "grep -q 'attempt 2 resumed from' '$T/r2/resume.0'"
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r2" borrowed)" = 1 ] || fail "r2's second attempt is not marked borrowed"
wait_for "research's status shows only the flood pending" 15 \
    "[ \"\$(queue_field research pending_jobs)\" = $FLOOD ]"
ok "the reclaimed gang came back first on borrowed quota and resumed from its checkpoint"

# ---- 4: kill -9 musterd: the gangs are adopted, still counted against the quota ----
kill -9 "$MUSTERD_PID"
wait "$MUSTERD_PID" 2>/dev/null || true
start_musterd "$CONFIG"
wait_for "research shows 8 borrowed GPUs again" 30 "[ \"\$(queue_field research borrowed_gpus)\" = 8 ]"
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r2" attempt)" = 2 ] || fail "r2 was restarted, not adopted"
[ "$(rcli HGET "${MUSTER_KEY_PREFIX}job:$r1" attempt)" = 1 ] || fail "r1 was restarted, not adopted"
sleep 2 # a few passes of the new musterd: none may start a flooded job beyond the quota
[ "$(queue_field research pending_jobs)" = "$FLOOD" ] ||
    fail "after the restart research started beyond its quota: $(queue_field research pending_jobs) pending"
ok "after kill -9 of musterd both gangs were adopted, r2 still borrowed, and the quota still held"
for j in $r1 $r2; do ctl cancel "$j" >/dev/null; done
