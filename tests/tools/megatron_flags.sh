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
    for i in $(seq 1 ${1:-60}); do printf '{"text": "Document %d: to be, or not to be, that is the question, %d times."}\n' $i $i; done > docs.jsonl
    "$PRE" --input docs.jsonl --output-prefix docs --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/vocab.json" \
        --merge-file "$DATA/gpt2/merges.txt" --append-eod --workers 1 > pre.txt 2>&1 || { cat pre.txt; fail "preprocess"; }
    VOCAB=(--vocab-file "$DATA/gpt2/vocab.json" --merge-file "$DATA/gpt2/merges.txt")
}

# check_recipe "REFUSED FLAGS": RECIPE as written through --dry-run: every flag is known,
# the only errors (exit 2) are the refusals of the flags mgraph cannot honour yet, each
# named with its reason; without those flags the same recipe passes --dry-run.
check_recipe() {
    local refused=($1) f skip=0
    keep=()
    "$RUN" "${RECIPE[@]}" --dry-run > out.txt 2> err.txt
    local rc=$?
    grep -q "unknown flag" err.txt && { cat err.txt; fail "a flag of the recipe is unknown"; }
    local errors
    errors=$(grep -c "error:" err.txt)
    if [ "$errors" -gt 0 ]; then
        [ $rc -eq 2 ] || fail "exit $rc with errors"
        for f in "${refused[@]}"; do grep -q -- "error: $f is not supported: " err.txt || { cat err.txt; fail "$f not refused by name"; }; done
        [ "$errors" -le ${#refused[@]} ] || { cat err.txt; fail "errors beyond the refused flags"; }
    fi
    # the same recipe without the refused flags (and their values: the words up to the next flag)
    for ((i = 0; i < ${#RECIPE[@]}; i++)); do
        f=${RECIPE[$i]}
        if [[ " ${refused[*]} " == *" $f "* ]]; then
            while [ $((i + 1)) -lt ${#RECIPE[@]} ] && [[ ${RECIPE[$((i + 1))]} != --* ]]; do i=$((i + 1)); done
            continue
        fi
        keep+=("$f")
    done
    "$RUN" "${keep[@]}" --dry-run > out.txt 2> err2.txt || { cat err2.txt; fail "the recipe without ${refused[*]} fails --dry-run"; }
    grep -q "error" err2.txt && { cat err2.txt; fail "errors without the refused flags"; }
    grep -q "GPT 2 layers, hidden 64, heads 8" out.txt || { cat out.txt; fail "the recipe's model was not built"; }
    echo "ok: $CASE: refused only ${refused[*]} (exit $rc, $errors error lines), --dry-run passes without them;" \
         "$(grep -c warning: err2.txt) warnings"
}

# train_recipe N: the recipe without the flags check_recipe found refused ($keep) trains N
# iterations, each logging a finite lm loss, and saves its checkpoint
train_recipe() {
    "$RUN" "${keep[@]}" > train.txt 2> terr.txt || { cat terr.txt; fail "the recipe does not train"; }
    local n
    n=$(grep -cE "iteration +[0-9]+/ +$1 \|.*\| lm loss: [0-9.]+E[-+][0-9]+ \|" train.txt)
    [ "$n" -eq "$1" ] || { cat train.txt terr.txt; fail "$n of $1 iterations logged a finite lm loss"; }
    [ -f ck/latest_checkpointed_iteration.txt ] || fail "no checkpoint saved"
    echo "ok: $CASE trains $1 iterations on --mock-data: $(grep -oE 'lm loss: [0-9.E+-]+' train.txt | tr '\n' ' ')"
}

case "$CASE" in
all_bad_flags_one_run)
    "$RUN" --text-file text.txt "${TINY[@]}" --no-such-flag 3 --hidden-size abc --lr 1e-3x --lr-decay-style sqrt \
        --fp8-param-gather --other-unknown --num-layers > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] || { cat err.txt; fail "exit $rc, want 2"; }
    for want in "unknown flag '--no-such-flag'" "--hidden-size expects an integer, got 'abc'" \
                "--lr expects a number, got '1e-3x'" "--lr-decay-style must be one of" "--fp8-param-gather is not supported: " \
                "unknown flag '--other-unknown'" "--num-layers needs a value"; do
        grep -qF -- "$want" err.txt || { cat err.txt; fail "stderr lacks: $want"; }
    done
    [ "$(grep -c 'error:' err.txt)" -eq 7 ] || { cat err.txt; fail "want 7 error lines"; }
    [ -s out.txt ] && fail "stdout not empty"
    echo "ok: 7 bad flags reported in one run" ;;
accepted_without_effect)
    "$RUN" --text-file text.txt "${TINY[@]}" --use-mcore-models --transformer-impl transformer_engine \
        --attention-backend auto --distributed-backend nccl --no-masked-softmax-fusion --num-workers 2 \
        --dataloader-type cyclic --cp-comm-type p2p --dry-run > out.txt 2> err.txt || { cat err.txt; fail "no-op flags refused"; }
    [ "$(grep -c 'warning: .* has no effect: ' err.txt)" -eq 8 ] || { cat err.txt; fail "want 8 warnings"; }
    grep -q error err.txt && fail "an error for an accepted flag"
    # a no-op flag still gets its value checked
    "$RUN" --text-file text.txt "${TINY[@]}" --transformer-impl te --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q -- "--transformer-impl must be one of local|transformer_engine" err.txt || fail "bad choice accepted"
    "$RUN" --text-file text.txt "${TINY[@]}" --cp-comm-type a2a --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -qF -- "--cp-comm-type must be one of p2p (got 'a2a')" err.txt || { cat err.txt; fail "cp-comm-type a2a accepted"; }
    echo "ok: 8 flags accepted with a warning" ;;
refused_by_name)
    "$RUN" --text-file text.txt "${TINY[@]}" --bf16 --step-batch-size-schedule "0:16 1000:32" \
        --position-embedding-type mrope --rotary-seq-len-interpolation-factor 2 --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] || fail "exit $?, want 2"
    # --bf16 needs AVX512-BF16 (tests/tools/bf16.sh); where the CPU has it, it runs
    bf16_want="--bf16 is not supported: bf16 matrix products on CPUs need AVX512-BF16"
    grep -qw avx512_bf16 /proc/cpuinfo && bf16_want="--step-batch-size-schedule is not supported"
    for want in "$bf16_want" "--step-batch-size-schedule is not supported" \
                "--position-embedding-type mrope is not supported" \
                "--rotary-seq-len-interpolation-factor is not supported: RoPE has no position interpolation"; do
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
    # GPT-2 data read with the byte-level tokenizer: found when the data is opened
    "$RUN" --data-path docs_text_document --tokenizer-type ByteLevelTokenizer "${TINY[@]}" --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q "dataset docs_text_document holds token id [0-9]* .*outside the vocabulary of ByteLevelTokenizer \[0, 256)" err.txt ||
        { cat err.txt; fail "token ids outside the vocabulary not found at open"; }
    echo "ok: GPT2BPETokenizer by default; foreign token ids refused at open" ;;
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
recipe_70b)
    # the 70B recipe of issue 14, exactly its flags, sizes scaled down and parallel sizes 1,
    # with Megatron's memory advice for it
    gpt2_data 1500
    RECIPE=(--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
            --num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 64 --max-position-embeddings 64
            --micro-batch-size 1 --global-batch-size 8 --lr 3e-4 --train-iters 100 --lr-decay-style cosine
            --lr-warmup-iters 10 --weight-decay 0.1 --clip-grad 1.0 --bf16 --use-mcore-models
            --transformer-impl transformer_engine --data-path docs_text_document "${VOCAB[@]}"
            --recompute-granularity full --recompute-method block --recompute-num-layers 1
            --num-layers-per-virtual-pipeline-stage 2 --dataloader-type cyclic
            --init-method-std 0.006 --attention-dropout 0.0 --hidden-dropout 0.0)
    check_recipe "--bf16" ;;
recipe_gpt3_175b)
    # Megatron's examples/gpt3/train_gpt3_175b_distributed.sh: every flag it passes, sizes
    # and iteration counts scaled down, parallel sizes 1
    gpt2_data 1500
    RECIPE=(--num-layers 2 --hidden-size 64 --num-attention-heads 8 --seq-length 32 --max-position-embeddings 32
            --attention-backend auto
            --micro-batch-size 1 --global-batch-size 16 --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928"
            --train-iters 50 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006
            --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001
            --lr-decay-iters 43
            --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1
            --data-path docs_text_document "${VOCAB[@]}" --split 949,50,1
            --log-interval 100 --save-interval 10000 --eval-interval 1000 --save ck --load ck --eval-iters 10
            --tensorboard-dir tb)
    check_recipe "--step-batch-size-schedule" ;;
