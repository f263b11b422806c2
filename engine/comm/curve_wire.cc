#include "engine/comm/curve_wire.h"

#include "common/observe/log.h"

namespace rlrun::engine {

namespace {

void put_le(std::vector<uint8_t>& out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(std::span<const uint8_t> in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[at + i]) << (8 * i);
  return v;
}

}  // namespace

std::vector<uint8_t> encode_curve_header(const CurveHeader& h) {
  std::vector<uint8_t> out(kCurveHeaderBytes, 0);
  put_le(out, 0, kCurveMagic, 4);
  out[4] = static_cast<uint8_t>(h.kind);
  put_le(out, 8, h.seq, 8);
  put_le(out, 16, h.offset, 8);
  return out;
}

Result<CurveHeader> decode_curve_header(std::span<const uint8_t> in) {
  if (in.size() != kCurveHeaderBytes)
    return protocol_error(str("CURVE transport: a header of ", in.size(), " bytes, expected ", kCurveHeaderBytes));
  if (get_le(in, 0, 4) != kCurveMagic) return protocol_error("CURVE transport: bad magic (not an rlrun group message)");
  if (in[5] != 0 || in[6] != 0 || in[7] != 0) return protocol_error("CURVE transport: nonzero reserved header bytes");
  const uint8_t kind = in[4];
  if (kind < static_cast<uint8_t>(CurveKind::kWelcome) || kind > static_cast<uint8_t>(CurveKind::kAck))
    return protocol_error(str("CURVE transport: unknown message kind ", int(kind), "; run the same rlrun everywhere"));
  CurveHeader h;
  h.kind = static_cast<CurveKind>(kind);
  h.seq = get_le(in, 8, 8);
  h.offset = get_le(in, 16, 8);
  return h;
}

std::string curve_member_id(int rank) { return str("rank-", rank); }

}  // namespace rlrun::engine
