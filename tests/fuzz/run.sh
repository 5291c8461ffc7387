#!/usr/bin/env bash
# Fuzzes every target for a bounded time from its committed corpus (tests/fuzz/<target>)
# and prints executions per second and in total. New interesting inputs go to
# BUILD/fuzz-corpus/<target> (the committed corpus is read, never written); a crash
# stops the target, leaves its input in BUILD/fuzz-artifacts/ and fails the run: fix
# it and keep the input in tests/fuzz/<target>/ as a regression case.
#   run.sh BUILD_DIR MAX_SECONDS_PER_TARGET
set -u
B=$1 S=${2:-25}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$B/fuzz-artifacts"
# the readers take paths: each input is a file, so keep them in memory when possible
# (/dev/shm: ~30x the executions of a disk folder)
tmp=$(mktemp -d /dev/shm/mgraph-fuzz.XXXXXX 2>/dev/null || mktemp -d "$PWD/$B/fuzz-tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
export LSAN_OPTIONS="suppressions=$HERE/../lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=0
# executions per target: ~20 s each on the 2-core development machine under load
declare -A RUNS=([plan]=30000 [flags]=100000 [idx]=30000 [gpt2]=500 [jsonl]=4000 [cache]=6000 [checkpoint]=600 [hf]=15000 [tiktoken]=8000 [torch]=30000)
printf '%-8s %10s %12s %8s %s\n' target execs/s executions corpus result
# checkpoint: the checkpoint engineer's reader target (tests/checkpoint/fuzz_checkpoint.c)
for t in plan flags idx gpt2 jsonl cache hf tiktoken torch checkpoint; do
    mkdir -p "$B/fuzz-corpus/$t"
    log=$B/fuzz-$t.log
    exe=$B/bin/fuzz_$t
    [ $t = checkpoint ] && exe=$B/bin/fuzz_checkpoint_libfuzzer
    # a fixed seed and a fixed number of runs (about S seconds here): CI replays the same
    # mutations every time, so a run that passed keeps passing; max_total_time bounds slow machines
    "$exe" -seed=1 -runs="${RUNS[$t]}" -max_total_time="$S" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -close_fd_mask=3 \
        -artifact_prefix="$B/fuzz-artifacts/$t-" "$B/fuzz-corpus/$t" "$HERE/$t" > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    units=$(ls "$B/fuzz-corpus/$t" | wc -l)
    if [ $rc -eq 0 ]; then res=ok; else res="CRASH (exit $rc): $(ls "$B/fuzz-artifacts" | grep "^$t-" | head -1)"; failed=1; fi
    printf '%-8s %10s %12s %8s %s\n' "$t" "${rate:-?}" "${execs:-?}" "$units" "$res"
    [ $rc -eq 0 ] || grep -m1 -A25 "ERROR\|==ERROR\|runtime error\|deadly signal" "$log"
done
exit $failed
