// run/orchestrator.h - the orchestrator's data loop (design "A sample's life", steps 1-8).
//
// One thread runs everything through the ControlServer: worker registration, heartbeat echoes,
// the rendezvous store, dispatch, results -> reward -> group advantages, the staleness gate,
// batches to the trainer ranks and the weight sync after each step. Every wait (for registration,
// a batch, train results, a sync, an evaluation) is a loop of tick(): receive and handle messages,
// notice failed workers, dispatch what the gate allows and cancel what is too far off-policy. So
// rollout keeps generating while the trainer trains.
//
// The Orchestrator does the I/O and composes the parts that have their own state and rules:
//   Dispatcher       (run/samples/dispatcher.h)   where every sample is: groups, requests, lanes, requeued
//                                           work, scored groups waiting for a batch
//   SyncRounds       (run/training/sync_rounds.h)  weight-sync rounds: target version, epoch, members
//   WorkerSupervisor (run/workers/supervisor.h)   when a rollout worker has failed and when it restarts
//   StepReplay       (run/training/step_replay.h)  the batches since the newest checkpoint: a restarted
//                                           trainer group trains them again (trainer_recovery.cc)
//   StalenessGate, SampleLedger, PromptSource (data/)
//
// Step s (1-based) trains on policy version s - 1; after it, trainer rank 0 sends version s to
// every rollout worker (WeightSyncBegin to each, WeightSyncEnd from each). A worker's death breaks
// the weight group "weights-<epoch>": the next round names a new epoch, and a replacement takes
// requests only once it holds the current weights. A trainer rank's failure restarts every rank
// from the newest checkpoint: the step counter and the weight version go back to its step, and
// the steps after it are trained again from their kept batches (run/training/trainer_recovery.cc).
//
// Checkpoints (run/training/checkpoint.cc): with checkpoint_every N, after every N-th step and the last
// one, every trainer rank gets SaveCheckpoint with the orchestrator's ResumeState (run/training/state.h)
// and the loop waits for CheckpointSaved from each. A SIGINT/SIGTERM does not cut a step in its
// train or weight sync: the step completes, then (checkpoint_every > 0) the last completed step
// is saved and run() returns "interrupted".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config/config.h"
#include "common/observe/log.h"
#include "common/protocol/control_plane.h"
#include "engine/tokenizer/tokenizer.h"
#include "orchestrator/data/batcher.h"
#include "orchestrator/data/prompt_format.h"
#include "orchestrator/data/prompt_source.h"
#include "orchestrator/data/sample_ledger.h"
#include "orchestrator/data/staleness_gate.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/reward/http_reward.h"
#include "orchestrator/reward/reward_function.h"
#include "orchestrator/run/loop_port.h"
#include "orchestrator/run/metrics.h"
#include "orchestrator/run/samples/dispatcher.h"
#include "orchestrator/run/samples/episode_runner.h"
#include "orchestrator/run/samples/evaluator.h"
#include "orchestrator/run/samples/prompt_admission.h"
#include "orchestrator/run/samples/reward_stage.h"
#include "orchestrator/run/step_tally.h"
#include "orchestrator/run/training/state.h"
#include "orchestrator/run/training/step_replay.h"
#include "orchestrator/run/training/sync_rounds.h"
#include "orchestrator/run/workers/core_balance.h"
#include "orchestrator/run/workers/rendezvous.h"
#include "orchestrator/run/workers/supervisor.h"
#include "orchestrator/run/workers/worker_slot.h"
#include "orchestrator/tasks/tasks.h"
#include "orchestrator/tune/loop_profile.h"

