// libFuzzer harness over the whole C API (issue 17). Each input is decoded into one structured
// call (or, for the KV cache, a short session of calls): shapes, strides, dtypes, options and
// pointers, small and valid most of the time and hostile sometimes. Every tensor lives in its own
// mapping between two PROT_NONE guard pages, its span ending at the upper one, so any read or
// write outside the span faults. The runtime is built with ASan and UBSan (no recover).
//
// The oracle (docs/semantics.md):
// - a call that fails leaves every byte of its outputs as it was (compared byte for byte with a
//   copy), never writes its inputs, and says why (attngen_last_error() not empty);
// - a call that succeeds matches the float64 reference (tests/reference.h) within the tolerance
//   of its storage dtype (tests/tensor.h), writes every output element (outputs are poisoned with
//   a NaN of their dtype) and nothing between them.
// A violation prints what was wrong and traps; libFuzzer saves the input.
//
// ATTNGEN_FUZZ_KNOWN=all (or "3,5") turns the exclusions off. ATTNGEN_FUZZ_NONFINITE=1 also injects
// NaN and Inf into the inputs (more of them into keys a row cannot attend) and checks the
// contract's rules for them against an IEEE float64 reference: keys a row does not attend never
// affect it, and a non-finite value reaches exactly the rows that read it. Not part of CI (the
// kernels are being fixed for it).
//
// Exclusions of known, not yet fixed bugs are marked KNOWN(issue17-N) (guarded by excluded(N)):
// remove when fixed. None is open: the nine found so far are fixed and replayed as
// tests/fuzz/regressions/fixed<N>-*.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace {

using attngen::test::BFloat16;
using attngen::test::ElementTraits;
using attngen::test::Half;
using attngen::test::RefAttention;
using attngen::test::Tolerance;
using attngen::test::View;

// ---------------------------------------------------------------------------------------------
// Failures, statistics

std::string g_call;  // what the current input does, printed with a failure

[[noreturn]] void fail(const char* fmt, ...) {
  std::fprintf(stderr, "\n== attngen fuzz finding: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n== call: %s\n== last error: '%s'\n", g_call.c_str(),
               attngen_last_error());
  __builtin_trap();
}

constexpr int kStatuses = ATTNGEN_ERROR_WORKSPACE + 1;
uint64_t g_status_count[kStatuses + 1];  // the last slot: values outside the enum
uint64_t g_calls = 0, g_ok_checked = 0;

void print_stats() {
  std::fprintf(stderr,
               "== attngen fuzz: %" PRIu64 " API calls, %" PRIu64
               " successful calls checked against the reference; statuses:\n",
               g_calls, g_ok_checked);
  for (int s = 0; s <= kStatuses; ++s) {
    if (g_status_count[s] == 0) continue;
    std::fprintf(stderr, "==   %-34s %" PRIu64 "\n",
                 s < kStatuses ? attngen_status_name(static_cast<attngen_status>(s)) : "(other)",
                 g_status_count[s]);
  }
}

bool g_nonfinite = false;  // ATTNGEN_FUZZ_NONFINITE=1

// Counts a returned status; an error must come with a message, success with none.
attngen_status note(attngen_status s) {
  ++g_calls;
  ++g_status_count[(s >= 0 && s < kStatuses) ? s : kStatuses];
  if (s < 0 || s >= kStatuses) fail("status %d is not an attngen_status", static_cast<int>(s));
  const char* msg = attngen_last_error();
  if (msg == nullptr) fail("attngen_last_error() is NULL");
  if (s != ATTNGEN_OK && msg[0] == '\0') fail("%s with an empty message", attngen_status_name(s));
  if (s == ATTNGEN_OK && msg[0] != '\0') fail("OK with the message '%s'", msg);
  return s;
}

