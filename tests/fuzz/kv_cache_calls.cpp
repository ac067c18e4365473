// Builder of a KV cache session (tests/fuzz/calls.h): create (with a rope, and in pages,
// sometimes), then a few appends, decodes (attngen_decode), MHA decode steps
// (attngen_mha_decode), lengths, resets and forks, destroy; checked against a model of what the
// cache holds (and of a paged cache's pages: none lost, none taken twice) and the float64 decode
// reference (no sequence sees another's data).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/fuzz/calls.h"
#include "tests/fuzz/oracle.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::fuzz {
namespace {

using attngen::test::BFloat16;
using attngen::test::ElementTraits;
using attngen::test::Half;
using attngen::test::Tolerance;

// A paged cache's pages as the model counts them (attngen.h, "Incremental decoding"): each
// sequence's pages in order (ids standing for pages) and each page's holders; an append takes a
// free page for each page of its positions that the sequence does not hold, or shares.
struct PageModel {
  int64_t page_slots = 0;  // 0: a contiguous cache
  int64_t free = 0;
  std::vector<std::vector<int64_t>> held;  // [b]
  std::map<int64_t, int64_t> holders;
  int64_t next_id = 0;

  bool written(int64_t b, int64_t e) const {
    const auto& h = held[static_cast<size_t>(b)];
    return e >= static_cast<int64_t>(h.size()) || holders.at(h[static_cast<size_t>(e)]) > 1;
  }
  // Pages an append of cnt[b] positions to sequences of `lengths` takes.
  int64_t needed(const std::vector<int64_t>& lengths, const std::vector<int64_t>& cnt) const {
    int64_t n = 0;
    for (size_t b = 0; b < held.size(); ++b) {
      if (cnt[b] <= 0) continue;
      for (int64_t e = lengths[b] / page_slots; e <= (lengths[b] + cnt[b] - 1) / page_slots; ++e) {
        n += written(static_cast<int64_t>(b), e) ? 1 : 0;
      }
    }
    return n;
  }
  void take(const std::vector<int64_t>& lengths, const std::vector<int64_t>& cnt) {
    for (size_t b = 0; b < held.size(); ++b) {
      if (cnt[b] <= 0) continue;
      for (int64_t e = lengths[b] / page_slots; e <= (lengths[b] + cnt[b] - 1) / page_slots; ++e) {
        if (!written(static_cast<int64_t>(b), e)) continue;
        auto& h = held[b];
        const int64_t id = next_id++;
        holders[id] = 1;
        --free;
        if (e < static_cast<int64_t>(h.size())) {
          --holders[h[static_cast<size_t>(e)]];
          h[static_cast<size_t>(e)] = id;
        } else {
          h.push_back(id);
        }
      }
    }
  }
  void release(int64_t b) {
    for (int64_t id : held[static_cast<size_t>(b)]) {
      if (--holders[id] == 0) {
        holders.erase(id);
        ++free;
      }
    }
    held[static_cast<size_t>(b)].clear();
  }
  void fork(int64_t from, int64_t to) {
    held[static_cast<size_t>(to)] = held[static_cast<size_t>(from)];
    for (int64_t id : held[static_cast<size_t>(to)]) ++holders[id];
  }
};

// What the cache must hold: per (layer, sequence) every position appended, K and V as stored
// (rounded to the cache's dtype; unrounded for I8, whose bound is against the unquantised values).
struct CacheModel {
  int64_t layers = 0, batch = 0, hkv = 0, dqk = 0, dv = 0, capacity = 0, window = -1;
  int dtype = ATTNGEN_F32;
  bool approx = false;  // K and V rounded by a projection in float (MHA decode): storage bound
  // The cache's rope (NULL: none): keys are held rotated at their positions, queries rotated.
  const RopeSpec* rope = nullptr;
  PageModel pages;
  // A contiguous cache with a window is a ring buffer; a paged one masks.
  bool ring() const { return window >= 0 && pages.page_slots == 0; }
  std::vector<int64_t> lengths(int64_t layer) const {
    std::vector<int64_t> n(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) n[static_cast<size_t>(b)] = length(layer, b);
    return n;
  }
  std::vector<std::vector<std::vector<double>>> k, v;  // [layer * batch + b][pos][h * d + d]

