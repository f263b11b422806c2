// Trainer recovery, end to end: the real `rlrun` binary on configs/tiny.yaml, a trainer rank
// SIGKILLed (after a checkpoint, before any, one rank of two) or SIGSTOPped past
// train_step_timeout_seconds while the run goes on. The whole trainer group restarts from the
// newest checkpoint (or the start weights), the steps after it are trained again from their kept
// batches, and the run finishes with every sample accounted for once. Synchronous runs
// (max_async_rollout 0) train exactly what an uninterrupted run trains: on the CPU the final
// weights are the same bytes.
#include "tests/orchestrator/run/run_resume_util.h"
#include "tests/orchestrator/run/summary_checks.h"

#include <chrono>
#include <cstdio>
#include <map>

namespace rlrun::orchestrator {
namespace {

using namespace resume_test;  // NOLINT: the helpers of the resume tests

constexpr int kSteps = 10;
constexpr int kSamplesPerStep = 2 * 4;  // tiny.yaml: prompts_batch_size_for_trainer 2, group_size 4
// Two warm-start steps: a restart before any checkpoint must rebuild version 0 from them. The
// random tiny model earns no reward spread (every advantage 0): the entropy bonus makes every step
// change the weights, so that the same final weights mean the same steps.
const std::string kRun = kTiny + " --set number_of_steps=10 --set format_warm_start_steps=2" +
                         " --set entropy_coef=0.05 --set trainer_restart_backoff_seconds=0.2";

// Every pid the orchestrator logged for `worker`'s registrations, oldest first.
std::vector<int> logged_pids(const std::string& out, const std::string& worker) {
  const std::string key = worker + " registered (pid ";
  std::vector<int> pids;
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
    pids.push_back(std::atoi(out.c_str() + at + key.size()));
  return pids;
}

class TrainerRecovery : public RunResume {
 protected:
  // The uninterrupted run every synchronous test compares against (its final weights).
  static void SetUpTestSuite() {
    reference_ = fs::temp_directory_path() / ("rlrun_trainer_recovery_ref_" + std::to_string(::getpid()));
    fs::remove_all(reference_);
    fs::create_directories(reference_);
    reference_code_ = run_rlrun(kRun + " --run-dir " + q(reference_ / "run"), reference_ / "out");
  }
  static void TearDownTestSuite() { fs::remove_all(reference_); }
  static std::string reference_weights() {
    EXPECT_EQ(reference_code_, 0) << read_file(reference_ / "out");
    for (const json& line : metrics_lines(reference_ / "run"))
      EXPECT_GT(line["trainer"].value("grad_norm", 0.0), 0.0) << "a step that changes nothing proves nothing";
    return read_file(reference_ / "run" / "model" / "model.safetensors");
  }

  // Starts `args` in the background, waits for `lines` metrics lines, sends `signal` to the first
  // process of `worker`; returns its pid.
  int start_and_signal(const std::string& args, int lines, const std::string& worker, int signal) {
    start_run(dir_ / "bg", args + " --run-dir " + q(dir_ / "run"));
    EXPECT_TRUE(wait_for_steps(dir_ / "run", lines)) << out();
    const int pid = logged_pid(out(), worker);
    EXPECT_GT(pid, 0) << out();
    signalled_at_ = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (pid > 0) {
      EXPECT_EQ(::kill(pid, signal), 0);
    }
    return pid;
  }
  std::string out() const { return read_file(dir_ / "bg" / "out"); }
  json summary() const { return json::parse(read_file(dir_ / "run" / "summary.json")); }

