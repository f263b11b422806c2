// trainer_process.cc - the trainer rank's setup and its control-plane service loop.
#include "orchestrator/roles/trainer_process.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "common/clock.h"
#include "common/observe/log.h"
#include "common/observe/memory.h"
#include "common/observe/timeline.h"
#include "common/protocol/control_plane.h"
#include "common/protocol/liveness_beacon.h"
#include "engine/backend.h"
#include "engine/backend_info.h"
#include "engine/io/model_io.h"
#include "engine/model/model.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/roles/compute_backend.h"
#include "orchestrator/roles/model_from_config.h"
#include "orchestrator/run/training/state.h"
#include "orchestrator/run/workers/rendezvous.h"
#include "trainer/hf_export.h"
#include "trainer/lora_adapter.h"
#include "trainer/lr_schedule.h"
#include "trainer/model_adapter.h"
#include "trainer/train_step.h"
#include "trainer/trainer_inputs.h"

namespace rlrun::orchestrator {

namespace {

using Clock = std::chrono::steady_clock;

// Everything a trainer rank holds, built in dependency order (members destroyed in reverse).
struct TrainerRank {
  std::unique_ptr<engine::Backend> backend;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::LoraWeights> lora;         // lora_rank > 0: the adapters, the only trained weights
  std::unique_ptr<trainer::TrainableModel> adapter;  // ModelAdapter, or LoraModelAdapter over `lora`
  std::unique_ptr<engine::Model> reference;  // kl_coef > 0 without LoRA: the KL reference (the trainer fills it)
  std::unique_ptr<trainer::TrainableModel> reference_adapter;
  std::unique_ptr<engine::Communicator> dp;       // null with one rank
  std::unique_ptr<engine::Communicator> weights;  // rank 0 only; null while not in a group
  int64_t weights_epoch = -1;                     // the epoch of `weights`
  PeakMemoryTracker memory;
  std::unique_ptr<trainer::Trainer> trainer;
  engine::HostCompute host;  // backend cpu: what this host's products can do (measured at start)
};

Status build_rank(const Config& config, const TrainerProcessOptions& options, TrainerRank& r) {
  RLRUN_ASSIGN_OR_RETURN(r.backend, backend_from_config(config, static_cast<int>(config.cpu_threads_per_worker)));
  engine::ModelOptions model_options;
  model_options.gradient_checkpointing = config.gradient_checkpointing;
  model_options.weight_storage = trained_weight_storage(config);
  RLRUN_ASSIGN_OR_RETURN(const engine::ModelConfig model_config, model_config_from(config.model));
  engine::ModelOptions policy_options = model_options;
  if (config.lora_rank > 0) policy_options.weight_storage = frozen_weight_storage(config);  // the base never trains
  RLRUN_ASSIGN_OR_RETURN(r.model, engine::Model::create(*r.backend, model_config, policy_options));
  if (!config.model.checkpoint.empty()) {
    // load_config() took the model's shape from the checkpoint's config.json.
    RLRUN_RETURN_IF_ERROR(engine::load_weights(*r.model, config.model.checkpoint));
  } else {
    // The rollout workers draw the same initial weights from the same seed.
    r.model->weights().init_random(static_cast<uint64_t>(config.seed), static_cast<float>(config.model.init_std));
  }
  RLRUN_ASSIGN_OR_RETURN(r.lora, lora_from_config(config, *r.backend, model_config));
  if (r.lora != nullptr) {
    RLRUN_ASSIGN_OR_RETURN(r.adapter, trainer::LoraModelAdapter::create(*r.model, *r.lora));
  } else {
    r.adapter = std::make_unique<trainer::ModelAdapter>(*r.model);
  }
  const std::string identity = worker_name(Role::kTrainer, options.rank);
  if (config.trainer_num_workers > 1) {
    RLRUN_ASSIGN_OR_RETURN(r.dp, join_group(options.orchestrator, identity,
                                            data_parallel_group(config, options.rank, options.dp_group_epoch),
                                            options.control_security));
  }
  if (options.rank == 0 && options.weight_group_epoch >= 0) {
    // Not fatal: a rollout worker that died while the group formed leaves it incomplete; the
    // orchestrator's first WeightSyncBegin then names a new epoch and the group re-forms.
    Result<std::unique_ptr<engine::Communicator>> weights =
        join_group(options.orchestrator, identity,
                   weight_sync_group(config, 0, options.weight_group_epoch, options.control_security),
                   options.control_security);
    if (weights.ok()) {
      r.weights = std::move(*weights);
      r.weights_epoch = options.weight_group_epoch;
    } else {
      log::warn(str(identity, ": ", weights.status().message(), "; joining the weight group at the first sync"));
    }
  }
  RLRUN_ASSIGN_OR_RETURN(trainer::LrScheduleKind kind, trainer::parse_lr_schedule_kind(enum_name(config.lr_scheduler)));
  const trainer::LrScheduleConfig schedule{kind, config.warmup_steps, config.min_lr_ratio};
  const int64_t total = config.number_of_steps * config.number_of_minibatches;
  const double base = config.learning_rate;
  RLRUN_ASSIGN_OR_RETURN(trainer::TrainerOptions trainer_options,
                         trainer::trainer_options_from_config(config, [=](int64_t step) {
                           return trainer::learning_rate(step, total, base, schedule);
                         }));
  RLRUN_ASSIGN_OR_RETURN(r.trainer, trainer::Trainer::create(trainer_options, *r.adapter, r.dp.get(),
                                                             r.weights.get(), &r.memory));
  if (config.kl_coef > 0 && r.lora != nullptr) {  // the base with the adapters of the first RL update: no weight copy
    RLRUN_ASSIGN_OR_RETURN(r.reference_adapter, trainer::LoraReference::create(*r.model, *r.lora));
    r.trainer->set_reference(r.reference_adapter.get());
  } else if (config.kl_coef > 0) {  // a frozen copy of the compute weights, scored without gradients
    RLRUN_ASSIGN_OR_RETURN(r.reference, engine::Model::create(*r.backend, model_config, model_options));
    r.reference->weights().release_grads();
    r.reference->weights().release_master();
    r.reference_adapter = std::make_unique<trainer::ModelAdapter>(*r.reference);
    r.trainer->set_reference(r.reference_adapter.get());
  }
  return Status();
}

// The service loop over one connection to the orchestrator.
class TrainerLoop {
 public:
  // `version`: the weight version the rank holds (a resumed checkpoint's step, else 0).
  TrainerLoop(const Config& config, const TrainerProcessOptions& options, TrainerRank& rank, uint64_t version)
      : config_(config), options_(options), rank_(rank), version_(version) {}

