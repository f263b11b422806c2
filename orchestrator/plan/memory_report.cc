#include "orchestrator/plan/memory_report.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace rlrun::orchestrator {

using nlohmann::json;

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f B", v);
  else std::snprintf(buf, sizeof buf, std::fabs(v) >= 100 ? "%.1f %s" : (std::fabs(v) >= 10 ? "%.2f %s" : "%.3f %s"), v, kUnits[u]);
  return buf;
}

namespace {

int64_t exact(double bytes) { return static_cast<int64_t>(std::llround(bytes)); }

// "  label ........ 4.31 MiB      4521984"
void line(std::ostringstream& o, const std::string& label, double bytes, const std::string& note = "") {
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-36s %12s %16" PRId64 "%s%s\n", label.c_str(), format_bytes(bytes).c_str(),
                exact(bytes), note.empty() ? "" : "  ", note.c_str());
  o << buf;
}

void render_trainer(std::ostringstream& o, const RunPlan& p) {
  const TrainerBudget& t = p.trainer;
  const TrainerPlanInputs& in = p.trainer_inputs;
  o << "trainer rank (x" << p.trainer_ranks << ")" << std::string(31, ' ') << "human           bytes\n";
  const bool sharded = in.distributed_optimizer && in.data_parallel_ranks > 1;
  const std::string shard = sharded ? str(" / ", in.data_parallel_ranks, " ranks") : "";
  const bool lora = in.lora_parameters > 0;
  const std::string adapters = str(" B/adapter element (", static_cast<int64_t>(in.lora_parameters), ", lora_rank)");
  line(o, "weights", t.weights, str(in.precision.weight_bytes, " B/param", lora ? " + the f32 adapters" : ""));
  line(o, "gradients", t.gradients, lora ? str(4, adapters) : str(in.precision.grad_bytes, " B/param"));
  line(o, "optimizer moments (AdamW m, v)", t.optimizer_moments,
       str(in.precision.optimizer_bytes, lora ? adapters : " B/param", shard));
  line(o, "fp32 master weights", t.master_weights,
       in.precision.master_bytes == 0 ? (lora ? "the adapters are fp32" : "the weights are fp32")
                                      : str(in.precision.master_bytes, " B/param", in.precision.master_shards ? shard : ""));
  if (sharded) line(o, "gradient shard (reduce-scatter)", t.gradient_shard, str(in.precision.grad_bytes, " B/param", shard));
  if (in.kl_reference)
    line(o, "KL reference weights (kl_coef)", t.reference_weights,
         lora ? str(4, adapters, ": the base with them") : str(in.precision.reference_bytes(), " B/param"));
  const double params = static_cast<double>(in.model.num_parameters());
  char per_param[48];
  std::snprintf(per_param, sizeof per_param, "%.4g B/param", params > 0 ? t.model_state() / params : 0.0);
  line(o, "= model state", t.model_state(), per_param);
  o << "  activations of a packed micro-batch of " << in.tokens_per_micro_batch << " tokens (seq_len x micro_batch_rows):\n";
  line(o, "  with gradient checkpointing", t.activations_checkpointing, in.gradient_checkpointing ? "<- configured" : "");
  line(o, "  without gradient checkpointing", t.activations_no_checkpointing,
       in.gradient_checkpointing ? "" : "<- configured");
  line(o, "  of which backward scratch", t.backward_scratch);
  line(o, "logits / log-prob workspace", t.logits_workspace);
  line(o, "weight-send buffer (device)", t.weight_send_buffer,
       p.backend != "cuda"         ? "sent straight from the parameters"
       : t.weight_send_buffer > 0 ? "rank 0 widens bf16 buckets to f32 on the device"
                                  : "from the f32 master, or staged in host memory");
  if (p.runtime_reserve > 0) line(o, "runtime reserve (estimate)", p.runtime_reserve, "CUDA context, cuBLAS, NCCL");
  line(o, "peak (forward/backward)", t.forward_backward_peak());
  line(o, "NEEDS", p.trainer_need(), p.trainer_fits() ? "fits" : "DOES NOT FIT");
}

