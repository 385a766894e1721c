#!/usr/bin/env bash
# libmuster's example (examples/submit_and_wait.c), built against an INSTALLED libmuster with
# pkg-config, runs a 2-task gang on a real stack; also: a failing job, an idempotency key used
# twice (one job, one id), a wait that times out, and an unreachable Redis.
#
# MUSTER_EXAMPLE_BIN: an example binary already built against an installed copy (scripts/test.sh
# passes the one it built); without it this test installs $MUSTER_BIN/.. into $T/prefix itself
# (cmake --install) and builds the example there with examples/Makefile.
source "$(dirname "$0")/lib.sh"

if [ -z "${MUSTER_EXAMPLE_BIN:-}" ]; then
    build_dir=$(cd "$MUSTER_BIN/.." && pwd)
    cmake --install "$build_dir" --prefix "$T/prefix" >"$T/install.log" 2>&1 ||
        fail "cmake --install $build_dir failed: $(tail -n 5 "$T/install.log")"
    mkdir -p "$T/example"
    PKG_CONFIG_PATH="$T/prefix/lib/pkgconfig" make -s -C "$T/example" \
        -f "$MUSTER_SRC/examples/Makefile" VPATH="$MUSTER_SRC/examples" >"$T/make.log" 2>&1 ||
        fail "building the example against the installed libmuster failed: $(cat "$T/make.log")"
    MUSTER_EXAMPLE_BIN=$T/example/submit_and_wait
    ok "example built against the libmuster installed in \$T/prefix"
fi
ex=$MUSTER_EXAMPLE_BIN
[ -x "$ex" ] || fail "$ex: not an executable"
# It must run with the installed library, not one from a build tree.
lib=$(ldd "$ex" | awk '$1 ~ /^libmuster\.so/ { print $3 }')
case "$lib" in
*/build*/lib/*) fail "$ex uses the build tree's $lib, not an installed copy" ;;
/*) ok "example links $lib" ;;
*) fail "$ex does not link libmuster.so dynamically: $(ldd "$ex")" ;;
esac
# A sanitizer build of libmuster (scripts/test.sh --asan) needs its runtime loaded first.
preload=
if ldd "$lib" | has libasan; then
    preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
fi
run_ex() {
    env ${preload:+LD_PRELOAD="$preload"} "$ex" "$@"
}

start_redis
make_config >/dev/null
start_musterd "$CONFIG"
start_worker n1 spot-a 8
start_worker n2 spot-a 8
wait_for "2 nodes registered" 10 '[ "$(rcli HLEN muster:nodes)" = 2 ]'

# A 2-task gang of 8 GPUs per task (one per node) that succeeds: exit 0, the outcome on stdout.
out=$(run_ex -t 60 -g 8) || fail "example exited $? for a job that should succeed: $out"
echo "$out" | sed 's/^/# /'
id=$(sed -n 's/^job \([0-9]*-[0-9]*\) submitted$/\1/p' <<<"$out" | head -n 1)
[ -n "$id" ] || fail "no 'job ID submitted' line in: $out"
grep -Eq "^job $id SUCCEEDED attempt 1 exit 0 nodes n[12],n[12]" <<<"$out" ||
    fail "no SUCCEEDED line with both nodes in: $out"
[ "$(rcli HGET "muster:job:$id" tasks)" = 2 ] || fail "job $id is not a 2-task gang"
[ "$(rcli HGET "muster:job:$id" name)" = libmuster-example ] || fail "name not set by the builder"
ok "2-task gang submitted with the builder ran and succeeded"

# A failing command: exit 1 and FAILED with the exit code.
rc=0
out=$(run_ex -t 60 -- sh -c 'exit 7') || rc=$?
[ "$rc" = 1 ] || fail "example exited $rc for a failing job (expected 1): $out"
grep -q "FAILED attempt 1 exit 7" <<<"$out" || fail "no 'FAILED attempt 1 exit 7' in: $out"
ok "a failing gang is reported FAILED with its exit code"

# The same idempotency key twice: one job, the same id.
before=$(rcli ZCARD muster:jobs)
out1=$(run_ex -t 60 -k example-key-1 -- true) || fail "first keyed submit failed: $out1"
out2=$(run_ex -t 60 -k example-key-1 -- true) || fail "second keyed submit failed: $out2"
id1=$(awk 'NR == 1 { print $2 }' <<<"$out1")
id2=$(awk 'NR == 1 { print $2 }' <<<"$out2")
if [ -z "$id1" ] || [ "$id1" != "$id2" ]; then fail "same key gave ids '$id1' and '$id2'"; fi
grep -q "already submitted" <<<"$out2" || fail "second submit not reported as existing: $out2"
[ "$(rcli GET muster:idem:example-key-1)" = "$id1" ] || fail "idem key does not hold $id1"
[ "$(rcli ZCARD muster:jobs)" = $((before + 1)) ] || fail "muster:jobs grew by more than one"
ok "the same idempotency key twice gave one job and the same id ($id1)"

# A wait that runs out: exit 3 while the job still runs.
rc=0
out=$(run_ex -t 1 -- sleep 30) || rc=$?
[ "$rc" = 3 ] || fail "example exited $rc on a timeout (expected 3): $out"
grep -Eq "still (PENDING|STARTING|RUNNING|queued) after 1 s" <<<"$out" || fail "no timeout line: $out"
ok "a wait that times out says so (exit 3)"

# Unreachable Redis: a clear error, exit 1.
rc=0
out=$(MUSTER_REDIS_URL=redis://127.0.0.1:1 run_ex -t 5 2>&1) || rc=$?
[ "$rc" = 1 ] || fail "example exited $rc with Redis unreachable: $out"
grep -q "redis 127.0.0.1:1: Connection refused" <<<"$out" || fail "unclear error: $out"
ok "unreachable Redis gives: $out"
