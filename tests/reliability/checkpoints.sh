#!/usr/bin/env bash
# Checkpoints are never lost (issue 36 items 1 and 2).   checkpoints.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
# 1. Every checkpoint a plan writes can be loaded (expert parallelism with the
# distributed optimizer wrote checkpoints without the Adam moments of dense parameters whose
# segment lay on a rank with ep index != 0). Each MoE plan below saves at iteration 2 of 4;
# the checkpoint must load under 1 rank and continue within 1e-5 of the plan's own run, and
# resume under the same plan bitwise.
# 2. Two jobs never save into one directory: the second is refused at start (exit 2,
# naming the first), the first goes on and saves; mgraph-convert --save is refused too.
set -u
source "$(dirname "$0")/common.sh" "$@"
M=(--text-file corpus.txt --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16
   --micro-batch-size 2 --global-batch-size 8 --eval-iters 0 --log-interval 1 --lr 1e-3 --lr-decay-iters 4
   --cpu-workers 1 --train-iters 4 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48
   --moe-aux-loss-coeff 1e-2)
LLAMA=(--normalization RMSNorm --position-embedding-type rope --swiglu --disable-bias-linear
       --untie-embeddings-and-output-weights)
losses() { grep -o '"iteration": [34], "lm_loss": [^,}]*' "$1"; }
close() { # $1 $2 metrics: iterations 3 and 4 within 1e-5
    paste <(losses "$1") <(losses "$2") | awk 'NF == 8 { a = $4 + 0; b = $8 + 0; d = a - b; if (d < 0) d = -d;
        if (d > 1e-5 * (a < 0 ? -a : a)) bad = 1; n++ } END { exit bad || n != 2 }'
}
# name ranks flags...
cases=("ep2 2 --expert-model-parallel-size 2"
       "ep4 4 --expert-model-parallel-size 4"
       "ep2_tp2 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel"
       "pp2_ep2 4 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2"
       "ep2_dp4_llama 4 --expert-model-parallel-size 2 LLAMA")
for c in "${cases[@]}"; do
    read -r name np flags <<< "$c"
    extra=()
    [[ $flags == *LLAMA* ]] && extra=("${LLAMA[@]}") && flags=${flags/LLAMA/}
    # shellcheck disable=SC2206
    plan=($flags --use-distributed-optimizer)
    bounded mpirun -np "$np" "$RUN" "${M[@]}" "${extra[@]}" "${plan[@]}" --save "ck_$name" --save-interval 2 \
        --metrics-file "$name.jsonl"
    [ $rc -eq 0 ] || { fail "$name: the run failed (rc $rc): $(tail -5 <<< "$out")"; continue; }
    bounded "$RUN" "${M[@]}" "${extra[@]}" --load "ck_$name/iter_0000002" --metrics-file "${name}_one.jsonl"
    [ $rc -eq 0 ] && close "$name.jsonl" "${name}_one.jsonl" && ok "$name: its checkpoint loads under 1 rank ($secs s)" ||
        fail "$name: under 1 rank: rc $rc: $(tail -3 <<< "$out") $(losses "$name.jsonl") / $(losses "${name}_one.jsonl" 2>&1)"
    bounded mpirun -np "$np" "$RUN" "${M[@]}" "${extra[@]}" "${plan[@]}" --load "ck_$name/iter_0000002" \
        --metrics-file "${name}_again.jsonl"
    [ $rc -eq 0 ] && [ "$(losses "$name.jsonl")" = "$(losses "${name}_again.jsonl")" ] &&
        ok "$name: resumes bitwise under its own plan" || fail "$name: resume under its plan: rc $rc: $(tail -3 <<< "$out")"
done

# -- 2. one job per --save directory
CONVERT=$(dirname "$RUN")/mgraph-convert
"$RUN" "${SMALL[@]}" --train-iters 1000000 --log-interval 100000 --save shared --save-interval 20 > a.txt 2>&1 &
apid=$!
for _ in $(seq 1 300); do [ -s shared/.mgraph-save.lock ] && [ -s shared/latest_checkpointed_iteration.txt ] && break; sleep 0.1; done
bounded "$RUN" "${SMALL[@]}" --train-iters 40 --save shared --save-interval 20
[ $rc -eq 2 ] && [[ $out == *"--save shared is in use by another job (pid $apid on host "* ]] &&
    ok "a second job saving into the same directory is refused at start ($secs s)" ||
    fail "second job: rc $rc: $out"
bounded mpirun -np 2 "$RUN" "${SMALL[@]}" --train-iters 40 --save shared
[ $rc -eq 2 ] && [[ $out == *"in use by another job"* ]] && ok "the same under mpirun -np 2 ($secs s)" ||
    fail "second job, 2 ranks: rc $rc: $out"
kill -0 $apid 2> /dev/null && ok "the first job goes on" || fail "the first job died: $(tail -3 a.txt)"
before=$(cat shared/latest_checkpointed_iteration.txt)
for _ in $(seq 1 600); do [ "$(cat shared/latest_checkpointed_iteration.txt)" != "$before" ] && break; sleep 0.1; done
[ "$(cat shared/latest_checkpointed_iteration.txt)" != "$before" ] && ok "and keeps saving there" ||
    fail "the first job saved nothing more after iteration $before"
kill -TERM $apid; wait $apid 2> /dev/null
# the lock goes with the process: the directory is free again, and its checkpoint loads
bounded "$RUN" "${SMALL[@]}" --train-iters 1 --load shared --override-opt-param-scheduler --save shared --finetune
[ $rc -eq 0 ] && ok "after the first job ends the directory is free ($secs s)" || fail "after the first job: rc $rc: $out"
# mgraph-convert takes the same lock (held here by flock(1), a stand-in for any holder)
"$CONVERT" --load shared --to-hf hf > conv.txt 2>&1 || fail "--to-hf: $(cat conv.txt)"
if command -v flock > /dev/null; then
    flock shared/.mgraph-save.lock sleep 120 &
    fpid=$!
    # until flock(1) holds it (an event, not a delay: a loaded machine may take long)
    for _ in $(seq 1 3000); do flock -n shared/.mgraph-save.lock true || break; sleep 0.1; done
    flock -n shared/.mgraph-save.lock true && fail "flock(1) did not take the lock within 300 s"
    bounded "$CONVERT" --from-hf hf --save shared
    [ $rc -eq 2 ] && [[ $out == *"in use by another job"* ]] && ok "mgraph-convert --save into a locked directory: exit 2" ||
        fail "mgraph-convert into a locked directory: rc $rc: $out"
    kill $(pgrep -P $fpid) $fpid 2> /dev/null; wait $fpid 2> /dev/null # (its sleep, then flock)
fi
no_temp_left shared || fail "temporary files left: $(ls -A shared)"
finish
