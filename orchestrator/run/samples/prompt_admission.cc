#include "orchestrator/run/samples/prompt_admission.h"

#include <algorithm>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

PromptAdmission::PromptAdmission(const Config& config, Task& task, const PromptFormat& format, Dispatcher& dispatcher,
                                 SampleLedger& ledger, std::function<bool(const Problem&)> runs)
    : config_(config), format_(format), dispatcher_(dispatcher), ledger_(ledger), runs_(std::move(runs)),
      prompts_(task, format, config.enable_prompt_prefetch ? config.prompt_prefetch_buffer_size : 0) {}

void PromptAdmission::resume_from(uint64_t draws, int64_t prompts_skipped) {
  prompts_.skip(draws);  // the stream from the same seed, advanced past what the saved run drew
  stats_.prompts_skipped = prompts_skipped;
}

void PromptAdmission::admitted(uint64_t group) {
  for (uint32_t i = 0; i < dispatcher_.group_size(); ++i) ledger_.dispatched(dispatcher_.sample_id(group, i));
  dispatch_count_.add(dispatcher_.group_size());
  skipped_in_a_row_ = 0;
}

std::optional<PromptAdmission::Admitted> PromptAdmission::admit(uint64_t version) {
  for (int tries = 0; tries < kMaxPromptTries; ++tries) {
    Prompt prompt;
    try {
      prompt = prompts_.next();
    } catch (const std::exception& e) {  // the dataset changed or became unreadable under the run
      stop_reason_ = str("cannot draw the next training prompt: ", e.what());
      return std::nullopt;
    }
    if (runs_(prompt.problem)) {  // an environment runs it: no length to check here
      const uint64_t id = dispatcher_.admit_episodes(std::move(prompt.problem), version);
      admitted(id);
      return Admitted{id, true};
    }
    const int64_t n = static_cast<int64_t>(prompt.ids.size());
    if (n == 0 || n > config_.max_prompt_tokens || n + config_.max_tokens > config_.max_model_len) {
      longest_skipped_ = std::max(longest_skipped_, n);
      if (++stats_.prompts_skipped == 1)
        log::warn(str("skipping a prompt of ", n, " tokens (max_prompt_tokens ", config_.max_prompt_tokens,
                      ", max_model_len ", config_.max_model_len, " with max_tokens ", config_.max_tokens,
                      "); skipped prompts are counted in summary.json"));
      if (++skipped_in_a_row_ >= kMaxPromptsSkippedInARow) {
        stop_reason_ =
            str(skipped_in_a_row_, " prompts in a row were skipped (the longest has ", longest_skipped_,
                " tokens as ", format_.description(), " gives it; max_prompt_tokens = ", config_.max_prompt_tokens,
                ", max_model_len = ", config_.max_model_len, " with max_tokens = ", config_.max_tokens,
                "), so no batch can form: raise max_prompt_tokens and max_model_len",
                format_.is_chat() ? ", or set task.chat_template: none for raw prompts" : "");
        return std::nullopt;
      }
      continue;
    }
    const uint64_t id = dispatcher_.admit(std::move(prompt.problem), std::move(prompt.ids), version);
    admitted(id);
    return Admitted{id, false};
  }
  return std::nullopt;
}

}  // namespace rlrun::orchestrator
