#!/usr/bin/env bash
# mgraph-run on Megatron data: mgraph-preprocess turns JSON Lines into .bin/.idx with
# GPT-2 BPE, then mgraph-run trains on --data-path with --split (train and validation
# splits both used), caches its indices under --data-cache-path, and pads the
# tokenizer's vocabulary as Megatron does (50257 -> 50304 at tp 1).
#   data_path.sh PREPROCESS MGRAPH_RUN TEST_DATA WORK_DIR   (TEST_DATA: tests/data)
set -u
PRE=$1 RUN=$2 DATA=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$DATA/gpt2/vocab.json" ] && [ -f "$DATA/tinyshakespeare.txt" ] || fail "no fixtures in $DATA"
# 400 short documents from Tiny Shakespeare, one JSON object per line
awk 'NR <= 4000 { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); line = line $0 " " }
     NR % 10 == 0 && NR <= 4000 { printf "{\"text\": \"%s\"}\n", line; line = "" }' \
    "$DATA/tinyshakespeare.txt" > corpus.jsonl
"$PRE" --input corpus.jsonl --output-prefix shakespeare --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$DATA/gpt2/vocab.json" --merge-file "$DATA/gpt2/merges.txt" --append-eod --workers 2 \
    > pre.txt 2>&1 || { cat pre.txt; fail "preprocess"; }
[ -s shakespeare_text_document.bin ] && [ -s shakespeare_text_document.idx ] || fail "no .bin/.idx"
ARGS=(--data-path shakespeare_text_document --split 90,10,0 --data-cache-path cache
      --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/vocab.json" --merge-file "$DATA/gpt2/merges.txt"
      --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2
      --global-batch-size 4 --train-iters 6 --eval-interval 3 --eval-iters 2 --log-interval 3 --lr 1e-3)
