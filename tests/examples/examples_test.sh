#!/usr/bin/env bash
# examples/ built and trained as a user would, against the installed package only.
#   examples_test.sh build BUILD_DIR SOURCE_DIR WORK_DIR
#       cmake --install into WORK_DIR/prefix; both examples built with pkg-config (cc) and
#       with find_package(mgraph) (examples/CMakeLists.txt); the two builds' serial runs
#       print the same losses
#   examples_test.sh run MODEL SOURCE_DIR WORK_DIR
#       MODEL trained serially and under mpirun with tp 2, dp 2, pp 2 and tp 2 x dp 2 (a
#       plan file); each run's losses, gradient norms and final checkpoint (every
#       parameter and Adam moment) against the serial run's (compare.py)
#   examples_test.sh model_lib SOURCE_DIR WORK_DIR
#       bert built as a model library (the build step: headers only) trained by the installed
#       mgraph-run --model-lib with the flags of bert's own main, against bert's serial run
set -u
fail() { echo "FAIL: $*"; exit 1; }
MODE=$1
if [ "$MODE" = build ]; then
    BUILD=$2 SRC=$3 WORK=$4
    rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
    P=$WORK/prefix
    cmake --install "$BUILD" --prefix "$P" > install.txt 2>&1 || { cat install.txt; fail "cmake --install"; }
    unset CPATH C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH # nothing of the source or build tree from here on
    export PKG_CONFIG_PATH=$P/lib/pkgconfig
    flags=$(pkg-config --cflags --libs mgraph) || fail "pkg-config mgraph"
    # a sanitizer build's programs take its dlclose that keeps plugins mapped
    # (tests/sanitize/keep_plugins.c), so that Open MPI's plugin leaks stay nameable
    extra=() cmake_extra=()
    case " $flags " in *" -fsanitize="*)
        cc -c "$SRC/tests/sanitize/keep_plugins.c" -o keep_plugins.o || fail "keep_plugins.c"
        extra=("$WORK/keep_plugins.o" -Wl,--export-dynamic-symbol=dlclose)
        cmake_extra=("-DCMAKE_EXE_LINKER_FLAGS=${extra[*]}") ;;
    esac
    mkdir -p pc
    for m in bert mixer; do
        # shellcheck disable=SC2086 # the flags are words
        cc -std=c11 -O2 -Wall -Wextra -Werror "$SRC/examples/$m.c" "${extra[@]}" -o "pc/$m" $flags > "cc_$m.txt" 2>&1 ||
            { cat "cc_$m.txt"; fail "$m: cc with pkg-config's flags"; }
    done
    # bert is also a model library (include/mgraph/model_lib.h): the headers only, no libmgraph
    # (mgraph-run provides the API it calls)
    cflags=$(pkg-config --cflags mgraph) || fail "pkg-config --cflags mgraph"
    # shellcheck disable=SC2086 # the flags are words
    cc -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC "$SRC/examples/bert.c" -o pc/libbert.so $cflags \
        > cc_libbert.txt 2>&1 || { cat cc_libbert.txt; fail "bert: cc -shared with pkg-config --cflags"; }
    cmake -S "$SRC/examples" -B cm -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" "${cmake_extra[@]}" \
        > cfg.txt 2>&1 || { cat cfg.txt; fail "find_package(mgraph) in examples/CMakeLists.txt"; }
    cmake --build cm > cmbuild.txt 2>&1 || { cat cmbuild.txt; fail "building the examples against mgraph::mgraph"; }
    grep -rq -- "-I$SRC/include" cm/CMakeFiles 2> /dev/null && fail "the find_package build includes the source tree"
    for m in bert mixer; do
        (mkdir -p "run_$m" && cd "run_$m" && "../pc/$m" --iters 2 > pc.txt 2>&1 && "../cm/$m" --iters 2 > cm.txt 2>&1) ||
            { cat "run_$m"/*.txt; fail "$m: a serial run"; }
        grep -q "^iteration 2 |" "run_$m/pc.txt" || { cat "run_$m/pc.txt"; fail "$m: no iteration line"; }
        cmp -s "run_$m/pc.txt" "run_$m/cm.txt" || fail "$m: the pkg-config and find_package builds print different runs"
    done
    echo "ok: examples built with pkg-config and find_package against $P; serial runs equal"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OMPI_MCA_mpi_yield_when_idle=1 STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1
if [ "$MODE" = model_lib ]; then
    SRC=$2 WORK=$3
    X=$WORK/pc/bert L=$WORK/pc/libbert.so R=$WORK/prefix/bin/mgraph-run
    for f in "$X" "$L" "$R"; do [ -e "$f" ] || fail "$f not built (the examples.build fixture)"; done
    D=$WORK/runs_model_lib
    rm -rf "$D" && mkdir -p "$D" && cd "$D" || exit 1
    timeout 300 "$X" --iters 4 --save serial > serial.txt 2>&1 || { cat serial.txt; fail "bert serial"; }
    # bert's main: the trainer's defaults (mg_trainer_defaults: AdamW 0.9 / 0.999 / 1e-8,
    # weight decay 0.01, clip 1.0, seed 1234, no warmup) with micro-batch 2, global batch 8,
    # a constant lr 1e-3; given here as mgraph-run's flags
    timeout 300 "$R" --model-lib "$L" --micro-batch-size 2 --global-batch-size 8 --train-iters 4 \
        --lr 1e-3 --lr-decay-style constant --weight-decay 0.01 --adam-beta1 0.9 --adam-beta2 0.999 \
        --adam-eps 1e-8 --clip-grad 1.0 --seed 1234 --save lib --metrics-file lib.jsonl > lib.txt 2>&1 ||
        { cat lib.txt; fail "mgraph-run --model-lib libbert.so"; }
    python3 "$SRC/tests/examples/compare.py" "bert --model-lib" serial.txt serial lib.jsonl lib ||
        fail "bert through mgraph-run --model-lib differs from bert's own serial run"
    exit 0
fi
[ "$MODE" = run ] || fail "mode $MODE"
M=$2 SRC=$3 WORK=$4
X=$WORK/pc/$M
[ -x "$X" ] || fail "$X not built (the examples.build fixture)"
D=$WORK/runs_$M
rm -rf "$D" && mkdir -p "$D" && cd "$D" || exit 1
ITERS=4
timeout 300 "$X" --iters $ITERS --save serial > serial.txt 2>&1 || { cat serial.txt; fail "$M serial"; }
printf 'tensor-model-parallel-size 2\n' > tp2.plan
rc=0
for run in "tp2 2 --tp 2" "dp2 2" "pp2 2 --pp 2" "tp2_dp2 4 --plan tp2.plan"; do
    read -r name np args <<< "$run"
    # shellcheck disable=SC2086 # args are words
    timeout 300 mpirun -np "$np" --oversubscribe --allow-run-as-root "$X" --iters $ITERS --save "$name" $args > "$name.txt" 2>&1 ||
        { cat "$name.txt"; fail "$M $name (mpirun -np $np $args)"; }
    python3 "$SRC/tests/examples/compare.py" "$M $name" serial.txt serial "$name.txt" "$name" || rc=1
done
# bad input exits 2 with the reason: a flag's value (the example's check), a plan the model
# does not fit (the library's, on every rank before anything runs)
"$X" --tp 0 > bad.txt 2>&1; brc=$?
[ $brc = 2 ] && grep -q "'0' is not a positive integer" bad.txt || { cat bad.txt; fail "$M --tp 0: exit $brc"; }
timeout 300 mpirun -np 3 --oversubscribe --allow-run-as-root "$X" --pp 3 > bad_pp.txt 2>&1; brc=$?
[ $brc = 2 ] && grep -q "2 layers do not divide into 3 stages" bad_pp.txt || { cat bad_pp.txt; fail "$M --pp 3: exit $brc"; }
[ $rc = 0 ] || fail "$M: a plan differs from the serial run"
echo "ok: $M serial == tp 2, dp 2, pp 2, tp 2 x dp 2 (losses, gradient norms, parameters and Adam moments after $ITERS iterations)"
