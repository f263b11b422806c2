// gguf_writer.h - GGUF files written byte by byte for the tests (the product has no GGUF writer):
// GgufBytes appends fields, GgufMetadata collects key/value entries, gguf_file() lays out a whole
// file (header, metadata, tensor infos, aligned data area).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/io/gguf.h"

namespace rlrun::engine::testing {

// Appends GGUF fields little-endian.
class GgufBytes {
 public:
  template <typename T>
  GgufBytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
    return *this;
  }
  GgufBytes& string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& key(const std::string& k, GgufValueType type) {
    string(k);
    return put(static_cast<uint32_t>(type));
  }
  void pad_to(size_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

struct TensorData {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order, innermost first
  GgmlType type;
  std::vector<uint8_t> data;
};

// Metadata entries in the order added; each is encoded when added.
class GgufMetadata {
 public:
  GgufMetadata& u32(const std::string& k, uint32_t v) { return add(k, GgufValueType::kUint32, [&](GgufBytes& b) { b.put(v); }); }
  GgufMetadata& i32(const std::string& k, int32_t v) { return add(k, GgufValueType::kInt32, [&](GgufBytes& b) { b.put(v); }); }
  GgufMetadata& f32(const std::string& k, float v) { return add(k, GgufValueType::kFloat32, [&](GgufBytes& b) { b.put(v); }); }
  GgufMetadata& boolean(const std::string& k, bool v) {
    return add(k, GgufValueType::kBool, [&](GgufBytes& b) { b.put<uint8_t>(v ? 1 : 0); });
  }
  GgufMetadata& str(const std::string& k, const std::string& v) {
    return add(k, GgufValueType::kString, [&](GgufBytes& b) { b.string(v); });
  }
  GgufMetadata& strings(const std::string& k, const std::vector<std::string>& v) {
    return add(k, GgufValueType::kArray, [&](GgufBytes& b) {
      b.put(static_cast<uint32_t>(GgufValueType::kString)).put<uint64_t>(v.size());
      for (const std::string& s : v) b.string(s);
    });
  }
  GgufMetadata& i32s(const std::string& k, const std::vector<int32_t>& v) {
    return add(k, GgufValueType::kArray, [&](GgufBytes& b) {
      b.put(static_cast<uint32_t>(GgufValueType::kInt32)).put<uint64_t>(v.size());
      for (int32_t x : v) b.put(x);
    });
  }
  GgufMetadata& f32s(const std::string& k, const std::vector<float>& v) {
    return add(k, GgufValueType::kArray, [&](GgufBytes& b) {
      b.put(static_cast<uint32_t>(GgufValueType::kFloat32)).put<uint64_t>(v.size());
      for (float x : v) b.put(x);
    });
  }
  size_t count() const { return count_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  template <typename Write>
  GgufMetadata& add(const std::string& k, GgufValueType type, Write write) {
    GgufBytes b;
    b.key(k, type);
    write(b);
    bytes_.insert(bytes_.end(), b.bytes().begin(), b.bytes().end());
    ++count_;
    return *this;
  }
  std::vector<uint8_t> bytes_;
  size_t count_ = 0;
};

// A version-3 file: `metadata`, then `tensors` laid out in order in a data area aligned to 32.
inline std::vector<uint8_t> gguf_file(const GgufMetadata& metadata, const std::vector<TensorData>& tensors) {
  constexpr uint64_t kAlignment = 32;
  GgufBytes b;
  b.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(tensors.size()).put<uint64_t>(metadata.count());
  b.bytes().insert(b.bytes().end(), metadata.bytes().begin(), metadata.bytes().end());
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TensorData& t : tensors) {
    b.string(t.name).put<uint32_t>(t.dims.size());
    for (uint64_t d : t.dims) b.put<uint64_t>(d);
    b.put<uint32_t>(static_cast<uint32_t>(t.type)).put<uint64_t>(offset);
    offsets.push_back(offset);
    offset = (offset + t.data.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  b.pad_to(kAlignment);
  const size_t data_start = b.bytes().size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    b.bytes().resize(data_start + offsets[i], 0);
    b.bytes().insert(b.bytes().end(), tensors[i].data.begin(), tensors[i].data.end());
  }
  return b.bytes();
}

// `n` F32 values (v0, v0 + step, ...) as tensor bytes.
inline std::vector<uint8_t> f32_bytes(size_t n, float v0 = 0.01f, float step = 0.001f) {
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    const float v = v0 + step * static_cast<float>(i % 97);
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

}  // namespace rlrun::engine::testing
