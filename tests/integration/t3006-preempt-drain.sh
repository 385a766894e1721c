#!/usr/bin/env bash
# musterctl drain does what it says (issue #10 item 6): the node's gangs get their checkpoint
# signal and grace, are requeued without counting a failure, and resume from the checkpoint on
# other nodes; --wait returns once the node runs nothing; --grace caps a gang's checkpoint grace.
# cordon keeps its meaning: no new work, running jobs stay.
source "$(dirname "$0")/lib.sh"

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8,
             "price_per_hour": 3}],
  "heartbeat_s": 1, "node_lost_after_s": 10, "bind_timeout_s": 10, "kill_grace_s": 2,
  "min_runtime_s": 0
}
JSON
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
node_state() { ctl -o json nodes | jq -r ".[] | select(.name == \"$1\") | .state"; }

# Everything starts on n1: n2 is cordoned until the drain.
ctl cordon n2 >/dev/null
wait_for "n2 cordoned" 10 '[ "$(node_state n2)" = cordoned ]'
train="$MUSTER_SRC/tests/integration/tasks/train.sh"
mkdir -p "$T/out"
ck=$(submit_json "{\"name\":\"ck\",\"max_retries\":0,\"gpus_per_task\":4,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":30},\"command\":[\"$train\",\"$T/out\",\"100\"]}")
stub=$(submit_json "{\"name\":\"stub\",\"max_retries\":0,\"gpus_per_task\":4,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":120},\"command\":\"[ \$MUSTER_ATTEMPT = 1 ] || exit 0; trap '' USR1; trap 'exit 143' TERM; while :; do sleep 0.1; done\"}")
wait_for "both running on n1" 15 'job_state_is "$ck" RUNNING && job_state_is "$stub" RUNNING'
ctl -o json show "$ck" | jq -e '.nodes == "n1"' >/dev/null || fail "ck is not on n1"

# ---- cordon: running jobs stay ----
ctl cordon n1 >/dev/null
wait_for "n1 cordoned" 10 '[ "$(node_state n1)" = cordoned ]'
sleep 1
job_state_is "$ck" RUNNING && job_state_is "$stub" RUNNING || fail "cordon stopped a job"
[ "$(rcli HGET "muster:job:$ck" attempt)" = 1 ] || fail "cordon requeued ck"
ok "cordon: no new work, the running gangs stay"

# ---- drain --grace 2 --wait: checkpoint, requeue, resume elsewhere ----
ctl uncordon n2 >/dev/null
rc=0
ctl drain n1 --grace 2 --wait --timeout 60 >"$T/drain.out" 2>"$T/drain.err" || rc=$?
[ "$rc" = 0 ] || fail "drain --wait exited $rc: $(cat "$T/drain.out" "$T/drain.err")"
has "drain requested for node n1" "$T/drain.out" || fail "drain said: $(cat "$T/drain.out")"
has "waiting for" "$T/drain.err" || fail "drain --wait showed no progress: $(cat "$T/drain.err")"
[ "$(node_state n1)" = draining ] || fail "n1 is $(node_state n1)"
ctl -o json nodes | jq -e '.[] | select(.name == "n1") | .gpus_free == 8 and (.jobs | length) == 0' >/dev/null ||
    fail "n1 not empty after drain --wait: $(ctl -o json nodes)"
ok "drain --wait returned once n1 ran no job"

wait_for "ck finished on n2" 60 job_state_is "$ck" SUCCEEDED
wait_for "stub finished on n2" 30 job_state_is "$stub" SUCCEEDED
for j in "$ck" "$stub"; do
    [ "$(rcli HGET "muster:job:$j" attempt)" = 2 ] || fail "job $j attempt $(rcli HGET "muster:job:$j" attempt)"
    f=$(rcli HGET "muster:job:$j" failures)
    [ "${f:-0}" = 0 ] || fail "the drain counted as a failure of $j ($f)"
    ctl -o json show "$j" | jq -e '.nodes == "n2"' >/dev/null || fail "job $j ran again on $(ctl -o json show "$j" | jq -r .nodes)"
done
has "checkpointed at step" "$T/out/signal.0" || fail "ck did not checkpoint on the drain"
has "attempt 2 resumed from" "$T/out/resume.0" || fail "ck did not resume from its checkpoint"
rcli XRANGE muster:events - + | has "node n1 drained" || fail "no event says why"
ok "the drained gangs were requeued (not failures) and ran on n2; ck resumed from its checkpoint"
ok "--grace 2 cut stub's 120 s checkpoint grace (it ignored SIGUSR1 and was stopped)"

# ---- the drained node takes no new work; uncordon makes it ready again ----
id=$(submit_json '{"gpus_per_task":8,"command":"exec sleep 30"}')
wait_for "the new job runs" 15 job_state_is "$id" RUNNING
ctl -o json show "$id" | jq -e '.nodes == "n2"' >/dev/null || fail "a new job went to the draining node"
ctl uncordon n1 >/dev/null
wait_for "n1 ready again" 10 '[ "$(node_state n1)" = ready ]'
ctl cancel "$id" >/dev/null
ok "a draining node takes no new work; uncordon makes it ready"

# ---- usage errors ----
rc=0
ctl drain n1 --timeout 5 >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "--timeout without --wait exited $rc"
rc=0
ctl drain nosuch >/dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "drain of an unknown node exited $rc"
ok "drain: --timeout needs --wait (exit 2), unknown node (exit 1)"
