#!/usr/bin/env bash
# mgraph-run --start-weight-decay / --end-weight-decay / --weight-decay-incr-style
# (Megatron's weight-decay schedule; the values against Megatron's get_wd are checked in
# tools.rampup_vectors):
#  1. A linear schedule from --weight-decay to itself trains bit for bit as the constant
#     decay: the scheduled path (lr_schedule's second output times AdamW's multiplier)
#     is wired to the same arithmetic.
#  2. A linear schedule from 0: the first update has no decay, so the second iteration's
#     loss equals a run with --weight-decay 0 and the later ones differ from it.
#  3. Every plan equals the serial run (1e-5): tp 2 + SP, dp 2 with the distributed
#     optimizer, pp 2.
#  4. Megatron's rules: start / end without a linear or cosine style, or such a style
#     without them, exit 2.
#   wd_schedule.sh MGRAPH_RUN MPIEXEC TEXT WORK_DIR
set -u
RUN=$1 MPI=$2 TEXT=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$TEXT" ] || fail "no corpus $TEXT"
source "$(dirname "$0")/metrics_lib.sh"
BASE=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
      --global-batch-size 8 --train-iters 4 --eval-iters 0 --log-interval 1 --lr 1e-2 --lr-warmup-iters 0
      --adam-eps 1e-3 --cpu-workers 1)
train() { local out=$1; shift; train_n 4 "$out" "${BASE[@]}" "$@"; } # OUT ARGS...
nth() { column lm_loss "$1.jsonl" | sed -n "${2}p"; }

# ---- 1. a schedule that stays put ---------------------------------------------------------------
train constant --weight-decay 0.1
train flat --weight-decay-incr-style linear --start-weight-decay 0.1 --end-weight-decay 0.1
cmp -s <(column lm_loss constant.jsonl) <(column lm_loss flat.jsonl) &&
    cmp -s <(column grad_norm constant.jsonl) <(column grad_norm flat.jsonl) ||
    fail "a linear schedule from 0.1 to 0.1 differs from --weight-decay 0.1"
echo "ok: a schedule from --weight-decay to itself trains bit for bit as the constant decay"

# ---- 2. a rising decay ----------------------------------------------------------------------------
train none --weight-decay 0
train rising --weight-decay-incr-style linear --start-weight-decay 0 --end-weight-decay 0.5
[ "$(nth rising 2)" = "$(nth none 2)" ] || fail "iteration 2: $(nth rising 2), want the no-decay $(nth none 2)"
[ "$(nth rising 4)" != "$(nth none 4)" ] || fail "the rising decay never acted"
echo "ok: a decay rising from 0 leaves the first update undecayed, then acts"

# ---- 3. every plan --------------------------------------------------------------------------------
train serial --weight-decay-incr-style cosine --start-weight-decay 0.05 --end-weight-decay 0.5
for plan in "--tensor-model-parallel-size 2 --sequence-parallel" "--use-distributed-optimizer" \
            "--pipeline-model-parallel-size 2"; do
    # shellcheck disable=SC2086 # the plan is several words
    rm -rf parallel.ck
    timeout 300 "$MPI" -np 2 "$RUN" "${BASE[@]}" --weight-decay-incr-style cosine --start-weight-decay 0.05 \
        --end-weight-decay 0.5 $plan --metrics-file parallel.jsonl --save parallel.ck > parallel.txt 2>&1 ||
        { cat parallel.txt; fail "2 ranks with '$plan'"; }
    echo "2 ranks $plan:"
    for m in lm_loss grad_norm; do within $m parallel.jsonl serial.jsonl 4 || fail "$m of '$plan' differs from serial"; done
    same_weights serial parallel || fail "the final weights or Adam moments of '$plan' differ from serial"
done
echo "ok: tp 2 + SP, dp 2 + distributed optimizer and pp 2 with a cosine decay schedule equal the serial run"

# ---- 4. Megatron's rules ----------------------------------------------------------------------------
for bad in "--start-weight-decay 0.1" "--weight-decay-incr-style linear --end-weight-decay 0.1" \
            "--weight-decay-incr-style cosine --start-weight-decay -1 --end-weight-decay 0.1"; do
    # shellcheck disable=SC2086 # the flags and their values
    timeout 60 "$RUN" "${BASE[@]}" $bad --dry-run > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q "weight-decay" err.txt || { cat err.txt; fail "'$bad': exit $rc, want 2"; }
    echo "ok: '$bad' refused: $(grep error: err.txt | head -1)"
done
