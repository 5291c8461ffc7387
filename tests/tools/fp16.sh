#!/usr/bin/env bash
# mgraph-run --fp16: Megatron's fp16 mixed precision with its loss scaler
# (mgraph/precision.h): fp16 model copies of the parameters, fp16 activations and
# gradients, fp32 main parameters and Adam moments; the loss multiplied by the loss scale
# before backward, the gradients unscaled before clipping, a step whose gradients
# overflowed skipped.
#   fp16.sh MGRAPH_RUN CORPUS WORK_DIR CASE
# CASE numerics: at a scale that never overflows here, every iteration's loss and
#   gradient norm within 1% of the fp32 run's, not equal to them (the rounding is in
#   effect), reproducible bit for bit, the loss falls; no iteration skipped.
# CASE skip: a scale of 2^22 overflows fp16's gradients: with --hysteresis 1 every
#   overflow halves the scale (the log's "loss scale" column) and is skipped ("number of
#   skipped iterations: 1", no grad norm, the params norm unchanged), until the scale
#   fits and the updates resume (the params norm moves); with the default hysteresis 2
#   the first overflow keeps the scale and the second halves it.
# CASE window: --loss-scale-window 2 doubles a scale that does not overflow every two
#   iterations; --loss-scale keeps a constant scale.
# CASE parallel: under mpirun, dp 2 and tp 2 (+SP) skip the same iterations at the same
#   scales as the serial --fp16 run, and give its losses and grad norms within 1e-3.
# CASE resume: a run saved at iteration 5 and resumed to 10 logs what the uninterrupted
#   run logs (losses, scales, skips: the scaler's state and the skipped count are in the
#   checkpoint).
# CASE flags: --fp16 with --bf16, a loss-scale flag without --fp16, bad scaler settings
#   and --grad-reduce-in-bf16 with --fp16 exit 2 naming the flags.
set -u
RUN=$1 CORPUS=$2 WORK=$3 CASE=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $CASE: $*"; exit 1; }
MODEL=(--text-file "$CORPUS" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --train-iters 8 --lr 3e-3 --lr-warmup-iters 1 --log-interval 1
       --hidden-dropout 0.1 --attention-dropout 0.1 --eval-iters 0 --seed 5)
# "iteration loss grad-norm" per logged iteration that updated (a skipped one has no grad norm)
curve() { sed -n 's/.* iteration *\([0-9]*\)\/.*lm loss: \([-0-9.E+]*\) .*grad norm: \([0-9.]*\) .*/\1 \2 \3/p' "$1"; }
# "iteration loss-scale skipped params-norm" per logged iteration (params norm "-" without it)
scales() {
    sed -n 's/.* iteration *\([0-9]*\)\/.*loss scale: \([0-9.]*\) |.*number of skipped iterations: *\([0-9]*\) .*/\1 \2 \3/p' "$1" |
        paste -d' ' - <(sed -n 's/.* iteration *[0-9]*\/.*/&/p' "$1" | sed 's/.*params norm: \([0-9.]*\) .*/\1/; t; s/.*/-/')
}
within() {
    paste "$1" "$2" | awk -v r="$3" '
        NF != 6 || $1 != $4 { bad = 1; exit }
        { for (k = 2; k <= 3; k++) { d = $k - $(k + 3); if (d < 0) d = -d; s = $(k + 3) < 0 ? -$(k + 3) : $(k + 3);
              if (d > r * s + 1e-12) { printf "iteration %d: %s vs %s\n", $1, $k, $(k + 3); bad = 1 } } }
        END { exit bad }'
}

case $CASE in
numerics)
    "$RUN" "${MODEL[@]}" > fp32.txt 2>&1 || { cat fp32.txt; fail "fp32 run"; }
    "$RUN" "${MODEL[@]}" --fp16 --initial-loss-scale 1024 > fp16.txt 2>&1 || { cat fp16.txt; fail "fp16 run"; }
    "$RUN" "${MODEL[@]}" --fp16 --initial-loss-scale 1024 > fp16b.txt 2>&1 || { cat fp16b.txt; fail "second fp16 run"; }
    curve fp32.txt > fp32.c; curve fp16.txt > fp16.c; curve fp16b.txt > fp16b.c
    [ "$(wc -l < fp16.c)" -eq 8 ] && [ "$(wc -l < fp32.c)" -eq 8 ] || { cat fp16.txt; fail "want 8 updates logged"; }
    grep -q "number of skipped iterations:   0" fp16.txt && ! grep -q "number of skipped iterations: *[1-9]" fp16.txt ||
        { cat fp16.txt; fail "an iteration was skipped at scale 1024"; }
    within fp16.c fp32.c 0.01 || fail "fp16 beyond 1% of fp32"
    cmp -s fp16.c fp32.c && fail "fp16 run equals the fp32 run: nothing was rounded"
    cmp -s fp16.c fp16b.c || { paste fp16.c fp16b.c; fail "two fp16 runs differ"; }
    awk 'NR == 1 { first = $2 } END { exit !($2 < first - 0.3) }' fp16.c || { cat fp16.c; fail "loss did not fall"; }
    paste fp16.c fp32.c | awk '{ d = ($2 - $5) / $5; if (d < 0) d = -d; if (d > m) m = d;
                                 g = ($3 - $6) / $6; if (g < 0) g = -g; if (g > n) n = g }
                               END { printf "ok: fp16 within 1%% of fp32 (worst loss %.2e, grad norm %.2e relative), not equal to it, reproducible\n", m, n }' ;;
