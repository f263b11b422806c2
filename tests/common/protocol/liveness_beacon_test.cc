// LivenessBeacon over real loopback TCP: while the owner thread computes (does not touch the
// socket) the beacon repeats its latest heartbeat every interval; while the owner waits in
// receive() the beacon stays quiet (the owner beats itself); nothing before the owner's first
// heartbeat; the thread stops with the beacon.
#include "common/protocol/liveness_beacon.h"

#include <thread>

#include <gtest/gtest.h>

namespace rlrun {
namespace {

using namespace std::chrono_literals;

struct Pair {
  std::unique_ptr<ControlServer> server;
  std::unique_ptr<ControlClient> client;
};

Pair connected() {
  ControlServer::Options so;
  so.bind_endpoint = "tcp://127.0.0.1:0";
  Result<std::unique_ptr<ControlServer>> server = ControlServer::bind(so);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  ControlClient::Options co;
  co.endpoint = (*server)->endpoint();
  co.identity = "rollout-0";
  Result<std::unique_ptr<ControlClient>> client = ControlClient::connect(co);
  EXPECT_TRUE(client.ok()) << client.status().to_string();
  return {std::move(server).value(), std::move(client).value()};
}

// Heartbeats the server receives within `window`.
std::vector<Heartbeat> heartbeats_within(ControlServer& server, std::chrono::milliseconds window) {
  std::vector<Heartbeat> out;
  const auto end = std::chrono::steady_clock::now() + window;
  while (std::chrono::steady_clock::now() < end) {
    Result<Incoming> in = server.poll(10ms);
    if (!in.ok()) continue;
    if (const Heartbeat* hb = in->message.get<Heartbeat>()) out.push_back(*hb);
  }
  return out;
}

TEST(LivenessBeacon, RepeatsTheLatestHeartbeatWhileTheOwnerComputes) {
  Pair p = connected();
  LivenessBeacon beacon(*p.client, 50ms);
  Heartbeat hb;
  hb.worker_id = 7;
  hb.tokens_generated = 1234;
  hb.engine_step_costs = std::vector<double>{1, 2, 3};
  ASSERT_TRUE(p.client->send(hb, 1).ok());
  beacon.sent(hb);
  // The owner "computes" for 10 intervals without touching the socket.
  const std::vector<Heartbeat> got = heartbeats_within(*p.server, 500ms);
  ASSERT_GE(got.size(), 6u) << "the owner's one heartbeat and the beacon's repeats";
  for (const Heartbeat& h : got) {
    EXPECT_EQ(h.worker_id, 7u);
    EXPECT_EQ(h.tokens_generated, 1234u);
    EXPECT_EQ(h.engine_step_costs, hb.engine_step_costs);
  }
  EXPECT_GT(got.back().memory_bytes, 0u) << "fresh memory figures";
  EXPECT_GE(beacon.beats(), 5u);
}

TEST(LivenessBeacon, StaysQuietWhileTheOwnerWaitsInTheSocketAndBeforeItsFirstHeartbeat) {
  Pair p = connected();
  LivenessBeacon beacon(*p.client, 20ms);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(beacon.beats(), 0u) << "nothing to repeat yet";
  Heartbeat hb;
  beacon.sent(hb);
  (void)p.client->receive(300ms);  // the owner waits in the socket, answering nothing
  const uint64_t while_waiting = beacon.beats();
  EXPECT_LE(while_waiting, 1u) << "at most one beat before the owner took the socket";
  std::this_thread::sleep_for(200ms);  // the owner computes
  EXPECT_GE(beacon.beats(), while_waiting + 4);
}

TEST(LivenessBeacon, TheOwnersOwnHeartbeatsPostponeTheBeacons) {
  Pair p = connected();
  LivenessBeacon beacon(*p.client, 100ms);
  Heartbeat hb;
  for (int i = 0; i < 10; ++i) {  // the owner beats every 40 ms: never an interval without one
    beacon.sent(hb);
    std::this_thread::sleep_for(40ms);
  }
  EXPECT_EQ(beacon.beats(), 0u);
}

}  // namespace
}  // namespace rlrun
