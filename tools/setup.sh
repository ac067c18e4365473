#!/usr/bin/env bash
# Installs the Debian 12 packages attngen needs, only those missing. Safe to run repeatedly.
# --bench adds those only bench/ scripts use (never the build or the tests).
set -euo pipefail
packages=(cmake ninja-build g++ libhalide14-0-dev libgtest-dev libbenchmark-dev libopenblas-dev
          clang-format libpng-dev nlohmann-json3-dev
          g++-aarch64-linux-gnu qemu-user-static  # the aarch64 cross build and its tests
          g++-arm-linux-gnueabihf  # the 32-bit ARM (armv7) cross build, tested under qemu-arm
          clang libclang-rt-14-dev  # the fuzzer (libFuzzer, tools/fuzz.sh)
          pocl-opencl-icd ocl-icd-opencl-dev  # the GPU schedules checked on a CPU (gpu-opencl)
          ccache)  # one compile of the sources the build trees share (ATTNGEN_CCACHE)
if [ "${1:-}" = "--bench" ]; then
  # llvm-mca for bench/arm_loops.py --mca: Debian 12's newest LLVM, whose Neoverse-V1 and
  # Neoverse-N1 models have the FMA rates of Arm's optimization guides (LLVM 14's have not).
  packages+=(llvm-19)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
