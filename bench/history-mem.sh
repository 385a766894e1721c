#!/usr/bin/env bash
# Redis memory per finished job, without and with the job history (issue #47):
#   bench/history-mem.sh [N]     (default N=500 one-task jobs that run `true`)
# Each phase runs N jobs twice on a fresh Redis, musterd and a simulated 8-GPU worker, and
# prints Redis's used_memory after each round: the second round's growth over N is what a
# finished job costs in the steady state (the first round also pays one-off growth: hash tables,
# buffers).  Phase "off": no history, finished jobs stay in Redis.  Phase "history": "history"
# and keep_finished_s 1, waiting until the jobs left Redis; plus the SQLite file's size per row.
# The events stream (capped near events_max entries) is listed apart: it stops growing at its cap.
# Uses the integration tests' lib.sh (real redis-server and daemons), so build first.
source "$(dirname "$0")/../tests/integration/lib.sh"
N=${1:-500}

used() { rcli INFO memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p'; }

round() { # $1: phase, $2: round number (1, 2)
    local i
    for ((i = 0; i < N; i++)); do
        rcli XADD muster:submit '*' spec '{"command":["true"]}' >/dev/null
    done
    wait_for "$N jobs ended" 600 '[ "$(rcli HGET muster:counters jobs_succeeded)" = '"$(($2 * N))"' ]'
    if [ "$1" = history ]; then
        wait_for "jobs gone from redis" 600 '[ "$(rcli ZCARD muster:jobs)" = 0 ]'
    fi
    wait_for "submit stream trimmed" 60 '[ "$(rcli XLEN muster:submit)" -le 1 ]'
    sleep 1
}

run_phase() { # $1: label, $2: config overlay
    local m0 m1 m2 ev1 ev2
    start_redis
    make_config --with "$2" >/dev/null
    start_musterd "$CONFIG"
    start_worker n1 spot-a 8
    wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
    sleep 2 # the status hashes written once
    m0=$(used)
    round "$1" 1
    m1=$(used)
    ev1=$(rcli MEMORY USAGE muster:events SAMPLES 0)
    round "$1" 2
    m2=$(used)
    ev2=$(rcli MEMORY USAGE muster:events SAMPLES 0)
    echo "history-mem: $1: used_memory $m0 -> $m1 -> $m2 bytes over two rounds of $N jobs;" \
        "second round: $(((m2 - m1) / N)) bytes per finished job, of which events stream" \
        "$(((ev2 - ev1) / N)) (capped near events_max entries); jobs index $(rcli ZCARD muster:jobs)"
    if [ "$1" = history ]; then
        sqlite3 "$T/h.db" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null
        echo "history-mem: sqlite: $(stat -c %s "$T/h.db") bytes for $((2 * N)) rows," \
            "$(($(stat -c %s "$T/h.db") / (2 * N))) bytes per job"
    fi
    stop_worker n1
    stop_musterd
    rcli SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    unset SCHED_PORT MUSTER_REDIS_URL
}

run_phase off '{}'
run_phase history "{\"keep_finished_s\": 1, \"history\": {\"sqlite\": \"$T/h.db\"}}"
