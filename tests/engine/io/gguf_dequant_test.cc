// dequantize_f32 against the `gguf` Python package, type by type: scripts/gguf_golden.py writes a
// GGUF of random blocks of every type rlrun reads (scales finite, every other bit random: each
// nibble, high bit, packed 6-bit scale and sign the format has) and the package's dequantization of
// it; the fixture gguf_golden_setup (tests/engine/CMakeLists.txt) makes both in the build tree.
// The real model files: gguf_model_test.cc. Malformed files and blocks: gguf_test.cc.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "tests/engine/io/gguf_golden.h"

namespace rlrun::engine {
namespace {

const std::filesystem::path kDir = RLRUN_GGUF_GOLDEN_DIR;

TEST(GgufDequant, EveryTypeIsBitIdenticalToTheGgufPackage) {
  Result<GgufFile> file = GgufFile::open((kDir / "types.gguf").string());
  ASSERT_TRUE(file.ok()) << file.status().message() << " (made by the gguf_golden_setup test)";
  const std::map<std::string, testing::TypeTally> per_type =
      testing::expect_dequantization_matches(*file, kDir / "types.golden.json");
  for (const char* type : {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                           "Q5_K", "Q6_K"}) {
    ASSERT_TRUE(per_type.count(type)) << type << " is missing from the golden";
    std::printf("%-5s %d tensors, %lld values: bit-identical to gguf.dequantize\n", type, per_type.at(type).tensors,
                static_cast<long long>(per_type.at(type).values));
  }
}

}  // namespace
}  // namespace rlrun::engine
