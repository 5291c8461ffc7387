#!/usr/bin/env bash
# Expert parallelism against one rank and against replicated experts: bench_ep's serial
# (1 rank x 2 workers), dp2 (2 ranks x 1 worker, every rank all 8 experts) and ep2 (2 ranks
# x 1 worker, 4 experts each, tokens exchanged by all-to-all), interleaved over ROUNDS
# rounds (so the machine's load drifts over all three alike); one table of medians over
# every timed repetition. Columns in bench/bench_ep.c's header.
#
#   bench/run_ep.sh BUILD_DIR [ROUNDS=3] [STEPS=5] [REPS=1]
set -u
BIN=${1:?usage: run_ep.sh BUILD_DIR [ROUNDS] [STEPS] [REPS]}
[ -x "$BIN/bin/bench_ep" ] && BIN=$BIN/bin/bench_ep || BIN=$BIN/bench_ep
[ -x "$BIN" ] || { echo "run_ep.sh: no bench_ep under ${1}" >&2; exit 2; }
ROUNDS=${2:-3}
STEPS=${3:-5}
REPS=${4:-1}
. "$(dirname "$0")/lib.sh"
bench_env ep
bench_rounds "$BIN" "$ROUNDS" "$REPS" "$STEPS" serial dp2 ep2
grep -m1 '^  model:' "$LOG" | sed 's/^  model: /model: /'
awk "$BENCH_AWK_MEDIANS"'
END {
  printf "| config | ranks x workers | reps | step ms | tokens/s | vs serial | all-to-all bytes/step/rank measured | balanced-routing count | measured / count | other collective bytes/step/rank | all-to-all ms/step | share of step | all collectives ms/step | load |\n"
  printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
  base = med("serial" SUBSEP "step_s")
  n = split("serial dp2 ep2", cf, " ")
  for (i = 1; i <= n; i++) {
    c = cf[i]; if (!nrep[c]) continue
    s = med(c SUBSEP "step_s"); a = med(c SUBSEP "a2a_B"); e = med(c SUBSEP "est_B"); as = med(c SUBSEP "a2a_s")
    printf "| %s | %s | %d | %.0f | %.0f | %s | %.0f | %.0f | %s | %.0f | %.1f | %.0f%% | %.1f | %.1f |\n", c, shape[c], nrep[c],
      1000 * s, med(c SUBSEP "tok_s"), (base != "nan" ? sprintf("%.2fx", base / s) : "-"), a, e, (e > 0 ? sprintf("%.3f", a / e) : "-"),
      med(c SUBSEP "other_B"), 1000 * as, 100 * as / s, 1000 * med(c SUBSEP "comm_s"), med(c SUBSEP "load")
  }
}' "$LOG"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
