#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one run: build (or reuse a build tree), run the CUDA
# kernels' correctness tests (failing if they are skipped for want of a GPU), time them with
# device-resident tensors (D64 dense and causal, in f32, f16 and bf16), time PyTorch's
# scaled_dot_product_attention (same dtypes and shapes) and print a ratio table per dtype.
#   bash bench/gpu/run.sh [dir]      (default .gpu: what bench/gpu/pack.sh leaves there)
# Where the folder lacks the binaries, pack.sh builds them first; where the GPU machine cannot
# build (no Halide, no network: the device tool's), run pack.sh elsewhere and carry the folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-.gpu}"
if [ ! -x "$build/bench/gpu/attngen_cuda_bench" ] || [ ! -x "$build/tests/attngen_tests" ]; then
  bash bench/gpu/pack.sh "$build"
fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
out="$build/gpu-results"
mkdir -p "$out"

echo "== CUDA correctness (the main suite's cases, CUDA kernels only)"
# Failing tests do not stop the timings (a first run on a lent GPU should bring back both); the
# script's status says whether they passed.
tests_ok=1
"$build/tests/attngen_tests" --gtest_filter='*_cuda*:AttentionDispatch.*' --gtest_brief=1 \
  | tee "$out/tests.log" || tests_ok=0
# (Some cases skip for reasons of their own, e.g. a kernel without the feature they test.)
if grep -q 'needs cuda, which this machine lacks' "$out/tests.log"; then
  echo "FAIL: CUDA tests were skipped: no usable CUDA device" >&2
  exit 1
fi

echo "== timing attngen (CUDA)"
bench_ok=1
"$build/bench/gpu/attngen_cuda_bench" | tee "$out/attngen.csv" || bench_ok=0
echo "== timing PyTorch SDPA"
if python3 -c 'import torch' 2> /dev/null; then
  python3 bench/gpu/sdpa_peer.py | tee "$out/torch.csv"
else
  echo "torch is not installed here (pip install torch); table without the peer" >&2
  echo "dtype,B,H,S,D,causal,ms" > "$out/torch.csv"
fi

echo "== ratio table (attngen time / torch time: below 1 is faster)"
awk -F, 'NR == FNR { if (FNR > 1) t[$1","$2","$3","$4","$5","$6] = $7; next }
         FNR == 1 { printf "%-36s %-5s %-16s %10s %10s %8s %8s\n", "kernel", "dtype", "B,H,S,D", "attngen ms", "torch ms", "GFLOP/s", "ratio"; next }
         { key = $2","$3","$4","$5","$6","$7; tm = (key in t) ? t[key] : "";
           printf "%-36s %-5s %-16s %10.3f %10s %8.1f %8s\n", $1, $2, $3","$4","$5","$6, $8,
                  (tm == "" ? "-" : tm), $9, (tm == "" ? "-" : sprintf("%.2f", $8 / tm)) }' \
  "$out/torch.csv" "$out/attngen.csv" | tee "$out/table.txt"
if [ "$tests_ok" != 1 ] || [ "$bench_ok" != 1 ]; then
  [ "$tests_ok" = 1 ] || echo "FAIL: CUDA correctness tests failed ($out/tests.log)" >&2
  [ "$bench_ok" = 1 ] || echo "FAIL: attngen_cuda_bench failed (its output above)" >&2
  exit 1
fi
