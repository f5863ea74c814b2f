#!/bin/sh
# tests/peer/run.sh - regenerate tests/data/families/ from llama.cpp (the
# peer): for each family, the test model of tests/family_ref.py written as a
# llama.cpp GGUF by llama.cpp's own gguf-py (make_gguf.py), and llama.cpp's
# logits for the fixed token ids (llama_logits.c against libllama). Not part
# of make test, which checks libmor against the numbers kept here.
#
#   LLAMA_CPP=/path/to/llama.cpp sh tests/peer/run.sh
#
# LLAMA_CPP is a llama.cpp checkout built with CMake into $LLAMA_CPP/build
# (libllama.so in build/bin); PYTHON (default /usr/bin/python3) must have
# numpy (Debian: python3-numpy). See tests/peer/README.md.
set -e
cd "$(dirname "$0")/../.."
: "${LLAMA_CPP:?set LLAMA_CPP to a built llama.cpp checkout}"
PYTHON=${PYTHON:-/usr/bin/python3}
CC=${CC:-cc}
OUT=tests/data/families
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
LIB=$LLAMA_CPP/build/bin
$CC -O2 -o "$TMP/llama_logits" tests/peer/llama_logits.c -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" \
    -L"$LIB" -lllama -Wl,-rpath,"$LIB"
IDS=$(python3 -c 'import sys; sys.path.insert(0, "tests"); import family_ref; print(",".join(map(str, family_ref.IDS)))')
COMMIT=$(git -C "$LLAMA_CPP" rev-parse --short=8 HEAD 2>/dev/null || echo unknown)
mkdir -p "$OUT"
for f in llama gemma gemma2 gptneox; do
    PYTHONPATH="$LLAMA_CPP/gguf-py" "$PYTHON" tests/peer/make_gguf.py "$f" "$OUT/$f.lcpp.gguf"
    {
        echo "# llama.cpp $COMMIT logits of $f.lcpp.gguf for ids $IDS (F32, F32 KV cache, 1 thread): one row per position"
        "$TMP/llama_logits" "$OUT/$f.lcpp.gguf" "$IDS"
    } > "$OUT/$f.lcpp.logits"
    echo "wrote $OUT/$f.lcpp.gguf and $OUT/$f.lcpp.logits"
done
# llama.cpp's looped Llama (nanbeige): the llama model's weights in each
# variant of family_ref.NANBEIGE, llama.cpp's logits of the fixed ids and its
# greedy continuation of their first 5 (7 tokens, one decode per token)
NB=$(python3 -c 'import sys; sys.path.insert(0, "tests"); import family_ref; print(" ".join(family_ref.NANBEIGE))')
PROMPT=$(python3 -c 'import sys; sys.path.insert(0, "tests"); import family_ref; print(",".join(map(str, family_ref.IDS[:5])))')
for v in $NB; do
    f=nanbeige-$v
    PYTHONPATH="$LLAMA_CPP/gguf-py" "$PYTHON" tests/peer/make_nanbeige.py "$v" "$OUT/$f.lcpp.gguf"
    {
        echo "# llama.cpp $COMMIT logits of $f.lcpp.gguf for ids $IDS (F32, F32 KV cache, 1 thread): one row per position"
        "$TMP/llama_logits" "$OUT/$f.lcpp.gguf" "$IDS"
    } > "$OUT/$f.lcpp.logits"
    {
        echo "# llama.cpp $COMMIT greedy ids of $f.lcpp.gguf after ids $PROMPT (F32 KV cache, 1 thread)"
        "$TMP/llama_logits" "$OUT/$f.lcpp.gguf" "$PROMPT" 7
    } > "$OUT/$f.lcpp.greedy"
    echo "wrote $OUT/$f.lcpp.gguf, .logits and .greedy"
done
# k-quants: the llama model at family_ref.K256 quantized by llama-quantize
# (its defaults for each type), and llama.cpp's logits of each file
PYTHONPATH="$LLAMA_CPP/gguf-py" "$PYTHON" tests/peer/make_gguf.py llama-k256 "$TMP/k256.f32.gguf"
for q in Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K; do
    l=$(echo "$q" | tr 'A-Z' 'a-z')
    "$LIB/llama-quantize" "$TMP/k256.f32.gguf" "$OUT/llama-k256.$l.lcpp.gguf" "$q" >"$TMP/quantize.log" 2>&1 ||
        { cat "$TMP/quantize.log"; exit 1; }
    {
        echo "# llama.cpp $COMMIT logits of llama-k256.$l.lcpp.gguf for ids $IDS (F32 KV cache, 1 thread): one row per position"
        "$TMP/llama_logits" "$OUT/llama-k256.$l.lcpp.gguf" "$IDS"
    } > "$OUT/llama-k256.$l.lcpp.logits"
    echo "wrote $OUT/llama-k256.$l.lcpp.gguf and $OUT/llama-k256.$l.lcpp.logits"
done
