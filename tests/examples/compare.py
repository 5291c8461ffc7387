#!/usr/bin/env python3
"""compare.py NAME SERIAL_LOG SERIAL_CKPT PLAN_LOG PLAN_CKPT

A parallel run of an example against its serial run: every iteration's loss and gradient
norm (relative error <= 1e-5), and every tensor of the final checkpoint, parameters and
Adam's moments (|A - B|_2 <= 1e-5 |A|_2 per tensor). Prints the worst of each. A log is
the example's output ("iteration N | ... loss X | grad norm Y" lines) or, named *.jsonl,
mgraph-run's --metrics-file (its lm_loss and grad_norm: the example run by --model-lib)."""
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import ckpt  # noqa: E402

BOUND = 1e-5
LINE = re.compile(r"^iteration (\d+) \| .*loss ([-+0-9.eE]+|nan|inf) \| grad norm ([-+0-9.eE]+|nan|inf)$")


def steps(path):
    with open(path) as f:
        if path.endswith(".jsonl"):
            return [(r["iteration"], r["lm_loss"], r["grad_norm"]) for r in map(json.loads, f)]
        return [(int(m[1]), float(m[2]), float(m[3])) for m in map(LINE.match, f) if m]


def rel(a, b):
    return abs(a - b) / abs(a) if a else abs(b)


def main(name, slog, sckpt, plog, pckpt):
    bad = []
    s, p = steps(slog), steps(plog)
    if not s or len(s) != len(p):
        print(f"FAIL: {name}: {len(p)} iteration lines, serial {len(s)}")
        return 1
    worst_loss = worst_gn = 0.0
    for (i, sl, sg), (_, pl, pg) in zip(s, p):
        worst_loss, worst_gn = max(worst_loss, rel(sl, pl)), max(worst_gn, rel(sg, pg))
        if not (rel(sl, pl) <= BOUND and rel(sg, pg) <= BOUND):
            bad.append(f"iteration {i}: loss {pl!r} (serial {sl!r}), grad norm {pg!r} (serial {sg!r})")
    a, b = ckpt.load(sckpt), ckpt.load(pckpt)
    if set(a) != set(b):
        bad.append(f"checkpoint tensors differ: {sorted(set(a) ^ set(b))}")
    worst = {"param": (0.0, ""), "moment": (0.0, "")}
    for t in sorted(set(a) & set(b)):
        x, y = a[t], b[t]
        norm = math.sqrt(sum(v * v for v in x))
        err = math.sqrt(sum((u - v) ** 2 for u, v in zip(x, y))) / norm if norm else max(map(abs, y), default=0.0)
        kind = "moment" if t.endswith((".exp_avg", ".exp_avg_sq")) else "param"
        worst[kind] = max(worst[kind], (err, t))
        if len(x) != len(y) or not err <= BOUND:
            bad.append(f"{t}: relative error {err:.3g} in the 2-norm")
    params = sum(not t.endswith((".exp_avg", ".exp_avg_sq")) for t in a)
    print(f"{'FAIL' if bad else 'ok'}: {name}: {len(s)} iterations, worst relative error: loss {worst_loss:.2g}, "
          f"grad norm {worst_gn:.2g}, parameters {worst['param'][0]:.2g} ({worst['param'][1]}; {params} tensors), "
          f"Adam moments {worst['moment'][0]:.2g} ({worst['moment'][1]}) (bound {BOUND:g})")
    for m in bad:
        print(f"FAIL: {name}: {m}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
