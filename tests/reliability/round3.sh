#!/usr/bin/env bash
# Reliability round 3 (issue 36 items 4, 5, 7, 8, 9, 10): inputs that blocked or crashed,
# conversions that were silently wrong, partial outputs, evaluation alone, messages.
#   round3.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
BIN=$(dirname "$RUN")
CONVERT=$BIN/mgraph-convert PLAN=$BIN/mgraph-plan
# expect CODE "substring" CMD... (bounded: a blocked open fails the 60 s bound)
expect() {
    local code=$1 want=$2
    shift 2
    bounded "$@"
    if [ $rc -eq "$code" ] && [[ $out == *"$want"* ]] && [ "${secs%.*}" -lt 20 ]; then
        ok "exit $rc in ${secs}s: $(grep -m1 -o ': \(error\|failed\): .*\|mgraph-[a-z]*: [^w].*' <<< "$out" | cut -c1-140)"
    else
        fail "want exit $code with '$want' within 20 s for: $*: got $rc in ${secs}s: $(tail -c 400 <<< "$out")"
    fi
}
# a small model's checkpoint and the Hugging Face export (GPT-2) of a 2-layer one, and a dataset
"$RUN" "${SMALL[@]}" --train-iters 2 --save ck > s.txt 2>&1 || { cat s.txt; fail "save"; }
"$RUN" "${SMALL[@]}" --num-layers 2 --train-iters 1 --save ck2 > s.txt 2>&1 || { cat s.txt; fail "save"; }
"$CONVERT" --load ck2 --to-hf hf > c.txt 2>&1 || { cat c.txt; fail "--to-hf"; }
awk 'NR <= 400 { gsub(/"/, ""); printf "{\"text\": \"%s\"}\n", $0 }' corpus.txt > docs.jsonl
"$PRE" --input docs.jsonl --output-prefix ds --tokenizer-type ByteLevelTokenizer > /dev/null 2>&1 || fail "preprocess"
D=(--data-path ds_text_document --tokenizer-type ByteLevelTokenizer --num-layers 1 --hidden-size 32 --num-attention-heads 2
   --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --cpu-workers 1)

echo "== 4: a FIFO given as any input is refused at once (one way inputs are opened)"
mkfifo fifo
expect 2 "is not a regular file (it is a FIFO)" "$RUN" "${SMALL[@]/corpus.txt/fifo}" --train-iters 1
expect 2 "plan file fifo is not a regular file" "$RUN" "${SMALL[@]}" --train-iters 1 --plan fifo
mkdir -p fds && mkfifo fds/x_text_document.bin fds/y_text_document.idx && cp ds_text_document.idx fds/x_text_document.idx &&
    cp ds_text_document.bin fds/y_text_document.bin
expect 2 "dataset fds/x_text_document.bin is not a regular file" "$RUN" "${D[@]/ds_text_document/fds/x_text_document}" --train-iters 1
expect 2 "dataset index fds/y_text_document.idx is not a regular file" "$RUN" "${D[@]/ds_text_document/fds/y_text_document}" --train-iters 1
for f in latest_checkpointed_iteration.txt iter_0000002/index.json iter_0000002/rank_00000.safetensors; do
    rm -rf cf && cp -r ck cf && rm "cf/$f" && mkfifo "cf/$f"
    expect 2 "is not a regular file (it is a FIFO)" "$RUN" "${SMALL[@]}" --train-iters 3 --load cf
done
for f in config.json model.safetensors; do
    rm -rf hf_fifo && cp -r hf hf_fifo && rm "hf_fifo/$f" && mkfifo "hf_fifo/$f"
    expect 2 "is not a regular file (it is a FIFO)" "$CONVERT" --from-hf hf_fifo --save out_fifo
done
[ ! -e out_fifo ] || fail "a refused conversion left out_fifo"
expect 2 "cluster file fifo is not a regular file" "$PLAN" --cluster fifo
expect 2 "--vocab-file fifo is not a regular file" "$RUN" "${SMALL[@]}" --train-iters 1 --tokenizer-type GPT2BPETokenizer \
    --vocab-file fifo --merge-file fifo
