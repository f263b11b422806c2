// run/samples/reference_scoring.cc - groups waiting for the KL reference's log-probs from a rollout worker.
#include "orchestrator/run/samples/reference_scoring.h"

#include <cmath>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

void ReferenceScoring::submit(Group group, int worker, Clock::time_point now) {
  ScoreRequest request;
  request.request_id = next_request_++;
  request.prompt_ids = group.prompt_ids;
  std::vector<int32_t> ids;
  for (const Dispatcher::Sample& s : group.samples) {
    ids.insert(ids.end(), s.completion.begin(), s.completion.end());
    request.completion_lengths.push_back(static_cast<uint32_t>(s.completion.size()));
  }
  request.completion_ids = std::move(ids);
  // A failed send is an answer that never comes: the group leaves at release_worker or take_overdue.
  if (const Status s = send_(worker, request); !s.ok()) last_error_ = s.message();
  waiting_.emplace(request.request_id, Waiting{std::move(group), worker, now});
}

ReferenceScoring::Group ReferenceScoring::unscored(Waiting w, std::string why) {
  for (Dispatcher::Sample& s : w.group.samples) s.ref_logprobs.clear();
  ++unscored_;
  last_error_ = std::move(why);
  return std::move(w.group);
}

std::optional<ReferenceScoring::Group> ReferenceScoring::on_result(const ScoreResult& result) {
  auto it = waiting_.find(result.request_id);
  if (it == waiting_.end()) return std::nullopt;
  Waiting w = std::move(it->second);
  waiting_.erase(it);
  if (!result.error.empty()) return unscored(std::move(w), result.error);
  size_t expected = 0;
  for (const Dispatcher::Sample& s : w.group.samples) expected += s.completion.size();
  if (result.ref_logprobs.size() != expected)
    return unscored(std::move(w), str("a ScoreResult held ", result.ref_logprobs.size(), " log-probs for ", expected,
                                      " completion tokens"));
  for (float v : result.ref_logprobs)
    if (!std::isfinite(v)) return unscored(std::move(w), "a ScoreResult held a log-prob that is not finite");
  size_t at = 0;
  for (Dispatcher::Sample& s : w.group.samples) {
    s.ref_logprobs.assign(result.ref_logprobs.begin() + static_cast<std::ptrdiff_t>(at),
                          result.ref_logprobs.begin() + static_cast<std::ptrdiff_t>(at + s.completion.size()));
    at += s.completion.size();
  }
  ++scored_;
  return std::move(w.group);
}

std::vector<ReferenceScoring::Group> ReferenceScoring::release_worker(int worker) {
  std::vector<Group> out;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.worker != worker) {
      ++it;
      continue;
    }
    out.push_back(unscored(std::move(it->second), "its rollout worker failed"));
    it = waiting_.erase(it);
  }
  return out;
}

std::vector<ReferenceScoring::Group> ReferenceScoring::take_overdue(double limit_seconds, Clock::time_point now) {
  std::vector<Group> out;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const double age = std::chrono::duration<double>(now - it->second.sent_at).count();
    if (age <= limit_seconds) {
      ++it;
      continue;
    }
    out.push_back(unscored(std::move(it->second), str("no ScoreResult within ", limit_seconds, " s")));
    it = waiting_.erase(it);
  }
  return out;
}

std::vector<ReferenceScoring::Group> ReferenceScoring::take_all() {
  std::vector<Group> out;
  for (auto& [id, w] : waiting_) out.push_back(std::move(w.group));
  waiting_.clear();
  return out;
}

}  // namespace rlrun::orchestrator
