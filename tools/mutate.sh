#!/usr/bin/env bash
# Mutation testing: does the test suite catch the bugs it claims to? Each record of
# tests/mutants.txt (a fixed, versioned list) injects one bug into a scratch copy of the
# source tree, rebuilds incrementally only the programs its tests run, runs those tests
# (a ctest regex, not the whole suite) and counts the mutant killed when one of them
# fails. Prints each result and the mutation score. Not part of CI (the whole list takes
# 20-40 minutes on 2 busy cores, once the scratch tree is built).
#
#   nice tools/mutate.sh [--only ID[,ID...]] [--list] [--no-baseline] [--work DIR] [-j N]
#
# The scratch copy (default /tmp/mgraph-mutate, or $MG_MUTATE_WORK) holds src/ (the
# working tree's tracked and untracked-unignored files), build/ (configured once, CUDA
# off, built whole) and base/ (a copy of the built build/). Before each mutant build/ is
# put back to a copy of base/ (time stamps kept) and the mutated file's original
# restored with its time stamp, so each mutant starts from the same built tree (no
# output of an earlier mutant's tests left) and make recompiles one file and relinks
# only the programs its tests run. The baseline (every
# listed test on the unmutated tree) must pass first, or no result means anything.
# A record with "file: -" changes no source: its "setup" (a shell command run in the
# scratch directory) and "env" (VAR=VALUE words exported for its tests) break the
# environment instead (a stand-in torch on PYTHONPATH).
# Exit status: 0 when every mutant applied and built, 1 otherwise (a record whose text
# is no longer in its file, or a mutant that does not compile: fix tests/mutants.txt),
# 2 for usage.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LIST=$ROOT/tests/mutants.txt
WORK=${MG_MUTATE_WORK:-/tmp/mgraph-mutate}
ONLY="" BASELINE=1 JOBS=$(nproc) LIST_ONLY=0
while [ $# -gt 0 ]; do
    case $1 in
    --only) ONLY=$2; shift 2 ;;
    --list) LIST_ONLY=1; shift ;;
    --no-baseline) BASELINE=0; shift ;;
    --work) WORK=$2; shift 2 ;;
    -j) JOBS=$2; shift 2 ;;
    -j[0-9]*) JOBS=${1#-j}; shift ;;
    *) echo "usage: tools/mutate.sh [--only ID[,ID...]] [--list] [--no-baseline] [--work DIR] [-j N]" >&2; exit 2 ;;
    esac
done
export STARPU_SILENT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# mutants: python3 helper over tests/mutants.txt (ids, fields, apply)
helper() {
    python3 - "$LIST" "$@" << 'PY'
import os, sys
path, cmd, *args = sys.argv[1:]
recs, cur = [], {}
for line in open(path):
    line = line.rstrip("\n")
    if line.startswith("#"):
        continue
    if line.strip() == "---":
        recs.append(cur); cur = {}
        continue
    if line.strip():
        k, _, v = line.partition(": ")
        cur[k.strip()] = v
if cur:
    recs.append(cur)
for r in recs:
    for k in ("id", "file", "find", "replace", "tests", "why"):
        if k not in r:
            sys.exit(f"{path}: a record lacks '{k}': {r}")
    r.setdefault("setup", ":")  # a shell command run in the scratch directory first
    r.setdefault("env", "MG_MUTANT=1")  # VAR=VALUE... set for the tests ($WORK: the scratch directory)
ids = [r["id"] for r in recs]
if len(set(ids)) != len(ids):
    sys.exit(f"{path}: duplicate ids")
byid = {r["id"]: r for r in recs}
if cmd == "ids":
    print("\n".join(ids))
elif cmd == "get":
    print(byid[args[0]][args[1]])
elif cmd == "union":
    print("\n".join(r["tests"] for r in recs if not args or not args[0] or r["id"] in args[0].split(",")))
elif cmd == "apply":  # apply ID SRC_ROOT
    r = byid[args[0]]
    if r["file"] == "-":  # an environment mutant: no source changed
        sys.exit(0)
    f = os.path.join(args[1], r["file"])
    text = open(f).read()
    find, repl = r["find"].replace("\\n", "\n"), r["replace"].replace("\\n", "\n")
    n = text.count(find)
    if n != 1:
        sys.exit(f"{r['id']}: the text to replace occurs {n} times in {r['file']} (want once): update tests/mutants.txt")
    open(f, "w").write(text.replace(find, repl))
PY
}