  double round(double x) const {
    if (dtype == ATTNGEN_F16)
      return ElementTraits<Half>::to_double(ElementTraits<Half>::from_double(x));
    if (dtype == ATTNGEN_BF16) {
      return ElementTraits<BFloat16>::to_double(ElementTraits<BFloat16>::from_double(x));
    }
    return x;
  }
  int64_t length(int64_t layer, int64_t b) const {
    return static_cast<int64_t>(k[static_cast<size_t>(layer * batch + b)].size());
  }
  Tolerance tol() const {
    if (dtype == ATTNGEN_I8) {
      // The int8 quantisation's storage bound (core/dtype.h), against the unquantised values.
      const attngen::DTypeRow& r = attngen::dtype_row(attngen::DType::kI8);
      return {ATTNGEN_I8, r.storage_rel_l2, r.storage_abs_per_max, 0.0};
    }
    if (approx) return tolerance(dtype);
    return tolerance(ATTNGEN_F32);
  }
};

// Counts per sequence: an optional I32 [B] tensor with values in [0, t].
struct Counts {
  GuardTensor g;
  bool used = false;
  std::vector<int64_t> values;
};

void make_counts(Input& in, Counts& c, int64_t B, int64_t t) {
  if (!in.chance(90) || B <= 0 || B > 64) return;
  const int d = dtype_near(in, ATTNGEN_I32);
  c.g.make(d, layout_for(in, {B}), misalign(in, d), in.chance(3));
  c.g.poison();
  c.g.for_each([&](int64_t, int64_t off) {
    const uint8_t b = in.u8();
    int64_t v = t > 0 && t < 64 ? b % (t + 1) : 0;
    if (b >= 250) v = in.pick({-1, INT32_MIN, INT32_MAX, 64});
    c.values.push_back(as_i32(c.g.set(off, static_cast<double>(v))));
  });
  if (c.g.small()) {  // elements may share memory (zero strides)
    c.values.clear();
    for (double x : c.g.dense()) c.values.push_back(as_i32(x));
  }
  c.used = !in.chance(4);
}

// The decode reference (tests/reference.h) over the model's layer: q [B, t, Hq, Dqk] dense,
// counts per sequence; magnitude, if given, as RefAttention's.
std::vector<double> decode_reference(const CacheModel& m, int64_t layer,
                                     const std::vector<double>& q, int64_t B, int64_t t, int64_t Hq,
                                     const std::vector<int64_t>& cnt, double scale,
                                     std::vector<double>* magnitude) {
  std::vector<std::vector<double>> k(static_cast<size_t>(B)), v(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const size_t seq = static_cast<size_t>(layer * m.batch + b);
    for (const auto& row : m.k[seq]) k[b].insert(k[b].end(), row.begin(), row.end());
    for (const auto& row : m.v[seq]) v[b].insert(v[b].end(), row.begin(), row.end());
  }
  attngen::test::RefDecode p;
  p.heads_kv = m.hkv;
  p.head_dim_qk = m.dqk;
  p.head_dim_v = m.dv;
  p.scale = scale;
  p.window = m.window;
  p.counts = cnt;
  p.magnitude = magnitude;
  return attngen::test::reference_decode(q, B, t, Hq, k, v, p);
}

double max_abs_v(const CacheModel& m) {
  double x = 0;
  for (const auto& seq : m.v) {
    for (const auto& row : seq) x = std::max(x, max_abs(row));
  }
  return x;
}

int64_t layer_index(Input& in, int64_t layers) {
  const uint8_t b = in.u8();
  if (b < 245 && layers > 0 && layers < 64) return b % layers;
  return in.pick(kHostile);
}

// Appends `rows` (per sequence: rows[b][r] = K row, V row over all heads) to the model.
void model_append(CacheModel& m, int64_t layer, const std::vector<int64_t>& cnt,
                  const std::vector<std::vector<std::vector<double>>>& krows,
                  const std::vector<std::vector<std::vector<double>>>& vrows) {
  for (int64_t b = 0; b < m.batch; ++b) {
    for (int64_t r = 0; r < cnt[static_cast<size_t>(b)]; ++r) {
      std::vector<double> kr = krows[static_cast<size_t>(b)][static_cast<size_t>(r)];
      std::vector<double> vr = vrows[static_cast<size_t>(b)][static_cast<size_t>(r)];
      // Rotated at its position, the sequence's length before the append plus its row (the
      // rows before it are appended already), before the rounding to the cache's dtype.
      if (m.rope != nullptr) kr = rope_dense(*m.rope, kr, 1, 1, m.hkv, m.dqk, {m.length(layer, b)});
      for (double& x : kr) x = m.round(x);
      for (double& x : vr) x = m.round(x);
      if (m.dtype == ATTNGEN_I8) {
        // An I8 row (one slot of one kv head) holding a NaN or an infinity has a NaN scale: the
        // whole row reads as NaN (docs/semantics.md, "Incremental decoding").
        const auto nan_rows = [&m](std::vector<double>& row, int64_t d) {
          for (int64_t h = 0; h < m.hkv; ++h) {
            const auto first = row.begin() + h * d, last = first + d;
            if (std::any_of(first, last, [](double x) { return !std::isfinite(x); })) {
              std::fill(first, last, std::numeric_limits<double>::quiet_NaN());
            }
          }
        };
        nan_rows(kr, m.dqk);
        nan_rows(vr, m.dv);
      }
      m.k[static_cast<size_t>(layer * m.batch + b)].push_back(kr);
      m.v[static_cast<size_t>(layer * m.batch + b)].push_back(vr);
    }
  }
}

// Queries q, dense [B, t, H, dqk], rotated by the cache's rope (if any): row i of sequence b at
// n_b - cnt[b] + i, n_b its length once the step's keys are appended.
std::vector<double> rotate_queries(const CacheModel& m, int64_t layer, std::vector<double> q,
                                   int64_t B, int64_t t, int64_t H,
                                   const std::vector<int64_t>& cnt) {
  if (m.rope == nullptr) return q;
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < t; ++i) pos.push_back(m.length(layer, b) - cnt[b] + i);
  }
  return rope_dense(*m.rope, q, B, t, H, m.dqk, pos);
}

