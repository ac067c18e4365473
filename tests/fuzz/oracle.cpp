#include "tests/fuzz/oracle.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace attngen::fuzz {

using attngen::test::Tolerance;

std::string g_call;
uint64_t g_status_count[kStatuses + 1];
uint64_t g_calls = 0, g_ok_checked = 0;
bool g_nonfinite = false;
const char* g_known_off = nullptr;

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

// Statuses by kind of call (note_kind), in the order of the names. Never destroyed: print_stats
// runs at exit, after the destructors of statics made after its registration.
std::map<std::string, std::vector<uint64_t>>& kind_counts() {
  static auto* counts = new std::map<std::string, std::vector<uint64_t>>;
  return *counts;
}

attngen_status note_kind(const char* kind, attngen_status s) {
  std::vector<uint64_t>& c = kind_counts()[kind];
  c.resize(kStatuses + 1);
  ++c[(s >= 0 && s < kStatuses) ? s : kStatuses];
  return s;
}

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
  for (const auto& [kind, counts] : kind_counts()) {
    std::string line;
    for (int s = 0; s <= kStatuses; ++s) {
      if (counts[s] == 0) continue;
      line += std::string(line.empty() ? "" : ", ") +
              (s < kStatuses ? attngen_status_name(static_cast<attngen_status>(s)) : "(other)") +
              " " + std::to_string(counts[s]);
    }
    std::fprintf(stderr, "==   %s: %s\n", kind.c_str(), line.c_str());
  }
}

attngen_status note(attngen_status s) {
  // ATTNGEN_FUZZ_TRACE set: each call and its status on stderr (how an input decodes).
  static const bool trace = std::getenv("ATTNGEN_FUZZ_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "call: %s -> %d\n", g_call.c_str(), static_cast<int>(s));
  ++g_calls;
  ++g_status_count[(s >= 0 && s < kStatuses) ? s : kStatuses];
  if (s < 0 || s >= kStatuses) fail("status %d is not an attngen_status", static_cast<int>(s));
  const char* msg = attngen_last_error();
  if (msg == nullptr) fail("attngen_last_error() is NULL");
  if (s != ATTNGEN_OK && msg[0] == '\0') fail("%s with an empty message", attngen_status_name(s));
  if (s == ATTNGEN_OK && msg[0] != '\0') fail("OK with the message '%s'", msg);
  return s;
}

bool excluded(int id) {
  if (g_known_off == nullptr || g_known_off[0] == '\0') return true;
  if (std::strcmp(g_known_off, "all") == 0) return false;
  const std::string list = std::string(",") + g_known_off + ",";
  return list.find("," + std::to_string(id) + ",") == std::string::npos;
}

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
    if (o->q_positions != nullptr) d.q_positions = o->q_positions->data;
    if (o->k_positions != nullptr) d.k_positions = o->k_positions->data;
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

void check_accepted(std::initializer_list<const GuardTensor*> ts) {
  int k = 0;
  for (const GuardTensor* g : ts) {
    if (!g->addressable()) {
      fail("tensor %d, spanning 2^31 bytes or more, was accepted:%s", k, describe("", *g).c_str());
    }
    if (!g->small())
      fail("tensor %d (%" PRId64 " elements) accepted but not checkable", k, g->logical());
    ++k;
  }
}

Tolerance tolerance(int d) { return attngen::test::tolerance_for(d); }

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

std::string dims_string(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& d : dims) s += std::string(" ") + d.first + "=" + std::to_string(d.second);
  return s;
}

}  // namespace attngen::fuzz