  double signalled_at_ = 0;  // Unix seconds
  static inline fs::path reference_;
  static inline int reference_code_ = -1;
};


// One restart, found and timed: the run finished every step, and counted each sample once.
// Returns the failure's entry, a reference into `summary`.
const json& expect_one_restart(const json& summary, const std::string& worker, const std::string& reason_part,
                               double signalled_at) {
  EXPECT_EQ(summary["exit"], "ok") << summary.dump(2);
  EXPECT_EQ(summary["steps_completed"], kSteps);
  EXPECT_EQ(summary["trainer_restarts"], 1) << summary.dump(2);
  EXPECT_EQ(summary["worker_restarts"], 0) << "the rollout workers keep running";
  EXPECT_EQ(summary["samples"]["trained"], kSteps * kSamplesPerStep) << "redone steps are not counted twice";
  testing::expect_every_sample_accounted_for(summary);
  static const json kNone;
  if (summary["trainer_failures"].size() != 1u) {
    ADD_FAILURE() << summary.dump(2);
    return kNone;
  }
  const json& f = summary["trainer_failures"][0];
  EXPECT_EQ(f["worker"], worker);
  EXPECT_NE(f["reason"].get<std::string>().find(reason_part), std::string::npos) << f.dump();
  for (const char* time : {"detected_at", "restart_started_at", "restart_ready_at", "first_step_at"})
    EXPECT_TRUE(f[time].is_number()) << time << ": " << f.dump();
  if (f["first_step_at"].is_number() && f["detected_at"].is_number()) {
    EXPECT_LE(f["detected_at"].get<double>(), f["restart_started_at"].get<double>());
    EXPECT_LE(f["restart_started_at"].get<double>(), f["restart_ready_at"].get<double>());
    EXPECT_LE(f["restart_ready_at"].get<double>(), f["first_step_at"].get<double>());
    std::printf("[ figure ] %s: detected %.3f s after the signal, restarted %.3f s after that, weights restored "
                "%.3f s after, first step %.3f s after (tiny config, loaded machine)\n",
                f["reason"].get<std::string>().c_str(), f["detected_at"].get<double>() - signalled_at,
                f["restart_started_at"].get<double>() - f["detected_at"].get<double>(),
                f["restart_ready_at"].get<double>() - f["restart_started_at"].get<double>(),
                f["first_step_at"].get<double>() - f["restart_ready_at"].get<double>());
  }
  // The steps completed after the checkpoint, and the one in training if there was one.
  const int64_t after_checkpoint = f["step"].get<int64_t>() - f["restored_step"].get<int64_t>();
  const int64_t redone = f["steps_redone"];
  EXPECT_TRUE(redone == after_checkpoint || redone == after_checkpoint + 1) << f.dump();
  return f;
}

// metrics.jsonl: the step numbers go back to the checkpoint's after the restart, the redone lines
// say so and train the prompts they trained before from the same weights (the same loss and
// gradient norm), and every step ends up with a line.
void expect_redone_lines(const fs::path& run, int64_t restored_step) {
  const std::vector<json> lines = metrics_lines(run);
  std::map<int64_t, json> first_of;  // the first line of each step
  int64_t previous = 0, redone = 0;
  bool went_back = false;
  for (const json& line : lines) {
    const int64_t step = line["step"];
    if (step <= previous) {
      went_back = true;
      EXPECT_EQ(step, restored_step + 1) << "the step counter goes back to the checkpoint's step";
    }
    previous = step;
    if (line.value("redone", false) && first_of.count(step) > 0) {
      ++redone;
      const json& first = first_of[step];
      EXPECT_EQ(line["prompt_hash"], first["prompt_hash"]) << "step " << step << " redone with another batch";
      for (const char* metric : {"loss", "grad_norm"})
        EXPECT_EQ(line["trainer"][metric], first["trainer"][metric]) << "step " << step << " redone: " << metric;
    }
    if (went_back) {
      EXPECT_EQ(line.value("trainer_restarts", 0), 1) << line.dump();
    }
    first_of.emplace(step, line);
  }
  EXPECT_EQ(previous, kSteps);
  EXPECT_EQ(first_of.size(), static_cast<size_t>(kSteps));
  if (went_back) {
    EXPECT_GT(redone, 0);
  }
}

TEST_F(TrainerRecovery, KilledAfterACheckpointRestartsFromItAndEndsWithTheSameWeights) {
  const int pid = start_and_signal(kRun + " --set checkpoint_every=3", 5, "trainer-0", SIGKILL);
  ASSERT_EQ(wait_exit(dir_ / "bg"), 0) << out();
  const json s = summary();
  const json& f = expect_one_restart(s, "trainer-0", "killed by signal 9", signalled_at_);
  ASSERT_TRUE(f["checkpoint"].is_string()) << f.dump();
  const int64_t restored = f["restored_step"];
  EXPECT_GE(restored, 3);
  EXPECT_EQ(restored % 3, 0);
  EXPECT_NE(f["checkpoint"].get<std::string>().find("step-00000" + std::to_string(restored)), std::string::npos);
  expect_redone_lines(dir_ / "run", restored);
  EXPECT_NE(read_file(dir_ / "run" / "logs" / "trainer-0.log").find("resumed from"), std::string::npos);
  EXPECT_FALSE(alive(pid));
  EXPECT_TRUE(read_file(dir_ / "run" / "model" / "model.safetensors") == reference_weights())
      << "the restarted run trained other weights than the uninterrupted one";
}

TEST_F(TrainerRecovery, KilledBeforeAnyCheckpointRestartsFromTheStartWeights) {
  start_and_signal(kRun, 3, "trainer-0", SIGKILL);
  ASSERT_EQ(wait_exit(dir_ / "bg"), 0) << out();
  const json s = summary();
  const json& f = expect_one_restart(s, "trainer-0", "killed by signal 9", signalled_at_);
  EXPECT_TRUE(f["checkpoint"].is_null()) << f.dump();
  EXPECT_EQ(f["restored_step"], 0);
  EXPECT_NE(out().find("from the start weights (no checkpoint yet"), std::string::npos) << out();
  expect_redone_lines(dir_ / "run", 0);
  // Version 0 rebuilt: the warm-start's batches were trained again.
  EXPECT_NE(out().find("the format warm-start's 2 step(s) are trained again to rebuild version 0"), std::string::npos)
      << out();
  EXPECT_TRUE(read_file(dir_ / "run" / "model" / "model.safetensors") == reference_weights());
}

// checkpoint_every 0 with the kept batches bounded (trainer_replay_max_steps 2): a restart after
// step 5 cannot train steps 1-5 again, so the group goes on from the start weights with new
// batches from step 1, and says the steps were lost. Their samples stay counted trained once; the
// step in training's are discarded; nothing is lost from the ledger.
TEST_F(TrainerRecovery, KilledPastTheKeptBatchesRestartsFromTheStartWeightsAndSaysStepsWereLost) {
  start_and_signal(kRun + " --set trainer_replay_max_steps=2", 5, "trainer-0", SIGKILL);
  ASSERT_EQ(wait_exit(dir_ / "bg"), 0) << out();
  const json s = summary();
  EXPECT_EQ(s["exit"], "ok") << s.dump(2);
  EXPECT_EQ(s["steps_completed"], kSteps);
  ASSERT_EQ(s["trainer_failures"].size(), 1u) << s.dump(2);
  const json& f = s["trainer_failures"][0];
  EXPECT_TRUE(f["checkpoint"].is_null()) << f.dump();
  EXPECT_EQ(f["steps_redone"], 0) << f.dump();
  const int64_t lost_steps = f["steps_lost"];
  EXPECT_EQ(lost_steps, f["step"].get<int64_t>()) << f.dump();
  EXPECT_GE(lost_steps, 5) << f.dump();
  EXPECT_NE(out().find("were not kept (trainer_replay_max_steps = 2, no checkpoint yet)"), std::string::npos) << out();
  EXPECT_NE(out().find(str("the ", lost_steps, " step(s) trained since are lost")), std::string::npos) << out();
  EXPECT_EQ(s["samples"]["trained"], (kSteps + lost_steps) * kSamplesPerStep) << s.dump(2);
  testing::expect_every_sample_accounted_for(s);
  // The step numbers start again at 1, in lines not marked redone.
  int64_t previous = 0;
  bool restarted = false;
  for (const json& line : metrics_lines(dir_ / "run")) {
    EXPECT_FALSE(line.value("redone", false)) << line.dump();
    if (line["step"].get<int64_t>() != previous + 1) {
      EXPECT_FALSE(restarted) << "one restart";
      EXPECT_EQ(line["step"], 1) << line.dump();
      restarted = true;
    }
    previous = line["step"];
  }
  EXPECT_TRUE(restarted);
  EXPECT_EQ(previous, kSteps);
}

TEST_F(TrainerRecovery, HungTrainerIsKilledAfterTheStepTimeoutAndRestarted) {
  const int pid = start_and_signal(kRun + " --set checkpoint_every=3 --set train_step_timeout_seconds=2", 4,
                                   "trainer-0", SIGSTOP);
  const int code = wait_exit(dir_ / "bg");
  if (alive(pid)) ::kill(pid, SIGKILL);  // the run did not (the assertions below then fail)
  ASSERT_EQ(code, 0) << out();
  expect_one_restart(summary(), "trainer-0", "train_step_timeout_seconds", signalled_at_);
  EXPECT_TRUE(read_file(dir_ / "run" / "model" / "model.safetensors") == reference_weights());
}

// Asynchronous (max_async_rollout 1): samples in flight at the failure go on to later steps.
TEST_F(TrainerRecovery, OneOfTwoRanksKilledRestartsTheGroup) {
  const int pid = start_and_signal(kRun + " --set trainer_num_workers=2 --set checkpoint_every=3 "
                                          "--set max_async_rollout=1",
                                   5, "trainer-1", SIGKILL);
  ASSERT_EQ(wait_exit(dir_ / "bg"), 0) << out();
  const json s = summary();
  const json& f = expect_one_restart(s, "trainer-1", "killed by signal 9", signalled_at_);
  if (f.contains("restored_step")) expect_redone_lines(dir_ / "run", f["restored_step"]);
  // Both ranks restarted: two registrations each, a new gradient group.
  const std::string o = out();
  EXPECT_EQ(logged_pids(o, "trainer-0").size(), 2u) << o;
  EXPECT_EQ(logged_pids(o, "trainer-1").size(), 2u) << o;
  EXPECT_FALSE(alive(pid));
  for (const char* rank : {"trainer-0.log", "trainer-1.log"})
    EXPECT_NE(read_file(dir_ / "run" / "logs" / rank).find("resumed from"), std::string::npos) << rank;
}

TEST_F(TrainerRecovery, TrainerThatKeepsDyingUsesUpItsRestartsAndStopsTheRunNamingIt) {
  start_and_signal(kRun + " --set number_of_steps=100000 --set max_trainer_restarts=1", 2, "trainer-0", SIGKILL);
  // The replacement, once it registered.
  std::vector<int> pids;
  ASSERT_TRUE(testing::eventually([&] { return (pids = logged_pids(out(), "trainer-0")).size() >= 2; },
                                  std::chrono::seconds(60)))
      << out();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  ASSERT_EQ(wait_exit(dir_ / "bg"), 1) << out();
  const json s = summary();
  const std::string exit = s["exit"];
  EXPECT_NE(exit.find("trainer-0 killed by signal 9"), std::string::npos) << exit;
  EXPECT_NE(exit.find("max_trainer_restarts = 1"), std::string::npos) << exit;
  EXPECT_NE(exit.find("logs/trainer-0.log"), std::string::npos) << exit;
  EXPECT_EQ(s["trainer_restarts"], 1);
  EXPECT_EQ(s["trainer_failures"].size(), 2u) << s.dump(2);
  testing::expect_every_sample_accounted_for(s);
}

}  // namespace
}  // namespace rlrun::orchestrator
