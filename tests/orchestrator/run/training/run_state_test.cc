// ResumeState: the orchestrator's part of a checkpoint survives a round trip, bad text is an
// error naming the file, the newest checkpoint that verifies is the one resumed (newer damaged
// ones are skipped, saying why, and set aside), samples a checkpoint does not hold count as
// cancelled, metrics.jsonl keeps only the steps the checkpoint holds.
#include "orchestrator/run/training/state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/atomic_file.h"
#include "orchestrator/run/samples/dispatch_count.h"
#include "tests/common/config_test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_files.h"

namespace rlrun::orchestrator {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

ResumeState sample_state() {
  ResumeState s;
  s.steps_completed = 7;
  s.task_draws = 31;
  s.next_group = 16;
  s.next_request = 40;
  s.prompts_skipped = 2;
  s.tokens_generated = 1234;
  s.tokens_trained = 987;
  s.step_reward_means = {0.25, std::nan(""), 0.5};
  s.accuracy_before = 0.125;
  s.loop_seconds = 12.5;
  s.trainer_idle_seconds = 3.25;
  s.rollout_idle_seconds = {{"rollout-0", 1.5}};
  s.samples.dispatched = 64;
  s.samples.generated = 60;
  s.samples.trained = 56;
  s.samples.discarded = {{"zero_advantage", 4}};
  s.samples.cancelled = 1;
  return s;
}

TEST(RunState, RoundTrip) {
  const ResumeState s = sample_state();
  const Result<ResumeState> back = parse_resume_state(resume_state_json(s), "x");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->steps_completed, 7);
  EXPECT_EQ(back->task_draws, 31u);
  EXPECT_EQ(back->next_group, 16u);
  EXPECT_EQ(back->next_request, 40u);
  EXPECT_EQ(back->prompts_skipped, 2);
  EXPECT_EQ(back->tokens_generated, 1234);
  EXPECT_EQ(back->tokens_trained, 987);
  ASSERT_EQ(back->step_reward_means.size(), 3u);
  EXPECT_EQ(back->step_reward_means[0], 0.25);
  EXPECT_TRUE(std::isnan(back->step_reward_means[1])) << "NaN travels as null";
  EXPECT_EQ(back->accuracy_before, 0.125);
  EXPECT_EQ(back->loop_seconds, 12.5);
  EXPECT_EQ(back->trainer_idle_seconds, 3.25);
  EXPECT_EQ(back->rollout_idle_seconds, s.rollout_idle_seconds);
  EXPECT_EQ(back->samples.dispatched, 64);
  EXPECT_EQ(back->samples.generated, 60);
  EXPECT_EQ(back->samples.trained, 56);
  EXPECT_EQ(back->samples.discarded, s.samples.discarded);
  EXPECT_EQ(back->samples.cancelled, 1);

  ResumeState none = s;
  none.accuracy_before.reset();
  EXPECT_FALSE(parse_resume_state(resume_state_json(none), "x")->accuracy_before.has_value());
}

TEST(RunState, BadTextNamesTheFileAndTheField) {
  EXPECT_THAT(parse_resume_state("null", "ck/trainer_state.json").status().message(),
              HasSubstr("ck/trainer_state.json: the orchestrator state is not a JSON object"));
  EXPECT_THAT(parse_resume_state("{\"format\": 2}", "f").status().message(), HasSubstr("f: orchestrator state has no `steps_completed`"));
  EXPECT_THAT(parse_resume_state("{\"format\": 1}", "f").status().message(), HasSubstr("format 1, this rlrun reads 2"));
  EXPECT_THAT(parse_resume_state("{\"format\": 9}", "f").status().message(), HasSubstr("format 9"));
  std::string text = resume_state_json(sample_state());
  text.replace(text.find("\"task_draws\":31"), 15, "\"task_draws\":\"a\"");
  EXPECT_THAT(parse_resume_state(text, "f").status().message(), HasSubstr("task_draws"));
  EXPECT_FALSE(parse_resume_state("{\"format\": 1, \"steps_completed\": ", "f").ok());
}

TEST(RunState, SamplesOfTheResumedPartAddUp) {
  SampleLedger::Summary before, now;
  before.generated = 10;
  before.trained = 8;
  before.discarded = {{"zero_advantage", 2}};
  now.generated = 5;
  now.trained = 4;
  now.discarded = {{"zero_advantage", 1}, {"too_long", 1}};
  now.in_flight = 3;
  const SampleLedger::Summary sum = add_samples(before, now);
  EXPECT_EQ(sum.generated, 15);
  EXPECT_EQ(sum.trained, 12);
  EXPECT_EQ(sum.discarded.at("zero_advantage"), 3);
  EXPECT_EQ(sum.discarded.at("too_long"), 1);
  EXPECT_EQ(sum.in_flight, 3) << "in flight is about the running process";
}

