#!/usr/bin/env bash
# Registered only when the build has no CUDA backend (MG_CUDA=OFF): fails where a GPU is
# present, since then every CUDA kernel, cuBLAS GEMM and NCCL collective would go
# untested without a word; skips (77) where there is none.
#   build_enabled.sh "WHAT CONFIGURE FOUND"
if command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
    echo "FAIL: this host has a GPU ($(nvidia-smi -L | head -1)) but the build has no CUDA backend (MG_CUDA=OFF),"
    echo "      so none of the cuda.* tests exists. Configure found: $1"
    echo "      Install the missing CUDA libraries (NCCL: libnccl-dev) or configure with -DMG_CUDA=ON to see the error."
    exit 1
fi
echo "SKIP: no GPU on this host (the CUDA backend is off: $1)"
exit 77
