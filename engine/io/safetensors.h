// safetensors.h - read and write HF safetensors files.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}   (optional, string values only)
// then the data area; offsets are relative to its start, tensors are row-major, little-endian.
// Like the reference implementation, a file is accepted only if its tensors tile the data area
// exactly (no overlap, no hole, nothing after the last tensor).
//
// Files are untrusted: every malformed header, offset, shape or dtype gives a Status naming the
// file and the tensor; nothing is allocated in proportion to a number read from the file before
// that number has been checked against the file's size.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/tensor.h"

namespace rlrun::engine {

class MappedFile;  // mapped_file.h

// Element types are engine::DType (tensor.h); files may also hold kF16 and kI64.
const char* safetensors_dtype_name(DType dtype);            // the file's spelling: "F32", "BF16", ...
Result<DType> parse_safetensors_dtype(std::string_view name);  // inverse; other names are errors

// One tensor of an open file; `bytes` points into the file's buffer (valid while the file lives).
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;

  int64_t numel() const;
};

// A float tensor on the host: the currency of checkpoint loading and saving.
struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  std::vector<float> data;
};

// "[2, 3]" for messages.
std::string shape_string(std::span<const int64_t> shape);

// A parsed safetensors file. Move-only; the views stay valid while it lives.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header.
  static Result<SafetensorsFile> open(const std::string& path);
  // Validates an in-memory file; `source` names it in messages.
  static Result<SafetensorsFile> parse(std::string source, std::vector<uint8_t> bytes);

  const std::string& source() const { return source_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in data-offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // not_found (naming file and tensor) when absent.
  Result<const TensorView*> find(std::string_view name) const;
  // The tensor converted to fp32 (F32/BF16/F16 only), checked against `expected_shape`.
  Result<std::vector<float>> read_f32(std::string_view name,
                                      std::span<const int64_t> expected_shape) const;

 private:
  SafetensorsFile() = default;
  static Result<SafetensorsFile> from_buffer(std::string source, std::shared_ptr<const MappedFile> buffer);

  std::string source_;
  std::shared_ptr<const MappedFile> buffer_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Converts a view to fp32 (F32, BF16, F16); other dtypes are errors naming the tensor.
Result<std::vector<float>> tensor_to_f32(const TensorView& view, const std::string& source);

// fp32 values encoded as `dtype` (F32 or BF16, round to nearest even), little-endian.
Result<std::vector<uint8_t>> encode_f32(std::span<const float> values, DType dtype);

// A tensor to write: raw little-endian bytes of `dtype`, numel(shape) * dtype_size(dtype) long.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};

// Writes a safetensors file atomically (temp file in the same directory, fsync, rename). Tensors
// are stored in the given order; names must be unique and sizes must match shape x dtype.
Status write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Writes fp32 host tensors converted to `dtype` (F32 or BF16).
Status write_safetensors_f32(const std::string& path, std::span<const HostTensor> tensors,
                             DType dtype, const std::map<std::string, std::string>& metadata = {});
// The same for tensors that live elsewhere (pointers must be non-null); F32 data is not copied.
Status write_safetensors_f32(const std::string& path, std::span<const HostTensor* const> tensors,
                             DType dtype, const std::map<std::string, std::string>& metadata = {});

}  // namespace rlrun::engine