// Writes a checkpoint of `step` with only what find_resume_point reads, and (complete) its
// manifest.
void fake_checkpoint(const std::string& run, int64_t step, bool complete, const ResumeState& state) {
  const std::string dir = trainer::checkpoint_dir(checkpoint_root(run), step);
  fs::create_directories(dir);
  const std::string manifest = str("{\"format\": 2, \"step\": ", step, ", \"optimizer_step\": ", step,
                                   ", \"rng_state\": \"\", \"loader_state\": ", resume_state_json(state), "}");
  ASSERT_TRUE(write_file_atomic(dir + "/trainer_state.json", manifest).ok());
  if (complete) {
    Result<trainer::FileDigest> digest = trainer::digest_file(dir, "trainer_state.json");
    ASSERT_TRUE(digest.ok());
    ASSERT_TRUE(trainer::write_manifest(dir, {*digest}).ok());
  }
}

TEST(RunState, ResumesTheNewestCompleteCheckpoint) {
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run";
  EXPECT_THAT(find_resume_point(run).status().message(), HasSubstr("does not exist"));
  fs::create_directories(run);
  Result<ResumePoint> none = find_resume_point(run);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("no complete checkpoint under " + run + "/checkpoints"));

  ResumeState s = sample_state();
  s.steps_completed = 2;
  fake_checkpoint(run, 2, true, s);
  s.steps_completed = 4;
  fake_checkpoint(run, 4, true, s);
  s.steps_completed = 6;
  fake_checkpoint(run, 6, false, s);  // torn: no COMPLETE
  Result<ResumePoint> point = find_resume_point(run);
  ASSERT_TRUE(point.ok()) << point.status().message();
  EXPECT_EQ(point->dir, trainer::checkpoint_dir(checkpoint_root(run), 4));
  EXPECT_EQ(point->state.steps_completed, 4);

  s.steps_completed = 3;  // a state that does not belong to its checkpoint: not used
  fake_checkpoint(run, 8, true, s);
  point = find_resume_point(run);
  ASSERT_TRUE(point.ok()) << point.status().message();
  EXPECT_EQ(point->dir, trainer::checkpoint_dir(checkpoint_root(run), 4));
  ASSERT_EQ(point->skipped.size(), 1u);
  EXPECT_THAT(point->skipped[0].reason, HasSubstr("of step 3 but the checkpoint of step 8"));
}

TEST(RunState, ACorruptCheckpointIsSkippedSayingWhyAndSetAside) {
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run";
  ResumeState s = sample_state();
  for (int64_t step : {2, 4}) {
    s.steps_completed = step;
    fake_checkpoint(run, step, true, s);
  }
  const std::string newest = trainer::checkpoint_dir(checkpoint_root(run), 4);
  {
    std::fstream f(newest + "/trainer_state.json", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2);
    f.put('X');  // bit rot
  }
  Result<ResumePoint> point = find_resume_point(run);
  ASSERT_TRUE(point.ok()) << point.status().message();
  EXPECT_EQ(point->state.steps_completed, 2);
  ASSERT_EQ(point->skipped.size(), 1u);
  EXPECT_EQ(point->skipped[0].dir, newest);
  EXPECT_THAT(point->skipped[0].reason, HasSubstr(newest + "/trainer_state.json: checksum mismatch"));
  ASSERT_TRUE(set_aside_skipped(*point).ok());
  EXPECT_TRUE(fs::exists(newest + ".unusable/trainer_state.json")) << "kept to be looked at";
  EXPECT_EQ(trainer::complete_checkpoints(checkpoint_root(run)),
            std::vector<std::string>{trainer::checkpoint_dir(checkpoint_root(run), 2)});

  // None usable: the error lists each and says what to do.
  fs::resize_file(trainer::checkpoint_dir(checkpoint_root(run), 2) + "/trainer_state.json", 10);
  const Status none = find_resume_point(run).status();
  EXPECT_EQ(none.code(), StatusCode::kNotFound);
  EXPECT_THAT(none.message(), HasSubstr("no usable checkpoint under " + checkpoint_root(run)));
  EXPECT_THAT(none.message(), HasSubstr("step-000002/trainer_state.json"));
  EXPECT_THAT(none.message(), HasSubstr("without --resume"));
}

