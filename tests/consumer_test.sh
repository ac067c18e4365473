#!/usr/bin/env bash
# Installs attngen from this build tree into a scratch prefix, then builds and runs, as
# out-of-tree projects would (both C++-only: project(... CXX)):
# - examples/consumer_prebuilt, which only links attngen::attngen, with Halide's CMake packages
#   made unfindable: the plain package needs no Halide;
# - examples/consumer, which generates kernels of its own (COMPONENTS generator), with libHalide
#   and LLVM made unfindable: the generator component needs only Halide's CMake helpers;
# - examples/custom_modifier, which builds a generator with a modifier of its own (COMPONENTS
#   modifiers: Halide's whole package) and calls its kernels with the modifier's parameters.
# (--no-warn-unused-cli: CMake would call the disabled packages unused, as nothing looks them up.)
set -euo pipefail
build="$1"; source="$2"; work="$build/consumer_test"
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
targets=$(find "$work/prefix" -name 'attngenTargets*.cmake')
[ -n "$targets" ] || { echo "consumer_test: no attngenTargets*.cmake installed"; exit 1; }
if grep -n "Halide::" $targets; then
  echo "consumer_test: the exported targets need Halide's package (above)"; exit 1
fi

echo "== link-only consumer (no Halide)"
cmake -S "$source/examples/consumer_prebuilt" -B "$work/prebuilt" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Halide=ON -DCMAKE_DISABLE_FIND_PACKAGE_HalideHelpers=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON --no-warn-unused-cli
cmake --build "$work/prebuilt"
"$work/prebuilt/consumer_prebuilt"

echo "== generating consumer (COMPONENTS generator)"
cmake -S "$source/examples/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_Halide=ON -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=ON --no-warn-unused-cli
cmake --build "$work/build"
"$work/build/consumer"

echo "== consumer with a modifier of its own (COMPONENTS modifiers)"
cmake -S "$source/examples/custom_modifier" -B "$work/custom" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix"
cmake --build "$work/custom"
"$work/custom/custom_modifier"
