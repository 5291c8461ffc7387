#!/usr/bin/env bash
# mgraph-run --exit-signal-handler (Megatron's: on the signal, save a checkpoint and end
# after the iteration under way, exit 0).
#  1. One rank, SIGTERM in the middle of a long run: it ends within seconds with exit 0
#     and "exiting program after receiving SIGTERM", the checkpoint holds the last
#     logged iteration, and resuming from it gives, bit for bit, the losses the
#     uninterrupted run has at the next iterations.
#  2. Two ranks (dp 2), SIGTERM to rank 1 only (as a job scheduler may deliver it): both
#     stop at the same iteration, exit 0, one checkpoint.
#  3. --exit-signal SIGUSR1 sent to mpirun, which forwards it to every rank: the same.
#  4. A second signal stops the run at once (the run's metrics file is kept).
#  5. Without the flag, SIGTERM ends the run as before (killed, no checkpoint written).
#   exit_signal.sh MGRAPH_RUN MPIEXEC TEST_DATA WORK_DIR
set -u
RUN=$1 MPI=$2 DATA=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK/run" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
# every run saves under $WORK/run/ (or names it in --data-cache-path): whatever the test
# leaves running when it ends, failed or not, is found by that path and killed
trap 'pkill -9 -f -- "$WORK/run/" 2> /dev/null' EXIT
[ -f "$DATA/tinyshakespeare.txt" ] || fail "no fixtures in $DATA"
source "$(dirname "$0")/metrics_lib.sh"
BASE=(--text-file "$DATA/tinyshakespeare.txt" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --log-interval 1 --lr 1e-3 --lr-warmup-iters 0
      --lr-decay-style constant --cpu-workers 1 --data-cache-path "$WORK/run/cache")
LONG=("${BASE[@]}" --train-iters 100000 --exit-signal-handler)

# wait_iters FILE N: until the metrics file FILE (while the run writes it, .FILE.tmp-*)
# has N iterations, or fail after 300 s (a deadline for an event: a loaded machine may
# take a minute to start a run)
wait_iters() {
    local deadline=$((SECONDS + 300))
    while [ $SECONDS -lt $deadline ]; do
        [ "$(cat ".$1".tmp-* "$1" 2> /dev/null | grep -c '"lm_loss"')" -ge "$2" ] && return 0
        sleep 0.1
    done
    fail "no $2 iterations in $1 within 300 s"
}
# ends_within PID SECONDS: the process ended in time; its exit status in $status
ends_within() {
    for _ in $(seq $((10 * $2))); do
        kill -0 "$1" 2> /dev/null || { wait "$1"; status=$?; return 0; }
        sleep 0.1
    done
    kill -9 "$1" 2> /dev/null
    fail "pid $1 still running $2 s after the signal"
}
saved_iteration() { cat "$1/latest_checkpointed_iteration.txt"; }
# stopped_well PID LOG METRICS CHECKPOINT SIGNAL: the run ends within 30 s with exit 0 and
# Megatron's message, its checkpoint at its last logged iteration (in $stopped_at)
stopped_well() {
    ends_within "$1" 30
    [ "$status" -eq 0 ] || { cat "$2"; fail "$5 ($2): exit $status, want 0"; }
    grep -q "exiting program after receiving $5" "$2" || { cat "$2"; fail "$5 ($2): no exit message"; }
    stopped_at=$(saved_iteration "$4")
    [ "$stopped_at" = "$(column lm_loss "$3" | wc -l)" ] ||
        fail "$5 ($2): checkpoint at $stopped_at, not at the last logged iteration"
}

# ---- 1. one rank ------------------------------------------------------------------------------
"$RUN" "${LONG[@]}" --save "$WORK/run/ck1" --metrics-file one.jsonl > one.txt 2>&1 &
pid=$!
wait_iters one.jsonl 3
kill -TERM $pid
stopped_well $pid one.txt one.jsonl run/ck1 SIGTERM
k=$stopped_at
echo "ok: SIGTERM after iteration $k: exit 0, checkpoint at $k"
# resumed for two more iterations (the same --train-iters: the schedule must match the
# checkpoint's) against the uninterrupted run over the same span
"$RUN" "${BASE[@]}" --train-iters 100000 --exit-interval $((k + 2)) --load run/ck1 --metrics-file resumed.jsonl \
    > resumed.txt 2>&1 || { cat resumed.txt; fail "resume from the checkpoint"; }
