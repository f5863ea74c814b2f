#!/bin/sh
# tests/fuzz/run.sh - run libFuzzer targets for a fixed time each (make fuzz).
#
#   FUZZ_DIR=build/fuzz FUZZ_SECONDS=60 sh tests/fuzz/run.sh gguf json ...
#
# Each target build/fuzz/fuzz_<name> runs for FUZZ_SECONDS from its seeds in
# tests/fuzz/corpus/<name>/; what it finds new goes to the working corpus
# build/fuzz/work/<name>/ (kept between runs, never committed). A crash, leak,
# sanitizer report, broken invariant or time-out leaves its input in
# build/fuzz/crashes/<name>-*: copy it to tests/fuzz/regress/<name>/, fix the
# bug, and make test replays it from then on. Prints one line per target
# (executions, seconds, corpus size, result) and ends with "N passed, N failed"
# (a target that ran its time without a finding passes). Logs:
# build/fuzz/logs/<name>.log. Runs from the repository root.
cd "$(dirname "$0")/../.." || exit 1
FUZZ_DIR=${FUZZ_DIR:-build/fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
# FUZZ_RUNS=N: a fixed number of inputs from a fixed seed instead of a time
# budget, so that CI explores the same inputs on every run (no flaky findings)
if [ -n "${FUZZ_RUNS:-}" ]; then
    LIMIT="-runs=$FUZZ_RUNS -seed=1"
else
    LIMIT="-max_total_time=$FUZZ_SECONDS"
fi
mkdir -p "$FUZZ_DIR/logs" "$FUZZ_DIR/crashes"
pass=0
fail=0
total=0
printf '%-14s %12s %8s %8s  %s\n' target executions seconds corpus result
for name in "$@"; do
    bin=$FUZZ_DIR/fuzz_$name
    log=$FUZZ_DIR/logs/$name.log
    work=$FUZZ_DIR/work/$name
    mkdir -p "$work"
    start=$(date +%s)
    # -rss_limit_mb: a parser that allocates what a corrupt header claims is a
    # finding; -timeout: so is one input taking 10 s; leaks are reported too.
    # shellcheck disable=SC2086
    "$bin" $LIMIT -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -detect_leaks=1 -artifact_prefix="$FUZZ_DIR/crashes/$name-" \
        "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1 </dev/null
    rc=$?
    secs=$(( $(date +%s) - start ))
    total=$((total + secs))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    corpus=$(ls "$work" | wc -l)
    if [ "$rc" -eq 0 ]; then
        result="no finding"
        pass=$((pass + 1))
    else
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        result="FINDING (exit $rc): ${art:-see $log}"
        fail=$((fail + 1))
    fi
    printf '%-14s %12s %8s %8s  %s\n' "$name" "${execs:-?}" "$secs" "$corpus" "$result"
    if [ "$rc" -ne 0 ]; then
        grep -E 'ERROR:|SUMMARY:|fuzz invariant|runtime error' "$log" | head -n 5 | sed 's/^/    /'
    fi
done
echo "# fuzzing took ${total}s; logs in $FUZZ_DIR/logs"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
