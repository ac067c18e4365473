// Command-line parsing for the attngen tool: `--name value`, `--name=value` and flags, checked
// against each subcommand's option table. Any problem is a UsageError, which main() turns into
// a message and exit status 2.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace attngen::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A problem with an input file's contents (format, dtype, shape, values): exit status 2 as for
// bad arguments, with a message naming the file, but no pointer to --help.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct OptionSpec {
  const char* name;   // without the leading "--"
  const char* value;  // the value's placeholder in the help ("N"), nullptr for a flag
  const char* help;
};

class ParsedArgs {
 public:
  ParsedArgs(std::string command, std::map<std::string, std::string> values)
      : command_(std::move(command)), values_(std::move(values)) {}

  const std::string& command() const { return command_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool flag(const std::string& name) const { return has(name); }
  // Integer in [lo, hi]; def when absent.
  int64_t integer(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  // Finite number in [lo, hi]; def when absent.
  double real(const std::string& name, double def, double lo, double hi) const;
  std::string text(const std::string& name, const std::string& def) const;
  // The option must be given.
  void require(const std::string& name) const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
};

// Parses args (everything after the subcommand) against specs. "--help" and "-h" are not
// handled here: callers look for them first.
ParsedArgs parse_args(const std::string& command, const std::vector<OptionSpec>& specs,
                      const std::vector<std::string>& args);

// Whether args ask for help (--help or -h anywhere).
bool wants_help(const std::vector<std::string>& args);

// The options part of a subcommand's help text.
std::string options_help(const std::vector<OptionSpec>& specs);

}  // namespace attngen::cli
