#include "orchestrator/launch/placement.h"

#include <gtest/gtest.h>

#include <set>

namespace rlrun::orchestrator {
namespace {

std::vector<NodeResources> gpu_nodes(int n, int gpus) {
  std::vector<NodeResources> nodes;
  for (int i = 0; i < n; ++i) nodes.push_back({"node" + std::to_string(i + 1), "127.0.0.1", gpus, 64});
  return nodes;
}

PlacementRequest gpu_request(int trainers, int inference, int tp, PlacementStrategy s) {
  PlacementRequest r;
  r.trainer_ranks = trainers;
  r.inference_workers = inference;
  r.tensor_parallel = tp;
  r.strategy = s;
  r.use_gpus = true;
  return r;
}

// No device is used twice, and every server's devices are on its one node.
void check_no_overlap(const PlacementPlan& plan) {
  std::set<std::pair<int, int>> used;
  auto claim = [&](const Assignment& a) {
    for (int d : a.devices) EXPECT_TRUE(used.insert({a.node, d}).second) << "node " << a.node << " gpu " << d;
    for (int d : a.devices) EXPECT_LT(d, plan.nodes[a.node].gpus);
  };
  for (const auto& a : plan.trainers) claim(a);
  for (const auto& a : plan.rollout_servers) claim(a);
}

TEST(Placement, PackKeepsTrainersTogetherOnFirstNode) {
  auto plan = plan_placement(gpu_nodes(2, 4), gpu_request(4, 4, 2, PlacementStrategy::kPack));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  check_no_overlap(*plan);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(plan->trainers[t].node, 0);
  ASSERT_EQ(plan->rollout_servers.size(), 2u);
  EXPECT_EQ(plan->rollout_servers[0].node, 1);
  EXPECT_EQ(plan->rollout_servers[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->rollout_servers[1].devices, (std::vector<int>{2, 3}));
}

TEST(Placement, SpreadRoundRobinsOverNodes) {
  auto plan = plan_placement(gpu_nodes(2, 4), gpu_request(2, 4, 2, PlacementStrategy::kSpread));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  check_no_overlap(*plan);
  EXPECT_EQ(plan->trainers[0].node, 0);
  EXPECT_EQ(plan->trainers[1].node, 1);
  EXPECT_EQ(plan->rollout_servers[0].node, 0);
  EXPECT_EQ(plan->rollout_servers[1].node, 1);
}

TEST(Placement, ServerNeverStraddlesNodes) {
  // 2 nodes x 3 GPUs, PACK: trainer takes node1 gpu0; a tp-2 server fits on node1 (gpus 1,2);
  // the second server must go whole to node2, not node1 gpu... + node2 gpu0.
  auto plan = plan_placement(gpu_nodes(2, 3), gpu_request(1, 4, 2, PlacementStrategy::kPack));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  check_no_overlap(*plan);
  EXPECT_EQ(plan->rollout_servers[0].node, 0);
  EXPECT_EQ(plan->rollout_servers[1].node, 1);
}

TEST(Placement, InfeasibleRequestSaysWhatWouldFit) {
  auto plan = plan_placement(gpu_nodes(2, 4), gpu_request(2, 8, 2, PlacementStrategy::kPack));
  ASSERT_FALSE(plan.ok());
  const std::string& m = plan.status().message();
  EXPECT_NE(m.find("8 GPU(s) on 2 node(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("at most inference_num_workers 6"), std::string::npos) << m;
}

TEST(Placement, TensorParallelLargerThanNodeIsRejected) {
  auto plan = plan_placement(gpu_nodes(4, 4), gpu_request(1, 8, 8, PlacementStrategy::kPack));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("never straddles nodes"), std::string::npos);
}

TEST(Placement, InferenceNotMultipleOfTensorParallelIsRejected) {
  auto plan = plan_placement(gpu_nodes(1, 8), gpu_request(1, 3, 2, PlacementStrategy::kPack));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("inference_tensor_parallel_size"), std::string::npos);
}

TEST(Placement, CpuOversubscriptionWarnsButPlaces) {
  PlacementRequest r;
  r.trainer_ranks = 2;
  r.inference_workers = 2;
  auto plan = plan_placement({{"localhost", "127.0.0.1", 0, 2}}, r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->trainers.size(), 2u);
  EXPECT_EQ(plan->rollout_servers.size(), 2u);
  ASSERT_EQ(plan->warnings.size(), 1u);
  EXPECT_NE(plan->table().find("trainer-0, trainer-1, rollout-0, rollout-1"), std::string::npos) << plan->table();
}

}  // namespace
}  // namespace rlrun::orchestrator
