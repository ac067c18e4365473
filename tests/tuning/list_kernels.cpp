// Prints every built-in kernel's descriptor as "name|isa|tuning|tunables", one per line, for
// tests/tuning/check_descriptors.cmake (which compares them with the tuning files).
#include <cstdio>

#include "attngen/kernel.h"

int main() {
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    std::printf("%s|%s|%s|%s\n", k->name, k->isa, k->tuning ? k->tuning : "",
                k->tunables ? k->tunables : "");
  }
  return 0;
}
