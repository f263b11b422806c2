// run/samples/reward_stage.h - from a returned sample to a group ready for a batch (design "A
// sample's life", step 4): task.reward's terms per sample, the http term's reward server, the
// group's advantages, the zero-spread policy (zero_spread.h) and, with kl_reference_on: rollout,
// the KL reference's log-probs from a rollout worker (reference_scoring.h).
//
// Rules:
//  - score(): a returned sample's local terms (reward/reward_function.h), as it comes back; the
//    terms' means since the last step line are take_means()'s (and the Prometheus gauges').
//  - complete(): a complete group. A failed one (a sample cancelled or failed), an episode group
//    (its environment rewarded it) or any group without an http term is finished at once; else
//    every sample goes to the reward server and the group waits until each one is answered
//    (poll()). poll() returns an error once the server failed reward_max_failures times in a row.
//  - Finishing a group: a failed one is discarded (group_incomplete); the others' rewards go to
//    the ZeroSpreadPolicy (discarded: zero_advantage) and get the algorithm's advantages
//    (advantage_error when it refuses them). A kept group is scored under the KL reference by the
//    least busy rollout worker when the rollout scores it (never in a resumed run: its workers
//    have no copy of the reference), else it is ready: it goes to the Dispatcher's scored queue.
//  - Every discard goes to the ledger and the metrics with its reason; nothing disappears.
//    finish() accounts for the groups still waiting when the run ends.
// What leaves goes through `send` (ScoreRequests). Nothing here waits. Threads: the loop's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/reward/http_reward.h"
#include "orchestrator/reward/reward_function.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/samples/dispatcher.h"
#include "orchestrator/run/samples/reference_scoring.h"
#include "orchestrator/run/samples/zero_spread.h"
#include "orchestrator/run/step_tally.h"
#include "orchestrator/tune/loop_profile.h"

namespace rlrun::orchestrator {

class RewardStage {
 public:
  using Group = Dispatcher::Group;
  using Sample = Dispatcher::Sample;
  struct Stats {
    std::string expression;  // task.reward as written
    // The http term's reward server: its URL and what its client counted (no http term: nullopt).
    std::string url;
    std::optional<HttpRewardClient::Stats> server;
    ZeroSpreadPolicy::Stats zero_spread;
    // kl_reference_on: rollout: groups a rollout worker scored under the KL reference, and those it
    // could not (the trainer scored them); both -1 when the trainer scores every group.
    int64_t kl_reference_scored_by_rollout = -1, kl_reference_scored_by_trainer = -1;
  };

  // Everything passed must outlive the stage. `http`: the http term's client, null without one.
  // `steps`: the run's completed steps (the zero-spread policy's view of the run).
  RewardStage(const Config& config, RewardFunction& reward, HttpRewardClient* http, const PromptFormat& format,
              Dispatcher& dispatcher, SampleLedger& ledger, RunMetrics& metrics, tune::LoopProfile& profile,
              const StepTally& steps, ReferenceScoring::Send send);

  // A resumed run's rollout workers never got version 0, which gives them the reference's copy.
  void set_resumed() { resumed_ = true; }

  // Scores `sample`'s decoded `text` of `tokens` tokens under the local terms.
  void score(const Problem& problem, Sample& sample, std::string text, int64_t tokens);
  // The reward server's extra_logs, or an environment's metrics, for the next step line.
  void note_logs(const std::map<std::string, double>& values);
  void complete(Group group);
  Status poll();  // in tick: the reward server's answers
  void on_score_result(const ScoreResult& result);
  // Groups waiting for `worker`'s KL reference scores go on without them (it failed).
  void release_worker(int worker, const std::string& name);
  // Groups waiting longer than `limit_seconds` for their KL reference scores go on without them.
  void release_overdue(double limit_seconds);
  // Groups a batch will not see soon: for the staleness gate's count of what is outstanding.
  int64_t groups_waiting() const;
  // The terms' means (and the server's logs') since the last call, for metrics.jsonl: resets them.
  std::pair<std::map<std::string, double>, std::map<std::string, double>> take_means();
  int64_t server_waiting() const { return http_ != nullptr ? http_->waiting() : 0; }
  bool uses_server() const { return http_ != nullptr; }
  // The reward server's median round trip (profile.json); nullopt without one.
  std::optional<double> server_round_trip_seconds() const {
    return http_ != nullptr ? std::optional<double>(http_->stats().round_trip_median_seconds) : std::nullopt;
  }

  // The step waiting for a batch took it: the zero-spread bound starts afresh.
  void batch_taken() { zero_spread_.batch_taken(); }
  // Why no batch can form ("" while one can): the zero-spread policy's stop.
  const std::string& stop_reason() const { return zero_spread_.stop_reason(); }

  // At the end of the run: what still waits is discarded (reward_unavailable, unused_at_exit).
  void finish();
  Stats stats() const;

 private:
  struct Mean {
    double sum = 0;
    int64_t n = 0;
  };
  void finish_group(Group group);
  void keep(Group group);
  void ready_unscored(std::vector<Group> groups, const std::string& why);
  void discard_all(const Group& group, const std::string& reason);

  const Config& config_;
  RewardFunction& reward_;
  HttpRewardClient* http_;
  const PromptFormat& format_;
  Dispatcher& dispatcher_;
  SampleLedger& ledger_;
  RunMetrics& metrics_;
  tune::LoopProfile& profile_;
  const StepTally& steps_;
  ZeroSpreadPolicy zero_spread_;
  // kl_reference_on: rollout: groups kept for training, waiting for a rollout worker to score them.
  ReferenceScoring reference_;
  bool resumed_ = false;
  // Complete groups waiting for the reward server, by group id; Group::rewards_waiting counts down.
  std::map<uint64_t, Group> awaiting_;
  std::map<std::string, Mean> terms_, server_logs_;  // since the last step line
  HttpRewardClient::Stats server_seen_;              // as of the last poll(), for the request counters
  log::RateLimited advantage_error_log_{std::chrono::seconds(60)}, reference_error_log_{std::chrono::seconds(60)};
};

}  // namespace rlrun::orchestrator
