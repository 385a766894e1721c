#!/usr/bin/env bash
# Benchmarks of issue #4 on loopback with real redis-server, musterd, workers and the IMDS
# stand-in.  Prints numbers; asserts nothing.
#
#   bench/e2e-issue4.sh spot [RUNS]      notice started in the metadata service -> (a) checkpoint
#                                        signal in every task of a 4x8 gang, (b) the gang running
#                                        again elsewhere; --imds-interval-s 1 (spot cool-down 0 so
#                                        that each run can use fresh spot nodes; a requeued gang
#                                        goes to free spot nodes if any, else to on-demand)
#   bench/e2e-issue4.sh preempt [RUNS]   high-priority 4x8 submission -> all its tasks started,
#                                        when the 4x8 victim takes 1 s to checkpoint
source "$(dirname "$0")/../tests/integration/lib.sh"

what=${1:-spot}
runs=${2:-5}
task="$MUSTER_SRC/bench/tasks_ckpt.sh"
mkdir -p "$T/out"

ms() { python3 -c "import sys; print('%.0f' % (float(sys.argv[1]) / 1e6))" "$1"; }
max_stamp() { # GLOB: the latest ns stamp among the files
    sort -n "$1" 2>/dev/null | tail -1
}
stats() { # NAME VALUES...
    python3 - "$@" <<'PY'
import sys, statistics
name, vals = sys.argv[1], sorted(float(v) for v in sys.argv[2:])
print('%s runs=%d p50_ms=%.0f max_ms=%.0f' % (name, len(vals), statistics.median(vals), vals[-1]))
PY
}

start_redis
make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [
    {"name": "p4d-spot", "capacity": "spot", "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 9.8},
    {"name": "p4d-od", "capacity": "on-demand", "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 32.8}
  ],
  "heartbeat_s": 1, "node_lost_after_s": 30, "min_runtime_s": 0, "kill_grace_s": 5,
  "spot_cooldown_s": 0
}
JSON
start_musterd "$CONFIG" --log-level warn

case "$what" in
spot)
    for i in $(seq 1 4); do start_worker "od$i" p4d-od 8 --label zone=z1 --log-level warn; done
    sig=()
    moved=()
    for r in $(seq 1 "$runs"); do
        # Four fresh spot nodes, each with its own metadata service.
        for i in $(seq 1 4); do
            python3 "$MUSTER_SRC/tests/imds/imds_mock.py" --port 0 --port-file "$T/imds-$r-$i.port" >/dev/null 2>&1 &
            _mu_pids+=("$!")
        done
        for i in $(seq 1 4); do
            wait_for "imds $r-$i" 10 "[ -s '$T/imds-$r-$i.port' ]"
            start_worker "s$r-$i" p4d-spot 8 --label zone=z1 --log-level warn \
                --imds "http://127.0.0.1:$(cat "$T/imds-$r-$i.port")" --imds-interval-s 1
        done
        wait_for "spot nodes of run $r" 20 '[ "$(rcli HLEN muster:nodes)" = $((4 + 4 * '"$r"')) ]'
        id=$(submit_json "{\"tasks\":4,\"gpus_per_task\":8,\"capacity\":[\"spot\",\"on-demand\"],\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":30},\"command\":[\"$task\",\"$T/out\",\"0\"]}")
        wait_for "run $r running" 20 job_state_is "$id" RUNNING
        sleep 1
        t0=$(date +%s%N)
        victim=$(rcli HGET "muster:job:$id" nodes | cut -d, -f1) # a spot node the gang uses: sR-I
        curl -sf -X POST -d '{"action":"terminate","in_s":120}' "http://127.0.0.1:$(cat "$T/imds-${victim#s}.port")/mock/notice" >/dev/null
        wait_for "run $r: attempt 2 started everywhere" 60 "[ \$(ls '$T/out' | grep -c '^start\\.$id\\.2\\.') = 4 ]"
        sig+=("$(($(max_stamp "$T/out/signal.$id.1.*") - t0))")
        moved+=("$(($(max_stamp "$T/out/start.$id.2.*") - t0))")
        ctl cancel "$id" >/dev/null
        wait_for "run $r cancelled" 20 job_state_is "$id" CANCELLED
        wait_for "run $r: on-demand free" 20 '[ "$(rcli HGET muster:pools p4d-od | jq .gpus_free)" = 32 ]'
    done
    # shellcheck disable=SC2046 # one argument per sample
    stats "spot notice->checkpoint signal in every task (interval 1 s)" $(for v in "${sig[@]}"; do ms "$v"; done)
    # shellcheck disable=SC2046 # one argument per sample
    stats "spot notice->gang running again elsewhere" $(for v in "${moved[@]}"; do ms "$v"; done)
    ;;
preempt)
    for i in $(seq 1 4); do start_worker "n$i" p4d-spot 8 --label zone=z1 --log-level warn; done
    wait_for "4 nodes" 20 '[ "$(rcli HLEN muster:nodes)" = 4 ]'
    lat=()
    for r in $(seq 1 "$runs"); do
        low=$(submit_json "{\"priority\":1,\"tasks\":4,\"gpus_per_task\":8,\"checkpoint\":{\"signal\":\"SIGUSR1\",\"grace_s\":30},\"command\":[\"$task\",\"$T/out\",\"1\"]}")
        wait_for "low $r running" 20 job_state_is "$low" RUNNING
        sleep 1
        t0=$(date +%s%N)
        high=$(submit_json "{\"priority\":10,\"tasks\":4,\"gpus_per_task\":8,\"command\":[\"$task\",\"$T/out\",\"0\"]}")
        wait_for "high $r started" 30 "[ \$(ls '$T/out' | grep -c '^start\\.$high\\.1\\.') = 4 ]"
        lat+=("$(($(max_stamp "$T/out/start.$high.1.*") - t0))")
        ctl cancel "$high" "$low" >/dev/null
        wait_for "run $r done" 30 '[ "$(job_state '"$high"')" = CANCELLED ] && [ "$(job_state '"$low"')" = CANCELLED ]'
        wait_for "run $r: free" 20 '[ "$(rcli HGET muster:pools p4d-spot | jq .gpus_free)" = 32 ]'
    done
    # shellcheck disable=SC2046 # one argument per sample
    stats "preempt submission->preemptor started (victim checkpoints in 1 s)" $(for v in "${lat[@]}"; do ms "$v"; done)
    ;;
*)
    echo "usage: bench/e2e-issue4.sh spot|preempt [RUNS]" >&2
    exit 2
    ;;
esac
