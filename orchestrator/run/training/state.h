// run/training/state.h - what the orchestrator needs to resume a run from a trainer checkpoint.
//
// Every checkpoint of a run (<run_dir>/checkpoints/step-XXXXXX/, trainer/checkpoint.h) carries
// the orchestrator's ResumeState as the manifest's loader_state: the orchestrator sends it with
// SaveCheckpoint and trainer rank 0 writes it into trainer_state.json before COMPLETE, so the
// weights, the optimizer and the data position are saved together or not at all.
//
// Data order: the prompt stream is reproduced by drawing `task_draws` problems from a task built
// from the same seed and throwing them away; group and request ids continue where they stopped
// (sampling seeds derive from request ids). At max_async_rollout 0 nothing is in flight when a
// step completes, so the resumed run trains exactly the prompts an uninterrupted run would have
// (and, generation being deterministic, the same completions). At max_async_rollout > 0 the groups
// in flight or waiting at the checkpoint are not redrawn: the resumed run goes on with the next
// prompts of the stream, and the generated samples of those groups count as discarded
// (unused_at_resume) in the resumed run's summary.
//
// Samples: the resumed run's summary holds the checkpoint's counts, and every other sample the
// run had dispatched (in flight at the checkpoint, or dispatched after it by a process that was
// stopped or killed, run/samples/dispatch_count.h) counts as cancelled: the steps after the checkpoint
// are trained again, so none of their samples counts as trained twice, and none goes missing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "orchestrator/data/sample_ledger.h"

namespace rlrun::orchestrator {

struct ResumeState {
  int64_t steps_completed = 0;     // = the checkpoint's step and the weight version
  uint64_t task_draws = 0;         // Task::next_train() calls made so far
  uint64_t next_group = 0;         // next group id
  uint64_t next_request = 1;       // next request id
  int64_t prompts_skipped = 0;
  int64_t tokens_generated = 0, tokens_trained = 0;
  std::vector<double> step_reward_means;
  std::optional<double> accuracy_before;
  double loop_seconds = 0, trainer_idle_seconds = 0;
  std::map<std::string, double> rollout_idle_seconds;  // by worker name
  // Final states (generated, trained, discarded by reason, cancelled) and `dispatched`, over the
  // whole run; in-flight and lost are about the running process and start from zero.
  SampleLedger::Summary samples;
};

std::string resume_state_json(const ResumeState& state);
// Untrusted text (a file): errors name `where` and the field.
Result<ResumeState> parse_resume_state(const std::string& json_text, const std::string& where);

// The ledger counts of a run made of a resumed part after `before`.
SampleLedger::Summary add_samples(const SampleLedger::Summary& before, const SampleLedger::Summary& now);

// "<run_dir>/checkpoints": where the trainer ranks write and `rlrun --resume` looks.
std::string checkpoint_root(const std::string& run_dir);

// The samples a resumed run starts from: the checkpoint's, with every sample the run dispatched
// (`dispatched_by_run`, from <run_dir>/dispatched_samples; nullopt when unknown) that the
// checkpoint does not hold in a final state counted as cancelled.
SampleLedger::Summary samples_at_resume(const SampleLedger::Summary& at_checkpoint,
                                        std::optional<int64_t> dispatched_by_run);

// Where `rlrun CONFIG --resume` continues the run in `run_dir`: the newest checkpoint whose files
// all match its manifest (trainer::verify_checkpoint) and whose state parses. Newer ones that do
// not are in `skipped` with the reason. `state.samples` is samples_at_resume's. not_found, saying
// what to do, when no checkpoint is usable.
struct ResumePoint {
  struct Skipped {
    std::string dir, reason;
  };
  std::string dir;
  ResumeState state;
  std::vector<Skipped> skipped;
  int64_t cancelled_at_resume = 0;  // samples samples_at_resume counted as cancelled
  std::string dispatch_count_note;  // why the run's dispatched count could not be read, if so
};
Result<ResumePoint> find_resume_point(const std::string& run_dir);

// Renames each skipped checkpoint to <dir>.unusable, so that it is never picked nor counted by
// checkpoint_keep_last again, and is kept to be looked at. Errors name the folder.
Status set_aside_skipped(const ResumePoint& point);

// Keeps only the metrics.jsonl lines of steps <= `steps` (a resumed run redoes the later ones), in
// `path` and in the older part a rotation left in <path>.1 (log_files_max_mb), rewriting each file
// atomically. A missing file is fine.
Status truncate_metrics_jsonl(const std::string& path, int64_t steps);

}  // namespace rlrun::orchestrator