exit_and_model_flags)
    # --exit-interval: stop after iteration 3 of 6, saving a checkpoint first, without the
    # final evaluation, exit status 0 (Megatron's checkpoint_and_decide_exit)
    "$RUN" --text-file text.txt "${TINY[@]}" --train-iters 6 --log-interval 1 --exit-interval 3 --save ck \
        --eval-interval 100 --eval-iters 1 --split 80,20,0 --metrics-file m.jsonl > out.txt 2> err.txt ||
        { cat out.txt err.txt; fail "--exit-interval run"; }
    grep -q "exiting program at iteration 3" out.txt || { cat out.txt; fail "no exit line"; }
    [ "$(grep -c '"lm_loss"' m.jsonl)" -eq 3 ] || { cat m.jsonl; fail "want 3 iterations"; }
    grep -q val_loss m.jsonl && fail "evaluated after an early exit"
    [ -d ck/iter_0000003 ] || { ls ck; fail "no checkpoint of iteration 3"; }
    # --exit-duration-in-mins: the first iteration ends past 0.1 ms
    "$RUN" --text-file text.txt "${TINY[@]}" --train-iters 6 --log-interval 1 --exit-duration-in-mins 0.000001 \
        --metrics-file d.jsonl > out.txt 2> err.txt || { cat out.txt err.txt; fail "--exit-duration-in-mins run"; }
    grep -q "exiting program after .* minutes" out.txt && [ "$(grep -c '"lm_loss"' d.jsonl)" -eq 1 ] ||
        { cat out.txt; fail "--exit-duration-in-mins did not stop after the first iteration"; }
    # --no-position-embedding: the model without a position table (Megatron's NoPE)
    for p in "--no-position-embedding" "--position-embedding-type none" ""; do
        # shellcheck disable=SC2086
        "$RUN" --text-file text.txt "${TINY[@]}" --train-iters 3 $p --metrics-file "p${p// /}.jsonl" > out.txt 2> err.txt ||
            { cat err.txt; fail "run with '$p'"; }
    done
    cmp -s <(grep -o '"lm_loss": [^,]*' p--no-position-embedding.jsonl) \
           <(grep -o '"lm_loss": [^,]*' p--position-embedding-typenone.jsonl) ||
        fail "--no-position-embedding is not --position-embedding-type none"
    cmp -s <(grep -o '"lm_loss": [^,]*' p--no-position-embedding.jsonl) <(grep -o '"lm_loss": [^,]*' p.jsonl) &&
        fail "--no-position-embedding changed nothing"
    # values mgraph cannot honour, by name
    "$RUN" --text-file text.txt "${TINY[@]}" --kv-channels 0 --optimizer sgd --moe-router-load-balancing-type sinkhorn \
        --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] || fail "exit $?, want 2"
    for want in "--kv-channels must be >= 1" "--optimizer sgd is not supported" \
                "--moe-router-load-balancing-type sinkhorn is not supported"; do
        grep -qF -- "$want" err.txt || { cat err.txt; fail "stderr lacks: $want"; }
    done
    echo "ok: --exit-interval, --exit-duration-in-mins, --no-position-embedding; values refused by name" ;;