void render_rollout(std::ostringstream& o, const RunPlan& p) {
  const RolloutBudget& r = p.rollout;
  const RolloutPlanInputs& in = p.rollout_inputs;
  o << "rollout worker (x" << p.rollout_workers << ", tensor parallel " << p.tensor_parallel_size << ")\n";
  line(o, "weights", r.weights);
  if (in.kl_reference) line(o, "KL reference weights", r.reference_weights, "kl_reference_on: rollout");
  line(o, "weight-receive buffer", r.weight_receive_buffer);
  line(o, "prefill workspace (one step)", r.workspace, "max_num_seqs prompts at once");
  o << "  KV cache: 2 x " << in.model.num_layers << " layers x " << in.model.num_kv_heads << " kv heads x "
    << in.model.head_dim() << " x " << in.precision.kv_bytes << " B";
  if (p.tensor_parallel_size > 1) o << " / " << p.tensor_parallel_size << " GPUs";
  o << " = " << exact(r.kv_bytes_per_token) << " B per token\n";
  line(o, str("  one sequence of max_model_len ", in.max_model_len), r.kv_bytes_per_sequence);
  const std::string pool_from = in.kv_pool_bytes_override > 0 ? "kv_cache_memory_mb"
                                : in.device_bytes > 0 ? str("gpu_memory_utilization ", in.gpu_memory_utilization)
                                                      : "max_num_seqs x max_model_len";
  line(o, "  KV pool", r.kv_pool, "from " + pool_from);
  if (p.runtime_reserve > 0) line(o, "runtime reserve (estimate)", p.runtime_reserve, "inside the utilization share");
  line(o, "NEEDS", p.rollout_need(), p.rollout_fits() ? "fits" : "DOES NOT FIT");
  o << "  " << r.sequences_that_fit << " sequences of max_model_len fit; max_num_seqs " << in.max_num_seqs;
  if (r.sequences_waiting > 0)
    o << " asks for more: " << r.sequences_waiting << " wait in the queue (throughput, not correctness)\n";
  else
    o << ": none wait\n";
}

}  // namespace

std::string render_plan_text(const RunPlan& p, const std::vector<MemoryLever>& levers, const LeverPath& path,
                             const std::string& name) {
  std::ostringstream o;
  const engine::ModelConfig& m = p.model;
  o << "memory plan for " << name << "\n";
  o << "model: " << m.architecture << ", " << m.num_parameters() << " parameters (" << m.num_layers << " layers, hidden "
    << m.hidden_size << ", " << m.num_heads << " heads / " << m.num_kv_heads << " kv heads, intermediate "
    << m.intermediate_size << ", vocab " << m.vocab_size << ")\n";
  o << "backend " << p.backend << ", " << p.precision.name << "; memory per process: " << format_bytes(p.device.bytes)
    << " (" << p.device.source << ")";
  if (p.shared_host) o << ", shared by the run's " << p.trainer_ranks + p.rollout_workers << " processes";
  o << "\n\n";
  render_trainer(o, p);
  o << "\n";
  render_rollout(o, p);
  if (p.shared_host) {
    o << "\n";
    line(o, "all processes on this host", p.host_total(), p.host_fits() ? "fits" : "DOES NOT FIT");
  }
  o << "\n" << (p.fits() ? "verdict: fits" : "verdict: DOES NOT FIT") << "\n";
  for (const std::string& problem : plan_problems(p)) o << "  " << problem << "\n";
  if (!levers.empty()) o << "levers, cheapest first (rlrun plan CONFIG --set ...):\n";
  for (const MemoryLever& l : levers) {
    o << "  " << l.process << ": " << l.change << "  saves " << format_bytes(l.saves_bytes);
    if (l.process == "rollout" && !p.shared_host)
      o << " of KV demand (then " << l.sequences_waiting_after << " sequences wait)";
    o << (l.fits_after ? " (then fits)" : "") << "\n      cost: " << l.cost << "\n";
  }
  if (path.fits && !path.steps.empty()) {
    o << "cheapest way to fit:";
    for (const std::string& kv : path.settings) o << " --set " << kv;
    o << "\n";
  } else if (!p.fits()) {
    o << "no combination of these levers fits: the model needs more or larger devices\n";
  }
  return o.str();
}

