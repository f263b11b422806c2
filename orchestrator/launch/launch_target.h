// launch_target.h - where a run's workers go and who starts them, decided once from `launcher:`.
//
// Outside a Slurm allocation (or with `launcher: local`): the local launcher and this machine as
// the one node. Inside one (`auto` or `slurm`): the Slurm launcher and the allocation's nodes.
// The orchestrator plans placement over `nodes` (placement_request), gives each ProcessSpec its
// planned node, devices and cores (place_worker), and binds its control server where the workers
// can reach it (control_address); nothing else differs between the two.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/protocol/protocol.h"
#include "orchestrator/launch/launcher.h"
#include "orchestrator/launch/placement.h"
#include "orchestrator/launch/slurm_allocation.h"

namespace rlrun::orchestrator {

struct LaunchTarget {
  rlrun::LauncherKind kind = rlrun::LauncherKind::kLocal;  // kLocal or kSlurm, never kAuto
  std::vector<NodeResources> nodes;                // what placement plans over
  std::unique_ptr<Launcher> launcher;
  std::string this_node;     // the node the orchestrator runs on ("" when not one of `nodes`)
  std::string this_address;  // where other nodes reach the orchestrator: this_node's NodeAddr,
                             // else this host's name (salloc on a login node)
  std::string description;   // "local" / "slurm job 1234: node1(...) node2(...)" for the run's log
};

// This machine as the local launcher's one node: no GPUs listed, every core.
NodeResources this_machine();

// `env` is slurm_environment() (tests pass maps); `queries` answers what it does not say.
Result<LaunchTarget> make_launch_target(rlrun::LauncherKind configured, const NodeResources& local_node,
                                        const EnvMap& env, SlurmQueries& queries);

// What placement is asked for by `config`: trainer ranks, rollout workers, strategy, devices.
PlacementRequest placement_request(const Config& config);

// Sets spec.node, spec.gpus and spec.cpus of trainer rank `index` or rollout worker `index` from
// `plan`. Rollout worker i is worker i % inference_tensor_parallel_size of server
// i / inference_tensor_parallel_size and gets that server's device of the same position. Cores:
// cpu_threads_per_worker, or (0) the node's cores shared out among the processes planned there.
void place_worker(const PlacementPlan& plan, const Config& config, Role role, int index, ProcessSpec& spec);

// Where the control server binds and the host its workers dial. Loopback when every worker runs
// on this machine (the local launcher; Slurm nodes with a loopback NodeAddr, as on a one-host test
// cluster; or all on the orchestrator's own node); otherwise every interface, dialled at
// target.this_address.
struct ControlAddress {
  std::string bind_endpoint;  // "tcp://127.0.0.1:0" or "tcp://0.0.0.0:0" (the kernel picks the port)
  std::string dial_host;      // "127.0.0.1", a NodeAddr or a host name
  std::string endpoint(int port) const;  // "tcp://DIAL_HOST:PORT"
};
ControlAddress control_address(const LaunchTarget& target, const PlacementPlan& plan);

}  // namespace rlrun::orchestrator
