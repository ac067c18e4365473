// `attngen viz` on real heads: the projected Q and K of one layer (or the attention weights
// themselves) read from .npy or safetensors files and checked, the weights computed by a built-in
// kernel with a weights output (all heads in one attngen_attention call), the per-head measures
// (head_stats.h) printed and written as reports (viz_report.h), and the heads drawn with their
// tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/attngen/args.h"

namespace attngen::cli::viz {

// One layer's heads as read (and computed).
struct RealHeads {
  std::string source;  // what was read, for the report
  int64_t seq = 0, heads = 0, heads_kv = 0, dim = 0;
  bool causal = false, causal_detected = false, from_weights = false;
  std::vector<float> weights;       // [heads, seq, seq]
  std::vector<std::string> tokens;  // seq labels as given (may be empty)
  std::string kernel;               // the kernel that computed the weights, if any
  double ms = 0;
};

// The real-heads mode of run_viz; returns the exit status.
int run_real(const ParsedArgs& a);

}  // namespace attngen::cli::viz
