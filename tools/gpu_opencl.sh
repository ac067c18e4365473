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
# PoCL compiles each kernel once into its cache: keep that in the build tree. Compiling them is
# most of a first run, one kernel at a time in a process, so the kernels are dealt out to one
# process per core, each running every case of its kernels (a kernel's cases in two processes
# would compile it twice; bench/RESULTS.md, "CI's time back to 35 minutes").
export POCL_CACHE_DIR="$PWD/$build/pocl-cache"
shards="${ATTNGEN_OPENCL_SHARDS:-$(nproc)}"
# Each case's kernel is its parameter, the name's part after the last '/' (a pattern per kernel;
# a case without one is a pattern of its own).
mapfile -t kernels < <("$build/tests/attngen_tests" --gtest_filter='*_cuda*' --gtest_list_tests |
  awk '/^[^ ]/ { suite = $1 } /^  / { n = $1; if (sub(/.*\//, "*/", n)) print n; else print suite n }' |
  sort -u)
if [ ${#kernels[@]} -eq 0 ]; then
  echo "FAIL: no GPU kernel cases in $build/tests/attngen_tests" >&2
  exit 1
fi
rm -f "$build"/opencl-tests.*.log
pids=()
for ((i = 0; i < shards; i++)); do
  filter=""
  for ((k = i; k < ${#kernels[@]}; k += shards)); do filter+="${filter:+:}${kernels[$k]}"; done
  [ -n "$filter" ] || continue
  "$build/tests/attngen_tests" --gtest_filter="$filter" --gtest_brief=1 \
    > "$build/opencl-tests.$i.log" 2>&1 &
  pids+=($!)
done
status=0
for ((i = 0; i < ${#pids[@]}; i++)); do
  wait "${pids[$i]}" || status=1
  tail -n 4 "$build/opencl-tests.$i.log"
done
cat "$build"/opencl-tests.*.log > "$build/opencl-tests.log"
if grep -q 'which this machine lacks' "$build/opencl-tests.log"; then
  echo "FAIL: no OpenCL device for the GPU kernels (PoCL: pocl-opencl-icd, tools/setup.sh)" >&2
  exit 1
fi
if [ "$status" != 0 ]; then
  grep -a -B2 -A12 'Failure' "$build/opencl-tests.log" | head -n 200 >&2
  echo "FAIL: GPU kernels on OpenCL (log: $build/opencl-tests.log)" >&2
  exit 1
fi
