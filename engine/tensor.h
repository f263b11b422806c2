// tensor.h - dense, contiguous, row-major tensors whose memory belongs to a Backend.
//
// A Tensor is a handle: dtype, shape (rank <= 4) and a byte offset into a shared Storage block.
// Copying a Tensor copies the handle, never the data; views (rows(), view()) share the storage,
// which is freed when the last handle goes. There are no strides: every tensor is contiguous, so
// a "rows" view of a (N, H) tensor is (end - begin, H) starting at row `begin`.
//
// Handle semantics, like std::span<T>: a `const Tensor&` still lets callers write its data. Ops
// take every tensor by const reference; the documentation of each op says which ones it writes.
//
// Lifetime: the Backend that allocated a Tensor must outlive every handle to it.
// Threads: handles may be copied across threads; data races on the contents are the caller's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/bf16.h"  // f32_to_bf16 / bf16_to_f32 on the host

namespace rlrun::engine {

class Backend;

// The one element-type enum of the engine. Backends compute with kF32, kBF16 and kI32; kF16 and
// kI64 exist only as storage types of files (safetensors) and are converted on load.
enum class DType : uint8_t {
  kF32,   // IEEE float: master weights, gradients, optimizer state, CPU compute, saved statistics
  kBF16,  // bfloat16 stored as uint16_t: CUDA compute, checkpoints, weight broadcast
  kI32,   // token ids, positions, cu_seqlens
  kF16,   // IEEE half (files only)
  kI64,   // int64 (files only)
};

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", "i32", "f16", "i64"

// Up to 4 dimensions, each >= 0. Shape{} is a scalar (rank 0, one element).
struct Shape {
  static constexpr int kMaxRank = 4;
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);  // Shape{N, H}; aborts on rank > 4 or a negative dim

  int64_t operator[](int i) const { return dims[i]; }
  int64_t numel() const;
  // The matrix view of this shape used by 2-D ops: (product of leading dims, last dim).
  // A rank-1 shape (K) is (1, K); a scalar is (1, 1).
  int64_t rows() const;
  int64_t cols() const;
  std::string str() const;  // "(4, 576)"
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
};

// A block of backend memory. Created only by Backend::zeros(); frees itself through its backend.
class Storage {
 public:
  Storage(Backend* backend, void* data, size_t bytes) : backend_(backend), data_(data), bytes_(bytes) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Backend* backend() const { return backend_; }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_;
  void* data_;
  size_t bytes_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false; ops accept it only where documented
  Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank; }
  int64_t dim(int i) const { return shape_.dims[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Backend* backend() const { return storage_ ? storage_->backend() : nullptr; }

  // Raw address of element 0 in the backend's memory space (a device pointer on CUDA).
  void* data() const;
  // Typed host pointers: abort unless the dtype matches AND the backend's memory is host memory
  // (Backend::is_host()). Use copy_to_host/copy_from_host for any backend.
  float* f32() const;
  int32_t* i32() const;
  uint16_t* bf16() const;

  // Rows [begin, end) along dim 0, sharing storage: shape (end - begin, dims[1:]...).
  Tensor rows(int64_t begin, int64_t end) const;
  // The same elements under another shape with the same numel (a reshape; no copy).
  Tensor view(Shape shape) const;
  // The leading bytes of this tensor read as `dtype` with `shape` (no copy, no conversion):
  // scratch reuse, e.g. an f32 buffer lending its first 2n bytes as bf16 (n). Aborts unless the
  // new tensor fits inside this one.
  Tensor reinterpret(DType dtype, Shape shape) const;
  std::string str() const;  // "f32(4, 576)"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

// ---- host <-> backend helpers (any backend; these synchronize) --------------------------------

// New tensor on `backend` holding `values`; values.size() must equal shape.numel().
Tensor from_host(Backend& backend, Shape shape, std::span<const float> values);      // f32
Tensor from_host_i32(Backend& backend, Shape shape, std::span<const int32_t> values);  // i32
// All elements as floats (bf16 widened, f32 copied); aborts on i32.
std::vector<float> to_host_f32(const Tensor& t);
// dst (f32 or bf16) = values, bf16 rounded to nearest even (bf16.h); values.size() == dst.numel().
void copy_from_host_f32(const Tensor& dst, std::span<const float> values);
std::vector<int32_t> to_host_i32(const Tensor& t);
// dst = src where the two live on different backends (or the same one); same dtype and numel.
// Goes through a host staging buffer.
void copy_across(const Tensor& dst, const Tensor& src);

}  // namespace rlrun::engine
