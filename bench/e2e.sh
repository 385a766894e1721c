#!/usr/bin/env bash
# End-to-end benchmarks on loopback with real redis-server, musterd and simulated workers
# (issue #2).  Prints one line per benchmark; asserts nothing.
#
#   bench/e2e.sh latency [RUNS]   XADD -> every task of a 4x8 gang started, idle 32-node cluster
#   bench/e2e.sh drain [JOBS]     JOBS gangs of 1-4 x 8 GPUs (sleep 0) queued while musterd is
#                                 stopped, 32 nodes x 8 GPUs; scheduler start -> all SUCCEEDED
#   bench/e2e.sh recover [JOBS]   JOBS stored pending jobs; musterd start -> all taken back
#   bench/e2e.sh array [N] [NODES]
#                                 an N-element array of 1-task jobs (true) on NODES simulated
#                                 8-GPU nodes (default 10000 on 512): submit -> every element
#                                 SUCCEEDED, jobs/s and the scheduling passes' time; then the
#                                 baseline in the same run: N separate 1-task jobs the same way
#   bench/e2e.sh ctl [JOBS]       JOBS pending jobs (1-4 x 8 GPUs, no node) with their reasons
#                                 written; musterd stopped, then three timings each of
#                                 `musterctl jobs` (the table) and `musterctl -o json jobs`, with
#                                 the CPU Redis used meanwhile.
#                                 MUSTER_CTL_BASELINE=PATH times that musterctl too, alternating
#                                 with this build's, for a before/after on the same data
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

