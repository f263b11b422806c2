// slurm_allocation.h - what a Slurm allocation gives this run: its nodes, their addresses, and
// the CPUs and GPUs the job holds on each.
//
// Inside `salloc` or `sbatch` Slurm describes the allocation in SLURM_* environment variables.
// These are not configuration (config.h stays the one place for settings): they are facts about
// where the process runs, like its pid. They are read in exactly one function,
// slurm_environment(); everything else takes an EnvMap, so tests pass synthetic environments.
//
// What is read, in order of preference:
//   job          SLURM_JOB_ID (required; its presence is what `launcher: auto` looks at)
//   nodes        SLURM_JOB_NODELIST ("node[1-2],gpu07"), expanded by `scontrol show hostnames`
//   CPUs/node    SLURM_JOB_CPUS_PER_NODE ("2(x3),4"), else SLURM_CPUS_ON_NODE (every node alike)
//   GPUs/node    SLURM_GPUS_PER_NODE ("4", "gpu:4", "a100:4"), else SLURM_JOB_GPUS ("0,1,2,3"),
//                else SLURM_GPUS_ON_NODE ("4"), else the job's GRES lines from
//                `scontrol show job -d` (salloc --gres=gpu:N sets no variable at all), else 0
//   addresses    NodeAddr of `scontrol show node NAME`: fake nodes on one host share a hostname,
//                and a node name need not resolve.
// The scontrol calls sit behind SlurmQueries so that the parsing is a pure, tested function.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/status.h"
#include "orchestrator/launch/placement.h"

namespace rlrun::orchestrator {

using EnvMap = std::map<std::string, std::string>;

struct SlurmAllocation {
  std::string job_id;                // "1234"
  std::vector<NodeResources> nodes;  // in SLURM_JOB_NODELIST order
};

// The questions only the Slurm controller can answer. The real one runs scontrol.
class SlurmQueries {
 public:
  virtual ~SlurmQueries() = default;
  // "node[1-2],gpu07" -> {"node1", "node2", "gpu07"}
  virtual Result<std::vector<std::string>> hostnames(const std::string& nodelist) = 0;
  // NodeAddr of one node ("127.0.0.1", "gpu07-ib").
  virtual Result<std::string> node_address(const std::string& node) = 0;
  // The text of `scontrol show job -d JOB` (its per-node "Nodes=... GRES=gpu:2(IDX:0-1)" lines).
  virtual Result<std::string> job_details(const std::string& job_id) = 0;
};
std::unique_ptr<SlurmQueries> make_scontrol_queries();

// The SLURM_* variables of this process's environment. The only reader of the environment here.
EnvMap slurm_environment();

// Which launcher `launcher:` means here: auto -> slurm when SLURM_JOB_ID is set, else local;
// slurm without an allocation is an error that says how to get one.
Result<rlrun::LauncherKind> detect_launcher(rlrun::LauncherKind configured, const EnvMap& env);

// The allocation described by `env`, asking `queries` what the environment does not say.
// Malformed values are errors naming the variable, its value and what was expected.
Result<SlurmAllocation> read_slurm_allocation(const EnvMap& env, SlurmQueries& queries);

// ---- the parsers, exposed for tests
// Slurm's compressed per-node counts: "2(x3),4" -> {2, 2, 2, 4}. `variable` names the source in errors.
Result<std::vector<int>> parse_slurm_counts(std::string_view variable, std::string_view value);
// A per-node GPU count: "4", "gpu:4", "a100:4", "gpu:a100:4", several types summed ("a100:2,v100:1").
Result<int> parse_gpus_per_node(std::string_view variable, std::string_view value);
// GPU indices "0,1,2,3" or "0-3" -> their count.
Result<int> parse_gpu_index_list(std::string_view variable, std::string_view value);
// The (nodelist, GPU count) pairs of `scontrol show job -d` output, one per "Nodes=" detail line;
// a line without GRES has count 0.
Result<std::vector<std::pair<std::string, int>>> parse_job_detail_gres(std::string_view text);
// NodeAddr from one node's `scontrol show node` text.
Result<std::string> parse_node_address(std::string_view node, std::string_view text);

}  // namespace rlrun::orchestrator