json plan_to_json(const RunPlan& p, const std::vector<MemoryLever>& levers, const LeverPath& path,
                  const std::string& name) {
  const TrainerBudget& t = p.trainer;
  const RolloutBudget& r = p.rollout;
  const engine::ModelConfig& m = p.model;
  json j;
  j["config"] = name;
  j["backend"] = p.backend;
  j["precision"] = p.precision.name;
  j["fits"] = p.fits();
  j["device"] = {{"bytes", exact(p.device.bytes)}, {"source", p.device.source}, {"shared_host", p.shared_host}};
  j["model"] = {{"parameters", m.num_parameters()}, {"num_layers", m.num_layers},      {"hidden_size", m.hidden_size},
                {"num_heads", m.num_heads},          {"num_kv_heads", m.num_kv_heads}, {"intermediate_size", m.intermediate_size},
                {"vocab_size", m.vocab_size}};
  j["trainer"] = {{"ranks", p.trainer_ranks},
                  {"tokens_per_micro_batch", p.trainer_inputs.tokens_per_micro_batch},
                  {"gradient_checkpointing", p.trainer_inputs.gradient_checkpointing},
                  {"distributed_optimizer", p.trainer_inputs.distributed_optimizer},
                  {"weights", exact(t.weights)},
                  {"gradients", exact(t.gradients)},
                  {"master_weights", exact(t.master_weights)},
                  {"gradient_shard", exact(t.gradient_shard)},
                  {"reference_weights", exact(t.reference_weights)},
                  {"optimizer_moments", exact(t.optimizer_moments)},
                  {"activations", exact(t.activations)},
                  {"activations_checkpointing", exact(t.activations_checkpointing)},
                  {"activations_no_checkpointing", exact(t.activations_no_checkpointing)},
                  {"backward_scratch", exact(t.backward_scratch)},
                  {"logits_workspace", exact(t.logits_workspace)},
                  {"weight_send_buffer", exact(t.weight_send_buffer)},
                  {"runtime_reserve", exact(p.runtime_reserve)},
                  {"phase_peak_bytes",
                   {{"forward_backward", exact(t.forward_backward_peak())},
                    {"optimizer", exact(t.model_state())},
                    {"weight_send", exact(t.weight_send_peak())}}},
                  {"peak_bytes", exact(t.peak())},
                  {"need_bytes", exact(p.trainer_need())},
                  {"fits", p.trainer_fits()}};
  j["rollout"] = {{"workers", p.rollout_workers},
                  {"tensor_parallel_size", p.tensor_parallel_size},
                  {"weights", exact(r.weights)},
                  {"reference_weights", exact(r.reference_weights)},
                  {"weight_receive_buffer", exact(r.weight_receive_buffer)},
                  {"workspace", exact(r.workspace)},
                  {"kv_bytes_per_token", exact(r.kv_bytes_per_token)},
                  {"kv_bytes_per_sequence", exact(r.kv_bytes_per_sequence)},
                  {"kv_pool", exact(r.kv_pool)},
                  {"max_model_len", p.rollout_inputs.max_model_len},
                  {"max_num_seqs", p.rollout_inputs.max_num_seqs},
                  {"sequences_that_fit", r.sequences_that_fit},
                  {"sequences_waiting", r.sequences_waiting},
                  {"peak_bytes", exact(r.total())},
                  {"need_bytes", exact(p.rollout_need())},
                  {"fits", p.rollout_fits()}};
  j["host_total_bytes"] = exact(p.host_total());
  j["problems"] = plan_problems(p);
  j["levers"] = json::array();
  for (const MemoryLever& l : levers)
    j["levers"].push_back({{"process", l.process},
                           {"set", l.change},
                           {"saves_bytes", exact(l.saves_bytes)},
                           {"fits_after", l.fits_after},
                           {"sequences_waiting_after", l.sequences_waiting_after},
                           {"cost", l.cost}});
  j["fit_path"] = {{"fits", path.fits}, {"set", json::array()}};
  for (const std::string& kv : path.settings) j["fit_path"]["set"].push_back(kv);
  return j;
}

