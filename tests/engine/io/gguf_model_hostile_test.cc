// A GGUF model file's metadata is untrusted: a tiny qwen2 model written here byte by byte, then
// with every architecture key at hostile values and types, hostile vocabularies, and truncated or
// mutated bytes. Each load (config, tensors, tokenizer, one encode) must end in ok or a Status
// naming the file, never a crash or an exception. Malformed headers and tensor blocks: gguf_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <random>

#include "common/observe/log.h"
#include "engine/io/gguf_model.h"
#include "tests/engine/io/gguf_writer.h"

namespace rlrun::engine {
namespace {

using ::testing::HasSubstr;
using testing::GgufMetadata;
using testing::TensorData;

std::string utf8(int32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte alphabet: the printable bytes stand for themselves, the others for U+0100 onwards.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    out.push_back(utf8(printable ? b : next++));
  }
  return out;
}

// Which metadata entries a variant of the tiny file drops, and what it adds instead.
struct Edit {
  std::string arch = "qwen2";                      // general.architecture and the keys' prefix
  std::string drop;                                // a key left out
  std::function<void(GgufMetadata&)> add;          // entries added at the end
  std::vector<std::string> tokens;                 // replaces the vocabulary when not empty
  std::function<void(std::vector<TensorData>&)> tensors;  // edits the tensor list
};

constexpr int64_t kHidden = 8, kFfn = 16, kKv = 4;

std::vector<uint8_t> tiny_file(const Edit& edit = {}) {
  std::vector<std::string> tokens = edit.tokens.empty() ? byte_tokens() : edit.tokens;
  if (edit.tokens.empty()) {
    for (const char* t : {"\xC4\xA0t", "he", "\xC4\xA0the", "<|endoftext|>"}) tokens.push_back(t);  // "Ġt", ...
  }
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  GgufMetadata m;
  auto keep = [&](const std::string& key) { return key != edit.drop; };
  const std::string a = edit.arch + ".";
  if (keep("general.architecture")) m.str("general.architecture", edit.arch);
  if (keep(a + "block_count")) m.u32(a + "block_count", 1);
  if (keep(a + "context_length")) m.u32(a + "context_length", 64);
  if (keep(a + "embedding_length")) m.u32(a + "embedding_length", kHidden);
  if (keep(a + "feed_forward_length")) m.u32(a + "feed_forward_length", kFfn);
  if (keep(a + "attention.head_count")) m.u32(a + "attention.head_count", 2);
  if (keep(a + "attention.head_count_kv")) m.u32(a + "attention.head_count_kv", 1);
  if (keep(a + "attention.layer_norm_rms_epsilon")) m.f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (keep(a + "rope.freq_base")) m.f32(a + "rope.freq_base", 1e6f);
  if (keep("tokenizer.ggml.model")) m.str("tokenizer.ggml.model", "gpt2");
  if (keep("tokenizer.ggml.pre")) m.str("tokenizer.ggml.pre", "qwen2");
  if (keep("tokenizer.ggml.tokens")) m.strings("tokenizer.ggml.tokens", tokens);
  if (keep("tokenizer.ggml.token_type")) m.i32s("tokenizer.ggml.token_type", types);
  if (keep("tokenizer.ggml.merges")) m.strings("tokenizer.ggml.merges", {"\xC4\xA0 t", "h e", "\xC4\xA0t he"});
  if (keep("tokenizer.ggml.eos_token_id")) m.u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
  if (edit.add) edit.add(m);
  const uint64_t v = tokens.size();
  std::vector<TensorData> t = {
      {"token_embd.weight", {kHidden, v}, GgmlType::kF32, testing::f32_bytes(kHidden * v)},
      {"output_norm.weight", {kHidden}, GgmlType::kF32, testing::f32_bytes(kHidden, 1.0f)},
      {"blk.0.attn_norm.weight", {kHidden}, GgmlType::kF32, testing::f32_bytes(kHidden, 1.0f)},
      {"blk.0.attn_q.weight", {kHidden, kHidden}, GgmlType::kF32, testing::f32_bytes(kHidden * kHidden)},
      {"blk.0.attn_q.bias", {kHidden}, GgmlType::kF32, testing::f32_bytes(kHidden)},
      {"blk.0.attn_k.weight", {kHidden, kKv}, GgmlType::kF32, testing::f32_bytes(kHidden * kKv)},
      {"blk.0.attn_k.bias", {kKv}, GgmlType::kF32, testing::f32_bytes(kKv)},
      {"blk.0.attn_v.weight", {kHidden, kKv}, GgmlType::kF32, testing::f32_bytes(kHidden * kKv)},
      {"blk.0.attn_v.bias", {kKv}, GgmlType::kF32, testing::f32_bytes(kKv)},
      {"blk.0.attn_output.weight", {kHidden, kHidden}, GgmlType::kF32, testing::f32_bytes(kHidden * kHidden)},
      {"blk.0.ffn_norm.weight", {kHidden}, GgmlType::kF32, testing::f32_bytes(kHidden, 1.0f)},
      {"blk.0.ffn_gate.weight", {kHidden, kFfn}, GgmlType::kF32, testing::f32_bytes(kHidden * kFfn)},
      {"blk.0.ffn_up.weight", {kHidden, kFfn}, GgmlType::kF32, testing::f32_bytes(kHidden * kFfn)},
      {"blk.0.ffn_down.weight", {kFfn, kHidden}, GgmlType::kF32, testing::f32_bytes(kFfn * kHidden)},
  };
  if (edit.tensors) edit.tensors(t);
  return testing::gguf_file(m, t);
}

// Config, tensors and tokenizer of `bytes`: "ok", or the errors joined by " | ". Fails the test
// when an error does not name the file.
std::string load_all(std::vector<uint8_t> bytes) {
  Result<GgufFile> file = GgufFile::parse("tiny.gguf", std::move(bytes));
  if (!file.ok()) return file.status().message();
  std::string errors;
  auto note = [&](const Status& s) {
    if (s.ok()) return;
    EXPECT_THAT(s.message(), HasSubstr("tiny.gguf"));
    errors += (errors.empty() ? "" : " | ") + s.message();
  };
  Result<ModelConfig> config = gguf_model_config(*file);
  note(config.status());
  if (config.ok()) note(gguf_model_tensors(*file, *config).status());
  Result<std::string> json = gguf_tokenizer_json(*file);
  note(json.status());
  if (json.ok()) {
    Result<Tokenizer> tok = Tokenizer::from_json(*json, "tiny.gguf");
    note(tok.status());
    if (tok.ok()) EXPECT_FALSE(tok->encode("the theme").empty());
  }
  return errors.empty() ? "ok" : errors;
}

TEST(GgufModelHostile, TheTinyFileLoads) {
  EXPECT_EQ(load_all(tiny_file()), "ok");
  Result<GgufFile> file = GgufFile::parse("tiny.gguf", tiny_file());
  ASSERT_TRUE(file.ok());
  Result<ModelConfig> c = gguf_model_config(*file);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->architecture, "qwen2");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->vocab_size, 260);
  EXPECT_EQ(c->eos_token_id, 259);
}

