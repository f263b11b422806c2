#include "orchestrator/launch/placement.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "common/observe/log.h"

namespace rlrun::orchestrator {
namespace {

// Free units (GPUs, or CPU slots) per node, handed out lowest index first.
class FreeUnits {
 public:
  explicit FreeUnits(const std::vector<int>& capacity) : next_(capacity.size(), 0), capacity_(capacity) {}
  int free(int node) const { return capacity_[node] - next_[node]; }
  std::vector<int> take(int node, int n) {
    std::vector<int> units(n);
    std::iota(units.begin(), units.end(), next_[node]);
    next_[node] += n;
    return units;
  }

 private:
  std::vector<int> next_;
  std::vector<int> capacity_;
};

// Node for the next group of `n` units: PACK = first node with room; SPREAD = round-robin from
// `*cursor`, skipping nodes without room. -1 when no node has room.
int pick_node(const FreeUnits& units, int num_nodes, int n, PlacementStrategy strategy, int* cursor) {
  for (int k = 0; k < num_nodes; ++k) {
    int node = strategy == PlacementStrategy::kPack ? k : (*cursor + k) % num_nodes;
    if (units.free(node) >= n) {
      if (strategy == PlacementStrategy::kSpread) *cursor = (node + 1) % num_nodes;
      return node;
    }
  }
  return -1;
}

std::string what_fits(const std::vector<NodeResources>& nodes, const PlacementRequest& r) {
  int total = 0, servers = 0;
  for (const NodeResources& n : nodes) total += n.gpus;
  // servers that fit once the trainer ranks take their GPUs (PACK order), a bound users can act on
  std::vector<int> left;
  int trainers_left = r.trainer_ranks;
  for (const NodeResources& n : nodes) {
    int used = std::min(n.gpus, trainers_left);
    trainers_left -= used;
    left.push_back(n.gpus - used);
  }
  for (int l : left) servers += l / r.tensor_parallel;
  std::ostringstream out;
  out << "the allocation has " << total << " GPU(s) on " << nodes.size() << " node(s) (";
  for (size_t i = 0; i < nodes.size(); ++i) out << (i ? ", " : "") << nodes[i].name << ": " << nodes[i].gpus;
  out << "); with trainer_num_workers " << r.trainer_ranks;
  if (trainers_left > 0) {
    out << " there are not even enough GPUs for the trainer ranks";
  } else {
    out << ", at most inference_num_workers " << servers * r.tensor_parallel << " (" << servers
        << " server(s) of inference_tensor_parallel_size " << r.tensor_parallel << ") would fit";
  }
  return out.str();
}

Result<PlacementPlan> plan_gpus(const std::vector<NodeResources>& nodes, const PlacementRequest& r) {
  int max_per_node = 0;
  for (const NodeResources& n : nodes) max_per_node = std::max(max_per_node, n.gpus);
  if (r.tensor_parallel > max_per_node) {
    return invalid_argument(str("inference_tensor_parallel_size ", r.tensor_parallel,
                                " does not fit on one node (the largest has ", max_per_node,
                                " GPU(s)); a rollout server never straddles nodes: lower it to at most ",
                                max_per_node));
  }
  PlacementPlan plan;
  plan.nodes = nodes;
  std::vector<int> capacity;
  for (const NodeResources& n : nodes) capacity.push_back(n.gpus);
  FreeUnits units(capacity);
  int cursor = 0;
  const int num_nodes = static_cast<int>(nodes.size());
  for (int t = 0; t < r.trainer_ranks; ++t) {
    int node = pick_node(units, num_nodes, 1, r.strategy, &cursor);
    if (node < 0) return resource_exhausted(str("cannot place trainer rank ", t, ": ", what_fits(nodes, r)));
    plan.trainers.push_back({node, units.take(node, 1)});
  }
  const int servers = r.inference_workers / r.tensor_parallel;
  cursor = 0;
  for (int s = 0; s < servers; ++s) {
    int node = pick_node(units, num_nodes, r.tensor_parallel, r.strategy, &cursor);
    if (node < 0) {
      return resource_exhausted(str("cannot place rollout server ", s, " of ", servers, " (", r.tensor_parallel,
                                    " GPU(s) on one node): ", what_fits(nodes, r)));
    }
    plan.rollout_servers.push_back({node, units.take(node, r.tensor_parallel)});
  }
  return plan;
}

PlacementPlan plan_cpus(const std::vector<NodeResources>& nodes, const PlacementRequest& r) {
  PlacementPlan plan;
  plan.nodes = nodes;
  const int num_nodes = static_cast<int>(nodes.size());
  std::vector<int> load(num_nodes, 0);  // processes per node
  // PACK: fill a node's cores before the next; SPREAD (or when every node is full): least loaded.
  auto next_node = [&](int index) {
    if (r.strategy == PlacementStrategy::kSpread) return index % num_nodes;
    for (int n = 0; n < num_nodes; ++n) {
      if ((load[n] + 1) * r.cpu_threads_per_worker <= nodes[n].cpus) return n;
    }
    return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
  };
  int index = 0;
  for (int t = 0; t < r.trainer_ranks; ++t, ++index) {
    int node = next_node(index);
    ++load[node];
    plan.trainers.push_back({node, {}});
  }
  for (int s = 0; s < r.inference_workers / r.tensor_parallel; ++s, ++index) {
    int node = next_node(index);
    load[node] += r.tensor_parallel;
    plan.rollout_servers.push_back({node, {}});
  }
  for (int n = 0; n < num_nodes; ++n) {
    if (load[n] * r.cpu_threads_per_worker > nodes[n].cpus) {
      plan.warnings.push_back(str("node ", nodes[n].name, ": ", load[n], " worker process(es) x ",
                                  r.cpu_threads_per_worker, " thread(s) on ", nodes[n].cpus,
                                  " core(s): they will share cores and run slower"));
    }
  }
  return plan;
}

}  // namespace

Result<PlacementPlan> plan_placement(const std::vector<NodeResources>& nodes, const PlacementRequest& r) {
  if (nodes.empty()) return invalid_argument("placement: the allocation has no nodes");
  if (r.trainer_ranks < 1) return invalid_argument("trainer_num_workers must be at least 1");
  if (r.tensor_parallel < 1 || r.inference_workers < r.tensor_parallel || r.inference_workers % r.tensor_parallel) {
    return invalid_argument(str("inference_num_workers ", r.inference_workers,
                                " must be a positive multiple of inference_tensor_parallel_size ", r.tensor_parallel));
  }
  if (r.use_gpus) return plan_gpus(nodes, r);
  return plan_cpus(nodes, r);
}

std::string PlacementPlan::table() const {
  std::ostringstream out;
  out << "placement:\n";
  for (size_t n = 0; n < nodes.size(); ++n) {
    out << "  " << nodes[n].name << ":";
    bool any = false;
    auto devices = [](const Assignment& a) {
      if (a.devices.empty()) return std::string();
      std::ostringstream s;
      s << " (gpu ";
      for (size_t i = 0; i < a.devices.size(); ++i) s << (i ? "," : "") << a.devices[i];
      s << ")";
      return s.str();
    };
    for (size_t t = 0; t < trainers.size(); ++t) {
      if (trainers[t].node != static_cast<int>(n)) continue;
      out << (any ? "," : "") << " trainer-" << t << devices(trainers[t]);
      any = true;
    }
    for (size_t s = 0; s < rollout_servers.size(); ++s) {
      if (rollout_servers[s].node != static_cast<int>(n)) continue;
      out << (any ? "," : "") << " rollout-" << s << devices(rollout_servers[s]);
      any = true;
    }
    out << (any ? "" : " (idle)") << "\n";
  }
  for (const std::string& w : warnings) out << "  warning: " << w << "\n";
  return out.str();
}

}  // namespace rlrun::orchestrator
