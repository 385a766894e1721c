#!/usr/bin/env bash
# ZeroMQ CURVE between musterd and the workers (issue #5, "who may do what"): keys from
# `musterctl keygen`, musterd with --curve-secret-key and an allow-list enforced by its ZAP
# handler.  A worker with an allowed key registers and runs a job; a worker with an unknown key,
# one without keys, and one using another node's bound key never register, and musterd logs the
# refusal with the key.  Bad key files and half-given flags are clear errors.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"

# node_registered NAME: musterd published NAME in <prefix>nodes.
node_registered() {
    [ "$(rcli HEXISTS "${MUSTER_KEY_PREFIX}nodes" "$1")" = 1 ]
}

K=$T/keys
mkdir -p "$K"
for who in sched n1 n2 n3 n5; do
    "$MUSTER_BIN/musterctl" keygen --out "$K/$who" >"$K/$who.printed" 2>/dev/null ||
        fail "musterctl keygen --out $K/$who failed"
    [ "$(cat "$K/$who.printed")" = "$(cat "$K/$who.pub")" ] || fail "keygen printed another key than $who.pub"
    [ "$(stat -c %a "$K/$who.key")" = 600 ] || fail "$who.key is not mode 0600: $(stat -c %a "$K/$who.key")"
done
"$MUSTER_BIN/musterctl" keygen --out "$K/n1" >/dev/null 2>"$K/again.err" && fail "keygen overwrote n1.key"
grep -q "refusing to overwrite" "$K/again.err" || fail "keygen over an existing key: $(cat "$K/again.err")"
"$MUSTER_BIN/musterctl" -o json keygen | jq -e '(.public_key | length) == 40 and (.secret_key | length) == 40' >/dev/null ||
    fail "keygen -o json"
"$MUSTER_BIN/musterctl" keygen | grep -Eq '^secret-key: .{40}$' || fail "keygen without --out prints no secret-key line"
ok "musterctl keygen: PREFIX.key (0600) and PREFIX.pub, refuses to overwrite, -o json, stdout form"

# Allow-list: n1 and n5 bound to their keys (n2 and n3 are not in it; the scheduler's own key is
# never a worker key).
{
    echo "# workers allowed to connect: NODE KEY"
    echo "n1 $(cat "$K/n1.pub")   # first node"
    echo
    echo "n5 $(cat "$K/n5.pub")"
} >"$K/allow"

start_redis
make_config >/dev/null

# ---- flag and key-file errors ---------------------------------------------------------------
rc=0
"$MUSTER_BIN/musterd" --config "$CONFIG" --curve-allow "$K/allow" >"$T/only-allow.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "musterd with --curve-allow alone exited $rc, expected 2: $(cat "$T/only-allow.log")"
grep -q "needs both --curve-secret-key" "$T/only-allow.log" || fail "no hint: $(cat "$T/only-allow.log")"
cp "$K/sched.key" "$K/open.key"
chmod 644 "$K/open.key"
rc=0
"$MUSTER_BIN/musterd" --config "$CONFIG" --redis "$MUSTER_REDIS_URL" --bind "tcp://127.0.0.1:$(free_port)" \
    --curve-secret-key "$K/open.key" --curve-allow "$K/allow" >"$T/open.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "musterd with a 0644 secret key exited $rc, expected 1"
grep -q "mode 0644 lets other users read it; run 'chmod 600" "$T/open.log" || fail "0644 key: $(cat "$T/open.log")"
printf 'n1 not-a-key\n' >"$K/bad-allow"
rc=0
"$MUSTER_BIN/musterd" --config "$CONFIG" --redis "$MUSTER_REDIS_URL" --bind "tcp://127.0.0.1:$(free_port)" \
    --curve-secret-key "$K/sched.key" --curve-allow "$K/bad-allow" >"$T/bad-allow.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "musterd with a bad allow-list exited $rc, expected 1"
grep -q "bad-allow:1: expected a CURVE public key" "$T/bad-allow.log" || fail "bad allow-list: $(cat "$T/bad-allow.log")"
rc=0
"$MUSTER_BIN/muster-worker" --scheduler tcp://127.0.0.1:1 --node x --pool spot-a --gpus 1 \
    --curve-key "$K/n1.key" >"$T/half.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "muster-worker with --curve-key alone exited $rc, expected 2"
