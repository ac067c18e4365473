#include "tools/attngen/tensor_io.h"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tools/attngen/args.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensor_io.cpp reads little-endian float32 by copying bytes: a big-endian host needs swaps"
#endif

namespace attngen::cli {

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";  // 6 bytes
constexpr uint64_t kMaxNpyHeader = uint64_t(1) << 20;
constexpr uint64_t kMaxSafetensorsHeader = uint64_t(100) << 20;  // the format's own limit

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw InputError(where + ": " + what);
}

// A whole file's bytes are not read at once: the header first, then (after the shape and the
// file size agree) exactly the data.
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a file");
    in_.open(path, std::ios::binary);
    if (!in_) fail(path, std::string("cannot open: ") + std::strerror(errno));
    in_.seekg(0, std::ios::end);
    const std::streamoff end = in_.tellg();
    if (end < 0) fail(path, "cannot determine the file size");
    size_ = uint64_t(end);
    in_.seekg(0);
  }
  uint64_t size() const { return size_; }
  // Reads n bytes at offset; false if the file ends first.
  bool read(uint64_t offset, void* dst, uint64_t n) {
    if (offset > size_ || n > size_ - offset) return false;
    in_.clear();
    in_.seekg(std::streamoff(offset));
    in_.read(static_cast<char*>(dst), std::streamsize(n));
    return uint64_t(in_.gcount()) == n;
  }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

uint64_t load_le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

// Product of the sizes, refusing negative sizes, empty tensors and more than
// kMaxTensorElements elements (checked before anything is allocated).
int64_t element_count(const std::string& where, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t s : shape) {
    if (s < 0) fail(where, "negative size in shape " + shape_string(shape));
    if (s == 0) fail(where, "empty tensor, shape " + shape_string(shape));
    if (n > kMaxTensorElements / s) {
      fail(where, "shape " + shape_string(shape) + " is too large (more than 2^28 elements, " +
                      "1 GiB of float32)");
    }
    n *= s;
  }
  return n;
}

FloatTensor read_data(File& f, const std::string& where, std::vector<int64_t> shape,
                      uint64_t offset, uint64_t bytes) {
  const int64_t n = element_count(where, shape);
  const uint64_t want = uint64_t(n) * 4;
  if (bytes < want) {
    fail(where, "truncated: shape " + shape_string(shape) + " of float32 needs " +
                    std::to_string(want) + " bytes of data, the file holds " +
                    std::to_string(bytes));
  }
  if (bytes > want) {
    fail(where, std::to_string(bytes - want) + " bytes after the data of shape " +
                    shape_string(shape) + " (" + std::to_string(want) + " bytes expected)");
  }
  FloatTensor t;
  t.shape = std::move(shape);
  t.data.resize(size_t(n));
  if (!f.read(offset, t.data.data(), want)) fail(where, "read error in the data");
  t.source = where;
  return t;
}

// ---- .npy: magic, version, header length (2 bytes in 1.0, 4 in 2.0 and 3.0), then a Python
// dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (12, 4, 64), }.

class NpyHeader {
 public:
  NpyHeader(std::string where, std::string text) : where_(std::move(where)), s_(std::move(text)) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      skip();
      if (key == "descr") {
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        bad("unknown key '" + key + "'");
      }
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') bad("expected ',' or '}'");
    }
    if (!have_descr || !have_fortran || !have_shape) {
      bad("the header lacks 'descr', 'fortran_order' or 'shape'");
    }
  }

 private:
  [[noreturn]] void bad(const std::string& what) {
    fail(where_, "malformed .npy header (" + what + " at character " + std::to_string(pos_) +
                     "): " + printable(s_));
  }
  static std::string printable(const std::string& s) {
    std::string out;
    for (const char c : s.substr(0, 120)) {
      out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    }
    return out + (s.size() > 120 ? "..." : "");
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void expect(char c) {
    skip();
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal() {
    skip();
    const char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a quoted string");
    const size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string::npos) bad("unterminated string");
    std::string v = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return v;
  }
  bool boolean() {
    if (s_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (s_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> v;
    expect('(');
    while (true) {
      skip();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) bad("expected a size");
      int64_t x = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const int d = s_[pos_++] - '0';
        if (x > (std::numeric_limits<int64_t>::max() - d) / 10) bad("size out of range");
        x = x * 10 + d;
      }
      if (peek() == 'L') ++pos_;  // Python 2's long literals
      v.push_back(x);
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') bad("expected ',' or ')'");
    }
    ++pos_;
    return v;
  }

  std::string where_, s_;
  size_t pos_ = 0;
};

