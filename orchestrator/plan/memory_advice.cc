#include "orchestrator/plan/memory_advice.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/model/model.h"
#include "orchestrator/plan/memory_report.h"
#include "orchestrator/roles/compute_backend.h"
#include "orchestrator/roles/model_from_config.h"

namespace rlrun::orchestrator {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
// CUDA context, cuBLASLt workspace and NCCL buffers live outside the backend's allocator: an
// estimate per GPU process, kept apart from the budget lines so plan-vs-measured stays exact.
constexpr double kCudaRuntimeReserve = 1.0 * kGiB;
// Prompt tokens the rollout scheduler prefills per step (rollout::SchedulerOptions::max_prefill_tokens).
constexpr int64_t kPrefillTokens = 4096;

Result<double> host_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == "MemTotal:" && in >> kib) return kib * 1024.0;
    in.ignore(1 << 20, '\n');
  }
  return io_error("cannot read MemTotal from /proc/meminfo; plan with --set backend=cuda --set device_memory_gb=N");
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

std::string as_set_args(const std::string& change) {
  std::string out = "--set ";
  for (char ch : change) out += ch == ' ' ? std::string(" --set ") : std::string(1, ch);
  return out;
}

Result<DeviceMemory> device_memory_for(const Config& c) {
  if (c.backend == BackendKind::kCuda)
    return DeviceMemory{c.device_memory_gb * kGiB, str("device_memory_gb: ", c.device_memory_gb, " GiB per GPU")};
  RLRUN_ASSIGN_OR_RETURN(double ram, host_ram_bytes());
  return DeviceMemory{ram, "host RAM (/proc/meminfo MemTotal)"};
}

double RunPlan::rollout_demand() const {
  const double kv_all = static_cast<double>(max_num_seqs) * rollout.kv_bytes_per_sequence;
  return rollout.weights + rollout.reference_weights + rollout.weight_receive_buffer + rollout.workspace + kv_all +
         runtime_reserve;
}

double RunPlan::host_total() const {
  return static_cast<double>(trainer_ranks) * trainer_need() + static_cast<double>(rollout_workers) * rollout_need();
}

bool RunPlan::trainer_fits() const { return trainer_need() <= device.bytes; }

bool RunPlan::rollout_fits() const {
  const double share = backend == "cuda" ? device.bytes * rollout_inputs.gpu_memory_utilization : device.bytes;
  return rollout.sequences_that_fit >= 1 && rollout_need() <= share * (1 + 1e-12);
}

