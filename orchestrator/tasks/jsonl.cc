// A dataset task: one JSON object per line, {"prompt": "...", "answer": "...", ...} (the field
// names are task.prompt_field and task.answer_field); other keys are metadata and ignored.
// Untrusted file: every error names the file, the line and the field.
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "common/observe/log.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {
namespace {

Result<std::vector<Problem>> read_jsonl(const std::string& path, const TaskSpec& spec) {
  std::ifstream in(path);
  if (!in) return not_found(str(path, ": cannot open the dataset (task.dataset / task.eval_dataset)"));
  std::vector<Problem> problems;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str(path, ":", line_no, ": ");
    nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) return invalid_argument(where + "not valid JSON");
    if (!row.is_object())
      return invalid_argument(str(where, "expected a JSON object with \"", spec.prompt_field, "\" and \"",
                                  spec.answer_field, "\""));
    for (const auto& [key, config_key] :
         {std::pair{spec.prompt_field, "task.prompt_field"}, std::pair{spec.answer_field, "task.answer_field"}}) {
      if (!row.contains(key) || !row[key].is_string()) {
        return invalid_argument(str(where, "missing string field \"", key, "\" (", config_key, ")"));
      }
    }
    problems.push_back({row[spec.prompt_field].get<std::string>(), row[spec.answer_field].get<std::string>(), {}, 0});
  }
  if (problems.empty()) return invalid_argument(str(path, ": the dataset has no rows"));
  return problems;
}

class JsonlTask : public Task {
 public:
  JsonlTask(std::vector<Problem> train, std::vector<Problem> eval, uint64_t seed)
      : train_(std::move(train)), eval_(std::move(eval)), rng_(seed) {
    order_.resize(train_.size());
    for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  }
  std::string name() const override { return "jsonl"; }
  const std::vector<Problem>& eval_set() const override { return eval_; }
  // Epochs in a fresh seeded shuffle each time.
  Problem next_train() override {
    if (next_ == 0) std::shuffle(order_.begin(), order_.end(), rng_);
    Problem p = train_[order_[next_]];
    next_ = (next_ + 1) % order_.size();
    return p;
  }
  double reward(const Problem& p, std::string_view completion) const override {
    return extract_answer(completion) == extract_answer(p.answer) ? 1.0 : 0.0;
  }

 private:
  std::vector<Problem> train_, eval_;
  std::vector<size_t> order_;
  size_t next_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace

Result<std::unique_ptr<Task>> make_jsonl_task(const TaskSpec& spec) {
  if (spec.dataset.empty()) return invalid_argument("task.name is jsonl but task.dataset is empty: set it to a .jsonl file");
  RLRUN_ASSIGN_OR_RETURN(std::vector<Problem> train, read_jsonl(spec.dataset, spec));
  std::vector<Problem> eval;
  if (!spec.eval_dataset.empty()) {
    RLRUN_ASSIGN_OR_RETURN(eval, read_jsonl(spec.eval_dataset, spec));
  } else {
    // hold out the last eval_size rows, leaving at least one for training
    size_t n = std::min(static_cast<size_t>(std::max(0, spec.eval_size)), train.size() - 1);
    eval.assign(train.end() - static_cast<std::ptrdiff_t>(n), train.end());
    train.resize(train.size() - n);
  }
  // a prompt in the evaluation set is never trained on
  std::unordered_set<std::string> held_out;
  for (const Problem& p : eval) held_out.insert(p.prompt);
  std::erase_if(train, [&](const Problem& p) { return held_out.count(p.prompt) > 0; });
  if (train.empty()) return invalid_argument(str(spec.dataset, ": every row is also in the evaluation set"));
  return std::unique_ptr<Task>(new JsonlTask(std::move(train), std::move(eval), spec.seed));
}

}  // namespace rlrun::orchestrator