// Checks that appending cnt tokens was allowed (docs/semantics.md, "Incremental decoding").
void check_append_allowed(const CacheModel& m, int64_t layer, const std::vector<int64_t>& cnt) {
  for (int64_t b = 0; b < m.batch; ++b) {
    const int64_t c = cnt[static_cast<size_t>(b)], n = m.length(layer, b);
    if (!m.ring() && n + c > m.capacity) fail("append past the capacity accepted");
    if (m.ring() && c > m.capacity - m.window)
      fail("append of more than capacity - window accepted");
  }
}

// A paged cache's append of cnt to the layer (model lengths before it): accepted, it must have
// found its pages, which the model then takes; refused as ATTNGEN_ERROR_CAPACITY, it must not
// have (unless the capacity itself refused it).
void check_pages(CacheModel& m, int64_t layer, const std::vector<int64_t>& cnt, attngen_status s) {
  if (m.pages.page_slots == 0) return;
  const std::vector<int64_t> len = m.lengths(layer);
  bool within = true;
  for (int64_t b = 0; b < m.batch; ++b) {
    const int64_t c = cnt[static_cast<size_t>(b)];
    within = within && c >= 0 && len[static_cast<size_t>(b)] + c <= m.capacity;
  }
  if (!within) return;
  const int64_t need = m.pages.needed(len, cnt);
  if (s == ATTNGEN_OK) {
    if (need > m.pages.free) {
      fail("an append needing %" PRId64 " pages accepted with %" PRId64 " free", need,
           m.pages.free);
    }
    m.pages.take(len, cnt);
  } else if (s == ATTNGEN_ERROR_CAPACITY && need <= m.pages.free) {
    fail("an append needing %" PRId64 " pages refused with %" PRId64 " free", need, m.pages.free);
  }
}

}  // namespace

