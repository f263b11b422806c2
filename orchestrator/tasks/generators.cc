// The built-in verifiable tasks: generated from a seed, with a held-out evaluation set drawn
// from its own stream and excluded from training by prompt.
#include <algorithm>
#include <unordered_set>

#include "common/observe/log.h"
#include "orchestrator/tasks/expression.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

std::string_view extract_answer(std::string_view completion) {
  size_t end = completion.find('\n');
  std::string_view line = completion.substr(0, end);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

namespace {

int64_t random_number(std::mt19937_64& rng, int digits_lo, int digits_hi) {
  int digits = std::uniform_int_distribution<int>(digits_lo, digits_hi)(rng);
  int64_t lo = digits == 1 ? 0 : 1;
  for (int i = 1; i < digits; ++i) lo *= 10;
  return std::uniform_int_distribution<int64_t>(lo, lo == 0 ? 9 : lo * 10 - 1)(rng);
}

std::string random_letters(std::mt19937_64& rng, size_t n) {
  std::string s(n, 'a');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

// A generator task: make(rng) draws one problem; score decides correctness.
class GeneratedTask : public Task {
 public:
  GeneratedTask(const TaskSpec& spec) : spec_(spec), train_rng_(spec.seed * 2 + 1) {}

  const std::vector<Problem>& eval_set() const override { return eval_; }
  // Draws the held-out set; called once after construction (make() is virtual).
  void build_eval_set() {
    std::mt19937_64 rng(spec_.seed * 2);
    for (int tries = 0; static_cast<int>(eval_.size()) < spec_.eval_size && tries < spec_.eval_size * 50; ++tries) {
      Problem p = make(rng);
      if (eval_prompts_.insert(p.prompt).second) eval_.push_back(std::move(p));
    }
  }
  Problem next_train() override {
    while (true) {  // rejection keeps held-out prompts out of training
      Problem p = make(train_rng_);
      if (!eval_prompts_.count(p.prompt)) return p;
    }
  }

 protected:
  virtual Problem make(std::mt19937_64& rng) const = 0;
  TaskSpec spec_;

 private:
  std::mt19937_64 train_rng_;
  std::vector<Problem> eval_;
  std::unordered_set<std::string> eval_prompts_;
};

template <class T>
Result<std::unique_ptr<Task>> finish(std::unique_ptr<T> task) {
  task->build_eval_set();
  return std::unique_ptr<Task>(std::move(task));
}

class ArithmeticTask : public GeneratedTask {
 public:
  using GeneratedTask::GeneratedTask;
  // task.question_format with its placeholders filled in.
  std::string question(int64_t a, char op, int64_t b) const {
    const std::pair<std::string_view, std::string> fields[] = {
        {"{a}", std::to_string(a)},
        {"{b}", std::to_string(b)},
        {"{op}", std::string(1, op)},
        {"{op_word}", op == '+' ? "plus" : op == '-' ? "minus" : "times"}};
    std::string out;
    const std::string& f = spec_.question_format;
    for (size_t i = 0; i < f.size();) {
      bool replaced = false;
      for (const auto& [name, value] : fields) {
        if (f.compare(i, name.size(), name) == 0) {
          out += value;
          i += name.size();
          replaced = true;
          break;
        }
      }
      if (!replaced) out += f[i++];
    }
    return out;
  }
  std::string name() const override { return "arithmetic"; }
  double reward(const Problem& p, std::string_view completion) const override {
    return extract_answer(completion) == p.answer ? 1.0 : 0.0;
  }
  std::optional<std::string> format_example(const Problem& p, std::mt19937_64& rng) const override {
    const bool negative = p.answer.front() == '-';
    const int digits = static_cast<int>(p.answer.size()) - (negative ? 1 : 0);
    std::string n = std::to_string(random_number(rng, digits, digits));
    if (negative) n.insert(n.begin(), '-');
    return n;
  }

 protected:
  Problem make(std::mt19937_64& rng) const override {
    int64_t a = random_number(rng, spec_.min_digits, spec_.max_digits);
    int64_t b = random_number(rng, spec_.min_digits, spec_.max_digits);
    const char op = spec_.operations[rng() % spec_.operations.size()];
    if (op == '-' && spec_.subtraction != "any" && (spec_.subtraction == "negative") != (a < b)) std::swap(a, b);
    const int64_t answer = op == '+' ? a + b : op == '-' ? a - b : a * b;
    Problem p;
    p.prompt = question(a, op, b);
    p.answer = std::to_string(answer);
    return p;
  }
};

class StringTask : public GeneratedTask {
 public:
  StringTask(const TaskSpec& spec, bool sort) : GeneratedTask(spec), sort_(sort) {}
  std::string name() const override { return sort_ ? "sort" : "reverse"; }
  double reward(const Problem& p, std::string_view completion) const override {
    const std::string_view answer = extract_answer(completion);
    if (!spec_.partial_credit) return answer == p.answer ? 1.0 : 0.0;
    // Characters in the right place over the longer length: extra or missing ones count wrong.
    const size_t longer = std::max(answer.size(), p.answer.size());
    size_t right = 0;
    for (size_t i = 0; i < std::min(answer.size(), p.answer.size()); ++i) right += answer[i] == p.answer[i];
    return longer == 0 ? 1.0 : static_cast<double>(right) / static_cast<double>(longer);
  }
  // Letters of the given string drawn with replacement: the answer's length and letters, in an
  // order that carries nothing (right only by luck: (1/length)^length for distinct letters).
  std::optional<std::string> format_example(const Problem& p, std::mt19937_64& rng) const override {
    std::string s(p.answer.size(), ' ');
    for (char& c : s) c = p.answer[rng() % p.answer.size()];
    return s;
  }

 protected:
  Problem make(std::mt19937_64& rng) const override {
    const int len = std::uniform_int_distribution<int>(spec_.min_length, spec_.max_length)(rng);
    const std::string s = random_letters(rng, len);
    std::string answer = s;
    if (sort_) {
      std::sort(answer.begin(), answer.end());
    } else {
      std::reverse(answer.begin(), answer.end());
    }
    Problem p;
    p.prompt = str(sort_ ? "sort " : "reverse ", s, ":");
    p.answer = answer;
    return p;
  }

 private:
  bool sort_;
};

class CountdownTask : public GeneratedTask {
 public:
  using GeneratedTask::GeneratedTask;
  std::string name() const override { return "countdown"; }
  // Correct when the first line is an expression over a sub-multiset of the given numbers (each
  // used at most once) whose exact value is the target.
  double reward(const Problem& p, std::string_view completion) const override {
    auto parsed = evaluate_expression(extract_answer(completion));
    if (!parsed.ok() || !(parsed->value == Rational{p.target, 1})) return 0.0;
    std::vector<int64_t> pool = p.numbers;
    for (int64_t x : parsed->literals) {
      auto it = std::find(pool.begin(), pool.end(), x);
      if (it == pool.end()) return 0.0;
      pool.erase(it);
    }
    return 1.0;
  }
  // The given numbers in random order joined by random operators: right only by luck.
  std::optional<std::string> format_example(const Problem& p, std::mt19937_64& rng) const override {
    std::vector<int64_t> nums = p.numbers;
    std::shuffle(nums.begin(), nums.end(), rng);
    std::string expr;
    for (size_t i = 0; i < nums.size(); ++i) expr = i == 0 ? std::to_string(nums[i]) : str(expr, "+-*"[rng() % 3], nums[i]);
    return expr;
  }

 protected:
  // The target is the value of a random expression over all numbers, so a solution exists.
  Problem make(std::mt19937_64& rng) const override {
    while (true) {
      std::vector<int64_t> nums(spec_.num_numbers);
      for (auto& x : nums) x = std::uniform_int_distribution<int64_t>(1, spec_.max_number)(rng);
      std::string expr = std::to_string(nums[0]);
      for (size_t i = 1; i < nums.size(); ++i) {
        const char op = "+-*"[rng() % 3];
        if (op == '*') expr = str("(", expr, ")");
        expr = str(expr, op, nums[i]);
      }
      auto v = evaluate_expression(expr);
      if (!v.ok() || v->value.den != 1 || v->value.num <= 0) continue;
      std::vector<int64_t> shown = nums;
      std::shuffle(shown.begin(), shown.end(), rng);
      std::string prompt = "numbers";
      for (int64_t x : shown) prompt = str(prompt, " ", x);
      prompt = str(prompt, " target ", v->value.num, ":");
      Problem p;
      p.prompt = prompt;
      p.answer = expr;
      p.numbers = shown;
      p.target = v->value.num;
      return p;
    }
  }
};

}  // namespace

Result<std::unique_ptr<Task>> make_task(const TaskSpec& spec) {
  if (spec.name == "arithmetic") {
    if (spec.operations.empty() || spec.operations.find_first_not_of("+-*") != std::string::npos)
      return invalid_argument(str("task.operations \"", spec.operations, "\" must be one or more of + - *"));
    return finish(std::make_unique<ArithmeticTask>(spec));
  }
  if (spec.name == "countdown") return finish(std::make_unique<CountdownTask>(spec));
  if (spec.name == "reverse") return finish(std::make_unique<StringTask>(spec, false));
  if (spec.name == "sort") return finish(std::make_unique<StringTask>(spec, true));
  if (spec.name == "jsonl") return make_jsonl_task(spec);
  return invalid_argument(str("task.name `", spec.name, "` is not one of arithmetic, countdown, reverse, sort, jsonl"));
}

}  // namespace rlrun::orchestrator
