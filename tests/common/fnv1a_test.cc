// fnv1a64 (common/fnv1a.h): the standard FNV-1a 64 test vectors.
#include "common/fnv1a.h"

#include <gtest/gtest.h>

namespace rlrun {
namespace {

TEST(Fnv1a64, GivesTheStandardTestVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL) << "the offset basis";
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  static_assert(fnv1a64("a") == 0xaf63dc4c8601ec8cULL, "usable at compile time");
}

TEST(Fnv1a64, StartsFromTheBasisGiven) {
  EXPECT_EQ(fnv1a64("", 42), 42u);
  EXPECT_NE(fnv1a64("a", 42), fnv1a64("a"));
}

}  // namespace
}  // namespace rlrun
