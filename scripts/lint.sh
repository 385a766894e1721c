#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/lint.sh: the cheap static checks of docs/style.md §1 and §3, run by scripts/test.sh and CI.
#
#   format    clang-format --dry-run --Werror on every tracked (and new, unignored) *.c / *.h
#   banned    "common/mu_banned.h" is the LAST #include of every .c file
#   private   a module shows the rest of the tree only its PUBLIC headers (docs/style.md §1.1):
#                 common: mu.h mu_json.h mu_opt.h mu_banned.h   config: cfg.h   access: access.h
#                 protocol: proto.h   queue: queue.h vocab.h   lib: muster.h   core: sched.h
#                 cfg_sched: cfg_sched.h
#                 worker: wrk.h cgroup.h   sim: sim.h   history: hist.h
#                 cli, scheduler, bench, tests and any folder not in public_headers: none
#             Any other header (internal.h, scheduler/d_job.h, ...) may be included only by files
#             of its own folder.  One exception: tests/ may also include scheduler/*.h, the
#             daemon's layer headers that its unit tests drive.  An include is read as written,
#             "dir/x.h" or <dir/x.h>, with "../" resolved against the including file.
#   pure      the sched_core sources (core/place.c, core/cluster.c, ...) and access/ (the
#             access rules, issue #46) include no zmq/hiredis/msgpack/curl/time.h header and
#             call no mu_log* / mu_time_*
#   layers    musterd's files include no header of a layer above their own (scripts/layers.sh)
#   calls     no two files of one folder call each other, nor any longer ring, nor do folders
#             (scripts/calls.sh, issue #41): read from `nm` of the object files of
#             $MUSTER_BUILD_DIR, so it needs a build (it fails, saying so, without one;
#             scripts/test.sh lints after its build)
#   headers   each */*.h compiles on its own (cc -std=c11 -D_POSIX_C_SOURCE=200809L -I. -fsyntax-only)
#   state     a job's or a node's state changes through one function each (issue #41): in
#             scheduler/ and sim/, a `state` field is assigned (x->state = , x[i].state = ) and
#             the core's node state set (sched_cluster_node_set_state) only inside the functions
#             of state_allowed below (d_job_moved and d_job_state_load for a job, d_node.c's
#             node_sync for a node, the simulator's own job and node model), each with its reason
#   shell     shellcheck (Debian's, 0.9) on every *.sh and .ci/run: scripts/, tests/ (lib.sh,
#             soak.sh, each tNNNN), bench/, deploy/; $MUSTER_JOBS processes at once.  Repo-wide
#             choices are in .shellcheckrc, each with its reason; anything else is fixed or
#             silenced on its line: "# shellcheck disable=SCxxxx # why".  About 10 s of CPU.
#   architecture
#             docs/architecture.md is complete (issue #41): its folder table ("## Folders", first
#             column) names every top-level folder of the tree and none that is missing; its
#             layer table ("## The daemon in layers": header and file columns) names every
#             scheduler/*.c and *.h and none that is missing, and each .c file sits in the row
#             of the first scheduler/ header it includes (its layer, as scripts/layers.sh reads it)
#
#   tidy      (only with --tidy) clang-tidy (.clang-tidy) on every file of
#             $MUSTER_BUILD_DIR/compile_commands.json and on examples/*.c, one process per file,
#             $MUSTER_JOBS at a time; then cppcheck over the same compile_commands.json.  Needs
#             a configured build (scripts/test.sh makes one); about 2 minutes on 2 cores.
#             A false positive is silenced where it is, with its reason:
#             "// NOLINT(check): why" or "// cppcheck-suppress id ; why".
#
# Files whose first line starts with "/* placeholder" are stand-ins for code still being written;
# the banned/format checks skip them and say so.
#
# usage: scripts/lint.sh [--tidy]
# Environment: MUSTER_BUILD_DIR (the build whose objects `calls` and whose compile_commands.json
# --tidy read, default build), MUSTER_JOBS (clang-tidy processes at once, default: all cores).
# Exit status: 0 all checks pass, 1 some check failed, 2 usage error.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

tidy=0
for arg in "$@"; do
    case "$arg" in
    --tidy) tidy=1 ;;
    -h | --help)
        sed -n '3,/^# Exit status/s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    *)
        echo "usage: scripts/lint.sh [--tidy]" >&2
        exit 2
        ;;
    esac
done