TEST(RunState, SamplesTheCheckpointDoesNotHoldCountAsCancelled) {
  SampleLedger::Summary at;
  at.dispatched = 40;  // 3 in flight at the checkpoint
  at.trained = 32;
  at.discarded = {{"zero_advantage", 4}};
  at.cancelled = 1;
  const SampleLedger::Summary unknown = samples_at_resume(at, std::nullopt);
  EXPECT_EQ(unknown.dispatched, 40);
  EXPECT_EQ(unknown.cancelled, 4);
  const SampleLedger::Summary killed = samples_at_resume(at, 56);  // 16 more dispatched after it
  EXPECT_EQ(killed.dispatched, 56);
  EXPECT_EQ(killed.cancelled, 20);
  EXPECT_EQ(killed.trained, 32) << "a step after the checkpoint is trained again, never counted twice";
  EXPECT_EQ(samples_at_resume(at, 30).dispatched, 40) << "an older count (a machine crash) never lowers it";

  // find_resume_point reads the run's count; a torn one is reported and the checkpoint's is used.
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run";
  ResumeState s = sample_state();  // 64 dispatched, 56 + 4 + 1 final: 3 in flight
  s.steps_completed = 2;
  fake_checkpoint(run, 2, true, s);
  {
    DispatchCount count;
    ASSERT_TRUE(count.open(dispatch_count_path(run), 70).ok());
    count.add(4);
  }
  Result<ResumePoint> point = find_resume_point(run);
  ASSERT_TRUE(point.ok()) << point.status().message();
  EXPECT_EQ(point->cancelled_at_resume, 74 - 61);
  EXPECT_EQ(point->state.samples.dispatched, 74);
  EXPECT_TRUE(point->dispatch_count_note.empty());
  std::ofstream(dispatch_count_path(run)) << "12\n";
  point = find_resume_point(run);
  ASSERT_TRUE(point.ok());
  EXPECT_THAT(point->dispatch_count_note, HasSubstr(dispatch_count_path(run) + " is not a count"));
  EXPECT_EQ(point->cancelled_at_resume, 3);
}

TEST(RunState, DispatchCountIsOneFixedLineRewrittenInPlace) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/dispatched_samples";
  EXPECT_FALSE(DispatchCount::read(path)->has_value()) << "no file: a run of an older rlrun";
  DispatchCount count;
  ASSERT_TRUE(count.open(path, 5).ok());
  for (int i = 0; i < 100; ++i) count.add(8);
  EXPECT_EQ(count.total(), 805);
  EXPECT_EQ(DispatchCount::read(path)->value_or(-1), 805) << "read while the writer is open, as after a SIGKILL";
  EXPECT_EQ(fs::file_size(path), 21u);
  std::ofstream(path) << "99999999999999999999\n";  // 20 digits: no count this rlrun writes
  EXPECT_FALSE(DispatchCount::read(path).ok());
  EXPECT_FALSE(count.open(tmp.path() + "/missing/dispatched_samples", 0).ok());
}

TEST(RunState, MetricsKeepOnlyTheCheckpointedSteps) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/metrics.jsonl";
  EXPECT_TRUE(truncate_metrics_jsonl(path, 3).ok()) << "no file yet: nothing to do";
  ASSERT_TRUE(write_file_atomic(path, "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4}\n{\"step\":5,\"x\n").ok());
  ASSERT_TRUE(truncate_metrics_jsonl(path, 2).ok());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"step\":1}\n{\"step\":2}\n");
}

// A run that passed log_files_max_mb has its older lines in metrics.jsonl.1 (run_recorder.cc):
// a checkpoint older than the rotation trims that file too, and empties the newer one.
TEST(RunState, MetricsTrimTheRotatedFileToo) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/metrics.jsonl";
  const auto read = [](const std::string& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  ASSERT_TRUE(write_file_atomic(path + ".1", "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n").ok());
  ASSERT_TRUE(write_file_atomic(path, "{\"step\":4}\n{\"step\":5}\n").ok());
  ASSERT_TRUE(truncate_metrics_jsonl(path, 4).ok());
  EXPECT_EQ(read(path + ".1"), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n") << "all before the checkpoint";
  EXPECT_EQ(read(path), "{\"step\":4}\n");
  ASSERT_TRUE(truncate_metrics_jsonl(path, 2).ok());
  EXPECT_EQ(read(path + ".1"), "{\"step\":1}\n{\"step\":2}\n") << "the steps the resumed run redoes go";
  EXPECT_EQ(read(path), "");
}

}  // namespace
}  // namespace rlrun::orchestrator
