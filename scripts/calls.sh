#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/calls.sh: no ring of calls between files of a module, nor between modules (issue #41).
#
# Two files that call each other are one object cut in two, or share a piece that belongs below
# both (docs/style.md §1.1).  The include rule (scripts/layers.sh) cannot see such a ring when
# both files share one header, nor outside scheduler/, so this check reads what the compiler
# emitted: from `nm` of the build's object files, an edge "A -> B" when A's object needs (U) a
# global function (T) or table (D, R, B) that B's object defines, A and B source files of the
# same folder (one of $folders: a library or program and its parts); and an edge between two
# folders when one uses what the other defines (docs/design.md: the module graph points one
# way).  Any cycle, of any length, fails the check, named as a ring with the symbol each arrow
# uses.  A name two sources define (main; bench/ has one program per file) makes no edge.
# About a second.
#
# It needs a build: the object files listed in $MUSTER_BUILD_DIR/compile_commands.json (default
# build; scripts/test.sh runs lint after its build).  Without one it says so and fails.
#
#   scripts/calls.sh          check; prints each ring; exit 1 if any (or no build)
#   scripts/calls.sh --graph  also print every edge: "A -> B  (symbol)", files and folders
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

folders="common config access protocol queue history lib core cfg_sched scheduler worker cli sim"
folders+=" bench"

# Rings another branch is removing (issue #41): the files of the ring, in any order, then the
# branch.  The check passes over them and names them; once that branch is merged, delete its line
# (the check fails on a line that matches no ring, so none outlives its ring).
allowed=(
)

graph=0
case "${1:-}" in
'') ;;
--graph) graph=1 ;;
-h | --help)
    sed -n '3,22s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
*)
    echo "usage: scripts/calls.sh [--graph]" >&2
    exit 2
    ;;
esac

if ! command -v nm >/dev/null 2>&1; then
    echo "calls: nm not found (binutils; hint: scripts/deps.sh installs build-essential)"
    exit 1
fi
build=${MUSTER_BUILD_DIR:-build}
db=$build/compile_commands.json
if [ ! -f "$db" ]; then
    echo "calls: no build at $build/ ($db missing): this check reads the object files;" \
        "build first (README \"Building by hand\", or scripts/test.sh --quick)," \
        "or set MUSTER_BUILD_DIR"
    exit 1
fi

