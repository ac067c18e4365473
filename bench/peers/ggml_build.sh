#!/usr/bin/env bash
# Builds the ggml peer (bench/peers/ggml_attention.cpp) into bench/out/ggml/ggml_attention:
# ggml's CPU backend, as llama.cpp vendors it, from the source distribution of llama-cpp-python
# on PyPI (pinned below; PyPI is the one network source the benchmarks use), built static and
# native (-march=native: what a llama.cpp built on this machine runs). Nothing of it enters the
# repository or the tests; a second run reuses what the first built.
#
#   bash bench/peers/ggml_build.sh [OUT_DIR]     (default bench/out/ggml)
set -euo pipefail
version=0.3.36  # llama-cpp-python; its vendor/llama.cpp/ggml is ggml 0.25.3
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/bench/out/ggml}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python="${PYTHON:-python3}"
exe="$out/ggml_attention"
# Its sources: the peer and attngen_bench's shape-file reader and FLOP counts, which it shares.
sources=("$root/bench/peers/ggml_attention.cpp" "$root/bench/shapes.cpp")
up_to_date=1
for f in "${sources[@]}" "$root/bench/shapes.h" "$root/bench/flops.h"; do
  [ -x "$exe" ] && [ "$exe" -nt "$f" ] || up_to_date=0
done
if [ "$up_to_date" = 1 ]; then
  echo "ggml_build.sh: $exe is up to date"
  exit 0
fi
for tool in cmake ninja g++; do
  command -v "$tool" > /dev/null || { echo "ggml_build.sh: needs $tool (bash tools/setup.sh)" >&2; exit 1; }
done
archive="$out/llama_cpp_python-$version.tar.gz"
if [ ! -f "$archive" ]; then
  "$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$out"
fi
src="$out/llama_cpp_python-$version/vendor/llama.cpp/ggml"
if [ ! -d "$src" ]; then
  tar -xzf "$archive" -C "$out" "llama_cpp_python-$version/vendor/llama.cpp/ggml"
fi
# The source distribution leaves out the pkg-config template ggml's CMakeLists configures.
[ -f "$src/ggml.pc.in" ] || : > "$src/ggml.pc.in"
cmake -S "$src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON -DGGML_CCACHE=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF > "$out/cmake.log"
cmake --build "$out/build" > "$out/build.log"
libs=("$out/build/src/libggml.a" "$out/build/src/libggml-cpu.a" "$out/build/src/libggml-base.a")
g++ -O2 -std=c++17 -I"$src/include" -I"$root" "${sources[@]}" "${libs[@]}" \
  -fopenmp -lpthread -o "$exe"
echo "ggml_build.sh: built $exe (ggml of llama-cpp-python $version)"
