#!/usr/bin/env bash
# scripts/flake-check.sh - does `make test` pass whatever the load? Runs it
# IDLE times as it is, BUSY times with every CPU kept busy by as many other
# CPU-bound processes, and PINNED times confined to one CPU (taskset -c 0),
# then prints the passes of each and the CPU. A test whose outcome depends on
# timing or chance shows up here as a red run; every run should be green.
#
#   scripts/flake-check.sh            # 5 idle, 3 busy, 2 pinned
#   scripts/flake-check.sh 2 1 1      # IDLE BUSY PINNED
#
# Each run's output is kept in build/flake/<mode>-<k>.log (the last line is
# make test's "N passed, N failed"). Exits 1 if any run failed.
set -u
cd "$(dirname "$0")/.."
IDLE=${1:-5} BUSY=${2:-3} PINNED=${3:-2}
dir=build/flake
mkdir -p "$dir"
ncpu=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
echo "# flake-check: ${IDLE} idle, ${BUSY} busy (${ncpu} CPU-bound hogs), ${PINNED} pinned (taskset -c 0); CPU: ${cpu:-unknown}, ${ncpu} CPUs"

if ! make -j"$ncpu" >"$dir/build.log" 2>&1; then
    echo "# the build failed: $dir/build.log"
    exit 1
fi

hogs=()
start_hogs() {
    for _ in $(seq "$ncpu"); do
        ( while :; do :; done ) &
        hogs+=($!)
    done
}
stop_hogs() {
    [ "${#hogs[@]}" -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
    wait "${hogs[@]}" 2>/dev/null
    hogs=()
}
trap 'stop_hogs; exit 130' INT TERM

failed=0
summary=""
run_mode() {   # mode count
    local mode=$1 n=$2 ok=0 k
    [ "$n" -gt 0 ] || return 0
    if [ "$mode" = pinned ] && ! command -v taskset >/dev/null 2>&1; then
        echo "skip - pinned runs: taskset not found (Debian: apt-get install util-linux)"
        summary+="pinned: skipped (no taskset)"$'\n'
        return 0
    fi
    for k in $(seq "$n"); do
        local log="$dir/$mode-$k.log" t0 rc
        t0=$(date +%s)
        [ "$mode" = busy ] && start_hogs
        if [ "$mode" = pinned ]; then taskset -c 0 make test >"$log" 2>&1; else make test >"$log" 2>&1; fi
        rc=$?
        [ "$mode" = busy ] && stop_hogs
        local last
        last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
        if [ "$rc" -eq 0 ]; then ok=$((ok + 1)); else failed=1; fi
        echo "$mode $k/$n: $([ "$rc" -eq 0 ] && echo green || echo RED) (${last:-no summary line}) in $(( $(date +%s) - t0 )) s"
        [ "$rc" -eq 0 ] || grep -h '^FAIL' "$log" build/test-logs/*.log 2>/dev/null | head -n 20 | sed 's/^/    /'
    done
    summary+="$mode: $ok of $n green"$'\n'
}
run_mode idle "$IDLE"
run_mode busy "$BUSY"
run_mode pinned "$PINNED"
printf '%s' "$summary" | sed 's/^/# /'
exit "$failed"
