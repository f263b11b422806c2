// Reading a Slurm allocation from synthetic environments, with the scontrol answers faked.
#include <gtest/gtest.h>

#include "orchestrator/launch/launch_target.h"
#include "orchestrator/launch/slurm_allocation.h"

namespace rlrun::orchestrator {
namespace {

// Expands "nodeN" style lists the way the tests write them; counts the questions asked.
class FakeQueries : public SlurmQueries {
 public:
  std::map<std::string, std::vector<std::string>> lists = {
      {"node[1-3]", {"node1", "node2", "node3"}}, {"node[1-2]", {"node1", "node2"}}, {"node1", {"node1"}},
      {"node2", {"node2"}}, {"node3", {"node3"}}, {"gpu[07-08],cpu1", {"gpu07", "gpu08", "cpu1"}}};
  std::string details;
  int detail_calls = 0;

  Result<std::vector<std::string>> hostnames(const std::string& nodelist) override {
    auto it = lists.find(nodelist);
    if (it == lists.end()) return unavailable("scontrol: invalid hostlist " + nodelist);
    return it->second;
  }
  Result<std::string> node_address(const std::string& node) override {
    if (node == "cpu1") return not_found("scontrol: node cpu1 not found");
    return "10.0.0." + node.substr(node.size() - 1);
  }
  Result<std::string> job_details(const std::string&) override {
    ++detail_calls;
    return details;
  }
};

TEST(SlurmCounts, CompressedSyntax) {
  EXPECT_EQ(*parse_slurm_counts("V", "4"), std::vector<int>({4}));
  EXPECT_EQ(*parse_slurm_counts("V", "2(x3),4"), std::vector<int>({2, 2, 2, 4}));
  EXPECT_EQ(*parse_slurm_counts("V", "72(x2)"), std::vector<int>({72, 72}));
  EXPECT_EQ(*parse_slurm_counts("V", "1,2,3"), std::vector<int>({1, 2, 3}));
  for (const char* bad : {"", "x", "2(x)", "2(3)", "2(x3", "-1", "2,,3", "2(x0)", "2(x3)x", "1.5"}) {
    auto r = parse_slurm_counts("SLURM_JOB_CPUS_PER_NODE", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("SLURM_JOB_CPUS_PER_NODE=\"" + std::string(bad) + "\""), std::string::npos);
  }
}

TEST(SlurmGpus, PerNodeSyntaxes) {
  EXPECT_EQ(*parse_gpus_per_node("V", "4"), 4);
  EXPECT_EQ(*parse_gpus_per_node("V", "gpu:4"), 4);
  EXPECT_EQ(*parse_gpus_per_node("V", "a100:2"), 2);
  EXPECT_EQ(*parse_gpus_per_node("V", "gpu:a100:8"), 8);
  EXPECT_EQ(*parse_gpus_per_node("V", "a100:2,v100:1"), 3);
  for (const char* bad : {"", "gpu", "gpu:", ":4", "gpu:x", "a:b:c:4", "4,"}) {
    auto r = parse_gpus_per_node("SLURM_GPUS_PER_NODE", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("SLURM_GPUS_PER_NODE"), std::string::npos);
  }
  EXPECT_EQ(*parse_gpu_index_list("V", "0,1,2,3"), 4);
  EXPECT_EQ(*parse_gpu_index_list("V", "0-3"), 4);
  EXPECT_EQ(*parse_gpu_index_list("V", "0,2-3"), 3);
  for (const char* bad : {"", "a", "3-1", "0,,1", "-1"}) EXPECT_FALSE(parse_gpu_index_list("V", bad).ok()) << bad;
}

TEST(SlurmJobDetails, GresLines) {
  const std::string text =
      "JobId=7 JobName=interactive\n   NumNodes=3 NumCPUs=6\n   JOB_GRES=gpu:6\n"
      "     Nodes=node[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1)\n"
      "     Nodes=node3 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:3(IDX:0,2-3),gpu:v100:1(IDX:4),mps:100\n"
      "     Nodes=node4 CPU_IDs=0 Mem=0\n";
  auto groups = parse_job_detail_gres(text);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  ASSERT_EQ(groups->size(), 3u);
  EXPECT_EQ((*groups)[0], std::make_pair(std::string("node[1-2]"), 2));
  EXPECT_EQ((*groups)[1], std::make_pair(std::string("node3"), 4));
  EXPECT_EQ((*groups)[2], std::make_pair(std::string("node4"), 0));
  EXPECT_FALSE(parse_job_detail_gres("Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:x(IDX:0)").ok());
}

TEST(SlurmNodeAddress, FromScontrol) {
  EXPECT_EQ(*parse_node_address("n", "NodeName=node1 Arch=x86_64\n   NodeAddr=127.0.0.1 NodeHostName=vm Port=17001\n"),
            "127.0.0.1");
  EXPECT_FALSE(parse_node_address("node9", "Node node9 not found").ok());
}

TEST(SlurmLauncherChoice, AutoFollowsSlurmJobId) {
  const EnvMap inside = {{"SLURM_JOB_ID", "12"}}, outside = {};
  EXPECT_EQ(*detect_launcher(rlrun::LauncherKind::kAuto, inside), rlrun::LauncherKind::kSlurm);
  EXPECT_EQ(*detect_launcher(rlrun::LauncherKind::kAuto, outside), rlrun::LauncherKind::kLocal);
  EXPECT_EQ(*detect_launcher(rlrun::LauncherKind::kLocal, inside), rlrun::LauncherKind::kLocal);
  EXPECT_EQ(*detect_launcher(rlrun::LauncherKind::kSlurm, inside), rlrun::LauncherKind::kSlurm);
  auto r = detect_launcher(rlrun::LauncherKind::kSlurm, outside);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("SLURM_JOB_ID"), std::string::npos);
}

TEST(SlurmAllocation, SallocWithGpusPerNode) {
  FakeQueries q;
  EnvMap env = {{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "node[1-3]"},
                {"SLURM_JOB_CPUS_PER_NODE", "8(x2),4"}, {"SLURM_GPUS_PER_NODE", "gpu:4"}};
  auto a = read_slurm_allocation(env, q);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->job_id, "42");
  ASSERT_EQ(a->nodes.size(), 3u);
  EXPECT_EQ(a->nodes[0].name, "node1");
  EXPECT_EQ(a->nodes[2].address, "10.0.0.3");
  EXPECT_EQ(a->nodes[1].cpus, 8);
  EXPECT_EQ(a->nodes[2].cpus, 4);
  for (const auto& n : a->nodes) EXPECT_EQ(n.gpus, 4);
  EXPECT_EQ(q.detail_calls, 0);
}

