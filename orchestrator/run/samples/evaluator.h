// run/samples/evaluator.h - held-out accuracy (task.eval_size problems): before training, every
// task.eval_every steps, after training, and when a run stops early.
//
// Rules:
//  - Every problem is asked once, greedy or at task.eval_temperature, of weights no older than the
//    version given: one request to a ready rollout worker (round-robin), or an episode when the
//    environment runs its row (run/samples/episodes.cc). A prompt that cannot be asked (empty, or
//    too long for max_model_len with max_tokens) counts as wrong. With no worker ready the
//    requests wait in the Dispatcher until one is; a dead worker's are sent again (Dispatcher).
//  - An answer is right when task.reward's correct() says so of its decoded text (an episode: the
//    environment's "correct", else reward >= 1); a failed generation is wrong.
//  - evaluate() sends, then waits (LoopPort::wait, no dispatch) for every answer; running() holds
//    meanwhile (a trainer failure waits for the end: an evaluation needs no trainer). Then the
//    accuracy is logged and set on the eval_accuracy gauge, and the first kLoggedSamples problems'
//    answers go to samples.jsonl (`log_samples`).
// Statistics: the accuracy before and after training, and when the "after" one was not measured at
// the end of every step, when it was or why it is missing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/reward/reward_function.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/samples/dispatcher.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

class Evaluator {
 public:
  static constexpr size_t kLoggedSamples = 4;
  struct Stats {
    std::optional<double> accuracy_before, accuracy_after;
    // When accuracy_after was not taken at the end of all steps: when it was, or why it is missing.
    std::string accuracy_after_note;
  };
  // An episode for evaluation problem `p` (the environment runs its row), and whether it does.
  struct Episodes {
    std::function<bool(const Problem&)> runs;
    std::function<void(uint64_t problem)> start;
  };
  // Appends evaluation answers to samples.jsonl as of `step` (the steps completed).
  using LogSamples = std::function<void(int64_t step, const std::vector<nlohmann::ordered_json>& samples)>;

  // Everything passed must outlive the Evaluator; it reads `workers`, never changes them.
  Evaluator(const Config& config, const Task& task, const PromptFormat& format, const engine::Tokenizer& tokenizer,
            RewardFunction& reward, Dispatcher& dispatcher, const std::vector<WorkerSlot>& workers,
            RunMetrics& metrics, LoopPort port, Episodes episodes, LogSamples log_samples);

  // Asks every problem of weights >= `version` and waits for the answers; nullopt without an
  // evaluation set. `when` names it in the log ("before training", "at step 10"); `step`: the
  // steps completed. An error is the loop's (an interrupt, a failure).
  Result<std::optional<double>> evaluate(const std::string& when, int64_t step, uint64_t version);
  // The answers: a request's result (routed by the Dispatcher), an episode's end.
  void on_result(uint64_t problem, const GenerateResult& result);
  void on_episode(uint64_t problem, bool correct);
  bool running() const { return running_; }
  const std::optional<double>& last_accuracy() const { return last_accuracy_; }

  // The summary's figures: before training (or a resumed run's, from its checkpoint), after it,
  // and the note when the run stopped before its last step.
  void set_before(std::optional<double> accuracy) { stats_.accuracy_before = accuracy; }
  void set_after(std::optional<double> accuracy, std::string note = "") {
    stats_.accuracy_after = accuracy;
    stats_.accuracy_after_note = std::move(note);
  }
  const Stats& stats() const { return stats_; }

 private:
  void send(uint64_t version);

  const Config& config_;
  const Task& task_;
  const PromptFormat& format_;
  const engine::Tokenizer& tokenizer_;
  RewardFunction& reward_;
  Dispatcher& dispatcher_;
  const std::vector<WorkerSlot>& workers_;
  RunMetrics& metrics_;
  LoopPort port_;
  Episodes episodes_;
  LogSamples log_samples_;
  bool running_ = false;
  std::map<uint64_t, double> rewards_;       // eval problem index -> 1 (right) or 0
  std::map<uint64_t, std::string> texts_;    // the first kLoggedSamples problems' answers
  std::optional<double> last_accuracy_;      // for the progress line
  Stats stats_;
};

}  // namespace rlrun::orchestrator
