// run/samples/prompt_admission.h - the prompt stream as groups enter the run (design "A sample's
// life", step 1): the next prompt that fits becomes a group in the Dispatcher, its samples
// counted dispatched (the ledger, and on disk for a resume after a SIGKILL: dispatch_count.h).
//
// Rules:
//  - A prompt fits when it has tokens, at most max_prompt_tokens of them, and room for max_tokens
//    within max_model_len; one that does not is skipped and counted (a warning at the first).
//    A row the environment runs (`runs`) is not measured: its episodes make their own prompts.
//  - After kMaxPromptsSkippedInARow prompts skipped in a row no prompt is expected to fit: no
//    group is admitted and stop_reason() says why and what to change; so when the dataset cannot
//    be read any more.
//  - One turn tries at most kMaxPromptTries prompts.
//  - The stream's position (consumed()) is what a checkpoint records and a resume skips again.
// Nothing here sends or waits. Threads: the orchestrator's loop (the stream prefetches on its own).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/config/config.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/data/prompt_source.h"
#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/run/samples/dispatch_count.h"
#include "orchestrator/run/samples/dispatcher.h"

namespace rlrun::orchestrator {

class PromptAdmission {
 public:
  static constexpr int kMaxPromptTries = 100;  // consecutive too-long prompts before giving up a turn
  static constexpr int64_t kMaxPromptsSkippedInARow = 1000;
  struct Stats {
    int64_t prompts_skipped = 0;  // prompts longer than max_prompt_tokens / max_model_len
  };
  struct Admitted {
    uint64_t group = 0;
    bool episodes = false;  // the environment runs its samples (start them: run/samples/episode_runner.h)
  };

  // Everything passed must outlive the admission. `runs`: whether the environment runs a row.
  PromptAdmission(const Config& config, Task& task, const PromptFormat& format, Dispatcher& dispatcher,
                  SampleLedger& ledger, std::function<bool(const Problem&)> runs);

  // The next prompt that fits, admitted at weight version `version`; nullopt when none came.
  std::optional<Admitted> admit(uint64_t version);
  // A prompt for the format warm-start, whatever its length (counted in the stream's position).
  Prompt next_unchecked() { return prompts_.next(); }
  const std::string& stop_reason() const { return stop_reason_; }

  // Opens the count of dispatched samples on disk at `path`, from `total` (a resumed run's).
  Status open_count(const std::string& path, int64_t total) { return dispatch_count_.open(path, total); }
  uint64_t consumed() const { return prompts_.consumed(); }
  // A resumed run: the stream advanced past what the saved run drew, and the skips it counted.
  void resume_from(uint64_t draws, int64_t prompts_skipped);
  const Stats& stats() const { return stats_; }

 private:
  void admitted(uint64_t group);

  const Config& config_;
  const PromptFormat& format_;
  Dispatcher& dispatcher_;
  SampleLedger& ledger_;
  std::function<bool(const Problem&)> runs_;
  PromptSource prompts_;  // the only caller of task.next_train()
  DispatchCount dispatch_count_;
  int64_t skipped_in_a_row_ = 0, longest_skipped_ = 0;
  std::string stop_reason_;
  Stats stats_;
};

}  // namespace rlrun::orchestrator
