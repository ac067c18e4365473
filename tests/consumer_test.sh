#!/usr/bin/env bash
# Installs attngen from this build tree into a scratch prefix, then builds and runs
# examples/consumer against it, as an out-of-tree project would.
set -euo pipefail
build="$1"; source="$2"; work="$build/consumer_test"
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work.install.log" 2>&1 ||
  { cat "$work.install.log"; exit 1; }
cmake -S "$source/examples/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix"
cmake --build "$work/build"
"$work/build/consumer"
