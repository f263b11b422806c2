// run/orchestrator.h - the orchestrator's data loop (docs/design.md, "A sample's life", steps 1-8).
//
// One thread runs everything through the ControlServer. Every wait (for registration, a batch,
// train results, a sync, an evaluation, a checkpoint) is a loop of tick(): receive and handle
// messages, supervise the workers, poll the reward server and the environment, dispatch what the
// staleness gate allows and cancel what is too far off-policy. So rollout keeps generating while
// the trainer trains.
//
// The Orchestrator keeps that loop and the step, and composes the parts that have their own state,
// rules and statistics (run/README.md says where each lives):
//   samples:  PromptAdmission -> Dispatcher -> RewardStage (ZeroSpreadPolicy, ReferenceScoring)
//             -> a batch; EpisodeRunner for rows an environment runs; Evaluator
//   workers:  WorkerFleet (registration, heartbeats, failures, restarts), ThreadBalancer
//   training: TrainerGroup (batches, failures, restarts), WeightSyncDriver, CheckpointKeeper,
//             StepReplay (the batches a restarted trainer group trains again)
//   record:   RunRecorder (metrics.jsonl, samples.jsonl, progress, profile.json, advice)
// Parts reach outside through a LoopPort (run/loop_port.h): this class's sends and waits.
//
// Step s (1-based) trains on policy version s - 1; after it, trainer rank 0 sends version s to
// every rollout worker. A SIGINT/SIGTERM does not cut a step in its train or weight sync: the step
// completes, then (checkpoint_every > 0) the last completed step is saved and run() returns
// "interrupted"; a second one stops at once. A trainer rank's failure restarts every rank from the
// newest checkpoint and trains the steps after it again (run/recovery.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "common/protocol/control_plane.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/data/batcher.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/data/staleness_gate.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/reward/http_reward.h"
#include "orchestrator/reward/reward_function.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/outcome.h"
#include "orchestrator/run/run_recorder.h"
#include "orchestrator/run/samples/dispatcher.h"
#include "orchestrator/run/samples/episode_runner.h"
#include "orchestrator/run/samples/evaluator.h"
#include "orchestrator/run/samples/prompt_admission.h"
#include "orchestrator/run/samples/reward_stage.h"
#include "orchestrator/run/step_tally.h"
#include "orchestrator/run/training/checkpoint_keeper.h"
#include "orchestrator/run/training/state.h"
#include "orchestrator/run/training/step_replay.h"
#include "orchestrator/run/training/trainer_group.h"
#include "orchestrator/run/training/weight_sync_driver.h"
#include "orchestrator/run/workers/rendezvous.h"
#include "orchestrator/run/workers/thread_balancer.h"
#include "orchestrator/run/workers/worker_fleet.h"
#include "orchestrator/tasks/tasks.h"

namespace rlrun::orchestrator {

// How every trainer batch is packed (RL and warm-start steps, run/step.cc): the config's rows and
// ranks, and at least number_of_minibatches micro-batches per rank.
PackOptions pack_options(const Config& config);

class Orchestrator {
 public:
  // Everything passed must outlive the Orchestrator. `workers` are the launched processes.
  // `format`: how a prompt's text becomes ids (task.chat_template), over `tokenizer`. `reward`:
  // task.reward over `task`; `http_reward`: its http term's client (null without one). Files go
  // to config.run_dir.
  Orchestrator(const Config& config, ControlServer& server, Launcher& launcher, RunMetrics& metrics, Task& task,
               const engine::Tokenizer& tokenizer, const PromptFormat& format, RewardFunction& reward,
               HttpRewardClient* http_reward, std::vector<WorkerSlot> workers, const std::atomic<int>& interrupted);

  // Registration, evaluation, number_of_steps steps, evaluation. Errors name the worker at fault.
  Status run();
  // Continues the run of the checkpoint in `dir` (call before run()): step count, ids, the prompt
  // stream's position and the summary's counters. run() then syncs weight version steps_completed
  // to the rollout workers (the trainers loaded the checkpoint) and skips the evaluation before
  // training. A trainer restart goes back to it until a newer checkpoint is saved.
  void resume_from(const ResumeState& state, const std::string& dir);
  // Where the run's processes are, for the loop simulator (profile.json): nodes used and CPU cores
  // (or GPUs) per node.
  void set_cluster_shape(int64_t nodes, int64_t slots_per_node) { recorder_.set_cluster_shape(nodes, slots_per_node); }
  // Tells every registered worker to exit (best effort, no wait).
  void shutdown_workers(const std::string& reason) { fleet_.shutdown(reason); }
  // The outcome so far, from every part; call after run() (whatever it returned) to fill summary.json.
  RunOutcome finish();

