// attngen_variant_tool: the variant model's Halide-free modes (generator/variant_cli.h), built
// by CMake at configure time, before the generator exists (cmake/AttngenKernels.cmake).
#include <iostream>

#include "generator/variant_cli.h"

int main(int argc, char** argv) {
  const int status = attngen::variant_cli(argc, argv);
  if (status >= 0) return status;
  std::cerr << attngen::variant_cli_usage();
  return 2;
}
