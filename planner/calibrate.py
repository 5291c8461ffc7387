#!/usr/bin/env python3
"""The planner against this machine (a benchmark: prints a table, asserts nothing).

  python3 planner/calibrate.py BUILD_DIR OUT_DIR [ITERATIONS]

1. mpirun -np 2 mgraph-calibrate > OUT_DIR/cpu.cluster (sgemm, memory, mgraph's GELU
   kernel, StarPU's cost per node, MPI all-reduce: 2 ranks at once, one per core).
2. Runs mgraph-run's plans (1 rank, dp=2, tp=2; one StarPU worker per rank, as the
   cluster file describes a rank) and mgraph-plan's prediction of each from the file.

The machine is shared with other jobs, so step times are measured as CPU time per
iteration and rank (what a dedicated core takes, as mgraph-calibrate measures): the
CPU time of a run of N iterations minus that of a run of 2, divided by (N - 2) and the
ranks. The wall-clock median of the log's iterations is shown beside it, with the load.
"""
import json, os, resource, statistics, subprocess, sys

build, out = sys.argv[1], sys.argv[2]
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 12
B = os.path.join(build, "bin")
src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.makedirs(out, exist_ok=True)
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", STARPU_SILENT="1", STARPU_HOME=os.path.join(out, "starpu-home"))
text = os.path.join(src, "tests", "data", "tinyshakespeare.txt")
model = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
         "--micro-batch-size", "4", "--global-batch-size", "8"]
cluster = os.path.join(out, "cpu.cluster")
with open(cluster, "w") as f:
    subprocess.run(["mpirun", "-np", "2", os.path.join(B, "mgraph-calibrate"), "--name", "cpu-2core", "--cpu-time"], stdout=f,
                   stdin=subprocess.DEVNULL, env=env, check=True)


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


plans = [("1 rank", 1, []), ("dp=2", 2, []), ("tp=2", 2, ["--tensor-model-parallel-size", "2"])]
if len(sys.argv) > 4:
    plans.append(("pp=2", 2, ["--pipeline-model-parallel-size", "2"]))
print("| plan | ranks | measured CPU s per iteration and rank | predicted step (s) | error | wall median (s) | load |")
print("|---|---|---|---|---|---|---|")
for name, np, flags in plans:
    c_long, log = run(np, flags, iters)
    c_short, _ = run(np, flags, 2)
    cpu = (c_long - c_short) / (iters - 2) / np
    walls = [float(l.split("elapsed time per iteration (ms):")[1].split("|")[0]) / 1e3
             for l in log.splitlines() if "elapsed time per iteration" in l][2:]
    p = subprocess.run([os.path.join(B, "mgraph-plan"), "--cluster", cluster, "--json", "--world-size", str(np),
                        "--text-file", text] + model + flags, capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("mgraph-plan failed: %s" % p.stderr)
    pred = json.loads(p.stdout)["step_time_s"]
    print("| %s | %d | %.3f | %.3f | %+.0f%% | %.3f | %.1f |" % (name, np, cpu, pred, 100 * (pred - cpu) / cpu,
                                                                 statistics.median(walls), os.getloadavg()[0]))
print("\ncluster file %s:\n" % cluster)
print(open(cluster).read())
