#!/usr/bin/env bash
# The main job: build the generator, generate the kernels, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset release
cmake --build --preset release --target attngen_demo
./build/release/examples/attngen_demo
