#include "common/protocol/wire_codec.h"

#include "common/observe/log.h"

namespace rlrun::wire {

void WireReader::fail(const char* field_name, const std::string& what) {
  if (!status_.ok()) return;
  status_ = protocol_error(str("malformed ", kind_name_, " message: field ", scope_, field_name, ": ", what));
}

void WireReader::field(const char* name, bool& v) {
  uint8_t raw = 0;
  if (!get_raw(name, raw)) return;
  if (raw > 1) return fail(name, str("bool byte is ", int(raw), ", expected 0 or 1"));
  v = raw == 1;
}

void WireReader::field(const char* name, std::string& s) {
  uint32_t length = 0;
  if (!get_raw(name, length)) return;
  if (length > kMaxStringBytes)
    return fail(name, str("string of ", length, " bytes exceeds the limit of ", kMaxStringBytes));
  if (length > remaining()) return fail(name, str("truncated: string of ", length, " bytes, ", remaining(), " left"));
  s.assign(body_.data() + pos_, length);
  pos_ += length;
}

bool WireReader::get_count(const char* name, size_t min_element_bytes, uint32_t* count) {
  if (!get_raw(name, *count)) return false;
  if (*count > kMaxListElements) {
    fail(name, str("list of ", *count, " elements exceeds the limit of ", kMaxListElements));
    return false;
  }
  if (uint64_t{*count} * min_element_bytes > remaining()) {
    fail(name, str("truncated: list of ", *count, " elements cannot fit in the ", remaining(), " bytes left"));
    return false;
  }
  return true;
}

bool WireReader::take_array_frame(const char* name, DType want, size_t element_size, zmq::message_t* frame) {
  uint8_t dtype = 0;
  uint64_t count = 0;
  if (!get_raw(name, dtype) || !get_raw(name, count)) return false;
  if (dtype != static_cast<uint8_t>(want)) {
    fail(name, str("array dtype code ", int(dtype), ", expected ", dtype_name(want)));
    return false;
  }
  if (count > kMaxArrayElements) {
    fail(name, str("array of ", count, " elements exceeds the limit of ", kMaxArrayElements));
    return false;
  }
  if (next_frame_ >= frames_->size()) {
    fail(name, str("array frame ", next_frame_, " is missing (message has ", frames_->size(), " frames)"));
    return false;
  }
  zmq::message_t& source = (*frames_)[next_frame_];
  const uint64_t want_bytes = count * element_size;  // no overflow: count <= kMaxArrayElements
  if (source.size() != want_bytes) {
    fail(name, str("declared ", count, " ", dtype_name(want), " elements (", want_bytes, " bytes) but frame ",
                   next_frame_, " holds ", source.size(), " bytes"));
    return false;
  }
  frame->move(source);
  ++next_frame_;
  return true;
}

}  // namespace rlrun::wire
