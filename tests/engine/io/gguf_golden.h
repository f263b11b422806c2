// gguf_golden.h - test helpers shared by the GGUF tests: where the fetched model files are
// (scripts/fetch-test-models.sh), and dequantize_f32 checked against the `gguf` package's golden
// (scripts/gguf_golden.py: per tensor its type, element count, first 64 values' bits, checksum).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "engine/io/gguf.h"
#include "engine/io/gguf_dequant.h"

namespace rlrun::engine::testing {

inline std::filesystem::path models_dir() {
  const char* env = std::getenv("RLRUN_MODELS_DIR");
  return env != nullptr && *env ? std::filesystem::path(env) : std::filesystem::path(RLRUN_SOURCE_DIR) / "build/models";
}

// Skips (RLRUN_SKIP_MODEL_TESTS=1) or fails the test when `path` is missing.
#define REQUIRE_MODEL_FILE(path)                                                                        \
  if (!std::filesystem::exists(path)) {                                                                 \
    const char* skip = std::getenv("RLRUN_SKIP_MODEL_TESTS");                                           \
    if (skip != nullptr && std::string(skip) == "1") GTEST_SKIP() << path << " missing (RLRUN_SKIP_MODEL_TESTS=1)"; \
    FAIL() << path << " is missing: run scripts/setup.sh --test (or scripts/fetch-test-models.sh) to fetch " \
           << "the test models, or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";                     \
  }

// scripts/gguf_golden.py's checksum: sum over i of bits(values[i]) * (2 i + 1), modulo 2^64.
inline uint64_t golden_checksum(const std::vector<float>& values) {
  uint64_t sum = 0;
  for (size_t i = 0; i < values.size(); ++i) sum += uint64_t{std::bit_cast<uint32_t>(values[i])} * (2 * uint64_t{i} + 1);
  return sum;
}

struct TypeTally {
  int tensors = 0;
  int64_t values = 0;
};

// Every tensor of `golden` (a gguf_golden.py dequant file) dequantized from `file` and compared:
// same type and element count, first values and checksum bit-identical. Returns the tally by type.
inline std::map<std::string, TypeTally> expect_dequantization_matches(const GgufFile& file,
                                                                      const std::filesystem::path& golden) {
  std::ifstream in(golden);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::map<std::string, TypeTally> per_type;
  EXPECT_EQ(j["tensors"].size(), file.tensors().size()) << golden << " covers every tensor";
  for (const nlohmann::json& g : j["tensors"]) {
    const std::string name = g["name"].get<std::string>();
    Result<const GgufTensor*> t = file.find_tensor(name);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().message();
      continue;
    }
    const std::string type = ggml_type_name(static_cast<uint32_t>((*t)->type));
    EXPECT_EQ(type, g["type"].get<std::string>()) << name;
    Result<std::vector<float>> values = dequantize_f32(**t);
    if (!values.ok()) {
      ADD_FAILURE() << values.status().message();
      continue;
    }
    EXPECT_EQ(static_cast<int64_t>(values->size()), g["numel"].get<int64_t>()) << name;
    const std::vector<uint32_t> bits = g["first_bits"].get<std::vector<uint32_t>>();
    for (size_t i = 0; i < bits.size() && i < values->size(); ++i) {
      if (std::bit_cast<uint32_t>((*values)[i]) == bits[i]) continue;
      ADD_FAILURE() << name << "[" << i << "]: " << (*values)[i] << " vs " << std::bit_cast<float>(bits[i]);
      break;
    }
    EXPECT_EQ(std::to_string(golden_checksum(*values)), g["checksum"].get<std::string>()) << name;
    TypeTally& tally = per_type[type];
    ++tally.tensors;
    tally.values += static_cast<int64_t>(values->size());
  }
  return per_type;
}

}  // namespace rlrun::engine::testing
