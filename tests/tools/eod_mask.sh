#!/usr/bin/env bash
# mgraph-run --eod-mask-loss (Megatron's loss mask: a position whose input token is the
# end-of-document token is left out of the loss).
#  1. Which positions: documents of one random letter each, "a" or "b", then EOD. After
#     a letter the next token is always EOD (learnable); after EOD it is a coin toss
#     (ln 2 at best). Masked, only the learnable positions count and the loss goes to 0;
#     unmasked it cannot go below ln(2) / 2; masking the wrong side (the labels that are
#     EOD) would leave only the coin tosses, ln 2.
#  2. Data without an end-of-document token: the same losses, bit for bit, as without
#     the flag.
#  3. The logged lm loss is Megatron's: the mean over the kept tokens of the global batch,
#     the same however the batch is cut into micro-batches (what is trained, each
#     micro-batch's mean, is not: the gradient norms differ).
#  4. Every plan equals the serial run, iteration by iteration (1e-5): cp 2 (each rank's
#     chunks keep different numbers of tokens), tp 2 with the vocabulary-parallel loss
#     and sequence parallelism, dp 2, pp 2.
#  5. Refusals: a tokenizer without EOD, an explicit micro-batch split.
#   eod_mask.sh PREPROCESS MGRAPH_RUN MPIEXEC TEST_DATA WORK_DIR
set -u
PRE=$1 RUN=$2 MPI=$3 DATA=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$DATA/gpt2-small/vocab.json" ] && [ -f "$DATA/tinyshakespeare.txt" ] || fail "no fixtures in $DATA"
# GPT-2's tokenizer cut to 896 tokens (tests/data/gpt2-small: a small output layer, the same EOD)
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2-small/vocab.json" --merge-file "$DATA/gpt2-small/merges.txt")
preprocess() { # JSONL PREFIX [--append-eod]
    "$PRE" --input "$1" --output-prefix "$2" "${TOK[@]}" "${@:3}" --workers 1 > "$2.pre.txt" 2>&1 ||
        { cat "$2.pre.txt"; fail "preprocess $1"; }
}
source "$(dirname "$0")/metrics_lib.sh"
last() { column lm_loss "$1" | tail -1; }

# ---- 1. the masked positions ---------------------------------------------------------------
awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) printf "{\"text\": \"%s\"}\n", rand() < 0.5 ? "a" : "b" }' > ab.jsonl
preprocess ab.jsonl ab --append-eod
preprocess ab.jsonl ab_noeod
AB=(--split 100,0,0 "${TOK[@]}" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
    --micro-batch-size 4 --global-batch-size 8 --train-iters 60 --eval-iters 0 --log-interval 10 --lr 1e-2
    --lr-warmup-iters 0 --cpu-workers 2 --micro-batch-split 1)
timeout 120 "$RUN" --data-path ab_text_document "${AB[@]}" --eod-mask-loss --metrics-file masked.jsonl > masked.txt 2>&1 ||
    { cat masked.txt; fail "--eod-mask-loss run"; }
timeout 120 "$RUN" --data-path ab_text_document "${AB[@]}" --metrics-file unmasked.jsonl > unmasked.txt 2>&1 ||
    { cat unmasked.txt; fail "unmasked run"; }
m=$(last masked.jsonl) u=$(last unmasked.jsonl)
echo "letter-EOD documents, loss after 60 iterations: masked $m, unmasked $u (floor ln(2)/2 = 0.347)"
awk -v m="$m" -v u="$u" 'BEGIN { exit !(m < 0.01 && u > 0.3) }' || fail "masked loss $m (want < 0.01), unmasked $u (want > 0.3)"
echo "ok: the positions after EOD are the ones left out"

# ---- 2. nothing to mask ----------------------------------------------------------------------
timeout 120 "$RUN" --data-path ab_noeod_text_document "${AB[@]}" --train-iters 6 --log-interval 1 --eod-mask-loss \
    --metrics-file noeod_masked.jsonl > noeod_masked.txt 2>&1 || { cat noeod_masked.txt; fail "no-EOD masked run"; }
timeout 120 "$RUN" --data-path ab_noeod_text_document "${AB[@]}" --train-iters 6 --log-interval 1 \
    --metrics-file noeod.jsonl > noeod.txt 2>&1 || { cat noeod.txt; fail "no-EOD run"; }
[ "$(column lm_loss noeod.jsonl | wc -l)" -eq 6 ] || fail "want 6 iterations"
cmp -s <(column lm_loss noeod.jsonl) <(column lm_loss noeod_masked.jsonl) || fail "no EOD in the data, yet the mask changed the losses"
cmp -s <(column grad_norm noeod.jsonl) <(column grad_norm noeod_masked.jsonl) || fail "no EOD, yet the mask changed the gradients"
echo "ok: without EOD tokens the masked run is the unmasked run, bit for bit"

# ---- 3. the logged loss ----------------------------------------------------------------------------
# each line of Tiny Shakespeare a document: EODs every few tokens, unevenly placed
lines_dataset "$PRE" "$DATA/tinyshakespeare.txt" "${TOK[@]}"
SH=(--data-path lines_text_document --split 100,0,0 "${TOK[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4
    --seq-length 16 --micro-batch-size 2 --global-batch-size 8 --train-iters 5 --eval-iters 0 --log-interval 1
    --lr 3e-3 --lr-warmup-iters 0 --adam-eps 1e-5 --cpu-workers 1 --make-vocab-size-divisible-by 64)
