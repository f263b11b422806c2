#include "rollout/worker.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "common/observe/timeline.h"

namespace rlrun::rollout {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

GenerationRequest to_generation_request(const GenerateRequest& request) {
  GenerationRequest r;
  r.request_id = request.request_id;
  r.prompt = request.prompt_ids.to_vector();
  r.num_samples = request.num_samples;
  r.first_sample_index = request.first_sample_index;
  r.sampling.temperature = request.temperature;
  r.sampling.top_p = request.top_p;
  r.max_tokens = request.max_tokens;
  r.stop_token_ids = request.stop_token_ids;
  r.seed = request.seed;
  r.min_weight_version = request.min_weight_version;
  return r;
}

GenerateResult to_generate_result(SampleOutput output) {
  GenerateResult r;
  r.request_id = output.request_id;
  r.sample_index = output.sample_index;
  if (!output.weight_versions.empty()) {
    r.first_weight_version = static_cast<uint64_t>(output.weight_versions.front());
    r.last_weight_version = static_cast<uint64_t>(output.weight_versions.back());
  }
  r.token_ids = std::move(output.tokens);
  r.logprobs = std::move(output.logprobs);
  r.weight_versions = std::move(output.weight_versions);
  r.finish_reason = output.finish_reason;
  r.error = std::move(output.error);
  r.preemptions = output.preemptions;
  r.queue_seconds = output.queue_seconds;
  r.prefill_seconds = output.prefill_seconds;
  r.decode_seconds = output.decode_seconds;
  return r;
}

Worker::Worker(Scheduler& scheduler, engine::Communicator* weight_comm, WorkerOptions options)
    : scheduler_(scheduler), weight_comm_(weight_comm), options_(std::move(options)) {
  if (weight_comm_ != nullptr) {
    updater_ = std::make_unique<WeightUpdater>(scheduler_.model(), *weight_comm_, options_.max_weight_bucket_bytes);
    weight_group_epoch_ = options_.weight_group_epoch;
  }
}

Worker::~Worker() = default;

template <WireMessage T>
void Worker::send(const T& message, uint64_t correlation_id) {
  const Status s = client_->send(message, correlation_id);
  if (!s.ok()) log::warn(str("rollout: could not send ", message_kind_name(T::kKind), ": ", s.message()));
}

void Worker::send_error(StatusCode code, MessageKind request_kind, const std::string& message, uint64_t correlation_id) {
  send(ErrorReply{code, static_cast<uint16_t>(request_kind), message}, correlation_id);
  ++summary_.errors_sent;
}

Status Worker::register_with_orchestrator() {
  ControlClient::Options co;
  co.endpoint = options_.orchestrator;
  co.identity = worker_name(Role::kRollout, options_.index);
  co.socket.security = options_.control_security;
  Register reg;
  reg.role = Role::kRollout;
  reg.rank = options_.index;
  reg.host = options_.host;  // empty: this machine's name
  reg.devices = options_.devices;
  RLRUN_ASSIGN_OR_RETURN(RegisteredClient registered,
                         connect_and_register(co, reg, to_ms(options_.heartbeat_timeout_seconds)));
  client_ = std::move(registered.client);
  worker_id_ = registered.assigned_id;
  log::info(str("rollout ", options_.index, ": registered with ", options_.orchestrator, " as worker ", worker_id_));
  return {};
}

void Worker::handle_generate(const GenerateRequest& request, uint64_t correlation_id) {
  if (correlation_of_.count(request.request_id) != 0) {  // answered here: the map keeps the original's
    GenerateResult error;
    error.request_id = request.request_id;
    error.sample_index = request.first_sample_index;
    error.finish_reason = FinishReason::kError;
    error.error = str("request ", request.request_id, ": request id is already being generated");
    send(error, correlation_id);
    return;
  }
  correlation_of_[request.request_id] = correlation_id;
  scheduler_.add(to_generation_request(request));
}

// Between two engine steps (messages are handled there): the next steps, and the KL reference's
// passes, compute with the new count.
void Worker::set_threads(const SetThreads& request, uint64_t correlation_id) {
  engine::Backend& backend = scheduler_.model().backend();
  if (!backend.set_compute_threads(static_cast<int>(std::min<uint32_t>(request.threads, INT32_MAX)))) {
    send_error(StatusCode::kInvalidArgument, MessageKind::kSetThreads,
               str("rollout ", options_.index, ": cannot compute with ", request.threads, " threads on ", backend.name()),
               correlation_id);
    return;
  }
  log::info(str("rollout ", options_.index, ": computing with ", request.threads, " thread(s): ", request.reason));
}

bool Worker::handle(const Message& message) {
  last_heard_ = Clock::now();
  if (const auto* r = message.get<GenerateRequest>()) {
    handle_generate(*r, message.correlation_id);
  } else if (const auto* q = message.get<ScoreRequest>()) {
    pending_scores_.push_back({*q, message.correlation_id});
  } else if (const auto* c = message.get<Cancel>()) {
    for (uint64_t id : c->request_ids) scheduler_.cancel(id);
  } else if (const auto* w = message.get<WeightSyncBegin>()) {
    pending_sync_ = std::make_unique<WeightSyncBegin>(*w);
  } else if (const auto* t = message.get<SetThreads>()) {
    set_threads(*t, message.correlation_id);
  } else if (const auto* s = message.get<Shutdown>()) {
    summary_.exit_reason = str("shutdown: ", s->reason);
    return false;
  } else if (message.get<Heartbeat>() != nullptr || message.get<RegisterAck>() != nullptr) {
    // liveness only
  } else if (message.get<ErrorReply>() != nullptr) {
    log::warn(str("rollout: the orchestrator reported an error: ", message.get<ErrorReply>()->message));
  } else {
    send_error(StatusCode::kInvalidArgument, message.kind(),
               str("a rollout worker does not serve ", message_kind_name(message.kind()), " messages"),
               message.correlation_id);
  }
  return true;
}

Status Worker::join_weight_group(uint32_t epoch) {
  if (updater_ != nullptr && weight_group_epoch_ == epoch) return Status();
  if (!options_.join_weight_group) {
    if (updater_ == nullptr) return unavailable(str("rollout ", options_.index, " has no weight-sync group"));
    return invalid_argument(str("rollout ", options_.index, " is in weight group epoch ", weight_group_epoch_,
                                   ", the sync names epoch ", epoch, ", and it cannot join another"));
  }
  updater_.reset();  // before the communicator it refers to
  joined_comm_.reset();
  weight_comm_ = nullptr;
  weight_group_epoch_ = -1;
  RLRUN_ASSIGN_OR_RETURN(joined_comm_, options_.join_weight_group(epoch));
  weight_comm_ = joined_comm_.get();
  updater_ = std::make_unique<WeightUpdater>(scheduler_.model(), *weight_comm_, options_.max_weight_bucket_bytes);
  weight_group_epoch_ = epoch;
  log::info(str("rollout ", options_.index, ": joined weight group epoch ", epoch));
  return Status();
}

void Worker::run_weight_sync(const WeightSyncBegin& begin) {
  ScopedSpan span("weight_update", "rollout");
  span.arg("version", static_cast<int64_t>(begin.version));
  WeightSyncEnd end;
  end.version = begin.version;
  const Status joined = join_weight_group(begin.group_epoch);
  if (!joined.ok()) {
    end.ok = false;
    end.error = joined.message();
    log::error(str("rollout ", options_.index, ": weight sync of version ", begin.version, ": ", end.error));
  } else {
    if (options_.hooks != nullptr) options_.hooks->before_weight_receive(begin.version);
    const auto start = Clock::now();
    Result<engine::WeightReceiveReport> report = updater_->receive();
    last_weight_sync_seconds_ = seconds_between(start, Clock::now());
    if (!report.ok()) {
      end.ok = false;
      end.error = report.status().message();
      log::error(str("rollout ", options_.index, ": weight sync of version ", begin.version, " failed: ", end.error));
    } else {
      if (report->version != begin.version)
        log::warn(str("rollout: WeightSyncBegin announced version ", begin.version, " but the sender sent ",
                      report->version, "; using the sender's"));
      end.version = report->version;
      scheduler_.set_weight_version(report->version);
      ++summary_.weight_syncs;
      if (begin.kl_reference && options_.kl_reference != nullptr) {
        const bool first = !options_.kl_reference->captured();
        if (const Status s = options_.kl_reference->capture(scheduler_.model()); !s.ok())
          log::error(str("rollout ", options_.index, ": cannot keep the KL reference (the trainer will score it): ", s.message()));
        else if (first)
          log::info(str("rollout ", options_.index, ": KL reference = weight version ", report->version,
                        "; this worker scores its samples under it"));
      }
    }
  }
  last_heard_ = Clock::now();  // the orchestrator ordered the sync: its length (or timeout) is not silence
  send_heartbeat();  // the step's engine costs reach the orchestrator before its end, however short the step
  send(end);
}

void Worker::answer_scores() {
  size_t take = 0;
  for (int64_t tokens = 0; take < pending_scores_.size() && (take == 0 || tokens < options_.score_tokens_per_pass); ++take)
    tokens += static_cast<int64_t>(pending_scores_[take].request.prompt_ids.size() +
                                   pending_scores_[take].request.completion_ids.size());
  std::vector<PendingScore> pending(std::make_move_iterator(pending_scores_.begin()),
                                    std::make_move_iterator(pending_scores_.begin() + static_cast<std::ptrdiff_t>(take)));
  pending_scores_.erase(pending_scores_.begin(), pending_scores_.begin() + static_cast<std::ptrdiff_t>(take));
  std::vector<ScoreResult> results(pending.size());
  for (size_t q = 0; q < pending.size(); ++q) results[q].request_id = pending[q].request.request_id;
  auto fail_all = [&](const std::string& why) {
    for (ScoreResult& r : results) r.error = why;
  };
  // The completions of request q as spans into its completion_ids.
  auto group_of = [&](const ScoreRequest& r) {
    ScoredGroup g;
    g.prompt = r.prompt_ids.span();
    size_t at = 0;
    for (uint32_t n : r.completion_lengths) {
      g.completions.push_back(r.completion_ids.span().subspan(at, n));
      at += n;
    }
    return g;
  };
  auto flat = [](const std::vector<std::vector<float>>& per_completion) {
    std::vector<float> out;
    for (const auto& c : per_completion) out.insert(out.end(), c.begin(), c.end());
    return out;
  };
  if (options_.kl_reference == nullptr) {
    fail_all(str("rollout ", options_.index, " keeps no KL reference (kl_reference_on is not rollout here)"));
  } else if (!options_.kl_reference->captured()) {
    fail_all(str("rollout ", options_.index, " has no KL reference yet (it comes with the weight sync of version 0)"));
  } else {
    ScopedSpan span("kl_reference", "rollout");
    span.arg("groups", static_cast<int64_t>(pending.size()));
    std::vector<ScoredGroup> groups;
    for (const PendingScore& p : pending) groups.push_back(group_of(p.request));
    // One forward pass for all of them; when that fails (a request with bad ids), each alone, so
    // one bad request fails only itself.
    Result<std::vector<std::vector<std::vector<float>>>> all = options_.kl_reference->score(groups);
    for (size_t q = 0; q < pending.size(); ++q) {
      Result<std::vector<std::vector<std::vector<float>>>> alone = unavailable("");
      if (!all.ok()) alone = options_.kl_reference->score({&groups[q], 1});
      if (all.ok() || alone.ok()) {
        results[q].ref_logprobs = flat(all.ok() ? (*all)[q] : alone->at(0));
        summary_.kl_reference_scored += groups[q].completions.size();
      } else {
        results[q].error = alone.status().message();
      }
    }
  }
  for (size_t q = 0; q < pending.size(); ++q) send(results[q], pending[q].correlation_id);
}

void Worker::send_finished() {
  std::vector<SampleOutput> finished = scheduler_.take_finished();
  for (SampleOutput& out : finished) {
    const auto it = correlation_of_.find(out.request_id);
    send(to_generate_result(std::move(out)), it == correlation_of_.end() ? 0 : it->second);
    ++summary_.results_sent;
    if (options_.hooks != nullptr) options_.hooks->after_result(summary_.results_sent);
  }
  for (const SampleOutput& out : finished)  // request_id survives the move
    if (!scheduler_.is_active(out.request_id)) correlation_of_.erase(out.request_id);  // its last sample went
}

void Worker::send_heartbeat() {
  const auto now = Clock::now();
  const SchedulerStats st = scheduler_.stats();
  Heartbeat hb;
  hb.worker_id = worker_id_;
  hb.weight_version = scheduler_.weight_version();
  hb.active_requests = static_cast<uint32_t>(st.running);
  hb.queued_requests = static_cast<uint32_t>(st.waiting);
  hb.kv_blocks_used = static_cast<uint32_t>(st.kv_blocks_used);
  hb.kv_blocks_free = static_cast<uint32_t>(st.kv_blocks_total - st.kv_blocks_used);
  hb.kv_cache_utilization = st.kv_blocks_total > 0 ? float(st.kv_blocks_used) / float(st.kv_blocks_total) : 0.0f;
  hb.tokens_generated = static_cast<uint64_t>(st.tokens_generated);
  const double dt = seconds_between(last_heartbeat_, now);
  hb.tokens_per_second = dt > 0 ? static_cast<float>((st.tokens_generated - tokens_at_last_heartbeat_) / dt) : 0.0f;
  hb.preemptions = static_cast<uint64_t>(st.preemptions);
  hb.idle_seconds = idle_seconds_;
  hb.last_weight_sync_seconds = last_weight_sync_seconds_;
  hb.engine_step_costs = step_costs_.flat();
  hb.kl_reference_seconds = kl_reference_cpu_;
  if (options_.kl_reference != nullptr) hb.kl_reference_tokens = static_cast<uint64_t>(options_.kl_reference->tokens_scored());
  if (Result<ProcessMemory> mem = read_process_memory(); mem.ok()) {
    hb.memory_bytes = static_cast<uint64_t>(mem->resident_bytes);
    hb.peak_memory_bytes = static_cast<uint64_t>(mem->peak_resident_bytes);
  }
  send(hb, ++heartbeat_counter_);
  if (beacon_ != nullptr) beacon_->sent(hb);
  ++summary_.heartbeats_sent;
  tokens_at_last_heartbeat_ = st.tokens_generated;
  last_heartbeat_ = now;
}

void Worker::note_malformed() {
  const uint64_t seen = client_->malformed_count();
  if (seen == summary_.malformed_seen) return;
  send_error(StatusCode::kProtocol, MessageKind{}, str("rollout ", options_.index, " dropped ",
                                                       seen - summary_.malformed_seen, " malformed message(s)"), 0);
  summary_.malformed_seen = seen;
}

Status Worker::run() {
  RLRUN_RETURN_IF_ERROR(register_with_orchestrator());
  if (options_.hooks != nullptr) options_.hooks->after_register();
  last_heard_ = last_heartbeat_ = last_turn_ = Clock::now();
  const auto interval = to_ms(options_.heartbeat_interval_seconds);
  beacon_ = std::make_unique<LivenessBeacon>(*client_, interval);
  send_heartbeat();
  const Status served = serve(interval);
  summary_.liveness_beats = beacon_->beats();
  beacon_.reset();
  return served;
}

Status Worker::serve(std::chrono::milliseconds interval) {
  while (true) {
    // Wait in the poll only when there is nothing to step (no busy spin), never past a heartbeat.
    const bool busy = scheduler_.can_step() || pending_sync_ != nullptr || !pending_scores_.empty();
    auto wait = std::chrono::milliseconds(0);
    if (!busy) {
      const auto until_heartbeat =
          std::chrono::duration_cast<std::chrono::milliseconds>(last_heartbeat_ + interval - Clock::now());
      wait = std::clamp(until_heartbeat, std::chrono::milliseconds(1), options_.idle_wait);
    }
    for (int i = 0; i < options_.max_messages_per_turn; ++i) {
      Result<Message> m = client_->receive(i == 0 ? wait : std::chrono::milliseconds(0));
      if (!m.ok()) break;
      if (!handle(*m)) return {};
    }
    // Judged here, after the messages that came during the last step were read: the step's own
    // length is not the orchestrator's silence.
    if (seconds_between(last_heard_, Clock::now()) > options_.heartbeat_timeout_seconds) {
      summary_.exit_reason = "orchestrator silent";
      return unavailable(str("rollout ", options_.index, ": nothing heard from the orchestrator for ",
                             options_.heartbeat_timeout_seconds, " s (heartbeat_timeout_seconds); exiting"));
    }
    note_malformed();
    const auto now = Clock::now();
    if (!busy) idle_seconds_ += seconds_between(last_turn_, now);
    last_turn_ = now;
    if (pending_sync_ != nullptr) {  // the step boundary: no forward pass is in flight
      const std::unique_ptr<WeightSyncBegin> begin = std::move(pending_sync_);
      const double sync_cpu_start = process_cpu_seconds();
      run_weight_sync(*begin);
      weight_sync_cpu_ += process_cpu_seconds() - sync_cpu_start;
    }
    if (!pending_scores_.empty()) {  // between engine steps, one pass per turn; not part of their cost
      const double score_cpu_start = process_cpu_seconds();
      answer_scores();
      const double score_cpu = process_cpu_seconds() - score_cpu_start;
      weight_sync_cpu_ += score_cpu;
      kl_reference_cpu_ += score_cpu;
    }
    Timeline& timeline = global_timeline();
    if (scheduler_.can_step() && pending_scores_.empty()) {
      if (generate_start_us_ < 0 && timeline.enabled()) generate_start_us_ = timeline.now_us();
      ++generate_steps_;
      if (step_cpu_mark_ < 0) step_cpu_mark_ = process_cpu_seconds();
      const auto wall_start = Clock::now();
      if (options_.hooks != nullptr) options_.hooks->before_engine_step(engine_steps_++);
      const Status s = scheduler_.step();
      if (!s.ok()) log::error(str("rollout ", options_.index, ": engine step failed: ", s.message()));
      send_finished();  // part of the step's cost: the results' encoding and sending
      // CPU: everything the process did since the previous step but load weights (requests,
      // results, heartbeats, the I/O thread's encryption): a wait in the poll costs none.
      const double cpu_now = process_cpu_seconds();
      step_costs_.add(scheduler_.last_step(), cpu_now - step_cpu_mark_ - weight_sync_cpu_, seconds_since(wall_start));
      step_cpu_mark_ = cpu_now;
      weight_sync_cpu_ = 0;
    } else if (generate_start_us_ >= 0 && !scheduler_.can_step()) {
      timeline.complete("generate", "rollout", generate_start_us_, timeline.now_us() - generate_start_us_,
                        str("{\"engine_steps\":", generate_steps_, "}"));
      generate_start_us_ = -1;
      generate_steps_ = 0;
    }
    send_finished();
    if (Clock::now() - last_heartbeat_ >= interval) send_heartbeat();
  }
}

}  // namespace rlrun::rollout
