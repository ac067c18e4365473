#!/usr/bin/env python3
"""Paired dtype table: attngen's f32, f16 and bf16 kernels against PyTorch SDPA in the same dtype
and ggml's flash attention with f16 K/V.

    python3 bench/dtypes.py --build build/release [--pairs 6] [--threads 2] [--min-time 0.3]

Each pair is one attngen_bench process (the dense and causal D64 kernels of every dtype this
build has, B1 H16 S2048, back to back) and PyTorch's scaled_dot_product_attention on the same
shapes in f32, f16 and bf16 in this process, seconds apart, the order alternating from pair to
pair. Ratios are taken within a pair, then summarised (median and range) over the pairs:

    attngen f32 ms / attngen <dtype> ms     (the speed-up of the dtype over attngen's own f32)
    PyTorch <dtype> ms / attngen <dtype> ms (against the peer in the same dtype)
    ggml ms / attngen <dtype> ms            (ggml_flash_attn_ext, f32 Q, f16 K and V: llama.cpp's
                                             attention; bench/peers/ggml_build.sh builds it)

The bf16 row is the amx kernel (AMX tiles) where this build and CPU have it, else the avx512bf16
one where they have it (automatic dispatch takes that only where the CPU's vdpbf16ps pays:
attngen_bench's bf16_dot_rate_vs_fma, docs/variants.md), and "bf16 (avx512)" the same call on the AVX-512 kernel that converts to f32, which shows what
the bf16 pair products bring. Prints a Markdown table; writes bench/out/dtypes.json. Needs
PyTorch (bench/run_peers.sh installs it).
"""
import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle torch threads must not spin
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = (1, 16, 2048, 64)  # B, H, S, D
NAME = re.compile(r"^attn_(f32|f16|bf16)_d64_(none|causal)__x86_64_(amx|avx512bf16|avx512)/"
                  r"B1_H16_S2048/real_time$")


def run_attngen(bench, threads, min_time):
    """ms per (dtype, mask, isa) from one attngen_bench process."""
    cmd = [bench, f"--threads={threads}",
           "--benchmark_filter=^attn_(f32|f16|bf16)_d64_(none|causal)__x86_64_(amx|avx512(bf16)?)/"
           "B1_H16_S2048/real_time$", f"--benchmark_min_time={min_time}", "--benchmark_format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    got = {}
    for r in json.loads(out)["benchmarks"]:
        m = NAME.match(r["name"])
        if not m or r.get("error_occurred"):
            continue
        to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r["time_unit"]]
        got["/".join(m.groups())] = r["real_time"] * to_ms
    return got


def torch_runner(threads):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    b, h, s, d = SHAPE
    base = [torch.rand((b, h, s, d), generator=g) * 2 - 1 for _ in range(3)]
    tensors = {name: [t.to(dtype) for t in base] for name, dtype in
               (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16))}

    def run(min_time):
        res = {}
        with torch.no_grad():
            for name, (q, k, v) in tensors.items():
                for causal in (False, True):
                    key = f"{name}/{'causal' if causal else 'none'}"
                    res[key] = common.median_ms(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                        min_time)
        return res

    return run, torch.__version__


def ggml_runner(threads):
    """ms per mask of ggml's flash attention (f16 K/V) on SHAPE, or None where the peer cannot be
    built (the table's ggml column then says n/a)."""
    exe = common.ggml_peer()
    if exe is None:
        return None
    shapes = os.path.join(ROOT, "bench", "out", "dtypes_shapes.txt")
    b, h, s, d = SHAPE
    with open(shapes, "w") as f:
        f.write(f"none {b} {h} {s} {d}\ncausal {b} {h} {s} {d} causal\n")

    def run(min_time):
        out = subprocess.run([exe, "--threads", str(threads), "--min-time", str(min_time), shapes],
                             check=True, capture_output=True, text=True).stdout
        return {row["shape"]: row["ms"] for row in map(json.loads, out.splitlines())}

    return run


def main():
    args, bench = common.paired_arguments(__doc__, "dtypes.py", default_pairs=6)
    try:
        run_torch, version = torch_runner(args.threads)
    except ImportError as e:
        sys.exit(f"dtypes.py: PyTorch is needed ({e}); bench/run_peers.sh installs it")

    run_ggml = ggml_runner(args.threads)

    def peers():
        got = {"torch": run_torch(args.min_time)}
        if run_ggml:
            got["ggml"] = run_ggml(args.min_time)
        return got

    start = time.time()
    pairs = [{"attngen": a, **peer} for a, peer in common.alternating_pairs(
        args.pairs, lambda: run_attngen(bench, args.threads, args.min_time), peers,
        lambda a, t: ", ".join(f"{k} {v:.1f}" for k, v in a.items()))]

    # Rows: the dispatched kernel of each dtype (the best ISA built), plus bf16 on plain AVX-512.
    def best(pair, dtype, mask):
        a = pair["attngen"]
        for isa in ("amx", "avx512bf16", "avx512"):
            if f"{dtype}/{mask}/{isa}" in a:
                return a[f"{dtype}/{mask}/{isa}"], isa
        return None, None

    lines = ["| dtype | mask | kernel ISA | attngen ms | f32 / this (speed-up) | "
             "PyTorch same dtype / attngen | ggml FA f16 K/V / attngen | pairs |",
             "|---|---|---|---|---|---|---|---|"]
    results = {}
    for mask in ("none", "causal"):
        rows = [(dt, None) for dt in ("f32", "f16", "bf16")] + [("bf16", "avx512")]
        for dtype, force in rows:
            ms, up, peer, ggml, isa = [], [], [], [], None
            for p in pairs:
                if force:
                    this = p["attngen"].get(f"{dtype}/{mask}/{force}")
                    isa = force
                else:
                    this, isa = best(p, dtype, mask)
                f32, _ = best(p, "f32", mask)
                if this is None or f32 is None:
                    continue
                ms.append(this)
                up.append(f32 / this)
                peer.append(p["torch"][f"{dtype}/{mask}"] / this)
                if "ggml" in p:
                    ggml.append(p["ggml"][mask] / this)
            if not ms:
                continue
            r = {"ms": common.summary(ms), "speedup": common.summary(up),
                 "vs_torch": common.summary(peer)}
            if ggml:
                r["vs_ggml"] = common.summary(ggml)
            results[f"{dtype}/{mask}/{isa}"] = r
            fmt = lambda s: f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"  # noqa: E731
            lines.append(f"| {dtype} | {mask} | {isa} | {r['ms']['median']:.1f} | "
                         f"{fmt(r['speedup'])} | {fmt(r['vs_torch'])} | "
                         f"{fmt(r['vs_ggml']) if ggml else 'n/a'} | {len(ms)} |")
    print("\n".join(lines))
    print(f"\n- B1 H16 S2048 D64, {args.pairs} pairs in {time.time() - start:.0f} s, "
          f"{args.threads} threads, PyTorch {version}; ratios within a pair (median, range).")
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "dtypes.json"), "w") as f:
        json.dump({"pairs": pairs, "summary": results, "threads": args.threads,
                   "torch": version}, f, indent=1)


if __name__ == "__main__":
    main()
