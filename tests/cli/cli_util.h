// Shared by the tests of the attngen command-line tool: running it as a child process
// (ATTNGEN_CLI_PATH) with its output captured, and decoding PNG files with libpng.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace attngen_cli_test {

namespace fs = std::filesystem;

struct RunResult {
  bool exited = false;  // false: killed by a signal (a crash)
  int status = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the tool with args, stdout and stderr going through files in dir; env entries are set
// in the child (an empty value unsets).
inline RunResult run_tool(const fs::path& dir, const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env = {}) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  std::vector<char*> argv;
  std::string tool = ATTNGEN_CLI_PATH;
  argv.push_back(tool.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) {
      if (value.empty()) {
        unsetenv(name.c_str());
      } else {
        setenv(name.c_str(), value.c_str(), 1);
      }
    }
    const int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0) _exit(126);
    dup2(fo, 1);
    dup2(fe, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  RunResult r;
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return r;
  r.exited = WIFEXITED(st);
  r.status = r.exited ? WEXITSTATUS(st) : -WTERMSIG(st);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

inline std::string show(const std::vector<std::string>& args) {
  std::string s = "attngen";
  for (const std::string& a : args) s += " '" + a + "'";
  return s;
}

struct Png {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const { return &rgb[(size_t(y) * width + x) * 3]; }
  int luma(int x, int y) const {
    const uint8_t* p = at(x, y);
    return (p[0] * 3 + p[1] * 6 + p[2]) / 10;
  }
};

inline ::testing::AssertionResult read_png(const fs::path& path, Png& png) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str())) {
    return ::testing::AssertionFailure() << path << ": " << img.message;
  }
  img.format = PNG_FORMAT_RGB;
  png.width = int(img.width);
  png.height = int(img.height);
  png.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, png.rgb.data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    return ::testing::AssertionFailure() << path << ": " << msg;
  }
  return ::testing::AssertionSuccess();
}

// The image layout of tools/attngen/README.md, restated.
inline int panel_side(int64_t seq, int cap) {
  if (seq <= cap) return int(seq * (cap / seq));
  const int64_t f = (seq + cap - 1) / cap;
  return int((seq + f - 1) / f);
}
inline int line_height(int side) { return side >= 240 ? 20 : 10; }  // 10 x the font scale

}  // namespace attngen_cli_test
