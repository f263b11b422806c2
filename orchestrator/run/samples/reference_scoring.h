// reference_scoring.h - groups kept for training wait here for their KL reference log-probs
// (kl_reference_on: rollout): a rollout worker scores them on request (ScoreRequest ->
// ScoreResult, rollout/kl_reference.h), so the reference's forward pass leaves the trainer. Only
// the groups that will train are scored: those discarded for no reward spread never are.
//
// Rules:
//  - submit(group, worker): a ScoreRequest of the group's prompt and its samples' completions
//    goes to `worker`; the group waits here.
//  - on_result(result): the group the result answers comes back, each sample with its
//    ref_logprobs when the result holds exactly one finite value per completion token, else
//    without them (an error, a malformed answer: the trainer scores the group). A result for no
//    waiting request (a late or repeated answer, garbage) is ignored.
//  - release_worker(worker): a failed worker's groups come back without them.
//  - take_overdue(limit): groups waiting longer than `limit` seconds come back without them (a
//    slow worker delays a batch at most that long).
// Nothing here waits; what leaves goes through `send` (the orchestrator: the ControlServer).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol/protocol.h"
#include "common/status.h"
#include "orchestrator/run/samples/dispatcher.h"

namespace rlrun::orchestrator {

class ReferenceScoring {
 public:
  using Clock = std::chrono::steady_clock;
  using Group = Dispatcher::Group;
  using Send = std::function<Status(int worker, const ScoreRequest& request)>;

  explicit ReferenceScoring(Send send) : send_(std::move(send)) {}

  void submit(Group group, int worker, Clock::time_point now = Clock::now());
  std::optional<Group> on_result(const ScoreResult& result);
  std::vector<Group> release_worker(int worker);
  std::vector<Group> take_overdue(double limit_seconds, Clock::time_point now = Clock::now());
  std::vector<Group> take_all();  // at the end of the run
  // A group kept while no rollout worker could take its request: counted with the unscored ones.
  void note_not_sent() { ++unscored_; }

  size_t waiting() const { return waiting_.size(); }
  // Groups that came back with the reference's log-probs, and without them (the trainer scored them).
  int64_t scored() const { return scored_; }
  int64_t unscored() const { return unscored_; }
  const std::string& last_error() const { return last_error_; }

 private:
  struct Waiting {
    Group group;
    int worker = 0;
    Clock::time_point sent_at;
  };
  Group unscored(Waiting w, std::string why);

  Send send_;
  std::map<uint64_t, Waiting> waiting_;  // by request id
  uint64_t next_request_ = 1;
  int64_t scored_ = 0, unscored_ = 0;
  std::string last_error_;
};

}  // namespace rlrun::orchestrator