skip)
    # (no warm-up: the first update moves the parameters)
    "$RUN" "${MODEL[@]}" --lr-warmup-iters 0 --train-iters 14 --fp16 --initial-loss-scale 4194304 --hysteresis 1 --log-params-norm \
        > h1.txt 2>&1 || { cat h1.txt; fail "hysteresis 1 run"; }
    scales h1.txt > h1.s
    [ "$(wc -l < h1.s)" -eq 14 ] || { cat h1.txt; fail "want 14 log lines"; }
    # params norm before the first iteration: the first update's line shows it moved
    awk -v init=4194304 '
        { scale[NR] = $2; skip[NR] = $3; pn[NR] = $4 }
        END {
            prev = init; prevpn = ""; nskip = 0; nupd = 0
            for (i = 1; i <= NR; i++) {
                if (skip[i] == 1) {
                    nskip++
                    if (nupd > 0) { print "iteration " i " skipped after updates had resumed"; exit 1 }
                    if (scale[i] != prev / 2) { print "iteration " i ": scale " scale[i] " after " prev ", want half"; exit 1 }
                    if (prevpn != "" && pn[i] != prevpn) { print "iteration " i ": skipped, params norm moved"; exit 1 }
                } else {
                    nupd++
                    if (scale[i] != prev) { print "iteration " i ": scale changed without an overflow"; exit 1 }
                    if (pn[i] == prevpn) { print "iteration " i ": updated, params norm did not move"; exit 1 }
                }
                prev = scale[i]; prevpn = pn[i]
            }
            if (nskip < 3 || nupd < 3) { print nskip " skipped, " nupd " updated: want at least 3 of each"; exit 1 }
            printf "hysteresis 1: %d overflows each halving the scale to %s, then %d updates\n", nskip, prev, nupd
        }' h1.s || { cat h1.txt; fail "hysteresis 1"; }
    grep -q "grad norm" <(grep "number of skipped iterations:   1" h1.txt) && fail "a skipped iteration logs a grad norm"
    "$RUN" "${MODEL[@]}" --train-iters 3 --fp16 --initial-loss-scale 4194304 > h2.txt 2>&1 ||
        { cat h2.txt; fail "hysteresis 2 run"; }
    scales h2.txt > h2.s
    printf '1 4194304.0 1 -\n2 2097152.0 1 -\n3 1048576.0 1 -\n' | cmp -s - h2.s ||
        { cat h2.s; fail "hysteresis 2: want the scale kept at the first overflow, halved at the second and third"; }
    echo "ok: overflows skip the step and back off the scale (hysteresis 1 and 2)" ;;
window)
    "$RUN" "${MODEL[@]}" --train-iters 6 --fp16 --initial-loss-scale 256 --loss-scale-window 2 > w.txt 2>&1 ||
        { cat w.txt; fail "window run"; }
    scales w.txt | cut -d' ' -f1-3 > w.s
    printf '1 256.0 0\n2 512.0 0\n3 512.0 0\n4 1024.0 0\n5 1024.0 0\n6 2048.0 0\n' | cmp -s - w.s ||
        { cat w.s; fail "want the scale doubled every 2 iterations"; }
    "$RUN" "${MODEL[@]}" --train-iters 4 --fp16 --loss-scale 1024 --loss-scale-window 1 > c.txt 2>&1 ||
        { cat c.txt; fail "constant run"; }
    scales c.txt | cut -d' ' -f1-3 > c.s
    printf '1 1024.0 0\n2 1024.0 0\n3 1024.0 0\n4 1024.0 0\n' | cmp -s - c.s || { cat c.s; fail "want a constant 1024"; }
    echo "ok: the scale doubles after each window without an overflow; --loss-scale stays" ;;
