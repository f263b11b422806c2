// run_loop.h - the orchestrator's data loop (design "A sample's life", steps 1-8).
//
// One thread runs everything through the ControlServer: worker registration, heartbeat echoes,
// the rendezvous store, dispatch of groups to rollout lanes, results -> reward -> group
// advantages, the staleness gate, batches to the trainer ranks and the weight sync after each
// step. Every wait (for registration, a batch, train results, a sync, an evaluation) is a loop of
// tick(): receive and handle messages, notice exited workers, dispatch what the gate allows and
// cancel what is too far off-policy. So rollout keeps generating while the trainer trains.
//
// Step s (1-based) trains on policy version s - 1; after it, trainer rank 0 sends version s to
// every rollout worker (WeightSyncBegin to each, WeightSyncEnd from each).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/control_plane.h"
#include "engine/tokenizer.h"
#include "orchestrator/batcher.h"
#include "orchestrator/launcher.h"
#include "orchestrator/rendezvous.h"
#include "orchestrator/run_metrics.h"
#include "orchestrator/sample_ledger.h"
#include "orchestrator/staleness_gate.h"
#include "orchestrator/tasks.h"

namespace rlrun::orchestrator {

// What summary.json reports (run_report.h writes it).
struct RunOutcome {
  int64_t steps_completed = 0;
  SampleLedger::Summary samples;
  std::vector<double> step_reward_means;  // per completed step
  std::optional<double> accuracy_before, accuracy_after;
  double loop_seconds = 0;          // from the first dispatch to the end of the last step
  double trainer_idle_seconds = 0;  // trainer waiting for a batch, within loop_seconds
  double rollout_idle_fraction = 0; // mean over rollout workers
  int64_t tokens_generated = 0;
  int64_t tokens_trained = 0;
  int64_t prompts_skipped = 0;      // prompts longer than max_prompt_tokens / max_model_len
  std::map<std::string, int64_t> peak_memory_bytes;  // by process, from heartbeats
  // Trainer processes: the backend's peak bytes per phase ("forward_backward", "optimizer"),
  // from TrainResult: what `rlrun plan --compare` sets beside the plan.
  std::map<std::string, std::map<std::string, int64_t>> phase_peak_bytes;
  std::string exit = "ok";
};

struct WorkerSlot {
  std::string name;      // "trainer-0", "rollout-1": also the control-plane identity
  Role role = Role::kTrainer;
  int rank = 0;
  std::string log_path;
  bool registered = false;
  int lanes_used = 0;    // rollout: requests in flight
  double idle_seconds = 0;
};

class Orchestrator {
 public:
  // Everything passed must outlive the Orchestrator. `workers` are the launched processes.
  Orchestrator(const Config& config, ControlServer& server, Launcher& launcher, RunMetrics& metrics,
               Task& task, const engine::Tokenizer& tokenizer, std::vector<WorkerSlot> workers,
               const std::string& metrics_jsonl, const std::atomic<bool>& interrupted);

  // Registration, evaluation, number_of_steps steps, evaluation. Errors name the worker at fault.
  Status run();
  // Tells every registered worker to exit (best effort, no wait).
  void shutdown_workers(const std::string& reason);
  // The outcome so far; call after run() (whatever it returned) to fill summary.json.
  RunOutcome finish();

 private:
  using Clock = std::chrono::steady_clock;
  struct Sample {
    std::vector<int32_t> completion;
    std::vector<float> logprobs;
    uint64_t version = 0;  // oldest weight version that sampled a token
    double reward = 0;
    float advantage = 0;
    bool returned = false;
  };
  struct Group {
    uint64_t id = 0;
    Problem problem;
    std::vector<int32_t> prompt_ids;
    uint64_t dispatch_version = 0;
    std::vector<Sample> samples;
    int returned = 0;
    bool failed = false;  // a sample was cancelled or failed: no advantages for the group
  };
  struct Request {
    uint64_t group = 0;  // eval: index into the eval set
    uint32_t first = 0, count = 0, returned = 0;
    int worker = 0;      // index into workers_
    uint64_t dispatch_version = 0;
    bool eval = false;
    bool cancel_sent = false;
  };

