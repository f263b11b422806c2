// wire_array.h - an immutable array of numbers that can live inside a ZeroMQ frame.
//
// Token ids, log-probs, advantages and weight bytes travel as their own frames, never
// re-encoded. A WireArray<T> owns its elements in one of two ways:
//   - a std::vector<T> built locally (the sender side), or
//   - a received zmq::message_t whose bytes are the elements (the receiver side, zero-copy).
// Copies of a WireArray share the same immutable storage (a shared_ptr), so copying a decoded
// message is cheap. to_frame() hands the bytes to ZeroMQ without copying them either: the frame
// keeps the storage alive until libzmq has sent it.
//
// Alignment: a received frame's bytes may sit at any address (libzmq's zero-copy receive points
// into its read buffer). from_frame() keeps the frame when its data is aligned for T and copies it
// into a vector otherwise; shares_frame() tells which happened.
//
// Thread-safety: a WireArray is immutable; it and its copies may be read and sent (to_frame)
// from several threads at once.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include <zmq.hpp>

namespace rlrun {

template <class T>
class WireArray {
  static_assert(std::is_arithmetic_v<T>, "WireArray holds plain numbers");

 public:
  WireArray() = default;
  WireArray(std::vector<T> values) { adopt_vector(std::move(values)); }  // NOLINT: implicit
  WireArray(std::initializer_list<T> values) { adopt_vector(std::vector<T>(values)); }

  // The bytes of `frame` as frame.size() / sizeof(T) elements (the caller has checked that the
  // size is a multiple of sizeof(T)). Zero-copy when the bytes are aligned for T.
  static WireArray from_frame(zmq::message_t frame) {
    WireArray out;
    auto owned = std::make_shared<zmq::message_t>(std::move(frame));  // data() is final only now
    const size_t n = owned->size() / sizeof(T);
    if (n == 0) return out;
    if (reinterpret_cast<uintptr_t>(owned->data()) % alignof(T) != 0) {
      std::vector<T> copy(n);
      std::memcpy(copy.data(), owned->data(), n * sizeof(T));
      out.adopt_vector(std::move(copy));
      return out;
    }
    // libzmq turns a frame into a refcounted "shared" one on its first zmq_msg_copy, a
    // non-atomic step; doing it here, on the decoding thread, makes later to_frame() calls from
    // any thread plain atomic increments.
    zmq::message_t primer;
    primer.copy(*owned);
    out.data_ = static_cast<const T*>(owned->data());
    out.size_ = n;
    out.owner_ = std::move(owned);
    out.shares_frame_ = true;
    return out;
  }

  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t size_bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::span<const T> span() const { return {data_, size_}; }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  // True when the elements are the bytes of a received frame (no copy was made).
  bool shares_frame() const { return shares_frame_; }

  // A frame holding these bytes without copying them; it shares ownership of the storage.
  zmq::message_t to_frame() const {
    if (size_ == 0) return zmq::message_t();
    if (shares_frame_) {
      zmq::message_t frame;
      frame.copy(*static_cast<zmq::message_t*>(owner_.get()));  // refcounted by libzmq
      return frame;
    }
    auto* keep = new std::shared_ptr<void>(owner_);  // released by libzmq's I/O thread
    return zmq::message_t(const_cast<T*>(data_), size_bytes(), &release_owner, keep);
  }

  // Element-wise equality by bytes (so NaN payloads compare equal to themselves).
  friend bool operator==(const WireArray& a, const WireArray& b) {
    return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_bytes()) == 0);
  }

 private:
  static void release_owner(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<void>*>(hint); }

  void adopt_vector(std::vector<T> values) {
    auto owned = std::make_shared<std::vector<T>>(std::move(values));
    data_ = owned->data();
    size_ = owned->size();
    owner_ = std::move(owned);
    shares_frame_ = false;
  }

  std::shared_ptr<void> owner_;  // std::vector<T> or zmq::message_t; never mutated once set
  const T* data_ = nullptr;
  size_t size_ = 0;
  bool shares_frame_ = false;
};

}  // namespace rlrun
