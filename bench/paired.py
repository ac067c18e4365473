#!/usr/bin/env python3
"""Paired measurement of the speed targets, against the machine's limits and PyTorch, for a
machine whose speed drifts.

    python3 bench/paired.py --build build/release [--pairs 12] [--threads 2] [--min-time 0.3]

bench/run_peers.sh times every shape of attngen, then every peer: a round's ratios compare
times taken up to a minute apart, and this machine's speed moves by +-25% within minutes. Here
each pair is two attngen_bench processes (the run's threads: the FMA peak, OpenBLAS sgemm 2048^3,
dense and causal B1 H16 S2048 D64, the MHA layer (persistent, and per call), decode over an L3-resident and a DRAM-sized
cache next to streaming reads of as many bytes; then one thread: the FMA peak and dense) and
PyTorch on the same problems in this process, seconds apart, the order alternating from pair to
pair; every ratio is taken within a pair, the ceilings within the same process as the kernel:

    dense / FMA peak (GFLOP/s)             target >= 0.80 (the widest FMA ISA, same threads)
    dense / FMA peak, one thread           target >= 0.75
    dense vs PyTorch SDPA                  target >= 1.1  (PyTorch ms / attngen ms)
    causal ms / dense ms                   target <= 0.55
    MHA layer vs PyTorch                   target >= 1.5  (nn.MultiheadAttention, eval, no_grad;
                                           attngen: a persistent attngen_mha_layer)
    attngen_mha() vs PyTorch               no target (the weights packed on every call)
    decode / stream read, L3 and DRAM      target >= 0.7  (GB/s of K and V)
    dense / sgemm (GFLOP/s)                no target: flagged where OpenBLAS ran a core below
                                           this CPU's (attngen_bench's openblas_core context)

Prints a Markdown table (median, quartiles and range over the pairs, how many pairs meet the
target) and writes bench/out/paired.json. Needs PyTorch (bench/run_peers.sh installs it).
"""
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle torch threads must not spin
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "bench", "shapes", "reference.txt")
# attngen_bench benchmark names (prefixes) -> keys here: the run's threads, then one thread.
ATTNGEN = {"openblas_sgemm/2048": "sgemm", "attngen/ref_dense/": "dense",
           "attngen/ref_causal/": "causal", "attngen_mha_layer/": "mha", "attngen_mha/": "mha_call",
           "decode/l3/": "decode_l3",
           "stream_read/l3/": "stream_l3", "decode/dram/": "decode_dram",
           "stream_read/dram/": "stream_dram"}
ONE_THREAD = {"attngen/ref_dense/": "dense_1t"}
TARGETS = [  # key, title, value of one pair, target, "ge", "le" or None (no target)
    ("dense_fma", "dense / FMA peak (GFLOP/s)", lambda p: p["dense_gflops"] / p["fma_gflops"],
     0.80, "ge"),
    ("dense_fma_1t", "dense / FMA peak, one thread",
     lambda p: p["dense_1t_gflops"] / p["fma_1t_gflops"], 0.75, "ge"),
    ("dense_torch", "dense vs PyTorch SDPA", lambda p: p["torch_dense"] / p["dense"], 1.1, "ge"),
    ("causal_dense", "causal ms / dense ms", lambda p: p["causal"] / p["dense"], 0.55, "le"),
    ("mha_torch", "MHA layer (persistent) vs PyTorch", lambda p: p["torch_mha"] / p["mha"], 1.5,
     "ge"),
    ("mha_call_torch", "attngen_mha() (weights packed per call) vs PyTorch",
     lambda p: p["torch_mha"] / p["mha_call"], None, None),
    ("decode_l3", "decode / stream read, L3-resident cache",
     lambda p: p["decode_l3_gbs"] / p["stream_l3_gbs"], 0.7, "ge"),
    ("decode_dram", "decode / stream read, DRAM-sized cache",
     lambda p: p["decode_dram_gbs"] / p["stream_dram_gbs"], 0.7, "ge"),
    ("dense_sgemm", "dense / sgemm (GFLOP/s)", lambda p: p["dense_gflops"] / p["sgemm_gflops"],
     None, None),
]


def bench_json(bench, threads, min_time, pattern):
    cmd = [bench, f"--shapes={REFERENCE}", f"--threads={threads}", f"--benchmark_filter={pattern}",
           f"--benchmark_min_time={min_time}", "--benchmark_format=json"]
    data = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    for r in data["benchmarks"]:
        if r.get("error_occurred"):
            sys.exit(f"paired.py: {r['name']}: {r.get('error_message')}")
    return data


def fma_peak(data, threads):
    """GFLOP/s of the fastest ceiling/fma_peak/<isa>/threads<threads> (the widest ISA)."""
    peaks = [r["GFLOP/s"] / 1e9 for r in data["benchmarks"]
             if r["name"].startswith("ceiling/fma_peak/") and f"/threads{threads}/" in r["name"]]
    if not peaks:
        sys.exit("paired.py: attngen_bench ran no ceiling/fma_peak benchmark")
    return max(peaks)


def collect(data, names, got):
    for r in data["benchmarks"]:
        for prefix, key in names.items():
            if r["name"].startswith(prefix):
                to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r["time_unit"]]
                got[key] = r["real_time"] * to_ms
                for counter, suffix in (("GFLOP/s", "_gflops"), ("GB/s", "_gbs")):
                    if counter in r:
                        got[key + suffix] = r[counter] / 1e9
    missing = set(names.values()) - set(got)
    if missing:
        sys.exit(f"paired.py: attngen_bench ran no {', '.join(sorted(missing))} benchmark")


