#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/test.sh: build muster and run every test; what CI runs (.ci/run).
#
#   scripts/test.sh            deps, then: build/ + all tests (unit, integration, fuzz replay),
#                              the installed-library checks (cmake --install into a temp prefix,
#                              examples/ built against it, t6000/t6001 run with it), lint
#                              (scripts/lint.sh --tidy: the cheap checks, then clang-tidy and
#                              cppcheck over build/'s compile_commands.json, about 2 minutes on
#                              2 cores), fuzz (build-fuzz/: clang-14 libFuzzer with
#                              ASan+UBSan, each tests/fuzz target for MUSTER_FUZZ_SECONDS from a
#                              temp copy of its seed corpus), valgrind (each unit test of build/
#                              under valgrind; the daemons' steady state is integration/t0500),
#                              then build-asan/ (ASan+UBSan) + all tests again, integration
#                              included (a sanitizer report in any daemon's log fails its test)
#   scripts/test.sh --quick    deps, build/ + all tests and the installed-library checks only
#                              (no lint, fuzz, valgrind or ASan)
#   scripts/test.sh --no-tidy  the default run with lint's cheap checks only (no clang-tidy or
#                              cppcheck): a quicker local run; CI always runs them
#   scripts/test.sh --asan     deps, build-asan/ + all tests, integration included (no lint)
#   scripts/test.sh --asan --quick   build-asan/ + unit and fuzz only
#
# The integration tests labelled "chaos" (the soak with random kill -9s, t0490, and the worker
# self-fencing test, t4001) run in every pass; MUSTER_SOAK_S=600 makes the soak longer.
#
# Every pass runs even when an earlier one failed, so one run shows every problem.  The last
# line is "N passed, M failed": N sums the ctest tests, installed-library steps, fuzz targets and
# valgrind'ed unit tests that passed over all passes, M counts those that failed plus each failed
# build or lint step.  Exit status 0 only when M is 0.  A fuzz failure names the reproducer file
# libFuzzer wrote; replay it with build-fuzz/bin/fuzz_<name> FILE, and add it to
# tests/fuzz/corpus/<name>/ with the fix.
#
# Environment: MUSTER_BUILD_DIR (default build), MUSTER_ASAN_BUILD_DIR (default build-asan),
# MUSTER_FUZZ_BUILD_DIR (default build-fuzz), MUSTER_FUZZ_SECONDS (per target, default 10),
# MUSTER_JOBS (build parallelism, default: all cores), MUSTER_SKIP_DEPS=1 (do not run deps.sh).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 1

asan=0
quick=0
tidy=1
for arg in "$@"; do
    case "$arg" in
    --asan) asan=1 ;;
    --quick) quick=1 ;;
    --no-tidy) tidy=0 ;;
    -h | --help)
        sed -n '3,/^[^#]/s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *)
        echo "usage: scripts/test.sh [--asan] [--quick] [--no-tidy]" >&2
        exit 2
        ;;
    esac
done

