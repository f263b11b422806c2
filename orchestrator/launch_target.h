// launch_target.h - where a run's workers go and who starts them, decided once from `launcher:`.
//
// Outside a Slurm allocation (or with `launcher: local`): the local launcher and the one local
// node the caller describes. Inside one (`auto` or `slurm`): the Slurm launcher and the
// allocation's nodes. The orchestrator plans placement over `nodes`, then gives each
// ProcessSpec the planned node name, devices and cores; nothing else changes between the two.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "orchestrator/launcher.h"
#include "orchestrator/placement.h"
#include "orchestrator/slurm_allocation.h"

namespace rlrun::orchestrator {

struct LaunchTarget {
  rlrun::Launcher kind = rlrun::Launcher::kLocal;  // kLocal or kSlurm, never kAuto
  std::vector<NodeResources> nodes;                // what placement plans over
  std::unique_ptr<Launcher> launcher;
  std::string this_node;    // the node the orchestrator runs on ("" when not one of `nodes`)
  std::string description;  // "local" / "slurm job 1234: node1 node2" for the run's log
};

// `env` is slurm_environment() (tests pass maps); `queries` answers what it does not say.
Result<LaunchTarget> make_launch_target(rlrun::Launcher configured, const NodeResources& local_node,
                                        const EnvMap& env, SlurmQueries& queries);

}  // namespace rlrun::orchestrator
