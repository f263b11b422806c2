// worker.h - the rollout worker's service loop: the control-plane side of `rlrun rollout`.
//
// Life: connect a DEALER (identity "rollout-<index>") to the orchestrator, send Register (role
// rollout) and wait for RegisterAck, then loop until Shutdown:
//   - drain the control messages that arrived (GenerateRequest -> Scheduler::add, Cancel,
//     WeightSyncBegin, ScoreRequest, Shutdown; anything a rollout worker does not serve gets an
//     ErrorReply);
//   - at the step boundary, load a pending weight sync (WeightUpdater) and answer WeightSyncEnd,
//     then answer the ScoreRequests (the KL reference, kl_reference.h) with ScoreResults;
//   - run one Scheduler::step() and send a GenerateResult per finished sample (with the
//     correlation id of its GenerateRequest);
//   - every heartbeat_interval_seconds send a Heartbeat with the worker's stats; while an engine
//     step, a weight sync or a KL pass runs longer, a LivenessBeacon thread repeats the latest one
//     (common/protocol/liveness_beacon.h), so a long step never looks like death.
// When there is nothing to step the loop waits in the socket poll (never busy-spins). The
// orchestrator answers each Heartbeat; any message from it proves it alive. When the messages
// drained at the start of a turn still leave nothing heard for heartbeat_timeout_seconds, run()
// returns unavailable (the process exits): the length of the worker's own step is not silence.
// Malformed bytes never crash the worker: the control client drops malformed messages (the worker
// reports each batch of them with an ErrorReply), invalid requests come back as error results.
//
// Threads: run() owns the calling thread; the Scheduler, its Model and the Communicator must
// outlive the Worker and are used only from that thread. The beacon's thread touches only the
// control client (to send) and its own copy of the latest Heartbeat.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/protocol/control_plane.h"
#include "common/protocol/liveness_beacon.h"
#include "common/protocol/protocol.h"
#include "common/status.h"
#include "engine/comm/communicator.h"
#include "rollout/kl_reference.h"
#include "rollout/scheduler.h"
#include "rollout/weight_update.h"

namespace rlrun::rollout {

// Points in a worker's life where a test can make it fail, as leveldb's Env lets a test make a
// file system fail: the product passes no hooks; the fault-tolerance tests build a binary of their
// own that does (tests/orchestrator/run/fault_double_main.cc), so a worker dies inside a weight
// sync or hangs in the middle of a request deterministically. Each is called on the worker's one
// thread and may not return (SIGKILL, SIGSTOP).
class WorkerHooks {
 public:
  virtual ~WorkerHooks() = default;
  virtual void after_register() {}
  virtual void before_weight_receive(uint64_t version) { (void)version; }  // the sender is broadcasting
  virtual void after_result(uint64_t results_sent) { (void)results_sent; }
  virtual void before_engine_step(uint64_t steps_before) { (void)steps_before; }  // may take long
};

struct WorkerOptions {
  std::string orchestrator;            // tcp://HOST:PORT of the orchestrator's ControlServer
  int32_t index = 0;                   // rollout worker index (Register.rank)
  std::string host;                    // reported in Register ("" = this machine's hostname)
  std::vector<std::string> devices{"cpu"};
  double heartbeat_interval_seconds = 1.0;
  double heartbeat_timeout_seconds = 10.0;  // also bounds the wait for RegisterAck
  std::chrono::milliseconds idle_wait{50};  // longest socket wait per loop turn when idle
  int max_messages_per_turn = 256;          // control messages drained between two steps
  int64_t max_weight_bucket_bytes = int64_t{1} << 32;
  SecurityOptions control_security;         // of the connection to the orchestrator
  // Joins the weight-sync group "weights-<epoch>" as this worker's rank. Called when a
  // WeightSyncBegin names an epoch other than the current group's (the group was re-formed after
  // a member died); empty: the worker keeps the group it was given and refuses other epochs.
  std::function<Result<std::unique_ptr<engine::Communicator>>(uint32_t epoch)> join_weight_group;
  int64_t weight_group_epoch = 0;  // the epoch of the weight_comm given to the Worker
  WorkerHooks* hooks = nullptr;    // not owned; null: none (the product)
  // Not owned; null: ScoreRequests are answered with an error. Otherwise a sync marked
  // kl_reference captures the reference, and the ScoreRequests that arrived are scored between
  // two engine steps, in forward passes of about score_tokens_per_pass tokens each (before a
  // capture: an error).
  KlReference* kl_reference = nullptr;
  // The scoring goes before generation, one pass per loop turn: a weight sync that arrives
  // meanwhile waits for one pass, not for all of them (the trainer idles while it waits).
  int64_t score_tokens_per_pass = 256;
};

// What the worker did, for tests and the final log line.
struct WorkerSummary {
  uint64_t results_sent = 0;
  uint64_t heartbeats_sent = 0;   // by the worker's thread
  uint64_t liveness_beats = 0;    // by its LivenessBeacon, during steps longer than an interval
  uint64_t weight_syncs = 0;
  uint64_t errors_sent = 0;       // ErrorReply messages
  uint64_t kl_reference_scored = 0;  // completions scored under the KL reference (ScoreRequest)
  uint64_t malformed_seen = 0;    // messages the control client dropped as malformed
  std::string exit_reason;
};

class Worker {
 public:
  // weight_comm: the weight-sync group (this worker a receiver) of epoch
  // options.weight_group_epoch, or nullptr when there is none yet (a WeightSyncBegin then joins
  // the group it names through options.join_weight_group, or is answered WeightSyncEnd{ok = false}).
  Worker(Scheduler& scheduler, engine::Communicator* weight_comm, WorkerOptions options);
  ~Worker();

