#!/usr/bin/env bash
# Packs what tools/gpu-check.sh needs on a bare GPU machine (nvcc 13 and the CUDA
# libraries, no Debian packages) into one ignored folder:
#
#   bash tools/gpu-bundle.sh            -> build-gpu-bundle/mgraph-gpu.tar.gz (+ the staging dir)
#
# Builds StarPU with CUDA (tools/build-starpu-cuda.sh) and mgraph with -DMG_CUDA=ON
# against it (build-gpu/, Release), then gathers the binaries, every shared library
# they load beyond glibc and CUDA (ldd closure: StarPU, OpenBLAS, hwloc, Open MPI,
# jansson, PCRE2, SentencePiece, libgfortran, libstdc++...), Open MPI's plugins, help
# files, mpirun and orted. It then checks the bundle here: with LD_LIBRARY_PATH only
# into it (plus CUDA's lib64), ldd must resolve every library inside it, glibc or CUDA,
# and mgraph-run must train two CPU iterations from it. The tarball is what travels
# (device's carry); gpu-check.sh unpacks it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
out="$repo/build-gpu-bundle"
stage="$out/mgraph-gpu"
cuda="${CUDA_HOME:-/usr/local/cuda}"
jobs="${JOBS:-$(nproc)}"
die() { echo "gpu-bundle: $*" >&2; exit 1; }

prefix="$repo/build-starpu-cuda/prefix"
bash tools/build-starpu-cuda.sh "$prefix"
cmake -S . -B build-gpu -DMG_CUDA=ON -DMG_STARPU_PREFIX="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j"$jobs" --target mgraph-run test_cuda_ops test_cuda_nccl test_ops_gemm_bf16 bench_gemm_bf16
grep -q "STARPU_USE_CUDA 1" "$prefix/include/starpu/1.3/starpu_config.h" || die "StarPU in $prefix has no CUDA"

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/openmpi" "$stage/share"
for b in mgraph-run test_cuda_ops test_cuda_nccl test_ops_gemm_bf16 bench_gemm_bf16; do cp "build-gpu/bin/$b" "$stage/bin/"; done
cp -L "$(command -v orted)" "$stage/bin/orted"
cp -L "$(command -v orterun)" "$stage/bin/mpirun"
strip --strip-debug "$stage"/bin/*
plugins="$(dirname "$(find /usr/lib -name 'mca_pml_ob1.so' -path '*openmpi*' | head -1)")"
[ -d "$plugins" ] || die "Open MPI plugin directory not found"
cp -a "$plugins" "$stage/openmpi/plugins"
cp -a /usr/share/openmpi "$stage/share/openmpi"
"$stage/bin/test_cuda_ops" list >"$stage/cuda-ops.txt"

# Libraries: the ldd closure of the binaries and plugins, minus glibc and CUDA (the GPU
# machine has its own). Plugins whose libraries are missing here (UCX, OFI...) are
# dropped: Open MPI skips a component it cannot load, and gpu-check.sh selects the
# shared-memory transports anyway.
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libutil\.so|libcuda\.so|libcudart|libcublas|libcublasLt|libcusparse|libnccl|libnvidia|libnvJitLink|libnvrtc)'
gather() { # file -> copies its non-system libraries into lib/
    ldd "$1" 2>/dev/null | awk '/=>/ {print $1, $3}' | while read -r name path; do
        [[ "$name" =~ $skip_re ]] && continue
        [ "$path" = "not" ] && { echo "MISSING $name ($1)"; continue; }
        [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
    done
}
for f in "$stage"/bin/*; do gather "$f"; done
for f in "$stage"/openmpi/plugins/*.so; do
    if ldd "$f" 2>/dev/null | grep -q "not found"; then rm -f "$f"; else gather "$f"; fi
done | grep MISSING && die "libraries missing here (see above)"
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true

# The environment gpu-check.sh uses, written once here.
cat >"$stage/env.sh" <<'ENV'
# Sourced by tools/gpu-check.sh: run everything from this bundle.
b="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$b/bin:$PATH"
export LD_LIBRARY_PATH="$b/lib${MG_CUDA_LIBS:+:$MG_CUDA_LIBS}"
export OPAL_PREFIX="$b" OMPI_MCA_mca_base_component_path="$b/openmpi/plugins"
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=^ucx,rdma OMPI_MCA_mtl=^ofi,psm,psm2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export STARPU_SILENT=1 STARPU_HOME="${STARPU_HOME:-/tmp/mgraph-starpu-home}"
# PMIx's own plugins: the machine may have another PMIx's in the path compiled into ours
export PMIX_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
ENV

# ---- check it here ------------------------------------------------------------------
export MG_CUDA_LIBS="$cuda/lib64"
(
    set +u
    # shellcheck disable=SC1091
    . "$stage/env.sh"
    bad=0
    for f in "$stage"/bin/* "$stage"/lib/*.so*; do
        while read -r name path; do
            case "$path" in
            "$stage"/* | "$cuda"/* | /usr/local/cuda*) ;;
            *) [[ "$name" =~ $skip_re ]] || { echo "gpu-bundle: $f loads $name from $path"; bad=1; } ;;
            esac
        done < <(ldd "$f" 2>/dev/null | awk '/=>/ {print $1, $3}')
    done
    [ "$bad" = 0 ] || exit 1
    echo "gpu-bundle: ldd resolves every library inside the bundle, glibc or $cuda"
    work="$(mktemp -d)"
    cat "$repo"/README.md "$repo"/ops/*.c >"$work/corpus.txt"
    STARPU_NCUDA=0 STARPU_HOME="$work/starpu" mgraph-run --num-layers 1 --hidden-size 32 --num-attention-heads 2 \
        --seq-length 16 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 2 --log-interval 1 \
        --eval-interval 0 --text-file "$work/corpus.txt" >"$work/run.log" 2>&1 ||
        { cat "$work/run.log"; exit 1; }
    grep -q "iteration        2/" "$work/run.log" || { cat "$work/run.log"; exit 1; }
    echo "gpu-bundle: mgraph-run trains from the bundle (2 CPU iterations)"
    rm -rf "$work"
) || die "the bundle is not self-contained (see above)"

tar -C "$out" -czf "$out/mgraph-gpu.tar.gz" mgraph-gpu
echo "gpu-bundle: $(du -sh "$stage" | cut -f1) staged, $(du -h "$out/mgraph-gpu.tar.gz" | cut -f1) as $out/mgraph-gpu.tar.gz"
size=$(stat -c %s "$out/mgraph-gpu.tar.gz")
[ "$size" -lt $((50 << 20)) ] || die "the tarball is over 50 MiB"
