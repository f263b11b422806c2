// weight_sync.h - the wire format of a weight sync over a Communicator (design step 8), shared by
// the sender (trainer/weight_sender.h, trainer rank 0 = root 0) and every receiver
// (engine/comm/weight_receiver.h, rollout workers).
//
// One sync = a sequence of broadcasts from root 0, all ranks calling them in the same order:
//   1. header      kHeaderBytes bytes (WeightSyncHeader, little-endian fixed layout)
//   2. metadata    header.metadata_bytes bytes of JSON (FlatLayout), ONLY when
//                  header.has_metadata: the first sync of a group, or after resend was asked;
//                  later syncs carry only header.layout_digest, which receivers compare against
//                  the layout they cached
//   3. buckets     ceil(total / bucket) broadcasts of the flat f32 parameter buffer, elements
//                  [i * bucket, min((i + 1) * bucket, total)).
// Everything a receiver reads is untrusted: sizes are checked before anything is allocated.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace rlrun::engine {

// A tensor inside a flat parameter buffer.
struct FlatTensor {
  std::string name;            // HF name
  std::vector<int64_t> shape;  // row-major
  int64_t offset = 0;          // element offset in the flat buffer
  int64_t numel = 0;
  bool operator==(const FlatTensor&) const = default;
};

struct FlatLayout {
  std::vector<FlatTensor> tensors;
  int64_t flat_elements = 0;   // P, alignment padding included
  std::string dtype = "f32";   // element type on the wire
  bool operator==(const FlatLayout&) const = default;
};

class ModelWeights;
class LoraWeights;
// The layout of a model's flat f32 parameter buffer: one FlatTensor per HF-named parameter.
FlatLayout flat_layout_of(const ModelWeights& weights);
// The same of low-rank adapters' flat buffer (PEFT names): what a LoRA run syncs.
FlatLayout flat_layout_of(const LoraWeights& lora);

// Canonical JSON bytes (the metadata blob) and its FNV-1a 64 digest.
std::string encode_layout(const FlatLayout& layout);
uint64_t layout_digest(const FlatLayout& layout);
// protocol_error naming the field for malformed JSON, negative sizes, tensors outside the buffer.
Result<FlatLayout> decode_layout(std::span<const uint8_t> bytes);
// ok, or invalid_argument naming the first difference (tensor name, shape, offset, size) and
// saying the sender and receiver run different models.
Status compare_layouts(const FlatLayout& received, const FlatLayout& own);

constexpr size_t kHeaderBytes = 64;
constexpr uint32_t kWeightSyncMagic = 0x53574c52;  // "RLWS"
constexpr uint32_t kWeightSyncFormat = 1;

struct WeightSyncHeader {
  uint64_t version = 0;           // weight version being sent
  bool has_metadata = false;
  uint64_t layout_digest = 0;
  uint64_t total_elements = 0;    // P
  uint64_t bucket_elements = 0;   // > 0
  uint64_t metadata_bytes = 0;    // 0 unless has_metadata

  uint64_t num_buckets() const { return bucket_elements == 0 ? 0 : (total_elements + bucket_elements - 1) / bucket_elements; }
};

std::vector<uint8_t> encode_header(const WeightSyncHeader& header);  // kHeaderBytes
// protocol_error for a wrong magic/format, a zero bucket, or metadata without the flag.
Result<WeightSyncHeader> decode_header(std::span<const uint8_t> bytes);

}  // namespace rlrun::engine
