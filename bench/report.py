"""Ratio table and bar plot from bench/run_peers.sh.

    python3 bench/report.py --bench out/attngen.json --peers out/peers.jsonl --out-dir out \
        [--build build/release] bench/shapes/*.txt

Reads Google Benchmark's JSON (attngen/..., openblas_composed/..., attngen_mha_layer/...,
openblas_sgemm/2048, ceiling/fma_peak/...) and the peers' JSON lines, prints a Markdown table
(also written to <out-dir>/table.md) and writes <out-dir>/gflops.png. "x" columns are peer time /
attngen time: above 1 attngen is faster, below 1 it loses (marked "**lose**"). "% of FMA peak" is
against the same run's fastest FMA loop on the run's threads (the arithmetic's limit); "% of
sgemm" against OpenBLAS, flagged where it ran a core below this CPU's (the run's context
openblas_core / openblas_core_for_cpu). The rows are the shape files' shapes and the MHA layer,
as the build's attngen_bench describes them (bench/peers/common.py's describe()).

Several rounds (--bench and --peers once per round, in the same order): each cell's times are
the medians over the rounds and its ratio the median of the rounds' ratios, each taken within
one round (the machine's speed drifts from minute to minute; a round measures attngen and its
peers within about a minute of each other), with their range.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import common  # noqa: E402

# Table columns for the peers, and which peer programs fill them.
# ggml's flash attention (bench/peers/ggml_attention.cpp) keeps K and V in f16, as llama.cpp does.
PEERS = [("openblas_composed", "composed OpenBLAS"), ("torch", "PyTorch"), ("ort", "ONNX Runtime"),
         ("ggml", "ggml FA (f16 K/V)")]
PEER_COLUMN = {"openblas_composed": "openblas_composed", "torch_sdpa": "torch", "torch_mha": "torch",
               "ort_mha": "ort", "ggml_fa": "ggml"}


def read_bench(path, mha_name):
    """{(column, shape): result} from Google Benchmark's JSON (the MHA layer's under mha_name),
    and the sgemm ceiling."""
    with open(path) as f:
        data = json.load(f)
    runs = data["benchmarks"]
    if any(r.get("run_type") == "aggregate" for r in runs):  # --benchmark_repetitions: medians
        runs = [r for r in runs if r.get("aggregate_name") == "median" or r.get("error_occurred")]
    results, ceiling = {}, None
    for r in runs:
        name = r.get("run_name", r["name"])
        parts = name.split("/")
        if r.get("error_occurred"):
            result = {"error": r.get("error_message", "skipped")}
        else:
            to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r["time_unit"]]
            result = {"ms": r["real_time"] * to_ms, "gflops": r["GFLOP/s"] / 1e9, "label": r.get("label", "")}
        if parts[0] == "openblas_sgemm":
            ceiling = result
        elif parts[0] == "ceiling" and parts[1] == "fma_peak" and "error" not in result:
            threads = data.get("context", {}).get("threads")
            best = results.get(("ceiling", "fma_peak"))
            if parts[3] == f"threads{threads}" and (best is None or result["gflops"] > best["gflops"]):
                results[("ceiling", "fma_peak")] = result
        elif parts[0] in ("attngen", "openblas_composed"):
            results[(parts[0], parts[1])] = result
        elif parts[0] in ("attngen_mha", "attngen_mha_layer"):
            # The MHA row is the persistent layer's (weights packed once) where it ran.
            key = ("attngen", mha_name)
            if parts[0] == "attngen_mha_layer" or key not in results:
                results[key] = result
    return data.get("context", {}), results, ceiling


def read_peers(path, results):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            results[(PEER_COLUMN.get(row["peer"], row["peer"]), row["shape"])] = row


def rows(described):
    """(shape name, sizes) in the order of the shape files, the MHA layer last."""
    out = [(s["name"], s["sizes"].replace("_", " ")) for s in described["shapes"]]
    layer = described["mha_layer"]
    out.append((layer["name"], "MHA layer " + layer["sizes"].replace("_", " ")))
    return out


def combine(rounds):
    """One results dict from several rounds' (results, ceiling): median ms and GFLOP/s per
    entry, and per peer entry "ratios", its ms over attngen's of the same round."""
    combined, ceilings = {}, [c for _, c in rounds if c and "gflops" in c]
    keys = {k for results, _ in rounds for k in results}
    for key in keys:
        got = [results[key] for results, _ in rounds if key in results]
        ok = [r for r in got if "error" not in r]
        if not ok:
            combined[key] = got[0]
            continue
        entry = dict(ok[0])
        entry["ms"] = statistics.median(r["ms"] for r in ok)
        if all("gflops" in r for r in ok):
            entry["gflops"] = statistics.median(r["gflops"] for r in ok)
        if key[0] != "attngen":
            ratios = []
            for results, _ in rounds:
                ours, peer = results.get(("attngen", key[1])), results.get(key)
                if ours and peer and "error" not in ours and "error" not in peer:
                    ratios.append(peer["ms"] / ours["ms"])
            entry["ratios"] = ratios
        combined[key] = entry
    ceiling = None
    if ceilings:
        ceiling = {"ms": statistics.median(c["ms"] for c in ceilings),
                   "gflops": statistics.median(c["gflops"] for c in ceilings)}
    return combined, ceiling


