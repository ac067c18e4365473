"""Shared by the Python peers and the paired scripts: the shapes and their FLOPs (from
attngen_bench), timing and JSON-line output.

The shape files (bench/shapes/*.txt) are read, and FLOPs counted, by attngen_bench alone
(bench/shapes.h, bench/flops.h): describe() asks it (--describe_shapes) for the shapes of the
files and the MHA layer, each with the FLOPs its benchmarks count, so a peer's GFLOP/s is
attngen's to the FLOP.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BUILD = os.path.join(ROOT, "build", "release")  # what bench/run_peers.sh builds


def bench_of(build, script):
    """Path of the build's attngen_bench; exits with a message where it is missing."""
    bench = os.path.join(build, "bench", "attngen_bench")
    if not os.access(bench, os.X_OK):
        sys.exit(f"{script}: no {bench} (build the attngen_bench target there, or pass --build)")
    return bench


def describe(bench, shape_files=()):
    """attngen_bench --describe_shapes: {"shapes": [...], "mha_layer": {...}}. Each shape of the
    files, in order, is {"name", "b", "h", "s", "d", "causal", "sizes", "flops"}; the MHA layer
    every peer and attngen_mha compare on is {"name", "b", "s", "e", "h", "causal", "sizes",
    "flops"}. Exits with attngen_bench's message for an unreadable or malformed file."""
    paths = [os.path.abspath(p) for p in shape_files]
    if any("," in p for p in paths):
        sys.exit(f"shape file paths must not hold a comma (attngen_bench's list): {paths}")
    # (The filter matches no benchmark: a bench built before --describe_shapes runs nothing and
    # prints no JSON, rather than the whole suite.)
    out = subprocess.run([bench, "--describe_shapes=" + ",".join(paths),
                          "--benchmark_filter=^$"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr.strip() or f"{bench} --describe_shapes failed ({out.returncode})")
    return json.loads(out.stdout)


def median_ms(fn, min_time, warmup=0.2, min_reps=3, max_reps=100):
    """Median wall time of fn() in ms: warm-up calls first (at least two, for at least warmup
    seconds: a library's first calls set up thread pools and caches), then at least min_reps
    timed calls, more while their total is under min_time seconds."""
    start, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < warmup:
        fn()
        calls += 1
    samples = []
    while len(samples) < min_reps or (sum(samples) < min_time and len(samples) < max_reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def emit(peer, shape, ms=None, flops=None, error=None, **extra):
    """One JSON line; a peer that could not run prints an "error" instead of a time."""
    row = {"peer": peer, "shape": shape}
    if error is None:
        row.update(ms=round(ms, 4), gflops=round(flops / ms / 1e6, 2))
    else:
        row["error"] = error
    row.update(extra)
    print(json.dumps(row), flush=True)


def arguments(description, shapes=True):
    """The peers' options, and the shapes and MHA layer (describe()) from the build's
    attngen_bench."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="intra-op threads (default: one per core)")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds of timed calls per shape, at least 3 calls")
    parser.add_argument("--build", default=DEFAULT_BUILD,
                        help="build tree whose bench/attngen_bench reads the shape files and counts "
                        "FLOPs (default: build/release)")
    if shapes:
        parser.add_argument("shape_files", nargs="+", help="bench/shapes/*.txt")
    args = parser.parse_args()
    described = describe(bench_of(args.build, os.path.basename(sys.argv[0])),
                         args.shape_files if shapes else ())
    return args, described


def paired_arguments(description, script, default_pairs):
    """The options of the paired scripts (bench/paired.py, bench/dtypes.py) and the path of the
    build's attngen_bench; exits with a message where it is missing."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True, help="build tree with bench/attngen_bench")
    parser.add_argument("--pairs", type=int, default=default_pairs)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--min-time", type=float, default=0.3,
                        help="seconds of timing per benchmark and pair")
    args = parser.parse_args()
    return args, bench_of(args.build, script)


def summary(values):
    """Median, range and count of the per-pair figures of the paired scripts."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "pairs": len(values)}


def ggml_peer():
    """Path of the ggml peer (ggml_attention.cpp here), built first where it is missing or older
    than its source (ggml_build.sh); None, with the reason on stderr, where it cannot be built."""
    here = os.path.dirname(os.path.abspath(__file__))
    if subprocess.run(["bash", os.path.join(here, "ggml_build.sh")]).returncode:
        print("the ggml peer could not be built (bench/peers/ggml_build.sh)", file=sys.stderr)
        return None
    return os.path.join(os.path.dirname(os.path.dirname(here)), "bench", "out", "ggml",
                        "ggml_attention")


def alternating_pairs(n, run_a, run_b, describe):
    """n pairs (run_a(), run_b()), the two seconds apart and their order alternating from pair
    to pair, so that a drift of the machine's speed falls on both sides; describe(a, b) is
    printed to stderr after each pair."""
    pairs = []
    for i in range(n):
        if i % 2 == 0:
            a = run_a()
            b = run_b()
        else:
            b = run_b()
            a = run_a()
        pairs.append((a, b))
        print(f"pair {i + 1}/{n}: {describe(a, b)}", file=sys.stderr, flush=True)
    return pairs
