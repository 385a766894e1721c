#!/usr/bin/env bash
# MIG slices through real daemons (issue #17), with simulated MIG workers (--mig): seven
# one-slice jobs fill one GPU before the next, a 2-task gang of 3g.40gb lands on 3g.40gb slices
# and gets CUDA_VISIBLE_DEVICES=MIG-..., a whole-GPU job never takes a GPU in MIG mode, reasons
# name the profile, a bad profile is REJECTED with the cluster's profiles, gpu_milli without a
# shared pool is refused, musterctl nodes/pools and /metrics show slices by profile, and after a
# musterd restart the profiles of the last run's nodes are still accepted.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null # levels zone, rack; pools spot-a, od-a
MPORT=$(free_port)
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
# m1: GPU 0 and 1 with 7 x 1g.10gb each, GPU 2 with 2 x 3g.40gb, GPU 3 whole.  Units: GPUs 0-3,
# then GPU 0's slices 4-10, GPU 1's 11-17, GPU 2's 18-19.
start_worker m1 spot-a 4 --mig 7x1g.10gb,7x1g.10gb,2x3g.40gb
wait_for "m1 registered" 10 '[ -n "$(rcli HGET muster:nodes m1)" ]'
scrape() { curl -sf "http://127.0.0.1:$MPORT/metrics"; }

mkdir -p "$T/out"
cat >"$T/task.sh" <<'EOF2'
#!/bin/sh
# Record CUDA_VISIBLE_DEVICES, then run for $2 seconds.
echo "$CUDA_VISIBLE_DEVICES" >"$1/cuda.$MUSTER_JOB_ID.$RANK"
sleep "$2"
EOF2
chmod +x "$T/task.sh"

# A profile no node has: REJECTED, naming the cluster's profiles.
bad=$(submit_json '{"gpu_slice":"5g.99gb","command":["true"]}')
expect_job_rejected "$bad" "gpu_slice: no node has MIG slices of profile '5g.99gb'; the cluster has: 1g.10gb, 3g.40gb"
bad2=$(submit_json '{"gpu_slice":"big","command":["true"]}')
expect_job_rejected "$bad2" "gpu_slice: expected a MIG profile"
bad3=$(submit_json '{"gpu_slice":"1g.10gb","gpus_per_task":0,"command":["true"]}')
expect_job_rejected "$bad3" "gpus_per_task: 0 with gpu_slice"
milli=$(submit_json '{"gpu_milli":500,"command":["true"]}')
expect_job_rejected "$milli" "gpu_milli: no spot or on-demand pool is shared"
ok "bad profiles, and gpu_milli without a shared pool, are rejected: $(job_field "$bad" error)"

