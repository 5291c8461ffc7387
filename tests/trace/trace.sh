#!/usr/bin/env bash
# --trace-file through mgraph-run under mpirun: every rank writes its own valid trace
# with one event per executed task of the traced iterations, collectives on the
# communication lane with their bytes (dp 2; tp 2 with the communication thread); a
# one-rank run traces its second iteration by default; bad trace flags exit 2.
#   trace.sh MPIEXEC MGRAPH_RUN TEST_TRACE TEXT_FILE WORK_DIR
set -u
MPIEXEC=$1 RUN=$2 CHECK=$3 TEXT=$4 WORK=$5
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
[ -f "$TEXT" ] || { echo "FAIL: no corpus $TEXT"; exit 1; }
MPI="$MPIEXEC --oversubscribe --allow-run-as-root"
SMALL=(--text-file "$TEXT" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --micro-batch-size 2 --global-batch-size 8 --eval-interval 0 --eval-iters 0 --log-interval 1 --lr 3e-3)
fail() { echo "FAIL: $*"; exit 1; }

# tasks_per_step OUT: the logger's "last step on StarPU: N tasks"
tasks_per_step() { sed -n 's/.*last step on StarPU: \([0-9]*\) tasks.*/\1/p' "$1"; }

# dp 2 and tp 2 (collectives on the communication thread), iterations 2 and 3 of 4
for plan in "--cpu-workers 1" "--tensor-model-parallel-size 2 --overlap-grad-reduce --cpu-workers 1"; do
    rm -f t.*.json
    # shellcheck disable=SC2086
    timeout 240 $MPI -np 2 "$RUN" "${SMALL[@]}" --train-iters 4 $plan --trace-file 't.%r.json' \
        --trace-iterations 2:3 > out.txt 2>&1 || { cat out.txt; fail "mpirun $plan"; }
    n=$(tasks_per_step out.txt)
    [ -n "$n" ] || { cat out.txt; fail "no task count in the log"; }
    # the ranks of one plan run the same number of tasks (symmetric plans)
    for r in 0 1; do
        [ -f "t.$r.json" ] || fail "$plan: rank $r wrote no trace"
        "$CHECK" check "t.$r.json" $((2 * n)) 1 || fail "$plan: rank $r's trace"
    done
    ls t.*.json.* 2> /dev/null && fail "temporary files left behind"
    echo "ok: $plan"
done

# one rank, default range: the second iteration only
"$RUN" "${SMALL[@]}" --train-iters 3 --trace-file one.json > out.txt 2>&1 || { cat out.txt; fail "one rank"; }
n=$(tasks_per_step out.txt)
"$CHECK" check one.json "$n" 0 || fail "one-rank trace"
grep -q '"iteration 2"' one.json || fail "the default range is not iteration 2"
grep -q '"iteration [13]"' one.json && fail "the default range traced more than iteration 2"

# bad flags: exit 2 with the flag named, and no trace written
bad() {
    local re=$1; shift
    rm -f bad*.json
    timeout 120 "$@" > bad.txt 2>&1
    local rc=$?
    [ $rc -eq 2 ] || { cat bad.txt; fail "$* exited $rc, want 2"; }
    grep -Eq -- "$re" bad.txt || { cat bad.txt; fail "message lacks /$re/"; }
    ls bad*.json 2> /dev/null && fail "$*: wrote a trace"
    return 0
}
bad "%r" $MPI -np 2 "$RUN" "${SMALL[@]}" --train-iters 2 --trace-file bad.json
bad "--trace-iterations" "$RUN" "${SMALL[@]}" --train-iters 2 --trace-file bad.json --trace-iterations 0:1
bad "--trace-iterations" "$RUN" "${SMALL[@]}" --train-iters 2 --trace-file bad.json --trace-iterations 2:5
bad "--trace-iterations" "$RUN" "${SMALL[@]}" --train-iters 2 --trace-file bad.json --trace-iterations 2x
bad "--trace-iterations" "$RUN" "${SMALL[@]}" --train-iters 2 --trace-iterations 1
bad "reference" "$RUN" "${SMALL[@]}" --train-iters 2 --trace-file bad.json --engine reference
echo "ok: trace files and bad flags"
