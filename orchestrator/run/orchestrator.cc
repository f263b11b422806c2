// run/orchestrator.cc - the orchestrator's lifecycle: its parts wired together, registration, the
// tick and the messages it routes, the run from the first evaluation to the last, the summary.
#include "orchestrator/run/orchestrator.h"

#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "common/observe/timeline.h"
#include "orchestrator/roles/model_from_config.h"

namespace rlrun::orchestrator {

namespace {

using std::chrono::milliseconds;

// Workers build models and join groups before registering: generous on a loaded machine.
constexpr std::chrono::seconds kRegistrationTimeout{300};

DispatchOptions dispatch_options(const Config& config, std::vector<int32_t> stop_ids) {
  DispatchOptions o;
  o.group_size = static_cast<uint32_t>(config.group_size);
  o.individual_lanes = config.enable_individual_sample_lanes;
  o.lanes_per_worker = static_cast<int>(config.max_concurrent_prompts_per_server);
  o.temperature = static_cast<float>(config.temperature);
  o.top_p = static_cast<float>(config.top_p);
  o.max_tokens = static_cast<uint32_t>(config.max_tokens);
  o.seed = static_cast<uint64_t>(config.seed);
  o.eval_temperature = static_cast<float>(config.task.eval_temperature);
  o.stop_ids = std::move(stop_ids);
  return o;
}

SupervisionPolicy supervision_policy(const Config& config) {
  return SupervisionPolicy{config.heartbeat_timeout_seconds, 300, config.worker_restart_backoff_seconds,
                           config.restart_backoff_max_seconds, static_cast<int>(config.max_worker_restarts)};
}

// The bytes one weight sync moves (fp32 weights, or with lora_rank > 0 the adapters alone).
// load_config() read the model already.
int64_t weight_bytes(const Config& config) {
  const Result<engine::ModelConfig> model = model_config_from(config.model);
  if (!model.ok()) return 0;
  const int64_t elements = config.lora_rank > 0 ? lora_elements(config, *model) : model->num_parameters();
  return elements * static_cast<int64_t>(sizeof(float));
}

}  // namespace

Orchestrator::Orchestrator(const Config& config, ControlServer& server, Launcher& launcher, RunMetrics& metrics,
                           Task& task, const engine::Tokenizer& tokenizer, const PromptFormat& format,
                           RewardFunction& reward, HttpRewardClient* http_reward, std::vector<WorkerSlot> workers,
                           const std::atomic<int>& interrupted)
    : config_(config), server_(server), task_(task), metrics_(metrics), tokenizer_(tokenizer), format_(format),
      interrupted_(interrupted), stop_ids_(run_stop_token_ids(config, tokenizer, format.end_of_turn())),
      gate_(GateOptions{config.max_async_rollout, config.max_off_policy_steps, config.prompts_batch_size_for_trainer}),
      replay_(config.trainer_replay_max_steps),
      fleet_(std::move(workers), supervision_policy(config), launcher, metrics, port(),
             WorkerFleet::Hooks{[this](int worker) { release_work(worker); },
                                [this](const WorkerSlot& w, const std::string& why) { return trainers_.note_failure(w, why); }}),
      dispatcher_(dispatch_options(config, stop_ids_), fleet_.slots(),
                  [this](int worker, const GenerateRequest& request) {
                    fleet_.on_request_sent(worker);
                    return server_.send(fleet_.slots()[worker].name, request);
                  }),
      recorder_(config, config.run_dir, steps_, fleet_.slots(), metrics, port()),
      rewards_(config, reward, http_reward, format, dispatcher_, ledger_, metrics, recorder_.profile(), steps_,
               [this](int worker, const ScoreRequest& request) { return server_.send(fleet_.slots()[worker].name, request); }),
      admission_(config, task, format, dispatcher_, ledger_, [this](const Problem& p) { return episodes_.runs(p); }),
      episodes_(config, tokenizer, task, dispatcher_, fleet_.slots(), ledger_, metrics, rewards_, steps_, port(),
                EpisodeRunner::Hooks{[this](int worker, const GenerateRequest& r) {
                                       fleet_.on_request_sent(worker);
                                       return server_.send(fleet_.slots()[worker].name, r);
                                     },
                                     [this](Group group) { complete_group(std::move(group)); },
                                     [this](uint64_t problem, bool correct) { evaluator_.on_episode(problem, correct); }}),
      evaluator_(config, task, format, tokenizer, reward, dispatcher_, fleet_.slots(), metrics, port(),
                 Evaluator::Episodes{[this](const Problem& p) { return episodes_.runs(p); },
                                     [this](uint64_t problem) { episodes_.start_eval(problem); }},
                 [this](int64_t step, const std::vector<nlohmann::ordered_json>& shown) {
                   recorder_.log_samples("eval", step, shown);
                 }),
      threads_(config, fleet_.slots(), metrics, port()),
      trainers_(config, fleet_.slots(), launcher, metrics, port(),
                TrainerGroup::Hooks{[this](const Status& failure) { return blame_dead_worker(failure); }}),
      sync_(config, fleet_.slots(), metrics,
            weight_bytes(config), port(),
            WeightSyncDriver::Hooks{
                [this](int worker, const std::string& why) { return fleet_.fail(worker, why, false); },
                [this](const WorkerSlot& w, const std::string& why) { return trainers_.note_failure(w, why); },
                [this](uint32_t epoch) { rendezvous_.abandon(server_, weight_group_key_prefix(static_cast<int>(epoch))); },
                [this] { return replay_.in_progress() != nullptr; },
                [this](uint64_t version) { fleet_.weights_synced(version); }}),
      checkpoints_(config, fleet_.slots(), trainers_, replay_, port()),
      last_tick_(Clock::now()) {}

LoopPort Orchestrator::port() {
  LoopPort p;
  p.send = [this](const std::string& peer, const Message& message) { return server_.send(peer, message); };
  p.wait = [this](const std::function<Result<bool>()>& done, bool allow_dispatch) { return wait_until(done, allow_dispatch); };
  return p;
}

Status Orchestrator::wait_until(const std::function<Result<bool>()>& done, bool allow_dispatch) {
  while (true) {
    RLRUN_ASSIGN_OR_RETURN(const bool finished, done());
    if (finished) return Status();
    if (evaluating_at_stop_ && trainers_.failed() &&
        std::none_of(fleet_.slots().begin(), fleet_.slots().end(), [](const WorkerSlot& w) { return w.serves(); }))
      return unavailable("no rollout worker holds the trained weights and the trainer that could send them is gone");
    RLRUN_RETURN_IF_ERROR(tick(kTick, allow_dispatch));
  }
}

Status Orchestrator::check_interrupt() {
  const int interrupts = interrupted_.load();
  if (interrupts >= 2) return unavailable("interrupted twice (SIGINT/SIGTERM): stopped at once, without a checkpoint");
  if (interrupts == 1 && !committing_) {
    stopped_by_interrupt_ = true;
    return unavailable("interrupted (SIGINT/SIGTERM)");
  }
  return Status();
}

Status Orchestrator::uninterrupted(const std::function<Status()>& op) {
  const bool was_committing = committing_;
  committing_ = true;  // a first interrupt waits for it; a second one stops it (tick)
  const Status s = op();
  committing_ = was_committing;
  return s;
}

Status Orchestrator::handle(const Incoming& in) {
  if (rendezvous_.handle(server_, in)) return Status();
  const Message& m = in.message;
  if (const auto* reg = m.get<Register>()) {
    RLRUN_ASSIGN_OR_RETURN(WorkerSlot* const w, fleet_.on_register(in, *reg));
    if (w != nullptr) threads_.on_register(*w);
    return Status();
  }
  if (!fleet_.heard(in.peer)) return Status();  // a dead worker's, sent before it died
  if (const auto* hb = m.get<Heartbeat>()) {
    fleet_.on_heartbeat(in, *hb);
    tune::LoopProfile& profile = recorder_.profile();
    if (hb->engine_step_costs.size() > 0)  // malformed: ignored
      (void)profile.on_heartbeat(in.peer, hb->engine_step_costs.span(), hb->last_weight_sync_seconds);
    if (hb->kl_reference_tokens > 0)
      profile.on_reference_scoring(in.peer, hb->kl_reference_seconds, static_cast<double>(hb->kl_reference_tokens));
    if (WorkerSlot* w = fleet_.by_name(in.peer)) threads_.on_scoring_seconds(*w, hb->kl_reference_seconds);
  } else if (const auto* result = m.get<GenerateResult>()) {
    on_result(*result);
  } else if (const auto* scored = m.get<ScoreResult>()) {
    rewards_.on_score_result(*scored);
  } else if (const auto* tr = m.get<TrainResult>()) {
    trainers_.on_result(*tr);
    fleet_.on_train_result(in.peer, *tr);
  } else if (const auto* end = m.get<WeightSyncEnd>()) {
    sync_.on_end(in.peer, *end);
  } else if (const auto* saved = m.get<CheckpointSaved>()) {
    if (const WorkerSlot* w = fleet_.by_name(in.peer); w != nullptr && w->role == Role::kTrainer)
      checkpoints_.on_saved(w->rank, *saved);
  } else if (const auto* err = m.get<ErrorReply>()) {
    const WorkerSlot* w = fleet_.by_name(in.peer);
    if (err->request_kind == static_cast<uint16_t>(MessageKind::kTrainBatch)) {
      trainers_.on_error(in.peer, *err);
    } else if (err->request_kind == static_cast<uint16_t>(MessageKind::kSaveCheckpoint) && w != nullptr) {
      checkpoints_.on_error(w->rank, in.peer, *err);
    } else {
      log::warn(str(in.peer, " reported an error: ", err->message));
    }
  } else {
    unexpected_message_log_.write(log::Level::kWarn, str("unexpected ", message_kind_name(m.kind()), " from ", in.peer));
  }
  return Status();
}

Status Orchestrator::act(bool allow_dispatch) {
  RLRUN_RETURN_IF_ERROR(sync_.advance());
  dispatcher_.send_requeued();  // already admitted work first, also while dispatch is held
  if (!allow_dispatch) return Status();
  const auto off_policy = [&](uint64_t version) { return gate_.should_cancel(version, steps_.completed); };
  for (auto& [worker, ids] : dispatcher_.take_off_policy(off_policy)) {
    Cancel cancel;
    cancel.request_ids = std::move(ids);
    cancel.reason = "off_policy";
    const std::string& name = fleet_.slots()[worker].name;
    log::info(str("cancelling ", cancel.request_ids.size(), " request(s) on ", name,
                  ": more than max_off_policy_steps = ", config_.max_off_policy_steps, " weight updates old"));
    (void)server_.send(name, cancel);
  }
  episodes_.cancel_off_policy(off_policy);
  dispatch();
  return Status();
}

Status Orchestrator::tick(milliseconds wait, bool allow_dispatch) {
  RLRUN_RETURN_IF_ERROR(check_interrupt());
  RLRUN_RETURN_IF_ERROR(act(allow_dispatch));
  Result<Incoming> in = server_.poll(wait);
  inbox_backlogged_ = false;
  for (int n = 1; in.ok(); ++n) {
    RLRUN_RETURN_IF_ERROR(handle(*in));
    if (n == 1000) {  // the rest next turn (not polled: a polled message must be handled)
      inbox_backlogged_ = true;
      break;
    }
    in = server_.poll(milliseconds(0));
  }
  rendezvous_.expire(server_);
  RLRUN_RETURN_IF_ERROR(supervise());  // with a trainer failure noted (not during an evaluation)
  RLRUN_RETURN_IF_ERROR(rewards_.poll());
  RLRUN_RETURN_IF_ERROR(episodes_.poll());
  RLRUN_RETURN_IF_ERROR(act(allow_dispatch));
  const double dt = seconds_since(last_tick_);
  last_tick_ = Clock::now();
  if (recorder_.looping()) {
    if (trainer_waiting_) recorder_.trainer_idle(dt);
    fleet_.count_idle(dt, [&](int i) { return dispatcher_.lanes_used(i) > 0 || episodes_.calls_on(i) > 0; });
  }
  metrics_.queue_depth->Set(static_cast<double>(dispatcher_.scored().size()));
  metrics_.in_flight_groups->Set(static_cast<double>(dispatcher_.in_flight().size()));
  metrics_.async_level->Set(static_cast<double>(gate_.current_async_level(outstanding_groups())));
  return Status();
}

Status Orchestrator::supervise() {
  RLRUN_RETURN_IF_ERROR(fleet_.take_exits());
  if (fleet_.shutting_down()) return Status();
  // A trainer failure ends the wait in progress, except an evaluation's (it needs no trainer).
  if (trainers_.failed() && !evaluator_.running()) return trainers_.failure();
  RLRUN_RETURN_IF_ERROR(fleet_.judge(inbox_backlogged_, evaluator_.running()));
  rewards_.release_overdue(config_.rollout_request_timeout_seconds);
  if (inbox_backlogged_) return Status();
  // A worker blocked in a weight sync is bounded there (WeightSyncDriver).
  const auto syncing = [&](int worker) { return sync_.waits_for(fleet_.slots()[worker].name); };
  if (std::optional<Dispatcher::Overdue> late = dispatcher_.overdue(config_.rollout_request_timeout_seconds, syncing))
    return fleet_.fail(late->worker,
                       str("left request ", late->request, " unanswered for ", late->age_seconds,
                           " s (rollout_request_timeout_seconds = ", config_.rollout_request_timeout_seconds, ")"),
                       false);
  return Status();
}

Status Orchestrator::wait_for_registration() {
  ScopedSpan span("wait_for_workers", "orchestrator");
  const auto deadline = Clock::now() + kRegistrationTimeout;
  while (!fleet_.all_registered()) {
    if (Clock::now() > deadline) {
      for (const WorkerSlot& w : fleet_.slots()) {
        if (!w.registered)
          return timeout_error(str("worker ", w.name, " did not register within ", kRegistrationTimeout.count(),
                                   " s; see its log: ", w.log_path));
      }
    }
    RLRUN_RETURN_IF_ERROR(tick(milliseconds(50), false));
  }
  return Status();
}

void Orchestrator::resume_from(const ResumeState& s, const std::string& dir) {
  checkpoints_.resume_from(s, dir);
  recorder_.resume_from(s);
  rewards_.set_resumed();
  steps_.completed = s.steps_completed;
  steps_.tokens_generated = s.tokens_generated;
  steps_.tokens_trained = s.tokens_trained;
  steps_.reward_means = s.step_reward_means;
  dispatcher_.restore_next_ids(s.next_group, s.next_request);
  admission_.resume_from(s.task_draws, s.prompts_skipped);
  evaluator_.set_before(s.accuracy_before);
  for (WorkerSlot& w : fleet_.slots()) {
    auto it = s.rollout_idle_seconds.find(w.name);
    if (it != s.rollout_idle_seconds.end()) w.idle_seconds = it->second;
  }
  metrics_.trainer_step->Set(static_cast<double>(s.steps_completed));
}

Status Orchestrator::run() {
  const std::optional<ResumeState>& resumed = checkpoints_.resumed();
  // Counted from the start: a resume after a SIGKILL reads it (run/training/state.h).
  if (Status s = admission_.open_count(dispatch_count_path(config_.run_dir), resumed ? resumed->samples.dispatched : 0);
      !s.ok())
    log::warn(str(s.message(), "; if this orchestrator is killed, a resumed run cannot count the samples it dispatched "
                  "after its last checkpoint"));
  RLRUN_RETURN_IF_ERROR(episodes_.start(format_, stop_ids_));
  RLRUN_RETURN_IF_ERROR(wait_for_registration());
  // A resumed run continues from warm-started weights; a fresh one learns the answer format first.
  // From here a trainer rank that dies or hangs restarts the trainer group (run/recovery.cc).
  if (!resumed) RLRUN_RETURN_IF_ERROR(recovering([this] { return format_warm_start(); }));
  // Every rollout worker starts from the trainer's weights (model.checkpoint or init, then the
  // format warm-start: version 0; a resumed run's checkpoint: its step).
  RLRUN_RETURN_IF_ERROR(recovering([this] { return sync_.sync(steps_.version(), false); }));
  if (resumed && rollout_scores_kl_reference(config_))
    log::info("kl_reference_on: rollout: a resumed run's rollout workers have no copy of the KL reference (it comes "
              "with version 0); the trainer scores it, from the copy saved with the checkpoint");
  if (!resumed) {  // a resumed run has its accuracy before training from the checkpoint
    RLRUN_ASSIGN_OR_RETURN(const std::optional<double> before,
                           evaluator_.evaluate("before training", steps_.completed, steps_.version()));
    evaluator_.set_before(before);
  }
  recorder_.loop_started();
  last_tick_ = Clock::now();
  threads_.start();
  while (steps_.completed < config_.number_of_steps) {
    Status s = run_step();
    if (s.ok()) continue;
    if (stopped_by_interrupt_ || !no_batch().empty()) {
      if (stopped_by_interrupt_) {
        const Status saved = uninterrupted([&] { return checkpoints_.save_at_interrupt(false); });
        if (!saved.ok()) log::error(str("no checkpoint at the interrupt: ", saved.message()));
      }
      evaluate_at_stop(stopped_by_interrupt_ ? "the run was interrupted" : "no batch could form");
      export_model();
      return s;
    }
    if (!trainers_.failed()) s = blame_dead_worker(s);
    if (!trainers_.failed()) return s;
    RLRUN_RETURN_IF_ERROR(recover_trainers());  // then the steps after the checkpoint are redone
  }
  recorder_.loop_stopped();
  RLRUN_ASSIGN_OR_RETURN(const std::optional<double> after,
                         evaluator_.evaluate("after training", steps_.completed, steps_.version()));
  evaluator_.set_after(after);
  export_model();
  return Status();
}

void Orchestrator::export_model() {
  (void)uninterrupted([&] {
    checkpoints_.export_model(steps_.version());
    return Status();
  });
}

void Orchestrator::evaluate_at_stop(const std::string& why) {
  const int64_t done = steps_.completed;
  if (!recorder_.looping()) {  // stopped in the warm-start or before: "after" would say nothing about RL
    evaluator_.set_after(std::nullopt, str("not measured: ", why, " before the RL steps began"));
    return;
  }
  recorder_.loop_stopped();
  trainer_waiting_ = false;
  Result<std::optional<double>> accuracy = std::optional<double>();
  // A stop that took the workers too (scancel, a kill of the process group) may leave nothing
  // that holds the trained weights: then the wait ends at once (wait_until) rather than at
  // rollout_request_timeout_seconds.
  evaluating_at_stop_ = true;
  const Status evaluated = uninterrupted([&] {  // a second interrupt cuts it short
    accuracy = evaluator_.evaluate(str("after step ", done, " (", why, ")"), done, steps_.version());
    return accuracy.status();
  });
  evaluating_at_stop_ = false;
  if (!evaluated.ok()) {
    evaluator_.set_after(std::nullopt, str("not measured: ", why, ", then the evaluation stopped: ", evaluated.message()));
    return;
  }
  evaluator_.set_after(*accuracy, str("measured after step ", done, " of ", config_.number_of_steps, ": ", why));
}

RunOutcome Orchestrator::finish() {
  log::end_status();  // a run stopped early leaves no progress line redrawn under its last lines
  episodes_.finish();  // their samples are in flight at exit
  // Whatever was generated and will not be trained now is accounted for, by reason.
  const uint32_t n = dispatcher_.group_size();
  for (const Group& g : dispatcher_.take_scored()) {
    for (uint32_t i = 0; i < n; ++i) ledger_.discarded(dispatcher_.sample_id(g.id, i), "unused_at_exit");
  }
  rewards_.finish();
  for (uint64_t id : replay_.samples_untrained()) ledger_.discarded(id, "step_not_completed");
  for (const auto& [id, g] : dispatcher_.in_flight()) {
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t sample = dispatcher_.sample_id(id, i);
      if (g.samples[i].returned && ledger_.state(sample) == SampleState::kGenerated)
        ledger_.discarded(sample, "unused_at_exit");
    }
  }
  recorder_.finish(rewards_.server_round_trip_seconds());
  RunOutcome o;
  o.steps_completed = steps_.completed;
  o.step_reward_means = steps_.reward_means;
  o.tokens_generated = steps_.tokens_generated;
  o.tokens_trained = steps_.tokens_trained;
  const std::optional<ResumeState>& resumed = checkpoints_.resumed();
  o.samples = resumed ? add_samples(resumed->samples, ledger_.summary()) : ledger_.summary();
  o.loop = recorder_.stats();
  o.rollout_idle_fraction = rollout_idle_fraction(fleet_.slots(), o.loop.loop_seconds);
  o.eval = evaluator_.stats();
  o.prompts = admission_.stats();
  o.rewards = rewards_.stats();
  o.episodes = episodes_.stats();
  o.workers = fleet_.stats();
  if (Result<ProcessMemory> mem = read_process_memory(); mem.ok())
    o.workers.peak_memory_bytes["orchestrator"] = mem->peak_resident_bytes;
  o.threads = threads_.stats();
  o.trainers = trainers_.stats();
  o.checkpoints = checkpoints_.stats();
  return o;
}

}  // namespace rlrun::orchestrator
