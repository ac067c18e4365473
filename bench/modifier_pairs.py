#!/usr/bin/env python3
"""bench/modifier_pairs.py: a modifier against its alternatives, ratios within one process.

Runs attngen_bench's modifier/<name>/<shape>/<way> benchmarks (bench/attention_bench.cpp) in
`--rounds` processes; in each, every way of a shape runs seconds apart, so each ratio is taken
within one process (the machine's drift cancels). Prints each round's times and the median,
quartiles and range of the ratios: modifier / plain, modifier / additive (the bias as a mask
tensor), on the generic kernels modifier_generic / plain_generic (modifier / plain_generic where
the modifier is on a generic kernel only), and for a packed batch
(--modifier document) per attended pair modifier / dense, dense_generic and separate.

  python3 bench/modifier_pairs.py build/ci --rounds 6 [--modifier alibi]
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
    ap.add_argument("--modifier", default="alibi")
    ap.add_argument("--min-time", type=float, default=0.3)
    a = ap.parse_args()
    exe = os.path.join(a.build, "bench", "attngen_bench")
    pairs = [("modifier", "plain"), ("modifier", "additive"), ("modifier_generic", "plain_generic"),
             ("modifier", "plain_generic"), ("modifier", "dense"), ("modifier", "dense_generic"),
             ("modifier", "separate"), ("one_document", "dense_generic")]
    ratios = {}
    for r in range(a.rounds):
        out = subprocess.run([exe, "--benchmark_filter=^modifier/%s/" % a.modifier,
                              "--benchmark_min_time=%g" % a.min_time, "--benchmark_format=json"],
                             capture_output=True, text=True, check=True).stdout
        times = {}
        for b in json.loads(out)["benchmarks"]:
            if "real_time" in b and not b.get("error_occurred"):
                _, _, shape, way = b["run_name"].split("/")[:4]
                # Per attended pair where the benchmark counts them (ways of one shape that
                # attend different pairs: a packed batch against dense attention).
                times[(shape, way)] = b["real_time"] / b.get("pairs", 1.0)
        for shape in sorted({s for s, _ in times}):
            print(r, shape, " ".join("%s %.4g" % (w, t) for (s, w), t in times.items() if s == shape),
                  flush=True)
            for x, y in pairs:
                if (shape, x) in times and (shape, y) in times:
                    ratios.setdefault((shape, x + " / " + y), []).append(
                        times[(shape, x)] / times[(shape, y)])
    for (shape, name), v in sorted(ratios.items()):
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print("%-28s %-34s median %.3f  quartiles %.3f-%.3f  range %.3f-%.3f" %
              (shape, name, statistics.median(v), q[0], q[2], min(v), max(v)))


if __name__ == "__main__":
    main()