TEST(SlurmAllocation, GpuSourcesInOrder) {
  FakeQueries q;
  EnvMap env = {{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_CPUS_ON_NODE", "6"}};
  env["SLURM_JOB_GPUS"] = "0,1,2";
  EXPECT_EQ(read_slurm_allocation(env, q)->nodes[1].gpus, 3);
  EXPECT_EQ(read_slurm_allocation(env, q)->nodes[1].cpus, 6);
  env["SLURM_GPUS_PER_NODE"] = "2";  // preferred over SLURM_JOB_GPUS
  EXPECT_EQ(read_slurm_allocation(env, q)->nodes[0].gpus, 2);
  env.erase("SLURM_GPUS_PER_NODE");
  env.erase("SLURM_JOB_GPUS");
  env["SLURM_GPUS_ON_NODE"] = "1";
  EXPECT_EQ(read_slurm_allocation(env, q)->nodes[0].gpus, 1);
  env.erase("SLURM_GPUS_ON_NODE");
  // salloc --gres=gpu:N: only the controller knows
  q.details = "   Nodes=node1 CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0-1)\n   Nodes=node2 CPU_IDs=0 Mem=0\n";
  auto a = read_slurm_allocation(env, q);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->nodes[0].gpus, 2);
  EXPECT_EQ(a->nodes[1].gpus, 0);
  EXPECT_EQ(q.detail_calls, 1);
}

TEST(SlurmAllocation, ErrorsNameTheVariable) {
  FakeQueries q;
  auto message = [&](const EnvMap& env) {
    auto a = read_slurm_allocation(env, q);
    return a.ok() ? std::string("ok") : a.status().message();
  };
  EXPECT_NE(message({}).find("SLURM_JOB_ID is not set"), std::string::npos);
  EXPECT_NE(message({{"SLURM_JOB_ID", "4x"}, {"SLURM_JOB_NODELIST", "node1"}}).find("SLURM_JOB_ID=\"4x\""),
            std::string::npos);
  EXPECT_NE(message({{"SLURM_JOB_ID", "4"}}).find("SLURM_JOB_NODELIST"), std::string::npos);
  EXPECT_NE(message({{"SLURM_JOB_ID", "4"}, {"SLURM_JOB_NODELIST", "bad[["}}).find("SLURM_JOB_NODELIST=\"bad[[\""),
            std::string::npos);
  EnvMap env = {{"SLURM_JOB_ID", "4"}, {"SLURM_JOB_NODELIST", "node[1-3]"}, {"SLURM_JOB_CPUS_PER_NODE", "2(x2)"}};
  EXPECT_NE(message(env).find("describes 2 node(s) but SLURM_JOB_NODELIST names 3"), std::string::npos);
  env["SLURM_JOB_CPUS_PER_NODE"] = "2(x3";
  EXPECT_NE(message(env).find("SLURM_JOB_CPUS_PER_NODE=\"2(x3\""), std::string::npos);
  env["SLURM_JOB_CPUS_PER_NODE"] = "2(x3)";
  env["SLURM_GPUS_PER_NODE"] = "gpu:four";
  EXPECT_NE(message(env).find("SLURM_GPUS_PER_NODE=\"gpu:four\""), std::string::npos);
  env.erase("SLURM_GPUS_PER_NODE");
  env["SLURM_GPUS_ON_NODE"] = "x";
  EXPECT_NE(message(env).find("SLURM_GPUS_ON_NODE=\"x\""), std::string::npos);
  env.erase("SLURM_GPUS_ON_NODE");
  env.erase("SLURM_JOB_CPUS_PER_NODE");
  env["SLURM_CPUS_ON_NODE"] = "0";
  EXPECT_NE(message(env).find("SLURM_CPUS_ON_NODE=\"0\""), std::string::npos);
  // an address the controller does not know
  EXPECT_NE(message({{"SLURM_JOB_ID", "4"}, {"SLURM_JOB_NODELIST", "gpu[07-08],cpu1"}, {"SLURM_GPUS_ON_NODE", "1"}})
                .find("node cpu1 not found"),
            std::string::npos);
}

TEST(LaunchTarget, LocalOrTheAllocation) {
  FakeQueries q;
  const NodeResources local{"localhost", "127.0.0.1", 0, 8};
  auto outside = make_launch_target(rlrun::LauncherKind::kAuto, local, {}, q);
  ASSERT_TRUE(outside.ok());
  EXPECT_EQ(outside->kind, rlrun::LauncherKind::kLocal);
  ASSERT_EQ(outside->nodes.size(), 1u);
  EXPECT_EQ(outside->nodes[0].name, "localhost");
  ASSERT_NE(outside->launcher, nullptr);

  const EnvMap env = {{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_CPUS_ON_NODE", "4"},
                      {"SLURM_GPUS_PER_NODE", "2"}, {"SLURMD_NODENAME", "node1"}};
  auto inside = make_launch_target(rlrun::LauncherKind::kAuto, local, env, q);
  ASSERT_TRUE(inside.ok()) << inside.status().to_string();
  EXPECT_EQ(inside->kind, rlrun::LauncherKind::kSlurm);
  ASSERT_EQ(inside->nodes.size(), 2u);
  EXPECT_EQ(inside->this_node, "node1");
  EXPECT_EQ(inside->description, "slurm job 9: node1(2 GPU, 4 CPU) node2(2 GPU, 4 CPU)");
  // the Slurm launcher checks specs against the allocation
  ProcessSpec s{"w", {"/bin/true"}, {}, "/dev/null", "localhost", {}};
  EXPECT_NE(inside->launcher->start(s).message().find("not in job 9"), std::string::npos);

  auto local_anyway = make_launch_target(rlrun::LauncherKind::kLocal, local, env, q);
  ASSERT_TRUE(local_anyway.ok());
  EXPECT_EQ(local_anyway->kind, rlrun::LauncherKind::kLocal);
  auto broken = make_launch_target(rlrun::LauncherKind::kSlurm, local, {{"SLURM_JOB_ID", "9"}}, q);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("launcher: slurm"), std::string::npos);
}

}  // namespace
}  // namespace rlrun::orchestrator
