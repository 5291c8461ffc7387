#!/usr/bin/env bash
# Pipeline parallelism on one machine: pp=2 on 2 ranks (1 worker each) against 1 rank x 2
# workers, tokens/s, and each stage's measured idle fraction (the bubble, plus waiting on
# transfers) against the schedule's (P-1)/m, 1F1B against interleaved (2 model chunks per
# stage), for m = 2, 4, 8 micro-batches per step. Interleaved over ROUNDS rounds so the
# machine's load drifts over all configurations alike; medians of the timed iterations.
#
#   bench/run_pipeline.sh BUILD_DIR [ROUNDS=3] [ITERS=6]
#
# The model: 4 layers, hidden 256, 8 heads, seq 128, micro-batch 4 (the default model's
# shape). The first 2 iterations of each run are warm-up and not counted.
set -u
BUILD=${1:?usage: run_pipeline.sh BUILD_DIR [ROUNDS] [ITERS]}
RUN=$BUILD/bin/mgraph-run
ROUNDS=${2:-3}
ITERS=${3:-6}
TEXT=$(dirname "$0")/../tests/data/tinyshakespeare.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
export STARPU_HOME=${STARPU_HOME:-$(mktemp -d /tmp/bench-pipeline-starpu.XXXXXX)}
LOG=${LOG:-$(mktemp -d /tmp/bench-pipeline.XXXXXX)}
MODEL=(--text-file "$TEXT" --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128
       --micro-batch-size 4 --train-iters "$ITERS" --log-interval 1 --eval-iters 0 --lr 1e-4)
echo "log: $LOG; $(nproc) cores; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for m in 2 4 8; do
    gbs=$((4 * m))
    "$RUN" "${MODEL[@]}" --global-batch-size $gbs --cpu-workers 2 > "$LOG/serial.m$m.r$r" 2>&1 ||
      echo "serial m $m failed" >&2
    for s in 1f1b interleaved; do
      extra=()
      [ $s = interleaved ] && extra=(--num-virtual-stages-per-pipeline-rank 2)
      mpirun -np 2 --bind-to none "$RUN" "${MODEL[@]}" --global-batch-size $gbs --pipeline-model-parallel-size 2 \
        "${extra[@]}" --cpu-workers 1 > "$LOG/$s.m$m.r$r" 2>&1 || echo "$s m $m failed" >&2
    done
  done
done
# per run: median ms per iteration over iterations 3.., and each stage's idle fraction in its
# last step ("last step on StarPU (pipeline stage S): ... idle X%"); medians over the rounds
summ() { # FILES... -> "ms idle0 idle1"
  awk 'function med(arr, n,   i, j, t, b) { for (i = 1; i <= n; i++) b[i] = arr[i];
         for (i = 2; i <= n; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j+1] = b[j]; b[j+1] = t }
         return n ? (n % 2 ? b[(n+1)/2] : (b[n/2] + b[n/2+1]) / 2) : -1 }
       FNR == 1 { n = 0 }
       /elapsed time per iteration/ { n++; if (n > 2) { x = $0; sub(/.*elapsed time per iteration \(ms\): /, "", x); ms[++k] = x + 0 } }
       /last step on StarPU \(pipeline stage/ { x = $0; sub(/.*pipeline stage /, "", x); s = x + 0;
         y = $0; sub(/.*idle /, "", y); id[s, ++c[s]] = (y + 0) / 100 }
       END { for (s = 0; s < 2; s++) { delete v; for (i = 1; i <= c[s]; i++) v[i] = id[s, i]; idle[s] = med(v, c[s]) }
             printf "%s %s %s\n", med(ms, k), idle[0], idle[1] }' "$@"
}
# The bubble is (P-1)/m of the ideal time (Narayanan et al.); as a fraction of the step, the
# idle it alone gives is (P-1)/(m+P-1), and (P-1)/(Vm+P-1) interleaved: what "idle" compares to.
printf "| m | serial 1x2 ms | pp2 1F1B ms | tokens/s vs serial | idle stage 0 / 1 | bubble (P-1)/m, as idle | pp2 interleaved ms | tokens/s vs serial | idle stage 0 / 1 | bubble (P-1)/(Vm), as idle |\n|---|---|---|---|---|---|---|---|---|---|\n"
for m in 2 4 8; do
  read -r s _ _ <<< "$(summ "$LOG"/serial.m$m.r*)"
  read -r a a0 a1 <<< "$(summ "$LOG"/1f1b.m$m.r*)"
  read -r b b0 b1 <<< "$(summ "$LOG"/interleaved.m$m.r*)"
  awk -v m=$m -v s="$s" -v a="$a" -v a0="$a0" -v a1="$a1" -v b="$b" -v b0="$b0" -v b1="$b1" 'BEGIN {
    printf "| %d | %.1f | %.1f | %.2fx | %.2f / %.2f | %.2f, %.2f | %.1f | %.2fx | %.2f / %.2f | %.2f, %.2f |\n",
      m, s, a, s / a, a0, a1, 1 / m, 1 / (m + 1), b, s / b, b0, b1, 1 / (2 * m), 1 / (2 * m + 1) }'
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