build_dir=${MUSTER_BUILD_DIR:-build}
asan_dir=${MUSTER_ASAN_BUILD_DIR:-build-asan}
fuzz_dir=${MUSTER_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${MUSTER_JOBS:-$(nproc 2>/dev/null || echo 2)}

say() { echo "==> $*" >&2; }
# fail_step MSG: a build or setup step that failed: one line in the summary, one failure.
fail_step() {
    summary+=("$1")
    total_failed=$((total_failed + 1))
}

if [ "${MUSTER_SKIP_DEPS:-0}" != 1 ]; then
    if ! bash scripts/deps.sh; then
        echo "test.sh: scripts/deps.sh failed; install the packages it names and retry" >&2
        exit 1
    fi
fi

total_passed=0
total_failed=0
summary=()
start_all=$SECONDS

# run_pass NAME DIR LABEL_REGEX CMAKE_ARGS...: configure, build, ctest; records a summary line.
run_pass() {
    local name=$1 dir=$2 labels=$3
    shift 3
    local t0=$SECONDS log="$dir/ctest.log" line failed_list
    say "$name: configure $dir ($*)"
    if ! cmake -S . -B "$dir" -DMUSTER_WERROR=ON "$@"; then
        fail_step "$name: configure FAILED"
        return
    fi
    say "$name: build $dir (-j$jobs)"
    if ! cmake --build "$dir" -j"$jobs"; then
        fail_step "$name: build FAILED"
        return
    fi
    # Three times as many tests as cores: most integration tests wait on daemons, not the CPU
    # (tests/CMakeLists.txt counts the ones that do not as two).  On 2 cores -j6 kept them 91 %
    # (build/) and 95 % (ASan) busy, against 76 % and 86 % at -j4, and took 194 and 320 s
    # against 270 and 365 s: the waits poll, so a shorter run also costs less CPU.
    local ctest_args=(--test-dir "$dir" --output-on-failure -j$((jobs * 3)))
    [ -z "$labels" ] || ctest_args+=(-L "$labels")
    say "$name: ctest ${ctest_args[*]}"
    ctest "${ctest_args[@]}" 2>&1 | tee "$log"
    line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
    if [ -n "$line" ]; then
        local nfail ntotal
        nfail=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
        ntotal=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
        total_passed=$((total_passed + ntotal - nfail))
        total_failed=$((total_failed + nfail))
        summary+=("$name: $line ($((SECONDS - t0)) s)")
        failed_list=$(sed -n '/^The following tests FAILED:/,/^Errors while running CTest/p' "$log" |
            grep -E '^[[:space:]]+[0-9]+ - ' || true)
        [ -z "$failed_list" ] || summary+=("$failed_list")
    elif grep -q 'No tests were found' "$log"; then
        summary+=("$name: no tests found${labels:+ with label \"$labels\"} ($((SECONDS - t0)) s)")
    else
        fail_step "$name: ctest FAILED to run (see $log)"
    fi
}

# run_lint: scripts/lint.sh, with --tidy (clang-tidy and cppcheck over $build_dir) unless
# --no-tidy; one failure in the summary when any of its checks fails.
run_lint() {
    local t0=$SECONDS out args=()
    [ "$tidy" -eq 0 ] || args+=(--tidy)
    say "lint: scripts/lint.sh ${args[*]}"
    out=$(MUSTER_BUILD_DIR=$build_dir MUSTER_JOBS=$jobs bash scripts/lint.sh "${args[@]}" 2>&1)
    local rc=$?
    echo "$out"
    local line
    line=$(grep -E '^lint: [0-9]+ passed' <<<"$out" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
        summary+=("${line:-lint: ok} ($((SECONDS - t0)) s)")
    else
        fail_step "${line:-lint: FAILED} ($((SECONDS - t0)) s)"
    fi
}

# run_installed DIR: installs DIR with `cmake --install` into a temp prefix, builds examples/
# against that installed copy (pkg-config through examples/Makefile, and find_package(muster)
# through examples/CMakeLists.txt), then runs the libmuster and Python integration tests with
# the installed example, libmuster.so, muster.py and daemons.  Each step counts as one test.
run_installed() {
    local dir=$1 t0=$SECONDS tmp prefix n_ok=0 n_fail=0
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/muster-installed.XXXXXX") || {
        fail_step "installed: mktemp FAILED"
        return
    }
    prefix=$tmp/prefix
    installed_step() { # installed_step NAME CMD...: output in $tmp/NAME.log
        local name=$1
        shift
        say "installed: $name"
        if "$@" >"$tmp/$name.log" 2>&1; then
            n_ok=$((n_ok + 1))
        else
            n_fail=$((n_fail + 1))
            tail -n 40 "$tmp/$name.log" >&2
            summary+=("installed: $name FAILED (log: $tmp/$name.log)")
        fi
    }
    installed_step install cmake --install "$dir" --prefix "$prefix"
    mkdir -p "$tmp/example"
    installed_step example-pkg-config env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
        make -C "$tmp/example" -f "$repo/examples/Makefile" VPATH="$repo/examples"
    installed_step example-cmake-package sh -c 'cmake -S "$1/examples" -B "$2" \
        -DCMAKE_PREFIX_PATH="$3" && cmake --build "$2"' sh "$repo" "$tmp/example-cmake" "$prefix"
    installed_step t6000-libmuster-example env MUSTER_BIN="$prefix/bin" \
        MUSTER_EXAMPLE_BIN="$tmp/example/submit_and_wait" \
        bash tests/integration/t6000-libmuster-example.sh
    installed_step t6001-python env MUSTER_BIN="$prefix/bin" \
        MUSTER_LIB="$prefix/lib/libmuster.so.0" MUSTER_PYTHONPATH="$prefix/share/muster/python" \
        bash tests/integration/t6001-python.sh
    total_passed=$((total_passed + n_ok))
    total_failed=$((total_failed + n_fail))
    summary+=("installed: $n_ok passed, $n_fail failed: example and Python against \
cmake --install ($((SECONDS - t0)) s)")
    [ "$n_fail" -ne 0 ] || rm -rf "$tmp"
}

# wait_slot: waits until fewer than $jobs background jobs of this shell are running.
wait_slot() {
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n 2>/dev/null || true
    done
}

# run_fuzz: builds the fuzz targets only, with clang-14, libFuzzer and ASan+UBSan (every library
# they call carries coverage instrumentation, see tests/CMakeLists.txt), and runs each for
# MUSTER_FUZZ_SECONDS from a temp copy of its seed corpus (so CI never grows the repo), with its
# dictionary tests/fuzz/<name>.dict when there is one, $jobs at a time.  Each target counts as one
# test.  Warnings are errors here too, clang's as well as gcc's.
run_fuzz() {
    local t0=$SECONDS secs=${MUSTER_FUZZ_SECONDS:-10} cc=clang-14 tmp src name corpus bin rc
    local n_ok=0 n_fail=0 runs=0 r artifacts
    local -a names=()
    if ! command -v "$cc" >/dev/null 2>&1; then
        fail_step "fuzz: $cc not found (hint: scripts/deps.sh installs clang-14 and libclang-rt-14-dev)"
        return
    fi
    say "fuzz: configure $fuzz_dir ($cc, MUSTER_FUZZ=ON, address,undefined)"
    if ! cmake -S . -B "$fuzz_dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DMUSTER_FUZZ=ON -DMUSTER_SANITIZE=address,undefined -DMUSTER_WERROR=ON; then
        fail_step "fuzz: configure FAILED"
        return
    fi
    say "fuzz: build $fuzz_dir --target fuzz (-j$jobs)"
    if ! cmake --build "$fuzz_dir" -j"$jobs" --target fuzz; then
        fail_step "fuzz: build FAILED"
        return
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/muster-fuzz.XXXXXX") || {
        fail_step "fuzz: mktemp FAILED"
        return
    }
    mkdir -p "$tmp/artifacts"
    for src in tests/fuzz/fuzz_*.c; do
        name=$(basename "$src" .c)
        corpus=${name#fuzz_}
        bin=$fuzz_dir/bin/$name
        names+=("$name")
        mkdir -p "$tmp/corpus/$corpus"
        cp -R tests/fuzz/corpus/"$corpus"/. "$tmp/corpus/$corpus/" 2>/dev/null || true
        local args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
            -artifact_prefix="$tmp/artifacts/$name-")
        [ ! -f "tests/fuzz/$corpus.dict" ] || args+=(-dict="tests/fuzz/$corpus.dict")
        wait_slot
        say "fuzz: $name for ${secs}s"
        (
            rc=0
            timeout -k 10 $((secs + 120)) "$bin" "${args[@]}" "$tmp/corpus/$corpus" \
                >"$tmp/$name.log" 2>&1 || rc=$?
            echo "$rc" >"$tmp/$name.rc"
        ) &
    done
    wait
    for name in "${names[@]}"; do
        rc=$(cat "$tmp/$name.rc" 2>/dev/null || echo 1)
        r=$(sed -n 's/^stat::number_of_executed_units: *//p' "$tmp/$name.log" | tail -n 1)
        runs=$((runs + ${r:-0}))
        if [ "$rc" -eq 0 ]; then
            n_ok=$((n_ok + 1))
            continue
        fi
        n_fail=$((n_fail + 1))
        tail -n 60 "$tmp/$name.log" >&2
        artifacts=$(find "$tmp/artifacts" -name "$name-*" -type f 2>/dev/null | sort)
        summary+=("fuzz: $name FAILED (status $rc, log $tmp/$name.log)")
        if [ -n "$artifacts" ]; then
            while IFS= read -r r; do
                summary+=("    reproducer: $r (replay: $fuzz_dir/bin/$name $r)")
            done <<<"$artifacts"
        fi
    done
    total_passed=$((total_passed + n_ok))
    total_failed=$((total_failed + n_fail))
    summary+=("fuzz: $n_ok passed, $n_fail failed: ${#names[@]} libFuzzer targets, ${secs} s each, \
$runs inputs in all ($((SECONDS - t0)) s)")
    [ "$n_fail" -ne 0 ] || rm -rf "$tmp"
}