// ---------------------------------------------------------------------------------------------
// The input

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
  // true with probability about k/256; false once the input is used up (the usual path)
  bool chance(int k) { return n_ > 0 && u8() >= 256 - k; }
  template <typename T, size_t N>
  T pick(const T (&options)[N]) {
    return options[u8() % N];
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Hostile sizes: zero, negative, just past 32 bits, huge, the extremes.
constexpr int64_t kHostile[] = {0,         -1,        -2,        INT64_MIN, INT64_MAX,   1LL << 31,
                                1LL << 32, 1LL << 40, INT32_MAX, 1LL << 62, -(1LL << 40)};

// A size: 1..max most of the time, sometimes hostile (0 more often than the rest).
int64_t dim(Input& in, int64_t max) {
  const uint8_t b = in.u8();
  if (b < 240) return 1 + b % max;
  if (b < 246) return 0;
  return in.pick(kHostile);
}

// Head dims: small odd ones and the buckets' edges (specialised 64, generic 128/256/512).
int64_t head_dim(Input& in) {
  static constexpr int64_t kDims[] = {1,   2,   3,  5,  7,  8,   16,  24,  31,  32,  40,
                                      63,  64,  65, 80, 96, 127, 128, 129, 200, 256, 257,
                                      512, 513, 64, 64, 32, 16,  8,   4,   12,  3};
  const uint8_t b = in.u8();
  if (b < 248) return kDims[b % (sizeof kDims / sizeof kDims[0])];
  return dim(in, 8);
}

// Enum fields are filled as ints (memcpy): a C caller may store any int there, and the harness
// itself never loads an enum lvalue holding a value outside the enum (UBSan's -fsanitize=enum).
template <typename E>
void put_enum(E& field, int value) {
  static_assert(sizeof(E) == sizeof(int), "attngen enums are int-sized");
  std::memcpy(&field, &value, sizeof value);
}

// Whether the KNOWN(issue17-<id>) exclusion is active. ATTNGEN_FUZZ_KNOWN turns exclusions off to
// check fixes or reproduce: "all", or a list of ids ("3,5").
const char* g_known_off = nullptr;

[[maybe_unused]] bool excluded(int id) {
  if (g_known_off == nullptr || g_known_off[0] == '\0') return true;
  if (std::strcmp(g_known_off, "all") == 0) return false;
  const std::string list = std::string(",") + g_known_off + ",";
  return list.find("," + std::to_string(id) + ",") == std::string::npos;
}

// Out-of-range enum values a C caller may pass.
int bad_enum(Input& in) {
  static constexpr int kBad[] = {-1, 2, 3, 5, 6, 7, 0x7fffffff, INT32_MIN, 0x40000000};
  int v = in.pick(kBad);
  return v;
}

// A dtype: mostly `usual`, sometimes another float type, sometimes not a float type at all.
int dtype_near(Input& in, int usual) {
  const uint8_t b = in.u8();
  if (b < 200) return usual;
  if (b < 240) return b % 6;  // F32, F16, BF16, BOOL, I32, I8
  return bad_enum(in);
}

// An enum value: one of the valid_count first values mostly, sometimes an invalid one.
int enum_value(Input& in, int valid_count) {
  const uint8_t b = in.u8();
  if (b < 236) return b % valid_count;
  return bad_enum(in);
}

// a + b without overflow (hostile sizes are near the limits).
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

// A stored value read back as an int32 (a kv_len or count tensor of a float dtype stores
// infinities and fractions; such a call must fail anyway, the value only has to be defined).
int32_t as_i32(double x) {
  if (!std::isfinite(x)) return INT32_MIN;
  return static_cast<int32_t>(std::max(-2147483648.0, std::min(2147483647.0, x)));
}

size_t element_size(int d) {
  switch (d) {
    case ATTNGEN_F32:
    case ATTNGEN_I32:
      return 4;
    case ATTNGEN_F16:
    case ATTNGEN_BF16:
      return 2;
    default:
      return 1;  // BOOL, I8, and (for allocation) invalid dtypes
  }
}

// ---------------------------------------------------------------------------------------------
// Guarded tensors

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
// Spans up to this are mapped (lazily: untouched pages cost nothing) so a call that accepts a
// sparse tensor with large strides runs on real memory; larger ones get a token page, and the
// call must refuse them (every tensor must span less than 2^31 bytes).
constexpr uint64_t kMaxMapped = 1ull << 32;
// Spans up to this are poisoned and compared whole; larger ones element by element.
constexpr uint64_t kMaxCompared = 1ull << 22;
constexpr int64_t kMaxElements = 1 << 20;  // logical elements we fill or check

struct Layout {
  std::vector<int64_t> shape, strides;
};

// A tensor in its own mapping: [guard][... span ...][slack][guard]. Owns the mapping.
class GuardTensor {
 public:
  attngen_tensor t{};
  bool is_output = false;

  GuardTensor() = default;
  GuardTensor(const GuardTensor&) = delete;
  GuardTensor& operator=(const GuardTensor&) = delete;
  ~GuardTensor() {
    if (map_ != nullptr) munmap(map_, map_len_);
  }

  // Describes and allocates. misalign: bytes of slack after the span (the data pointer then is
  // not a multiple of the element size when misalign is not).
  void make(int dtype, const Layout& l, size_t misalign, bool null_data) {
    dtype_ = dtype;
    put_enum(t.dtype, dtype);
    t.rank = static_cast<int32_t>(l.shape.size());
    for (size_t d = 0; d < l.shape.size() && d < ATTNGEN_MAX_RANK; ++d) {
      t.shape[d] = l.shape[d];
      t.strides[d] = l.strides[d];
    }
    es_ = element_size(dtype);
    compute_span();
    // Mapped wherever the memory span is bounded, whatever the count of logical elements: the
    // API accepts a tensor whose broadcast (stride 0) dimensions make 2^40 elements or more of a
    // small span, and reads it (a block-sparse layout of [2^28, 2^27] with strides [0, 1] in
    // attngen_pattern_attends read unmapped memory: regression fixed13-*).
    uint64_t bytes = 0;
    if (span_bounded_) bytes = static_cast<uint64_t>(hi_ - lo_ + 1) * es_;
    if (logical_ == 0) bytes = 0;
    mapped_ = span_bounded_ && bytes <= kMaxMapped;
    if (!mapped_) bytes = 0;
    const size_t body = ((bytes + misalign + kPage - 1) / kPage) * kPage;
    map_len_ = body + 2 * kPage;
    void* m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "mmap of %zu bytes failed\n", map_len_);
      std::abort();
    }
    map_ = static_cast<uint8_t*>(m);
    mprotect(map_, kPage, PROT_NONE);
    mprotect(map_ + kPage + body, kPage, PROT_NONE);
    end_ = map_ + kPage + body;
    begin_ = end_ - bytes - misalign;
    // The data pointer: element lo_ is at begin_.
    data_ = begin_ - (mapped_ && logical_ > 0 ? lo_ * static_cast<int64_t>(es_) : 0);
    t.data = null_data ? nullptr : static_cast<void*>(data_);
  }

  bool mapped() const { return mapped_; }
  int64_t logical() const { return logical_; }
  bool small() const { return mapped_ && logical_ <= kMaxElements; }
  // Whether the span fits in 2^31 bytes (what the API accepts).
  bool addressable() const {
    return span_ok_ && (logical_ == 0 || static_cast<uint64_t>(hi_ - lo_ + 1) * es_ < (1ull << 31));
  }
  size_t es() const { return es_; }
  int dtype() const { return dtype_; }
  uint8_t* at(int64_t off) const { return data_ + off * static_cast<int64_t>(es_); }

  // Calls f(dense index, element offset) over the logical elements (only for small tensors).
  template <typename F>
  void for_each(F f) const {
    if (!small() || logical_ == 0) return;
    const int rank = t.rank;
    std::array<int64_t, ATTNGEN_MAX_RANK> idx{};
    for (int64_t e = 0; e < logical_; ++e) {
      int64_t off = 0;
      for (int d = 0; d < rank; ++d) off += idx[d] * t.strides[d];
      f(e, off);
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
  }

  // Fills the whole mapped region with a byte pattern of the dtype (anchored at data).
  void poison() {
    if (!mapped_) return;
    uint8_t pat[4];
    poison_bytes(pat);
    if (end_ - begin_ <= static_cast<ptrdiff_t>(kMaxCompared)) {
      for (uint8_t* b = begin_; b < end_; ++b) {
        pat_at(b, pat);
      }
    } else {
      for_each([&](int64_t, int64_t off) {
        for (size_t k = 0; k < es_; ++k) pat_at(at(off) + k, pat);
      });
    }
  }

  // A copy of what the call may not change: the whole region, or the logical elements.
  std::vector<uint8_t> snapshot() const {
    std::vector<uint8_t> s;
    if (!mapped_) return s;
    if (end_ - begin_ <= static_cast<ptrdiff_t>(kMaxCompared)) {
      s.assign(begin_, end_);
    } else {
      for_each([&](int64_t, int64_t off) { s.insert(s.end(), at(off), at(off) + es_); });
    }
    return s;
  }

  bool unchanged(const std::vector<uint8_t>& s) const { return snapshot() == s; }

  // The region's bytes that are not logical elements, as they must still be after a call.
  bool gaps_unchanged(const std::vector<uint8_t>& before) const {
    if (!mapped_ || end_ - begin_ > static_cast<ptrdiff_t>(kMaxCompared)) return true;
    std::vector<uint8_t> now(begin_, end_);
    std::vector<bool> logical(now.size(), false);
    for_each([&](int64_t, int64_t off) {
      for (size_t k = 0; k < es_; ++k) logical[static_cast<size_t>(at(off) + k - begin_)] = true;
    });
    for (size_t i = 0; i < now.size(); ++i) {
      if (!logical[i] && now[i] != before[i]) return false;
    }
    return true;
  }

  double get(int64_t off) const {
    const uint8_t* p = at(off);
    switch (dtype_) {
      case ATTNGEN_F32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case ATTNGEN_F16: {
        Half h;
        std::memcpy(&h.bits, p, 2);
        return ElementTraits<Half>::to_double(h);
      }
      case ATTNGEN_BF16: {
        BFloat16 h;
        std::memcpy(&h.bits, p, 2);
        return ElementTraits<BFloat16>::to_double(h);
      }
      case ATTNGEN_I32: {
        int32_t i;
        std::memcpy(&i, p, 4);
        return i;
      }
      case ATTNGEN_I8:
        return static_cast<int8_t>(*p);
      default:
        return *p;
    }
  }

  // Stores x rounded to the dtype (float types), and returns what was stored.
  double set(int64_t off, double x) {
    uint8_t* p = at(off);
    switch (dtype_) {
      case ATTNGEN_F32: {
        const float f = static_cast<float>(x);
        std::memcpy(p, &f, 4);
        return f;
      }
      case ATTNGEN_F16: {
        const Half h = ElementTraits<Half>::from_double(x);
        std::memcpy(p, &h.bits, 2);
        return ElementTraits<Half>::to_double(h);
      }
      case ATTNGEN_BF16: {
        const BFloat16 h = ElementTraits<BFloat16>::from_double(x);
        std::memcpy(p, &h.bits, 2);
        return ElementTraits<BFloat16>::to_double(h);
      }
      default: {
        // Integer types (and invalid dtypes, stored as bytes): random floats become integers.
        const double c = std::isfinite(x) ? std::max(-2147483648.0, std::min(2147483647.0, x)) : 0;
        const int32_t i = static_cast<int32_t>(c);
        if (dtype_ == ATTNGEN_I32) {
          std::memcpy(p, &i, 4);
          return i;
        }
        *p = static_cast<uint8_t>(i & 0xff);
        return dtype_ == ATTNGEN_I8 ? static_cast<int8_t>(*p) : *p;
      }
    }
  }

  // Whether the element still holds the poison of the dtype (an element the call did not write).
  bool is_poison(int64_t off) const {
    uint8_t pat[4];
    poison_bytes(pat);
    for (size_t k = 0; k < es_; ++k) {
      if (at(off)[k] != pat[k]) return false;
    }
    return true;
  }

  // Logical elements as doubles, densely (row-major).
  std::vector<double> dense() const {
    std::vector<double> v(static_cast<size_t>(small() ? logical_ : 0));
    for_each([&](int64_t e, int64_t off) { v[static_cast<size_t>(e)] = get(off); });
    return v;
  }

 private:
  void poison_bytes(uint8_t pat[4]) const {
    uint32_t bits = 0xa5a5a5a5u;
    if (dtype_ == ATTNGEN_F32) bits = 0x7fc0deadu;
    if (dtype_ == ATTNGEN_F16) bits = 0x7e5d7e5du;
    if (dtype_ == ATTNGEN_BF16) bits = 0x7fde7fdeu;
    std::memcpy(pat, &bits, 4);
  }
  void pat_at(uint8_t* b, const uint8_t pat[4]) const {
    const int64_t rel = b - data_;
    const int64_t e = static_cast<int64_t>(es_);
    *b = pat[((rel % e) + e) % e];
  }

  // The span [lo_, hi_] in elements, with overflow checks; span_ok_ false if it overflows.
  void compute_span() {
    logical_ = 1;
    lo_ = hi_ = 0;
    span_ok_ = span_bounded_ = t.rank >= 0 && t.rank <= ATTNGEN_MAX_RANK;
    if (!span_ok_) return;
    for (int d = 0; d < t.rank; ++d) {
      if (t.shape[d] <= 0) {
        logical_ = 0;
        continue;
      }
      if (__builtin_mul_overflow(logical_, t.shape[d], &logical_)) {
        logical_ = INT64_MAX;
        span_ok_ = false;
      }
      __int128 ext = static_cast<__int128>(t.shape[d] - 1) * t.strides[d];
      if (ext > (static_cast<__int128>(1) << 62) || ext < -(static_cast<__int128>(1) << 62)) {
        span_ok_ = span_bounded_ = false;
        continue;
      }
      if (ext > 0) hi_ = sat_add(hi_, static_cast<int64_t>(ext));
      if (ext < 0) lo_ = sat_add(lo_, static_cast<int64_t>(ext));
    }
    if (t.rank >= 0 && logical_ < 0) span_ok_ = false;
    if (logical_ > (1LL << 40)) span_ok_ = false;
    if (hi_ > (1LL << 40) || lo_ < -(1LL << 40)) span_ok_ = span_bounded_ = false;
  }

  uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
  uint8_t *begin_ = nullptr, *end_ = nullptr, *data_ = nullptr;
  size_t es_ = 4;
  int dtype_ = ATTNGEN_F32;
  int64_t lo_ = 0, hi_ = 0, logical_ = 0;
  // span_bounded_: [lo_, hi_] computed without overflow and within 2^40 elements; span_ok_:
  // that and at most 2^40 logical elements.
  bool span_ok_ = false, span_bounded_ = false, mapped_ = false;
};

