#!/usr/bin/env bash
# --dump-dot through mg_outfile: a failed write names the file and the reason and
# removes nothing it did not create (issue 18 items 1 and 6; /dev/full was deleted).
#   dot.sh MGRAPH_RUN MGRAPH_PREPROCESS WORK_DIR
set -u
source "$(dirname "$0")/common.sh" "$@"
D=(--dry-run --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2
   --global-batch-size 4 --text-file corpus.txt)
# a private device equal to /dev/full (root can make one; else the case is skipped)
if mknod fulldev c 1 7 2>/dev/null; then
    bounded "$RUN" "${D[@]}" --dump-dot fulldev
    [ $rc -ne 0 ] && [[ $out == *"writing DOT file fulldev failed: No space left on device"* ]] && [ -c fulldev ] &&
        ok "DOT to a full device: exit $rc, $(grep -o 'writing DOT.*' <<< "$out"), the device is still there" ||
        fail "DOT to a full device: rc $rc, $(ls -l fulldev 2>&1): $out"
else
    echo "note: mknod not permitted: the full-device case is skipped"
fi
# a symlink named as the DOT file: replaced by the new file on success, its target untouched
printf 'precious\n' > victim && ln -s victim g.dot
bounded "$RUN" "${D[@]}" --dump-dot g.dot
[ $rc -eq 0 ] && [ -f g.dot ] && [ ! -L g.dot ] && grep -q digraph g.dot && [ "$(cat victim)" = precious ] &&
    ok "DOT over a symlink: the link is replaced, its target kept" || fail "DOT over a symlink: rc $rc: $out"
# a directory that does not exist: exit 2 naming it, nothing created
bounded "$RUN" "${D[@]}" --dump-dot nodir/g.dot
[ $rc -eq 2 ] && [[ $out == *"nodir"* ]] && [ ! -e nodir ] && ok "DOT into a missing directory: exit 2" ||
    fail "DOT into a missing directory: rc $rc: $out"
no_temp_left || fail "temporary files left: $(ls -A)"
finish