 private:
  using Clock = std::chrono::steady_clock;
  using Group = Dispatcher::Group;
  // How long a waiting loop's tick() polls for messages before it looks at everything else.
  static constexpr std::chrono::milliseconds kTick{20};

  // ---- the loop (orchestrator.cc)
  // Acts, waits up to `wait` for messages and handles them, supervises, then acts again.
  Status tick(std::chrono::milliseconds wait, bool dispatch);
  // What the state allows now: the weight sync's next move, requeued and new work. Also before a
  // tick's wait, so what the caller just made possible goes out at once.
  Status act(bool dispatch);
  Status wait_until(const std::function<Result<bool>()>& done, bool dispatch);  // LoopPort::wait
  LoopPort port();
  Status handle(const Incoming& in);
  Status supervise();  // in tick: the fleet's verdicts, overdue KL scoring and requests
  // An error once SIGINT/SIGTERM came (the first waits while committing_).
  Status check_interrupt();
  // Runs `op` as one that a first interrupt does not cut short (a save, an export, an evaluation).
  Status uninterrupted(const std::function<Status()>& op);
  Status wait_for_registration();

  // ---- the sample path (samples/dispatch.cc)
  void dispatch();
  void on_result(const GenerateResult& result);
  void complete_group(Group group);  // its costs to the loop profile, then the reward stage
  void release_work(int worker);     // a failed rollout worker's work goes back
  int64_t outstanding_groups() const;
  const std::string& no_batch() const;  // why no batch can form ("" while one can)

  // ---- the step (step.cc)
  Status run_step();
  // The batch of step `step` (waits, packs): record.build.per_rank is empty when no sample fitted.
  Status new_step_batch(int64_t step, StepRecord& record, double& wait_s);
  BatchBuild pack_batch(const std::vector<Group>& batch, uint64_t step, StepRecord& record);
  // What a completed step leaves: its metrics.jsonl line, its costs, a thread change, the progress line.
  void step_done(const StepRecord& done, double wait_s, double train_s, std::optional<double> accuracy);
  ResumeState capture_state() const;  // as of now: call when a step has just completed
  Status format_warm_start();         // warm_start.cc; after a trainer restart it goes on where it was
  // The held-out accuracy summary.json promises when the run stops before its last step (`why`).
  void evaluate_at_stop(const std::string& why);
  void export_model();  // the final weights as an HF folder (CheckpointKeeper::export_model)

  // ---- failures (recovery.cc)
  // `failure`, or the death of a worker that caused it, when one shows within a short grace.
  Status blame_dead_worker(const Status& failure);
  Status recovering(const std::function<Status()>& op);  // op, again after each trainer restart
  Status recover_trainers();
  Status restart_trainer_group();

  const Config& config_;
  ControlServer& server_;
  Task& task_;
  RunMetrics& metrics_;
  const engine::Tokenizer& tokenizer_;
  const PromptFormat& format_;
  const std::atomic<int>& interrupted_;
  const std::vector<int32_t> stop_ids_;  // the policy's end-of-text tokens, end of turn first
  RendezvousService rendezvous_;
  StalenessGate gate_;
  SampleLedger ledger_;
  StepTally steps_;  // the completed steps: steps_.completed is the weight version
  StepReplay replay_;  // the batches since the newest checkpoint (run/training/step_replay.h)
  WorkerFleet fleet_;
  Dispatcher dispatcher_;
  RunRecorder recorder_;
  RewardStage rewards_;
  PromptAdmission admission_;
  EpisodeRunner episodes_;
  Evaluator evaluator_;
  ThreadBalancer threads_;
  TrainerGroup trainers_;
  WeightSyncDriver sync_;
  CheckpointKeeper checkpoints_;
  bool committing_ = false;  // in a step's train + sync or a save: a first interrupt waits
  bool stopped_by_interrupt_ = false;
  bool evaluating_at_stop_ = false;  // the held-out evaluation of a run that stops early
  bool trainer_waiting_ = false;  // for a batch: idle
  // This turn left messages unread: a heartbeat may be among them, so silence is not judged.
  bool inbox_backlogged_ = false;
  Clock::time_point last_tick_;
  // Warnings that can recur every group or message: the first, then one a minute with a count.
  log::RateLimited generation_error_log_{std::chrono::seconds(60)}, too_long_log_{std::chrono::seconds(60)},
      unexpected_message_log_{std::chrono::seconds(60)};
};

}  // namespace rlrun::orchestrator
