// Prefetches into L2 by the kernel's native code (generator/native_code.h, add_prefetch_l2), in
// place of Halide 14's own (schedules/schedule.h, prefetch_lines_pass).
#include <utility>

#include "generator/native_code.h"
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// Halide 14 lowers a prefetch of a box into a loop of prefetchnta whose offsets step by 64
// elements (the cache line's bytes taken as elements: every 4th line of an f32 box), over the
// box of the buffer the loop reads. This pass replaces each prefetch of a listed buffer by
// prefetches into L2 of every cache line of its `bytes` from the box's start.
class PrefetchLines : public IRMutator {
 public:
  explicit PrefetchLines(std::vector<PrefetchSpan> spans) : spans_(std::move(spans)) {}
  using IRMutator::visit;

 private:
  static constexpr int kLineBytes = 64;

  const PrefetchSpan* span_of(const Stmt& s) const {
    const Evaluate* e = s.as<Evaluate>();
    const Call* c = e != nullptr ? e->value.as<Call>() : nullptr;
    if (c == nullptr || !c->is_intrinsic(Call::prefetch) || c->args.empty()) return nullptr;
    const Variable* buffer = c->args[0].as<Variable>();
    if (buffer == nullptr) return nullptr;
    for (const PrefetchSpan& span : spans_) {
      if (span.buffer == buffer->name) return &span;
    }
    return nullptr;
  }

  static std::string line_var(const std::string& buffer) { return "prefetch_" + buffer + ".line"; }

  // Halide's loops over the box's lines: their first iteration is the box's start.
  Stmt visit(const For* op) override {
    for (const PrefetchSpan& span : spans_) {
      if (op->name.rfind("prefetch_split_" + span.buffer + ".", 0) != 0) continue;
      const Stmt body = mutate(substitute(op->name, make_zero(Int(32)), op->body));
      const For* lines = body.as<For>();
      if (lines != nullptr && lines->name == line_var(span.buffer)) return body;
    }
    return IRMutator::visit(op);
  }

  Stmt visit(const Evaluate* op) override {
    const PrefetchSpan* span = span_of(op);
    if (span == nullptr) return IRMutator::visit(op);
    const Call* c = op->value.as<Call>();
    const Var line(line_var(span->buffer));
    // The box's start in bytes, plus the line's: a displacement of one address per line.
    const Expr offset =
        cast<int64_t>(c->args[1]) * span->element_bytes + cast<int64_t>(line) * kLineBytes;
    const int lines = (span->bytes + kLineBytes - 1) / kLineBytes;
    const auto prefetch = [&](const Expr& at) {
      return Evaluate::make(Call::make(Int(32), kPrefetchL2, {c->args[0], at}, Call::Extern));
    };
    Stmt body = prefetch(offset);
    if (span->again_at > 0) body = Block::make(body, prefetch(offset + span->again_at));
    return For::make(line.name(), 0, lines, ForType::Serial, DeviceAPI::None, body);
  }

  std::vector<PrefetchSpan> spans_;
};

}  // namespace

IRMutator* prefetch_lines_pass(const std::vector<PrefetchSpan>& spans) {
  return new PrefetchLines(spans);
}

}  // namespace attngen
