// Golden tests: our tokenizer against HF `tokenizers` (tests/engine/tokenizer/tokenizer_golden/*.jsonl,
// written by make_golden.py). Every case checks encode, decode (with and without special tokens)
// and, for some, the decode of every id prefix (partial UTF-8 -> U+FFFD).
//
// The real tokenizers (SmolLM2, Claude v1) live under build/models/ (or $RLRUN_MODELS_DIR), made by
// scripts/fetch-test-models.sh. A missing file FAILS the test: CI runs setup.sh --test, which
// fetches them, so a skip there would hide a broken fetch. Set RLRUN_SKIP_MODEL_TESTS=1 to skip
// them on a machine that cannot fetch.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace rlrun::engine {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kGoldenDir = fs::path(RLRUN_SOURCE_DIR) / "tests/engine/tokenizer/tokenizer_golden";

fs::path models_dir() {
  const char* env = std::getenv("RLRUN_MODELS_DIR");
  return env != nullptr && *env ? fs::path(env) : fs::path(RLRUN_SOURCE_DIR) / "build/models";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The golden header names the tokenizer relative to the repo; build/models/... moves with
// RLRUN_MODELS_DIR.
fs::path tokenizer_path(const std::string& rel) {
  const std::string prefix = "build/models/";
  if (rel.rfind(prefix, 0) == 0) return models_dir() / rel.substr(prefix.size());
  return fs::path(RLRUN_SOURCE_DIR) / rel;
}

// tiny.json with the header's overrides applied, as make_golden.py does.
std::string apply_overrides(const std::string& text, const json& overrides) {
  json tok = json::parse(text);
  for (const auto& [key, value] : overrides.items()) {
    if (key == "model_overrides") {
      for (const auto& [k, v] : value.items()) tok["model"][k] = v;
    } else {
      tok[key] = value;
    }
  }
  return tok.dump();
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

// `golden`: a .jsonl of make_golden.py; `tokenizer`: the file it was made with, else the one its
// header names.
void run_golden_file(const std::string& name, const fs::path& golden, const fs::path& tokenizer = {}) {
  if (!fs::exists(golden) && !tokenizer.empty()) {
    const char* skip = std::getenv("RLRUN_SKIP_MODEL_TESTS");
    if (skip != nullptr && std::string(skip) == "1") GTEST_SKIP() << golden << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << golden << " is missing: run scripts/setup.sh --test (or scripts/fetch-test-models.sh) to make it, "
           << "or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  std::ifstream in(golden);
  ASSERT_TRUE(in) << "missing golden file " << golden;
  std::string line;
  std::getline(in, line);
  const json header = json::parse(line);
  const fs::path path = tokenizer.empty() ? tokenizer_path(header["tokenizer"].get<std::string>()) : tokenizer;
  if (!fs::exists(path)) {
    const char* skip = std::getenv("RLRUN_SKIP_MODEL_TESTS");
    if (skip != nullptr && std::string(skip) == "1") GTEST_SKIP() << path << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << path << " is missing: run scripts/setup.sh --test (or scripts/fetch-test-models.sh) to fetch "
           << "the test models, or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  std::string text = read_file(path);
  if (header.contains("overrides")) text = apply_overrides(text, header["overrides"]);
  auto tok = Tokenizer::from_json(text, path.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();

  int cases = 0, failures = 0;
  auto fail = [&](int line_no, const std::string& what) {
    if (++failures <= 10) ADD_FAILURE() << name << ".jsonl line " << line_no << ": " << what;
  };
  double encode_seconds = 0;
  size_t encoded_tokens = 0;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    const json c = json::parse(line);
    ++cases;
    const std::string input = c["text"].get<std::string>();
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok->encode(input);
    encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    encoded_tokens += ids.size();
    if (ids != expected) fail(line_no, "encode(" + json(input).dump() + ") = " + show(ids) + ", HF: " + show(expected));
    auto decoded = tok->decode(expected);
    if (!decoded.ok() || *decoded != c["decoded"].get<std::string>()) fail(line_no, "decode of " + show(expected));
    auto skipped = tok->decode(expected, {.skip_special_tokens = true});
    if (!skipped.ok() || *skipped != c["decoded_skip"].get<std::string>()) fail(line_no, "decode(skip_special) of " + show(expected));
    if (c.contains("prefixes")) {
      const auto& prefixes = c["prefixes"];
      for (size_t k = 0; k < prefixes.size(); ++k) {
        auto d = tok->decode(std::span(expected).first(k + 1));
        if (!d.ok() || *d != prefixes[k].get<std::string>()) fail(line_no, "decode of prefix " + std::to_string(k + 1));
      }
    }
  }
  EXPECT_GT(cases, 100) << "golden file too small";
  std::printf("%s: %d cases, %d failed, %zu tokens encoded in %.1f ms\n", name.c_str(), cases, failures,
              encoded_tokens, encode_seconds * 1e3);
  EXPECT_EQ(failures, 0) << name << ": " << failures << " of " << cases << " cases differ from HF tokenizers "
                         << "(if " << path << " was regenerated on purpose, rerun "
                         << "tests/engine/tokenizer/tokenizer_golden/make_golden.py)";
}

void run_golden(const std::string& name) { run_golden_file(name, kGoldenDir / (name + ".jsonl")); }

// SentencePiece-style BPE (byte_fallback, Metaspace / Prepend+Replace, Sequence decoders) and
// transformers' conversion of the SmolLM2 GGUF: tokenizer and golden both made at fetch time by
// tokenizer_golden/make_sp_golden.py into <models>/sp-tokenizers/<name>/.
void run_sp_golden(const std::string& name) {
  const fs::path dir = models_dir() / "sp-tokenizers" / name;
  run_golden_file(name, dir / "golden.jsonl", dir / "tokenizer.json");
}

TEST(TokenizerGolden, Tiny) { run_golden("tiny"); }
TEST(TokenizerGolden, TinySplitNfcAddedTokenFlags) { run_golden("tiny_split"); }
TEST(TokenizerGolden, TinySplitBehaviorsNfkcIgnoreMerges) { run_golden("tiny_behaviors"); }
TEST(TokenizerGolden, SmolLM2) { run_golden("smollm2"); }
TEST(TokenizerGolden, ClaudeV1) { run_golden("claude_v1"); }
TEST(TokenizerGolden, SentencePieceLegacyPrependReplace) { run_sp_golden("sp_legacy"); }
TEST(TokenizerGolden, SentencePieceMetaspaceFirst) { run_sp_golden("sp_metaspace"); }
TEST(TokenizerGolden, SentencePieceMetaspaceSplitAlways) { run_sp_golden("sp_metaspace_split"); }
TEST(TokenizerGolden, SentencePieceNoPrefix) { run_sp_golden("sp_no_prefix"); }
TEST(TokenizerGolden, SentencePieceMixedStepsNoFallback) { run_sp_golden("sp_mixed_steps"); }
TEST(TokenizerGolden, SmolLM2FromGgufByTransformers) { run_sp_golden("smollm2_gguf"); }

// ---------------------------------------------------------------- the small tokenizer

const std::string kTinyPath = std::string(RLRUN_SOURCE_DIR) + "/configs/tokenizers/tiny.json";

TEST(TinyTokenizer, LoadsWithChatSpecialsAndSingleDigits) {
  auto tok = Tokenizer::load(kTinyPath);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 0);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 1);
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), 2);
  EXPECT_TRUE(tok->is_special(2));
  EXPECT_FALSE(tok->is_special(3));
  EXPECT_GT(tok->vocab_size(), 259);
  EXPECT_LT(tok->vocab_size(), 1000);
  // Each digit is its own token: "12345" is 5 tokens.
  EXPECT_EQ(tok->encode("12345").size(), 5u);
  const std::vector<int32_t> ids = tok->encode("<|im_start|>user\nWhat is 12 + 30?<|im_end|>");
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
}