FloatTensor read_npy(File& f, const std::string& path) {
  uint8_t pre[12] = {};
  if (!f.read(0, pre, 10)) fail(path, "truncated .npy file (shorter than its 10-byte preamble)");
  const int major = pre[6], minor = pre[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    fail(path, ".npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (1.0, 2.0 and 3.0 are read)");
  }
  uint64_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = load_le(pre + 8, 2);
    header_at = 10;
  } else {
    if (!f.read(0, pre, 12)) fail(path, "truncated .npy file (in its preamble)");
    header_len = load_le(pre + 8, 4);
    header_at = 12;
  }
  if (header_len > kMaxNpyHeader) {
    fail(path, ".npy header length " + std::to_string(header_len) + " is implausible");
  }
  std::string header(size_t(header_len), '\0');
  if (!f.read(header_at, header.data(), header_len)) {
    fail(path, "truncated .npy file: the header says " + std::to_string(header_len) +
                   " bytes, the file ends first");
  }
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  NpyHeader(path, header).parse(descr, fortran, shape);
  if (descr != "<f4") {
    std::string hint;
    if (descr == ">f4") hint = " (big-endian float32; save with a.astype('<f4'))";
    if (descr == "<f8" || descr == "<f2") hint = " (save with a.astype(np.float32))";
    fail(path, "dtype '" + descr + "', expected little-endian float32 '<f4'" + hint);
  }
  if (fortran) {
    fail(path, "fortran_order is True; save a C-order array (np.ascontiguousarray(a))");
  }
  const uint64_t data_at = header_at + header_len;
  return read_data(f, path, std::move(shape), data_at, f.size() - data_at);
}

// ---- safetensors: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": ...},
// then the data; offsets count from the end of the header.

struct SafetensorsHeader {
  nlohmann::json json;
  uint64_t data_at = 0, data_size = 0;
};

bool looks_like_npy(File& f) {
  char magic[6] = {};
  return f.read(0, magic, 6) && std::memcmp(magic, kNpyMagic, 6) == 0;
}

SafetensorsHeader read_safetensors_header(File& f, const std::string& path) {
  uint8_t len[8] = {};
  if (!f.read(0, len, 8)) {
    fail(path, "neither .npy (no magic \\x93NUMPY) nor safetensors (shorter than 8 bytes)");
  }
  const uint64_t n = load_le(len, 8);
  char first = 0;
  if (n < 2 || n > kMaxSafetensorsHeader || n > f.size() - 8 || !f.read(8, &first, 1) ||
      first != '{') {
    fail(path, "neither .npy (no magic \\x93NUMPY) nor safetensors (header length " +
                   std::to_string(n) + " in a file of " + std::to_string(f.size()) +
                   " bytes, or no JSON object after it)");
  }
  std::string text(size_t(n), '\0');
  if (!f.read(8, text.data(), n)) fail(path, "read error in the safetensors header");
  SafetensorsHeader h;
  h.json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (h.json.is_discarded() || !h.json.is_object()) {
    fail(path, "the safetensors header is not a JSON object");
  }
  h.data_at = 8 + n;
  h.data_size = f.size() - h.data_at;
  return h;
}

FloatTensor read_safetensors(File& f, const std::string& path, const std::string& name) {
  const SafetensorsHeader h = read_safetensors_header(f, path);
  const std::string where = path + " (tensor '" + name + "')";
  const auto it = h.json.find(name);
  if (it == h.json.end()) {
    std::string names;
    for (const auto& [key, value] : h.json.items()) {
      if (key == "__metadata__") continue;
      names += (names.empty() ? "'" : ", '") + key + "'";
    }
    fail(path,
         "no tensor named '" + name + "' (it holds " + (names.empty() ? "none" : names) + ")");
  }
  const nlohmann::json& e = *it;
  if (!e.is_object()) fail(where, "its header entry is not an object");
  const auto dtype = e.find("dtype");
  if (dtype == e.end() || !dtype->is_string()) fail(where, "no \"dtype\" string");
  if (dtype->get<std::string>() != "F32") {
    fail(where, "dtype " + dtype->get<std::string>() + ", expected F32");
  }
  const auto shape_it = e.find("shape");
  if (shape_it == e.end() || !shape_it->is_array()) fail(where, "no \"shape\" array");
  std::vector<int64_t> shape;
  for (const nlohmann::json& s : *shape_it) {
    if (!s.is_number_unsigned() || s.get<uint64_t>() > uint64_t(kMaxTensorElements)) {
      fail(where, "\"shape\" " + shape_it->dump() + " holds something other than a size");
    }
    shape.push_back(s.get<int64_t>());
  }
  const auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    fail(where, "no \"data_offsets\" [begin, end]");
  }
  const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end) fail(where, "data_offsets " + off->dump() + " begin after they end");
  if (end > h.data_size) {
    fail(where, "truncated: data_offsets " + off->dump() + " reach past the " +
                    std::to_string(h.data_size) + " bytes of data in the file");
  }
  return read_data(f, where, std::move(shape), h.data_at + begin, end - begin);
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

FloatTensor read_tensor(const std::string& path, const std::string& name) {
  File f(path);
  if (looks_like_npy(f)) return read_npy(f, path);
  return read_safetensors(f, path, name);
}

bool is_npy_file(const std::string& path) {
  try {
    File f(path);
    return looks_like_npy(f);
  } catch (const InputError&) {
    return false;
  }
}

bool safetensors_has(const std::string& path, const std::string& name) {
  try {
    File f(path);
    if (looks_like_npy(f)) return false;
    return read_safetensors_header(f, path).json.contains(name);
  } catch (const InputError&) {
    return false;
  }
}

std::vector<std::string> read_tokens(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(line);
  }
  if (in.bad()) fail(path, "read error");
  return tokens;
}

}  // namespace attngen::cli
