#!/bin/bash
# Time to the first iteration of mgraph-run on the GPT-2 124M shape (issue 15's start-up
# goal): seconds from launch to the line mgraph-run prints just before it trains (its
# per-rank summary), the first iteration's time, and the wall time of the whole 1-iteration
# run; median of RUNS runs. Prints a table; asserts nothing.
#
#   bash bench/startup.sh [BUILD_DIR [RUNS]]       (default build, 3)
#   MGRAPH_RUN=/path/to/other/mgraph-run bash bench/startup.sh   # e.g. an older build, side by side
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
runs=${2:-3}
exe=${MGRAPH_RUN:-$build/bin/mgraph-run}
data=$here/tests/data
[ -x "$exe" ] || { echo "no $exe: build first" >&2; exit 2; }
export STARPU_SILENT=1
export STARPU_HOME=${STARPU_HOME:-$(mktemp -d)}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

first=() iter=() total=()
echo "mgraph-run: $exe; GPT-2 124M (12 layers, h 768, 12 heads, seq 64, vocab 50304), micro-batch 4, 1 iteration"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= runs; i++)); do
    start=$(date +%s.%N)
    out=$(stdbuf -oL "$exe" --text-file "$data/tinyshakespeare.txt" --tokenizer-type GPT2BPETokenizer \
        --vocab-file "$data/gpt2/vocab.json" --merge-file "$data/gpt2/merges.txt" --num-layers 12 --hidden-size 768 \
        --num-attention-heads 12 --seq-length 64 --micro-batch-size 4 --global-batch-size 4 --train-iters 1 \
        --eval-iters 0 2>&1 | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done)
    end=$(date +%s.%N)
    ready=$(echo "$out" | grep -m1 ' nodes, .* collectives' | cut -d' ' -f1)
    [ -n "$ready" ] || { echo "$out" >&2; echo "run $i: no summary line" >&2; exit 1; }
    ms=$(echo "$out" | sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' | head -1)
    up=$(echo "$out" | grep -m1 'start-up ' | cut -d' ' -f2- || true)
    f=$(echo "$ready - $start" | bc)
    t=$(echo "$end - $start" | bc)
    first+=("$f") iter+=("$ms") total+=("$t")
    printf 'run %d: first iteration starts at %.2f s, iteration 1 %.0f ms, run %.2f s %s\n' "$i" "$f" "$ms" "$t" \
        "${up:+| $up}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| time to first iteration s | iteration 1 ms | whole run s | runs |"
echo "|---|---|---|---|"
printf '| %.2f | %.0f | %.2f | %d |\n' "$(printf '%s\n' "${first[@]}" | median)" \
    "$(printf '%s\n' "${iter[@]}" | median)" "$(printf '%s\n' "${total[@]}" | median)" "$runs"
