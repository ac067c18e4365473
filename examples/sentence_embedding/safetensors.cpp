#include "examples/sentence_embedding/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

namespace embed {
namespace {

// The format's own limit on the header (the reference implementation refuses larger ones).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafeTensorsError(path + ": " + what);
}

}  // namespace

size_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: normalise the mantissa.
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafeTensors SafeTensors::open(const std::string& path) {
  SafeTensors st;
  st.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  st.size_ = size_t(sb.st_size);
  if (st.size_ > 0) {
    void* p = mmap(nullptr, st.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail(path, std::string("cannot map: ") + std::strerror(e));
    }
    st.map_ = static_cast<const uint8_t*>(p);
    st.mmapped_ = true;
  }
  ::close(fd);
  st.parse();
  return st;
}

SafeTensors SafeTensors::from_bytes(std::vector<uint8_t> bytes, const std::string& name) {
  SafeTensors st;
  st.path_ = name;
  st.owned_ = std::move(bytes);
  st.map_ = st.owned_.data();
  st.size_ = st.owned_.size();
  st.parse();
  return st;
}

SafeTensors::SafeTensors(SafeTensors&& o) noexcept { *this = std::move(o); }

SafeTensors& SafeTensors::operator=(SafeTensors&& o) noexcept {
  if (this == &o) return *this;
  if (mmapped_) munmap(const_cast<uint8_t*>(map_), size_);
  path_ = std::move(o.path_);
  const bool owned = !o.mmapped_;
  owned_ = std::move(o.owned_);
  map_ = owned ? owned_.data() : o.map_;
  // data_ keeps its offset from the start of the file.
  data_ = o.data_ ? map_ + (o.data_ - o.map_) : nullptr;
  size_ = o.size_;
  mmapped_ = o.mmapped_;
  data_size_ = o.data_size_;
  tensors_ = std::move(o.tensors_);
  metadata_ = std::move(o.metadata_);
  o.map_ = o.data_ = nullptr;
  o.size_ = o.data_size_ = 0;
  o.mmapped_ = false;
  return *this;
}

SafeTensors::~SafeTensors() {
  if (mmapped_) munmap(const_cast<uint8_t*>(map_), size_);
}

void SafeTensors::parse() {
  if (size_ < 8)
    fail(path_,
         "file of " + std::to_string(size_) + " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map_[i];  // little-endian
  if (n > kMaxHeaderBytes)
    fail(path_, "header length " + std::to_string(n) + " exceeds the format's limit of " +
                    std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size_ - 8)
    fail(path_, "header length " + std::to_string(n) + " exceeds the " + std::to_string(size_ - 8) +
                    " bytes after it");
  data_ = map_ + 8 + n;
  data_size_ = size_ - 8 - size_t(n);

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(map_ + 8, map_ + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    fail(path_, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path_, "header is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path_, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(path_, "__metadata__[\"" + k + "\"] is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\": ";
    if (!entry.is_object()) fail(path_, where + "entry is not an object");
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) fail(path_, where + "no string \"dtype\"");
    if (sh == entry.end() || !sh->is_array()) fail(path_, where + "no array \"shape\"");
    if (off == entry.end() || !off->is_array() || off->size() != 2)
      fail(path_, where + "\"data_offsets\" is not an array of two offsets");
    TensorInfo info;
    info.dtype = dt->get<std::string>();
    const size_t esize = dtype_size(info.dtype);
    if (esize == 0) fail(path_, where + "unknown dtype \"" + info.dtype + "\"");
    // Element count, with overflow checks: the product must fit the buffer anyway.
    uint64_t count = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        fail(path_, where + "shape " + sh->dump() + " is not a list of sizes >= 0");
      const uint64_t v = d.get<uint64_t>();
      if (v > uint64_t(std::numeric_limits<int64_t>::max()) ||
          (v != 0 && count > std::numeric_limits<uint64_t>::max() / v))
        fail(path_, where + "shape " + sh->dump() + " overflows");
      count *= v;
      info.shape.push_back(int64_t(v));
    }
    for (const auto& o : *off)
      if (!o.is_number_unsigned())
        fail(path_, where + "data_offsets " + off->dump() + " are not offsets >= 0");
    info.begin = (*off)[0].get<uint64_t>();
    info.end = (*off)[1].get<uint64_t>();
    if (info.begin > info.end)
      fail(path_, where + "data_offsets " + off->dump() + " begin after they end");
    if (info.end > data_size_)
      fail(path_, where + "data_offsets " + off->dump() + " run past the data buffer of " +
                      std::to_string(data_size_) + " bytes");
    if (count > std::numeric_limits<uint64_t>::max() / esize ||
        count * esize != info.end - info.begin)
      fail(path_, where + std::to_string(info.end - info.begin) + " bytes for shape " +
                      shape_string(info.shape) + " of " + info.dtype + ", expected " +
                      std::to_string(count * esize));
    ranges.emplace_back(info.begin, info.end);
    tensors_.emplace(name, std::move(info));
  }
  // As the reference implementation: the tensors tile the buffer, no overlap, no hole.
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b != at)
      fail(path_, "data_offsets " + std::string(b < at ? "overlap" : "leave a hole") + " at byte " +
                      std::to_string(std::min(b, at)) + " of the data buffer");
    at = e;
  }
  if (at != data_size_)
    fail(path_, "the tensors cover " + std::to_string(at) + " of the " +
                    std::to_string(data_size_) + " bytes of the data buffer");
}

const TensorInfo& SafeTensors::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "no tensor \"" + name + "\"");
  return it->second;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> n;
  for (const auto& kv : tensors_) n.push_back(kv.first);
  return n;
}

std::vector<float> SafeTensors::load_f32(const std::string& name,
                                         const std::vector<int64_t>& expected_shape) const {
  const TensorInfo& t = info(name);
  if (!expected_shape.empty() && t.shape != expected_shape)
    fail(path_, "tensor \"" + name + "\" has shape " + shape_string(t.shape) + ", expected " +
                    shape_string(expected_shape));
  const uint8_t* p = data_ + t.begin;
  const size_t n = size_t(t.end - t.begin) / std::max<size_t>(1, dtype_size(t.dtype));
  std::vector<float> out(n);
  if (t.dtype == "F32") {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 |
                            uint32_t(p[4 * i + 2]) << 16 | uint32_t(p[4 * i + 3]) << 24;
      std::memcpy(&out[i], &bits, 4);
    }
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    const bool f16 = t.dtype == "F16";
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = uint16_t(p[2 * i] | p[2 * i + 1] << 8);
      out[i] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  } else {
    fail(path_, "tensor \"" + name + "\" has dtype " + t.dtype + ", expected F32, F16 or BF16");
  }
  return out;
}

}  // namespace embed
