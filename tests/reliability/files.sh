#!/usr/bin/env bash
# Outputs are whole or absent, and nothing is removed or truncated that the tools did
# not create (issue 18 items 1, 3, 5, 6).   files.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"

# -- 1. a failed run never removes its --metrics-file when that is a device: a private
#       character device equal to /dev/null (root can make one; else a FIFO stands in)
if mknod nulldev c 1 3 2>/dev/null; then
    bounded "$RUN" "${SMALL[@]}" --train-iters 4 --init-method-std 1e30 --metrics-file nulldev
    [ $rc -eq 1 ] && [[ $out == *"found NaN in the loss"* ]] || fail "NaN run on a device metrics file: rc $rc: $out"
    [ -c nulldev ] && ok "a failed run leaves the device it wrote metrics to ($secs s)" || fail "the device was removed"
    bounded "$RUN" "${SMALL[@]}" --train-iters 2 --dump-dot nulldev --metrics-file nulldev
    [ $rc -eq 0 ] && [ -c nulldev ] || fail "a good run writing to the device: rc $rc, device $(ls -l nulldev 2>&1)"
else
    echo "note: mknod not permitted here; the device case runs on /dev/null only when it cannot be harmed"
fi

# -- 1. a symlink named as --metrics-file: a failed run leaves link and target alone
printf 'precious\n' > victim && ln -s victim link.jsonl
bounded "$RUN" "${SMALL[@]}" --train-iters 4 --init-method-std 1e30 --metrics-file link.jsonl
[ $rc -eq 1 ] && [ -L link.jsonl ] && [ "$(cat victim)" = precious ] && ok "symlink and its target survive a failed run" ||
    fail "symlink case: rc $rc, $(ls -l link.jsonl victim 2>&1), victim: $(cat victim 2>&1)"
no_temp_left || fail "temporary files left: $(ls -A)"

# -- 6. write errors: /dev/full (ENOSPC) is exit 1 naming the file and the reason
bounded "$RUN" "${SMALL[@]}" --train-iters 4 --metrics-file /dev/full
[ $rc -eq 1 ] && [[ $out == *"/dev/full"*"No space left on device"* ]] && [ -c /dev/full ] &&
    ok "metrics to /dev/full: exit 1, $(grep -o 'writing.*' <<< "$out")" || fail "metrics to /dev/full: rc $rc: $out"

# -- 6. a previous metrics file stays whole until a new one replaces it; the new one
#       has only whole JSON records, also when the run is stopped by SIGTERM
printf '{"old": 1}\n' > m.jsonl
"$RUN" "${SMALL[@]}" --train-iters 1000000 --log-interval 100000 --metrics-file m.jsonl > term.txt 2>&1 &
pid=$!
for i in $(seq 1 300); do  # until a few records are flushed (at most 30 s)
    t=$(ls -A | grep '^\.m\.jsonl\.tmp-' | head -1)
    [ -n "$t" ] && [ "$(wc -l < "$t")" -ge 3 ] && break
    sleep 0.1
done
[ "$(cat m.jsonl)" = '{"old": 1}' ] || fail "the previous metrics file changed while the run was going"
kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: exit $rc, want 143"
python3 -c '
import json, sys
lines = open("m.jsonl").read().split("\n")
assert lines[-1] == "", "last line cut"
recs = [json.loads(l) for l in lines[:-1]]
assert len(recs) >= 3 and all("lm_loss" in r for r in recs), recs[:3]
print("ok: SIGTERM kept", len(recs), "whole records")' || fail "metrics after SIGTERM: $(tail -c 300 m.jsonl)"
no_temp_left || fail "temporary files left after SIGTERM: $(ls -A)"

# -- 5. preprocess: a failed rerun leaves the previous good pair exactly as it was
awk 'NR % 10 == 1 { if (doc) printf "{\"text\": \"%s\"}\n", doc; doc = "" } { doc = doc $0 " " }
     END { printf "{\"text\": \"%s\"}\n", doc }' corpus.txt > good.jsonl
"$PRE" --input good.jsonl --output-prefix ds > pre.txt 2>&1 || { cat pre.txt; fail "preprocess"; }
cp ds_text_document.bin keep.bin && cp ds_text_document.idx keep.idx
{ cat good.jsonl; echo '{"text": broken'; } > bad.jsonl
bounded "$PRE" --input bad.jsonl --output-prefix ds
[ $rc -eq 2 ] && cmp -s ds_text_document.bin keep.bin && cmp -s ds_text_document.idx keep.idx &&
    ok "a failed preprocess rerun keeps the previous pair ($out)" ||
    fail "failed rerun: rc $rc, pair: $(ls -l ds_text_document.* 2>&1)"
no_temp_left || fail "preprocess left temporary files: $(ls -A)"

# -- 5. an output that is one of the inputs is refused, the input untouched
cp good.jsonl in_text_document.bin && cp good.jsonl orig.jsonl
bounded "$PRE" --input in_text_document.bin --output-prefix in
[ $rc -eq 2 ] && cmp -s in_text_document.bin orig.jsonl && [[ $out == *"would replace the input"* ]] &&
    ok "output prefix naming the input: exit 2" || fail "output over input: rc $rc: $out"

# -- 5. a .bin that does not belong to its .idx (a rerun killed between the two
#       files, or one copied over) is refused, not trained on
head -n 100 good.jsonl > small.jsonl
"$PRE" --input small.jsonl --output-prefix mix > /dev/null 2>&1 && cp keep.bin mix_text_document.bin
bounded "$RUN" --data-path mix_text_document --tokenizer-type ByteLevelTokenizer --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
    --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --eval-iters 0
[ $rc -eq 2 ] && [[ $out == *"do not belong together"* ]] && ok "mismatched .bin/.idx: exit 2" ||
    fail "mismatched pair: rc $rc: $out"

# -- 3. rewriting a dataset while a run has it mapped: the run goes on (no SIGBUS),
#       because the new files replace the old by rename and never truncate them
"$RUN" --data-path ds_text_document --tokenizer-type ByteLevelTokenizer --split 100,0,0 --num-layers 1 --hidden-size 32 --num-attention-heads 2 \
    --seq-length 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 1000000 --log-interval 100000 \
    --eval-iters 0 --cpu-workers 1 > mapped.txt 2>&1 &
pid=$!
sleep 2
"$PRE" --input small.jsonl --output-prefix ds > /dev/null 2>&1 || fail "rewriting the dataset"
sleep 2
kill -TERM $pid 2>/dev/null; wait $pid; rc=$?
[ $rc -eq 143 ] && ok "a run keeps reading a dataset rewritten under it" ||
    fail "run on a rewritten dataset ended with $rc (135 = SIGBUS): $(tail -3 mapped.txt)"
finish
