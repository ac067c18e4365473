#!/usr/bin/env bash
# The test job: the layering check; build everything (with the sanitizer suite) and run every
# test, including the assembly checks and the out-of-tree consumer of the installed package; then
# the GPU kernels' schedules on OpenCL (PoCL's CPU device: tools/gpu_opencl.sh); then the aarch64
# cross build (NEON kernels, made by the ci build's generator) and its tests under qemu; the same
# for 32-bit ARM (ARMv7-A with NEON, armhf: the armv7 preset) under qemu-arm; then the
# single-threaded embedded build (aarch64, a few kernels) and its tests under qemu; then the C
# API fuzzer for a bounded time (tools/fuzz.sh: its own clang build, kernels from the ci
# generator). Each stage's time is printed as it ends, and all of them at the end.
#   tools/test.sh           everything (what CI runs)
#   tools/test.sh --quick   the edit loop: the x86 suite on the kernels of this machine's best
#                           ISA only (preset quick: no CUDA, no sanitizer build, no benchmarks)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  *)
    echo "usage: tools/test.sh [--quick]" >&2
    exit 2
    ;;
esac

stages=()
summary() {
  [ ${#stages[@]} -gt 0 ] || return 0
  echo "== stage times"
  printf '  %s\n' "${stages[@]}"
}
trap summary EXIT
# CPU seconds (user + system) of this shell's finished children, from /proc (fields 16 and 17 of
# stat, in clock ticks), to show how busy a stage kept the cores.
children_cpu() {
  local st
  read -r -a st < /proc/$$/stat
  echo $(((st[15] + st[16]) / $(getconf CLK_TCK)))
}
# stage NAME COMMAND...: runs the command, then prints and records its time and CPU time.
stage() {
  local name=$1 start=$SECONDS cpu_start
  cpu_start=$(children_cpu)
  shift
  echo "== $name"
  "$@"
  local took=$((SECONDS - start)) cpu=$(($(children_cpu) - cpu_start))
  echo "== $name: ${took} s (CPU ${cpu} s)"
  stages+=("$(printf '%-22s %5d s  CPU %5d s' "$name" "$took" "$cpu")")
}

stage setup bash tools/setup.sh
stage layers bash tools/check_layers.sh
if [ $quick -eq 1 ]; then
  stage "quick configure" cmake --preset quick
  stage "quick build" cmake --build --preset quick
  stage "quick tests" ctest --preset quick
  exit 0
fi
stage "x86 configure" cmake --preset ci
stage "x86 build" cmake --build --preset ci
stage "x86 tests" ctest --preset ci
stage "gpu (opencl)" bash tools/gpu_opencl.sh
stage "aarch64 configure" cmake --preset aarch64
stage "aarch64 build" cmake --build --preset aarch64
stage "aarch64 tests" ctest --preset aarch64
stage "armv7 configure" cmake --preset armv7
stage "armv7 build" cmake --build --preset armv7
stage "armv7 tests" ctest --preset armv7
stage "embedded configure" cmake --preset embedded
stage "embedded build" cmake --build --preset embedded
stage "embedded tests" ctest --preset embedded
stage fuzz bash tools/fuzz.sh "${ATTNGEN_CI_FUZZ_SECONDS:-150}"
