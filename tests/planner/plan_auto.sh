#!/bin/bash
# mgraph-run --plan auto: the planner's fastest plan that fits and this build runs, for the
# model, the world and --cluster. Checks: the choice is mgraph-plan --search's best; flags
# given are kept; --world-size N --dry-run partitions the chosen plan for N ranks; a
# 2-rank training run under --plan auto is bitwise the run of the flags it chose; usage
# errors exit 2. Usage: plan_auto.sh MPIEXEC MGRAPH_RUN MGRAPH_PLAN CPU_CLUSTER TEXT WORKDIR
set -u
MPI=$1 RUN=$2 PLAN=$3 CPU=$4 TEXT=$5 W=$6
rm -rf "$W" && mkdir -p "$W"
fail=0
no() { echo "FAIL: $*"; fail=1; }
M=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --global-batch-size 8 --text-file "$TEXT")

# the choice on 64 H100s is the search's best (a dense model: every plan it prices is built)
"$RUN" "${M[@]}" --plan auto --cluster dgx-h100 --world-size 64 --dry-run >"$W/dry.out" 2>"$W/err" ||
    no "dry run: $(cat "$W/err")"
line=$(grep -- "--plan auto on dgx-h100" "$W/dry.out")
[ -n "$line" ] || no "no --plan auto line: $(head -3 "$W/dry.out")"
grep -q "rank 63:" "$W/dry.out" || no "the dry run did not partition 64 ranks"
"$PLAN" --cluster dgx-h100 "${M[@]}" --world-size 64 --search --top 1 --json --search-keep recompute >"$W/best.json" \
    2>"$W/err" || no "search: $(cat "$W/err")"
python3 - "$W/best.json" "$line" <<'PY' || fail=1
import json, re, sys
b = json.load(open(sys.argv[1]))["plans"][0]["plan"]
m = re.search(r"tp (\d+), pp (\d+).*cp (\d+), ep (\d+), dp (\d+), micro-batch (\d+)", sys.argv[2])
got = tuple(int(x) for x in m.groups())
want = (b["tp"], b["pp"], b["cp"], b["ep"], b["dp"], b["micro_batch_size"])
assert got == want, (got, want)
PY
# flags given are kept
"$RUN" "${M[@]}" --plan auto --cluster dgx-h100 --world-size 64 --dry-run --tensor-model-parallel-size 2 \
    --micro-batch-size 2 >"$W/kept.out" 2>"$W/err" || no "kept: $(cat "$W/err")"
grep -q -- "--plan auto on dgx-h100: tp 2, .*micro-batch 2" "$W/kept.out" || no "given tp / micro-batch not kept: $(grep auto "$W/kept.out")"

# on this machine's cluster file, 2 ranks: the run under --plan auto is the run of its choice
"$MPI" -np 2 "$RUN" "${M[@]}" --plan auto --cluster "$CPU" --train-iters 2 --log-interval 1 --eval-iters 0 \
    --cpu-workers 1 >"$W/auto.out" 2>"$W/err" || no "auto run: $(cat "$W/err")"
line=$(grep -- "--plan auto on" "$W/auto.out")
flags=$(python3 -c '
import re, sys
m = re.search(r"tp (\d+), pp (\d+).*cp (\d+), ep (\d+), dp \d+, micro-batch (\d+)", sys.argv[1])
tp, pp, cp, ep, mbs = m.groups()
print("--tensor-model-parallel-size %s --pipeline-model-parallel-size %s --context-parallel-size %s "
      "--expert-model-parallel-size %s --micro-batch-size %s" % (tp, pp, cp, ep, mbs))' "$line") || no "no choice: $line"
# shellcheck disable=SC2086
"$MPI" -np 2 "$RUN" "${M[@]}" $flags --train-iters 2 --log-interval 1 --eval-iters 0 --cpu-workers 1 \
    >"$W/hand.out" 2>"$W/err" || no "hand run: $(cat "$W/err")"
a=$(grep -o "lm loss: [^|]*| loss scale: [^|]*| grad norm: [^|]*" "$W/auto.out")
h=$(grep -o "lm loss: [^|]*| loss scale: [^|]*| grad norm: [^|]*" "$W/hand.out")
[ -n "$a" ] && [ "$a" = "$h" ] || no "--plan auto ($line) and its flags differ: '$a' vs '$h'"

# usage errors
expect() {
    "$RUN" "$@" >"$W/out" 2>"$W/err"
    local rc=$?
    [ $rc -eq 2 ] || no "exit $rc (want 2): $*"
}
expect "${M[@]}" --plan auto --world-size 4 --dry-run
grep -q -- "--plan auto needs --cluster" "$W/err" || no "no --cluster: $(cat "$W/err")"
expect --num-layers 4 --hidden-size 256 --num-attention-heads 4 --text-file "$TEXT" --plan auto --cluster dgx-h100 \
    --world-size 4 --dry-run
grep -q -- "--plan auto needs --global-batch-size" "$W/err" || no "no batch: $(cat "$W/err")"
expect "${M[@]}" --plan auto --cluster no-such-cluster --world-size 4 --dry-run
grep -q "neither a preset" "$W/err" || no "bad cluster: $(cat "$W/err")"
exit $fail