// Strides for a shape: contiguous most of the time, else padded, broadcast (0), negative,
// overlapping, huge, or an innermost stride other than 1.
Layout layout_for(Input& in, std::vector<int64_t> shape) {
  Layout l{shape, std::vector<int64_t>(shape.size(), 0)};
  const uint8_t mode = in.u8();
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    l.strides[d] = stride;
    int64_t extent = shape[d] > 0 ? shape[d] : 1;
    if (mode >= 160 && mode < 200 && d < static_cast<int>(shape.size()) - 1) {
      extent = sat_add(extent, in.u8() % 5);  // padded
    }
    if (__builtin_mul_overflow(stride, extent, &stride)) stride = INT64_MAX / 2;
  }
  if (mode >= 200 && !shape.empty()) {
    const size_t d = in.u8() % shape.size();
    static constexpr int64_t kStrides[] = {
        0, -1, -3, 2, 1, 1LL << 31, 1LL << 40, INT64_MAX, INT64_MIN, 1LL << 20, -(1LL << 40), 7};
    l.strides[d] = in.pick(kStrides);
  }
  return l;
}

// ---------------------------------------------------------------------------------------------
// Data

struct Fill {
  std::mt19937_64 rng;
  bool nonfinite = false;
  double lo = -1, hi = 1;
};

double random_value(Fill& f) {
  std::uniform_real_distribution<double> u(f.lo, f.hi);
  if (f.nonfinite && (f.rng() & 63) == 0) {
    static constexpr double kBad[] = {std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity()};
    return kBad[f.rng() % 3];
  }
  return u(f.rng);
}

// Fills an input's gaps with a NaN of its dtype (padding is often uninitialised; a kernel must
// not read it) and its elements with random values rounded to its dtype.
void fill_input(GuardTensor& g, Fill& f) {
  g.poison();
  g.for_each([&](int64_t, int64_t off) { g.set(off, random_value(f)); });
}

// ---------------------------------------------------------------------------------------------
// Checking calls

// The tensors of one call: inputs (must not change) and outputs (poisoned; unchanged on error).
struct Call {
  std::vector<GuardTensor*> inputs, outputs;
  std::vector<std::vector<uint8_t>> in_before, out_before;

  void before() {
    for (GuardTensor* o : outputs) o->poison();
    in_before.clear();
    out_before.clear();
    for (GuardTensor* i : inputs) in_before.push_back(i->snapshot());
    for (GuardTensor* o : outputs) out_before.push_back(o->snapshot());
  }

  // After a call: inputs intact; on error outputs intact; on success no gap written.
  void after(attngen_status s) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k]->unchanged(in_before[k])) fail("input %zu was written", k);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (s != ATTNGEN_OK && !outputs[k]->unchanged(out_before[k])) {
        fail("output %zu written although the call returned %s", k, attngen_status_name(s));
      }
      if (s == ATTNGEN_OK && !outputs[k]->gaps_unchanged(out_before[k])) {
        fail("output %zu: bytes between its elements were written", k);
      }
    }
  }
};

// The arguments of an attention call that returned `status`, through a plan: its creation
// returns the same status (and no plan on error); on success, its run over the same data writes
// what the call wrote, bit for bit (the outputs poisoned again first, inputs left intact). Every
// fourth call, as creation measures the kernel twice.
void check_plan(Call& c, attngen_status status, const attngen_tensor* q, const attngen_tensor* k,
                const attngen_tensor* v, const attngen_tensor* out,
                const attngen_attention_options* o) {
  static uint64_t planned = 0;
  if (planned++ % 4 != 0) return;
  std::vector<std::vector<uint8_t>> called;
  for (const GuardTensor* g : c.outputs) called.push_back(g->snapshot());
  attngen_attention_plan* plan = reinterpret_cast<attngen_attention_plan*>(&c);
  const attngen_status created = attngen_attention_plan_create(q, k, v, out, o, &plan);
  if (created != status) {
    fail("plan creation returned %s, the call %s", attngen_status_name(created),
         attngen_status_name(status));
  }
  if (created != ATTNGEN_OK) {
    if (plan != nullptr) fail("a failed plan creation left a plan");
    return;
  }
  attngen_attention_data d = attngen_attention_data_default();
  d.q = q->data;
  d.k = k->data;
  d.v = v->data;
  d.out = out->data;
  if (o != nullptr) {
    if (o->kv_len != nullptr) d.kv_len = o->kv_len->data;
    if (o->mask_tensor != nullptr) d.mask_tensor = o->mask_tensor->data;
    if (o->pattern.layout != nullptr) d.layout = o->pattern.layout->data;
    if (o->weights != nullptr) d.weights = o->weights->data;
    if (o->lse != nullptr) d.lse = o->lse->data;
  }
  c.before();
  const attngen_status ran = note(attngen_attention_plan_run(plan, &d));
  c.after(ran);
  attngen_attention_plan_destroy(plan);
  if (ran != ATTNGEN_OK) {
    fail("the plan's run returned %s where the call succeeded: %s", attngen_status_name(ran),
         attngen_last_error());
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    if (!c.outputs[i]->unchanged(called[i])) {
      fail("output %zu of the plan's run differs from the call's", i);
    }
  }
}

// Whether a tensor has exactly this shape (what a successful call must have been given).
bool has_shape(const GuardTensor& g, std::initializer_list<int64_t> shape) {
  if (g.t.rank != static_cast<int32_t>(shape.size())) return false;
  int d = 0;
  for (int64_t s : shape) {
    if (g.t.shape[d++] != s) return false;
  }
  return true;
}

std::string shape_of(const GuardTensor& g) {
  std::string s = "[";
  for (int d = 0; d < g.t.rank && d < ATTNGEN_MAX_RANK; ++d) {
    s += (d ? ", " : "") + std::to_string(g.t.shape[d]);
  }
  return s + "]";
}

// A tensor for the report of a finding: dtype, shape, strides, where its data lies.
std::string describe(const char* name, const GuardTensor& g) {
  std::string s = std::string(" ") + name + "{dtype " + std::to_string(g.dtype()) + " shape " +
                  shape_of(g) + " strides [";
  for (int d = 0; d < g.t.rank && d < ATTNGEN_MAX_RANK; ++d) {
    s += (d ? ", " : "") + std::to_string(g.t.strides[d]);
  }
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", g.t.data);
  return s + "] data " + addr + "}";
}

// The tensors of a successful call: each must span less than 2^31 bytes (docs/semantics.md).
void check_accepted(std::initializer_list<const GuardTensor*> ts) {
  int k = 0;
  for (const GuardTensor* g : ts) {
    if (!g->addressable()) fail("tensor %d, spanning 2^31 bytes or more, was accepted", k);
    if (!g->small())
      fail("tensor %d (%" PRId64 " elements) accepted but not checkable", k, g->logical());
    ++k;
  }
}

Tolerance tolerance(int d) { return attngen::test::tolerance_for(d); }

// got (the output's logical elements) against the reference within the tolerance of `dtype`
// (docs/semantics.md, "Precision and tolerance"); every element written; NaN and infinities
// exactly where the reference has them.
//
// The contract's relative L2 bound is meant for fresh random inputs, whose outputs have many
// elements; a fuzzed call may have one output element that is a sum cancelling to almost 0
// (a dot product of 512 terms giving 0.12), which no float32 arithmetic meets relative to
// itself. So the denominator is the larger of the reference's norm and the norm of `mag`, the
// same sums over absolute values (sum |x w|, sum p |v|), which bounds the terms' size. For the
// random inputs of the tests the two differ by a small factor (~sqrt(Skv)); errors of a wrong
// result are of the order of the values themselves and still fail. mag empty: want itself.
void check_close(const char* what, const GuardTensor& out, const std::vector<double>& want,
                 const std::vector<double>& mag, double max_abs_v, const Tolerance& tol) {
  if (!out.small()) fail("%s: a successful call with an output we cannot check", what);
  std::vector<double> got = out.dense();
  if (got.size() != want.size())
    fail("%s: %zu elements, reference %zu", what, got.size(), want.size());
  double err2 = 0, ref2 = 0, max_err = 0;
  size_t worst = 0;
  out.for_each([&](int64_t idx, int64_t off) {
    if (out.is_poison(off)) fail("%s: element %" PRId64 " not written", what, idx);
  });
  for (size_t i = 0; i < got.size(); ++i) {
    const bool gf = std::isfinite(got[i]), wf = std::isfinite(want[i]);
    if (gf != wf || (!gf && (std::isnan(got[i]) != std::isnan(want[i]) ||
                             (!std::isnan(got[i]) && got[i] != want[i])))) {
      fail("%s: element %zu is %g, reference %g", what, i, got[i], want[i]);
    }
    if (!gf) continue;
    const double d = got[i] - want[i];
    err2 += d * d;
    ref2 += want[i] * want[i];
    if (std::abs(d) > max_err) {
      max_err = std::abs(d);
      worst = i;
    }
  }
  double mag2 = 0;
  for (double x : mag) {
    if (std::isfinite(x)) mag2 += x * x;
  }
  ref2 = std::max(ref2, mag2);
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (rel > tol.rel_l2) {
    fail("%s: relative L2 error %g > %g (worst element %zu: %g, reference %g)", what, rel,
         tol.rel_l2, worst, got[worst], want[worst]);
  }
  if (tol.abs_per_max > 0 && max_err > tol.abs_per_max * max_abs_v + tol.abs_floor) {
    fail("%s: max abs error %g > %g (element %zu: %g, reference %g)", what, max_err,
         tol.abs_per_max * max_abs_v + tol.abs_floor, worst, got[worst], want[worst]);
  }
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) {
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  }
  return m;
}

