#!/bin/sh
# test_install.sh - `make install DESTDIR=... PREFIX=/usr` gives a tree that an
# out-of-tree program can use through pkg-config, linked shared or static;
# `make uninstall` removes it again.
. tests/testlib.sh

need_tool pkg-config pkg-config "make install and a program built with pkg-config" || finish

DEST=$TMP/dest
SAN=${SANITIZE:-0}
# A make of our own, not part of the caller's jobserver; the same OUT and SAN
# as the build under test, so nothing is rebuilt.
mk() {
    (unset MAKEFLAGS MFLAGS MAKELEVEL; cd "$ROOT" && make -s OUT="$OUT" SAN="$SAN" "$@")
}

check "make install DESTDIR=\$tmp PREFIX=/usr" mk install DESTDIR="$DEST" PREFIX=/usr
L=$DEST/usr/lib
for f in usr/include/mor.h usr/lib/libmor.a "usr/lib/libmor.so.$MOR_VERSION" usr/lib/pkgconfig/mor.pc; do
    check "installed /$f" test -f "$DEST/$f"
done
check_eq "installed libmor.so.$MOR_SOVER -> libmor.so.$MOR_VERSION" "$(readlink "$L/libmor.so.$MOR_SOVER")" "libmor.so.$MOR_VERSION"
check_eq "installed libmor.so -> libmor.so.$MOR_SOVER" "$(readlink "$L/libmor.so")" "libmor.so.$MOR_SOVER"
# After a plain make (which wrote lib/pkgconfig/mor.pc for /usr/local), the
# installed mor.pc must still be the one for PREFIX=/usr.
check_eq "mor.pc: prefix=/usr" "$(sed -n 's/^prefix=//p' "$L/pkgconfig/mor.pc")" /usr
check_eq "mor.pc: libdir=/usr/lib" "$(sed -n 's/^libdir=//p' "$L/pkgconfig/mor.pc")" /usr/lib
check_eq "mor.pc: Version: $MOR_VERSION" "$(sed -n 's/^Version: //p' "$L/pkgconfig/mor.pc")" "$MOR_VERSION"
check "mor.pc: no @...@ left" sh -c "! grep -q '@[A-Z_]*@' '$L/pkgconfig/mor.pc'"

# pkg-config sees only the DESTDIR tree.
PKG_CONFIG_SYSROOT_DIR=$DEST
PKG_CONFIG_LIBDIR=$L/pkgconfig
PKG_CONFIG_PATH=
PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1
PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
export PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR PKG_CONFIG_PATH PKG_CONFIG_ALLOW_SYSTEM_CFLAGS PKG_CONFIG_ALLOW_SYSTEM_LIBS
check_eq "pkg-config --modversion mor" "$(pkg-config --modversion mor 2>&1)" "$MOR_VERSION"
CFLAGS_MOR=$(pkg-config --cflags mor)
LIBS_MOR=$(pkg-config --libs mor)
LIBS_STATIC=$(pkg-config --static --libs mor)
note "cflags: $CFLAGS_MOR"
note "libs: $LIBS_MOR"
note "libs --static: $LIBS_STATIC"
case " $LIBS_STATIC " in
    *" -lm "*) ok "pkg-config --static adds -lm (Libs.private)" ;;
    *) fail "pkg-config --static adds -lm (Libs.private)" ;;
esac

cat > "$TMP/consumer.c" <<'CEOF'
#include <mor.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    const char *v = mor_version_string();
    printf("%s\n", v ? v : "(null)");
    return v == NULL || strcmp(v, MOR_VERSION_STRING) != 0 ||
           mor_version_number() != (unsigned)MOR_VERSION_NUMBER;
}
CEOF

# Shared: the installed libmor.so, found at run time through LD_LIBRARY_PATH.
check "shared: cc consumer.c \$(pkg-config --cflags --libs mor)" \
    $CC -std=c99 -Wall -Werror $SAN_FLAGS "$TMP/consumer.c" $CFLAGS_MOR $LIBS_MOR -o "$TMP/consumer_shared"
if [ -x "$TMP/consumer_shared" ]; then
    needed=$(readelf -d "$TMP/consumer_shared" | sed -n 's/.*(NEEDED).*\[\(libmor[^]]*\)\].*/\1/p')
    check_eq "shared: the program needs libmor.so.$MOR_SOVER" "$needed" "libmor.so.$MOR_SOVER"
    check_eq "shared: mor_version_string() from the installed library" \
        "$(LD_LIBRARY_PATH=$L "$TMP/consumer_shared" 2>&1)" "$MOR_VERSION"
else
    fail "shared: consumer not built"
fi

# Static: the same flags with --static, -lmor pinned to libmor.a (the
# directory also holds libmor.so, which -lmor would prefer).
LIBS_A=
for w in $LIBS_STATIC; do
    [ "$w" = -lmor ] && w=-l:libmor.a
    LIBS_A="$LIBS_A $w"
done
check "static: cc consumer.c \$(pkg-config --static --cflags --libs mor)" \
    $CC -std=c99 -Wall -Werror $SAN_FLAGS "$TMP/consumer.c" $CFLAGS_MOR $LIBS_A -o "$TMP/consumer_static"
if [ -x "$TMP/consumer_static" ]; then
    needed=$(readelf -d "$TMP/consumer_static" | sed -n 's/.*(NEEDED).*\[\(libmor[^]]*\)\].*/\1/p')
    check_eq "static: the program does not need libmor.so" "${needed:-none}" none
    check_eq "static: mor_version_string() runs without LD_LIBRARY_PATH" \
        "$("$TMP/consumer_static" 2>&1)" "$MOR_VERSION"
else
    fail "static: consumer not built"
fi

check "make uninstall DESTDIR=\$tmp PREFIX=/usr" mk uninstall DESTDIR="$DEST" PREFIX=/usr
left=$(cd "$DEST" && find . ! -type d | sort | tr '\n' ' ')
check_eq "uninstall leaves no file behind" "${left:-none}" none

finish
