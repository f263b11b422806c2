// tasks.h - where prompts come from and how completions are scored.
//
// A Task yields training problems and holds a fixed held-out evaluation set that training never
// sees. Rewards come from the decoded completion with exact rules (no model judges): the answer
// is the completion's first line, trimmed. Built-in generators (arithmetic, countdown, reverse,
// sort) are reproducible from a seed; `jsonl` reads a dataset file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

struct Problem {
  // The text given to the model; for a chat row, the content of its last message (for logs).
  std::string prompt;
  std::string answer;  // the reference answer (exact-match tasks) or a known solution (countdown)
  std::vector<int64_t> numbers;  // countdown: the numbers that may be used
  int64_t target = 0;            // countdown: the value to reach
  // A chat row (task.messages_field): its messages as a JSON array text ([{"role", "content"}, ...]),
  // rendered by the chat template instead of `prompt`. Empty for a prompt string.
  std::string messages_json;
  // The row's other fields as a JSON object text ("{}" for none, or for a built-in task): metadata
  // that travels with the sample to the reward (the http term sends it).
  std::string metadata_json = "{}";
};

struct TaskSpec {
  std::string name = "arithmetic";  // arithmetic | countdown | reverse | sort | jsonl
  std::string dataset;              // jsonl: training file
  std::string eval_dataset;         // jsonl: held-out file, its first eval_size rows (default: the last eval_size rows of dataset)
  std::string prompt_field = "prompt", answer_field = "answer";  // jsonl: the fields of a row
  std::string messages_field = "messages";                       // jsonl: a chat instead of a prompt
  int eval_size = 64;
  int min_digits = 1, max_digits = 2;  // arithmetic operands
  std::string operations = "+-";       // arithmetic: any of + - *
  std::string subtraction = "non_negative";  // arithmetic: non_negative | any | negative differences
  std::string question_format = "{a}{op}{b}=";  // arithmetic: {a} {b} {op} {op_word}
  int num_numbers = 3, max_number = 20;  // countdown
  int min_length = 3, max_length = 6;    // reverse / sort strings
  bool partial_credit = false;           // reverse / sort: reward the share of right characters
  uint64_t seed = 1;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // The next training problem; never one of eval_set().
  virtual Problem next_train() = 0;
  // As n calls of next_train() (resuming a run), without building the problems where it can.
  virtual void skip_train(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) (void)next_train();
  }
  virtual const std::vector<Problem>& eval_set() const = 0;
  // Some problems are chats (messages_json), which only a chat template can give to the model.
  virtual bool has_chat_rows() const { return false; }
  // 1 for a correct completion, 0 otherwise; with task.partial_credit (reverse, sort) the share
  // of answer characters in the right place.
  virtual double reward(const Problem& problem, std::string_view completion) const = 0;
  // Exact correctness: what held-out accuracy counts, whatever the reward.
  virtual bool correct(const Problem& problem, std::string_view completion) const {
    return reward(problem, completion) >= 1.0;
  }
  // A completion with the shape of a correct one and random content, for the format warm-start:
  // as long as problem.answer and drawn from its alphabet, never from its characters, so a model
  // trained on these answers at chance. nullopt when the task has no known format (jsonl).
  virtual std::optional<std::string> format_example(const Problem& problem, std::mt19937_64& rng) const {
    (void)problem, (void)rng;
    return std::nullopt;
  }
};

Result<std::unique_ptr<Task>> make_task(const TaskSpec& spec);
// The jsonl task alone (make_task dispatches to it); errors name the file and line.
Result<std::unique_ptr<Task>> make_jsonl_task(const TaskSpec& spec);

// The answer a completion gives: its first line, without surrounding spaces.
std::string_view extract_answer(std::string_view completion);

}  // namespace rlrun::orchestrator
