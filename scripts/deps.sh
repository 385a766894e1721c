#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# scripts/deps.sh: install the Debian 12 packages muster needs to build and test.
#
# Checks with dpkg-query first, so a machine that already has everything does no network work
# and needs no root.  When something is missing: as root it runs apt-get (update only then),
# otherwise it prints the command to run and exits 1.
#
# usage: scripts/deps.sh [--check]      (--check: only report what is missing; exit 1 if any)
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    libzmq3-dev libhiredis-dev libmsgpack-dev libcurl4-openssl-dev libcjson-dev libcmocka-dev libmicrohttpd-dev libsqlite3-dev
    redis-server redis-tools jq python3 procps curl sqlite3
    clang-format # scripts/lint.sh (clang-format --dry-run --Werror)
    shellcheck   # scripts/lint.sh shell check (.shellcheckrc)
    clang-tidy cppcheck         # scripts/lint.sh --tidy, which scripts/test.sh (CI) runs
    clang-14 libclang-rt-14-dev # scripts/test.sh fuzz pass (libFuzzer, ASan+UBSan runtimes)
    valgrind                    # scripts/test.sh valgrind pass, tests/integration/t0500
    gnuplot-nox                 # muster-sim --plot-dir (SVG plots); t2006 draws them when present
)

check_only=0
case "${1:-}" in
'') ;;
--check) check_only=1 ;;
-h | --help)
    sed -n '3,10s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
*)
    echo "usage: scripts/deps.sh [--check]" >&2
    exit 2
    ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "deps.sh: dpkg-query not found: this script supports Debian 12 (and derivatives) only" >&2
    echo "hint: install these packages by other means: ${packages[*]}" >&2
    exit 1
fi

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "==> deps: all ${#packages[@]} packages installed" >&2
    exit 0
fi

echo "==> deps: missing: ${missing[*]}" >&2
cmd="apt-get install -y -q --no-install-recommends ${missing[*]}"
if [ "$check_only" -eq 1 ]; then
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: not root; install the missing packages with:" >&2
    echo "    sudo apt-get update && sudo $cmd" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "==> deps: apt-get update" >&2
apt-get update -q -q
echo "==> deps: $cmd" >&2
apt-get install -y -q -q --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
echo "==> deps: installed ${#missing[@]} packages" >&2
