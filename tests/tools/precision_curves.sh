#!/usr/bin/env bash
# The loss-curve bounds of docs/precision.md ("Loss curves") on a short run: a small GPT
# trained 40 iterations from the same seed on the same samples in fp32, bf16, fp16 and fp8
# (hybrid, delayed, inside bf16); the mean lm loss over the last 10 iterations of each
# narrow run must be within its bound of fp32's, and each must differ from fp32 (the
# precision is in effect) and have learned (the loss fell by more than 1.5 nats).
# Yardstick: fp32 from another seed (weights and data order) must differ from fp32 by more
# than every bound, so the bounds are tighter than what a reseed changes, and can fail.
#   precision_curves.sh MGRAPH_RUN CORPUS WORK_DIR
# bf16 and fp8 use the portable kernels (MG_CPU_BF16=emulate; no AVX512-BF16 needed).
set -u
RUN=$1 CORPUS=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
export MG_CPU_BF16=emulate
ITERS=40 LAST=10
MODEL=(--text-file "$CORPUS" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
       --micro-batch-size 4 --global-batch-size 4 --train-iters $ITERS --lr 3e-3 --min-lr 3e-4
       --lr-decay-style cosine --lr-warmup-iters 4 --log-interval 10 --eval-iters 0)
# The bounds on |mean(last 10) - fp32's| in nats. fp16 starts from a loss scale of 2^12
# (Megatron's default 2^32 would skip its first 16 of these 40 iterations: the 500-iteration
# curves use the default); what it skips is counted and checked below.
declare -A BOUND=([bf16]=0.002 [fp16]=0.002 [fp8]=0.002)
declare -A FLAGS=([fp32]="--seed 7" [seed2]="--seed 8" [bf16]="--seed 7 --bf16"
                  [fp16]="--seed 7 --fp16 --initial-loss-scale 4096"
                  [fp8]="--seed 7 --bf16 --fp8-format hybrid --fp8-recipe delayed")
losses() { sed -n 's/.*"iteration": \([0-9]*\), "lm_loss": \([-0-9.e+]*\),.*/\1 \2/p' "$1"; }
for p in fp32 seed2 bf16 fp16 fp8; do
    # shellcheck disable=SC2086 # the flag list splits into words
    "$RUN" "${MODEL[@]}" ${FLAGS[$p]} --metrics-file $p.jsonl > $p.txt 2>&1 || { cat $p.txt; fail "$p run"; }
    losses $p.jsonl > $p.c
    [ "$(wc -l < $p.c)" -eq $ITERS ] || { cat $p.txt; fail "$p: want $ITERS iterations with a loss"; }
done
# mean over the last LAST iterations
mean() { awk -v n=$ITERS -v k=$LAST '$1 > n - k { s += $2; c++ } END { printf "%.6f", s / c }' "$1"; }
ref=$(mean fp32.c)
dist() { awk -v a="$(mean "$1")" -v b="$ref" 'BEGIN { d = a - b; printf "%.6f", d < 0 ? -d : d }'; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
report="fp32 $ref"
for p in bf16 fp16 fp8; do
    d=$(dist $p.c)
    report+=", $p +-$d (bound ${BOUND[$p]})"
    gt "$d" "${BOUND[$p]}" && { paste fp32.c $p.c | tail -n $LAST; fail "$p: mean loss over the last $LAST iterations $(mean $p.c), $d from fp32's $ref: beyond ${BOUND[$p]}"; }
    cmp -s $p.c fp32.c && fail "$p: every loss equals fp32's: the precision is not in effect"
    awk 'NR == 1 { f = $2 } END { exit !($2 < f - 1.5) }' $p.c || { cat $p.c; fail "$p: the loss did not fall by 1.5"; }
done
skipped=$(grep -c "\"skipped\": true" fp16.jsonl)
[ "$skipped" -le 4 ] || fail "fp16 skipped $skipped iterations from a loss scale of 2^12 (expected at most 4)"
d=$(dist seed2.c)
for p in bf16 fp16 fp8; do
    gt "$d" "${BOUND[$p]}" || fail "fp32 from another seed is only $d from fp32: the $p bound ${BOUND[$p]} is not tighter than a reseed"
done
echo "ok: mean lm loss over iterations $((ITERS - LAST + 1))-$ITERS: $report; fp16 skipped $skipped; another seed +-$d"
