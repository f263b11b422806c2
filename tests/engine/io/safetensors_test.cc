#include "engine/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/bf16.h"

namespace rlrun::engine {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A file from a header string and a data area, built by hand (no use of the writer under test).
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes, uint64_t header_len_override = 0) {
  const uint64_t len = header_len_override ? header_len_override : header.size();
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(len >> (8 * i)));  // little-endian
  for (char ch : header) out.push_back(static_cast<uint8_t>(ch));
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i * 37));
  return out;
}

Status parse_status(const std::string& header, size_t data_bytes) {
  return SafetensorsFile::parse("bad.safetensors", make_file(header, data_bytes)).status();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "safetensors_test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Safetensors, ParsesAHandBuiltFile) {
  // "a": F32 [2] at [0, 8), "b": BF16 [1, 2] at [8, 12), "c": F16 [2] at [12, 16)
  std::vector<uint8_t> file = make_file(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"c":{"dtype":"F16","shape":[2],"data_offsets":[12,16]}})",
      0);
  const float a[2] = {1.5f, -3.25f};
  const uint16_t b[2] = {f32_to_bf16(2.0f), f32_to_bf16(-0.5f)};
  const uint16_t c[2] = {0x3c00, 0x0001};
  file.insert(file.end(), reinterpret_cast<const uint8_t*>(a), reinterpret_cast<const uint8_t*>(a) + 8);
  file.insert(file.end(), reinterpret_cast<const uint8_t*>(b), reinterpret_cast<const uint8_t*>(b) + 4);
  file.insert(file.end(), reinterpret_cast<const uint8_t*>(c), reinterpret_cast<const uint8_t*>(c) + 4);
  Result<SafetensorsFile> parsed = SafetensorsFile::parse("good.safetensors", std::move(file));
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  ASSERT_EQ(parsed->tensors().size(), 3u);
  EXPECT_EQ(parsed->tensors()[0].name, "a");  // data-offset order
  EXPECT_EQ(parsed->metadata().at("format"), "pt");
  const int64_t shape_a[] = {2}, shape_b[] = {1, 2};
  EXPECT_EQ(*parsed->read_f32("a", shape_a), (std::vector<float>{1.5f, -3.25f}));
  EXPECT_EQ(*parsed->read_f32("b", shape_b), (std::vector<float>{2.0f, -0.5f}));
  EXPECT_EQ(*parsed->read_f32("c", shape_a), (std::vector<float>{1.0f, std::ldexp(1.0f, -24)}));
}

TEST(Safetensors, RoundTripsF32AndBf16ThroughAFile) {
  TempDir dir;
  std::vector<HostTensor> tensors = {
      {"w", {2, 3}, {0.1f, -0.2f, 3.0f, 1e-8f, -7.5f, 1e30f}},
      {"scalar", {}, {42.0f}},
      {"empty", {0, 4}, {}},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "7"}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string path = dir.file(std::string("rt_") + safetensors_dtype_name(dtype) + ".safetensors");
    ASSERT_TRUE(write_safetensors_f32(path, tensors, dtype, metadata).ok());
    Result<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_EQ(file->metadata(), metadata);
    for (const HostTensor& t : tensors) {
      Result<std::vector<float>> got = file->read_f32(t.name, t.shape);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_EQ(got->size(), t.data.size());
      for (size_t i = 0; i < t.data.size(); ++i) {
        const float expected = dtype == DType::kF32 ? t.data[i] : bf16_to_f32(f32_to_bf16(t.data[i]));
        EXPECT_EQ((*got)[i], expected) << t.name << "[" << i << "]";
      }
    }
  }
  // only the two files remain: no temporary files left behind
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 2);
}

TEST(Safetensors, WriteReplacesAnExistingFileAndRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  std::vector<HostTensor> v1 = {{"x", {1}, {1.0f}}};
  std::vector<HostTensor> v2 = {{"x", {2}, {2.0f, 3.0f}}};
  ASSERT_TRUE(write_safetensors_f32(path, v1, DType::kF32).ok());
  ASSERT_TRUE(write_safetensors_f32(path, v2, DType::kF32).ok());
  const int64_t shape[] = {2};
  EXPECT_EQ(*SafetensorsFile::open(path)->read_f32("x", shape), (std::vector<float>{2.0f, 3.0f}));

  std::vector<HostTensor> repeated = {{"x", {1}, {1.0f}}, {"x", {1}, {1.0f}}};
  EXPECT_THAT(write_safetensors_f32(path, repeated, DType::kF32).message(), HasSubstr("`x`"));
  std::vector<HostTensor> wrong_size = {{"y", {3}, {1.0f}}};
  EXPECT_THAT(write_safetensors_f32(path, wrong_size, DType::kF32).message(), HasSubstr("`y`"));
  EXPECT_FALSE(write_safetensors_f32(path, v1, DType::kF16).ok());
  Status missing_dir = write_safetensors_f32(dir.file("no/such/dir/m.safetensors"), v1, DType::kF32);
  EXPECT_EQ(missing_dir.code(), StatusCode::kIOError);
  EXPECT_THAT(missing_dir.message(), HasSubstr("no/such/dir/m.safetensors"));
}

