#!/usr/bin/env bash
# The main job: build the generator, generate the kernels, run the demo. The demo comes first, on
# the kernels of this machine's best ISA only (preset quick, build/quick: minutes); then the
# whole package, every ISA's kernels (`cmake --install build/release --prefix <prefix>` installs
# it for other projects: attngen_package, the library and its kernels, the generator, the
# command-line tool), so that the README's install step follows.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset quick
cmake --build --preset quick --target attngen_demo
./build/quick/examples/attngen_demo
echo "== demo done; building the package (every ISA's kernels: build/release)"
cmake --preset release
cmake --build --preset release --target attngen_package
