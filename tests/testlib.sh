# tests/testlib.sh - the harness of libmor's shell tests (tests/test_*.sh).
# Source it from a test run from the repository root (tests/run.sh does so):
#
#     . tests/testlib.sh
#     check "the library exists" test -f "$OUT/lib/libmor.a"
#     ok "something that was verified by hand"; fail "why it failed"
#     skip "why it cannot run here (Debian: apt-get install PKG)"
#     need_tool valgrind valgrind || finish   # a counted skip when a tool is missing
#     finish                      # "# checks: P passed, F failed[, S skipped]", exit status
#
# It sets: ROOT (the repository), OUT (absolute; $OUT/bin, $OUT/lib hold what
# make built), CC, CXX, SAN_FLAGS (the -fsanitize flags when SANITIZE=1, for
# programs a test compiles and links against the library), TMP (a private
# temporary directory removed at exit), and the version numbers of mor.h
# (MOR_MAJOR, MOR_MINOR, MOR_PATCH, MOR_VERSION, MOR_SOVER).
# POSIX sh only.

T_PASSED=0
T_FAILED=0
T_SKIPPED=0

ok()   { T_PASSED=$((T_PASSED + 1)); echo "ok - $*"; }
fail() { T_FAILED=$((T_FAILED + 1)); echo "FAIL - $*"; }
# A check that cannot run on this machine (an optional tool is missing): counted
# and shown by tests/run.sh, never a failure. Name what to install.
skip() { T_SKIPPED=$((T_SKIPPED + 1)); echo "skip - $*"; }
note() { echo "# $*"; }

# check DESCRIPTION COMMAND [ARGS...]: ok if the command succeeds. Its output
# is shown only when it fails.
check() {
    _desc=$1
    shift
    if _out=$("$@" 2>&1); then
        ok "$_desc"
    else
        fail "$_desc"
        [ -n "$_out" ] && printf '%s\n' "$_out" | head -n 30 | sed 's/^/#   /'
    fi
    return 0
}

# check_eq DESCRIPTION GOT WANT
check_eq() {
    if [ "$2" = "$3" ]; then ok "$1"; else fail "$1 (got '$2', want '$3')"; fi
}

# need_tool COMMAND PACKAGE [WHAT]: true if COMMAND is on PATH, else one skip
# "WHAT: COMMAND not found (Debian: apt-get install PACKAGE)" and false.
need_tool() {
    command -v "$1" >/dev/null 2>&1 && return 0
    skip "${3:-the checks that need $1}: $1 not found (Debian: apt-get install $2)"
    return 1
}

finish() {
    if [ "$T_SKIPPED" -gt 0 ]; then
        echo "# checks: $T_PASSED passed, $T_FAILED failed, $T_SKIPPED skipped"
    else
        echo "# checks: $T_PASSED passed, $T_FAILED failed"
    fi
    [ "$T_FAILED" -eq 0 ] && exit 0
    exit 1
}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT}
case $OUT in /*) ;; *) OUT=$ROOT/$OUT ;; esac
CC=${CC:-cc}
CXX=${CXX:-c++}
SAN_FLAGS=
if [ "${SANITIZE:-0}" = 1 ]; then
    SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
fi

MOR_MAJOR=$(sed -n 's/^#define MOR_VERSION_MAJOR \([0-9]*\).*/\1/p' "$ROOT/include/mor.h")
MOR_MINOR=$(sed -n 's/^#define MOR_VERSION_MINOR \([0-9]*\).*/\1/p' "$ROOT/include/mor.h")
MOR_PATCH=$(sed -n 's/^#define MOR_VERSION_PATCH \([0-9]*\).*/\1/p' "$ROOT/include/mor.h")
MOR_VERSION=$MOR_MAJOR.$MOR_MINOR.$MOR_PATCH
if [ "$MOR_MAJOR" = 0 ]; then MOR_SOVER=0.$MOR_MINOR; else MOR_SOVER=$MOR_MAJOR; fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/mortest.XXXXXX") || { echo "FAIL - mktemp"; echo "# checks: 0 passed, 1 failed"; exit 1; }
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
