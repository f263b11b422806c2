// weight_receiver.h - the receiving side of a weight sync (rollout workers; wire format in
// weight_sync.h). The sender is trainer/weight_sender.h.
//
// Memory: an f32 destination on a host backend receives the buckets in place; otherwise each
// bucket is received into ONE bucket-sized buffer (host, or device without host staging) and
// copied into the destination weights (through one bucket-sized f32 device buffer when the
// destination is bf16 or lives off the host), so a sync costs at most two buckets beyond the
// weights. A sync that fails leaves the destination partly overwritten either way.
// The layout arrives once (first sync) and is checked against this worker's own layout, then
// cached: later syncs carry its digest only. On a layout mismatch the receiver still drains the
// sync's buckets (without writing them) so the group stays in step, then returns the error.
// Threads: one thread; between receive() calls the destination is untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"
#include "engine/comm/weight_sync.h"

namespace rlrun::engine {

struct WeightReceiveReport {
  uint64_t version = 0;
  bool received_metadata = false;
  int64_t bytes = 0;           // payload bytes received
  int64_t buckets = 0;
  int64_t staging_bytes = 0;   // host (+ device) buffer bytes used beyond the weights
  double seconds = 0.0;
};

class WeightReceiver {
 public:
  // own: this worker's layout (what dst holds); comm: the weight-sync group, sender = rank 0.
  // max_bucket_bytes bounds what a (possibly corrupt) header may make us allocate.
  // host_staging (weight_broadcast_cpu_staging): comm moves host memory (Gloo): buckets land in a
  // host buffer; otherwise they are received straight into a backend buffer (NCCL on a device;
  // on a host backend both are host memory).
  WeightReceiver(Backend& backend, FlatLayout own, Communicator& comm, int64_t max_bucket_bytes = int64_t{1} << 32,
                 bool host_staging = true);

  // Receives one sync into dst (f32 or bf16 (P) on the backend). Blocks until the sync ends.
  // Errors: collective failures, protocol_error for a malformed header/metadata, invalid_argument
  // for a layout mismatch or a digest-only sync before any metadata (this worker joined late:
  // the sender must resend metadata).
  Result<WeightReceiveReport> receive(const Tensor& dst);
  // The same into a destination that is not one flat buffer: each bucket, f32 on the backend,
  // goes to write(begin, bucket) with its first element's index in the flat layout, in order.
  // For bf16-frozen weights (ModelWeights::write_flat: bf16 matrices, f32 norms).
  using BucketWriter = std::function<void(int64_t begin, const Tensor& bucket)>;
  Result<WeightReceiveReport> receive(const BucketWriter& write);

  bool has_cached_layout() const { return cached_digest_ != 0; }

 private:
  Status check_layout(const WeightSyncHeader& header, WeightReceiveReport& report);
  // dst and write null: drain the buckets without writing them.
  Status receive_buckets(const WeightSyncHeader& header, const Tensor* dst, const BucketWriter* write,
                         WeightReceiveReport& report);
  Result<WeightReceiveReport> receive_into(const Tensor* dst, const BucketWriter* write);

  Backend& backend_;
  FlatLayout own_;
  uint64_t own_digest_;
  Communicator& comm_;
  bool host_staging_;
  int64_t max_bucket_bytes_;
  uint64_t cached_digest_ = 0;  // digest of the last metadata that matched own_ (0 = none yet)
};

}  // namespace rlrun::engine
