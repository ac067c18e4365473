#!/usr/bin/env bash
# attngen against its CPU peers, in one run, on shape files of real models:
#   attngen_attention() (automatic kernel choice) and the MHA layer (a persistent
#   attngen_mha_layer), the composed OpenBLAS attention (sgemm, softmax, sgemm), OpenBLAS sgemm 2048³ (on the OpenBLAS core this CPU
#   deserves: attngen_bench sets OPENBLAS_CORETYPE where OpenBLAS picks a lesser one) and the FMA
#   peak (the arithmetic's limit), all from attngen_bench; PyTorch SDPA and nn.MultiheadAttention; ONNX Runtime's MultiHeadAttention;
#   ggml's flash attention with f16 K/V (bench/peers/ggml_build.sh builds it).
# Prints a Markdown ratio table (bench/report.py) and writes bench/out/{attngen_<round>.json,
# peers_<round>.jsonl, table.md, gflops.png}. The shape files are read, and FLOPs counted, by
# attngen_bench alone: the Python peers and the report ask it (--describe_shapes).
#
#   bash bench/run_peers.sh [--threads N] [--build DIR] [--min-time SECONDS] [--rounds N]
#                           [shape files...]
#
#   --threads N    threads for attngen, OpenBLAS and every peer (default: one per core)
#   --build DIR    use DIR/bench/attngen_bench as built there (default: configure and build
#                  build/release with the release preset)
#   --min-time S   seconds of timing per benchmark (default 0.5); attngen_bench repeats each
#                  3 times and the peers at least 3 calls: every number is a median
#   --rounds N     times to run attngen and then the peers (default 3): the machine's speed
#                  drifts from minute to minute, so each ratio is taken within a round and the
#                  table shows the median over the rounds, with the range (bench/report.py)
#   shape files    default: bench/shapes/*.txt
#
# The Python peers (torch, onnxruntime, onnx, matplotlib, numpy) are installed with pip when
# missing, by this script only; ggml's source is fetched from PyPI by bench/peers/ggml_build.sh
# (called here and by the paired scripts that take ggml).
set -euo pipefail
threads=$(nproc)
build=""
min_time=0.5
rounds=3
shapes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --build) build="$(realpath "$2")"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    -*) echo "run_peers.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) shapes+=("$(realpath "$1")"); shift ;;
  esac
done
cd "$(dirname "$0")/.."
[ ${#shapes[@]} -gt 0 ] || shapes=("$PWD"/bench/shapes/*.txt)
python="${PYTHON:-python3}"
out=bench/out
mkdir -p "$out"
start=$SECONDS

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $threads threads"
echo "== load average $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews every number)"

echo "== peers: installing what is missing"
if ! "$python" -c 'import torch' 2> /dev/null; then
  # The CPU-only wheel is the small one; where its index cannot be reached, PyPI's torch (larger,
  # with CUDA libraries it does not use here) computes the same on the CPU.
  "$python" -m pip install torch --index-url https://download.pytorch.org/whl/cpu \
    || "$python" -m pip install torch \
    || echo "run_peers.sh: torch could not be installed; its rows will say so" >&2
fi
missing=()
for module in onnxruntime onnx matplotlib numpy; do
  "$python" -c "import $module" 2> /dev/null || missing+=("$module")
done
if [ ${#missing[@]} -gt 0 ]; then
  "$python" -m pip install "${missing[@]}" \
    || echo "run_peers.sh: could not install ${missing[*]}; those rows will say so" >&2
fi

# ggml (llama.cpp's attention) is built from its source on PyPI, once (bench/out/ggml).
ggml="$PWD/bench/out/ggml/ggml_attention"
bash bench/peers/ggml_build.sh \
  || echo "run_peers.sh: the ggml peer could not be built; its column will be empty" >&2

if [ -z "$build" ]; then
  echo "== building attngen_bench (build/release)"
  bash tools/setup.sh
  cmake --preset release
  cmake --build --preset release --target attngen_bench
  build="$PWD/build/release"
fi
bench="$build/bench/attngen_bench"
if [ ! -x "$bench" ]; then
  echo "run_peers.sh: no $bench (build the attngen_bench target there)" >&2
  exit 1
fi

shape_list=$(IFS=,; echo "${shapes[*]}")
report_args=()
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds: attngen and OpenBLAS"
  "$bench" --shapes="$shape_list" --threads="$threads" \
    --benchmark_filter='^(attngen/|attngen_mha(_layer)?/|openblas_composed/|openblas_sgemm/|ceiling/fma_peak/)' \
    --benchmark_min_time="$min_time" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_counters_tabular=true \
    --benchmark_out="$out/attngen_$round.json" --benchmark_out_format=json

  echo "== round $round of $rounds: peers"
  : > "$out/peers_$round.jsonl"
  for peer in torch_sdpa ort_mha; do
    "$python" "bench/peers/$peer.py" --threads "$threads" --min-time "$min_time" --build "$build" \
      "${shapes[@]}" \
      | tee -a "$out/peers_$round.jsonl" || echo "run_peers.sh: $peer failed (rows missing)" >&2
  done
  "$python" bench/peers/torch_mha.py --threads "$threads" --min-time "$min_time" --build "$build" \
    | tee -a "$out/peers_$round.jsonl" || echo "run_peers.sh: torch_mha failed (row missing)" >&2
  if [ -x "$ggml" ]; then
    "$ggml" --threads "$threads" --min-time "$min_time" "${shapes[@]}" \
      | tee -a "$out/peers_$round.jsonl" || echo "run_peers.sh: ggml failed (rows missing)" >&2
  fi
  report_args+=(--bench "$out/attngen_$round.json" --peers "$out/peers_$round.jsonl")
done

echo "== table (bench/out/table.md, bench/out/gflops.png)"
"$python" bench/report.py "${report_args[@]}" --out-dir "$out" --build "$build" "${shapes[@]}"
echo "== took $((SECONDS - start)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
