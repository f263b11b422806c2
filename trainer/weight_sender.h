// weight_sender.h - trainer rank 0 sends its flat parameters to every rollout worker (design step
// 8; wire format in engine/comm/weight_sync.h, receiver in engine/comm/weight_receiver.h).
//
// The flat buffer is broadcast as f32 from root 0 in buckets of `bucket_bytes`. f32 weights go
// straight out of the parameter buffer (no copy) on a host backend or without host staging; with
// host staging on a device backend each bucket goes through one host buffer of bucket size. bf16
// weights are widened per bucket: on the host (host backend or host staging: host buffers of
// bucket size) or, without host staging on a device, into one f32 device bucket. The layout metadata goes out on the
// first send() and whenever resend_metadata() was called (a receiver rejoined); other sends carry
// its digest only.
// Threads: the thread driving the backend.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/comm/communicator.h"
#include "engine/comm/weight_sync.h"

namespace rlrun::trainer {

struct WeightSendReport {
  uint64_t version = 0;
  bool sent_metadata = false;
  bool freed_grad_buffers = false;
  int64_t bytes = 0;                  // payload bytes
  int64_t buckets = 0;
  int64_t staging_bytes = 0;          // staging beyond the weights (0 for f32 weights on a host backend)
  int64_t backend_in_use_during = 0;  // backend bytes in use while sending (grads freed or not)
  int64_t backend_peak_bytes = 0;     // backend lifetime peak after the send
  int64_t rss_peak_bytes = -1;        // process resident peak during the send (-1: not measured)
  double seconds = 0.0;
};

class WeightSender {
 public:
  // comm: the weight-sync group; this process must be its rank 0. bucket_bytes >= 4.
  // host_staging (weight_broadcast_cpu_staging): comm moves host memory, so a device backend's
  // buckets go through one host buffer; otherwise they are broadcast from device memory (NCCL).
  WeightSender(engine::Backend& backend, engine::FlatLayout layout, engine::Communicator& comm, int64_t bucket_bytes,
               bool host_staging = true);

  // Sends params ((P) f32 or bf16 on the backend) as `version`. Collective over the group.
  Result<WeightSendReport> send(const engine::Tensor& params, uint64_t version);
  void resend_metadata() { metadata_sent_ = false; }
  const engine::FlatLayout& layout() const { return layout_; }

 private:
  engine::Backend& backend_;
  engine::FlatLayout layout_;
  std::string metadata_;
  uint64_t digest_;
  engine::Communicator& comm_;
  int64_t bucket_elements_;
  bool host_staging_;
  bool metadata_sent_ = false;
};

}  // namespace rlrun::trainer