  Status connect_and_register() {
    ControlClient::Options co;
    co.endpoint = options_.orchestrator;
    co.identity = worker_name(Role::kTrainer, options_.rank);
    co.socket.security = options_.control_security;
    Register reg;
    reg.role = Role::kTrainer;
    reg.rank = options_.rank;
    reg.devices = {rank_.backend->name()};
    RLRUN_ASSIGN_OR_RETURN(RegisteredClient registered,
                           rlrun::connect_and_register(co, reg, to_ms(config_.heartbeat_timeout_seconds)));
    client_ = std::move(registered.client);
    worker_id_ = registered.assigned_id;
    // A train step, a weight send or a checkpoint save may outlast heartbeat_timeout_seconds.
    beacon_ = std::make_unique<LivenessBeacon>(*client_, to_ms(config_.heartbeat_interval_seconds));
    return Status();
  }

  // ok after Shutdown; unavailable when the orchestrator went silent.
  Status serve() {
    const auto interval = to_ms(config_.heartbeat_interval_seconds);
    last_heard_ = Clock::now();
    send_heartbeat();  // memory figures from the start, even for a run shorter than an interval
    while (true) {
      Result<Message> m = client_->receive(interval);
      if (m.ok()) {
        last_heard_ = Clock::now();
        if (!handle(*m)) return Status();
        last_heard_ = Clock::now();  // time spent training is not silence
      } else if (Clock::now() - last_heard_ > to_ms(config_.heartbeat_timeout_seconds)) {
        return unavailable(str("nothing heard from the orchestrator for ", config_.heartbeat_timeout_seconds,
                               " s (heartbeat_timeout_seconds)"));
      }
      if (Clock::now() - last_heartbeat_ >= interval) send_heartbeat();
    }
  }

