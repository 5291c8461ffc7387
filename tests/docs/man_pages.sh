#!/usr/bin/env bash
# The generated man pages (tools/CMakeLists.txt) exist, render without groff warnings, and
# mgraph-run.1 names every flag of the table.   man_pages.sh MAN_DIR FLAG_DOCS
set -u
dir=$1 gen=$2
fail() { echo "FAIL: $*"; exit 1; }
for t in mgraph-run mgraph-convert mgraph-preprocess mgraph-plan; do
    [ -s "$dir/$t.1" ] || fail "no man page $dir/$t.1"
    out=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$dir/$t.1" 2>&1) || fail "groff on $t.1: $out"
    grep -v "cannot adjust line" <<< "$out" | grep -q . && fail "groff warns on $t.1: $out"
done
text=$(LC_ALL=C.UTF-8 MANWIDTH=200 groff -man -Tutf8 "$dir/mgraph-run.1" 2>/dev/null | sed 's/.\x08//g')
missing=0
for f in $("$gen" markdown | grep -o '^| `--[a-z0-9-]*`' | tr -d '|` '); do
    grep -q -- "$f" <<< "$text" || { echo "mgraph-run.1 lacks $f"; missing=1; }
done
[ $missing = 0 ] || fail "mgraph-run.1 does not list the whole flag table"
echo "ok: 4 man pages render; mgraph-run.1 lists all $("$gen" markdown | grep -c '^| `--') flags"
