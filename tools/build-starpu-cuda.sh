#!/usr/bin/env bash
# StarPU with CUDA workers: tools/build-starpu.sh --cuda [PREFIX] (kept for the GPU scripts).
exec bash "$(dirname "$0")/build-starpu.sh" --cuda "$@"
