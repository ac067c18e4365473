// Modifiers in the runtime (attngen.h, "Modifiers"): a call's parameters checked against its
// kernel's layout and passed to it, a plan's copy of them, and the library modifiers' host
// helpers (the standard ALiBi slopes).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/modifier.h"
#include "runtime/src/internal.h"

namespace attngen::rt {

bool prepare_modifier(Check& c, const attngen_modifier* m, const attngen_kernel_info& kernel,
                      const int64_t (&extent)[5], std::initializer_list<NamedOutput> outputs,
                      HalideView (&views)[ATTNGEN_MAX_MODIFIER_TENSORS]) {
  if (m == nullptr) return true;
  const std::string who = std::string("modifier ") + m->name;
  const auto dim_name = [](int32_t d) {  // a descriptor's code, any value read safely
    return modifier_dim_name(static_cast<ModifierDim>(std::clamp(d, 0, 5)));
  };
  for (int t = 0; t < ATTNGEN_MAX_MODIFIER_TENSORS; ++t) {
    const attngen_tensor* tensor = m->tensors[t];
    if (t >= kernel.modifier_tensors) {
      if (tensor != nullptr) {
        return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                      who + " takes " + std::to_string(kernel.modifier_tensors) +
                          " tensors, but tensors[" + std::to_string(t) + "] is set");
      }
      continue;
    }
    const attngen_modifier_tensor_info& info = kernel.modifier_tensor[t];
    const std::string name = who + "'s " + info.name;
    const char* dims[4];
    for (int d = 0; d < info.rank; ++d) dims[d] = dim_name(info.dims[d]);
    const TensorSpec spec{name.c_str(), info.dtype, info.rank, dims};
    if (tensor == nullptr) {
      return c.fail(ATTNGEN_ERROR_NULL_POINTER,
                    name + " (tensors[" + std::to_string(t) + "]) is NULL");
    }
    if (!check_tensor(c, tensor, spec)) return false;
    for (int d = 0; d < info.rank; ++d) {
      if (info.dims[d] >= 0 && info.dims[d] < 5 &&
          !check_dim(c, *tensor, spec, d, extent[info.dims[d]],
                     (std::string(dim_name(info.dims[d])) + " of the call").c_str())) {
        return false;
      }
    }
    for (const NamedOutput& o : outputs) {
      if (o.tensor != nullptr && !check_no_alias(c, *o.tensor, o.name, *tensor, name.c_str())) {
        return false;
      }
    }
    make_view(views[t], *tensor);
  }
  for (int i = 0; i < ATTNGEN_MAX_MODIFIER_SCALARS; ++i) {
    const float x = m->scalars[i];
    if (i >= kernel.modifier_scalars && x != 0.0f) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    who + " takes " + std::to_string(kernel.modifier_scalars) +
                        " scalars, but scalars[" + std::to_string(i) + "] is set");
    }
    if (!std::isfinite(x)) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    who + "'s " + (i < kernel.modifier_scalars ? kernel.modifier_scalar[i] : "") +
                        " (scalars[" + std::to_string(i) + "]) is not finite");
    }
  }
  return true;
}

void pass_modifier(const attngen_modifier* m, const attngen_kernel_info& kernel,
                   HalideView (&views)[ATTNGEN_MAX_MODIFIER_TENSORS], attngen_kernel_args& args) {
  if (m == nullptr) return;
  for (int t = 0; t < kernel.modifier_tensors; ++t) args.modifier_tensors[t] = &views[t].buf;
  for (int i = 0; i < kernel.modifier_scalars; ++i) args.modifier_scalars[i] = m->scalars[i];
}

void KeptModifier::keep(const attngen_modifier* m, const char* kernel_modifier) {
  *this = KeptModifier{};
  if (m == nullptr) return;
  present = true;
  modifier = *m;
  modifier.name = kernel_modifier;
  for (int t = 0; t < ATTNGEN_MAX_MODIFIER_TENSORS; ++t) {
    if (m->tensors[t] == nullptr) continue;
    tensors[t] = *m->tensors[t];
    tensors[t].data = nullptr;
    modifier.tensors[t] = &tensors[t];
  }
}

bool KeptModifier::over(Check& c, const void* const (&data)[ATTNGEN_MAX_MODIFIER_TENSORS],
                        KeptModifier& to) const {
  to = *this;
  for (int t = 0; t < ATTNGEN_MAX_MODIFIER_TENSORS; ++t) {
    if (data[t] != nullptr && (!present || modifier.tensors[t] == nullptr)) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    present ? "data.modifier_tensors[" + std::to_string(t) +
                                  "] is set, but the plan's modifier has no such tensor"
                            : std::string("data.modifier_tensors is set, but the plan's call has "
                                          "no modifier"));
    }
    if (present && modifier.tensors[t] != nullptr) {
      to.tensors[t].data = const_cast<void*>(data[t]);
      to.modifier.tensors[t] = &to.tensors[t];
    }
  }
  return true;
}

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_status attngen_alibi_slopes(int64_t heads, float* slopes) {
  Check c;
  if (slopes == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "slopes is NULL");
  } else if (heads < 1 || heads > (int64_t{1} << 30)) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "heads is " + std::to_string(heads) + ", expected 1 to 2^30");
  } else {
    // n slopes 2^(-8 i / n), i = 1 .. n, for the largest power of two n <= heads; the rest every
    // other slope of 2n heads: 2^(-8 (2k + 1) / 2n), k = 0, 1, ...
    int64_t n = 1;
    while (n * 2 <= heads) n *= 2;
    for (int64_t h = 0; h < heads; ++h) {
      const double exponent =
          h < n ? -8.0 * static_cast<double>(h + 1) / static_cast<double>(n)
                : -8.0 * static_cast<double>(2 * (h - n) + 1) / static_cast<double>(2 * n);
      slopes[h] = static_cast<float>(std::exp2(exponent));
    }
  }
  return finish(c, nullptr);
}

}  // extern "C"
