// warm_start.cc - the format warm-start (format_warm_start_steps).
//
// A model initialised at random writes random tokens: it never ends an answer, never earns a
// reward, and RL has nothing to reinforce. Before version 0 the trainer therefore learns the SHAPE
// of an answer (its length and alphabet, then end of text) from supervised completions whose
// content is random (Task::format_example never reads the answer's characters). That teaches
// nothing about which answer is right: held-out accuracy after it stays at chance and is what the
// summary reports as accuracy_before. Whatever accuracy the run gains comes from the RL steps.
//
// Every warm-start batch is kept (run/training/step_replay.h): a trainer group restarted before the first
// checkpoint trains them again to rebuild version 0, and a warm-start cut by a trainer failure goes
// on after the batches it had.
#include <random>

#include "common/observe/log.h"
#include "common/observe/timeline.h"
#include "orchestrator/data/batcher.h"
#include "orchestrator/run/orchestrator.h"

namespace rlrun::orchestrator {

Status Orchestrator::format_warm_start() {
  const int64_t steps = config_.format_warm_start_steps;
  if (steps == 0) return Status();
  if (stop_ids_.empty())
    return invalid_argument("format_warm_start_steps: the tokenizer has no end-of-text token to end an answer with");
  ScopedSpan span("format_warm_start", "orchestrator");
  std::mt19937_64 rng(static_cast<uint64_t>(config_.seed) * 7919u + 17u);
  const int64_t per_step = config_.prompts_batch_size_for_trainer * config_.group_size;
  const PackOptions pack = pack_options(config_);
  const int64_t done = static_cast<int64_t>(replay_.warm_start().size());  // trained again by a restart
  if (done == 0)
    log::info(str("format warm-start: ", steps, " supervised steps on answers of the right shape and random content"));
  for (int64_t step = done + 1; step <= steps; ++step) {
    std::vector<std::vector<int32_t>> prompts, completions;
    for (int64_t i = 0; i < per_step; ++i) {
      const Prompt prompt = admission_.next_unchecked();  // counted: a resumed run skips these too
      const Problem& problem = prompt.problem;
      std::optional<std::string> text = task_.format_example(problem, rng);
      if (!text) return invalid_argument(str("format_warm_start_steps: task ", task_.name(), " has no answer format"));
      prompts.push_back(prompt.ids);
      completions.push_back(tokenizer_.encode(*text));
      completions.back().push_back(stop_ids_.front());
    }
    std::vector<std::vector<float>> logprobs(completions.size());
    std::vector<TrainSequence> sequences;
    for (size_t i = 0; i < completions.size(); ++i) {
      logprobs[i].assign(completions[i].size(), 0.0f);  // unused: the trainer's own are the reference
      sequences.push_back(TrainSequence{prompts[i], completions[i], logprobs[i], 1.0f, {}});
    }
    BatchBuild build = build_train_batches(sequences, pack, 0);
    if (build.per_rank.empty())
      return invalid_argument(str("format_warm_start_steps: no prompt and answer fits seq_len = ", config_.seq_len));
    for (TrainBatch& b : build.per_rank) b.supervised = true;
    replay_.add_warm_start(build);
    RLRUN_RETURN_IF_ERROR(trainers_.train(build, str("format warm-start step ", step), false));
    // The loss is -1 by construction (ratio 1, advantage 1); the entropy shows the format being
    // learned: from ln(vocabulary) down towards ln(the answer alphabet).
    const std::map<std::string, double>& metrics = trainers_.rank0_metrics();
    const auto entropy = metrics.find("entropy");
    if (step == 1 || step == steps || step % 50 == 0)
      log::info(str("format warm-start step ", step, "/", steps, ": entropy of the answer tokens ",
                    entropy != metrics.end() ? entropy->second : 0.0, " nats"));
  }
  return Status();
}

}  // namespace rlrun::orchestrator
