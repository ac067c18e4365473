#!/usr/bin/env python3
"""bench/way_pairs.py: ways of doing one call against a base way, ratios within one process.

Runs attngen_bench's <family>/.../<way> benchmarks (bench/attention_bench.cpp: rope_cost/,
whose ways are none and rope; varlen/, packed and dense_S<n>; paged_decode/, contiguous and
P<page slots>) in `--rounds` processes; in each,
the ways of a case run seconds apart, so each ratio is taken within one process (the machine's
drift cancels). Times are per attended pair where the benchmark counts them (counter `pairs`).
Prints each round's times and, per case and way, the median, quartiles and range of way / base.

  python3 bench/way_pairs.py build/ci rope_cost --base none --rounds 6
  python3 bench/way_pairs.py build/ci varlen --base dense_S1024 --rounds 6
  python3 bench/way_pairs.py build/ci paged_decode --base contiguous --rounds 6
"""

import argparse
import json
import os
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("family")
    ap.add_argument("--base", required=True, help="the way the others are divided by")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--filter", default="", help="more of the benchmark name, e.g. prefill/f32")
    ap.add_argument("--min-time", type=float, default=0.5)
    a = ap.parse_args()
    exe = os.path.join(a.build, "bench", "attngen_bench")
    ratios = {}
    for r in range(a.rounds):
        out = subprocess.run([exe, "--benchmark_filter=^%s/%s" % (a.family, a.filter),
                              "--benchmark_min_time=%g" % a.min_time, "--benchmark_format=json"],
                             capture_output=True, text=True, check=True).stdout
        times = {}
        for b in json.loads(out)["benchmarks"]:
            if "real_time" in b and not b.get("error_occurred"):
                parts = b["run_name"].split("/")
                if parts[-1] == "real_time":
                    parts = parts[:-1]
                case, way = "/".join(parts[1:-1]), parts[-1]
                times.setdefault(case, {})[way] = b["real_time"] / b.get("pairs", 1.0)
        for case, t in sorted(times.items()):
            print(r, case, " ".join("%s %.4g" % w for w in sorted(t.items())), flush=True)
            if a.base not in t:
                continue
            for way, x in t.items():
                if way != a.base:
                    ratios.setdefault((case, way), []).append(x / t[a.base])
    for (case, way), v in sorted(ratios.items()):
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print("%-44s %s / %s  median %.3f  quartiles %.3f-%.3f  range %.3f-%.3f" %
              (case, way, a.base, statistics.median(v), q[0], q[2], min(v), max(v)))


if __name__ == "__main__":
    main()
