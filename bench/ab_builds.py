#!/usr/bin/env python3
"""bench/ab_builds.py: interleaved A/B of two builds' attngen_bench on the same benchmarks.

Each pair runs build A and build B seconds apart (order alternating from pair to pair) and the
ratio B/A is taken within the pair, so the machine's drift (+-25% from minute to minute on the
shared dev machines) cancels; prints the median, quartiles and range of the ratios per benchmark.
For "no slowdown" checks of a change that alters generated code (the before build from a
worktree of the old commit).

  python3 bench/ab_builds.py /work/base/build/ci /work/main/build/ci \\
      --filter '^decode(/l3|_cache/f32/B1_Sq1_Hq32_Hkv8_D128_Skv128)/' --pairs 8
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys


def run(build, pattern, min_time):
    """Real time per benchmark (in its own unit), from Google Benchmark's JSON: its CSV reporter
    aborts when the benchmarks of one run have different counters (GFLOP/s and GB/s), and a
    benchmark that reports an error (no kernel of that kind in the build) has no time."""
    exe = os.path.join(build, "bench", "attngen_bench")
    out = subprocess.run([exe, "--benchmark_filter=" + pattern,
                          "--benchmark_min_time=%g" % min_time, "--benchmark_format=json"],
                         capture_output=True, text=True, check=True).stdout
    return {r["name"]: float(r["real_time"]) for r in json.loads(out)["benchmarks"]
            if not r.get("error_occurred") and r.get("run_type", "iteration") == "iteration"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_a")
    p.add_argument("build_b")
    p.add_argument("--filter", required=True, help="benchmark regex (Google Benchmark)")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--min-time", type=float, default=0.5, help="seconds per benchmark and run")
    args = p.parse_args()
    ratios = collections.defaultdict(list)
    times = collections.defaultdict(lambda: ([], []))
    for i in range(args.pairs):
        order = [("a", args.build_a), ("b", args.build_b)]
        if i % 2:
            order.reverse()
        got = {side: run(build, args.filter, args.min_time) for side, build in order}
        for name, ta in got["a"].items():
            if name in got["b"]:
                ratios[name].append(got["b"][name] / ta)
                times[name][0].append(ta)
                times[name][1].append(got["b"][name])
    if not ratios:
        sys.exit("ab_builds: no benchmark matched %r in both builds" % args.filter)
    print("benchmark | pairs | B/A median | quartiles | range | A median | B median")
    for name, r in sorted(ratios.items()):
        r = sorted(r)
        q = statistics.quantiles(r, n=4) if len(r) > 1 else [r[0], r[0], r[0]]
        print("%s | %d | %.3f | %.3f-%.3f | %.3f-%.3f | %.4g | %.4g" % (
            name, len(r), statistics.median(r), q[0], q[2], r[0], r[-1],
            statistics.median(times[name][0]), statistics.median(times[name][1])))


if __name__ == "__main__":
    main()
