#!/usr/bin/env bash
# The engine's CUDA backend on a real GPU, in one run (issue 57, item 4).
# Run it first whenever a GPU machine is lent; until it has passed there,
# docs/src/cuda.md says the backend is unverified.
#
#   bash bench/gpu/check.sh            # from the repository root
#
# What it checks: the cuda feature builds; every CUDA kernel compiles
# with NVRTC for this GPU's architecture; every dtype goes to the GPU and
# back unchanged; a device tensor is refused where the host reads it; the
# caching allocator hands freed buffers out again. A test that skips on a
# machine with a GPU fails this script: it means the driver, the GPU or
# libnvrtc was not found. The GPU kernels, training on the GPU, the
# two-device validate run and the cuBLAS / PyTorch timings join as the
# backend gains them.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || { echo "check.sh: no nvidia-smi: not a GPU machine" >&2; exit 2; }
# libnvrtc from the toolkit, where the image has one
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
log=$(mktemp)
cargo test --release -p flowlab-engine --features cuda --test cuda_backend --test cuda_kernels_compile_to_ptx 2>&1 | tee "$log"
# Two tests check the machines without CUDA and skip by design here.
if grep '^SKIPPED' "$log" | grep -v -e 'libnvrtc is present' -e 'this build has the `cuda` feature' | grep -q .; then
    echo "check.sh: tests skipped on a GPU machine (see SKIPPED lines above): FAILED" >&2
    exit 1
fi
echo "check.sh: the CUDA backend's checks passed on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
