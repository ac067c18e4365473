#!/usr/bin/env bash
# The layers' include rules (README, "Layout"), checked on the files git knows:
#  - core/ (the Halide-free vocabulary) includes nothing of the project but core/ and the public
#    element types (attngen/dtype.h);
#  - runtime/ includes core/, its own files and the public headers: never generator/ or
#    schedules/;
#  - the algorithm (generator/ but its glue: the *_generator.cpp files, which hand the algorithm
#    to a schedule, plan.{h,cpp} and the driver main.cpp) never includes schedules/.
# Prints each violation and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
# violations FILES... : the project includes of the files matching the forbidden pattern in $bad.
violations() {
  [ $# -gt 0 ] || return 0
  grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$@" |
    grep -E "\"($bad)" || true
}
report() {
  local rule=$1 out=$2
  if [ -n "$out" ]; then
    echo "check_layers: $rule:"
    echo "$out" | sed 's/^/  /'
    status=1
  fi
}
mapfile -t core < <(git ls-files 'core/*')
bad='generator/|schedules/|runtime/|tests/|tools/|bench/|examples/|Halide|attngen/(attngen|kernel)'
report "core/ includes only core/ and attngen/dtype.h" "$(violations "${core[@]}")"
mapfile -t runtime < <(git ls-files 'runtime/*.c' 'runtime/*.cpp' 'runtime/*.h')
bad='generator/|schedules/|Halide\.h'
report "runtime/ includes only core/, runtime/ and attngen/" "$(violations "${runtime[@]}")"
mapfile -t algorithm < <(git ls-files 'generator/*.cpp' 'generator/*.h' |
  grep -vE '^generator/([a-z_]+_generator\.cpp|plan\.(h|cpp)|main\.cpp)$')
bad='schedules/'
report "the algorithm (generator/ but its glue) never includes schedules/" \
  "$(violations "${algorithm[@]}")"
[ $status -eq 0 ] && echo "check_layers: core/, runtime/ and the algorithm keep to their layers"
exit $status
