// Checkpoint integrity: the manifest (COMPLETE) lists every file with its size and XXH3-64,
// verify_checkpoint catches each kind of damage and names the file; a save that cannot write
// (file-size limit, a full tmpfs, no permission) fails naming the path, removes its partial
// folder and leaves the previous checkpoint loadable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include "bigram_test_double.h"
#include "common/atomic_file.h"
#include "common/observe/log.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_files.h"
#include "trainer_test_util.h"

namespace rlrun::trainer {
namespace {

namespace fs = std::filesystem;
using testing::BigramTestDouble;
using testing::cpu_backend;

constexpr int64_t kVocab = 128;  // 16,512 parameters: 66 KB per data file

class CheckpointIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("rlrun_ckpt_integrity_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_);
    backend_ = cpu_backend();
    model_ = std::make_unique<BigramTestDouble>(*backend_, kVocab, 1);
    auto opt = Optimizer::create(*backend_, model_->flat_size(), {}, OptimizerOptions{}, nullptr);
    ASSERT_TRUE(opt.ok());
    optimizer_ = std::move(*opt);
  }
  void TearDown() override {
    if (mounted_) ::umount2(root_.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::permissions(root_, fs::perms::owner_all, ec);
    fs::remove_all(root_, ec);
  }

  Result<std::string> save(int64_t step, const CheckpointOptions& options = {}) {
    return save_checkpoint(root_, step, CheckpointExtras{R"({"at": 1})", "rng"}, *model_, *optimizer_, nullptr, options);
  }
  Status load(const std::string& dir) { return load_checkpoint(dir, *model_, *optimizer_, nullptr).status(); }

  // The checks every failed save must pass: the error names the step's folder, no partial folder
  // is left, and the checkpoint of step 1 is still the one to use, whole and loadable.
  void expect_failed_save_left_step_1(const Result<std::string>& saved, const std::string& reason) {
    ASSERT_FALSE(saved.ok());
    const std::string& message = saved.status().message();
    std::printf("[ message ] %s\n", message.c_str());
    EXPECT_NE(message.find(root_ + "/step-000002"), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
    EXPECT_FALSE(fs::exists(root_ + "/step-000002.tmp")) << "the partial folder must go (its space is needed)";
    EXPECT_FALSE(fs::exists(root_ + "/step-000002"));
    EXPECT_EQ(complete_checkpoints(root_), std::vector<std::string>{checkpoint_dir(root_, 1)});
    EXPECT_TRUE(verify_checkpoint(checkpoint_dir(root_, 1)).ok());
    EXPECT_TRUE(load(checkpoint_dir(root_, 1)).ok());
  }

  std::string root_;
  bool mounted_ = false;  // root_ is a mount point of the test's (unmounted in TearDown)
  std::unique_ptr<engine::Backend> backend_;
  std::unique_ptr<BigramTestDouble> model_;
  std::unique_ptr<Optimizer> optimizer_;
};

void flip_byte(const std::string& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(Checksum, IsXxh3AsXxhsumPrintsIt) {
  Checksum empty;
  EXPECT_EQ(checksum_hex(empty.value()), "2d06800538d394c2");  // XXH3-64 of no bytes (xxhsum -H3)
  Checksum abc;
  abc.update("a", 1);
  abc.update("bc", 2);  // streamed in pieces: the same as at once
  EXPECT_EQ(checksum_hex(abc.value()), "78af5f94892f3950");
}

TEST_F(CheckpointIntegrity, TheManifestListsEveryFileAndEachKindOfDamageIsCaught) {
  CheckpointOptions options;
  options.export_model = [](const std::string& dir) {
    fs::create_directories(dir + "/sub");
    RLRUN_RETURN_IF_ERROR(write_file_atomic(dir + "/config.json", "{\"hidden_size\": 8}"));
    return write_file_atomic(dir + "/sub/weights.bin", std::string(5000, 'w'));
  };
  Result<std::string> saved = save(1, options);
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  const std::string dir = *saved;
  Result<std::vector<FileDigest>> manifest = read_manifest(dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status().message();
  std::vector<std::string> listed;
  for (const FileDigest& f : *manifest) {
    listed.push_back(f.path);
    EXPECT_EQ(f.bytes, static_cast<int64_t>(fs::file_size(dir + "/" + f.path))) << f.path;
    EXPECT_EQ(f.xxh3, digest_file(dir, f.path)->xxh3) << f.path;
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, (std::vector<std::string>{"adam_m.f32", "adam_v.f32", "model/config.json", "model/sub/weights.bin",
                                              "params.f32", "trainer_state.json"}));
  ASSERT_TRUE(verify_checkpoint(dir).ok());

  // Each file, flipped, truncated or gone: verify names it; the manifest itself, damaged: too.
  const std::string scratch = root_ + "/scratch";
  const auto damaged = [&](const std::string& file, const std::function<void(const std::string&)>& damage) {
    fs::remove_all(scratch);
    fs::copy(dir, scratch, fs::copy_options::recursive);
    damage(scratch + "/" + file);
    return verify_checkpoint(scratch).message();
  };
  for (const std::string& file : listed) {
    SCOPED_TRACE(file);
    const std::string path = scratch + "/" + file;
    const std::string flipped = damaged(file, [](const std::string& p) { flip_byte(p, 3); });
    EXPECT_EQ(flipped, str(path, ": checksum mismatch (the file is corrupt): xxh3_64 ",
                           checksum_hex(digest_file(scratch, file)->xxh3), ", the manifest says ",
                           checksum_hex(digest_file(dir, file)->xxh3)));
    EXPECT_NE(damaged(file, [](const std::string& p) { fs::resize_file(p, fs::file_size(p) - 1); })
                  .find(path + " is "), std::string::npos);
    EXPECT_NE(damaged(file, [](const std::string& p) { fs::remove(p); }).find(path), std::string::npos);
  }
  EXPECT_NE(damaged("COMPLETE", [](const std::string& p) { std::ofstream(p) << "complete\n"; }).find("older rlrun"),
            std::string::npos) << "a checkpoint of an older rlrun (COMPLETE was a marker) is not used";
  EXPECT_NE(damaged("COMPLETE", [](const std::string& p) { fs::resize_file(p, 20); }).find("COMPLETE: not a JSON"),
            std::string::npos);
  EXPECT_NE(damaged("COMPLETE", [](const std::string& p) {
              std::ofstream(p) << R"({"format": 2, "files": [{"path": "../x", "bytes": 0, "xxh3_64": "2d06800538d394c2"}]})";
            }).find("bad entry"),
            std::string::npos);
  fs::remove_all(scratch);
  fs::copy(dir, scratch, fs::copy_options::recursive);
  fs::remove(scratch + "/COMPLETE");
  EXPECT_EQ(verify_checkpoint(scratch).code(), StatusCode::kNotFound);
  EXPECT_TRUE(complete_checkpoints(root_ + "/missing").empty());
}

TEST_F(CheckpointIntegrity, LoadRejectsAStateFileThatDoesNotMatchTheManifest) {
  Result<std::string> saved = save(1);
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  std::string text;
  {
    std::ifstream in(*saved + "/trainer_state.json");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = text.find("\"step\": 1");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 9, "\"step\": 7");  // still valid JSON, same size: only the checksum tells
  std::ofstream(*saved + "/trainer_state.json") << text;
  EXPECT_NE(load(*saved).message().find("trainer_state.json: checksum mismatch"), std::string::npos);
  EXPECT_NE(read_checkpoint_info(*saved).status().message().find("checksum mismatch"), std::string::npos);
}

// Portable: RLIMIT_FSIZE makes the kernel refuse the write (EFBIG) without root or a special
// file system, on the real write path.
TEST_F(CheckpointIntegrity, AWriteTheSystemRefusesLeavesThePreviousCheckpoint) {
  ASSERT_TRUE(save(1).ok());
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct sigaction ignore {}, old_action {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  struct rlimit small = old_limit;
  small.rlim_cur = 10000;  // params.f32 is 66 KB
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Result<std::string> saved = save(2);
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  ::sigaction(SIGXFSZ, &old_action, nullptr);
  expect_failed_save_left_step_1(saved, "step-000002.tmp/params.f32: File too large");
}

// Mounting needs root (CAP_SYS_ADMIN); without it these tests skip, saying so.
TEST_F(CheckpointIntegrity, AFullDiskLeavesThePreviousCheckpointAndItsSpaceIsFreed) {
  // Room for one checkpoint (3 x 66 KB and the state), not two.
  mounted_ = ::geteuid() == 0 && ::mount("tmpfs", root_.c_str(), "tmpfs", 0, "size=320k") == 0;
  if (!mounted_)
    GTEST_SKIP() << "cannot mount a small tmpfs (" << (::geteuid() != 0 ? "not root" : std::strerror(errno))
                 << "): the full-disk case runs only where the tests may mount";
  ASSERT_TRUE(save(1).ok());
  struct statvfs before {}, after {};
  ::statvfs(root_.c_str(), &before);
  const Result<std::string> saved = save(2);
  ::statvfs(root_.c_str(), &after);
  expect_failed_save_left_step_1(saved, "No space left on device (the file system is full or over quota: free space");
  EXPECT_EQ(after.f_bfree, before.f_bfree) << "the partial checkpoint's space was not given back";
}

TEST_F(CheckpointIntegrity, NoPermissionLeavesThePreviousCheckpoint) {
  ASSERT_TRUE(save(1).ok());
  std::string reason;
  if (::geteuid() != 0) {  // the folder read-only to this user
    fs::permissions(root_, fs::perms::owner_read | fs::perms::owner_exec);
    reason = "Permission denied (no permission: make the folder writable by this user)";
  } else {  // root ignores modes: a read-only bind mount refuses root too
    mounted_ = ::mount(root_.c_str(), root_.c_str(), nullptr, MS_BIND, nullptr) == 0;
    if (!mounted_ || ::mount(nullptr, root_.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      GTEST_SKIP() << "as root, a read-only folder needs a bind mount, which failed (" << std::strerror(errno) << ")";
    reason = "Read-only file system";
  }
  const Result<std::string> saved = save(2);
  ASSERT_FALSE(saved.ok());
  EXPECT_NE(saved.status().message().find("cannot create checkpoint directory " + root_ + "/step-000002.tmp"),
            std::string::npos) << saved.status().message();
  expect_failed_save_left_step_1(saved, reason);
}

}  // namespace
}  // namespace rlrun::trainer
