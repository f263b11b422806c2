// The run when checkpoints go wrong, end to end with the real binary: a SIGKILLed orchestrator
// resumes with every sample counted once; a damaged newest checkpoint is skipped on --resume,
// saying so; a checkpoint that cannot be written stops the run naming the path (or, with
// checkpoint_write_failure: continue, the run trains on); on a full disk the previous checkpoint
// stays and --resume continues from it once there is room.
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include "orchestrator/run/samples/dispatch_count.h"
#include "tests/orchestrator/run/run_resume_util.h"
#include "tests/orchestrator/run/summary_checks.h"
#include "trainer/checkpoint.h"

namespace rlrun::orchestrator {
namespace {

using namespace resume_test;  // NOLINT: the helpers of these tests

class CheckpointFaults : public RunResume {};

// The step of the checkpoint a resumed run's output says it continues from (-1: none).
int resumed_step(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("resuming from .*/step-0*([0-9]+) ")) ? std::stoi(m[1]) : -1;
}

int64_t final_samples(const json& s) {
  int64_t n = s["trained"].get<int64_t>() + s["cancelled"].get<int64_t>();
  for (const auto& [reason, count] : s["discarded"].items()) n += count.get<int64_t>();
  return n;
}

TEST_F(CheckpointFaults, AKilledOrchestratorResumesWithEverySampleCountedOnce) {
  constexpr int kSteps = 7;
  const fs::path run = dir_ / "run";
  const std::string args = kTiny + " --set number_of_steps=" + std::to_string(kSteps) +
                           " --set checkpoint_every=3 --run-dir " + q(run);
  start_run(dir_ / "bg", args);
  // Killed once step 4 is trained: the checkpoint of step 3 is behind it.
  ASSERT_TRUE(wait_for_steps(run, 4)) << read_file(dir_ / "bg" / "out");
  const std::string out = read_file(dir_ / "bg" / "out");
  const std::vector<int> workers{logged_pid(out, "trainer-0"), logged_pid(out, "rollout-0")};
  ASSERT_EQ(::kill(std::atoi(read_file(dir_ / "bg" / "pid").c_str()), SIGKILL), 0);
  EXPECT_EQ(wait_exit(dir_ / "bg"), 128 + SIGKILL);
  EXPECT_TRUE(survivors(workers, 5.0).empty()) << "workers outlived the SIGKILLed orchestrator";
  const int trained_before_kill = count_lines(run / "metrics.jsonl");
  const Result<std::optional<int64_t>> dispatched = DispatchCount::read(dispatch_count_path(run.string()));
  ASSERT_TRUE(dispatched.ok() && dispatched->has_value()) << "the killed run's dispatched count is on disk";

  ASSERT_EQ(run_rlrun(args + " --resume", dir_ / "resume.out"), 0) << read_file(dir_ / "resume.out");
  const std::string resumed_out = read_file(dir_ / "resume.out");
  const int from = resumed_step(resumed_out);
  ASSERT_GE(from, 3) << resumed_out;
  std::printf("[ info ] killed after %d trained steps; resumed from the checkpoint of step %d\n", trained_before_kill,
              from);
  const json at_checkpoint = json::parse(read_file(trainer::checkpoint_dir((run / "checkpoints").string(), from) +
                                                   "/trainer_state.json"))["loader_state"]["samples"];
  const int64_t cancelled_at_resume = **dispatched - final_samples(at_checkpoint);
  EXPECT_GE(cancelled_at_resume, 8 * (trained_before_kill - from)) << "the killed run's steps after the checkpoint";
  EXPECT_NE(resumed_out.find(std::to_string(cancelled_at_resume) + " samples in flight at the checkpoint or "
                             "dispatched after it count as cancelled"),
            std::string::npos) << resumed_out;

  const json summary = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], kSteps);
  EXPECT_EQ(summary["samples"]["trained"], kSteps * 2 * 4) << "no sample trained twice: prompts_batch_size 2, group_size 4";
  EXPECT_GE(summary["samples"]["cancelled"].get<int64_t>(),
            at_checkpoint["cancelled"].get<int64_t>() + cancelled_at_resume);
  testing::expect_every_sample_accounted_for(summary);
  const std::vector<json> lines = metrics_lines(run);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(lines[i]["step"], i + 1);
}

TEST_F(CheckpointFaults, ADamagedNewestCheckpointIsSkippedOnResumeSayingSo) {
  const fs::path run = dir_ / "run";
  const std::string args = kTiny + " --set number_of_steps=2 --set checkpoint_every=1 --run-dir " + q(run);
  ASSERT_EQ(run_rlrun(args, dir_ / "first.out"), 0) << read_file(dir_ / "first.out");
  const fs::path newest = run / "checkpoints" / "step-000002";
  fs::resize_file(newest / "adam_v.f32", fs::file_size(newest / "adam_v.f32") - 4);  // truncated

  ASSERT_EQ(run_rlrun(kTiny + " --set number_of_steps=3 --set checkpoint_every=1 --resume --run-dir " + q(run),
                      dir_ / "resume.out"), 0) << read_file(dir_ / "resume.out");
  const std::string out = read_file(dir_ / "resume.out");
  EXPECT_EQ(resumed_step(out), 1) << out;
  EXPECT_NE(out.find("--resume: not using " + newest.string() + ": " + (newest / "adam_v.f32").string() + " is "),
            std::string::npos) << out;
  EXPECT_NE(out.find("falls back to the previous complete checkpoint"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(run / "checkpoints" / "step-000002.unusable")) << "kept to be looked at";
  EXPECT_TRUE(trainer::verify_checkpoint((run / "checkpoints" / "step-000003").string()).ok());
  const json summary = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["steps_completed"], 3);
  testing::expect_every_sample_accounted_for(summary);
}

