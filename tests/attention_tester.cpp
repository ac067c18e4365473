#include "tests/attention_tester.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace attngen::test {

std::string AttentionTester::describe() const {
  std::ostringstream s;
  s << "B" << batch_ << " H" << hq_ << "/" << hkv_ << " S" << sq_ << "/" << skv_ << " D" << dqk_
    << "/" << dv_ << (causal_ ? " causal" : "") << (top_left_ ? " top-left" : "")
    << (pad_ ? " padded" : "") << (fused_ ? " fused-qkv" : "");
  if (!kv_len_.empty()) s << " kv_len";
  if (!mask_shape_.empty())
    s << (mask_bool_ ? " bool-mask" : " additive-mask") << "(rank " << mask_shape_.size() << ")";
  if (softcap_ > 0) s << " softcap " << softcap_;
  if (pattern_.kind != ATTNGEN_PATTERN_NONE) s << " pattern " << pattern_.kind;
  if (weights_) s << " weights";
  if (lse_) s << " lse";
  if (integer_) s << " integers " << integer_;
  return s.str();
}

void AttentionTester::Test(const attngen_kernel_info* kernel) const {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe() + " seed " + std::to_string(seed) +
               (kernel ? std::string(" kernel ") + kernel->name : std::string()));
  std::mt19937_64 rng(seed);

  Storage q, k, v, fused;
  attngen_tensor tq, tk, tv;
  if (fused_) {
    ASSERT_TRUE(sq_ == skv_ && hq_ == hkv_ && dqk_ == dv_) << "fused_qkv needs equal shapes";
    fused.init({batch_, sq_, 3, hq_, dqk_}, pad_);
    fused.fill_random(rng, -1.0f, 1.0f);
    const attngen_tensor& f = fused.t;
    for (attngen_tensor* t : {&tq, &tk, &tv}) {
      const int part = t == &tq ? 0 : t == &tk ? 1 : 2;
      *t = attngen_tensor{};
      t->data = fused.buf.data() + part * f.strides[2];
      t->dtype = ATTNGEN_F32;
      t->rank = 4;
      const int src[4] = {0, 1, 3, 4};
      for (int d = 0; d < 4; ++d) {
        t->shape[d] = f.shape[src[d]];
        t->strides[d] = f.strides[src[d]];
      }
    }
  } else {
    q.init({batch_, sq_, hq_, dqk_}, pad_);
    k.init({batch_, skv_, hkv_, dqk_}, pad_);
    v.init({batch_, skv_, hkv_, dv_}, pad_);
    q.fill_random(rng, -1.0f, 1.0f);
    k.fill_random(rng, -1.0f, 1.0f);
    v.fill_random(rng, -1.0f, 1.0f);
    if (integer_) {
      std::uniform_int_distribution<int> n(-integer_, integer_);
      for (Storage* s : {&q, &k}) {
        s->for_each([&](const std::vector<int64_t>&, int64_t off) {
          s->buf[static_cast<size_t>(off)] = static_cast<float>(n(rng));
        });
      }
    }
    tq = q.t;
    tk = k.t;
    tv = v.t;
  }
  const auto as_view = [](const attngen_tensor& t) {
    View w{static_cast<const float*>(t.data), {}, {}};
    for (int d = 0; d < t.rank; ++d) {
      w.shape.push_back(t.shape[d]);
      w.strides.push_back(t.strides[d]);
    }
    return w;
  };
  const View vq = as_view(tq), vk = as_view(tk), vv = as_view(tv);

  Storage out({batch_, sq_, hq_, dv_}, pad_);

  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = causal_ ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  opt.alignment = top_left_ ? ATTNGEN_ALIGN_TOP_LEFT : ATTNGEN_ALIGN_BOTTOM_RIGHT;
  opt.scale = scale_;
  opt.softcap = softcap_;
  opt.kernel = kernel ? kernel->name : nullptr;
  RefAttention ref;
  ref.scale = scale_;
  ref.softcap = softcap_;
  ref.causal = causal_;
  ref.bottom_right = !top_left_;

  attngen_tensor t_kv_len{};
  if (!kv_len_.empty()) {
    const int64_t n = static_cast<int64_t>(kv_len_.size());
    t_kv_len = attngen_tensor_contiguous(const_cast<int32_t*>(kv_len_.data()), ATTNGEN_I32, 1, &n);
    opt.kv_len = &t_kv_len;
    ref.kv_len = kv_len_;
  }

  // Mask: drawn per element of its own (broadcast) shape.
  std::vector<uint8_t> mask_bytes;
  std::vector<float> mask_floats;
  attngen_tensor t_mask{};
  if (!mask_shape_.empty()) {
    const int rank = static_cast<int>(mask_shape_.size());
    t_mask = attngen_tensor_contiguous(nullptr, mask_bool_ ? ATTNGEN_BOOL : ATTNGEN_F32, rank,
                                       mask_shape_.data());
    int64_t n = 1;
    for (int64_t s : mask_shape_) n *= s;
    std::bernoulli_distribution keep(density_);
    std::uniform_real_distribution<float> val(-2.0f, 2.0f);
    if (mask_bool_) {
      mask_bytes.resize(static_cast<size_t>(n));
      for (auto& m : mask_bytes) m = keep(rng) ? 1 : 0;
      t_mask.data = mask_bytes.data();
    } else {
      mask_floats.resize(static_cast<size_t>(n));
      for (auto& m : mask_floats) {
        const float x = integer_ ? std::round(4.0f * val(rng)) : val(rng);
        m = keep(rng) ? x : -std::numeric_limits<float>::infinity();
      }
      t_mask.data = mask_floats.data();
    }
    opt.mask_tensor = &t_mask;
    const attngen_tensor tm = t_mask;
    const auto index = [tm](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t full[4] = {b, h, i, j};
      int64_t off = 0;
      for (int d = 0; d < tm.rank; ++d) {
        const int64_t idx = full[4 - tm.rank + d];
        off += (tm.shape[d] == 1 ? 0 : idx) * tm.strides[d];
      }
      return off;
    };
    if (mask_bool_) {
      const uint8_t* m = mask_bytes.data();
      ref.keep = [m, index](int64_t b, int64_t h, int64_t i, int64_t j) {
        return m[index(b, h, i, j)] != 0;
      };
    } else {
      const float* m = mask_floats.data();
      ref.add = [m, index](int64_t b, int64_t h, int64_t i, int64_t j) {
        return static_cast<double>(m[index(b, h, i, j)]);
      };
    }
  }

  // Sparse pattern: the test's own reading of docs/semantics.md, independent of the runtime's.
  opt.pattern = pattern_;
  std::vector<uint8_t> layout_bytes;
  attngen_tensor t_layout{};
  const attngen_pattern pt = pattern_;
  switch (pt.kind) {
    case ATTNGEN_PATTERN_WINDOW:
      ref.pattern = [pt](int64_t p, int64_t, int64_t j) {
        return (pt.window_left < 0 || j >= p - pt.window_left) &&
               (pt.window_right < 0 || j <= p + pt.window_right);
      };
      break;
    case ATTNGEN_PATTERN_STRIDED:
      ref.pattern = [pt](int64_t p, int64_t, int64_t j) {
        const int64_t diff = p - j;
        return (diff < 0 ? -diff : diff) < pt.stride || diff % pt.stride == 0;
      };
      break;
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      ref.pattern = [pt](int64_t p, int64_t, int64_t j) {
        const int64_t diff = p - j;
        return (diff < 0 ? -diff : diff) <= pt.local || j < pt.global_tokens ||
               p < pt.global_tokens;
      };
      break;
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      const int64_t shape[2] = {(sq_ + pt.block - 1) / pt.block, (skv_ + pt.block - 1) / pt.block};
      layout_bytes.resize(static_cast<size_t>(shape[0] * shape[1]));
      std::bernoulli_distribution on(layout_density_);
      for (auto& x : layout_bytes) x = on(rng) ? 1 : 0;
      t_layout = attngen_tensor_contiguous(layout_bytes.data(), ATTNGEN_BOOL, 2, shape);
      opt.pattern.layout = &t_layout;
      const uint8_t* l = layout_bytes.data();
      const int64_t cols = shape[1], bs = pt.block;
      ref.pattern = [l, cols, bs](int64_t, int64_t i, int64_t j) {
        return l[(i / bs) * cols + j / bs] != 0;
      };
      break;
    }
    default:
      break;
  }

  Storage weights, lse;
  std::vector<double> want_weights, want_lse;
  if (weights_) {
    weights.init({batch_, hq_, sq_, skv_}, pad_);
    opt.weights = &weights.t;
    ref.weights = &want_weights;
  }
  if (lse_) {
    lse.init({batch_, hq_, sq_}, pad_);
    opt.lse = &lse.t;
    ref.lse = &want_lse;
  }

  const attngen_status st = attngen_attention(&tq, &tk, &tv, &out.t, &opt);
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
  if (kernel) EXPECT_STREQ(attngen_last_kernel(), kernel->name);

  const std::vector<double> want = reference_attention(vq, vk, vv, ref);
  expect_close_f32(out.dense(), want, max_abs(vv));
  EXPECT_EQ(out.gaps_written(), 0) << "the kernel wrote outside the output view";
  if (weights_) {
    // Weights are in [0, 1]: the contract's absolute bound with max|V| = 1. Each row sums to 1,
    // or is all 0 when the row attends nothing.
    const std::vector<double> got = weights.dense();
    expect_close_f32(got, want_weights, 1.0);
    EXPECT_EQ(weights.gaps_written(), 0) << "the kernel wrote outside the weights view";
    for (int64_t r = 0; r < batch_ * hq_ * sq_; ++r) {
      double sum = 0, want_sum = 0;
      for (int64_t j = 0; j < skv_; ++j) {
        sum += got[static_cast<size_t>(r * skv_ + j)];
        want_sum += want_weights[static_cast<size_t>(r * skv_ + j)];
      }
      ASSERT_NEAR(sum, want_sum > 0 ? 1.0 : 0.0, 1e-5) << "weights of row " << r;
    }
  }
  if (lse_) {
    const std::vector<double> got = lse.dense();
    EXPECT_EQ(lse.gaps_written(), 0) << "the kernel wrote outside the lse view";
    for (size_t r = 0; r < got.size(); ++r) {
      if (std::isinf(want_lse[r])) {
        ASSERT_TRUE(std::isinf(got[r]) && got[r] < 0) << "lse of fully masked row " << r;
      } else {
        ASSERT_NEAR(got[r], want_lse[r], 1e-5 * (1.0 + std::abs(want_lse[r]))) << "lse row " << r;
      }
    }
  }
}

}  // namespace attngen::test