bool is_float(int d) { return d == ATTNGEN_F32 || d == ATTNGEN_F16 || d == ATTNGEN_BF16; }

// A float32 dense copy of a float tensor, and its View (what the reference reads).
struct Dense {
  std::vector<float> data;
  View view;
};

Dense dense_of(const GuardTensor& g) {
  Dense d;
  for (double x : g.dense()) d.data.push_back(static_cast<float>(x));
  std::vector<int64_t> strides(static_cast<size_t>(g.t.rank), 1);
  for (int i = g.t.rank - 2; i >= 0; --i) strides[i] = strides[i + 1] * g.t.shape[i + 1];
  d.view = View{d.data.data(), std::vector<int64_t>(g.t.shape, g.t.shape + g.t.rank), strides};
  return d;
}

const char* kernel_name(Input& in) {
  const uint8_t b = in.u8();
  if (b < 200) return nullptr;
  if (b < 240 && attngen_kernel_count() > 0) {
    return attngen_kernel_at(in.u8() % attngen_kernel_count())->name;
  }
  static const char* const kNames[] = {"", "no_such_kernel", "attention", "avx2"};
  return in.pick(kNames);
}

// Well-conditioned options: the reference comparison is meaningful (scores of moderate size).
float scale_value(Input& in, int64_t dqk, bool& wild) {
  const uint8_t b = in.u8();
  const float def = dqk > 0 && dqk < (1 << 20) ? 1.0f / std::sqrt(static_cast<float>(dqk)) : 1.0f;
  if (b < 150) return 0.0f;
  if (b < 230) return def * (static_cast<float>(in.u8()) / 64.0f - 2.0f);
  wild = true;
  static constexpr float kWild[] = {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    1e30f,
                                    -1e30f,
                                    std::numeric_limits<float>::denorm_min(),
                                    -0.0f,
                                    1e4f};
  return in.pick(kWild);
}

// ---------------------------------------------------------------------------------------------
// Patterns

// A pattern as the harness knows it: the kind as an int (it may be invalid) and the layout's
// values densely.
struct PatternSpec {
  int kind = ATTNGEN_PATTERN_NONE;
  attngen_pattern p{};
  bool has_layout = false;
  std::vector<uint8_t> layout;  // dense [rows, cols] when the layout tensor is rank 2
  int64_t rows = 0, cols = 0;
};

// The contract's patterns (docs/semantics.md), written independently of the runtime.
bool pattern_attends_ref(const PatternSpec& s, int64_t pos, int64_t i, int64_t j) {
  const attngen_pattern& p = s.p;
  const int64_t d = pos - j;
  switch (s.kind) {
    case ATTNGEN_PATTERN_NONE:
      return true;
    case ATTNGEN_PATTERN_WINDOW:
      return (p.window_left < 0 || j >= pos - p.window_left) &&
             (p.window_right < 0 || j <= pos + p.window_right);
    case ATTNGEN_PATTERN_STRIDED:
      return std::abs(d) < p.stride || d % p.stride == 0;
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      const int64_t r = i / p.block, c = j / p.block;
      if (r >= s.rows || c >= s.cols) return false;
      return s.layout[static_cast<size_t>(r * s.cols + c)] != 0;
    }
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return std::abs(d) <= p.local || j < p.global_tokens || pos < p.global_tokens;
    default:
      return false;
  }
}

int32_t small_param(Input& in, int32_t max) {
  const uint8_t b = in.u8();
  if (b < 230) return static_cast<int32_t>(b % (max + 1));
  static constexpr int32_t kBad[] = {-1, -2, 0, INT32_MAX, INT32_MIN, 1 << 30};
  return in.pick(kBad);
}