Result<RunPlan> plan_run(const Config& c, const DeviceMemory* device) {
  RunPlan p;
  if (device != nullptr) {
    p.device = *device;
  } else {
    RLRUN_ASSIGN_OR_RETURN(p.device, device_memory_for(c));
  }
  RLRUN_ASSIGN_OR_RETURN(p.model, model_config_from(c.model));
  if (Status s = engine::validate_model_config(p.model); !s.ok())
    return invalid_argument(str("cannot plan memory: ", s.message()));
  const bool cuda = c.backend == BackendKind::kCuda;
  p.backend = cuda ? "cuda" : "cpu";
  p.shared_host = !cuda && c.launcher != LauncherKind::kSlurm;
  // compute_dtype bf16 on a CPU (as set, or auto's choice): the trained weights keep their f32
  // master beside bf16 matrices (engine/model/weights.h kBf16Cache); a LoRA base and the rollout
  // workers' weights are bf16 matrices only (bf16_frozen_weights, below).
  p.precision = cuda                                        ? engine_bf16_policy()
                : cpu_bf16_products(c) && c.lora_rank == 0 ? cpu_bf16_cache_policy()
                                                            : fp32_policy();
  // base_weights_dtype or compute_dtype: bf16 (backend cpu): the weights that never train are bf16
  // matrices (engine/model/weights.h; the norms' f32 bytes are negligible): a LoRA base, a rollout
  // worker's.
  const bool bf16_base = bf16_frozen_weights(c);
  if (bf16_base && c.lora_rank > 0) {
    p.precision.name = "fp32 adapters, bf16 base";
    p.precision.weight_bytes = 2;
  }
  p.trainer_ranks = c.trainer_num_workers;
  p.rollout_workers = c.inference_num_workers;
  p.tensor_parallel_size = c.inference_tensor_parallel_size;
  p.max_num_seqs = c.max_num_seqs;
  p.runtime_reserve = cuda ? kCudaRuntimeReserve : 0.0;

  TrainerPlanInputs& t = p.trainer_inputs;
  t.model = p.model;
  t.precision = p.precision;
  t.data_parallel_ranks = static_cast<int>(c.trainer_num_workers);
  t.distributed_optimizer = c.use_distributed_optimizer;
  t.tokens_per_micro_batch = c.seq_len * c.micro_batch_rows;
  t.gradient_checkpointing = c.gradient_checkpointing;
  t.kl_reference = c.kl_coef > 0;
  t.lora_parameters = static_cast<double>(lora_elements(c, p.model));
  // Rank 0 sends its f32 master straight from the device or through a HOST staging buffer. When
  // the distributed optimizer keeps only the master of its shard, rank 0 widens the bf16 weights:
  // in host buffers with weight_broadcast_cpu_staging, else in one f32 device bucket
  // (trainer/train_step.h send_weights, trainer/weight_sender.h).
  const bool master_sharded = cuda && c.use_distributed_optimizer && c.trainer_num_workers > 1;
  const double send_bucket = std::min(static_cast<double>(c.weight_broadcast_bucket_mb) * kMiB,
                                      4.0 * static_cast<double>(p.model.num_parameters()));
  t.weight_send_bucket_bytes =
      master_sharded && !c.weight_broadcast_cpu_staging ? static_cast<int64_t>(send_bucket) : 0;
  p.trainer = plan_trainer(t);

  RolloutPlanInputs& r = p.rollout_inputs;
  r.model = p.model;
  r.precision = p.precision;
  if (!cuda) {  // a CPU rollout worker's weights are f32 (bf16 with bf16_frozen_weights, below)
    r.precision.weight_bytes = 4;
    r.precision.inference_weight_bytes = 0;
  }
  r.device_bytes = cuda ? p.device.bytes : 0.0;
  r.gpu_memory_utilization = c.gpu_memory_utilization;
  r.runtime_reserve_bytes = p.runtime_reserve;
  r.kv_pool_bytes_override = !cuda ? static_cast<double>(c.kv_cache_memory_mb) * kMiB : 0.0;
  r.max_model_len = c.max_model_len;
  r.max_num_seqs = c.max_num_seqs;
  r.decode_workspace_tokens =
      std::max<int64_t>(1, std::min(kPrefillTokens, c.max_num_seqs * (c.max_prompt_tokens + 1)));
  r.kv_block_size = c.kv_block_size;
  r.tensor_parallel_size = static_cast<int>(c.inference_tensor_parallel_size);
  // The weight update receives f32 buckets (engine/comm/weight_receiver.h): in place into the f32
  // weights of a host backend, through two buckets on a bf16 device backend; a bucket is never
  // larger than the whole f32 parameter buffer.
  const double bucket = std::min(static_cast<double>(c.weight_broadcast_bucket_mb) * kMiB,
                                 4.0 * static_cast<double>(p.model.num_parameters()));
  r.weight_receive_buffer_bytes = cuda ? 2.0 * bucket : 0.0;
  if (bf16_base) {  // and a full sync goes through two f32 buckets into them (rollout/weight_update.h)
    r.precision.weight_bytes = r.precision.inference_weight_bytes = 2;
    if (t.lora_parameters == 0) r.weight_receive_buffer_bytes = 2.0 * bucket;
  }
  r.kl_reference = rollout_scores_kl_reference(c);
  r.lora_parameters = t.lora_parameters;
  p.rollout = plan_rollout(r);
  return p;
}

std::vector<std::string> plan_problems(const RunPlan& p) {
  std::vector<std::string> out;
  if (!p.trainer_fits())
    out.push_back(str("a trainer rank needs ", format_bytes(p.trainer_need()), " but has ",
                      format_bytes(p.device.bytes), " (", p.device.source, ")"));
  if (p.rollout.sequences_that_fit < 1)
    out.push_back(str("a rollout worker has room for no sequence of max_model_len ", p.rollout_inputs.max_model_len,
                      ": its KV pool is ", format_bytes(p.rollout.kv_pool), ", one sequence needs ",
                      format_bytes(p.rollout.kv_bytes_per_sequence)));
  else if (p.rollout_need() > p.device.bytes)
    out.push_back(str("a rollout worker needs ", format_bytes(p.rollout_need()), " but has ",
                      format_bytes(p.device.bytes)));
  if (!p.host_fits())
    out.push_back(str("the ", p.trainer_ranks + p.rollout_workers, " processes on this host need ",
                      format_bytes(p.host_total()), " together but the host has ", format_bytes(p.device.bytes)));
  return out;
}

