#include "engine/io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "common/observe/log.h"
#include "engine/io/mapped_file.h"

namespace rlrun::engine {

static_assert(std::endian::native == std::endian::little, "GGUF IO assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kDefaultAlignment = 32;

// Bytes of one element of a numeric/bool value type; 0 for string and array.
size_t scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16: case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32: case GgufValueType::kInt32: case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64: case GgufValueType::kInt64: case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString: case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool is_integer(GgufValueType t) {
  return scalar_size(t) > 0 && t != GgufValueType::kBool && t != GgufValueType::kFloat32 &&
         t != GgufValueType::kFloat64;
}

// Element `i` of raw integer bytes of type `t`, or an error when it does not fit int64.
Result<int64_t> integer_at(GgufValueType t, std::span<const uint8_t> bytes, uint64_t i) {
  const uint8_t* p = bytes.data() + i * scalar_size(t);
  auto load = [p]<typename T>(T) { T v; std::memcpy(&v, p, sizeof v); return v; };
  switch (t) {
    case GgufValueType::kUint8: return int64_t{load(uint8_t{})};
    case GgufValueType::kInt8: return int64_t{load(int8_t{})};
    case GgufValueType::kUint16: return int64_t{load(uint16_t{})};
    case GgufValueType::kInt16: return int64_t{load(int16_t{})};
    case GgufValueType::kUint32: return int64_t{load(uint32_t{})};
    case GgufValueType::kInt32: return int64_t{load(int32_t{})};
    case GgufValueType::kInt64: return load(int64_t{});
    case GgufValueType::kUint64: {
      const uint64_t v = load(uint64_t{});
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return invalid_argument(str("value ", v, " does not fit a signed 64-bit integer"));
      }
      return static_cast<int64_t>(v);
    }
    default: return invalid_argument(str(gguf_value_type_name(t), " is not an integer type"));
  }
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static constexpr const char* kNames[] = {"UINT8", "INT8",  "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                           "BOOL",  "STRING", "ARRAY", "UINT64", "INT64",  "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::string ggml_type_name(uint32_t type) {
  // ggml.h's numbering; 4, 5 (Q4_2, Q4_3) and 31-33 were removed from the format.
  static constexpr const char* kNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1",    "",       "",      "Q5_0",  "Q5_1", "Q8_0", "Q8_1", "Q2_K",
      "Q3_K", "Q4_K", "Q5_K", "Q6_K",    "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
      "IQ2_S", "IQ4_XS", "I8", "I16",    "I32",    "I64",   "F64",   "IQ1_M", "BF16"};
  if (type < std::size(kNames) && kNames[type][0] != '\0') return kNames[type];
  return str("type ", type);
}

const char* supported_ggml_types() {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
}

GgmlBlock ggml_block(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return {1, 4};
    case GgmlType::kF16: case GgmlType::kBF16: return {1, 2};
    case GgmlType::kQ4_0: return {32, 18};  // f16 scale, 16 bytes of 4-bit values
    case GgmlType::kQ4_1: return {32, 20};  // f16 scale, f16 min, 16 bytes of 4-bit values
    case GgmlType::kQ5_0: return {32, 22};  // f16 scale, 32 high bits, 16 bytes of low nibbles
    case GgmlType::kQ5_1: return {32, 24};  // f16 scale, f16 min, 32 high bits, 16 bytes of nibbles
    case GgmlType::kQ8_0: return {32, 34};  // f16 scale, 32 int8 values
    case GgmlType::kQ2_K: return {256, 84};
    case GgmlType::kQ3_K: return {256, 110};
    case GgmlType::kQ4_K: return {256, 144};
    case GgmlType::kQ5_K: return {256, 176};
    case GgmlType::kQ6_K: return {256, 210};
  }
  return {1, 1};
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated at parse time not to overflow
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

// ---------------------------------------------------------------- parsing

// Reads the file front to back; every read checks the bytes left first.
class GgufParser {
 public:
  GgufParser(GgufFile& file, std::span<const uint8_t> bytes) : file_(file), bytes_(bytes) {}

  Status parse() {
    RLRUN_ASSIGN_OR_RETURN(const uint32_t magic, read<uint32_t>("magic"));
    if (magic != kMagic) return invalid_argument("not a GGUF file (the first 4 bytes are not \"GGUF\")");
    RLRUN_ASSIGN_OR_RETURN(file_.version_, read<uint32_t>("version"));
    if (file_.version_ != 2 && file_.version_ != 3) {
      return invalid_argument(str("GGUF version ", file_.version_, " is not supported (only 2 and 3)"));
    }
    RLRUN_ASSIGN_OR_RETURN(const uint64_t tensor_count, read<uint64_t>("tensor count"));
    RLRUN_ASSIGN_OR_RETURN(const uint64_t kv_count, read<uint64_t>("metadata count"));
    // Lower bounds on the bytes each entry takes, so that a count cannot promise more than the file.
    if (kv_count > left() / (8 + 4 + 1)) return invalid_argument(str("metadata count ", kv_count, " is past the end of the file"));
    if (tensor_count > left() / (8 + 4 + 8 + 4 + 8)) {
      return invalid_argument(str("tensor count ", tensor_count, " is past the end of the file"));
    }
    for (uint64_t i = 0; i < kv_count; ++i) RLRUN_RETURN_IF_ERROR(parse_kv(i));
    RLRUN_RETURN_IF_ERROR(parse_alignment());
    file_.tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) RLRUN_RETURN_IF_ERROR(parse_tensor_info(i));
    const uint64_t a = file_.alignment_;
    file_.data_offset_ = (pos_ + a - 1) / a * a;  // pos_ <= file size, far from overflow
    if (file_.data_offset_ > bytes_.size() && tensor_count > 0) {
      return invalid_argument(str("data area at offset ", file_.data_offset_, " is past the end of the file"));
    }
    return place_tensors();
  }

 private:
  size_t left() const { return bytes_.size() - pos_; }

  template <typename T>
  Result<T> read(std::string_view what) {
    if (left() < sizeof(T)) return invalid_argument(str("truncated at offset ", pos_, " reading the ", what));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }

  Result<std::string_view> read_string(std::string_view what) {
    RLRUN_ASSIGN_OR_RETURN(const uint64_t n, read<uint64_t>(str(what, " length")));
    if (n > left()) return invalid_argument(str(what, " length ", n, " at offset ", pos_ - 8, " is past the end of the file"));
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  Result<GgufValueType> read_value_type(std::string_view what) {
    RLRUN_ASSIGN_OR_RETURN(const uint32_t t, read<uint32_t>(what));
    if (t > static_cast<uint32_t>(GgufValueType::kFloat64)) return invalid_argument(str("unknown ", what, " ", t));
    return static_cast<GgufValueType>(t);
  }

  // `count` values of `type` (not an array) into `value`.
  Status read_values(GgufValueType type, uint64_t count, GgufValue& value) {
    if (type == GgufValueType::kString) {
      if (count > left() / 8) return invalid_argument(str(count, " strings are past the end of the file"));
      value.strings.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        RLRUN_ASSIGN_OR_RETURN(std::string_view s, read_string("string"));
        value.strings.push_back(s);
      }
      return {};
    }
    const size_t size = scalar_size(type);
    if (count > left() / size) return invalid_argument(str(count, " ", gguf_value_type_name(type), " values are past the end of the file"));
    value.bytes = bytes_.subspan(pos_, count * size);
    pos_ += count * size;
    return {};
  }

  Status parse_kv(uint64_t i) {
    RLRUN_ASSIGN_OR_RETURN(const std::string_view key, read_string(str("key of metadata entry ", i)));
    Status s = parse_value(key);
    if (!s.ok()) return invalid_argument(str("metadata `", key, "`: ", s.message()));
    return {};
  }

  Status parse_value(std::string_view key) {
    GgufValue value;
    RLRUN_ASSIGN_OR_RETURN(value.type, read_value_type("value type"));
    if (value.type == GgufValueType::kArray) {
      RLRUN_ASSIGN_OR_RETURN(value.element_type, read_value_type("array element type"));
      if (value.element_type == GgufValueType::kArray) return invalid_argument("arrays of arrays are not supported");
      RLRUN_ASSIGN_OR_RETURN(value.count, read<uint64_t>("array length"));
      RLRUN_RETURN_IF_ERROR(read_values(value.element_type, value.count, value));
    } else {
      RLRUN_RETURN_IF_ERROR(read_values(value.type, 1, value));
    }
    if (!file_.metadata_.emplace(std::string(key), std::move(value)).second) return invalid_argument("appears twice");
    return {};
  }

  Status parse_alignment() {
    const GgufValue* v = file_.find("general.alignment");
    if (v == nullptr) return {};
    if (v->type != GgufValueType::kUint32) {
      return invalid_argument(str("general.alignment is ", gguf_value_type_name(v->type), ", expected UINT32"));
    }
    uint32_t a;
    std::memcpy(&a, v->bytes.data(), 4);
    if (a < 1 || a > (1u << 20) || (a & (a - 1)) != 0) {
      return invalid_argument(str("general.alignment = ", a, ": expected a power of two up to 2^20"));
    }
    file_.alignment_ = a;
    return {};
  }

  Status parse_tensor_info(uint64_t i) {
    GgufTensor t;
    RLRUN_ASSIGN_OR_RETURN(const std::string_view name, read_string(str("name of tensor ", i)));
    t.name = std::string(name);
    Status s = parse_tensor_fields(t);
    if (!s.ok()) return invalid_argument(str("tensor `", t.name, "`: ", s.message()));
    if (!file_.index_.emplace(t.name, file_.tensors_.size()).second) {
      return invalid_argument(str("tensor `", t.name, "` appears twice"));
    }
    file_.tensors_.push_back(std::move(t));
    return {};
  }

  Status parse_tensor_fields(GgufTensor& t) {
    RLRUN_ASSIGN_OR_RETURN(const uint32_t n_dims, read<uint32_t>("number of dimensions"));
    if (n_dims < 1 || n_dims > kMaxDims) return invalid_argument(str(n_dims, " dimensions (expected 1 to ", kMaxDims, ")"));
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      RLRUN_ASSIGN_OR_RETURN(const uint64_t dim, read<uint64_t>("dimension"));
      if (dim < 1 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel)) {
        return invalid_argument(str("dimension ", d, " = ", dim, " is zero or makes the shape overflow"));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    RLRUN_ASSIGN_OR_RETURN(const uint32_t type, read<uint32_t>("tensor type"));
    switch (static_cast<GgmlType>(type)) {
      case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
      case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1: case GgmlType::kQ8_0:
      case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
        break;
      default:
        return invalid_argument(str("tensor type ", ggml_type_name(type), " is not supported (", supported_ggml_types(), ")"));
    }
    t.type = static_cast<GgmlType>(type);
    RLRUN_ASSIGN_OR_RETURN(t.offset, read<uint64_t>("data offset"));
    const GgmlBlock block = ggml_block(t.type);
    if (t.dims[0] % block.elements != 0) {
      return invalid_argument(str("innermost dimension ", t.dims[0], " is not a multiple of the ",
                                  ggml_type_name(type), " block size ", block.elements));
    }
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / block.elements, block.bytes, &nbytes)) {
      return invalid_argument(str("shape ", numel, " elements overflows in bytes"));
    }
    nbytes_.push_back(static_cast<uint64_t>(nbytes));
    return {};
  }

  // Checks offsets against the data area and points each tensor at its bytes.
  Status place_tensors() {
    const uint64_t data_size = file_.data_offset_ <= bytes_.size() ? bytes_.size() - file_.data_offset_ : 0;
    std::vector<std::pair<uint64_t, size_t>> order;  // (offset, index)
    for (size_t i = 0; i < file_.tensors_.size(); ++i) {
      GgufTensor& t = file_.tensors_[i];
      const uint64_t nbytes = nbytes_[i];
      if (t.offset % file_.alignment_ != 0) {
        return invalid_argument(str("tensor `", t.name, "`: offset ", t.offset, " is not a multiple of the alignment ",
                                    file_.alignment_));
      }
      if (t.offset > data_size || nbytes > data_size - t.offset) {
        return invalid_argument(str("tensor `", t.name, "`: bytes [", t.offset, ", +", nbytes,
                                    ") are past the end of the data area (", data_size, " bytes)"));
      }
      t.bytes = bytes_.subspan(file_.data_offset_ + t.offset, nbytes);
      order.emplace_back(t.offset, i);
    }
    std::sort(order.begin(), order.end());
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& prev = file_.tensors_[order[k - 1].second];
      if (prev.offset + prev.bytes.size() > order[k].first) {
        return invalid_argument(str("tensors `", prev.name, "` and `", file_.tensors_[order[k].second].name,
                                    "` overlap"));
      }
    }
    return {};
  }

  GgufFile& file_;
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  std::vector<uint64_t> nbytes_;  // per tensor, in file order
};