// The file-size limit (ulimit -f, SIGXFSZ ignored) refuses the checkpoint's big files and nothing
// else the run writes: a write failure without root or a special file system.
std::string with_file_limit(const std::string& args) {
  return "sh -c 'ulimit -f 256; trap \"\" XFSZ; exec \"" + std::string(RLRUN_BINARY) + "\" " + args + "'";
}

int run_shell_in_source(const std::string& command, const fs::path& output) {
  const std::string cmd = std::string("cd '") + RLRUN_SOURCE_DIR + "' && " + command + " > '" + output.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(CheckpointFaults, ACheckpointThatCannotBeWrittenStopsTheRunOrIsSkippedAsChosen) {
  const fs::path run = dir_ / "run";
  // q() quotes with ", which the single-quoted sh -c string keeps.
  const std::string args = kTiny + " --set number_of_steps=3 --set checkpoint_every=2 --run-dir " + q(run);
  EXPECT_EQ(run_shell_in_source(with_file_limit(args), dir_ / "stop.out"), 1) << read_file(dir_ / "stop.out");
  const std::string out = read_file(dir_ / "stop.out");
  const std::string tmp = (run / "checkpoints" / "step-000002.tmp").string();
  EXPECT_NE(out.find("checkpoint of step 2 not written: trainer 0: saving checkpoint "), std::string::npos) << out;
  EXPECT_NE(out.find(tmp + "/params.f32: File too large"), std::string::npos) << out;
  EXPECT_NE(out.find("this run has no earlier checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint_write_failure: continue"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp));
  const json stopped = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(stopped["steps_completed"], 2);
  EXPECT_NE(stopped["exit"].get<std::string>().find(tmp + "/params.f32"), std::string::npos) << stopped["exit"];

  const fs::path goes_on = dir_ / "goes_on";
  const std::string continue_args = kTiny + " --set number_of_steps=3 --set checkpoint_every=2" +
                                    " --set checkpoint_write_failure=continue --run-dir " + q(goes_on);
  EXPECT_EQ(run_shell_in_source(with_file_limit(continue_args), dir_ / "continue.out"), 0)
      << read_file(dir_ / "continue.out");
  const json summary = json::parse(read_file(goes_on / "summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], 3);
  ASSERT_EQ(summary["checkpoint_failures"].size(), 2u) << "steps 2 and 3 (the last)";
  EXPECT_EQ(summary["checkpoint_failures"][0]["step"], 2);
  EXPECT_NE(summary["checkpoint_failures"][0]["error"].get<std::string>().find("File too large"), std::string::npos);
  EXPECT_TRUE(trainer::complete_checkpoints((goes_on / "checkpoints").string()).empty());
  testing::expect_every_sample_accounted_for(summary);
}

// A real full disk needs a tmpfs: root only (CAP_SYS_ADMIN), else skipped, saying so.
TEST_F(CheckpointFaults, OnAFullDiskThePreviousCheckpointStaysAndResumeContinuesOnceThereIsRoom) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  // Measured on an ordinary folder first: the run's other files and one checkpoint.
  const std::string args = kTiny + " --set number_of_steps=3 --set checkpoint_every=1 --set checkpoint_keep_last=1";
  ASSERT_EQ(run_rlrun(args + " --run-dir " + q(dir_ / "measure"), dir_ / "measure.out"), 0);
  uintmax_t checkpoint = 0, all = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "measure"))
    if (e.is_regular_file()) (e.path().string().find("/checkpoints/") != std::string::npos ? checkpoint : all) += e.file_size();
  const uintmax_t room = all + checkpoint * 3 / 2 + (256 << 10);  // one checkpoint fits, not two at once
  if (::geteuid() != 0 || ::mount("tmpfs", run.c_str(), "tmpfs", 0, ("size=" + std::to_string(room)).c_str()) != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs (" << (::geteuid() != 0 ? "not root" : std::strerror(errno)) << ")";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{run.string()};

  EXPECT_EQ(run_rlrun(args + " --run-dir " + q(run), dir_ / "full.out"), 1) << read_file(dir_ / "full.out");
  const std::string out = read_file(dir_ / "full.out");
  const std::string previous = (run / "checkpoints" / "step-000001").string();
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_NE(out.find("the previous checkpoint " + previous + " is intact"), std::string::npos) << out;
  EXPECT_NE(out.find("`rlrun CONFIG --resume` continues from it"), std::string::npos) << out;
  EXPECT_TRUE(trainer::verify_checkpoint(previous).ok());
  EXPECT_EQ(json::parse(read_file(run / "summary.json"))["steps_completed"], 2) << "summary.json still written";

  // Room is made (the tmpfs grows); the run continues from the checkpoint of step 1.
  ASSERT_EQ(::mount("tmpfs", run.c_str(), "tmpfs", MS_REMOUNT, ("size=" + std::to_string(room * 4)).c_str()), 0);
  ASSERT_EQ(run_rlrun(args + " --resume --run-dir " + q(run), dir_ / "resume.out"), 0) << read_file(dir_ / "resume.out");
  EXPECT_EQ(resumed_step(read_file(dir_ / "resume.out")), 1);
  const json summary = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["steps_completed"], 3);
  EXPECT_EQ(summary["samples"]["trained"], 3 * 2 * 4);
  testing::expect_every_sample_accounted_for(summary);
}

}  // namespace
}  // namespace rlrun::orchestrator