TEST(GgufModelHostile, EveryKeyAtHostileValuesLoadsOrFailsNamingTheFile) {
  const std::vector<std::string> keys = {
      "qwen2.block_count", "qwen2.context_length", "qwen2.embedding_length", "qwen2.feed_forward_length",
      "qwen2.attention.head_count", "qwen2.attention.head_count_kv", "qwen2.attention.layer_norm_rms_epsilon",
      "qwen2.rope.freq_base", "qwen2.attention.key_length", "qwen2.attention.value_length",
      "qwen2.rope.dimension_count", "qwen2.vocab_size", "qwen2.rope.scaling.factor",
      "qwen2.rope.scaling.original_context_length", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id",
      "tokenizer.ggml.eot_token_id", "qwen2.expert_count", "qwen2.final_logit_softcapping"};
  int ok = 0, refused = 0;
  auto try_values = [&](const std::string& arch, const std::string& key) {
    const std::vector<std::function<void(GgufMetadata&)>> values = {
        [&](GgufMetadata& m) { m.u32(key, 0); },          [&](GgufMetadata& m) { m.u32(key, 1); },
        [&](GgufMetadata& m) { m.u32(key, 3); },          [&](GgufMetadata& m) { m.u32(key, 1u << 25); },
        [&](GgufMetadata& m) { m.u32(key, 0xFFFFFFFF); }, [&](GgufMetadata& m) { m.i32(key, -1); },
        [&](GgufMetadata& m) { m.f32(key, NAN); },        [&](GgufMetadata& m) { m.f32(key, -INFINITY); },
        [&](GgufMetadata& m) { m.f32(key, 1e30f); },      [&](GgufMetadata& m) { m.str(key, "8"); },
        [&](GgufMetadata& m) { m.i32s(key, {8, 8}); },
    };
    for (size_t v = 0; v < values.size(); ++v) {
      const std::string result = load_all(tiny_file({.arch = arch, .drop = key, .add = values[v]}));
      (result == "ok" ? ok : refused) += 1;
    }
  };
  for (const std::string& key : keys) try_values("qwen2", key);
  // Gemma 3's layer pattern and local RoPE base (its tensors do not match this file: the config
  // is what is exercised)
  for (const char* key : {"gemma3.attention.sliding_window", "gemma3.attention.sliding_window_pattern",
                          "gemma3.rope.freq_base_swa", "gemma3.attention.key_length", "gemma3.block_count"}) {
    try_values("gemma3", key);
  }
  Result<GgufFile> gemma = GgufFile::parse("tiny.gguf", tiny_file({.arch = "gemma3", .add = [](GgufMetadata& m) {
    m.u32("gemma3.attention.sliding_window", 4);
  }}));
  ASSERT_TRUE(gemma.ok());
  Result<ModelConfig> c = gguf_model_config(*gemma);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->layer_types, (std::vector<std::string>{"sliding_attention"}));  // layer 0 of 6 is local
  EXPECT_EQ(c->rope_local_theta, 10000.0);
  std::printf("%d hostile variants loaded, %d refused with a message naming the file\n", ok, refused);
  EXPECT_GT(refused, ok);
}

