#!/usr/bin/env bash
# The test job: build everything (with the sanitizer suite) and run every test, including the
# assembly checks and the out-of-tree consumer of the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci
