#!/usr/bin/env bash
# A redis+sentinel:// URL in the config file's "redis" (issue #40): it used to be refused there
# ("redis: expected a URL such as ...") though --redis and MUSTER_REDIS_URL took it, so an HA
# deployment that keeps its settings in the config could not use Sentinel.  A primary and three
# Sentinels; musterd, musterctl --config and the Python module are given no other way to Redis
# than the Sentinel URL, and a job runs through them.  A malformed Sentinel URL in the config is
# refused with the parser's own message (one grammar, one parser).
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl
_mu_need_bin musterd

start_redis
start_sentinels "$REDIS_PORT"
wait_for "the Sentinels name the primary" 20 '[ "$(sentinel_primary)" = "$REDIS_PORT" ]'

make_config --with "{\"redis\": \"$MUSTER_SENTINEL_URL\"}" >/dev/null
# shellcheck disable=SC2153 # MUSTER_BIN is lib.sh's
"$MUSTER_BIN/musterd" --config "$CONFIG" --check-config >"$T/check.out" 2>&1 ||
    fail "--check-config refused the Sentinel URL: $(cat "$T/check.out")"
ok "the config's \"redis\" takes a redis+sentinel:// URL"

# Nothing but the config names Redis: no --redis, no MUSTER_REDIS_URL.
unset MUSTER_REDIS_URL
SCHED_PORT=$(free_port)
export SCHED_PORT
"$MUSTER_BIN/musterd" --config "$CONFIG" --bind "tcp://127.0.0.1:$SCHED_PORT" \
    >>"$T/musterd.log" 2>&1 &
MUSTERD_PID=$!
_mu_pids+=("$MUSTERD_PID")
_mu_wait_listen musterd "$MUSTERD_PID" "$SCHED_PORT" 10
start_worker n1 spot-a 8
cctl() { "$MUSTER_BIN/musterctl" --config "$CONFIG" "$@"; }
wait_for "n1 registered" 20 '[ "$(cctl -o json nodes | jq length)" = 1 ]'
a=$(cctl submit --tasks 1 --gpus-per-task 1 -- true) || fail "musterctl --config submit failed"
wait_for "job $a succeeded" 30 '[ "$(cctl -o json show "$a" | jq -r .state)" = SUCCEEDED ]'
[ "$(rcli HGET "muster:job:$a" state)" = SUCCEEDED ] || fail "job $a is not in the primary"
ok "musterd and musterctl --config reach the primary through the config's Sentinel URL"

# The Python module (libmuster's parser): the same URL, and the same refusal of a bad one.
MUSTER_LIB=${MUSTER_LIB:-$(cd "$MUSTER_BIN/.." && pwd)/lib/libmuster.so.0}
if [ -e "$MUSTER_LIB" ] && command -v python3 >/dev/null 2>&1 &&
    ! ldd "$MUSTER_LIB" | has libasan; then
    MUSTER_LIB=$MUSTER_LIB PYTHONPATH=${MUSTER_PYTHONPATH:-$MUSTER_SRC/python} \
        PYTHONDONTWRITEBYTECODE=1 python3 - "$MUSTER_SENTINEL_URL" "$a" <<'PYEOF' || fail "the Python module through the Sentinel URL failed"
import sys
import muster
url, job = sys.argv[1], sys.argv[2]
with muster.connect(url) as m:
    assert m.get(job)["state"] == "SUCCEEDED", m.get(job)
try:
    muster.connect("redis+sentinel://s1,/m")
except muster.Error as e:
    assert "missing host" in str(e), str(e)
else:
    raise SystemExit("a bad Sentinel URL was taken")
PYEOF
    ok "the Python module takes the same Sentinel URL and refuses the same bad one"
else
    ok "# skip the Python check (no libmuster.so, no python3, or a sanitizer build)"
fi

make_config --with '{"redis": "redis+sentinel://127.0.0.1:1,/mymaster"}' >/dev/null
expect_rc 1 "$MUSTER_BIN/musterd" --config "$CONFIG" --check-config
cat "$T/out" "$T/err" | has -F "redis: redis url 'redis+sentinel://127.0.0.1:1,/mymaster': missing host" ||
    fail "a bad Sentinel URL in the config: $(cat "$T/out" "$T/err")"
ok "a malformed Sentinel URL in the config is refused with the parser's message"
