#!/usr/bin/env bash
# Hostile input (issue #5): malformed frames on musterd's ZeroMQ port, absurd job specs through
# XADD and configs full of mistakes.  Each gets a clear error (REJECTED with `error`, a decode
# error, or musterd, with and without --check-config, exiting 1 with the key path, never of a
# signal), the log stays rate-limited, and musterd keeps working: the worker stays registered, a
# valid job still runs afterwards, and musterd's RSS does not balloon.
source "$(dirname "$0")/lib.sh"

HOSTILE=${MUSTER_HOSTILE_ZMQ:-$MUSTER_BIN/hostile_zmq}
[ -x "$HOSTILE" ] || fail "$HOSTILE not found (it is built with the tests: cmake --build DIR)"

rss_kb() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'
first=$(submit_json '{"command":["true"]}')
wait_for "warm-up job $first succeeded" 20 job_state_is "$first" SUCCEEDED
rss0=$(rss_kb "$MUSTERD_PID")
t_start=$SECONDS

# ---- 1. frames on the scheduler's port ---------------------------------------------------------
"$HOSTILE" "tcp://127.0.0.1:$SCHED_PORT" >"$T/hostile.out" 2>&1 || {
    cat "$T/hostile.out" >&2
    fail "hostile_zmq: a malformed payload was accepted by the codec, or sending failed"
}
cat "$T/hostile.out"
ncases=$("$HOSTILE" - list | wc -l)
[ "$(grep -c '^case ' "$T/hostile.out")" = "$ncases" ] || fail "hostile_zmq ran fewer than $ncases cases"
wait_for "musterd logs a dropped frame" 10 'grep -q "bad message dropped" "$T/musterd.log"'
t_first=$SECONDS # at or after the first line: its 10 s window is over 11 s from here
sleep 1 # let musterd drain the flood
kill -0 "$MUSTERD_PID" || fail "musterd died on malformed frames"
nlines=$(grep -c "bad message dropped" "$T/musterd.log" || true)
# One line per 10 s (mu_log_limited key "bad-frame"); the cases above take a few seconds.
[ "$nlines" -le $(((SECONDS - t_start) / 10 + 1)) ] ||
    fail "$nlines 'bad message dropped' lines for one burst: the log is not rate-limited"
ok "$ncases kinds of malformed frame (about 5000 frames) dropped; $nlines log line(s)"

# A stranger's frames registered nothing and disturbed nothing.
sleep 1
[ "$(rcli HLEN muster:nodes)" = 1 ] || fail "nodes after the frames: $(rcli HKEYS muster:nodes)"
j=$(submit_json '{"command":["true"]}')
wait_for "job $j succeeded after the frames" 20 job_state_is "$j" SUCCEEDED
ok "worker n1 still the only node, and a job still runs"

# ---- 2. absurd job specs -----------------------------------------------------------------------
declare -A want # job id -> pattern its error must contain
reject_case() { # PATTERN SPEC: submit SPEC, expect REJECTED with PATTERN in `error`
    local id
    id=$(submit_json "$2")
    want[$id]=$1
}
reject_file() { # PATTERN FILE: the same, with the spec read from FILE (big or binary)
    local id
    id=$(rcli -x XADD muster:submit '*' spec <"$2") || fail "XADD of $2 failed"
    want[$id]=$1
}
rep() { # N STRING: STRING N times
    local i out=""
    for ((i = 0; i < $1; i++)); do out+=$2; done
    printf '%s' "$out"
}
t_specs=$SECONDS

