// nccl_communicator.h - the Communicator (engine/comm/communicator.h) over NCCL, for device buffers.
//
// Rendezvous: rank 0 creates the NCCL unique id and publishes it in the RendezvousStore under
// "<group name>/nccl_unique_id"; every other rank reads it from there (the orchestrator serves
// the store over its control plane, so no shared file system is involved). Then each rank joins
// with ncclCommInitRankConfig on `device`.
//
// Buffers passed to a collective are device pointers on `device`, and must be ready: the caller
// synchronizes the backend that wrote it first (Backend::synchronize). Collectives run on the
// communicator's own stream and block until done, so buffers may be reused on return. A host
// buffer is accepted too and copied through a device scratch buffer: meant for the few control
// values a data-parallel group also reduces (a loss normaliser, a status every rank agrees on).
//
// Failures are Status values, never aborts: the communicator is non-blocking in NCCL's sense
// (config.blocking = 0) and every wait polls ncclCommGetAsyncError against the group's timeout;
// on an error or a timeout it aborts the NCCL communicator (which is then unusable: every later
// call fails at once) and returns unavailable / timeout naming the group, rank and collective.
// Threads: one thread at a time.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/comm/communicator.h"

namespace rlrun::engine::cuda {

Result<std::unique_ptr<Communicator>> make_nccl_communicator(std::shared_ptr<RendezvousStore> store,
                                                             const GroupOptions& options, int device);

}  // namespace rlrun::engine::cuda
