#!/usr/bin/env bash
# cmake --install into a scratch prefix, then build the README's API example
# (tests/graph/readme_example.c) as a user would: with `pkg-config --cflags --libs
# mgraph`, and with find_package(mgraph) in a CMake project. Both programs run (their
# rpath finds the SentencePiece shim), and so do the installed tools.
#   install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -u
BUILD=$1 SRC=$2 WORK=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
P=$WORK/prefix
cmake --install "$BUILD" --prefix "$P" > install.txt 2>&1 || { cat install.txt; fail "cmake --install"; }
for f in include/mgraph/mgraph.h include/mgraph/dot.h lib/libmgraph.a lib/libmgraph_sentencepiece.so bin/mgraph-run \
         bin/mgraph-preprocess bin/mgraph-convert bin/mgraph-plan bin/mgraph-generate lib/pkgconfig/mgraph.pc lib/cmake/mgraph/mgraphConfig.cmake \
         share/man/man1/mgraph-run.1 share/man/man1/mgraph-convert.1 share/man/man1/mgraph-preprocess.1 share/man/man1/mgraph-plan.1; do
    [ -e "$P/$f" ] || fail "not installed: $f"
done
# nothing of the source or build tree is needed from here on
unset CPATH C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH
EX=$SRC/tests/graph/readme_example.c

# 1. pkg-config
export PKG_CONFIG_PATH=$P/lib/pkgconfig
flags=$(pkg-config --cflags --libs mgraph) || fail "pkg-config mgraph"
echo "pkg-config --cflags --libs mgraph: $flags"
grep -q -- "-I$SRC/include\|-L$BUILD/lib\|-I$SRC " <<< "${flags//$P/PREFIX}" && fail "pkg-config flags point into the source or build tree"
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 "$EX" -o ex_pkgconfig $flags > cc.txt 2>&1 || { cat cc.txt; fail "cc with pkg-config"; }
mkdir -p run_pc && (cd run_pc && ../ex_pkgconfig) > pc.txt 2>&1 || { cat pc.txt; fail "pkg-config build does not run"; }
grep -q "gradient of w1: mlp.fc1.weight" pc.txt && [ -s run_pc/mlp.dot ] || { cat pc.txt; fail "pkg-config build: wrong output"; }

# a multi-rank program calls MPI_Init itself: it compiles with mgraph's flags alone, plain
# cc (mpi.h is not on the default include path everywhere: Debian keeps it under
# /usr/lib/<triplet>/openmpi/include), and the trainer's world is MPI's
# A sanitizer build's flags carry -fsanitize: the program then needs the sanitizer build's
# dlclose that keeps plugins mapped (tests/sanitize/keep_plugins.c says why), as every
# program of that build has, or Open MPI's plugin leaks show as "<unknown module>".
extra=()
case " $flags " in *" -fsanitize="*)
    extra=("$SRC/tests/sanitize/keep_plugins.c" -Wl,--export-dynamic-symbol=dlclose) ;;
esac
cat > with_mpi.c << 'EOF_C'
#include <mpi.h>
#include <mgraph/mgraph.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int same = mg_world_size() == n;
    MPI_Finalize();
    return same && n == 1 ? 0 : 1;
}
EOF_C
# shellcheck disable=SC2086 # the flags are words
cc -std=c11 with_mpi.c "${extra[@]}" -o with_mpi $flags > mpicc.txt 2>&1 ||
    { cat mpicc.txt; fail "cc of a program including mpi.h with pkg-config's flags"; }
./with_mpi > with_mpi.txt 2>&1 || { cat with_mpi.txt; fail "the MPI program does not run"; }

# 2. find_package(mgraph)
cmake -S "$SRC/tests/install" -B user-build -DCMAKE_PREFIX_PATH="$P" -DREADME_EXAMPLE="$EX" \
    -DWITH_MPI_EXAMPLE="$PWD/with_mpi.c" > cfg.txt 2>&1 ||
    { cat cfg.txt; fail "find_package(mgraph)"; }
cmake --build user-build > build.txt 2>&1 || { cat build.txt; fail "building against mgraph::mgraph"; }
grep -rq -- "-I$SRC/include" user-build/CMakeFiles 2> /dev/null && fail "find_package build includes the source tree"
mkdir -p run_cm && (cd run_cm && ../user-build/readme_example) > cm.txt 2>&1 || { cat cm.txt; fail "find_package build does not run"; }
grep -q "gradient of w1: mlp.fc1.weight" cm.txt && [ -s run_cm/mlp.dot ] || { cat cm.txt; fail "find_package build: wrong output"; }
cmp -s run_pc/mlp.dot run_cm/mlp.dot || fail "the two builds wrote different DOT files"

# 3. the installed tools run (and find the shim through their rpath)
"$P/bin/mgraph-run" --help > help.txt 2>&1 && grep -q -- "--num-layers" help.txt || { cat help.txt; fail "mgraph-run --help"; }
"$P/bin/mgraph-preprocess" --help > phelp.txt 2>&1 && grep -qi "usage" phelp.txt || { cat phelp.txt; fail "mgraph-preprocess --help"; }
# 4. a model of one's own (its own parameter names, layout roles declared) gets Megatron's
#    column / row tensor parallelism with no shard rules, and equals the serial run
command -v mpicc > /dev/null && command -v mpirun > /dev/null || fail "mpicc / mpirun not found"
# shellcheck disable=SC2086 # the flags are words
mpicc -std=c11 -O2 "$SRC/tests/install/custom_model.c" "${extra[@]}" -o custom_model $flags > mcc.txt 2>&1 ||
    { cat mcc.txt; fail "mpicc with pkg-config"; }
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    timeout 120 mpirun -np 2 --oversubscribe --allow-run-as-root ./custom_model > custom.txt 2>&1 ||
    { cat custom.txt; fail "the custom model under tp 2"; }
cat custom.txt
grep -q "equal serial: ok" custom.txt || fail "the custom model under tp 2: no result line"
echo "ok: installed tree builds the README example with pkg-config and find_package; tools run; a custom model gets tensor parallelism from its roles"
