#!/usr/bin/env bash
# Takeover time of a standby musterd (issue #14) on loopback with real redis-server and musterd.
# Prints numbers; asserts nothing.
#
#   bench/ha-takeover.sh [LEASE_S] [RUNS]   kill -9 of the leader -> the standby holds the lease
#                                           (muster:leadership since_ms, Redis's clock), and ->
#                                           a worker that knew both registered with it ("scheduler
#                                           epoch N" in its log); default lease 5 s, 5 runs
source "$(dirname "$0")/../tests/integration/lib.sh"

lease=${1:-5}
runs=${2:-5}
stats() { # NAME VALUES...
    python3 - "$@" <<'PY'
import sys, statistics
name, vals = sys.argv[1], sorted(float(v) for v in sys.argv[2:])
print('%s runs=%d min_ms=%.0f p50_ms=%.0f max_ms=%.0f' % (name, len(vals), vals[0], statistics.median(vals), vals[-1]))
PY
}
log_ms() { # LINE of a daemon log -> its wall ms
    python3 -c "import sys, datetime; t = sys.argv[1].split()[0].rstrip('Z'); print(int(datetime.datetime.fromisoformat(t).replace(tzinfo=datetime.timezone.utc).timestamp() * 1000))" "$1"
}

start_redis
make_config --with "{\"leader_lease_s\": $lease, \"node_lost_after_s\": 60}" >/dev/null
lead=() reg=()
for ((r = 0; r < runs; r++)); do
    start_musterd_ha "a$r" "$CONFIG"
    wait_for "a$r leads" 30 '[ "$(leader_pid)" = "${HA_PID[a$r]}" ]'
    start_musterd_ha "b$r" "$CONFIG"
    wait_for "b$r stands by" 10 'grep -q "standing by" "$T/musterd-b$r.log"'
    SCHED_ENDPOINTS="tcp://127.0.0.1:${HA_PORT[a$r]},tcp://127.0.0.1:${HA_PORT[b$r]}" start_worker "w$r" spot-a 8
    wait_for "w$r registered" 10 'grep -q "scheduler epoch" "$T/worker-w$r.log"'
    sleep 1.$((RANDOM % 10)) # somewhere in the renewal cycle
    killed=$(date +%s%3N)
    kill -9 "${HA_PID[a$r]}"
    wait_for "b$r leads" 60 '[ "$(leader_pid)" = "${HA_PID[b$r]}" ]'
    epoch=$(rcli HGET muster:leadership epoch)
    lead+=($(($(rcli HGET muster:leadership since_ms) - killed)))
    wait_for "w$r with b$r" 60 'grep -q "scheduler epoch $epoch " "$T/worker-w$r.log"'
    reg+=($(($(log_ms "$(grep "scheduler epoch $epoch " "$T/worker-w$r.log" | tail -1)") - killed)))
    stop_pid "${WORKER_PID[w$r]}"
    stop_pid "${HA_PID[b$r]}" # a clean stop hands the lease back: the next run starts at once
done
echo "# leader_lease_s=$lease"
stats "kill -9 -> standby leads" "${lead[@]}"
stats "kill -9 -> worker registered with it" "${reg[@]}"
