#!/bin/sh
# test_header.sh - mor.h compiles as strict C99 and as C++11, with no warning,
# and test_header.c (which also runs as a C11 test) covers every enumerator.
. tests/testlib.sh

H=$ROOT/include/mor.h
LIBS="$OUT/lib/libmor.a -lm -lpthread"

# Every enumerator of mor.h is in test_header.c, so its uniqueness is checked.
missing=
for e in $(grep -oE '\bMOR_[A-Z0-9_]+ *=' "$H" | tr -d ' ='); do
    grep -q "\\b$e\\b" "$ROOT/tests/test_header.c" || missing="$missing $e"
done
check_eq "every enumerator of mor.h appears in tests/test_header.c" "${missing:-none}" none

check "library built: $OUT/lib/libmor.a" test -f "$OUT/lib/libmor.a"

# The header alone, with warnings beyond -Wall -Wextra that a user may enable.
printf '#include "mor.h"\n' > "$TMP/only.c"
cp "$TMP/only.c" "$TMP/only.cpp"
STRICT="-Werror -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wundef -Wshadow -Wcast-qual -Wredundant-decls"
check "mor.h alone: $CC -std=c99 -pedantic $STRICT -Wstrict-prototypes -Wmissing-prototypes" \
    $CC -std=c99 -pedantic $STRICT -Wstrict-prototypes -Wmissing-prototypes -I"$ROOT/include" -fsyntax-only "$TMP/only.c"
check "mor.h alone: $CC -std=c11 -pedantic $STRICT -DMOR_STATIC" \
    $CC -std=c11 -pedantic $STRICT -DMOR_STATIC -I"$ROOT/include" -fsyntax-only "$TMP/only.c"
check "mor.h alone: $CXX -std=c++11 -pedantic $STRICT" \
    $CXX -std=c++11 -pedantic $STRICT -I"$ROOT/include" -fsyntax-only "$TMP/only.cpp"

# test_header.c as C99 and header_cpp.cpp as C++11: build, link, run.
check "test_header.c builds with $CC -std=c99 -pedantic -Werror -Wall -Wextra" \
    $CC -std=c99 -pedantic -Werror -Wall -Wextra $SAN_FLAGS -I"$ROOT/include" -I"$ROOT/tests" \
        "$ROOT/tests/test_header.c" $LIBS -o "$TMP/header_c99"
if [ -x "$TMP/header_c99" ]; then
    check "test_header (C99 build) passes" "$TMP/header_c99"
else
    fail "test_header (C99 build) passes: not built"
fi
check "header_cpp.cpp builds with $CXX -std=c++11 -pedantic -Werror -Wall -Wextra" \
    $CXX -std=c++11 -pedantic -Werror -Wall -Wextra $SAN_FLAGS -I"$ROOT/include" -I"$ROOT/tests" \
        "$ROOT/tests/header_cpp.cpp" $LIBS -o "$TMP/header_cpp"
if [ -x "$TMP/header_cpp" ]; then
    check "header_cpp (C++11 build) passes" "$TMP/header_cpp"
else
    fail "header_cpp (C++11 build) passes: not built"
fi

# The other compiler, when there is one (syntax only: no library needed).
for other in clang gcc; do
    case "$CC" in *"$other"*) continue ;; esac
    command -v $other >/dev/null 2>&1 || continue
    check "mor.h and test_header.c: $other -std=c99 -pedantic -Werror -Wall -Wextra" \
        $other -std=c99 -pedantic -Werror -Wall -Wextra -I"$ROOT/include" -I"$ROOT/tests" \
            -fsyntax-only "$ROOT/tests/test_header.c"
    break
done

finish
