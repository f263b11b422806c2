// fnv1a.h - FNV-1a 64 (Fowler, Noll, Vo): a fast, well-spread hash of a few bytes whose value is the
// same on every machine and in every run, for keys and digests (not for security).
#pragma once

#include <cstdint>
#include <string_view>

namespace rlrun {

inline constexpr uint64_t kFnv1aOffsetBasis = 14695981039346656037ULL;  // the standard 64-bit basis
inline constexpr uint64_t kFnv1aPrime = 1099511628211ULL;

// Each byte xor-ed in, then multiplied by the prime, from `basis` (the standard one unless a stored
// digest fixed another).
constexpr uint64_t fnv1a64(std::string_view bytes, uint64_t basis = kFnv1aOffsetBasis) {
  uint64_t h = basis;
  for (unsigned char c : bytes) h = (h ^ c) * kFnv1aPrime;
  return h;
}

}  // namespace rlrun
