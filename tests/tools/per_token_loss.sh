#!/usr/bin/env bash
# mgraph-run --calculate-per-token-loss (Megatron's: train on the mean over the kept
# tokens of the whole global batch, not the mean of the micro-batches' means).
#  1. With --eod-mask-loss the micro-batches keep different numbers of tokens, and the
#     trained objective no longer depends on how the global batch is cut: micro-batches
#     of 1, 2 and 8 sequences, and 2 sub-batches of 4 (--micro-batch-split, refused
#     without the flag), train the same weights: losses and gradient norms of every
#     iteration within 1e-5. Without the flag the cuts train differently.
#  2. Without a mask every micro-batch keeps all its tokens: the same training as
#     without the flag (1e-5).
#  3. Every plan equals the serial run (1e-5): cp 2, tp 2 + SP, dp 2, pp 2; and a MoE
#     model (auxiliary losses scaled by 1 / tokens) on ep 2.
#   per_token_loss.sh PREPROCESS MGRAPH_RUN MPIEXEC TEST_DATA WORK_DIR
set -u
PRE=$1 RUN=$2 MPI=$3 DATA=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$DATA/gpt2-small/vocab.json" ] && [ -f "$DATA/tinyshakespeare.txt" ] || fail "no fixtures in $DATA"
# GPT-2's tokenizer cut to 896 tokens (tests/data/gpt2-small: a small output layer, the same EOD)
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2-small/vocab.json" --merge-file "$DATA/gpt2-small/merges.txt")
source "$(dirname "$0")/metrics_lib.sh"
run() { # NAME FLAGS...: one run, its metrics in NAME.jsonl, its final checkpoint in NAME.ck
    local name=$1; shift
    rm -rf "$name.ck"
    timeout 300 "$@" --metrics-file "$name.jsonl" --save "$name.ck" > "$name.txt" 2>&1 || { cat "$name.txt"; fail "$name"; }
}

lines_dataset "$PRE" "$DATA/tinyshakespeare.txt" "${TOK[@]}"
# (vocabulary padded by 64: 896 at tp 1 and tp 2 alike, the same model)
BASE=(--data-path lines_text_document --split 100,0,0 "${TOK[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4
      --seq-length 16 --global-batch-size 8 --train-iters 4 --eval-iters 0 --log-interval 1 --lr 3e-3
      --lr-warmup-iters 0 --adam-eps 1e-5 --cpu-workers 1 --make-vocab-size-divisible-by 64)
SH=("${BASE[@]}" --eod-mask-loss)

# ---- 1. the micro-batch cut -------------------------------------------------------------------
for mbs in 1 2 8; do
    run "tok$mbs" "$RUN" "${SH[@]}" --calculate-per-token-loss --micro-batch-size "$mbs"
done
run tok4x2 "$RUN" "${SH[@]}" --calculate-per-token-loss --micro-batch-size 8 --micro-batch-split 2
for cut in tok1 tok2 tok4x2; do
    echo "per-token loss, ${cut#tok} against micro-batches of 8:"
    for m in lm_loss grad_norm; do within $m "$cut.jsonl" tok8.jsonl 4 || fail "$m: $cut trains differently from tok8"; done
done
run mb1 "$RUN" "${SH[@]}" --micro-batch-size 1
run mb8 "$RUN" "${SH[@]}" --micro-batch-size 8
within grad_norm mb1.jsonl mb8.jsonl 4 1e-3 > /dev/null &&
    fail "without --calculate-per-token-loss the cuts train alike too: the data keeps equal token counts, no test"
echo "ok: the per-token loss trains the same weights however the batch is cut (the micro-batch mean does not)"

# ---- 2. nothing masked ---------------------------------------------------------------------------
run plain "$RUN" "${BASE[@]}" --micro-batch-size 2
run plain_tok "$RUN" "${BASE[@]}" --micro-batch-size 2 --calculate-per-token-loss
echo "without a mask, per-token against the micro-batches' mean:"
for m in lm_loss grad_norm; do within $m plain_tok.jsonl plain.jsonl 4 || fail "$m: the per-token loss differs without a mask"; done

# ---- 3. parallel == serial ---------------------------------------------------------------------
run serial "$RUN" "${SH[@]}" --calculate-per-token-loss --micro-batch-size 2
for plan in "--context-parallel-size 2" "--tensor-model-parallel-size 2 --sequence-parallel" "" \
            "--pipeline-model-parallel-size 2"; do
    # shellcheck disable=SC2086 # the plan is several words
    run parallel $MPI -np 2 "$RUN" "${SH[@]}" --calculate-per-token-loss --micro-batch-size 2 $plan
    echo "2 ranks ${plan:-(dp 2)}:"
    for m in lm_loss grad_norm; do within $m parallel.jsonl serial.jsonl 4 || fail "$m of '${plan:-dp 2}' differs from serial"; done
    same_weights serial parallel || fail "the final weights or Adam moments of '${plan:-dp 2}' differ from serial"
done
echo "ok: cp 2, tp 2 + SP, dp 2 and pp 2 with --calculate-per-token-loss equal the serial run"

# a small Mixtral-style model (the auxiliary losses divided by the batch's tokens too)
MOE=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear --num-experts 4
     --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2 --moe-z-loss-coeff 1e-3)
run moe_serial "$RUN" "${SH[@]}" "${MOE[@]}" --calculate-per-token-loss --micro-batch-size 2
run moe_ep2 $MPI -np 2 "$RUN" "${SH[@]}" "${MOE[@]}" --calculate-per-token-loss --micro-batch-size 2 \
    --expert-model-parallel-size 2
echo "MoE, 2 ranks, ep 2:"
for m in lm_loss grad_norm load_balancing_loss; do
    within $m moe_ep2.jsonl moe_serial.jsonl 4 || fail "$m of MoE ep 2 differs from serial"
done
same_weights moe_serial moe_ep2 || fail "the final weights or Adam moments of MoE ep 2 differ from serial"
echo "ok: MoE on ep 2 with --calculate-per-token-loss equals the serial run"
