#include "engine/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/atomic_file.h"
#include "common/observe/log.h"
#include "engine/bf16.h"
#include "engine/io/mapped_file.h"

namespace rlrun::engine {

static_assert(std::endian::native == std::endian::little, "safetensors IO assumes a little-endian host");

namespace {

// The reference implementation's limit; a larger header is a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using Json = nlohmann::json;

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
  }
  return "?";
}

Result<DType> parse_safetensors_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64}) {
    if (name == safetensors_dtype_name(d)) return d;
  }
  return invalid_argument(str("unsupported dtype `", name, "` (supported: F32, F16, BF16, I32, I64)"));
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at parse time not to overflow
  return n;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------- the bytes behind a file

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::open(path, "safetensors file"));
  return from_buffer(path, std::move(file));
}

Result<SafetensorsFile> SafetensorsFile::parse(std::string source, std::vector<uint8_t> bytes) {
  return from_buffer(std::move(source), MappedFile::from_bytes(std::move(bytes)));
}

// ---------------------------------------------------------------- header validation

namespace {

// A non-negative integer that fits int64, or an error.
Result<int64_t> json_index(const Json& j, const std::string& what) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument(str(what, " ", v, " is too large"));
    }
    return static_cast<int64_t>(v);
  }
  if (j.is_number_integer()) return invalid_argument(str(what, " ", j.get<int64_t>(), " is negative"));
  return invalid_argument(str(what, " must be a non-negative integer, got ", j.dump()));
}

// Fills view.dtype/shape and returns [begin, end) relative to the data area.
Result<std::pair<int64_t, int64_t>> parse_tensor_entry(const Json& entry, TensorView& view) {
  if (!entry.is_object()) return invalid_argument("entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) return invalid_argument(str("missing `", key, "`"));
  }
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) return invalid_argument("`dtype` is not a string");
  RLRUN_ASSIGN_OR_RETURN(view.dtype, parse_safetensors_dtype(dtype.get<std::string>()));

  const Json& shape = entry["shape"];
  if (!shape.is_array()) return invalid_argument("`shape` is not an array");
  int64_t numel = 1;
  for (const Json& dim : shape) {
    RLRUN_ASSIGN_OR_RETURN(int64_t d, json_index(dim, "shape dimension"));
    if (__builtin_mul_overflow(numel, d, &numel)) {
      return invalid_argument(str("shape ", shape.dump(), " overflows"));
    }
    view.shape.push_back(d);
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(view.dtype)), &nbytes)) {
    return invalid_argument(str("shape ", shape.dump(), " overflows"));
  }

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    return invalid_argument("`data_offsets` must be an array [begin, end]");
  }
  RLRUN_ASSIGN_OR_RETURN(int64_t begin, json_index(offsets[0], "data_offsets begin"));
  RLRUN_ASSIGN_OR_RETURN(int64_t end, json_index(offsets[1], "data_offsets end"));
  if (end < begin) return invalid_argument(str("data_offsets [", begin, ", ", end, "] end before begin"));
  if (end - begin != nbytes) {
    return invalid_argument(str("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                                " bytes but ", safetensors_dtype_name(view.dtype), " ", shape_string(view.shape),
                                " needs ", nbytes));
  }
  return std::make_pair(begin, end);
}

Status parse_metadata(const Json& j, std::map<std::string, std::string>& out) {
  if (!j.is_object()) return invalid_argument("`__metadata__` is not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) return invalid_argument(str("`__metadata__` value of `", key, "` is not a string"));
    out[key] = value.get<std::string>();
  }
  return Status();
}

// Parses the header JSON, rejecting duplicate top-level names (nlohmann keeps the last silently).
Result<Json> parse_header_json(std::string_view text) {
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty()) {
      if (!seen.insert(parsed.get<std::string>()).second) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header = Json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/false);
  if (header.is_discarded()) return invalid_argument("header is not valid JSON");
  if (!header.is_object()) return invalid_argument("header is not a JSON object");
  if (!duplicate.empty()) return invalid_argument(str("tensor `", duplicate, "` appears twice in the header"));
  return header;
}

// Tensors must tile the data area: sorted by offset, each starts where the previous ended.
Status check_tiling(std::vector<std::pair<std::pair<int64_t, int64_t>, size_t>>& spans,
                    const std::vector<TensorView>& views, int64_t data_size) {
  std::sort(spans.begin(), spans.end());
  int64_t expected = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto [begin, end] = spans[i].first;
    const std::string& name = views[spans[i].second].name;
    if (end > data_size) {
      return invalid_argument(str("tensor `", name, "`: data_offsets [", begin, ", ", end,
                                  "] run past the data area (", data_size, " bytes)"));
    }
    if (begin < expected) {
      return invalid_argument(str("tensor `", name, "` overlaps tensor `",
                                  views[spans[i - 1].second].name, "`"));
    }
    if (begin > expected) {
      return invalid_argument(str("tensor `", name, "` starts at ", begin, " leaving a hole after ", expected));
    }
    expected = end;
  }
  if (expected != data_size) {
    return invalid_argument(str(data_size - expected, " bytes after the last tensor are not described by the header"));
  }
  return Status();
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::from_buffer(std::string source, std::shared_ptr<const MappedFile> buffer) {
  const std::span<const uint8_t> bytes = buffer->bytes();
  auto fail = [&](const std::string& what) {
    return invalid_argument(str("safetensors file ", source, ": ", what));
  };
  if (bytes.size() < 8) return fail(str("too short (", bytes.size(), " bytes) for the 8-byte header length"));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxHeaderBytes) return fail(str("header length ", header_len, " exceeds the 100 MB limit"));
  if (header_len > bytes.size() - 8) {
    return fail(str("header length ", header_len, " is larger than the file (", bytes.size(), " bytes)"));
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  Result<Json> header = parse_header_json(text);
  if (!header.ok()) return fail(header.status().message());

  SafetensorsFile file;
  file.source_ = source;
  const uint8_t* data = bytes.data() + 8 + header_len;
  const int64_t data_size = static_cast<int64_t>(bytes.size() - 8 - header_len);
  std::vector<std::pair<std::pair<int64_t, int64_t>, size_t>> spans;
  for (const auto& [name, entry] : header->items()) {
    if (name == "__metadata__") {
      Status st = parse_metadata(entry, file.metadata_);
      if (!st.ok()) return fail(st.message());
      continue;
    }
    TensorView view;
    view.name = name;
    Result<std::pair<int64_t, int64_t>> span = parse_tensor_entry(entry, view);
    if (!span.ok()) return fail(str("tensor `", name, "`: ", span.status().message()));
    spans.emplace_back(*span, file.tensors_.size());
    file.tensors_.push_back(std::move(view));
  }
  Status tiled = check_tiling(spans, file.tensors_, data_size);
  if (!tiled.ok()) return fail(tiled.message());
  std::vector<TensorView> ordered;
  ordered.reserve(spans.size());
  for (const auto& [span, index] : spans) {
    TensorView& view = file.tensors_[index];
    view.bytes = std::span<const uint8_t>(data + span.first, static_cast<size_t>(span.second - span.first));
    file.index_.emplace(view.name, ordered.size());
    ordered.push_back(std::move(view));
  }
  file.tensors_ = std::move(ordered);
  file.buffer_ = std::move(buffer);
  return file;
}

