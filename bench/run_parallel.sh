#!/usr/bin/env bash
# Runs bench_parallel's configurations back to back, interleaved over ROUNDS rounds (so that
# the machine's load drifts over all of them alike), and prints one table of medians over
# every timed repetition. See bench/RESULTS-parallel.md.
#
#   bench/run_parallel.sh BUILD_DIR [ROUNDS=3] [STEPS=5] [REPS=1]
#   CONFIGS="serial dp2 tp2 tp2sp dp2distopt" (default; serial1 = 1 rank x 1 worker)
#
# Each invocation: 2 warm-up steps, then REPS repetitions of STEPS timed steps.
set -u
BIN=${1:?usage: run_parallel.sh BUILD_DIR [ROUNDS] [STEPS] [REPS]}
[ -x "$BIN/bin/bench_parallel" ] && BIN=$BIN/bin/bench_parallel || BIN=$BIN/bench_parallel
ROUNDS=${2:-3}
STEPS=${3:-5}
REPS=${4:-1}
CONFIGS=${CONFIGS:-serial dp2 tp2 tp2sp dp2distopt}

. "$(dirname "$0")/lib.sh"
bench_env parallel
# shellcheck disable=SC2086
bench_rounds "$BIN" "$ROUNDS" "$REPS" "$STEPS" $CONFIGS

awk -v order="$CONFIGS" "$BENCH_AWK_MEDIANS"'
END {
  n = split(order, cf, " ")
  base = med("serial" SUBSEP "step_s")
  printf "| config | ranks x workers | reps | step s | tokens/s | model TFLOP/s | vs serial | bytes/step measured | graph (mg_plan_comm_bytes) | analytic | comm s/step | replay s/step | compute s/step | exposed s/step | hidden | idle | load |\n"
  printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
  for (i = 1; i <= n; i++) {
    c = cf[i]; if (!nrep[c]) continue
    s = med(c SUBSEP "step_s")
    printf "| %s | %s | %d | %.3f | %.0f | %.4f | %s | %.0f | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.0f%% | %.2f | %.1f |\n", \
      c, shape[c], nrep[c], s, med(c SUBSEP "tok_s"), med(c SUBSEP "tflops"), \
      (base == "nan" ? "-" : sprintf("%.2fx", base / s)), \
      med(c SUBSEP "meas_B"), med(c SUBSEP "graph_B"), med(c SUBSEP "anal_B"), med(c SUBSEP "comm_s"), \
      med(c SUBSEP "xfer_s"), med(c SUBSEP "compute_s"), med(c SUBSEP "exposed_s"), 100 * med(c SUBSEP "hidden"), \
      med(c SUBSEP "idle"), med(c SUBSEP "load")
  }
}' "$LOG"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