namespace rlrun::orchestrator {

// What summary.json reports (run/report.h writes it).
struct RunOutcome {
  int64_t steps_completed = 0;
  SampleLedger::Summary samples;
  std::vector<double> step_reward_means;  // per completed step
  std::optional<double> accuracy_before, accuracy_after;
  // When accuracy_after was not taken at the end of all steps: when it was, or why it is missing.
  std::string accuracy_after_note;
  double loop_seconds = 0;          // from the first dispatch to the end of the last step
  double trainer_idle_seconds = 0;  // trainer waiting for a batch, within loop_seconds
  double rollout_idle_fraction = 0; // mean over rollout workers
  int64_t tokens_generated = 0;
  int64_t tokens_trained = 0;
  int64_t prompts_skipped = 0;      // prompts longer than max_prompt_tokens / max_model_len
  int64_t zero_spread_kept = 0;     // groups with no reward spread trained past max_zero_spread_rounds
  // The first step that waited past max_zero_spread_rounds on groups that all earned nothing, after
  // earlier steps trained on rewarded samples: the policy may have unlearned the task (0: never).
  int64_t reward_collapse_step = 0;
  // kl_reference_on: rollout: groups a rollout worker scored under the KL reference, and those it
  // could not (the trainer scored them); both -1 when the trainer scores every group.
  int64_t kl_reference_scored_by_rollout = -1, kl_reference_scored_by_trainer = -1;
  std::map<std::string, int64_t> peak_memory_bytes;  // by process, from heartbeats
  // balance_cpu_threads where it applies (run/workers/core_balance.h): the threads each side started with,
  // and every change.
  struct CoreChange {
    int64_t step = 0;  // after it
    CoreShare share;
    std::string reason;
  };
  std::optional<CoreShare> cores_base;  // none: not balanced
  std::vector<CoreChange> core_changes;
  // Trainer processes: the backend's peak bytes per phase ("forward_backward", "optimizer"),
  // from TrainResult: what `rlrun plan --compare` sets beside the plan.
  std::map<std::string, std::map<std::string, int64_t>> phase_peak_bytes;
  // One per rollout worker failure; times are Unix seconds (0: did not happen).
  struct WorkerFailure {
    std::string worker, reason;
    double detected_at = 0;
    double replacement_started_at = 0;
    double replacement_ready_at = 0;       // it had the current weights
    double replacement_first_request_at = 0;
  };
  std::vector<WorkerFailure> worker_failures;
  int64_t worker_restarts = 0;
  // One per trainer failure (the whole trainer group restarts, run/training/trainer_recovery.cc); times are
  // Unix seconds (0: did not happen).
  struct TrainerFailure {
    std::string worker, reason;  // the rank found failed first, and how
    int64_t step = 0;            // steps completed when it failed
    std::string checkpoint;      // the folder the group restarted from; "" = the start weights
    int64_t restored_step = 0;   // that checkpoint's step (the step counter goes back to it)
    int64_t steps_redone = 0;    // steps trained again from their kept batches
    int64_t steps_lost = 0;      // steps after the checkpoint whose batches were not kept (trainer_replay_max_steps)
    double detected_at = 0;
    double restart_started_at = 0;  // the new ranks were started (after the back-off)
    double restart_ready_at = 0;    // every rank and every rollout worker holds the restored weights
    double first_step_at = 0;       // the first step after the restart completed
  };
  std::vector<TrainerFailure> trainer_failures;
  int64_t trainer_restarts = 0;
  // Checkpoints not written, the run going on (checkpoint_write_failure: continue).
  struct CheckpointFailure {
    int64_t step = 0;
    std::string error;
  };
  std::vector<CheckpointFailure> checkpoint_failures;
  std::string model_dir;  // <run_dir>/model once trainer rank 0 exported the final weights
  std::string reward_expression;  // task.reward as written
  // The http term's reward server: its URL and what its client counted (no http term: nullopt).
  std::string reward_url;
  std::optional<HttpRewardClient::Stats> reward_server;
  EpisodeRunner::Stats episodes;  // reported when its url is set
  // The loop simulator's advice at the end (run/tuning.cc): null when the run measured too little.
  nlohmann::ordered_json tuning;
  std::string exit = "ok";
};

class Orchestrator {
 public:
  // Everything passed must outlive the Orchestrator. `workers` are the launched processes.
  // `format`: how a prompt's text becomes ids (task.chat_template), over `tokenizer`. `reward`:
  // task.reward over `task`; `http_reward`: its http term's client (null without one).
  Orchestrator(const Config& config, ControlServer& server, Launcher& launcher, RunMetrics& metrics,
               Task& task, const engine::Tokenizer& tokenizer, const PromptFormat& format, RewardFunction& reward,
               HttpRewardClient* http_reward, std::vector<WorkerSlot> workers, const std::string& metrics_jsonl,
               const std::atomic<int>& interrupted);

  // Registration, evaluation, number_of_steps steps, evaluation. Errors name the worker at fault.
  Status run();
  // Continues the run of the checkpoint in `dir` (call before run()): step count, ids, the prompt
  // stream's position and the summary's counters. run() then syncs weight version steps_completed
  // to the rollout workers (the trainers loaded the checkpoint) and skips the evaluation before
  // training. A trainer restart goes back to it until a newer checkpoint is saved.
  void resume_from(const ResumeState& state, const std::string& dir);
  // Where the run's processes are, for the loop simulator (profile.json): nodes used and CPU cores
  // (or GPUs) per node.
  void set_cluster_shape(int64_t nodes, int64_t slots_per_node);
  // Tells every registered worker to exit (best effort, no wait).
  void shutdown_workers(const std::string& reason);
  // The outcome so far; call after run() (whatever it returned) to fill summary.json.
  RunOutcome finish();

