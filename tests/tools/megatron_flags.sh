#!/usr/bin/env bash
# mgraph-run as a drop-in for Megatron's pretrain_gpt.py: every bad flag of a command
# line reported in one run, Megatron's flags that change nothing here accepted with a
# warning, flags mgraph cannot honour yet refused by name (exit 2), Megatron's default
# tokenizer with --vocab-file/--merge-file, Megatron's unquoted blend.
#   megatron_flags.sh PREPROCESS MGRAPH_RUN TEST_DATA WORK_DIR CASE   (TEST_DATA: tests/data)
set -u
PRE=$1 RUN=$2 DATA=$3 WORK=$4 CASE=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $CASE: $*"; exit 1; }
TINY=(--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --micro-batch-size 1
      --global-batch-size 1 --train-iters 2)
printf 'To be, or not to be, that is the question:\nWhether tis nobler in the mind to suffer\n%.0s' {1..40} > text.txt

# a small Megatron dataset in GPT-2 BPE (skip where the vocabulary is not at hand)
gpt2_data() {
    [ -f "$DATA/gpt2/vocab.json" ] || fail "no GPT-2 vocabulary in $DATA"
    for i in $(seq 1 60); do printf '{"text": "Document %d: to be, or not to be, that is the question, %d times."}\n' $i $i; done > docs.jsonl
    "$PRE" --input docs.jsonl --output-prefix docs --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/vocab.json" \
        --merge-file "$DATA/gpt2/merges.txt" --append-eod --workers 1 > pre.txt 2>&1 || { cat pre.txt; fail "preprocess"; }
    VOCAB=(--vocab-file "$DATA/gpt2/vocab.json" --merge-file "$DATA/gpt2/merges.txt")
}

case "$CASE" in
all_bad_flags_one_run)
    "$RUN" --text-file text.txt "${TINY[@]}" --no-such-flag 3 --hidden-size abc --lr 1e-3x --lr-decay-style sqrt \
        --fp16 --other-unknown --num-layers > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] || { cat err.txt; fail "exit $rc, want 2"; }
    for want in "unknown flag '--no-such-flag'" "--hidden-size expects an integer, got 'abc'" \
                "--lr expects a number, got '1e-3x'" "--lr-decay-style must be one of" "--fp16 is not supported: " \
                "unknown flag '--other-unknown'" "--num-layers needs a value"; do
        grep -qF -- "$want" err.txt || { cat err.txt; fail "stderr lacks: $want"; }
    done
    [ "$(grep -c 'error:' err.txt)" -eq 7 ] || { cat err.txt; fail "want 7 error lines"; }
    [ -s out.txt ] && fail "stdout not empty"
    echo "ok: 7 bad flags reported in one run" ;;
accepted_without_effect)
    "$RUN" --text-file text.txt "${TINY[@]}" --use-mcore-models --transformer-impl transformer_engine \
        --attention-backend auto --distributed-backend nccl --no-masked-softmax-fusion --num-workers 2 \
        --dataloader-type cyclic --recompute-granularity full --recompute-method block --recompute-num-layers 1 \
        --dry-run > out.txt 2> err.txt || { cat err.txt; fail "no-op flags refused"; }
    [ "$(grep -c 'warning: .* has no effect: ' err.txt)" -eq 10 ] || { cat err.txt; fail "want 10 warnings"; }
    grep -q error err.txt && fail "an error for an accepted flag"
    # a no-op flag still gets its value checked
    "$RUN" --text-file text.txt "${TINY[@]}" --transformer-impl te --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q -- "--transformer-impl must be one of local|transformer_engine" err.txt || fail "bad choice accepted"
    echo "ok: 10 flags accepted with a warning" ;;
refused_by_name)
    "$RUN" --text-file text.txt "${TINY[@]}" --bf16 --rampup-batch-size 16 16 1000 --step-batch-size-schedule "0:16 1000:32" \
        --position-embedding-type yarn --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] || fail "exit $?, want 2"
    for want in "--bf16 is not supported: bf16 compute" "--rampup-batch-size is not supported: a batch-size ramp" \
                "--step-batch-size-schedule is not supported" "--position-embedding-type yarn is not supported"; do
        grep -qF -- "$want" err.txt || { cat err.txt; fail "stderr lacks: $want"; }
    done
    "$RUN" --text-file text.txt "${TINY[@]}" --rampup-batch-size 16 16 > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -qF -- "--rampup-batch-size needs three values" err.txt || { cat err.txt; fail "nargs 3"; }
    echo "ok: refused flags named with their reason" ;;
sequence_parallel_tp1)
    "$RUN" --text-file text.txt "${TINY[@]}" --sequence-parallel --dry-run > out.txt 2> err.txt || { cat err.txt; fail "refused"; }
    grep -q "warning: disabling sequence parallelism" err.txt || fail "no warning"
    echo "ok: --sequence-parallel at tp 1 disabled with a warning" ;;
default_tokenizer)
    gpt2_data
    # no --tokenizer-type: Megatron's pretrain_gpt.py default, GPT2BPETokenizer
    "$RUN" --data-path docs_text_document "${VOCAB[@]}" "${TINY[@]}" --split 90,10,0 --eval-interval 1 --eval-iters 1 \
        --log-interval 1 > out.txt 2> err.txt || { cat out.txt err.txt; fail "training without --tokenizer-type"; }
    grep -q "vocab 50304 (padded)" out.txt || { cat out.txt; fail "not GPT-2's vocabulary"; }
    grep -q "iteration        2/       2" out.txt || { cat out.txt; fail "did not train 2 iterations"; }
    # --data-path without a vocabulary: named
    "$RUN" --data-path docs_text_document "${TINY[@]}" > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q "GPT2BPETokenizer .* needs --vocab-file and --merge-file" err.txt || { cat err.txt; fail "no vocab"; }
    echo "ok: GPT2BPETokenizer by default" ;;
unquoted_blend)
    gpt2_data
    cp docs_text_document.bin other_text_document.bin && cp docs_text_document.idx other_text_document.idx
    "$RUN" --data-path 0.3 docs_text_document 0.7 other_text_document "${VOCAB[@]}" "${TINY[@]}" --split 90,10,0 \
        --eval-iters 0 --dry-run > out.txt 2> err.txt || { cat err.txt; fail "unquoted blend"; }
    "$RUN" --data-path "0.3 docs_text_document 0.7 other_text_document" "${VOCAB[@]}" "${TINY[@]}" --split 90,10,0 \
        --eval-iters 0 --dry-run > out2.txt 2> err.txt || { cat err.txt; fail "quoted blend"; }
    "$RUN" --data-path 0.3 docs_text_document 0.7 "${VOCAB[@]}" "${TINY[@]}" --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q "pairs of weight and prefix" err.txt || { cat err.txt; fail "odd blend accepted"; }
    echo "ok: --data-path W1 P1 W2 P2 as Megatron writes it" ;;
*) echo "unknown case $CASE"; exit 2 ;;
esac
