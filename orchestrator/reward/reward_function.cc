#include "orchestrator/reward/reward_function.h"

#include <algorithm>

#include "common/check.h"

namespace rlrun::orchestrator {

Result<RewardFunction> RewardFunction::create(const RewardExpression& expression, const TaskSection& keys,
                                              const Task& task, RegexLimits limits) {
  RewardFunction f(expression, task);
  const auto missing = [&](RewardTerm term, const char* key, const char* example) {
    return invalid_argument(str("task.reward \"", keys.reward, "\" uses the term `", reward_term_name(term),
                                "`, which needs `", key, "` (e.g. ", example, ")"));
  };
  for (const WeightedRewardTerm& t : expression.terms) {
    switch (t.term) {
      case RewardTerm::kRegex: {
        if (keys.reward_regex.empty()) return missing(t.term, "task.reward_regex", "\"answer is {answer}\"");
        RLRUN_ASSIGN_OR_RETURN(AnswerRegex regex, AnswerRegex::compile(keys.reward_regex, limits));
        f.reward_regex_ = std::move(regex);
        break;
      }
      case RewardTerm::kFormat: {
        if (keys.format_regex.empty()) return missing(t.term, "task.format_regex", "\"####\\\\s*-?[0-9]\"");
        RLRUN_ASSIGN_OR_RETURN(RewardRegex regex, RewardRegex::compile(keys.format_regex, "task.format_regex", limits));
        f.format_regex_ = std::move(regex);
        break;
      }
      case RewardTerm::kHttp:
        if (keys.reward_url.empty()) return missing(t.term, "task.reward_url", "http://127.0.0.1:8000/reward");
        f.http_weight_ = t.weight;
        break;
      default:
        break;
    }
  }
  f.verifier_ = expression.verifier();
  if (keys.accuracy != "auto") {  // task.accuracy names it (config rules checked the name)
    RLRUN_ASSIGN_OR_RETURN(const RewardExpression named, parse_reward_expression(keys.accuracy));
    f.verifier_ = named.terms.front().term;
    if (f.verifier_ != named.verifier())  // format, length, http: not a check of the answer
      return invalid_argument(str("task.accuracy \"", keys.accuracy, "\" is not one of auto, task, exact, numeric, regex"));
  }
  if (f.verifier_ == RewardTerm::kRegex && !expression.has(RewardTerm::kRegex)) {
    if (keys.reward_regex.empty()) return missing(RewardTerm::kRegex, "task.reward_regex", "\"answer is {answer}\"");
    RLRUN_ASSIGN_OR_RETURN(AnswerRegex regex, AnswerRegex::compile(keys.reward_regex, limits));
    f.reward_regex_ = std::move(regex);
  }
  return f;
}

double RewardFunction::value(RewardTerm term, const Problem& problem, const Completion& completion) {
  switch (term) {
    case RewardTerm::kTask:
      return task_->reward(problem, completion.text);
    case RewardTerm::kExact:
      return exact_match(completion.text, problem.answer) ? 1.0 : 0.0;
    case RewardTerm::kNumeric:
      return numeric_match(completion.text, problem.answer) ? 1.0 : 0.0;
    case RewardTerm::kRegex:
      return reward_regex_->matches(completion.text, problem.answer) ? 1.0 : 0.0;
    case RewardTerm::kFormat:
      return format_regex_->matches(completion.text) ? 1.0 : 0.0;
    case RewardTerm::kLength:
      RLRUN_CHECK(completion.max_tokens > 0, str("the length term needs max_tokens > 0, got ", completion.max_tokens));
      return std::clamp(static_cast<double>(completion.tokens) / static_cast<double>(completion.max_tokens), 0.0, 1.0);
    case RewardTerm::kHttp:
      break;
  }
  RLRUN_CHECK(false, str("no local value for the term ", reward_term_name(term)));
  return 0.0;
}

LocalReward RewardFunction::local(const Problem& problem, const Completion& completion) {
  LocalReward r;
  for (const WeightedRewardTerm& t : expression_.terms) {
    if (t.term == RewardTerm::kHttp) continue;
    const double v = value(t.term, problem, completion);
    r.terms.push_back({t.term, t.weight, v});
    r.total += t.weight * v;
  }
  return r;
}

bool RewardFunction::correct(const Problem& problem, std::string_view text) {
  const RewardTerm verifier = verifier_;
  if (verifier == RewardTerm::kTask) return task_->correct(problem, text);
  return value(verifier, problem, Completion{text, 0, 0}) >= 1.0;
}

}  // namespace rlrun::orchestrator
