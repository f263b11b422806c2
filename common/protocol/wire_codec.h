// wire_codec.h - the field encoder and decoder behind protocol.h (internal to common/).
//
// Both classes are visitors over a message's fields() list (see protocol.h for the format):
// WireWriter appends each field to the body of frame 0 and each WireArray as its own frame;
// WireReader reads them back from untrusted bytes. The reader is sticky on error: after the
// first failure every further field is skipped and status() names the first field at fault.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/check.h"
#include "common/protocol/protocol.h"

namespace rlrun::wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }

template <class T>
concept Scalar = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;
// Fewest body bytes one list element can take: bounds a list's count by the bytes left.
template <class T> constexpr size_t min_wire_bytes() {
  if constexpr (Scalar<T>) return sizeof(T);
  else if constexpr (std::is_same_v<T, std::string>) return sizeof(uint32_t);
  else return 1;
}

class WireWriter {
 public:
  // Array frames are appended to *frames (frame 0, the header, is added by the caller).
  explicit WireWriter(Frames* frames) : frames_(frames) {}

  const std::string& body() const { return body_; }

  void field(const char*, const bool& v) { put_raw(static_cast<uint8_t>(v ? 1 : 0)); }
  template <Scalar T> void field(const char*, const T& v) { put_raw(v); }
  template <class E> requires std::is_enum_v<E> void field(const char*, const E& v) {
    put_raw(static_cast<uint8_t>(v));
  }
  // Strings longer than kMaxStringBytes are cut to it (they are names and human-readable text).
  void field(const char*, const std::string& s) {
    const uint32_t length = static_cast<uint32_t>(std::min<size_t>(s.size(), kMaxStringBytes));
    put_raw(length);
    body_.append(s.data(), length);
  }
  // Lists and arrays over the limits are a bug in the sender (it must split its data): checked.
  template <class T> void field(const char* name, const std::vector<T>& list) {
    RLRUN_CHECK(list.size() <= kMaxListElements, std::string("encoding list field ") + name + " over kMaxListElements");
    put_raw(static_cast<uint32_t>(list.size()));
    if constexpr (Scalar<T>) {
      if (!list.empty()) body_.append(reinterpret_cast<const char*>(list.data()), list.size() * sizeof(T));
    } else {
      for (const T& x : list) field(name, x);
    }
  }
  template <class V> void field(const char* name, const std::map<std::string, V>& map) {
    RLRUN_CHECK(map.size() <= kMaxListElements, std::string("encoding map field ") + name + " over kMaxListElements");
    put_raw(static_cast<uint32_t>(map.size()));
    for (const auto& [key, value] : map) {
      field(name, key);
      field(name, value);
    }
  }
  template <class T> void field(const char* name, const WireArray<T>& array) {
    RLRUN_CHECK(array.size_bytes() <= kMaxFrameBytes, std::string("encoding array field ") + name + " over kMaxFrameBytes");
    put_raw(static_cast<uint8_t>(dtype_of<T>()));
    put_raw(static_cast<uint64_t>(array.size()));
    frames_->push_back(array.to_frame());
  }
  template <class T> requires requires(WireWriter& w, const T& t) { T::fields(w, t); }
  void field(const char*, const T& nested) { T::fields(*this, nested); }

 private:
  template <class T> void put_raw(const T& v) { body_.append(reinterpret_cast<const char*>(&v), sizeof(T)); }

  Frames* frames_;
  std::string body_;
};

class WireReader {
 public:
  // Reads `body` (frame 0 after the 24-byte prefix); array frames are taken from
  // (*frames)[1...] in order. kind_name prefixes every error.
  WireReader(std::string_view body, Frames* frames, const char* kind_name)
      : body_(body), frames_(frames), kind_name_(kind_name) {}

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  size_t next_frame() const { return next_frame_; }
  size_t remaining() const { return body_.size() - pos_; }
  // Records an error found after reading (a cross-field check) unless one is already recorded.
  void fail(const char* field_name, const std::string& what);

  void field(const char* name, bool& v);
  template <Scalar T> void field(const char* name, T& v) { get_raw(name, v); }
  template <class E> requires std::is_enum_v<E> void field(const char* name, E& v) {
    uint8_t raw = 0;
    if (!get_raw(name, raw)) return;
    if (raw >= WireEnum<E>::kCount) return fail(name, "enum value " + std::to_string(raw) + " out of range");
    v = static_cast<E>(raw);
  }
  void field(const char* name, std::string& s);
  template <class T> void field(const char* name, std::vector<T>& list);
  template <class V> void field(const char* name, std::map<std::string, V>& map);
  template <class T> void field(const char* name, WireArray<T>& array);
  template <class T> requires requires(WireReader& r, T& t) { T::fields(r, t); }
  void field(const char*, T& nested) { T::fields(*this, nested); }

 private:
  template <class T> bool get_raw(const char* name, T& v) {
    if (!ok()) return false;
    if (remaining() < sizeof(T)) {
      fail(name, "truncated: needs " + std::to_string(sizeof(T)) + " bytes, " +
                     std::to_string(remaining()) + " left in the header frame");
      return false;
    }
    std::memcpy(&v, body_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // Reads a u32 count and checks it against kMaxListElements and the bytes left, assuming each
  // element takes at least min_element_bytes: no allocation is ever larger than the input.
  bool get_count(const char* name, size_t min_element_bytes, uint32_t* count);
  bool take_array_frame(const char* name, DType want, size_t element_size, zmq::message_t* frame);

  std::string_view body_;
  size_t pos_ = 0;
  Frames* frames_;
  size_t next_frame_ = 1;
  const char* kind_name_;
  std::string scope_;  // "tensors[3]." while inside a nested element, for error messages
  Status status_;
};

template <class T>
void WireReader::field(const char* name, std::vector<T>& list) {
  uint32_t count = 0;
  if (!get_count(name, min_wire_bytes<T>(), &count)) return;
  list.clear();
  if constexpr (Scalar<T>) {
    list.resize(count);
    if (count > 0) std::memcpy(list.data(), body_.data() + pos_, count * sizeof(T));
    pos_ += count * sizeof(T);
  } else {
    const std::string outer = scope_;  // no reserve(): grow only as elements actually decode
    for (uint32_t i = 0; i < count && ok(); ++i) {
      scope_ = outer + name + "[" + std::to_string(i) + "].";
      list.emplace_back();
      field(name, list.back());
    }
    scope_ = outer;
  }
}

template <class V>
void WireReader::field(const char* name, std::map<std::string, V>& map) {
  uint32_t count = 0;
  if (!get_count(name, sizeof(uint32_t) + 1, &count)) return;
  map.clear();
  for (uint32_t i = 0; i < count && ok(); ++i) {
    std::string key;
    V value{};
    field(name, key);
    field(name, value);
    if (!ok()) return;
    if (!map.empty() && key <= map.rbegin()->first) return fail(name, "map keys not strictly increasing (duplicate key?)");
    map.emplace_hint(map.end(), std::move(key), std::move(value));
  }
}

template <class T>
void WireReader::field(const char* name, WireArray<T>& array) {
  zmq::message_t frame;
  if (!take_array_frame(name, dtype_of<T>(), sizeof(T), &frame)) return;
  array = WireArray<T>::from_frame(std::move(frame));
}

}  // namespace rlrun::wire
