// Randomized mutation of valid encodings of every kind: decode must return a message or an
// error, never crash, hang or allocate from a bogus length. Fixed seed (printed; override with
// RLRUN_FUZZ_SEED=N to explore), 120,000 inputs, a couple of seconds.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "common/protocol/protocol.h"
#include "tests/common/protocol/protocol_samples.h"

namespace rlrun {
namespace {

using Bytes = std::string;  // one frame's bytes, mutable

std::vector<Bytes> to_bytes(const Frames& frames) {
  std::vector<Bytes> out;
  for (const auto& f : frames) out.emplace_back(static_cast<const char*>(f.data()), f.size());
  return out;
}

Frames to_frames(const std::vector<Bytes>& bytes) {
  Frames out;
  for (const auto& b : bytes) out.emplace_back(b.data(), b.size());
  return out;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  size_t below(size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  uint8_t byte() { return static_cast<uint8_t>(below(256)); }

  Bytes random_bytes(size_t max_len) {
    Bytes b(below(max_len + 1), '\0');
    for (char& c : b) c = static_cast<char>(byte());
    return b;
  }

  // Large or boundary values for a length field: what an attacker would try.
  uint64_t nasty_value() {
    static const uint64_t kValues[] = {0, 1, 0x7f, 0xff, 0x7fff, 0xffff, 0x10000, 0x7fffffff, 0xffffffff,
                                       0x100000000ull, kMaxStringBytes, kMaxStringBytes + 1ull,
                                       kMaxListElements, kMaxListElements + 1ull, kMaxArrayElements + 1,
                                       ~0ull, ~0ull >> 1};
    return below(4) == 0 ? rng_() : kValues[below(std::size(kValues))];
  }

  // Applies 1-3 random mutations; returns the kind of the first (for the tally).
  const char* mutate(std::vector<Bytes>& frames) {
    const char* first = nullptr;
    const size_t n = 1 + below(3);
    for (size_t i = 0; i < n; ++i) {
      const char* what = mutate_once(frames);
      if (!first) first = what;
    }
    if (below(2) == 0) repair_header(frames);  // let half the inputs reach the body decoder
    return first;
  }

 private:
  const char* mutate_once(std::vector<Bytes>& frames) {
    if (frames.empty()) frames.push_back(random_bytes(64));
    Bytes& f = frames[below(frames.size())];
    switch (below(10)) {
      case 0:  // bit flips
        for (size_t k = 1 + below(8); k > 0 && !f.empty(); --k) f[below(f.size())] ^= char(1 << below(8));
        return "bit_flip";
      case 1:  // byte overwrites
        for (size_t k = 1 + below(4); k > 0 && !f.empty(); --k) f[below(f.size())] = char(byte());
        return "byte_overwrite";
      case 2:  // truncate a frame
        f.resize(below(f.size() + 1));
        return "truncate";
      case 3:  // inflate a length/count field: overwrite 4 or 8 bytes of the body with a nasty value
        if (f.size() >= 4) {
          const uint64_t v = nasty_value();
          const size_t width = (f.size() >= 8 && below(2)) ? 8 : 4;
          std::memcpy(f.data() + below(f.size() - width + 1), &v, width);
        }
        return "inflate_length";
      case 4:  // remove a frame
        frames.erase(frames.begin() + below(frames.size()));
        return "remove_frame";
      case 5: {  // duplicate a frame
        Bytes copy = f;
        frames.insert(frames.begin() + below(frames.size() + 1), std::move(copy));
        return "duplicate_frame";
      }
      case 6:  // reorder two frames
        std::swap(frames[below(frames.size())], frames[below(frames.size())]);
        return "reorder_frames";
      case 7:  // append or insert a random frame
        frames.insert(frames.begin() + below(frames.size() + 1), random_bytes(80));
        return "random_frame";
      case 8:  // grow a frame with random bytes
        f += random_bytes(16);
        return "extend_frame";
      default:  // a wholly random message
        frames.clear();
        for (size_t k = below(5); k > 0; --k) frames.push_back(random_bytes(64));
        if (below(2) && !frames.empty() && frames[0].size() >= 8) std::memcpy(frames[0].data(), "RLRN\x01\x00", 6);
        return "random_message";
    }
  }

  // Makes num_array_frames and body_bytes agree with the mutated message (when frame 0 is still
  // long enough), so the mutation is judged by the field decoder rather than the header check.
  void repair_header(std::vector<Bytes>& frames) {
    if (frames.empty() || frames[0].size() < kHeaderPrefixBytes) return;
    const uint32_t arrays = static_cast<uint32_t>(frames.size() - 1);
    const uint32_t body = static_cast<uint32_t>(frames[0].size() - kHeaderPrefixBytes);
    std::memcpy(frames[0].data() + 16, &arrays, 4);
    std::memcpy(frames[0].data() + 20, &body, 4);
  }

  std::mt19937_64 rng_;
};

uint64_t fuzz_seed() {
  const char* env = std::getenv("RLRUN_FUZZ_SEED");
  return env ? std::strtoull(env, nullptr, 10) : 20240611;
}

TEST(ProtocolFuzz, MutatedMessagesDecodeOrFailCleanly) {
  constexpr size_t kInputs = 120000;
  const uint64_t seed = fuzz_seed();
  std::printf("protocol fuzz: seed %llu, %zu inputs\n", static_cast<unsigned long long>(seed), kInputs);

  std::vector<std::vector<Bytes>> corpus;
  for (const Message& m : testing::sample_messages()) {
    corpus.push_back(to_bytes(encode(m)));
    auto unmutated = decode(to_frames(corpus.back()));
    ASSERT_TRUE(unmutated.ok()) << message_kind_name(m.kind()) << ": " << unmutated.status().to_string();
  }

  Mutator mutator(seed);
  std::map<std::string, std::pair<size_t, size_t>> by_mutation;  // name -> (ok, error)
  size_t ok = 0, errors = 0, protocol_code = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kInputs; ++i) {
    std::vector<Bytes> frames = corpus[i % corpus.size()];
    const char* what = mutator.mutate(frames);
    auto decoded = decode(to_frames(frames));
    if (decoded.ok()) {
      ++ok;
      ++by_mutation[what].first;
      // Whatever decodes must re-encode into something that decodes to the same bytes.
      Frames again = encode(*decoded);
      std::vector<Bytes> again_bytes = to_bytes(again);
      auto redecoded = decode(std::move(again));
      ASSERT_TRUE(redecoded.ok()) << "input " << i << ": " << redecoded.status().to_string();
      ASSERT_EQ(to_bytes(encode(*redecoded)), again_bytes) << "input " << i;
    } else {
      ++errors;
      ++by_mutation[what].second;
      protocol_code += decoded.status().code() == StatusCode::kProtocol;
      ASSERT_FALSE(decoded.status().message().empty());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("protocol fuzz: %zu decoded ok, %zu rejected, %.2f s (%.1f us/input)\n", ok, errors, seconds,
              1e6 * seconds / kInputs);
  for (const auto& [name, counts] : by_mutation)
    std::printf("  %-16s ok %6zu  rejected %6zu\n", name.c_str(), counts.first, counts.second);

  EXPECT_EQ(ok + errors, kInputs);
  EXPECT_EQ(protocol_code, errors) << "every decode error must be a protocol error";
  EXPECT_GT(errors, kInputs / 2) << "mutations should mostly be caught";
  EXPECT_GT(ok, 0u) << "some mutations (e.g. a flipped float bit) are still valid messages";
}

}  // namespace
}  // namespace rlrun
