// communicator.h - collectives between processes: gradient reduction among trainer ranks and the
// weight-sync group (trainer rank 0 + every rollout worker).
//
// One interface, three implementations: Gloo over TCP for host buffers (engine/comm/), NCCL for
// device buffers (engine/cuda/), and the CURVE transport (curve_communicator.cc: ZeroMQ sockets
// encrypted and authenticated with the run's keys) for a host group that carries security, which
// broadcasts from rank 0 only: the weight-sync group. make_communicator() picks one.
// Rendezvous goes through a RendezvousStore that the orchestrator serves over its control plane,
// never through a shared file system.
//
// Contracts: every rank of a group calls the same collectives in the same order with the same
// counts. Calls block until done or until the group's timeout, and return an error Status (naming
// the collective and the peer where known) instead of aborting: a dead peer is a failure the
// caller handles. A Communicator is used from one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/security.h"
#include "common/status.h"

namespace rlrun::engine {

enum class CommDType { kF32, kI32, kU8 };  // kU8: raw bytes, broadcast/all_gather only

size_t comm_dtype_size(CommDType dtype);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data (count) on every rank becomes the elementwise sum over ranks.
  virtual Status all_reduce_sum(void* data, size_t count, CommDType dtype) = 0;
  // data (count) on every rank becomes root's data.
  virtual Status broadcast(void* data, size_t count, CommDType dtype, int root) = 0;
  // in (size() * count_per_rank) summed over ranks; rank r receives slice r into out (count_per_rank).
  virtual Status reduce_scatter_sum(const void* in, void* out, size_t count_per_rank, CommDType dtype) = 0;
  // in (count_per_rank) from every rank, concatenated in rank order into out (size() * count_per_rank).
  virtual Status all_gather(const void* in, void* out, size_t count_per_rank, CommDType dtype) = 0;
  virtual Status barrier() = 0;
};

// A key-value store every member of a group can reach, used once to exchange addresses.
// Thread-safe. get() blocks until the key exists or the timeout passes.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual Status set(const std::string& key, const std::vector<char>& value) = 0;
  virtual Result<std::vector<char>> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// An in-process store for groups whose members are threads of one process (tests, benchmarks).
std::shared_ptr<RendezvousStore> make_in_process_store();

// Where a group's buffers live, which decides its implementation (make_communicator).
enum class CommPlacement {
  kHost,  // Gloo over TCP
  kCuda,  // NCCL (a build with CUDA); the few host control values a group reduces are staged
};
// The placement of a group whose members compute on `backend` ("cpu", "cuda", "cuda:N").
CommPlacement comm_placement_for(std::string_view backend);

struct GroupOptions {
  std::string name = "group";        // keys in the store are prefixed with it; several groups may share a store
  int rank = 0;
  int size = 1;
  std::string interface_host = "127.0.0.1";  // address this rank listens on for its peers
  std::chrono::milliseconds timeout{30000};  // rendezvous, and every collective unless collective_timeout
  // Every collective once the group is connected (0: `timeout`). A short one makes a collective
  // with a dead or stopped member fail on every survivor within it instead of hanging.
  std::chrono::milliseconds collective_timeout{0};
  CommPlacement placement = CommPlacement::kHost;
  int device = 0;  // kCuda: the CUDA device of this rank's buffers
  // kHost only. kCurve (a worker's client_security(), common/protocol/curve_keys.h): the group is
  // the CURVE transport, which only holders of the run's keys can join, read or write; kNone: Gloo,
  // open to anyone who reaches its ports. NCCL has no authentication: kCuda with kCurve is refused.
  SecurityOptions security;
};

// A Gloo communicator over TCP for host (CPU) buffers.
Result<std::unique_ptr<Communicator>> make_gloo_communicator(std::shared_ptr<RendezvousStore> store,
                                                             const GroupOptions& options);

// The CURVE transport for host buffers (options.security must be kCurve): rank 0 binds a CURVE
// server admitting only the run's key, every other rank connects to it. Only broadcast from root 0
// and barrier are implemented; the other collectives return an error.
Result<std::unique_ptr<Communicator>> make_curve_communicator(std::shared_ptr<RendezvousStore> store,
                                                              const GroupOptions& options);

// The group's implementation, by options.placement and options.security: Gloo, CURVE or NCCL.
Result<std::unique_ptr<Communicator>> make_communicator(std::shared_ptr<RendezvousStore> store,
                                                        const GroupOptions& options);

}  // namespace rlrun::engine
