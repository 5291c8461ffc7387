#!/usr/bin/env bash
# mgraph-run --reset-position-ids and --reset-attention-mask (Megatron's documents: a
# token's document starts after the last end-of-document token before it in the input).
# What they compute is checked against transformers in checkpoint.hf_documents; here:
#  1. Data without an end-of-document token: both flags change nothing, bit for bit.
#  2. On documents (each line of Tiny Shakespeare one), each flag and the two together
#     train differently from the plain run and from each other (learned positions).
#  3. RoPE sees only relative positions, so within documents the positions' restart
#     changes nothing but rounding: --reset-position-ids with --reset-attention-mask
#     trains as --reset-attention-mask alone (1e-6), while --reset-position-ids alone,
#     which lets a token see earlier documents, does not.
#  4. Activation recompute (full and selective) replays them: losses and gradient norms
#     bit for bit.
#  5. Every plan equals the serial run, iteration by iteration (1e-5): cp 2 (the K/V ring
#     over chunks that cut documents), tp 2 + SP, dp 2, pp 2; LLaMA on cp 2 x tp 2.
#  6. Refusal: a tokenizer without an end-of-document token.
#   documents.sh PREPROCESS MGRAPH_RUN MPIEXEC TEST_DATA WORK_DIR
set -u
PRE=$1 RUN=$2 MPI=$3 DATA=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$DATA/gpt2-small/vocab.json" ] && [ -f "$DATA/tinyshakespeare.txt" ] || fail "no fixtures in $DATA"
# GPT-2's tokenizer cut to 896 tokens (tests/data/gpt2-small: a small output layer, the same EOD)
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2-small/vocab.json" --merge-file "$DATA/gpt2-small/merges.txt")
source "$(dirname "$0")/metrics_lib.sh"
RESET=(--reset-position-ids --reset-attention-mask)
# --adam-eps 1e-3: a gradient summed over tokens can nearly cancel (the first layer's
# attention output bias here has |g| ~ 1e-5 after one step); Adam's first step moves such
# an element by lr g / (|g| + eps), turning the sums' rounding (1e-7 relative, different
# under each plan) into visible weight differences (4e-6 in the next grad norm with eps
# 1e-5). With eps 1e-3 each plan stays at the 1e-7 of its sums.
GPT=(--split 100,0,0 "${TOK[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
     --micro-batch-size 2 --global-batch-size 8 --train-iters 5 --eval-iters 0 --log-interval 1 --lr 3e-3
     --lr-warmup-iters 0 --adam-eps 1e-3 --cpu-workers 1 --make-vocab-size-divisible-by 64 --attention-dropout 0.1
     --hidden-dropout 0.1)
LLAMA=("${GPT[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --num-query-groups 2
       --group-query-attention --untie-embeddings-and-output-weights --disable-bias-linear)
train() { train_n 5 "$@"; } # OUT ARGS...
same() { # A B: bitwise equal losses and gradient norms
    cmp -s <(column lm_loss "$1.jsonl") <(column lm_loss "$2.jsonl") &&
        cmp -s <(column grad_norm "$1.jsonl") <(column grad_norm "$2.jsonl")
}

# ---- 1. nothing to reset ----------------------------------------------------------------------
lines_dataset "$PRE" "$DATA/tinyshakespeare.txt" "${TOK[@]}"
awk 'NR <= 3000 && length($0) > 0 { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "{\"text\": \"%s\"}\n", $0 }' \
    "$DATA/tinyshakespeare.txt" > noeod.jsonl
"$PRE" --input noeod.jsonl --output-prefix noeod "${TOK[@]}" --workers 1 > noeod.pre.txt 2>&1 ||
    { cat noeod.pre.txt; fail "preprocess noeod.jsonl"; }
train noeod_plain --data-path noeod_text_document "${GPT[@]}"
train noeod_reset --data-path noeod_text_document "${GPT[@]}" "${RESET[@]}"
same noeod_plain noeod_reset || fail "no EOD in the data, yet the flags changed the training"
echo "ok: without EOD tokens both flags change nothing, bit for bit"