void fuzz_kv_cache(Input& in, Fill& fill, bool serving) {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  if (o.window != -1 || o.dtype != ATTNGEN_F32 || o.layers != 0 || o.storage != nullptr) {
    fail("attngen_kv_cache_options_default() is not all zero with window -1 and F32");
  }
  CacheModel m;
  o.layers = !in.chance(8) ? dim(in, 3) : 1LL << 27;
  o.batch = dim(in, 3);
  o.heads_kv = dim(in, 3);
  o.head_dim_qk = head_dim(in);
  o.head_dim_v = in.chance(100) ? 0 : head_dim(in);
  o.capacity = dim(in, 24);
  const int dtype = !in.chance(56) ? in.u8() % 3 : dtype_near(in, ATTNGEN_I8);
  const int cache_dtype = in.chance(50) ? ATTNGEN_I8 : dtype;
  put_enum(o.dtype, cache_dtype);
  const uint8_t wb = in.u8();
  if (wb < 100) {
    o.window = -1;
  } else if (wb < 240) {
    o.window = o.capacity > 0 && o.capacity < 1000 ? wb % o.capacity : wb % 8;
  } else {
    o.window = in.pick(kHostile);
  }
  // Pages (the rope entry's sessions): a valid page size mostly, a pool of a few pages or of every
  // sequence's capacity.
  if (serving && in.chance(100)) {
    const uint8_t p = in.u8(), n = in.u8();
    o.page_slots = p < 250 ? int64_t{16} << (p % 5) : in.pick(kHostile);
    o.pages = n < 128 ? 0 : n < 250 ? n % 12 + 1 : in.pick(kHostile);
  }
  // A rope: valid mostly, else creation must fail.
  RopeSpec rope;
  if (serving && in.chance(100)) {
    make_rope(in, o.head_dim_qk, rope, fill);
    o.rope = &rope.r;
  }
  GuardTensor storage;
  size_t bytes = 0;
  const bool null_so = in.chance(4), null_sb = in.chance(4);
  const attngen_status ss =
      note(attngen_kv_cache_storage_size(null_so ? nullptr : &o, null_sb ? nullptr : &bytes));
  // A valid cache larger than 1 GiB is a real allocation of that size (libFuzzer's malloc limit):
  // not created here. (One of 2^27 layers of one slot each, 1 GiB, is.)
  size_t need = 0;
  if (attngen_kv_cache_storage_size(&o, &need) == ATTNGEN_OK && need > (size_t{1} << 30)) return;
  if (in.chance(80) && ss == ATTNGEN_OK && bytes <= (64u << 20)) {
    storage.make(ATTNGEN_I8, {{static_cast<int64_t>(bytes)}, {1}}, 0, false);
    storage.poison();
    o.storage = storage.t.data;
  }
  g_call = "kv_cache_create" + dims_string({{"layers", o.layers},
                                            {"batch", o.batch},
                                            {"heads_kv", o.heads_kv},
                                            {"dqk", o.head_dim_qk},
                                            {"dv", o.head_dim_v},
                                            {"capacity", o.capacity},
                                            {"dtype", cache_dtype},
                                            {"window", o.window},
                                            {"page_slots", o.page_slots},
                                            {"pages", o.pages},
                                            {"storage", o.storage != nullptr},
                                            {"rope_dim", o.rope ? rope.r.rotary_dim : -1},
                                            {"rope_pairs", o.rope ? rope.pairs : -1}});
  attngen_kv_cache* cache = reinterpret_cast<attngen_kv_cache*>(0x1);  // must be overwritten
  const bool null_o = in.chance(4), null_cache = in.chance(4);
  const attngen_status cs =
      note(attngen_kv_cache_create(null_o ? nullptr : &o, null_cache ? nullptr : &cache));
  if (o.rope && !null_o) note_kind("kv_cache_create with a rope", cs);
  if (cs != ATTNGEN_OK) {
    if (cache != reinterpret_cast<attngen_kv_cache*>(0x1)) fail("failed create wrote *cache");
    attngen_kv_cache_destroy(nullptr);
    return;
  }
  if (ss != ATTNGEN_OK && !null_so && !null_sb) fail("create succeeded where storage_size failed");
  m.layers = o.layers;
  m.batch = o.batch;
  m.hkv = o.heads_kv;
  m.dqk = o.head_dim_qk;
  m.dv = o.head_dim_v == 0 ? o.head_dim_qk : o.head_dim_v;
  m.capacity = o.capacity;
  m.window = o.window;
  m.dtype = cache_dtype;
  if (o.page_slots != 0) {
    const int64_t p = o.page_slots;
    if (p < 16 || p > 256 || (p & (p - 1)) != 0) fail("page_slots %" PRId64 " accepted", p);
    if (o.pages < 0) fail("pages %" PRId64 " accepted", o.pages);
    m.pages.page_slots = p;
    m.pages.free = o.pages != 0 ? o.pages : o.batch * ((o.capacity + p - 1) / p);
    m.pages.held.assign(static_cast<size_t>(o.batch), {});
  } else if (o.pages != 0) {
    fail("pages %" PRId64 " of a contiguous cache accepted", o.pages);
  }
  if (m.ring() && m.window >= m.capacity) fail("implausible cache accepted");
  if (o.rope) {
    check_rope_accepted(rope, o.head_dim_qk);
    m.rope = &rope;
    // The cache keeps a copy of the frequencies (attngen.h): the caller's may go (NaN now).
    rope.freq.poison();
    // Keys rotated in f32 then rounded to a 16-bit cache: not bit for bit the model's rounding
    // of the rotation in double; the dtype's bound.
    if (m.dtype == ATTNGEN_F16 || m.dtype == ATTNGEN_BF16) m.approx = true;
  }
  // A cache of very many layers is valid (its bookkeeping grows with the layers used, its storage
  // comes as untouched zero pages): too large for the harness's model, created and destroyed only.
  if (m.layers * m.batch > 4096) {
    attngen_kv_cache_destroy(cache);
    return;
  }
  m.k.assign(static_cast<size_t>(m.layers * m.batch), {});
  m.v = m.k;
  bool model_valid = true;
  const std::string created = g_call;

  const int ops = 1 + in.u8() % 8;
  for (int op = 0; op < ops && model_valid; ++op) {
    // (Forks in entry 4's sessions only: the saved inputs of 5 decode as before.)
    const int kind = in.u8() % (serving ? 7 : 6);
    const int64_t layer = layer_index(in, m.layers);
    const int64_t t = dim(in, 4);
    const int64_t B = !in.chance(11) ? m.batch : dim(in, 4);
    Counts counts;
    make_counts(in, counts, B, t);
    std::vector<int64_t> cnt(static_cast<size_t>(std::max<int64_t>(m.batch, 0)), t);
    if (counts.used) cnt = counts.values;
    if (kind == 0 || kind == 1) {
      // append
      const int dt = in.u8() % 3;
      const int kd = dtype_near(in, dt), vd = dtype_near(in, dt);
      GuardTensor k, v;
      k.make(kd, layout_for(in, {B, t, m.hkv, !in.chance(11) ? m.dqk : head_dim(in)}),
             misalign(in, kd), in.chance(3));
      v.make(vd, layout_for(in, {B, t, m.hkv, m.dv}), misalign(in, vd), in.chance(3));
      fill_input(k, fill);
      fill_input(v, fill);
      g_call = created + "; append layer=" + std::to_string(layer) +
               dims_string({{"B", B}, {"t", t}, {"k", kd}, {"v", vd}, {"counts", counts.used}});
      Call c;
      c.inputs = {&k, &v};
      if (counts.used) c.inputs.push_back(&counts.g);
      c.before();
      const attngen_status s = note(attngen_kv_cache_append(
          in.chance(3) ? nullptr : cache, layer, &k.t, &v.t, counts.used ? &counts.g.t : nullptr));
      if (m.rope) note_kind("append to a rope cache", s);
      if (m.pages.page_slots != 0) note_kind("append to a paged cache", s);
      c.after(s);
      if (s == ATTNGEN_ERROR_CAPACITY && layer >= 0 && layer < m.layers && B == m.batch) {
        check_pages(m, layer, cnt, s);
      }
      if (s != ATTNGEN_OK) continue;
      if (layer < 0 || layer >= m.layers || B != m.batch)
        fail("append to a wrong layer or batch accepted");
      for (int64_t x : cnt) {
        if (x < 0 || x > t) fail("count %" PRId64 " outside [0, t] accepted", x);
      }
      check_append_allowed(m, layer, cnt);
      check_pages(m, layer, cnt, s);
      const std::vector<double> kd_ = k.dense(), vd_ = v.dense();
      std::vector<std::vector<std::vector<double>>> kr(static_cast<size_t>(B)),
          vr(static_cast<size_t>(B));
      const int64_t kw = m.hkv * m.dqk, vw = m.hkv * m.dv;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t r = 0; r < t; ++r) {
          kr[b].emplace_back(kd_.begin() + (b * t + r) * kw, kd_.begin() + (b * t + r + 1) * kw);
          vr[b].emplace_back(vd_.begin() + (b * t + r) * vw, vd_.begin() + (b * t + r + 1) * vw);
        }
      }
      model_append(m, layer, cnt, kr, vr);
    } else if (kind == 2) {
      // decode
      const int64_t Hq = m.hkv * (!in.chance(56) ? 1 + in.u8() % 3 : 1) + (in.chance(8) ? 1 : 0);
      const int qdt = !in.chance(36) ? ATTNGEN_F32 : dtype_near(in, in.u8() % 3);
      const int odt = !in.chance(36) ? qdt : dtype_near(in, ATTNGEN_F32);
      GuardTensor q, out;
      q.make(qdt, layout_for(in, {B, t, Hq, m.dqk}), misalign(in, qdt), in.chance(3));
      out.make(odt, layout_for(in, {B, t, Hq, m.dv}), misalign(in, odt), in.chance(3));
      fill_input(q, fill);
      attngen_decode_options d = attngen_decode_options_default();
      bool wild = false;
      d.scale = scale_value(in, m.dqk, wild);
      d.counts = counts.used ? &counts.g.t : nullptr;
      static constexpr int32_t kSplits[] = {0, 0, 0, 1, 2, 3, 7, -1, INT32_MAX, INT32_MIN};
      d.kv_splits = in.pick(kSplits);
      d.kernel = kernel_name(in);
      g_call = created + "; decode layer=" + std::to_string(layer) +
               dims_string({{"B", B},
                            {"t", t},
                            {"Hq", Hq},
                            {"q", qdt},
                            {"out", odt},
                            {"counts", counts.used},
                            {"kv_splits", d.kv_splits}}) +
               " scale=" + std::to_string(d.scale) + " kernel=" + (d.kernel ? d.kernel : "-");
      Call c;
      c.inputs = {&q};
      if (counts.used) c.inputs.push_back(&counts.g);
      c.outputs = {&out};
      c.before();
      const bool null_opts = in.chance(6);
      const attngen_status s = note(attngen_decode(&q.t, in.chance(3) ? nullptr : cache, layer,
                                                   &out.t, null_opts ? nullptr : &d));
      if (m.rope) note_kind("decode over a rope cache", s);
      if (m.pages.page_slots != 0) note_kind("decode over a paged cache", s);
      c.after(s);
      if (s != ATTNGEN_OK) continue;
      if (null_opts) {
        d = attngen_decode_options_default();
        cnt.assign(static_cast<size_t>(m.batch), t);
        wild = false;
      }
      if (layer < 0 || layer >= m.layers || B != m.batch || Hq % m.hkv != 0) {
        fail("decode of a wrong layer, batch or head count accepted");
      }
      for (int64_t b = 0; b < B; ++b) {
        if (cnt[b] < 0 || cnt[b] > t || cnt[b] > m.length(layer, b)) {
          fail("decode of %" PRId64 " rows over %" PRId64 " positions accepted", cnt[b],
               m.length(layer, b));
        }
      }
      ++g_ok_checked;
      if (wild) continue;
      std::vector<double> mag;
      const std::vector<double> want =
          decode_reference(m, layer, rotate_queries(m, layer, q.dense(), B, t, Hq, cnt), B, t, Hq,
                           cnt, d.scale, &mag);
      Tolerance tol = m.tol();
      if (qdt != ATTNGEN_F32 || odt != ATTNGEN_F32) {
        const Tolerance& io = tolerance(qdt != ATTNGEN_F32 ? qdt : odt);
        if (io.rel_l2 > tol.rel_l2) tol = io;
      }
      check_close("decode out", out, want, mag, max_abs_v(m), tol);
    } else if (kind == 3) {
      // MHA decode step: the cache must have Hkv = H and Dqk = Dv = E / H.
      const int64_t H = !in.chance(16) ? m.hkv : dim(in, 4);
      const int64_t E =
          !in.chance(16) && H > 0 && H < 64 && H * m.dqk <= 520 ? H * m.dqk : dim(in, 64);
      const int64_t E3 = E > 0 && E < (1LL << 40) ? 3 * E : E;
      GuardTensor x, in_w, in_b, out_w, out_b, y;
      const int xd = dtype_near(in, ATTNGEN_F32);
      x.make(xd, layout_for(in, {B, t, E}), misalign(in, xd), in.chance(3));
      in_w.make(dtype_near(in, ATTNGEN_F32), layout_for(in, {E3, E}), 0, in.chance(3));
      in_b.make(ATTNGEN_F32, layout_for(in, {E3}), 0, false);
      out_w.make(ATTNGEN_F32, layout_for(in, {E, E}), 0, false);
      out_b.make(ATTNGEN_F32, layout_for(in, {E}), 0, false);
      y.make(dtype_near(in, ATTNGEN_F32), layout_for(in, {B, t, E}), misalign(in, ATTNGEN_F32),
             in.chance(3));
      fill_input(x, fill);
      fill_mha_weights({&in_w, &in_b, &out_w, &out_b}, E, fill);
      attngen_mha_weights w{&in_w.t, in.chance(128) ? &in_b.t : nullptr, &out_w.t,
                            in.chance(128) ? &out_b.t : nullptr};
      attngen_mha_decode_options d = attngen_mha_decode_options_default();
      d.num_heads = !in.chance(11) ? H : in.pick(kHostile);
      d.counts = counts.used ? &counts.g.t : nullptr;
      d.kv_splits = !in.chance(56) ? 0 : in.u8() % 4;
      attngen_tensor y_t = y.t;
      const bool aliased = in.chance(4) && x.mapped();
      if (aliased) y_t.data = x.t.data;
      // y inside the cache's caller-provided storage (the cache is an input, and the step
      // appends to it).
      const bool pick_storage = in.chance(40);
      const bool on_storage = pick_storage && !aliased && o.storage != nullptr;
      if (on_storage) y_t.data = o.storage;
      g_call = created + "; mha_decode layer=" + std::to_string(layer) +
               dims_string({{"B", B},
                            {"t", t},
                            {"E", E},
                            {"H", H},
                            {"num_heads", d.num_heads},
                            {"x", xd},
                            {"counts", counts.used},
                            {"kv_splits", d.kv_splits},
                            {"aliased", aliased},
                            {"y_in_storage", on_storage}});
      Call c;
      c.inputs = {&x, &in_w, &in_b, &out_w, &out_b};
      if (counts.used) c.inputs.push_back(&counts.g);
      if (!aliased) c.outputs = {&y};
      c.before();
      if (aliased) c.inputs.clear();
      const attngen_status s =
          note(attngen_mha_decode(&x.t, &w, in.chance(3) ? nullptr : cache, layer, &y_t, &d));
      if (m.rope) note_kind("mha_decode over a rope cache", s);
      c.after(s);
      if (s == ATTNGEN_ERROR_KERNEL) model_valid = false;  // the tokens may be appended
      if (s != ATTNGEN_OK) continue;
      if (aliased) fail("an MHA decode output aliasing its input accepted");
      if (on_storage) fail("an MHA decode output inside the cache's storage accepted");
      if (layer < 0 || layer >= m.layers || B != m.batch || d.num_heads != m.hkv ||
          E != m.hkv * m.dqk || m.dqk != m.dv) {
        fail("an MHA decode step that does not fit the cache accepted");
      }
      for (int64_t x_ : cnt) {
        if (x_ < 0 || x_ > t) fail("count %" PRId64 " outside [0, t] accepted", x_);
      }
      check_append_allowed(m, layer, cnt);
      check_pages(m, layer, cnt, s);
      // Reference: projections, append, decode, out_proj.
      const std::vector<double> bin = w.in_proj_bias ? in_b.dense() : std::vector<double>{};
      const std::vector<double> qkv =
          attngen::test::reference_linear(x.dense(), B * t, E, in_w.dense(), 3 * E, bin);
      std::vector<std::vector<std::vector<double>>> kr(static_cast<size_t>(B)),
          vr(static_cast<size_t>(B));
      std::vector<double> qd(static_cast<size_t>(B * t * E));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t r = 0; r < t; ++r) {
          const auto row = qkv.begin() + (b * t + r) * 3 * E;
          std::copy(row, row + E, qd.begin() + (b * t + r) * E);
          kr[b].emplace_back(row + E, row + 2 * E);
          vr[b].emplace_back(row + 2 * E, row + 3 * E);
        }
      }
      model_append(m, layer, cnt, kr, vr);
      if (m.dtype != ATTNGEN_F32) m.approx = true;
      std::vector<double> attn_mag;
      // Over a rope cache the projected k was rotated as appended, and q is rotated here.
      const std::vector<double> attn =
          decode_reference(m, layer, rotate_queries(m, layer, qd, B, t, m.hkv, cnt), B, t, m.hkv,
                           cnt, 0.0, &attn_mag);
      const std::vector<double> bout = w.out_proj_bias ? out_b.dense() : std::vector<double>{};
      const std::vector<double> want =
          attngen::test::reference_linear(attn, B * t, E, out_w.dense(), E, bout);
      const std::vector<double> mag = attngen::test::reference_linear(
          attn_mag, B * t, E, abs_of(out_w.dense()), E, abs_of(bout));
      ++g_ok_checked;
      check_close("mha_decode y", y, want, mag, max_abs(mag), m.tol());
    } else if (kind == 4) {
      const int64_t seq = !in.chance(16) && m.batch > 0 ? in.u8() % m.batch : in.pick(kHostile);
      int64_t len = -7;
      g_call = created + "; length layer=" + std::to_string(layer) + " seq=" + std::to_string(seq);
      const attngen_status s = note(attngen_kv_cache_length(in.chance(3) ? nullptr : cache, layer,
                                                            seq, in.chance(3) ? nullptr : &len));
      if (s != ATTNGEN_OK) {
        if (len != -7) fail("a failed length call wrote its result");
        continue;
      }
      if (layer < 0 || layer >= m.layers || seq < 0 || seq >= m.batch)
        fail("length of a wrong sequence");
      if (len != m.length(layer, seq)) {
        fail("length %" PRId64 ", expected %" PRId64, len, m.length(layer, seq));
      }
    } else if (kind == 6) {
      const auto sequence = [&] {
        return !in.chance(16) && m.batch > 0 ? in.u8() % m.batch : in.pick(kHostile);
      };
      const int64_t from = sequence(), to = sequence();
      g_call = created + "; fork from=" + std::to_string(from) + " to=" + std::to_string(to);
      const attngen_status s =
          note(attngen_kv_cache_fork(in.chance(3) ? nullptr : cache, from, to));
      note_kind(m.pages.page_slots != 0 ? "fork in a paged cache" : "fork", s);
      bool valid = from >= 0 && from < m.batch && to >= 0 && to < m.batch && from != to;
      for (int64_t l = 0; valid && l < m.layers; ++l) valid = m.length(l, to) == 0;
      if (s != ATTNGEN_OK) {
        if (s != ATTNGEN_ERROR_NULL_POINTER && valid) fail("a valid fork refused");
        continue;
      }
      if (!valid) fail("an invalid fork accepted");
      for (int64_t l = 0; l < m.layers; ++l) {
        m.k[static_cast<size_t>(l * m.batch + to)] = m.k[static_cast<size_t>(l * m.batch + from)];
        m.v[static_cast<size_t>(l * m.batch + to)] = m.v[static_cast<size_t>(l * m.batch + from)];
      }
      if (m.pages.page_slots != 0) m.pages.fork(from, to);
    } else {
      const int64_t seq = !in.chance(56) && m.batch > 0 ? in.u8() % m.batch
                          : in.chance(128)              ? -1
                                                        : in.pick(kHostile);
      g_call = created + "; reset seq=" + std::to_string(seq);
      const attngen_status s = note(attngen_kv_cache_reset(in.chance(3) ? nullptr : cache, seq));
      if (s != ATTNGEN_OK) continue;
      if (seq < -1 || seq >= m.batch) fail("reset of a wrong sequence accepted");
      for (int64_t l = 0; l < m.layers; ++l) {
        for (int64_t b = 0; b < m.batch; ++b) {
          if (seq == -1 || seq == b) {
            m.k[static_cast<size_t>(l * m.batch + b)].clear();
            m.v[static_cast<size_t>(l * m.batch + b)].clear();
          }
        }
      }
      for (int64_t b = 0; m.pages.page_slots != 0 && b < m.batch; ++b) {
        if (seq == -1 || seq == b) m.pages.release(b);
      }
    }
    // Nothing lost: the pool's free pages are the model's.
    if (model_valid && m.pages.page_slots != 0) {
      int64_t free = -1;
      if (attngen_kv_cache_free_pages(cache, &free) != ATTNGEN_OK || free != m.pages.free) {
        fail("%" PRId64 " free pages, the model counts %" PRId64, free, m.pages.free);
      }
    }
  }
  attngen_kv_cache_destroy(cache);
}

}  // namespace attngen::fuzz
