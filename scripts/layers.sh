#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/layers.sh: musterd's layers (scheduler/d_io.h explains them) and the include graph.
#
# Each layer has a header; a file belongs to the layer of the first scheduler/ header it
# includes (its own).  The check: no file or header includes a scheduler/ header of a higher
# layer, and the graph of #include lines between scheduler/ files has no cycle.  Since every
# function is declared in its layer's header (d_state.h declares types only), a call to a higher
# layer does not compile: the include rule is the call rule.  Within a layer, files share its
# header, so the calls themselves are checked by scripts/calls.sh (lint `calls`, from the object
# files): no two files of a folder call each other, nor any longer ring.
#
#   scripts/layers.sh          check; prints a line per violation; exit 1 if any
#   scripts/layers.sh --graph  also print the graph: "file -> header" per include, by layer
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

declare -A layer=(
    [d_io.h]=0
    [d_job.h]=1 [d_node.h]=1 [d_usage.h]=1 [d_access.h]=1 [d_state.h]=1
    [d_gang.h]=2
    [d_handlers.h]=3
    [d_pass.h]=4
    [d_loop.h]=5
)
graph=0
case "${1:-}" in
'') ;;
--graph) graph=1 ;;
-h | --help)
    sed -n '3,15s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
*)
    echo "usage: scripts/layers.sh [--graph]" >&2
    exit 2
    ;;
esac

bad=0
edges=()
for f in scheduler/*.c scheduler/*.h; do
    [ -f "$f" ] || continue
    base=$(basename "$f")
    mapfile -t incs < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"scheduler\/\([^"]*\)".*/\1/p' "$f")
    if [[ $f == *.h ]]; then
        own=${layer[$base]:-}
        if [ -z "$own" ]; then
            echo "$f: a scheduler header without a layer (add it to scripts/layers.sh)"
            bad=1
            continue
        fi
    else
        own=
        [ ${#incs[@]} -gt 0 ] && own=${layer[${incs[0]}]:-}
        if [ -z "$own" ]; then
            echo "$f: includes no layer header first (its own layer's)"
            bad=1
            continue
        fi
    fi
    for h in "${incs[@]}"; do
        l=${layer[$h]:-}
        edges+=("$own $f scheduler/$h")
        if [ -z "$l" ]; then
            echo "$f: includes scheduler/$h, which is no layer's header"
            bad=1
        elif [ "$l" -gt "$own" ]; then
            echo "$f (layer $own): includes scheduler/$h of layer $l, above its own"
            bad=1
        elif [[ $f == *.h ]] && [ "$l" -eq "$own" ] && [ "$base" != d_state.h ]; then
            echo "$f (layer $own): includes scheduler/$h of its own layer (only d_state.h may)"
            bad=1
        fi
    done
done

# Cycles among the headers: a depth-first search over "header includes header".
declare -A next=() state=()
for e in "${edges[@]}"; do
    read -r _ from to <<<"$e"
    [[ $from == *.h ]] && next[$from]+="$to "
done
cycle=
visit() { # visit NODE PATH
    local n=$1 m
    state[$n]=1
    for m in ${next[$n]:-}; do
        if [ "${state[$m]:-0}" = 1 ]; then
            cycle="$2 $n -> $m"
        elif [ "${state[$m]:-0}" = 0 ]; then
            visit "$m" "$2 $n ->"
        fi
        [ -z "$cycle" ] || return
    done
    state[$n]=2
}
for n in "${!next[@]}"; do
    [ "${state[$n]:-0}" = 0 ] && visit "$n" ""
    [ -z "$cycle" ] || break
done
if [ -n "$cycle" ]; then
    echo "include cycle:$cycle"
    bad=1
fi

if [ "$graph" = 1 ]; then
    printf '%s\n' "${edges[@]}" | sort -n -k1,1 -k2,2 | awk '{ printf "layer %s  %-28s -> %s\n", $1, $2, $3 }'
fi
if [ "$bad" = 0 ]; then
    echo "layers: ok (${#edges[@]} includes between scheduler/ files, no cycle, none upward)"
fi
exit "$bad"