parallel)
    FP16=(--fp16 --initial-loss-scale 1048576 --hysteresis 1 --loss-scale-window 3 --train-iters 10)
    "$RUN" "${MODEL[@]}" "${FP16[@]}" > serial.txt 2>&1 || { cat serial.txt; fail "serial run"; }
    curve serial.txt > serial.c
    scales serial.txt | cut -d' ' -f1-3 > serial.s
    grep -q ' 1$' serial.s && grep -q ' 0$' serial.s || { cat serial.s; fail "want skipped and updated iterations"; }
    for plan in "" "--tensor-model-parallel-size 2 --sequence-parallel"; do
        # shellcheck disable=SC2086 # the plan is several flags
        mpirun -np 2 "$RUN" "${MODEL[@]}" "${FP16[@]}" $plan > par.txt 2>&1 || { cat par.txt; fail "${plan:-dp 2}"; }
        curve par.txt > par.c
        scales par.txt | cut -d' ' -f1-3 > par.s
        cmp -s par.s serial.s || { paste par.s serial.s; fail "${plan:-dp 2}: other skips or scales than serial"; }
        within par.c serial.c 1e-3 || fail "${plan:-dp 2} with --fp16 differs from the serial --fp16 run"
    done
    echo "ok: dp 2 and tp 2 + SP skip the serial run's iterations at its scales ($(grep -c ' 1$' serial.s) skipped of 10)," \
         "losses and grad norms within 1e-3" ;;
resume)
    FP16=(--fp16 --initial-loss-scale 1048576 --hysteresis 2 --loss-scale-window 3 --lr-decay-iters 10)
    "$RUN" "${MODEL[@]}" "${FP16[@]}" --train-iters 10 > full.txt 2>&1 || { cat full.txt; fail "uninterrupted run"; }
    "$RUN" "${MODEL[@]}" "${FP16[@]}" --train-iters 5 --save ck > a.txt 2>&1 || { cat a.txt; fail "first half"; }
    "$RUN" "${MODEL[@]}" "${FP16[@]}" --train-iters 10 --load ck > b.txt 2>&1 || { cat b.txt; fail "resumed half"; }
    # "iteration loss scale skipped" (loss "-" on a line whose iterations were all skipped)
    row() { sed -n '/ iteration *[0-9]*\//{s/.*lm loss: \([-0-9.E+]*\) |.*/\1/;t l;s/.*/-/;:l;p}' "$1" | paste -d' ' <(scales "$1" | cut -d' ' -f1-3) -; }
    row full.txt > full.r
    cat <(row a.txt) <(row b.txt) > split.r
    awk '$3 == 1 { s = 1 } END { exit !s }' full.r || { cat full.r; fail "want skipped iterations"; }
    cmp -s full.r split.r || { paste full.r split.r; fail "the resumed run differs from the uninterrupted one"; }
    echo "ok: saved at 5 and resumed, the run logs the uninterrupted run's losses, scales and skips" ;;
flags)
    bad() { # bad EXPECTED-MESSAGE FLAGS...: exit 2 naming the flag
        local want=$1
        shift
        "$RUN" "${MODEL[@]}" --dry-run "$@" > out.txt 2> err.txt
        [ $? -eq 2 ] && grep -qF -- "$want" err.txt || { cat err.txt; fail "$*: want exit 2 and '$want'"; }
    }
    bad "--fp16 and --bf16 cannot both be given" --fp16 --bf16
    for f in "--loss-scale 1024" "--initial-loss-scale 1024" "--min-loss-scale 2" "--loss-scale-window 10" "--hysteresis 3"; do
        # shellcheck disable=SC2086 # the flag and its value
        bad "${f% *} needs --fp16" $f
    done
    bad "--hysteresis needs --fp16" --bf16 --hysteresis 3
    bad "the minimum loss scale must be positive and at most the initial loss scale" --fp16 --initial-loss-scale 4 \
        --min-loss-scale 8
    bad "the hysteresis must be at least 1" --fp16 --hysteresis 0
    bad "the loss-scale window must be at least 1" --fp16 --loss-scale-window 0
    bad "--loss-scale -1: want a positive number" --fp16 --loss-scale -1
    bad "--grad-reduce-in-bf16 needs --bf16, not --fp16" --fp16 --grad-reduce-in-bf16
    bad "--bf16 with --use-megatron-fsdp is not supported yet" --bf16 --use-megatron-fsdp
    "$RUN" "${MODEL[@]}" --dry-run --fp16 > out.txt 2> err.txt || { cat err.txt; fail "--fp16 alone"; }
    echo "ok: the loss-scale flags' bad combinations exit 2 naming the flags" ;;
*) fail "unknown case" ;;
esac
