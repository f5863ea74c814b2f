#!/bin/sh
# bindings/rust/gen-bindings.sh [OUT] - the raw Rust bindings of include/mor.h,
# made by bindgen (Debian: apt-get install bindgen), to OUT (default stdout).
# `make rust-bindings` writes mor-sys/src/bindings.rs, which is committed;
# tests/test_rust.sh fails when the committed file differs from a fresh run.
# The flags live here only, so that both always agree.
set -e
out=${1:-/dev/stdout}
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
cd "$(dirname "$0")/../.."
command -v bindgen >/dev/null 2>&1 || { echo "gen-bindings.sh: bindgen not found (Debian: apt-get install bindgen)" >&2; exit 2; }
bindgen include/mor.h \
    --allowlist-function 'mor_.*' --allowlist-type 'mor_.*' --allowlist-var 'MOR_.*' \
    --size_t-is-usize --translate-enum-integer-types \
    -o "$out" -- -Iinclude
