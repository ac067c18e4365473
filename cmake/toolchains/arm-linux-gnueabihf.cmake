# Cross-compiles attngen for 32-bit ARM Linux (ARMv7-A with NEON, hard-float ABI: Debian's armhf)
# on an x86-64 Debian host, and runs the results under qemu-user:
#   cmake --preset armv7         (see CMakePresets.json; needs a host build's generator)
# Packages: g++-arm-linux-gnueabihf, qemu-user-static (tools/setup.sh installs them).
# The kernels are the target table's neon32 row (core/targets.h): Halide's arm-32-linux,
# whose code is LLVM's cortex-a9 with NEON (VFPv3-D32, 16 q registers), the same instruction set
# as -march=armv7-a -mfpu=neon below, so host code and kernels agree on the FPU and the ABI.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7)

set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
# Debian's armhf compiler defaults to ARMv7-A, VFPv3-D16 and Thumb-2; NEON needs -mfpu=neon.
# -Wno-psabi: GCC notes on every std::vector<int64_t> iterator that GCC 7.1 changed how ARM
# passes such arguments, which matters only when linking code built by GCC 6 or older.
set(CMAKE_C_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard")
set(CMAKE_CXX_FLAGS_INIT "-march=armv7-a -mfpu=neon -mfloat-abi=hard -Wno-psabi")

# Libraries and headers come from the armhf sysroot only, so nothing built for x86 is linked by
# mistake. Packages may also come from the host: Halide's CMake package (x86, in
# /usr/lib/x86_64-linux-gnu/cmake) provides add_halide_library() and the header-only
# Halide::Runtime, which is all a cross build uses of it.
set(CMAKE_FIND_ROOT_PATH /usr/arm-linux-gnueabihf)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# The target's library architecture (arm-linux-gnueabihf) hides lib/x86_64-linux-gnu/cmake from
# the default search, so name the host's Halide packages; -D on the command line overrides.
foreach (pkg Halide HalideHelpers)
  if (NOT DEFINED ${pkg}_DIR AND EXISTS /usr/lib/x86_64-linux-gnu/cmake/${pkg}14)
    set(${pkg}_DIR /usr/lib/x86_64-linux-gnu/cmake/${pkg}14 CACHE PATH "Halide 14 (host package)")
  endif ()
endforeach ()

# Test executables (ctest, gtest_discover_tests) run through qemu; -L points it at the armhf
# dynamic loader and libraries. qemu-arm's default CPU model ("max") has NEON (HWCAP_NEON).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm-static;-L;/usr/arm-linux-gnueabihf)
