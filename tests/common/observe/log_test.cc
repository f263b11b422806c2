// log::RateLimited: a recurring message is written once, then at most once per interval with the
// count of what was held back.
#include "common/observe/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RateLimited, WritesTheFirstThenOncePerIntervalWithTheCount) {
  log::RateLimited limited(std::chrono::milliseconds(300));
  ::testing::internal::CaptureStderr();
  limited.write(log::Level::kWarn, "no spread");
  for (int i = 0; i < 5; ++i) limited.write(log::Level::kWarn, "no spread");
  const std::string first = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(limited.held_back(), 5);
  EXPECT_THAT(first, HasSubstr("W rlrun] no spread\n"));
  EXPECT_THAT(first, Not(HasSubstr("more like this")));

  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  ::testing::internal::CaptureStderr();
  limited.write(log::Level::kWarn, "no spread");
  const std::string second = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(second, HasSubstr("no spread [5 more like this in the last 0 s]"));
  EXPECT_EQ(limited.held_back(), 0);
}

}  // namespace
}  // namespace rlrun
