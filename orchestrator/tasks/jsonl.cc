// A dataset task: one JSON object per line, with a prompt string (task.prompt_field) or a chat
// (task.messages_field: [{"role": "...", "content": "..."}, ...]), a reference answer
// (task.answer_field: a string or a number), and any other fields, which become the problem's
// metadata for the reward.
//
// Untrusted file: every row is checked when the task is made, and an error names the file, the
// line and the field. The training file streams: the task keeps each training row's byte offset
// (8 bytes a row) and reads a row when it is drawn, so a dataset of millions of rows costs the
// orchestrator tens of megabytes and the rollout workers nothing (they never read it). The
// evaluation rows are few and kept.
#include <deque>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_set>

#include "common/fnv1a.h"
#include "common/observe/log.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {
namespace {

using json = nlohmann::ordered_json;

// The FNV-1a 64 hash of what makes two rows the same prompt (its text, or its chat).
uint64_t prompt_key(const Problem& p) { return fnv1a64(p.messages_json.empty() ? p.prompt : p.messages_json); }

class RowReader {
 public:
  RowReader(const TaskSpec& spec, std::string path) : spec_(spec), path_(std::move(path)) {}

  // The problem of one line, or an error naming path:line and the field.
  Result<Problem> parse(std::string_view line, int64_t line_no) const {
    const std::string where = str(path_, ":", line_no, ": ");
    json row = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_discarded()) return invalid_argument(where + "not valid JSON");
    if (!row.is_object())
      return invalid_argument(str(where, "expected a JSON object with \"", spec_.prompt_field, "\" (or \"",
                                  spec_.messages_field, "\") and \"", spec_.answer_field, "\""));
    Problem p;
    const bool has_prompt = row.contains(spec_.prompt_field), has_messages = row.contains(spec_.messages_field);
    if (has_prompt && has_messages)
      return invalid_argument(str(where, "has both \"", spec_.prompt_field, "\" (task.prompt_field) and \"",
                                  spec_.messages_field, "\" (task.messages_field); keep one"));
    if (has_messages) {
      RLRUN_RETURN_IF_ERROR(read_messages(row[spec_.messages_field], where, p));
    } else if (has_prompt && row[spec_.prompt_field].is_string()) {
      p.prompt = row[spec_.prompt_field].get<std::string>();
    } else {
      return invalid_argument(str(where, "missing string field \"", spec_.prompt_field, "\" (task.prompt_field)",
                                  " or chat field \"", spec_.messages_field, "\" (task.messages_field)"));
    }
    const auto answer = row.find(spec_.answer_field);
    if (answer == row.end() || !(answer->is_string() || answer->is_number()))
      return invalid_argument(str(where, "missing string field \"", spec_.answer_field, "\" (task.answer_field)"));
    p.answer = answer->is_string() ? answer->get<std::string>() : answer->dump();
    row.erase(spec_.prompt_field);
    row.erase(spec_.messages_field);
    row.erase(spec_.answer_field);
    p.metadata_json = row.dump();
    return p;
  }

  // Every row of the file, each given to `row(problem, offset, line_no)`; blank lines are skipped.
  template <typename F>
  Status for_each(F&& row) const {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return not_found(str(path_, ": cannot open the dataset (task.dataset / task.eval_dataset)"));
    std::string line;
    int64_t line_no = 0, rows = 0;
    for (uint64_t offset = 0; std::getline(in, line); offset += line.size() + 1) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      RLRUN_ASSIGN_OR_RETURN(Problem p, parse(line, line_no));
      RLRUN_RETURN_IF_ERROR(row(std::move(p), offset, line_no));
      ++rows;
    }
    if (in.bad()) return io_error(str(path_, ": read error after line ", line_no));
    if (rows == 0) return invalid_argument(str(path_, ": the dataset has no rows"));
    return Status();
  }

  const std::string& path() const { return path_; }

 private:
  Status read_messages(const json& messages, const std::string& where, Problem& p) const {
    const std::string field = str("\"", spec_.messages_field, "\" (task.messages_field)");
    if (!messages.is_array() || messages.empty())
      return invalid_argument(str(where, field, " must be a non-empty list of {\"role\", \"content\"} objects"));
    for (size_t i = 0; i < messages.size(); ++i) {
      const json& m = messages[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        return invalid_argument(str(where, field, " message ", i, " needs string \"role\" and \"content\""));
    }
    p.prompt = messages.back()["content"].get<std::string>();
    p.messages_json = messages.dump();
    return Status();
  }

  const TaskSpec& spec_;
  std::string path_;
};

