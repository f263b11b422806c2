// The control-plane rendezvous store: a real ControlServer serving RendezvousService on a thread,
// worker threads forming Gloo groups through ControlPlaneStore.
#include "orchestrator/run/workers/rendezvous.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "common/protocol/curve_keys.h"
#include "tests/common/eventually.h"

namespace rlrun::orchestrator {
namespace {

using namespace std::chrono_literals;

// A worker's security with a fresh run's keys (client_security: what --control-keys gives it).
SecurityOptions run_keys() {
  static const RunKeys keys = std::move(generate_run_keys()).value();
  return client_security(keys);
}

// The orchestrator's side: a ControlServer whose loop serves only the store (unsecured: the
// tests that secure a weight group give the keys to the group, not to the store).
class StoreServer {
 public:
  StoreServer() {
    auto server = ControlServer::bind({});
    EXPECT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
    endpoint_ = server_->endpoint();
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Result<Incoming> in = server_->poll(20ms);
        if (in.ok()) {
          EXPECT_TRUE(service_.handle(*server_, *in)) << message_kind_name(in->message.kind());
        }
        service_.expire(*server_);
        std::lock_guard<std::mutex> lock(mutex_);
        for (const std::string& prefix : to_abandon_) service_.abandon(*server_, prefix);
        to_abandon_.clear();
        waiting_ = service_.waiting();
      }
    });
  }
  // RendezvousService::abandon, on the server's thread.
  void abandon(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mutex_);
    to_abandon_.push_back(prefix);
  }
  ~StoreServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }
  // StoreGets waiting on the server for a key (as of the server thread's last turn).
  size_t waiting() const { return waiting_.load(); }

 private:
  std::unique_ptr<ControlServer> server_;
  RendezvousService service_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> waiting_{0};
  std::mutex mutex_;
  std::vector<std::string> to_abandon_;
  std::thread thread_;
};

// Group members listen where their peers can reach them: loopback with a loopback orchestrator,
// else the address this machine reaches the orchestrator's host from.
TEST(Rendezvous, MembersListenOnTheAddressThatReachesTheOrchestrator) {
  auto address = [](const std::string& endpoint) {
    auto a = local_address_toward(endpoint);
    return a.ok() ? *a : a.status().to_string();
  };
  EXPECT_EQ(address("tcp://127.0.0.1:5555"), "127.0.0.1");
  EXPECT_EQ(address("tcp://localhost:5555"), "127.0.0.1");
  // A numeric address of this machine's own (the route to it starts and ends here).
  const std::string self = address("tcp://192.0.2.1:9");  // TEST-NET-1: only the route is looked up
  if (self.find('.') != std::string::npos && self.find(' ') == std::string::npos) {
    EXPECT_EQ(address(str("tcp://", self, ":9")), self);
  }
  auto bad = local_address_toward("ipc:///tmp/x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ipc:///tmp/x"), std::string::npos);
}

TEST(Rendezvous, SetThenGetAndWaitingGet) {
  StoreServer server;
  auto a = ControlPlaneStore::connect(server.endpoint(), "a");
  auto b = ControlPlaneStore::connect(server.endpoint(), "b");
  ASSERT_TRUE(a.ok() && b.ok());
  // b asks before a sets: the reply waits on the server until the key exists.
  std::thread getter([&] {
    auto v = (*b)->get("k1", 10000ms);
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(std::string(v->begin(), v->end()), std::string("\x00\x01value", 7));
  });
  ASSERT_TRUE(testing::eventually([&] { return server.waiting() == 1; }, 10s)) << "b's get never reached the server";
  const std::string bytes("\x00\x01value", 7);
  ASSERT_TRUE((*a)->set("k1", std::vector<char>(bytes.begin(), bytes.end())).ok());
  getter.join();
  auto again = (*a)->get("k1", 0ms);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), 7u);
}

TEST(Rendezvous, MissingKeyTimesOutNamingIt) {
  StoreServer server;
  auto store = ControlPlaneStore::connect(server.endpoint(), "lonely");
  ASSERT_TRUE(store.ok());
  const auto start = std::chrono::steady_clock::now();
  auto v = (*store)->get("never/set", 200ms);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("never/set"), std::string::npos) << v.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
}

