#!/usr/bin/env bash
# The test job: build everything (with the sanitizer suite) and run every test, including the
# assembly checks and the out-of-tree consumer of the installed package; then the GPU kernels'
# schedules on OpenCL (PoCL's CPU device: tools/gpu_opencl.sh); then the aarch64 cross
# build (NEON kernels, made by the ci build's generator) and its tests under qemu; the same for
# 32-bit ARM (ARMv7-A with NEON, armhf: the armv7 preset) under qemu-arm; then the single-threaded
# embedded build (aarch64, a few kernels) and its tests under qemu; then the C API
# fuzzer for a bounded time (tools/fuzz.sh: its own clang build, kernels from the ci generator).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci
bash tools/gpu_opencl.sh
cmake --preset aarch64
cmake --build --preset aarch64
ctest --preset aarch64
cmake --preset armv7
cmake --build --preset armv7
ctest --preset armv7
cmake --preset embedded
cmake --build --preset embedded
ctest --preset embedded
bash tools/fuzz.sh "${ATTNGEN_CI_FUZZ_SECONDS:-150}"
