// Checkpoints and `rlrun CONFIG --resume` end to end, and clean stops when a process dies: the
// real binary on configs/tiny.yaml with its worker processes, on loopback.
#include "tests/orchestrator/run/run_resume_util.h"
#include "tests/orchestrator/run/summary_checks.h"

namespace rlrun::orchestrator {
namespace {

using namespace resume_test;  // NOLINT: the helpers of these tests

TEST_F(RunResume, InterruptedRunResumesWithTheSamePromptsAsAnUninterruptedOne) {
  constexpr int kSteps = 5;
  const std::string common = kTiny + " --set number_of_steps=" + std::to_string(kSteps) + " --set checkpoint_every=2";

  // The reference: uninterrupted. Checkpoints after steps 2 and 4 and at the end (5).
  const fs::path whole = dir_ / "whole";
  ASSERT_EQ(run_rlrun(common + " --run-dir " + q(whole), dir_ / "whole.out"), 0)
      << read_file(dir_ / "whole.out");
  for (const char* step : {"step-000002", "step-000004", "step-000005"}) {
    const fs::path ckpt = whole / "checkpoints" / step;
    ASSERT_TRUE(fs::exists(ckpt / "COMPLETE")) << step << "\n" << read_file(dir_ / "whole.out");
    const json manifest = json::parse(read_file(ckpt / "trainer_state.json"));
    EXPECT_EQ(manifest["step"], std::stoi(std::string(step).substr(5)));
    EXPECT_EQ(manifest["loader_state"]["steps_completed"], manifest["step"]);
    EXPECT_GT(manifest["loader_state"]["task_draws"].get<int64_t>(), 0);
    EXPECT_EQ(fs::file_size(ckpt / "params.f32"), fs::file_size(ckpt / "adam_m.f32"));
  }
  const std::vector<json> reference = metrics_lines(whole);
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));

  // Interrupted after its first step: the step in training completes and is saved, then it stops.
  const fs::path cut = dir_ / "cut";
  start_run(dir_ / "bg", common + " --run-dir " + q(cut));
  ASSERT_TRUE(wait_for_steps(cut, 1)) << read_file(dir_ / "bg" / "out");
  ASSERT_EQ(::kill(std::atoi(read_file(dir_ / "bg" / "pid").c_str()), SIGINT), 0);
  EXPECT_EQ(wait_exit(dir_ / "bg"), 1) << read_file(dir_ / "bg" / "out");
  const json stopped = json::parse(read_file(cut / "summary.json"));
  EXPECT_EQ(stopped["exit"], "interrupted");
  const int done = stopped["steps_completed"];
  ASSERT_LT(done, kSteps) << "the run ended before the interrupt";
  ASSERT_TRUE(fs::exists(cut / "checkpoints" / ("step-00000" + std::to_string(done)) / "COMPLETE"))
      << "no checkpoint of the last completed step " << done << "\n" << read_file(dir_ / "bg" / "out");

  // A torn checkpoint (no COMPLETE) and a half-written one are never chosen.
  fs::create_directories(cut / "checkpoints" / "step-000099");
  std::ofstream(cut / "checkpoints" / "step-000099" / "params.f32") << "torn";
  fs::create_directories(cut / "checkpoints" / "step-000100.tmp");

  const auto resume_start = std::chrono::steady_clock::now();
  ASSERT_EQ(run_rlrun(common + " --resume --run-dir " + q(cut), dir_ / "resume.out"), 0)
      << read_file(dir_ / "resume.out");
  std::printf("[ figure ] resume from step %d to %d: %.2f s (tiny config, loaded machine)\n", done, kSteps,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - resume_start).count());
  const std::string resumed_out = read_file(dir_ / "resume.out");
  EXPECT_NE(resumed_out.find("resuming from " + (cut / "checkpoints").string() + "/step-00000" + std::to_string(done)),
            std::string::npos) << resumed_out;
  const json summary = json::parse(read_file(cut / "summary.json"));
  EXPECT_EQ(summary["exit"], "ok");
  EXPECT_EQ(summary["steps_completed"], kSteps);
  EXPECT_EQ(summary["samples"]["lost"], 0);
  EXPECT_EQ(summary["samples"]["trained"], reference.size() * 2 * 4) << "prompts_batch_size 2, group_size 4";
  testing::expect_every_sample_accounted_for(summary);

  // One line per step, and each step trained the prompts the uninterrupted run trained.
  const std::vector<json> lines = metrics_lines(cut);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps)) << read_file(cut / "metrics.jsonl");
  for (int i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(lines[i]["step"], i + 1);
    EXPECT_EQ(lines[i]["prompt_hash"], reference[i]["prompt_hash"]);
    EXPECT_EQ(lines[i]["group_ids"], reference[i]["group_ids"]);
    EXPECT_EQ(lines[i]["trainer"]["learning_rate"], reference[i]["trainer"]["learning_rate"]);
  }
  EXPECT_TRUE(fs::exists(cut / "checkpoints" / "step-000005" / "COMPLETE"));
}