attention_variants)
    # --add-qkv-bias, --qk-layernorm (Qwen2, Qwen3; checked against transformers in
    # checkpoint.hf_llama_transformers): they train, a checkpoint remembers them, and the
    # q/k norms are decayed only with --apply-wd-to-qk-layernorm
    Q=(--text-file text.txt "${TINY[@]}" --num-layers 2 --hidden-size 16 --num-attention-heads 4 --normalization RMSNorm
       --position-embedding-type rope --swiglu --ffn-hidden-size 32 --disable-bias-linear --train-iters 4
       --log-interval 1 --lr 1e-2 --lr-warmup-iters 0 --lr-decay-iters 5 --weight-decay 0.5)
    for f in "" "--add-qkv-bias" "--qk-layernorm" "--qk-layernorm --apply-wd-to-qk-layernorm"; do
        # shellcheck disable=SC2086 # several flags
        "$RUN" "${Q[@]}" $f --metrics-file "q${f// /}.jsonl" > out.txt 2> err.txt || { cat err.txt; fail "run with '$f'"; }
        [ "$(grep -c '"lm_loss"' "q${f// /}.jsonl")" -eq 4 ] || fail "'$f': want 4 iterations"
    done
    loss() { grep -o '"lm_loss": [^,]*' "$1" | sed -n "${2}p"; }
    for f in --add-qkv-bias --qk-layernorm; do
        [ "$(loss "q$f.jsonl" 4)" != "$(loss q.jsonl 4)" ] || fail "$f changed nothing"
    done
    # weight decay on the norms: the same first loss, then another trajectory
    [ "$(loss q--qk-layernorm.jsonl 1)" = "$(loss q--qk-layernorm--apply-wd-to-qk-layernorm.jsonl 1)" ] &&
        [ "$(loss q--qk-layernorm.jsonl 4)" != "$(loss q--qk-layernorm--apply-wd-to-qk-layernorm.jsonl 4)" ] ||
        fail "--apply-wd-to-qk-layernorm: want the same first loss and different later ones"
    "$RUN" "${Q[@]}" --qk-layernorm --add-qkv-bias --save ck > out.txt 2> err.txt || { cat err.txt; fail "--save"; }
    for f in --qk-layernorm --add-qkv-bias; do
        others=(--qk-layernorm --add-qkv-bias)
        # shellcheck disable=SC2206 # the other flag
        keep=(${others[@]/$f})
        "$RUN" "${Q[@]}" "${keep[@]}" --load ck --train-iters 5 > out.txt 2> err.txt
        rc=$?
        [ $rc -eq 2 ] && grep -q -- "$f does not match the checkpoint" err.txt || { cat err.txt; fail "--load without $f: exit $rc"; }
    done
    "$RUN" "${Q[@]}" --qk-layernorm --add-qkv-bias --load ck --train-iters 5 > out.txt 2> err.txt || { cat err.txt; fail "--load"; }
    echo "ok: --add-qkv-bias, --qk-layernorm and --apply-wd-to-qk-layernorm train, and a checkpoint keeps them"
    # --qk-l2-norm (Megatron's L2Norm, Llama 4) is --qk-layernorm's RMSNorm with its weights
    # held at one: the first loss (those weights still at their initial one) is the same bit
    # for bit, later ones differ (--qk-layernorm trains its weights); a checkpoint keeps it;
    # with --qk-layernorm it is refused
    "$RUN" "${Q[@]}" --qk-l2-norm --save ckl2 --metrics-file l2.jsonl > out.txt 2> err.txt || { cat err.txt; fail "--qk-l2-norm"; }
    [ "$(loss l2.jsonl 1)" = "$(loss q--qk-layernorm.jsonl 1)" ] || fail "--qk-l2-norm's first loss differs from --qk-layernorm's"
    [ "$(loss l2.jsonl 4)" != "$(loss q--qk-layernorm.jsonl 4)" ] && [ "$(loss l2.jsonl 4)" != "$(loss q.jsonl 4)" ] ||
        fail "--qk-l2-norm trains as --qk-layernorm, or as no norm"
    "$RUN" "${Q[@]}" --load ckl2 --train-iters 5 > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--qk-l2-norm does not match the checkpoint" err.txt || { cat err.txt; fail "--load without --qk-l2-norm: exit $rc"; }
    "$RUN" "${Q[@]}" --qk-l2-norm --qk-layernorm --dry-run > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--qk-layernorm and --qk-l2-norm are two norms of q and k: give one" err.txt ||
        { cat err.txt; fail "--qk-l2-norm with --qk-layernorm: exit $rc"; }
    echo "ok: --qk-l2-norm is the q/k RMSNorm with unit weights, a checkpoint keeps it, with --qk-layernorm refused" ;;
squared_relu)
    # --squared-relu (Nemotron's MLP, relu(x)²; the op's forward and gradient are in
    # ops.forward/grad.squared_relu, tp x cp x SP in partitioners.equivalence_relu2_*):
    # it trains, differs from GELU, a checkpoint remembers it, and SwiGLU with it is refused
    R=(--text-file text.txt "${TINY[@]}" --num-layers 2 --hidden-size 16 --num-attention-heads 4 --train-iters 4
       --log-interval 1 --lr 1e-2 --lr-warmup-iters 0)
    "$RUN" "${R[@]}" --metrics-file gelu.jsonl > out.txt 2> err.txt || { cat err.txt; fail "GELU run"; }
    "$RUN" "${R[@]}" --squared-relu --save ck --metrics-file relu2.jsonl > out.txt 2> err.txt ||
        { cat err.txt; fail "--squared-relu run"; }
    [ "$(grep -c '"lm_loss"' relu2.jsonl)" -eq 4 ] || fail "want 4 iterations"
    cmp -s <(grep -o '"lm_loss": [^,]*' gelu.jsonl) <(grep -o '"lm_loss": [^,]*' relu2.jsonl) && fail "--squared-relu changed nothing"
    "$RUN" "${R[@]}" --load ck --train-iters 5 > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--squared-relu does not match the checkpoint" err.txt || { cat err.txt; fail "--load without --squared-relu: exit $rc"; }
    "$RUN" "${R[@]}" --squared-relu --swiglu --ffn-hidden-size 32 --dry-run > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--swiglu and --squared-relu are two MLP activations" err.txt || { cat err.txt; fail "--swiglu with --squared-relu: exit $rc"; }
    echo "ok: --squared-relu trains, a checkpoint keeps it, --swiglu with it refused" ;;
legacy_flags)
    # Megatron's shorthand and legacy spellings (validate_args): --recompute-activations is
    # --recompute-granularity selective and --use-rotary-position-embeddings is
    # --position-embedding-type rope, bit for bit; its removed flags exit 2 naming the new ones
    L=(--text-file text.txt "${TINY[@]}" --num-layers 2 --hidden-size 16 --num-attention-heads 4 --train-iters 3
       --log-interval 1 --lr 1e-2 --lr-warmup-iters 0)
    losses() { grep -o '"lm_loss": [^,]*' "$1"; }
    for f in "--recompute-granularity selective" --recompute-activations "--position-embedding-type rope" \
             --use-rotary-position-embeddings; do
        # shellcheck disable=SC2086 # a flag and its value
        "$RUN" "${L[@]}" $f --metrics-file "l${f// /}.jsonl" > out.txt 2> err.txt || { cat err.txt; fail "run with '$f'"; }
        [ "$(grep -c '"lm_loss"' "l${f// /}.jsonl")" -eq 3 ] || fail "'$f': want 3 iterations"
    done
    cmp -s <(losses l--recompute-granularityselective.jsonl) <(losses l--recompute-activations.jsonl) ||
        fail "--recompute-activations differs from --recompute-granularity selective"
    cmp -s <(losses l--position-embedding-typerope.jsonl) <(losses l--use-rotary-position-embeddings.jsonl) ||
        fail "--use-rotary-position-embeddings differs from --position-embedding-type rope"
    "$RUN" "${L[@]}" --metrics-file plain.jsonl > out.txt 2> err.txt || { cat err.txt; fail "plain run"; }
    cmp -s <(losses plain.jsonl) <(losses l--use-rotary-position-embeddings.jsonl) && fail "--use-rotary-position-embeddings changed nothing"
    for bad in "--checkpoint-activations|use --recompute-activations" "--model-parallel-size 2|use --tensor-model-parallel-size" \
               "--batch-size 4|use --micro-batch-size" "--warmup 10|use --lr-warmup-fraction"; do
        # shellcheck disable=SC2086 # a flag and its value
        "$RUN" "${L[@]}" ${bad%%|*} --dry-run > out.txt 2> err.txt
        rc=$?
        [ $rc -eq 2 ] && grep -q -- "${bad%%[ |]*} is not supported: no longer valid in Megatron: ${bad#*|}" err.txt ||
            { cat err.txt; fail "'${bad%%|*}': exit $rc"; }
    done
    echo "ok: --recompute-activations and --use-rotary-position-embeddings as Megatron reads them, removed flags refused" ;;
exact_gelu)
    # --no-bias-gelu-fusion: Megatron's unfused MLP applies torch's exact GELU, its fused
    # bias-GELU (the default) the tanh approximation (the ops in ops.forward.gelu_erf and
    # ops.forward.gelu, transformers' "gelu" in checkpoint.hf_transformers, tp x cp x SP and
    # ep in *.equivalence_*gelu_erf*): it trains differently, a checkpoint keeps it, it
    # changes nothing for a SwiGLU MLP, and --disable-bias-linear without it warns
    G=(--text-file text.txt "${TINY[@]}" --num-layers 2 --hidden-size 16 --num-attention-heads 4 --train-iters 4
       --log-interval 1 --lr 1e-2 --lr-warmup-iters 0 --init-method-std 0.5)
    losses() { grep -o '"lm_loss": [^,]*' "$1"; }
    "$RUN" "${G[@]}" --metrics-file tanh.jsonl > out.txt 2> err.txt || { cat err.txt; fail "default GELU run"; }
    "$RUN" "${G[@]}" --no-bias-gelu-fusion --save ck --metrics-file erf.jsonl > out.txt 2> err.txt ||
        { cat err.txt; fail "--no-bias-gelu-fusion run"; }
    [ "$(grep -c '"lm_loss"' erf.jsonl)" -eq 4 ] || fail "want 4 iterations"
    cmp -s <(losses tanh.jsonl) <(losses erf.jsonl) && fail "--no-bias-gelu-fusion changed nothing"
    "$RUN" "${G[@]}" --load ck --train-iters 5 > out.txt 2> err.txt
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--no-bias-gelu-fusion (the exact GELU) does not match the checkpoint" err.txt ||
        { cat err.txt; fail "--load without --no-bias-gelu-fusion: exit $rc"; }
    S=("${G[@]}" --normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 32)
    "$RUN" "${S[@]}" --metrics-file s.jsonl > out.txt 2> err.txt || { cat err.txt; fail "SwiGLU run"; }
    "$RUN" "${S[@]}" --no-bias-gelu-fusion --metrics-file s_erf.jsonl > out.txt 2> err.txt || { cat err.txt; fail "SwiGLU run with the flag"; }
    cmp -s <(losses s.jsonl) <(losses s_erf.jsonl) || fail "--no-bias-gelu-fusion changed a SwiGLU MLP"
    "$RUN" "${G[@]}" --disable-bias-linear --dry-run > out.txt 2> err.txt || { cat err.txt; fail "--disable-bias-linear dry run"; }
    grep -q "warning: --disable-bias-linear with a GELU MLP: Megatron requires --no-bias-gelu-fusion" err.txt ||
        { cat err.txt; fail "no warning for --disable-bias-linear with the fused GELU"; }
    "$RUN" "${G[@]}" --disable-bias-linear --no-bias-gelu-fusion --dry-run > out.txt 2> err.txt || fail "dry run"
    grep -q "warning" err.txt && { cat err.txt; fail "a warning with --no-bias-gelu-fusion given"; }
    echo "ok: --no-bias-gelu-fusion: the exact GELU trains, a checkpoint keeps it, SwiGLU unchanged, the warning" ;;
sliding_window)
    # --window-size L,0 and --window-attn-skip-freq N (Mistral's, Gemma's and GPT-OSS's
    # attention; the kernel against a naive loop in ops.forward.attention_window, against
    # transformers' MistralForCausalLM in checkpoint.hf_llama_transformers, cp x tp x SP and
    # pp against serial in partitioners.equivalence_mistral_*): a window as long as the
    # sequence, or longer, or every layer made a full one, trains bit for bit as no window;
    # a narrow window, and one skipped in every second layer, train differently; a
    # checkpoint remembers both; malformed values and what a causal GPT cannot do refused
    W=(--text-file text.txt --num-layers 2 --hidden-size 16 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2
       --global-batch-size 4 --normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 32
       --disable-bias-linear --train-iters 3 --log-interval 1 --lr 1e-2 --lr-warmup-iters 0 --lr-decay-iters 4)
    losses() { grep -o '"lm_loss": [^,]*' "$1"; }
    for f in "" "--window-size 15,0" "--window-size (40,0)" "--window-size 3,0 --window-attn-skip-freq 1" \
             "--window-size 3,0" "--window-size 3,0 --window-attn-skip-freq 2"; do
        # shellcheck disable=SC2086 # several flags
        "$RUN" "${W[@]}" $f --metrics-file "w${f//[ ,()]/}.jsonl" > out.txt 2> err.txt || { cat err.txt; fail "run with '$f'"; }
        [ "$(grep -c '"lm_loss"' "w${f//[ ,()]/}.jsonl")" -eq 3 ] || fail "'$f': want 3 iterations"
    done
    for f in --window-size150 --window-size400 --window-size30--window-attn-skip-freq1; do
        cmp -s <(losses w.jsonl) <(losses "w$f.jsonl") || fail "$f: want the losses of no window, bit for bit"
    done
    cmp -s <(losses w.jsonl) <(losses w--window-size30.jsonl) && fail "a window of 4 keys changed nothing"
    cmp -s <(losses w--window-size30.jsonl) <(losses w--window-size30--window-attn-skip-freq2.jsonl) &&
        fail "--window-attn-skip-freq 2 changed nothing"
    "$RUN" "${W[@]}" --window-size 3,0 --window-attn-skip-freq 2 --save ck > out.txt 2> err.txt || { cat err.txt; fail "--save"; }
    "$RUN" "${W[@]}" --window-size 3,0 --window-attn-skip-freq 2 --load ck --train-iters 4 > out.txt 2> err.txt ||
        { cat err.txt; fail "--load with the same window"; }
    for f in "--window-size 4,0 --window-attn-skip-freq 2" "--window-size 3,0" ""; do
        # shellcheck disable=SC2086 # several flags
        "$RUN" "${W[@]}" $f --load ck --train-iters 4 > out.txt 2> err.txt
        rc=$?
        [ $rc -eq 2 ] && grep -q -- "--window-.* does not match the checkpoint" err.txt ||
            { cat err.txt; fail "--load with '$f': exit $rc"; }
    done
    for bad in "--window-size 3|want two integers L,R" "--window-size 3,1|R = 0 (mgraph's GPT is causal" \
               "--window-size -2,0|want L >= -1" "--window-attn-skip-freq 2|needs --window-size" \
               "--window-size 3,0 --window-attn-skip-freq [1,0]|list patterns are not supported"; do
        # shellcheck disable=SC2086 # several flags
        "$RUN" "${W[@]}" ${bad%%|*} --dry-run > out.txt 2> err.txt
        rc=$?
        [ $rc -eq 2 ] && grep -qF -- "${bad#*|}" err.txt || { cat err.txt; fail "'${bad%%|*}': exit $rc"; }
    done
    echo "ok: --window-size and --window-attn-skip-freq train, a checkpoint keeps them, bad values refused" ;;
recipe_llama3_8b)
    # Megatron's examples/llama/train_llama3_8b_h100_fp8.sh in its default branch
    # (TOKENIZER_ARG=MOCK, DATA_ARG=MOCK): every flag it passes with its default DTYPE fp8,
    # its mock data arguments as its unquoted array expansion delivers them (--split with
    # its quotes), sizes scaled down (head size 8 = 64 / 8, as the recipe's 128 = 4096 / 32;
    # --vocab-size 128256 -> 1024), parallel sizes 1; then it trains
    BF16=--bf16
    grep -qw avx512_bf16 /proc/cpuinfo && BF16=
    RECIPE=(--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 8
            --group-query-attention --num-query-groups 2 --kv-channels 8 --seq-length 64 --max-position-embeddings 64
            --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0
            --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused
            --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear
            --micro-batch-size 1 --global-batch-size 8 --train-samples 32 --lr-decay-samples 30
            --lr-warmup-samples 8 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5
            --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16
            --grad-reduce-in-bf16 --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc
            --empty-unused-memory-level 1 --exit-duration-in-mins 235
            --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
            --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather
            --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
            --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --data-cache-path cache --tiktoken-pattern v2
            --split "'99,1,0'" --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1
            --log-interval 1 --eval-iters 2 --eval-interval 100 --save-interval 1000 --log-throughput --profile
            --profile-step-start 4 --profile-step-end 6 --ckpt-format torch_dist --distributed-timeout-minutes 60
            --save ck --load ck --tensorboard-dir tb)
    check_recipe "$BF16 --fp8-param-gather"
    # and it trains in fp8 (hybrid, delayed, a 1024-step max history): the recipe without
    # --fp8-param-gather, bf16 through the portable kernel, stopped after 2 iterations
    TRAIN=()
    for f in "${RECIPE[@]}"; do [ "$f" = --fp8-param-gather ] || TRAIN+=("$f"); done
    MG_CPU_BF16=emulate "$RUN" "${TRAIN[@]}" --exit-interval 2 > train.txt 2>&1 || { cat train.txt; fail "the fp8 recipe does not train"; }
    grep -q " iteration  *2/" train.txt || { cat train.txt; fail "the fp8 recipe did not reach iteration 2"; }
    echo "ok: the fp8 recipe trains: $(grep -o 'lm loss: [^|]*' train.txt | tr '\n' ' ')"
    # --mock-data with another data source, or a tokenizer without EOD: exit 2, nothing run
    for bad in "--text-file text.txt|--mock-data generates the data: give it without --text-file" \
               "--tokenizer-type ByteLevelTokenizer|no end-of-document token" \
               "--tokenizer-type NullTokenizer --vocab-size 1024 --seed 4294967296|outside [0, 2^32)"; do
        # shellcheck disable=SC2086 # several flags
        "$RUN" --mock-data ${bad%%|*} "${TINY[@]}" > out.txt 2> err.txt
        rc=$?
        [ $rc -eq 2 ] && grep -qF -- "${bad#*|}" err.txt || { cat err.txt; fail "--mock-data ${bad%%|*}: exit $rc"; }
    done
    echo "ok: --mock-data's refusals exit 2" ;;
recipe_llama3_8b_fsdp)
    # Megatron's examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh in its default
    # branch (USE_MEGATRON_FSDP=1, DTYPE fp8, mock data and NullTokenizer), scaled down as
    # recipe_llama3_8b. Its --bf16 is refused with --use-megatron-fsdp on every machine
    # (checked by name here), so the recipe is taken without it
    "$RUN" --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 "${TINY[@]}" --bf16 --use-megatron-fsdp \
        --dry-run > out.txt 2> err.txt
    [ $? -eq 2 ] && grep -q -- "error: --bf16 with --use-megatron-fsdp is not supported yet: " err.txt ||
        { cat err.txt; fail "--bf16 with --use-megatron-fsdp not refused by name"; }
    RECIPE=(--use-mcore-models --num-layers 2 --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 8
            --group-query-attention --num-query-groups 2 --kv-channels 8 --seq-length 64 --max-position-embeddings 64
            --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0 --attention-dropout 0.0
            --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134 --attention-backend fused
            --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear
            --micro-batch-size 1 --global-batch-size 8 --train-samples 32 --lr-decay-samples 30
            --lr-warmup-samples 8 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5
            --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
            --cross-entropy-loss-fusion --no-check-for-nan-in-loss-and-grad --manual-gc --empty-unused-memory-level 1
            --exit-duration-in-mins 235 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params
            --no-gradient-accumulation-fusion --calculate-per-token-loss --init-model-with-meta-device
            --ckpt-format fsdp_dtensor --use-nccl-ub --fsdp-double-buffer --fsdp-manual-registration
            --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
            --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max --fp8-param-gather
            --tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel
            --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --data-cache-path cache --tiktoken-pattern v2
            --split "'99,1,0'" --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1
            --log-interval 1 --eval-iters 2 --eval-interval 100 --save-interval 1000 --log-throughput --logging-level 20
            --distributed-timeout-minutes 60 --save ck --load ck --tensorboard-dir tb)
    check_recipe "--fp8-param-gather"
    train_recipe 4 ;;