  // Registers and serves. ok after Shutdown; unavailable when the orchestrator cannot be reached
  // or went silent; other errors for a failed registration.
  Status run();
  const WorkerSummary& summary() const { return summary_; }

 private:
  using Clock = std::chrono::steady_clock;
  Status register_with_orchestrator();
  Status serve(std::chrono::milliseconds heartbeat_interval);  // run()'s loop, once registered
  // Returns false when the message asks the worker to stop.
  bool handle(const Message& message);
  void handle_generate(const GenerateRequest& request, uint64_t correlation_id);
  void run_weight_sync(const WeightSyncBegin& begin);
  void set_threads(const SetThreads& request, uint64_t correlation_id);
  // Makes "weights-<epoch>" the current group (joining it unless already there).
  Status join_weight_group(uint32_t epoch);
  void send_finished();
  // Answers the oldest pending ScoreRequests: one forward pass of the KL reference over them, of
  // at least one request and about options_.score_tokens_per_pass tokens.
  void answer_scores();
  void send_heartbeat();
  void send_error(StatusCode code, MessageKind request_kind, const std::string& message, uint64_t correlation_id);
  void note_malformed();
  template <WireMessage T> void send(const T& message, uint64_t correlation_id = 0);

  Scheduler& scheduler_;
  engine::Communicator* weight_comm_;
  std::unique_ptr<engine::Communicator> joined_comm_;  // a group joined after construction
  int64_t weight_group_epoch_ = -1;                    // of weight_comm_; -1: none
  std::unique_ptr<WeightUpdater> updater_;
  WorkerOptions options_;
  std::unique_ptr<ControlClient> client_;
  std::unique_ptr<LivenessBeacon> beacon_;  // after client_: stops before the client closes
  uint32_t worker_id_ = 0;
  std::unordered_map<uint64_t, uint64_t> correlation_of_;  // request in flight -> its GenerateRequest's
  struct PendingScore {
    ScoreRequest request;
    uint64_t correlation_id = 0;
  };
  std::vector<PendingScore> pending_scores_;  // ScoreRequests not answered yet
  std::unique_ptr<WeightSyncBegin> pending_sync_;
  Clock::time_point last_heard_, last_heartbeat_, last_turn_;
  int64_t tokens_at_last_heartbeat_ = 0;
  double idle_seconds_ = 0;
  // The open "generate" span of the timeline: from the turn the engine got work to the turn it
  // ran out (one span per busy period, not per engine step). -1: none open.
  int64_t generate_start_us_ = -1;
  int64_t generate_steps_ = 0;
  double last_weight_sync_seconds_ = 0;
  StepCostSums step_costs_;  // every engine step's shape and cost (Heartbeat::engine_step_costs)
  double step_cpu_mark_ = -1;   // process CPU seconds at the end of the last engine step (-1: none yet)
  double kl_reference_cpu_ = 0;  // CPU seconds answering ScoreRequests, cumulative (Heartbeat)
  double weight_sync_cpu_ = 0;  // CPU seconds of weight syncs and KL scoring since then (not the steps' cost)
  uint64_t heartbeat_counter_ = 0;
  uint64_t engine_steps_ = 0;  // since the worker started
  WorkerSummary summary_;
};

// Converts a wire request (validated later by Scheduler::add).
GenerationRequest to_generation_request(const GenerateRequest& request);
// Converts a finished sample to its wire result.
GenerateResult to_generate_result(SampleOutput output);

}  // namespace rlrun::rollout