// kl_coef > 0: the trainer keeps the policy before its first RL update as the KL reference, and a
// checkpoint keeps it: after a resume the KL is measured against that policy, not the checkpoint.
// (The entropy bonus moves the policy even when a random model earns no reward.)
TEST_F(RunResume, KlReferenceIsTheInitialPolicyAcrossAResume) {
  constexpr int kSteps = 4;
  const std::string common = kTiny + " --set number_of_steps=" + std::to_string(kSteps) +
                             " --set checkpoint_every=2 --set kl_coef=0.1 --set entropy_coef=0.01";
  const fs::path whole = dir_ / "whole";
  ASSERT_EQ(run_rlrun(common + " --run-dir " + q(whole), dir_ / "whole.out"), 0) << read_file(dir_ / "whole.out");
  EXPECT_TRUE(fs::exists(whole / "checkpoints" / "step-000002" / "reference.f32"));
  const std::vector<json> reference = metrics_lines(whole);
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(reference[0]["trainer"]["ref_kl"], 0.0) << "step 1 trains the reference itself";
  for (int i = 1; i < kSteps; ++i) EXPECT_GT(reference[i]["trainer"]["ref_kl"].get<double>(), 0.0) << i;

  const fs::path cut = dir_ / "cut";
  ASSERT_EQ(run_rlrun(kTiny + " --set number_of_steps=2 --set checkpoint_every=2 --set kl_coef=0.1 --set entropy_coef=0.01"
                      " --run-dir " + q(cut),
                      dir_ / "cut.out"), 0) << read_file(dir_ / "cut.out");
  ASSERT_EQ(run_rlrun(common + " --resume --run-dir " + q(cut), dir_ / "resume.out"), 0)
      << read_file(dir_ / "resume.out");
  const std::vector<json> lines = metrics_lines(cut);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps)) << read_file(cut / "metrics.jsonl");
  for (int i = 2; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    ASSERT_EQ(lines[i]["prompt_hash"], reference[i]["prompt_hash"]);
    const double got = lines[i]["trainer"]["ref_kl"], want = reference[i]["trainer"]["ref_kl"];
    EXPECT_NEAR(got, want, 1e-6 * want) << "a reference taken from the checkpoint would give another KL";
  }
}

// kl_reference_on: rollout. The rollout workers get their copy of the reference only with version
// 0; a resumed run starts later, so its trainer scores the reference from the checkpoint's copy,
// and the steps it redoes see the same KL as a run that was never cut.
TEST_F(RunResume, AResumedRunWithTheKlReferenceOnRolloutHasTheTrainerScoreIt) {
  const std::string kl = " --set checkpoint_every=2 --set kl_coef=0.1 --set entropy_coef=0.01 --set kl_reference_on=rollout";
  const fs::path cut = dir_ / "cut";
  ASSERT_EQ(run_rlrun(kTiny + " --set number_of_steps=2" + kl + " --run-dir " + q(cut), dir_ / "cut.out"), 0)
      << read_file(dir_ / "cut.out");
  const json first = json::parse(read_file(cut / "summary.json"));
  EXPECT_EQ(first["kl_reference_groups"]["scored_by_trainer"], 0) << first.dump(2);
  ASSERT_EQ(run_rlrun(kTiny + " --set number_of_steps=4" + kl + " --resume --run-dir " + q(cut), dir_ / "resume.out"), 0)
      << read_file(dir_ / "resume.out");
  EXPECT_NE(read_file(dir_ / "resume.out").find("a resumed run's rollout workers have no copy"), std::string::npos);
  const json resumed = json::parse(read_file(cut / "summary.json"));
  EXPECT_EQ(resumed["samples"]["lost"], 0);
  EXPECT_EQ(resumed["kl_reference_groups"]["scored_by_rollout"], 0) << resumed.dump(2);
  EXPECT_GT(resumed["kl_reference_groups"]["scored_by_trainer"].get<int64_t>(), 0) << resumed.dump(2);
  const std::vector<json> lines = metrics_lines(cut);
  ASSERT_EQ(lines.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    if (i < 2) EXPECT_EQ(lines[i]["trainer"]["reference_tokens"], 0) << "the rollout worker scored it";
    else EXPECT_GT(lines[i]["trainer"]["reference_tokens"].get<double>(), 0) << "the trainer scored it";
  }
  EXPECT_GT(lines[3]["trainer"]["ref_kl"].get<double>(), 0.0);
}

