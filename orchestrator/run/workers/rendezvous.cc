// rendezvous.cc - the control-plane key-value store: server map and worker client.
#include "orchestrator/run/workers/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/observe/log.h"

namespace rlrun::orchestrator {

namespace {

using Clock = std::chrono::steady_clock;

// Slack on top of the server-side wait before the client gives up on the reply itself.
constexpr std::chrono::milliseconds kReplySlack{5000};

void reply(ControlServer& server, const std::string& peer, uint64_t correlation_id, StoreValue value) {
  const Status s = server.send(peer, value, correlation_id);
  if (!s.ok()) log::debug(str("rendezvous: reply to ", peer, " dropped: ", s.message()));
}

}  // namespace

bool RendezvousService::handle(ControlServer& server, const Incoming& in) {
  if (const StoreSet* set = in.message.get<StoreSet>()) {
    std::vector<uint8_t> bytes(set->value.begin(), set->value.end());
    reply(server, in.peer, in.message.correlation_id, StoreValue{set->key, true, {}});
    // Wake the waiters of this key, in arrival order.
    auto waiting = std::stable_partition(waiters_.begin(), waiters_.end(),
                                         [&](const Waiter& w) { return w.key != set->key; });
    for (auto it = waiting; it != waiters_.end(); ++it)
      reply(server, it->peer, it->correlation_id, StoreValue{it->key, true, bytes});
    waiters_.erase(waiting, waiters_.end());
    values_[set->key] = std::move(bytes);
    return true;
  }
  if (const StoreGet* get = in.message.get<StoreGet>()) {
    auto found = values_.find(get->key);
    if (abandoned(get->key)) {
      reply(server, in.peer, in.message.correlation_id, StoreValue{get->key, false, {}});
    } else if (found != values_.end()) {
      reply(server, in.peer, in.message.correlation_id, StoreValue{get->key, true, found->second});
    } else {
      waiters_.push_back({in.peer, in.message.correlation_id, get->key,
                          Clock::now() + std::chrono::milliseconds(get->timeout_ms)});
    }
    return true;
  }
  return false;
}

void RendezvousService::expire(ControlServer& server) {
  const auto now = Clock::now();
  auto expired = std::stable_partition(waiters_.begin(), waiters_.end(),
                                       [&](const Waiter& w) { return w.deadline > now; });
  for (auto it = expired; it != waiters_.end(); ++it)
    reply(server, it->peer, it->correlation_id, StoreValue{it->key, false, {}});
  waiters_.erase(expired, waiters_.end());
}

bool RendezvousService::abandoned(const std::string& key) const {
  for (const std::string& prefix : abandoned_)
    if (key.starts_with(prefix)) return true;
  return false;
}

void RendezvousService::abandon(ControlServer& server, const std::string& prefix) {
  abandoned_.push_back(prefix);
  auto dropped = std::stable_partition(waiters_.begin(), waiters_.end(),
                                       [&](const Waiter& w) { return !w.key.starts_with(prefix); });
  for (auto it = dropped; it != waiters_.end(); ++it)
    reply(server, it->peer, it->correlation_id, StoreValue{it->key, false, {}});
  waiters_.erase(dropped, waiters_.end());
}

Result<std::shared_ptr<ControlPlaneStore>> ControlPlaneStore::connect(const std::string& endpoint,
                                                                      const std::string& identity,
                                                                      const SecurityOptions& security) {
  ControlClient::Options options;
  options.endpoint = endpoint;
  options.identity = identity;
  options.socket.security = security;
  RLRUN_ASSIGN_OR_RETURN(std::unique_ptr<ControlClient> client, ControlClient::connect(options));
  return std::shared_ptr<ControlPlaneStore>(new ControlPlaneStore(std::move(client)));
}

Status ControlPlaneStore::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  StoreSet message{key, std::vector<uint8_t>(value.begin(), value.end())};
  Result<Message> ack = client_->request(message, kReplySlack * 6);
  if (!ack.ok()) return Status(ack.status().code(), str("rendezvous store: set `", key, "`: ", ack.status().message()));
  return Status();
}

