#!/usr/bin/env bash
# Builds what bench/gpu/run.sh runs — the suite (CUDA kernels, and AVX2 ones for its dispatch
# cases) and the CUDA timer — in build/gpu, and strips them into a folder laid out as run.sh
# expects (about 17 MB, git-ignored). run.sh calls it where the folder lacks them; for a lent GPU
# machine with neither Halide nor a network (the device tool's), run it here and carry the folder:
#   bash bench/gpu/pack.sh [dir]        (default .gpu)
#   on the GPU machine: bash bench/gpu/run.sh [dir]
# For an old-against-new timing in one lease, pack the old build's timer aside first (e.g.
# cp .gpu/bench/gpu/attngen_cuda_bench .gpu/old/) and run both, alternating (bench/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${1:-.gpu}"
bash tools/setup.sh
cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNGEN_CUDA=ON \
  -DATTNGEN_SANITIZE_TESTS=OFF "-DATTNGEN_KERNEL_ISAS=avx2;cuda" -DATTNGEN_BUILD_EXAMPLES=OFF \
  -DATTNGEN_BUILD_TOOLS=OFF
cmake --build build/gpu --target attngen_tests attngen_cuda_bench
mkdir -p "$dir/tests" "$dir/bench/gpu"
strip -o "$dir/tests/attngen_tests" build/gpu/tests/attngen_tests
strip -o "$dir/bench/gpu/attngen_cuda_bench" build/gpu/bench/gpu/attngen_cuda_bench
du -sh "$dir"
