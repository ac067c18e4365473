#!/usr/bin/env bash
# The GPU schedules checked without a GPU: the cuda row's kernels generated through Halide's
# OpenCL backend instead of PTX (preset gpu-opencl: ATTNGEN_GPU_API=opencl, f32 kernels only),
# then the main suite's cases of those kernels run on PoCL's CPU device, against the same float64
# reference. It catches what the schedule and Halide's GPU lowering get wrong (shared memory
# packing, barriers, the copies between host and device) on every CI run; PTX itself is checked by
# ptxas (tests/cuda) and on a real GPU by bench/gpu/run.sh. Needs the ci build's generator.
#   bash tools/gpu_opencl.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset gpu-opencl
cmake --build --preset gpu-opencl --target attngen_tests
build=build/gpu-opencl
# PoCL compiles each kernel once into its cache: keep that in the build tree.
export POCL_CACHE_DIR="$PWD/$build/pocl-cache"
status=0
"$build/tests/attngen_tests" --gtest_filter='*_cuda*' --gtest_brief=1 > "$build/opencl-tests.log" 2>&1 ||
  status=$?
tail -n 4 "$build/opencl-tests.log"
if grep -q 'which this machine lacks' "$build/opencl-tests.log"; then
  echo "FAIL: no OpenCL device for the GPU kernels (PoCL: pocl-opencl-icd, tools/setup.sh)" >&2
  exit 1
fi
if [ "$status" != 0 ]; then
  grep -a -B2 -A12 'Failure' "$build/opencl-tests.log" | head -n 200 >&2
  echo "FAIL: GPU kernels on OpenCL (log: $build/opencl-tests.log)" >&2
  exit 1
fi
