// bf16.h - float <-> bfloat16 and float <-> IEEE half conversions on the host.
//
// bf16 is the top 16 bits of an fp32: f32 -> bf16 rounds to nearest, ties to even, and keeps NaN a
// (quiet) NaN instead of letting the rounding carry turn it into an infinity. Used by checkpoint IO
// and, bit for bit, by the CUDA backend's reference checks. f16 (IEEE binary16) is read from HF
// checkpoints saved in float16; subnormals, infinities and NaN are handled exactly.
#pragma once

#include <cstdint>
#include <cstring>

namespace rlrun::engine {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload bits, force quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);  // ties to even
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

inline float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return f32_from_bits(sign);  // signed zero
  // Subnormal half: value = mantissa * 2^-24; renormalise into an fp32 normal.
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return f32_from_bits(sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13));
}

// Round to nearest even; overflow gives infinity, NaN stays a quiet NaN.
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal (2^-25): zero
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // half subnormal units are 2^-24: 14 <= shift <= 24
    const uint32_t value = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const bool round_up = remainder > halfway || (remainder == halfway && (value & 1u));
    const uint32_t rounded = value + (round_up ? 1u : 0u);  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | rounded);
  }
  const uint32_t rebiased = abs - (112u << 23);  // exponent bias 127 -> 15
  const uint32_t rounding_bias = 0xfffu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebiased + rounding_bias) >> 13));
}

}  // namespace rlrun::engine
