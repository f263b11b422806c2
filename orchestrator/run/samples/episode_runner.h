// run/samples/episode_runner.h - rows an environment server runs as episodes (task.environment_url,
// docs/environments.md): a session on the run's gateway per attempt, the server's answer, retries,
// failures, and the episode's recorded turns made into its sample.
//
// Rules:
//  - A training group whose row the environment runs (runs(); task.environment_field picks rows)
//    is admitted with no request (Dispatcher::admit_episodes): each of its samples is an episode.
//    An evaluation problem's episode samples at eval_temperature with a seed of its own.
//  - An attempt opens a session at the weight version of the moment and POSTs the row to the
//    server; the session's calls become GenerateRequests to ready rollout workers (round-robin;
//    with none ready they wait, and their HTTP clients time out), their results come back through
//    on_result(), and a failed worker's calls are sent again (requeue_worker()).
//  - An attempt that fails is retried up to environment_max_attempts; then the sample is
//    discarded (episode_failed) and the failure listed (the first Stats::kMaxListed). Past
//    environment_max_failed_episodes failed episodes poll() returns the run's error.
//  - A training episode whose session fell past max_off_policy_steps is cancelled (its sample
//    counts as cancelled); one that ended without a turn is discarded (episode_no_turns).
//  - An ended episode's sample holds its turns' training sequences (the environment's tokens
//    masked), the oldest version that sampled a turn, the environment's reward and, as the text,
//    the last turn's completion. A group whose samples are all back goes to `hooks.complete`;
//    an evaluation episode's verdict to `hooks.evaluated`; the server's metrics to the reward
//    stage's step means.
// Threads: the orchestrator's loop (the gateway's HTTP threads stay inside the gateway).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/data/staleness_gate.h"
#include "orchestrator/env/episode_client.h"
#include "orchestrator/env/gateway.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/samples/dispatcher.h"
#include "orchestrator/run/samples/reward_stage.h"
#include "orchestrator/run/step_tally.h"

namespace rlrun::orchestrator {

class EpisodeRunner {
 public:
  using Group = Dispatcher::Group;
  struct Stats {
    std::string url, gateway;  // url empty: no environment
    int64_t started = 0;       // episodes (training and evaluation), each counted once
    int64_t attempts = 0;      // requests to the environment, retries included
    int64_t completed = 0, retried = 0, failed = 0, cancelled = 0, in_flight_at_exit = 0;
    int64_t calls = 0, turns = 0, sequences = 0;
    int64_t exact_turns = 0;          // turns whose prompt continued the recorded tokens
    int64_t retokenized_differ = 0;   // of those, turns where encoding the text again gave other ids
    int64_t policy_tokens = 0, environment_tokens = 0;  // trained (mask 1) and masked (mask 0)
    std::vector<std::string> failures;  // the first kMaxListed, with their reasons
    static constexpr size_t kMaxListed = 32;
  };
  struct Hooks {
    // One of the environment's calls, to rollout worker `worker` (counted as its work).
    std::function<Status(int worker, const GenerateRequest& request)> send_request;
    std::function<void(Group group)> complete;  // a training group whose samples are all back
    std::function<void(uint64_t problem, bool correct)> evaluated;
  };

  // Everything passed must outlive the runner. Cancels go through `port`.
  EpisodeRunner(const Config& config, const engine::Tokenizer& tokenizer, const Task& task, Dispatcher& dispatcher,
                const std::vector<WorkerSlot>& workers, SampleLedger& ledger, RunMetrics& metrics,
                RewardStage& rewards, const StepTally& steps, LoopPort port, Hooks hooks);

  // With task.environment_url: starts the run's gateway (the policy's stop tokens and chat
  // template) and the server's client. Without: nothing runs episodes.
  Status start(const PromptFormat& format, const std::vector<int32_t>& stop_ids);
  // The same with a gateway and a client made elsewhere (tests).
  void start(std::unique_ptr<EpisodeGateway> gateway, std::unique_ptr<EpisodeEnvironment> environment);

  bool runs(const Problem& problem) const;  // the environment runs this row
  // Episodes at the weight version of the moment: every sample of an admitted episode group, or
  // an evaluation problem.
  void start_group(uint64_t group);
  void start_eval(uint64_t problem);
  bool on_result(const GenerateResult& result);  // a call's result: true when it was one
  Status poll();                                 // in tick: calls out, ended attempts in
  // Training episodes whose weight version `off_policy` rejects are cancelled.
  void cancel_off_policy(const std::function<bool(uint64_t version)>& off_policy);
  void requeue_worker(int worker);  // its calls are sent again
  int64_t calls_on(int worker) const;
  // A batch trained these tokens of episode sequences: the policy's own and the environment's.
  void note_trained(int64_t policy_tokens, int64_t environment_tokens);
  void finish();  // at the end: what still runs is in flight at exit; the gateway shuts down
  const Stats& stats() const { return stats_; }

 private:
  struct Episode {
    uint64_t group = 0;
    uint32_t index = 0;                    // training: sample `index` of `group`
    std::optional<uint64_t> eval_problem;  // evaluation: the held-out problem
    int attempt = 0;
    uint64_t session = 0, version = 0;
  };
  void start_attempt(Episode episode);
  void route_calls();
  void done(const Episode& episode, const EpisodeReply& reply, EpisodeGateway::Closed closed);
  void lost(const Episode& episode, const std::string& reason, bool cancelled);

  const Config& config_;
  const engine::Tokenizer& tokenizer_;
  const Task& task_;
  Dispatcher& dispatcher_;
  const std::vector<WorkerSlot>& workers_;
  SampleLedger& ledger_;
  RunMetrics& metrics_;
  RewardStage& rewards_;
  const StepTally& steps_;
  LoopPort port_;
  Hooks hooks_;
  std::unique_ptr<EpisodeGateway> gateway_;  // with task.environment_url
  std::unique_ptr<EpisodeEnvironment> environment_;
  std::map<uint64_t, Episode> running_;  // by attempt key
  uint64_t next_key_ = 1;
  size_t next_call_worker_ = 0;
  Stats stats_;
  log::RateLimited failure_log_{std::chrono::seconds(30)};
};

}  // namespace rlrun::orchestrator
