// The variant model's command line, Halide-free (generator/variant.h): what CMake asks at
// configure time (a kernel's name, target, params and tuning; the ISAs to build) and what the
// tuning tests ask. The generator answers these modes too, and adds --describe and
// --descriptor (generator/main.cpp), which need the schedules.
#pragma once

namespace attngen {

// Runs the mode argv[1] names and returns the exit status, or -1 when argv[1] is none of its
// modes. Usage: variant_cli_usage().
int variant_cli(int argc, char** argv);
const char* variant_cli_usage();

}  // namespace attngen
