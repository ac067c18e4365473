#!/usr/bin/env python3
"""bench/rope_pairs.py: what a rope costs a call, ratios within one process.

Runs attngen_bench's rope_cost/<prefill|decode>/<dtype>/<shape>/<none|rope> benchmarks
(bench/attention_bench.cpp) in `--rounds` processes; in each, a call with a rope runs seconds after
the same call without one, so each ratio is taken within one process (the machine's drift
cancels). Prints each round's times and the median, quartiles and range of rope / none.

  python3 bench/rope_pairs.py build/ci --rounds 6
"""

import argparse
import json
import os
import statistics
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--filter", default="", help="more of the benchmark name, e.g. prefill/f32")
    ap.add_argument("--min-time", type=float, default=0.5)
    a = ap.parse_args()
    exe = os.path.join(a.build, "bench", "attngen_bench")
    ratios = {}
    for r in range(a.rounds):
        out = subprocess.run([exe, "--benchmark_filter=^rope_cost/" + a.filter,
                              "--benchmark_min_time=%g" % a.min_time, "--benchmark_format=json"],
                             capture_output=True, text=True, check=True).stdout
        times = {}
        for b in json.loads(out)["benchmarks"]:
            if "real_time" in b and not b.get("error_occurred"):
                case, way = b["run_name"].split("/")[1:-1], b["run_name"].split("/")[-1]
                if way == "real_time":
                    case, way = case[:-1], case[-1]
                times.setdefault("/".join(case), {})[way] = b["real_time"]
        for case, t in sorted(times.items()):
            if "none" in t and "rope" in t:
                print(r, case, "none %.4g rope %.4g" % (t["none"], t["rope"]), flush=True)
                ratios.setdefault(case, []).append(t["rope"] / t["none"])
    for case, v in sorted(ratios.items()):
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print("%-48s rope / none  median %.3f  quartiles %.3f-%.3f  range %.3f-%.3f" %
              (case, statistics.median(v), q[0], q[2], min(v), max(v)))


if __name__ == "__main__":
    main()
