// linear: y = x W^T + b with W in PyTorch nn.Linear layout [N, E]. Used for the fused Q/K/V
// projection (W = nn.MultiheadAttention.in_proj_weight, [3E, E]: one pass over x) and the
// output projection.
#include "generator/attention_algorithm.h"
#include "generator/params.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;

class Linear : public Generator<Linear> {
 public:
  // Schedule tunables (0: derived from the target; see schedules/schedule.h).
  GeneratorParam<int> n_vectors{"n_vectors", 0, 0, 64};
  GeneratorParam<int> rows{"rows", 0, 0, 256};
  GeneratorParam<int> row_block{"row_block", 0, 0, 1 << 20};
  GeneratorParam<int> e_chunk{"e_chunk", 0, 0, 1 << 20};
  GeneratorParam<int> threads_x{"threads_x", 0, 0, 1024};
  GeneratorParam<int> threads_y{"threads_y", 0, 0, 1024};

  Input<Buffer<float, 3>> x{"x"};        // (e, s, b)
  Input<Buffer<float, 2>> w{"w"};        // (e, n)
  Input<Buffer<float, 1>> bias{"bias"};  // (n)
  Output<Buffer<float, 3>> y{"y"};       // (n, s, b)

  void generate() {
    attngen::LinearTunables requested;
    requested.n_vectors = n_vectors;
    requested.rows = rows;
    requested.row_block = row_block;
    requested.e_chunk = e_chunk;
    requested.threads_x = threads_x;
    requested.threads_y = threads_y;
    attngen::LinearShape shape{x.dim(0).extent(), w.dim(1).extent(), x.dim(1).extent()};
    const attngen::LinearTunables t =
        attngen::plan_linear(shape, requested, get_target(), get_auto_schedule());
    attngen::LinearFuncs f = attngen::define_linear(x, w, bias, shape, "linear");
    y(f.n, f.s, f.b) = f.out(f.n, f.s, f.b);
    // Output features start at 0, so a schedule's tiles of n line up with the weight panels.
    y.dim(0).set_min(0);

    using E = attngen::Estimates;
    x.set_estimates({{0, E::kEmbed}, {0, E::kSeq}, {0, E::kBatch}});
    w.set_estimates({{0, E::kEmbed}, {0, 3 * E::kEmbed}});
    bias.set_estimates({{0, 3 * E::kEmbed}});
    y.set_estimates({{0, 3 * E::kEmbed}, {0, E::kSeq}, {0, E::kBatch}});

    f.out.compute_inline();
    attngen::LinearFuncs fs = f;
    fs.out = y;
    attngen::schedule_linear(fs, get_target(), get_auto_schedule(), t);
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Linear, linear)
