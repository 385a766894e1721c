#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# scripts/calls.sh (lint `calls`, issue #41) names a ring of calls of any length between the
# files of one folder, and between folders; passes over a name two programs both define; says
# so when there is no build; and finds no ring in this build.  No daemon, a few seconds.
source "$(dirname "$0")/lib.sh"

src=${MUSTER_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=$(cd "${MUSTER_BIN:-$src/build/bin}/.." && pwd)
fake=$T/build # lib.sh's directory, removed at exit

# Three objects of bench/ in a ring a -> b -> c -> a; b also calls x(), which two programs of the
# folder define (e.c, and d.c, whose main calls a): x() must make no edge.
mkdir -p "$fake/o"
printf 'void b(void);\nvoid a(void) { b(); }\n' >"$fake/a.c"
printf 'void c(void);\nvoid x(void);\nvoid b(void) { c(); x(); }\n' >"$fake/b.c"
printf 'void a(void);\nvoid c(void) { a(); }\n' >"$fake/c.c"
printf 'void x(void) {}\n' >"$fake/e.c"
printf 'void a(void);\nvoid x(void) {}\nint main(void) { a(); return 0; }\n' >"$fake/d.c"
# And two folders that call each other: bench/zz_m.c -> sim/zz_n.c -> bench/zz_m.c.
printf 'void n(void);\nvoid m(void) { n(); }\n' >"$fake/m.c"
printf 'void m(void);\nvoid n(void) { m(); }\n' >"$fake/n.c"
{
    echo '['
    for f in a b c e d m n; do
        dir=bench
        [ "$f" = n ] && dir=sim
        "${CC:-cc}" -c "$fake/$f.c" -o "$fake/o/$f.o" || fail "cannot compile $f.c"
        printf '{\n  "directory": "%s",\n  "command": "cc -o o/%s.o -c %s/%s/zz_%s.c",\n' \
            "$fake" "$f" "$src" "$dir" "$f"
        printf '  "file": "%s/%s/zz_%s.c"\n},\n' "$src" "$dir" "$f"
    done
    echo ']'
} >"$fake/compile_commands.json"

out=$(MUSTER_BUILD_DIR=$fake bash "$src/scripts/calls.sh") && fail "a ring passed: $out"
grep -qxF 'calls: ring: bench/zz_a.c -> bench/zz_b.c (b) -> bench/zz_c.c (c) -> bench/zz_a.c (a)' \
    <<<"$out" || fail "the ring is not named: $out"
graph=$(MUSTER_BUILD_DIR=$fake bash "$src/scripts/calls.sh" --graph) || true # the ring: exit 1
grep -q 'zz_d.c  (x)\|zz_e.c  (x)' <<<"$graph" && fail "x(), defined twice, made an edge: $graph"
grep -qxF 'bench/zz_d.c -> bench/zz_a.c  (a)' <<<"$graph" || fail "no edge d -> a: $graph"
grep -qxF 'calls: ring: bench -> sim (n) -> bench (m)' <<<"$out" || fail "no folder ring: $out"
[ "$(grep -c '^calls: ring' <<<"$out")" = 2 ] || fail "not just the two rings: $out"
ok "a three-file ring and a two-folder ring are named; a name two programs define links nothing"

out=$(MUSTER_BUILD_DIR=$fake/none bash "$src/scripts/calls.sh") && fail "no build passed: $out"
grep -q 'calls: no build at' <<<"$out" || fail "no build, not said: $out"
ok "without a build it fails and says so"

out=$(MUSTER_BUILD_DIR=$build bash "$src/scripts/calls.sh") || fail "this build has a ring: $out"
ok "${out##*$'\n'}"
