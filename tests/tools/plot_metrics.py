"""tools/plot-metrics (issue 41 item 5): two runs' metrics files become one PNG of their
losses and throughput; bad input exits 2 and leaves no PNG.
usage: plot_metrics.py SOURCE_DIR WORK_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys

SRC, WORK = sys.argv[1:3]
sys.path.insert(0, os.path.join(SRC, "tests", "support"))
import reference  # noqa: E402  (the pinned matplotlib, or a skip; a failure under CI)

reference.require("matplotlib")
PLOT = os.path.join(SRC, "tools", "plot-metrics")
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
fails = 0


def fail(msg):
    global fails
    fails += 1
    print("FAIL: " + msg)


# two runs as mgraph-run writes them: iteration lines, the MoE losses in one, an exit line
with open("a.jsonl", "w") as f:
    for i in range(1, 41):
        f.write(json.dumps({"iteration": i, "lm_loss": 5.5 - 0.05 * i, "lr": 1e-3, "grad_norm": 1.0,
                            "elapsed_ms": 30.0, "tokens_per_s": 1000.0 + i, "tflops": 0.1}) + "\n")
    f.write(json.dumps({"exit": "done", "iterations": 40}) + "\n")
with open("b.jsonl", "w") as f:
    for i in range(1, 41):
        f.write(json.dumps({"iteration": i, "lm_loss": 5.6 - 0.04 * i, "load_balancing_loss": 1.1, "lr": 1e-3,
                            "elapsed_ms": 20.0, "tokens_per_s": 1500.0}) + "\n")
r = subprocess.run([PLOT, "out.png", "a.jsonl", "b.jsonl", "--label", "serial", "--label", "tp 2", "--smooth", "5"],
                   capture_output=True, text=True)
if r.returncode != 0:
    fail(f"plot: exit {r.returncode}: {r.stderr.strip()}")
else:
    png = open("out.png", "rb").read()
    w, h = struct.unpack(">II", png[16:24]) if png[:8] == b"\x89PNG\r\n\x1a\n" else (0, 0)
    if (w, h) != (1200, 450):
        fail(f"out.png is not a 1200 x 450 PNG (magic {png[:8]!r}, {w} x {h})")
    else:
        print(f"ok: two runs -> out.png, {w} x {h}, {len(png)} bytes")
    # the plotted lines are the runs' (read back through matplotlib's own test hook: none;
    # instead the same data drawn twice must give the same bytes, and other data other bytes)
    subprocess.run([PLOT, "again.png", "a.jsonl", "b.jsonl", "--label", "serial", "--label", "tp 2", "--smooth", "5"],
                   check=True, capture_output=True)
    subprocess.run([PLOT, "other.png", "a.jsonl", "--smooth", "5"], check=True, capture_output=True)
    if open("again.png", "rb").read() != png:
        fail("the same runs drew different images")
    if open("other.png", "rb").read() == png:
        fail("other runs drew the same image")
for name, content, args, want in [
    ("not JSON", "{\"iteration\": 1, \n", [], "bad.jsonl:1: not JSON"),
    ("no iterations", json.dumps({"exit": "done"}) + "\n", [], "no iteration lines"),
    ("labels", None, ["--label", "x", "--label", "y"], "2 --label for 1 runs"),
    ("missing file", None, ["nonexistent.jsonl"], "cannot read nonexistent.jsonl"),
]:
    if content is not None:
        open("bad.jsonl", "w").write(content)
    files = ["bad.jsonl"] if content is not None else ([] if "nonexistent.jsonl" in args else ["a.jsonl"])
    r = subprocess.run([PLOT, "bad.png"] + files + args, capture_output=True, text=True)
    if r.returncode != 2 or want not in r.stderr:
        fail(f"{name}: exit {r.returncode}, stderr {r.stderr.strip()!r}; want exit 2 and {want!r}")
    elif os.path.exists("bad.png") or any(f.startswith(".plot-metrics-") for f in os.listdir(".")):
        fail(f"{name}: a PNG or its temporary file was left")
    else:
        print(f"ok: {name}: exit 2: {r.stderr.strip()}")
sys.exit(1 if fails else 0)