 private:
  bool handle(const Message& m) {
    if (const TrainBatch* batch = m.get<TrainBatch>()) {
      train(*batch, m.correlation_id);
    } else if (const WeightSyncBegin* begin = m.get<WeightSyncBegin>()) {
      send_weights(*begin, m.correlation_id);
    } else if (const SaveCheckpoint* save = m.get<SaveCheckpoint>()) {
      save_checkpoint(*save, m.correlation_id);
    } else if (const SetThreads* t = m.get<SetThreads>()) {
      set_threads(*t, m.correlation_id);
    } else if (const Shutdown* s = m.get<Shutdown>()) {
      log::info(str("trainer ", options_.rank, ": shutdown (", s->reason, ")"));
      return false;
    } else if (m.get<Heartbeat>() == nullptr && m.get<ErrorReply>() == nullptr) {
      send(ErrorReply{StatusCode::kInvalidArgument, static_cast<uint16_t>(m.kind()),
                      str("a trainer does not serve ", message_kind_name(m.kind()), " messages")},
           m.correlation_id);
    }
    return true;
  }

  void train(const TrainBatch& batch, uint64_t correlation_id) {
    ScopedSpan span("train_step", "trainer");
    span.arg("step", static_cast<int64_t>(batch.step));
    const double cpu_start = process_cpu_seconds();
    const engine::Backend::MatmulStats matmul_before = rank_.backend->matmul_stats();
    Result<std::vector<trainer::MicroBatch>> micro = trainer::micro_batches_from_train_batch(batch);
    Result<trainer::StepReport> report =
        micro.ok() ? rank_.trainer->train(*micro, batch.supervised ? trainer::TrainObjective::kSupervised
                                                                   : trainer::TrainObjective::kPolicy)
                   : Result<trainer::StepReport>(micro.status());
    if (!report.ok()) {
      log::error(str("trainer ", options_.rank, ": step ", batch.step, " failed: ", report.status().message()));
      send(ErrorReply{report.status().code(), static_cast<uint16_t>(MessageKind::kTrainBatch),
                      str("trainer ", options_.rank, ": step ", batch.step, ": ", report.status().message())},
           correlation_id);
      return;
    }
    if (!batch.supervised) ++version_;  // warm-start steps come before version 0
    TrainResult result = trainer::train_result(batch, *report, version_);
    result.metrics["cpu_seconds"] = process_cpu_seconds() - cpu_start;  // the step's work (`rlrun tune`)
    result.metrics["cpu_threads"] = rank_.backend->compute_threads();
    // The speed the step's products ran at, beside what one thread of this host does (the
    // orchestrator says when the first is far below the second times the threads, and why).
    const engine::Backend::MatmulStats after = rank_.backend->matmul_stats();
    if (after.seconds > matmul_before.seconds && after.calls > matmul_before.calls) {
      const double flops = after.flops - matmul_before.flops;
      result.metrics["matmul_gflops"] = flops / 1e9 / (after.seconds - matmul_before.seconds);
      result.metrics["matmul_mean_mflops"] = flops / 1e6 / static_cast<double>(after.calls - matmul_before.calls);
    }
    if (rank_.host.sgemm_gflops > 0) {
      result.metrics["host_sgemm_gflops"] = rank_.host.sgemm_gflops;
      result.metrics["host_widest_kernels"] = rank_.host.widest_kernels ? 1 : 0;
    }
    send(result, correlation_id);
  }