Result<std::vector<char>> ControlPlaneStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto wait_ms = static_cast<uint32_t>(std::clamp<int64_t>(timeout.count(), 0, INT32_MAX));
  Result<Message> reply = client_->request(StoreGet{key, wait_ms}, timeout + kReplySlack);
  if (!reply.ok())
    return Status(reply.status().code(), str("rendezvous store: get `", key, "`: ", reply.status().message()));
  const StoreValue* value = reply->get<StoreValue>();
  if (value == nullptr)
    return protocol_error(str("rendezvous store: get `", key, "` answered with ", message_kind_name(reply->kind())));
  if (!value->found)
    return timeout_error(str("rendezvous store: key `", key, "` not set within ", timeout.count(),
                             " ms (a group member did not join: see its log)"));
  return std::vector<char>(value->value.begin(), value->value.end());
}

std::chrono::milliseconds weight_sync_member_bound(const Config& config) {
  return std::chrono::milliseconds(static_cast<int64_t>(config.rollout_request_timeout_seconds * 1000));
}

engine::GroupOptions weight_sync_group(const Config& config, int rank, int epoch, const SecurityOptions& security) {
  engine::GroupOptions g;
  g.name = str("weights-", epoch);
  g.rank = rank;
  g.size = static_cast<int>(config.inference_num_workers) + 1;
  const std::chrono::milliseconds busy_member = weight_sync_member_bound(config);
  g.timeout = epoch == 0 ? kGroupJoinTimeout : busy_member;
  g.collective_timeout = busy_member;
  // Rollout workers compute on the CPU (roles/cmd_rollout.cc refuses other backends), so the group
  // moves host memory and a trainer on a device stages its weights (trainer/weight_sender.h).
  // Rollout on CUDA makes this comm_placement_for(backend): NCCL from device to device.
  g.placement = engine::CommPlacement::kHost;
  g.security = security;
  return g;
}

std::string weight_group_key_prefix(int epoch) { return str("weights-", epoch, "/"); }

engine::GroupOptions data_parallel_group(const Config& config, int rank, int epoch) {
  engine::GroupOptions g;
  g.name = epoch == 0 ? std::string("dp") : str("dp-", epoch);
  g.rank = rank;
  g.size = static_cast<int>(config.trainer_num_workers);
  g.timeout = kGroupJoinTimeout;
  // Gradients live where the trainer computes: NCCL for a CUDA trainer, Gloo for a CPU one. Each
  // trainer process sees its one device as device 0 (CUDA_VISIBLE_DEVICES, as the backend does).
  g.placement = engine::comm_placement_for(enum_name(config.backend));
  g.device = 0;
  return g;
}

Result<std::unique_ptr<engine::Communicator>> join_group(const std::string& orchestrator,
                                                         const std::string& identity,
                                                         const engine::GroupOptions& group,
                                                         const SecurityOptions& security) {
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<ControlPlaneStore> store,
                         ControlPlaneStore::connect(orchestrator, str(identity, "/store-", group.name), security));
  engine::GroupOptions options = group;
  RLRUN_ASSIGN_OR_RETURN(options.interface_host, local_address_toward(orchestrator));
  Result<std::unique_ptr<engine::Communicator>> comm = engine::make_communicator(store, options);
  if (!comm.ok())
    return Status(comm.status().code(), str("joining group `", group.name, "` as rank ", group.rank, " of ",
                                            group.size, ": ", comm.status().message()));
  return comm;
}

Result<std::string> local_address_toward(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon < 6) {
    return invalid_argument(str("orchestrator endpoint `", endpoint, "` is not tcp://HOST:PORT"));
  }
  const std::string host = endpoint.substr(6, colon - 6), port = endpoint.substr(colon + 1);
  if (host == "localhost" || host.rfind("127.", 0) == 0) return std::string("127.0.0.1");
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return unavailable(str("cannot resolve the orchestrator's host `", host, "`: ", ::gai_strerror(rc)));
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  const std::string error = ok ? "" : std::strerror(errno);
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (!ok) return unavailable(str("no route to the orchestrator's host `", host, "`: ", error));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return std::string(text);
}

}  // namespace rlrun::orchestrator
