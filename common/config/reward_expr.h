// reward_expr.h - the grammar of task.reward: a weighted sum of reward terms.
//
//   expr := ["-"] term (("+" | "-") term)*      term := [NUMBER "*"] NAME
//   NAME := task | exact | numeric | regex | format | length | http
//
// e.g. "numeric", "numeric + 0.1*format - 0.05*length", "0.5*http + 0.5*numeric". A name appears
// at most once. What each term scores is orchestrator/reward/'s business; this file only reads
// the text, so `rlrun validate` can name a bad expression.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/observe/log.h"
#include "common/status.h"

namespace rlrun {

enum class RewardTerm { kTask, kExact, kNumeric, kRegex, kFormat, kLength, kHttp };

std::string_view reward_term_name(RewardTerm term);

struct WeightedRewardTerm {
  RewardTerm term;
  double weight = 1.0;
};

struct RewardExpression {
  std::vector<WeightedRewardTerm> terms;  // in the order written
  bool has(RewardTerm term) const;
  // The term held-out accuracy counts (a completion is correct when it scores 1): the first of
  // task, exact, numeric, regex written; none written: task (the task's own rule).
  RewardTerm verifier() const;
};

// Errors say what is wrong at which character, and list the names.
Result<RewardExpression> parse_reward_expression(std::string_view text);

}  // namespace rlrun
