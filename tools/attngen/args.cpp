#include "tools/attngen/args.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace attngen::cli {

namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

int64_t ParsedArgs::integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  int64_t v = 0;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) {
    throw UsageError(command_ + ": --" + name + ": expected an integer in [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "], got " + quoted(s));
  }
  return v;
}

double ParsedArgs::real(const std::string& name, double def, double lo, double hi) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return def;
  const std::string& s = it->second;
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v) || v < lo ||
      v > hi) {
    char range[96];
    std::snprintf(range, sizeof range, "[%g, %g]", lo, hi);
    throw UsageError(command_ + ": --" + name + ": expected a number in " + range + ", got " +
                     quoted(s));
  }
  return v;
}

std::string ParsedArgs::text(const std::string& name, const std::string& def) const {
  const auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

void ParsedArgs::require(const std::string& name) const {
  if (!has(name)) throw UsageError(command_ + ": --" + name + " is required");
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

ParsedArgs parse_args(const std::string& command, const std::vector<OptionSpec>& specs,
                      const std::vector<std::string>& args) {
  std::map<std::string, std::string> values;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      throw UsageError(command + ": unexpected argument " + quoted(a) + " (options start with --)");
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      inline_value = true;
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& s : specs) {
      if (name == s.name) spec = &s;
    }
    if (spec == nullptr) throw UsageError(command + ": unknown option --" + name);
    if (values.count(name) != 0) throw UsageError(command + ": --" + name + " given twice");
    if (spec->value == nullptr) {
      if (inline_value) throw UsageError(command + ": --" + name + " takes no value");
    } else if (!inline_value) {
      if (i + 1 >= args.size()) {
        throw UsageError(command + ": --" + name + " needs a value (" + spec->value + ")");
      }
      value = args[++i];
    }
    values[name] = value;
  }
  return ParsedArgs(command, std::move(values));
}

std::string options_help(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const OptionSpec& s : specs) {
    std::string left = std::string("  --") + s.name;
    if (s.value != nullptr) left += std::string(" ") + s.value;
    if (left.size() < 20)
      left.resize(20, ' ');
    else
      left += "\n" + std::string(20, ' ');
    out += left + s.help + "\n";
  }
  return out;
}

}  // namespace attngen::cli