chmod 640 "$K/n2.key"
rc=0
"$MUSTER_BIN/muster-worker" --scheduler tcp://127.0.0.1:1 --node x --pool spot-a --gpus 1 \
    --state-dir "$T/w/x" --curve-key "$K/n2.key" --curve-server-key "$K/sched.pub" >"$T/w640.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "muster-worker with a 0640 secret key exited $rc, expected 1"
grep -q "chmod 600" "$T/w640.log" || fail "0640 worker key: $(cat "$T/w640.log")"
chmod 600 "$K/n2.key"
ok "half-given CURVE flags exit 2; a readable secret key and a bad allow-list exit 1 with the fix"

# ---- musterd with CURVE ---------------------------------------------------------------------
start_musterd "$CONFIG" --curve-secret-key "$K/sched.key" --curve-allow "$K/allow"
grep -qF "CURVE on: public key $(cat "$K/sched.pub"), 2 worker key(s) allowed" "$T/musterd.log" ||
    fail "musterd did not log its CURVE key: $(cat "$T/musterd.log")"

# The server key given as text, the worker's secret as a file.
start_worker n1 spot-a 8 --curve-server-key "$(cat "$K/sched.pub")" --curve-key "$K/n1.key"
wait_for "n1 (allowed key) registered" 10 node_registered n1
id=$(submit_json '{"name":"curve","command":["sh","-c","echo over-curve"]}')
wait_for "job $id succeeded on n1" 30 job_state_is "$id" SUCCEEDED
ctl -o json show "$id" | jq -e '.state == "SUCCEEDED"' >/dev/null || fail "show $id"
ok "a worker with an allowed key registers over CURVE and runs a job"

# Environment fallbacks (MUSTER_CURVE_SERVER_KEY as a file, MUSTER_CURVE_KEY).
MUSTER_CURVE_SERVER_KEY=$K/sched.pub MUSTER_CURVE_KEY=$K/n5.key start_worker n5 spot-a 8
wait_for "n5 (allowed key from the environment) registered" 10 node_registered n5
ok "MUSTER_CURVE_SERVER_KEY and MUSTER_CURVE_KEY work as the flags"

start_worker n2 spot-a 8 --curve-server-key "$K/sched.pub" --curve-key "$K/n2.key"
start_worker n4 spot-a 8
start_worker n3 spot-a 8 --curve-server-key "$K/sched.pub" --curve-key "$K/n1.key" # n1's key
n2pub=$(cat "$K/n2.pub")
wait_for "musterd logs the refused key of n2" 10 grep -qF "CURVE key $n2pub is not in the allow-list" "$T/musterd.log"
wait_for "musterd drops n3 speaking with n1's key" 10 grep -qF "node 'n3' uses the CURVE key of node 'n1'" "$T/musterd.log"
sleep 3 # several reconnect rounds of each refused worker
for n in n2 n3 n4; do
    node_registered "$n" && fail "node $n registered without an allowed key"
    _mu_alive "${WORKER_PID[$n]}" || fail "worker $n exited (it should keep retrying)"
done
refusals=$(grep -cF "CURVE key $n2pub is not in the allow-list" "$T/musterd.log")
[ "$refusals" -le 2 ] || fail "the refusal of n2 was logged $refusals times in a few seconds (not rate-limited)"
[ "$(rcli HLEN "${MUSTER_KEY_PREFIX}nodes")" = 2 ] || fail "nodes: $(rcli HKEYS "${MUSTER_KEY_PREFIX}nodes")"
ok "unknown key (n2), no keys (n4) and another node's key (n3) never register; refusals logged once with the key"

# The allowed worker still works next to the refused ones.
id2=$(submit_json '{"command":["true"],"tasks":2,"gpus_per_task":8}')
wait_for "job $id2 succeeded on n1+n5" 30 job_state_is "$id2" SUCCEEDED
ok "allowed workers keep running gangs while strangers knock"