// A pattern for a call of Sq queries and Skv keys; its layout tensor (block-sparse) in layout_t.
PatternSpec make_pattern(Input& in, int64_t sq, int64_t skv, GuardTensor& layout_t, Fill& fill) {
  PatternSpec s;
  attngen_pattern& p = s.p;
  s.kind = enum_value(in, 5);
  put_enum(p.kind, s.kind);
  p.window_left = in.chance(40) ? -1 : small_param(in, 40);
  p.window_right = in.chance(40) ? -1 : small_param(in, 40);
  p.stride = small_param(in, 20);
  p.block = small_param(in, 20);
  p.local = small_param(in, 20);
  p.global_tokens = small_param(in, 10);
  if (s.kind == ATTNGEN_PATTERN_BLOCK_SPARSE || in.chance(10)) {
    if (in.chance(10)) return s;  // no layout
    const int64_t bs = p.block > 0 ? p.block : 1;
    int64_t rows = sq > 0 ? sat_add(sq, bs - 1) / bs : 1,
            cols = skv > 0 ? sat_add(skv, bs - 1) / bs : 1;
    if (in.chance(20)) rows = dim(in, 4);
    if (in.chance(20)) cols = dim(in, 4);
    std::vector<int64_t> shape{rows, cols};
    if (in.chance(8)) shape.push_back(1);
    if (in.chance(8)) shape.pop_back();
    layout_t.make(dtype_near(in, ATTNGEN_BOOL), layout_for(in, shape), 0, in.chance(4));
    layout_t.poison();
    const uint8_t density = in.u8();
    layout_t.for_each(
        [&](int64_t, int64_t off) { layout_t.set(off, (fill.rng() & 255) < density ? 1 : 0); });
    p.layout = in.chance(4) ? nullptr : &layout_t.t;
    s.has_layout = true;
    if (layout_t.t.rank == 2 && layout_t.small()) {
      s.rows = rows;
      s.cols = cols;
      for (double x : layout_t.dense()) s.layout.push_back(x != 0);
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// attngen_attention

struct MaskInfo {
  bool present = false, is_bool = false;
  std::vector<int64_t> shape;  // aligned right against [B, Hq, Sq, Skv]
  std::vector<double> values;  // dense
};

size_t misalign(Input& in, int dtype) {
  if (!in.chance(8)) return 0;
  // Misaligned data pointers (not a multiple of the element size).
  return 1 + in.u8() % 3;
}

std::string dims_string(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& d : dims) s += std::string(" ") + d.first + "=" + std::to_string(d.second);
  return s;
}

void fuzz_attention(Input& in, Fill& fill) {
  const int64_t B = dim(in, 3);
  int64_t Sq = dim(in, 20), Skv = dim(in, 20);
  const int64_t Hkv = dim(in, 3);
  int64_t Hq = Hkv > 0 && Hkv < 8 ? Hkv * (1 + in.u8() % 3) : dim(in, 4);
  if (in.chance(8)) Hq = dim(in, 6);
  const int64_t Dqk = head_dim(in), Dv = !in.chance(96) ? Dqk : head_dim(in);
  if ((Dqk > 130 || Dv > 130) && Sq > 0 && Skv > 0) {  // keep the reference cheap
    Sq = std::min<int64_t>(Sq, 6);
    Skv = std::min<int64_t>(Skv, 6);
  }
  const int dt = in.u8() % 3;  // F32, F16, BF16
  const int out_dt = in.chance(60) ? ATTNGEN_F32 : dt;

  GuardTensor q, k, v, out, kv_len, mask, layout, weights, lse;
  auto shape4 = [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    std::vector<int64_t> s{a, b, c, d};
    // One change or none: a dimension dropped, or one of size 1 added (both would be valid).
    if (in.chance(4)) {
      s.pop_back();
    } else if (in.chance(3)) {
      s.push_back(1);
    }
    return s;
  };
  const int qd = dtype_near(in, dt), kd = dtype_near(in, dt), vd = dtype_near(in, dt);
  const int od = dtype_near(in, out_dt);
  q.make(qd, layout_for(in, shape4(B, Sq, Hq, Dqk)), misalign(in, qd), in.chance(3));
  k.make(kd, layout_for(in, shape4(B, Skv, Hkv, Dqk)), misalign(in, kd), in.chance(3));
  v.make(vd, layout_for(in, shape4(B, Skv, Hkv, Dv)), misalign(in, vd), in.chance(3));
  out.make(od, layout_for(in, shape4(B, Sq, Hq, Dv)), misalign(in, od), in.chance(3));
  fill_input(q, fill);
  fill_input(k, fill);
  fill_input(v, fill);

  attngen_attention_options o = attngen_attention_options_default();
  bool wild = false;
  o.scale = scale_value(in, Dqk, wild);
  if (in.chance(50)) {
    const uint8_t b = in.u8();
    static constexpr float kBadCaps[] = {-1.0f, std::numeric_limits<float>::quiet_NaN(),
                                         std::numeric_limits<float>::infinity(), 1e-30f};
    o.softcap = b < 220 ? 0.5f + b / 8.0f : in.pick(kBadCaps);
    if (b >= 220) wild = true;
  }
  const int mask_kind = enum_value(in, 2), alignment = enum_value(in, 2);
  put_enum(o.mask, mask_kind);
  put_enum(o.alignment, alignment);

  // Key padding.
  std::vector<int32_t> lens;
  if (in.chance(70)) {
    std::vector<int64_t> s{B};
    if (in.chance(6)) s = {B, 1};
    const int d = dtype_near(in, ATTNGEN_I32);
    kv_len.make(d, layout_for(in, s), misalign(in, d), in.chance(3));
    kv_len.poison();
    kv_len.for_each([&](int64_t, int64_t off) {
      const uint8_t b = in.u8();
      int64_t x = Skv > 0 ? b % sat_add(Skv, 1) : 0;
      if (b >= 248) {
        const int64_t bad[] = {-1, sat_add(Skv, 1), INT32_MIN, INT32_MAX};
        x = in.pick(bad);
      }
      lens.push_back(as_i32(kv_len.set(off, static_cast<double>(x))));
    });
    // What memory holds (elements may share it: zero or overlapping strides).
    if (kv_len.small()) {
      lens.clear();
      for (double x : kv_len.dense()) lens.push_back(as_i32(x));
    }
    if (!in.chance(3)) o.kv_len = &kv_len.t;
  }

  // Mask tensor.
  MaskInfo mi;
  if (in.chance(70)) {
    mi.present = true;
    mi.is_bool = in.chance(128);
    const int rank = 1 + in.u8() % 4;
    const int64_t full[4] = {B, Hq, Sq, Skv};
    for (int d = 4 - rank; d < 4; ++d) {
      int64_t s = in.chance(100) ? 1 : full[d];
      if (in.chance(6)) s = dim(in, 5);
      mi.shape.push_back(s);
    }
    const int md = dtype_near(in, mi.is_bool ? ATTNGEN_BOOL : ATTNGEN_F32);
    // The runtime reads a mask by its dtype: the values and the reference follow the dtype drawn
    // (found by a 30-minute run: an additive mask drawn as BOOL was modelled as additive).
    if (md == ATTNGEN_BOOL || md == ATTNGEN_F32) mi.is_bool = md == ATTNGEN_BOOL;
    mask.make(md, layout_for(in, mi.shape), misalign(in, md), in.chance(3));
    mask.poison();
    const uint8_t density = in.u8();
    mask.for_each([&](int64_t, int64_t off) {
      const uint64_t r = fill.rng();
      if (mi.is_bool) {
        mi.values.push_back(mask.set(off, (r & 255) < density ? 1 : 0));
      } else {
        static constexpr double kAdd[] = {0.0,   -1e30,   -std::numeric_limits<double>::infinity(),
                                          -1e29, -3.4e38, 0.5};
        const double x = (r & 255) < density ? (static_cast<double>((r >> 8) & 1023) / 256.0 - 3.0)
                                             : kAdd[(r >> 20) % 6];
        mi.values.push_back(mask.set(off, x));
      }
    });
    if (mask.small()) mi.values = mask.dense();  // elements may share memory (zero strides)
    o.mask_tensor = &mask.t;
  }

  o.kernel = kernel_name(in);
  PatternSpec ps;
  if (in.chance(90)) {
    ps = make_pattern(in, Sq, Skv, layout, fill);
    o.pattern = ps.p;
  }
  if (in.chance(40)) {
    std::vector<int64_t> s{B, Hq, Sq, Skv};
    if (in.chance(6)) {
      const size_t d = in.u8() % 4;
      s[d] = sat_add(s[d], 1);
    }
    weights.make(dtype_near(in, ATTNGEN_F32), layout_for(in, s), 0, in.chance(3));
    o.weights = in.chance(4) ? nullptr : &weights.t;
  }
  if (in.chance(40)) {
    std::vector<int64_t> s{B, Hq, Sq};
    if (in.chance(6)) {
      const size_t d = in.u8() % 3;
      s[d] = sat_add(s[d], 1);
    }
    lse.make(dtype_near(in, ATTNGEN_F32), layout_for(in, s), 0, in.chance(3));
    o.lse = in.chance(4) ? nullptr : &lse.t;
  }

  // Aliasing: the output placed on an input.
  attngen_tensor out_t = out.t;
  const bool aliased = in.chance(5) && q.mapped();
  if (aliased) out_t.data = in.chance(128) ? q.t.data : v.t.data;

  // Non-finite mode: keys beyond kv_len (padding) hold NaN and infinities too; no row may see them.
  if (g_nonfinite && o.kv_len != nullptr && k.small() && v.small() && k.t.rank == 4 &&
      v.t.rank == 4 && lens.size() == static_cast<size_t>(std::max<int64_t>(B, 0))) {
    for (GuardTensor* g : {&k, &v}) {
      g->for_each([&](int64_t e, int64_t off) {
        const int64_t per_b = g->logical() / B, per_j = per_b / Skv;
        const int64_t b = e / per_b, j = (e % per_b) / per_j;
        if (j >= lens[static_cast<size_t>(b)] && (fill.rng() & 1)) {
          g->set(off, std::numeric_limits<double>::quiet_NaN());
        }
      });
    }
  }

  const bool null_q = in.chance(3), null_out = in.chance(3), null_opts = in.chance(8);
  g_call = "attention" +
           dims_string({{"B", B},
                        {"Sq", Sq},
                        {"Skv", Skv},
                        {"Hq", Hq},
                        {"Hkv", Hkv},
                        {"Dqk", Dqk},
                        {"Dv", Dv},
                        {"q", qd},
                        {"k", kd},
                        {"v", vd},
                        {"out", od},
                        {"mask", mask_kind},
                        {"align", alignment},
                        {"pattern", ps.kind},
                        {"kv_len", o.kv_len != nullptr},
                        {"mask_tensor", mi.present},
                        {"weights", o.weights != nullptr},
                        {"lse", o.lse != nullptr}}) +
           " scale=" + std::to_string(o.scale) + " softcap=" + std::to_string(o.softcap) +
           " kernel=" + (o.kernel ? o.kernel : "-");

  Call c;
  c.inputs = {&q, &k, &v};
  if (o.kv_len) c.inputs.push_back(&kv_len);
  if (o.mask_tensor) c.inputs.push_back(&mask);
  if (ps.has_layout) c.inputs.push_back(&layout);
  if (!aliased) c.outputs.push_back(&out);
  if (o.weights) c.outputs.push_back(&weights);
  if (o.lse) c.outputs.push_back(&lse);
  c.before();
  if (aliased) c.inputs.clear();  // an accepted alias writes an input; reported below
  const attngen_status s = note(attngen_attention(
      null_q ? nullptr : &q.t, &k.t, &v.t, null_out ? nullptr : &out_t, null_opts ? nullptr : &o));
  c.after(s);
  check_plan(c, s, null_q ? nullptr : &q.t, &k.t, &v.t, null_out ? nullptr : &out_t,
             null_opts ? nullptr : &o);
  if (s != ATTNGEN_OK) return;

  // A successful call: the arguments were valid. Check what the contract says of them.
  if (aliased) fail("an output aliasing an input was accepted");
  if (null_opts) {  // the defaults were used: none of the optional tensors was passed
    o = attngen_attention_options_default();
    wild = false;
    ps = PatternSpec{};
    mi = MaskInfo{};
  }
  check_accepted({&q, &k, &v, &out});
  if (!has_shape(q, {B, Sq, Hq, Dqk}) || !has_shape(k, {B, Skv, Hkv, Dqk}) ||
      !has_shape(v, {B, Skv, Hkv, Dv}) || !has_shape(out, {B, Sq, Hq, Dv})) {
    fail("attention accepted q %s, k %s, v %s, out %s", shape_of(q).c_str(), shape_of(k).c_str(),
         shape_of(v).c_str(), shape_of(out).c_str());
  }
  if (o.weights && !has_shape(weights, {B, Hq, Sq, Skv})) {
    fail("attention accepted weights %s", shape_of(weights).c_str());
  }
  if (o.lse && !has_shape(lse, {B, Hq, Sq}))
    fail("attention accepted lse %s", shape_of(lse).c_str());
  if (o.weights) check_accepted({&weights});
  if (o.lse) check_accepted({&lse});
  if (Dqk <= 0 || Dv <= 0 || Hkv <= 0 || Hq % Hkv != 0) fail("invalid head sizes accepted");
  if (!(std::isfinite(o.scale) && std::isfinite(o.softcap) && o.softcap >= 0)) {
    fail("a non-finite scale or a bad soft cap accepted");
  }

  g_call += describe("q", q) + describe("k", k) + describe("v", v) + describe("out", out);
  if (o.kv_len) g_call += describe("kv_len", kv_len);
  if (mi.present) g_call += describe(mi.is_bool ? "bool_mask" : "add_mask", mask);
  RefAttention r;
  r.scale = o.scale;
  r.softcap = o.softcap;
  r.causal = !null_opts && mask_kind == ATTNGEN_MASK_CAUSAL;
  r.bottom_right = null_opts || alignment == ATTNGEN_ALIGN_BOTTOM_RIGHT;
  if (o.kv_len) {
    for (int32_t x : lens) {
      if (x < 0 || x > Skv) fail("kv_len value %d outside [0, %" PRId64 "] accepted", x, Skv);
    }
    r.kv_len = lens;
  }
  if (mi.present) {
    const auto index = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t full[4] = {b, h, i, j};
      const size_t rank = mi.shape.size();
      int64_t e = 0;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t x = mi.shape[d] == 1 ? 0 : full[4 - rank + d];
        e = e * mi.shape[d] + x;
      }
      return static_cast<size_t>(e);
    };
    if (mi.is_bool) {
      r.keep = [&, index](int64_t b, int64_t h, int64_t i, int64_t j) {
        return mi.values[index(b, h, i, j)] != 0;
      };
    } else {
      r.add = [&, index](int64_t b, int64_t h, int64_t i, int64_t j) {
        const double x = mi.values[index(b, h, i, j)];
        // docs/semantics.md: an additive value <= -1e29 (compared in float) masks the key.
        return static_cast<float>(x) <= -1e29f ? -std::numeric_limits<double>::infinity() : x;
      };
    }
  }
  if (ps.kind != ATTNGEN_PATTERN_NONE) {
    if (ps.kind == ATTNGEN_PATTERN_BLOCK_SPARSE && ps.layout.empty()) {
      fail("a block-sparse pattern without a usable layout accepted");
    }
    r.pattern = [&](int64_t p, int64_t i, int64_t j) { return pattern_attends_ref(ps, p, i, j); };
  }
  std::vector<double> ref_w, ref_lse;
  if (o.weights) r.weights = &ref_w;
  if (o.lse) r.lse = &ref_lse;
  const Dense dq = dense_of(q), dk = dense_of(k), dv = dense_of(v);
  const std::vector<double> want = attngen::test::reference_attention(dq.view, dk.view, dv.view, r);
  ++g_ok_checked;
  if (wild) return;  // scores too large for the tolerance to mean anything
  const Tolerance& tol = tolerance(qd != ATTNGEN_F32 ? qd : od);  // the storage dtype
  Dense av = dv;
  for (float& x : av.data) x = std::abs(x);
  av.view.data = av.data.data();
  RefAttention ra = r;
  ra.weights = ra.lse = nullptr;
  const std::vector<double> mag = attngen::test::reference_attention(dq.view, dk.view, av.view, ra);
  check_close("out", out, want, mag, max_abs(v.dense()), tol);
  if (o.weights) check_close("weights", weights, ref_w, {}, 1.0, tol);
  if (o.lse) {
    const std::vector<double> got = lse.dense();
    for (size_t i = 0; i < got.size(); ++i) {
      const double w = ref_lse[i];
      const bool bad = std::isinf(w)   ? got[i] != w
                       : std::isnan(w) ? !std::isnan(got[i])
                                       : !(std::abs(got[i] - w) <= tol.rel_l2 * (1 + std::abs(w)));
      if (bad) fail("lse[%zu] is %g, reference %g", i, got[i], w);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// attngen_linear

void fuzz_linear(Input& in, Fill& fill) {
  const int64_t B = dim(in, 3), S = dim(in, 8), E = head_dim(in), N = head_dim(in);
  const int dt = in.u8() % 3;
  GuardTensor x, w, bias, y;
  auto shaped = [&](std::vector<int64_t> s) {
    if (in.chance(5)) {
      s.pop_back();
    } else if (in.chance(4)) {
      s.push_back(1);
    }
    return s;
  };
  const int xd = dtype_near(in, dt), wd = dtype_near(in, dt), bd = dtype_near(in, dt),
            yd = dtype_near(in, dt);
  x.make(xd, layout_for(in, shaped({B, S, E})), misalign(in, xd), in.chance(3));
  w.make(wd, layout_for(in, shaped({N, E})), misalign(in, wd), in.chance(3));
  bias.make(bd, layout_for(in, shaped({N})), misalign(in, bd), in.chance(3));
  y.make(yd, layout_for(in, shaped({B, S, N})), misalign(in, yd), in.chance(3));
  fill_input(x, fill);
  fill_input(w, fill);
  fill_input(bias, fill);
  const bool with_bias = !in.chance(86), null_x = in.chance(3), null_y = in.chance(3);
  attngen_tensor y_t = y.t;
  const bool aliased = in.chance(5) && x.mapped();
  if (aliased) y_t.data = x.t.data;
  g_call = "linear" + dims_string({{"B", B},
                                   {"S", S},
                                   {"E", E},
                                   {"N", N},
                                   {"x", xd},
                                   {"w", wd},
                                   {"bias", with_bias ? bd : -100},
                                   {"y", yd}});
  Call c;
  c.inputs = {&x, &w, &bias};
  if (!aliased) c.outputs = {&y};
  c.before();
  if (aliased) c.inputs.clear();
  const attngen_status s = note(attngen_linear(
      null_x ? nullptr : &x.t, &w.t, with_bias ? &bias.t : nullptr, null_y ? nullptr : &y_t));
  c.after(s);
  if (s != ATTNGEN_OK) return;
  if (aliased) fail("an output aliasing an input was accepted");
  check_accepted({&x, &w, &y});
  if (with_bias) check_accepted({&bias});
  if (!has_shape(x, {B, S, E}) || !has_shape(w, {N, E}) || !has_shape(y, {B, S, N}) ||
      (with_bias && !has_shape(bias, {N}))) {
    fail("linear accepted x %s, w %s, bias %s, y %s", shape_of(x).c_str(), shape_of(w).c_str(),
         with_bias ? shape_of(bias).c_str() : "NULL", shape_of(y).c_str());
  }
  const std::vector<double> want = attngen::test::reference_linear(
      x.dense(), B * S, E, w.dense(), N, with_bias ? bias.dense() : std::vector<double>{});
  const std::vector<double> mag =
      attngen::test::reference_linear(abs_of(x.dense()), B * S, E, abs_of(w.dense()), N,
                                      with_bias ? abs_of(bias.dense()) : std::vector<double>{});
  ++g_ok_checked;
  check_close("y", y, want, mag, max_abs(mag), tolerance(xd));
}

// ---------------------------------------------------------------------------------------------
// attngen_mha

// nn.MultiheadAttention self-attention in float64: the reference's linear and attention.
std::vector<double> mha_reference(const std::vector<double>& x, int64_t B, int64_t S, int64_t E,
                                  int64_t H, const std::vector<double>& in_w,
                                  const std::vector<double>& in_b, const std::vector<double>& out_w,
                                  const std::vector<double>& out_b, bool causal, bool bottom_right,
                                  const std::vector<int32_t>& kv_len, std::vector<double>& mag) {
  const int64_t dh = E / H;
  const std::vector<double> qkv = attngen::test::reference_linear(x, B * S, E, in_w, 3 * E, in_b);
  std::vector<float> f(qkv.begin(), qkv.end());
  const std::vector<int64_t> shape{B, S, H, dh}, strides{S * 3 * E, 3 * E, dh, 1};
  const View q{f.data(), shape, strides}, k{f.data() + E, shape, strides},
      v{f.data() + 2 * E, shape, strides};
  RefAttention r;
  r.causal = causal;
  r.bottom_right = bottom_right;
  r.kv_len = kv_len;
  const std::vector<double> attn = attngen::test::reference_attention(q, k, v, r);
  std::vector<float> fa(f);
  for (float& x : fa) x = std::abs(x);
  const View va{fa.data() + 2 * E, shape, strides};
  mag = attngen::test::reference_linear(abs_of(attngen::test::reference_attention(q, k, va, r)),
                                        B * S, E, abs_of(out_w), E, abs_of(out_b));
  return attngen::test::reference_linear(attn, B * S, E, out_w, E, out_b);
}

void fuzz_mha(Input& in, Fill& fill) {
  const int64_t B = dim(in, 2), S = dim(in, 10), H = dim(in, 4);
  int64_t dh = !in.chance(26) ? in.pick({1, 2, 3, 8, 16, 24, 32, 64, 5}) : head_dim(in);
  if (H > 0 && H < 8 && dh > 0 && dh < 1000 && dh * H > 520) dh = std::max<int64_t>(1, 520 / H);
  int64_t E = H > 0 && H < 8 && dh > 0 && dh < 600 ? H * dh : dim(in, 64);
  if (in.chance(8)) E = dim(in, 64);
  const int dt = in.u8() % 3;
  GuardTensor x, in_w, in_b, out_w, out_b, y, kv_len;
  const int xd = dtype_near(in, dt);
  const int64_t E3 = E > 0 && E < (1LL << 40) ? 3 * E : E;
  x.make(xd, layout_for(in, {B, S, E}), misalign(in, xd), in.chance(3));
  in_w.make(dtype_near(in, dt), layout_for(in, {E3, E}), 0, in.chance(3));
  in_b.make(dtype_near(in, dt), layout_for(in, {E3}), 0, in.chance(3));
  out_w.make(dtype_near(in, dt), layout_for(in, {E, E}), 0, in.chance(3));
  out_b.make(dtype_near(in, dt), layout_for(in, {in.chance(6) ? dim(in, 8) : E}), 0, in.chance(3));
  y.make(dtype_near(in, dt), layout_for(in, {B, S, E}), misalign(in, dt), in.chance(3));
  fill_input(x, fill);
  const double a = E > 0 && E < (1 << 20) ? 1.0 / std::sqrt(static_cast<double>(E)) : 1.0;
  fill.lo = -a;
  fill.hi = a;
  for (GuardTensor* g : {&in_w, &in_b, &out_w, &out_b}) fill_input(*g, fill);
  fill.lo = -1;
  fill.hi = 1;

  attngen_mha_weights wts{&in_w.t, in.chance(128) ? &in_b.t : nullptr, &out_w.t,
                          in.chance(128) ? &out_b.t : nullptr};
  if (in.chance(4)) wts.in_proj_weight = nullptr;
  if (in.chance(4)) wts.out_proj_weight = nullptr;
  attngen_mha_options o = attngen_mha_options_default();
  o.num_heads = !in.chance(16) ? H : in.pick(kHostile);
  const int mask_kind = enum_value(in, 2), alignment = enum_value(in, 2);
  put_enum(o.mask, mask_kind);
  put_enum(o.alignment, alignment);
  std::vector<int32_t> lens;
  if (in.chance(60)) {
    const int d = dtype_near(in, ATTNGEN_I32);
    kv_len.make(d, layout_for(in, {B}), misalign(in, d), in.chance(3));
    kv_len.poison();
    kv_len.for_each([&](int64_t, int64_t off) {
      const uint8_t b = in.u8();
      int64_t v = S > 0 ? b % sat_add(S, 1) : 0;
      if (b >= 250) v = -1;
      lens.push_back(as_i32(kv_len.set(off, static_cast<double>(v))));
    });
    if (kv_len.small()) {  // elements may share memory (zero strides)
      lens.clear();
      for (double x : kv_len.dense()) lens.push_back(as_i32(x));
    }
    o.kv_len = &kv_len.t;
  }
  o.kernel = kernel_name(in);
  const bool null_w = in.chance(3), null_o = in.chance(3);
  g_call = "mha" +
           dims_string({{"B", B},
                        {"S", S},
                        {"E", E},
                        {"H", H},
                        {"num_heads", o.num_heads},
                        {"dtype", dt},
                        {"x", xd},
                        {"mask", mask_kind},
                        {"align", alignment},
                        {"kv_len", o.kv_len != nullptr}}) +
           " kernel=" + (o.kernel ? o.kernel : "-");
  Call c;
  c.inputs = {&x, &in_w, &in_b, &out_w, &out_b};
  if (o.kv_len) c.inputs.push_back(&kv_len);
  c.outputs = {&y};
  c.before();
  const attngen_status s =
      note(attngen_mha(&x.t, null_w ? nullptr : &wts, &y.t, null_o ? nullptr : &o));
  c.after(s);
  if (s != ATTNGEN_OK) return;
  if (null_w || null_o || o.num_heads <= 0 || E % o.num_heads != 0) {
    fail("an MHA call without weights, options or a valid head count accepted");
  }
  for (int32_t l : lens) {
    if (l < 0 || l > S) fail("kv_len value %d outside [0, %" PRId64 "] accepted", l, S);
  }
  check_accepted({&x, &in_w, &out_w, &y});
  if (wts.in_proj_bias) check_accepted({&in_b});
  if (wts.out_proj_bias) check_accepted({&out_b});
  std::vector<double> mag;
  const std::vector<double> want = mha_reference(
      x.dense(), B, S, E, o.num_heads, in_w.dense(),
      wts.in_proj_bias ? in_b.dense() : std::vector<double>{}, out_w.dense(),
      wts.out_proj_bias ? out_b.dense() : std::vector<double>{}, mask_kind == ATTNGEN_MASK_CAUSAL,
      alignment == ATTNGEN_ALIGN_BOTTOM_RIGHT, lens, mag);
  ++g_ok_checked;
  check_close("y", y, want, mag, max_abs(mag), tolerance(xd));
}

// ---------------------------------------------------------------------------------------------
// KV cache: create, then a few appends, decodes, MHA decode steps, lengths and resets, destroy.

// What the cache must hold: per (layer, sequence) every position appended, K and V as stored
// (rounded to the cache's dtype; unrounded for I8, whose bound is against the unquantised values).
struct CacheModel {
  int64_t layers = 0, batch = 0, hkv = 0, dqk = 0, dv = 0, capacity = 0, window = -1;
  int dtype = ATTNGEN_F32;
  bool approx = false;  // K and V rounded by a projection in float (MHA decode): storage bound
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
    if (dtype == ATTNGEN_I8) return {ATTNGEN_I8, 0.04, 0.1, 0.0};
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

// The decode reference for one layer: q [B, t, Hq, Dqk] dense, counts per sequence.
std::vector<double> decode_reference(const CacheModel& m, int64_t layer,
                                     const std::vector<double>& q, int64_t B, int64_t t, int64_t Hq,
                                     const std::vector<int64_t>& cnt, double scale,
                                     bool abs_v = false) {
  const int64_t D = m.dqk, Dv = m.dv, group = Hq / m.hkv;
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(static_cast<size_t>(B * t * Hq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& ks = m.k[static_cast<size_t>(layer * m.batch + b)];
    const auto& vs = m.v[static_cast<size_t>(layer * m.batch + b)];
    const int64_t n = static_cast<int64_t>(ks.size());
    for (int64_t i = 0; i < cnt[static_cast<size_t>(b)]; ++i) {
      const int64_t p = n - cnt[static_cast<size_t>(b)] + i;
      const int64_t lo = m.window >= 0 ? std::max<int64_t>(0, p - m.window) : 0;
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / group;
        std::vector<double> s;
        double mx = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (int64_t j = lo; j <= p; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += q[static_cast<size_t>(((b * t + i) * Hq + h) * D + d)] *
                   ks[static_cast<size_t>(j)][static_cast<size_t>(hk * D + d)];
          }
          s.push_back(dot * scale);
          nan = nan || std::isnan(dot * scale);
          mx = std::max(mx, dot * scale);
        }
        // As in tests/reference.cpp (docs/semantics.md): a row whose scores are all -inf counts
        // as fully masked (0); a NaN score makes the row NaN.
        if (!nan && mx == -std::numeric_limits<double>::infinity()) continue;
        if (nan) mx = std::numeric_limits<double>::quiet_NaN();
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = lo; j <= p; ++j) {
            const double x = vs[static_cast<size_t>(j)][static_cast<size_t>(hk * Dv + d)];
            // (A weight of exactly 0, a score of -inf, adds nothing, whatever V holds.)
            if (s[static_cast<size_t>(j - lo)] == 0.0) continue;
            acc += s[static_cast<size_t>(j - lo)] * (abs_v ? std::abs(x) : x);
          }
          out[static_cast<size_t>(((b * t + i) * Hq + h) * Dv + d)] = acc / sum;
        }
      }
    }
  }
  return out;
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

// Checks that appending cnt tokens was allowed (docs/semantics.md, "Incremental decoding").
void check_append_allowed(const CacheModel& m, int64_t layer, const std::vector<int64_t>& cnt) {
  for (int64_t b = 0; b < m.batch; ++b) {
    const int64_t c = cnt[static_cast<size_t>(b)], n = m.length(layer, b);
    if (m.window < 0 && n + c > m.capacity) fail("append past the capacity accepted");
    if (m.window >= 0 && c > m.capacity - m.window)
      fail("append of more than capacity - window accepted");
  }
}

void fuzz_kv_cache(Input& in, Fill& fill) {
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
                                            {"storage", o.storage != nullptr}});
  attngen_kv_cache* cache = reinterpret_cast<attngen_kv_cache*>(0x1);  // must be overwritten
  const attngen_status cs =
      note(attngen_kv_cache_create(in.chance(4) ? nullptr : &o, in.chance(4) ? nullptr : &cache));
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
  if (m.window >= m.capacity) fail("implausible cache accepted");
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
    const int kind = in.u8() % 6;
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
      c.after(s);
      if (s != ATTNGEN_OK) continue;
      if (layer < 0 || layer >= m.layers || B != m.batch)
        fail("append to a wrong layer or batch accepted");
      for (int64_t x : cnt) {
        if (x < 0 || x > t) fail("count %" PRId64 " outside [0, t] accepted", x);
      }
      check_append_allowed(m, layer, cnt);
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
      const std::vector<double> want =
          decode_reference(m, layer, q.dense(), B, t, Hq, cnt, d.scale);
      Tolerance tol = m.tol();
      if (qdt != ATTNGEN_F32 || odt != ATTNGEN_F32) {
        const Tolerance& io = tolerance(qdt != ATTNGEN_F32 ? qdt : odt);
        if (io.rel_l2 > tol.rel_l2) tol = io;
      }
      const std::vector<double> mag =
          decode_reference(m, layer, q.dense(), B, t, Hq, cnt, d.scale, /*abs_v=*/true);
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
      const double a = E > 0 && E < (1 << 20) ? 1.0 / std::sqrt(static_cast<double>(E)) : 1.0;
      fill.lo = -a;
      fill.hi = a;
      for (GuardTensor* g : {&in_w, &in_b, &out_w, &out_b}) fill_input(*g, fill);
      fill.lo = -1;
      fill.hi = 1;
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
      const std::vector<double> attn = decode_reference(m, layer, qd, B, t, m.hkv, cnt, 0.0);
      const std::vector<double> bout = w.out_proj_bias ? out_b.dense() : std::vector<double>{};
      const std::vector<double> want =
          attngen::test::reference_linear(attn, B * t, E, out_w.dense(), E, bout);
      const std::vector<double> mag = attngen::test::reference_linear(
          abs_of(decode_reference(m, layer, qd, B, t, m.hkv, cnt, 0.0, /*abs_v=*/true)), B * t, E,
          abs_of(out_w.dense()), E, abs_of(bout));
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
    }
  }
  attngen_kv_cache_destroy(cache);
}

