#!/usr/bin/env bash
# mgraph-run --bf16: Megatron's bf16 mixed precision (mgraph/precision.h): bf16 model
# copies of the parameters, bf16 activations, fp32 main parameters, gradients and moments,
# matrix products with bf16 inputs and fp32 sums.
#   bf16.sh MGRAPH_RUN CORPUS WORK_DIR CASE
# CASE refused: on a CPU without AVX512-BF16, --bf16 stops with exit 2 and the reason;
#   a bad MG_CPU_BF16 is named.
# CASE numerics: with the portable kernel (MG_CPU_BF16=emulate, the native kernel's
#   bits) every iteration's loss and gradient norm stay within 1% of the fp32 run's,
#   differ from them (the rounding is in effect), the loss falls, a second run gives
#   the same bits, and the memory line's activations saved for backward are at most
#   0.6 x the fp32 run's.
# CASE parallel: under mpirun, dp 2 and tp 2 (+SP) with --bf16 give the 1-rank --bf16
#   run's losses and gradient norms within 1e-3 relative (printed: 7 digits for the loss,
#   4 for the norm). Every activation is rounded to bf16 (2^-8 relative steps): a
#   last-bit fp32 difference moves a rounding by a whole step now and then, and tensor
#   parallelism rounds each rank's partial product before the all-reduce, as Megatron's
#   bf16 all-reduce does (partitioners.equivalence_bf16_* bound every plan; measured here:
#   loss 2.6e-5, norm 4.5e-4 over these 8 iterations).
# CASE flags: Megatron's checks of the precision flags (validate_args, OptimizerConfig):
#   a non-fp32 optimizer dtype without --use-precision-aware-optimizer, the optimizer
#   without the distributed optimizer, fp16 / fp8 optimizer state, --main-grads-dtype
#   bf16 with --accumulate-allreduce-grads-in-fp32 exit 2 naming the flags;
#   --grad-reduce-in-bf16 without --bf16 warns (no effect, as in Megatron).
# CASE memory: the memory line's persistent bytes per parameter for each optimizer
#   setting: fp32 16, bf16 18 (Megatron's table), --grad-reduce-in-bf16 16, bf16 main
#   gradients and moments (precision-aware optimizer) 12; each of those trains.
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
    # "(X MiB saved for backward)" of each run's memory line
    saved() { sed -n 's/.*activations .*(\([0-9.]*\) MiB saved for backward).*/\1/p' "$1"; }
    s32=$(saved fp32.txt) s16=$(saved bf16.txt)
    [ -n "$s32" ] && [ -n "$s16" ] && awk -v a="$s16" -v b="$s32" 'BEGIN { exit !(a <= 0.6 * b) }' ||
        fail "activations saved for backward: bf16 $s16 MiB, fp32 $s32 MiB (want <= 0.6x)"
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
        within par.c serial.c 1e-3 || fail "${plan:-dp 2} with --bf16 differs from the serial --bf16 run"
    done
    echo "ok: dp 2 and tp 2 + SP with --bf16 give the serial --bf16 losses and grad norms within 1e-3" ;;
flags)
    bad() { # bad EXPECTED-MESSAGE FLAGS...: exit 2 naming the flag
        local want=$1
        shift
        "$RUN" "${MODEL[@]}" --dry-run "$@" > out.txt 2> err.txt
        [ $? -eq 2 ] && grep -qF -- "$want" err.txt || { cat err.txt; fail "$*: want exit 2 and '$want'"; }
    }
    export MG_CPU_BF16=emulate
    bad "--exp-avg-dtype bf16 needs --use-precision-aware-optimizer" --bf16 --exp-avg-dtype bf16
    bad "--main-grads-dtype bf16 needs --use-precision-aware-optimizer" --bf16 --main-grads-dtype bf16
    bad "--use-precision-aware-optimizer is only supported with the distributed optimizer" --bf16 \
        --use-precision-aware-optimizer
    bad "--exp-avg-sq-dtype fp8 is not supported" --bf16 --use-distributed-optimizer --use-precision-aware-optimizer \
        --exp-avg-sq-dtype fp8
    bad "--exp-avg-dtype fp16 is not supported" --bf16 --use-distributed-optimizer --use-precision-aware-optimizer \
        --exp-avg-dtype fp16
    bad "--main-params-dtype fp16 is not supported" --bf16 --use-distributed-optimizer --use-precision-aware-optimizer \
        --main-params-dtype fp16
    bad "--main-grads-dtype can only be fp32 when --accumulate-allreduce-grads-in-fp32 is set" --bf16 \
        --use-distributed-optimizer --use-precision-aware-optimizer --main-grads-dtype bf16 \
        --accumulate-allreduce-grads-in-fp32
    bad "--exp-avg-dtype must be one of" --bf16 --exp-avg-dtype fp64
    "$RUN" "${MODEL[@]}" --dry-run --grad-reduce-in-bf16 > out.txt 2> err.txt || { cat err.txt; fail "--grad-reduce-in-bf16 alone"; }
    grep -qF -- "--grad-reduce-in-bf16 has no effect without --bf16" err.txt || { cat err.txt; fail "no warning"; }
    echo "ok: the precision flags' bad combinations exit 2 naming the flags" ;;
memory)
    export MG_CPU_BF16=emulate
    per_param() { sed -n 's/.*persistent [0-9.]* MiB (\([0-9.]*\) B\/parameter).*/\1/p' "$1"; }
    for c in "16.00|" "18.00|--bf16" "16.00|--bf16 --grad-reduce-in-bf16" \
             "12.00|--bf16 --use-distributed-optimizer --use-precision-aware-optimizer --main-grads-dtype bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"; do
        # shellcheck disable=SC2086 # several flags
        "$RUN" "${MODEL[@]}" --train-iters 2 ${c#*|} > out.txt 2>&1 || { cat out.txt; fail "${c#*|}"; }
        got=$(per_param out.txt)
        [ "$got" = "${c%%|*}" ] || { grep memory out.txt; fail "${c#*|}: $got bytes per parameter, want ${c%%|*}"; }
        grep -q "iteration        2/       2" out.txt || { cat out.txt; fail "${c#*|} did not train"; }
        echo "${c#*|}: $got B/parameter"
    done
    echo "ok: persistent bytes per parameter as Megatron's table counts them" ;;
*) fail "unknown case" ;;
esac