 private:
  using Clock = std::chrono::steady_clock;
  using Group = Dispatcher::Group;
  using Sample = Dispatcher::Sample;

  // ---- run/orchestrator.cc: lifecycle and messages
  // How long a waiting loop's tick() polls for messages before it looks at everything else.
  static constexpr std::chrono::milliseconds kTick{20};
  // Sends what can go (act), waits up to `wait` for messages and handles them, then acts on them.
  Status tick(std::chrono::milliseconds wait, bool dispatch);
  // What the state allows now: the weight sync's next move, requeued and new groups. Also before a
  // tick's wait, so what the caller just made possible (a sync wanted, a gate opened by the batch
  // it took) goes out at once rather than after a wait with nothing to wake it.
  Status act(bool dispatch);
  // Ticks until `done` holds or an error (done's, or the loop's) ends the wait (LoopPort::wait).
  Status wait_until(const std::function<Result<bool>()>& done, bool dispatch);
  // The parts' way out: messages through the ControlServer, waits through wait_until().
  LoopPort port();
  // An error once SIGINT/SIGTERM came (the first waits while committing_); tick() asks first, and
  // so does run_step() before it takes a batch, which may be ready without a single tick.
  Status check_interrupt();
  Status handle(const Incoming& in);
  Status handle_register(const Incoming& in, const Register& reg);
  void handle_heartbeat(const Incoming& in, const Heartbeat& hb);
  // `failure`, or the death of a worker that caused it (a step failing on the ranks that outlived
  // another) when one shows within a short grace.
  Status blame_dead_worker(const Status& failure);
  Status wait_for_registration();
  Status format_warm_start();  // warm_start.cc; after a trainer restart it goes on where it was
  // Which prompts a step trained, for metrics.jsonl: group ids and an XXH3-64 hash of the
  // prompts' texts in batch order, as 16 hex digits (a resumed run must train the same ones).
  struct BatchIdentity {
    std::vector<uint64_t> group_ids;
    std::string prompt_hash;
  };
  static BatchIdentity batch_identity(const std::vector<Group>& batch);  // run/training/checkpoint.cc
  void write_step_line(const std::map<std::string, double>& trainer_metrics, double wait_s, double train_s,
                       double sync_s, const StepRecord& record, std::optional<double> eval_accuracy);
  void print_progress(double reward_mean);
  double loop_seconds() const;  // this process's loop time plus that of the parts resumed from
  double rollout_idle_fraction(double loop) const;  // mean over rollout workers of idle / loop (0 for loop <= 0)
  WorkerSlot* worker_by_name(const std::string& name);

  // ---- run/training/checkpoint.cc
  ResumeState capture_state() const;  // as of now: call when a step has just completed
  Status save_checkpoint(const ResumeState& state);
  Status checkpoint_if_due();         // after a step
  Status checkpoint_on_interrupt();   // the last completed step, unless it was just saved
  // A save the trainers answered with an error (disk full, no permission: they removed its
  // partial folder). checkpoint_write_failure: stop returns an error naming the path, the
  // previous checkpoint and what to do; continue records it in the outcome and returns ok.
  Status checkpoint_failed(int64_t step, const std::string& error);
  // The weights of the last completed step as an HF folder in <run_dir>/model (trainer rank 0),
  // at the end of the run, also one stopped early; a failure is logged, the run's outcome stands.
  void export_final_model();

  // ---- run/training/weight_sync.cc: weight sync rounds
  // Blocks (ticking) until every rollout worker holds `version`, re-forming the group as needed.
  Status weight_sync(uint64_t version);
  Status advance_sync();  // in tick: finishes, times out or starts a round
  static std::string sync_errors(const SyncRounds::Outcome& round);  // "member: error; ..."
  void start_round(uint64_t version);
  Status finish_round();
  bool group_complete() const;  // every rollout worker registered and alive