// ---------------------------------------------------------------------------------------------
// Small entry points

void fuzz_pattern_attends(Input& in, Fill& fill) {
  GuardTensor layout;
  const int64_t sq = dim(in, 40), skv = dim(in, 40);
  PatternSpec ps = make_pattern(in, sq, skv, layout, fill);
  static constexpr int64_t kPos[] = {0, 1, 5, 63, -1, -64, INT64_MIN, INT64_MAX, 1LL << 40};
  const auto position = [&]() -> int64_t {
    const uint8_t b = in.u8();
    if (b < 220) return b % 48;
    int64_t v = in.pick(kPos);
    return v;
  };
  const int64_t p = position(), i = position(), j = position();
  g_call = "pattern_attends" + dims_string({{"kind", ps.kind},
                                            {"left", ps.p.window_left},
                                            {"right", ps.p.window_right},
                                            {"stride", ps.p.stride},
                                            {"block", ps.p.block},
                                            {"local", ps.p.local},
                                            {"global", ps.p.global_tokens},
                                            {"p", p},
                                            {"i", i},
                                            {"j", j}});
  ++g_calls;
  const bool null_p = in.chance(3);
  const int got = attngen_pattern_attends(null_p ? nullptr : &ps.p, p, i, j);
  if (got != 0 && got != 1) fail("pattern_attends returned %d", got);
  // Compare where the pattern is well-formed and the numbers small.
  const bool small = std::abs(p) < 1000 && i >= 0 && i < 1000 && j >= 0 && j < 1000;
  bool valid = !null_p && small && ps.kind >= 0 && ps.kind <= 4;
  if (ps.kind == ATTNGEN_PATTERN_STRIDED) valid = valid && ps.p.stride > 0 && ps.p.stride < 1000;
  if (ps.kind == ATTNGEN_PATTERN_WINDOW) {
    // (Sides below -1, or both unbounded, are rejected by calls: malformed, answered 0.)
    valid = valid && ps.p.window_left < 1000 && ps.p.window_right < 1000 &&
            ps.p.window_left >= -1 && ps.p.window_right >= -1 &&
            (ps.p.window_left >= 0 || ps.p.window_right >= 0);
    if (!valid && !null_p && small &&
        (ps.p.window_left < -1 || ps.p.window_right < -1 ||
         (ps.p.window_left < 0 && ps.p.window_right < 0))) {
      if (got != 0) fail("pattern_attends returned %d for a malformed window", got);
    }
  }
  if (ps.kind == ATTNGEN_PATTERN_GLOBAL_LOCAL) {
    valid = valid && ps.p.local >= 0 && ps.p.local < 1000 && ps.p.global_tokens >= 0 &&
            ps.p.global_tokens < 1000;
  }
  if (ps.kind == ATTNGEN_PATTERN_BLOCK_SPARSE) {
    // The layout checks of a call (docs/semantics.md, "Defined for every input"), all of them:
    // a layout a call rejects answers 0. (A stride past 2^31 - 1 is rejected even on a dimension
    // of size 1, where it is never stepped: CI's run drew shape [1, 2] with strides
    // [INT64_MAX, 1], which this oracle took for valid; regression fixed14.)
    const attngen_tensor* l = ps.p.layout;
    const auto index_ok = [](int64_t v, int64_t lo) { return v >= lo && v <= INT32_MAX; };
    const bool layout_ok = l != nullptr && l->data != nullptr && layout.dtype() == ATTNGEN_BOOL &&
                           l->rank == 2 && ps.p.block > 0 && index_ok(l->shape[0], 1) &&
                           index_ok(l->shape[1], 1) && index_ok(l->strides[0], 0) &&
                           index_ok(l->strides[1], 0) && (l->shape[1] == 1 || l->strides[1] == 1) &&
                           layout.addressable();
    if (!layout_ok && !null_p && got != 0) {
      fail("pattern_attends returned %d for a layout a call rejects", got);
    }
    // Compared where the harness holds the entries (small layouts of the drawn [rows, cols]).
    valid = valid && layout_ok && ps.p.block < 1000 && !ps.layout.empty() &&
            l->shape[0] == ps.rows && l->shape[1] == ps.cols;
  }
  if (valid && got != static_cast<int>(pattern_attends_ref(ps, p, i, j))) {
    fail("pattern_attends returned %d, the contract says %d", got, !got);
  }
}