# Seven one-slice jobs: all on GPU 0's slices (units 4-10), none on GPU 1's.
ids=()
for _ in 1 2 3 4 5 6 7; do
    ids+=("$(submit_json "{\"gpu_slice\":\"1g.10gb\",\"capacity\":[\"spot\"],\"command\":[\"$T/task.sh\",\"$T/out\",\"60\"]}")")
done
for id in "${ids[@]}"; do
    wait_for "job $id running" 15 job_state_is "$id" RUNNING
done
units=$(for id in "${ids[@]}"; do job_field "$id" placement | jq -r '.[0].gpus[]'; done | sort -n | tr '\n' ' ')
[ "$units" = "4 5 6 7 8 9 10 " ] || fail "7 one-slice jobs got units '$units', expected GPU 0's 4..10"
for id in "${ids[@]}"; do
    wait_for "job $id wrote its devices" 10 '[ -s "$T/out/cuda.'"$id"'.0" ]'
    grep -qx 'MIG-sim-0-[0-6]' "$T/out/cuda.$id.0" || fail "job $id: CUDA_VISIBLE_DEVICES=$(cat "$T/out/cuda.$id.0")"
done
ok "7 one-slice jobs filled GPU 0: units $units, CUDA_VISIBLE_DEVICES=$(cat "$T/out/cuda.${ids[0]}.0")"

# A 2-task gang of 3g.40gb: both tasks on GPU 2's 3g.40gb slices (units 18, 19).
gang=$(submit_json "{\"tasks\":2,\"gpu_slice\":\"3g.40gb\",\"capacity\":[\"spot\"],\"command\":[\"$T/task.sh\",\"$T/out\",\"60\"]}")
wait_for "gang $gang running" 15 job_state_is "$gang" RUNNING
units=$(job_field "$gang" placement | jq -r '.[].gpus[]' | sort -n | tr '\n' ' ')
[ "$units" = "18 19 " ] || fail "3g.40gb gang got units '$units', expected 18 19"
wait_for "gang wrote its devices" 10 '[ -s "$T/out/cuda.'"$gang"'.1" ]'
cat "$T/out/cuda.$gang".* | sort | tr '\n' ' ' | has -x 'MIG-sim-2-14 MIG-sim-2-15 ' ||
    fail "gang devices: $(cat "$T/out/cuda.$gang".*)"
ok "a 2-task 3g.40gb gang got both 3g.40gb slices: $(cat "$T/out/cuda.$gang".* | tr '\n' ' ')"

# Three 3g.40gb where the cluster has two: the reason names the profile.
more=$(submit_json '{"tasks":3,"gpu_slice":"3g.40gb","capacity":["spot"],"command":["true"]}')
wait_for "job $more has a reason" 10 '[ -n "$(job_field "'"$more"'" reason)" ]'
expect_job_field "$more" reason "needs 3 x 3g.40gb on spot; only 2 x 3g.40gb exist (cannot fit until nodes join)"
[ "$(job_state "$more")" = PENDING ] || fail "3 x 3g.40gb should wait"
ok "3 x 3g.40gb waits: $(job_field "$more" reason)"

# Whole-GPU jobs: the one whole GPU (unit 3) only, never a GPU in MIG mode.
whole=$(submit_json "{\"gpus_per_task\":1,\"capacity\":[\"spot\"],\"command\":[\"$T/task.sh\",\"$T/out\",\"60\"]}")
wait_for "job $whole running" 15 job_state_is "$whole" RUNNING
[ "$(job_field "$whole" placement | jq -c '.[0].gpus')" = "[3]" ] || fail "whole-GPU job got $(job_field "$whole" placement)"
wait_for "whole-GPU job wrote its devices" 10 '[ -s "$T/out/cuda.'"$whole"'.0" ]'
grep -qx 3 "$T/out/cuda.$whole.0" || fail "whole-GPU job: CUDA_VISIBLE_DEVICES=$(cat "$T/out/cuda.$whole.0")"
whole2=$(submit_json '{"gpus_per_task":1,"capacity":["spot"],"command":["true"]}')
wait_for "job $whole2 has a reason" 10 '[ -n "$(job_field "'"$whole2"'" reason)" ]'
[ "$(job_state "$whole2")" = PENDING ] || fail "a second whole-GPU job should wait (GPUs 0-2 are in MIG mode)"
ok "whole-GPU jobs take only the whole GPU; the next waits: $(job_field "$whole2" reason)"

# Status: nodes and pools by profile, in the tables, JSON and /metrics.
wait_for "node status shows the slices" 10 \
    '[ "$(ctl -o json nodes | jq -c ".[] | select(.name == \"m1\") | [.gpus_free, .slices]")" = "[0,{\"1g.10gb\":{\"free\":7,\"total\":14},\"3g.40gb\":{\"free\":0,\"total\":2}}]" ]'
ctl nodes >"$T/table" || fail "musterctl nodes failed"
head -1 "$T/table" | grep -qE '^NAME +POOL +CAPACITY +STATE +GPUS +SLICES +LABELS' || fail "nodes header: $(head -1 "$T/table")"
grep -E '^m1 ' "$T/table" | has -E '0/1 +1g.10gb:7/14,3g.40gb:0/2' || fail "nodes row: $(grep -E '^m1 ' "$T/table")"
ctl pools >"$T/table" || fail "musterctl pools failed"
head -1 "$T/table" | has -E 'GPUS_FREE/USED +SLICES_FREE/TOTAL +PRICE/H' || fail "pools header: $(head -1 "$T/table")"
grep -E '^spot-a ' "$T/table" | has '1g.10gb:7/14,3g.40gb:0/2' || fail "pools row: $(cat "$T/table")"
grep -E '^od-a ' "$T/table" | has -E ' - ' || fail "od-a row: $(cat "$T/table")"
ok "musterctl nodes/pools show slices by profile"
scrape >"$T/metrics.txt" || fail "no /metrics"
has -x 'muster_gpu_slices_free{pool="spot-a",profile="1g.10gb"} 7' <"$T/metrics.txt" || fail "slices_free: $(grep slices "$T/metrics.txt")"
has -x 'muster_gpu_slices_used{pool="spot-a",profile="3g.40gb"} 2' <"$T/metrics.txt" || fail "slices_used: $(grep slices "$T/metrics.txt")"
has -x 'muster_pending_gpu_slices{pool="spot-a",profile="3g.40gb"} 3' <"$T/metrics.txt" || fail "pending slices: $(grep slices "$T/metrics.txt")"
has -x 'muster_pending_gpus{queue="default",pool="spot-a"} 1' <"$T/metrics.txt" || fail "pending_gpus counts slices: $(grep pending_gpus "$T/metrics.txt")"
ok "/metrics: slices free/used and pending by profile"

# Cancel everything: every slice is free again.
for id in "${ids[@]}" "$gang" "$more" "$whole" "$whole2"; do ctl cancel "$id" >/dev/null; done
wait_for "slices free again" 20 \
    '[ "$(ctl -o json nodes | jq -c ".[] | select(.name == \"m1\") | [.slices[\"1g.10gb\"].free, .slices[\"3g.40gb\"].free, .gpus_free]")" = "[14,2,1]" ]'
ok "cancelled jobs gave their slices back"

# A restart of musterd while the MIG node is away: the profiles of the last run's nodes stay
# known, so a slice job submitted before the node is back waits for it instead of being rejected.
stop_worker m1
stop_musterd
start_musterd "$CONFIG" --metrics "127.0.0.1:$MPORT"
early=$(submit_json "{\"gpu_slice\":\"3g.40gb\",\"capacity\":[\"spot\"],\"command\":[\"$T/task.sh\",\"$T/out\",\"0\"]}")
wait_for "job $early has a reason" 10 '[ -n "$(job_field "'"$early"'" reason)" ]'
[ "$(job_state "$early")" = PENDING ] || fail "slice job after the restart: $(job_state "$early") $(job_field "$early" error)"
start_worker m1 spot-a 4 --mig 7x1g.10gb,7x1g.10gb,2x3g.40gb
wait_for "job $early succeeded" 20 job_state_is "$early" SUCCEEDED
ok "after a musterd restart a slice job waits for its MIG node, then runs: $(cat "$T/out/cuda.$early.0")"
