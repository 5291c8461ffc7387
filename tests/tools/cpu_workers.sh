#!/usr/bin/env bash
# mgraph-run says how many CPU workers StarPU runs, and warns when that is fewer than asked
# (Debian's StarPU runs at most STARPU_MAXCPUS = 4: issue 42's "no silent cap"); a --load
# of a directory without a checkpoint starts fresh without claiming to have loaded one.
#   cpu_workers.sh MGRAPH_RUN TEXT WORK
set -u
RUN=$1 TEXT=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
M=(--text-file "$TEXT" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
   --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --eval-iters 0)
# 2 workers are within every StarPU's cap: no warning
"$RUN" "${M[@]}" --cpu-workers 2 > two.txt 2>&1 || fail "2 workers: $(tail -3 two.txt)"
grep -q "^mgraph-run: StarPU runs 2 CPU workers per rank (policy " two.txt || fail "2 workers: no start-up line: $(grep StarPU two.txt)"
grep -q "warning: .*CPU workers asked" two.txt && fail "2 workers: a warning: $(grep warning two.txt)"
# 80 workers: more than Debian's StarPU runs (4) and than tools/build-starpu.sh's (64 on
# machines up to 64 cores): the start-up line names what runs, the warning what was asked
"$RUN" "${M[@]}" --cpu-workers 80 > many.txt 2>&1 || fail "80 workers: $(tail -3 many.txt)"
n=$(sed -n 's/^mgraph-run: StarPU runs \([0-9]*\) CPU workers per rank.*/\1/p' many.txt)
[ -n "$n" ] && [ "$n" -lt 80 ] || fail "80 workers asked: start-up line '$(grep 'StarPU runs' many.txt)'"
grep -q "warning: 80 CPU workers asked for .*StarPU runs $n: this StarPU build runs at most $n (STARPU_MAXCPUS); tools/build-starpu.sh --cpus" many.txt ||
    fail "80 workers asked, $n run: no warning: $(grep -i warn many.txt)"
grep -q "last step on StarPU: .* $n workers" many.txt || fail "80 workers: the last step's line: $(grep 'last step' many.txt)"
# --load of an empty directory: Megatron's warning, no "loaded checkpoint" line
mkdir empty
"$RUN" "${M[@]}" --cpu-workers 1 --load empty > load.txt 2>&1 || fail "--load empty: $(tail -3 load.txt)"
grep -q "will start from random" load.txt || fail "--load empty: no warning"
grep -q "loaded checkpoint" load.txt && fail "--load empty: claims to have loaded: $(grep 'loaded checkpoint' load.txt)"
echo "ok: 2 workers run quietly; 80 asked, $n run, with the warning; --load of an empty directory starts fresh"
