// rendezvous.h - the key-value store through which collective groups form, served by the
// orchestrator over its control plane (design: "Rendezvous goes through the orchestrator's
// control plane, not a shared file system").
//
// Orchestrator side, RendezvousService: a map from key to bytes, fed by StoreSet and read by
// StoreGet. A StoreGet for a key not yet set waits (server side, never blocking the loop) until
// the key is set or its timeout passes; the loop calls expire() every turn.
// Worker side, ControlPlaneStore: an engine::RendezvousStore over its OWN ControlClient (identity
// "<worker>/store"), so Gloo may block in get() without touching the worker's main connection.
//
// Groups of a run: "dp" (the trainer ranks, rank = trainer rank; "dp-<n>" after their n-th restart) and "weights-<epoch>" (trainer
// rank 0 as rank 0, rollout worker i as rank i + 1). Every implementation prefixes its keys with
// the group name ("<name>/..."; the CURVE transport's are "<name>/curve/...").
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/protocol/control_plane.h"
#include "common/status.h"
#include "engine/comm/communicator.h"

namespace rlrun::orchestrator {

class RendezvousService {
 public:
  // Handles StoreSet / StoreGet from `in`, replying through `server`; false when `in` is another
  // kind (the caller handles it). Replies that cannot be sent (peer gone) are dropped.
  bool handle(ControlServer& server, const Incoming& in);
  // Answers every StoreGet whose timeout has passed with StoreValue{found = false}.
  void expire(ControlServer& server);
  // A member of the group whose keys start with `prefix` died: its waiting StoreGets, and every
  // later one, are answered found = false at once, so the other members' join fails now instead
  // of at its timeout.
  void abandon(ControlServer& server, const std::string& prefix);

  size_t keys() const { return values_.size(); }
  size_t waiting() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::string peer;
    uint64_t correlation_id = 0;
    std::string key;
    std::chrono::steady_clock::time_point deadline;
  };
  bool abandoned(const std::string& key) const;

  std::map<std::string, std::vector<uint8_t>> values_;
  std::vector<Waiter> waiters_;
  std::vector<std::string> abandoned_;  // key prefixes
};

class ControlPlaneStore : public engine::RendezvousStore {
 public:
  // Connects to the orchestrator at `endpoint` (tcp://HOST:PORT) as `identity`, with the
  // worker's control-plane `security` (run/workers/control_plane.h).
  static Result<std::shared_ptr<ControlPlaneStore>> connect(const std::string& endpoint,
                                                            const std::string& identity,
                                                            const SecurityOptions& security = {});

  Status set(const std::string& key, const std::vector<char>& value) override;
  // timeout_error naming the key when it is not set within `timeout`.
  Result<std::vector<char>> get(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  explicit ControlPlaneStore(std::unique_ptr<ControlClient> client) : client_(std::move(client)) {}
  std::mutex mutex_;  // ControlClient is single-threaded; Gloo may call from several threads
  std::unique_ptr<ControlClient> client_;
};

// How long a process waits for all members of a group to show up: processes build their models
// at different speeds on a loaded machine.
inline constexpr std::chrono::milliseconds kGroupJoinTimeout{180000};

// The weight-sync group of a run, "weights-<epoch>": trainer rank 0 (rank 0) and every rollout
// worker (rank i + 1). Epoch 0 forms while the processes start (kGroupJoinTimeout); a later epoch
// re-forms the group after a member died, among running processes. A member takes part at the end
// of its current unit of work (a rollout worker's engine step, which may be long on a slow host),
// so joins and collectives wait for a live member up to weight_sync_member_bound(). A dead or
// stopped member ends them sooner: its silence (heartbeat_timeout_seconds; a stopped process's
// liveness beacon stops too) gets it killed, and its closed sockets fail the survivors'
// collective at once. `security`: the member's control-plane security. With the
// run's keys (control_plane_security: curve) the group is the CURVE transport (engine/comm/), which
// only the run's workers can join, read or write; without (none), Gloo over plain TCP.
engine::GroupOptions weight_sync_group(const Config& config, int rank, int epoch = 0,
                                       const SecurityOptions& security = {});
// How long the weight group waits for a live member: rollout_request_timeout_seconds, the run's
// bound on a rollout worker that works but does not answer (hung).
std::chrono::milliseconds weight_sync_member_bound(const Config& config);
// The prefix of that group's keys in the rendezvous store (RendezvousService::abandon).
std::string weight_group_key_prefix(int epoch);
// The trainer ranks' data-parallel group: "dp", and "dp-<epoch>" for the group the trainer ranks
// form again after their restart number `epoch` (run/training/trainer_recovery.cc).
engine::GroupOptions data_parallel_group(const Config& config, int rank, int epoch = 0);

// Joins `group` through the orchestrator's store (a connection of its own, identity
// "<identity>/store", secured with `security`). Blocks until every member joined or the group's
// timeout. Unless the orchestrator is on loopback, this process listens for its peers on the
// address it reaches the orchestrator from (local_address_toward), so that members on other nodes
// can connect.
Result<std::unique_ptr<engine::Communicator>> join_group(const std::string& orchestrator,
                                                         const std::string& identity,
                                                         const engine::GroupOptions& group,
                                                         const SecurityOptions& security = {});

// This machine's address on the route to `endpoint`'s host ("tcp://HOST:PORT"): "127.0.0.1" for
// a loopback host; else the source address the kernel picks for it (a connected UDP socket, no
// packet sent). Errors name the endpoint.
Result<std::string> local_address_toward(const std::string& endpoint);

}  // namespace rlrun::orchestrator
