#include "engine/comm/weight_receiver.h"

#include <algorithm>
#include <chrono>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::engine {

namespace {
constexpr uint64_t kMaxMetadataBytes = uint64_t{256} << 20;
}

WeightReceiver::WeightReceiver(Backend& backend, FlatLayout own, Communicator& comm, int64_t max_bucket_bytes,
                               bool host_staging)
    : backend_(backend), own_(std::move(own)), own_digest_(layout_digest(own_)), comm_(comm),
      host_staging_(host_staging), max_bucket_bytes_(max_bucket_bytes) {}

Status WeightReceiver::check_layout(const WeightSyncHeader& header, WeightReceiveReport& report) {
  if (header.has_metadata) {
    if (header.metadata_bytes > kMaxMetadataBytes) {
      return protocol_error(str("weight sync: metadata of ", header.metadata_bytes, " bytes exceeds the limit of ",
                                kMaxMetadataBytes));
    }
    std::vector<uint8_t> blob(header.metadata_bytes);
    RLRUN_RETURN_IF_ERROR(comm_.broadcast(blob.data(), blob.size(), CommDType::kU8, 0));
    report.received_metadata = true;
    RLRUN_ASSIGN_OR_RETURN(FlatLayout received, decode_layout(blob));
    RLRUN_RETURN_IF_ERROR(compare_layouts(received, own_));
    if (header.layout_digest != own_digest_) {
      return protocol_error("weight sync: the header's layout digest does not match its metadata");
    }
    cached_digest_ = own_digest_;
    return Status();
  }
  if (cached_digest_ == 0) {
    return invalid_argument("weight sync: got a digest-only sync but no layout was received before (this worker "
                            "joined the group after the first sync); the sender must resend the metadata");
  }
  if (header.layout_digest != cached_digest_) {
    return invalid_argument("weight sync: the sender's layout digest changed since its metadata was sent; trainer and "
                            "rollout must run the same model config");
  }
  return Status();
}

Status WeightReceiver::receive_buckets(const WeightSyncHeader& header, const Tensor* dst, const BucketWriter* write,
                                       WeightReceiveReport& report) {
  const uint64_t total = header.total_elements;
  const uint64_t bucket = std::min<uint64_t>(header.bucket_elements, std::max<uint64_t>(total, 1));
  if (bucket > static_cast<uint64_t>(max_bucket_bytes_) / sizeof(float)) {
    return protocol_error(str("weight sync: bucket of ", header.bucket_elements, " elements exceeds this worker's limit of ",
                              max_bucket_bytes_, " bytes"));
  }
  // On a host backend an f32 destination is host memory: the buckets land in it, no copy.
  const bool direct = host_staging_ && dst != nullptr && backend_.is_host() && dst->dtype() == DType::kF32;
  std::vector<float> host(host_staging_ && !direct ? bucket : 0);
  report.staging_bytes = static_cast<int64_t>(host.size() * sizeof(float));
  Tensor staging;  // f32 device buffer when the destination is not plain host f32, or no host staging
  if ((dst != nullptr && !direct) || write != nullptr || !host_staging_) {
    staging = backend_.zeros(Shape{static_cast<int64_t>(bucket)}, DType::kF32);
    report.staging_bytes += static_cast<int64_t>(staging.nbytes());
  }
  for (uint64_t begin = 0; begin < total; begin += bucket) {
    const uint64_t n = std::min(bucket, total - begin);
    const Tensor stage = staging.defined() ? staging.rows(0, static_cast<int64_t>(n)) : Tensor();
    const Tensor out = dst != nullptr ? dst->rows(static_cast<int64_t>(begin), static_cast<int64_t>(begin + n)) : Tensor();
    void* into = direct ? out.data() : host_staging_ ? static_cast<void*>(host.data()) : stage.data();
    RLRUN_RETURN_IF_ERROR(comm_.broadcast(into, n, CommDType::kF32, 0));
    report.bytes += static_cast<int64_t>(n * sizeof(float));
    ++report.buckets;
    if ((dst == nullptr && write == nullptr) || direct) continue;  // draining, or already in place
    if (host_staging_) backend_.copy_from_host(stage, host.data(), n * sizeof(float));
    if (write != nullptr)
      (*write)(static_cast<int64_t>(begin), stage);
    else
      backend_.convert(out, stage);
  }
  backend_.synchronize();
  return Status();
}

Result<WeightReceiveReport> WeightReceiver::receive(const Tensor& dst) {
  RLRUN_CHECK(dst.defined() && dst.numel() == own_.flat_elements &&
                  (dst.dtype() == DType::kF32 || dst.dtype() == DType::kBF16),
              str("weight receiver: destination ", dst.str(), " must be f32/bf16 (", own_.flat_elements, ")"));
  return receive_into(&dst, nullptr);
}

Result<WeightReceiveReport> WeightReceiver::receive(const BucketWriter& write) { return receive_into(nullptr, &write); }

Result<WeightReceiveReport> WeightReceiver::receive_into(const Tensor* dst, const BucketWriter* write) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> header_bytes(kHeaderBytes);
  RLRUN_RETURN_IF_ERROR(comm_.broadcast(header_bytes.data(), header_bytes.size(), CommDType::kU8, 0));
  RLRUN_ASSIGN_OR_RETURN(WeightSyncHeader header, decode_header(header_bytes));
  WeightReceiveReport report;
  report.version = header.version;
  Status layout = check_layout(header, report);
  if (layout.ok() && header.total_elements != static_cast<uint64_t>(own_.flat_elements)) {
    layout = invalid_argument(str("weight sync: the sender sends ", header.total_elements, " elements, this worker holds ",
                                  own_.flat_elements));
  }
  if (!layout.ok()) {
    if (layout.code() != StatusCode::kProtocol || report.received_metadata) {
      Status drained = receive_buckets(header, nullptr, nullptr, report);  // keep the group in step
      if (!drained.ok()) log::warn("weight sync: could not drain the rejected sync: " + drained.message());
    }
    return layout.with_context(str("weight version ", header.version));
  }
  RLRUN_RETURN_IF_ERROR(receive_buckets(header, dst, write, report));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace rlrun::engine
