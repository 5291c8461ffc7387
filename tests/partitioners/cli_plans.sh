#!/usr/bin/env bash
# mgraph-run under mpirun: bad plans end every rank with the rule named (exit 2, no
# hang), plan files, --dry-run --world-size, and a plan's training run reproducing the
# serial run's losses through the CLI.
#   cli_plans.sh MPIEXEC MGRAPH_RUN TEXT_FILE WORK_DIR CASE
set -u
MPIEXEC=$1 RUN=$2 TEXT=$3 WORK=$4 CASE=$5
mkdir -p "$WORK" && cd "$WORK" || exit 1
MPI="$MPIEXEC --oversubscribe --allow-run-as-root"
SMALL=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --micro-batch-size 2 --global-batch-size 8 --eval-interval 0 --log-interval 1 --lr 3e-3
       --lr-warmup-iters 2 --adam-eps 1e-5)

fail() { echo "FAIL: $*"; exit 1; }
# only the cases that train read the corpus; a missing one is a failure, never a skip
needs_text() { [ -f "$TEXT" ] || fail "no corpus $TEXT"; }

# expect_usage NAME MESSAGE-REGEX CMD...: exit 2 within 60 s, message on stderr, no metrics
expect_usage() {
    local name=$1 re=$2; shift 2
    rm -f metrics.jsonl
    timeout 60 "$@" >out.txt 2>err.txt
    local rc=$?
    [ $rc -eq 124 ] && fail "$name: timed out (a rank hung)"
    [ $rc -eq 2 ] || { cat err.txt; fail "$name: exit status $rc, want 2"; }
    grep -Eq "$re" err.txt || { cat err.txt; fail "$name: stderr lacks /$re/"; }
    [ -e metrics.jsonl ] && fail "$name: wrote a metrics file"
    echo "ok $name"
}

# losses FILE: the lm_loss column of a metrics file
losses() { grep -o '"lm_loss": [^,]*' "$1" | awk '{print $2}'; }

# same_losses A B TOL: every iteration's loss within relative TOL
same_losses() {
    paste <(losses "$1") <(losses "$2") | awk -v tol="$3" '
        { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r; if (r > tol) bad++ }
        END { printf "%d iterations, worst relative loss difference %.3g (bound %g)\n", n, w, tol;
              exit (n < 3 || bad > 0) }'
}

case "$CASE" in
world_not_multiple)
    expect_usage "$CASE" "world size 3 is not a multiple of tensor" \
        $MPI -np 3 "$RUN" "${SMALL[@]}" --tensor-model-parallel-size 2 --metrics-file metrics.jsonl ;;
heads_not_divisible)
    expect_usage "$CASE" "num-attention-heads 3 is not divisible by tensor-parallel size 2" \
        $MPI -np 2 "$RUN" "${SMALL[@]}" --num-attention-heads 3 --hidden-size 48 --tensor-model-parallel-size 2 \
        --metrics-file metrics.jsonl ;;
pipeline_not_yet)
    expect_usage "$CASE" "pipeline parallelism is not supported yet" \
        $MPI -np 2 "$RUN" "${SMALL[@]}" --pipeline-model-parallel-size 2 --metrics-file metrics.jsonl ;;
sp_without_tp)
    # Megatron's validate_args: at tp 1 sequence parallelism is disabled with a warning
    timeout 60 $MPI -np 2 "$RUN" "${SMALL[@]}" --sequence-parallel --dry-run > out.txt 2>err.txt ||
        { cat err.txt; fail "$CASE: --sequence-parallel at tp 1 should be disabled, not refused"; }
    grep -q "warning: disabling sequence parallelism because tensor model parallelism is disabled" err.txt ||
        { cat err.txt; fail "$CASE: no warning"; }
    grep -q "sequence parallel" out.txt && fail "$CASE: sequence parallelism still on"
    echo "ok $CASE" ;;
batch_not_divisible)
    expect_usage "$CASE" "global-batch-size 6 is not a multiple of --micro-batch-size x data-parallel size" \
        $MPI -np 2 "$RUN" "${SMALL[@]}" --global-batch-size 6 --metrics-file metrics.jsonl ;;
plan_file_bad)
    printf 'tensor-model-parallel-size 2\nsequence-paralel true\n' > bad.plan
    expect_usage "$CASE" "bad.plan:2: unknown setting 'sequence-paralel'" \
        "$RUN" "${SMALL[@]}" --plan bad.plan --metrics-file metrics.jsonl ;;
plan_file_missing)
    expect_usage "$CASE" "cannot read plan file" "$RUN" "${SMALL[@]}" --plan nowhere.plan ;;
dry_run_world)
    needs_text
    rm -f rank*.dot
    timeout 120 "$RUN" "${SMALL[@]}" --dry-run --world-size 8 --tensor-model-parallel-size 2 --sequence-parallel \
        --use-distributed-optimizer --dump-dot 'rank%r.dot' > out.txt 2>err.txt || { cat err.txt; fail "dry run"; }
    [ "$(ls rank*.dot | wc -l)" -eq 8 ] || fail "want 8 DOT files, got $(ls rank*.dot | wc -l)"
    grep -q "tp_allreduce\|tp_reduce_scatter" rank0.dot || fail "no tensor-parallel collective in rank0.dot"
    grep -q "dp_reduce_scatter" rank0.dot || fail "no distributed-optimizer reduce-scatter in rank0.dot"
    # collectives are drawn as their own shape with group, place in the order and bytes
    grep -q 'shape=hexagon.*group tp (2 ranks), #0 in its order\\n[0-9]* bytes' rank0.dot || fail "collective style in rank0.dot"
    grep -q 'shape=hexagon.*group dp (4 ranks), #' rank0.dot || fail "no dp collective drawn in rank0.dot"
    grep -q "rank 7:" out.txt || fail "no summary of rank 7"
    [ -e metrics.jsonl ] && fail "dry run trained"
    echo "ok $CASE" ;;
train_matches_serial)
    needs_text
    # a plan file (tp 2, sp) and flags (distributed optimizer) on 4 ranks vs the serial run
    printf '# tensor parallel with sequence parallel\ntensor-model-parallel-size 2\nsequence-parallel true\n' > tp.plan
    timeout 120 "$RUN" "${SMALL[@]}" --train-iters 6 --metrics-file serial.jsonl > serial.txt 2>&1 || fail "serial run"
    timeout 240 $MPI -np 4 "$RUN" "${SMALL[@]}" --train-iters 6 --plan tp.plan --use-distributed-optimizer --overlap-grad-reduce \
        --metrics-file parallel.jsonl > parallel.txt 2>&1 || { cat parallel.txt; fail "parallel run"; }
    grep -q "tp 2, dp 2, sequence parallel, distributed optimizer" parallel.txt || fail "plan not applied"
    same_losses parallel.jsonl serial.jsonl 1e-5 || fail "losses differ"
    echo "ok $CASE" ;;
*) echo "unknown case $CASE"; exit 2 ;;
esac
