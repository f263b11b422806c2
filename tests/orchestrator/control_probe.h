// control_probe.h - a stranger on a run's control plane: what does it get through?
//
// probe_control_plane() connects a DEALER with the given security and identity (a worker's
// identity on purpose: a peer admitted under "rollout-0" would take over that worker's routing and
// receive its GenerateRequests and WeightSyncBegins), then tries to register, to set a
// rendezvous key, to submit a GenerateResult, and listens. Each step waits at most `wait`.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/protocol/control_plane.h"

namespace rlrun::testing {

inline constexpr char kProbeStoreKey[] = "probe/stranger-was-here";

struct ProbeResult {
  bool registered = false;        // a RegisterAck (or any reply) to Register came back
  bool store_set_acked = false;   // the StoreSet of kProbeStoreKey was answered
  int messages_received = 0;      // anything else the server sent it while it listened
};

inline ProbeResult probe_control_plane(const std::string& endpoint, const SecurityOptions& security,
                                       const std::string& identity, std::chrono::milliseconds wait) {
  ProbeResult result;
  ControlClient::Options options;
  options.endpoint = endpoint;
  options.identity = identity;
  options.socket.security = security;
  auto client = ControlClient::connect(options);
  EXPECT_TRUE(client.ok()) << client.status().message();
  if (!client.ok()) return result;
  ControlClient& c = **client;
  result.registered = c.request(Register{Role::kRollout, 0, "stranger", 1, {"cpu"}, ""}, wait).ok();
  result.store_set_acked = c.request(StoreSet{kProbeStoreKey, std::vector<uint8_t>{1, 2, 3}}, wait).ok();
  GenerateResult forged;
  forged.request_id = 1;
  forged.token_ids = std::vector<int32_t>{1, 2, 3};
  forged.logprobs = std::vector<float>{-1, -1, -1};
  (void)c.send(forged);  // refused when no connection was ever admitted: nothing to queue it on
  while (c.receive(wait).ok()) ++result.messages_received;
  return result;
}

// Whether kProbeStoreKey is set in the run's rendezvous store, asked by a client that holds the
// run's keys (`security`): proof of whether a stranger's StoreSet landed.
inline bool probe_key_is_set(const std::string& endpoint, const SecurityOptions& security,
                             std::chrono::milliseconds wait) {
  ControlClient::Options options;
  options.endpoint = endpoint;
  options.identity = "probe/store-check";
  options.socket.security = security;
  auto client = ControlClient::connect(options);
  EXPECT_TRUE(client.ok()) << client.status().message();
  if (!client.ok()) return false;
  auto reply = (*client)->request(StoreGet{kProbeStoreKey, 0}, wait);
  EXPECT_TRUE(reply.ok()) << "a client with the run's keys got no StoreValue: " << reply.status().message();
  const StoreValue* value = reply.ok() ? reply->get<StoreValue>() : nullptr;
  return value != nullptr && value->found;
}

}  // namespace rlrun::testing
