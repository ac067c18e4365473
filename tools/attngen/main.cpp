// attngen: a command-line tool over the attngen runtime. `patterns` counts what the sparse
// patterns attend and what they cost; `viz` runs a kernel that writes the attention weights and
// draws them. Exit status 2 for bad arguments, always with a message.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/attngen/args.h"
#include "tools/attngen/patterns.h"
#include "tools/attngen/viz.h"

namespace {

constexpr int kExitUsage = 2;

const char kUsage[] =
    "usage: attngen <command> [options]\n\n"
    "commands:\n"
    "  patterns   attended pairs, FLOPs and memory of dense and the sparse patterns\n"
    "             (local window, strided, block-sparse, global + local) at one length\n"
    "  viz        run a kernel that writes the attention weights; heatmaps per head, a grid\n"
    "             of the heads and the pattern masks as PNG files\n"
    "  help       this text, or `attngen help <command>`\n\n"
    "`attngen <command> --help` describes a command's options.\n"
    "Exit status: 0 done, 1 a failure at run time, 2 bad arguments or input files (3: viz, no\n"
    "such kernel).\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace attngen::cli;
  const std::vector<std::string> all(argv + 1, argv + argc);
  if (all.empty()) {
    std::fprintf(stderr, "attngen: a command is needed\n\n%s", kUsage);
    return kExitUsage;
  }
  const std::string command = all[0];
  const std::vector<std::string> args(all.begin() + 1, all.end());
  try {
    if (command == "--help" || command == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (command == "help") {
      if (args.empty()) {
        std::fputs(kUsage, stdout);
      } else if (args[0] == "patterns") {
        std::fputs(patterns_help().c_str(), stdout);
      } else if (args[0] == "viz") {
        std::fputs(viz_help().c_str(), stdout);
      } else {
        throw UsageError("attngen help: unknown command '" + args[0] + "'");
      }
      return 0;
    }
    if (command == "patterns") {
      if (wants_help(args)) {
        std::fputs(patterns_help().c_str(), stdout);
        return 0;
      }
      return run_patterns(args);
    }
    if (command == "viz") {
      if (wants_help(args)) {
        std::fputs(viz_help().c_str(), stdout);
        return 0;
      }
      return run_viz(args);
    }
    throw UsageError("attngen: unknown command '" + command + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\nSee `attngen %s--help`.\n", e.what(),
                 command == "patterns" || command == "viz" ? (command + " ").c_str() : "");
    return kExitUsage;
  } catch (const InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "attngen %s: out of memory\n", command.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attngen %s: %s\n", command.c_str(), e.what());
    return 1;
  }
}
