# Shared by the reliability tests: binaries, a scratch folder, a small generated
# corpus (no file from outside the repository), and helpers.
#   source common.sh RUN PREPROCESS WORK_DIR
RUN=$1 PRE=$2 WORK=$3
export STARPU_SILENT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# ~100 KB of varied English-like lines, the same on every run
awk 'BEGIN { srand(7); split("the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their", w, " ");
     for (i = 0; i < 2500; i++) { line = ""; n = 5 + int(rand() * 8); for (j = 0; j < n; j++) line = line w[1 + int(rand() * 40)] " "; print line "line " i "." } }' > corpus.txt
SMALL=(--text-file corpus.txt --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
       --micro-batch-size 2 --global-batch-size 4 --log-interval 2 --eval-iters 0 --cpu-workers 1)
# no temporary file of mg_outfile left in a folder
no_temp_left() { ! ls -A "${1:-.}" | grep -q '\.tmp-'; }
# runs "$@" under a 60 s limit; sets rc, out (stdout+stderr), secs
bounded() {
    local t0=$(date +%s.%N)
    out=$(timeout -k 10 60 "$@" 2>&1)
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
finish() { [ $fails -eq 0 ] && echo "all passed" && exit 0; echo "$fails failure(s)"; exit 1; }
