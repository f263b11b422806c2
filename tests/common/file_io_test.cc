// read_file: the bytes of a file, or an error naming what it is, where, and why; describe_file_error:
// the system's reason, with what to do for the failures a user can fix.
#include "common/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "tests/common/config_test_util.h"

namespace rlrun {
namespace {

using ::testing::HasSubstr;
using rlrun::testing::TempDir;

TEST(ReadFile, ReturnsTheBytesOrSaysWhatAndWhy) {
  TempDir dir;
  const std::string path = dir.write("a.json", std::string("{\"x\":\0 1}", 9));
  Result<std::string> text = read_file(path, "test file");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, std::string("{\"x\":\0 1}", 9));
  EXPECT_EQ(*read_file(dir.write("empty", ""), "test file"), "");

  Result<std::string> missing = read_file(dir.path() + "/nope.json", "tokenizer file");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read tokenizer file " + dir.path() + "/nope.json: it does not exist"));
  Result<std::string> folder = read_file(dir.path(), "HF config");
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(folder.status().message(), HasSubstr("is a folder, not a file"));
}

TEST(DescribeFileError, SaysWhatToDoWhereTheUserCan) {
  EXPECT_EQ(describe_file_error(ENOSPC), "No space left on device (the file system is full or over quota: free space on it)");
  EXPECT_THAT(describe_file_error(EACCES), HasSubstr("Permission denied (no permission: make the folder writable"));
  EXPECT_THAT(describe_file_error(EROFS), HasSubstr("(the file system is mounted read-only)"));
  EXPECT_THAT(describe_file_error(EFBIG), HasSubstr("ulimit -f"));
  EXPECT_EQ(describe_file_error(EINVAL), "Invalid argument") << "nothing to add";
}

// metrics.jsonl and samples.jsonl stay bounded: past the limit the file becomes <path>.1
// (replacing the older one); under it, or with no limit, nothing moves.
TEST(RotateIfLarger, RenamesAFilePastTheLimitReplacingTheOlderOne) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto write = [](const std::string& p, const std::string& text) { std::ofstream(p) << text; };
  EXPECT_FALSE(*rotate_if_larger(path, 10)) << "no file yet";
  write(path, "123456789");
  EXPECT_FALSE(*rotate_if_larger(path, 10));
  EXPECT_FALSE(*rotate_if_larger(path, 0)) << "0: never";
  write(path, "1234567890");
  EXPECT_TRUE(*rotate_if_larger(path, 10));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(*read_file(path + ".1", "rotated"), "1234567890");
  write(path, "abcdefghijk");
  EXPECT_TRUE(*rotate_if_larger(path, 10));
  EXPECT_EQ(*read_file(path + ".1", "rotated"), "abcdefghijk") << "the older one is replaced";
}

}  // namespace
}  // namespace rlrun
