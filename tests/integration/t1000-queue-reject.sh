#!/usr/bin/env bash
# Invalid submissions become REJECTED with a message; valid ones keep flowing; musterd survives.
source "$(dirname "$0")/lib.sh"

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "node registered" 10 '[ "$(rcli HLEN muster:nodes)" = 1 ]'

expect_rejected() { # ID PATTERN
    wait_for "job $1 rejected" 10 job_state_is "$1" REJECTED
    rcli HGET "muster:job:$1" error | has -- "$2" || fail "job $1: error '$(rcli HGET "muster:job:$1" error)' lacks '$2'"
}

a=$(submit_json '{"command": ["true"],')
b=$(rcli XADD muster:submit '*' notspec 1)
c=$(submit_json '{"command": ["true"], "tasks": "four"}')
d=$(submit_json '{"command": ["true"], "queue": "nope"}')
e=$(submit_json '{"command": ["true"], "gpus_per_task": 16}')
f=$(submit_json '{"command": ["true"], "colour": "blue"}')
g=$(submit_json '[1,2,3]')
h=$(submit_json '{"command": ["true"], "capacity": ["cheap"]}')
good=$(submit_json '{"command": ["true"], "gpus_per_task": 2}')
big=$(head -c 2000000 /dev/zero | tr '\0' 'x')
i=$(rcli -x XADD muster:submit '*' spec <<<"$big")

expect_rejected "$a" "JSON"
expect_rejected "$b" "spec"
expect_rejected "$c" "tasks"
expect_rejected "$d" "queue"
expect_rejected "$e" "GPU"
expect_rejected "$f" "colour"
expect_rejected "$g" "object"
expect_rejected "$h" "capacity"
expect_rejected "$i" ""
wait_for "valid job $good succeeded" 20 job_state_is "$good" SUCCEEDED
ok "9 bad submissions rejected with messages, the good one ran"

# Everything was acknowledged: nothing left pending in the consumer group.
[ "$(rcli XPENDING muster:submit muster-scheduler | head -1)" = 0 ] || fail "entries left unacknowledged"
kill -0 "$MUSTERD_PID" || fail "musterd died"
ok "all entries acknowledged, musterd alive"
