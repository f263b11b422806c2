#include "engine/tensor.h"

#include <cstring>
#include <sstream>

#include "common/check.h"
#include "common/observe/log.h"
#include "engine/backend.h"

namespace rlrun::engine {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kF16: return 2;
    case DType::kI64: return 8;
  }
  RLRUN_CHECK(false, "unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kF16: return "f16";
    case DType::kI64: return "i64";
  }
  return "?";
}

// ---- Shape ------------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> d) {
  RLRUN_CHECK(d.size() <= static_cast<size_t>(kMaxRank), "rank > 4");
  for (int64_t x : d) {
    RLRUN_CHECK(x >= 0, "negative dimension");
    dims[rank++] = x;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

int64_t Shape::cols() const { return rank == 0 ? 1 : dims[rank - 1]; }

int64_t Shape::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < rank; ++i) n *= dims[i];
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '(';
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << dims[i];
  os << ')';
  return os.str();
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

// ---- Storage and Tensor -----------------------------------------------------------------------

Storage::~Storage() {
  if (data_ != nullptr) backend_->raw_free(data_);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_bytes_(offset_bytes), shape_(shape), dtype_(dtype) {
  RLRUN_CHECK(storage_ != nullptr);
  RLRUN_CHECK(offset_bytes_ + nbytes() <= storage_->bytes(), "tensor " + str() + " exceeds its storage");
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

float* Tensor::f32() const {
  RLRUN_CHECK(defined() && dtype_ == DType::kF32 && backend()->is_host(), "f32() on " + str());
  return static_cast<float*>(data());
}

int32_t* Tensor::i32() const {
  RLRUN_CHECK(defined() && dtype_ == DType::kI32 && backend()->is_host(), "i32() on " + str());
  return static_cast<int32_t*>(data());
}

uint16_t* Tensor::bf16() const {
  RLRUN_CHECK(defined() && dtype_ == DType::kBF16 && backend()->is_host(), "bf16() on " + str());
  return static_cast<uint16_t*>(data());
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  RLRUN_CHECK(defined() && shape_.rank >= 1, "rows() of " + str());
  RLRUN_CHECK(0 <= begin && begin <= end && end <= shape_.dims[0],
              "rows(" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + str());
  const int64_t row_elems = shape_.dims[0] == 0 ? 0 : numel() / shape_.dims[0];
  Shape s = shape_;
  s.dims[0] = end - begin;
  return Tensor(storage_, offset_bytes_ + static_cast<size_t>(begin * row_elems) * dtype_size(dtype_), s, dtype_);
}

Tensor Tensor::view(Shape shape) const {
  RLRUN_CHECK(defined() && shape.numel() == numel(), "view " + shape.str() + " of " + str());
  return Tensor(storage_, offset_bytes_, shape, dtype_);
}

Tensor Tensor::reinterpret(DType dtype, Shape shape) const {
  RLRUN_CHECK(defined() && static_cast<size_t>(shape.numel()) * dtype_size(dtype) <= nbytes(),
              rlrun::str("reinterpret ", this->str(), " as ", dtype_name(dtype), shape.str(), ": does not fit"));
  return Tensor(storage_, offset_bytes_, shape, dtype);
}

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_.str();
}

// ---- host helpers -----------------------------------------------------------------------------

Tensor from_host(Backend& backend, Shape shape, std::span<const float> values) {
  RLRUN_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_host: size mismatch for " + shape.str());
  Tensor t = backend.zeros(shape, DType::kF32);
  backend.copy_from_host(t, values.data(), t.nbytes());
  return t;
}

Tensor from_host_i32(Backend& backend, Shape shape, std::span<const int32_t> values) {
  RLRUN_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
              "from_host_i32: size mismatch for " + shape.str());
  Tensor t = backend.zeros(shape, DType::kI32);
  backend.copy_from_host(t, values.data(), t.nbytes());
  return t;
}

std::vector<float> to_host_f32(const Tensor& t) {
  RLRUN_CHECK(t.defined() && t.dtype() != DType::kI32, "to_host_f32 of " + t.str());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kF32) {
    t.backend()->copy_to_host(out.data(), t, t.nbytes());
  } else {
    std::vector<uint16_t> raw(out.size());
    t.backend()->copy_to_host(raw.data(), t, t.nbytes());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_f32(raw[i]);
  }
  return out;
}

void copy_from_host_f32(const Tensor& dst, std::span<const float> values) {
  RLRUN_CHECK(dst.defined() && static_cast<int64_t>(values.size()) == dst.numel() &&
                  (dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16),
              str("copy_from_host_f32: ", values.size(), " floats into ", dst.str()));
  if (dst.dtype() == DType::kF32) {
    dst.backend()->copy_from_host(dst, values.data(), dst.nbytes());
    return;
  }
  std::vector<uint16_t> raw(values.size());
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = f32_to_bf16(values[i]);
  dst.backend()->copy_from_host(dst, raw.data(), dst.nbytes());
}

std::vector<int32_t> to_host_i32(const Tensor& t) {
  RLRUN_CHECK(t.defined() && t.dtype() == DType::kI32, "to_host_i32 of " + t.str());
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  t.backend()->copy_to_host(out.data(), t, t.nbytes());
  return out;
}

void copy_across(const Tensor& dst, const Tensor& src) {
  RLRUN_CHECK(dst.defined() && src.defined() && dst.dtype() == src.dtype() && dst.numel() == src.numel(),
              "copy_across " + src.str() + " -> " + dst.str());
  if (dst.backend() == src.backend()) {
    dst.backend()->copy(dst, src);
    return;
  }
  std::vector<char> staging(src.nbytes());
  src.backend()->copy_to_host(staging.data(), src, staging.size());
  dst.backend()->copy_from_host(dst, staging.data(), staging.size());
}

}  // namespace rlrun::engine
