#!/usr/bin/env bash
# Installs the Debian packages mgraph builds, tests and trains with (only those missing).
set -euo pipefail
PKGS=(build-essential cmake pkg-config
      libopenblas-dev libstarpu-dev starpu-tools libhwloc-dev hwloc libopenmpi-dev openmpi-bin
      libjansson-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev
      graphviz        # dot: DOT dumps are rendered by the tests
      fortunes        # English text for the default training run
      clang-14 libclang-rt-14-dev   # libFuzzer targets (tests/fuzz)
      iproute2        # ip netns: the two-host test (tests/reliability/two_hosts.sh)
      groff-base)     # groff: the man pages are checked to render (tests/docs)
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

# The tests' reference packages (torch, transformers, tokenizers, safetensors, tiktoken,
# tensorboard, numpy: never runtime dependencies) at the versions tests/requirements.txt
# pins, from PyPI. Installed only when one is missing or at another version; a failure
# here fails the script: tools/test.sh requires them (tests/support/reference.py).
if ! python3 - "$(dirname "$0")/../tests/requirements.txt" << 'PY'
import importlib.metadata, sys
bad = []
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, want = line.partition("==")
    try:
        have = importlib.metadata.version(name.strip())
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have is None or have.split("+", 1)[0] != want.strip():
        bad.append(f"{name.strip()} {have or '(none)'} (want {want.strip()})")
if bad:
    print("reference packages to install: " + ", ".join(bad))
sys.exit(1 if bad else 0)
PY
then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-pip >/dev/null
  fi
  PIP=(python3 -m pip install --quiet)
  python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages && PIP+=(--break-system-packages)
  if ! "${PIP[@]}" -r "$(dirname "$0")/../tests/requirements.txt"; then
    echo "error: could not install the tests' reference packages (tests/requirements.txt) from PyPI;" >&2
    echo "       the suite needs them (MG_REQUIRE_REFERENCES=1 in tools/test.sh)" >&2
    exit 1
  fi
fi
