#!/usr/bin/env bash
# Bounded waits (issue 36 item 3): a rank that stops without dying (SIGSTOP: a frozen node)
# ends the whole job after --distributed-timeout-minutes, with a message naming the wait
# that expired and the peers it waited for. Two jobs at once (their waits are sleeps, not
# work): dp 2, whose peer waits in a collective, and pp 2, whose peer stage waits in a
# pipeline transfer or the collectives around it. Each must end within 90 s of the stop.
#   timeouts.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
cp corpus.txt timeouts-corpus.txt  # a name no other test's ranks have (pgrep below)
T=(--text-file timeouts-corpus.txt --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16
   --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --cpu-workers 1 --log-interval 100000
   --train-iters 100000000 --distributed-timeout-minutes 1)
# the pid of world rank $2 among the ranks whose command line has $1
rank_pid() {
    local p
    for p in $(pgrep -f -- "$1"); do
        [ "$(ps -o comm= -p "$p" 2> /dev/null)" = mgraph-run ] || continue
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
    done
}
declare -A job stopped
start() { # name seed flags...
    local name=$1 seed=$2; shift 2
    mpirun -np 2 "$RUN" "${T[@]}" --seed "$seed" --metrics-file "$name.jsonl" "$@" > "$name.txt" 2>&1 &
    job[$name]=$!
}
start dp 5101
start pp 5102 --pipeline-model-parallel-size 2
# until both train (their temporary metrics files have records), then stop one rank of each:
# rank 1 of the dp job, rank 0 (the first stage) of the pp job
for _ in $(seq 1 600); do
    [ -n "$(rank_pid 'seed 5101' 1)" ] && [ -n "$(rank_pid 'seed 5102' 0)" ] && [ -n "$(cat .dp.jsonl.tmp-* 2> /dev/null)" ] &&
        [ -n "$(cat .pp.jsonl.tmp-* 2> /dev/null)" ] && break
    sleep 0.1
done
stopped[dp]=$(rank_pid 'seed 5101' 1)
stopped[pp]=$(rank_pid 'seed 5102' 0)
[ -n "${stopped[dp]}" ] && [ -n "${stopped[pp]}" ] || fail "ranks not found: ${stopped[*]}"
kill -STOP "${stopped[dp]}" "${stopped[pp]}"
t0=$(date +%s)
for name in dp pp; do
    # (polled, at most 150 s: the bound checked is 90 s)
    while kill -0 "${job[$name]}" 2> /dev/null && [ $(($(date +%s) - t0)) -lt 150 ]; do sleep 1; done
    kill -0 "${job[$name]}" 2> /dev/null && kill -KILL "${stopped[$name]}" 2> /dev/null
    wait "${job[$name]}"
    rc=$?
    secs=$(($(date +%s) - t0))
    msg=$(grep -m1 "has waited" "$name.txt")
    [ $rc -ne 0 ] && [ $secs -le 90 ] && [[ $msg == *"(--distributed-timeout-minutes 1)"* ]] && [[ $msg == *"world rank"* ]] &&
        ok "$name: a stopped rank ended the job after $secs s: ${msg#mgraph-run: failed: }" ||
        fail "$name: rc $rc after $secs s: $(grep -v '^ \[' "$name.txt" | tail -8)"
    # the stopped rank is killed with the job (a zombie until init reaps it)
    for _ in $(seq 1 100); do
        st=$(ps -o stat= -p "${stopped[$name]}" 2> /dev/null)
        [ -z "$st" ] || [[ $st == Z* ]] && break
        sleep 0.1
    done
    [ -z "$st" ] || [[ $st == Z* ]] || { kill -KILL "${stopped[$name]}"; fail "$name: the stopped rank was left ($st)"; }
    [ -n "$(grep -c lm_loss "$name.jsonl" 2> /dev/null)" ] || fail "$name: the metrics' records were not kept"
done
no_temp_left || fail "temporary files left: $(ls -A)"
# bad values: exit 2 at start
for v in 0 -1 x 10081; do
    bounded "$RUN" "${SMALL[@]}" --train-iters 1 --distributed-timeout-minutes "$v"
    [ $rc -eq 2 ] && [[ $out == *"--distributed-timeout-minutes"* ]] || fail "--distributed-timeout-minutes $v: rc $rc: $out"
done
ok "bad --distributed-timeout-minutes values exit 2"
finish