namespace {

struct Candidate {
  std::string process, change, cost;
  Config config;
};

// The changed configs, in order of cost (see memory_advice.h).
std::vector<Candidate> lever_candidates(const Config& c) {
  std::vector<Candidate> out;
  auto add = [&](std::string process, std::string change, std::string cost, auto edit) {
    Config next = c;
    edit(next);
    out.push_back({std::move(process), std::move(change), std::move(cost), std::move(next)});
  };
  const int64_t sequence = round_up(c.max_prompt_tokens + c.max_tokens, c.pad_to_multiple_of);
  if (!c.gradient_checkpointing)
    add("trainer", "gradient_checkpointing=true", "each layer's forward runs again in backward: +1 forward, about +33% step compute",
        [](Config& n) { n.gradient_checkpointing = true; });
  if (!c.use_distributed_optimizer)
    add("trainer", "use_distributed_optimizer=true",
        "free with trainer_num_workers > 1: gradients are reduce-scattered and weights all-gathered instead of all-reduced",
        [](Config& n) { n.use_distributed_optimizer = true; });
  if (c.micro_batch_rows > 1) {
    const int64_t rows = c.micro_batch_rows / 2;
    add("trainer", str("micro_batch_rows=", rows), "fewer tokens per micro-batch: more micro-batches per step (same gradient, slower)",
        [rows](Config& n) { n.micro_batch_rows = rows; });
  }
  const int64_t half_seq = std::max(sequence, round_up(c.seq_len / 2, c.pad_to_multiple_of));
  if (half_seq < c.seq_len)
    add("trainer", str("seq_len=", half_seq), "fewer tokens per packed row: more micro-batches per step, long sequences pack worse",
        [half_seq](Config& n) { n.seq_len = half_seq; });
  add("rollout", "max_num_seqs=?", "fewer sequences decoded together: lower rollout throughput", [](Config&) {});
  const int64_t half_len = std::max(c.max_prompt_tokens + c.max_tokens, c.max_model_len / 2);
  if (half_len < c.max_model_len)
    add("rollout", str("max_model_len=", half_len), "prompt + completion must stay within it (max_prompt_tokens + max_tokens)",
        [half_len](Config& n) { n.max_model_len = half_len; });
  add("trainer", str("trainer_num_workers=", 2 * c.trainer_num_workers, " use_distributed_optimizer=true"),
      "twice the trainer devices; optimizer state is split over more ranks",
      [](Config& n) {
        n.trainer_num_workers *= 2;
        n.use_distributed_optimizer = true;
      });
  if (c.backend == BackendKind::kCuda)
    add("rollout",
        str("inference_tensor_parallel_size=", 2 * c.inference_tensor_parallel_size, " inference_num_workers=",
            2 * c.inference_num_workers),
        "last resort: twice the rollout GPUs and an all-reduce per layer in every decode step",
        [](Config& n) {
          n.inference_tensor_parallel_size *= 2;
          n.inference_num_workers *= 2;
        });
  return out;
}

}  // namespace

std::vector<MemoryLever> memory_levers(const Config& c, const RunPlan& plan) {
  const bool trainer_short = !plan.trainer_fits() || !plan.host_fits();
  const bool rollout_short = !plan.rollout_fits() || plan.rollout.sequences_waiting > 0 || !plan.host_fits();
  // What a lever must lower: the host's sum on a shared host, else the process's own need.
  auto metric = [](const RunPlan& p, const std::string& process) {
    if (p.shared_host) return p.host_total();
    return process == "trainer" ? p.trainer_need() : p.rollout_demand();
  };
  std::vector<MemoryLever> out;
  for (Candidate& cand : lever_candidates(c)) {
    if (cand.process == "trainer" ? !trainer_short : !rollout_short) continue;
    if (cand.change == "max_num_seqs=?") {  // down to what the pool holds (at least one)
      const int64_t fit = std::max<int64_t>(1, plan.rollout.sequences_that_fit);
      if (fit >= c.max_num_seqs) continue;
      cand.config.max_num_seqs = fit;
      cand.change = str("max_num_seqs=", fit);
    }
    Result<RunPlan> next = plan_run(cand.config, &plan.device);
    if (!next.ok()) continue;
    const double saves = metric(plan, cand.process) - metric(*next, cand.process);
    if (saves <= 0) continue;
    out.push_back({cand.process, cand.change, saves, next->fits() && next->rollout.sequences_waiting == 0,
                   next->rollout.sequences_waiting, cand.cost, cand.config});
  }
  return out;
}

