#include "generator/modifier_inputs.h"

#include "generator/plan.h"

namespace attngen {

void ModifierInputs::add(Halide::Internal::GeneratorBase& generator, const std::string& name) {
  if (name.empty()) return;
  modifier = find_modifier(name);
  if (modifier == nullptr) {
    throw Halide::CompileError("attngen: no modifier " + name +
                               " (the generator has: " + modifier_names() + ")");
  }
  const ModifierLayout& l = modifier->layout;
  for (int t = 0; t < l.tensors; ++t) {
    tensors.push_back(generator.add_input<Halide::Buffer<>>(
        std::string("mod_") + l.tensor[t].name, halide_type(l.tensor[t].dtype), l.tensor[t].rank));
  }
  for (int c = 0; c < l.scalars; ++c) {
    scalars.push_back(generator.add_input<float>(std::string("mod_") + l.scalar[c]));
  }
}

ModifierParams ModifierInputs::params() const {
  ModifierParams p;
  for (Halide::GeneratorInput<Halide::Buffer<>>* t : tensors) {
    p.tensors.push_back(*t);
    std::vector<Halide::Expr> extents;
    for (int d = 0; d < t->dimensions(); ++d) extents.push_back(t->dim(d).extent());
    p.extents.push_back(extents);
  }
  for (Halide::GeneratorInput<float>* c : scalars) p.scalars.push_back(*c);
  return p;
}

void ModifierInputs::set_estimates(const int (&extent)[6]) const {
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ModifierTensor& mt = modifier->layout.tensor[t];
    Halide::Region estimates;
    for (int d = mt.rank; d-- > 0;) {  // innermost first
      estimates.push_back({0, extent[static_cast<int>(mt.dims[d])]});
    }
    tensors[t]->set_estimates(estimates);
  }
  for (Halide::GeneratorInput<float>* c : scalars) c->set_estimate(0.0f);
}

}  // namespace attngen
