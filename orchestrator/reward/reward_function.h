// reward_function.h - task.reward evaluated for one completion: the weighted sum of its terms.
//
// Terms (common/config/reward_expr.h parses the expression):
//   task     the task's own rule, Task::reward (built-in tasks; exact match for jsonl)
//   exact    first line equals the reference's first line (verifiers.h exact_match)
//   numeric  the numeric answers are equal (verifiers.h numeric_match)
//   regex    1 when task.reward_regex matches ({answer} = the reference, escaped), else 0
//   format   1 when task.format_regex matches, else 0
//   length   completion tokens / max_tokens, in [0, 1] (a negative weight penalizes length)
//   http     an external server's score: not computed here (http_reward.h); local() leaves it out
//            and the caller adds http_weight() * the server's reward.
// correct() is held-out accuracy: the term task.accuracy names scores 1 (auto: the expression's
// verifier() term; for `task`: Task::correct, exact even with task.partial_credit).
//
// Threads: one caller at a time (the orchestrator's loop): the regex terms keep match state.
// The Task passed to create() must outlive the RewardFunction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/config/reward_expr.h"
#include "common/status.h"
#include "orchestrator/reward/verifiers.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

struct Completion {
  std::string_view text;   // the decoded completion
  int64_t tokens = 0;      // its length in tokens
  int64_t max_tokens = 0;  // the most it could have had (> 0 when the length term is used)
};

struct TermValue {
  RewardTerm term;
  double weight = 1.0;
  double value = 0.0;  // unweighted: 0/1 for exact, numeric, regex, format; [0,1] for length
};

struct LocalReward {
  double total = 0.0;            // sum of weight * value over `terms`
  std::vector<TermValue> terms;  // every term but http, in the order task.reward writes them
};

class RewardFunction {
 public:
  // Compiles the terms' patterns. Errors name the key: a regex or format term without
  // task.reward_regex / task.format_regex, a pattern that does not compile, an http term without
  // task.reward_url.
  static Result<RewardFunction> create(const RewardExpression& expression, const TaskSection& keys,
                                       const Task& task, RegexLimits limits = {});

  LocalReward local(const Problem& problem, const Completion& completion);
  bool correct(const Problem& problem, std::string_view text);

  bool uses_http() const { return http_weight_.has_value(); }
  double http_weight() const { return http_weight_.value_or(0.0); }  // 0 when unused
  const RewardExpression& expression() const { return expression_; }

 private:
  RewardFunction(const RewardExpression& expression, const Task& task) : expression_(expression), task_(&task) {}
  double value(RewardTerm term, const Problem& problem, const Completion& completion);

  RewardExpression expression_;
  const Task* task_;
  std::optional<AnswerRegex> reward_regex_;
  std::optional<RewardRegex> format_regex_;
  std::optional<double> http_weight_;
  RewardTerm verifier_ = RewardTerm::kTask;  // what correct() asks: task.accuracy, or the expression's verifier()
};

}  // namespace rlrun::orchestrator