recipe_gpt_oss)
    # Megatron's examples/gptoss/02_train.sh in its default branch (TOKENIZER_ARG and
    # DATA_ARG MOCK): every flag, sizes scaled down in its proportions (12 layers -> 2,
    # hidden 512 -> 64, 64 heads of 8 in 8 groups -> 8 heads of 8 in 1 group, ffn 2048 ->
    # 256, window 127 -> 15 keys, seq 8192 -> 64, --vocab-size 128256 -> 1024), pp 8 -> 1;
    # GPT-OSS's own model variant (sinks, clamped quick-GEGLU) is refused by name, and
    # without it (a MoE GPT with alternating sliding-window layers) the recipe trains
    BF16=--bf16
    grep -qw avx512_bf16 /proc/cpuinfo && BF16=
    RECIPE=(--no-masked-softmax-fusion --transformer-impl transformer_engine --disable-bias-linear
            --untie-embeddings-and-output-weights --no-rope-fusion --normalization RMSNorm --num-layers 2 --hidden-size 64
            --ffn-hidden-size 256 --num-attention-heads 8 --group-query-attention --num-query-groups 1 --seq-length 64
            --max-position-embeddings 64 --use-mcore-models --rotary-percent 1.0 --rope-type rope
            --position-embedding-type rope --rotary-base 10000 --no-bias-gelu-fusion --export-force-local-attention
            --no-bias-dropout-fusion --quick-geglu --glu-linear-offset 1.0 --softmax-type learnable
            --window-attn-skip-freq 2 --activation-func-clamp-value 7.0 --window-size 15,0 --enable-gpt-oss
            --num-experts 4 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-3
            --moe-grouped-gemm --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce
            --moe-ffn-hidden-size 256 --moe-router-dtype fp32 --moe-z-loss-coeff 1e-3 --moe-permute-fusion
            --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --data-cache-path cache --tiktoken-pattern v2
            --split "'99,1,0'" --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1
            --micro-batch-size 1 --global-batch-size 8 --lr 1.0e-5 --train-samples 32 --lr-decay-samples 30
            --lr-decay-style cosine --min-lr 1.0e-6 --weight-decay 0.1 --lr-warmup-fraction 0.05 --clip-grad 1.0 --bf16
            --use-flash-attn --attention-softmax-in-fp32 --accumulate-allreduce-grads-in-fp32
            --disable-bf16-reduced-precision-matmul --recompute-activations --tensor-model-parallel-size 1
            --pipeline-model-parallel-size 1 --expert-model-parallel-size 1 --sequence-parallel --context-parallel-size 1
            --use-distributed-optimizer --fp8-format hybrid --fp8-param-gather --fp8-amax-compute-algo max
            --fp8-amax-history-len 1024 --log-interval 1 --save-interval 10000 --eval-interval 50000000 --eval-iters 0
            --save ck --tensorboard-dir ck/tensorboard --moe-per-layer-logging)
    check_recipe "$BF16 --fp8-param-gather --quick-geglu --glu-linear-offset --softmax-type --activation-func-clamp-value --enable-gpt-oss"
    train_recipe 4 ;;