// ---------------------------------------------------------------- reading tensors

Result<const TensorView*> SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return &tensors_[it->second];
  return not_found(str("safetensors file ", source_, " has no tensor `", name, "`"));
}

Result<std::vector<float>> SafetensorsFile::read_f32(std::string_view name,
                                                     std::span<const int64_t> expected_shape) const {
  RLRUN_ASSIGN_OR_RETURN(const TensorView* view, find(name));
  if (!std::equal(view->shape.begin(), view->shape.end(), expected_shape.begin(), expected_shape.end())) {
    return invalid_argument(str("safetensors file ", source_, ": tensor `", name, "` has shape ",
                                shape_string(view->shape), ", expected ", shape_string(expected_shape)));
  }
  return tensor_to_f32(*view, source_);
}

Result<std::vector<float>> tensor_to_f32(const TensorView& view, const std::string& source) {
  const size_t n = static_cast<size_t>(view.numel());
  std::vector<float> out(n);
  const uint8_t* p = view.bytes.data();
  switch (view.dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out.data(), p, n * sizeof(float));
      return out;
    case DType::kBF16:
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);  // data need not be aligned
        out[i] = view.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return out;
    default:
      return invalid_argument(str("safetensors file ", source, ": tensor `", view.name, "` has dtype ",
                                  safetensors_dtype_name(view.dtype), ", expected a float type (F32, BF16, F16)"));
  }
}

// ---------------------------------------------------------------- writing

Result<std::vector<uint8_t>> encode_f32(std::span<const float> values, DType dtype) {
  std::vector<uint8_t> out;
  if (dtype == DType::kF32) {
    out.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  } else if (dtype == DType::kBF16) {
    out.resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t b = f32_to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  } else {
    return invalid_argument(str("cannot write float tensors as ", safetensors_dtype_name(dtype), " (use F32 or BF16)"));
  }
  return out;
}

Status write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::string_view> pieces(2);
  int64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) {
      return invalid_argument(str("writing ", path, ": tensor name `", t.name, "` is reserved or repeated"));
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel)) {
        return invalid_argument(str("writing ", path, ": tensor `", t.name, "` has invalid shape ", shape_string(t.shape)));
      }
    }
    if (static_cast<uint64_t>(numel) * dtype_size(t.dtype) != t.bytes.size()) {
      return invalid_argument(str("writing ", path, ": tensor `", t.name, "` has ", t.bytes.size(), " bytes but ",
                                  safetensors_dtype_name(t.dtype), " ", shape_string(t.shape), " needs ", numel * static_cast<int64_t>(dtype_size(t.dtype))));
    }
    const int64_t end = offset + static_cast<int64_t>(t.bytes.size());
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
    pieces.emplace_back(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data area 8-byte aligned, as HF does
  const uint64_t len = text.size();
  char len_bytes[8];
  std::memcpy(len_bytes, &len, 8);
  pieces[0] = std::string_view(len_bytes, 8);
  pieces[1] = text;
  return write_file_atomic(path, pieces);
}

Status write_safetensors_f32(const std::string& path, std::span<const HostTensor* const> tensors, DType dtype,
                             const std::map<std::string, std::string>& metadata) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) return encode_f32({}, dtype).status();
  std::vector<std::vector<uint8_t>> encoded;  // BF16 copies; F32 data is written in place
  encoded.reserve(tensors.size());
  std::vector<TensorToWrite> to_write;
  for (const HostTensor* t : tensors) {
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(t->data.data()), t->data.size() * sizeof(float));
    if (dtype != DType::kF32) {
      RLRUN_ASSIGN_OR_RETURN(std::vector<uint8_t> converted, encode_f32(t->data, dtype));
      encoded.push_back(std::move(converted));
      bytes = encoded.back();
    }
    to_write.push_back({t->name, dtype, t->shape, bytes});
  }
  return write_safetensors(path, to_write, metadata);
}

Status write_safetensors_f32(const std::string& path, std::span<const HostTensor> tensors, DType dtype,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& t : tensors) pointers.push_back(&t);
  return write_safetensors_f32(path, pointers, dtype, metadata);
}

}  // namespace rlrun::engine
