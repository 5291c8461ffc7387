#!/usr/bin/env bash
# Builds and runs the whole test suite twice: a normal build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build with leak checks (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs=$(nproc)
# StarPU keeps calibration files under $STARPU_HOME; tests set their own, this is a fallback.
export STARPU_SILENT=1 STARPU_HOME="${STARPU_HOME:-$PWD/build/starpu-home}"
# ranks of the mpirun tests run as root in CI containers and oversubscribe the cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

echo "== normal build =="
cmake -S . -B build >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
cmake -S . -B build-asan -DMG_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
# Leaks are reported; tests/lsan.supp suppresses only third-party libraries (with reasons).
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:fast_unwind_on_malloc=0:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900
