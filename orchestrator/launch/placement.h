// placement.h - turns an allocation (nodes x GPUs, or CPU slots) into an assignment of trainer
// ranks and rollout servers.
//
// PACK fills a node before the next: trainer ranks first, on consecutive devices of as few nodes
// as possible (their collectives then stay on NVLink), then rollout servers. SPREAD deals trainer
// ranks and then servers round-robin over nodes. A rollout server's inference_tensor_parallel_size
// devices are always on one node. On GPUs a request that does not fit fails before anything starts
// and says what would fit; on CPUs processes share cores, and the plan warns when they oversubscribe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::orchestrator {

struct NodeResources {
  std::string name;     // Slurm node name, or "localhost"
  std::string address;  // where its processes are reachable
  int gpus = 0;         // devices usable on this node (CUDA_VISIBLE_DEVICES indices 0..gpus-1)
  int cpus = 1;
};

enum class PlacementStrategy { kPack, kSpread };

struct PlacementRequest {
  int trainer_ranks = 1;
  int inference_workers = 1;     // devices (GPU) or processes (CPU) for rollout, in total
  int tensor_parallel = 1;       // workers per rollout server
  PlacementStrategy strategy = PlacementStrategy::kPack;
  bool use_gpus = false;
  int cpu_threads_per_worker = 1;  // CPU only: cores one process wants
};

struct Assignment {
  int node = 0;               // index into the nodes given to plan_placement
  std::vector<int> devices;   // GPU indices on that node (empty on CPU)
};

struct PlacementPlan {
  std::vector<NodeResources> nodes;
  std::vector<Assignment> trainers;         // trainers[r]: trainer rank r
  std::vector<Assignment> rollout_servers;  // rollout_servers[s]: server s, tensor_parallel devices
  std::vector<std::string> warnings;        // e.g. CPU oversubscription

  // A table for the start of a run: one line per node with what runs there.
  std::string table() const;
};

Result<PlacementPlan> plan_placement(const std::vector<NodeResources>& nodes, const PlacementRequest& request);

}  // namespace rlrun::orchestrator