def markdown(described, results, ceiling, context, n_rounds=1):
    head = ["shape", "sizes", "attngen kernel", "attngen ms", "GFLOP/s", "% of FMA peak",
            "% of sgemm"]
    fma = results.get(("ceiling", "fma_peak"))
    sgemm_wrong = context.get("openblas_core_ok") == "no"
    for _, title in PEERS:
        head += [f"{title} ms", "x"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    wins = losses = 0
    for name, dims in rows(described):
        ours = results.get(("attngen", name), {"error": "not run"})
        if "error" in ours:
            # "no kernel for D128: <the runtime's message>": the reason here, the message below
            cells = [name, dims, f"skipped: {ours['error'].split(':')[0]}", "–", "–", "–", "–"]
        else:
            share = f"{100 * ours['gflops'] / ceiling['gflops']:.0f}%" if ceiling and "gflops" in ceiling else "–"
            if share != "–" and sgemm_wrong:
                share += " (flagged)"
            of_peak = f"{100 * ours['gflops'] / fma['gflops']:.0f}%" if fma else "–"
            cells = [name, dims, f"`{ours['label']}`", f"{ours['ms']:.3f}", f"{ours['gflops']:.1f}",
                     of_peak, share]
        for column, _ in PEERS:
            peer = results.get((column, name))
            if peer is None:
                cells += ["–", "–"]
            elif "error" in peer:
                cells += ["n/a", "–"]
            elif "error" in ours:
                cells += [f"{peer['ms']:.3f}", "–"]
            else:
                ratios = peer.get("ratios") or [peer["ms"] / ours["ms"]]
                ratio = statistics.median(ratios)
                wins, losses = wins + (ratio >= 1), losses + (ratio < 1)
                spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
                cells += [f"{peer['ms']:.3f}", f"{ratio:.2f}{spread}" + (" **lose**" if ratio < 1 else "")]
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    if fma:
        notes.append(f"FMA peak (ceiling/fma_peak, {fma['label']}): {fma['gflops']:.1f} GFLOP/s.")
    if ceiling and "gflops" in ceiling:
        core = context.get("openblas_core", "?")
        notes.append(f"OpenBLAS sgemm 2048³: {ceiling['gflops']:.1f} GFLOP/s, {ceiling['ms']:.2f} ms, "
                     f"on its {core} core (chosen by {context.get('openblas_core_chosen_by', '?')}).")
        if sgemm_wrong:
            notes.append(f"**Flagged: OpenBLAS ran its {core} core, below this CPU's "
                         f"{context.get('openblas_core_for_cpu', '?')}: sgemm is not the machine's "
                         "matmul ceiling here; the FMA-peak column stands.**")
    notes.append(f"Threads: {context.get('threads', '?')}; attngen ISA: {context.get('attngen_isa', '?')}. "
                 "x = peer ms / attngen ms (above 1: attngen faster). "
                 "FLOPs as attngen_bench counts them (bench/flops.h): FlashAttention's convention "
                 "over the attended pairs, the MHA layer's projections added.")
    if n_rounds > 1:
        notes.append(f"{n_rounds} rounds: times are medians over the rounds; x is the median of "
                     "the rounds' ratios (each within one round), with their range.")
    notes.append(f"attngen faster in {wins} of {wins + losses} comparisons.")
    for (column, name), r in sorted(results.items()):
        if "error" in r and column != "ceiling":
            notes.append(f"{column} on {name}: {r['error']}")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def targets(rounds, mha_name):
    """Per round, the figures the speed targets are set on (bench/shapes/reference.txt and the
    MHA layer), each a ratio within the round; "" when the round lacks the shapes."""
    head = ["round", "FMA peak GFLOP/s", "sgemm 2048³ GFLOP/s", "dense GFLOP/s",
            "dense / FMA peak", "dense / sgemm", "dense vs PyTorch", "causal ms / dense ms",
            "MHA layer vs PyTorch"]
    lines = []
    for n, (results, ceiling) in enumerate(rounds, 1):
        def ok(column, shape):
            r = results.get((column, shape))
            return r if r and "error" not in r else None

        dense, causal = ok("attngen", "ref_dense"), ok("attngen", "ref_causal")
        if dense is None:
            continue
        torch_dense, mha = ok("torch", "ref_dense"), ok("attngen", mha_name)
        torch_mha, fma = ok("torch", mha_name), ok("ceiling", "fma_peak")
        cells = [str(n), f"{fma['gflops']:.1f}" if fma else "–",
                 f"{ceiling['gflops']:.1f}" if ceiling else "–", f"{dense['gflops']:.1f}",
                 f"{dense['gflops'] / fma['gflops']:.2f}" if fma else "–",
                 f"{dense['gflops'] / ceiling['gflops']:.2f}" if ceiling else "–",
                 f"{torch_dense['ms'] / dense['ms']:.2f}" if torch_dense else "–",
                 f"{causal['ms'] / dense['ms']:.3f}" if causal else "–",
                 f"{torch_mha['ms'] / mha['ms']:.2f}" if mha and torch_mha else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return ""
    return ("Per round (the targets: dense / FMA peak ≥ 0.80, every shape ≥ 1.1x PyTorch and "
            "ONNX Runtime, causal / dense ≤ 0.55, MHA layer vs PyTorch ≥ 1.5):\n\n"
            + "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n" + "\n".join(lines) + "\n")


def plot(described, results, ceiling, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name, _ in rows(described)]
    columns = [("attngen", "attngen")] + PEERS
    width = 0.8 / len(columns)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(names)), 4.5))
    for i, (column, title) in enumerate(columns):
        values = [results.get((column, n), {}).get("gflops", 0.0) for n in names]
        ax.bar([x + (i - (len(columns) - 1) / 2) * width for x in range(len(names))], values, width, label=title)
    if ceiling and "gflops" in ceiling:
        ax.axhline(ceiling["gflops"], color="black", linestyle="--", linewidth=1, label="OpenBLAS sgemm 2048³")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("GFLOP/s (FlashAttention convention)")
    ax.set_title("fp32 attention on the CPU (missing bar: not run / no kernel)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, action="append",
                        help="Google Benchmark JSON of attngen_bench (once per round)")
    parser.add_argument("--peers", required=True, action="append",
                        help="JSON lines of bench/peers/*.py (once per round, same order)")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--build", default=common.DEFAULT_BUILD,
                        help="build tree whose bench/attngen_bench describes the shape files "
                        "(default: build/release)")
    parser.add_argument("shape_files", nargs="+")
    args = parser.parse_args()
    if len(args.bench) != len(args.peers):
        parser.error("give --bench and --peers once per round each")
    described = common.describe(common.bench_of(args.build, "report.py"), args.shape_files)
    mha_name = described["mha_layer"]["name"]
    rounds, context = [], {}
    for bench, peers in zip(args.bench, args.peers):
        context, results, ceiling = read_bench(bench, mha_name)
        read_peers(peers, results)
        rounds.append((results, ceiling))
    per_round = targets(rounds, mha_name)
    results, ceiling = combine(rounds)
    table = markdown(described, results, ceiling, context, len(rounds))
    if per_round:
        table += "\n" + per_round
    print(table)
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "table.md"), "w") as f:
        f.write(table)
    try:
        plot(described, results, ceiling, os.path.join(args.out_dir, "gflops.png"))
    except ImportError as e:
        print(f"no plot: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
