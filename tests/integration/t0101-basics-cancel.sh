#!/usr/bin/env bash
# Cancelling a running gang stops every process of it on every node, children included.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# Each task starts a child (sleep) and records both PIDs; the shell itself waits.
id=$(submit_json "{\"tasks\":2,\"gpus_per_task\":8,\"command\":\"sleep 300 & echo \$! > $T/child.\$RANK; echo \$\$ > $T/task.\$RANK; wait\"}")
wait_for "job $id running" 20 job_state_is "$id" RUNNING
wait_for "both tasks recorded their pids" 10 '[ -s "$T/child.0" ] && [ -s "$T/child.1" ]'
pids="$(cat "$T"/child.* "$T"/task.*)"
for p in $pids; do kill -0 "$p" 2>/dev/null || fail "pid $p not running before cancel"; done
ok "gang running with its children"

ctl cancel "$id" >/dev/null
wait_for "job $id cancelled" 10 job_state_is "$id" CANCELLED
all_gone() {
    local p
    for p in $pids; do
        ! kill -0 "$p" 2>/dev/null || return 1
    done
}
wait_for "every process of the gang gone" 15 all_gone
ok "cancel stopped every process on both nodes"

# The GPUs are free again: a job needing both nodes runs.
id2=$(submit_json '{"tasks":2,"gpus_per_task":8,"command":["true"]}')
wait_for "job $id2 succeeded" 20 job_state_is "$id2" SUCCEEDED
ok "capacity was released"
