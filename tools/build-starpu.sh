#!/usr/bin/env bash
# Builds StarPU from Debian's source package of the StarPU the CPU build uses (1.3.10)
# into a prefix, for what Debian's binary package lacks:
#
#   bash tools/build-starpu.sh --cuda [PREFIX]   CUDA workers (default build-starpu-cuda/prefix),
#                                                patched for CUDA 13 (tools/patches/)
#   bash tools/build-starpu.sh --cpus [PREFIX]   CPU workers only, for machines with more cores
#                                                than Debian's build allows (default build-starpu/prefix)
#   cmake -S . -B build -DMG_STARPU_PREFIX=$PREFIX
#
# Debian's libstarpu is built without CUDA (its contrib CUDA build targets Debian's CUDA 11)
# and with STARPU_MAXCPUS 4: on a 16- or 64-core machine a rank would get at most 4 CPU
# workers. Both builds here allow max(64, the machine's cores). tools/setup.sh runs --cpus
# by itself where the machine has more cores than the installed StarPU allows.
# Needs a deb-src entry for the Debian archive (added when missing, as root), dpkg-dev, a C
# compiler, MPI and hwloc headers, and for --cuda the CUDA toolkit (CUDA_HOME, default
# /usr/local/cuda). No GPU is needed: without one, StarPU starts with 0 CUDA workers.
# Idempotent: a prefix already built the same way is kept.
# Variables: CUDA_HOME, STARPU_CUDA_ARCH (default sm_90), JOBS (default nproc).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
    --cuda) mode=cuda ;;
    --cpus) mode=cpus ;;
    *) echo "usage: build-starpu.sh --cuda|--cpus [PREFIX]" >&2; exit 2 ;;
esac
shift
default_prefix="$repo/build-starpu-cuda/prefix"
[ "$mode" = cpus ] && default_prefix="$repo/build-starpu/prefix"
prefix="$(realpath -m "${1:-$default_prefix}")"
work="$(dirname "$prefix")/src"
cuda="${CUDA_HOME:-/usr/local/cuda}"
arch="${STARPU_CUDA_ARCH:-sm_90}"
jobs="${JOBS:-$(nproc)}"
maxcpus=$(( $(nproc) > 64 ? $(nproc) : 64 ))
patch="$repo/tools/patches/starpu-1.3.10-cuda13.patch"
version=1.3.10

die() { echo "build-starpu: $*" >&2; exit 1; }
[ "$mode" = cpus ] || [ -x "$cuda/bin/nvcc" ] || die "no nvcc in $cuda (set CUDA_HOME)"
if ! command -v dpkg-source >/dev/null; then
    [ "$(id -u)" = 0 ] || die "dpkg-source missing: apt-get install dpkg-dev"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dpkg-dev >/dev/null ||
        die "could not install dpkg-dev"
fi

stamp="$prefix/.mgraph-starpu"
# The prefix is replaced whole at the end: only one this script made (its stamp, or the
# stamp of build-starpu-cuda.sh before it) or an empty / absent one, never a directory of
# the user's such as /usr/local.
if [ -d "$prefix" ] && [ -n "$(ls -A "$prefix")" ] && [ ! -f "$stamp" ] && [ ! -f "$prefix/.mgraph-starpu-cuda" ]; then
    die "$prefix exists and was not made by this script: give a new or empty directory"
fi
if [ "$mode" = cuda ]; then
    want="starpu $version patch $(sha256sum "$patch" | cut -c1-16) arch $arch cuda $("$cuda/bin/nvcc" --version | tail -1) maxcpus $maxcpus"
else
    want="starpu $version cpus maxcpus $maxcpus"
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$prefix/lib/pkgconfig/starpu-1.3.pc" ]; then
    echo "build-starpu: $prefix is up to date ($want)"
    exit 0
fi

# ---- source: Debian's package of the same StarPU -------------------------------------
mkdir -p "$work"
src="$(find "$work" -maxdepth 1 -type d -name "starpu-$version*" | head -1)"
# (the patch only touches StarPU's CUDA code: applied to the one source tree both modes build)
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
common=(--prefix="$prefix" --enable-maxcpus="$maxcpus" --enable-maxbuffers=16 --disable-opencl --disable-build-doc
        --disable-build-examples --disable-build-tests --enable-mpi --disable-static --disable-fortran --disable-starpufft)
if [ "$mode" = cuda ]; then
    "$src/configure" "${common[@]}" --with-cuda-dir="$cuda" NVCCFLAGS="-Xcompiler -fPIC -arch=$arch" >configure.log 2>&1 ||
        { tail -30 configure.log; die "configure failed (see $build/configure.log)"; }
    grep -q "#define STARPU_USE_CUDA 1" src/common/config.h include/starpu_config.h 2>/dev/null ||
        die "configure did not enable CUDA (see $build/configure.log)"
else
    "$src/configure" "${common[@]}" --disable-cuda >configure.log 2>&1 ||
        { tail -30 configure.log; die "configure failed (see $build/configure.log)"; }
fi
grep -q "#define STARPU_MAXCPUS $maxcpus\$" include/starpu_config.h ||
    die "configure did not set STARPU_MAXCPUS $maxcpus (see $build/configure.log)"
make -j"$jobs" >make.log 2>&1 || { tail -30 make.log; die "make failed (see $build/make.log)"; }
rm -rf "$prefix"
make install >install.log 2>&1 || { tail -30 install.log; die "make install failed"; }
echo "$want" >"$stamp"
echo "build-starpu: installed in $prefix ($(du -sh "$prefix" | cut -f1); up to $maxcpus CPU workers)"
echo "  cmake -S . -B build -DMG_STARPU_PREFIX=$prefix"
