// protocol_libfuzzer - a coverage-guided fuzz target for decode() (clang libFuzzer), built and run
// by scripts/fuzz-protocol.sh; not part of the CMake build (g++ has no libFuzzer). The
// deterministic mutation test (protocol_fuzz_test.cc) is what CI runs.
//
// Input: a sequence of frames, each [u16 little-endian length][bytes] (a short tail is a frame).
// Property: decode() returns ok or a kProtocol error, and whatever decodes re-encodes into a
// message that decodes again.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "common/protocol/protocol.h"
#include "tests/common/protocol/protocol_samples.h"

namespace {

rlrun::Frames split_frames(const uint8_t* data, size_t size) {
  rlrun::Frames frames;
  size_t pos = 0;
  while (pos < size && frames.size() < 2 * rlrun::kMaxFrames) {
    uint16_t length = 0;
    if (size - pos >= 2) std::memcpy(&length, data + pos, 2);
    pos += std::min<size_t>(2, size - pos);
    const size_t n = std::min<size_t>(length, size - pos);
    frames.emplace_back(data + pos, n);
    pos += n;
  }
  return frames;
}

std::string join_frames(const rlrun::Frames& frames) {
  std::string out;
  for (const auto& f : frames) {
    const uint16_t length = static_cast<uint16_t>(f.size());
    out.append(reinterpret_cast<const char*>(&length), 2);
    out.append(static_cast<const char*>(f.data()), length);
  }
  return out;
}

}  // namespace

// With RLRUN_FUZZ_WRITE_SEEDS=DIR, writes one valid encoding of every message kind into DIR.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("RLRUN_FUZZ_WRITE_SEEDS")) {
    int i = 0;
    for (const auto& m : rlrun::testing::sample_messages())
      std::ofstream(std::string(dir) + "/seed-" + std::to_string(i++), std::ios::binary) << join_frames(rlrun::encode(m));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto decoded = rlrun::decode(split_frames(data, size));
  if (!decoded.ok()) {
    if (decoded.status().code() != rlrun::StatusCode::kProtocol) std::abort();
    return 0;
  }
  if (!rlrun::decode(rlrun::encode(*decoded)).ok()) std::abort();
  return 0;
}