recipe_mixtral_8x7b)
    # Megatron's examples/mixtral/train_mixtral_8x7b_distributed.sh: every flag it passes
    # (with its optional Weights & Biases pair), sizes scaled down, parallel sizes 1, --split
    # 90,8,2 for its 99990,8,2 (which leaves a small dataset no validation sample); the
    # Llama2Tokenizer on a Megatron dataset tokenized with the same SentencePiece model
    [ -f "$DATA/mistral/tokenizer.model" ] || fail "no SentencePiece model in $DATA"
    for i in $(seq 1 1500); do printf '{"text": "Document %d: to be, or not to be, that is the question."}\n' $i; done > docs.jsonl
    "$PRE" --input docs.jsonl --output-prefix sp --tokenizer-type SentencePieceTokenizer \
        --tokenizer-model "$DATA/mistral/tokenizer.model" --append-eod --workers 1 > pre.txt 2>&1 || { cat pre.txt; fail "preprocess"; }
    BF16=--bf16
    grep -qw avx512_bf16 /proc/cpuinfo && BF16=
    RECIPE=(--use-mcore-models --disable-bias-linear --seq-length 32 --max-position-embeddings 256 --num-layers 2
            --hidden-size 64 --ffn-hidden-size 224 --num-attention-heads 8 --init-method-std 0.01 --attention-dropout 0.0
            --hidden-dropout 0.0 --normalization RMSNorm --position-embedding-type rope --swiglu
            --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --no-masked-softmax-fusion
            --no-position-embedding --rotary-base 1000000
            --num-experts 4 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2
            --moe-grouped-gemm --moe-token-dispatcher-type alltoall --overlap-param-gather --overlap-grad-reduce
            --tokenizer-type Llama2Tokenizer --tokenizer-model "$DATA/mistral/tokenizer.model" --data-path sp_text_document
            --split 90,8,2
            --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 --train-iters 50 --lr-decay-iters 32
            --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 0.1 --lr-warmup-iters 5 --clip-grad 1.0 --bf16
            --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --expert-model-parallel-size 1
            --use-distributed-optimizer --sequence-parallel
            --log-interval 1 --save-interval 10000 --eval-interval 1000 --eval-iters 10 --save ck --load ck
            --tensorboard-dir tb --no-load-optim --no-load-rng --wandb-project Mixtral --wandb-exp-name Mixtral_8x7B)
    check_recipe "$BF16"
    grep -q "vocab 32000" out.txt || { cat out.txt; fail "Llama2Tokenizer did not give the SentencePiece vocabulary"; } ;;
