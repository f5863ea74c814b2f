#!/bin/sh
# test_harness.sh - tests/run.sh counts skips: fake test programs in a scratch
# OUT print skip lines (as a missing optional tool does) and run.sh shows
# them, counts them apart from passes and failures, and ends with
# "N passed, N failed, N skipped" -- or exactly "N passed, N failed" when
# nothing was skipped. The C, shell and Python harnesses print the same
# checks line.
. tests/testlib.sh

mkdir -p "$TMP/a/build/tests" "$TMP/b/build/tests"
cat > "$TMP/a/build/tests/fake_harness_skips" <<'EOF'
#!/bin/sh
echo "ok - one"
echo "skip - a check that needs frobnicator: frobnicator not found (Debian: apt-get install frobnicator)"
echo "ok - two"
echo "# checks: 2 passed, 0 failed, 1 skipped"
EOF
cat > "$TMP/a/build/tests/fake_harness_plain" <<'EOF'
#!/bin/sh
echo "ok - three"
echo "# checks: 1 passed, 0 failed"
EOF
cat > "$TMP/a/build/tests/fake_harness_scenarios" <<'EOF'
#!/bin/sh
echo "ok - four"
echo "skip - five: no frobnicator"
echo "# checks: 1 passed, 0 failed, 1 skipped (3 scenarios)"
EOF
cp "$TMP/a/build/tests/fake_harness_plain" "$TMP/b/build/tests/fake_harness_plain"
chmod +x "$TMP/a/build/tests/"* "$TMP/b/build/tests/"*

out=$(OUT="$TMP/a" TEST_FILTER=fake_harness_ sh "$ROOT/tests/run.sh" 2>&1)
rc=$?
check_eq "run.sh with a skip exits 0" "$rc" 0
check_eq "run.sh ends with N passed, N failed, N skipped (a scenario count read, not summed)" \
    "$(printf '%s\n' "$out" | tail -n 1)" "4 passed, 0 failed, 2 skipped"
check "run.sh shows a program's scenarios" sh -c "printf '%s\n' \"\$1\" | grep -q '^PASS fake_harness_scenarios .* 1 skipped 3 scenarios\$'" \
    sh "$out"
case $out in
    *"    skip - a check that needs frobnicator: frobnicator not found (Debian: apt-get install frobnicator)"*)
        ok "run.sh shows the skip line with its reason" ;;
    *) fail "run.sh shows the skip line with its reason: $out" ;;
esac
check "the program's line counts its skip" sh -c "printf '%s\n' \"\$1\" | grep -q '^PASS fake_harness_skips .* 1 skipped'" \
    sh "$out"
out=$(OUT="$TMP/b" TEST_FILTER=fake_harness_ sh "$ROOT/tests/run.sh" 2>&1)
check_eq "run.sh without skips ends with exactly N passed, N failed" "$(printf '%s\n' "$out" | tail -n 1)" \
    "1 passed, 0 failed"

# the three harnesses
res=$( (T_PASSED=0 T_FAILED=0 T_SKIPPED=0; ok x; skip y; finish) | tail -n 1)
check_eq "testlib.sh: skip is counted" "$res" "# checks: 1 passed, 0 failed, 1 skipped"
res=$( (need_tool no-such-tool-14 no-such-package; finish) | head -n 1)
check_eq "testlib.sh: need_tool names the missing tool and its package" "$res" \
    "skip - the checks that need no-such-tool-14: no-such-tool-14 not found (Debian: apt-get install no-such-package)"
res=$(cd "$ROOT/tests" && python3 -c '
import testlib as t
t.check(True, "x"); t.need_tool("no-such-tool-14", "no-such-package"); t.finish()' | tail -n 1)
check_eq "testlib.py: need_tool is a counted skip" "$res" "# checks: 1 passed, 0 failed, 1 skipped"
cat > "$TMP/c.c" <<'EOF'
#include "check.h"
int main(void) { CHECK(1, "x"); SKIP("y: z not found"); return check_done(); }
EOF
if $CC -I"$ROOT/tests" "$TMP/c.c" -lm -o "$TMP/c" 2>"$TMP/c.err"; then
    "$TMP/c" > "$TMP/c.out"
    crc=$?
    check_eq "check.h: SKIP is counted and check_done exits 0" "$(tail -n 1 "$TMP/c.out") $crc" \
        "# checks: 1 passed, 0 failed, 1 skipped 0"
else
    fail "check.h test program builds: $(head -n 3 "$TMP/c.err")"
fi
# REQUIRE: nothing counted when it holds, one failure when it does not; SCENARIO counted apart
cat > "$TMP/r.c" <<'EOF'
#include "check.h"
int main(void)
{
    SCENARIO("a"); if (REQUIRE(1 + 1 == 2, "setup a")) CHECK(2 > 1, "claim a");
    SCENARIO("b"); if (REQUIRE(1 + 1 == 3, "setup b")) CHECK(2 > 1, "claim b");
    return check_done();
}
EOF
if $CC -I"$ROOT/tests" "$TMP/r.c" -lm -o "$TMP/r" 2>"$TMP/r.err"; then
    "$TMP/r" > "$TMP/r.out"
    rrc=$?
    check_eq "check.h: REQUIRE counts only its failure, which fails the program; scenarios counted" \
        "$(grep -c '^FAIL - setup: setup b (' "$TMP/r.out") $(tail -n 1 "$TMP/r.out") $rrc" \
        "1 # checks: 1 passed, 1 failed (2 scenarios) 1"
else
    fail "check.h REQUIRE program builds: $(head -n 3 "$TMP/r.err")"
fi
finish
