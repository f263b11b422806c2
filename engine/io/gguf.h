// gguf.h - read GGUF files (llama.cpp's model format), versions 2 and 3.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count; kv_count
// metadata pairs (string key, u32 value type, value); tensor_count tensor infos (string name,
// u32 n_dims, u64 dims[n_dims] innermost first, u32 ggml type, u64 offset); padding to
// `general.alignment` (default 32); the data area, which tensor offsets are relative to. A string
// is a u64 length and that many bytes (no NUL); an array is a u32 element type, a u64 count and
// the elements.
//
// Files are untrusted: every count, length, dimension and offset is checked against the file's
// size before anything is allocated for it, and each malformed field gives a Status naming the
// file and the field. Arrays of arrays are refused (no model file uses them).
// Dequantizing tensor data to fp32: gguf_dequant.h. GGUF models as ModelConfig, weights and
// tokenizer: gguf_model.h.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rlrun::engine {

class MappedFile;  // mapped_file.h

enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);

// The ggml tensor types this reader accepts (numbering as in ggml.h); others are refused by name.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
};
// The accepted types' names, for messages: "F32, F16, BF16, Q4_0, ...".
const char* supported_ggml_types();
// "Q4_1"; for any ggml type number, supported or not ("Q4_K", ..., "type 99" when unknown).
std::string ggml_type_name(uint32_t type);

// Elements per block and bytes per block of a supported type (F32: 1 and 4; Q4_1: 32 and 20;
// Q4_K: 256 and 144).
struct GgmlBlock {
  int64_t elements;
  int64_t bytes;
};
GgmlBlock ggml_block(GgmlType type);

// One metadata value. Views point into the file's bytes (valid while the GgufFile lives).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType element_type = GgufValueType::kUint8;  // kArray only
  uint64_t count = 1;                                  // elements of an array; 1 for a scalar
  std::span<const uint8_t> bytes;                      // numeric/bool: the element(s), raw
  std::vector<std::string_view> strings;               // kString: the string; string arrays: all
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;       // ggml order: dims[0] is the contiguous (innermost) one
  uint64_t offset = 0;             // in the data area
  std::span<const uint8_t> bytes;  // the tensor's data in the file

  int64_t numel() const;
  std::vector<int64_t> shape() const;  // row-major, outermost first (dims reversed)
};

// A parsed GGUF file. Copies share the mapped bytes that every view points into.
class GgufFile {
 public:
  // Maps `path` read-only and validates everything but the tensor data itself.
  static Result<GgufFile> open(const std::string& path);
  // Validates an in-memory file; `source` names it in messages.
  static Result<GgufFile> parse(std::string source, std::vector<uint8_t> bytes);

  const std::string& source() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // from the file's start
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order

  const GgufValue* find(std::string_view key) const;  // null when absent
  Result<const GgufTensor*> find_tensor(std::string_view name) const;

  // Typed metadata; errors name the key and the file (absent, or of another type).
  Result<int64_t> get_int(std::string_view key) const;   // any integer type that fits int64
  Result<double> get_float(std::string_view key) const;  // FLOAT32/FLOAT64 (or an integer)
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<std::vector<std::string_view>> get_strings(std::string_view key) const;  // array of strings
  Result<std::vector<int64_t>> get_ints(std::string_view key) const;              // array of integers

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string source_;
  std::shared_ptr<const MappedFile> buffer_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // tensor name -> position in tensors_
};

}  // namespace rlrun::engine
