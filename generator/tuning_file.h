// Tuning files (schedules/tuned/<arch>_<isa>.json, written by bench/autotune; format in
// schedules/tuned/README.md): read and checked here, for the variant tool that CMake runs.
#pragma once

#include <string>
#include <vector>

#include "generator/variant.h"

namespace attngen {

struct TuningEntry {
  std::string cls;
  std::vector<Tunable> tunables;  // in name order
};

// Reads and checks the whole file: a JSON object with "format": "attngen-tuning-1", "target"
// equal to `target` (e.g. "x86_64_avx512") and "entries" mapping shape classes to
// {"tunables": {name: integer >= 0}} that the class's variant takes. Returns false with a
// message naming the file (and the entry) otherwise.
bool read_tuning_file(const std::string& path, const std::string& target,
                      std::vector<TuningEntry>* entries, std::string* error);

}  // namespace attngen
