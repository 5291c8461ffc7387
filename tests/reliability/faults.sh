#!/usr/bin/env bash
# Faults across ranks end every rank within 30 s with the first error's message
# (issue 18 item 2, "fault handling across ranks", NaN/Inf). The 30 s are counted from
# the fault's own event (its message in the output, the SIGKILL sent), never from the
# start: a loaded machine may take long to start ranks, not to end them. Waits are for
# events (a log line, a process), bounded by 300 s, never fixed sleeps.
#   faults.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
command -v mpirun > /dev/null || { echo "skip: no mpirun"; exit 77; }
# A corpus name of this test's own: the SIGKILL case finds its ranks by command line
# (pgrep), and the other reliability tests, which ctest may run beside it, train on
# corpus.txt too (a shared name let it count, or kill, their processes).
cp corpus.txt faults-corpus.txt
# ends_after REGEX CMD...: runs CMD (output in ends_after.txt), waits up to 300 s for it to
# end; sets rc, out and secs: the seconds from REGEX's first appearance in the output to
# the end (the whole run's if it never appears; rc 124 if it did not end)
ends_after() {
    local re=$1 seen="" t_end
    shift
    "$@" > ends_after.txt 2>&1 &
    local pid=$! deadline=$((SECONDS + 300))
    while kill -0 $pid 2> /dev/null && [ $SECONDS -lt $deadline ]; do
        [ -z "$seen" ] && grep -Eq -- "$re" ends_after.txt && seen=$(date +%s.%N)
        sleep 0.05
    done
    if kill -0 $pid 2> /dev/null; then kill -KILL $pid; wait $pid 2> /dev/null; rc=124; else wait $pid; rc=$?; fi
    t_end=$(date +%s.%N)
    # a message printed within the last poll's 0.05 s before the end is seen only now
    [ -z "$seen" ] && grep -Eq -- "$re" ends_after.txt && seen=$t_end
    out=$(cat ends_after.txt)
    secs=$(awk -v a="${seen:-$t_end}" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')
    [ -n "$seen" ] || secs=never
}
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
ends_after "holds token id 300" mpirun -np 2 "$RUN" --data-path bad_text_document --tokenizer-type ByteLevelTokenizer \
    --split 100,0,0 "${DP2[@]:2}" --train-iters 100000
[ $rc -eq 2 ] && [[ $out == *"dataset bad_text_document holds token id 300"*"outside the vocabulary of ByteLevelTokenizer"* ]] &&
    [ "$secs" != never ] && [ "${secs%.*}" -lt 30 ] &&
    ok "data error found at open: every rank ended, exit 2, $secs s after the message" ||
    fail "data error at open: rc $rc in $secs s: $out"

# -- a rank killed by SIGKILL: mpirun notices and ends the others
mpirun -np 2 "$RUN" "${DP2[@]}" --train-iters 100000000 > killed.txt 2>&1 &
mp=$!
# the event: both ranks are up and training (rank 0 has printed its plan summary, two
# rank processes run); then one of them is killed
victim="" deadline=$((SECONDS + 300))
while [ $SECONDS -lt $deadline ] && kill -0 $mp 2> /dev/null; do
    if grep -q "bytes sent per step" killed.txt; then
        ranks=$(pgrep -f -- "^$RUN --text-file faults-corpus.txt") # (the ranks: mpirun's line has it too, not first)
        [ "$(wc -w <<< "$ranks")" -eq 2 ] && { victim=$(tail -1 <<< "$ranks"); break; }
    fi
    sleep 0.05
done
[ -n "$victim" ] || { kill -KILL $mp 2> /dev/null; fail "the 2-rank job did not start training within 300 s: $(tail -5 killed.txt)"; }
t0=$(date +%s)
kill -KILL "$victim"
( sleep 30; kill -KILL $mp 2>/dev/null ) & guard=$!
wait $mp; rc=$?
kill $guard 2>/dev/null
took=$(( $(date +%s) - t0 ))
[ $rc -ne 0 ] && [ $took -lt 30 ] && grep -q "signal 9" killed.txt &&
    ok "a rank killed with SIGKILL: the job ended in ${took} s, exit $rc" || fail "SIGKILL: rc $rc after $took s: $(tail -5 killed.txt)"
for i in $(seq 1 200); do pgrep -f -- "^$RUN --text-file faults-corpus.txt" > /dev/null || break; sleep 0.05; done
pgrep -f -- "^$RUN --text-file faults-corpus.txt" > /dev/null && fail "ranks left running 10 s after the job ended"

# -- a NaN on one rank (test hook: rank 1 poisons a weight before iteration 5)
ends_after "found NaN in the " mpirun -np 2 -x MGRAPH_TEST_NAN_AT=1:5 "$RUN" "${DP2[@]}" --train-iters 100000 \
    --metrics-file nan.jsonl
[ $rc -eq 1 ] && [[ $out == *"found NaN in the "*"at iteration 5"* ]] && [ "$secs" != never ] && [ "${secs%.*}" -lt 30 ] &&
    ok "NaN on one rank: every rank ended, exit 1, $secs s after the message ($(grep -o 'Rank [0-9]: found NaN in the [a-z ]*' <<< "$out" | head -1))" ||
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