namespace {

Result<int64_t> int_key(const json& obj, const char* key, const std::string& where, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) return invalid_argument(str(where, ": missing `", key, "` (an integer byte count)"));
    return int64_t{-1};
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    return invalid_argument(str(where, ": `", key, "` must be a non-negative integer, got ", it->dump()));
  return it->get<int64_t>();
}

}  // namespace

Result<std::vector<MeasuredProcess>> parse_run_summary(const std::string& text, const std::string& name) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(str(name, ": not valid JSON"));
  if (!j.is_object() || !j.contains("processes") || !j["processes"].is_array())
    return invalid_argument(str(name, ": expected an object with a `processes` array"));
  std::vector<MeasuredProcess> out;
  for (size_t i = 0; i < j["processes"].size(); ++i) {
    const json& e = j["processes"][i];
    const std::string where = str(name, ": processes[", i, "]");
    if (!e.is_object()) return invalid_argument(where + ": expected an object");
    MeasuredProcess m;
    if (!e.contains("role") || !e["role"].is_string() || (e["role"] != "trainer" && e["role"] != "rollout"))
      return invalid_argument(where + ": `role` must be \"trainer\" or \"rollout\"");
    m.role = e["role"].get<std::string>();
    RLRUN_ASSIGN_OR_RETURN(int64_t rank, int_key(e, "rank", where, false));
    m.rank = std::max<int64_t>(0, rank);
    RLRUN_ASSIGN_OR_RETURN(m.backend_peak_bytes, int_key(e, "backend_peak_bytes", where, false));
    RLRUN_ASSIGN_OR_RETURN(m.peak_memory_bytes, int_key(e, "peak_memory_bytes", where, false));
    if (m.backend_peak_bytes < 0 && m.peak_memory_bytes < 0)
      return invalid_argument(where + ": needs `backend_peak_bytes` or `peak_memory_bytes` (integer byte counts)");
    if (e.contains("phase_peak_bytes")) {
      const json& ph = e["phase_peak_bytes"];
      if (!ph.is_object()) return invalid_argument(where + ": `phase_peak_bytes` must be an object");
      for (auto it = ph.begin(); it != ph.end(); ++it) {
        RLRUN_ASSIGN_OR_RETURN(int64_t v, int_key(ph, it.key().c_str(), where + ".phase_peak_bytes", true));
        m.phase_peak_bytes[it.key()] = v;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::string render_comparison(const RunPlan& p, const std::vector<MeasuredProcess>& measured) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-28s %12s %12s %8s\n", "process", "plan", "measured", "ratio");
  o << buf;
  auto row = [&](const std::string& what, double plan, double got) {
    std::snprintf(buf, sizeof buf, "%-28s %12s %12s %8.3f\n", what.c_str(), format_bytes(plan).c_str(),
                  format_bytes(got).c_str(), plan > 0 ? got / plan : 0.0);
    o << buf;
  };
  for (const MeasuredProcess& m : measured) {
    const bool trainer = m.role == "trainer";
    const std::string who = str(m.role, " ", m.rank);
    const double plan = trainer ? p.trainer.peak() : p.rollout.total();
    if (m.backend_peak_bytes >= 0) row(who + " backend peak", plan, static_cast<double>(m.backend_peak_bytes));
    if (m.peak_memory_bytes >= 0) row(who + " resident peak", plan, static_cast<double>(m.peak_memory_bytes));
    if (trainer) {
      for (const auto& [phase, bytes] : m.phase_peak_bytes) {
        const double phase_plan = phase == "forward_backward" ? p.trainer.forward_backward_peak()
                                  : phase == "weight_send"    ? p.trainer.weight_send_peak()
                                  : phase == "optimizer"      ? p.trainer.model_state()
                                                              : -1;
        if (phase_plan >= 0) row(str("  ", phase), phase_plan, static_cast<double>(bytes));
      }
    }
  }
  o << "ratio = measured / plan. The plan counts Backend allocations (device memory on cuda): the backend\n"
       "peak should match it; the resident peak adds the process's runtime (code, libraries, threads).\n";
  return o.str();
}

}  // namespace rlrun::orchestrator
