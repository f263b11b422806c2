// curve_wire.h - the frames of the CURVE transport (curve_communicator.cc), on top of CurveZMQ,
// which encrypts and authenticates every byte of them.
//
// Rank 0 binds a ROUTER; rank r > 0 connects a DEALER with routing id curve_member_id(r). Every
// message is a header frame of kCurveHeaderBytes (little-endian:
//   magic u32 @0, kind u8 @4 (bytes 5..7 zero), seq u64 @8, offset u64 @16)
// and, for kData and kAbort only, one payload frame. Kinds:
//   rank 0 -> member  kWelcome  every member said hello: the group is formed
//                     kData     bytes [offset, offset + payload size) of broadcast number seq
//                     kProbe    liveness check while rank 0 waits for acks; ignored
//                     kAbort    the broadcast failed at rank 0; payload: the reason, UTF-8
//   member -> rank 0  kHello    seq = the member's rank: it is connected
//                     kAck      broadcast number seq arrived whole
// A broadcast of B bytes is ceil(B / kCurveChunkBytes) kData messages (one, empty, when B = 0).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::engine {

inline constexpr size_t kCurveHeaderBytes = 24;
inline constexpr uint32_t kCurveMagic = 0x43574c52;  // "RLWC"
// A bucket travels in chunks of this size: it bounds what libzmq allocates per message (CURVE
// copies a message twice while encrypting it) and lets a member receive straight into its buffer;
// 1 MiB measured fastest of 256 KiB .. 16 MiB (bench/weight_sync_bench: the copies stay in cache).
inline constexpr size_t kCurveChunkBytes = size_t{1} << 20;

enum class CurveKind : uint8_t { kWelcome = 1, kData = 2, kProbe = 3, kAbort = 4, kHello = 5, kAck = 6 };

struct CurveHeader {
  CurveKind kind = CurveKind::kProbe;
  uint64_t seq = 0;
  uint64_t offset = 0;
};

std::vector<uint8_t> encode_curve_header(const CurveHeader& header);
// protocol_error for a wrong size or magic, an unknown kind, or nonzero reserved bytes.
Result<CurveHeader> decode_curve_header(std::span<const uint8_t> bytes);

// The routing id a member of rank `rank` connects with ("rank-<rank>").
std::string curve_member_id(int rank);

}  // namespace rlrun::engine