TEST(Safetensors, MissingFileAndMissingTensorAndWrongShape) {
  TempDir dir;
  EXPECT_EQ(SafetensorsFile::open(dir.file("absent.safetensors")).status().code(), StatusCode::kNotFound);
  const std::string path = dir.file("m.safetensors");
  std::vector<HostTensor> tensors = {{"w", {2, 2}, {1, 2, 3, 4}}};
  ASSERT_TRUE(write_safetensors_f32(path, tensors, DType::kF32).ok());
  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok());
  const int64_t right[] = {2, 2}, wrong[] = {4};
  Status missing = file->read_f32("v", right).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("`v`"));
  EXPECT_THAT(missing.message(), HasSubstr(path));
  Status shape = file->read_f32("w", wrong).status();
  EXPECT_THAT(shape.message(), HasSubstr("`w` has shape [2, 2], expected [4]"));
}

TEST(Safetensors, RejectsHostileHeaders) {
  struct Case {
    std::string header;
    size_t data_bytes;
    std::string expected;  // substring of the message
  };
  const std::vector<Case> cases = {
      {"{not json", 0, "not valid JSON"},
      {"[1,2]", 0, "not a JSON object"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"t":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16, "`t` appears twice"},
      {R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8, "`t`: unsupported dtype `Q4`"},
      {R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "`t`: shape dimension -2 is negative"},
      {R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, "`t`: shape [4294967296,4294967296] overflows"},
      {R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8, "too large"},
      {R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", 8, "`t`: shape dimension must be a non-negative integer"},
      {R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "`t`: data_offsets [0, 8] hold 8 bytes but F32 [3] needs 12"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "end before begin"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "`t`: data_offsets [0, 8] run past the data area (4 bytes)"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12, "4 bytes after the last tensor"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "`b` overlaps tensor `a`"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "`a` starts at 4 leaving a hole"},
      {R"({"t":{"dtype":"F32","shape":[2]}})", 8, "`t`: missing `data_offsets`"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "`t`: `data_offsets` must be an array"},
      {R"({"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, "`t`: `shape` is not an array"},
      {R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8, "`t`: `dtype` is not a string"},
      {R"({"t":[1]})", 8, "`t`: entry is not a JSON object"},
      {R"({"__metadata__":{"k":1}})", 0, "`__metadata__` value of `k` is not a string"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8, "negative"},
  };
  for (const Case& c : cases) {
    Status st = parse_status(c.header, c.data_bytes);
    EXPECT_FALSE(st.ok()) << c.header;
    EXPECT_THAT(st.message(), HasSubstr("bad.safetensors")) << c.header;
    EXPECT_THAT(st.message(), HasSubstr(c.expected)) << c.header;
  }
}

TEST(Safetensors, RejectsBadHeaderLengths) {
  EXPECT_THAT(SafetensorsFile::parse("f", {1, 2, 3}).status().message(), HasSubstr("too short"));
  const std::string header = R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_THAT(SafetensorsFile::parse("f", make_file(header, 4, header.size() + 100)).status().message(),
              HasSubstr("larger than the file"));
  EXPECT_THAT(SafetensorsFile::parse("f", make_file(header, 4, uint64_t{1} << 62)).status().message(),
              HasSubstr("exceeds the 100 MB limit"));
  EXPECT_TRUE(SafetensorsFile::parse("f", make_file(header, 4)).ok());
}

TEST(Safetensors, IntegerTensorsParseButDoNotConvertToFloat) {
  const std::string header = R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  Result<SafetensorsFile> file = SafetensorsFile::parse("ints", make_file(header, 16));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const int64_t shape[] = {2};
  EXPECT_THAT(file->read_f32("ids", shape).status().message(), HasSubstr("`ids` has dtype I64"));
}

// Random mutations of a valid file: every outcome is a parsed file whose tensors read back, or an
// error; never a crash, a hang or a huge allocation.
TEST(Safetensors, RandomMutationsNeverCrash) {
  TempDir dir;
  const std::string path = dir.file("valid.safetensors");
  std::vector<HostTensor> tensors = {{"model.a", {3, 2}, {1, 2, 3, 4, 5, 6}}, {"model.b", {2}, {7, 8}}};
  ASSERT_TRUE(write_safetensors_f32(path, tensors, DType::kBF16, {{"format", "pt"}}).ok());
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(valid.size(), 16u);

  std::mt19937 rng(1234);
  const std::string digits = "0123456789-[]{},:\"e.";
  int ok_count = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 5) {
        case 0: bytes[pos] = static_cast<uint8_t>(rng()); break;                // random byte
        case 1: bytes[pos] = static_cast<uint8_t>(digits[rng() % digits.size()]); break;  // JSON-ish
        case 2: bytes.resize(pos); break;                                      // truncate
        case 3: bytes.insert(bytes.begin() + static_cast<long>(pos), static_cast<uint8_t>(rng())); break;
        case 4: bytes[rng() % 8] = static_cast<uint8_t>(rng()); break;            // header length
      }
    }
    Result<SafetensorsFile> file = SafetensorsFile::parse("mutated", std::move(bytes));
    if (!file.ok()) {
      EXPECT_FALSE(file.status().message().empty());
      continue;
    }
    ++ok_count;
    for (const TensorView& view : file->tensors()) {
      Result<std::vector<float>> values = tensor_to_f32(view, file->source());
      if (values.ok()) {
        EXPECT_EQ(values->size(), static_cast<size_t>(view.numel()));
      }
    }
  }
  EXPECT_GT(ok_count, 0);  // some mutations (data bytes) leave a valid file
}

}  // namespace
}  // namespace rlrun::engine
