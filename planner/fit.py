#!/usr/bin/env python3
"""Fits a cluster preset's efficiencies to the fit rows of tests/planner/published/rows.tsv.

  python3 planner/fit.py BUILD_DIR --hw a100|h100 [--rounds N]

Only rows whose set is "fit" and whose hardware is --hw are read (the held-out rows are
never seen here; planner/validate.py reports them). Starting from the preset the rows name,
coordinate descent over the efficiencies below, each within a physical range, minimises
mean |log(predicted / published)| + 0.5 max |log(...)| of the step times. Prints the
fitted values (the presets in planner/cluster.c and the files in planner/clusters/ carry
them) and the fit rows' errors. A benchmark of the model, not a test.
"""
import argparse, math, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import validate  # noqa: E402

# key: (low, high) -- what each efficiency may be
RANGES = {
    "a100": {"gemm-efficiency": (0.6, 0.95), "gemm-half-gflops": (1, 40), "memory-efficiency": (0.5, 0.95),
             "overlap-interference": (0, 0.3), "step-overhead-us": (0, 3000)},
    "h100": {"gemm-efficiency": (0.6, 0.95), "gemm-half-gflops": (5, 120), "attention-efficiency": (0.3, 1.0),
             "memory-efficiency": (0.5, 0.95), "overlap-interference": (0, 0.5), "step-overhead-us": (0, 3000)},
}


def cluster_text(build, preset, over):
    p = subprocess.run([os.path.join(build, "bin", "mgraph-plan"), "--cluster", preset, "--print-cluster"],
                       capture_output=True, text=True, check=True)
    out = []
    for line in p.stdout.splitlines():
        k = line.split()[0]
        out.append("%s %s" % (k, over[k]) if k in over else line)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--hw", required=True, choices=sorted(RANGES))
    ap.add_argument("--rows", default=validate.ROWS)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    rows = [r for r in validate.load(a.rows) if r["set"] == "fit" and r["hw"] == a.hw]
    presets = sorted({r["cluster"] for r in rows})
    if not rows:
        sys.exit("no fit rows for %s" % a.hw)
    tmp = tempfile.mkdtemp(prefix="mg-fit-")
    base = {}
    for pr in presets:
        txt = subprocess.run([os.path.join(a.build, "bin", "mgraph-plan"), "--cluster", pr, "--print-cluster"],
                             capture_output=True, text=True, check=True).stdout
        for line in txt.splitlines():
            k, v = line.split()[:2]
            if k in RANGES[a.hw]:
                base[k] = float(v)

    def score(over):
        for pr in presets:
            with open(os.path.join(tmp, pr + ".cluster"), "w") as f:
                f.write(cluster_text(a.build, pr, over))
        errs = [math.log(validate.predict(a.build, r, tmp)["pred"] / validate.predict(a.build, r, None)["pub"])
                for r in rows]
        e = [abs(x) for x in errs]
        return sum(e) / len(e) + 0.5 * max(e)

    cur = dict(base)
    best = score(cur)
    print("start %s: score %.4f" % (cur, best), flush=True)
    for rnd in range(a.rounds):
        step = 0.5 ** (rnd + 1)
        for k, (lo, hi) in RANGES[a.hw].items():
            for sgn in (+1, -1):
                while True:
                    span = hi - lo
                    trial = dict(cur)
                    trial[k] = min(hi, max(lo, round(cur[k] + sgn * step * span / 4, 4)))
                    if trial[k] == cur[k]:
                        break
                    s = score(trial)
                    if s < best - 1e-6:
                        best, cur = s, trial
                    else:
                        break
        print("round %d: score %.4f %s" % (rnd + 1, best, cur), flush=True)
    score(cur)
    print("\nfitted %s efficiencies (%d fit rows): %s" % (a.hw, len(rows), " ".join("%s %g" % kv for kv in cur.items())))
    for r in rows:
        p = validate.predict(a.build, r, tmp)
        print("  %-24s published %8.3f s  predicted %8.3f s  %+5.1f%%" % (r["id"], p["pub"], p["pred"], 100 * p["err"]))


if __name__ == "__main__":
    main()
