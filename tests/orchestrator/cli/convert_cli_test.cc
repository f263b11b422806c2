// `rlrun convert IN.gguf OUT_DIR` end to end on the real SmolLM2 Q4_1 .gguf: the folder it writes
// holds the weights of the folder scripts/fetch_test_models.py converted in Python (bit for bit),
// and HF transformers loads it: AutoTokenizer encodes like rlrun's tokenizer of the .gguf and
// holds the file's chat template and special tokens, and greedy generate gives `rlrun
// generate`'s ids.
//
// The files live under build/models/ (or $RLRUN_MODELS_DIR), made by scripts/fetch-test-models.sh;
// a missing file FAILS (CI fetches them), unless RLRUN_SKIP_MODEL_TESTS=1. The transformers side
// runs tests/reference/hf_tokenize.py and hf_generate.py in the venv of scripts/setup-python-ref.sh.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/io/gguf_model.h"
#include "engine/io/hf_checkpoint.h"
#include "tests/engine/io/gguf_writer.h"
#include "tests/orchestrator/cli_test_util.h"

namespace rlrun {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;
using rlrun::testing::CliRun;
using rlrun::testing::ids_arg;
using rlrun::testing::run_rlrun;
using rlrun::testing::run_shell;
using rlrun::testing::skip_model_tests;
using rlrun::testing::smollm2_dir;
using rlrun::testing::TempDir;

TEST(ConvertCli, RefusesBadArgumentsAndFiles) {
  TempDir dir;
  const std::string out = dir.path() + "/out";
  CliRun r = run_rlrun(dir, "convert only-one-argument");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("expected IN.gguf OUT_DIR"));
  r = run_rlrun(dir, str("convert '", dir.path(), "/missing.gguf' '", out, "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot open GGUF file " + dir.path() + "/missing.gguf"));
  const std::string bad = dir.path() + "/bad.gguf";
  std::ofstream(bad) << "not a gguf";
  r = run_rlrun(dir, str("convert '", bad, "' '", out, "'"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ": not a GGUF file"));
  EXPECT_FALSE(fs::exists(out));
}

// One reader, one verdict (issue 37) for `convert` too: a llama .gguf whose metadata asks for what
// rlrun does not compute (soft-capping, a RoPE scaling type it lacks, a key it has never seen) is
// refused at once, naming the file, the key and its value, and no folder is written.
TEST(ConvertCli, RefusesAGgufItCannotComputeNamingTheKey) {
  using engine::testing::GgufMetadata;
  struct Refused {
    std::function<void(GgufMetadata&)> add;
    std::string message;
  };
  const std::vector<Refused> cases = {
      {[](GgufMetadata& m) { m.f32("llama.attn_logit_softcapping", 50.0f); },
       "llama.attn_logit_softcapping = 50: logit soft-capping is not supported"},
      {[](GgufMetadata& m) { m.str("llama.rope.scaling.type", "longrope"); },
       "llama.rope.scaling.type = longrope: only linear and yarn scaling"},
      {[](GgufMetadata& m) { m.f32("llama.attention.temperature_scale", 0.1f); },
       "metadata `llama.attention.temperature_scale` is not one rlrun reads"},
  };
  TempDir dir;
  for (const Refused& c : cases) {
    GgufMetadata m;
    m.str("general.architecture", "llama").u32("llama.block_count", 1).u32("llama.context_length", 64);
    m.u32("llama.embedding_length", 8).u32("llama.feed_forward_length", 16).u32("llama.attention.head_count", 2);
    m.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).strings("tokenizer.ggml.tokens", {"a", "b", "c", "d"});
    c.add(m);
    const std::string gguf = dir.path() + "/refused.gguf", out = dir.path() + "/out";
    const std::vector<uint8_t> bytes = engine::testing::gguf_file(
        m, {{"token_embd.weight", {8, 4}, engine::GgmlType::kF32, engine::testing::f32_bytes(32)}});
    std::ofstream(gguf, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    const CliRun r = run_rlrun(dir, str("convert '", gguf, "' '", out, "'"));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(gguf + ": "));
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_FALSE(fs::exists(out)) << c.message;
  }
}