ln -s loop1 loop2 && ln -s loop2 loop1 && mkdir -p cl/iter_0000002 && echo 2 > cl/latest_checkpointed_iteration.txt &&
    ln -s ../../loop1 cl/iter_0000002/index.json
expect 2 "Too many levels of symbolic links" "$RUN" "${SMALL[@]}" --train-iters 3 --load cl

echo "== 5: a dataset truncated in place under a running job: exit 1 naming it, no temporary file left"
cp ds_text_document.bin keep.bin
"$RUN" "${D[@]}" --train-iters 20000 --log-interval 1 --metrics-file bus.jsonl > bus.txt 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -n "$(cat .bus.jsonl.tmp-* 2> /dev/null)" ] && break; sleep 0.1; done
truncate -s 100 ds_text_document.bin
wait $pid
rc=$?
[ $rc -eq 1 ] && grep -q "failed: ds_text_document.bin was truncated or rewritten while mgraph-run read it" bus.txt &&
    ok "truncated dataset: exit 1, $(grep -o 'failed: .*' bus.txt | cut -c1-80)" || fail "truncated dataset: rc $rc: $(tail -3 bus.txt)"
[ -s bus.jsonl ] && no_temp_left || fail "after SIGBUS: metrics $(ls -l bus.jsonl 2>&1), files $(ls -A)"
cp keep.bin ds_text_document.bin

echo "== 7: conversions that were silently wrong"
conv2() { # $1 message part, $2 a jq-free edit of config.json (python), rest: more args
    local want=$1 edit=$2
    shift 2
    rm -rf hfe && cp -r hf hfe
    python3 -c "import json,sys; c=json.load(open('hfe/config.json')); $edit; json.dump(c, open('hfe/config.json','w'))"
    expect 2 "$want" "$CONVERT" --from-hf hfe --save oute "$@"
    [ ! -e oute ] || { fail "a refused conversion left its output"; rm -rf oute; }
}
conv2 "holds transformer.h.1.ln_1.weight, which is not part of the model config.json describes" "c['n_layer'] = 1; c.pop('n_inner', None)"
conv2 'layer_norm_epsilon is "abc", not a number' "c['layer_norm_epsilon'] = 'abc'"
conv2 "activation_function is 7, not a string" "c['activation_function'] = 7"
conv2 "partial_rotary_factor 0.5" "c['partial_rotary_factor'] = 0.5"
conv2 "--tokenizer-type Bogus is not a tokenizer" "pass" --tokenizer-type Bogus
mkdir -p user && echo '{"mine": true}' > user/config.json
expect 2 "--to-hf user is not empty" "$CONVERT" --load ck --to-hf user
[ "$(cat user/config.json)" = '{"mine": true}' ] && [ "$(ls user)" = config.json ] && ok "the user's directory is untouched" ||
    fail "the user's directory changed: $(ls user)"

echo "== 8: partial outputs and exit codes"
# SIGTERM while a save is under way (a test hook holds it between the rank files and the index)
MGRAPH_TEST_SAVE_PAUSE_MS=5000 "$RUN" "${SMALL[@]}" --train-iters 100 --save cks --save-interval 3 --tensorboard-dir tb \
    --metrics-file term.jsonl > term.txt 2>&1 &
pid=$!
for _ in $(seq 1 300); do ls cks/iter_0000003.partial/rank_00000.safetensors > /dev/null 2>&1 && break; sleep 0.05; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] && [ ! -e cks/iter_0000003.partial ] && [ -z "$(ls -A tb)" ] && no_temp_left && [ -s term.jsonl ] &&
    ok "SIGTERM during a save: no iter_N.partial, no TensorBoard temp file, the metrics kept" ||
    fail "SIGTERM during a save: rc $rc, cks: $(ls -A cks), tb: $(ls -A tb), here: $(ls -A)"
