#!/bin/sh
# test_abi.sh - the recorded public surface: `make check-abi` (src/libmor.sym
# against include/mor.h and the built libmor.so) passes, and the checker
# catches each kind of break on altered copies: a function removed, a
# signature changed, an enum value changed, a struct field inserted, a symbol
# no longer exported or re-versioned; additions pass and update-abi only
# appends. docs/API.md is what docs/tools/mor_api.py makes of mor.h today.
. tests/testlib.sh

TOOL="python3 $ROOT/docs/tools/mor_api.py"
SYM=$ROOT/src/libmor.sym
H=$ROOT/include/mor.h
SO=$OUT/lib/libmor.so.$MOR_VERSION

if ! command -v python3 >/dev/null 2>&1; then fail "python3 not found"; finish; fi

check "make check-abi: src/libmor.sym holds for mor.h and the built library" \
    $TOOL check-abi --sym "$SYM" --header "$H" --lib "$SO"
n_fn=$(grep -c '^function ' "$SYM")
n_api=$($TOOL functions "$H" | wc -l | tr -d ' ')
check "src/libmor.sym lists functions ($n_fn) and mor.h declares some ($n_api)" test "$n_fn" -gt 50 -a "$n_api" -ge "$n_fn"
nm -D --defined-only "$SO" > "$TMP/exported"

# expect_break DESCRIPTION PATTERN HEADER [EXPORTED]: the checker fails, saying PATTERN
expect_break() {
    _exp=${4:-$TMP/exported}
    if _o=$($TOOL check-abi --sym "$SYM" --header "$3" --exported "$_exp" 2>&1); then
        fail "$1: check-abi passed"
    elif printf '%s\n' "$_o" | grep -q "$2"; then
        ok "$1"
    else
        fail "$1: no '$2' in: $(printf '%s' "$_o" | tail -n 3)"
    fi
}

sed '/mor_kv_seq_keep(/d' "$H" > "$TMP/removed.h"
expect_break "a removed function is a break" "mor_kv_seq_keep was removed" "$TMP/removed.h"

sed 's/mor_token token, mor_pos pos,/int64_t token, mor_pos pos,/' "$H" > "$TMP/sig.h"
check "(the signature edit applied)" sh -c "! cmp -s '$H' '$TMP/sig.h'"
expect_break "a changed parameter type is a break" "mor_batch_add changed" "$TMP/sig.h"

sed 's/MOR_E_IO  *= *-3,/MOR_E_IO = -30,/' "$H" > "$TMP/enum.h"
expect_break "a changed enum value is a break" "MOR_E_IO changed: -3 -> -30" "$TMP/enum.h"

sed 's/^\(    uint32_t flags;  \/\* MOR_MODEL_\)/    uint32_t inserted;\n\1/' "$H" > "$TMP/field.h"
check "(the field insertion applied)" grep -q 'uint32_t inserted;' "$TMP/field.h"
expect_break "a field inserted into a params struct is a break" "struct mor_model_params changed" "$TMP/field.h"

grep -v ' mor_decode@' "$TMP/exported" > "$TMP/exp_missing"
expect_break "a symbol the library no longer exports is a break" "mor_decode is not exported" "$H" "$TMP/exp_missing"
sed 's/ mor_decode@@MOR_[0-9.]*/ mor_decode@@MOR_9.9/' "$TMP/exported" > "$TMP/exp_node"
expect_break "a re-versioned symbol is a break" "mor_decode is exported at version node 'MOR_9.9'" "$H" "$TMP/exp_node"

# additions: a function, an appended field, a new constant
sed -e 's/^MOR_API int32_t mor_max_recursions(void);/&\nMOR_API int32_t mor_added_for_test(const mor_model *model);/' \
    -e 's/^\(    int32_t  repeat_last_n; .*\)$/\1\n    int32_t  appended_for_test;/' \
    -e 's/^\(    MOR_E_INTERNAL  *= -12\)  /\1, MOR_E_ADDED_FOR_TEST = -13/' "$H" > "$TMP/added.h"
check "(the additions applied)" sh -c "grep -q mor_added_for_test '$TMP/added.h' && grep -q appended_for_test '$TMP/added.h' && grep -q MOR_E_ADDED_FOR_TEST '$TMP/added.h'"
if _o=$($TOOL check-abi --sym "$SYM" --header "$TMP/added.h" --exported "$TMP/exported" 2>&1); then
    ok "additions (function, appended field, constant) are not a break"
    printf '%s\n' "$_o" > "$TMP/added.out"
    check "additions are reported" grep -q 'new, not yet in libmor.sym.*mor_added_for_test' "$TMP/added.out"
else
    fail "additions are not a break: $(printf '%s' "$_o" | grep BREAK | head -n 3)"
fi
cp "$SYM" "$TMP/sym"
$TOOL update-abi --sym "$TMP/sym" --header "$TMP/added.h" > /dev/null
check "update-abi only appends" sh -c "head -c $(wc -c < "$SYM") '$TMP/sym' | cmp -s - '$SYM'"
check "update-abi appended the new function and constant" \
    sh -c "grep -q '^function mor_added_for_test@MOR_$MOR_SOVER: int32_t(const mor_model \*)$' '$TMP/sym' && grep -q '^constant MOR_E_ADDED_FOR_TEST: -13$' '$TMP/sym'"

# docs/API.md is generated from the header
$TOOL markdown "$H" > "$TMP/API.md"
check "docs/API.md is current (make api-doc)" cmp -s "$TMP/API.md" "$ROOT/docs/API.md"
missing=
for f in $($TOOL functions "$H"); do
    grep -q "$f(" "$ROOT/docs/API.md" || missing="$missing $f"
done
check_eq "docs/API.md documents every MOR_API function" "${missing:-none}" none

finish