void fuzz_small(Input& in) {
  switch (in.u8() % 6) {
    case 0: {  // attngen_tensor_contiguous
      const int32_t rank = !in.chance(26) ? in.u8() % 6 : static_cast<int32_t>(in.u32());
      const int dtype = dtype_near(in, ATTNGEN_F32);
      // The shape array holds exactly min(max(rank, 0), 5) values, between guard pages.
      const int64_t n = std::min<int64_t>(std::max<int32_t>(rank, 0), ATTNGEN_MAX_RANK);
      GuardTensor shape;
      shape.make(ATTNGEN_I32, {{n * 2}, {1}}, 0, false);
      std::vector<int64_t> dims(static_cast<size_t>(n));
      for (int64_t d = 0; d < n; ++d) {
        dims[d] = !in.chance(16) ? 1 + in.u8() % 16 : in.pick(kHostile);
        std::memcpy(shape.at(d * 2), &dims[d], 8);
      }
      g_call = "tensor_contiguous rank=" + std::to_string(rank);
      ++g_calls;
      // A converted prvalue, not a load of an enum lvalue (which UBSan checks) in the harness.
      const attngen_tensor t = attngen_tensor_contiguous(
          reinterpret_cast<void*>(0x1000), static_cast<attngen_dtype>(dtype), rank,
          in.chance(4) ? nullptr : reinterpret_cast<const int64_t*>(shape.at(0)));
      int got_dtype;
      std::memcpy(&got_dtype, &t.dtype, sizeof got_dtype);
      if (t.data != reinterpret_cast<void*>(0x1000) || got_dtype != dtype || t.rank < 0 ||
          t.rank > ATTNGEN_MAX_RANK) {
        fail("tensor_contiguous: wrong data, dtype or rank %d", t.rank);
      }
      break;
    }
    case 1: {  // attngen_status_name
      int s = !in.chance(56) ? in.u8() % (kStatuses + 3) : in.pick({0x7fffffff, 1000, -1});
      g_call = "status_name " + std::to_string(s);
      ++g_calls;
      const char* name = attngen_status_name(static_cast<attngen_status>(s));
      if (name == nullptr || name[0] == '\0') fail("status_name(%d) is empty", s);
      if (s >= 0 && s < kStatuses && std::strncmp(name, "ATTNGEN_", 8) != 0) {
        fail("status_name(%d) = '%s'", s, name);
      }
      break;
    }
    case 2: {  // attngen_set_isa / attngen_isa
      static const char* const kIsas[] = {nullptr, "",     "avx2",       "avx512",
                                          "sse41", "neon", "cuda",       "generic",
                                          "bogus", "AVX2", "avx512bf16", "neonfp16"};
      const char* isa = in.pick(kIsas);
      g_call = std::string("set_isa ") + (isa ? isa : "NULL");
      const attngen_status s = note(attngen_set_isa(isa));
      const char* now = attngen_isa();
      if (now == nullptr || now[0] == '\0') fail("attngen_isa() is empty");
      if (s == ATTNGEN_OK && isa != nullptr && isa[0] != '\0' && std::strcmp(now, isa) != 0) {
        fail("set_isa(%s) succeeded but attngen_isa() is %s", isa, now);
      }
      break;
    }
    case 3: {  // attngen_set_num_threads
      const int n = in.pick({0, 1, 2, -1, INT32_MIN, 3});
      g_call = "set_num_threads " + std::to_string(n);
      const attngen_status s = note(attngen_set_num_threads(n));
      if ((s == ATTNGEN_OK) != (n >= 0))
        fail("set_num_threads(%d) returned %s", n, attngen_status_name(s));
      break;
    }
    case 4: {  // attngen_kernel_at / find_kernel
      ++g_calls;
      const size_t n = attngen_kernel_count();
      if (n == 0) fail("no kernels");
      const attngen_kernel_info* k = attngen_kernel_at(in.u8() % n);
      if (k == nullptr || attngen_find_kernel(k->name) != k) fail("kernel table inconsistent");
      if (attngen_kernel_at(n) != nullptr || attngen_find_kernel("no_such_kernel") != nullptr ||
          attngen_find_kernel(nullptr) != nullptr) {
        fail("kernel lookup past the table");
      }
      break;
    }
    default: {  // defaults
      ++g_calls;
      const attngen_decode_options d = attngen_decode_options_default();
      if (d.scale != 0 || d.counts != nullptr || d.kv_splits != 0 || d.kernel != nullptr) {
        fail("attngen_decode_options_default() not all zero");
      }
      const attngen_pattern l = attngen_pattern_local(in.pick({1, 2, 16, 0, -1, INT32_MIN}));
      int kind;
      std::memcpy(&kind, &l.kind, sizeof kind);
      if (kind != ATTNGEN_PATTERN_WINDOW || l.window_left != l.window_right || l.window_left < 0) {
        fail("attngen_pattern_local: kind %d, %d/%d", kind, l.window_left, l.window_right);
      }
      break;
    }
  }
}

}  // namespace

// Out-of-memory is a status of the API, not a crash: let allocations fail (ASan).
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* nf = std::getenv("ATTNGEN_FUZZ_NONFINITE");
  g_nonfinite = nf != nullptr && nf[0] == '1';
  g_known_off = std::getenv("ATTNGEN_FUZZ_KNOWN");
  attngen_set_num_threads(1);
  std::atexit(print_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const uint8_t op = in.u8();
  Fill fill;
  fill.rng.seed(in.u32());
  fill.nonfinite = g_nonfinite;
  switch (op % 8) {
    case 0:
    case 1:
      fuzz_attention(in, fill);
      break;
    case 2:
      fuzz_linear(in, fill);
      break;
    case 3:
      fuzz_mha(in, fill);
      break;
    case 4:
    case 5:
      fuzz_kv_cache(in, fill);
      break;
    case 6:
      fuzz_pattern_attends(in, fill);
      break;
    default:
      fuzz_small(in);
      break;
  }
  // Process-wide settings back to what every input starts from.
  if (attngen_set_isa(nullptr) != ATTNGEN_OK) fail("set_isa(NULL) failed");
  attngen_set_num_threads(1);
  g_call.clear();
  return 0;
}