# Deep nesting, under a known key and an unknown one.
reject_case "nest" "{\"command\":[\"true\"],\"env\":$(rep 5000 '{"a":')1$(rep 5000 '}')}"
printf '{"command":%s%s}' "$(rep 100000 '[')" "$(rep 100000 ']')" >"$T/deep.json"
reject_file "nest" "$T/deep.json"
# A 10 MB string (the cap is 1 MiB).
{
    printf '{"command":["'
    head -c 10000000 /dev/zero | tr '\0' 'x'
    printf '"]}'
} >"$T/10mb.json"
reject_file "larger than" "$T/10mb.json"
# Huge numbers.
reject_case "tasks" '{"command":["true"],"tasks":1e400}'
reject_case "tasks" '{"command":["true"],"tasks":99999999999999999999999999}'
reject_case "priority" '{"command":["true"],"priority":1e308}'
reject_case "gpus_per_task" '{"command":["true"],"gpus_per_task":18446744073709551617}'
reject_case "time_limit_s" '{"command":["true"],"time_limit_s":1.5e300}'
reject_case "memory" '{"command":["true"],"memory_mb_per_task":9223372036854775808}'
# NUL bytes: raw in the stream entry, and escaped inside a JSON string.
printf '{"command":["tr\0ue"]}' >"$T/nul.json"
reject_file "NUL" "$T/nul.json"
reject_case "NUL" '{"command":["tr\u0000ue"]}'
reject_case "NUL" '{"command":["true"],"env":{"A":"x\u0000y"}}'
# Thousands of env entries, argv entries, 5000 tasks, one 100 KB argument.
env_json=$(for ((i = 0; i < 5000; i++)); do printf '"K%d":"v",' "$i"; done)
reject_case "env" "{\"command\":[\"true\"],\"env\":{${env_json%,}}}"
argv_json=$(rep 2000 '"a",')
reject_case "command" "{\"command\":[${argv_json%,}]}"
reject_case "tasks" '{"command":["true"],"tasks":5000}'
printf '{"command":["%s"]}' "$(head -c 100000 /dev/zero | tr '\0' a)" >"$T/long-arg.json"
reject_file "command" "$T/long-arg.json"
# Negative values.
reject_case "tasks" '{"command":["true"],"tasks":-1}'
reject_case "gpus_per_task" '{"command":["true"],"gpus_per_task":-8}'
reject_case "cpus_per_task" '{"command":["true"],"cpus_per_task":-1}'
reject_case "memory_mb_per_task" '{"command":["true"],"memory_mb_per_task":-1}'
reject_case "max_retries" '{"command":["true"],"max_retries":-3}'
reject_case "time_limit_s" '{"command":["true"],"time_limit_s":-1}'
reject_case "grace_s" '{"command":["true"],"checkpoint":{"signal":"SIGUSR1","grace_s":-90}}'
# Wrong shapes.
reject_case "command" '{"command":[]}'
reject_case "command" '{"command":[1,2]}'
reject_case "env" '{"command":["true"],"env":{"A":1}}'
reject_case "env" '{"command":["true"],"env":{"=A":"1"}}'
reject_case "env" '{"command":["true"],"env":["A=1"]}'
reject_case "signal" '{"command":["true"],"checkpoint":{"signal":"SIGNOPE"}}'
reject_case "JSON" '{"command":["true"]} trailing'
reject_case "JSON" ''
reject_case "JSON" "$(printf '{"command":["true"]')"

for id in "${!want[@]}"; do
    wait_for "job $id rejected (error with '${want[$id]}')" 30 job_state_is "$id" REJECTED
    err=$(rcli HGET "muster:job:$id" error)
    [ -n "$err" ] || fail "job $id rejected without an error"
    grep -qi -- "${want[$id]}" <<<"$err" || fail "job $id: error '$err' lacks '${want[$id]}'"
    echo "# rejected: $err" | cut -c 1-150
done
ok "${#want[@]} absurd specs rejected, each with an error naming the problem"

kill -0 "$MUSTERD_PID" || fail "musterd died on absurd specs"
nrej=$(grep -c "rejected:" "$T/musterd.log" || true)
# mu_log_limited key "rejected": one line a second.
[ "$nrej" -le $((SECONDS - t_specs + 2)) ] ||
    fail "$nrej 'rejected:' log lines for ${#want[@]} rejections in $((SECONDS - t_specs)) s"
[ "$(rcli XPENDING muster:submit muster-scheduler | head -1)" = 0 ] || fail "entries left unacknowledged"
ok "$nrej rejection log line(s) for ${#want[@]} rejections; every entry acknowledged"

# Every stored copy of a huge spec is truncated, so Redis does not keep megabytes of garbage.
for id in "${!want[@]}"; do
    len=$(rcli HSTRLEN "muster:job:$id" spec)
    [ "$len" -le 8192 ] || fail "job $id: stored spec is $len bytes"
done
ok "stored specs of rejected jobs are at most 8 KiB"

# The frames of section 1 were all seen, not lost: once the 10 s window is over, the next bad
# frame's log line is preceded by the count of those suppressed (the flood alone is 5000).  The
# window opened with the first logged line (t_first, not t_start: the flood may have started
# late on a slow machine), and a frame still inside it would only be counted, so one is sent
# again until the line shows.
while [ $((SECONDS - t_first)) -le 11 ]; do sleep 0.5; done
wait_for "the suppressed count in the log" 20 \
    '"$HOSTILE" "tcp://127.0.0.1:$SCHED_PORT" garbage >/dev/null; grep -q "suppressed (bad-frame)" "$T/musterd.log"'
nsup=$(sed -n 's/.* \([0-9]*\) similar message(s) suppressed (bad-frame).*/\1/p' "$T/musterd.log" | head -1)
[ "${nsup:-0}" -ge 5000 ] || fail "only ${nsup:-0} bad frames counted as suppressed (want >= 5000)"
ok "musterd counted $nsup suppressed bad-frame lines after the first"