  // balance_cpu_threads (orchestrator/run/workers/core_balance.h): the next steps compute with more (or
  // fewer) threads.
  void set_threads(const SetThreads& request, uint64_t correlation_id) {
    if (!rank_.backend->set_compute_threads(static_cast<int>(std::min<uint32_t>(request.threads, INT32_MAX)))) {
      send(ErrorReply{StatusCode::kInvalidArgument, static_cast<uint16_t>(MessageKind::kSetThreads),
                      str("trainer ", options_.rank, ": cannot compute with ", request.threads, " threads on ",
                          rank_.backend->name())},
           correlation_id);
      return;
    }
    log::info(str("trainer ", options_.rank, ": computing with ", request.threads, " thread(s): ", request.reason));
  }

  void send_weights(const WeightSyncBegin& begin, uint64_t correlation_id) {
    const uint64_t version = begin.version;
    WeightSyncEnd end{version, true, ""};
    if (options_.rank == 0) {
      ScopedSpan span("weight_send", "trainer");
      Status s = join_weight_group(begin.group_epoch);
      if (s.ok()) {
        Result<trainer::WeightSendReport> sent = rank_.trainer->send_weights(version);
        s = sent.status();
        if (sent.ok() && !logged_sync_bytes_) {
          log::info(str("trainer 0: a weight sync moves ", sent->bytes, " bytes",
                        rank_.lora != nullptr ? " (the LoRA adapters only)" : ""));
          logged_sync_bytes_ = true;
        }
      }
      if (!s.ok()) {
        end.ok = false;
        end.error = str("trainer 0: weight send of version ", version, ": ", s.message());
        log::error(end.error);
        // A failed collective leaves the group out of step, and the next sync names a new epoch:
        // leave it now, which closes its sockets, so the members still waiting for this root's
        // bytes fail at once instead of at the group's timeout.
        rank_.trainer->set_weight_comm(nullptr);
        rank_.weights.reset();
        rank_.weights_epoch = -1;
      }
    }
    send(end, correlation_id);
  }

  // The HF model folder of the current weights: config.json, model.safetensors and the tokenizer
  // files other tools need (roles/model_from_config.h). Rank 0 writes it.
  Status export_model(const std::string& dir) {
    RLRUN_RETURN_IF_ERROR(trainer::hf_model_exporter(*rank_.model, engine::DType::kF32, config_.model.checkpoint)(dir));
    return write_tokenizer_files(config_, rank_.model->config(), dir);
  }

  // <run_dir>/model: written beside, then renamed over the previous one.
  Result<std::string> export_final_model() {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(config_.run_dir) / "model", tmp = fs::path(config_.run_dir) / "model.tmp";
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) return unavailable(str("cannot create ", tmp.string(), ": ", ec.message()));
    RLRUN_RETURN_IF_ERROR(export_model(tmp.string()));
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
    if (ec) return unavailable(str("cannot rename ", tmp.string(), " to ", dir.string(), ": ", ec.message()));
    return dir.string();
  }

  void save_checkpoint(const SaveCheckpoint& request, uint64_t correlation_id) {
    ScopedSpan span(request.model_only ? "model_export" : "checkpoint_save", "trainer");
    span.arg("step", static_cast<int64_t>(request.step));
    const auto start = Clock::now();
    CheckpointSaved reply;
    reply.step = request.step;
    Result<std::string> dir = Result<std::string>(invalid_argument(
        str("trainer ", options_.rank, ": asked to save step ", request.step, " but holds step ", version_)));
    if (request.step == version_ && request.model_only) {
      dir = export_final_model();
    } else if (request.step == version_) {
      trainer::CheckpointExtras extras;
      extras.loader_state.assign(request.orchestrator_state.begin(), request.orchestrator_state.end());
      dir = rank_.trainer->save_checkpoint(checkpoint_root(config_.run_dir), static_cast<int64_t>(request.step),
                                           extras, config_.checkpoint_keep_last,
                                           [this](const std::string& d) { return export_model(d); });
    }
    reply.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (dir.ok()) {
      reply.dir = *dir;
    } else {
      reply.ok = false;
      reply.error = str("trainer ", options_.rank, ": ", dir.status().message());
      log::error(reply.error);
    }
    send(reply, correlation_id);
  }