TEST(GgufModelHostile, RefusesWhatItCannotComputeByName) {
  auto with = [](std::function<void(GgufMetadata&)> add) { return load_all(tiny_file({.add = add})); };
  EXPECT_THAT(with([](GgufMetadata& m) { m.u32("qwen2.expert_count", 8); }),
              HasSubstr("qwen2.expert_count = 8: mixture-of-experts models are not supported"));
  // A layer count the tensors cannot back is refused before anything is sized by it.
  EXPECT_THAT(load_all(tiny_file({.drop = "qwen2.block_count",
                                  .add = [](GgufMetadata& m) { m.u32("qwen2.block_count", 1u << 24); }})),
              HasSubstr("qwen2.block_count = 16777216: the file has 14 tensors"));
  EXPECT_THAT(with([](GgufMetadata& m) { m.u32("qwen2.attention.causal", 0); }),
              HasSubstr("metadata `qwen2.attention.causal` is not one rlrun reads"));
  EXPECT_THAT(with([](GgufMetadata& m) { m.u32("qwen2.rope.dimension_count", 2); }),
              HasSubstr("partial RoPE is not supported"));
  EXPECT_THAT(with([](GgufMetadata& m) { m.f32("qwen2.final_logit_softcapping", 30.0f); }),
              HasSubstr("logit soft-capping is not supported"));
  EXPECT_THAT(with([](GgufMetadata& m) { m.u32("qwen2.attention.sliding_window", 4096); }),
              HasSubstr("sliding-window attention is read for gemma3 files only"));
  EXPECT_THAT(with([](GgufMetadata& m) { m.str("qwen2.rope.scaling.type", "longrope"); }),
              HasSubstr("qwen2.rope.scaling.type = longrope"));
  EXPECT_THAT(load_all(tiny_file({.drop = "general.architecture",
                                  .add = [](GgufMetadata& m) { m.str("general.architecture", "mamba"); }})),
              HasSubstr("general.architecture = mamba is not supported (llama, qwen2, qwen3, gemma3)"));
  EXPECT_THAT(load_all(tiny_file({.tensors = [](std::vector<TensorData>& t) {
                t.push_back({"rope_freqs.weight", {2}, GgmlType::kF32, testing::f32_bytes(2, 1.0f)});
              }})),
              HasSubstr("per-frequency RoPE factors are read for llama files only"));
  EXPECT_THAT(load_all(tiny_file({.tensors = [](std::vector<TensorData>& t) { t.pop_back(); }})),
              HasSubstr("no tensor for model.layers.0.mlp.down_proj.weight"));
}

