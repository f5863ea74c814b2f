#!/bin/sh
# scripts/compare.sh - a small reproduction of the MoR paper's claim at equal
# training compute (docs/TRAINING.md): a vanilla Llama, a recursive model (the
# same middle-cycle shared block, no routing) and MoR (expert-choice, N_r = 3,
# middle-cycle) of the same unrolled depth (8 layers), trained from scratch on
# the same data with the same tokenizer, each until its training FLOPs reach
# BUDGET. The step count of each run is set from its FLOPs per step, so that
# every cosine schedule ends at the budget. Prints a Markdown table.
#
#   sh scripts/compare.sh            (after `make data build/data/brown-vocab.gguf`)
#   BUDGET=8e12 THREADS=1 OUTD=build/compare sh scripts/compare.sh
#   ONLY=mor ...                     one of the runs (to run them side by side);
#                                    the table lists the runs whose results exist
set -eu
BIN=${BIN:-bin}
DATA=${DATA:-build/data}
OUTD=${OUTD:-build/compare}
BUDGET=${BUDGET:-8e12}
THREADS=${THREADS:-1}
mkdir -p "$OUTD"
SHAPE="--d 192 --ff 512 --heads 4 --kv-heads 2 --batch 16 --seq 128 --lr 3e-3 --warmup 20 --schedule cosine --seed 1"
TRAIN="--data $DATA/brown-train.txt --vocab $DATA/brown-vocab.gguf --threads $THREADS -q"

run() {
    name=$1
    shift
    case " ${ONLY:-vanilla recursive mor} " in *" $name "*) ;; *) return 0 ;; esac
    if [ -f "$OUTD/$name.result" ]; then return 0; fi
    one=$("$BIN/mor-train" $TRAIN $SHAPE "$@" -o "$OUTD/$name-probe.gguf" --steps 1 --save-every 0 2>/dev/null |
          sed -n 's/.*train_flops=\([^ ]*\).*/\1/p')
    rm -f "$OUTD/$name-probe.gguf" "$OUTD/$name-probe.gguf.opt"
    steps=$(awk -v b="$BUDGET" -v f="$one" 'BEGIN { printf "%d", b / f + 0.999 }')
    echo "compare: $name: $one FLOPs per step, $steps steps" >&2
    "$BIN/mor-train" $TRAIN --val "$DATA/brown-val.txt" $SHAPE "$@" -o "$OUTD/$name.gguf" --steps "$steps" \
        --flops-budget "$BUDGET" --eval-every 0 --save-every 0 > "$OUTD/$name.tmp" 2> "$OUTD/$name.log"
    mv "$OUTD/$name.tmp" "$OUTD/$name.result"
}

run vanilla   --layers 8
run recursive --recursions 3 --block 2 --sharing middle_cycle --router none
run mor       --recursions 3 --block 2 --sharing middle_cycle --router expert \
              --capacity 1,0.6666666666666666,0.3333333333333333 --aux-coef 0.01

echo "| model | parameters | unrolled layers | steps | tokens | training FLOPs | held-out loss | held-out loss, THRESHOLD routing |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for name in vanilla recursive mor; do
    [ -f "$OUTD/$name.result" ] || continue
    params=$(sed -n 's/^mor-train: \([0-9]*\) parameters.*/\1/p' "$OUTD/$name.log")
    sed -n 's/^RESULT //p' "$OUTD/$name.result" | awk -v n="$name" -v p="$params" '{
        for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        thr = n == "mor" ? v["heldout_loss_threshold"] : "-"
        printf "| %s | %s | 8 | %s | %s | %.3g | %s | %s |\n", n, p, v["steps"], v["tokens"], v["train_flops"], v["heldout_loss"], thr
    }'
done
