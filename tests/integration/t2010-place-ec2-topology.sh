#!/usr/bin/env bash
# EC2 instance topology import (issue #16) through real daemons: workers started with
# --instance-id and placeholder labels (each its own rack) are relabelled by `musterctl topology
# import` of the AWS documented example response (tests/data/topo/aws-example.json): bad or
# partial files are refused with exit status 1 and change nothing; after the import `musterctl
# nodes` shows the imported labels, a worker without an instance id keeps its own, a waiting gang
# that needs one rack starts on the two nodes the import put in one rack, and a worker that
# registers after the import gets its labels then.
source "$(dirname "$0")/lib.sh"

command -v jq >/dev/null 2>&1 || fail "jq not found"
AWS=$MUSTER_SRC/tests/data/topo/aws-example.json
P=$MUSTER_KEY_PREFIX

start_redis
make_config - >/dev/null <<'EOF_CFG'
{
  "topology_levels": ["zone", "block", "spine", "rack"],
  "instance_topology": {"levels": ["block", "spine", "rack"], "availability_zone": "zone"},
  "pools": [
    {"name": "trn", "capacity": "spot", "instance_type": "trn1.32xlarge",
     "gpu_type": "Trainium", "gpus_per_node": 1, "price_per_hour": 3}
  ],
  "heartbeat_s": 1,
  "node_lost_after_s": 5,
  "bind_timeout_s": 10
}
EOF_CFG
start_musterd "$CONFIG"
# placeholder RACK: labels for every level, the rack given.
placeholder() {
    echo --label zone=z0 --label block=b0 --label spine=s0 --label "rack=$1"
}
# shellcheck disable=SC2046 # the words of placeholder are meant to split
{
    start_worker w1 trn 1 $(placeholder ra) --instance-id i-1111111111example
    start_worker w2 trn 1 $(placeholder rb) --instance-id i-2222222222example
    start_worker w3 trn 1 $(placeholder rc) --instance-id i-3333333333example
    start_worker w0 trn 1 $(placeholder rd) # no instance id: nothing to import for it
}
wait_for "4 nodes registered" 10 '[ "$(ctl -o json nodes | jq length)" = 4 ]'

# labels NODE: the node's labels as "zone/block/spine/rack" from musterctl -o json nodes.
labels() {
    ctl -o json nodes | jq -r --arg n "$1" \
        '.[] | select(.name == $n) | .labels | "\(.zone)/\(.block)/\(.spine)/\(.rack)"'
}
[ "$(labels w1)" = z0/b0/s0/ra ] || fail "w1 starts with $(labels w1)"
[ "$(ctl -o json nodes | jq -r '.[] | select(.name == "w1") | .instance_id')" = i-1111111111example ] ||
    fail "muster:nodes lacks w1's instance_id"

# No two nodes share a rack yet: a gang of 2 tasks in one rack waits.
gang=$(submit_json '{"tasks":2,"gpus_per_task":1,"topology":{"required":"rack"},"command":["true"]}')
wait_for "job $gang has a reason" 10 '[ -n "$(rcli HGET "${P}job:'"$gang"'" reason)" ]'
rcli HGET "${P}job:$gang" reason | has -F "one rack" || fail "reason: $(rcli HGET "${P}job:$gang" reason)"
ok "2 tasks in one rack wait: $(rcli HGET "${P}job:$gang" reason)"

# ---- bad or partial files: refused, exit 1, nothing changed -------------------------------------
echo 'not json' >"$T/bad.json"
expect_rc 1 ctl topology import "$T/bad.json"
has -F "nothing changed" <"$T/err" || fail "not-JSON message: $(cat "$T/err")"
ok "a file that is not JSON is refused: $(cat "$T/err")"

jq '.Instances[1] |= del(.NetworkNodes)' "$AWS" >"$T/partial.json"
expect_rc 1 ctl topology import "$T/partial.json"
has -F "Instances[1].NetworkNodes: missing for instance 'i-2222222222example'" <"$T/err" ||
    fail "missing NetworkNodes message: $(cat "$T/err")"
ok "an instance without NetworkNodes is refused: $(head -1 "$T/err")"

# Fewer network nodes than the config maps: only musterd knows the mapping, and refuses it whole
# (i-1's good entry is not taken either).
jq '.Instances[2].NetworkNodes |= .[0:2]' "$AWS" >"$T/short.json"
expect_rc 1 ctl topology import "$T/short.json"
has -F "instance 'i-3333333333example': 2 network node(s), but instance_topology.levels maps 3" <"$T/err" ||
    fail "short NetworkNodes message: $(cat "$T/err")"
ok "an instance with fewer network nodes than levels is refused: $(grep -F refused "$T/err")"

for n in w1:ra w2:rb w3:rc w0:rd; do
    [ "$(labels "${n%:*}")" = "z0/b0/s0/${n#*:}" ] || fail "a refused import changed ${n%:*}: $(labels "${n%:*}")"