# run_valgrind DIR: each unit test built in DIR under valgrind (memcheck; a memory error or a
# definitely lost byte fails it), $jobs at a time.  The daemons' steady state under valgrind is
# the integration test t0500-basics-valgrind, which the build pass runs.
run_valgrind() {
    local dir=$1 t0=$SECONDS tmp src name rc n_ok=0 n_fail=0
    local -a names=()
    if ! command -v valgrind >/dev/null 2>&1; then
        fail_step "valgrind: valgrind not found (hint: scripts/deps.sh)"
        return
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/muster-valgrind.XXXXXX") || {
        fail_step "valgrind: mktemp FAILED"
        return
    }
    for src in tests/unit/test_*.c; do
        name=$(basename "$src" .c)
        names+=("$name")
        wait_slot
        say "valgrind: $name"
        (
            rc=0
            MUSTER_TEST_DATA="$repo/tests/data" valgrind --leak-check=full \
                --errors-for-leak-kinds=definite --error-exitcode=99 --num-callers=30 \
                "$dir/bin/$name" >"$tmp/$name.log" 2>&1 || rc=$?
            echo "$rc" >"$tmp/$name.rc"
        ) &
    done
    wait
    for name in "${names[@]}"; do
        rc=$(cat "$tmp/$name.rc" 2>/dev/null || echo 1)
        if [ "$rc" -eq 0 ]; then
            n_ok=$((n_ok + 1))
        else
            n_fail=$((n_fail + 1))
            grep -E -A 30 'definitely lost in|Invalid|uninitialised|Mismatched|FAILED' \
                "$tmp/$name.log" | head -n 120 >&2
            summary+=("valgrind: $name FAILED (status $rc; 99 = valgrind error; log $tmp/$name.log)")
        fi
    done
    total_passed=$((total_passed + n_ok))
    total_failed=$((total_failed + n_fail))
    summary+=("valgrind: $n_ok passed, $n_fail failed: unit tests of $dir under memcheck \
($((SECONDS - t0)) s)")
    [ "$n_fail" -ne 0 ] || rm -rf "$tmp"
}

asan_env() {
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
}

if [ "$asan" -eq 1 ]; then
    asan_env
    if [ "$quick" -eq 1 ]; then
        run_pass asan "$asan_dir" 'unit|fuzz' -DMUSTER_SANITIZE=address,undefined
    else
        run_pass asan "$asan_dir" '' -DMUSTER_SANITIZE=address,undefined
    fi
else
    run_pass build "$build_dir" ''
    run_installed "$build_dir"
    if [ "$quick" -eq 0 ]; then
        run_lint
        run_fuzz
        run_valgrind "$build_dir"
        asan_env # the last pass, so the sanitizer options reach nothing else
        run_pass asan "$asan_dir" '' -DMUSTER_SANITIZE=address,undefined
    fi
fi

echo
echo "==================== muster test summary ($((SECONDS - start_all)) s) ===================="
printf '%s\n' "${summary[@]}"
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