# The workers' --run-dir (task records, the lease) on tmpfs, as deploy/systemd's /run: a task
# start then creates no disk inode there.  MUSTER_BENCH_RUN_ROOT=DIR puts it elsewhere (the
# state directories, with the logs, stay under $T).
start_workers() {
    local run_root
    run_root=$(mktemp -d "${MUSTER_BENCH_RUN_ROOT:-/dev/shm}/muster-e2e-run.XXXXXX" 2>/dev/null \
        || mktemp -d "$T/run.XXXXXX")
    _mu_dirs+=("$run_root")
    echo "# run dirs under $run_root"
    for i in $(seq 1 "$nodes"); do
        start_worker "n$i" p4d-spot 8 --label zone=z$((i % 4)) --log-level warn \
            --run-dir "$run_root/n$i"
    done
    wait_for "$nodes nodes registered" $((nodes / 4 + 30)) '[ "$(rcli HLEN muster:nodes)" = '"$nodes"' ]'
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

# metric NAME: one sample of musterd's metrics endpoint (0 when absent).
metric() {
    local i out
    for i in 1 2 3 4 5; do
        out=$(curl -s "http://127.0.0.1:$METRICS_PORT/metrics") && break
        sleep 0.2 # a busy machine: the endpoint answers on musterd's next turn
    done
    awk -v n="muster_$1" '$1 == n { v = $2 } END { print v + 0 }' <<<"$out"
}

# run_array_case LABEL N: submits the jobs (one array, or N plain jobs) and waits until N more
# jobs succeeded; prints jobs/s and the passes' mean time, largest job count seen in a pass.
run_array_case() {
    local label=$1 n=$2 t0 t1 s0 c0 s1 c1 k0 k1 done0 most=0 jobs succeeded
    done0=$(rcli HGET muster:counters jobs_succeeded)
    done0=${done0:-0}
    s0=$(metric scheduling_pass_seconds)
    c0=$(metric scheduling_passes)
    k0=$(metric scheduling_pass_core_seconds)
    t0=$(date +%s%N)
    if [ "$label" = array ]; then
        rcli XADD muster:submit '*' spec "{\"array\":\"0-$((n - 1))\",\"command\":[\"true\"]}" >/dev/null
    else
        for ((i = 0; i < n; i++)); do
            echo "XADD muster:submit * spec '{\"command\":[\"true\"]}'"
        done | rcli >/dev/null
    fi
    while :; do
        jobs=$(metric scheduling_pass_jobs)
        [ "${jobs%.*}" -gt "$most" ] && most=${jobs%.*}
        succeeded=$(rcli HGET muster:counters jobs_succeeded)
        [ "${succeeded:-0}" -ge $((done0 + n)) ] && break
        [ $(($(date +%s%N) - t0)) -lt 1200000000000 ] || fail "$label: not done after 20 minutes"
        sleep 0.05
    done
    t1=$(date +%s%N)
    s1=$(metric scheduling_pass_seconds)
    c1=$(metric scheduling_passes)
    k1=$(metric scheduling_pass_core_seconds)
    python3 - "$label" "$n" "$nodes" "$t0" "$t1" "$s0" "$c0" "$s1" "$c1" "$k0" "$k1" "$most" <<'PY'
import sys
label, n, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0, t1, s0, c0, s1, c1, k0, k1, most = map(float, sys.argv[4:])
secs = (t1 - t0) / 1e9
passes = max(c1 - c0, 1)
print("array-bench %s jobs=%d nodes=%d seconds=%.2f jobs_per_s=%.0f passes=%d pass_mean_ms=%.3f "
      "pass_core_mean_ms=%.3f pass_jobs_max_seen=%d"
      % (label, n, nodes, secs, n / secs, c1 - c0, 1000 * (s1 - s0) / passes,
         1000 * (k1 - k0) / passes, most))
PY
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
array)
    n=${2:-10000}
    nodes=${3:-512}
    METRICS_PORT=$(free_port)
    make_config - >/dev/null <<JSON
{
  "topology_levels": ["zone"],
  "pools": [{"name": "p4d-spot", "capacity": "spot", "instance_type": "p4d.24xlarge",
             "gpu_type": "A100", "gpus_per_node": 8, "price_per_hour": 9.8}],
  "heartbeat_s": 10, "node_lost_after_s": 600, "events_max": 1000000, "max_array_size": $n
}
JSON
    start_musterd "$CONFIG" --log-level warn --metrics "127.0.0.1:$METRICS_PORT"
    start_workers
    run_array_case array "$n"
    run_array_case plain "$n"
    ;;
ctl)
    jobs=${2:-100000}
    start_musterd "$CONFIG" --log-level warn
    "$MUSTER_BIN/muster-bench" submit --jobs "$jobs" --seed 42 >/dev/null
    wait_for "$jobs jobs stored" 600 '[ "$(rcli ZCARD muster:jobs)" -ge '"$jobs"' ]'
    # shellcheck disable=SC2034 # read by wait_for's condition below
    last=$(rcli ZREVRANGE muster:jobs 0 0)
    wait_for "the last job's reason" 600 \
        '[ -n "$(rcli HGET "muster:job:$last" reason)" ] && [ "$(rcli HGET "muster:job:$last" reason)" != "waiting for the scheduler" ]'
    stop_musterd # a quiet machine while timing
    bins=("$MUSTER_BIN/musterctl")
    [ -n "${MUSTER_CTL_BASELINE:-}" ] && bins+=("$MUSTER_CTL_BASELINE")
    for run in 1 2 3; do
        for bin in "${bins[@]}"; do
            for out in table json; do
                args=(jobs)
                [ "$out" = json ] && args=(-o json jobs)
                r0=$(awk '{ print $14 + $15 }' "/proc/$REDIS_PID/stat")
                t0=$(date +%s%N)
                lines=$("$bin" --redis "$MUSTER_REDIS_URL" "${args[@]}" | wc -l)
                t1=$(date +%s%N)
                r1=$(awk '{ print $14 + $15 }' "/proc/$REDIS_PID/stat")
                # Where the wall time went: Redis's CPU over the call (clock ticks).
                echo "ctl run=$run bin=$bin out=$out lines=$lines seconds=$(python3 -c "print('%.3f' % (($t1 - $t0) / 1e9))") redis_cpu_s=$(python3 -c "print('%.2f' % (($r1 - $r0) / $(getconf CLK_TCK)))")"
            done
        done
    done
    ;;
*)
    echo "usage: bench/e2e.sh latency [RUNS] | drain [JOBS] | recover [JOBS] | ctl [JOBS] | floor [RUNS] | array [N] [NODES]" >&2
    exit 2
    ;;
esac
