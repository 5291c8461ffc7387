#!/usr/bin/env bash
# Builds StarPU with CUDA workers from Debian's source package of the StarPU the
# CPU build uses (1.3.10), patched for CUDA 13 (tools/patches/), into a prefix:
#
#   bash tools/build-starpu-cuda.sh [PREFIX]        (default: build-starpu-cuda/prefix)
#   cmake -S . -B build-cuda -DMG_STARPU_PREFIX=$PREFIX
#
# Debian's libstarpu is built without CUDA, and its contrib CUDA build targets Debian's
# CUDA 11. Needs a deb-src entry for the Debian archive (added when missing, as root),
# dpkg-dev, a C compiler, MPI and hwloc headers, and the CUDA toolkit (CUDA_HOME,
# default /usr/local/cuda). No GPU is needed: without one, StarPU starts with 0 CUDA
# workers. Idempotent: a prefix already built from the same patch is kept.
# Variables: CUDA_HOME, STARPU_CUDA_ARCH (default sm_90), JOBS (default nproc).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
prefix="$(realpath -m "${1:-$repo/build-starpu-cuda/prefix}")"
work="$(dirname "$prefix")/src"
cuda="${CUDA_HOME:-/usr/local/cuda}"
arch="${STARPU_CUDA_ARCH:-sm_90}"
jobs="${JOBS:-$(nproc)}"
patch="$repo/tools/patches/starpu-1.3.10-cuda13.patch"
version=1.3.10

die() { echo "build-starpu-cuda: $*" >&2; exit 1; }
[ -x "$cuda/bin/nvcc" ] || die "no nvcc in $cuda (set CUDA_HOME)"
command -v dpkg-source >/dev/null || die "dpkg-source missing: apt-get install dpkg-dev"

stamp="$prefix/.mgraph-starpu-cuda"
want="starpu $version patch $(sha256sum "$patch" | cut -c1-16) arch $arch cuda $("$cuda/bin/nvcc" --version | tail -1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$prefix/lib/pkgconfig/starpu-1.3.pc" ]; then
    echo "build-starpu-cuda: $prefix is up to date ($want)"
    exit 0
fi

# ---- source: Debian's package of the same StarPU -------------------------------------
mkdir -p "$work"
src="$(find "$work" -maxdepth 1 -type d -name "starpu-$version*" | head -1)"
if [ -z "$src" ]; then
    if ! apt-get source --print-uris starpu="$version+dfsg-2" >/dev/null 2>&1; then
        # A deb-src entry for the archive the binary packages come from.
        [ "$(id -u)" = 0 ] || die "no deb-src entry for Debian and not root: add one, then rerun"
        suite="$(. /etc/os-release && echo "$VERSION_CODENAME")"
        cat >/etc/apt/sources.list.d/mgraph-deb-src.sources <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        apt-get update -qq
    fi
    (cd "$work" && apt-get source -q starpu="$version+dfsg-2") || die "apt-get source starpu failed"
    src="$(find "$work" -maxdepth 1 -type d -name "starpu-$version*" | head -1)"
    [ -n "$src" ] || die "apt-get source left no starpu-$version* directory in $work"
    patch -d "$src" -p1 --forward <"$patch" || die "the CUDA 13 patch does not apply to $src"
fi

# ---- configure and build -------------------------------------------------------------
build="$work/build"
rm -rf "$build"
mkdir -p "$build"
cd "$build"
# Flags measured on these machines: Debian's own NVCCFLAGS (-std=c++03) are
# rejected by nvcc 13; static libraries (86 MB) are dropped so the prefix can travel.
"$src/configure" --prefix="$prefix" --with-cuda-dir="$cuda" --enable-maxcpus=64 --enable-maxbuffers=16 \
    --disable-opencl --disable-build-doc --disable-build-examples --disable-build-tests --enable-mpi \
    --disable-static --disable-fortran --disable-starpufft \
    NVCCFLAGS="-Xcompiler -fPIC -arch=$arch" >configure.log 2>&1 || { tail -30 configure.log; die "configure failed (see $build/configure.log)"; }
grep -q "#define STARPU_USE_CUDA 1" src/common/config.h include/starpu_config.h 2>/dev/null ||
    die "configure did not enable CUDA (see $build/configure.log)"
make -j"$jobs" >make.log 2>&1 || { tail -30 make.log; die "make failed (see $build/make.log)"; }
rm -rf "$prefix"
make install >install.log 2>&1 || { tail -30 install.log; die "make install failed"; }
echo "$want" >"$stamp"
echo "build-starpu-cuda: installed in $prefix ($(du -sh "$prefix" | cut -f1))"
echo "  cmake -S . -B build-cuda -DMG_STARPU_PREFIX=$prefix"
