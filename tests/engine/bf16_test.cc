#include "engine/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace rlrun::engine {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 (even) and 1.0078125 (odd): ties go to even.
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);
  // halfway above an odd mantissa rounds up to the even one
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);
  // just above halfway rounds up, just below rounds down
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  // the largest finite float rounds up to infinity, as in PyTorch
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(Bf16, KeepsNaNAndInfinity) {
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // a NaN whose payload sits only in the low bits must not round into infinity
  const uint16_t low_nan = f32_to_bf16(f32_from_bits(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16_to_f32(low_nan)));
  const uint16_t neg_nan = f32_to_bf16(f32_from_bits(0xffffffffu));
  EXPECT_TRUE(std::isnan(bf16_to_f32(neg_nan)));
  EXPECT_EQ(neg_nan & 0x8000, 0x8000);
}

TEST(Bf16, EveryNonNaNBf16RoundTripsExactly) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), b) << std::hex << b;
  }
}

TEST(F16, KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // halfway to the next binade: rounds to infinity
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // halfway to 2^-24, ties to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie, goes to even 2
}

TEST(F16, EveryNonNaNF16RoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

#ifdef __FLT16_MAX__
// The compiler's own binary16 conversion (IEEE, round to nearest even) as the reference.
TEST(F16, MatchesCompilerConversionOnRandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = f32_from_bits(rng());
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(f32_to_f16(f), expected) << f;
  }
}
#endif

}  // namespace
}  // namespace rlrun::engine