Result<GgufFile> GgufFile::open(const std::string& path) {
  RLRUN_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> bytes, MappedFile::open(path, "GGUF file"));
  GgufFile file;
  file.source_ = path;
  file.buffer_ = std::move(bytes);
  GgufParser parser(file, file.buffer_->bytes());
  RLRUN_RETURN_IF_ERROR(parser.parse().with_context(path));
  return file;
}

Result<GgufFile> GgufFile::parse(std::string source, std::vector<uint8_t> bytes) {
  GgufFile file;
  file.source_ = std::move(source);
  file.buffer_ = MappedFile::from_bytes(std::move(bytes));
  GgufParser parser(file, file.buffer_->bytes());
  RLRUN_RETURN_IF_ERROR(parser.parse().with_context(file.source_));
  return file;
}

// ---------------------------------------------------------------- typed metadata

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Result<const GgufTensor*> GgufFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return not_found(str(source_, ": no tensor `", name, "`"));
  return &tensors_[it->second];
}

namespace {

// The value of `key` when present and of a type `accept` takes, else an error naming both.
template <typename Accept>
Result<const GgufValue*> typed(const GgufFile& file, std::string_view key, std::string_view want, Accept accept) {
  const GgufValue* v = file.find(key);
  if (v == nullptr) return not_found(str(file.source(), ": no metadata `", key, "`"));
  if (!accept(*v)) {
    const std::string have = v->type == GgufValueType::kArray
                                 ? str("ARRAY of ", gguf_value_type_name(v->element_type))
                                 : std::string(gguf_value_type_name(v->type));
    return invalid_argument(str(file.source(), ": metadata `", key, "` is ", have, ", expected ", want));
  }
  return v;
}

}  // namespace

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  RLRUN_ASSIGN_OR_RETURN(const GgufValue* v, typed(*this, key, "an integer", [](const GgufValue& v) { return is_integer(v.type); }));
  Result<int64_t> i = integer_at(v->type, v->bytes, 0);
  if (!i.ok()) return invalid_argument(str(source_, ": metadata `", key, "`: ", i.status().message()));
  return i;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  RLRUN_ASSIGN_OR_RETURN(const GgufValue* v, typed(*this, key, "a number", [](const GgufValue& v) {
    return is_integer(v.type) || v.type == GgufValueType::kFloat32 || v.type == GgufValueType::kFloat64;
  }));
  if (v->type == GgufValueType::kFloat32) {
    float f;
    std::memcpy(&f, v->bytes.data(), 4);
    return double{f};
  }
  if (v->type == GgufValueType::kFloat64) {
    double d;
    std::memcpy(&d, v->bytes.data(), 8);
    return d;
  }
  RLRUN_ASSIGN_OR_RETURN(const int64_t i, get_int(key));
  return static_cast<double>(i);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  RLRUN_ASSIGN_OR_RETURN(const GgufValue* v, typed(*this, key, "BOOL", [](const GgufValue& v) { return v.type == GgufValueType::kBool; }));
  return v->bytes[0] != 0;
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  RLRUN_ASSIGN_OR_RETURN(const GgufValue* v, typed(*this, key, "STRING", [](const GgufValue& v) { return v.type == GgufValueType::kString; }));
  return std::string(v->strings[0]);
}

Result<std::vector<std::string_view>> GgufFile::get_strings(std::string_view key) const {
  RLRUN_ASSIGN_OR_RETURN(const GgufValue* v, typed(*this, key, "an ARRAY of STRING", [](const GgufValue& v) {
    return v.type == GgufValueType::kArray && v.element_type == GgufValueType::kString;
  }));
  return v->strings;
}

Result<std::vector<int64_t>> GgufFile::get_ints(std::string_view key) const {
  RLRUN_ASSIGN_OR_RETURN(const GgufValue* v, typed(*this, key, "an ARRAY of integers", [](const GgufValue& v) {
    return v.type == GgufValueType::kArray && is_integer(v.element_type);
  }));
  std::vector<int64_t> out;
  out.reserve(v->count);  // count * element size bytes were checked against the file
  for (uint64_t i = 0; i < v->count; ++i) {
    Result<int64_t> x = integer_at(v->element_type, v->bytes, i);
    if (!x.ok()) return invalid_argument(str(source_, ": metadata `", key, "`[", i, "]: ", x.status().message()));
    out.push_back(*x);
  }
  return out;
}

}  // namespace rlrun::engine