TEST(ConvertSmolLM2, TransformersLoadsTheFolderAndGeneratesRlrunsIds) {
  const fs::path gguf = smollm2_dir().parent_path() / "smollm2-135m-instruct.Q4_1.gguf";
  if (!fs::exists(gguf) || !fs::exists(smollm2_dir() / "model.safetensors")) {
    if (skip_model_tests()) GTEST_SKIP() << gguf << " missing (RLRUN_SKIP_MODEL_TESTS=1)";
    FAIL() << gguf << " or " << smollm2_dir() << " is missing: run scripts/setup.sh --test (or "
           << "scripts/fetch-test-models.sh), or set RLRUN_SKIP_MODEL_TESTS=1 to skip this test";
  }
  TempDir dir;
  const std::string out = dir.path() + "/smollm2-hf";
  const CliRun converted = run_rlrun(dir, str("convert '", gguf.string(), "' '", out, "'"));
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  std::printf("[convert] %s", converted.err.c_str());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  }
  Result<engine::HfCheckpoint> mine = engine::load_hf_checkpoint(out);
  Result<engine::HfCheckpoint> ref = engine::load_hf_checkpoint(smollm2_dir().string());
  ASSERT_TRUE(mine.ok() && ref.ok()) << mine.status().message() << ref.status().message();
  ASSERT_EQ(mine->tensors.size(), ref->tensors.size());
  for (size_t i = 0; i < ref->tensors.size(); ++i) {
    const auto &a = mine->tensors[i].data, &b = ref->tensors[i].data;
    ASSERT_EQ(a.size(), b.size());
    size_t differ = 0;
    for (size_t k = 0; k < a.size(); ++k) differ += std::bit_cast<uint32_t>(a[k]) != std::bit_cast<uint32_t>(b[k]);
    EXPECT_EQ(differ, 0u) << ref->tensors[i].name;
  }

  const std::string python = RLRUN_PYREF_PYTHON;
  ASSERT_TRUE(fs::exists(python)) << python << " is missing: run scripts/setup-python-ref.sh";
  const std::vector<std::string> texts = {"The capital of France is", "12345 + 678 = 13023, naïve café 東京",
                                          "<|im_start|>user\nHi<|im_end|>\n"};
  const std::string question = "What is the capital of France?";
  std::string text_args = " --chat '" + question + "'";
  for (const std::string& t : texts) text_args += " --text '" + t + "'";
  const CliRun tok = run_shell(dir, str("'", python, "' '", RLRUN_SOURCE_DIR, "/tests/reference/hf_tokenize.py' '", out,
                                        "'", text_args));
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  const json t = json::parse(tok.out);
  EXPECT_EQ(t["class"], "PreTrainedTokenizerFast");
  Result<engine::GgufFile> file = engine::GgufFile::open(gguf.string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(t["chat_template"], file->get_string("tokenizer.chat_template").value());
  EXPECT_EQ(t["bos"], "<|im_start|>");
  EXPECT_EQ(t["eos"], "<|im_end|>");
  EXPECT_EQ(t["pad"], "<|im_end|>");
  Result<engine::Tokenizer> rlrun_tok = engine::load_gguf_tokenizer(gguf.string());
  ASSERT_TRUE(rlrun_tok.ok()) << rlrun_tok.status().message();
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(t["ids"][i].get<std::vector<int32_t>>(), rlrun_tok->encode(texts[i])) << texts[i];
  }

  // `generate --chat` renders the question with the checkpoint's chat template as HF does, from the
  // .gguf and from the converted folder, and stops at the template's end of turn as HF's greedy
  // generate does on the same ids.
  const std::vector<int32_t> chat_ids = t["chat"][0]["ids"].get<std::vector<int32_t>>();
  ASSERT_TRUE(t["chat"][0]["text"].get<std::string>().ends_with("<|im_start|>assistant\n"))
      << "HF's rendering ends with the generation prompt: " << t["chat"][0]["text"];
  const CliRun hf = run_shell(dir, str("'", python, "' '", RLRUN_SOURCE_DIR, "/tests/reference/hf_generate.py' '", out,
                                       "' --max-new-tokens 24 --stop-ids 2 --prompt-ids ", ids_arg(chat_ids)));
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  const json h = json::parse(hf.out);
  for (const std::string& checkpoint : {gguf.string(), out}) {
    const CliRun gen = run_rlrun(dir, str("generate --threads 1 --checkpoint '", checkpoint,
                                          "' --temperature 0 --json --max-tokens 24 --chat --prompt '", question, "'"));
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
    const json g = json::parse(gen.out);
    std::printf("[convert] rlrun generate --chat from %s: %s (%s)\n", checkpoint.c_str(), g["text"].dump().c_str(),
                g["finish_reason"].get<std::string>().c_str());
    EXPECT_EQ(g["prompt_ids"].get<std::vector<int32_t>>(), chat_ids) << checkpoint;
    EXPECT_EQ(g["ids"], h["completions"][0]) << checkpoint;
    EXPECT_EQ(g["finish_reason"], "stop") << "the answer ends at <|im_end|>: " << checkpoint;
  }
}

}  // namespace
}  // namespace rlrun
