#!/usr/bin/env python3
"""The planner against this machine (a benchmark: prints a table, asserts nothing).

  python3 planner/calibrate.py BUILD_DIR OUT_DIR [--iters N] [--repeats R] [--cluster FILE] [--plans LIST] [--auto]

1. mpirun -np 2 mgraph-calibrate > OUT_DIR/cpu.cluster (sgemm, memory, mgraph's GELU
   kernel, StarPU's cost per node, MPI all-reduce: 2 ranks at once, one per core);
   --cluster FILE skips this and predicts from FILE (planner/clusters/cpu-2core.cluster).
2. Runs mgraph-run's plans (1 rank, dp=2, tp=2, pp=2 by default; --plans all: every
   2-rank plan below with its micro-batch variants; one StarPU worker per rank, as the
   cluster file describes a rank) R times each and mgraph-plan's prediction of each from
   the file; the table shows medians over the repeats.
3. --auto: runs mgraph-run --plan auto --cluster FILE on 2 ranks too (the planner picks
   tp, pp, virtual stages, cp and the micro-batch), and says how far its measured time is
   from the fastest plan measured by hand.

The machine is shared with other jobs, so step times are measured as CPU time per
iteration and rank (what a dedicated core takes, as mgraph-calibrate measures): the
CPU time of a run of N iterations minus that of a run of 2, divided by (N - 2) and the
ranks. Plans are measured in rounds (each plan once per round) so that the machine's
load falls on all of them alike; the wall-clock median of the log's iterations is shown
beside, and the load average at each round.
"""
import argparse, json, os, resource, statistics, subprocess, sys

ap = argparse.ArgumentParser(description="mgraph-plan's predictions against mgraph-run on this machine")
ap.add_argument("build")
ap.add_argument("out")
ap.add_argument("--iters", type=int, default=12, help="iterations of the long run (the short run has 2)")
ap.add_argument("--repeats", type=int, default=3, help="runs of each length per plan (medians)")
ap.add_argument("--cluster", help="predict from this cluster file instead of measuring one")
ap.add_argument("--plans", default="1rank,dp2,tp2,pp2", help="comma list of the plans below, or all")
ap.add_argument("--auto", action="store_true", help="also run --plan auto on 2 ranks and compare")
a = ap.parse_args()
build, out, iters = a.build, a.out, a.iters
if iters < 3 or a.repeats < 1:
    sys.exit("calibrate.py: --iters must be >= 3 and --repeats >= 1")
B = os.path.join(build, "bin")
src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.makedirs(out, exist_ok=True)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", STARPU_SILENT="1", STARPU_HOME=os.path.join(out, "starpu-home"))
text = os.path.join(src, "tests", "data", "tinyshakespeare.txt")
model = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
         "--global-batch-size", "8"]
cluster = a.cluster or os.path.join(out, "cpu.cluster")
if not a.cluster:
    with open(cluster, "w") as f:
        subprocess.run(["mpirun", "-np", "2", os.path.join(B, "mgraph-calibrate"), "--name", "cpu-2core", "--cpu-time"],
                       stdout=f, stdin=subprocess.DEVNULL, env=env, check=True)


def run(np, flags, n):
    """CPU seconds of a run of n iterations (all ranks), and its log."""
    cmd = [os.path.join(B, "mgraph-run")] + model + ["--text-file", text, "--train-iters", str(n), "--log-interval", "1",
                                                     "--eval-iters", "0", "--cpu-workers", "1"] + flags
    if np > 1:
        cmd = ["mpirun", "-np", str(np)] + cmd
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit("mgraph-run failed: %s\n%s" % (" ".join(cmd), p.stderr))
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), p.stdout