tidy_dir=${MUSTER_BUILD_DIR:-build}
jobs=${MUSTER_JOBS:-$(nproc 2>/dev/null || echo 2)}
code_dirs=(common config access protocol queue history lib core cfg_sched scheduler worker cli sim tests bench)
failed=()
passed=0

# Source files: tracked plus new files git does not ignore; plain find outside a git checkout.
list_files() { # list_files GLOB...
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files --cached --others --exclude-standard -- "$@" | sort -u
    else
        local args=() g
        for g in "$@"; do
            args+=(-o -path "./$g")
        done
        find . \( -path './build*' -o -path './.git' \) -prune -o \( -false "${args[@]}" \) -type f \
            -print | sed 's|^\./||' | sort -u
    fi
}

is_placeholder() {
    head -n 1 "$1" | grep -q '^/\* placeholder'
}

check() { # check NAME: records the result of the function lint_NAME
    local name=$1
    if "lint_$name"; then
        echo "lint: $name: ok"
        passed=$((passed + 1))
    else
        echo "lint: $name: FAILED"
        failed+=("$name")
    fi
}

lint_format() {
    if ! command -v clang-format >/dev/null 2>&1; then
        echo "lint: format: clang-format not found (hint: scripts/deps.sh installs it)"
        return 1
    fi
    local files=() f skipped=0
    while IFS= read -r f; do
        [ -f "$f" ] || continue
        if is_placeholder "$f"; then
            skipped=$((skipped + 1))
            continue
        fi
        files+=("$f")
    done < <(list_files '*.[ch]')
    [ "$skipped" -eq 0 ] || echo "lint: format: skipped $skipped placeholder files"
    [ "${#files[@]}" -eq 0 ] && return 0
    local out bad
    if out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
        return 0
    fi
    bad=$(grep -oE '^[^: ]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort -u)
    if [ -z "$bad" ]; then
        echo "$out"
        return 1
    fi
    echo "$out" | head -n 12
    echo "lint: format: these files differ from clang-format (fix: clang-format -i FILE...):"
    sed 's/^/    /' <<<"$bad"
    return 1
}

lint_banned() {
    local rc=0 f last skipped=0
    while IFS= read -r f; do
        [ -f "$f" ] || continue
        if is_placeholder "$f"; then
            skipped=$((skipped + 1))
            continue
        fi
        last=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$f" | tail -n 1 | tr -d '[:space:]')
        if [ "$last" != '#include"common/mu_banned.h"' ]; then
            echo "$f: the last #include must be \"common/mu_banned.h\" (docs/style.md §1.7)"
            rc=1
        fi
    done < <(list_files "${code_dirs[@]/%//*.c}")
    [ "$skipped" -eq 0 ] || echo "lint: banned: skipped $skipped placeholder files"
    return $rc
}

# What each module shows the rest of the tree (docs/style.md §1.1: one header per module; common/ has
# three: the base, the JSON helpers and the banned-function list).  Every other header is private
# to its folder, and so is every header of a folder not listed here.
declare -A public_headers=(
    [common]="mu.h mu_json.h mu_opt.h mu_banned.h"
    [config]="cfg.h"
    [access]="access.h"
    [protocol]="proto.h"
    [queue]="queue.h vocab.h"
    [lib]="muster.h"
    [core]="sched.h"
    [cfg_sched]="cfg_sched.h"
    [worker]="wrk.h cgroup.h"
    [sim]="sim.h"
    [history]="hist.h"
    [cli]=""
    [scheduler]=""
    [bench]=""
    [tests]=""
)

lint_private() {
    local rc=0 mod h pub="" dirs files=() f
    for mod in "${!public_headers[@]}"; do
        for h in ${public_headers[$mod]}; do
            if [ ! -f "$mod/$h" ]; then
                echo "scripts/lint.sh: public header $mod/$h does not exist (fix the list)"
                rc=1
            fi
            pub+="$mod/$h "
        done
    done
    # The folders that hold headers: an include naming one of them is one of ours.
    dirs=$(list_files '*.h' | grep / | cut -d/ -f1 | sort -u | tr '\n' ' ')
    while IFS= read -r f; do
        [ -f "$f" ] && files+=("$f")
    done < <(list_files '*.[ch]')
    [ "${#files[@]}" -eq 0 ] && return $rc
    { grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^">]*/[^">]*[">]' "${files[@]}" ||
        true; } | awk -v pub="$pub" -v dirs="$dirs" '
        function resolve(path,    n, i, k, part, out) { # a/b/../c -> a/c
            n = split(path, part, "/")
            k = 0
            for (i = 1; i <= n; i++) {
                if (part[i] == "." || part[i] == "")
                    continue
                if (part[i] == "..") {
                    if (k > 0)
                        k--
                    continue
                }
                out[++k] = part[i]
            }
            path = ""
            for (i = 1; i <= k; i++)
                path = path (i > 1 ? "/" : "") out[i]
            return path
        }
        BEGIN {
            n = split(pub, p, " ")
            for (i = 1; i <= n; i++) {
                public[p[i]] = 1
                m = p[i]
                sub(/\/.*/, "", m)
                shows[m] = shows[m] (shows[m] == "" ? "" : ", ") p[i]
            }
            n = split(dirs, d, " ")
            for (i = 1; i <= n; i++)
                ours[d[i]] = 1
        }
        {
            # FILE:LINE:TEXT; repository paths hold no colon.
            file = $0
            sub(/:.*/, "", file)
            rest = substr($0, length(file) + 2)
            line = rest
            sub(/:.*/, "", line)
            if (!match(rest, /[<"][^">]*[">]/))
                next
            inc = substr(rest, RSTART + 1, RLENGTH - 2)
            if (inc ~ /(^|\/)\.\.?\//) {
                dir = file
                if (!sub(/\/[^\/]*$/, "", dir))
                    dir = ""
                inc = resolve(dir "/" inc)
            }
            imod = inc
            sub(/\/.*/, "", imod)
            fmod = file
            if (!sub(/\/.*/, "", fmod))
                fmod = ""
            if (!(imod in ours) || imod == fmod || (inc in public))
                next
            # The daemon has no public header, but its unit tests drive its layers directly.
            if (fmod == "tests" && inc ~ /^scheduler\/[^\/]*\.h$/)
                next
            what = imod in shows ? "public: " shows[imod] : imod "/ has no public header"
            printf "%s:%s: includes \"%s\", which is private to %s/ (%s); rule: only a " \
                "module'"'"'s public headers may be included from outside it (lint private, " \
                "docs/style.md §1.1)\n", file, line, inc, imod, what
            bad = 1
        }
        END { exit bad }' || rc=1
    return $rc
}

# The core's files: everything in core/ (the linker keeps log and clock calls out too: the
# core's tests link it with mu_base alone); and access/, pure by its contract (access.h).
core_sources() {
    list_files 'core/*.c' 'core/*.h' 'access/*.c' 'access/*.h'
}

lint_pure() {
    local rc=0 f hits
    while IFS= read -r f; do
        [ -f "$f" ] || continue
        hits=$(grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](zmq|czmq|hiredis|msgpack|curl|time\.h|sys/time\.h)' "$f")
        if [ -n "$hits" ]; then
            sed 's|$| : core/ and access/ are pure: no I/O or clock headers (docs/style.md §1.1, docs/design.md §1)|' <<<"$hits"
            rc=1
        fi
        hits=$(sed -e 's|//.*||' "$f" | grep -nE '\b(mu_log[a-z_]*|mu_time_[a-z_]*|clock_gettime|gettimeofday)[[:space:]]*\(' |
            sed "s|^|$f:|")
        if [ -n "$hits" ]; then
            sed "s|\$| : core/ and access/ take 'now' as a parameter and report reasons as data|" <<<"$hits"
            rc=1
        fi
    done < <(core_sources)
    return $rc
}

# musterd's layers: no scheduler/ file includes a header of a layer above its own, no cycle.
lint_layers() {
    bash scripts/layers.sh
}

# Where a state may be assigned, as FILE:FUNCTION, each with its reason (lint state).
declare -A state_allowed=(
    [scheduler/d_job.c:d_job_moved]="a job's state after its write landed (d_job_write, a batch)"
    [scheduler/d_job.c:d_job_state_load]="a job record being made: its state as stored"
    [scheduler/d_job.c:d_job_wake_dependents]="a copy into the wake record, not a job"
    [scheduler/d_deps.c:target_of]="a copy into a dependency's target, not a job"
    [scheduler/d_node.c:node_sync]="the core's copy of a node's state, from d_node_state"
    [sim/engine.c:node_state]="the replay's node model: the core's copy and its counters"
    [sim/job.c:sim_job_start]="the replay's job model: started"
    [sim/job.c:sim_job_stop]="the replay's job model: stopping"
    [sim/job.c:sim_job_end]="the replay's job model: done"
    [sim/job.c:sim_job_requeue]="the replay's job model: pending again"
    [sim/engine.c:instant]="the replay's job model: arrived"
    [sim/engine.c:never_fit]="the replay's job model: can never run"
)

lint_state() {
    local files=() f allowed=""
    for f in "${!state_allowed[@]}"; do
        allowed+="$f "
    done
    while IFS= read -r f; do
        [ -f "$f" ] && files+=("$f")
    done < <(list_files 'scheduler/*.c' 'sim/*.c')
    [ "${#files[@]}" -eq 0 ] && return 0
    # The function a line is in: the last line at column 0 that names one before its "(".
    awk -v allowed="$allowed" '
        BEGIN {
            n = split(allowed, a, " ")
            for (i = 1; i <= n; i++)
                ok[a[i]] = 1
        }
        FNR == 1 { fn = "" }
        /^[A-Za-z_][^;=]*\(/ {
            head = $0
            sub(/\(.*/, "", head)
            if (match(head, /[A-Za-z_][A-Za-z0-9_]*$/))
                fn = substr(head, RSTART, RLENGTH)
        }
        {
            line = $0
            sub(/\/\/.*/, "", line)
            gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
            gsub(/\/\*.*\*\//, "", line)
            if (line !~ /(->|[A-Za-z0-9_\]\)]\.)state[[:space:]]*=[^=]/ &&
                line !~ /sched_cluster_node_set_state[[:space:]]*\(/)
                next
            if ((FILENAME ":" fn) in ok)
                next
            printf "%s:%d: a state set in %s(); rule: a job'"'"'s state changes only through " \
                "d_job_write (d_job_moved), a node'"'"'s through d_node_state_set (lint state, " \
                "docs/architecture.md)\n", FILENAME, FNR, fn
            bad = 1
        }
        END { exit bad }' "${files[@]}"
}

# No ring of calls between the files of a folder: one object cut in two (scripts/calls.sh).
lint_calls() {
    MUSTER_BUILD_DIR=$tidy_dir bash scripts/calls.sh
}

lint_headers() {
    local rc=0 h out cc=${CC:-cc}
    while IFS= read -r h; do
        [ -f "$h" ] || continue
        if ! out=$(echo "#include \"$h\"" |
            "$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -I. -fsyntax-only -x c - 2>&1); then
            echo "$out"
            echo "$h: does not compile on its own (docs/style.md §1.7)"
            rc=1
        fi
    done < <(list_files '*/*.h' | grep -E '^[^/]+/[^/]+\.h$')
    return $rc
}

# Every shell script of the tree: *.sh wherever it is, and the CI entry point.
lint_shell() {
    if ! command -v shellcheck >/dev/null 2>&1; then
        echo "lint: shell: shellcheck not found (hint: scripts/deps.sh installs it)"
        return 1
    fi
    list_files '*.sh' .ci/run | xargs -r -P "$jobs" -n 12 shellcheck -f gcc
}

# clang-tidy runs one process per file, $jobs at a time: clang-tidy 14's valist checker carries
# state from one file to the next inside one process, and reported every va_start'ed va_list of
# the second and later files as uninitialised (clang-analyzer-valist.Uninitialized); one file per
# process also lets the two cores share the work.  The files are those the build compiles
# (compile_commands.json, with their real flags), plus examples/*.c with the flags of
# examples/Makefile, since the example is built only against an installed libmuster.
lint_tidy() {
    local rc=0 db=$tidy_dir/compile_commands.json tmp f
    if [ ! -f "$db" ]; then
        echo "lint: tidy: $db missing (hint: run scripts/test.sh --quick first)"
        return 1
    fi
    for f in clang-tidy cppcheck jq; do
        if ! command -v "$f" >/dev/null 2>&1; then
            echo "lint: tidy: $f not found (hint: scripts/deps.sh installs it)"
            return 1
        fi
    done
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/muster-tidy.XXXXXX") || return 1
    local files=() examples=()
    while IFS= read -r f; do
        f=${f#"$PWD"/}
        [ -f "$f" ] && ! is_placeholder "$f" && files+=("$f")
    done < <(jq -r '.[].file' "$db" | sort -u)
    while IFS= read -r f; do
        [ -f "$f" ] && examples+=("$f")
    done < <(list_files 'examples/*.c')
    # tidy_one DB_DIR OUT FILE [-- FLAGS...]: the log goes to OUT/<file>.log, kept on a finding.
    local tidy_one='log=$2/$(printf %s "$3" | tr / _).log
        if clang-tidy -p "$1" --quiet "${@:3}" >"$log" 2>&1; then rm -f "$log"; fi'
    printf '%s\0' "${files[@]}" |
        xargs -0 -r -n 1 -P "$jobs" bash -c "$tidy_one" tidy "$tidy_dir" "$tmp"
    for f in "${examples[@]}"; do
        bash -c "$tidy_one" tidy "$tidy_dir" "$tmp" "$f" -- -std=c11 -Ilib
    done
    if compgen -G "$tmp/*.log" >/dev/null; then
        grep -hvE '^[0-9]+ warnings? (generated|treated as errors)\.?$' "$tmp"/*.log
        echo "lint: tidy: clang-tidy findings in $(find "$tmp" -name '*.log' | wc -l) files"
        rc=1
    fi
    echo "lint: tidy: clang-tidy checked $((${#files[@]} + ${#examples[@]})) files"
    rm -rf "$tmp"
    # One process: 5 s here, and -j 2 made it slower.
    cppcheck --project="$db" --enable=warning,performance,portability --inline-suppr \
        --error-exitcode=1 --quiet || rc=1
    return $rc
}

# The `x` names of a markdown table's column COL (1-based) in the section HEADING of FILE.
md_column() { # md_column FILE HEADING COL
    awk -F'|' -v h="$2" -v col="$(($3 + 1))" '
        /^## / { in_sec = ($0 == "## " h); next }
        in_sec && /^\|/ && !/^\|---/ { print NR "\t" $col }' "$1"
}

lint_architecture() {
    local doc=docs/architecture.md rc=0 d f row want
    local -A folder_named=() file_row=() header_row=()
    # Folders: every top-level folder that holds a tracked (or new) file.
    while IFS=$'\t' read -r _ cell; do
        for d in $(grep -oE '`[^`]+/`' <<<"$cell" | tr -d '`'); do
            folder_named[${d%/}]=1
            [ -d "$d" ] || { echo "lint: architecture: $doc names folder $d, which does not exist"; rc=1; }
        done
    done < <(md_column "$doc" Folders 1)
    for d in $(list_files '*' | grep / | cut -d/ -f1 | sort -u); do
        [ -n "${folder_named[$d]:-}" ] ||
            { echo "lint: architecture: $doc's folder table lacks $d/"; rc=1; }
    done
    # The daemon's layers: column 2 the headers, column 3 the files of each row.
    while IFS=$'\t' read -r row cell; do
        for f in $(grep -oE '`[^`]+\.h`' <<<"$cell" | tr -d '`'); do header_row[$f]=$row; done
    done < <(md_column "$doc" "The daemon in layers" 2)
    while IFS=$'\t' read -r row cell; do
        for f in $(grep -oE '`[^`]+\.c`' <<<"$cell" | tr -d '`'); do file_row[$f]=$row; done
    done < <(md_column "$doc" "The daemon in layers" 3)
    for f in "${!header_row[@]}" "${!file_row[@]}"; do
        [ -f "scheduler/$f" ] ||
            { echo "lint: architecture: $doc's layer table names $f, not in scheduler/"; rc=1; }
    done
    for f in $(list_files 'scheduler/*.c' 'scheduler/*.h'); do
        f=${f#scheduler/}
        if [[ $f == *.h ]]; then
            [ -n "${header_row[$f]:-}" ] ||
                { echo "lint: architecture: $doc's layer table lacks the header $f"; rc=1; }
            continue
        fi
        row=${file_row[$f]:-}
        if [ -z "$row" ]; then
            echo "lint: architecture: $doc's layer table lacks scheduler/$f"
            rc=1
            continue
        fi
        want=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"scheduler\/\([^"]*\)".*/\1/p' \
            "scheduler/$f" | head -n 1)
        if [ -n "$want" ] && [ "${header_row[$want]:-}" != "$row" ]; then
            echo "lint: architecture: $doc puts scheduler/$f in another row than its layer's header $want"
            rc=1
        fi
    done
    return $rc
}

check format
check banned
check private
check pure
check layers
check state
check calls
check headers
check shell
check architecture
[ "$tidy" -eq 0 ] || check tidy

echo "lint: $passed passed, ${#failed[@]} failed${failed:+ (${failed[*]})}"
[ "${#failed[@]}" -eq 0 ]