  // ---- run/training/trainer_recovery.cc: a failed trainer rank restarts the whole trainer group
  // A trainer rank found dead or hung: remembered (the first one, until recover_trainers() takes
  // it) and returned as the error that ends the wait in progress. tick() keeps returning it, except
  // during an evaluation (which needs no trainer).
  Status note_trainer_failure(const WorkerSlot& w, const std::string& why);
  Status trainer_failure_status() const;
  // Restarts the trainer group from the newest checkpoint (or the start weights), as many times
  // as failures come, up to max_trainer_restarts; then the step counter is back at the
  // checkpoint's step, every rollout worker holds its weights, and the steps after it are to be
  // trained again (replay_). The error once the restarts are used up names the rank's log.
  Status recover_trainers();
  Status restart_trainer_group(RunOutcome::TrainerFailure& record);  // one try
  // Runs `op`, and again after each trainer failure it ends with once the group restarted.
  Status recovering(const std::function<Status()>& op);
  // The trainer ranks that have not answered: those `answered` says no to. Past
  // train_step_timeout_seconds since `started`, the first of them is hung (note_trainer_failure).
  Status check_train_timeout(const std::string& what, Clock::time_point started,
                             const std::function<bool(int rank)>& answered);

  // ---- run/workers/supervise.cc: rollout worker failures, restarts, timeouts (rules: run/workers/supervisor.h)
  Status supervise();  // in tick
  // Kills (unless it exited) and schedules the restart of workers_[index], or fails the run when
  // its restarts are used up. `why`: "killed by signal 9 (SIGKILL)", "silent for 12 s", ...
  Status fail_worker(int index, const std::string& why, bool exited);
  Status restart_worker(int index);

  // ---- run/step.cc: one RL step
  Status run_step();
  // The batch of step `step` (waits, packs): record.build.per_rank is empty when no sample fitted.
  Status new_step_batch(int64_t step, StepRecord& record, double& wait_s);
  // Sends build's batches to the trainer ranks and ticks until every rank answers; `what` names
  // the step in errors.
  Status train(const BatchBuild& build, const std::string& what, bool allow_dispatch);
  struct RewardStats {
    double mean = 0, std = 0, advantage_abs_mean = 0;
  };
  // How every trainer batch is packed (RL and warm-start steps): the config's rows and ranks, and
  // at least number_of_minibatches micro-batches per rank.
  PackOptions pack_options() const;
  // Packs `batch` into one TrainBatch per rank; too-long samples are discarded and counted, the
  // ids of the rest go to `sample_ids`.
  BatchBuild pack_batch(const std::vector<Group>& batch, uint64_t step, RewardStats& rewards,
                        std::vector<uint64_t>& sample_ids);
  // Takes prompts_batch_size_for_trainer ready groups (discarding stale ones): false if too few.
  bool take_batch(std::vector<Group>& out);

  // ---- run/samples/dispatch.cc: the sample path
  void dispatch();
  // How the Dispatcher's requests leave: through the ControlServer to workers_[worker].
  Status send_request(int worker, const GenerateRequest& request);
  void cancel_off_policy();
  void on_result(const GenerateResult& result);
  // A group whose samples are all back: its costs to the loop profile, then the reward stage.
  void complete_group(Group group);
  Result<std::optional<double>> evaluate(const std::string& when);

  // The held-out accuracy summary.json promises, when the run stops before its last step (`why`:
  // an interrupt, no batch): the rollout workers still serve. Fills accuracy_after and its note.
  void evaluate_at_stop(const std::string& why);
  int64_t outstanding_groups() const;
  uint64_t sample_id(uint64_t group, uint32_t index) const { return dispatcher_.sample_id(group, index); }

  const Config& config_;
  ControlServer& server_;
  Launcher& launcher_;
  RunMetrics& metrics_;
  Task& task_;
  const engine::Tokenizer& tokenizer_;
  const PromptFormat& format_;
  RewardFunction& reward_;
  HttpRewardClient* http_reward_;
  std::vector<WorkerSlot> workers_;
  std::string metrics_jsonl_;
  const std::atomic<int>& interrupted_;

  RendezvousService rendezvous_;
  StalenessGate gate_;
  SampleLedger ledger_;
  uint32_t group_size_;
  std::vector<int32_t> stop_ids_;
  bool accepting_exits_ = false;  // after shutdown_workers: exits are expected
  // This turn left messages unread: a heartbeat may be among them, so silence is not judged.
  bool inbox_backlogged_ = false;

  Dispatcher dispatcher_;             // groups in flight, requests, lanes, scored groups (run/samples/dispatcher.h)
  WorkerSupervisor supervisor_;       // when a rollout worker has failed, when it restarts
  // The batch of the step in training and those kept since the newest checkpoint, for a trainer
  // restart (run/training/step_replay.h).
  StepReplay replay_;
  StepTally steps_;  // the completed steps: steps_.completed is the weight version (run/step_tally.h)
  // Why no batch can form ("" while one can): no prompt fits, or no group teaches anything.
  const std::string& no_batch() const;
  // Warnings that can recur every group or message: the first, then one a minute with a count.
  log::RateLimited generation_error_log_{std::chrono::seconds(60)}, too_long_log_{std::chrono::seconds(60)},
      unexpected_message_log_{std::chrono::seconds(60)};

