#include "common/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rlrun {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicFile, WritesReplacesAndLeavesNoTemporaries) {
  std::string tmpl = (fs::temp_directory_path() / "atomic_file_test.XXXXXX").string();
  const std::string dir = ::mkdtemp(tmpl.data());
  const std::string path = dir + "/state.json";
  ASSERT_TRUE(write_file_atomic(path, "first").ok());
  EXPECT_EQ(read(path), "first");
  const std::string_view pieces[] = {"sec", "", "ond"};
  ASSERT_TRUE(write_file_atomic(path, pieces).ok());
  EXPECT_EQ(read(path), "second");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // not mkstemp's 0600: others may read checkpoints
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  Status missing = write_file_atomic(dir + "/absent/state.json", "x");
  EXPECT_EQ(missing.code(), StatusCode::kIOError);
  EXPECT_THAT(missing.message(), ::testing::HasSubstr(dir + "/absent/state.json"));
  // a directory in the way: the rename fails, the temporary is removed
  fs::create_directory(dir + "/taken");
  EXPECT_FALSE(write_file_atomic(dir + "/taken", "x").ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlrun
