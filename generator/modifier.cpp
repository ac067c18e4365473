#include "generator/modifier.h"

#include <map>
#include <stdexcept>
#include <utility>

namespace attngen {

namespace {

std::map<std::string, Modifier>& registry() {
  static std::map<std::string, Modifier> modifiers;
  return modifiers;
}

}  // namespace

bool register_modifier(const Modifier& modifier) {
  const ModifierLayout& l = modifier.layout;
  const std::string name = l.name;
  if (!valid_modifier_name(l.name)) throw std::logic_error("attngen: bad modifier name " + name);
  if (l.score != static_cast<bool>(modifier.score) || l.mask != static_cast<bool>(modifier.mask) ||
      l.sink != static_cast<bool>(modifier.sink) || (!l.score && !l.mask && !l.sink) ||
      (modifier.visit && !l.mask) || l.tensors < 0 || l.tensors > kMaxModifierTensors ||
      l.scalars < 0 || l.scalars > kMaxModifierScalars) {
    throw std::logic_error("attngen: modifier " + name + "'s layout does not match its functions");
  }
  if (!registry().emplace(name, modifier).second) {
    throw std::logic_error("attngen: modifier " + name + " registered twice");
  }
  return true;
}

const Modifier* find_modifier(const std::string& name) {
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

namespace {

using namespace Halide;
using namespace Halide::Internal;

// Replaces each read of a Func or buffer whose indices do not involve `varying` by a variable of
// its own (an unknown single value to interval arithmetic, where a read is otherwise unbounded),
// remembering what it stands for.
class PointReads : public IRMutator {
 public:
  explicit PointReads(std::vector<std::string> varying) : varying_(std::move(varying)) {}
  std::map<std::string, Expr> replaced;

 private:
  using IRMutator::visit;
  Expr visit(const Call* op) override {
    if (op->call_type != Call::Halide && op->call_type != Call::Image) {
      return IRMutator::visit(op);
    }
    for (const Expr& arg : op->args) {
      for (const std::string& v : varying_) {
        if (expr_uses_var(arg, v)) return IRMutator::visit(op);
      }
    }
    const std::string name = "attngen_modifier_read_" + std::to_string(replaced.size());
    replaced[name] = op;
    return Variable::make(op->type, name);
  }
  std::vector<std::string> varying_;
};

}  // namespace

Expr modifier_block_visit(const Modifier& modifier, const ModifierBlock& block,
                          const ModifierParams& params) {
  if (!modifier.mask) return const_true();
  if (modifier.visit) return modifier.visit(block, params);
  // The mask at a symbolic row i, position p and key j (as define_attention reads it: rows and
  // keys clamped into the call), bounded over the block's ranges.
  const Expr i = Variable::make(Int(32), "attngen_modifier_i");
  const Expr j = Variable::make(Int(32), "attngen_modifier_j");
  const Expr p = Variable::make(Int(32), "attngen_modifier_p");
  const bool one_head = is_const_one(block.heads);
  const Expr h = one_head ? block.h : Variable::make(Int(32), "attngen_modifier_h");
  const ModifierIndex at{
      block.b,         h, i, j, p, block.heads_q, block.seq_q, block.seq_kv, block.offset,
      p - block.offset};
  std::vector<std::string> varying = {"attngen_modifier_i", "attngen_modifier_j",
                                      "attngen_modifier_p"};
  if (!one_head) varying.push_back("attngen_modifier_h");
  PointReads points(varying);
  const Expr mask = points.mutate(modifier.mask(at, params));
  Scope<Interval> ranges;
  ranges.push("attngen_modifier_i", Interval(min(block.first_row(), block.seq_q - 1),
                                             min(block.last_row(), block.seq_q - 1)));
  ranges.push("attngen_modifier_j", Interval(min(block.first_key(), block.seq_kv - 1),
                                             min(block.last_key(), block.seq_kv - 1)));
  ranges.push("attngen_modifier_p", Interval(block.first_position(), block.last_position()));
  if (!one_head) {
    ranges.push("attngen_modifier_h", Interval(block.h, block.h + (block.heads - 1)));
  }
  const Interval may = bounds_of_expr_in_scope(mask, ranges);
  if (!may.has_upper_bound()) return const_true();
  return simplify(substitute(points.replaced, may.max));
}

std::string modifier_names() {
  std::string names;
  for (const auto& [name, _] : registry()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace attngen