TEST(Rendezvous, TheDataParallelGroupLivesWhereTheTrainerComputesTheWeightGroupOnTheHost) {
  Config config;
  config.trainer_num_workers = 2;
  EXPECT_EQ(data_parallel_group(config, 1).placement, engine::CommPlacement::kHost) << "backend cpu: Gloo";
  config.backend = BackendKind::kCuda;
  EXPECT_EQ(data_parallel_group(config, 1).placement, engine::CommPlacement::kCuda) << "backend cuda: NCCL";
  EXPECT_EQ(weight_sync_group(config, 1).placement, engine::CommPlacement::kHost)
      << "rollout workers compute on the CPU: the trainer stages its weights";
  EXPECT_EQ(engine::comm_placement_for("cuda:1"), engine::CommPlacement::kCuda);
}

TEST(Rendezvous, TwoGlooGroupsFormThroughTheControlPlane) {
  StoreServer server;
  Config config;
  config.trainer_num_workers = 2;
  config.inference_num_workers = 2;
  // "dp": 2 trainer ranks; "weights-0": trainer rank 0 + 2 rollout workers. Groups share the
  // store; keys are prefixed by group name, so they must not collide.
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto dp = join_group(server.endpoint(), str("trainer-", r), data_parallel_group(config, r));
      ASSERT_TRUE(dp.ok()) << dp.status().message();
      std::vector<float> x = {1.0f + r};
      ASSERT_TRUE((*dp)->all_reduce_sum(x.data(), 1, engine::CommDType::kF32).ok());
      EXPECT_FLOAT_EQ(x[0], 3.0f);
      ++done;
    });
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      const std::string who = r == 0 ? "trainer-0" : str("rollout-", r - 1);
      auto weights = join_group(server.endpoint(), who, weight_sync_group(config, r));
      ASSERT_TRUE(weights.ok()) << weights.status().message();
      EXPECT_EQ((*weights)->size(), 3);
      std::vector<int32_t> v = {r == 0 ? 42 : -1};
      ASSERT_TRUE((*weights)->broadcast(v.data(), 1, engine::CommDType::kI32, 0).ok());
      EXPECT_EQ(v[0], 42);
      ++done;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), 5);
}

// With the run's keys (control_plane_security: curve) the weight group is the CURVE transport:
// it forms through the same store and moves rank 0's bytes, and it is not Gloo (it refuses an
// all-reduce).
TEST(Rendezvous, WithTheRunsKeysTheWeightGroupIsTheCurveTransport) {
  StoreServer server;
  Config config;
  config.inference_num_workers = 2;
  const SecurityOptions keys = run_keys();
  EXPECT_EQ(weight_sync_group(config, 1, 0, keys).security.mechanism, SecurityOptions::Mechanism::kCurve);
  EXPECT_EQ(weight_sync_group(config, 1).security.mechanism, SecurityOptions::Mechanism::kNone) << "none: Gloo";
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      const std::string who = r == 0 ? "trainer-0" : str("rollout-", r - 1);
      auto weights = join_group(server.endpoint(), who, weight_sync_group(config, r, 0, keys));
      ASSERT_TRUE(weights.ok()) << weights.status().message();
      std::vector<int32_t> v = {r == 0 ? 42 : -1};
      ASSERT_TRUE((*weights)->broadcast(v.data(), 1, engine::CommDType::kI32, 0).ok());
      EXPECT_EQ(v[0], 42);
      EXPECT_FALSE((*weights)->all_reduce_sum(v.data(), 1, engine::CommDType::kI32).ok());
    });
  }
  for (auto& t : threads) t.join();
}