"$RUN" "${BASE[@]}" --train-iters 100000 --exit-interval $((k + 2)) --metrics-file straight.jsonl > straight.txt 2>&1 ||
    { cat straight.txt; fail "uninterrupted run"; }
cmp -s <(column lm_loss resumed.jsonl) <(column lm_loss straight.jsonl | tail -2) ||
    fail "the resumed run differs from the uninterrupted one at iterations $((k + 1))-$((k + 2))"
echo "ok: resumed from it, iterations $((k + 1))-$((k + 2)) equal the uninterrupted run's bit for bit"

# ---- 2. two ranks, the signal to one ------------------------------------------------------------
"$MPI" -np 2 "$RUN" "${LONG[@]}" --save "$WORK/run/ck2" --metrics-file two.jsonl > two.txt 2>&1 &
mpid=$!
wait_iters two.jsonl 3
rank1=""
for p in $(pgrep -f -- "$WORK/run/ck2"); do
    tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && rank1=$p
done
[ -n "$rank1" ] || fail "rank 1's process not found"
kill -TERM "$rank1"
stopped_well $mpid two.txt two.jsonl run/ck2 SIGTERM
echo "ok: 2 ranks, SIGTERM to rank 1 alone: both stopped after iteration $stopped_at, exit 0, checkpoint there"

# ---- 3. SIGUSR1 through mpirun -------------------------------------------------------------------
"$MPI" -np 2 "$RUN" "${LONG[@]}" --exit-signal SIGUSR1 --save "$WORK/run/ck3" --metrics-file usr1.jsonl > usr1.txt 2>&1 &
mpid=$!
wait_iters usr1.jsonl 3
kill -USR1 $mpid
stopped_well $mpid usr1.txt usr1.jsonl run/ck3 SIGUSR1
echo "ok: --exit-signal SIGUSR1 sent to mpirun: exit 0, checkpoint at $stopped_at"

# ---- 4. a second signal: at once ------------------------------------------------------------------
# iterations of about a second (longer under the sanitizers), so that both signals land
# in the same one: the second is not ignored, the run dies of it and keeps its metrics
BIG=(--text-file "$DATA/tinyshakespeare.txt" --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512
     --micro-batch-size 4 --global-batch-size 8 --eval-iters 0 --log-interval 1 --cpu-workers 1 --train-iters 100000
     --exit-signal-handler --data-cache-path "$WORK/run/cache")
"$RUN" "${BIG[@]}" --metrics-file twice.jsonl > twice.txt 2>&1 &
pid=$!
wait_iters twice.jsonl 1
kill -TERM $pid
sleep 0.2
kill -TERM $pid
ends_within $pid 30
[ "$status" -eq $((128 + 15)) ] || { cat twice.txt; fail "two SIGTERMs: exit $status, want 143 (killed by the second)"; }
[ -s twice.jsonl ] || fail "two SIGTERMs: the metrics file was not kept"
echo "ok: a second SIGTERM stops the run at once (exit $status), metrics kept"

# ---- 5. without the flag ----------------------------------------------------------------------------
"$RUN" "${BASE[@]}" --train-iters 100000 --save "$WORK/run/ck5" --metrics-file plain.jsonl > plain.txt 2>&1 &
pid=$!
wait_iters plain.jsonl 2
kill -TERM $pid
ends_within $pid 30
[ "$status" -eq $((128 + 15)) ] || { cat plain.txt; fail "SIGTERM without the flag: exit $status, want 143"; }
[ -e run/ck5/latest_checkpointed_iteration.txt ] && fail "SIGTERM without the flag wrote a checkpoint"
echo "ok: without --exit-signal-handler SIGTERM kills the run, no checkpoint"
