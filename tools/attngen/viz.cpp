// The `viz` subcommand's arguments (viz.h): its options and help, and the choice between real
// heads (input files given: viz_real.h) and synthetic ones (viz_synthetic.h). The figures are
// drawn by viz_figures.h, the kernels found by viz_kernels.h.
#include "tools/attngen/viz.h"

#include <cstdio>
#include <string>
#include <vector>

#include "tools/attngen/args.h"
#include "tools/attngen/patterns.h"
#include "tools/attngen/viz_real.h"
#include "tools/attngen/viz_synthetic.h"

namespace attngen::cli {

namespace {

std::vector<OptionSpec> viz_specs() {
  std::vector<OptionSpec> s = {
      {"q", "FILE", "real heads: projected queries [S, H, D] (.npy or safetensors 'q')"},
      {"k", "FILE", "real heads: projected keys [S, Hkv, D] (.npy or safetensors 'k')"},
      {"weights", "FILE", "real heads: attention weights [H, S, S] or [S, S] (.npy, safetensors)"},
      {"tensors", "FILE", "real heads: a safetensors file holding q and k, or weights"},
      {"dir", "DIR", "real heads: DIR/layer<L>_q.npy, DIR/layer<L>_k.npy, DIR/tokens.txt"},
      {"layer", "L", "with --dir: the layer (required there)"},
      {"tokens", "FILE", "real heads: one token per line, S lines (axis labels)"},
      {"linear", nullptr, "real heads: linear colour scale from 0 (default: log, 4 decades)"},
      {"seq", "N", "synthetic heads: sequence length, Sq = Skv (default 128, up to 2048)"},
      {"out", "DIR", "directory for the files (default $TMPDIR/attngen-viz; created)"},
      {"heads", "H", "synthetic heads: heads (default 6, up to 16)"},
      {"pattern", "NAME",
       "synthetic heads: the kernel: dense (default), local, strided, block-sparse,\n"
       "                    global-local"},
  };
  for (OptionSpec o : pattern_option_specs()) {
    if (std::string(o.name) == "causal") {
      o.help = "causal mask (j <= i); synthetic: run the causal kernel, panels with causal too";
    }
    s.push_back(o);
  }
  return s;
}

}  // namespace

std::string viz_help() {
  return "usage: attngen viz [--q FILE --k FILE | --weights FILE | --tensors FILE |\n"
         "                   --dir DIR --layer L] [--tokens FILE] [--causal] [--out DIR]\n"
         "       attngen viz [--seq N] [--heads H] [--pattern NAME] [--out DIR]   (synthetic)\n\n"
         "Real heads: reads the projected Q [S, H, D] and K [S, Hkv, D] of one layer (float32\n"
         ".npy, or tensors 'q' and 'k' of a safetensors file; the scale 1/sqrt(D) is applied\n"
         "here), computes the attention weights with attngen_attention (options.weights: a\n"
         "built-in inspection kernel, all heads in one call), or reads the weights [H, S, S]\n"
         "themselves, and writes to DIR:\n"
         "  head_<h>.png     head h, the tokens on both axes (queries down, keys across)\n"
         "  heads_grid.png   all heads\n"
         "  report.csv, report.json   per head: entropy, saturation, pattern (diagonal,\n"
         "                   previous token, first-token/[CLS] sink, separator sink, broad,\n"
         "                   local, long-range, mixed), flags prune and scale\n"
         "and prints the report. tools/attngen/README.md defines every measure.\n\n"
         "Synthetic heads (no input files): runs a built-in kernel with a weights output on\n"
         "structured q and k (local, broad, previous token, sink, periodic, same content\n"
         "heads) and writes head_<h>.png, heads_grid.png and patterns.png (the masks of dense\n"
         "and the four sparse patterns at this length, with pairs and FLOPs). --pattern and\n"
         "--causal choose among the kernels generated with WEIGHTS; the pattern options set\n"
         "the panels of patterns.png. With no arguments at all, `attngen viz` runs this demo\n"
         "(--seq 128) into $TMPDIR/attngen-viz.\n\n"
         "Colours: viridis on a log scale over four decades below the head's largest weight\n"
         "(--linear: from 0); black = masked. Image sizes follow tools/attngen/README.md.\n\n"
         "options:\n" +
         options_help(viz_specs()) +
         "\nExit status: 0 done, 1 the kernel or a file write failed, 2 bad arguments or input\n"
         "files (the message names the file and the problem), 3 no kernel with a weights\n"
         "output for that pattern or head dim.\n";
}

int run_viz(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args("attngen viz", viz_specs(), args);
  const bool real = a.has("q") || a.has("k") || a.has("weights") || a.has("tensors") ||
                    a.has("dir") || a.has("layer") || a.has("tokens");
  if (real) return viz::run_real(a);
  if (a.flag("linear")) throw UsageError("attngen viz: --linear is for real heads");
  const int st = viz::run_synthetic(a);
  if (st == 0) {
    std::printf(
        "%sReal heads: attngen viz --q layer0_q.npy --k layer0_k.npy --tokens tokens.txt "
        "--out DIR\n  (or --dir DIR --layer L, --weights FILE; `attngen viz --help`)\n",
        args.empty() ? "\nNo inputs given: this was the synthetic demo (--seq 128, 6 heads). "
                       "The files are above.\n"
                     : "\n");
  }
  return st;
}

}  // namespace attngen::cli