// A member died before joining a re-formed weight group: abandoning the group's keys makes the
// others' join fail at once, not at the join timeout. Both transports.
TEST(Rendezvous, AbandonedWeightGroupFailsTheJoinAtOnce) {
  for (const SecurityOptions& security : {SecurityOptions{}, run_keys()}) {
    StoreServer server;
    Config config;
    config.inference_num_workers = 1;
    config.heartbeat_timeout_seconds = 60;  // the re-formed group's join timeout: far beyond the check below
    const auto start = std::chrono::steady_clock::now();
    std::thread trainer([&] {
      auto weights = join_group(server.endpoint(), "trainer-0", weight_sync_group(config, 0, 1, security));
      EXPECT_FALSE(weights.ok());
    });
    ASSERT_TRUE(testing::eventually([&] { return server.waiting() > 0; }, 10s)) << "the trainer never waited for a peer";
    server.abandon(weight_group_key_prefix(1));
    trainer.join();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
    // Later joins of that epoch fail at once too; another epoch is untouched.
    auto late = join_group(server.endpoint(), "rollout-0", weight_sync_group(config, 1, 1, security));
    EXPECT_FALSE(late.ok());
    // Each member keeps its communicator until both joined: a rank that returns first and closes
    // its connections would fail the other's handshake (Gloo: "Connection closed by peer").
    std::vector<std::thread> members;
    std::vector<std::unique_ptr<engine::Communicator>> joined(2);
    for (int r = 0; r < 2; ++r) {
      members.emplace_back([&, r] {
        auto group = join_group(server.endpoint(), str("m", r), weight_sync_group(config, r, 2, security));
        ASSERT_TRUE(group.ok()) << "member " << r << ": " << group.status().message();
        joined[static_cast<size_t>(r)] = std::move(*group);
      });
    }
    for (auto& t : members) t.join();
  }
}

// A member that never takes part (hung: alive, but never at the collective) fails the others'
// collective within the weight group's bound on a live member, rollout_request_timeout_seconds,
// not the join timeout. Both transports. (A stopped or dead one is found sooner by the
// orchestrator: its silence gets it killed, and its closed sockets fail the collective.)
TEST(Rendezvous, WeightGroupCollectiveFailsWithinTheMemberBound) {
  for (const SecurityOptions& security : {SecurityOptions{}, run_keys()}) {
    StoreServer server;
    Config config;
    config.inference_num_workers = 1;
    config.heartbeat_timeout_seconds = 1;
    config.rollout_request_timeout_seconds = 1;
    std::unique_ptr<engine::Communicator> silent;
    std::thread trainer([&] {
      auto weights = join_group(server.endpoint(), "trainer-0", weight_sync_group(config, 0, 0, security));
      ASSERT_TRUE(weights.ok()) << weights.status().message();
      silent = std::move(*weights);  // joined, but never broadcasts
    });
    auto receiver = join_group(server.endpoint(), "rollout-0", weight_sync_group(config, 1, 0, security));
    trainer.join();
    ASSERT_TRUE(receiver.ok()) << receiver.status().message();
    const auto start = std::chrono::steady_clock::now();
    std::vector<int32_t> v = {0};
    const Status s = (*receiver)->broadcast(v.data(), 1, engine::CommDType::kI32, 0);
    EXPECT_FALSE(s.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  }
}

// A member that comes to the collective late, after one long engine step (3x
// heartbeat_timeout_seconds), is waited for: a slow host is not a failed sync. Both transports.
TEST(Rendezvous, WeightGroupWaitsForALiveMemberLongerThanTheHeartbeatTimeout) {
  for (const SecurityOptions& security : {SecurityOptions{}, run_keys()}) {
    StoreServer server;
    Config config;
    config.inference_num_workers = 1;
    config.heartbeat_timeout_seconds = 0.5;
    config.rollout_request_timeout_seconds = 30;
    std::vector<int32_t> sent = {41, 42, 43};
    Status sender_status;
    std::thread trainer([&] {
      auto weights = join_group(server.endpoint(), "trainer-0", weight_sync_group(config, 0, 0, security));
      ASSERT_TRUE(weights.ok()) << weights.status().message();
      sender_status = (*weights)->broadcast(sent.data(), sent.size(), engine::CommDType::kI32, 0);
    });
    auto receiver = join_group(server.endpoint(), "rollout-0", weight_sync_group(config, 1, 0, security));
    ASSERT_TRUE(receiver.ok()) << receiver.status().message();
    std::this_thread::sleep_for(1500ms);  // the engine step the member was in
    std::vector<int32_t> got(3, 0);
    const Status s = (*receiver)->broadcast(got.data(), got.size(), engine::CommDType::kI32, 0);
    trainer.join();
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(sender_status.ok()) << sender_status.message();
    EXPECT_EQ(got, sent);
  }
}

}  // namespace
}  // namespace rlrun::orchestrator
