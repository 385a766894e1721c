#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# check-config-keys.sh CFG_KEYS README: README's "Configuration" table of top-level keys against
# the parser's own table (cfg_keys in config/cfg.c, printed by the test tool tests/tools/cfg_keys.c).
# Fails when README names a key the parser lacks, omits one it has, or gives another default,
# integer range or reload rule.  Issue #41: the table is the one home, README a checked copy.
set -euo pipefail

tool=$1
readme=$2
want=$(mktemp)
have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT

"$tool" | sort >"$want"
# The rows of the first table after "### Configuration": | `key` | default | range | reload | ...
# Backticks go; RANGE is compared for the integer keys only ("-" in the tool's output).
awk -F'|' '
    /^### / { in_cfg = ($0 ~ /^### Configuration$/); next }
    in_cfg && /^\| `/ {
        for (i = 2; i <= 5; i++) { gsub(/`/, "", $i); gsub(/^ +| +$/, "", $i) }
        print $2 "\t" $3 "\t" $4 "\t" $5
    }' "$readme" | sort >"$have"
[ -s "$have" ] || { echo "FAIL: no key table under '### Configuration' in $readme"; exit 1; }

# One awk for the comparison: the tool's rows first (want), then README's (have).
awk -F'\t' '
    NR == FNR { def[$1] = $2; range[$1] = $3; reload[$1] = $4; order[++n] = $1; next }
    {
        seen[$1] = 1
        if (!($1 in def)) { print "FAIL: README'"'"'s config table names " $1 ", which the parser does not know"; bad = 1; next }
        if ($2 != def[$1]) { print "FAIL: " $1 ": README'"'"'s default is " $2 ", the parser'"'"'s " def[$1]; bad = 1 }
        if (range[$1] != "-" && $3 != range[$1]) { print "FAIL: " $1 ": README'"'"'s range is " $3 ", the parser'"'"'s " range[$1]; bad = 1 }
        split($4, w, " ")
        if (w[1] != reload[$1]) { print "FAIL: " $1 ": README'"'"'s reload is " $4 ", the parser'"'"'s " reload[$1]; bad = 1 }
    }
    END {
        for (i = 1; i <= n; i++)
            if (!(order[i] in seen)) { print "FAIL: README'"'"'s config table lacks " order[i] " (default " def[order[i]] ")"; bad = 1 }
        if (!bad) print "ok: README'"'"'s config table matches cfg_keys (" n " keys)"
        exit bad
    }' "$want" "$have"
