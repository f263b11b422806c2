// rank_reduce.h - small host-side reductions over the trainer ranks (losses, counts, norms).
//
// Values travel as raw bytes through Communicator::all_gather and are combined in rank order on
// every rank, so the result is exact in double and bit-identical on all ranks (an f32 all-reduce
// would round counts above 2^24 and may differ in the last bit between ranks).
// `comm` may be null: one rank, nothing is exchanged.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "engine/comm/communicator.h"

namespace rlrun::trainer {

// values (n) on every rank -> per-rank values, rank-major: out[r * n + i].
Result<std::vector<double>> all_gather_doubles(engine::Communicator* comm, std::span<const double> values);

// values (n) become their sum over ranks (summed in rank order).
Status all_reduce_doubles(engine::Communicator* comm, std::span<double> values);

// Every rank returns rank 0's `root_status` (the argument is ignored elsewhere), so a decision
// taken on rank 0 (a file it could not read) reaches all ranks. A collective failure is returned.
Status agree_with_root(engine::Communicator* comm, const Status& root_status);

int comm_size(const engine::Communicator* comm);
int comm_rank(const engine::Communicator* comm);

}  // namespace rlrun::trainer