recipe_qwen3_30b_a3b)
    # Megatron's Qwen3-30B-A3B flags (examples/post_training/modelopt/conf/Qwen/Qwen3-30B-A3B.sh,
    # MODEL_ARGS: every flag), sizes scaled down in its proportions (48 layers -> 2, hidden
    # 2048 -> 64, heads 32 -> 8 of --kv-channels 16, so q is 128 wide as its 32 x 128 = 4096
    # against hidden 2048; 128 experts top-8 of 768 -> 8 top-2 of 24), parallel sizes 1;
    # its HuggingFaceTokenizer (the hub's Qwen3 vocabulary) is replaced by Megatron data in
    # GPT-2 BPE, and the modelopt scripts' --save / batch / schedule flags are added
    gpt2_data 1500
    BF16=--bf16
    grep -qw avx512_bf16 /proc/cpuinfo && BF16=
    RECIPE=(--save-interval 100000 --micro-batch-size 1 --bf16 --no-masked-softmax-fusion --disable-bias-linear
            --untie-embeddings-and-output-weights --position-embedding-type rope --no-rope-fusion --normalization RMSNorm
            --swiglu --num-layers 2 --hidden-size 64 --ffn-hidden-size 192 --num-attention-heads 8
            --group-query-attention --num-query-groups 2 --kv-channels 16 --qk-layernorm --num-experts 8
            --moe-ffn-hidden-size 24 --moe-router-topk 2 --moe-router-dtype fp32 --moe-aux-loss-coeff 1e-3
            --moe-token-dispatcher-type alltoall --moe-router-load-balancing-type aux_loss --seq-length 64
            --max-position-embeddings 640 --make-vocab-size-divisible-by 1187 --use-mcore-models --rotary-percent 1.0
            --rotary-base 1000000 --no-bias-swiglu-fusion --sequence-parallel
            --data-path docs_text_document "${VOCAB[@]}" --save ck --global-batch-size 4 --train-iters 4 --lr 1e-3
            --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0)
    check_recipe "$BF16"
    # it trains: the recipe (without what this machine refuses) for 4 iterations, each
    # logging a finite lm loss and the load-balancing loss, the loss falling; the saved
    # checkpoint is Qwen3-MoE's (experts, q/k norms, heads of --kv-channels)
    keep=()
    for f in "${RECIPE[@]}"; do [ -n "$BF16" ] && [ "$f" = "$BF16" ] && continue; keep+=("$f"); done
    "$RUN" "${keep[@]}" > train.txt 2> terr.txt || { cat terr.txt; fail "the recipe does not train"; }
    n=$(grep -cE "iteration +[0-9]+/ +4 \|.*\| lm loss: [0-9.]+E[-+][0-9]+ \| load_balancing_loss: [0-9.]+ \|" train.txt)
    [ "$n" -eq 4 ] || { cat train.txt; fail "$n of 4 iterations logged with lm and load-balancing losses"; }
    losses=$(sed -n 's/.*| lm loss: \([0-9.E+-]*\) |.*/\1/p' train.txt | tr '\n' ' ')
    awk -v l="$losses" 'BEGIN { n = split(l, a, " "); exit !(n == 4 && a[4] + 0 < a[1] - 0.05) }' ||
        { cat train.txt; fail "the lm loss did not fall: $losses"; }
    idx=ck/iter_0000004/index.json
    for want in '"num_experts": 8' '"kv_channels": 16' '"qk_layernorm": true' 'mlp.experts.fc1.weight' \
                'self_attn.q_norm.weight'; do
        grep -qF -- "$want" "$idx" || { head -c 2000 "$idx"; fail "the checkpoint lacks $want"; }
    done
    echo "ok: the recipe trains 4 iterations, lm loss $losses" ;;