ids=$(helper ids) || exit 1
if [ -n "$ONLY" ]; then
    for id in ${ONLY//,/ }; do grep -qx -- "$id" <<< "$ids" || { echo "no mutant '$id' in $LIST" >&2; exit 2; }; done
    ids=$(tr ',' '\n' <<< "$ONLY")
fi
if [ $LIST_ONLY = 1 ]; then
    for id in $ids; do printf '%-34s %-28s %s\n' "$id" "$(helper get "$id" file)" "$(helper get "$id" why)"; done
    exit 0
fi

SRC=$WORK/src BUILD=$WORK/build BASE=$WORK/base LOGS=$WORK/logs
mkdir -p "$SRC" "$LOGS"
: > "$LOGS/summary.txt"
echo "== scratch copy of $ROOT in $WORK"
# the working tree as it is (tracked files and untracked ones git does not ignore)
git ls-files -z --cached --others --exclude-standard |
    tar --null --ignore-failed-read -T - -cf - 2> /dev/null | tar -xf - -C "$SRC"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    cmake -S "$SRC" -B "$BUILD" -DMG_CUDA=OFF > "$LOGS/configure.log" 2>&1 || { cat "$LOGS/configure.log"; exit 1; }
fi
# an earlier run that was interrupted may have left a mutant's objects in build/: start
# from base/ (the last unmutated build), which make brings up to date with the sources
[ -d "$BASE" ] && rm -rf "$BUILD" && cp -a "$BASE" "$BUILD"
echo "== building the unmutated tree (once; later runs rebuild what changed)"
cmake --build "$BUILD" -j"$JOBS" > "$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log"; exit 1; }
restore_build() { rm -rf "$BUILD" && cp -a "$BASE" "$BUILD"; }
rm -rf "$BASE" && cp -a "$BUILD" "$BASE"

# targets_of REGEX: the programs of the build that the tests matching REGEX run
targets_of() {
    ctest --test-dir "$BUILD" -N -R "$1" --show-only=json-v1 2> /dev/null | python3 -c '
import json, os, sys
bindir = sys.argv[1]
names = set()
for t in json.load(sys.stdin).get("tests", []):
    for a in t.get("command", []):
        if a.startswith(bindir + "/"):
            names.add(os.path.basename(a))
print(" ".join(sorted(names)))' "$BUILD/bin"
}

if [ $BASELINE = 1 ]; then
    # the names the records' regexes match, as one regex (CMake's regexes allow ten groups)
    union=$(helper union "${ONLY}" | while read -r re; do
        ctest --test-dir "$BUILD" -N -R "$re" | sed -n 's/^ *Test *#[0-9]*: //p'
    done | sort -u | sed 's/\./\\./g' | paste -sd'|')
    union="^($union)\$"
    echo "== baseline: the listed tests on the unmutated tree"
    if ! ctest --test-dir "$BUILD" -R "$union" -j"$JOBS" --timeout 900 --no-tests=error > "$LOGS/baseline.log" 2>&1; then
        grep -E "\*\*\*|Failed|Timeout" "$LOGS/baseline.log" | head -20
        echo "FAIL: the baseline does not pass; mutation results would mean nothing" >&2
        exit 1
    fi
    grep -E "tests passed" "$LOGS/baseline.log"
fi

killed=0 survived=0 broken=0
results=()
# interrupted with a mutant applied: the original source back, build/ back to base/
applied=""
trap '[ -n "$applied" ] && cp -p "$WORK/original" "$SRC/$applied" && restore_build; exit 130' INT TERM
for id in $ids; do
    file=$(helper get "$id" file) tests=$(helper get "$id" tests)
    restore_build
    if [ "$file" != - ]; then cp -p "$SRC/$file" "$WORK/original" && applied=$file; fi
    t0=$SECONDS
    if ! helper apply "$id" "$SRC" > "$LOGS/$id.log" 2>&1; then
        result="STALE (text not found)"; broken=$((broken + 1))
    elif ! (cd "$WORK" && eval "$(helper get "$id" setup)") >> "$LOGS/$id.log" 2>&1; then
        result="SETUP FAILED"; broken=$((broken + 1))
    elif [ "$(ctest --test-dir "$BUILD" -N -R "$tests" 2> /dev/null | sed -n 's/^Total Tests: //p')" = 0 ]; then
        result="NO TESTS match /$tests/"; broken=$((broken + 1))
    else
        targets=$(targets_of "$tests")
        # shellcheck disable=SC2086 # one word per target
        if ! cmake --build "$BUILD" -j"$JOBS" --target ${targets:-mgraph} >> "$LOGS/$id.log" 2>&1; then
            result="BUILD ERROR"; broken=$((broken + 1))
        elif (eval "export $(helper get "$id" env)" &&
            ctest --test-dir "$BUILD" -R "$tests" -j"$JOBS" --timeout 900 --output-on-failure) >> "$LOGS/$id.log" 2>&1; then
            result="SURVIVED"; survived=$((survived + 1))
        else
            failed=$(sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) \(.*/\1/p' "$LOGS/$id.log" | tr '\n' ' ')
            result="killed by ${failed:-?}"; killed=$((killed + 1))
        fi
    fi
    [ -n "$applied" ] && cp -p "$WORK/original" "$SRC/$file" # the original back, with its time stamp
    applied=""
    line=$(printf '%-34s %-40s %4d s  %s' "$id" "$result" $((SECONDS - t0)) "$(helper get "$id" why)")
    results+=("$line")
    echo "$line" | tee -a "$LOGS/summary.txt"
done
restore_build

total=$((killed + survived))
echo
echo "== mutation score: $killed of $total mutants killed ($(awk -v k=$killed -v t=$total 'BEGIN { printf "%.1f", t ? 100 * k / t : 0 }')%)" \
     "$([ $broken -gt 0 ] && echo ", $broken not applied or not built")"
for r in "${results[@]}"; do [[ $r == *SURVIVED* ]] && echo "survivor: $r"; done
echo "logs: $LOGS"
[ $broken -eq 0 ]
