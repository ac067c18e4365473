// Prints every built-in kernel's descriptor as "name|target|tuning|tunables|class", one per line,
// for tests/tuning/check_descriptors.cmake (which compares them with the tuning files); target
// is the tuning file stem of the kernel's ISA (<arch>_<isa>, from the target table).
#include <cstdio>

#include "attngen/kernel.h"
#include "core/targets.h"

int main() {
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    const attngen::TargetRow* t = attngen::find_target(k->isa);
    std::printf("%s|%s_%s|%s|%s|%s\n", k->name, t ? t->arch : "?", k->isa,
                k->tuning ? k->tuning : "", k->tunables ? k->tunables : "",
                k->tuning_class ? k->tuning_class : "");
  }
  return 0;
}
