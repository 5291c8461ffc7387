#!/usr/bin/env bash
# Fresh Debian machine -> trained default model: installs what is missing, builds,
# and runs mgraph-run with no flags (a small byte-level GPT on Debian's fortunes).
# Extra arguments go to mgraph-run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
# Debian's StarPU runs at most STARPU_MAXCPUS (4) CPU workers per process. On a machine with
# more cores, build StarPU from Debian's source with enough of them (tools/build-starpu.sh,
# minutes, once) rather than leave the cores idle; MG_STARPU_PREFIX=... picks another build.
starpu=()
cap=$(sed -n 's/^#define STARPU_MAXCPUS \([0-9]*\)$/\1/p' "$(pkg-config --variable=includedir starpu-1.3)/starpu/1.3/starpu_config.h" 2>/dev/null || true)
if [ -n "${MG_STARPU_PREFIX:-}" ]; then
  starpu=(-DMG_STARPU_PREFIX="$MG_STARPU_PREFIX")
elif [ -n "$cap" ] && [ "$(nproc)" -gt "$cap" ]; then
  echo "setup: this machine has $(nproc) cores and Debian's StarPU runs at most $cap workers: building StarPU for them"
  bash tools/build-starpu.sh --cpus "$PWD/build-starpu/prefix"
  starpu=(-DMG_STARPU_PREFIX="$PWD/build-starpu/prefix")
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${starpu[@]}" >/dev/null
cmake --build build -j"$(nproc)"
exec build/bin/mgraph-run "$@"
