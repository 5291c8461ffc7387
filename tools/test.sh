#!/usr/bin/env bash
# Builds and runs the whole test suite twice: a normal build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build with leak checks (build-asan/),
# which leaves out the CUDA kernels and the long tests (LONG below).
# The bitwise/equivalence tests also run under two OpenBLAS settings (kernel and thread
# count forced, then both unset): their claims must hold whatever the environment says.
# Every test must run: a skipped test fails the suite unless tests/expected-skips.txt
# lists it (with the reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# The reference tests (PyTorch, transformers, tokenizers, tiktoken, tensorboard) fail
# rather than skip from here on: install-deps.sh has just installed tests/requirements.txt,
# so a missing or stand-in package is a defect (tests/support/reference.py).
export MG_REQUIRE_REFERENCES=1
jobs=$(nproc)
# StarPU keeps calibration files under $STARPU_HOME; tests set their own, this is a fallback.
export STARPU_SILENT=1 STARPU_HOME="${STARPU_HOME:-$PWD/build/starpu-home}"
# ranks of the mpirun tests run as root in CI containers and oversubscribe the cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# run_ctest BUILD_DIR [ctest args...]: ctest, then fail on any test that did not run
# (skipped: exit code under SKIP_RETURN_CODE, a failed fixture, DISABLED) and is not
# listed in tests/expected-skips.txt. ctest itself reports skips as passes.
run_ctest() {
  local dir=$1 log
  shift
  log=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure "$@" 2>&1 | tee "$log"
  local skipped
  skipped=$(sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) \((Skipped|Disabled|Not Run)\)$/\1/p' "$log" | sort -u)
  rm -f "$log"
  local name pat cond unexpected=() allowed
  for name in $skipped; do
    allowed=0
    while read -r pat cond _; do
      [ "$cond" = no-gpu ] && [ "$have_gpu" = 1 ] && continue
      [ "$cond" = no-avx512bf16 ] && [ "$have_bf16" = 1 ] && continue
      [ "$cond" = no-netns ] && [ "$have_netns" = 1 ] && continue
      [[ $cond =~ ^under-([0-9]+)-gpus$ ]] && [ "$n_gpus" -ge "${BASH_REMATCH[1]}" ] && continue
      # shellcheck disable=SC2053 # PATTERN is a glob on purpose
      [[ $name == $pat ]] && allowed=1
    done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' tests/expected-skips.txt)
    [ $allowed = 1 ] || unexpected+=("$name")
  done
  if [ ${#unexpected[@]} -gt 0 ]; then
    echo "FAIL: tests skipped that tests/expected-skips.txt does not list:" >&2
    printf '  %s\n' "${unexpected[@]}" >&2
    return 1
  fi
}

# Tests that need a GPU may skip only where there is none.
have_gpu=0 n_gpus=0
command -v nvidia-smi >/dev/null && n_gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
[ "$n_gpus" -gt 0 ] && have_gpu=1
# The AVX512-BF16 kernel's test may skip only on CPUs without it.
have_bf16=0
grep -qw avx512_bf16 /proc/cpuinfo && have_bf16=1
# The two-host test may skip only where the kernel refuses network namespaces.
have_netns=0
if ip netns add "mg-probe-$$" 2>/dev/null; then have_netns=1; ip netns del "mg-probe-$$"; fi

# The tests whose claims are bitwise (StarPU == reference, same seed == same bits) or
# parallel == serial; rerun under each OpenBLAS setting below.
EQUIV='equivalence|bitwise|starpu_equals_reference|memplan_reuse_equal|scheduler\.engine\.(reference|one_worker|policies|gpt2)|cli_train_matches_serial|comm\.engine'
# Long tests: training to a loss, or building the graphs of 70B-405B and Mixtral 8x7B
# models, for seconds to tens of seconds in the normal build and 10-30x that under the
# sanitizers, where they would be a third of the run (CI's budget is ~30 minutes). They run
# in the normal build only; their code paths run under the sanitizers through shorter
# tests (the same kernels, engine, partitioners and planner on smaller models).
# models.reference_regenerate is Python (torch recomputing tests/data/reference, ~35 s):
# the sanitizers would not see it.
LONG='^(models\.(llama_train_loss_falls|moe_train|deepseek_train|reference_regenerate)|tools\.train_loss_falls|tools\.model_lib|tools\.(bf16|fp16|fp8)_parallel|tools\.precision_curves|partitioners\.cli_dry_run_(70b_memory|70b_pipeline|405b_pp_cp)|partitioners\.cli_fsdp_pp_matches_serial|partitioners\.equivalence_(fsdp_zero2_pp2_dp2|llama_fsdp_pp2_dp2|fsdp_pp2_vpp2_dp2|fsdp_pp2_cp2|llama_fsdp_zero2_pp2_cp2)|ep\.cli_mixtral_dry_run|io\.hf_tokenizers|checkpoint\.megatron_(llama|gpt2|dist)|models\.hf_convert_.*|models\.deepseek_plan_.*)$'
# a kernel other than the one mgraph-run picks by itself on AVX-512 machines
if grep -qw avx2 /proc/cpuinfo; then forced=Haswell; else forced=Prescott; fi

# a phase's heading says how far into the run it starts (CI has a ~30-minute budget)
phase() { echo "== $* (at $((SECONDS / 60)) min $((SECONDS % 60)) s) =="; }

phase "normal build"
cmake -S . -B build >/dev/null
cmake --build build -j"$jobs"
run_ctest build -j"$jobs" --timeout 600
phase "equivalence tests with OPENBLAS_CORETYPE=$forced OPENBLAS_NUM_THREADS=2"
OPENBLAS_CORETYPE=$forced OPENBLAS_NUM_THREADS=2 run_ctest build -j"$jobs" --timeout 600 -R "$EQUIV"
phase "equivalence tests with OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS unset"
(unset OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS; run_ctest build -j"$jobs" --timeout 600 -R "$EQUIV")

phase "AddressSanitizer + UndefinedBehaviorSanitizer build"
# without the CUDA kernels: no GPU code runs under the sanitizers, and nvcc would double the build
cmake -S . -B build-asan -DMG_SANITIZE=ON -DMG_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
# Leaks are reported; tests/lsan.supp suppresses only third-party libraries (with reasons).
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
# tests/lsan.supp suppresses leaks under libc's vasprintf (Open MPI's); it must name none of ours
if grep -rnE '\bv?asprintf[[:space:]]*\(' --include='*.c' --include='*.h' --include='*.cc' --include='*.cu' \
    graph ops partitioners scheduler models planner io tools include tests bench; then
  echo "FAIL: mgraph calls asprintf/vasprintf, whose leaks tests/lsan.supp suppresses" >&2
  exit 1
fi
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run_ctest build-asan -j"$jobs" --timeout 900 -E "$LONG"

phase "fuzzing: libFuzzer targets (clang), a fixed number of runs (at most ${MG_FUZZ_SECONDS:-60} s) each from tests/fuzz/<target>"
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DMG_FUZZ=ON -DMG_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_plan fuzz_flags fuzz_idx fuzz_gpt2 fuzz_jsonl fuzz_cache fuzz_hf fuzz_tiktoken fuzz_torch fuzz_checkpoint_libfuzzer
bash tests/fuzz/run.sh build-fuzz "${MG_FUZZ_SECONDS:-60}"
phase "done: every phase passed"
