#!/usr/bin/env python3
"""bench/binary_pairs.py: one build's benchmarks against another's, in alternating processes.

Runs the benchmarks matching --filter in the base binary, then in the new one, `--rounds` times
(each round seconds apart, so the machine's drift cancels in the ratio), and prints each round's
times and, per benchmark, the median and range of new / base. For a change measured against the
tree before it: build that tree's attngen_bench aside (a git worktree), then

  python3 bench/binary_pairs.py /tmp/old/bench/attngen_bench build/ci/bench/attngen_bench \\
      --filter '^rope_cost/decode/.*/none' --rounds 3
"""

import argparse
import json
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--filter", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.5)
    a = ap.parse_args()
    ratios = {}
    for r in range(a.rounds):
        times = {}
        for name, exe in (("base", a.base), ("new", a.new)):
            out = subprocess.run([exe, "--benchmark_filter=" + a.filter,
                                  "--benchmark_min_time=%g" % a.min_time,
                                  "--benchmark_format=json"],
                                 capture_output=True, text=True, check=True).stdout
            for b in json.loads(out)["benchmarks"]:
                if "real_time" in b and not b.get("error_occurred"):
                    times.setdefault(b["run_name"], {})[name] = b["real_time"]
        for case, t in sorted(times.items()):
            if "base" in t and "new" in t:
                ratios.setdefault(case, []).append(t["new"] / t["base"])
                print(r, case, "base %.4g new %.4g" % (t["base"], t["new"]), flush=True)
    for case, v in sorted(ratios.items()):
        print("%-64s new / base  median %.3f  range %.3f-%.3f" %
              (case, statistics.median(v), min(v), max(v)))


if __name__ == "__main__":
    main()
