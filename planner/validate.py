#!/usr/bin/env python3
"""mgraph-plan against published step times (tests/planner/published/rows.tsv).

  python3 planner/validate.py BUILD_DIR [--rows FILE] [--clusters DIR] [--check] [--json OUT]

Predicts every row with mgraph-plan --json (the row's cluster preset, or DIR/<preset>.cluster
when --clusters is given), and prints, for the fit rows and the held-out rows separately,
each row's published and predicted step time and error, then a summary per hardware: rows,
median and worst |error|, and the same for a constant predictor (the fit rows' median MFU
on that hardware, applied to every row) for comparison. Ratios: for every pair of held-out
rows of one source and hardware whose published MFUs differ by more than 10% (where a
constant MFU is more than 10% off by construction), the predicted ratio of MFUs against the
published one. Memory: a row that ran as given (memory column "fits") must fit its GPUs.

--check exits 1 unless, on the held-out rows of each hardware, the median |error| and the
worst are within --max-median and --max-worst (default the goals, 10% and 25%), the
median ratio error is within 10%, the constant predictor's median errors are larger, and every row
that ran is predicted within --memory-slack of its GPUs' memory (default 0: it fits).
tests/planner runs it with the bounds the model meets today (README, "Validation").
"""
import argparse, json, os, shlex, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = os.path.join(HERE, "..", "tests", "planner", "published", "rows.tsv")


def load(path):
    macros, rows = {}, []
    for line in open(path):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        f = line.split("\t")
        if f[0].startswith("@"):
            macros[f[0]] = f[1]
            continue
        if len(f) != 9:
            sys.exit("%s: a row needs 9 tab-separated fields: %s" % (path, line))
        rows.append(dict(id=f[0], set=f[1], hw=f[2], cluster=f[3], source=f[4], step=f[5], basis=f[6], flags=f[7],
                         memory=f[8]))

    def expand(s, depth=0):
        out = []
        for tok in shlex.split(s):
            if tok.startswith("@"):
                if tok not in macros or depth > 8:
                    sys.exit("%s: unknown macro %s" % (path, tok))
                out += expand(macros[tok], depth + 1)
            else:
                out.append(tok)
        return out

    for r in rows:
        r["argv"] = expand(r["flags"])
        if r["set"] not in ("fit", "held-out"):
            sys.exit("%s: row %s: set must be fit or held-out" % (path, r["id"]))
    return rows


