#include "trainer/weight_sender.h"

#include <algorithm>
#include <chrono>

#include "common/check.h"
#include "common/observe/log.h"

namespace rlrun::trainer {

using engine::CommDType;

WeightSender::WeightSender(engine::Backend& backend, engine::FlatLayout layout, engine::Communicator& comm,
                           int64_t bucket_bytes, bool host_staging)
    : backend_(backend), layout_(std::move(layout)), metadata_(engine::encode_layout(layout_)),
      digest_(engine::layout_digest(layout_)), comm_(comm),
      bucket_elements_(std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)))),
      host_staging_(host_staging && !backend.is_host()) {
  RLRUN_CHECK(comm_.rank() == 0, "the weight sender must be rank 0 of the weight-sync group");
}

Result<WeightSendReport> WeightSender::send(const engine::Tensor& params, uint64_t version) {
  RLRUN_CHECK(params.dtype() == engine::DType::kF32 && params.numel() == layout_.flat_elements,
              str("weight sender: params ", params.str(), " must be f32 (", layout_.flat_elements, ")"));
  const auto start = std::chrono::steady_clock::now();
  WeightSendReport report;
  report.version = version;
  engine::WeightSyncHeader header;
  header.version = version;
  header.has_metadata = !metadata_sent_;
  header.layout_digest = digest_;
  header.total_elements = static_cast<uint64_t>(layout_.flat_elements);
  header.bucket_elements = static_cast<uint64_t>(bucket_elements_);
  header.metadata_bytes = header.has_metadata ? metadata_.size() : 0;
  std::vector<uint8_t> header_bytes = engine::encode_header(header);
  RLRUN_RETURN_IF_ERROR(comm_.broadcast(header_bytes.data(), header_bytes.size(), CommDType::kU8, 0));
  if (header.has_metadata) {
    RLRUN_RETURN_IF_ERROR(comm_.broadcast(metadata_.data(), metadata_.size(), CommDType::kU8, 0));
    report.sent_metadata = true;
  }
  backend_.synchronize();
  report.backend_in_use_during = static_cast<int64_t>(backend_.bytes_in_use());
  std::vector<float> staging;
  if (host_staging_) staging.resize(static_cast<size_t>(std::min(bucket_elements_, layout_.flat_elements)));
  report.staging_bytes = static_cast<int64_t>(staging.size() * sizeof(float));
  for (int64_t begin = 0; begin < layout_.flat_elements; begin += bucket_elements_) {
    const int64_t end = std::min(begin + bucket_elements_, layout_.flat_elements);
    const engine::Tensor bucket = params.rows(begin, end);
    void* data = bucket.data();
    if (host_staging_) {
      backend_.copy_to_host(staging.data(), bucket, bucket.nbytes());
      data = staging.data();
    }
    RLRUN_RETURN_IF_ERROR(comm_.broadcast(data, static_cast<size_t>(end - begin), CommDType::kF32, 0));
    report.bytes += static_cast<int64_t>(bucket.nbytes());
    ++report.buckets;
  }
  metadata_sent_ = true;
  report.backend_peak_bytes = static_cast<int64_t>(backend_.peak_bytes());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace rlrun::trainer