TEST(TinyTokenizer, RoundTripsAnyText) {
  auto tok = Tokenizer::load(kTinyPath);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  for (std::string text : {"", "Reverse 'abc' -> 'cba'", "  9 * 9 = 81\n\n", "ünïcödé 日本 🎉",
                           "<|im_start|>assistant\n42<|im_end|><|endoftext|>"}) {
    auto back = tok->decode(tok->encode(text));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
  }
  auto skipped = tok->decode(tok->encode("<|im_start|>a<|im_end|>"), {.skip_special_tokens = true});
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "a");
}

// The word cache is shared: concurrent encodes of one Tokenizer (and of its copies) must give the
// single-threaded answer.
TEST(TinyTokenizer, ConcurrentEncodeMatchesSerial) {
  auto tok = Tokenizer::load(kTinyPath);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    texts.push_back("What is " + std::to_string(i * 37) + " plus " + std::to_string(i) + "? word" +
                    std::to_string(i % 50) + " <|im_end|>");
  }
  std::vector<std::vector<int32_t>> expected;
  {
    auto fresh = Tokenizer::load(kTinyPath);
    for (const auto& t : texts) expected.push_back(fresh->encode(t));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w, copy = *tok] {
      for (int rep = 0; rep < 5; ++rep) {
        for (size_t i = w; i < texts.size() + w; ++i) {
          size_t k = i % texts.size();
          if (copy.encode(texts[k]) != expected[k]) ++mismatches[w];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(mismatches[w], 0) << "thread " << w;
}

// ---------------------------------------------------------------- SentencePiece-style BPE

// A Llama 2 style file in miniature (ids 3..258 are <0x00>..<0xFF>); expected values from HF
// tokenizers 0.20.3 on the same JSON, so this runs without the fetched models.
json sp_tiny() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  for (const char* t : {"\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"}) vocab[t] = static_cast<int>(vocab.size());
  json added = json::array();
  for (auto [content, id] : {std::pair{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}}) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  return {
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                             {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"}, {"single", json::array()}, {"pair", json::array()}, {"special_tokens", json::object()}}},
      {"decoder", {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                                       {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true},
                 {"ignore_merges", false}, {"vocab", vocab}, {"merges", {"\u2581 a", "a b", "\u2581a b"}}}},
  };
}

TEST(SentencePieceTokenizer, PrependReplaceByteFallbackLikeHf) {
  auto tok = Tokenizer::from_json(sp_tiny().dump(), "sp_tiny.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("ab ab"), (std::vector<int32_t>{264, 264}));
  EXPECT_EQ(tok->encode("a\u00e9"), (std::vector<int32_t>{262, 3 + 0xC3, 3 + 0xA9}));  // é: byte fallback
  EXPECT_EQ(tok->encode("<s>ab b"), (std::vector<int32_t>{1, 264, 259, 261}));  // no BOS added; "b" unprefixed
  EXPECT_EQ(tok->encode("  a"), (std::vector<int32_t>{259, 259, 262}));
  EXPECT_TRUE(tok->encode("").empty());
  const std::vector<int32_t> bos_ab_b = {1, 264, 259, 261}, partial = {3 + 0xC3}, e_acute = {3 + 0xC3, 3 + 0xA9};
  EXPECT_EQ(*tok->decode(bos_ab_b), "<s> ab b");
  EXPECT_EQ(*tok->decode(bos_ab_b, {.skip_special_tokens = true}), "ab b");
  EXPECT_EQ(*tok->decode(partial), "\xEF\xBF\xBD");  // an incomplete character: U+FFFD per byte
  EXPECT_EQ(*tok->decode(partial, {.lossy_utf8 = false}), "\xC3");
  EXPECT_EQ(*tok->decode(e_acute), "\u00e9");
}

}  // namespace
}  // namespace rlrun::engine
