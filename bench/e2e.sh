#!/usr/bin/env bash
# End-to-end benchmarks on loopback with real redis-server, musterd and simulated workers
# (issue #2).  Prints one line per benchmark; asserts nothing.
#
#   bench/e2e.sh latency [RUNS]   XADD -> every task of a 4x8 gang started, idle 32-node cluster
#   bench/e2e.sh drain [JOBS]     JOBS gangs of 1-4 x 8 GPUs (sleep 0) queued while musterd is
#                                 stopped, 32 nodes x 8 GPUs; scheduler start -> all SUCCEEDED
#   bench/e2e.sh recover [JOBS]   JOBS stored pending jobs; musterd start -> all taken back
#   bench/e2e.sh floor [RUNS]     this machine's floor (muster-bench-floor: Redis and ZeroMQ round
#                                 trips, XREADGROUP wake-up, process starts), then latency and
#                                 drain 1000, and muster's figures against the floor (issue #15;
#                                 docs/benchmarks.md says what each floor is made of)
#
# Build first (scripts/test.sh --quick or cmake); MUSTER_BIN points at the binaries.
source "$(dirname "$0")/../tests/integration/lib.sh"

what=${1:-latency}
nodes=32

make_config - >/dev/null <<'JSON'
{
  "topology_levels": ["zone"],
  "pools": [{"name": "p4d-spot", "capacity": "spot", "instance_type": "p4d.24xlarge",
             "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 9.8}],
  "heartbeat_s": 1, "node_lost_after_s": 30, "events_max": 100000
}
JSON

start_workers() {
    for i in $(seq 1 $nodes); do
        start_worker "n$i" p4d-spot 8 --label zone=z$((i % 4)) --log-level warn
    done
    wait_for "$nodes nodes registered" 30 '[ "$(rcli HLEN muster:nodes)" = '$nodes' ]'
}

# run_latency RUNS: XADD -> every task of a 4x8 gang started (musterd and workers running).
run_latency() {
    mkdir -p "$T/stamps"
    "$MUSTER_BIN/muster-bench" latency --stamp "$MUSTER_BIN/muster-stamp" --dir "$T/stamps" \
        --runs "$1" --tasks 4 --gpus 8
}

# run_drain JOBS: stops musterd, queues JOBS gangs, starts it; start -> all SUCCEEDED.
run_drain() {
    local jobs=$1 tasks t0 bad
    stop_musterd
    tasks=$("$MUSTER_BIN/muster-bench" submit --jobs "$jobs" --seed 42)
    t0=$(date +%s%N)
    start_musterd "$CONFIG" --log-level warn
    "$MUSTER_BIN/muster-bench" drain-wait --jobs "$jobs" --tasks "$tasks" --t0-ns "$t0"
    bad=$(rcli --raw EVAL "local n=0 for _,id in ipairs(redis.call('ZRANGE','muster:jobs',0,-1)) do if redis.call('HGET','muster:job:'..id,'state')~='SUCCEEDED' then n=n+1 end end return n" 0)
    echo "drain not_succeeded=$bad"
}

start_redis
case "$what" in
latency)
    start_musterd "$CONFIG" --log-level warn
    start_workers
    run_latency "${2:-100}"
    ;;
drain)
    # Workers and the scheduler's port come first; the jobs are queued with no scheduler running.
    start_musterd "$CONFIG" --log-level warn
    start_workers
    run_drain "${2:-1000}"
    ;;
floor)
    mkdir -p "$T/floor"
    "$MUSTER_BIN/muster-bench-floor" --stamp "$MUSTER_BIN/muster-stamp" --dir "$T/floor" \
        --drain-cmd "sleep 0" --runs "${2:-200}" | tee "$T/floor.txt"
    start_musterd "$CONFIG" --log-level warn
    start_workers
    # Into files, not through a pipe: run_drain restarts musterd, which must stay this shell's.
    run_latency 100 >"$T/latency.txt"
    cat "$T/latency.txt"
    run_drain 1000 >"$T/drain.txt"
    cat "$T/drain.txt"
    floor_ms=$(sed -n 's/^floor latency_ms=\([0-9.]*\).*/\1/p' "$T/floor.txt")
    cycles=$(sed -n 's/^floor drain_cycles_per_s=\([0-9.]*\).*/\1/p' "$T/floor.txt")
    p50=$(sed -n 's/^latency .*p50_ms=\([0-9.]*\).*/\1/p' "$T/latency.txt")
    read -r jobs tasks jps < <(sed -n 's/^drain jobs=\([0-9]*\) tasks=\([0-9]*\) .*jobs_per_s=\([0-9.]*\).*/\1 \2 \3/p' "$T/drain.txt")
    python3 - "$floor_ms" "$p50" "$cycles" "$jobs" "$tasks" "$jps" <<'PY'
import sys
floor_ms, p50, cycles, jobs, tasks, jps = map(float, sys.argv[1:])
floor_s = tasks / cycles  # every task is one process created and reaped, all cores busy
print("vs-floor latency p50_ms=%.2f floor_ms=%.2f ratio=%.2f (aim <= 2)" % (p50, floor_ms, p50 / floor_ms))
print("vs-floor drain jobs_per_s=%.1f floor_jobs_per_s=%.1f (%d tasks in %.2f s) share=%.0f%% (aim >= 50%%)"
      % (jps, jobs / floor_s, tasks, floor_s, 100 * jps / (jobs / floor_s)))
PY
    ;;
recover)
    jobs=${2:-100000}
    "$MUSTER_BIN/muster-bench" recover-fill --jobs "$jobs" >/dev/null
    t0=$(date +%s%N)
    start_musterd "$CONFIG"
    wait_for "recovery logged" 60 'grep -q "recovered [0-9]* active job" "$T/musterd.log"'
    t1=$(date +%s%N)
    line=$(grep -o "recovered [0-9]* active job.*" "$T/musterd.log")
    echo "recover jobs=$jobs seconds=$(python3 -c "print('%.3f' % (($t1 - $t0) / 1e9))") ($line; includes process start and the wait poll)"
    ;;
*)
    echo "usage: bench/e2e.sh latency [RUNS] | drain [JOBS] | recover [JOBS] | floor [RUNS]" >&2
    exit 2
    ;;
esac
