#!/usr/bin/env bash
# Faults across ranks end every rank within 30 s with the first error's message
# (issue 18 item 2, "fault handling across ranks", NaN/Inf).
#   faults.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
# A corpus name of this test's own: the SIGKILL case finds its ranks by command line
# (pgrep), and the other reliability tests, which ctest may run beside it, train on
# corpus.txt too (a shared name let it count, or kill, their processes).
cp corpus.txt faults-corpus.txt
DP2=(--text-file faults-corpus.txt --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
     --micro-batch-size 1 --global-batch-size 2 --log-interval 1000 --eval-iters 0 --cpu-workers 1)

# -- a data error: one document holds a token id past the byte-level vocabulary (data
#    tokenized with another tokenizer); it is found when the data is opened, on every
#    rank, before training (exit 2, the dataset and the tokenizer named)
awk 'NR <= 300 { gsub(/"/, ""); printf "{\"text\": \"%s\"}\n", $0 }' corpus.txt > docs.jsonl
"$PRE" --input docs.jsonl --output-prefix bad > /dev/null 2>&1 || fail "preprocess"
# id 300 at every 200th token
python3 -c '
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for t in range(100, len(b) // 2, 200): b[2 * t:2 * t + 2] = (300).to_bytes(2, "little")
open(sys.argv[1], "wb").write(b)' bad_text_document.bin
bounded mpirun -np 2 "$RUN" --data-path bad_text_document --tokenizer-type ByteLevelTokenizer --split 100,0,0 "${DP2[@]:2}" --train-iters 100000
[ $rc -eq 2 ] && [[ $out == *"dataset bad_text_document holds token id 300"*"outside the vocabulary of ByteLevelTokenizer"* ]] &&
    [ "${secs%.*}" -lt 30 ] && ok "data error found at open: every rank ended, exit 2 in $secs s" ||
    fail "data error at open: rc $rc in $secs s: $out"

# -- a rank killed by SIGKILL: mpirun notices and ends the others
mpirun -np 2 "$RUN" "${DP2[@]}" --train-iters 100000000 > killed.txt 2>&1 &
mp=$!
victim=""
for i in $(seq 1 200); do
    victim=$(pgrep -P "$mp" -f "faults-corpus.txt" 2>/dev/null | tail -1)
    [ -z "$victim" ] && victim=$(pgrep -f -- "$RUN --text-file faults-corpus.txt" | tail -1)
    [ -n "$victim" ] && grep -q "bytes sent per step" killed.txt && break
    sleep 0.1
done
sleep 1
t0=$(date +%s)
kill -KILL "$victim"
( sleep 30; kill -KILL $mp 2>/dev/null ) & guard=$!
wait $mp; rc=$?
kill $guard 2>/dev/null
took=$(( $(date +%s) - t0 ))
[ $rc -ne 0 ] && [ $took -lt 30 ] && grep -q "signal 9" killed.txt &&
    ok "a rank killed with SIGKILL: the job ended in ${took} s, exit $rc" || fail "SIGKILL: rc $rc after $took s: $(tail -5 killed.txt)"
for i in $(seq 1 100); do pgrep -f -- "$RUN --text-file faults-corpus.txt" > /dev/null || break; sleep 0.1; done
pgrep -f -- "$RUN --text-file faults-corpus.txt" > /dev/null && fail "ranks left running 10 s after SIGKILL"

# -- a NaN on one rank (test hook: rank 1 poisons a weight before iteration 5)
bounded mpirun -np 2 -x MGRAPH_TEST_NAN_AT=1:5 "$RUN" "${DP2[@]}" --train-iters 100000 --metrics-file nan.jsonl
[ $rc -eq 1 ] && [[ $out == *"found NaN in the "*"at iteration 5"* ]] && [ "${secs%.*}" -lt 30 ] &&
    ok "NaN on one rank: every rank ended, exit 1 in $secs s ($(grep -o 'Rank [0-9]: found NaN in the [a-z ]*' <<< "$out" | head -1))" ||
    fail "NaN on one rank: rc $rc in $secs s: $out"
[ "$(grep -c lm_loss nan.jsonl 2>/dev/null)" = 4 ] && ok "the metrics of the 4 good iterations are kept" ||
    fail "metrics of the NaN run: $(cat nan.jsonl 2>&1)"

# -- --no-check-for-nan-in-loss-and-grad: the run goes on, the log line counts the
#    iterations whose loss was not finite (poisoned before iteration 3: 0, 2, 2 per interval of 2,
#    after Megatron's line for the first iteration: 0)
bounded env MGRAPH_TEST_NAN_AT=0:3 "$RUN" "${SMALL[@]}" --train-iters 6 --no-check-for-nan-in-loss-and-grad \
    --metrics-file nc.jsonl
counts=$(grep -o 'number of nan iterations: *[0-9]*' <<< "$out" | grep -o '[0-9]*$' | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$counts" = "0 0 2 2 " ] && [ "$(grep -c '"lm_loss": null' nc.jsonl)" = 4 ] &&
    ok "unchecked NaN: nan iterations per log interval $counts" || fail "unchecked NaN: rc $rc counts '$counts': $out"
bounded "$RUN" "${SMALL[@]}" --train-iters 6 --init-method-std 1e30
[ $rc -eq 1 ] && [[ $out == *"Rank 0: found NaN in the loss at iteration 1"* ]] && ok "checked NaN (huge init): exit 1" ||
    fail "checked NaN: rc $rc: $out"
finish
