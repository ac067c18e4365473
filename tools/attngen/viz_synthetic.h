// `attngen viz` on synthetic heads (no input files): q and k built so that each head's weights
// have a known shape, run through a built-in kernel with a weights output, with the per-head
// measures printed and the heads and the sparse patterns' masks drawn.
#pragma once

#include "tools/attngen/args.h"

namespace attngen::cli::viz {

// The synthetic mode of run_viz; returns the exit status.
int run_synthetic(const ParsedArgs& a);

}  // namespace attngen::cli::viz
