#!/usr/bin/env bash
# A write the old Redis primary acknowledged and its replica never got (issue #14): musterd
# writes it again on the promoted replica.  The replica replicates through a small TCP relay;
# with the relay stopped (kill -STOP) the primary's replication stream piles up in the relay's
# socket buffer, and kill -9 of the relay throws it away, so the replica really misses what
# musterd writes meanwhile.  Two writes are lost that way: job A's SUCCEEDED (A is over and
# gone from musterd's table) and all of job B (its submission, its start).  Then the primary is
# killed and the Sentinels promote the replica: the same musterd, never restarted, must write
# A's final state and B's whole record there.  Only real processes; every wait polls.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
_mu_need_bin musterctl

start_redis # the primary
P1=$REDIS_PORT
P2=$(free_port)
RELAY=$(free_port)
# The relay: RELAY -> P1, one process for every connection, so that kill -STOP freezes it all.
python3 - "$RELAY" "$P1" >"$T/relay.log" 2>&1 <<'PY' &
import selectors, socket, sys
listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
sel = selectors.DefaultSelector()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", listen_port))
srv.listen(8)
sel.register(srv, selectors.EVENT_READ)
peer = {}
def close(s):
    for x in (s, peer.pop(s, None)):
        if x is not None:
            peer.pop(x, None)
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()
while True:
    for key, _ in sel.select():
        s = key.fileobj
        if s is srv:
            c, _ = srv.accept()
            try:
                u = socket.create_connection(("127.0.0.1", target_port))
            except OSError:
                c.close()
                continue
            peer[c], peer[u] = u, c
            sel.register(c, selectors.EVENT_READ)
            sel.register(u, selectors.EVENT_READ)
            continue
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data or s not in peer:
            close(s)
            continue
        peer[s].sendall(data)
PY
RELAY_PID=$!
_mu_pids+=("$RELAY_PID")
wait_for "the relay listens" 10 _mu_port_open "$RELAY"
redis-server --port "$P2" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
    --replicaof 127.0.0.1 "$RELAY" --daemonize no --logfile "$T/redis-replica.log" >/dev/null 2>&1 &
P2_PID=$!
_mu_pids+=("$P2_PID")
wait_for "the replica in sync through the relay" 20 \
    "redis-cli -p $P2 INFO replication | tr -d '\r' | has '^master_link_status:up$'"

# A long failover-timeout: Sentinel would otherwise soon point the replica at the primary's
# own address (+fix-slave-config) instead of the relay.
start_sentinels "$P1" 600000
wait_sentinels "$P2"
offset() {
    redis-cli -p "$1" INFO replication | tr -d '\r' | sed -n "s/^$2://p"
}
# synced: the replica has every write of the primary.
synced() {
    local p r
    p=$(offset "$P1" master_repl_offset)
    r=$(offset "$P2" master_repl_offset)
    [ -n "$p" ] && [ "$p" = "$r" ]
}
# on PORT ID: the job's state in the server on PORT ("" when it has no such job).
on() {
    redis-cli -p "$1" HGET "muster:job:$2" state
}

export MUSTER_REDIS_URL=$MUSTER_SENTINEL_URL
make_config --with '{"node_lost_after_s": 60}' >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
wait_for "n1 registered" 20 '[ "$(redis-cli -p '"$P1"' HLEN muster:nodes)" = 1 ]'

a=$(ctl submit --tasks 2 --gpus-per-task 1 -- sh -c "while [ ! -e $T/go-a ]; do sleep 0.1; done") ||
    fail "submit of job A failed"
wait_for "job A running" 30 '[ "$(on '"$P1"' '"$a"')" = RUNNING ]'
wait_for "the replica has A running" 30 synced
[ "$(on "$P2" "$a")" = RUNNING ] || fail "the replica has A as '$(on "$P2" "$a")'"

# ---- the replica misses what follows -------------------------------------------------------------
kill -STOP "$RELAY_PID"
: >"$T/go-a"
wait_for "job A succeeded on the primary" 30 '[ "$(on '"$P1"' '"$a"')" = SUCCEEDED ]'
b=$(ctl submit --tasks 1 --gpus-per-task 2 -- sh -c "while [ ! -e $T/go-b ]; do sleep 0.1; done") ||
    fail "submit of job B failed"
wait_for "job B running on the primary" 30 '[ "$(on '"$P1"' '"$b"')" = RUNNING ]'
[ "$(on "$P2" "$a")" = RUNNING ] && [ -z "$(on "$P2" "$b")" ] ||
    fail "the replica was not cut off: A '$(on "$P2" "$a")', B '$(on "$P2" "$b")'"
ok "the primary acknowledged A's end and B's start; the replica has neither"

# ---- the primary dies with them; the Sentinels promote the replica --------------------------------
kill -9 "$RELAY_PID" # its buffered replication stream goes with it
kill -9 "$REDIS_PID"
wait_for "the Sentinels promote the replica $P2" 90 '[ "$(sentinel_primary)" = '"$P2"' ]'
wait_for "$P2 is a primary" 30 "redis-cli -p $P2 ROLE | head -n 1 | has -x master"
_mu_alive "$MUSTERD_PID" || fail "musterd exited"

REDIS_PORT=$P2 # rcli and the checks below: the new primary
wait_for "A's SUCCEEDED written again on the new primary" 60 '[ "$(on '"$P2"' '"$a"')" = SUCCEEDED ]'
[ "$(rcli SISMEMBER muster:active "$a")" = 0 ] || fail "A is still in muster:active"
[ -n "$(rcli ZSCORE muster:jobs "$a")" ] || fail "A is not in muster:jobs"
wait_for "B written again on the new primary" 60 '[ "$(on '"$P2"' '"$b"')" = RUNNING ]'
[ "$(rcli SISMEMBER muster:active "$b")" = 1 ] || fail "B is not in muster:active"
[ "$(rcli HGET "muster:job:$b" tasks)" = 1 ] || fail "B's hash lacks its submission's fields"
[ "$(ctl -o json show "$b" | jq -r .state)" = RUNNING ] || fail "musterctl show B: $(ctl -o json show "$b")"
grep -q "written again" "$T/musterd.log" || fail "musterd did not say it wrote its state again"
ok "the same musterd wrote A's end and B's record again on the promoted replica"

: >"$T/go-b"
wait_for "job B succeeded" 60 '[ "$(on '"$P2"' '"$b"')" = SUCCEEDED ]'
c=$(ctl submit --tasks 1 --gpus-per-task 1 -- true) || fail "submit after the failover failed"
wait_for "job C succeeded" 60 '[ "$(on '"$P2"' '"$c"')" = SUCCEEDED ]'
[ "$(rcli SCARD muster:active)" = 0 ] || fail "$(rcli SCARD muster:active) job(s) still active"
[ "$(rcli GET muster:leader | cut -d' ' -f1)" = "$(rcli HGET muster:leadership epoch)" ] ||
    fail "the lease on the new primary: '$(rcli GET muster:leader)', leadership epoch '$(rcli HGET muster:leadership epoch)'"
ok "B ends, a new job runs, nothing stays active, the lease holds on the new primary"
