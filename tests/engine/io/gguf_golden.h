// gguf_golden.h - test helpers shared by the GGUF tests: where the fetched model files are
// (scripts/fetch-test-models.sh), and dequantize_f32 checked against the `gguf` package's golden
// (scripts/gguf_golden.py: per tensor its type, element count, first 64 values' bits, checksum).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <bit>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <string>

#include "engine/io/gguf.h"
#include "engine/io/gguf_dequant.h"
#include "engine/io/gguf_tokenizer.h"
#include "engine/io/tokenizer_config.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

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

// A merge as a pair, from either spelling of tokenizer.json ("a b" or ["a", "b"]).
inline std::pair<std::string, std::string> merge_pair(const nlohmann::json& m) {
  if (m.is_array()) return {m[0].get<std::string>(), m[1].get<std::string>()};
  const std::string s = m.get<std::string>();
  const size_t space = s.find(' ');
  return {s.substr(0, space), s.substr(space + 1)};
}

// The tokenizer rlrun builds from `gguf` against the one transformers builds from it (`ref`: a
// gguf_reference.py tokenizer directory): the same vocabulary, merges (in order), added tokens and
// BPE flags; the golden texts' ids and decodings; the chat prompts' text and ids.
inline void expect_tokenizer_matches(const std::filesystem::path& gguf, const std::filesystem::path& ref) {
  Result<GgufFile> file = GgufFile::open(gguf.string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  Result<Tokenizer> loaded = load_gguf_tokenizer(gguf.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  std::printf("load_gguf_tokenizer(%s): %.2f s (%.2f s of CPU)\n", gguf.filename().c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC);
  Result<std::string> text = gguf_tokenizer_json(*file);
  ASSERT_TRUE(text.ok()) << text.status().message();
  const nlohmann::json ours = nlohmann::json::parse(*text);
  std::ifstream ref_in(ref / "tokenizer.json");
  const nlohmann::json theirs = nlohmann::json::parse(ref_in);
  EXPECT_EQ(ours["model"]["vocab"], theirs["model"]["vocab"]);
  const nlohmann::json &a = ours["model"]["merges"], &b = theirs["model"]["merges"];
  ASSERT_EQ(a.size(), b.size()) << "merges";
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(merge_pair(a[i]), merge_pair(b[i])) << "merge " << i;
  }
  for (const char* key : {"byte_fallback", "fuse_unk", "unk_token", "ignore_merges"}) {
    EXPECT_EQ(ours["model"].value(key, nlohmann::json()), theirs["model"].value(key, nlohmann::json())) << key;
  }
  std::set<std::tuple<int64_t, std::string, bool>> added_ours, added_theirs;
  for (const nlohmann::json& t : ours["added_tokens"]) added_ours.emplace(t["id"], t["content"], t["special"]);
  for (const nlohmann::json& t : theirs["added_tokens"]) added_theirs.emplace(t["id"], t["content"], t["special"]);
  EXPECT_EQ(added_ours.size(), added_theirs.size());
  EXPECT_TRUE(added_ours == added_theirs) << "added tokens differ";

  const Result<Tokenizer>& tok = loaded;
  std::ifstream golden(ref / "golden.jsonl");
  std::string line;
  std::getline(golden, line);  // the header
  int cases = 0;
  while (std::getline(golden, line)) {
    const nlohmann::json c = nlohmann::json::parse(line);
    const std::string t = c["text"].get<std::string>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(t), want) << "text: " << c["text"].dump();
    Result<std::string> decoded = tok->decode(want);
    ASSERT_TRUE(decoded.ok()) << decoded.status().message();
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>()) << "decoding the ids of " << c["text"].dump();
    ++cases;
  }
  EXPECT_GT(cases, 300);

  if (!std::filesystem::exists(ref / "chat.jsonl")) return;
  Result<TokenizerChatConfig> chat = read_tokenizer_chat_config(gguf.string());
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  Result<ChatTemplate> tmpl = ChatTemplate::parse(chat->chat_template);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  std::ifstream chats(ref / "chat.jsonl");
  while (std::getline(chats, line)) {
    const nlohmann::ordered_json c = nlohmann::ordered_json::parse(line);
    ChatRenderInput input;
    input.messages = c["messages"];
    input.add_generation_prompt = true;
    input.special_tokens = chat->special_tokens;
    Result<std::string> rendered = tmpl->render(input);
    ASSERT_TRUE(rendered.ok()) << rendered.status().message();
    EXPECT_EQ(*rendered, c["text"].get<std::string>());
    EXPECT_EQ(tok->encode(*rendered), c["ids"].get<std::vector<int32_t>>()) << *rendered;
  }
}

}  // namespace rlrun::engine::testing
