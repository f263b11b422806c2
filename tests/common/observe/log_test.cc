// log::RateLimited: a recurring message is written once, then at most once per interval with the
// count of what was held back.
#include "common/observe/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <fstream>
#include <iterator>

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RateLimited, WritesTheFirstThenOncePerIntervalWithTheCount) {
  std::chrono::steady_clock::time_point now{};  // a fake clock, moved by hand
  log::RateLimited limited(std::chrono::seconds(30), [&] { return now; });
  ::testing::internal::CaptureStderr();
  limited.write(log::Level::kWarn, "no spread");
  for (int i = 0; i < 5; ++i) {
    now += std::chrono::seconds(5);  // the last at 25 s: still within the interval
    limited.write(log::Level::kWarn, "no spread");
  }
  const std::string first = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(limited.held_back(), 5);
  EXPECT_THAT(first, HasSubstr("W rlrun] no spread\n"));
  EXPECT_THAT(first, Not(HasSubstr("more like this")));

  now += std::chrono::seconds(6);  // 31 s after the first line
  ::testing::internal::CaptureStderr();
  limited.write(log::Level::kWarn, "no spread");
  const std::string second = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(second, HasSubstr("no spread [5 more like this in the last 31 s]"));
  EXPECT_EQ(limited.held_back(), 0);
}

// The progress line off a terminal: an ordinary line at most once per interval (and the last one,
// forced); logs/orchestrator.log (set_file) gets every status line and every other line.
TEST(Status, OffATerminalAtASaneRateAndEveryLineInTheFile) {
  const std::string path = ::testing::TempDir() + "/log_status_test.log";
  std::remove(path.c_str());
  ASSERT_TRUE(log::set_file(path));
  ::testing::internal::CaptureStderr();
  log::status("step 1/3", false, std::chrono::seconds(60));
  log::status("step 2/3", false, std::chrono::seconds(60));  // within the interval: file only
  log::info("a line between");
  log::status("step 3/3", true, std::chrono::seconds(60));   // the last one
  log::end_status();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(log::set_file(""));
  EXPECT_THAT(err, HasSubstr("step 1/3\n"));
  EXPECT_THAT(err, Not(HasSubstr("step 2/3")));
  EXPECT_THAT(err, HasSubstr("a line between\n"));
  EXPECT_THAT(err, HasSubstr("step 3/3\n"));
  std::ifstream in(path);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* line : {"step 1/3\n", "step 2/3\n", "a line between\n", "step 3/3\n"}) EXPECT_THAT(file, HasSubstr(line));
  EXPECT_FALSE(log::set_file("/nonexistent-dir/x.log"));  // said, and the log goes on
  log::info("still logging");
}

// A long run's logs/orchestrator.log stays bounded: past the limit it becomes <path>.1 (replacing
// the older one) and a new file begins; no line is lost across a rotation. A resumed run's file
// counts the bytes it already holds.
TEST(SetFile, RotatesPastItsLimitKeepingOneOlderFile) {
  const std::string path = ::testing::TempDir() + "/log_rotate_test.log";
  std::remove(path.c_str());
  std::remove((path + ".1").c_str());
  auto read = [](const std::string& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  ASSERT_TRUE(log::set_file(path, 1000));
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 100; ++i) log::info("line " + std::to_string(i) + " of the rotation test");  // ~60 bytes
  (void)::testing::internal::GetCapturedStderr();
  const std::string older = read(path + ".1"), newer = read(path);
  EXPECT_LE(older.size(), 1100u);
  EXPECT_LE(newer.size(), 1100u);
  EXPECT_THAT(newer, HasSubstr("line 99 of"));
  const size_t first_new = newer.find("line ");
  ASSERT_NE(first_new, std::string::npos);
  const int n = std::atoi(newer.c_str() + first_new + 5);
  EXPECT_THAT(older, HasSubstr("line " + std::to_string(n - 1) + " of")) << "no line lost at the rotation";
  EXPECT_THAT(older, Not(HasSubstr("line 0 of"))) << "the oldest part is gone";

  ASSERT_TRUE(log::set_file(path, static_cast<int64_t>(newer.size()) + 50));  // reopened: counts what is there
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) log::info("again " + std::to_string(i) + " after reopening the file");
  (void)::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(log::set_file(""));
  EXPECT_THAT(read(path + ".1"), HasSubstr("line 99 of")) << "the reopened file was rotated in its turn";
  std::remove(path.c_str());
  std::remove((path + ".1").c_str());
}

}  // namespace
}  // namespace rlrun
