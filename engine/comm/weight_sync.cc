#include "engine/comm/weight_sync.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/fnv1a.h"
#include "common/observe/log.h"
#include "engine/model/lora.h"
#include "engine/model/weights.h"

namespace rlrun::engine {

namespace {

FlatLayout layout_of(const std::vector<ParamInfo>& params, int64_t flat_elements) {
  FlatLayout layout;
  layout.flat_elements = flat_elements;
  layout.dtype = "f32";
  for (const ParamInfo& p : params) {
    FlatTensor t;
    t.name = p.name;
    t.shape.assign(p.shape.dims.begin(), p.shape.dims.begin() + p.shape.rank);
    t.offset = p.offset;
    t.numel = p.numel;
    layout.tensors.push_back(std::move(t));
  }
  return layout;
}

}  // namespace

FlatLayout flat_layout_of(const ModelWeights& weights) { return layout_of(weights.params(), weights.flat_size()); }

FlatLayout flat_layout_of(const LoraWeights& lora) { return layout_of(lora.params(), lora.flat_size()); }

namespace {

void put_u32(std::vector<uint8_t>& out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(std::vector<uint8_t>& out, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(std::span<const uint8_t> in, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[at + i]) << (8 * i);
  return v;
}
uint64_t get_u64(std::span<const uint8_t> in, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[at + i]) << (8 * i);
  return v;
}

// Header layout: magic u32 @0, format u32 @4, flags u32 @8 (bit 0: metadata follows), version
// u64 @16, digest u64 @24, total u64 @32, bucket u64 @40, metadata_bytes u64 @48; rest zero.
constexpr uint32_t kFlagMetadata = 1;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string encode_layout(const FlatLayout& layout) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const FlatTensor& t : layout.tensors) {
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"offset", t.offset}, {"numel", t.numel}});
  }
  nlohmann::json j = {{"flat_elements", layout.flat_elements}, {"dtype", layout.dtype}, {"tensors", tensors}};
  return j.dump();
}

uint64_t layout_digest(const FlatLayout& layout) {
  // Checkpoints record this digest (trainer_state.json's layout_digest) and a resume compares it:
  // it keeps the basis it has always had, the standard one with its last digit missing, so that
  // every checkpoint written so far still loads.
  constexpr uint64_t kLayoutDigestBasis = 1469598103934665603ULL;
  return fnv1a64(encode_layout(layout), kLayoutDigestBasis);
}

Result<FlatLayout> decode_layout(std::span<const uint8_t> bytes) {
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return protocol_error("weight sync metadata: not a JSON object");
  FlatLayout layout;
  try {
    layout.flat_elements = j.at("flat_elements").get<int64_t>();
    layout.dtype = j.at("dtype").get<std::string>();
    const nlohmann::json& tensors = j.at("tensors");
    if (!tensors.is_array()) return protocol_error("weight sync metadata: `tensors` is not an array");
    for (const nlohmann::json& t : tensors) {
      FlatTensor ft;
      ft.name = t.at("name").get<std::string>();
      ft.shape = t.at("shape").get<std::vector<int64_t>>();
      ft.offset = t.at("offset").get<int64_t>();
      ft.numel = t.at("numel").get<int64_t>();
      layout.tensors.push_back(std::move(ft));
    }
  } catch (const nlohmann::json::exception& e) {
    return protocol_error(str("weight sync metadata: missing or mistyped field (", e.what(), ")"));
  }
  if (layout.flat_elements < 0) return protocol_error("weight sync metadata: negative flat_elements");
  for (const FlatTensor& t : layout.tensors) {
    if (t.offset < 0 || t.numel < 0 || t.offset > layout.flat_elements - t.numel) {
      return protocol_error(str("weight sync metadata: tensor `", t.name, "` [", t.offset, ", +", t.numel,
                                ") lies outside the flat buffer of ", layout.flat_elements, " elements"));
    }
  }
  return layout;
}

Status compare_layouts(const FlatLayout& received, const FlatLayout& own) {
  auto fail = [](const std::string& what) {
    return invalid_argument("weight sync: the sender's parameter layout differs from this worker's (" + what +
                            "); trainer and rollout must run the same model config");
  };
  if (received.dtype != own.dtype) return fail("dtype " + received.dtype + " vs " + own.dtype);
  const size_t n = std::min(received.tensors.size(), own.tensors.size());
  for (size_t i = 0; i < n; ++i) {
    const FlatTensor& a = received.tensors[i];
    const FlatTensor& b = own.tensors[i];
    if (a.name != b.name) return fail(str("tensor #", i, " is `", a.name, "` vs `", b.name, "`"));
    if (a.shape != b.shape) return fail(str("tensor `", a.name, "` shape ", shape_str(a.shape), " vs ", shape_str(b.shape)));
    if (a.offset != b.offset || a.numel != b.numel) {
      return fail(str("tensor `", a.name, "` at offset ", a.offset, " (", a.numel, " elements) vs ", b.offset, " (", b.numel, ")"));
    }
  }
  if (received.tensors.size() != own.tensors.size()) {
    return fail(str(received.tensors.size(), " tensors vs ", own.tensors.size()));
  }
  if (received.flat_elements != own.flat_elements) {
    return fail(str("flat buffer of ", received.flat_elements, " vs ", own.flat_elements, " elements"));
  }
  return Status();
}

std::vector<uint8_t> encode_header(const WeightSyncHeader& h) {
  std::vector<uint8_t> out(kHeaderBytes, 0);
  put_u32(out, 0, kWeightSyncMagic);
  put_u32(out, 4, kWeightSyncFormat);
  put_u32(out, 8, h.has_metadata ? kFlagMetadata : 0);
  put_u64(out, 16, h.version);
  put_u64(out, 24, h.layout_digest);
  put_u64(out, 32, h.total_elements);
  put_u64(out, 40, h.bucket_elements);
  put_u64(out, 48, h.metadata_bytes);
  return out;
}

Result<WeightSyncHeader> decode_header(std::span<const uint8_t> in) {
  if (in.size() != kHeaderBytes) return protocol_error(str("weight sync header: ", in.size(), " bytes, expected ", kHeaderBytes));
  if (get_u32(in, 0) != kWeightSyncMagic) return protocol_error("weight sync header: bad magic (not an rlrun weight sync)");
  if (get_u32(in, 4) != kWeightSyncFormat) {
    return protocol_error(str("weight sync header: format ", get_u32(in, 4), ", this build speaks ", kWeightSyncFormat,
                              "; run the same rlrun version everywhere"));
  }
  WeightSyncHeader h;
  const uint32_t flags = get_u32(in, 8);
  h.has_metadata = (flags & kFlagMetadata) != 0;
  h.version = get_u64(in, 16);
  h.layout_digest = get_u64(in, 24);
  h.total_elements = get_u64(in, 32);
  h.bucket_elements = get_u64(in, 40);
  h.metadata_bytes = get_u64(in, 48);
  if (h.bucket_elements == 0) return protocol_error("weight sync header: bucket of 0 elements");
  if (!h.has_metadata && h.metadata_bytes != 0) return protocol_error("weight sync header: metadata size without metadata flag");
  return h;
}

}  // namespace rlrun::engine
