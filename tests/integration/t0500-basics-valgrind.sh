#!/usr/bin/env bash
# musterd and two workers under valgrind for a short steady state (docs/style.md §1.8, issue #5): a gang
# that succeeds, one that fails, one that cannot start, one cancelled while running, one
# rejected, a few seconds idle, then SIGTERM.  Each daemon must exit 0 on SIGTERM with no
# valgrind error and no definitely lost bytes; a failure prints the valgrind report with its
# stacks.  Skipped (exit 0, "# skip") on sanitizer builds, which valgrind cannot run.
source "$(dirname "$0")/lib.sh"

real_bin=$MUSTER_BIN
command -v valgrind >/dev/null 2>&1 || fail "valgrind not found (hint: scripts/deps.sh)"
if grep -qa -e __asan_init -e __tsan_init -e __msan_init "$real_bin/musterd"; then
    echo "# skip: $real_bin/musterd is built with a sanitizer; valgrind cannot run it"
    exit 0
fi

# Wrappers with the daemons' names: lib.sh starts "$MUSTER_BIN/musterd" etc., and `exec` keeps
# the PID, so stop_pid and the EXIT trap still reach the real process.  One log per process
# (%p), forked children included.  The per-task supervisor muster-shim runs under valgrind too
# (through MUSTER_SHIM); each wrapper notes its PID so the test can wait for the shims to end.
vbin=$T/vbin
mkdir -p "$vbin" "$T/vg/pids"
for prog in musterd muster-worker muster-shim; do
    [ -x "$real_bin/$prog" ] || continue
    real=$real_bin/$prog
    # The installed shim is linked statically, which valgrind cannot check: its dynamic twin.
    if [ "$prog" = muster-shim ] && [ -x "$real_bin/muster-shim-dynamic" ]; then
        real=$real_bin/muster-shim-dynamic
    fi
    cat >"$vbin/$prog" <<EOF
#!/bin/sh
: >"$T/vg/pids/\$\$"
exec valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \\
    --show-leak-kinds=definite --num-callers=30 --log-file="$T/vg/$prog.%p.vg" \\
    "$real" "\$@"
EOF
    chmod +x "$vbin/$prog"
done
[ ! -x "$vbin/muster-shim" ] || export MUSTER_SHIM=$vbin/muster-shim
ln -s "$real_bin/musterctl" "$vbin/musterctl"
MUSTER_BIN=$vbin

start_redis
# Leases and deadlines far beyond what processes under valgrind need on a busy machine: this
# test is about memory errors, not timers (the default 5 s lease ran out in CI while the
# valgrind'ed musterd answered heartbeats late, and no job could start).
make_config --with '{"node_lost_after_s": 60, "bind_timeout_s": 120}' >/dev/null
start_musterd "$CONFIG" --log-level debug
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 60 '[ "$(rcli HLEN muster:nodes)" = 2 ]'
ok "musterd and 2 workers up under valgrind"

good=$(submit_json '{"tasks":2,"gpus_per_task":8,"command":["true"],"env":{"A":"1"}}')
bad=$(submit_json '{"command":"exit 3","max_retries":0}')
long=$(submit_json '{"command":["sleep","300"],"checkpoint":{"signal":"SIGUSR1","grace_s":1}}')
rej=$(submit_json '{"command":["true"],"tasks":"many"}')
# A task that cannot start: the worker answers BIND_ACK ok=false on the last attempt.
nostart=$(submit_json '{"command":["/nonexistent/muster-t0500"],"max_retries":0}')
wait_for "job $good succeeded" 60 job_state_is "$good" SUCCEEDED
wait_for "job $bad failed" 60 job_state_is "$bad" FAILED
wait_for "job $rej rejected" 30 job_state_is "$rej" REJECTED
wait_for "job $nostart failed" 60 job_state_is "$nostart" FAILED
wait_for "job $long running" 60 job_state_is "$long" RUNNING
ctl cancel "$long" >/dev/null
wait_for "job $long cancelled" 60 job_state_is "$long" CANCELLED
ok "success, failure, failure to start, cancel and reject went through"

sleep 5 # steady state: heartbeats, status refreshes, nothing to do

# vg_stop NAME PID: SIGTERM, then up to 60 s for valgrind's exit (leak check included).
vg_stop() {
    local name=$1 pid=$2 rc=0 i
    kill -TERM "$pid" 2>/dev/null || fail "$name (pid $pid) already gone before SIGTERM"
    for ((i = 0; i < 600; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && fail "$name (pid $pid) still running 60 s after SIGTERM"
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || {
        cat "$T"/vg/*.vg >&2
        fail "$name exited with status $rc after SIGTERM (99: valgrind found errors)"
    }
}
vg_stop worker-n1 "${WORKER_PID[n1]}"
vg_stop worker-n2 "${WORKER_PID[n2]}"
vg_stop musterd "$MUSTERD_PID"
ok "all three exited 0 on SIGTERM"
for f in "$T"/vg/pids/*; do # the shims (and anything else wrapped) have ended too
    wait_for "process ${f##*/} to end" 30 "! kill -0 ${f##*/} 2>/dev/null"
done
nshim=$(find "$T/vg" -name 'muster-shim.*.vg' | wc -l)

# Every process valgrind saw (the daemons and any forked helper): no errors, no definite leaks.
# With --quiet a clean process leaves an empty log; anything in one is a finding.
n=0
for f in "$T"/vg/*.vg; do
    n=$((n + 1))
    if grep -qE 'definitely lost: [1-9]|ERROR SUMMARY: [1-9]|Invalid (read|write|free)|uninitialised|Mismatched free' "$f" \
        || [ -s "$f" ]; then
        echo "----- ${f#"$T"/} -----" >&2
        cat "$f" >&2
        fail "valgrind reported a problem in ${f#"$T"/vg/}"
    fi
done
[ "$n" -ge 3 ] || fail "expected at least 3 valgrind logs, found $n"
ok "valgrind: $n process log(s) ($nshim muster-shim), no errors, no definitely lost bytes"