  // Leaves the current weight group for "weights-<epoch>" unless already in it. After any failed
  // sync the orchestrator names a new epoch (a failed collective leaves a group out of step).
  Status join_weight_group(uint32_t epoch) {
    if (rank_.weights != nullptr && rank_.weights_epoch == epoch) return Status();
    rank_.trainer->set_weight_comm(nullptr);
    rank_.weights.reset();
    rank_.weights_epoch = -1;
    const std::string identity = worker_name(Role::kTrainer, options_.rank);
    RLRUN_ASSIGN_OR_RETURN(rank_.weights, join_group(options_.orchestrator, identity,
                                                     weight_sync_group(config_, 0, static_cast<int>(epoch),
                                                                       options_.control_security),
                                                     options_.control_security));
    rank_.weights_epoch = epoch;
    rank_.trainer->set_weight_comm(rank_.weights.get());
    log::info(str(identity, ": joined weight group epoch ", epoch));
    return Status();
  }

  void send_heartbeat() {
    Heartbeat hb;
    hb.worker_id = worker_id_;
    hb.weight_version = version_;
    if (Result<ProcessMemory> mem = read_process_memory(); mem.ok()) {
      hb.memory_bytes = static_cast<uint64_t>(mem->resident_bytes);
      hb.peak_memory_bytes = static_cast<uint64_t>(mem->peak_resident_bytes);
    }
    send(hb, ++heartbeats_);
    beacon_->sent(hb);
    last_heartbeat_ = Clock::now();
  }

  template <WireMessage T> void send(const T& message, uint64_t correlation_id = 0) {
    const Status s = client_->send(message, correlation_id);
    if (!s.ok()) log::warn(str("trainer ", options_.rank, ": could not send ", message_kind_name(T::kKind), ": ", s.message()));
  }

  const Config& config_;
  const TrainerProcessOptions& options_;
  TrainerRank& rank_;
  bool logged_sync_bytes_ = false;
  std::unique_ptr<ControlClient> client_;
  std::unique_ptr<LivenessBeacon> beacon_;  // after client_: stops before the client closes
  uint32_t worker_id_ = 0;
  uint64_t version_;  // weight version: trainer steps completed
  uint64_t heartbeats_ = 0;
  Clock::time_point last_heard_, last_heartbeat_;
};

}  // namespace

int run_trainer_process(const Config& config, const TrainerProcessOptions& options) {
  const std::string name = worker_name(Role::kTrainer, options.rank);
  if (!options.timeline_path.empty()) {
    const Status s = global_timeline().open(options.timeline_path, name);
    if (!s.ok()) log::warn(str(name, ": no timeline: ", s.message()));
    global_timeline().set_rotate_bytes(config.timeline_max_mb << 20);
  }
  // Before the weights and the first step's activations are allocated (common/observe/memory.h).
  if (config.backend == BackendKind::kCpu) keep_freed_heap_memory();
  TrainerRank rank;
  if (config.backend == BackendKind::kCpu) {
    rank.host = engine::measure_host_compute();
    log::info(str(name, ": ", rank.host.summary));
  }
  Status s = build_rank(config, options, rank);
  if (!s.ok()) {
    log::error(str(name, ": ", s.message()));
    return kExitFailed;
  }
  uint64_t version = 0;
  if (!options.resume_from.empty()) {
    const auto start = Clock::now();
    Result<trainer::CheckpointInfo> info = rank.trainer->load_checkpoint(options.resume_from);
    if (!info.ok()) {
      log::error(str(name, ": ", info.status().message()));
      return kExitFailed;
    }
    version = static_cast<uint64_t>(info->step);
    log::info(str(name, ": resumed from ", info->dir, " (step ", info->step, ", optimizer step ", info->optimizer_step,
                  ") in ", std::chrono::duration<double>(Clock::now() - start).count(), " s"));
  }
  TrainerLoop loop(config, options, rank, version);
  s = loop.connect_and_register();
  if (s.ok()) {
    log::info(str(name, ": registered with ", options.orchestrator, "; serving"));
    s = loop.serve();
  }
  global_timeline().close();
  if (!s.ok()) {
    log::error(str(name, ": ", s.message()));
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace rlrun::orchestrator
