#!/usr/bin/env bash
# A 4-task gang on 2 nodes: every task runs at the same time (a file barrier that only passes when
# all 4 are alive together), with distinct ranks and the task environment of docs/design.md §3.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

mkdir -p "$T/out"
cat >"$T/task.sh" <<'EOF2'
#!/bin/sh
# Record the environment, then wait (at most 10 s) until every rank of the gang has started.
out=$1
env | grep -E '^(MUSTER_|RANK=|WORLD_SIZE=|LOCAL_RANK=|LOCAL_WORLD_SIZE=|GROUP_RANK=|NODE_RANK=|MASTER_|CUDA_)' \
    | sort >"$out/env.$RANK"
touch "$out/alive.$RANK"
i=0
while [ "$(ls "$out" | grep -c '^alive\.')" -lt "$WORLD_SIZE" ]; do
    i=$((i + 1))
    [ $i -gt 100 ] && exit 9
    sleep 0.1
done
EOF2
chmod +x "$T/task.sh"

id=$(submit_json "{\"name\":\"gang\",\"tasks\":4,\"gpus_per_task\":4,\"command\":[\"$T/task.sh\",\"$T/out\"]}")
wait_for "job $id succeeded" 30 job_state_is "$id" SUCCEEDED
ok "a 4-task gang ran all tasks together and succeeded"

for r in 0 1 2 3; do
    f="$T/out/env.$r"
    [ -f "$f" ] || fail "rank $r wrote no environment"
    grep -qx "RANK=$r" "$f" || fail "rank $r: RANK wrong: $(cat "$f")"
    grep -qx "WORLD_SIZE=4" "$f" || fail "rank $r: WORLD_SIZE"
    grep -qx "MUSTER_JOB_ID=$id" "$f" || fail "rank $r: MUSTER_JOB_ID"
    grep -qx "MUSTER_TASK_INDEX=$r" "$f" || fail "rank $r: MUSTER_TASK_INDEX"
    grep -qx "MUSTER_ATTEMPT=1" "$f" || fail "rank $r: MUSTER_ATTEMPT"
    grep -qx "LOCAL_WORLD_SIZE=2" "$f" || fail "rank $r: LOCAL_WORLD_SIZE"
    grep -qx "MASTER_ADDR=127.0.0.1" "$f" || fail "rank $r: MASTER_ADDR"
    grep -q "^MASTER_PORT=[0-9]" "$f" || fail "rank $r: MASTER_PORT"
    grep -q "^MUSTER_CHECKPOINT_FILE=/" "$f" || fail "rank $r: MUSTER_CHECKPOINT_FILE"
    grep -q "^MUSTER_NODE=n[12]$" "$f" || fail "rank $r: MUSTER_NODE"
    grep -q "^CUDA_VISIBLE_DEVICES=[0-7],[0-7],[0-7],[0-7]$" "$f" || fail "rank $r: CUDA_VISIBLE_DEVICES"
done
# One master for the whole gang; ranks 0/1 share a node with local ranks 0/1, as do 2/3.
[ "$(cat "$T"/out/env.* | grep '^MASTER_PORT=' | sort -u | wc -l)" = 1 ] || fail "MASTER_PORT differs between ranks"
[ "$(cat "$T"/out/env.* | grep -c '^LOCAL_RANK=0$')" = 2 ] || fail "expected two LOCAL_RANK=0"
[ "$(cat "$T"/out/env.* | grep -c '^NODE_RANK=1$')" = 2 ] || fail "expected two tasks with NODE_RANK=1"
# GPUs of tasks on one node never overlap.
for n in n1 n2; do
    gpus=$(grep -l "^MUSTER_NODE=$n$" "$T"/out/env.* | xargs cat | sed -n 's/^CUDA_VISIBLE_DEVICES=//p' | tr ',' '\n' | sort)
    [ "$(echo "$gpus" | sort -u | wc -l)" = "$(echo "$gpus" | wc -l)" ] || fail "GPU given twice on $n"
done
ok "ranks, world size, local ranks, node ranks, master and GPUs are right"

ctl -o json show "$id" | jq -e --arg id "$id" '.id == $id and .state == "SUCCEEDED" and (.exit_code | tostring) == "0"' >/dev/null \
    || fail "musterctl show: $(ctl -o json show "$id")"
placement=$(rcli HGET "muster:job:$id" placement)
echo "$placement" | jq -e 'length == 4 and ([.[].gpus | length] | all(. == 4))' >/dev/null || fail "placement: $placement"
rcli XRANGE muster:events - + | has RUNNING || fail "no RUNNING event"
ok "job record, placement and events"
