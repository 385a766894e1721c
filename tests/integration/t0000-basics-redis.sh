#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The harness itself: a private redis-server starts on a free port, answers PING and is private
# to this test (an empty keyspace, no persistence files).
source "$(dirname "$0")/lib.sh"

start_redis
[ "$(rcli ping)" = PONG ] || fail "redis-cli ping did not answer PONG"
ok "redis-server on 127.0.0.1:$REDIS_PORT answers PING"

[ "$MUSTER_REDIS_URL" = "redis://127.0.0.1:$REDIS_PORT" ] || fail "MUSTER_REDIS_URL is '$MUSTER_REDIS_URL'"
[ "$(rcli dbsize)" = 0 ] || fail "a fresh redis-server is not empty"
[ "$(rcli config get appendonly | tail -n 1)" = no ] || fail "appendonly is not off"
ok "MUSTER_REDIS_URL set, keyspace empty, no AOF"

id=$(submit_json '{"command":["true"]}')
[ "$(rcli XLEN muster:submit)" = 1 ] || fail "submit_json did not add one stream entry"
[ "$(rcli XRANGE muster:submit "$id" "$id" | sed -n 3p)" = '{"command":["true"]}' ] ||
    fail "submit_json stored a different spec"
ok "submit_json added entry $id"

make_config >/dev/null
jq -e '.pools | length == 2' "$CONFIG" >/dev/null || fail "default config is not valid JSON with 2 pools"
ok "make_config wrote $CONFIG"