TEST_F(RunResume, ResumeWithoutACheckpointSaysWhatToDo) {
  const fs::path run = dir_ / "run";
  fs::create_directories(run);
  EXPECT_EQ(run_rlrun(kTiny + " --resume --run-dir " + q(run), dir_ / "out"), 2);
  const std::string out = read_file(dir_ / "out");
  EXPECT_NE(out.find("no complete checkpoint under " + (run / "checkpoints").string()), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoint_every"), std::string::npos) << out;
  EXPECT_NE(out.find("without --resume"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(run / "summary.json")) << "nothing may start";

  // The default run_dir names a new timestamped folder: a resume must be told which one.
  std::ofstream(dir_ / "no_run_dir.yaml") << "number_of_steps: 3\n";
  EXPECT_EQ(run_rlrun(q(dir_ / "no_run_dir.yaml") + " --resume", dir_ / "out2"), 2);
  EXPECT_NE(read_file(dir_ / "out2").find("--resume needs the run folder"), std::string::npos)
      << read_file(dir_ / "out2");
}

// Without trainer restarts (trainer_recovery_test.cc has them).
TEST_F(RunResume, KilledTrainerStopsTheRunCleanlyAndTheRunResumes) {
  constexpr int kSteps = 4;
  const fs::path run = dir_ / "run";
  const std::string args = kTiny + " --set number_of_steps=" + std::to_string(kSteps) +
                           " --set checkpoint_every=1 --set max_trainer_restarts=0 --run-dir " + q(run);
  start_run(dir_ / "bg", args);
  // Killed once step 1 is saved (the metrics line comes before the checkpoint).
  const fs::path first = run / "checkpoints" / "step-000001" / "COMPLETE";
  testing::eventually([&] { return fs::exists(first); }, std::chrono::seconds(60));
  ASSERT_TRUE(fs::exists(first)) << read_file(dir_ / "bg" / "out");
  const std::string out = read_file(dir_ / "bg" / "out");
  const int trainer = logged_pid(out, "trainer-0"), rollout = logged_pid(out, "rollout-0");
  ASSERT_GT(trainer, 0) << out;
  ASSERT_GT(rollout, 0) << out;
  ASSERT_EQ(::kill(trainer, SIGKILL), 0);
  EXPECT_EQ(wait_exit(dir_ / "bg"), 1);
  const std::string stopped_out = read_file(dir_ / "bg" / "out");
  EXPECT_NE(stopped_out.find("trainer-0 killed by signal 9"), std::string::npos) << stopped_out;
  const json summary = json::parse(read_file(run / "summary.json"));
  const std::string exit = summary["exit"];
  EXPECT_NE(exit.find("trainer-0"), std::string::npos) << exit;
  EXPECT_NE(exit.find("logs/trainer-0.log"), std::string::npos) << exit;
  EXPECT_TRUE(survivors({trainer, rollout}, 0.0).empty()) << "a worker outlived the stopped run";
  const int done = summary["steps_completed"];
  ASSERT_LT(done, kSteps);

  ASSERT_EQ(run_rlrun(kTiny + " --set number_of_steps=" + std::to_string(kSteps) + " --set checkpoint_every=1 --resume"
                      " --run-dir " + q(run), dir_ / "resume.out"), 0)
      << read_file(dir_ / "resume.out");
  const json resumed = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(resumed["exit"], "ok");
  EXPECT_EQ(resumed["steps_completed"], kSteps);
  EXPECT_EQ(resumed["samples"]["trained"], kSteps * 2 * 4) << "steps after the checkpoint are not counted twice";
  testing::expect_every_sample_accounted_for(resumed);
  const std::vector<json> lines = metrics_lines(run);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(lines[i]["step"], i + 1);
}

// Two trainer ranks with the sharded optimizer: both save (the moments gathered to rank 0) and
// both load; the surviving rank, blocked in a collective with the dead one, is torn down too
// (without trainer restarts: trainer_recovery_test.cc has them).
TEST_F(RunResume, TwoShardedRanksSaveStopCleanlyWhenOneDiesAndResume) {
  constexpr int kSteps = 4;
  const fs::path run = dir_ / "run";
  const std::string args = kTiny + " --set trainer_num_workers=2 --set use_distributed_optimizer=true" +
                           " --set max_trainer_restarts=0" +
                           " --set number_of_steps=" + std::to_string(kSteps) + " --set checkpoint_every=2" +
                           " --run-dir " + q(run);
  start_run(dir_ / "bg", args);
  const fs::path second = run / "checkpoints" / "step-000002" / "COMPLETE";
  testing::eventually([&] { return fs::exists(second); }, std::chrono::seconds(60));
  ASSERT_TRUE(fs::exists(second)) << read_file(dir_ / "bg" / "out");
  const std::string out = read_file(dir_ / "bg" / "out");
  const std::vector<int> workers{logged_pid(out, "trainer-0"), logged_pid(out, "trainer-1"),
                                 logged_pid(out, "rollout-0")};
  for (int pid : workers) ASSERT_GT(pid, 0) << out;
  ASSERT_EQ(::kill(workers[1], SIGKILL), 0);
  const int code = wait_exit(dir_ / "bg");
  const json summary = json::parse(read_file(run / "summary.json"));
  const int done = summary["steps_completed"];
  std::printf("[ info ] trainer-1 killed after %d of %d steps\n", done, kSteps);
  if (done < kSteps) {  // else the run ended before the kill landed: nothing to stop
    EXPECT_EQ(code, 1);
    const std::string exit = summary["exit"];
    EXPECT_NE(exit.find("trainer-1"), std::string::npos) << exit;
    EXPECT_NE(exit.find("logs/trainer-1.log"), std::string::npos) << exit;
  }
  EXPECT_TRUE(survivors(workers, 0.0).empty()) << "a worker outlived the stopped run";

  ASSERT_EQ(run_rlrun(args + " --resume", dir_ / "resume.out"), 0) << read_file(dir_ / "resume.out");
  const json resumed = json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(resumed["exit"], "ok");
  EXPECT_EQ(resumed["steps_completed"], kSteps);
  EXPECT_NE(read_file(run / "logs" / "trainer-1.log").find("resumed from"), std::string::npos);
  const json manifest = json::parse(read_file(run / "checkpoints" / "step-000004" / "trainer_state.json"));
  EXPECT_EQ(manifest["trainer_ranks"], 2);
  EXPECT_EQ(manifest["use_distributed_optimizer"], true);
}

TEST_F(RunResume, WorkersExitWhenTheOrchestratorIsKilled) {
  const fs::path run = dir_ / "run";
  start_run(dir_ / "bg", kTiny + " --set number_of_steps=1000000 --run-dir " + q(run));
  ASSERT_TRUE(wait_for_steps(run, 1)) << read_file(dir_ / "bg" / "out");
  const std::string out = read_file(dir_ / "bg" / "out");
  const std::vector<int> workers{logged_pid(out, "trainer-0"), logged_pid(out, "rollout-0")};
  for (int pid : workers) ASSERT_GT(pid, 0) << out;
  ASSERT_EQ(::kill(std::atoi(read_file(dir_ / "bg" / "pid").c_str()), SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(survivors(workers, 5.0).empty()) << "workers outlived a SIGKILLed orchestrator by 5 s";
  std::printf("[ figure ] workers gone %.3f s after the orchestrator's SIGKILL\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(wait_exit(dir_ / "bg"), 128 + SIGKILL);
}

// Where no PDEATHSIG reaches (another node): a worker that hears no heartbeat echo for
// heartbeat_timeout_seconds exits. A stopped orchestrator is alive but silent.
TEST_F(RunResume, WorkersExitWhenTheOrchestratorFallsSilent) {
  const fs::path run = dir_ / "run";
  start_run(dir_ / "bg", kTiny + " --set number_of_steps=1000000 --set heartbeat_interval_seconds=0.25"
                                 " --set heartbeat_timeout_seconds=2 --run-dir " + q(run));
  ASSERT_TRUE(wait_for_steps(run, 1)) << read_file(dir_ / "bg" / "out");
  const std::string out = read_file(dir_ / "bg" / "out");
  const std::vector<int> workers{logged_pid(out, "trainer-0"), logged_pid(out, "rollout-0")};
  for (int pid : workers) ASSERT_GT(pid, 0) << out;
  const int orchestrator = std::atoi(read_file(dir_ / "bg" / "pid").c_str());
  ASSERT_EQ(::kill(orchestrator, SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> left = survivors(workers, 6.0);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::kill(orchestrator, SIGKILL);
  EXPECT_TRUE(left.empty()) << "workers still running 6 s after the orchestrator fell silent";
  std::printf("[ figure ] workers gone %.2f s after the orchestrator stopped (heartbeat_timeout_seconds 2)\n", waited);
  EXPECT_NE(read_file(run / "logs" / "trainer-0.log").find("nothing heard from the orchestrator"), std::string::npos)
      << read_file(run / "logs" / "trainer-0.log");
  EXPECT_EQ(wait_exit(dir_ / "bg"), 128 + SIGKILL);
}

}  // namespace
}  // namespace rlrun::orchestrator
