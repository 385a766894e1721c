#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every early exit of musterd (issue #10, item 8) is a message and an exit status, never a crash:
# a bad config (run for real, not only with --check-config), Redis unreachable, the workers'
# port or the metrics address in use, an endpoint that cannot be bound, a bad CURVE key file,
# exit exactly 1; usage errors exit exactly 2.  musterd used to print the config error and then
# segfault (139) in its cleanup, walking a job map that setup had not created yet.  Under
# -DMUSTER_SANITIZE each run's output lands in a .log that lib.sh scans, so a leak at any of
# these exits fails the test too.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null

n=0
# expect_exit WANT PATTERN [ARGS...]: musterd ARGS exits WANT (not a signal) with PATTERN in its
# output, which is kept in $T/early-N.log.
expect_exit() {
    local want=$1 pattern=$2 rc=0 log
    shift 2
    n=$((n + 1))
    log=$T/early-$n.log
    timeout 60 "$MUSTER_BIN/musterd" "$@" >"$log" 2>&1 || rc=$?
    [ "$rc" -lt 128 ] || fail "musterd $* died of signal $((rc - 128)) (exit $rc): $(head -c 2000 "$log")"
    [ "$rc" -eq "$want" ] || fail "musterd $* exited $rc, want $want: $(head -c 2000 "$log")"
    grep -qF -- "$pattern" "$log" || fail "musterd $*: output lacks '$pattern': $(head -c 2000 "$log")"
    echo "# exit $rc: $(head -n 1 "$log")"
}

# A free port for the workers' socket, and a port something (our redis-server) already holds.
port=$(free_port)
bind=(--redis "$MUSTER_REDIS_URL" --bind "tcp://127.0.0.1:$port")

# ---- 1. bad configs, run for real ------------------------------------------------------------
pool='"pools":[{"name":"a","capacity":"spot","gpu_type":"A100","gpus_per_node":8}]'
long=$(printf 'q%.0s' $(seq 70))
bad_config() { # PATTERN JSON: musterd exits 1 with PATTERN, with and without --check-config
    local file=$T/bad-config-$n.json
    printf '%s\n' "$2" >"$file"
    expect_exit 1 "$1" --config "$file" --check-config
    expect_exit 1 "$1" --config "$file" "${bind[@]}"
}
bad_config "pools[0].capacity: expected \"spot\" or \"on-demand\", got 'spt'" \
    '{"pools":[{"name":"a","capacity":"spt","gpu_type":"A100","gpus_per_node":8}]}'
bad_config "queues[0].weight: expected an integer 1..1000, got -1" \
    "{$pool,\"queues\":[{\"name\":\"a\",\"weight\":-1}]}"
bad_config "queues[0].name: expected a name" "{$pool,\"queues\":[{\"name\":\"a\\\"b\",\"weight\":1}]}"
bad_config "queues[0].name: expected a name" "{$pool,\"queues\":[{\"name\":\"$long\",\"weight\":1}]}"
bad_config "JSON" '{"pools":[{"name":"a",}]'
expect_exit 1 "cannot open" --config "$T/no-such-config.json" "${bind[@]}"
ok "bad configs: musterd exits 1 with the key path, with and without --check-config"

# ---- 2. the outside world says no ------------------------------------------------------------
expect_exit 1 "cannot reach redis" --config "$CONFIG" --redis "redis://127.0.0.1:$(free_port)" \
    --bind "tcp://127.0.0.1:$port"
expect_exit 1 "cannot bind 'tcp://127.0.0.1:$REDIS_PORT'" --config "$CONFIG" \
    --redis "$MUSTER_REDIS_URL" --bind "tcp://127.0.0.1:$REDIS_PORT"
expect_exit 1 "cannot bind 'tcp://no-such-host.invalid:x'" --config "$CONFIG" \
    --redis "$MUSTER_REDIS_URL" --bind "tcp://no-such-host.invalid:x"
expect_exit 1 "--metrics: cannot serve on 127.0.0.1:$REDIS_PORT" --config "$CONFIG" "${bind[@]}" \
    --metrics "127.0.0.1:$REDIS_PORT"
expect_exit 1 "--metrics 'nowhere': expected ADDR:PORT" --config "$CONFIG" "${bind[@]}" \
    --metrics nowhere
ok "redis unreachable, port in use, bad endpoint, metrics address in use: exit 1"

# ---- 3. CURVE key files ----------------------------------------------------------------------
K=$T/keys
mkdir -p "$K"
"$MUSTER_BIN/musterctl" keygen --out "$K/sched" >/dev/null 2>&1 || fail "musterctl keygen failed"
"$MUSTER_BIN/musterctl" keygen --out "$K/n1" >/dev/null 2>&1 || fail "musterctl keygen failed"
echo "n1 $(cat "$K/n1.pub")" >"$K/allow"
printf 'not-a-key\n' >"$K/garbage.key"
chmod 600 "$K/garbage.key"
expect_exit 1 "secret key '$K/missing.key'" --config "$CONFIG" "${bind[@]}" \
    --curve-secret-key "$K/missing.key" --curve-allow "$K/allow"
expect_exit 1 "expected a CURVE key" --config "$CONFIG" "${bind[@]}" \
    --curve-secret-key "$K/garbage.key" --curve-allow "$K/allow"
printf 'n1 not-a-key\n' >"$K/bad-allow"
expect_exit 1 "bad-allow:1: expected a CURVE public key" --config "$CONFIG" "${bind[@]}" \
    --curve-secret-key "$K/sched.key" --curve-allow "$K/bad-allow"
# The allow-list is read, and the ZAP handler bound, before the workers' socket: a port in use
# after that is the last early exit with CURVE on.
expect_exit 1 "cannot bind 'tcp://127.0.0.1:$REDIS_PORT'" --config "$CONFIG" \
    --redis "$MUSTER_REDIS_URL" --bind "tcp://127.0.0.1:$REDIS_PORT" \
    --curve-secret-key "$K/sched.key" --curve-allow "$K/allow"
ok "bad CURVE key file or allow-list: exit 1"

# ---- 4. usage errors -------------------------------------------------------------------------
expect_exit 2 "usage:" --bogus
expect_exit 2 "--config FILE is required" "${bind[@]}"
expect_exit 2 "unexpected argument 'extra'" --config "$CONFIG" extra
expect_exit 2 "--log-level: expected debug" --config "$CONFIG" --log-level loud
expect_exit 2 "needs both --curve-secret-key" --config "$CONFIG" --curve-allow "$K/allow"
ok "usage errors: exit 2"

# ---- 5. and a good start still stops cleanly -------------------------------------------------
start_musterd "$CONFIG"
stop_musterd
grep -q "musterd stopping" "$T/musterd.log" || fail "musterd did not stop cleanly: $(tail -n 5 "$T/musterd.log")"
ok "after $n early exits, a good config starts and stops"
