#!/bin/sh
# test_train.sh - the training tools end to end on a small text (the
# repository's own docs): mor-tok-train, mor-train (expert-choice MoR),
# the model runs in mor-run with per-token depths, a resumed run is
# byte-identical to an uninterrupted one, the F16 export loads, and
# mor-depth-svg draws the depths. A few seconds.
. tests/testlib.sh
B=$OUT/bin
for t in mor-tok-train mor-train mor-run mor-depth-svg; do
    [ -x "$B/$t" ] || { fail "$B/$t not built"; finish; }
done
cat "$ROOT/docs/FORMAT.md" "$ROOT/include/mor.h" > "$TMP/train.txt"
cp "$ROOT/README.md" "$TMP/val.txt"

check "mor-tok-train learns a 400-token vocabulary" "$B/mor-tok-train" -q -i "$TMP/train.txt" -o "$TMP/v.gguf" --vocab 400
ARGS="--data $TMP/train.txt --val $TMP/val.txt --vocab $TMP/v.gguf --d 32 --ff 64 --heads 2 --kv-heads 1
      --recursions 3 --block 1 --router expert --batch 4 --seq 32 --lr 1e-2 --warmup 2 --threads 1
      --eval-every 10 --eval-tokens 2048 --save-every 0 -q"
# shellcheck disable=SC2086
"$B/mor-train" $ARGS --steps 20 -o "$TMP/a.gguf" --export-f16 "$TMP/a16.gguf" > "$TMP/a.out" 2> "$TMP/a.err"
check_eq "mor-train exits 0" "$?" 0
res=$(sed -n 's/^RESULT //p' "$TMP/a.out")
loss=$(echo "$res" | sed -n 's/.*heldout_loss=\([0-9.]*\).*/\1/p')
thr=$(echo "$res" | sed -n 's/.*heldout_loss_threshold=\([0-9.]*\).*/\1/p')
check "held-out loss ($loss) is below the uniform ln(400) = 5.99" awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 5.99) }'
check "held-out loss under THRESHOLD routing ($thr) is reported" awk -v l="$thr" 'BEGIN { exit !(l > 0 && l < 7) }'
check "evaluation lines show the THRESHOLD depth histogram" grep -q "THRESHOLD routing .*depth 1:" "$TMP/a.err"

# resume: one step (the FLOPs budget stops it), then the rest from the checkpoint == 20 straight
# shellcheck disable=SC2086
"$B/mor-train" $ARGS --steps 20 -o "$TMP/b.gguf" --flops-budget 1 > /dev/null 2>&1   # one step only
# shellcheck disable=SC2086
"$B/mor-train" $ARGS --steps 20 -o "$TMP/b.gguf" --resume > /dev/null 2>&1
check "a run resumed from its checkpoint and .opt sidecar writes the same file as the uninterrupted run" \
    cmp "$TMP/a.gguf" "$TMP/b.gguf"

out=$("$B/mor-run" -m "$TMP/a.gguf" -p "The model" -n 8 --routing threshold --show-depth --seed 1 -q 2>&1)
check_eq "mor-run generates from the trained model" "$?" 0
case $out in *\[1\]*|*\[2\]*|*\[3\]*) ok "mor-run shows per-token depths";; *) fail "no [d] depth marks in: $out";; esac
check "the F16 export loads and generates" "$B/mor-run" -m "$TMP/a16.gguf" -p "The" -n 4 -q
s32=$(wc -c < "$TMP/a.gguf"); s16=$(wc -c < "$TMP/a16.gguf")
check "the F16 export is smaller ($s16 < $s32 bytes)" test "$s16" -lt "$s32"

check "mor-depth-svg draws a held-out paragraph" "$B/mor-depth-svg" -m "$TMP/a.gguf" -f "$TMP/val.txt" -o "$TMP/d.svg"
check "the SVG has a box per token" sh -c "grep -q '^<svg' '$TMP/d.svg' && test \$(grep -c '<title>token' '$TMP/d.svg') -gt 100"
# shellcheck disable=SC2086
"$B/mor-train" $ARGS --steps 1 --init "$TMP/a.gguf" --lora-rank 4 -o "$TMP/c.gguf" > /dev/null 2> "$TMP/c.err"
check_eq "--lora-rank with --init is refused (the deltas come from the file)" "$?" 2
check "bad options are refused" sh -c "! '$B/mor-train' --data /nonexistent --vocab '$TMP/v.gguf' -o '$TMP/x.gguf' -q 2>/dev/null"
finish
