#!/bin/sh
# tests/run.sh - run libmor's whole test suite (make test / make test-sanitize).
#
# Runs, from the repository root:
#   - every test program built in $OUT/build/tests/ (OUT defaults to .),
#   - every tests/test_*.sh (with sh) and tests/test_*.py (with python3).
# Each prints "ok - ..." / "FAIL - ..." / "skip - ..." lines and, last, one
# line "# checks: P passed, F failed" or "# checks: P passed, F failed, S
# skipped", either maybe followed by " (N scenarios)" (tests/check.h,
# tests/testlib.sh, tests/testlib.py; scenarios are shown, not summed; a
# failed setup step, check.h's REQUIRE, is one of the F). A skip is a
# check that cannot run on this machine (an optional tool such as valgrind,
# bindgen or cargo is missing; the line says which Debian package to
# install): it is counted and shown, never a failure. A program that exits
# non-zero without that line (a crash, a sanitizer report, a timeout) counts
# as one failed check; so does one that prints it with 0 failures but still
# exits non-zero (e.g. a leak found at exit). Prints one summary line per
# program (and its skip lines) and ends with exactly "N passed, N failed"
# when nothing was skipped, else "N passed, N failed, N skipped", the checks
# summed. Exits 1 if anything failed.
#
# Environment: OUT (exported, absolute, for the scripts: $OUT/bin, $OUT/lib),
# SANITIZE=1 (set ASan/UBSan options), CC, CXX, TEST_TIMEOUT (seconds per
# program, default 900), TEST_FILTER (run only names containing it),
# TEST_VERBOSE=1 (print every program's whole output).
# Full outputs are kept in $OUT/build/test-logs/.

cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)

OUT=${OUT:-.}
case $OUT in
    /*) ;;
    *) OUT=$ROOT/$OUT ;;
esac
OUT=$(cd "$OUT" 2>/dev/null && pwd) || { echo "run.sh: OUT directory does not exist"; echo "0 passed, 1 failed"; exit 1; }
export OUT
export CC="${CC:-cc}"
export CXX="${CXX:-c++}"
SANITIZE=${SANITIZE:-0}
export SANITIZE
if [ "$SANITIZE" = 1 ]; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    export ASAN_OPTIONS UBSAN_OPTIONS
fi
TEST_TIMEOUT=${TEST_TIMEOUT:-900}
TEST_FILTER=${TEST_FILTER:-}
TEST_VERBOSE=${TEST_VERBOSE:-0}

LOGDIR=$OUT/build/test-logs
mkdir -p "$LOGDIR" || exit 1

if command -v timeout >/dev/null 2>&1; then
    TIMEOUT="timeout $TEST_TIMEOUT"
else
    TIMEOUT=
fi

total_pass=0
total_fail=0
total_skip=0
n_prog=0
n_bad=0

# run_one NAME COMMAND...
run_one() {
    name=$1
    shift
    case $name in *"$TEST_FILTER"*) ;; *) return 0 ;; esac
    log=$LOGDIR/$name.log
    n_prog=$((n_prog + 1))
    start=$(date +%s)
    # stdin from /dev/null: CI has none, and no test may wait for input.
    $TIMEOUT "$@" </dev/null >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    line=$(grep -E '^# checks: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?( \([0-9]+ scenarios\))?$' "$log" | tail -n 1)
    note=
    k=0
    sc=
    if [ -n "$line" ]; then
        case $line in *scenarios*) sc=" $(echo "$line" | sed 's/^.*(\([0-9]*\) scenarios)$/\1/') scenarios" ;; esac
        p=$(echo "$line" | sed 's/^# checks: \([0-9]*\) passed, .*$/\1/')
        f=$(echo "$line" | sed 's/^# checks: [0-9]* passed, \([0-9]*\) failed.*$/\1/')
        case $line in *skipped*) k=$(echo "$line" | sed 's/^.* failed, \([0-9]*\) skipped.*$/\1/') ;; esac
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1
            note=" (exit status $rc after its checks)"
        fi
    else
        p=0
        f=1
        if [ "$rc" -eq 124 ] && [ -n "$TIMEOUT" ]; then
            note=" (timed out after ${TEST_TIMEOUT}s)"
        elif [ "$rc" -gt 128 ]; then
            note=" (killed by signal $((rc - 128)), no checks line)"
        else
            note=" (exit status $rc, no checks line)"
        fi
    fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    total_skip=$((total_skip + k))
    if [ "$f" -eq 0 ]; then status=PASS; else status=FAIL; n_bad=$((n_bad + 1)); fi
    if [ "$k" -gt 0 ]; then skipped=" $k skipped"; else skipped=; fi
    printf '%-4s %-28s %5d passed %4d failed %5ss%s%s%s\n' "$status" "$name" "$p" "$f" "$secs" "$skipped" "$sc" "$note"
    # what was skipped, and why, is always shown
    [ "$TEST_VERBOSE" = 1 ] || grep -E '^skip - ' "$log" | head -n 20 | sed 's/^/    /'
    if [ "$TEST_VERBOSE" = 1 ]; then
        sed 's/^/    /' "$log"
    elif [ "$f" -ne 0 ]; then
        grep -E '^FAIL' "$log" | head -n 40 | sed 's/^/    /'
        if [ -n "$note" ]; then
            echo "    --- last lines of $name ---"
            tail -n 25 "$log" | sed 's/^/    /'
        fi
    fi
    return 0
}

if [ "$SANITIZE" = 1 ]; then echo "# libmor tests: OUT=$OUT (sanitizers)"; else echo "# libmor tests: OUT=$OUT"; fi

found=0
if [ -d "$OUT/build/tests" ]; then
    for prog in "$OUT"/build/tests/*; do
        [ -f "$prog" ] && [ -x "$prog" ] || continue
        found=1
        run_one "$(basename "$prog")" "$prog"
    done
fi
if [ "$found" = 0 ]; then
    echo "FAIL no test programs in $OUT/build/tests (run make first)"
    total_fail=$((total_fail + 1))
fi

for script in tests/test_*.sh; do
    [ -f "$script" ] || continue
    run_one "$(basename "$script")" sh "$script"
done

for script in tests/test_*.py; do
    [ -f "$script" ] || continue
    if command -v python3 >/dev/null 2>&1; then
        run_one "$(basename "$script")" python3 "$script"
    else
        echo "FAIL $(basename "$script"): python3 not found"
        total_fail=$((total_fail + 1))
    fi
done

echo "# $n_prog programs, $n_bad with failures; logs in $LOGDIR"
if [ "$total_skip" -gt 0 ]; then
    echo "$total_pass passed, $total_fail failed, $total_skip skipped"
else
    echo "$total_pass passed, $total_fail failed"
fi
[ "$total_fail" -eq 0 ]