# ---- 2. documents -------------------------------------------------------------------------------
train plain --data-path lines_text_document "${GPT[@]}"
train pos --data-path lines_text_document "${GPT[@]}" --reset-position-ids
train mask --data-path lines_text_document "${GPT[@]}" --reset-attention-mask
train reset --data-path lines_text_document "${GPT[@]}" "${RESET[@]}"
for pair in "plain pos" "plain mask" "plain reset" "pos mask" "pos reset" "mask reset"; do
    # shellcheck disable=SC2086 # two names
    same $pair && fail "runs $pair train the same"
done
echo "GPT-2 (learned positions), last lm loss: plain $(column lm_loss plain.jsonl | tail -1)," \
     "positions $(column lm_loss pos.jsonl | tail -1), mask $(column lm_loss mask.jsonl | tail -1)," \
     "both $(column lm_loss reset.jsonl | tail -1)"
echo "ok: on documents each flag, and the two together, train differently"

# ---- 3. RoPE: relative positions ------------------------------------------------------------------
train lplain --data-path lines_text_document "${LLAMA[@]}"
train lpos --data-path lines_text_document "${LLAMA[@]}" --reset-position-ids
train lmask --data-path lines_text_document "${LLAMA[@]}" --reset-attention-mask
train lreset --data-path lines_text_document "${LLAMA[@]}" "${RESET[@]}"
echo "RoPE, both flags against --reset-attention-mask alone:"
for m in lm_loss grad_norm; do within $m lreset.jsonl lmask.jsonl 5 1e-6 || fail "RoPE: the positions' restart changed attention within documents"; done
same lpos lplain && fail "RoPE: --reset-position-ids alone changed nothing"
same lmask lplain && fail "RoPE: --reset-attention-mask changed nothing"
echo "ok: with RoPE, restarting positions within documents changes only rounding"

# ---- 4. recompute ---------------------------------------------------------------------------------
train full --data-path lines_text_document "${GPT[@]}" "${RESET[@]}" --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1
train selective --data-path lines_text_document "${GPT[@]}" "${RESET[@]}" --recompute-granularity selective
same full reset && same selective reset || fail "recompute changed the training on documents"
echo "ok: full and selective recompute replay documents bit for bit"

# ---- 5. parallel == serial ------------------------------------------------------------------------
parallel() { # NP SERIAL MODEL-ARRAY-NAME PLAN...
    local np=$1 ser=$2 model=$3; shift 3
    local -n args=$model
    rm -rf parallel.ck
    timeout 300 "$MPI" -np "$np" "$RUN" --data-path lines_text_document "${args[@]}" "${RESET[@]}" "$@" \
        --metrics-file parallel.jsonl --save parallel.ck > parallel.txt 2>&1 || { cat parallel.txt; fail "$np ranks with '$*'"; }
    echo "$np ranks ${*:-(dp $np)}:"
    for m in lm_loss grad_norm; do within $m parallel.jsonl "$ser.jsonl" 5 || fail "$m of '${*:-dp}' differs from serial"; done
    same_weights "$ser" parallel || fail "the final weights or Adam moments of '${*:-dp}' differ from serial"
}
parallel 2 reset GPT --context-parallel-size 2
parallel 2 reset GPT --tensor-model-parallel-size 2 --sequence-parallel
parallel 2 reset GPT
parallel 2 reset GPT --pipeline-model-parallel-size 2
parallel 4 lreset LLAMA --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
echo "ok: cp 2, tp 2 + SP, dp 2, pp 2 and cp 2 x tp 2 on documents equal the serial run"

# ---- 6. refusal -----------------------------------------------------------------------------------
for flag in --reset-position-ids --reset-attention-mask; do
    timeout 60 "$RUN" --text-file "$DATA/tinyshakespeare.txt" --num-layers 1 --hidden-size 16 --num-attention-heads 2 \
        --seq-length 8 --train-iters 1 "$flag" > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] || { cat out.txt err.txt; fail "$flag with the byte-level tokenizer: exit status $rc, want 2"; }
    grep -q -- "$flag: the ByteLevelTokenizer has no end-of-document token" err.txt || { cat err.txt; fail "$flag: message"; }
    echo "ok: $flag refused: $(head -1 err.txt)"
done
