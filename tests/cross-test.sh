#!/bin/sh
# tests/cross-test.sh - run the C test programs of a cross build under an
# emulator (make cross-test ARCH=aarch64|armv7 builds them and calls this).
#
#   OUT=build/cross/aarch64 QEMU="qemu-aarch64 -L /usr/aarch64-linux-gnu" sh tests/cross-test.sh
#
# The programs run with `$QEMU prog` (no binfmt needed), from the repository
# root, with OUT set so that they find $OUT/build/fixtures. Like tests/run.sh
# it reads each program's "# checks: P passed, F failed" line (a program that
# dies or exits non-zero without one counts as one failed check), prints a
# line per program and ends with "N passed, N failed" (", N skipped" after it
# when checks were skipped; without qemu-user everything is one skip). Not
# part of make test:
# the emulated suite takes minutes. Shell and Python tests are host tests and
# are not run here. JOBS programs run at once (default 2). TEST_FILTER and
# TEST_TIMEOUT (seconds, default 1800) as
# in tests/run.sh. MOR_TEST_EMULATED=1 tells the programs they run emulated:
# qemu-user runs every float operation through softfloat (a float-heavy
# test is 100-1000x slower than natively), and a program may then cover the
# same code with fewer repetitions of its arithmetic (test_kv_shift).
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:?set OUT to the cross build}
QEMU=${QEMU:?set QEMU, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu"}
case $OUT in /*) ;; *) OUT=$(pwd)/$OUT ;; esac
export OUT
MOR_TEST_EMULATED=1
export MOR_TEST_EMULATED
TEST_TIMEOUT=${TEST_TIMEOUT:-1800}
TEST_FILTER=${TEST_FILTER:-}
LOGDIR=$OUT/build/test-logs
mkdir -p "$LOGDIR" || exit 1
set -- $QEMU
if ! command -v "$1" >/dev/null 2>&1; then
    # an optional tool: a counted skip, never a failure
    echo "skip - the cross-built tests: $1 not found (Debian: apt-get install qemu-user)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
TIMEOUT=
command -v timeout >/dev/null 2>&1 && TIMEOUT="timeout $TEST_TIMEOUT"

echo "# cross tests: OUT=$OUT under $QEMU"
# The programs run JOBS at a time (default 2: qemu-user runs one thread per
# program, and the emulated suite is most of the CI's wall time); each leaves
# its log, exit status and seconds in LOGDIR, read back in name order below.
JOBS=${JOBS:-2}
list=$LOGDIR/.programs
: >"$list"
for prog in "$OUT"/build/tests/*; do
    [ -f "$prog" ] && [ -x "$prog" ] || continue
    name=$(basename "$prog")
    case $name in *"$TEST_FILTER"*) ;; *) continue ;; esac
    rm -f "$LOGDIR/$name.log.rc" "$LOGDIR/$name.log.secs"
    echo "$prog" >>"$list"
done
export QEMU TIMEOUT LOGDIR
# shellcheck disable=SC2016
xargs -P "$JOBS" -I{} sh -c '
    log=$LOGDIR/$(basename "$1").log
    start=$(date +%s)
    $TIMEOUT $QEMU "$1" </dev/null >"$log" 2>&1
    echo $? >"$log.rc"
    echo $(( $(date +%s) - start )) >"$log.secs"' _ {} <"$list"
total_pass=0
total_fail=0
total_skip=0
n=0
while read -r prog; do
    name=$(basename "$prog")
    n=$((n + 1))
    log=$LOGDIR/$name.log
    rc=$(cat "$log.rc" 2>/dev/null || echo 255)
    secs=$(cat "$log.secs" 2>/dev/null || echo 0)
    line=$(grep -E '^# checks: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?( \([0-9]+ scenarios\))?$' "$log" | tail -n 1)
    note=
    k=0
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed 's/^# checks: \([0-9]*\) passed.*/\1/')
        f=$(echo "$line" | sed 's/.*passed, \([0-9]*\) failed.*$/\1/')
        case $line in *skipped*) k=$(echo "$line" | sed 's/^.* failed, \([0-9]*\) skipped.*$/\1/') ;; esac
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; note=" (exit status $rc after its checks)"; fi
    else
        p=0
        f=1
        note=" (exit status $rc, no checks line)"
    fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    total_skip=$((total_skip + k))
    if [ "$f" -eq 0 ]; then st=PASS; else st=FAIL; fi
    if [ "$k" -gt 0 ]; then sk=" $k skipped"; else sk=; fi
    printf '%-4s %-28s %5d passed %4d failed %5ss%s%s\n' "$st" "$name" "$p" "$f" "$secs" "$sk" "$note"
    grep -E '^skip - ' "$log" | head -n 10 | sed 's/^/    /'
    if [ "$f" -ne 0 ]; then
        grep -E '^FAIL' "$log" | head -n 40 | sed 's/^/    /'
        [ -n "$note" ] && tail -n 15 "$log" | sed 's/^/    /'
    fi
done <"$list"
if [ "$n" = 0 ]; then
    echo "FAIL no test programs in $OUT/build/tests"
    total_fail=$((total_fail + 1))
fi
if [ "$total_skip" -gt 0 ]; then
    echo "$total_pass passed, $total_fail failed, $total_skip skipped"
else
    echo "$total_pass passed, $total_fail failed"
fi
[ "$total_fail" -eq 0 ]
