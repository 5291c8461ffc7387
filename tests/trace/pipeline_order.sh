#!/usr/bin/env bash
# Pipeline stages compute in their schedule's order (issue 9: stages overlap): pp 2 under
# 1F1B and interleaved, one worker per stage, 4 micro-batches; the first stage's trace
# must show each micro-batch's activation sent before the next micro-batch's forward
# starts (test_trace pp_first). Without event priorities a stage advanced its
# micro-batches layer by layer together and sent them all at the end of the warm-up.
#   pipeline_order.sh MPIEXEC MGRAPH_RUN TEST_TRACE TEXT_FILE WORK_DIR
set -u
MPIEXEC=$1 RUN=$2 CHECK=$3 TEXT=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
[ -f "$TEXT" ] || { echo "FAIL: no corpus $TEXT"; exit 1; }
MPI="$MPIEXEC --oversubscribe --allow-run-as-root"
SMALL=(--text-file "$TEXT" --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --micro-batch-size 2 --global-batch-size 8 --eval-interval 0 --eval-iters 0 --log-interval 1 --lr 3e-3
       --train-iters 3 --pipeline-model-parallel-size 2 --cpu-workers 1 --trace-iterations 2:3)
fail() { echo "FAIL: $*"; exit 1; }
for plan in "--pipeline-schedule 1f1b" "--num-virtual-stages-per-pipeline-rank 2"; do
    rm -f t.*.json
    # shellcheck disable=SC2086
    timeout 240 $MPI -np 2 "$RUN" "${SMALL[@]}" $plan --trace-file 't.%r.json' > out.txt 2>&1 ||
        { cat out.txt; fail "mpirun $plan"; }
    "$CHECK" pp_first t.0.json || fail "$plan: the first stage ran micro-batches out of the schedule's order"
    echo "ok: $plan"
done
