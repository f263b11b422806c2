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

namespace {

// Where one bucket's f32 wire bytes come from. Holds the staging buffers of one send.
class BucketSource {
 public:
  BucketSource(engine::Backend& backend, const engine::Tensor& params, int64_t bucket, bool host_staging)
      : backend_(backend), params_(params) {
    const bool f32 = params.dtype() == engine::DType::kF32;
    const bool on_host = backend.is_host() || host_staging;
    if (on_host && (!f32 || host_staging)) f32_host_.resize(static_cast<size_t>(bucket));
    if (on_host && !f32) raw_host_.resize(static_cast<size_t>(bucket));
    if (!on_host && !f32) f32_device_ = backend.zeros(engine::Shape{bucket}, engine::DType::kF32);
  }
  int64_t staging_bytes() const {
    return static_cast<int64_t>(f32_host_.size() * sizeof(float) + raw_host_.size() * sizeof(uint16_t)) +
           (f32_device_.defined() ? static_cast<int64_t>(f32_device_.nbytes()) : 0);
  }
  // The address of elements [begin, end) as f32, valid until the next call.
  void* f32_bytes(int64_t begin, int64_t end) {
    const engine::Tensor part = params_.rows(begin, end);
    const size_t n = static_cast<size_t>(end - begin);
    if (f32_device_.defined()) {
      const engine::Tensor wire = f32_device_.rows(0, end - begin);
      backend_.convert(wire, part);
      backend_.synchronize();
      return wire.data();
    }
    if (!raw_host_.empty()) {
      backend_.copy_to_host(raw_host_.data(), part, part.nbytes());
      for (size_t i = 0; i < n; ++i) f32_host_[i] = engine::bf16_to_f32(raw_host_[i]);
      return f32_host_.data();
    }
    if (!f32_host_.empty()) {
      backend_.copy_to_host(f32_host_.data(), part, part.nbytes());
      return f32_host_.data();
    }
    return part.data();
  }

 private:
  engine::Backend& backend_;
  engine::Tensor params_;
  std::vector<float> f32_host_;
  std::vector<uint16_t> raw_host_;
  engine::Tensor f32_device_;
};

}  // namespace

Result<WeightSendReport> WeightSender::send(const engine::Tensor& params, uint64_t version) {
  RLRUN_CHECK((params.dtype() == engine::DType::kF32 || params.dtype() == engine::DType::kBF16) &&
                  params.numel() == layout_.flat_elements,
              str("weight sender: params ", params.str(), " must be f32 or bf16 (", layout_.flat_elements, ")"));
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
  BucketSource source(backend_, params, std::min(bucket_elements_, layout_.flat_elements), host_staging_);
  report.backend_in_use_during = static_cast<int64_t>(backend_.bytes_in_use());
  report.staging_bytes = source.staging_bytes();
  for (int64_t begin = 0; begin < layout_.flat_elements; begin += bucket_elements_) {
    const int64_t end = std::min(begin + bucket_elements_, layout_.flat_elements);
    void* data = source.f32_bytes(begin, end);
    RLRUN_RETURN_IF_ERROR(comm_.broadcast(data, static_cast<size_t>(end - begin), CommDType::kF32, 0));
    report.bytes += static_cast<int64_t>(end - begin) * static_cast<int64_t>(sizeof(float));
    ++report.buckets;
  }
  metadata_sent_ = true;
  report.backend_peak_bytes = static_cast<int64_t>(backend_.peak_bytes());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace rlrun::trainer
