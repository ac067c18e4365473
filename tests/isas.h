// The ISAs automatic dispatch can be restricted to on this machine (attngen_set_isa()), from the
// kernels built; CUDA's are left out (they copy host buffers: tests/cuda and the OpenCL build test
// them).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"

namespace attngen::test {

// Those with a kernel for which `has(kernel)` holds.
template <typename Has>
std::vector<std::string> runnable_cpu_isas_with(Has has) {
  std::vector<std::string> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    const std::string isa = k->isa;
    // Kernels a test registered (named test_*, e.g. a linear kernel under the generic row in
    // DtypeConversion.Linear) stay registered for the rest of the process: they do not make an
    // ISA that has no kernels of its own one of the machine's.
    if (std::string(k->name).rfind("test_", 0) == 0 || !has(*k)) continue;
    if (isa == "cuda" || std::find(out.begin(), out.end(), isa) != out.end()) continue;
    if (attngen_set_isa(isa.c_str()) == ATTNGEN_OK) out.push_back(isa);
  }
  attngen_set_isa(nullptr);
  return out;
}

// Those with a kernel of `op` where one is given.
inline std::vector<std::string> runnable_cpu_isas(const attngen_op* op = nullptr) {
  return runnable_cpu_isas_with(
      [op](const attngen_kernel_info& k) { return op == nullptr || k.op == *op; });
}

}  // namespace attngen::test
