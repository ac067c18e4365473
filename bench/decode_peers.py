#!/usr/bin/env python3
"""Paired decode table: attngen's decode over f32, f16, bf16 and i8 caches against a streaming read
of the same bytes and against ggml's flash attention over a cache of the same kind.

    python3 bench/decode_peers.py --build build/release [--pairs 6] [--threads 2] [--min-time 0.3]

The shape is Llama-3-8B's layer at one query: B1, Hq 32 / Hkv 8, D128, Skv 8192 (attngen_bench's
decode_cache benchmarks). Each pair is one attngen_bench process (the decode of every cache type,
and stream_cache/<type>: a vectorised read of as many bytes as that cache holds) and the ggml peer
(bench/peers/ggml_attention.cpp, built by bench/peers/ggml_build.sh: ggml_flash_attn_ext with one
query row per head, K and V of f32, f16, bf16 or q8_0, ggml's 8-bit cache: blocks of 32 values and
an f16 scale, against attngen's i8 with one f32 scale per position and head), seconds apart, the
order alternating from pair to pair. Ratios are taken within a pair, then summarised (median and
range) over the pairs:

    stream read us / decode us   (the fraction of the memory's speed the decode reaches)
    f32 decode us / decode us    (the speed-up of the smaller cache)
    ggml us / attngen us         (above 1: attngen faster)

Prints a Markdown table; writes bench/out/decode_peers.json.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKV = 8192
CACHES = {"f32": "f32", "f16": "f16", "bf16": "bf16", "i8": "q8_0"}  # attngen's -> ggml's
DECODE = re.compile(r"^decode_cache/(f32|f16|bf16|i8)/B1_Sq1_Hq32_Hkv8_D128_Skv%d/real_time$" % SKV)
STREAM = re.compile(r"^stream_cache/(f32|f16|bf16|i8)/\d+KiB/real_time$")


def run_attngen(bench, threads, min_time):
    """us per decode/<cache> and stream/<cache> from one attngen_bench process."""
    cmd = [bench, f"--threads={threads}",
           f"--benchmark_filter=^(decode_cache/[a-z0-9]+/B1_Sq1_Hq32_Hkv8_D128_Skv{SKV}|stream_cache/)",
           f"--benchmark_min_time={min_time}", "--benchmark_format=json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    got = {}
    for r in json.loads(out)["benchmarks"]:
        if r.get("error_occurred"):
            continue
        to_us = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[r["time_unit"]]
        for kind, pattern in (("decode", DECODE), ("stream", STREAM)):
            m = pattern.match(r["name"])
            if m:
                got[f"{kind}/{m.group(1)}"] = r["real_time"] * to_us
    return got


def run_ggml(exe, threads, min_time):
    """us per ggml cache type (CACHES' values), one process each."""
    got = {}
    for kv in CACHES.values():
        out = subprocess.run([exe, "--decode", "--kv", kv, "--skv", str(SKV), "--threads",
                              str(threads), "--min-time", str(min_time)],
                             check=True, capture_output=True, text=True).stdout
        got[kv] = json.loads(out.splitlines()[-1])["ms"] * 1e3
    return got


def main():
    args, bench = common.paired_arguments(__doc__, "decode_peers.py", default_pairs=6)
    exe = common.ggml_peer()
    if exe is None:
        sys.exit("decode_peers.py: needs the ggml peer")

    start = time.time()
    pairs = [{"attngen": a, "ggml": g} for a, g in common.alternating_pairs(
        args.pairs, lambda: run_attngen(bench, args.threads, args.min_time),
        lambda: run_ggml(exe, args.threads, args.min_time),
        lambda a, g: ", ".join(f"{k} {v:.0f}" for k, v in sorted(a.items()) if k.startswith("decode")))]

    fmt = lambda s: f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"  # noqa: E731
    lines = ["| cache | attngen us | stream read / decode | f32 / this | ggml cache | ggml us | "
             "ggml / attngen | pairs |", "|---|---|---|---|---|---|---|---|"]
    results = {}
    for cache, ggml_kv in CACHES.items():
        us, read, up, ggml_us, vs = [], [], [], [], []
        for p in pairs:
            a = p["attngen"]
            this = a.get(f"decode/{cache}")
            if this is None:
                continue
            us.append(this)
            if f"stream/{cache}" in a:
                read.append(a[f"stream/{cache}"] / this)
            if "decode/f32" in a:
                up.append(a["decode/f32"] / this)
            ggml_us.append(p["ggml"][ggml_kv])
            vs.append(p["ggml"][ggml_kv] / this)
        if not us:
            continue
        r = {"us": common.summary(us), "of_read": common.summary(read) if read else None,
             "speedup": common.summary(up) if up else None, "ggml_us": common.summary(ggml_us),
             "vs_ggml": common.summary(vs)}
        results[cache] = r
        lines.append(f"| {cache} | {r['us']['median']:.0f} | {fmt(r['of_read']) if read else '–'} | "
                     f"{fmt(r['speedup']) if up else '–'} | {ggml_kv} | "
                     f"{r['ggml_us']['median']:.0f} | {fmt(r['vs_ggml'])} | {len(us)} |")
    print("\n".join(lines))
    print(f"\n- B1 Hq32/Hkv8 D128 Skv{SKV}, one query; {args.pairs} pairs in "
          f"{time.time() - start:.0f} s, {args.threads} threads; ratios within a pair (median, "
          "range).")
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "decode_peers.json"), "w") as f:
        json.dump({"pairs": pairs, "summary": results, "threads": args.threads}, f, indent=1)


if __name__ == "__main__":
    main()
