// A kernel's inputs for its variant's modifier (generator/modifier.h): the parameters of the
// modifier's layout (core/modifier.h), its tensors then its scalars, added to a generator as
// inputs named mod_<name> (no modifier's names clash with a kernel's), in the order the
// runtime's kernel glue passes them (runtime/include/attngen/kernel_glue.h). The attention and
// decode generators share it.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "generator/modifier.h"

namespace attngen {

struct ModifierInputs {
  const Modifier* modifier = nullptr;
  std::vector<Halide::GeneratorInput<Halide::Buffer<>>*> tensors;
  std::vector<Halide::GeneratorInput<float>*> scalars;

  // The modifier named `name` (a CompileError naming the generator's where it has none) and its
  // inputs, added to `generator` (in its configure()). Nothing for an empty name.
  void add(Halide::Internal::GeneratorBase& generator, const std::string& name);
  // The inputs as the algorithm takes them.
  ModifierParams params() const;
  // Estimates of the tensors' extents, per ModifierDim (B, Hq, Hkv, Sq, Skv, any), and the
  // scalars' (0).
  void set_estimates(const int (&extent)[6]) const;
};

}  // namespace attngen
