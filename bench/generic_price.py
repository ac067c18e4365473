#!/usr/bin/env python3
"""bench/generic_price.py: the price of generality, generic kernel time / specialised time.

Runs attngen_bench's generic/ benchmarks (D64 dense and causal, B1 H16 S2048 and ViT-B's
B8 H12 S197; the specialised kernel is the one automatic dispatch takes, the generic one is of
the same ISA) with repetitions interleaved at random (Google Benchmark's
--benchmark_enable_random_interleaving), so the two sides of a ratio are measured close in time
on a machine whose speed drifts; each ratio pairs the i-th repetition of both sides.

  python3 bench/generic_price.py --build build/release --repetitions 12
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build/release")
    p.add_argument("--repetitions", type=int, default=12)
    p.add_argument("--min-time", type=float, default=0.2)
    p.add_argument("--threads", type=int, default=0, help="attngen threads (0: all cores)")
    args = p.parse_args()
    exe = os.path.join(args.build, "bench", "attngen_bench")
    cmd = [exe, "--benchmark_filter=^generic/", "--benchmark_format=json",
           "--benchmark_repetitions=%d" % args.repetitions,
           "--benchmark_enable_random_interleaving=true",
           "--benchmark_min_time=%g" % args.min_time]
    if args.threads:
        cmd.insert(1, "--threads=%d" % args.threads)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("generic_price: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    runs = collections.defaultdict(list)  # (mask, shape, side) -> times in repetition order
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        _, mask, shape, side = b["run_name"].split("/")[:4]
        runs[(mask, shape, side)].append(b["real_time"])
    if not runs:
        sys.exit("generic_price: no generic/ benchmark ran (no generic kernel built?)")
    print("command: " + " ".join(cmd))
    print("case | pairs | generic / specialised: median | quartiles | range | "
          "specialised ms | generic ms")
    for (mask, shape, side), spec in sorted(runs.items()):
        if side != "specialised":
            continue
        gen = runs.get((mask, shape, "generic"), [])
        r = sorted(g / s for s, g in zip(spec, gen))
        if not r:
            continue
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0]] * 3
        print("%s %s | %d | %.2f | %.2f-%.2f | %.2f-%.2f | %.2f | %.2f" % (
            mask, shape, len(r), statistics.median(r), q[0], q[2], r[0], r[-1],
            statistics.median(spec), statistics.median(gen)))


if __name__ == "__main__":
    main()
