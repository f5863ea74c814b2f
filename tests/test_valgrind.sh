#!/bin/sh
# tests/test_valgrind.sh - valgrind memcheck on the programs: the example
# (bin/example-simple), the generator (bin/mor-run) on fixtures, and the
# converter (bin/mor-convert) on both checkpoint formats with a tokenizer.
# Each run must show no invalid access, no use of uninitialised memory and
# no leak (definite, indirect or possible); failing runs (a truncated model, a
# missing file) must fail cleanly the same way. One counted skip when
# valgrind is not installed (Debian: valgrind), or under make test-sanitize,
# where the programs are ASan builds that valgrind cannot run (ASan checks
# them there instead).
. tests/testlib.sh

need_tool valgrind valgrind "memcheck of the programs" || finish
if [ "${SANITIZE:-0}" = 1 ]; then
    skip "memcheck under make test-sanitize: ASan and valgrind do not mix (ASan checks these programs there)"
    finish
fi

BIN=$OUT/bin
FIX=$OUT/build/fixtures
DATA=$ROOT/tests/data/fixtures

# vg DESCRIPTION EXPECTED_EXIT COMMAND...: memcheck COMMAND; valgrind's own
# errors exit 99, leaks included; any other status must be EXPECTED_EXIT.
vg() {
    _desc=$1
    _want=$2
    shift 2
    _log=$TMP/vg.$$.log
    valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
        --errors-for-leak-kinds=definite,indirect,possible --log-file="$_log" "$@" >"$TMP/out.txt" 2>"$TMP/err.txt"
    _rc=$?
    if [ "$_rc" = "$_want" ] && ! grep -q 'ERROR SUMMARY: [1-9]' "$_log"; then
        ok "$_desc (valgrind clean, exit $_rc)"
    else
        fail "$_desc (exit $_rc, want $_want)"
        head -n 30 "$_log" | sed 's/^/#   /'
        tail -n 5 "$TMP/err.txt" | sed 's/^/#   /'
    fi
}

vg "example-simple on a model with a tokenizer (prompt text, 6 tokens)" 0 \
    "$BIN/example-simple" "$ROOT/tests/fuzz/models/plain.gguf" "Hello world" 6
vg "example-simple on the expert-choice fixture (--ids, 8 tokens)" 0 \
    "$BIN/example-simple" "$FIX/expert_mc3_fix_perturbed.st.gguf" --ids 14,148,141,59 8
vg "mor-run: threshold routing, 8 tokens, depth shown" 0 \
    "$BIN/mor-run" -m "$FIX/expert_mc3_fix_perturbed.st.gguf" --ids 14,148,141,59,194 -n 8 \
    --routing threshold --show-depth -q
vg "mor-run: token-choice fixture, dumps of logits, routing and hidden states" 0 \
    "$BIN/mor-run" -m "$FIX/token_mc3_perturbed.st.gguf" --ids 14,148,141,59,194 \
    --dump-logits "$TMP/l.f32" --dump-routing "$TMP/r.json" --dump-hidden "$TMP/h.f32" -q
vg "mor-run: KV sharing fixture, --no-cache, 4 tokens" 0 \
    "$BIN/mor-run" -m "$FIX/expert_mc3_kvshare_fix_perturbed.st.gguf" --ids 1,2,3 -n 4 --no-cache -q
vg "mor-convert: torch checkpoint (pytorch_model.bin) with its mor_cfg.yaml" 0 \
    "$BIN/mor-convert" "$DATA/expert_mc3_fix_perturbed/hf_bin" -o "$TMP/bin.gguf"
vg "mor-convert: safetensors checkpoint, bf16" 0 \
    "$BIN/mor-convert" "$DATA/expert_mc3_bf16_perturbed/hf_safetensors" -o "$TMP/st.gguf"
vg "mor-convert --vocab-only: a tokenizer.json" 0 \
    "$BIN/mor-convert" --vocab-only "$ROOT/tests/data/convert/tok_smollm" -o "$TMP/tok.gguf"
printf 'Hello <|endoftext|> 123 caf\303\251 \377' >"$TMP/text.txt"
vg "mor-run --tokenize-file on the converted tokenizer" 0 "$BIN/mor-run" -m "$TMP/tok.gguf" --tokenize-file "$TMP/text.txt"
vg "mor-run: the converted torch checkpoint" 0 "$BIN/mor-run" -m "$TMP/bin.gguf" --ids 5,6,7 -n 3 -q

# Failing runs must fail without leaking.
head -c 5000 "$FIX/expert_mc3_fix_perturbed.st.gguf" >"$TMP/cut.gguf"
vg "mor-run on a truncated model fails cleanly" 1 "$BIN/mor-run" -m "$TMP/cut.gguf" --ids 1 -n 1 -q
vg "example-simple on a missing file fails cleanly" 1 "$BIN/example-simple" "$TMP/none.gguf" --ids 1 1
vg "mor-convert on a missing directory fails cleanly" 1 "$BIN/mor-convert" "$TMP/nothing" -o "$TMP/x.gguf"
# mor-run's error paths after the model is loaded free everything (each
# leaked the model and the context before).
M=$FIX/expert_mc3_fix_perturbed.st.gguf
vg "mor-run: a token id past the vocabulary (exit 2)" 2 "$BIN/mor-run" -m "$M" --ids 1,2,999999 -n 2
vg "mor-run: --threshold with more values than recursions (exit 2)" 2 \
    "$BIN/mor-run" -m "$M" --ids 1,2 --threshold 0.5,0.5,0.5,0.5 -n 2
vg "mor-run: a routing mode the model does not have" 1 "$BIN/mor-run" -m "$M" --ids 1,2 --routing token -n 2
vg "mor-run: a forced depth past the recursions" 1 "$BIN/mor-run" -m "$M" --ids 1,2 --routing forced:9 -n 2
vg "mor-run: a KV cache type the model cannot use" 1 "$BIN/mor-run" -m "$M" --ids 1,2 --kv-type q8_0 -n 2
vg "mor-run: a dump that cannot be written" 1 "$BIN/mor-run" -m "$M" --ids 1,2 --dump-logits "$TMP/no/dir/l.f32"
vg "mor-run: a prompt longer than the context, then generation past it (context shifts)" 0 \
    "$BIN/mor-run" -m "$ROOT/models/brown-mor.gguf" -p "The jury said that the city was large and the day was long" \
    -n 40 --max-pos 10 --keep 2 -q
vg "mor-run --no-cache past the context" 0 "$BIN/mor-run" -m "$M" --ids 1,2,3 -n 30 --max-pos 8 --no-cache -q
vg "mor-run: a prompt longer than the context under --no-context-shift" 1 \
    "$BIN/mor-run" -m "$M" --ids 1,2,3,4,5 -n 3 --max-pos 4 --no-context-shift
vg "mor-run --tokenize-file on a missing file" 1 "$BIN/mor-run" -m "$ROOT/models/brown-mor.gguf" \
    --tokenize-file "$TMP/none.txt"
finish
