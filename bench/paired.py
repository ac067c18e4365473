#!/usr/bin/env python3
"""Paired measurement of the x86-speed issue's targets, for a machine whose speed drifts.

    python3 bench/paired.py --build build/release [--pairs 12] [--threads 2] [--min-time 0.3]

bench/run_peers.sh times every shape of attngen, then every peer: a round's ratios compare
times taken up to a minute apart, and this machine's speed moves by +-25% within minutes. Here
each pair is one attngen_bench process (OpenBLAS sgemm 2048^3, dense and causal B1 H16 S2048
D64, the MHA layer, back to back) and PyTorch on the same problems in this process, seconds
apart, the order alternating from pair to pair; every ratio is taken within a pair:

    dense / sgemm (GFLOP/s)       target >= 0.75
    dense vs PyTorch SDPA         target >= 1.5   (PyTorch ms / attngen ms)
    causal ms / dense ms          target <= 0.55
    MHA layer vs PyTorch          target >= 1.3   (nn.MultiheadAttention, eval, no_grad)

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
# attngen_bench benchmark names -> keys here.
ATTNGEN = {"openblas_sgemm/2048": "sgemm", "attngen/ref_dense/": "dense",
           "attngen/ref_causal/": "causal", "attngen_mha/": "mha"}
TARGETS = [  # key, title, value of one pair, target, "ge" or "le"
    ("dense_sgemm", "dense / sgemm (GFLOP/s)", lambda p: p["dense_gflops"] / p["sgemm_gflops"],
     0.75, "ge"),
    ("dense_torch", "dense vs PyTorch SDPA", lambda p: p["torch_dense"] / p["dense"], 1.5, "ge"),
    ("causal_dense", "causal ms / dense ms", lambda p: p["causal"] / p["dense"], 0.55, "le"),
    ("mha_torch", "MHA layer vs PyTorch", lambda p: p["torch_mha"] / p["mha"], 1.3, "ge"),
]


def run_attngen(bench, threads, min_time):
    """ms (and GFLOP/s) of the four benchmarks, from one attngen_bench process."""
    cmd = [bench, f"--shapes={REFERENCE}", f"--threads={threads}",
           "--benchmark_filter=^(openblas_sgemm/2048|attngen/ref_(dense|causal)/|attngen_mha/)",
           f"--benchmark_min_time={min_time}", "--benchmark_format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    got = {}
    for r in json.loads(out)["benchmarks"]:
        if r.get("error_occurred"):
            sys.exit(f"paired.py: {r['name']}: {r.get('error_message')}")
        for prefix, key in ATTNGEN.items():
            if r["name"].startswith(prefix):
                to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r["time_unit"]]
                got[key] = r["real_time"] * to_ms
                got[key + "_gflops"] = r["GFLOP/s"] / 1e9
    missing = {"sgemm", "dense", "causal", "mha"} - set(got)
    if missing:
        sys.exit(f"paired.py: {bench} ran no {', '.join(sorted(missing))} benchmark")
    return got


def torch_runners(threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    shape = next(s for s in common.read_shapes([REFERENCE]) if s["name"] == "ref_dense")
    q, k, v = (torch.rand((shape["b"], shape["h"], shape["s"], shape["d"]), generator=g) * 2 - 1
               for _ in range(3))
    layer = common.MHA_LAYER
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
    met = sum(v >= target if sense == "ge" else v <= target for v in values)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2], "min": min(values),
            "max": max(values), "met": met, "pairs": len(values)}


def main():
    args, bench = common.paired_arguments(__doc__, "paired.py", default_pairs=12)
    try:
        run_torch, version = torch_runners(args.threads)
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
    for key, title, _, target, sense in TARGETS:
        r = results[key]
        lines.append(f"| {title} | {'≥' if sense == 'ge' else '≤'} {target} | {r['median']:.3f} | "
                     f"{r['q1']:.3f}–{r['q3']:.3f} | {r['min']:.3f}–{r['max']:.3f} | "
                     f"{r['met']} of {r['pairs']} |")
    print("\n".join(lines))
    print(f"\n- {args.pairs} pairs in {time.time() - start:.0f} s, {args.threads} threads, "
          f"PyTorch {version}; each ratio within one pair (attngen_bench and PyTorch seconds "
          "apart, order alternating).")
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "paired.json"), "w") as f:
        json.dump({"pairs": pairs, "summary": results, "threads": args.threads,
                   "torch": version}, f, indent=1)


if __name__ == "__main__":
    main()