namespace {

// How many bytes `process` is short of fitting (<= 0: it fits).
double deficit(const RunPlan& p, const std::string& process) {
  if (p.shared_host) return p.host_total() - p.device.bytes;
  if (process == "trainer") return p.trainer_need() - p.device.bytes;
  if (p.rollout.sequences_that_fit < 1) return p.rollout.kv_bytes_per_sequence - p.rollout.kv_pool;
  const double share = p.backend == "cuda" ? p.device.bytes * p.rollout_inputs.gpu_memory_utilization : p.device.bytes;
  return p.rollout_need() - share;
}

// "a=1 b=2" settings of every step, the last value of a key winning, in order of first appearance.
std::vector<std::string> collapse_settings(const std::vector<MemoryLever>& steps) {
  std::vector<std::string> out;
  for (const MemoryLever& l : steps) {
    std::istringstream words(l.change);
    for (std::string kv; words >> kv;) {
      const std::string key = kv.substr(0, kv.find('='));
      auto it = std::find_if(out.begin(), out.end(), [&](const std::string& o) { return o.rfind(key + "=", 0) == 0; });
      if (it == out.end()) out.push_back(kv);
      else *it = kv;
    }
  }
  return out;
}

}  // namespace

LeverPath levers_until_fit(const Config& config, const RunPlan& plan) {
  LeverPath path;
  Config cur = config;
  RunPlan cur_plan = plan;
  for (int step = 0; step < 16 && !cur_plan.fits(); ++step) {
    const bool trainer_short = !cur_plan.trainer_fits() || !cur_plan.host_fits();
    const bool rollout_short = !cur_plan.rollout_fits() || !cur_plan.host_fits();
    // The cheapest lever that fits, or that closes at least a tenth of its process's deficit
    // (so a lever that cannot matter, like trimming rows when the model state is the problem,
    // is passed over).
    bool taken = false;
    for (const MemoryLever& l : memory_levers(cur, cur_plan)) {
      if (l.process == "trainer" ? !trainer_short : !rollout_short) continue;
      Result<RunPlan> next = plan_run(l.config, &plan.device);
      if (!next.ok()) continue;
      const double before = deficit(cur_plan, l.process), after = deficit(*next, l.process);
      if (!next->fits() && before - after < 0.1 * before) continue;
      path.steps.push_back(l);
      cur = l.config;
      cur_plan = *next;
      taken = true;
      break;
    }
    if (!taken) break;
  }
  path.fits = cur_plan.fits();
  path.settings = collapse_settings(path.steps);
  return path;
}

Status check_plan_fits(const Config& config) {
  RLRUN_ASSIGN_OR_RETURN(RunPlan plan, plan_run(config));
  if (plan.fits()) return {};
  std::ostringstream msg;
  msg << "the run does not fit in memory (see `rlrun plan CONFIG`):";
  for (const std::string& line : plan_problems(plan)) msg << "\n  " << line;
  const std::vector<MemoryLever> levers = memory_levers(config, plan);
  if (!levers.empty()) msg << "\nlevers, cheapest first (--set ...):";
  for (const MemoryLever& l : levers)
    msg << "\n  " << l.change << "  saves " << format_bytes(l.saves_bytes) << (l.fits_after ? " (then fits)" : "")
        << "; cost: " << l.cost;
  const LeverPath path = levers_until_fit(config, plan);
  if (path.fits && !path.steps.empty()) {
    msg << "\ncheapest way to fit:";
    for (const std::string& kv : path.settings) msg << " --set " << kv;
  }
  return resource_exhausted(msg.str());
}

}  // namespace rlrun::orchestrator
