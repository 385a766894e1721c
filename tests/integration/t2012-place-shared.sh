#!/usr/bin/env bash
# Shared (time-sliced) GPUs through real daemons (issue #17): a pool marked "shared" packs
# gpu_milli tasks onto its GPUs best fit, never over 1000 per GPU; each task gets its GPU in
# CUDA_VISIBLE_DEVICES and its share in MUSTER_GPU_MILLI; a share that fits no GPU waits with a
# reason; whole-GPU jobs never get a GPU with shares on it; ending jobs give their shares back.
source "$(dirname "$0")/lib.sh"

start_redis
make_config --with '{"pools": [
    {"name": "spot-a", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 3},
    {"name": "l4-shared", "capacity": "spot", "gpu_type": "L4", "gpus_per_node": 2,
     "price_per_hour": 1, "shared": true}]}' >/dev/null
start_musterd "$CONFIG"
start_worker s1 l4-shared 2
wait_for "s1 registered" 10 '[ -n "$(rcli HGET muster:nodes s1)" ]'

mkdir -p "$T/out"
cat >"$T/task.sh" <<'EOF2'
#!/bin/sh
env | grep -E '^(CUDA_VISIBLE_DEVICES|MUSTER_GPU_MILLI)=' | sort >"$1/env.$MUSTER_JOB_ID"
sleep "$2"
EOF2
chmod +x "$T/task.sh"
milli() { ctl -o json nodes | jq -c '.[] | select(.name == "s1") | .gpu_milli'; }

# Three 400m jobs: two share GPU 0 (800), the third cannot (1200) and takes GPU 1.
ids=()
for _ in 1 2 3; do
    ids+=("$(submit_json "{\"gpu_milli\":400,\"gpu_type\":\"L4\",\"command\":[\"$T/task.sh\",\"$T/out\",\"60\"]}")")
    wait_for "job ${ids[-1]} running" 15 job_state_is "${ids[-1]}" RUNNING
done
wait_for "shares in the node status" 10 '[ "$(milli)" = "[800,400]" ]'
for id in "${ids[@]}"; do
    wait_for "job $id wrote its env" 10 '[ -s "$T/out/env.'"$id"'" ]'
    has -x 'MUSTER_GPU_MILLI=400' <"$T/out/env.$id" || fail "job $id env: $(cat "$T/out/env.$id")"
done
has -x 'CUDA_VISIBLE_DEVICES=0' <"$T/out/env.${ids[0]}" || fail "first share: $(cat "$T/out/env.${ids[0]}")"
has -x 'CUDA_VISIBLE_DEVICES=0' <"$T/out/env.${ids[1]}" || fail "second share: $(cat "$T/out/env.${ids[1]}")"
has -x 'CUDA_VISIBLE_DEVICES=1' <"$T/out/env.${ids[2]}" || fail "third share: $(cat "$T/out/env.${ids[2]}")"
ok "three 400m shares packed onto 2 GPUs as $(milli), each with MUSTER_GPU_MILLI=400"

# 700m fits neither GPU (200 and 600 left): it waits, naming the share.
big=$(submit_json '{"gpu_milli":700,"gpu_type":"L4","command":["true"]}')
wait_for "job $big has a reason" 10 '[ -n "$(job_field "'"$big"'" reason)" ]'
[ "$(job_state "$big")" = PENDING ] || fail "700m should wait"
ok "700m waits: $(job_field "$big" reason)"
# A whole L4 job never takes a GPU with shares.
whole=$(submit_json '{"gpus_per_task":1,"gpu_type":"L4","command":["true"]}')
wait_for "job $whole has a reason" 10 '[ -n "$(job_field "'"$whole"'" reason)" ]'
[ "$(job_state "$whole")" = PENDING ] || fail "a whole-GPU job took a shared GPU"
ok "a whole-GPU job waits: $(job_field "$whole" reason)"
[ "$(milli)" = "[800,400]" ] || fail "shares changed: $(milli)"

# gpu_milli on a cluster whose pools of that type are not shared: rejected at once.
bad=$(submit_json '{"gpu_milli":500,"gpu_type":"A100","command":["true"]}')
expect_job_rejected "$bad" "gpu_milli: no spot or on-demand pool with A100 is shared"

# Cancel the three: the 700m job and then the whole-GPU job run.
for id in "${ids[@]}"; do ctl cancel "$id" >/dev/null; done
wait_for "job $big succeeded" 20 job_state_is "$big" SUCCEEDED
wait_for "job $whole succeeded" 20 job_state_is "$whole" SUCCEEDED
wait_for "shares all given back" 10 '[ "$(milli)" = "[0,0]" ]'
ok "cancelled shares freed their GPUs; the waiting jobs ran"
