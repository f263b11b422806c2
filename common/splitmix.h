// splitmix.h - SplitMix64 (Steele, Lea and Flood, 2014): a tiny, well-mixed 64-bit generator whose
// output is the same on every machine. Seeding is one assignment, so a stream per sample, per
// tensor or per request costs nothing to start (std::mt19937_64 with a seed_seq fills 312 words).
#pragma once

#include <cstdint>

namespace rlrun {

// splitmix64's step on one value: x plus the golden-ratio gamma, then the finaliser. A bijection
// of 64-bit values; also a good hash of a counter or a seed.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct SplitMix64 {
  uint64_t state = 0;
  uint64_t next() {
    const uint64_t out = splitmix64(state);
    state += 0x9e3779b97f4a7c15ULL;
    return out;
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
};

}  // namespace rlrun
