#include "orchestrator/run/samples/evaluator.h"

#include "common/observe/log.h"
#include "common/observe/timeline.h"

namespace rlrun::orchestrator {

Evaluator::Evaluator(const Config& config, const Task& task, const PromptFormat& format,
                     const engine::Tokenizer& tokenizer, RewardFunction& reward, Dispatcher& dispatcher,
                     const std::vector<WorkerSlot>& workers, RunMetrics& metrics, LoopPort port, Episodes episodes,
                     LogSamples log_samples)
    : config_(config), task_(task), format_(format), tokenizer_(tokenizer), reward_(reward), dispatcher_(dispatcher),
      workers_(workers), metrics_(metrics), port_(std::move(port)), episodes_(std::move(episodes)),
      log_samples_(std::move(log_samples)) {}

void Evaluator::send(uint64_t version) {
  const std::vector<Problem>& problems = task_.eval_set();
  for (size_t p = 0; p < problems.size(); ++p) {
    if (episodes_.runs && episodes_.runs(problems[p])) {  // in its own session, sampled at eval_temperature
      episodes_.start(p);
      continue;
    }
    Result<std::vector<int32_t>> ids = format_.ids(problems[p]);
    const size_t n = ids.ok() ? ids->size() : 0;
    if (n == 0 || static_cast<int64_t>(n) + config_.max_tokens > config_.max_model_len) {
      rewards_[p] = 0.0;  // cannot be asked: counts as wrong
      continue;
    }
    dispatcher_.queue_eval(p, std::move(*ids), version);
  }
  dispatcher_.send_requeued();  // the first window now, the rest as answers come back
}

Result<std::optional<double>> Evaluator::evaluate(const std::string& when, int64_t step, uint64_t version) {
  const std::vector<Problem>& problems = task_.eval_set();
  if (problems.empty() || config_.task.eval_size == 0) return std::optional<double>();
  ScopedSpan span("eval", "orchestrator");
  rewards_.clear();
  send(version);
  running_ = true;
  const Status waited = port_.wait([&] { return rewards_.size() >= problems.size(); }, false);
  running_ = false;
  RLRUN_RETURN_IF_ERROR(waited);
  double correct = 0;
  for (const auto& [p, reward] : rewards_) correct += reward > 0.5 ? 1 : 0;
  const double accuracy = correct / static_cast<double>(problems.size());
  log::info(str("eval ", when, ": accuracy ", accuracy, " on ", problems.size(), " held-out problems (",
                config_.task.eval_temperature == 0 ? std::string("greedy") : str("temperature ", config_.task.eval_temperature),
                ")"));
  metrics_.eval_accuracy->Set(accuracy);
  last_accuracy_ = accuracy;
  std::vector<nlohmann::ordered_json> shown;
  for (const auto& [p, text] : texts_) {
    shown.push_back({{"prompt", problems[p].prompt}, {"completion", text}, {"answer", problems[p].answer},
                     {"reward", rewards_[p]}, {"advantage", nullptr}, {"correct", rewards_[p] > 0.5}});
  }
  texts_.clear();
  if (log_samples_ && !shown.empty()) log_samples_(step, shown);
  return std::optional<double>(accuracy);
}

void Evaluator::on_result(uint64_t problem, const GenerateResult& result) {
  const bool ok = result.finish_reason == FinishReason::kStop || result.finish_reason == FinishReason::kLength;
  const std::vector<int32_t> tokens(result.token_ids.begin(), result.token_ids.end());
  engine::DecodeOptions decode_options;
  decode_options.skip_special_tokens = true;
  Result<std::string> text = tokenizer_.decode(tokens, decode_options);
  rewards_[problem] = ok && text.ok() && reward_.correct(task_.eval_set()[problem], *text) ? 1.0 : 0.0;
  if (problem < kLoggedSamples) texts_[problem] = text.ok() ? *text : "";
}

void Evaluator::on_episode(uint64_t problem, bool correct) { rewards_[problem] = correct ? 1.0 : 0.0; }

}  // namespace rlrun::orchestrator