def predict(build, r, clusters=None):
    cl = r["cluster"]
    if clusters:
        cl = os.path.join(clusters, cl + ".cluster")
    cmd = [os.path.join(build, "bin", "mgraph-plan"), "--cluster", cl, "--json"] + r["argv"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("row %s: mgraph-plan failed (%d): %s\n%s" % (r["id"], p.returncode, p.stderr, " ".join(cmd)))
    j = json.loads(p.stdout)
    world = j["plan"]["world_size"]
    if r["step"].startswith("tflops="):
        pub = j["model_flops_per_step"] / (world * float(r["step"][7:]) * 1e12)
    else:
        pub = float(r["step"])
    return dict(r, pub=pub, pred=j["step_time_s"], err=j["step_time_s"] / pub - 1, mfu=j["mfu"],
                pub_mfu=j["mfu"] * j["step_time_s"] / pub, fits=j["fits"], mem=j["memory_per_gpu_gib"],
                mem_stage=j["memory_stage_holds"], world=world, capacity=j["memory_gib"]["capacity"])


def summarize(res, fit_mfu):
    out = {}
    for hw in sorted({r["hw"] for r in res}):
        rs = [r for r in res if r["hw"] == hw]
        e = [abs(r["err"]) for r in rs]
        c = [abs(r["pub_mfu"] / fit_mfu[hw] - 1) if hw in fit_mfu else float("nan") for r in rs]
        out[hw] = dict(n=len(rs), median=statistics.median(e), worst=max(e), const_median=statistics.median(c),
                       const_worst=max(c))
    return out


def ratios(res):
    """Pairs of rows of one source and hardware whose published MFUs differ by > 10%."""
    out = []
    for i, a in enumerate(res):
        for b in res[i + 1:]:
            if a["source"] != b["source"] or a["hw"] != b["hw"]:
                continue
            pub = b["pub_mfu"] / a["pub_mfu"]
            if abs(pub - 1) <= 0.10:
                continue
            pred = b["mfu"] / a["mfu"]
            out.append(dict(a=a["id"], b=b["id"], hw=a["hw"], pub=pub, pred=pred, err=pred / pub - 1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--clusters", help="a folder of <preset>.cluster files to use instead of the presets")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--max-median", type=float, default=0.10)
    ap.add_argument("--max-worst", type=float, default=0.25)
    ap.add_argument("--memory-slack", type=float, default=0.0, help="a row that ran may be predicted this fraction over")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    res = [predict(a.build, r, a.clusters) for r in load(a.rows)]
    fit_mfu = {}
    for hw in {r["hw"] for r in res}:
        f = [r["pub_mfu"] for r in res if r["hw"] == hw and r["set"] == "fit"]
        if f:
            fit_mfu[hw] = statistics.median(f)
    ok = True
    summaries = {}
    for st in ("fit", "held-out"):
        rs = [r for r in res if r["set"] == st]
        print("\n### %s rows (%d)\n" % (st, len(rs)))
        print("| row | source | GPUs | published step (s) | predicted (s) | error | published MFU | predicted MFU | "
              "memory (GiB, the most on) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rs:
            print("| %s | %s | %d | %.3f | %.3f | %+.1f%% | %.1f%% | %.1f%% | %.1f, %s%s |" %
                  (r["id"], r["source"], r["world"], r["pub"], r["pred"], 100 * r["err"], 100 * r["pub_mfu"],
                   100 * r["mfu"], r["mem"], r["mem_stage"], "" if r["fits"] else " (DOES NOT FIT)"))
        s = summarize(rs, fit_mfu)
        summaries[st] = s
        print("\n| %s | rows | median abs error | worst | constant MFU predictor: median | worst |" % st)
        print("|---|---|---|---|---|---|")
        for hw, v in s.items():
            print("| %s | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% |" % (hw, v["n"], 100 * v["median"], 100 * v["worst"],
                                                               100 * v["const_median"], 100 * v["const_worst"]))
    for hw, v in summaries["held-out"].items():
        print("\n%s held-out: median %.1f%% (goal 10%%: %s), worst %.1f%% (goal 25%%: %s)" %
              (hw, 100 * v["median"], "met" if v["median"] <= 0.10 else "NOT met", 100 * v["worst"],
               "met" if v["worst"] <= 0.25 else "NOT met"))
    held = [r for r in res if r["set"] == "held-out"]
    pairs = ratios(held)
    print("\n### held-out pairs whose published MFUs differ by more than 10%% (%d)\n" % len(pairs))
    print("| rows | published MFU ratio | predicted | error |\n|---|---|---|---|")
    for p in pairs:
        print("| %s / %s | %.3f | %.3f | %+.1f%% |" % (p["b"], p["a"], p["pub"], p["pred"], 100 * p["err"]))
    pair_sum = {}
    for hw in sorted({p["hw"] for p in pairs}):
        e = [abs(p["err"]) for p in pairs if p["hw"] == hw]
        c = [abs(p["pub"] - 1) for p in pairs if p["hw"] == hw]
        pair_sum[hw] = dict(n=len(e), median=statistics.median(e), worst=max(e), const_median=statistics.median(c))
        print("\n%s: %d pairs, ratio error median %.1f%%, worst %.1f%% (a constant: median %.1f%%)" %
              (hw, len(e), 100 * pair_sum[hw]["median"], 100 * pair_sum[hw]["worst"], 100 * pair_sum[hw]["const_median"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(rows=res, summary=summaries, pairs=pairs, pair_summary=pair_sum), f, indent=1)
    if a.check:
        for hw, v in summaries["held-out"].items():
            if v["median"] > a.max_median or v["worst"] > a.max_worst:
                print("CHECK FAILED: %s held-out median %.1f%% worst %.1f%% (bounds %.0f%% / %.0f%%)" %
                      (hw, 100 * v["median"], 100 * v["worst"], 100 * a.max_median, 100 * a.max_worst))
                ok = False
            if not v["const_median"] > v["median"]:
                print("CHECK FAILED: %s: a constant MFU does as well as the planner" % hw)
                ok = False
        for hw, v in pair_sum.items():
            if v["median"] > 0.10 or v["const_median"] <= v["median"]:
                print("CHECK FAILED: %s pairs: ratio error median %.1f%% (a constant %.1f%%)" %
                      (hw, 100 * v["median"], 100 * v["const_median"]))
                ok = False
        for r in res:
            if r["memory"] == "fits" and r["mem"] > r["capacity"] * (1 + a.memory_slack):
                print("CHECK FAILED: %s ran on its GPUs but is predicted to need %.1f GiB" % (r["id"], r["mem"]))
                ok = False
        print("\ncheck: %s" % ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