MBS = ["--micro-batch-size"]
known = {"1rank": ("1 rank", 1, MBS + ["4"]), "dp2": ("dp=2", 2, MBS + ["4"]),
         "tp2": ("tp=2", 2, MBS + ["4", "--tensor-model-parallel-size", "2"]),
         "pp2": ("pp=2", 2, MBS + ["4", "--pipeline-model-parallel-size", "2"]),
         "dp2-mbs2": ("dp=2, micro-batch 2", 2, MBS + ["2"]),
         "tp2-mbs8": ("tp=2, micro-batch 8", 2, MBS + ["8", "--tensor-model-parallel-size", "2"]),
         "tp2-sp": ("tp=2 + SP", 2, MBS + ["4", "--tensor-model-parallel-size", "2", "--sequence-parallel"]),
         "pp2-mbs1-v2": ("pp=2, micro-batch 1, 2 virtual stages", 2,
                         MBS + ["1", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2"]),
         "pp2-mbs2": ("pp=2, micro-batch 2", 2, MBS + ["2", "--pipeline-model-parallel-size", "2"]),
         "cp2": ("cp=2", 2, MBS + ["4", "--context-parallel-size", "2"])}
ALL = "1rank,dp2,dp2-mbs2,tp2,tp2-mbs8,tp2-sp,pp2,pp2-mbs2,pp2-mbs1-v2,cp2"
plans = []
for k in (ALL if a.plans == "all" else a.plans).split(","):
    if k not in known:
        sys.exit("calibrate.py: unknown plan %s (%s)" % (k, ", ".join(known)))
    plans.append(known[k])
if a.auto:
    plans.append(("--plan auto", 2, ["--plan", "auto", "--cluster", cluster]))
measured = []
# Rounds: every plan once per round, so a change in the machine's load falls on all plans
# alike; medians over the rounds.
cpus = {i: [] for i in range(len(plans))}
walls = {i: [] for i in range(len(plans))}
logs, loads = {}, []
for rnd in range(a.repeats):
    loads.append(os.getloadavg()[0])
    for i, (name, np, flags) in enumerate(plans):
        c_long, log = run(np, flags, iters)
        c_short, _ = run(np, flags, 2)
        cpus[i].append((c_long - c_short) / (iters - 2) / np)
        walls[i] += [float(l.split("elapsed time per iteration (ms):")[1].split("|")[0]) / 1e3
                     for l in log.splitlines() if "elapsed time per iteration" in l][2:]
        logs[i] = log
loads.append(os.getloadavg()[0])
print("| plan | ranks | measured CPU s per iteration and rank (median of %d rounds) | predicted step (s) | error | "
      "wall median (s) |" % a.repeats)
print("|---|---|---|---|---|---|")
for i, (name, np, flags) in enumerate(plans):
    cpu = statistics.median(cpus[i])
    if name == "--plan auto":
        chosen = [l for l in logs[i].splitlines() if "--plan auto on" in l][0]
        pred = float(chosen.split("predicted ")[1].split(" s")[0])
        name = "--plan auto (%s)" % chosen.split("--plan auto on ")[1].split(": ", 1)[1].split(" (")[0]
    else:
        p = subprocess.run([os.path.join(B, "mgraph-plan"), "--cluster", cluster, "--json", "--world-size", str(np),
                            "--text-file", text] + model + flags, capture_output=True, text=True, env=env)
        if p.returncode:
            sys.exit("mgraph-plan failed: %s" % p.stderr)
        pred = json.loads(p.stdout)["step_time_s"]
    measured.append((name, np, cpu))
    print("| %s | %d | %.3f (%s) | %.3f | %+.0f%% | %.3f |" %
          (name, np, cpu, " ".join("%.3f" % c for c in cpus[i]), pred, 100 * (pred - cpu) / cpu,
           statistics.median(walls[i])), flush=True)
print("\nload average at the start of each round and at the end: %s" % " ".join("%.1f" % x for x in loads))
hand = [m for m in measured if m[1] == 2 and not m[0].startswith("--plan auto")]
auto = [m for m in measured if m[0].startswith("--plan auto")]
if auto and hand:
    best = min(hand, key=lambda m: m[2])
    print("\n%s measured %.3f s; the fastest 2-rank plan measured by hand, %s, %.3f s: %+.1f%%" %
          (auto[0][0], auto[0][2], best[0], best[2], 100 * (auto[0][2] / best[2] - 1)))
print("\ncluster file %s:\n" % cluster)
print(open(cluster).read())