"$RUN" "${ARGS[@]}" --metrics-file m1.jsonl > run1.txt 2>&1 || { cat run1.txt; fail "training on --data-path"; }
grep -q "vocab 50304 (padded)" run1.txt || { cat run1.txt; fail "vocabulary not padded to 50304"; }
[ "$(grep -c '"lm_loss"' m1.jsonl)" -eq 6 ] || fail "want 6 iterations"
# at 3 and 6 (--eval-interval 3), then Megatron's validation after training; no test split
[ "$(grep -c '"val_loss"' m1.jsonl)" -eq 3 ] || fail "want 3 evaluations"
[ "$(grep -c '"test_loss"' m1.jsonl)" -eq 0 ] || fail "an empty test split was evaluated"
ls cache/* > /dev/null 2>&1 || fail "no index cache written"
# the second run reads the cached indices and reproduces the losses exactly
"$RUN" "${ARGS[@]}" --metrics-file m2.jsonl > run2.txt 2>&1 || { cat run2.txt; fail "second run"; }
cmp -s <(grep -o '"lm_loss": [^,]*' m1.jsonl) <(grep -o '"lm_loss": [^,]*' m2.jsonl) || fail "cached run differs"
# initial loss near ln(50304) = 10.83: the model starts uniform over the padded vocabulary
awk -F'"lm_loss": ' 'NR == 1 { split($2, a, ","); l = a[1] + 0; exit !(l > 10.5 && l < 11.2) }' m1.jsonl ||
    fail "first loss not near ln(50304)"
# a missing dataset is bad input
"$RUN" "${ARGS[@]}" --data-path nowhere > bad.txt 2>&1
[ $? -eq 2 ] || fail "missing --data-path should exit 2"
echo "ok: preprocess -> --data-path training, evaluation, cache, padded vocabulary"

# Megatron's per-split paths: --train-data-path A --valid-data-path B trains on the whole
# of A (the losses of --data-path A --split 100,0,0, bit for bit) and evaluates on the
# whole of B (the validation loss of --data-path B --split 0,100,0 from the same weights)
awk 'NR > 4000 && NR <= 6000 { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); line = line $0 " " }
     NR % 10 == 0 && NR > 4000 && NR <= 6000 { printf "{\"text\": \"%s\"}\n", line; line = "" }' \
    "$DATA/tinyshakespeare.txt" > other.jsonl
"$PRE" --input other.jsonl --output-prefix other --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$DATA/gpt2/vocab.json" --merge-file "$DATA/gpt2/merges.txt" --append-eod --workers 2 \
    > pre2.txt 2>&1 || { cat pre2.txt; fail "preprocess of the validation data"; }
COMMON=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2/vocab.json" --merge-file "$DATA/gpt2/merges.txt"
        --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 --micro-batch-size 2
        --global-batch-size 4 --train-iters 6 --log-interval 3 --lr 1e-3)
"$RUN" "${COMMON[@]}" --train-data-path shakespeare_text_document --valid-data-path other_text_document \
    --eval-interval 3 --eval-iters 2 --save ck_split --metrics-file split.jsonl > split.txt 2>&1 ||
    { cat split.txt; fail "training on --train-data-path / --valid-data-path"; }
"$RUN" "${COMMON[@]}" --data-path shakespeare_text_document --split 100,0,0 --eval-iters 0 \
    --metrics-file whole_a.jsonl > whole_a.txt 2>&1 || { cat whole_a.txt; fail "training on --data-path A --split 100,0,0"; }
cmp -s <(grep -o '"lm_loss": [^,]*' split.jsonl) <(grep -o '"lm_loss": [^,]*' whole_a.jsonl) ||
    fail "--train-data-path A does not train as --data-path A --split 100,0,0"
[ "$(grep -c '"val_loss"' split.jsonl)" -eq 3 ] || fail "want 3 evaluations on --valid-data-path"
for how in "--valid-data-path other_text_document" "--data-path other_text_document --split 0,100,0"; do
    # shellcheck disable=SC2086 # the data flags are several words
    "$RUN" "${COMMON[@]}" $how --load ck_split --skip-train --eval-iters 2 --metrics-file "eval_${how%% *}.jsonl" \
        > eval.txt 2>&1 || { cat eval.txt; fail "evaluation with $how"; }
done
cmp -s <(grep -o '"val_loss": [^,]*' eval_--valid-data-path.jsonl) <(grep -o '"val_loss": [^,]*' eval_--data-path.jsonl) ||
    fail "--valid-data-path B does not evaluate as --data-path B --split 0,100,0"
"$RUN" "${COMMON[@]}" --data-path shakespeare_text_document --train-data-path shakespeare_text_document > bad.txt 2>&1
[ $? -eq 2 ] && grep -q "give --data-path or --train-data-path" bad.txt || { cat bad.txt; fail "--data-path with --train-data-path"; }
"$RUN" "${COMMON[@]}" --valid-data-path other_text_document > bad.txt 2>&1
[ $? -eq 2 ] && grep -q "without --train-data-path" bad.txt || { cat bad.txt; fail "--valid-data-path alone"; }
echo "ok: --train-data-path / --valid-data-path: each split from its own data, whole"

# Megatron's --data-args-path (--data-path's values in a file, any white space) and
# --per-split-data-args-path (JSON: train / valid / test, a string, a list or null) train
# bit for bit as the flags they stand for
printf '0.3\nshakespeare_text_document\n\t0.7   other_text_document\n' > blend.txt
"$RUN" "${COMMON[@]}" --data-path 0.3 shakespeare_text_document 0.7 other_text_document --split 90,10,0 \
    --eval-interval 3 --eval-iters 2 --metrics-file blend_flag.jsonl > blend1.txt 2>&1 || { cat blend1.txt; fail "blend"; }
"$RUN" "${COMMON[@]}" --data-args-path blend.txt --split 90,10,0 \
    --eval-interval 3 --eval-iters 2 --metrics-file blend_file.jsonl > blend2.txt 2>&1 || { cat blend2.txt; fail "--data-args-path"; }
cmp -s <(grep -o '"[a-z_]*loss": [^,]*' blend_flag.jsonl) <(grep -o '"[a-z_]*loss": [^,]*' blend_file.jsonl) ||
    fail "--data-args-path does not train as --data-path with its values"
printf '{"train": ["shakespeare_text_document"], "valid": "other_text_document", "test": null}\n' > splits.json
"$RUN" "${COMMON[@]}" --per-split-data-args-path splits.json --eval-interval 3 --eval-iters 2 \
    --metrics-file split_file.jsonl > split2.txt 2>&1 || { cat split2.txt; fail "--per-split-data-args-path"; }
cmp -s <(grep -o '"[a-z_]*loss": [^,]*' split.jsonl) <(grep -o '"[a-z_]*loss": [^,]*' split_file.jsonl) ||
    fail "--per-split-data-args-path does not train as --train-data-path / --valid-data-path"
printf '{"train": "shakespeare_text_document", "valid": null}\n' > nokey.json
printf '{"train": 3, "valid": null, "test": null}\n' > badval.json
for bad in "--data-args-path blend.txt --data-path other_text_document|give --data-path or --data-args-path" \
           "--data-args-path nowhere.txt|--data-args-path nowhere.txt" \
           "--per-split-data-args-path nokey.json|has no \"test\"" \
           "--per-split-data-args-path badval.json|not a string, a list or null" \
           "--per-split-data-args-path splits.json --train-data-path other_text_document|not both"; do
    # shellcheck disable=SC2086 # several flags
    "$RUN" "${COMMON[@]}" ${bad%%|*} --dry-run > bad.txt 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "${bad#*|}" bad.txt || { cat bad.txt; fail "'${bad%%|*}': exit $rc"; }
done
echo "ok: --data-args-path and --per-split-data-args-path train as the flags they hold; bad files exit 2"
