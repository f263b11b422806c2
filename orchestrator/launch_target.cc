#include "orchestrator/launch_target.h"

#include "common/log.h"
#include "orchestrator/slurm_launcher.h"

namespace rlrun::orchestrator {

Result<LaunchTarget> make_launch_target(rlrun::Launcher configured, const NodeResources& local_node,
                                        const EnvMap& env, SlurmQueries& queries) {
  RLRUN_ASSIGN_OR_RETURN(rlrun::Launcher kind, detect_launcher(configured, env));
  LaunchTarget target;
  target.kind = kind;
  if (kind == rlrun::Launcher::kLocal) {
    target.nodes = {local_node};
    target.launcher = make_local_launcher();
    target.this_node = local_node.name;
    target.description = "local";
    return target;
  }
  auto allocation = read_slurm_allocation(env, queries);
  if (!allocation.ok()) return allocation.status().with_context("launcher: slurm");
  target.nodes = allocation->nodes;
  target.launcher = make_slurm_launcher(*allocation);
  auto self = env.find("SLURMD_NODENAME");  // set in batch scripts and steps, not in an salloc shell
  if (self != env.end()) {
    for (const NodeResources& n : target.nodes) {
      if (n.name == self->second) target.this_node = n.name;
    }
  }
  target.description = str("slurm job ", allocation->job_id, ":");
  for (const NodeResources& n : target.nodes) {
    target.description = str(target.description, " ", n.name, "(", n.gpus, " GPU, ", n.cpus, " CPU)");
  }
  return target;
}

}  // namespace rlrun::orchestrator
