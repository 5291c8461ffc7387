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

# Open MPI as root, more ranks than cores; StarPU quiet and unbound (RESULTS-parallel.md).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
export STARPU_HOME=${STARPU_HOME:-$(mktemp -d /tmp/bench-parallel-starpu.XXXXXX)}
LOG=${LOG:-$(mktemp /tmp/bench-parallel-log.XXXXXX)}
echo "log: $LOG; $(nproc) cores; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

for r in $(seq 1 "$ROUNDS"); do
  for c in $CONFIGS; do
    case $c in serial|serial1) np=1 ;; *) np=2 ;; esac
    echo "round $r: $c (np $np)" >&2
    mpirun -np $np --oversubscribe --bind-to none "$BIN" "$c" "$REPS" "$STEPS" >>"$LOG" 2>&1 ||
      echo "bench_parallel $c failed (see $LOG)" >&2
  done
done

awk -v order="$CONFIGS" '
function med(key,   n, i, j, t, a) {
  n = cnt[key]; if (!n) return "nan";
  for (i = 1; i <= n; i++) a[i] = val[key, i];
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^REP / {
  delete kv
  for (i = 2; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
  c = kv["config"]; shape[c] = kv["ranks"] "x" kv["workers"]; nrep[c]++
  for (k in kv) if (k != "config") { key = c SUBSEP k; cnt[key]++; val[key, cnt[key]] = kv[k] }
}
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