done
[ "$(rcli EXISTS "${P}topology")" = 0 ] || fail "a refused import was stored"
[ "$(job_state "$gang")" = PENDING ] || fail "the rack gang did not wait through the refused imports"
ok "refused imports changed no label and stored nothing"

# ---- the AWS documented example ------------------------------------------------------------------
expect_rc 0 ctl topology import "$AWS"
has -F "ok: 4 instance(s) imported: 3 node(s) relabelled" <"$T/out" || fail "import answer: $(cat "$T/out")"
has -F "1 instance(s) match no registered node" <"$T/out" || fail "import answer: $(cat "$T/out")"
has -F "NextToken" <"$T/err" || fail "no warning about the example's NextToken: $(cat "$T/err")"
[ -z "$(rcli KEYS "${P}topology:import:*")" ] || fail "staged imports left behind: $(rcli KEYS "${P}topology:import:*")"
[ "$(rcli HLEN "${P}topology:results")" = 0 ] || fail "answers left behind in ${P}topology:results"
ok "import: $(cat "$T/out")"

wait_for "w1 relabelled in muster:nodes" 10 \
    '[ "$(labels w1)" = us-west-2a/nn-1111111111example/nn-2222222222example/nn-3333333333example ]'
[ "$(labels w2)" = us-west-2a/nn-1111111111example/nn-2222222222example/nn-3333333333example ] ||
    fail "w2 has $(labels w2)"
[ "$(labels w3)" = us-west-2d/nn-1212121212example/nn-1211122211example/nn-1311133311example ] ||
    fail "w3 has $(labels w3)"
[ "$(labels w0)" = z0/b0/s0/rd ] || fail "w0 (no instance id) changed to $(labels w0)"
ctl nodes >"$T/table"
grep -E '^w1 .*nn-3333333333example' "$T/table" >/dev/null || fail "nodes table: $(cat "$T/table")"
ok "musterctl nodes shows the imported labels; w0 keeps its own"

# ---- placement follows the imported racks ---------------------------------------------------------
# The import put i-1 (w1) and i-2 (w2) under one rack: the waiting gang starts there, and only there.
wait_for "job $gang succeeded" 20 job_state_is "$gang" SUCCEEDED
case "$(rcli HGET "${P}job:$gang" nodes)" in
w1,w2 | w2,w1) ;;
*) fail "the rack gang ran on $(rcli HGET "${P}job:$gang" nodes), expected w1 and w2" ;;
esac
ok "the waiting rack gang ran on w1,w2, the rack the import made"

# A worker that registers after the import gets its labels then, and needs no --label for the
# levels the import sets (start_worker gives it only zone=z1 and rack=r1; block and spine come
# from the import alone).
start_worker w4 trn 1 --instance-id i-444444444example
wait_for "w4 registered" 10 '[ -n "$(rcli HGET "${P}nodes" w4)" ]'
[ "$(labels w4)" = us-west-2a/nn-1111111111example/nn-5434334334example/nn-1235301234example ] ||
    fail "w4 registered with $(labels w4)"
ok "a worker registering after the import got the imported labels, without --label for them"

# ---- imports add up and are idempotent; JSON output --------------------------------------------
ctl -o json topology import - <"$AWS" >"$T/json" 2>/dev/null || fail "re-import failed: $(cat "$T/json")"
jq -e '.ok == true and .instances == 4' "$T/json" >/dev/null || fail "json: $(cat "$T/json")"
jq -r .result "$T/json" | has -F "0 node(s) relabelled, 4 already labelled so; 0 instance(s) match no" ||
    fail "re-import: $(jq -r .result "$T/json")"
[ "$(rcli HLEN "${P}topology")" = 4 ] || fail "${P}topology has $(rcli HLEN "${P}topology") entries"
ok "importing again changes nothing: $(jq -r .result "$T/json")"

# ---- a restarted musterd keeps the imports ------------------------------------------------------
# The workers come back with their placeholder racks; only the stored import puts w1 and w2 in one
# rack again, so a new rack gang can run there and nowhere else.
stop_musterd
start_musterd "$CONFIG"
wait_for "musterd read the stored imports" 10 \
    'grep -qF "instance topology: 4 instance(s) from earlier imports" "$T/musterd.log"'
again=$(submit_json '{"tasks":2,"gpus_per_task":1,"topology":{"required":"rack"},"command":["true"]}')
wait_for "job $again succeeded" 30 job_state_is "$again" SUCCEEDED
case "$(rcli HGET "${P}job:$again" nodes)" in
w1,w2 | w2,w1) ;;
*) fail "after the restart the rack gang ran on $(rcli HGET "${P}job:$again" nodes)" ;;
esac
ok "after a musterd restart the imported racks still hold: the rack gang ran on w1,w2"
