#!/usr/bin/env bash
# --recompute-granularity through mgraph-run: full recompute (uniform and block) gives
# the run without it bit for bit (every lm loss in the metrics file, dropout on), one
# rank, data parallel 2 and pipeline parallel 2 (1F1B and interleaved, where the counts
# are per model chunk as in Megatron) under mpirun, with far less saved for backward;
# selective changes nothing; under tensor parallelism 2 + SP the recomputed layers gather
# again and train bit for bit as without; the final checkpoints' weights and Adam moments
# are bitwise those of the same plan without recompute; bad flag combinations exit 2 with
# a message.
#   cli.sh MPIEXEC MGRAPH_RUN TEXT_FILE WORK_DIR
set -u
MPIEXEC=$1 RUN=$2 TEXT=$3 WORK=$4
CKPT=$(cd "$(dirname "$0")/../support" && pwd)/ckpt.py
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
[ -f "$TEXT" ] || { echo "FAIL: no corpus $TEXT"; exit 1; }
MPI="$MPIEXEC --oversubscribe --allow-run-as-root"
SMALL=(--text-file "$TEXT" --num-layers 3 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --micro-batch-size 2 --global-batch-size 8 --eval-interval 0 --eval-iters 0 --log-interval 1 --lr 3e-3 --train-iters 4
       --cpu-workers 1)
fail() { echo "FAIL: $*"; exit 1; }
losses() { grep -o '"lm_loss": [^,]*' "$1"; }
saved() { sed -n 's/.*(\([0-9.]*\) MiB saved for backward).*/\1/p' "$1" | head -1; }

run() { # NAME [mpirun -np 2] FLAGS...: metrics NAME.jsonl, output NAME.txt, final checkpoint NAME.ck
    local name=$1; shift
    "$@" --metrics-file "$name.jsonl" --save "$name.ck" > "$name.txt" 2>&1 || { cat "$name.txt"; fail "$name"; }
}
same_weights() { # A B [ckpt.py options]: every tensor of B.ck against A.ck (bit for bit: --exact-suffix "")
    python3 "$CKPT" compare "$1.ck" "$2.ck" "${@:3}" || fail "$2: the final weights or Adam moments differ from $1's"
}
run base "$RUN" "${SMALL[@]}"
run uniform "$RUN" "${SMALL[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
run block "$RUN" "${SMALL[@]}" --recompute-granularity full --recompute-method block --recompute-num-layers 2
run selective "$RUN" "${SMALL[@]}" --recompute-granularity selective
for v in uniform block selective; do
    [ "$(losses base.jsonl | wc -l)" -eq 4 ] || fail "base: want 4 losses"
    diff <(losses base.jsonl) <(losses $v.jsonl) > /dev/null || { paste <(losses base.jsonl) <(losses $v.jsonl); fail "$v: losses differ"; }
    same_weights base $v --exact-suffix ""
    echo "ok: $v: same losses, saved for backward $(saved $v.txt) MiB (without: $(saved base.txt) MiB)"
done
grep -q "activation recompute: full, uniform, 1 layer: [1-9][0-9]* forward nodes" uniform.txt || fail "no recompute line"
awk -v a="$(saved uniform.txt)" -v b="$(saved base.txt)" 'BEGIN { exit !(a > 0 && a * 4 < b) }' ||
    fail "uniform 1 saves $(saved uniform.txt) MiB for backward, not under a quarter of $(saved base.txt)"
grep -q "recompute" selective.txt && fail "selective rewrote the graph"

# data parallel 2: the same losses with and without recompute
run dp $MPI -np 2 "$RUN" "${SMALL[@]}"
run dp_rc $MPI -np 2 "$RUN" "${SMALL[@]}" --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
diff <(losses dp.jsonl) <(losses dp_rc.jsonl) > /dev/null || { paste <(losses dp.jsonl) <(losses dp_rc.jsonl); fail "dp2: losses differ"; }
same_weights dp dp_rc --exact-suffix ""
echo "ok: dp 2"

