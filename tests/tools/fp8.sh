#!/usr/bin/env bash
# mgraph-run --fp8-format: Transformer Engine's fp8 for the linear layers' products
# (mgraph/fp8.h) inside --bf16 (the portable kernels here: MG_CPU_BF16=emulate).
#   fp8.sh MGRAPH_RUN CORPUS WORK_DIR CASE
# CASE numerics: hybrid fp8 with the delayed and the tensorwise recipe: every iteration's
#   loss and gradient norm within 3% of the bf16 run's, not equal (fp8 is in effect), the
#   two recipes differ, reproducible bit for bit, the loss falls; e4m3 with a history,
#   max and a margin too, from its second iteration (the first quantises gradients to
#   E4M3 at scale 1).
# CASE parallel: under mpirun, dp 2 gives the serial fp8 run's losses and grad norms within
#   1e-4 and tp 2 + SP within 5e-3 (delayed scaling: every rank's amaxes MAX-reduced; tp's
#   partial products flip some fp8 roundings: 1.4e-3 seen on a grad norm).
# CASE flags: recipe flags without --fp8-format, block-scaled recipes, --fp8-param-gather
#   and bad history lengths / margins exit 2 naming the flags.
set -u
RUN=$1 CORPUS=$2 WORK=$3 CASE=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $CASE: $*"; exit 1; }
export MG_CPU_BF16=emulate
MODEL=(--text-file "$CORPUS" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --train-iters 8 --lr 3e-3 --lr-warmup-iters 1 --log-interval 1
       --eval-iters 0 --seed 5 --bf16)
curve() { sed -n 's/.* iteration *\([0-9]*\)\/.*lm loss: \([-0-9.E+]*\) .*grad norm: \([0-9.]*\) .*/\1 \2 \3/p' "$1"; }
within() {
    paste "$1" "$2" | awk -v r="$3" '
        NF != 6 || $1 != $4 { bad = 1; exit }
        { for (k = 2; k <= 3; k++) { d = $k - $(k + 3); if (d < 0) d = -d; s = $(k + 3) < 0 ? -$(k + 3) : $(k + 3);
              if (d > r * s + 1e-12) { printf "iteration %d: %s vs %s\n", $1, $k, $(k + 3); bad = 1 } } }
        END { exit bad }'
}
worst() { paste "$1" "$2" | awk '{ d = ($2 - $5) / $5; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.2e", m }'; }

case $CASE in
numerics)
    "$RUN" "${MODEL[@]}" > bf16.txt 2>&1 || { cat bf16.txt; fail "bf16 run"; }
    "$RUN" "${MODEL[@]}" --fp8-format hybrid > d.txt 2>&1 || { cat d.txt; fail "delayed run"; }
    "$RUN" "${MODEL[@]}" --fp8-format hybrid > d2.txt 2>&1 || { cat d2.txt; fail "second delayed run"; }
    "$RUN" "${MODEL[@]}" --fp8-format hybrid --fp8-recipe tensorwise > t.txt 2>&1 || { cat t.txt; fail "tensorwise run"; }
    "$RUN" "${MODEL[@]}" --fp8-format e4m3 --fp8-amax-history-len 4 --fp8-amax-compute-algo max --fp8-margin 1 \
        > e.txt 2>&1 || { cat e.txt; fail "e4m3 run"; }
    for f in bf16 d d2 t e; do curve $f.txt > $f.c; [ "$(wc -l < $f.c)" -eq 8 ] || { cat $f.txt; fail "$f: want 8 iterations"; }; done
    # (e4m3 quantises the first step's gradients at scale 1, TE's initial scale, where most
    # are E4M3 subnormals or zero: its first grad norm is 12% low; from the second step on
    # the scales follow the amaxes)
    tail -n +2 e.c > e2.c && tail -n +2 bf16.c > bf16_2.c
    within e2.c bf16_2.c 0.03 || fail "e4m3: beyond 3% of bf16 after the first step"
    for f in d t e; do
        [ $f = e ] || within $f.c bf16.c 0.03 || fail "$f: beyond 3% of bf16"
        cmp -s $f.c bf16.c && fail "$f equals the bf16 run: nothing was fp8"
        awk 'NR == 1 { first = $2 } END { exit !($2 < first - 0.3) }' $f.c || { cat $f.c; fail "$f: loss did not fall"; }
    done
    cmp -s d.c d2.c || { paste d.c d2.c; fail "two delayed runs differ"; }
    cmp -s d.c t.c && fail "the delayed and tensorwise recipes gave the same run"
    echo "ok: fp8 within 3% of bf16 (worst loss: delayed $(worst d.c bf16.c), tensorwise $(worst t.c bf16.c)," \
         "e4m3 with history / max / margin $(worst e.c bf16.c)), not equal, recipes differ, reproducible" ;;
parallel)
    FP8=(--fp8-format hybrid --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
    "$RUN" "${MODEL[@]}" "${FP8[@]}" > serial.txt 2>&1 || { cat serial.txt; fail "serial run"; }
    curve serial.txt > serial.c
    mpirun -np 2 "$RUN" "${MODEL[@]}" "${FP8[@]}" > dp.txt 2>&1 || { cat dp.txt; fail "dp 2"; }
    curve dp.txt > dp.c
    within dp.c serial.c 1e-4 || fail "dp 2 differs from the serial fp8 run"
    mpirun -np 2 "$RUN" "${MODEL[@]}" "${FP8[@]}" --tensor-model-parallel-size 2 --sequence-parallel > tp.txt 2>&1 ||
        { cat tp.txt; fail "tp 2"; }
    curve tp.txt > tp.c
    within tp.c serial.c 5e-3 || fail "tp 2 + SP differs from the serial fp8 run"
    echo "ok: fp8 under dp 2 (worst loss $(worst dp.c serial.c)) and tp 2 + SP ($(worst tp.c serial.c)) as the serial run" ;;
flags)
    bad() { # bad EXPECTED-MESSAGE FLAGS...: exit 2 naming the flag
        local want=$1
        shift
        "$RUN" "${MODEL[@]}" --dry-run "$@" > out.txt 2> err.txt
        [ $? -eq 2 ] && grep -qF -- "$want" err.txt || { cat err.txt; fail "$*: want exit 2 and '$want'"; }
    }
    for f in "--fp8-recipe tensorwise" "--fp8-margin 1" "--fp8-amax-history-len 16" "--fp8-amax-compute-algo max"; do
        # shellcheck disable=SC2086 # the flag and its value
        bad "${f% *} needs --fp8-format" $f
    done
    bad "--fp8-recipe mxfp8 is not supported" --fp8-format e4m3 --fp8-recipe mxfp8
    bad "--fp8-recipe blockwise is not supported" --fp8-format e4m3 --fp8-recipe blockwise
    bad "--fp8-format must be one of" --fp8-format e5m2
    bad "--fp8-param-gather is not supported" --fp8-format hybrid --fp8-param-gather
    bad "--fp8-amax-history-len must be in 1.." --fp8-format hybrid --fp8-amax-history-len 0
    bad "--fp8-margin must be in 0..64" --fp8-format hybrid --fp8-margin -1
    "$RUN" "${MODEL[@]}" --dry-run --fp8-format hybrid --fp8-recipe tensorwise --fp8-margin 2 > out.txt 2> err.txt ||
        { cat err.txt; fail "tensorwise with a margin"; }
    grep -qF -- "--fp8-margin has no effect with --fp8-recipe tensorwise" err.txt || { cat err.txt; fail "no warning"; }
    echo "ok: fp8's bad combinations exit 2 naming the flags" ;;
*) fail "unknown case" ;;
esac