recipe_deepseek_v3)
    # Megatron's DeepSeek-V3 recipe (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh,
    # PRETRAIN_ARGS: every flag; its --use-megatron-fsdp additions are issue 40's), sizes
    # scaled down in its proportions (61 layers -> 2 with its first dense then MoE pattern,
    # hidden 64, 8 heads, MLA ranks 24 / 16 with q/k parts 16 + 8 and values 16, 8 experts
    # in 4 groups top-2 of 24 with a shared expert of 24, YaRN factor 40), parallel sizes 1,
    # sample counts cut to 4 iterations; GPT-2 BPE data in place of the hub's tokenizer.
    # Refused by name: Megatron's benchmark switch --moe-router-force-load-balancing (and
    # --bf16 where the CPU lacks avx512_bf16); then the rest trains, multi-token prediction
    # included
    gpt2_data 1500
    BF16=--bf16
    grep -qw avx512_bf16 /proc/cpuinfo && BF16=
    RECIPE=(--distributed-timeout-minutes 60 --tensor-model-parallel-size 1 --expert-model-parallel-size 1
            --expert-tensor-parallel-size 1 --context-parallel-size 1 --use-distributed-optimizer --overlap-grad-reduce
            --overlap-param-gather --use-mcore-models --sequence-parallel --use-flash-attn --disable-bias-linear
            --micro-batch-size 1 --global-batch-size 8 --train-samples 32 --exit-duration-in-mins 220
            --no-check-for-nan-in-loss-and-grad --manual-gc --manual-gc-interval 10 --recompute-granularity selective
            --recompute-modules mlp moe mla_up_proj layernorm --transformer-impl transformer_engine --seq-length 64
            --data-cache-path cache --data-path docs_text_document "${VOCAB[@]}" --split 99,1,0 --no-mmap-bin-files
            --no-create-attention-mask-in-dataloader --num-workers 6 --num-layers 2 --hidden-size 64
            --ffn-hidden-size 192 --num-attention-heads 8 --kv-channels 16 --max-position-embeddings 64
            --position-embedding-type rope --rotary-base 10000 --make-vocab-size-divisible-by 3232
            --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --untie-embeddings-and-output-weights
            --multi-latent-attention --attention-dropout 0.0 --hidden-dropout 0.0 --clip-grad 1.0 --weight-decay 0.1
            --qk-layernorm --lr-decay-samples 24 --lr-warmup-samples 8 --lr-warmup-init 3.9e-7 --lr 3.9e-6
            --min-lr 3.9e-7 --lr-decay-style cosine --adam-beta1 0.9 --adam-beta2 0.95 --num-experts 8
            --moe-layer-freq '[0]*1+[1]*1' --moe-ffn-hidden-size 24 --moe-shared-expert-intermediate-size 24
            --moe-router-load-balancing-type seq_aux_loss --moe-router-topk 2 --moe-token-dispatcher-type flex
            --moe-flex-dispatcher-backend hybridep --moe-router-pre-softmax --moe-grouped-gemm --moe-aux-loss-coeff 1e-4
            --moe-router-group-topk 2 --moe-router-num-groups 4 --moe-router-topk-scaling-factor 2.5
            --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3
            --moe-router-dtype fp32 --moe-permute-fusion --moe-router-force-load-balancing --q-lora-rank 24
            --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 16 --rotary-scaling-factor 40
            --mscale 1.0 --mscale-all-dim 1.0 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 --eval-iters 2
            --eval-interval 100 --auto-detect-ckpt-format --load ck --save ck --save-interval 100
            --dist-ckpt-strictness log_all --init-method-std 0.02 --log-timers-to-tensorboard
            --log-memory-to-tensorboard --log-num-zeros-in-grad --log-params-norm --log-validation-ppl-to-tensorboard
            --log-throughput --log-interval 1 --logging-level 40 --tensorboard-dir tb --bf16 --enable-experimental)
    refused="--moe-router-force-load-balancing $BF16"
    check_recipe "$refused"
    # it trains: the recipe without the refused flags, 4 iterations, each logging a finite lm
    # loss, Megatron's seq_load_balancing_loss, mtp_1 loss and the parameters' norm; the checkpoint is
    # DeepSeek-V3's (MLA latents, the expert bias, shared experts, the first layer dense, the
    # MTP layer as Hugging Face's model.layers.2: enorm, hnorm, eh_proj, an MoE layer, its norm)
    keep=()
    for ((i = 0; i < ${#RECIPE[@]}; i++)); do
        f=${RECIPE[$i]}
        if [[ " $refused " == *" $f "* ]]; then
            while [ $((i + 1)) -lt ${#RECIPE[@]} ] && [[ ${RECIPE[$((i + 1))]} != --* ]]; do i=$((i + 1)); done
            continue
        fi
        keep+=("$f")
    done
    "$RUN" "${keep[@]}" > train.txt 2> terr.txt || { cat terr.txt; fail "the recipe does not train"; }
    n=$(grep -cE "iteration +[0-9]+/ +4 \|.*\| lm loss: [0-9.]+E[-+][0-9]+ \|.*seq_load_balancing_loss: [0-9.]+ \| mtp_1 loss: [0-9.]+E[-+][0-9]+ \|.*params norm: [0-9.]+" train.txt)
    [ "$n" -eq 4 ] || { cat train.txt; fail "$n of 4 iterations logged with lm, seq load-balancing and mtp_1 losses"; }
    idx=ck/iter_0000004/index.json
    for want in '"multi_latent_attention"' '"expert_bias": true' 'model.layers.1.mlp.router.expert_bias' \
                'model.layers.1.mlp.shared_experts.down_proj.weight' 'model.layers.0.mlp.down_proj.weight' \
                'self_attn.kv_a_proj_with_mqa.weight' 'self_attn.q_a_layernorm.weight' '"mtp_num_layers": 1' \
                'model.layers.2.enorm.weight' 'model.layers.2.hnorm.weight' 'model.layers.2.eh_proj.weight' \
                'model.layers.2.shared_head.norm.weight' 'model.layers.2.mlp.router.expert_bias'; do
        grep -qF -- "$want" "$idx" || { head -c 3000 "$idx"; fail "the checkpoint lacks $want"; }
    done
    echo "ok: the recipe trains 4 iterations: $(grep -oE 'lm loss: [0-9.E+-]+' train.txt | tr '\n' ' ')" ;;
*) echo "unknown case $CASE"; exit 2 ;;
esac
