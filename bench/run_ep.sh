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
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
export STARPU_HOME=${STARPU_HOME:-$(mktemp -d /tmp/bench-ep-starpu.XXXXXX)}
LOG=${LOG:-$(mktemp /tmp/bench-ep-log.XXXXXX)}
echo "log: $LOG; $(nproc) cores; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for c in serial dp2 ep2; do
    np=2; [ $c = serial ] && np=1
    mpirun -np $np --oversubscribe --bind-to none "$BIN" $c "$REPS" "$STEPS" >>"$LOG" 2>&1 ||
      echo "bench_ep $c failed (see $LOG)" >&2
  done
done
grep -m1 '^  model:' "$LOG" | sed 's/^  model: /model: /'
awk '
function med(key,   n, i, j, t, a) {
  n = cnt[key]; if (!n) return -1
  for (i = 1; i <= n; i++) a[i] = val[key, i]
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^REP / {
  delete kv
  for (i = 2; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
  c = kv["config"]; shape[c] = kv["ranks"] " x " kv["workers"]; nrep[c]++
  for (k in kv) if (k != "config") { key = c SUBSEP k; cnt[key]++; val[key, cnt[key]] = kv[k] }
}
END {
  printf "| config | ranks x workers | reps | step ms | tokens/s | vs serial | all-to-all bytes/step/rank measured | balanced-routing count | measured / count | other collective bytes/step/rank | all-to-all ms/step | share of step | all collectives ms/step | load |\n"
  printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
  base = med("serial" SUBSEP "step_s")
  n = split("serial dp2 ep2", cf, " ")
  for (i = 1; i <= n; i++) {
    c = cf[i]; if (!nrep[c]) continue
    s = med(c SUBSEP "step_s"); a = med(c SUBSEP "a2a_B"); e = med(c SUBSEP "est_B"); as = med(c SUBSEP "a2a_s")
    printf "| %s | %s | %d | %.0f | %.0f | %s | %.0f | %.0f | %s | %.0f | %.1f | %.0f%% | %.1f | %.1f |\n", c, shape[c], nrep[c],
      1000 * s, med(c SUBSEP "tok_s"), (base > 0 ? sprintf("%.2fx", base / s) : "-"), a, e, (e > 0 ? sprintf("%.3f", a / e) : "-"),
      med(c SUBSEP "other_B"), 1000 * as, 100 * as / s, 1000 * med(c SUBSEP "comm_s"), med(c SUBSEP "load")
  }
}' "$LOG"
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
