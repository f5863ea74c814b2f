#!/bin/sh
# test_rust.sh - the Rust bindings (bindings/rust):
#   - mor-sys/src/bindings.rs is what bindgen makes of mor.h today (not stale;
#     `make rust-bindings` regenerates it) and binds every MOR_API function;
#   - `cargo test --offline` of both crates, linked with the static libmor.a
#     ($OUT/lib): the fp32 fixtures' greedy tokens, errors, threads, the
#     Send/Sync contract, the borrow rules (compile_fail doc tests), bindgen's
#     layout tests; then the fixture tests again linked with libmor.so.
# Cargo builds into $OUT/build/rust; no crate comes from a registry.
# Under SANITIZE=1 the tests link the ASan/UBSan runtimes and run with them
# preloaded. Without bindgen or cargo (optional: Debian packages bindgen,
# cargo) those parts are counted skips.
. tests/testlib.sh

RS=$ROOT/bindings/rust
BINDINGS=$RS/mor-sys/src/bindings.rs

# --- the committed bindings ------------------------------------------------
missing=
for f in $(python3 "$ROOT/docs/tools/mor_api.py" functions "$ROOT/include/mor.h"); do
    grep -q "pub fn $f(" "$BINDINGS" || missing="$missing $f"
done
check_eq "bindings.rs binds every MOR_API function of mor.h" "${missing:-none}" none
if need_tool bindgen bindgen "bindings.rs is current (make rust-bindings)"; then
    if sh "$RS/gen-bindings.sh" "$TMP/bindings.rs" 2>"$TMP/bindgen.err"; then
        if cmp -s "$TMP/bindings.rs" "$BINDINGS"; then
            ok "bindings.rs is current ($(head -n 1 "$BINDINGS" | sed 's/^.* by //; s/ \*\/$//'))"
        else
            fail "bindings.rs is stale: run make rust-bindings"
            diff "$BINDINGS" "$TMP/bindings.rs" | head -n 20 | sed 's/^/#   /'
        fi
    else
        fail "bindgen failed: $(head -n 3 "$TMP/bindgen.err")"
    fi
fi

# --- cargo test ------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    PATH=$HOME/.cargo/bin:$PATH
fi
need_tool cargo cargo "cargo test of the Rust crates" || finish
note "$(cargo --version), $(rustc --version)"
# The build writes a Cargo.lock beside the workspace (ignored; path crates only).
CARGO_TARGET_DIR=$OUT/build/rust
MOR_LIB_DIR=$OUT/lib
MOR_FIXTURES=$OUT/build/fixtures
export CARGO_TARGET_DIR MOR_LIB_DIR MOR_FIXTURES
unset MOR_LINK MOR_LINK_EXTRA
if [ "${SANITIZE:-0}" = 1 ]; then
    MOR_LINK_EXTRA=asan,ubsan
    triple=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
    # the runtimes must come first: preload them into the test programs only
    eval "CARGO_TARGET_${triple}_RUNNER=\"env LD_PRELOAD=$($CC -print-file-name=libasan.so):$($CC -print-file-name=libubsan.so)\""
    export MOR_LINK_EXTRA "CARGO_TARGET_${triple}_RUNNER"
fi

# cargo_test NAME ARGS...: every "test X ... ok|FAILED" line is a check
cargo_test() {
    _name=$1
    shift
    (cd "$RS" && cargo test --offline "$@") > "$TMP/cargo.log" 2>&1
    _rc=$?
    _n=0
    while IFS= read -r line; do
        case $line in
            "test "*" ... ok") _t=${line#test }; ok "$_name: ${_t% ... ok}"; _n=$((_n + 1)) ;;
            "test "*" ... FAILED") fail "$_name: ${line#test }"; _n=$((_n + 1)) ;;
        esac
    done < "$TMP/cargo.log"
    if [ "$_rc" -ne 0 ]; then
        fail "$_name: cargo test exited $_rc"
        grep -v '^ *Compiling\|^test .* ok$' "$TMP/cargo.log" | tail -n 30 | sed 's/^/#   /'
    fi
    check "$_name: ran tests ($_n)" test "$_n" -gt 0
}

cargo_test "static" --workspace
MOR_LINK=dylib CARGO_TARGET_DIR=$OUT/build/rust-dylib LD_LIBRARY_PATH=$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    cargo_test "shared" -p mor --test fixtures
exe=$(ls -t "$OUT"/build/rust-dylib/debug/deps/fixtures-* 2>/dev/null | grep -v '\.d$' | head -n 1)
if [ -n "$exe" ]; then
    needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(libmor[^]]*\)\].*/\1/p')
    check_eq "shared: the test program needs libmor.so.$MOR_SOVER" "$needed" "libmor.so.$MOR_SOVER"
else
    fail "shared: no test program found"
fi

finish