# "object<TAB>source" for each compile of a file in $folders, from compile_commands.json as CMake
# writes it (one key per line); the source relative to the repository.
mapfile -t objs < <(awk -v root="$PWD/" -v folders=" $folders " '
    /"directory":/ { dir = $0; sub(/^[^:]*: *"/, "", dir); sub(/",? *$/, "", dir) }
    /"command":/ { out = $0; sub(/.* -o /, "", out); sub(/ .*/, "", out) }
    /"file":/ {
        src = $0; sub(/^[^:]*: *"/, "", src); sub(/",? *$/, "", src)
        if (index(src, root) == 1) src = substr(src, length(root) + 1)
        top = src; sub(/\/.*/, "", top)
        if (out !~ /^\//) out = dir "/" out
        if (index(folders, " " top " ") && src ~ /\//) print out "\t" src
    }' "$db")
missing=0
for line in "${objs[@]}"; do
    o=${line%%$'\t'*}
    if [ ! -f "$o" ]; then
        missing=$((missing + 1))
    elif [ "${line#*$'\t'}" -nt "$o" ]; then
        echo "calls: note: $o is older than ${line#*$'\t'}: rebuild for a true graph"
    fi
done
if [ "${#objs[@]}" -eq 0 ] || [ "$missing" -gt 0 ]; then
    echo "calls: $missing of ${#objs[@]} object files missing in $build/: build first" \
        "(cmake --build $build), or set MUSTER_BUILD_DIR"
    exit 1
fi

# nm prints "object:" before each object's symbols; awk maps it back to its source.  An object
# compiled twice (worker/'s shim files, in wrk and shim_objs) is one source, one node.
printf '%s\n' "${objs[@]}" | cut -f1 | xargs nm -A 2>/dev/null | awk -F'\t' -v graph="$graph" \
    -v allowed="$(printf '%s\n' "${allowed[@]}")" '
    NR == FNR { src[$1] = $2; next }
    {
        # "object:address T name" or "object:   U name"
        o = $0; sub(/:.*/, "", o)
        if (!(o in src)) next
        n = split(substr($0, length(o) + 2), f, " ")
        s = src[o]
        top = s; sub(/\/.*/, "", top)
        if (n == 3 && f[2] ~ /^[TDRB]$/) {
            # A name two sources define (main, or one per program in bench/) links no two files.
            if ((top, f[3]) in def && def[top, f[3]] != s) twice[top, f[3]] = 1
            def[top, f[3]] = s
            if (f[3] in mod && mod[f[3]] != top) mtwice[f[3]] = 1
            mod[f[3]] = top
        }
        else if (n == 2 && f[1] == "U") use[s] = use[s] " " f[2]
    }
    function node_top(s,    t) { t = s; sub(/\/.*/, "", t); return t }
    END {
        for (s in use) {
            t = node_top(s)
            m = split(use[s], u, " ")
            for (i = 1; i <= m; i++) {
                # The folders themselves: "t -> d" when t uses what d defines (no file edge).
                d = (u[i] in mod) && !(u[i] in mtwice) ? mod[u[i]] : t
                if (d != t && !((t, d) in via)) {
                    via[t, d] = u[i]
                    out[t] = out[t] " " d
                    nodes[t]; nodes[d]
                }
                if (!((t, u[i]) in def) || ((t, u[i]) in twice)) continue
                d = def[t, u[i]]
                if (d == s || ((s, d) in via)) continue
                via[s, d] = u[i]
                out[s] = out[s] " " d
                nodes[s]; nodes[d]
            }
        }
        if (graph)
            for (k in via) {
                split(k, p, SUBSEP)
                printf "%s -> %s  (%s)\n", p[1], p[2], via[k] | "sort"
            }
        close("sort")
        # Tarjan: the strongly connected components; each of two or more files (or folders) holds
        # a ring.
        for (v in nodes) if (!(v in index_)) strong(v)
        na = split(allowed, al, "\n")
        for (i = 1; i <= na; i++) {
            key[i] = al[i]; sub(/ *\|.*/, "", key[i]); key[i] = sorted(key[i])
            why[i] = al[i]; sub(/.*\| */, "", why[i])
        }
        bad = 0
        for (c = 1; c <= ncomp; c++) {
            ok = 0
            for (i = 1; i <= na; i++) if (key[i] == sorted(comp[c])) { ok = i; seen[i] = 1 }
            what = ok ? "allowed ring [" why[ok] "]" : "ring"
            printf "calls: %s: %s\n", what, ring(comp[c]) | "sort"
            if (!ok) bad = 1
        }
        close("sort")
        for (i = 1; i <= na; i++)
            if (!(i in seen)) {
                printf "calls: scripts/calls.sh allows a ring that is gone (%s): " \
                    "delete its line\n", key[i]
                bad = 1
            }
        nedge = 0
        for (k in via) nedge++
        if (!bad)
            printf "calls: ok (%d files and folders, %d edges, %d allowed rings)\n", \
                length(nodes), nedge, ncomp
        exit bad
    }
    function strong(v,    w, i, m, e, c) {
        index_[v] = low[v] = ++counter
        stack[++sp] = v; onstack[v] = 1
        m = split(out[v], e, " ")
        for (i = 1; i <= m; i++) {
            w = e[i]
            if (!(w in index_)) { strong(w); if (low[w] < low[v]) low[v] = low[w] }
            else if ((w in onstack) && index_[w] < low[v]) low[v] = index_[w]
        }
        if (low[v] != index_[v]) return
        c = ""
        do { w = stack[sp--]; delete onstack[w]; c = c " " w } while (w != v)
        if (split(c, e, " ") > 1) comp[++ncomp] = c
    }
    function sorted(list,    a, n, i, j, t, r) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++)
            for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        r = ""
        for (i = 1; i <= n; i++) r = r (i > 1 ? " " : "") a[i]
        return r
    }
    # One cycle through the component'"'"'s first file (by name), found breadth-first within it.
    function ring(list,    a, n, i, in_c, start, q, qh, qt, prev, v, e, m, j, w, path) {
        n = split(sorted(list), a, " ")
        for (i = 1; i <= n; i++) in_c[a[i]] = 1
        start = a[1]
        qh = 1; qt = 0; q[++qt] = start
        while (qh <= qt) {
            v = q[qh++]
            m = split(out[v], e, " ")
            for (j = 1; j <= m; j++) {
                w = e[j]
                if (!(w in in_c)) continue
                if (w == start) { # the ring: start -> ... -> v -> start
                    path = " -> " start " (" via[v, start] ")"
                    for (; v != start; v = prev[v]) path = " -> " v " (" via[prev[v], v] ")" path
                    return start path
                }
                if (!(w in prev)) { prev[w] = v; q[++qt] = w }
            }
        }
        return sorted(list)
    }' <(printf '%s\n' "${objs[@]}") -
