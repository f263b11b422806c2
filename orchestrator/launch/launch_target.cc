#include "orchestrator/launch/launch_target.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "common/observe/log.h"
#include "orchestrator/launch/slurm_launcher.h"

namespace rlrun::orchestrator {

namespace {

std::string own_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

}  // namespace

NodeResources this_machine() {
  return NodeResources{"localhost", "127.0.0.1", 0, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
}

Result<LaunchTarget> make_launch_target(rlrun::LauncherKind configured, const NodeResources& local_node,
                                        const EnvMap& env, SlurmQueries& queries) {
  RLRUN_ASSIGN_OR_RETURN(rlrun::LauncherKind kind, detect_launcher(configured, env));
  LaunchTarget target;
  target.kind = kind;
  if (kind == rlrun::LauncherKind::kLocal) {
    target.nodes = {local_node};
    target.launcher = make_local_launcher();
    target.this_node = local_node.name;
    target.this_address = local_node.address;
    target.description = "local";
    return target;
  }
  auto allocation = read_slurm_allocation(env, queries);
  if (!allocation.ok()) return allocation.status().with_context("launcher: slurm");
  target.nodes = allocation->nodes;
  target.launcher = make_slurm_launcher(*allocation);
  target.this_address = own_host_name();
  auto self = env.find("SLURMD_NODENAME");  // set in batch scripts and steps, not in an salloc shell
  if (self != env.end()) {
    for (const NodeResources& n : target.nodes) {
      if (n.name == self->second) target.this_node = n.name, target.this_address = n.address;
    }
  }
  target.description = str("slurm job ", allocation->job_id, ":");
  for (const NodeResources& n : target.nodes) {
    target.description = str(target.description, " ", n.name, "(", n.gpus, " GPU, ", n.cpus, " CPU)");
  }
  return target;
}

PlacementRequest placement_request(const Config& c) {
  PlacementRequest r;
  r.trainer_ranks = static_cast<int>(c.trainer_num_workers);
  r.inference_workers = static_cast<int>(c.inference_num_workers);
  r.tensor_parallel = static_cast<int>(c.inference_tensor_parallel_size);
  r.strategy = c.placement == Placement::kPack ? PlacementStrategy::kPack : PlacementStrategy::kSpread;
  r.use_gpus = c.backend == BackendKind::kCuda;
  r.cpu_threads_per_worker = static_cast<int>(std::max<int64_t>(1, c.cpu_threads_per_worker));
  return r;
}

void place_worker(const PlacementPlan& plan, const Config& config, Role role, int index, ProcessSpec& spec) {
  const int tp = static_cast<int>(config.inference_tensor_parallel_size);
  const bool rollout = role == Role::kRollout;
  const Assignment& a = rollout ? plan.rollout_servers.at(index / tp) : plan.trainers.at(index);
  spec.node = plan.nodes.at(a.node).name;
  spec.gpus.clear();
  if (!a.devices.empty()) spec.gpus = {rollout ? a.devices.at(index % tp) : a.devices.at(0)};
  if (config.cpu_threads_per_worker > 0) {
    spec.cpus = static_cast<int>(config.cpu_threads_per_worker);
    return;
  }
  int processes = 0;  // planned on this node
  for (const Assignment& t : plan.trainers) processes += t.node == a.node;
  for (const Assignment& s : plan.rollout_servers) processes += s.node == a.node ? tp : 0;
  spec.cpus = std::max(1, plan.nodes[a.node].cpus / std::max(1, processes));
  // The worker's compute threads: its share, also where nothing confines it to spec.cpus cores (the
  // local launcher). Left to itself a CPU backend takes every core, and processes that are busy
  // at once then run more threads than there are cores.
  if (config.backend == BackendKind::kCpu) spec.argv.insert(spec.argv.end(), {"--set", str("cpu_threads_per_worker=", spec.cpus)});
}

std::string ControlAddress::endpoint(int port) const { return str("tcp://", dial_host, ":", port); }

ControlAddress control_address(const LaunchTarget& target, const PlacementPlan& plan) {
  bool all_here = true;
  auto check = [&](const Assignment& a) {
    const NodeResources& node = plan.nodes.at(a.node);
    all_here = all_here && ((!target.this_node.empty() && node.name == target.this_node) || is_loopback(node.address));
  };
  for (const Assignment& a : plan.trainers) check(a);
  for (const Assignment& a : plan.rollout_servers) check(a);
  if (all_here) return {"tcp://127.0.0.1:0", "127.0.0.1"};
  return {"tcp://0.0.0.0:0", target.this_address};
}

}  // namespace rlrun::orchestrator
