#!/usr/bin/env bash
# mgraph-run --bf16: matrix products with bf16 inputs and fp32 sums.
#   bf16.sh MGRAPH_RUN CORPUS WORK_DIR CASE
# CASE refused: on a CPU without AVX512-BF16, --bf16 stops with exit 2 and the reason;
#   a bad MG_CPU_BF16 is named.
# CASE numerics: with the portable kernel (MG_CPU_BF16=emulate, the native kernel's
#   bits) every iteration's loss and gradient norm stay within 1% of the fp32 run's,
#   differ from them (the rounding is in effect), the loss falls, and a second run gives
#   the same bits.
# CASE parallel: under mpirun, dp 2 and tp 2 (+SP) with --bf16 give the 1-rank --bf16
#   run's losses and gradient norms within 5e-5 relative. Each product of two bf16 is
#   exact in fp32, so splitting a product's K over ranks changes only the fp32 order of
#   the sums, as in fp32; but a last-bit difference in an fp32 value can then move its
#   rounding to bf16 by one bf16 step (2^-8 relative) in the next product, so the runs
#   drift apart faster than in fp32 (measured: 7.5e-6 at most over these 8 iterations,
#   against the 1e-5 of fp32 plans).
set -u
RUN=$1 CORPUS=$2 WORK=$3 CASE=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $CASE: $*"; exit 1; }
MODEL=(--text-file "$CORPUS" --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --micro-batch-size 2 --global-batch-size 8 --train-iters 8 --lr 3e-3 --lr-warmup-iters 1 --log-interval 1
       --hidden-dropout 0.1 --attention-dropout 0.1 --eval-iters 0 --seed 5)
has_bf16=0
grep -qw avx512_bf16 /proc/cpuinfo && has_bf16=1
# "iteration loss grad-norm" per logged iteration
curve() { sed -n 's/.* iteration *\([0-9]*\)\/.*lm loss: \([-0-9.E+]*\) .*grad norm: \([0-9.]*\) .*/\1 \2 \3/p' "$1"; }
# within A B REL: every loss and grad norm of curve A within REL (relative) of B's
within() {
    paste "$1" "$2" | awk -v r="$3" '
        NF != 6 || $1 != $4 { bad = 1; exit }
        { for (k = 2; k <= 3; k++) { d = $k - $(k + 3); if (d < 0) d = -d; s = $(k + 3) < 0 ? -$(k + 3) : $(k + 3);
              if (d > r * s + 1e-12) { printf "iteration %d: %s vs %s\n", $1, $k, $(k + 3); bad = 1 } } }
        END { exit bad }'
}

case $CASE in
refused)
    MG_CPU_BF16=fast "$RUN" "${MODEL[@]}" --bf16 --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -qF "MG_CPU_BF16 must be 'emulate' or unset (got 'fast')" err.txt || { cat err.txt; fail "bad MG_CPU_BF16"; }
    if [ $has_bf16 = 1 ]; then
        "$RUN" "${MODEL[@]}" --bf16 --dry-run > out.txt 2> err.txt || { cat err.txt; fail "--bf16 refused on an AVX512-BF16 CPU"; }
        echo "ok: this CPU has AVX512-BF16: --bf16 accepted; a bad MG_CPU_BF16 named"
    else
        (unset MG_CPU_BF16; "$RUN" "${MODEL[@]}" --bf16 --dry-run > out.txt 2> err.txt)
        [ $? -eq 2 ] && grep -qF -- "--bf16 is not supported: bf16 matrix products on CPUs need AVX512-BF16" err.txt ||
            { cat err.txt; fail "--bf16 without AVX512-BF16 not refused"; }
        [ -s out.txt ] && { cat out.txt; fail "output before the refusal"; }
        echo "ok: no AVX512-BF16: --bf16 refused by name (exit 2); a bad MG_CPU_BF16 named"
    fi ;;
numerics)
    "$RUN" "${MODEL[@]}" > fp32.txt 2>&1 || { cat fp32.txt; fail "fp32 run"; }
    MG_CPU_BF16=emulate "$RUN" "${MODEL[@]}" --bf16 > bf16.txt 2>&1 || { cat bf16.txt; fail "bf16 run"; }
    MG_CPU_BF16=emulate "$RUN" "${MODEL[@]}" --bf16 > bf16b.txt 2>&1 || { cat bf16b.txt; fail "second bf16 run"; }
    curve fp32.txt > fp32.c; curve bf16.txt > bf16.c; curve bf16b.txt > bf16b.c
    [ "$(wc -l < bf16.c)" -eq 8 ] && [ "$(wc -l < fp32.c)" -eq 8 ] || { cat bf16.txt; fail "want 8 log lines"; }
    within bf16.c fp32.c 0.01 || fail "bf16 beyond 1% of fp32"
    cmp -s bf16.c fp32.c && fail "bf16 run equals the fp32 run: the products were not rounded"
    cmp -s bf16.c bf16b.c || { paste bf16.c bf16b.c; fail "two bf16 runs differ"; }
    awk 'NR == 1 { first = $2 } END { exit !($2 < first - 0.3) }' bf16.c || { cat bf16.c; fail "loss did not fall"; }
    echo "ok: bf16 within 1% of fp32 (first/last loss $(head -1 bf16.c | cut -d' ' -f2) / $(tail -1 bf16.c | cut -d' ' -f2)" \
         "against $(head -1 fp32.c | cut -d' ' -f2) / $(tail -1 fp32.c | cut -d' ' -f2)), not equal to it, reproducible" ;;
parallel)
    export MG_CPU_BF16=emulate
    "$RUN" "${MODEL[@]}" --bf16 > serial.txt 2>&1 || { cat serial.txt; fail "serial run"; }
    curve serial.txt > serial.c
    # 2 ranks: dp 2 by default (world / tp)
    for plan in "" "--tensor-model-parallel-size 2 --sequence-parallel"; do
        # shellcheck disable=SC2086 # the plan is several flags
        mpirun -np 2 -x MG_CPU_BF16 "$RUN" "${MODEL[@]}" --bf16 $plan > par.txt 2>&1 || { cat par.txt; fail "${plan:-dp 2}"; }
        curve par.txt > par.c
        within par.c serial.c 5e-5 || fail "${plan:-dp 2} with --bf16 differs from the serial --bf16 run"
    done
    echo "ok: dp 2 and tp 2 + SP with --bf16 give the serial --bf16 losses and grad norms within 5e-5" ;;
*) fail "unknown case" ;;
esac
