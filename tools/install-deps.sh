#!/usr/bin/env bash
# Installs the Debian packages mgraph builds, tests and trains with (only those missing).
set -euo pipefail
PKGS=(build-essential cmake pkg-config
      libopenblas-dev libstarpu-dev starpu-tools libhwloc-dev hwloc libopenmpi-dev openmpi-bin
      libjansson-dev libpcre2-dev libsentencepiece-dev
      graphviz        # dot: DOT dumps are rendered by the tests
      fortunes)       # English text for the default training run
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