class JsonlTask : public Task {
 public:
  JsonlTask(const TaskSpec& spec, std::vector<uint64_t> train_offsets, std::vector<Problem> eval, bool chat_rows)
      : spec_(spec),
        reader_(spec_, spec.dataset),
        offsets_(std::move(train_offsets)),
        eval_(std::move(eval)),
        chat_rows_(chat_rows),
        rng_(spec.seed),
        in_(spec.dataset, std::ios::binary) {
    order_.resize(offsets_.size());
  }
  std::string name() const override { return "jsonl"; }
  const std::vector<Problem>& eval_set() const override { return eval_; }
  bool has_chat_rows() const override { return chat_rows_; }

  // Epochs in a fresh seeded shuffle each time.
  Problem next_train() override {
    const uint64_t offset = offsets_[order_[advance()]];
    std::string line;
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    if (!std::getline(in_, line))
      throw std::runtime_error(str(spec_.dataset, ": cannot read the row at byte ", offset, " (was the file changed?)"));
    Result<Problem> p = reader_.parse(line, 0);
    if (!p.ok())
      throw std::runtime_error(str(spec_.dataset, ": the row at byte ", offset,
                                   " changed since the run started: ", p.status().message()));
    return std::move(*p);
  }
  void skip_train(uint64_t n) override {
    for (uint64_t i = 0; i < n; ++i) (void)advance();
  }
  double reward(const Problem& p, std::string_view completion) const override {
    return extract_answer(completion) == extract_answer(p.answer) ? 1.0 : 0.0;
  }

 private:
  // The position in order_ of the next row; reshuffles at the start of each epoch.
  size_t advance() {
    if (next_ == 0) {
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
      std::shuffle(order_.begin(), order_.end(), rng_);
    }
    const size_t at = next_;
    next_ = (next_ + 1) % order_.size();
    return at;
  }

  TaskSpec spec_;
  RowReader reader_;
  std::vector<uint64_t> offsets_;
  std::vector<Problem> eval_;
  bool chat_rows_;
  std::vector<uint32_t> order_;
  size_t next_ = 0;
  std::mt19937_64 rng_;
  std::ifstream in_;
};

}  // namespace

Result<std::unique_ptr<Task>> make_jsonl_task(const TaskSpec& spec) {
  if (spec.dataset.empty()) return invalid_argument("task.name is jsonl but task.dataset is empty: set it to a .jsonl file");
  const size_t eval_size = static_cast<size_t>(std::max(0, spec.eval_size));
  bool chat_rows = false;
  std::vector<Problem> eval;
  if (!spec.eval_dataset.empty()) {
    RowReader eval_reader(spec, spec.eval_dataset);
    RLRUN_RETURN_IF_ERROR(eval_reader.for_each([&](Problem p, uint64_t, int64_t) {
      chat_rows = chat_rows || !p.messages_json.empty();
      if (eval.size() < eval_size) eval.push_back(std::move(p));
      return Status();
    }));
  }
  // One pass over the training file: every row checked, its offset kept.
  struct Row {
    uint64_t offset, key;
  };
  std::vector<Row> rows;
  std::deque<Problem> tail;  // without an eval_dataset: the last eval_size rows, held out
  RowReader reader(spec, spec.dataset);
  RLRUN_RETURN_IF_ERROR(reader.for_each([&](Problem p, uint64_t offset, int64_t) {
    chat_rows = chat_rows || !p.messages_json.empty();
    rows.push_back({offset, prompt_key(p)});
    if (spec.eval_dataset.empty() && eval_size > 0) {
      tail.push_back(std::move(p));
      if (tail.size() > eval_size) tail.pop_front();
    }
    return Status();
  }));
  if (spec.eval_dataset.empty()) {
    // hold out the last eval_size rows, leaving at least one for training
    const size_t n = std::min(eval_size, rows.size() - 1);
    eval.assign(tail.end() - static_cast<std::ptrdiff_t>(n), tail.end());
    rows.resize(rows.size() - n);
  }
  // a prompt in the evaluation set is never trained on
  std::unordered_set<uint64_t> held_out;
  for (const Problem& p : eval) held_out.insert(prompt_key(p));
  std::vector<uint64_t> offsets;
  offsets.reserve(rows.size());
  for (const Row& r : rows)
    if (!held_out.count(r.key)) offsets.push_back(r.offset);
  if (offsets.empty()) return invalid_argument(str(spec.dataset, ": every row is also in the evaluation set"));
  if (offsets.size() > std::numeric_limits<uint32_t>::max())
    return invalid_argument(str(spec.dataset, ": more than 4294967295 training rows"));
  return std::unique_ptr<Task>(new JsonlTask(spec, std::move(offsets), std::move(eval), chat_rows));
}

}  // namespace rlrun::orchestrator
