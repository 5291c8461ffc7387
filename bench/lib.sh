# Shared by bench/run_parallel.sh and bench/run_ep.sh (sourced): the environment, the
# interleaved rounds, and the medians of the benchmarks' REP lines.

# bench_env NAME: Open MPI as root with more ranks than cores, StarPU quiet and unbound
# (bench/RESULTS-parallel.md), a StarPU home and a log of the caller's unless set.
bench_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
  export STARPU_HOME=${STARPU_HOME:-$(mktemp -d "/tmp/bench-$1-starpu.XXXXXX")}
  LOG=${LOG:-$(mktemp "/tmp/bench-$1-log.XXXXXX")}
  echo "log: $LOG; $(nproc) cores; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# bench_rounds BIN ROUNDS REPS STEPS CONFIG...: ROUNDS rounds, each running every
# configuration once (1 rank for serial and serial1, else 2), so that the machine's load
# drifts over all of them alike; output appended to $LOG.
bench_rounds() {
  local bin=$1 rounds=$2 reps=$3 steps=$4 r c np
  shift 4
  for r in $(seq 1 "$rounds"); do
    for c in "$@"; do
      case $c in serial|serial1) np=1 ;; *) np=2 ;; esac
      echo "round $r: $c (np $np)" >&2
      mpirun -np $np --oversubscribe --bind-to none "$bin" "$c" "$reps" "$steps" >>"$LOG" 2>&1 ||
        echo "$(basename "$bin") $c failed (see $LOG)" >&2
    done
  done
}

# Awk source to put before a report's END block: reads the REP lines (key=value fields)
# into med(config SUBSEP key), the median over every timed repetition ("nan" if none),
# nrep[config] and shape[config] ("ranks x workers").
BENCH_AWK_MEDIANS='
function med(key,   n, i, j, t, a) {
  n = cnt[key]; if (!n) return "nan"
  for (i = 1; i <= n; i++) a[i] = val[key, i]
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^REP / {
  delete kv
  for (i = 2; i <= NF; i++) { split($i, p, "="); kv[p[1]] = p[2] }
  c = kv["config"]; shape[c] = kv["ranks"] " x " kv["workers"]; nrep[c]++
  for (k in kv) if (k != "config") { key = c SUBSEP k; cnt[key]++; val[key, cnt[key]] = kv[k] }
}'
