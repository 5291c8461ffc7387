"""Every flag the README and docs/ name is a flag of an mgraph tool (docs.flags_mentioned).

The flags known: mgraph-run's table (all of it: used, accepted without effect, refused,
through mgraph-flag-docs markdown) and what each other tool's --help lists. A flag that the
docs name and no tool has is drift: renamed, removed, or never there. Megatron flags the
docs mention only to say mgraph lacks them are listed in docs/flags-not-in-mgraph.txt, each
with its reason; an entry there that a tool now knows fails too (the list must shrink).
usage: flags_mentioned.py BIN_DIR SOURCE_DIR"""
import glob
import os
import re
import subprocess
import sys

BIN, SRC = sys.argv[1:3]
# a flag, or a family of them written --name-* (it stands for flags the tools do not list one by one)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?:-\*)?")


def flags_of(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[:300]}")
    return set(FLAG.findall(r.stdout + r.stderr))


known = {"run": flags_of([f"{BIN}/mgraph-flag-docs", "markdown"])}
for tool in sorted(glob.glob(f"{BIN}/mgraph-*")):
    name = os.path.basename(tool)
    if name in ("mgraph-run", "mgraph-flag-docs", "mgraph-calibrate") or not os.access(tool, os.X_OK):
        continue
    known[name] = flags_of([tool, "--help"])
every = set().union(*known.values())

allowed = {}
with open(f"{SRC}/docs/flags-not-in-mgraph.txt") as f:
    for n, line in enumerate(f, 1):
        line = line.split("#", 1)[0].strip()
        if line:
            flag, _, why = line.partition(" ")
            if not why.strip():
                sys.exit(f"FAIL: docs/flags-not-in-mgraph.txt:{n}: {flag} has no reason")
            allowed[flag] = why.strip()

bad = []
docs = [f"{SRC}/README.md"] + sorted(glob.glob(f"{SRC}/docs/*.md"))
for path in docs:
    with open(path) as f:
        for n, line in enumerate(f, 1):
            for flag in FLAG.findall(line):
                if flag not in every and flag not in allowed:
                    bad.append(f"{os.path.relpath(path, SRC)}:{n}: {flag}")
stale = sorted(f for f in allowed if f in every)
for b in bad:
    print(f"unknown flag: {b}")
for s in stale:
    print(f"docs/flags-not-in-mgraph.txt lists {s}, which a tool now knows: remove it")
print(f"{len(docs)} pages, {len(every)} flags known to {len(known)} tools, {len(allowed)} listed as Megatron's only")
sys.exit(1 if bad or stale else 0)
