// memory_report.h - `rlrun plan` output: the plan as text and JSON, and plan vs measured peaks.
//
// JSON of `rlrun plan --json` (all sizes in bytes, integers):
//   {"config": PATH, "backend": "cpu"|"cuda", "precision": NAME, "fits": BOOL,
//    "device": {"bytes", "source", "shared_host"},
//    "model": {"parameters", "num_layers", "hidden_size", "num_heads", "num_kv_heads",
//              "intermediate_size", "vocab_size"},
//    "trainer": {"ranks", "tokens_per_micro_batch", "gradient_checkpointing", "distributed_optimizer",
//                "weights", "gradients", "master_weights", "gradient_shard", "reference_weights",
//                "optimizer_moments", "activations",
//                "activations_checkpointing", "activations_no_checkpointing", "backward_scratch",
//                "logits_workspace", "weight_send_buffer", "runtime_reserve",
//                "phase_peak_bytes": {"forward_backward", "optimizer", "weight_send"},
//                "peak_bytes", "need_bytes", "fits"},
//    "rollout": {"workers", "tensor_parallel_size", "weights", "weight_receive_buffer", "workspace",
//                "kv_bytes_per_token", "kv_bytes_per_sequence", "kv_pool", "max_model_len",
//                "max_num_seqs", "sequences_that_fit", "sequences_waiting", "peak_bytes",
//                "need_bytes", "fits"},
//    "host_total_bytes", "problems": [STRING], "levers": [{"process", "set", "saves_bytes",
//    "fits_after", "sequences_waiting_after", "cost"}], "fit_path": {"fits", "set": [STRING]}}
// ("set" values are --set arguments, several separated by a space; "fit_path" applies the
// cheapest levers one after another until the plan fits.)
//
// The run's measured side, RUN_DIR/summary.json, as the run loop writes it (keys read here):
//   {"processes": [
//     {"role": "trainer" | "rollout",
//      "rank": INT,                  // trainer rank or rollout worker index (default 0)
//      "backend_peak_bytes": INT,    // Backend::peak_bytes() at the end of the run: device memory
//                                    // on cuda, backend allocations on cpu. What the plan budgets.
//      "peak_memory_bytes": INT,     // process resident peak (common/observe/memory.h, the Heartbeat's
//                                    // peak_memory_bytes): the budget plus the runtime
//      "phase_peak_bytes": {"forward_backward": INT, "optimizer": INT, "weight_send": INT}
//                                    // optional, trainer: Backend::peak_bytes() within each phase
//     }, ...]}
// Each process needs backend_peak_bytes or peak_memory_bytes (both when possible); unknown keys
// are ignored; a missing or mistyped key is an error naming it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "orchestrator/plan/memory_advice.h"

namespace rlrun::orchestrator {

// "4.31 MiB", "104.3 GiB" (binary units, 3 significant digits).
std::string format_bytes(double bytes);

// `path`: levers_until_fit() of the same plan (printed as "cheapest way to fit").
std::string render_plan_text(const RunPlan& plan, const std::vector<MemoryLever>& levers, const LeverPath& path,
                             const std::string& config_name);
nlohmann::json plan_to_json(const RunPlan& plan, const std::vector<MemoryLever>& levers, const LeverPath& path,
                            const std::string& config_name);

struct MeasuredProcess {
  std::string role;  // "trainer" | "rollout"
  int64_t rank = 0;
  int64_t backend_peak_bytes = -1;  // -1: not recorded
  int64_t peak_memory_bytes = -1;   // resident; -1: not recorded
  std::map<std::string, int64_t> phase_peak_bytes;
};

// Parses summary.json text (`name` for messages). invalid_argument naming the key at fault.
Result<std::vector<MeasuredProcess>> parse_run_summary(const std::string& text, const std::string& name);

// Plan vs measured per process (and per phase where recorded), with measured / plan ratios.
std::string render_comparison(const RunPlan& plan, const std::vector<MeasuredProcess>& measured);

}  // namespace rlrun::orchestrator