# a bad --trace-file directory is found before training
expect 2 "cannot write --trace-file nodir/t.json: its directory nodir" "$RUN" "${SMALL[@]}" --train-iters 3 --trace-file nodir/t.json
[[ $out != *"iteration"*"lm loss"* ]] || fail "trained before refusing the trace directory"
# --exit-interval inside --trace-iterations: the trace of the iterations run
expect 0 "holds iterations 2..3 of 2..5" "$RUN" "${SMALL[@]}" --train-iters 8 --trace-file t.json --trace-iterations 2:5 --exit-interval 3
python3 -c "import json; json.load(open('t.json'))" && ok "the early trace is whole JSON" || fail "t.json is not JSON"
expect 0 "not written: the run ended at iteration 3, before the traced iterations 5..6" "$RUN" "${SMALL[@]}" --train-iters 8 \
    --trace-file t2.json --trace-iterations 5:6 --exit-interval 3
# a full disk: exit 1 with the reason, the path once, nothing left (a private 300 KB tmpfs)
if unshare -m sh -c 'mount -t tmpfs -o size=32k tmpfs /mnt' 2> /dev/null; then
    out=$(unshare -m sh -c "mount -t tmpfs -o size=32k tmpfs /mnt && mkdir /mnt/d &&
          '$RUN' ${SMALL[*]} --train-iters 1 --save /mnt/d 2>&1; echo rc=\$?;
          '$CONVERT' --from-hf '$PWD/hf' --save /mnt/c 2>&1; echo rc=\$?; echo LEFT:; ls -A /mnt /mnt/d" 2>&1)
    left=${out##*LEFT:}
    [[ $out == *"No space left on device"*"rc=1"*"No space left on device"*"rc=1"* ]] &&
        [ "$(echo $left)" = "/mnt: d /mnt/d: .mgraph-save.lock" ] &&
        ok "a full disk: mgraph-run and mgraph-convert exit 1 with ENOSPC, nothing half-written left" ||
        fail "full disk: $out"
    n=$(grep -o 'iter_0000001.partial/rank_00000.safetensors' <<< "$out" | wc -l)
    [ "$n" -le 1 ] || fail "the path is named $n times: $out"
else
    echo "note: no private tmpfs here (unshare -m / mount not permitted): the full-disk case runs where it is"
fi

echo "== 9: evaluation alone on a held-out file"
expect 0 "validation loss at iteration 2" "$RUN" "${SMALL[@]}" --load ck --skip-train --split 0,100,0 --eval-iters 2

echo "== 10: messages"
rm -rf ckw && cp -r ck ckw && printf '  2  \n' > ckw/latest_checkpointed_iteration.txt
expect 0 "loaded checkpoint from ckw at iteration 2" "$RUN" "${SMALL[@]}" --train-iters 3 --load ckw --override-opt-param-scheduler
printf '2\0x' > ckw/latest_checkpointed_iteration.txt
expect 2 "latest_checkpointed_iteration.txt does not hold an iteration number" "$RUN" "${SMALL[@]}" --train-iters 3 --load ckw
rm -rf ckr && mkdir ckr && cp -r ck/iter_0000002 ckr/release && echo release > ckr/latest_checkpointed_iteration.txt
expect 0 "loaded checkpoint from ckr at iteration 2" "$RUN" "${SMALL[@]}" --train-iters 3 --load ckr --override-opt-param-scheduler
head -c 300 "$RUN" > binary.plan
bounded "$RUN" "${SMALL[@]}" --train-iters 1 --plan binary.plan
[ $rc -eq 2 ] && ! LC_ALL=C grep -q '[[:cntrl:]]' <<< "$(tr -d '\n' <<< "$out")" && ok "a binary plan file: exit 2, printable message" ||
    fail "binary plan: rc $rc: $(cat -v <<< "$out" | head -c 300)"
touch afile
expect 2 "cannot create directory afile/x: Not a directory" "$CONVERT" --load ck --to-hf afile/x
finish
