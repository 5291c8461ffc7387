#!/usr/bin/env bash
# Fresh Debian machine -> trained default model: installs what is missing, builds,
# and runs mgraph-run with no flags (a small byte-level GPT on Debian's fortunes).
# Extra arguments go to mgraph-run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
exec build/bin/mgraph-run "$@"