# pipeline parallel 2 (4 layers): the serial run's losses bit for bit. The counts are per
# model chunk: block 1 on 2 stages recomputes layers 0 and 2, uniform 2 one segment each.
L4=(--num-layers 4)
run base4 "$RUN" "${SMALL[@]}" "${L4[@]}"
run pp $MPI -np 2 "$RUN" "${SMALL[@]}" "${L4[@]}" --pipeline-model-parallel-size 2
run pp_block $MPI -np 2 "$RUN" "${SMALL[@]}" "${L4[@]}" --pipeline-model-parallel-size 2 \
    --recompute-granularity full --recompute-method block --recompute-num-layers 1
run pp_uniform $MPI -np 2 "$RUN" "${SMALL[@]}" "${L4[@]}" --pipeline-model-parallel-size 2 \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
run vpp $MPI -np 2 "$RUN" "${SMALL[@]}" "${L4[@]}" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
run pp_vpp $MPI -np 2 "$RUN" "${SMALL[@]}" "${L4[@]}" --pipeline-model-parallel-size 2 \
    --num-virtual-stages-per-pipeline-rank 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
for v in pp_block pp_uniform pp_vpp; do
    diff <(losses base4.jsonl) <(losses $v.jsonl) > /dev/null || { paste <(losses base4.jsonl) <(losses $v.jsonl); fail "$v: losses differ"; }
    # bit for bit the same plan without recompute (the interleaved schedule is another
    # plan than pp 2's: its sums run in another order)
    if [ $v = pp_vpp ]; then same_weights vpp $v --exact-suffix ""; else same_weights pp $v --exact-suffix ""; fi
    awk -v a="$(saved $v.txt)" -v b="$(saved pp.txt)" 'BEGIN { exit !(a < b) }' ||
        fail "$v saves $(saved $v.txt) MiB for backward on stage 0, not less than $(saved pp.txt)"
    echo "ok: $v: same losses as 1 rank, stage 0 saves $(saved $v.txt) MiB for backward (without: $(saved pp.txt) MiB)"
done

# tensor parallelism 2 + SP: the logical graph is rewritten before partitioning, so the
# recomputed layers have their own collectives (all-gathers in backward); the same losses
# bit for bit as the plan without recompute
run tp $MPI -np 2 "$RUN" "${SMALL[@]}" --tensor-model-parallel-size 2 --sequence-parallel
run tp_rc $MPI -np 2 "$RUN" "${SMALL[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
diff <(losses tp.jsonl) <(losses tp_rc.jsonl) > /dev/null || { paste <(losses tp.jsonl) <(losses tp_rc.jsonl); fail "tp2 sp: losses differ"; }
same_weights tp tp_rc --exact-suffix ""
awk -v a="$(saved tp_rc.txt)" -v b="$(saved tp.txt)" 'BEGIN { exit !(a < b) }' ||
    fail "tp 2 + SP with recompute saves $(saved tp_rc.txt) MiB for backward, not less than $(saved tp.txt)"
echo "ok: tp 2 + SP: same losses, saved for backward $(saved tp_rc.txt) MiB (without: $(saved tp.txt) MiB)"

bad() { # REGEX CMD...: exit 2 with REGEX on stderr
    local re=$1; shift
    timeout 120 "$@" > bad.txt 2>&1
    local rc=$?
    [ $rc -eq 2 ] || { cat bad.txt; fail "$* exited $rc, want 2"; }
    grep -Eq -- "$re" bad.txt || { cat bad.txt; fail "message lacks /$re/"; }
}
bad "needs --recompute-method" "$RUN" "${SMALL[@]}" --recompute-granularity full --recompute-num-layers 1
bad "needs --recompute-num-layers" "$RUN" "${SMALL[@]}" --recompute-granularity full --recompute-method block
bad "must be in 1..3" "$RUN" "${SMALL[@]}" --recompute-granularity full --recompute-method block --recompute-num-layers 4
bad "must be one of" "$RUN" "${SMALL[@]}" --recompute-granularity some
echo "ok: recompute through mgraph-run"