# ---- 3. still working, and no ballooning -------------------------------------------------------
j=$(submit_json '{"tasks":1,"gpus_per_task":8,"command":["true"]}')
wait_for "job $j succeeded after the hostile input" 20 job_state_is "$j" SUCCEEDED
rss1=$(rss_kb "$MUSTERD_PID")
echo "# musterd RSS: $rss0 kB before, $rss1 kB after"
if ldd "$MUSTER_BIN/musterd" | has libasan; then
    # ASan keeps freed memory in quarantine, so RSS says nothing here; LeakSanitizer checks
    # musterd's memory when it exits (lib.sh fails the test on its report).
    ok "a valid job still runs (sanitizer build: RSS not compared)"
else
    [ "$rss1" -le $((rss0 * 2 + 65536)) ] || fail "musterd RSS grew from $rss0 kB to $rss1 kB"
    ok "a valid job still runs; musterd RSS $rss0 -> $rss1 kB"
fi

# ---- 4. configs full of mistakes ---------------------------------------------------------------
# run_bad_config PATTERN FILE: musterd started for real on a bad config exits exactly 1 with
# PATTERN, never of a signal (it used to segfault in its cleanup after the message, issue #10).
# The output goes to a .log so that lib.sh fails the test on a sanitizer report (a leak).
nrun=0
run_bad_config() {
    local rc=0 log=$T/bad-config-run-$((++nrun)).log
    timeout 60 "$MUSTER_BIN/musterd" --config "$2" --redis "$MUSTER_REDIS_URL" \
        --bind "tcp://127.0.0.1:$(free_port)" >"$log" 2>&1 || rc=$?
    [ "$rc" -eq 1 ] || fail "musterd on $2 exited $rc (want 1, never >= 128): $(head -c 2000 "$log")"
    grep -qi -- "$1" "$log" || fail "musterd on $2: '$(cat "$log")' lacks '$1'"
}
check_config() { # PATTERN JSON: musterd --check-config exits 1 with PATTERN on stderr
    local rc=0 out
    printf '%s' "$2" >"$T/bad-config.json"
    out=$("$MUSTER_BIN/musterd" --config "$T/bad-config.json" --check-config 2>&1) || rc=$?
    [ "$rc" -eq 1 ] || fail "--check-config on '$2' exited $rc (want 1): $out"
    grep -qi -- "$1" <<<"$out" || fail "--check-config on '$2': '$out' lacks '$1'"
    [ "$(wc -l <<<"$out")" -le 3 ] || fail "--check-config: more than 3 lines for one mistake: $out"
    echo "# check-config: $out"
    run_bad_config "$1" "$T/bad-config.json"
}
check_config "capacity" '{"pools":[{"name":"a","capacity":"spt","gpus_per_node":-3}],"heartbeat_s":"x","bogus":1}'
check_config "JSON" '{"pools":[{"name":"a",}]'
check_config "gpus_per_node" '{"pools":[{"name":"a","capacity":"spot","gpu_type":"A100","gpus_per_node":-3}]}'
check_config "heartbeat_s" '{"heartbeat_s":"fast"}'
check_config "bogus" '{"bogus":1}'
check_config "node_lost_after_s" '{"heartbeat_s":10,"node_lost_after_s":5}'
check_config "queues" '{"queues":[]}'
check_config "name" '{"pools":[{"name":"a","capacity":"spot","gpu_type":"A100","gpus_per_node":8},{"name":"a","capacity":"spot","gpu_type":"A100","gpus_per_node":8}]}'
check_config "topology_levels" '{"topology_levels":"zone"}'
check_file() { # PATTERN FILE: the same for a config that cannot go through a shell argument
    local rc=0 out
    out=$("$MUSTER_BIN/musterd" --config "$2" --check-config 2>&1) || rc=$?
    [ "$rc" -eq 1 ] || fail "--check-config on $2 exited $rc (want 1): $out"
    grep -qi -- "$1" <<<"$out" || fail "--check-config on $2: '$out' lacks '$1'"
    echo "# check-config: $out"
    run_bad_config "$1" "$2"
}
printf '\0\1\2garbage' >"$T/binary-config.json"
check_file "JSON" "$T/binary-config.json"
head -c 3000000 /dev/zero | tr '\0' ' ' >"$T/big-config.json"
check_file "larger than" "$T/big-config.json"
printf '{"pools":[%s{}]}' "$(rep 5000 '{"name":"a"},')" >"$T/many-pools.json"
check_file "pools" "$T/many-pools.json"
printf '{"x":%s1%s}' "$(rep 10000 '[')" "$(rep 10000 ']')" >"$T/deep-config.json"
check_file "" "$T/deep-config.json"
check_file "cannot open" "$T/no-such-config.json"
ok "configs full of mistakes: musterd and --check-config exit 1 with the key path"
kill -0 "$MUSTERD_PID" || fail "musterd died"
