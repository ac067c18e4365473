#!/usr/bin/env bash
# The main job: build the generator, generate the kernels, run the demo. It also builds what
# `cmake --install build/release --prefix <prefix>` installs (attngen_package: the library and
# its kernels, the generator, the command-line tool), so that the README's install step follows.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset release
cmake --build --preset release --target attngen_demo attngen_package
./build/release/examples/attngen_demo
