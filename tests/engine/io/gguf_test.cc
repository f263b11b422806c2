// GgufFile and the dequantizers on small files written here byte by byte (no GGUF writer in the
// product): every value type, every tensor type, each malformed field, and a fuzz loop over
// truncations and byte mutations that must end in ok or a Status naming the file.
// The real SmolLM2 file against the Python `gguf` package: gguf_model_test.cc.
#include "engine/io/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "common/observe/log.h"
#include "engine/bf16.h"
#include "engine/io/gguf_dequant.h"
#include "tests/engine/io/gguf_writer.h"

namespace rlrun::engine {
namespace {

using ::testing::HasSubstr;

using testing::GgufBytes;
using testing::TensorData;

std::vector<uint8_t> u16s(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// One block of each quantized type, with scales chosen so that every result is exact in fp32.
TensorData q8_0_tensor() {
  std::vector<uint8_t> d = u16s({f32_to_f16(0.5f)});
  for (int j = 0; j < 32; ++j) d.push_back(static_cast<uint8_t>(static_cast<int8_t>(j - 16)));
  return {"q8", {32}, GgmlType::kQ8_0, d};  // x_j = 0.5 * (j - 16)
}
TensorData q4_0_tensor() {
  std::vector<uint8_t> d = u16s({f32_to_f16(2.0f)});
  for (int j = 0; j < 16; ++j) d.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  return {"q40", {32}, GgmlType::kQ4_0, d};  // x_j = 2 (j - 8), x_{16+j} = 2 (7 - j)
}
TensorData q4_1_tensor() {
  std::vector<uint8_t> d = u16s({f32_to_f16(0.25f), f32_to_f16(-1.0f)});
  for (int j = 0; j < 16; ++j) d.push_back(static_cast<uint8_t>(j | ((15 - j) << 4)));
  return {"q41", {32}, GgmlType::kQ4_1, d};  // x_j = 0.25 j - 1, x_{16+j} = 0.25 (15 - j) - 1
}

// One block of `type` (`bytes` long) of patterned bytes whose IEEE-half scales at `halves` are
// 0.5: the values are those of gguf_dequant_test.cc's types; here they only need to be finite.
TensorData patterned_block(const std::string& name, GgmlType type, int64_t values, size_t bytes,
                           std::initializer_list<size_t> halves) {
  std::vector<uint8_t> d(bytes);
  for (size_t i = 0; i < bytes; ++i) d[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t at : halves) {
    const uint16_t h = f32_to_f16(0.5f);
    std::memcpy(d.data() + at, &h, 2);
  }
  return {name, {static_cast<uint64_t>(values)}, type, d};
}

std::vector<TensorData> sample_tensors() {
  std::vector<uint8_t> f32(6 * 4);
  const float values[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
  std::memcpy(f32.data(), values, sizeof values);
  return {{"f32", {3, 2}, GgmlType::kF32, f32},
          {"f16", {2}, GgmlType::kF16, u16s({f32_to_f16(1.5f), f32_to_f16(-0.25f)})},
          {"bf16", {2}, GgmlType::kBF16, u16s({f32_to_bf16(3.0f), f32_to_bf16(-1e10f)})},
          q8_0_tensor(), q4_0_tensor(), q4_1_tensor(),
          patterned_block("q50", GgmlType::kQ5_0, 32, 22, {0}),
          patterned_block("q51", GgmlType::kQ5_1, 32, 24, {0, 2}),
          patterned_block("q2k", GgmlType::kQ2_K, 256, 84, {80, 82}),
          patterned_block("q3k", GgmlType::kQ3_K, 256, 110, {108}),
          patterned_block("q4k", GgmlType::kQ4_K, 256, 144, {0, 2}),
          patterned_block("q5k", GgmlType::kQ5_K, 256, 176, {0, 2}),
          patterned_block("q6k", GgmlType::kQ6_K, 256, 210, {208})};
}

// A version-3 file with one metadata entry of every value type and `tensors`.
std::vector<uint8_t> sample_file(const std::vector<TensorData>& tensors, uint32_t alignment = 32) {
  GgufBytes b;
  b.put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(tensors.size()).put<uint64_t>(14);
  b.key("u8", GgufValueType::kUint8).put<uint8_t>(200);
  b.key("i8", GgufValueType::kInt8).put<int8_t>(-5);
  b.key("u16", GgufValueType::kUint16).put<uint16_t>(60000);
  b.key("i16", GgufValueType::kInt16).put<int16_t>(-300);
  b.key("u32", GgufValueType::kUint32).put<uint32_t>(4000000000u);
  b.key("i32", GgufValueType::kInt32).put<int32_t>(-7);
  b.key("f32", GgufValueType::kFloat32).put<float>(0.5f);
  b.key("bool", GgufValueType::kBool).put<uint8_t>(1);
  b.key("name", GgufValueType::kString).string("tiny");
  b.key("u64", GgufValueType::kUint64).put<uint64_t>(1ull << 40);
  b.key("i64", GgufValueType::kInt64).put<int64_t>(-(1ll << 40));
  b.key("f64", GgufValueType::kFloat64).put<double>(1e-5);
  b.key("words", GgufValueType::kArray).put<uint32_t>(8).put<uint64_t>(3).string("a").string("").string("ccc");
  b.key("general.alignment", GgufValueType::kUint32).put<uint32_t>(alignment);
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const TensorData& t : tensors) {
    b.string(t.name).put<uint32_t>(t.dims.size());
    for (uint64_t d : t.dims) b.put<uint64_t>(d);
    b.put<uint32_t>(static_cast<uint32_t>(t.type)).put<uint64_t>(offset);
    offsets.push_back(offset);
    offset = (offset + t.data.size() + alignment - 1) / alignment * alignment;
  }
  b.pad_to(alignment);
  const size_t data_start = b.bytes().size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    b.bytes().resize(data_start + offsets[i], 0);
    b.bytes().insert(b.bytes().end(), tensors[i].data.begin(), tensors[i].data.end());
  }
  return b.bytes();
}

Result<GgufFile> parse(std::vector<uint8_t> bytes) { return GgufFile::parse("bad.gguf", std::move(bytes)); }

TEST(Gguf, ReadsEveryValueType) {
  Result<GgufFile> f = parse(sample_file(sample_tensors()));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(*f->get_int("u8"), 200);
  EXPECT_EQ(*f->get_int("i8"), -5);
  EXPECT_EQ(*f->get_int("u16"), 60000);
  EXPECT_EQ(*f->get_int("i16"), -300);
  EXPECT_EQ(*f->get_int("u32"), 4000000000ll);
  EXPECT_EQ(*f->get_int("i32"), -7);
  EXPECT_EQ(*f->get_float("f32"), 0.5);
  EXPECT_EQ(*f->get_bool("bool"), true);
  EXPECT_EQ(*f->get_string("name"), "tiny");
  EXPECT_EQ(*f->get_int("u64"), 1ll << 40);
  EXPECT_EQ(*f->get_int("i64"), -(1ll << 40));
  EXPECT_EQ(*f->get_float("f64"), 1e-5);
  EXPECT_EQ(*f->get_strings("words"), (std::vector<std::string_view>{"a", "", "ccc"}));
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  EXPECT_THAT(f->get_int("name").status().message(), HasSubstr("metadata `name` is STRING, expected an integer"));
  EXPECT_THAT(f->get_string("missing").status().message(), HasSubstr("bad.gguf: no metadata `missing`"));
}

TEST(Gguf, DequantizesEveryTensorType) {
  Result<GgufFile> f = parse(sample_file(sample_tensors()));
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 13u);
  const GgufTensor& f32 = *f->find_tensor("f32").value();
  EXPECT_EQ(f32.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(dequantize_f32(f32).value(), (std::vector<float>{1, -2, 3.5f, 0, 1e-3f, -7}));
  EXPECT_EQ(dequantize_f32(*f->find_tensor("f16").value()).value(), (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(dequantize_f32(*f->find_tensor("bf16").value()).value(), (std::vector<float>{3.0f, bf16_to_f32(f32_to_bf16(-1e10f))}));
  std::vector<float> q8(32), q40(32), q41(32);
  for (int j = 0; j < 32; ++j) q8[j] = 0.5f * static_cast<float>(j - 16);
  for (int j = 0; j < 16; ++j) {
    q40[j] = 2.0f * static_cast<float>(j - 8);
    q40[16 + j] = 2.0f * static_cast<float>(7 - j);
    q41[j] = 0.25f * static_cast<float>(j) - 1.0f;
    q41[16 + j] = 0.25f * static_cast<float>(15 - j) - 1.0f;
  }
  EXPECT_EQ(dequantize_f32(*f->find_tensor("q8").value()).value(), q8);
  EXPECT_EQ(dequantize_f32(*f->find_tensor("q40").value()).value(), q40);
  EXPECT_EQ(dequantize_f32(*f->find_tensor("q41").value()).value(), q41);
  for (const char* name : {"q50", "q51", "q2k", "q3k", "q4k", "q5k", "q6k"}) {
    const GgufTensor& t = *f->find_tensor(name).value();
    Result<std::vector<float>> values = dequantize_f32(t);
    ASSERT_TRUE(values.ok()) << values.status().message();
    EXPECT_EQ(values->size(), static_cast<size_t>(t.numel())) << name;
  }
}

// A NaN or infinite scale in a block is an error naming the tensor and the block, not NaN weights.
TEST(Gguf, RefusesNonFiniteScales) {
  std::vector<TensorData> tensors = sample_tensors();
  for (TensorData& t : tensors) {
    if (t.name == "q4k") std::memcpy(t.data.data(), "\x00\x7C", 2);   // d = +Inf
    if (t.name == "q6k") std::memcpy(t.data.data() + 208, "\x01\x7E", 2);  // d = NaN
    if (t.name == "f16") std::memcpy(t.data.data() + 2, "\x00\xFC", 2);  // -Inf
  }
  Result<GgufFile> f = parse(sample_file(tensors));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_THAT(dequantize_f32(*f->find_tensor("q4k").value()).status().message(),
              HasSubstr("tensor `q4k` (Q4_K): value 0 in block 0 is inf"));
  EXPECT_THAT(dequantize_f32(*f->find_tensor("q6k").value()).status().message(),
              HasSubstr("tensor `q6k` (Q6_K): value 0 in block 0 is"));
  EXPECT_THAT(dequantize_f32(*f->find_tensor("f16").value()).status().message(),
              HasSubstr("tensor `f16` (F16): value 1 is -inf"));
  EXPECT_TRUE(dequantize_f32(*f->find_tensor("q5k").value()).ok());
}

// Byte offsets of fields in sample_file's header.
constexpr size_t kVersionAt = 4, kTensorCountAt = 8, kKvCountAt = 16;

void put_u64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) { std::memcpy(bytes.data() + at, &v, 8); }

// The offset of tensor `i`'s info fields after its name (n_dims first) in sample_file's bytes.
size_t tensor_info_at(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string needle = std::string(1, static_cast<char>(name.size())) + std::string(7, '\0') + name;
  auto it = std::find_end(bytes.begin(), bytes.end(), needle.begin(), needle.end());  // after the keys
  return static_cast<size_t>(it - bytes.begin()) + needle.size();
}

std::string error_of(std::vector<uint8_t> bytes) {
  Result<GgufFile> f = parse(std::move(bytes));
  return f.ok() ? "ok" : f.status().message();
}

TEST(Gguf, RefusesMalformedHeaders) {
  const std::vector<uint8_t> good = sample_file(sample_tensors());
  auto with = [&](auto edit) {
    std::vector<uint8_t> b = good;
    edit(b);
    return error_of(b);
  };
  EXPECT_THAT(with([](auto& b) { b[0] = 'X'; }), HasSubstr("bad.gguf: not a GGUF file"));
  EXPECT_THAT(with([](auto& b) { b[kVersionAt] = 1; }), HasSubstr("GGUF version 1 is not supported"));
  EXPECT_THAT(with([](auto& b) { put_u64(b, kTensorCountAt, 1ull << 60); }), HasSubstr("tensor count"));
  EXPECT_THAT(with([](auto& b) { put_u64(b, kKvCountAt, ~0ull); }), HasSubstr("metadata count"));
  EXPECT_THAT(with([](auto& b) { put_u64(b, 24, ~0ull); }), HasSubstr("key of metadata entry 0 length"));
  EXPECT_THAT(with([](auto& b) { b.resize(b.size() - 1); }), HasSubstr("past the end of the data area"));
  const size_t f32 = tensor_info_at(good, "f32");  // n_dims u32, dims u64 x2, type u32, offset u64
  EXPECT_THAT(with([&](auto& b) { b[f32] = 5; }), HasSubstr("tensor `f32`: 5 dimensions (expected 1 to 4)"));
  EXPECT_THAT(with([&](auto& b) { put_u64(b, f32 + 4, 1ull << 62); put_u64(b, f32 + 12, 1ull << 62); }),
              HasSubstr("makes the shape overflow"));
  EXPECT_THAT(with([&](auto& b) { b[f32 + 20] = 16; }), HasSubstr("tensor type IQ2_XXS is not supported"));
  EXPECT_THAT(with([&](auto& b) { b[f32 + 20] = 99; }), HasSubstr("tensor type type 99 is not supported"));
  EXPECT_THAT(with([&](auto& b) { b[f32 + 24] = 4; }), HasSubstr("not a multiple of the alignment 32"));
  EXPECT_THAT(with([&](auto& b) { put_u64(b, f32 + 24, ~0ull << 5); }), HasSubstr("past the end of the data area"));
  EXPECT_THAT(with([&](auto& b) { b[f32 + 24] = 32; }), HasSubstr("overlap"));
  const size_t q8 = tensor_info_at(good, "q8");
  EXPECT_THAT(with([&](auto& b) { b[q8 + 4] = 31; }), HasSubstr("not a multiple of the Q8_0 block size 32"));
}

TEST(Gguf, RefusesBadAlignmentAndDuplicates) {
  EXPECT_THAT(error_of(sample_file(sample_tensors(), 24)), HasSubstr("general.alignment = 24"));
  std::vector<uint8_t> signed_alignment = sample_file(sample_tensors());
  const std::string key = "general.alignment";
  const auto at = std::search(signed_alignment.begin(), signed_alignment.end(), key.begin(), key.end()) + key.size();
  *at = static_cast<uint8_t>(GgufValueType::kInt32);
  EXPECT_EQ(error_of(signed_alignment), "bad.gguf: general.alignment is INT32, expected UINT32");
  std::vector<TensorData> twice = sample_tensors();
  twice.push_back(twice[0]);
  EXPECT_THAT(error_of(sample_file(twice)), HasSubstr("tensor `f32` appears twice"));
  // A 64-aligned file reads as well.
  EXPECT_EQ(error_of(sample_file(sample_tensors(), 64)), "ok");
}

// Every load of a truncated or mutated file returns ok or an error naming the file; under ASan or
// not, a crash or a huge allocation fails the test run itself.
TEST(Gguf, FuzzedFilesLoadOrFailCleanly) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<uint8_t> good = sample_file(sample_tensors());
  size_t loads = 0, oks = 0;
  auto check = [&](std::vector<uint8_t> bytes, const std::string& what) {
    Result<GgufFile> f = parse(std::move(bytes));
    ++loads;
    if (f.ok()) {
      ++oks;
      for (const GgufTensor& t : f->tensors()) {
        Result<std::vector<float>> values = dequantize_f32(t);
        if (values.ok()) {
          EXPECT_EQ(values->size(), static_cast<size_t>(t.numel()));
        } else {
          EXPECT_THAT(values.status().message(), HasSubstr(str("tensor `", t.name, "`"))) << what;
        }
      }
    } else {
      EXPECT_THAT(f.status().message(), HasSubstr("bad.gguf")) << what;
    }
  };
  for (size_t n = 0; n < good.size(); ++n) check({good.begin(), good.begin() + n}, str("truncated to ", n));
  std::mt19937 rng(7);
  for (size_t at = 0; at < good.size(); ++at) {
    for (uint8_t v : {uint8_t{0}, uint8_t{0xFF}, static_cast<uint8_t>(good[at] + 1), static_cast<uint8_t>(rng())}) {
      std::vector<uint8_t> b = good;
      b[at] = v;
      check(std::move(b), str("byte ", at, " = ", int{v}));
    }
  }
  for (int i = 0; i < 20000; ++i) {  // several bytes at once
    std::vector<uint8_t> b = good;
    for (int k = 0; k < 4; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    check(std::move(b), str("random mutation ", i));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu loads of a %zu-byte file (%zu ok) in %.2f s\n", loads, good.size(), oks, seconds);
  EXPECT_GT(oks, 0u);
}

}  // namespace
}  // namespace rlrun::engine
