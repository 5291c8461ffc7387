#!/usr/bin/env python3
"""How much of a collective's time a rank's workers spent computing: reads the Chrome
traces mgraph-run writes (--trace-file t.%r.json) and, per rank and iteration, sums the
time the named collectives were running (on the communication lane) and the part of it
during which at least one StarPU worker ran a task. With collectives on the workers
(the default) that part is zero by construction; with the communication thread
(--overlap-grad-reduce) it is the share of the exchange hidden behind compute.

    python3 bench/trace_overlap.py [--op ring_shift] t.0.json t.1.json ...

Prints a table; asserts nothing (the standard library only)."""
import argparse
import json
import sys


def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def covered(a, b, busy):
    """Length of [a, b) inside the union of intervals busy (sorted, disjoint)."""
    t = 0.0
    for x, y in busy:
        if y <= a:
            continue
        if x >= b:
            break
        t += min(b, y) - max(a, x)
    return t


def analyse(path, op):
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    workers = {t for t, n in lanes.items() if n.startswith("worker")}
    comm = {t for t, n in lanes.items() if n.startswith("communication")}
    steps = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "iteration"]
    rows = []
    for s in steps:
        a0, a1 = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in ev if e.get("ph") == "X" and a0 <= e["ts"] < a1]
        busy = union([(e["ts"], e["ts"] + e["dur"]) for e in inside if e["tid"] in workers])
        mine = [e for e in inside if e["tid"] in comm and e["name"].startswith(op)]
        total = sum(e["dur"] for e in mine)
        hidden = sum(covered(e["ts"], e["ts"] + e["dur"], busy) for e in mine)
        rows.append((s["name"], len(mine), total / 1e3, hidden / 1e3, s["dur"] / 1e3,
                     lanes.get(next(iter(comm), -1), "?")))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", default="ring_shift", help="collective name prefix (default ring_shift)")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    print(f"| trace | step | {a.op} count | {a.op} ms | ms with a worker computing | hidden | step ms | lane |")
    print("|---|---|---|---|---|---|---|---|")
    for p in a.traces:
        try:
            rows = analyse(p, a.op)
        except (OSError, ValueError, KeyError) as e:
            print(f"trace_overlap: {p}: {e}", file=sys.stderr)
            return 2
        for name, n, tot, hid, step, lane in rows:
            share = f"{hid / tot:.0%}" if tot > 0 else "-"
            print(f"| {p} | {name} | {n} | {tot:.1f} | {hid:.1f} | {share} | {step:.1f} | {lane} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