def run_attngen(bench, threads, min_time):
    """ms, GFLOP/s and GB/s of the benchmarks and their ceilings, from two attngen_bench
    processes (the run's threads, then one thread), and the OpenBLAS core that ran sgemm."""
    data = bench_json(bench, threads, min_time,
                      "^(ceiling/fma_peak/|openblas_sgemm/2048|attngen/ref_(dense|causal)/|"
                      "attngen_mha(_layer)?/|decode/(l3|dram)/|stream_read/(l3|dram)/)")
    got = {"fma_gflops": fma_peak(data, threads)}
    collect(data, ATTNGEN, got)
    context = data.get("context", {})
    got["openblas_core"] = context.get("openblas_core", "?")
    got["openblas_core_for_cpu"] = context.get("openblas_core_for_cpu", "?")
    got["openblas_core_ok"] = context.get("openblas_core_ok", "?")
    one = bench_json(bench, 1, min_time, "^(ceiling/fma_peak/.*/threads1/|attngen/ref_dense/)")
    got["fma_1t_gflops"] = fma_peak(one, 1)
    collect(one, ONE_THREAD, got)
    return got


def torch_runners(bench, threads):
    """PyTorch on the same problems: ref_dense of bench/shapes/reference.txt and the MHA layer, as
    attngen_bench describes them."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    described = common.describe(bench, [REFERENCE])
    shape = next(s for s in described["shapes"] if s["name"] == "ref_dense")
    q, k, v = (torch.rand((shape["b"], shape["h"], shape["s"], shape["d"]), generator=g) * 2 - 1
               for _ in range(3))
    layer = described["mha_layer"]
    mha = torch.nn.MultiheadAttention(layer["e"], layer["h"], batch_first=True).eval()
    x = torch.rand(layer["b"], layer["s"], layer["e"], generator=g) * 2 - 1

    def run(min_time):
        with torch.no_grad():
            return {"torch_dense": common.median_ms(lambda: F.scaled_dot_product_attention(q, k, v),
                                                    min_time),
                    "torch_mha": common.median_ms(lambda: mha(x, x, x, need_weights=False),
                                                  min_time)}

    return run, torch.__version__


def summary(values, target, sense):
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    met = None if sense is None else sum(v >= target if sense == "ge" else v <= target
                                          for v in values)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values),
            "max": max(values), "met": met, "pairs": len(values)}


def main():
    args, bench = common.paired_arguments(__doc__, "paired.py", default_pairs=12)
    try:
        run_torch, version = torch_runners(bench, args.threads)
    except ImportError as e:
        sys.exit(f"paired.py: PyTorch is needed ({e}); bench/run_peers.sh installs it")

    start = time.time()
    pairs = [{**a, **t} for a, t in common.alternating_pairs(
        args.pairs, lambda: run_attngen(bench, args.threads, args.min_time),
        lambda: run_torch(args.min_time),
        lambda a, t: ", ".join(f"{title.split(' (')[0]} {value({**a, **t}):.3f}"
                               for _, title, value, _, _ in TARGETS))]

    results = {key: summary([value(p) for p in pairs], target, sense)
               for key, _, value, target, sense in TARGETS}
    lines = ["| figure | target | median | quartiles | range | pairs meeting it |",
             "|---|---|---|---|---|---|"]
    wrong_cores = sorted({(p["openblas_core"], p["openblas_core_for_cpu"]) for p in pairs
                          if p["openblas_core_ok"] == "no"})
    for key, title, _, target, sense in TARGETS:
        r = results[key]
        if key == "dense_sgemm" and wrong_cores:
            title += " **flagged: sgemm below this CPU's core**"
        goal = "–" if sense is None else f"{'≥' if sense == 'ge' else '≤'} {target}"
        met = "–" if r["met"] is None else f"{r['met']} of {r['pairs']}"
        lines.append(f"| {title} | {goal} | {r['median']:.3f} | {r['q1']:.3f}–{r['q3']:.3f} | "
                     f"{r['min']:.3f}–{r['max']:.3f} | {met} |")
    ceilings = ["fma_gflops", "fma_1t_gflops", "sgemm_gflops", "stream_l3_gbs", "stream_dram_gbs"]
    medians = {c: statistics.median(p[c] for p in pairs) for c in ceilings}
    print("\n".join(lines))
    print(f"\n- {args.pairs} pairs in {time.time() - start:.0f} s, {args.threads} threads, "
          f"PyTorch {version}; each ratio within one pair (attngen_bench and PyTorch seconds "
          "apart, order alternating), each ceiling in the same process as its kernel.")
    print(f"- Ceilings (medians): FMA peak {medians['fma_gflops']:.1f} GFLOP/s "
          f"({medians['fma_1t_gflops']:.1f} on one thread), streaming read "
          f"{medians['stream_l3_gbs']:.1f} GB/s from L3, {medians['stream_dram_gbs']:.1f} GB/s "
          f"from DRAM, sgemm {medians['sgemm_gflops']:.1f} GFLOP/s on OpenBLAS's "
          f"{', '.join(sorted({p['openblas_core'] for p in pairs}))} core.")
    for running, for_cpu in wrong_cores:
        print(f"- **sgemm ran OpenBLAS's {running} core, below this CPU's {for_cpu}: the sgemm "
              "figure is not the machine's matmul ceiling; the FMA-peak fractions stand.**")
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "paired.json"), "w") as f:
        json.dump({"pairs": pairs, "summary": results, "threads": args.threads,
                   "torch": version}, f, indent=1)


if __name__ == "__main__":
    main()
