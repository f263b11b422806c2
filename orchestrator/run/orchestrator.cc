// run/orchestrator.cc - the orchestrator's lifecycle: registration, the tick, steps, weight sync.
#include "orchestrator/run/orchestrator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/clock.h"
#include "common/file_io.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "common/observe/timeline.h"
#include "orchestrator/roles/model_from_config.h"

namespace rlrun::orchestrator {

namespace {

using std::chrono::milliseconds;

// "35s", "4m05s", "2h03m": a remaining time for a person.
std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  char out[32];
  if (s < 60) std::snprintf(out, sizeof out, "%llds", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(out, sizeof out, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else std::snprintf(out, sizeof out, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60));
  return out;
}

// Workers build models and join groups before registering: generous on a loaded machine.
constexpr std::chrono::seconds kRegistrationTimeout{300};

// The chat template's end-of-turn token first (the warm-start ends answers with the first), then
// the end-of-text tokens of the chat families rlrun knows that the tokenizer has.
std::vector<int32_t> stop_token_ids(const engine::Tokenizer& tokenizer, const PromptFormat& format) {
  std::vector<int32_t> ids;
  if (format.end_of_turn()) ids.push_back(*format.end_of_turn());
  for (const char* name : {"<|endoftext|>", "<|im_end|>", "</s>", "<|eot_id|>"}) {
    auto id = tokenizer.token_to_id(name);
    if (id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  }
  return ids;
}

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

}  // namespace

Orchestrator::Orchestrator(const Config& config, ControlServer& server, Launcher& launcher, RunMetrics& metrics,
                           Task& task, const engine::Tokenizer& tokenizer, const PromptFormat& format,
                           RewardFunction& reward, HttpRewardClient* http_reward, std::vector<WorkerSlot> workers,
                           const std::string& metrics_jsonl, const std::atomic<int>& interrupted)
    : config_(config), server_(server), launcher_(launcher), metrics_(metrics), task_(task), tokenizer_(tokenizer),
      format_(format), reward_(reward), http_reward_(http_reward), workers_(std::move(workers)), metrics_jsonl_(metrics_jsonl), interrupted_(interrupted),
      gate_(GateOptions{config.max_async_rollout, config.max_off_policy_steps, config.prompts_batch_size_for_trainer}),
      group_size_(static_cast<uint32_t>(config.group_size)), stop_ids_(stop_token_ids(tokenizer, format)),
      dispatcher_(dispatch_options(config, stop_ids_), workers_,
                  [this](int worker, const GenerateRequest& request) { return send_request(worker, request); }),
      supervisor_(SupervisionPolicy{config.heartbeat_timeout_seconds, 300, config.worker_restart_backoff_seconds,
                                    config.restart_backoff_max_seconds, static_cast<int>(config.max_worker_restarts)}),
      replay_(config.trainer_replay_max_steps),
      rewards_(config, reward, http_reward, format, dispatcher_, ledger_, metrics, profile_, steps_,
               [this](int worker, const ScoreRequest& request) { return server_.send(workers_[worker].name, request); }),
      admission_(config, task, format, dispatcher_, ledger_, [this](const Problem& p) { return episodes_.runs(p); }),
      episodes_(config, tokenizer, task, dispatcher_, workers_, ledger_, metrics, rewards_, steps_, port(),
                EpisodeRunner::Hooks{[this](int worker, const GenerateRequest& r) { return send_request(worker, r); },
                                     [this](Group group) { complete_group(std::move(group)); },
                                     [this](uint64_t problem, bool correct) { evaluator_.on_episode(problem, correct); }}),
      evaluator_(config, task, format, tokenizer, reward, dispatcher_, workers_, metrics, port(),
                 Evaluator::Episodes{[this](const Problem& p) { return episodes_.runs(p); },
                                     [this](uint64_t problem) { episodes_.start_eval(problem); }},
                 [this](int64_t step, const std::vector<nlohmann::ordered_json>& shown) { log_samples("eval", step, shown); }) {
  last_tick_ = Clock::now();
  weight_bytes_ = model_config_from(config.model).num_parameters() * static_cast<int64_t>(sizeof(float));
}

const std::string& Orchestrator::no_batch() const {
  return !admission_.stop_reason().empty() ? admission_.stop_reason() : rewards_.stop_reason();
}

WorkerSlot* Orchestrator::worker_by_name(const std::string& name) {
  for (WorkerSlot& w : workers_)
    if (w.name == name) return &w;
  return nullptr;
}

Status Orchestrator::blame_dead_worker(const Status& failure) {
  if (trainer_failure_) return failure;  // a trainer's failure, recover_trainers() acts on it
  // A collective fails on the survivors as soon as one member dies, often before the launcher
  // sees the death: give it a moment, then name the dead worker as the cause (a trainer; a
  // rollout worker's death does not stop the run, supervise() restarts it).
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < deadline) {
    if (Status dead = supervise(); !dead.ok()) {
      log::warn(str("a worker died, and with it: ", failure.message()));
      return dead;  // a trainer: trainer_failure_ is set
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return failure;
}

void Orchestrator::handle_heartbeat(const Incoming& in, const Heartbeat& hb) {
  (void)server_.send(in.peer, hb, in.message.correlation_id);  // the echo proves we live
  auto mem = metrics_.memory_bytes.find(in.peer);
  if (mem != metrics_.memory_bytes.end()) mem->second->Set(static_cast<double>(hb.memory_bytes));
  auto peak = metrics_.peak_memory_bytes.find(in.peer);
  if (peak != metrics_.peak_memory_bytes.end()) peak->second->Set(static_cast<double>(hb.peak_memory_bytes));
  int64_t& best = outcome_.peak_memory_bytes[in.peer];
  best = std::max(best, static_cast<int64_t>(hb.peak_memory_bytes));
  metrics_.observe_rollout(in.peer, hb);  // no-op for trainers
  if (hb.engine_step_costs.size() > 0)
    (void)profile_.on_heartbeat(in.peer, hb.engine_step_costs.span(), hb.last_weight_sync_seconds);  // malformed: ignored
  if (hb.kl_reference_tokens > 0)
    profile_.on_reference_scoring(in.peer, hb.kl_reference_seconds, static_cast<double>(hb.kl_reference_tokens));
  if (WorkerSlot* w = worker_by_name(in.peer); w != nullptr && std::isfinite(hb.kl_reference_seconds)) {
    // Cumulative per process (handle_register resets it for a new one).
    rollout_scoring_cpu_ += std::max(0.0, hb.kl_reference_seconds - w->kl_reference_seconds);
    w->kl_reference_seconds = hb.kl_reference_seconds;
  }
}

Status Orchestrator::handle_register(const Incoming& in, const Register& reg) {
  WorkerSlot* w = worker_by_name(in.peer);
  const bool matches = w != nullptr && w->role == reg.role && w->rank == reg.rank;
  if (!matches) {
    log::warn(str("ignoring Register from unexpected peer `", in.peer, "` (", role_name(reg.role), " ", reg.rank, ")"));
    return server_.send(in.peer, ErrorReply{StatusCode::kInvalidArgument, static_cast<uint16_t>(MessageKind::kRegister),
                                            "not a worker of this run"}, in.message.correlation_id);
  }
  w->registered = true;
  w->last_heard = Clock::now();
  if (w->state == WorkerState::kStarting) w->state = WorkerState::kNeedsWeights;
  RegisterAck ack;
  ack.assigned_id = static_cast<uint32_t>(w - workers_.data());
  log::info(str(w->name, " registered (pid ", reg.pid, " on ", reg.host, ")"));
  RLRUN_RETURN_IF_ERROR(server_.send(in.peer, ack, in.message.correlation_id));
  w->compute_threads = w->spec.cpus;  // a new process: the threads it was started with
  w->kl_reference_seconds = 0;
  note_threads(*w);
  if (core_balance_) send_threads(*w);
  return Status();
}

Status Orchestrator::handle(const Incoming& in) {
  if (rendezvous_.handle(server_, in)) return Status();
  const Message& m = in.message;
  if (const auto* reg = m.get<Register>()) return handle_register(in, *reg);
  WorkerSlot* from = worker_by_name(in.peer);
  if (from != nullptr && from->state == WorkerState::kDead) return Status();  // sent before it died
  if (from != nullptr) from->last_heard = Clock::now();
  if (const auto* hb = m.get<Heartbeat>()) {
    handle_heartbeat(in, *hb);
  } else if (const auto* result = m.get<GenerateResult>()) {
    on_result(*result);
  } else if (const auto* scored = m.get<ScoreResult>()) {
    rewards_.on_score_result(*scored);
  } else if (const auto* tr = m.get<TrainResult>()) {
    train_results_[static_cast<int>(tr->rank)] = *tr;
    // The step's resident peaks: sharper than the heartbeats' samples.
    int64_t& best = outcome_.peak_memory_bytes[in.peer];
    for (const char* key : {"memory_forward_backward_rss_peak_bytes", "memory_optimizer_rss_peak_bytes"}) {
      auto it = tr->metrics.find(key);
      if (it != tr->metrics.end()) best = std::max(best, static_cast<int64_t>(it->second));
    }
    for (const char* phase : {"forward_backward", "optimizer"}) {
      auto it = tr->metrics.find(str("memory_", phase, "_backend_peak_bytes"));
      if (it == tr->metrics.end()) continue;
      int64_t& phase_best = outcome_.phase_peak_bytes[in.peer][phase];
      phase_best = std::max(phase_best, static_cast<int64_t>(it->second));
    }
  } else if (const auto* end = m.get<WeightSyncEnd>()) {
    sync_.on_end(in.peer, end->ok, end->error, Clock::now());
  } else if (const auto* saved = m.get<CheckpointSaved>()) {
    if (const WorkerSlot* w = worker_by_name(in.peer); w != nullptr && w->role == Role::kTrainer)
      checkpoints_saved_[w->rank] = *saved;
  } else if (const auto* err = m.get<ErrorReply>()) {
    if (err->request_kind == static_cast<uint16_t>(MessageKind::kTrainBatch)) {
      train_error_ = str(in.peer, ": ", err->message);
      if (err->code == StatusCode::kUnavailable || err->code == StatusCode::kTimeout) train_error_lost_group_ = in.peer;
    } else if (const WorkerSlot* w = worker_by_name(in.peer);
               err->request_kind == static_cast<uint16_t>(MessageKind::kSaveCheckpoint) && w != nullptr) {
      checkpoints_saved_[w->rank] = CheckpointSaved{0, false, str(in.peer, ": ", err->message), "", 0};
    } else {
      log::warn(str(in.peer, " reported an error: ", err->message));
    }
  } else {
    unexpected_message_log_.write(log::Level::kWarn, str("unexpected ", message_kind_name(m.kind()), " from ", in.peer));
  }
  return Status();
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

Status Orchestrator::act(bool allow_dispatch) {
  RLRUN_RETURN_IF_ERROR(advance_sync());
  dispatcher_.send_requeued();  // already admitted work first, also while dispatch is held
  if (allow_dispatch) {
    cancel_off_policy();
    episodes_.cancel_off_policy([&](uint64_t version) { return gate_.should_cancel(version, steps_.completed); });
    dispatch();
  }
  return Status();
}

Status Orchestrator::wait_until(const std::function<Result<bool>()>& done, bool allow_dispatch) {
  while (true) {
    RLRUN_ASSIGN_OR_RETURN(const bool finished, done());
    if (finished) return Status();
    RLRUN_RETURN_IF_ERROR(tick(kTick, allow_dispatch));
  }
}

LoopPort Orchestrator::port() {
  LoopPort p;
  p.send = [this](const std::string& peer, const Message& message) { return server_.send(peer, message); };
  p.wait = [this](const std::function<Result<bool>()>& done, bool allow_dispatch) { return wait_until(done, allow_dispatch); };
  return p;
}

Result<std::optional<double>> Orchestrator::evaluate(const std::string& when) {
  return evaluator_.evaluate(when, steps_.completed, steps_.version());
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
  if (looping_) {
    if (trainer_waiting_) {
      outcome_.trainer_idle_seconds += dt;
      metrics_.trainer_idle_seconds->Increment(dt);
    }
    for (WorkerSlot& w : workers_) {
      const int i = static_cast<int>(&w - workers_.data());
      if (w.role != Role::kRollout || dispatcher_.lanes_used(i) > 0 || episodes_.calls_on(i) > 0) continue;
      w.idle_seconds += dt;
      metrics_.rollout_idle_seconds[w.name]->Increment(dt);
    }
  }
  metrics_.queue_depth->Set(static_cast<double>(dispatcher_.scored().size()));
  metrics_.in_flight_groups->Set(static_cast<double>(dispatcher_.in_flight().size()));
  metrics_.async_level->Set(static_cast<double>(gate_.current_async_level(outstanding_groups())));
  return Status();
}

Status Orchestrator::wait_for_registration() {
  ScopedSpan span("wait_for_workers", "orchestrator");
  const auto deadline = Clock::now() + kRegistrationTimeout;
  while (true) {
    bool all = true;
    for (const WorkerSlot& w : workers_) all = all && w.registered;
    if (all) return Status();
    if (Clock::now() > deadline) {
      for (const WorkerSlot& w : workers_) {
        if (!w.registered)
          return timeout_error(str("worker ", w.name, " did not register within ", kRegistrationTimeout.count(),
                                   " s; see its log: ", w.log_path));
      }
    }
    RLRUN_RETURN_IF_ERROR(tick(milliseconds(50), false));
  }
}

Status Orchestrator::run() {
  // Counted from the start: a resume after a SIGKILL reads it (run/training/state.h).
  if (Status s = admission_.open_count(dispatch_count_path(config_.run_dir), resumed_ ? resumed_->samples.dispatched : 0);
      !s.ok())
    log::warn(str(s.message(), "; if this orchestrator is killed, a resumed run cannot count the samples it dispatched "
                  "after its last checkpoint"));
  RLRUN_RETURN_IF_ERROR(episodes_.start(format_, stop_ids_));
  RLRUN_RETURN_IF_ERROR(wait_for_registration());
  // A resumed run continues from warm-started weights; a fresh one learns the answer format first.
  // From here a trainer rank that dies or hangs restarts the trainer group (run/training/trainer_recovery.cc).
  if (!resumed_) RLRUN_RETURN_IF_ERROR(recovering([this] { return format_warm_start(); }));
  // Every rollout worker starts from the trainer's weights (model.checkpoint or init, then the
  // format warm-start: version 0; a resumed run's checkpoint: its step).
  RLRUN_RETURN_IF_ERROR(recovering([this] { return weight_sync(steps_.version()); }));
  if (resumed_ && rollout_scores_kl_reference(config_))
    log::info("kl_reference_on: rollout: a resumed run's rollout workers have no copy of the KL reference (it comes "
              "with version 0); the trainer scores it, from the copy saved with the checkpoint");
  if (!resumed_) {  // a resumed run has its accuracy before training from the checkpoint
    RLRUN_ASSIGN_OR_RETURN(const std::optional<double> before, evaluate("before training"));
    evaluator_.set_before(before);
  }
  looping_ = true;
  loop_start_ = last_tick_ = Clock::now();
  loop_cpu_start_ = process_cpu_seconds();
  start_core_balance();
  while (steps_.completed < config_.number_of_steps) {
    Status s = run_step();
    if (s.ok()) continue;
    if (stopped_by_interrupt_) {
      const Status saved = checkpoint_on_interrupt();
      if (!saved.ok()) log::error(str("no checkpoint at the interrupt: ", saved.message()));
      evaluate_at_stop("the run was interrupted");
      export_final_model();
      return s;
    }
    if (!no_batch().empty()) {
      evaluate_at_stop("no batch could form");
      export_final_model();
      return s;
    }
    if (!trainer_failure_) s = blame_dead_worker(s);
    if (!trainer_failure_) return s;
    RLRUN_RETURN_IF_ERROR(recover_trainers());  // then the steps after the checkpoint are redone
  }
  outcome_.loop_seconds = loop_seconds();
  looping_ = false;
  RLRUN_ASSIGN_OR_RETURN(const std::optional<double> after, evaluate("after training"));
  evaluator_.set_after(after);
  export_final_model();
  return Status();
}

void Orchestrator::shutdown_workers(const std::string& reason) {
  accepting_exits_ = true;
  for (const WorkerSlot& w : workers_) {
    if (w.registered) (void)server_.send(w.name, Shutdown{reason});
  }
}

void Orchestrator::write_step_line(const std::map<std::string, double>& trainer_metrics, double wait_s,
                                   double train_s, double sync_s, const StepRecord& record,
                                   std::optional<double> eval_accuracy) {
  // ordered: the keys in the order a person reads them; a non-finite double dumps as null.
  nlohmann::ordered_json line = {{"step", steps_.completed},
                                 {"reward_mean", record.reward_mean},
                                 {"reward_std", record.reward_std},
                                 {"wait_seconds", wait_s},
                                 {"train_seconds", train_s},
                                 {"weight_sync_seconds", sync_s},
                                 {"tokens_trained", record.build.tokens},
                                 {"tokens_generated_total", steps_.tokens_generated},
                                 {"async_level", gate_.current_async_level(outstanding_groups())},
                                 {"discarded_total", ledger_.summary().discarded_total()},
                                 {"group_ids", record.group_ids},
                                 {"prompt_hash", record.prompt_hash}};
  // After a trainer restart the step numbers go back to the checkpoint's: the steps trained again
  // from their kept batches say so, and every later line counts the restarts so far.
  if (record.redone) line["redone"] = true;
  if (outcome_.trainer_restarts > 0) line["trainer_restarts"] = outcome_.trainer_restarts;
  if (eval_accuracy) line["eval_accuracy"] = *eval_accuracy;
  const auto [terms, server_logs] = rewards_.take_means();
  line["reward_terms"] = terms;  // each task.reward term's mean (unweighted), samples scored since the last step
  if (!server_logs.empty()) line["reward_server_logs"] = server_logs;
  if (rewards_.uses_server()) line["reward_waiting"] = rewards_.server_waiting();
  line["trainer"] = trainer_metrics;
  append_run_file(metrics_jsonl_, line.dump() + '\n');
}

void Orchestrator::append_run_file(const std::string& path, const std::string& lines) const {
  const Result<bool> rotated = rotate_if_larger(path, config_.log_files_max_mb << 20);
  if (!rotated.ok()) log::warn(str(rotated.status().message(), " (log_files_max_mb)"));
  else if (*rotated) log::info(str(path, " passed log_files_max_mb = ", config_.log_files_max_mb, " MiB: renamed ", path, ".1"));
  std::ofstream out(path, std::ios::app);
  out << lines;
  if (!out) log::warn(str("could not append to ", path));
}

double Orchestrator::loop_seconds() const {
  return (resumed_ ? resumed_->loop_seconds : 0.0) + (looping_ ? seconds_since(loop_start_) : 0.0);
}

double Orchestrator::rollout_idle_fraction(double loop) const {
  double idle = 0;
  int rollouts = 0;
  for (const WorkerSlot& w : workers_) {
    if (w.role != Role::kRollout) continue;
    idle += loop > 0 ? w.idle_seconds / loop : 0;
    ++rollouts;
  }
  return rollouts ? idle / rollouts : 0;
}

void Orchestrator::print_progress(double reward_mean) {
  const double loop = std::max(1e-9, loop_seconds());
  const double rollout_idle = rollout_idle_fraction(loop);
  const int64_t done = steps_.completed, total = config_.number_of_steps;
  const int64_t this_run = done - (resumed_ ? resumed_->steps_completed : 0);
  const double eta = this_run > 0 ? seconds_since(loop_start_) / static_cast<double>(this_run) * static_cast<double>(total - done) : 0;
  char reward[16];
  std::snprintf(reward, sizeof reward, "%.3f", reward_mean);
  std::string line = str("step ", done, "/", total, "  ETA ", format_duration(eta), "  reward ", reward);
  if (evaluator_.last_accuracy()) {
    char acc[16];
    std::snprintf(acc, sizeof acc, "%.3f", *evaluator_.last_accuracy());
    line += str("  accuracy ", acc);
  }
  line += str("  idle trainer ", static_cast<int>(100 * outcome_.trainer_idle_seconds / loop), "% rollout ",
              static_cast<int>(100 * rollout_idle), "%  tok/s gen ",
              static_cast<int64_t>(static_cast<double>(steps_.tokens_generated) / loop), " train ",
              static_cast<int64_t>(static_cast<double>(steps_.tokens_trained) / loop));
  // a terminal: one line redrawn in place; a pipe or file: a line at most every 30 s (and the last);
  // logs/orchestrator.log: every step
  log::status(line, done == total);
  if (done == total) log::end_status();
}

void Orchestrator::evaluate_at_stop(const std::string& why) {
  const int64_t done = steps_.completed;
  if (!looping_) {  // stopped in the warm-start or before: "after" would say nothing about RL
    evaluator_.set_after(std::nullopt, str("not measured: ", why, " before the RL steps began"));
    return;
  }
  outcome_.loop_seconds = loop_seconds();
  looping_ = trainer_waiting_ = false;
  committing_ = true;  // a first interrupt does not cut the evaluation short; a second one does (tick)
  Result<std::optional<double>> accuracy = evaluate(str("after step ", done, " (", why, ")"));
  committing_ = false;
  if (!accuracy.ok()) {
    evaluator_.set_after(std::nullopt,
                         str("not measured: ", why, ", then the evaluation stopped: ", accuracy.status().message()));
    return;
  }
  evaluator_.set_after(*accuracy, str("measured after step ", done, " of ", config_.number_of_steps, ": ", why));
}

RunOutcome Orchestrator::finish() {
  log::end_status();  // a run stopped early leaves no progress line redrawn under its last lines
  episodes_.finish();  // their samples are in flight at exit
  // Whatever was generated and will not be trained now is accounted for, by reason.
  for (const Group& g : dispatcher_.take_scored()) {
    for (uint32_t i = 0; i < group_size_; ++i) ledger_.discarded(sample_id(g.id, i), "unused_at_exit");
  }
  rewards_.finish();
  const RewardStage::Stats rewards = rewards_.stats();
  outcome_.kl_reference_scored_by_rollout = rewards.kl_reference_scored_by_rollout;
  outcome_.kl_reference_scored_by_trainer = rewards.kl_reference_scored_by_trainer;
  outcome_.reward_expression = rewards.expression;
  outcome_.zero_spread_kept = rewards.zero_spread.kept;
  outcome_.reward_collapse_step = rewards.zero_spread.reward_collapse_step;
  outcome_.reward_url = rewards.url;
  outcome_.reward_server = rewards.server;
  for (uint64_t id : replay_.samples_untrained()) ledger_.discarded(id, "step_not_completed");
  for (const auto& [id, g] : dispatcher_.in_flight()) {
    for (uint32_t i = 0; i < group_size_; ++i) {
      if (g.samples[i].returned && ledger_.state(sample_id(id, i)) == SampleState::kGenerated)
        ledger_.discarded(sample_id(id, i), "unused_at_exit");
    }
  }
  if (looping_) outcome_.loop_seconds = loop_seconds();
  if (steps_.completed > (resumed_ ? resumed_->steps_completed : 0)) {
    save_profile();
    advise(true);
  }
  outcome_.episodes = episodes_.stats();
  outcome_.prompts_skipped = admission_.stats().prompts_skipped;
  outcome_.accuracy_before = evaluator_.stats().accuracy_before;
  outcome_.accuracy_after = evaluator_.stats().accuracy_after;
  outcome_.accuracy_after_note = evaluator_.stats().accuracy_after_note;
  outcome_.steps_completed = steps_.completed;
  outcome_.step_reward_means = steps_.reward_means;
  outcome_.tokens_generated = steps_.tokens_generated;
  outcome_.tokens_trained = steps_.tokens_trained;
  outcome_.samples = resumed_ ? add_samples(resumed_->samples, ledger_.summary()) : ledger_.summary();
  outcome_.rollout_idle_fraction = rollout_idle_fraction(outcome_.loop_seconds);
  if (Result<ProcessMemory> mem = read_process_memory(); mem.ok())
    outcome_.peak_memory_bytes["orchestrator"] = mem->peak_resident_bytes;
  return outcome_;
}

}  // namespace rlrun::orchestrator
