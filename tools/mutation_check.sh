#!/usr/bin/env bash
# Shows that the test suite can fail: breaks the algorithm in known ways (scale inverted, no
# max subtraction, causal mask off by one, wrong kv head for GQA, the online merge's weights
# swapped, causal block skipping one block too eager, the strided band one too wide), rebuilds
# the tests in a scratch worktree, and reports how many tests fail for each. Every line must
# say "caught".
#   bash tools/mutation_check.sh      (a few minutes: one build per mutation)
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)/mut"
git -C "$repo" worktree add -q --detach "$work" HEAD
trap 'git -C "$repo" worktree remove --force "$work"' EXIT
cd "$work"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNGEN_BUILD_BENCH=OFF \
  -DATTNGEN_BUILD_EXAMPLES=OFF -DATTNGEN_BUILD_TOOLS=OFF -DATTNGEN_CUDA=OFF \
  -DATTNGEN_KERNEL_ISAS=host > /dev/null
algo=generator/attention_algorithm.cpp
mutate() {
  local name="$1" from="$2" to="$3"
  git checkout -q -- "$algo"
  FROM="$from" TO="$to" python3 - "$algo" <<'PY'
import os, sys
p = sys.argv[1]; s = open(p).read()
assert os.environ["FROM"] in s, "mutation target not found"
open(p, "w").write(s.replace(os.environ["FROM"], os.environ["TO"]))
PY
  if ! ninja -C build attngen_tests > "build/$name.log" 2>&1; then echo "$name: build failed"; return; fi
  failed=$(./build/tests/attngen_tests --gtest_brief=1 2>&1 | grep -c '^\[  FAILED  \]')
  if [ "$failed" -gt 0 ]; then echo "$name: caught ($failed failing tests)"; else echo "$name: NOT CAUGHT"; fi
}
mutate flip_scale 'f.dot(j, i, h, b) * in.scale' 'f.dot(j, i, h, b) / in.scale'
mutate no_max_subtraction 'Expr m_safe = select(is_masked(m), 0.0f, m);' 'Expr m_safe = 0.0f;'
mutate causal_off_by_one 'attend = attend && j <= offset + i;' 'attend = attend && j <= offset + i + 1;'
mutate gqa_wrong_head 'Expr hk = h / group;' 'Expr hk = h % in.heads_kv;'
mutate online_merge_swapped 'Expr old_wins = m >= bmax;' 'Expr old_wins = m < bmax;'
mutate causal_block_skip_too_eager 'visit = visit && first_key <= last_position;' 'visit = visit && first_key + 64 <= last_position;'
mutate strided_band_off_by_one 'return abs(p - j) < ps.stride ||' 'return abs(p - j) <= ps.stride ||'
git checkout -q -- "$algo"
