"""Shared by the Python peers: shape files, the FLOP convention, timing and JSON-line output.

Shape files (bench/shapes/*.txt) hold one shape per line, "name B H S D [causal]", with "#"
comments; attention is self-attention (Sq = Skv = S). FLOPs follow FlashAttention's
convention, 4 * B * H * Sq * Skv * D, halved for causal, as the C++ harness counts them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The MHA layer every peer and attngen_mha compare on: BERT-base, nn.MultiheadAttention(768, 12).
MHA_LAYER = {"name": "mha_layer", "b": 4, "s": 512, "e": 768, "h": 12}


def read_shapes(paths):
    shapes = []
    for path in paths:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                fields = line.split("#")[0].split()
                if not fields:
                    continue
                if len(fields) not in (5, 6) or (len(fields) == 6 and fields[5] not in ("causal", "dense")):
                    raise SystemExit(f'{path}:{number}: expected "name B H S D [causal]", got {line!r}')
                b, h, s, d = (int(x) for x in fields[1:5])
                shapes.append({"name": fields[0], "b": b, "h": h, "s": s, "d": d,
                               "causal": len(fields) == 6 and fields[5] == "causal"})
    return shapes


def attention_flops(shape):
    return 4.0 * shape["b"] * shape["h"] * shape["s"] ** 2 * shape["d"] * (0.5 if shape["causal"] else 1.0)


def mha_layer_flops(layer):
    b, s, e = layer["b"], layer["s"], layer["e"]
    return 2.0 * b * s * e * (4.0 * e) + 4.0 * b * s * s * e  # projections + attention


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
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="intra-op threads (default: one per core)")
    parser.add_argument("--min-time", type=float, default=0.5, help="seconds of timed calls per shape, at least 3 calls")
    if shapes:
        parser.add_argument("shape_files", nargs="+", help="bench/shapes/*.txt")
    return parser.parse_args()


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
    bench = os.path.join(args.build, "bench", "attngen_bench")
    if not os.access(bench, os.X_OK):
        sys.exit(f"{script}: no {bench} (build the attngen_bench target there)")
    return args, bench


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
