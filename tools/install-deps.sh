#!/usr/bin/env bash
# Installs the Debian packages mgraph builds, tests and trains with (only those missing).
set -euo pipefail
PKGS=(build-essential cmake pkg-config
      libopenblas-dev libstarpu-dev starpu-tools libhwloc-dev hwloc libopenmpi-dev openmpi-bin
      libjansson-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev
      graphviz        # dot: DOT dumps are rendered by the tests
      fortunes        # English text for the default training run
      clang-14 libclang-rt-14-dev   # libFuzzer targets (tests/fuzz)
      iproute2)       # ip netns: the two-host test (tests/reliability/two_hosts.sh)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Reference checks only (tests/checkpoint/hf.py compares mgraph-convert with Hugging Face
# transformers): PyTorch's CPU wheels and transformers from PyPI. Never a runtime
# dependency; a failure here is reported and the test says loudly that it skipped.
if ! python3 -c "import torch, transformers, safetensors" 2>/dev/null; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null || true
  fi
  PIP=(python3 -m pip install --quiet)
  python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages && PIP+=(--break-system-packages)
  "${PIP[@]}" --index-url https://download.pytorch.org/whl/cpu torch || "${PIP[@]}" torch ||
    echo "warning: could not install torch (tests/checkpoint/hf.py will skip)"
  "${PIP[@]}" transformers safetensors || echo "warning: could not install transformers (tests/checkpoint/hf.py will skip)"
fi

# Reference check only (tests/tools/megatron_run.py reads mgraph-run's event files with
# it): the tensorboard package from PyPI. Never a runtime dependency.
if ! python3 -c "import tensorboard" 2>/dev/null; then
  PIP=(python3 -m pip install --quiet)
  python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages && PIP+=(--break-system-packages)
  "${PIP[@]}" tensorboard || echo "warning: could not install tensorboard (tests/tools/megatron_run.py tensorboard will skip)"
fi

# Reference check only (tests/io/tiktokenizer.py compares TikTokenizer with it): OpenAI's
# tiktoken from PyPI. Never a runtime dependency.
if ! python3 -c "import tiktoken" 2>/dev/null; then
  PIP=(python3 -m pip install --quiet)
  python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages && PIP+=(--break-system-packages)
  "${PIP[@]}" tiktoken || echo "warning: could not install tiktoken (tests/io/tiktokenizer.py will skip)"
fi
