#!/bin/sh
# test_symbols.sh - the shared library exports exactly the MOR_API functions of
# mor.h, under the right SONAME, with its symlinks, needing only libc, libm and
# pthreads.
. tests/testlib.sh

LIB=$OUT/lib
SO=$LIB/libmor.so.$MOR_VERSION

check "built: lib/libmor.so.$MOR_VERSION" test -f "$SO"
if [ ! -f "$SO" ]; then finish; fi

# Symlinks: libmor.so -> libmor.so.$SOVER -> libmor.so.$VERSION.
check_eq "lib/libmor.so.$MOR_SOVER -> libmor.so.$MOR_VERSION" \
    "$(readlink "$LIB/libmor.so.$MOR_SOVER" 2>/dev/null)" "libmor.so.$MOR_VERSION"
check_eq "lib/libmor.so -> libmor.so.$MOR_SOVER" "$(readlink "$LIB/libmor.so" 2>/dev/null)" "libmor.so.$MOR_SOVER"
check "lib/libmor.so resolves to a file" test -f "$LIB/libmor.so"

soname=$(readelf -d "$SO" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
check_eq "SONAME is libmor.so.$MOR_SOVER" "$soname" "libmor.so.$MOR_SOVER"

# DT_NEEDED: libc, libm, pthreads (and the loader); sanitizer or OpenMP
# runtimes only when built with them.
bad_needed=
for n in $(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p'); do
    case $n in
        libc.so.*|libm.so.*|libpthread.so.*|ld-linux*|libdl.so.*) ;;
        libasan.so.*|libubsan.so.*|libgomp.so.*) ;;
        *) bad_needed="$bad_needed $n" ;;
    esac
done
check_eq "needs only libc, libm, pthreads" "${bad_needed:-none}" none

# Exported symbols: nm -D --defined-only, without the version node itself.
nm -D --defined-only "$SO" | awk '{print $NF}' | sed 's/@.*//' | grep -v '^MOR_[0-9_.]*$' | sort -u > "$TMP/exported"
grep 'MOR_API' "$ROOT/include/mor.h" | grep -v '^#' | sed 's/(.*//; s/.*[ *]//' | sort -u > "$TMP/declared"

not_mor=$(grep -v '^mor_' "$TMP/exported" | tr '\n' ' ')
check_eq "every exported symbol starts with mor_" "${not_mor:-none}" none
extra=$(comm -23 "$TMP/exported" "$TMP/declared" | tr '\n' ' ')
check_eq "no mor_ symbol exported that mor.h does not declare" "${extra:-none}" none
missing=$(comm -13 "$TMP/exported" "$TMP/declared" | tr '\n' ' ')
check_eq "every MOR_API function of mor.h is exported ($(wc -l < "$TMP/declared" | tr -d ' '))" "${missing:-none}" none
unversioned=$(nm -D --defined-only "$SO" | awk '{print $NF}' | grep '^mor_' | grep -v '@@MOR_' | tr '\n' ' ')
check_eq "exported symbols carry the MOR_ version node" "${unversioned:-none}" none

# The static library is prelinked with its hidden symbols made local, so it
# defines no global name but mor_* (nothing to clash with, e.g., ggml's gguf_*).
if [ -f "$LIB/libmor.a" ]; then
    loose=$(nm -g --defined-only "$LIB/libmor.a" 2>/dev/null | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' |
            grep -v '^mor_' | sort -u | tr '\n' ' ')
    check_eq "libmor.a defines no global symbol but mor_*" "${loose:-none}" none
fi

finish