TEST(GgufModelHostile, RefusesHostileVocabulariesByName) {
  auto with_tokens = [](std::vector<std::string> tokens) { return load_all(tiny_file({.tokens = std::move(tokens)})); };
  EXPECT_THAT(with_tokens({"a", "b\xFF", "c"}), HasSubstr("tokenizer.ggml.tokens[1] is not valid UTF-8"));
  EXPECT_THAT(load_all(tiny_file({.drop = "tokenizer.ggml.merges",
                                  .add = [](GgufMetadata& m) { m.strings("tokenizer.ggml.merges", {"x y"}); }})),
              HasSubstr("model.merges[0]: merged token `xy` is not in model.vocab"));
  EXPECT_THAT(load_all(tiny_file({.drop = "tokenizer.ggml.token_type",
                                  .add = [](GgufMetadata& m) { m.i32s("tokenizer.ggml.token_type", {1, 1}); }})),
              HasSubstr("tokenizer.ggml.token_type has 2 entries for 260 tokens"));
  EXPECT_THAT(load_all(tiny_file({.add = [](GgufMetadata& m) { m.u32("tokenizer.ggml.bos_token_id", 260); }})),
              HasSubstr("tokenizer.ggml.bos_token_id = 260 is outside the vocabulary [0, 260)"));
  EXPECT_THAT(load_all(tiny_file({.drop = "tokenizer.ggml.pre",
                                  .add = [](GgufMetadata& m) { m.str("tokenizer.ggml.pre", "tekken"); }})),
              HasSubstr("tokenizer.ggml.pre = tekken is not supported"));
  EXPECT_THAT(load_all(tiny_file({.drop = "tokenizer.ggml.model",
                                  .add = [](GgufMetadata& m) { m.str("tokenizer.ggml.model", "llama"); }})),
              HasSubstr("tokenizer.ggml.model = llama (SentencePiece) is supported in gemma, gemma2 and gemma3 files; this one is qwen2"));
  EXPECT_THAT(load_all(tiny_file({.drop = "tokenizer.ggml.tokens",
                                  .add = [](GgufMetadata& m) { m.strings("tokenizer.ggml.tokens", {}); }})),
              HasSubstr("tiny.gguf"));
}

// Truncations and byte mutations of the whole file (metadata, tensor infos and data).
TEST(GgufModelHostile, FuzzedModelFilesLoadOrFailCleanly) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<uint8_t> good = tiny_file();
  size_t loads = 0, oks = 0;
  for (size_t n = 0; n < good.size(); n += 13) {
    oks += load_all({good.begin(), good.begin() + n}) == "ok";
    ++loads;
  }
  std::mt19937 rng(37);
  for (int i = 0; i < 4000; ++i) {
    std::vector<uint8_t> b = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t at = rng() % b.size();
      b[at] = (rng() & 1) != 0 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(b[at] ^ (1u << (rng() % 8)));
    }
    oks += load_all(std::move(b)) == "ok";
    ++loads;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu loads of a %zu-byte model file (%zu ok) in %.2f s\n", loads, good.size(), oks, seconds);
  EXPECT_GT(oks, 0u);
}

}  // namespace
}  // namespace rlrun::engine
