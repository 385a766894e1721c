#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# check-options.sh PROGRAM MANPAGE README: the man page and README against PROGRAM --help, which
# is read off the program's one option table (common/mu_opt.h; issue #41).  Fails when
#   - --help names a flag (anywhere, its usage line included) that is not one of its option rows;
#   - the man page's OPTIONS section lacks one of those rows, or the page names a flag anywhere
#     that the program lacks (a program with commands, musterctl, has their options too:
#     "PROGRAM help COMMAND" for each command its --help lists under "Commands:");
#   - the man page's ENVIRONMENT section lacks a MUSTER_* variable that --help's rows name;
#   - README names, in a `PROGRAM ...` code span, a flag the program lacks.
set -euo pipefail

prog=$1
man=$2
readme=$3
name=$(basename "$prog")
# Other programs' flags ("nvidia-smi --query-gpu", "musterctl logs --state-root") are not ours: a
# line is read up to the first other program it names.
other_progs=$(printf '%s\n' nvidia-smi muster-shim musterctl muster-worker musterd aws |
    grep -vx -- "$(basename "$1")" | sed 's/-/\\\\?-/g' | paste -sd'|')
others() { sed -E "s/(^|[^a-z-])($other_progs)([^a-z-]|$).*/\\1/"; }
help=$("$prog" --help)
status=0
fail() { echo "FAIL: $name: $*"; status=1; }

# The option rows: "  -c, --config FILE", "      --check-config", "  --node NAME".
rows=$(printf '%s\n' "$help" | sed -nE 's/^  (-[A-Za-z0-9], |    )?--([a-z][a-z0-9-]*).*/\2/p' | sort -u)
[ -n "$rows" ] || { echo "FAIL: $name --help shows no option rows"; exit 1; }
flags() { others | sed 's/\\-/-/g' | grep -oE -- '--[a-z][a-z0-9-]*' | sed 's/^--//' | sort -u; }
# Lines of "$1" that "$2" lacks (both sorted, one item a line).
missing() { comm -23 <(printf '%s\n' "$1") <(printf '%s\n' "$2") | grep -v '^$' || true; }

# A program with commands (musterctl) lists them under "Commands:"; each command's own options
# ("PROGRAM help COMMAND") are flags it has too, though not global ones.
known=$( (printf '%s\n' "$rows"
    for cmd in $(printf '%s\n' "$help" | awk '/^Commands:$/ { on = 1; next } on && !/^  [a-z]/ { exit } on { print $1 }'); do
        "$prog" help "$cmd"
    done | sed -nE 's/^  (-[A-Za-z0-9], |    )?--([a-z][a-z0-9-]*).*/\2/p') | sort -u)

for f in $(missing "$(printf '%s\n' "$help" | flags)" "$rows"); do
    fail "--help names --$f, which is not one of its option rows"
done

# The man page: groff writes "\-\-name" (and "\-" inside a name).
man_opts=$(sed -n '/^\.SH OPTIONS/,/^\.SH /p' "$man" | awk 'prev ~ /^\.TP/ { print } { prev = $0 }' | flags)
for f in $(missing "$rows" "$man_opts"); do fail "$man's OPTIONS lacks --$f"; done
for f in $(missing "$(flags <"$man")" "$known"); do fail "$man names --$f, which $name lacks"; done
man_env=$(sed -n '/^\.SH ENVIRONMENT/,/^\.SH /p' "$man" | grep -oE 'MUSTER_[A-Z0-9_]+' | sort -u)
help_env=$(printf '%s\n' "$help" | grep -E '^  ' | grep -oE 'MUSTER_[A-Z0-9_]+' | sort -u)
for e in $(missing "$help_env" "$man_env"); do
    fail "$man's ENVIRONMENT lacks $e, which --help names"
done

# README: the flags of every `NAME ...` code span (spans may cross lines).
readme_flags=$(perl -0777 -ne 'while (/`\Q'"$name"'\E ([^`]*)`/g) { my $s = $1; print "$1\n" while $s =~ /--([a-z][a-z0-9-]*)/g }' "$readme" | sort -u)
for f in $(missing "$readme_flags" "$known"); do fail "README names $name --$f, which $name lacks"; done

[ "$status" = 0 ] && echo "ok: $man and README agree with $name --help ($(printf '%s\n' "$rows" | wc -l) options)"
exit "$status"
