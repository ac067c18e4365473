# Cross-compiles attngen for 64-bit ARM Linux (NEON) on an x86-64 Debian host, and runs the
# results under qemu-user:
#   cmake --preset aarch64       (see CMakePresets.json; needs a host build's generator)
# Packages: g++-aarch64-linux-gnu, qemu-user-static (tools/setup.sh installs them).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Libraries and headers come from the aarch64 sysroot only, so nothing built for x86 is linked
# by mistake. Packages may also come from the host: Halide's CMake package (x86, in
# /usr/lib/x86_64-linux-gnu/cmake) provides add_halide_library() and the header-only
# Halide::Runtime, which is all a cross build uses of it.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# The target's library architecture (aarch64-linux-gnu) hides lib/x86_64-linux-gnu/cmake from
# the default search, so name the host's Halide packages; -D on the command line overrides.
foreach (pkg Halide HalideHelpers)
  if (NOT DEFINED ${pkg}_DIR AND EXISTS /usr/lib/x86_64-linux-gnu/cmake/${pkg}14)
    set(${pkg}_DIR /usr/lib/x86_64-linux-gnu/cmake/${pkg}14 CACHE PATH "Halide 14 (host package)")
  endif ()
endforeach ()

# Test executables (ctest, gtest_discover_tests) run through qemu; -L points it at the
# aarch64 dynamic loader and libraries. -cpu max: a CPU model with every feature qemu emulates,
# ARMv8.2-A FP16 (HWCAP_ASIMDHP) included, so the neonfp16 kernels run too. (qemu 7.2's
# default for qemu-aarch64 is the same model, but named CPUs such as cortex-a57 lack FP16; a
# test of the fallback to neon runs under one of those, tests/CMakeLists.txt.)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static;-cpu;max;-L;/usr/aarch64-linux-gnu)