# (64: the vocabulary (tests/data/gpt2-small, 896 tokens) is padded to 896 at tp 1 and tp 2 alike, the same model)
# one iteration from large initial weights (per-token losses far apart), global batch 8
# as micro-batches of 1, 2 and 8 sequences
for mbs in 1 2 8; do
    timeout 120 "$RUN" "${SH[@]}" --eod-mask-loss --train-iters 1 --init-method-std 1.0 --micro-batch-size "$mbs" \
        --metrics-file "cut$mbs.jsonl" > "cut$mbs.txt" 2>&1 || { cat "cut$mbs.txt"; fail "micro-batch size $mbs"; }
done
paste <(column lm_loss cut1.jsonl) <(column lm_loss cut2.jsonl) <(column lm_loss cut8.jsonl) \
      <(column grad_norm cut1.jsonl) <(column grad_norm cut8.jsonl) | awk -F'\t' '
    function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / b }
    { printf "global batch 8 cut into micro-batches of 1, 2, 8: lm loss %s %s %s; grad norm (1, 8) %s %s\n", $1, $2, $3, $4, $5
      exit !(rel($1, $3) < 1e-6 && rel($2, $3) < 1e-6 && rel($4, $5) > 1e-3) }' ||
    fail "the logged loss depends on the micro-batch cut (or the cut kept equal token counts: no test)"
echo "ok: the logged loss is the mean over the global batch's kept tokens"
# evaluation: the mean over the kept tokens of all its batches (Megatron's evaluate), so
# 2 batches of 8 sequences give the loss of 1 batch of the same 16
EV=("${SH[@]}" --split 50,50,0 --init-method-std 1.0 --skip-train --eod-mask-loss)
timeout 120 "$RUN" "${EV[@]}" --global-batch-size 8 --eval-iters 2 --metrics-file eval8.jsonl > eval8.txt 2>&1 ||
    { cat eval8.txt; fail "evaluation, 2 batches of 8"; }
timeout 120 "$RUN" "${EV[@]}" --global-batch-size 16 --eval-iters 1 --metrics-file eval16.jsonl > eval16.txt 2>&1 ||
    { cat eval16.txt; fail "evaluation, 1 batch of 16"; }
paste <(column val_loss eval8.jsonl) <(column val_loss eval16.jsonl) | awk -F'\t' '
    { d = $1 - $2; if (d < 0) d = -d; printf "validation loss, 2 batches of 8: %s, 1 batch of 16: %s\n", $1, $2; exit !(NF == 2 && d / $2 < 1e-6) }' ||
    fail "evaluation is not the mean over the kept tokens of its batches"
echo "ok: evaluation weights its batches by their kept tokens"

# ---- 4. parallel == serial ---------------------------------------------------------------------
rm -rf serial.ck parallel.ck
timeout 120 "$RUN" "${SH[@]}" --eod-mask-loss --metrics-file serial.jsonl --save serial.ck > serial.txt 2>&1 ||
    { cat serial.txt; fail "serial run"; }
timeout 120 "$RUN" "${SH[@]}" --metrics-file serial_unmasked.jsonl > serial_unmasked.txt 2>&1 ||
    { cat serial_unmasked.txt; fail "serial unmasked run"; }
cmp -s <(column lm_loss serial.jsonl) <(column lm_loss serial_unmasked.jsonl) && fail "the mask changed nothing on these documents"
for plan in "--context-parallel-size 2" "--tensor-model-parallel-size 2 --sequence-parallel" "" \
            "--pipeline-model-parallel-size 2"; do
    # shellcheck disable=SC2086 # the plan is several words
    rm -rf parallel.ck
    timeout 300 $MPI -np 2 "$RUN" "${SH[@]}" --eod-mask-loss $plan --metrics-file parallel.jsonl --save parallel.ck \
        > parallel.txt 2>&1 || { cat parallel.txt; fail "2 ranks with '$plan'"; }
    echo "2 ranks ${plan:-(dp 2)}:"
    for m in lm_loss grad_norm; do within $m parallel.jsonl serial.jsonl 5 || fail "$m of '${plan:-dp 2}' differs from serial"; done
    same_weights serial parallel || fail "the final weights or Adam moments of '${plan:-dp 2}' differ from serial"
done
echo "ok: cp 2, tp 2 + SP, dp 2 and pp 2 with --eod-mask-loss equal the serial run"

# ---- 5. refusals ----------------------------------------------------------------------------
expect_usage() { # NAME REGEX CMD...: exit 2 with the message, no metrics file left
    local name=$1 re=$2; shift 2
    timeout 60 "$@" > out.txt 2> err.txt
    local rc=$?
    [ $rc -eq 2 ] || { cat out.txt err.txt; fail "$name: exit status $rc, want 2"; }
    grep -Eq -- "$re" err.txt || { cat err.txt; fail "$name: stderr lacks /$re/"; }
    echo "ok: $name refused: $(grep -E -- "$re" err.txt | head -1)"
}
expect_usage "byte-level tokenizer" "eod-mask-loss: the ByteLevelTokenizer has no end-of-document token" \
    "$RUN" --text-file "$DATA/tinyshakespeare.txt" --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
    --seq-length 8 --train-iters 1 --eod-mask-loss
expect_usage "micro-batch split" "micro-batch split 2 with --eod-mask-loss is not supported" \
    "$RUN" --data-path ab_text_document "${AB[@]}" --train-iters 1 --eod-mask-loss --micro-batch-split 2