  // ---- run_loop.cc: lifecycle and messages
  Status tick(std::chrono::milliseconds wait, bool dispatch);
  Status handle(const Incoming& in);
  Status handle_register(const Incoming& in, const Register& reg);
  void handle_heartbeat(const Incoming& in, const Heartbeat& hb);
  Status check_exits();
  Status wait_for_registration();
  Status weight_sync(uint64_t version);
  Status run_step();
  Status format_warm_start();  // warm_start.cc
  // Sends build's batches to the trainer ranks and ticks until every rank answers; `what` names
  // the step in errors.
  Status train(const BatchBuild& build, const std::string& what, bool allow_dispatch);
  void write_step_line(const std::map<std::string, double>& trainer_metrics, double wait_s, double train_s,
                       double sync_s, double reward_mean, double reward_std, int64_t tokens,
                       std::optional<double> eval_accuracy);
  void print_progress(double reward_mean);
  WorkerSlot* worker_by_name(const std::string& name);

  // ---- run_data.cc: the sample path
  void dispatch();
  bool start_group();
  void send_request(uint64_t group_id, uint32_t first, uint32_t count, int worker);
  void cancel_off_policy();
  void on_result(const GenerateResult& result);
  void finish_group(Group& group);
  struct RewardStats {
    double mean = 0, std = 0, advantage_abs_mean = 0;
  };
  // Packs `batch` into one TrainBatch per rank; too-long samples are discarded and counted, the
  // rest become training_samples_.
  BatchBuild pack_batch(const std::vector<Group>& batch, uint64_t step, RewardStats& rewards);
  // Takes prompts_batch_size_for_trainer ready groups (discarding stale ones): false if too few.
  bool take_batch(std::vector<Group>& out);
  Result<std::optional<double>> evaluate(const char* when);
  int64_t outstanding_groups() const;
  int free_rollout_worker() const;  // index of the rollout worker with most free lanes, or -1
  uint64_t sample_id(uint64_t group, uint32_t index) const { return group * group_size_ + index; }

  const Config& config_;
  ControlServer& server_;
  Launcher& launcher_;
  RunMetrics& metrics_;
  Task& task_;
  const engine::Tokenizer& tokenizer_;
  std::vector<WorkerSlot> workers_;
  std::string metrics_jsonl_;
  const std::atomic<bool>& interrupted_;

  RendezvousService rendezvous_;
  StalenessGate gate_;
  SampleLedger ledger_;
  uint32_t group_size_;
  std::vector<int32_t> stop_ids_;
  bool accepting_exits_ = false;  // after shutdown_workers: exits are expected

  std::map<uint64_t, Group> groups_;  // in flight (not all samples back)
  std::deque<Group> ready_;           // scored, waiting for a batch
  std::map<uint64_t, Request> requests_;
  std::deque<std::pair<uint64_t, uint32_t>> pending_samples_;  // individual lanes: (group, index)
  int64_t training_groups_ = 0;       // groups in the batch being trained or synced
  std::vector<uint64_t> training_samples_;
  uint64_t next_group_ = 0, next_request_ = 1;
  int64_t trainer_step_ = 0;          // steps completed and synced = weight version
  int64_t zero_spread_in_a_row_ = 0;  // groups discarded for no reward spread since the last kept one
  int64_t solved_in_a_row_ = 0;       // ... of which every sample earned the full reward

  // Per-step waits.
  std::map<int, TrainResult> train_results_;  // by rank
  std::string train_error_;
  std::map<std::string, WeightSyncEnd> sync_ends_;  // by worker name
  std::map<uint64_t, double> eval_rewards_;         // eval problem index -> reward

  RunOutcome outcome_;
  Clock::time_point last_tick_, loop_start_;
  bool looping_ = false, trainer_waiting_ = false;
  double last_sync_seconds_ = 0;
  int64_t weight_bytes_ = 0;  // f32 parameters sent per sync (flat buffer)
};

}  // namespace rlrun::orchestrator
