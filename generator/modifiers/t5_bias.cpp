// T5's bucketed relative position bias (T5, MPNet; docs/semantics.md, "Modifiers"):
// s + table[bucket(j - p), h], with a learned table [num_buckets, Hq] (Hugging Face's
// relative_attention_bias weight) and T5's _relative_position_bucket: bidirectional (scalar
// `bidirectional` != 0: half the buckets for keys after the query) or causal (keys after the
// query share bucket 0); within a direction, distances below max_exact = buckets / 2 have a bucket
// each and longer ones logarithmic buckets up to `max_distance`, past which they share the last.
//
// The bias of each relative position r in [-R, R] (R = max_distance, at least max_exact + 1;
// beyond R the buckets no longer change) is a stage computed once per call, 2R + 1 per head, and
// spread to every relative position of the call, so that a score reads one value from it. Its
// logarithms are f64: a distance that is an exact power of the bucket ratio (T5's 16, 32, 64 of
// 128) lands on an integer, and Hugging Face's f32 code puts it in the upper bucket; f64 with a
// margin of 1e-9 does too, where the nearest other distances of any configuration up to 4096
// lie 1.6e-5 or more from an integer.
#include "generator/modifier.h"

namespace attngen {
namespace {

using Halide::Expr;

Modifier t5_bias() {
  Modifier m;
  m.layout.name = "t5_bias";
  m.layout.score = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"table", DType::kF32, 2, {ModifierDim::kAny, ModifierDim::kHq}};
  m.layout.scalars = 2;
  m.layout.scalar[0] = "bidirectional";
  m.layout.scalar[1] = "max_distance";
  m.score = [](const Expr& s, const ModifierIndex& at, const ModifierParams& p) {
    const Halide::Func& table = p.tensors[0];  // (h, bucket)
    const Expr buckets = p.extents[0][1];
    const Expr bidirectional = p.scalars[0] != 0.0f;
    // Buckets per direction, and the distances that have one each.
    const Expr per_side = Halide::select(bidirectional, buckets / 2, buckets);
    const Expr exact = Halide::max(per_side / 2, 1);
    const Expr reach = Halide::max(
        Halide::cast<int>(Halide::clamp(Halide::floor(p.scalars[1]), 0.0f, 1048576.0f)), exact + 1);

    Halide::Var r("t5_r"), h("t5_h");
    const Expr rel = r - reach;  // j - p
    const Expr n =
        Halide::select(bidirectional, Halide::cast<int>(Halide::abs(rel)), Halide::max(-rel, 0));
    const Expr ratio = Halide::log(Halide::cast<double>(n) / Halide::cast<double>(exact)) /
                       Halide::log(Halide::cast<double>(reach) / Halide::cast<double>(exact));
    const Expr logarithmic =
        exact + Halide::cast<int>(
                    Halide::floor(ratio * Halide::cast<double>(per_side - exact) + Expr(1e-9)));
    const Expr bucket = Halide::select(bidirectional && rel > 0, per_side, 0) +
                        Halide::select(n < exact, n, Halide::min(logarithmic, per_side - 1));
    Halide::Func bias("t5_bias_by_distance");
    bias(r, h) = table(h, Halide::clamp(bucket, 0, buckets - 1));
    // The bias of every relative position a call may have, so that a score reads it at j - p
    // with no clamp per score (consecutive rows or keys read consecutive values: a vector load,
    // where the clamped index was a gather). The offset is clamped to the range it has anyway.
    Halide::Var x("t5_x");
    Halide::Func wide("t5_bias_by_position");
    wide(x, h) = bias(Halide::clamp(x, -reach, reach) + reach, h);
    p.stages->push_back(bias);
    p.stages->push_back(wide);
    const Expr position = Halide::clamp(at.offset, -at.seq_q, at.seq_kv) + at.row;
    return s + wide(at.j - position, at.h);
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(t5_bias, t5_bias());

}  // namespace attngen
