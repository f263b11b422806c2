// From a placement plan over synthetic allocations (several nodes and GPUs) to what the
// orchestrator starts: each worker's node, devices and cores, and where the control plane listens.
#include <gtest/gtest.h>

#include "orchestrator/launch/launch_target.h"

namespace rlrun::orchestrator {
namespace {

std::vector<NodeResources> nodes(int n, int gpus, int cpus, const std::string& address_prefix) {
  std::vector<NodeResources> out;
  for (int i = 1; i <= n; ++i) out.push_back({"node" + std::to_string(i), address_prefix + std::to_string(i), gpus, cpus});
  return out;
}

Config run_config(int trainers, int inference, int tp, Placement placement, BackendKind backend) {
  Config c;
  c.trainer_num_workers = trainers;
  c.inference_num_workers = inference;
  c.inference_tensor_parallel_size = tp;
  c.placement = placement;
  c.backend = backend;
  c.cpu_threads_per_worker = 0;
  return c;
}

ProcessSpec placed(const PlacementPlan& plan, const Config& c, Role role, int index) {
  ProcessSpec s;
  place_worker(plan, c, role, index, s);
  return s;
}

TEST(PlaceWorker, GpuPackGivesEachWorkerOneDeviceOfItsServer) {
  const Config c = run_config(2, 4, 2, Placement::kPack, BackendKind::kCuda);
  auto plan = plan_placement(nodes(2, 4, 64, "10.0.0."), placement_request(c));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto where = [&](Role role, int i) {
    ProcessSpec s = placed(*plan, c, role, i);
    std::string gpus;
    for (int g : s.gpus) gpus += std::to_string(g);
    return s.node + ":" + gpus + ":" + std::to_string(s.cpus);
  };
  // node1: trainers on 0 and 1, server 0 (rollout-0, rollout-1) on 2 and 3; node2: server 1.
  // Cores (cpu_threads_per_worker 0): the node's 64 shared by the 4 or 2 processes planned there.
  EXPECT_EQ(where(Role::kTrainer, 0), "node1:0:16");
  EXPECT_EQ(where(Role::kTrainer, 1), "node1:1:16");
  EXPECT_EQ(where(Role::kRollout, 0), "node1:2:16");
  EXPECT_EQ(where(Role::kRollout, 1), "node1:3:16");
  EXPECT_EQ(where(Role::kRollout, 2), "node2:0:32");
  EXPECT_EQ(where(Role::kRollout, 3), "node2:1:32");
}

TEST(PlaceWorker, CpuSpreadAndPackOverTwoNodes) {
  Config c = run_config(1, 1, 1, Placement::kSpread, BackendKind::kCpu);
  c.cpu_threads_per_worker = 2;
  auto spread = plan_placement(nodes(2, 0, 4, "10.0.0."), placement_request(c));
  ASSERT_TRUE(spread.ok());
  EXPECT_EQ(placed(*spread, c, Role::kTrainer, 0).node, "node1");
  EXPECT_EQ(placed(*spread, c, Role::kRollout, 0).node, "node2");
  EXPECT_EQ(placed(*spread, c, Role::kRollout, 0).cpus, 2);
  EXPECT_TRUE(placed(*spread, c, Role::kRollout, 0).gpus.empty());
  c.placement = Placement::kPack;
  auto pack = plan_placement(nodes(2, 0, 4, "10.0.0."), placement_request(c));
  ASSERT_TRUE(pack.ok());
  EXPECT_EQ(placed(*pack, c, Role::kTrainer, 0).node, "node1");
  EXPECT_EQ(placed(*pack, c, Role::kRollout, 0).node, "node1");
}

TEST(PlaceWorker, ACpuWorkerIsToldItsShareOfTheCores) {
  // Three processes on 4 cores: 1 thread each (nothing confines a local process to spec.cpus cores,
  // so the share travels as a --set the worker's config load applies).
  Config c = run_config(1, 2, 1, Placement::kPack, BackendKind::kCpu);
  auto plan = plan_placement(nodes(1, 0, 4, "10.0.0."), placement_request(c));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const ProcessSpec s = placed(*plan, c, Role::kRollout, 1);
  EXPECT_EQ(s.cpus, 1);
  ASSERT_GE(s.argv.size(), 2u);
  EXPECT_EQ(s.argv[s.argv.size() - 2], "--set");
  EXPECT_EQ(s.argv.back(), "cpu_threads_per_worker=1");
  c.cpu_threads_per_worker = 3;  // the user's choice stays theirs: the config already says it
  EXPECT_TRUE(placed(*plan, c, Role::kRollout, 1).argv.empty());
}

// A Slurm target over `allocation` as seen from `this_node` ("" = a login node called login1).
LaunchTarget slurm_target(std::vector<NodeResources> allocation, const std::string& this_node) {
  LaunchTarget t;
  t.kind = rlrun::LauncherKind::kSlurm;
  t.nodes = std::move(allocation);
  t.this_node = this_node;
  t.this_address = "login1";
  for (const NodeResources& n : t.nodes) {
    if (n.name == this_node) t.this_address = n.address;
  }
  return t;
}

TEST(ControlAddress, LoopbackOnlyWhenEveryWorkerIsOnThisMachine) {
  const Config c = run_config(1, 1, 1, Placement::kSpread, BackendKind::kCpu);
  Config packed = c;
  packed.placement = Placement::kPack;

  LaunchTarget local;
  local.nodes = {this_machine()};
  local.this_node = "localhost";
  local.this_address = "127.0.0.1";
  auto local_plan = plan_placement(local.nodes, placement_request(c));
  ASSERT_TRUE(local_plan.ok());
  EXPECT_EQ(control_address(local, *local_plan).bind_endpoint, "tcp://127.0.0.1:0");

  // Real nodes: SPREAD puts the rollout worker on node2, which must dial node1's NodeAddr.
  LaunchTarget batch = slurm_target(nodes(2, 0, 4, "10.0.0."), "node1");
  auto spread = plan_placement(batch.nodes, placement_request(c));
  ASSERT_TRUE(spread.ok());
  ControlAddress a = control_address(batch, *spread);
  EXPECT_EQ(a.bind_endpoint, "tcp://0.0.0.0:0");
  EXPECT_EQ(a.endpoint(5555), "tcp://10.0.0.1:5555");
  // PACK keeps both on node1, the orchestrator's own node.
  auto pack = plan_placement(batch.nodes, placement_request(packed));
  ASSERT_TRUE(pack.ok());
  EXPECT_EQ(control_address(batch, *pack).endpoint(5555), "tcp://127.0.0.1:5555");

  // salloc on a login node: every worker is elsewhere, even with PACK; they dial its host name.
  LaunchTarget salloc = slurm_target(nodes(2, 0, 4, "10.0.0."), "");
  ControlAddress from_login = control_address(salloc, *pack);
  EXPECT_EQ(from_login.bind_endpoint, "tcp://0.0.0.0:0");
  EXPECT_EQ(from_login.dial_host, "login1");

  // Fake nodes of a one-host test cluster (NodeAddr 127.0.0.1): loopback is enough.
  LaunchTarget one_host = slurm_target(nodes(2, 0, 4, "127.0.0."), "");
  auto one_host_spread = plan_placement(one_host.nodes, placement_request(c));
  ASSERT_TRUE(one_host_spread.ok());
  EXPECT_EQ(control_address(one_host, *one_host_spread).bind_endpoint, "tcp://127.0.0.1:0");
}

}  // namespace
}  // namespace rlrun::orchestrator