  // Checkpoints and resume (run/training/checkpoint.cc).
  std::optional<ResumeState> resumed_;          // the state this run continues from
  std::optional<ResumeState> last_step_state_;  // captured when the last step completed
  int64_t last_checkpoint_step_ = 0;
  bool committing_ = false;         // in a step's train + sync or a save: an interrupt waits
  bool stopped_by_interrupt_ = false;
  // Trainer recovery (run/training/trainer_recovery.cc).
  struct PendingTrainerFailure {
    std::string worker, reason;
    double detected_at = 0;
  };
  std::optional<PendingTrainerFailure> trainer_failure_;
  struct CheckpointRef {
    std::string dir;
    ResumeState state;
  };
  std::optional<CheckpointRef> newest_checkpoint_;  // saved by this run, or resumed from
  int first_step_record_ = -1;  // index in outcome_.trainer_failures waiting for its first_step_at
  bool restoring_trainers_ = false;  // from the kill to the restored weights' sync: no catch-up rounds
  std::map<int, CheckpointSaved> checkpoints_saved_;  // by rank

  // Per-step waits.
  std::map<int, TrainResult> train_results_;  // by rank
  std::string train_error_;
  // The rank whose step failed in a collective (unavailable, timeout: its data-parallel peer died
  // or stopped); "" otherwise.
  std::string train_error_lost_group_;
  SyncRounds sync_;  // weight-sync rounds: target version, epoch, the round in flight (run/training/weight_sync.cc)

  // samples.jsonl: a few completions of every log_samples_every-th step.
  static constexpr size_t kLoggedSamples = 4;
  // `step`: evaluations, the steps completed; training samples, the step they train.
  void log_samples(const char* kind, int64_t step, const std::vector<nlohmann::ordered_json>& samples) const;
  // Appends `lines` to the run-folder file `path` (metrics.jsonl, samples.jsonl), first renaming
  // it <path>.1 when it passed log_files_max_mb; a failure is logged, never the run's error.
  void append_run_file(const std::string& path, const std::string& lines) const;

  // ---- run/tuning.cc: what the loop costs (profile.json) and what the simulator advises
  static constexpr int64_t kProfileEvery = 10;  // steps between profile.json writes
  static constexpr int64_t kAdviseEvery = 50;   // steps between advice refreshes (Prometheus gauges)
  static constexpr int64_t kAdviseSteps = 30;   // steps those refreshes simulate (the end: the run's own)
  // After a step: its costs (rank 0's metrics), the profile file, the gauges.
  void profile_step(int64_t step, const std::map<std::string, double>& rank0, double train_seconds);
  void save_profile();
  // Simulates the run's settings and the candidates; sets the gauges; at_end: summary.json's
  // "tuning" and, past advise_idle_threshold, the log line that says what to change.
  void advise(bool at_end);
  tune::LoopProfile profile_;
  // Rewards, advantages, the zero-spread policy, KL reference scoring (run/samples/reward_stage.h).
  RewardStage rewards_;
  // The next prompt that fits becomes a group (run/samples/prompt_admission.h).
  PromptAdmission admission_;
  EpisodeRunner episodes_;  // rows an environment server runs (run/samples/episode_runner.h)
  Evaluator evaluator_;     // held-out accuracy (run/samples/evaluator.h)
  double loop_cpu_start_ = 0;  // the orchestrator's CPU seconds when the loop began
  bool profile_write_failed_ = false;

  // ---- run/workers/cores.cc: balance_cpu_threads (run/workers/core_balance.h)
  void start_core_balance();         // when the loop starts: on, where it applies
  void balance_cores(int64_t step);  // after a step: a window's measures, a change sent
  void send_threads(WorkerSlot& w);  // the threads its role computes with now, if it has others
  void note_threads(const WorkerSlot& w);  // the rlrun_worker_compute_threads gauge
  std::optional<CoreBalance> core_balance_;
  LoadWindows load_windows_;
  LoopTotals loop_totals(int64_t step) const;
  double rollout_scoring_cpu_ = 0;  // CPU seconds of every rollout process scoring the KL reference

  RunOutcome outcome_;
  Clock::time_point last_tick_, loop_start_;
  bool looping_ = false, trainer_waiting_ = false;
  double last_sync_seconds_ = 0;
  int64_t weight_bytes_ = 0;  // f32 parameters sent per sync (flat buffer)
};

}  // namespace rlrun::orchestrator
